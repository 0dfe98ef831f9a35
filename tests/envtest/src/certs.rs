//! The control plane's credentials: a CA, the API server's serving certificate, the
//! service-account key pair and the bearer tokens of its two users, written as files.

use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

use crate::EnvtestError;

/// Who a client authenticates as; both are in the API server's token file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum User {
    /// `envtest-admin`, in the group `system:masters`: allowed everything.
    Admin,
    /// `envtest-user`, in no group but `system:authenticated`: RBAC refuses it anything the
    /// bootstrap roles do not grant every authenticated user (such as discovery), with `403`
    /// `Forbidden`.
    Unprivileged,
}

impl User {
    /// The user name the API server sees.
    pub fn name(self) -> &'static str {
        match self {
            User::Admin => "envtest-admin",
            User::Unprivileged => "envtest-user",
        }
    }

    fn groups(self) -> &'static str {
        match self {
            User::Admin => "system:masters",
            User::Unprivileged => "",
        }
    }
}

/// The files under the control plane's directory, and what clients need in memory.
#[derive(Debug)]
pub(crate) struct Credentials {
    /// The CA that signed the serving certificate (PEM file, DER bytes for kube's `Config`).
    pub(crate) ca_file: PathBuf,
    pub(crate) ca_der: Vec<u8>,
    /// The serving certificate, for 127.0.0.1, localhost and kubernetes.default.svc.
    pub(crate) serving_cert_file: PathBuf,
    pub(crate) serving_key_file: PathBuf,
    /// The service-account signing key (ECDSA P-256, PKCS#8) and its public key (SPKI).
    pub(crate) service_account_key_file: PathBuf,
    pub(crate) service_account_public_file: PathBuf,
    /// `--token-auth-file`: one CSV line per [`User`].
    pub(crate) token_auth_file: PathBuf,
    /// Each user's bearer token, as kube's `token_file` reads it.
    admin_token_file: PathBuf,
    unprivileged_token_file: PathBuf,
    admin_token: String,
    unprivileged_token: String,
}

impl Credentials {
    /// Generates everything and writes it into `dir`.
    pub(crate) fn generate(dir: &Path) -> Result<Credentials, EnvtestError> {
        let failed = |what| move |source| EnvtestError::CertificateFailed { what, source };

        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(failed("CA"))?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "kubeplug envtest CA");
        let ca_key = KeyPair::generate().map_err(failed("CA key"))?;
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key).map_err(failed("CA"))?;

        let mut serving_params = CertificateParams::new(vec![
            "127.0.0.1".to_owned(),
            "localhost".to_owned(),
            "kubernetes.default.svc".to_owned(),
        ])
        .map_err(failed("serving certificate"))?;
        serving_params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        let serving_key = KeyPair::generate().map_err(failed("serving key"))?;
        let serving = serving_params
            .signed_by(&serving_key, &ca)
            .map_err(failed("serving certificate"))?;

        // kube-apiserver 1.32 takes RSA or ECDSA keys for service-account tokens (ES256 for
        // P-256); rcgen generates P-256 without an RSA backend.
        let service_account = KeyPair::generate().map_err(failed("service-account key"))?;

        let admin_token = random_token()?;
        let unprivileged_token = random_token()?;
        let mut token_csv = String::new();
        for (user, token) in [
            (User::Admin, &admin_token),
            (User::Unprivileged, &unprivileged_token),
        ] {
            // token,user,uid[,"group1,group2"]
            let _ = write!(token_csv, "{token},{name},{name}", name = user.name());
            if !user.groups().is_empty() {
                let _ = write!(token_csv, ",\"{}\"", user.groups());
            }
            token_csv.push('\n');
        }

        let credentials = Credentials {
            ca_file: write(dir, "ca.crt", &ca.pem())?,
            ca_der: ca.der().to_vec(),
            serving_cert_file: write(dir, "apiserver.crt", &serving.pem())?,
            serving_key_file: write(dir, "apiserver.key", &serving_key.serialize_pem())?,
            service_account_key_file: write(dir, "sa.key", &service_account.serialize_pem())?,
            service_account_public_file: write(dir, "sa.pub", &service_account.public_key_pem())?,
            token_auth_file: write(dir, "tokens.csv", &token_csv)?,
            admin_token_file: write(dir, "admin.token", &admin_token)?,
            unprivileged_token_file: write(dir, "user.token", &unprivileged_token)?,
            admin_token,
            unprivileged_token,
        };
        Ok(credentials)
    }

    /// The file holding `user`'s bearer token.
    pub(crate) fn token_file(&self, user: User) -> &Path {
        match user {
            User::Admin => &self.admin_token_file,
            User::Unprivileged => &self.unprivileged_token_file,
        }
    }

    /// The admin's bearer token, for the harness's own requests.
    pub(crate) fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// `user`'s bearer token, for its kubeconfig.
    pub(crate) fn token(&self, user: User) -> &str {
        match user {
            User::Admin => &self.admin_token,
            User::Unprivileged => &self.unprivileged_token,
        }
    }
}

/// Writes `contents` to `dir/name`, readable by its owner only (keys and tokens among them).
pub(crate) fn write(dir: &Path, name: &str, contents: &str) -> Result<PathBuf, EnvtestError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(name);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut file| file.write_all(contents.as_bytes()))
        .map_err(|source| EnvtestError::WriteFailed {
            path: path.clone(),
            source,
        })?;
    Ok(path)
}

/// 32 hex digits from the kernel's random source: the token file's bearer tokens.
fn random_token() -> Result<String, EnvtestError> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .map_err(EnvtestError::RandomFailed)?;
    Ok(bytes
        .iter()
        .fold(String::with_capacity(32), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_file_gives_the_admin_system_masters_and_the_user_no_group() {
        let dir = tempfile::tempdir().unwrap();
        let credentials = Credentials::generate(dir.path()).unwrap();
        let csv = std::fs::read_to_string(&credentials.token_auth_file).unwrap();
        let lines: Vec<&str> = csv.lines().collect();
        let admin = std::fs::read_to_string(credentials.token_file(User::Admin)).unwrap();
        let user = std::fs::read_to_string(credentials.token_file(User::Unprivileged)).unwrap();
        assert_eq!(
            lines,
            [
                format!("{admin},envtest-admin,envtest-admin,\"system:masters\""),
                format!("{user},envtest-user,envtest-user"),
            ]
        );
        assert_eq!(admin.len(), 32);
        assert_ne!(admin, user);
    }
}
