//! A real kube-apiserver and etcd on loopback for tests, as controller-runtime's envtest runs
//! them: no kubelet, scheduler or controller manager, so objects stay as written.
//!
//! [`Envtest`] starts etcd and kube-apiserver on free ports of 127.0.0.1 with a fresh temporary
//! directory (CA, serving certificate, service-account key pair, token file, kubeconfig, logs,
//! etcd's data), waits until the API server is ready, and hands out `kube::Client`s for an
//! admin and an unprivileged [`User`]. It can restart the API server on the same etcd, compact
//! etcd, and put a [`Proxy`] that stalls or cuts connections in front of the API server.
//!
//! # Assets
//! `KUBEBUILDER_ASSETS` names a directory holding `kube-apiserver` and `etcd`; with
//! `KUBEPLUG_ENVTEST_ETCD` another etcd binary is used (Debian's `etcd-server` puts etcd 3.4
//! at `/usr/bin/etcd`). Without them [`Envtest::shared`] and [`Envtest::start_or_skip`] return
//! `None`, the first time in a process after one line on stderr saying what is skipped and how
//! to provide the binaries; with `CI` set they panic. See [`Assets`].
//!
//! # Lifetime
//! Every server runs under a wrapper shell whose stdin is a pipe the harness holds: however the
//! test process ends (drop, panic, `exit`, SIGKILL) the pipe closes and the wrapper stops the
//! server (SIGTERM, SIGKILL after 5 s), and etcd's wrapper then removes the directory. So the
//! [`shared`](Envtest::shared) instance, a `static` that is never dropped, ends with its
//! process too.
//!
//! # Command lines
//! etcd: `--name=envtest --data-dir=DIR/etcd --listen-client-urls=http://127.0.0.1:C
//! --advertise-client-urls=http://127.0.0.1:C --listen-peer-urls=http://127.0.0.1:P
//! --initial-advertise-peer-urls=http://127.0.0.1:P --initial-cluster=envtest=http://127.0.0.1:P
//! --unsafe-no-fsync`; envtest's etcd 3.5.16 and Debian's 3.4.23 take all of these.
//!
//! kube-apiserver: `--etcd-servers=http://127.0.0.1:C --bind-address=127.0.0.1
//! --secure-port=A --advertise-address=127.0.0.1 --tls-cert-file --tls-private-key-file
//! --client-ca-file --service-account-key-file --service-account-signing-key-file` (an ECDSA
//! P-256 key) `--service-account-issuer=https://kubernetes.default.svc --token-auth-file
//! --authorization-mode=RBAC --service-cluster-ip-range=10.0.0.0/24
//! --endpoint-reconciler-type=none`, and `--watch-cache=false` when [`Options::watch_cache`]
//! turns the watch cache off.
//!
//! # Example
//! One control plane per test binary, a namespace per test:
//! ```no_run
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::api::{Api, PostParams};
//! use kubeplug_envtest::{Envtest, User};
//!
//! #[tokio::test]
//! async fn creates_a_config_map() -> anyhow::Result<()> {
//!     let Some(env) = Envtest::shared() else { return Ok(()) }; // no assets: skipped
//!     let namespace = env.namespace("creates")?;
//!     let api: Api<ConfigMap> = Api::namespaced(env.client(User::Admin)?, &namespace);
//!     let mut map = ConfigMap::default();
//!     map.metadata.name = Some("settings".into());
//!     api.create(&PostParams::default(), &map).await?;
//!     Ok(())
//! }
//! ```

mod apiserver;
mod assets;
mod audit;
mod certs;
mod error;
mod etcd;
mod http;
mod process;
mod proxy;

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use apiserver::{ApiServer, Flags};
use audit::Audit;
use certs::Credentials;
use etcd::Etcd;

pub use assets::{ASSETS_VAR, Assets, CI_VAR, ETCD_VAR};
pub use audit::AuditEvent;
pub use certs::User;
pub use error::EnvtestError;
pub use etcd::EtcdStatus;
pub use proxy::{AfterCut, MAX_CONNECTIONS, Proxy};

/// How long each server has to become ready after it is started.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How many times a server is started on fresh ports when the ones picked were taken between
/// the harness's check and the server's bind.
const PORT_ATTEMPTS: usize = 3;

/// How a control plane differs from the default one.
#[derive(Clone, Debug)]
pub struct Options {
    watch_cache: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { watch_cache: true }
    }
}

impl Options {
    /// With `false`, kube-apiserver runs with `--watch-cache=false`: every watch and list is
    /// served by etcd. Then a watch from a resourceVersion that a compaction removed ends with
    /// a `410 Expired` ERROR event; with the cache (the default, as in real clusters) such a
    /// watch is served from memory while the version is in the cache's window, compaction or
    /// not. Paginated lists' continue tokens expire on compaction either way.
    pub fn watch_cache(mut self, enabled: bool) -> Self {
        self.watch_cache = enabled;
        self
    }
}

/// A running etcd and kube-apiserver.
///
/// Contract: both listen on 127.0.0.1 only; the API server is ready (`/readyz` passed, the
/// `default` namespace exists) whenever a constructor or
/// [`restart_apiserver`](Self::restart_apiserver) returns. Dropping it stops the API server,
/// then etcd, and removes the directory; if the process dies without dropping it, the wrapper
/// shells do the same (see the crate docs). Objects persist in etcd until then, across API
/// server restarts.
#[derive(Debug)]
pub struct Envtest {
    // Fields drop in order: the API server before the etcd it uses, the directory last.
    apiserver: ApiServer,
    etcd: Etcd,
    credentials: Credentials,
    audit: Audit,
    kubeconfig: PathBuf,
    unprivileged_kubeconfig: PathBuf,
    /// The next suffix [`namespace`](Self::namespace) gives out.
    namespaces: AtomicU64,
    dir: tempfile::TempDir,
}

impl Envtest {
    /// The process's shared control plane, started by the first caller with default
    /// [`Options`]; later callers wait for it. `None` when the assets are missing, see [`Assets::discover_or_skip`].
    ///
    /// Tests that restart the API server, compact etcd or need other options start their own
    /// with [`start_or_skip`](Self::start_or_skip). The instance is never dropped; its servers
    /// end when the process does.
    ///
    /// # Panics
    /// When the assets are missing and `CI` is set, or when the control plane fails to start
    /// (every caller then panics with the same message).
    pub fn shared() -> Option<&'static Envtest> {
        static SHARED: OnceLock<Result<Envtest, String>> = OnceLock::new();
        let assets = Assets::discover_or_skip()?;
        let shared = SHARED.get_or_init(|| {
            Envtest::start_with(&assets, &Options::default()).map_err(|error| error.to_string())
        });
        match shared {
            Ok(env) => Some(env),
            Err(error) => panic!("the shared envtest control plane failed to start: {error}"),
        }
    }

    /// A control plane of the caller's own, or `None` when the assets are missing, see [`Assets::discover_or_skip`].
    ///
    /// # Panics
    /// When the assets are missing and `CI` is set, or when the control plane fails to start.
    pub fn start_or_skip(options: &Options) -> Option<Envtest> {
        let assets = Assets::discover_or_skip()?;
        match Envtest::start_with(&assets, options) {
            Ok(env) => Some(env),
            Err(error) => panic!("the envtest control plane failed to start: {error}"),
        }
    }

    /// Starts a control plane with the binaries [`Assets::discover`] finds.
    pub fn start(options: &Options) -> Result<Envtest, EnvtestError> {
        Envtest::start_with(&Assets::discover()?, options)
    }

    /// Starts a control plane with the given binaries: etcd, then kube-apiserver; each must be
    /// ready within [`READY_TIMEOUT`].
    pub fn start_with(assets: &Assets, options: &Options) -> Result<Envtest, EnvtestError> {
        let dir = tempfile::Builder::new()
            .prefix("kubeplug-envtest-")
            .tempdir()
            .map_err(EnvtestError::TempDirFailed)?;
        let credentials = Credentials::generate(dir.path())?;
        let audit = Audit::write(dir.path())?;
        let etcd = on_free_ports(|[client_port, peer_port]| {
            let data_dir = dir.path().join("etcd");
            // A failed attempt may have left its data behind; etcd must start from nothing.
            let _ = std::fs::remove_dir_all(&data_dir);
            Etcd::start(
                &assets.etcd,
                &data_dir,
                client_port,
                peer_port,
                dir.path().join("etcd.log"),
                dir.path(),
                READY_TIMEOUT,
            )
        })?;
        let flags = Flags {
            watch_cache: options.watch_cache,
            audit: audit.clone(),
        };
        let apiserver = on_free_ports(|[port]| {
            ApiServer::start(
                &assets.kube_apiserver,
                port,
                &etcd.url(),
                &credentials,
                &flags,
                dir.path().join("kube-apiserver.log"),
                READY_TIMEOUT,
            )
        })?;
        let kubeconfig = certs::write(
            dir.path(),
            "kubeconfig",
            &kubeconfig_yaml(apiserver.port(), &credentials, User::Admin),
        )?;
        let unprivileged_kubeconfig = certs::write(
            dir.path(),
            "kubeconfig-unprivileged",
            &kubeconfig_yaml(apiserver.port(), &credentials, User::Unprivileged),
        )?;
        Ok(Envtest {
            apiserver,
            etcd,
            credentials,
            audit,
            kubeconfig,
            unprivileged_kubeconfig,
            namespaces: AtomicU64::new(0),
            dir,
        })
    }

    /// A kube configuration for `user`, straight to the API server. Building a
    /// [`kube::Client`] from it needs a Tokio runtime, and the client must not outlive it.
    pub fn kube_config(&self, user: User) -> kube::Config {
        self.kube_config_to(user, self.apiserver_addr())
    }

    /// A kube configuration for `user` through `proxy` (one of [`proxy`](Self::proxy)'s).
    pub fn kube_config_via(&self, user: User, proxy: &Proxy) -> kube::Config {
        self.kube_config_to(user, proxy.addr())
    }

    /// A client for `user`, straight to the API server. Call it inside the Tokio runtime that
    /// will use the client (each `#[tokio::test]` has its own).
    pub fn client(&self, user: User) -> Result<kube::Client, EnvtestError> {
        client_from(user, self.kube_config(user))
    }

    /// A client for `user` through `proxy`; see [`client`](Self::client).
    pub fn client_via(&self, user: User, proxy: &Proxy) -> Result<kube::Client, EnvtestError> {
        client_from(user, self.kube_config_via(user, proxy))
    }

    /// A new [`Proxy`] in front of the API server.
    pub fn proxy(&self) -> Result<Proxy, EnvtestError> {
        Proxy::start(self.apiserver_addr())
    }

    /// Creates a namespace named `{prefix}-{n}`, `n` counting up per control plane, so tests
    /// sharing one control plane keep apart; returns its name. Blocks for one request.
    pub fn namespace(&self, prefix: &str) -> Result<String, EnvtestError> {
        let name = format!(
            "{prefix}-{}",
            self.namespaces.fetch_add(1, Ordering::Relaxed)
        );
        let body = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": { "name": name },
        });
        let failed = |cause: String| EnvtestError::NamespaceCreateFailed {
            name: name.clone(),
            port: self.apiserver.port(),
            cause,
        };
        let response = self
            .apiserver
            .https()
            .post("/api/v1/namespaces", body.to_string().as_bytes())
            .map_err(failed)?;
        if response.status != 201 {
            return Err(failed(format!("{} {}", response.status, response.text())));
        }
        Ok(name)
    }

    /// Every request the API server has answered so far, from its audit log (at the
    /// `Metadata` level: who, what, from which client; no bodies), oldest first; a watch
    /// appears when it starts and again when it ends.
    pub fn audit_events(&self) -> Result<Vec<AuditEvent>, EnvtestError> {
        self.audit.events()
    }

    /// Stops kube-apiserver and starts it again with the same ports, certificates and etcd;
    /// returns once it is ready. Clients made before keep working: they reconnect.
    pub fn restart_apiserver(&mut self) -> Result<(), EnvtestError> {
        self.apiserver.restart(READY_TIMEOUT)
    }

    /// etcd's current revision and version.
    pub fn etcd_status(&self) -> Result<EtcdStatus, EnvtestError> {
        self.etcd.status()
    }

    /// Compacts etcd at its current revision, which it returns: every older resourceVersion is
    /// gone from etcd (see [`Options::watch_cache`] for what a client then sees).
    pub fn compact(&self) -> Result<i64, EnvtestError> {
        let revision = self.etcd.status()?.revision;
        self.etcd.compact(revision)?;
        Ok(revision)
    }

    /// The API server's address (`https://` with the control plane's CA).
    pub fn apiserver_addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.apiserver.port()))
    }

    /// etcd's client URL, `http://127.0.0.1:PORT`.
    pub fn etcd_url(&self) -> String {
        self.etcd.url()
    }

    /// A kubeconfig file for the admin (context `envtest`, namespace `default`), for tools such
    /// as kubectl or code that reads `KUBECONFIG`.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// A kubeconfig file like [`kubeconfig`](Self::kubeconfig)'s, for `user`.
    pub fn kubeconfig_of(&self, user: User) -> &Path {
        match user {
            User::Admin => &self.kubeconfig,
            User::Unprivileged => &self.unprivileged_kubeconfig,
        }
    }

    /// `user`'s bearer token, for clients other than kube's (`Authorization: Bearer`).
    pub fn token(&self, user: User) -> &str {
        self.credentials.token(user)
    }

    /// The directory holding the certificates, tokens, kubeconfig, `etcd.log`,
    /// `kube-apiserver.log` and etcd's data; removed when the control plane stops.
    pub fn work_dir(&self) -> &Path {
        self.dir.path()
    }

    /// etcd's pid.
    pub fn etcd_pid(&self) -> u32 {
        self.etcd.pid()
    }

    /// kube-apiserver's pid; a restart changes it.
    pub fn apiserver_pid(&self) -> u32 {
        self.apiserver.pid()
    }

    fn kube_config_to(&self, user: User, addr: SocketAddr) -> kube::Config {
        let url = format!("https://{addr}")
            .parse()
            .expect("a socket address is a valid URI authority");
        let mut config = kube::Config::new(url);
        config.root_cert = Some(vec![self.credentials.ca_der.clone()]);
        config.auth_info.token_file = Some(self.credentials.token_file(user).display().to_string());
        config
    }
}

fn client_from(user: User, config: kube::Config) -> Result<kube::Client, EnvtestError> {
    kube::Client::try_from(config).map_err(|source| EnvtestError::ClientFailed {
        user: user.name(),
        source,
    })
}

/// Runs `start` on `N` free ports, again on fresh ones when the server found a port taken.
fn on_free_ports<const N: usize, T>(
    mut start: impl FnMut([u16; N]) -> Result<T, EnvtestError>,
) -> Result<T, EnvtestError> {
    let mut attempt = 1;
    loop {
        // All N listeners are held at once, so the ports differ; they close before the server
        // binds them, so another process may take one in between: then the server exits.
        let listeners = (0..N)
            .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(EnvtestError::PortReservationFailed)?;
        let mut ports = [0; N];
        for (port, listener) in ports.iter_mut().zip(&listeners) {
            *port = listener
                .local_addr()
                .map_err(EnvtestError::PortReservationFailed)?
                .port();
        }
        drop(listeners);
        match start(ports) {
            Err(EnvtestError::ExitedEarly { log_tail, .. })
                if attempt < PORT_ATTEMPTS && log_tail.contains("address already in use") =>
            {
                attempt += 1;
            }
            result => return result,
        }
    }
}

/// `user`'s kubeconfig. Paths and the token are written as JSON strings, which YAML reads.
fn kubeconfig_yaml(port: u16, credentials: &Credentials, user: User) -> String {
    let quote = |text: &str| serde_json::Value::from(text).to_string();
    let ca = quote(&credentials.ca_file.display().to_string());
    let token = quote(credentials.token(user));
    let user = user.name();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: envtest\n  cluster:\n    \
         server: https://127.0.0.1:{port}\n    certificate-authority: {ca}\ncontexts:\n\
         - name: envtest\n  context:\n    cluster: envtest\n    user: {user}\n    \
         namespace: default\ncurrent-context: envtest\nusers:\n- name: {user}\n  user:\n    \
         token: {token}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn exited(log_tail: &str) -> EnvtestError {
        EnvtestError::ExitedEarly {
            binary: "etcd",
            status: std::process::ExitStatus::from_raw(1 << 8),
            log: PathBuf::from("etcd.log"),
            log_tail: log_tail.to_owned(),
        }
    }

    #[test]
    fn a_port_taken_meanwhile_is_retried_on_fresh_ports_a_bounded_number_of_times() {
        let mut tried = Vec::new();
        let result = on_free_ports(|[a, b]| {
            assert_ne!(a, b);
            tried.push([a, b]);
            match tried.len() {
                1 => Err(exited(
                    "listen tcp 127.0.0.1:2380: bind: address already in use",
                )),
                _ => Ok(tried.len()),
            }
        });
        assert_eq!(result.unwrap(), 2);

        let mut attempts = 0;
        let result: Result<(), _> = on_free_ports(|[_]| {
            attempts += 1;
            Err(exited("bind: address already in use"))
        });
        assert!(matches!(result, Err(EnvtestError::ExitedEarly { .. })));
        assert_eq!(attempts, PORT_ATTEMPTS);
    }

    #[test]
    fn any_other_failure_is_not_retried() {
        let mut attempts = 0;
        let result: Result<(), _> = on_free_ports(|[_]| {
            attempts += 1;
            Err(exited("panic: invalid flag"))
        });
        assert!(result.is_err());
        assert_eq!(attempts, 1);
    }
}
