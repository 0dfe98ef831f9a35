//! Client configuration: where the cluster is and who we are, in kube's order.
//!
//! [`ConfigSource::Infer`] is kube's `Config::infer`: a kubeconfig from `KUBECONFIG` or
//! `~/.kube/config` first, then the in-cluster service account. An explicit kubeconfig path
//! and context (`--kubeconfig`, `--context`) override it. Every error names the file, the
//! context and the address it tried, and nothing here panics on bad input.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use http::Uri;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Where the configuration comes from.
#[derive(Debug, Clone, Default)]
pub enum ConfigSource {
    /// kube's order: `KUBECONFIG` / `~/.kube/config` (current context), else in-cluster.
    #[default]
    Infer,
    /// This kubeconfig file, with this context (or its current context).
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// The context; `None` for the file's `current-context`.
        context: Option<String>,
    },
    /// The in-cluster service account.
    InCluster(InCluster),
}

/// The in-cluster inputs: the service's address and the service account's files.
///
/// [`InCluster::from_env`] reads them where kube (and client-go) read them; tests construct
/// one with temporary files.
#[derive(Debug, Clone)]
pub struct InCluster {
    /// `KUBERNETES_SERVICE_HOST`.
    pub host: Option<String>,
    /// `KUBERNETES_SERVICE_PORT`.
    pub port: Option<String>,
    /// The bearer token file (re-read by kube when it changes).
    pub token_file: PathBuf,
    /// The cluster CA bundle (PEM).
    pub ca_file: PathBuf,
    /// The namespace file; `default` when absent.
    pub namespace_file: PathBuf,
}

/// Where Kubernetes mounts the service account.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

impl InCluster {
    /// The environment variables and the standard service account files.
    pub fn from_env() -> Self {
        Self::with_dir(
            std::env::var("KUBERNETES_SERVICE_HOST").ok(),
            std::env::var("KUBERNETES_SERVICE_PORT").ok(),
            Path::new(SERVICE_ACCOUNT_DIR),
        )
    }

    /// `host` and `port`, and the files `token`, `ca.crt` and `namespace` of `dir`.
    pub fn with_dir(host: Option<String>, port: Option<String>, dir: &Path) -> Self {
        Self {
            host,
            port,
            token_file: dir.join("token"),
            ca_file: dir.join("ca.crt"),
            namespace_file: dir.join("namespace"),
        }
    }

    fn load(&self) -> Result<Loaded, ConfigError> {
        let unavailable = |reason: String| ConfigError::InClusterUnavailable { reason };
        let (Some(host), Some(port)) = (
            self.host.as_deref().filter(|h| !h.is_empty()),
            self.port.as_deref().filter(|p| !p.is_empty()),
        ) else {
            return Err(unavailable(
                "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not both set".to_owned(),
            ));
        };
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        let address = format!("https://{host}:{port}");
        let uri: Uri = address
            .parse()
            .map_err(|e| unavailable(format!("bad address {address}: {e}")))?;
        let ca = std::fs::read(&self.ca_file)
            .map_err(|e| unavailable(format!("CA file {}: {e}", self.ca_file.display())))?;
        let ca_der = pem_certificates(&ca).map_err(|source| ConfigError::InClusterCaInvalid {
            path: self.ca_file.clone(),
            source,
        })?;
        std::fs::metadata(&self.token_file)
            .map_err(|e| unavailable(format!("token file {}: {e}", self.token_file.display())))?;
        let namespace = std::fs::read_to_string(&self.namespace_file)
            .map(|ns| ns.trim().to_owned())
            .ok()
            .filter(|ns| !ns.is_empty())
            .unwrap_or_else(|| "default".to_owned());
        let mut config = kube::Config::new(uri);
        config.default_namespace = namespace;
        config.root_cert = Some(ca_der);
        config.root_cert_file = Some(self.ca_file.clone());
        config.auth_info.token_file = Some(self.token_file.display().to_string());
        Ok(Loaded {
            config,
            origin: Origin {
                file: None,
                context: None,
                address,
            },
        })
    }
}

/// Why a CA bundle gives no certificates.
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    /// The bundle is not text.
    #[error(transparent)]
    NotText(#[from] std::str::Utf8Error),
    /// A `BEGIN CERTIFICATE` line without its `END CERTIFICATE`.
    #[error("unterminated certificate")]
    Unterminated,
    /// A certificate's body is not base64.
    #[error("bad base64 in certificate")]
    BadBase64,
    /// No `BEGIN CERTIFICATE` line.
    #[error("no certificate found")]
    NoCertificate,
}

/// The DER certificates of a PEM bundle.
fn pem_certificates(pem: &[u8]) -> Result<Vec<Vec<u8>>, PemError> {
    let text = std::str::from_utf8(pem)?;
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("-----BEGIN CERTIFICATE-----") {
        let body = &rest[start + "-----BEGIN CERTIFICATE-----".len()..];
        let end = body
            .find("-----END CERTIFICATE-----")
            .ok_or(PemError::Unterminated)?;
        let b64: String = body[..end].chars().filter(|c| !c.is_whitespace()).collect();
        out.push(base64_decode(&b64).ok_or(PemError::BadBase64)?);
        rest = &body[end..];
    }
    if out.is_empty() {
        return Err(PemError::NoCertificate);
    }
    Ok(out)
}

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes = text.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= value(c)? << (18 - 6 * i);
        }
        let n = match chunk.len() {
            4 => 3,
            3 => 2,
            2 => 1,
            _ => return None,
        };
        out.extend_from_slice(&acc.to_be_bytes()[1..1 + n]);
    }
    Some(out)
}

/// Which configuration a client uses: named in every error about the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The kubeconfig file; `None` for the in-cluster service account.
    pub file: Option<PathBuf>,
    /// The kubeconfig context.
    pub context: Option<String>,
    /// The API server's address.
    pub address: String,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.file {
            Some(file) => write!(f, "kubeconfig {}", file.display())?,
            None => write!(f, "in-cluster service account")?,
        }
        if let Some(context) = &self.context {
            write!(f, ", context {context:?}")?;
        }
        write!(f, ", server {}", self.address)
    }
}

/// Why no client could be configured, or the cluster could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The kubeconfig file could not be read.
    #[error("cannot read kubeconfig {}: {source}", path.display())]
    KubeconfigUnreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The kubeconfig file was read but does not give a usable configuration.
    #[error("kubeconfig {} (context {}): {reason}", path.display(), context.as_deref().unwrap_or("<current-context>"))]
    KubeconfigInvalid {
        /// The file.
        path: PathBuf,
        /// The context asked for or found.
        context: Option<String>,
        /// What kube said.
        reason: String,
    },
    /// The in-cluster configuration is not available.
    #[error("no in-cluster configuration: {reason}")]
    InClusterUnavailable {
        /// Why.
        reason: String,
    },
    /// The in-cluster CA file gives no certificates.
    #[error(
        "no in-cluster configuration: CA file {} is not a PEM certificate bundle",
        path.display()
    )]
    InClusterCaInvalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: PemError,
    },
    /// Neither a kubeconfig nor the in-cluster configuration was found.
    #[error(
        "no Kubernetes configuration: kubeconfig ({kubeconfig}); in-cluster ({in_cluster}). \
         Pass --kubeconfig or run in a pod"
    )]
    NothingFound {
        /// What the kubeconfig attempt said.
        kubeconfig: String,
        /// What the in-cluster attempt said.
        in_cluster: String,
    },
    /// kube could not build a client from the configuration (bad TLS material, ...).
    #[error("cannot build a client from {origin}: {reason}")]
    ClientBuildFailed {
        /// The configuration.
        origin: Origin,
        /// What kube said.
        reason: String,
    },
    /// The API server did not answer as expected.
    #[error("API server unreachable ({origin}): {reason}")]
    Unreachable {
        /// The configuration.
        origin: Origin,
        /// What went wrong.
        reason: String,
    },
}

/// A loaded configuration and where it came from.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// kube's configuration.
    pub config: kube::Config,
    /// Where it came from.
    pub origin: Origin,
}

impl ConfigSource {
    /// Loads the configuration. Reads files; does not contact the server.
    pub async fn load(&self) -> Result<Loaded, ConfigError> {
        match self {
            Self::Kubeconfig { path, context } => load_kubeconfig(path, context.clone()).await,
            Self::InCluster(in_cluster) => in_cluster.load(),
            Self::Infer => {
                let path = default_kubeconfig_path();
                let kubeconfig = match &path {
                    Some(path) => load_kubeconfig(path, None).await,
                    None => Err(ConfigError::InClusterUnavailable {
                        reason: "KUBECONFIG is unset and there is no home directory".to_owned(),
                    }),
                };
                match kubeconfig {
                    Ok(loaded) => Ok(loaded),
                    Err(kubeconfig) => InCluster::from_env().load().map_err(|in_cluster| {
                        ConfigError::NothingFound {
                            kubeconfig: error_chain(&kubeconfig),
                            in_cluster: error_chain(&in_cluster),
                        }
                    }),
                }
            }
        }
    }
}

/// `KUBECONFIG` (its first file) or `~/.kube/config`; `None` without either a `KUBECONFIG`
/// or a home directory.
pub fn default_kubeconfig_path() -> Option<PathBuf> {
    if let Some(paths) = std::env::var_os("KUBECONFIG") {
        return std::env::split_paths(&paths).find(|p| !p.as_os_str().is_empty());
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".kube").join("config"))
}

async fn load_kubeconfig(path: &Path, context: Option<String>) -> Result<Loaded, ConfigError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| ConfigError::KubeconfigUnreadable {
            path: path.to_owned(),
            source,
        })?;
    let invalid = |context: Option<String>, reason: String| ConfigError::KubeconfigInvalid {
        path: path.to_owned(),
        context,
        reason,
    };
    let kubeconfig =
        Kubeconfig::from_yaml(&text).map_err(|e| invalid(context.clone(), e.to_string()))?;
    let context = context.or_else(|| kubeconfig.current_context.clone());
    let options = KubeConfigOptions {
        context: context.clone(),
        cluster: None,
        user: None,
    };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| invalid(context.clone(), e.to_string()))?;
    let address = config.cluster_url.to_string();
    Ok(Loaded {
        config,
        origin: Origin {
            file: Some(path.to_owned()),
            context,
            address: address.trim_end_matches('/').to_owned(),
        },
    })
}

/// A kube client and the configuration it came from. Cheap to clone.
#[derive(Clone)]
pub struct KubeClient {
    client: kube::Client,
    origin: Arc<Origin>,
}

impl fmt::Debug for KubeClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeClient")
            .field("origin", &self.origin)
            .finish()
    }
}

impl KubeClient {
    /// A client for `loaded`. kube's own retry layer is switched off: the Reflector backs off
    /// and honours `Retry-After` itself. Requests without a `User-Agent` get [`USER_AGENT`],
    /// so that audit logs tell kubeplug's requests apart. Must be called within a tokio
    /// runtime.
    pub fn new(loaded: Loaded) -> Result<Self, ConfigError> {
        let Loaded { mut config, origin } = loaded;
        config.default_retry = false;
        let user_agent = tower_http::set_header::SetRequestHeaderLayer::if_not_present(
            http::header::USER_AGENT,
            http::HeaderValue::from_static(USER_AGENT),
        );
        let client = kube::client::ClientBuilder::try_from(config)
            .map_err(|e| ConfigError::ClientBuildFailed {
                origin: origin.clone(),
                reason: e.to_string(),
            })?
            .with_layer(&user_agent)
            .build();
        Ok(Self {
            client,
            origin: Arc::new(origin),
        })
    }

    /// Loads `source` and builds a client.
    pub async fn from_source(source: &ConfigSource) -> Result<Self, ConfigError> {
        Self::new(source.load().await?)
    }

    /// The underlying kube client.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// Where the configuration came from.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// Asks the server for `/version`: the readiness check a host runs before it starts.
    pub async fn check(&self) -> Result<(), ConfigError> {
        let request = http::Request::get("/version")
            .body(Vec::new())
            .expect("a static request is valid");
        self.client
            .request_text(request)
            .await
            .map(drop)
            .map_err(|e| ConfigError::Unreachable {
                origin: (*self.origin).clone(),
                reason: error_chain(&e),
            })
    }
}

/// The `User-Agent` of kubeplug's requests: `kubeplug/<version>`.
pub const USER_AGENT: &str = concat!("kubeplug/", env!("CARGO_PKG_VERSION"));

/// The `User-Agent` of requests made for `plugin`: `kubeplug/<version> (plugin <name>)`, or
/// [`USER_AGENT`] for a name that cannot be a header value.
pub fn plugin_user_agent(plugin: &str) -> http::HeaderValue {
    http::HeaderValue::from_str(&format!("{USER_AGENT} (plugin {plugin})"))
        .unwrap_or(http::HeaderValue::from_static(USER_AGENT))
}

/// An error and its sources, joined by `: `.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_known_values() {
        assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_decode("aGVsbG8h").unwrap(), b"hello!");
        assert_eq!(base64_decode("aGk=").unwrap(), b"hi");
        assert!(base64_decode("a$==").is_none());
    }

    #[test]
    fn origin_names_file_context_and_address() {
        let origin = Origin {
            file: Some("/tmp/kc".into()),
            context: Some("ctx".into()),
            address: "https://127.0.0.1:1".into(),
        };
        assert_eq!(
            origin.to_string(),
            "kubeconfig /tmp/kc, context \"ctx\", server https://127.0.0.1:1"
        );
    }

    #[tokio::test]
    async fn a_missing_kubeconfig_names_the_file() {
        let source = ConfigSource::Kubeconfig {
            path: "/nonexistent/kubeconfig".into(),
            context: Some("prod".into()),
        };
        let error = source.load().await.unwrap_err();
        assert!(
            error.to_string().contains("/nonexistent/kubeconfig"),
            "{error}"
        );
    }

    #[test]
    fn an_unusable_ca_file_is_named_with_its_problem() {
        let dir = tempfile::tempdir().unwrap();
        let in_cluster =
            InCluster::with_dir(Some("10.0.0.1".into()), Some("443".into()), dir.path());
        for (content, problem) in [
            (&b"\xff"[..], "invalid utf-8"),
            (b"", "no certificate found"),
            (
                b"-----BEGIN CERTIFICATE-----\nAAAA\n",
                "unterminated certificate",
            ),
        ] {
            std::fs::write(&in_cluster.ca_file, content).unwrap();
            let error = in_cluster.load().unwrap_err();
            assert!(
                matches!(&error, ConfigError::InClusterCaInvalid { path, .. }
                    if *path == in_cluster.ca_file),
                "{error:?}"
            );
            let chain = error_chain(&error);
            assert!(chain.contains(problem), "{chain}");
        }
    }

    #[test]
    fn in_cluster_without_env_says_so() {
        let error = InCluster::with_dir(None, None, Path::new("/nonexistent"))
            .load()
            .unwrap_err();
        assert!(
            error.to_string().contains("KUBERNETES_SERVICE_HOST"),
            "{error}"
        );
    }
}
