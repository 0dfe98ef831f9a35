//! A fake kube-apiserver for tests: [`kubeplug_apiserver`]'s HTTP API (the wire format of the
//! captured responses in `shared/fixtures/kube-apiserver/`, over the [`MemoryServer`]:
//! versions, history, `continue` tokens, bookmarks, streaming lists, selector transitions) on
//! 127.0.0.1, optionally over HTTPS with a CA made for it, with the built-in resources of
//! [`builtin_resources`] served from the start.
//!
//! Faults are scripted per test with [`FakeApiServer::inject`]; see [`HttpFault`].

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kubeplug_apiserver::{ApiOptions, ApiServer, ApiServerError, CertificateAuthority, reason_for};
use kubeplug_informer::resource::Resource;
use kubeplug_informer::source::Status;
use kubeplug_memory::{Call, Fault, Garbage, MemoryServer, ServerConfig};
use tokio::task::JoinHandle;

pub use kubeplug_apiserver::RequestRecord;
pub use kubeplug_memory::Call as FaultCall;

/// Why the fake server could not start.
#[derive(Debug, thiserror::Error)]
pub enum FakeServerError {
    /// Binding 127.0.0.1 failed.
    #[error(transparent)]
    Bind(#[from] ApiServerError),
    /// The test certificate could not be made.
    #[error("cannot make the test certificate: {0}")]
    Certificate(String),
}

/// How the fake server behaves.
#[derive(Debug, Clone)]
pub struct FakeOptions {
    /// Serve streaming lists (`sendInitialEvents`, v1.27+); when `false` they are refused with
    /// `422 Invalid` as v1.23 does. Default `true`.
    pub streaming_list: bool,
    /// How many changes the server keeps for watches and `continue` tokens. Default 10,000.
    pub history: usize,
    /// Serve HTTPS with a certificate for `127.0.0.1`, `localhost` and
    /// `kubernetes.default.svc` signed by a CA made for this server ([`FakeApiServer::ca_pem`]).
    pub tls: bool,
    /// When set, every request must carry `Authorization: Bearer <token>`, else `401`.
    pub bearer_token: Option<String>,
    /// Send a BOOKMARK to every watch that asked for them this often. Default `None`.
    pub bookmark_every: Option<Duration>,
}

impl Default for FakeOptions {
    fn default() -> Self {
        Self {
            streaming_list: true,
            history: 10_000,
            tls: false,
            bearer_token: None,
            bookmark_every: None,
        }
    }
}

/// A failure to inject with [`FakeApiServer::inject`]. Faults that say "now" act at once;
/// the others wait for the requests they name.
#[derive(Debug, Clone)]
pub enum HttpFault {
    /// Now: every open watch connection is aborted mid-stream (no closing chunk), as when a
    /// load balancer drops it.
    DropWatches,
    /// The next watch sends this many events, then the first half of the next line, then the
    /// connection is aborted.
    CutNextWatchLine {
        /// Whole events sent first.
        after: usize,
    },
    /// The next `times` list or watch requests are answered `code` with a `Status` body and,
    /// when given, `Retry-After: <seconds>`.
    Fail {
        /// Lists or watches.
        call: Call,
        /// How many requests.
        times: usize,
        /// E.g. 500, 503 or 429.
        code: u16,
        /// `Retry-After`, in seconds.
        retry_after: Option<u64>,
    },
    /// The next `times` list or watch requests are answered `code` with this body as it is
    /// (non-JSON, a `Status` of an unknown shape, an object of the wrong kind, ...). Raw
    /// answers injected one after another are given in that order.
    RawAnswer {
        /// Lists or watches.
        call: Call,
        /// How many requests.
        times: usize,
        /// The HTTP status code.
        code: u16,
        /// The body.
        body: String,
    },
    /// The next list or watch request waits this long before it is answered.
    Stall {
        /// Which call.
        call: Call,
        /// How long.
        delay: Duration,
    },
    /// Now: the history is dropped, as etcd compaction does: older watches and `continue`
    /// tokens get `410`.
    Compact,
    /// Now: the server restarts: every watch connection is aborted; objects, history and
    /// resourceVersions survive (later versions keep increasing).
    Restart,
    /// The next watch starts with a malformed ADDED event (see [`Garbage`]).
    Garbage(Garbage),
}

/// The resources served from the start: `v1` ConfigMap, Pod, Namespace, Node and Secret,
/// `events.k8s.io/v1` Event and `coordination.k8s.io/v1` Lease.
pub fn builtin_resources() -> Vec<Resource> {
    vec![
        Resource::new("", "v1", "ConfigMap", "configmaps", true),
        Resource::new("", "v1", "Pod", "pods", true),
        Resource::new("", "v1", "Secret", "secrets", true),
        Resource::new("", "v1", "Namespace", "namespaces", false),
        Resource::new("", "v1", "Node", "nodes", false),
        Resource::new("events.k8s.io", "v1", "Event", "events", true),
        Resource::new("coordination.k8s.io", "v1", "Lease", "leases", true),
    ]
}

/// A running fake API server. Dropping it stops it, as a stopped server: no new connections,
/// and the open ones (watches included) are closed.
///
/// ```no_run
/// # async fn demo() {
/// use kubeplug_fake_apiserver::{FakeApiServer, FakeOptions};
/// let server = FakeApiServer::start(FakeOptions::default()).await.unwrap();
/// let dir = tempfile::tempdir().unwrap();
/// let kubeconfig = server.write_kubeconfig(dir.path()).unwrap();
/// // kube::Config from `kubeconfig` now talks to the server.
/// # let _ = kubeconfig; }
/// ```
pub struct FakeApiServer {
    server: ApiServer,
    bearer_token: Option<String>,
    ca_pem: Option<String>,
    bookmarks: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for FakeApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeApiServer")
            .field("address", &self.server.address())
            .finish_non_exhaustive()
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        if let Some(task) = &self.bookmarks {
            task.abort();
        }
    }
}

impl FakeApiServer {
    /// Starts a server on a free port of 127.0.0.1, on the current tokio runtime.
    ///
    /// Each watch gets events from the [`MemoryServer`] over a channel bounded at 100,000
    /// events: a watch that falls that far behind is ended (the client re-watches), so that
    /// writes never wait for a slow client.
    pub async fn start(options: FakeOptions) -> Result<Self, FakeServerError> {
        let memory = MemoryServer::with_config(ServerConfig {
            history: options.history,
            watch_buffer: 100_000,
            streaming_list: options.streaming_list,
        });
        let (tls, ca_pem) = if options.tls {
            let (acceptor, ca) = tls_acceptor()?;
            (Some(acceptor), Some(ca))
        } else {
            (None, None)
        };
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let api = ApiOptions {
            bearer_token: options.bearer_token.clone(),
            resources: builtin_resources(),
            aliases: Default::default(),
        };
        let server = ApiServer::bind(address, memory, api, tls).await?;
        let bookmarks = options.bookmark_every.map(|every| {
            let memory = server.memory().clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                loop {
                    tick.tick().await;
                    memory.bookmark();
                }
            })
        });
        Ok(Self {
            server,
            bearer_token: options.bearer_token,
            ca_pem,
            bookmarks,
        })
    }

    /// The server's address, e.g. `http://127.0.0.1:40123`.
    pub fn address(&self) -> &str {
        self.server.address()
    }

    /// The socket address.
    pub fn socket_addr(&self) -> SocketAddr {
        self.server.socket_addr()
    }

    /// The PEM of the CA that signed the server's certificate (HTTPS only).
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// The storage behind the server: write objects here directly (faster than HTTP), read
    /// snapshots, count calls.
    pub fn memory(&self) -> &MemoryServer {
        self.server.memory()
    }

    /// Serves `resource` from now on (discovery included), like installing a CRD.
    pub fn serve(&self, resource: Resource) {
        self.server.serve(resource);
    }

    /// Serves `resource` without the `PartialObjectMetadata` form, as some aggregated APIs
    /// do: metadata-only clients that also accept JSON get whole objects.
    pub fn serve_whole_only(&self, resource: Resource) {
        self.server.serve_whole_only(resource);
    }

    /// Sends a BOOKMARK with the current resourceVersion to every watch that asked for them.
    pub fn bookmark(&self) {
        self.memory().bookmark();
    }

    /// The requests seen so far (the last 1,000).
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.server.faults().requests()
    }

    /// Injects a fault; see [`HttpFault`].
    pub fn inject(&self, fault: HttpFault) {
        let memory = self.memory();
        match fault {
            HttpFault::DropWatches => self.server.close_watches(),
            HttpFault::CutNextWatchLine { after } => {
                self.server.faults().cut_next_watch_line(after);
            }
            HttpFault::Fail {
                call,
                times,
                code,
                retry_after,
            } => memory.inject(Fault::Fail {
                call,
                times,
                status: Status::new(code, reason_for(code), format!("injected {code}")),
                retry_after: retry_after.map(Duration::from_secs),
            }),
            HttpFault::RawAnswer {
                call,
                times,
                code,
                body,
            } => self.server.faults().raw_answer(call, times, code, body),
            HttpFault::Stall { call, delay } => memory.inject(Fault::Stall { call, delay }),
            HttpFault::Compact => memory.inject(Fault::Compact),
            HttpFault::Restart => {
                memory.inject(Fault::Restart { keep_history: true });
                self.server.close_watches();
            }
            HttpFault::Garbage(garbage) => memory.inject(Fault::Garbage(garbage)),
        }
    }

    /// A kubeconfig (context `fake`, namespace `default`) pointing at this server, with the
    /// server's bearer token and CA when it has them.
    pub fn kubeconfig_yaml(&self, ca_file: Option<&Path>) -> String {
        kubeplug_apiserver::kubeconfig_yaml(
            "fake",
            self.address(),
            self.bearer_token.as_deref(),
            ca_file.map(CertificateAuthority::File),
        )
    }

    /// Writes [`kubeconfig_yaml`](Self::kubeconfig_yaml) (and the CA, for HTTPS) into `dir`;
    /// returns the kubeconfig's path.
    pub fn write_kubeconfig(&self, dir: &Path) -> io::Result<PathBuf> {
        let ca_file = match &self.ca_pem {
            Some(pem) => {
                let path = dir.join("fake-ca.crt");
                std::fs::write(&path, pem)?;
                Some(path)
            }
            None => None,
        };
        let path = dir.join("kubeconfig");
        std::fs::write(&path, self.kubeconfig_yaml(ca_file.as_deref()))?;
        Ok(path)
    }
}

/// A TLS acceptor with a fresh CA and a server certificate it signed; and the CA's PEM.
fn tls_acceptor() -> Result<(tokio_rustls::TlsAcceptor, String), FakeServerError> {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let failed = |e: rcgen::Error| FakeServerError::Certificate(e.to_string());
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "kubeplug fake apiserver CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().map_err(failed)?)
        .map_err(failed)?;
    let leaf_params = CertificateParams::new(vec![
        "127.0.0.1".to_owned(),
        "localhost".to_owned(),
        "kubernetes.default.svc".to_owned(),
    ])
    .map_err(failed)?;
    let leaf_key = KeyPair::generate().map_err(failed)?;
    let leaf = leaf_params.signed_by(&leaf_key, &ca).map_err(failed)?;
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| FakeServerError::Certificate(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone(), ca.der().clone()], key)
        .map_err(|e| FakeServerError::Certificate(e.to_string()))?;
    Ok((tokio_rustls::TlsAcceptor::from(Arc::new(config)), ca.pem()))
}
