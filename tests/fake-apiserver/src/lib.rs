//! A fake kube-apiserver for tests: HTTP/1.1 (optionally HTTPS) on 127.0.0.1, speaking the
//! wire format of the captured responses in `shared/fixtures/kube-apiserver/`, backed by the
//! informer crate's [`MemoryServer`] (versions, history, `continue` tokens, bookmarks,
//! streaming lists, selector transitions).
//!
//! What it serves:
//! - discovery: `/api`, `/api/v1`, `/apis`, `/apis/{group}/{version}`, and `/version`, for the
//!   resources it was told about ([`FakeApiServer::serve`]; a few built-ins are served from
//!   the start, see [`builtin_resources`]);
//! - list (paginated, selectors, `410` with a `Status` for an expired `continue`), get, watch
//!   (chunked, one JSON object per line; a too-old version answers `200` and one `ERROR` line
//!   with a `410 Expired` Status), create (`409 AlreadyExists`, `422 Invalid` names), update
//!   (`409 Conflict` on a stale `metadata.resourceVersion`: Leases rely on it), delete;
//! - PATCH with `application/merge-patch+json`, `application/json-patch+json`,
//!   `application/strategic-merge-patch+json` (treated as a merge patch) and
//!   `application/apply-patch+yaml` (server-side apply, a documented subset: the body must be
//!   JSON; create-or-merge; a `managedFields` entry with operation `Apply` for the
//!   `fieldManager`; no conflict detection);
//! - the `/status` subresource (GET, PUT and PATCH change only `status`).
//!
//! Faults are scripted per test with [`FakeApiServer::inject`]; see [`HttpFault`].

mod patch;
mod routes;

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use kubeplug_informer::resource::Resource;
use kubeplug_informer::source::Status;
use kubeplug_memory::{Call, Fault, Garbage, MemoryServer, ServerConfig};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use kubeplug_memory::Call as FaultCall;

/// Why the fake server could not start.
#[derive(Debug, thiserror::Error)]
pub enum FakeServerError {
    /// Binding 127.0.0.1 failed.
    #[error("cannot listen on 127.0.0.1: {0}")]
    Bind(#[source] io::Error),
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

/// A canned answer waiting for a request.
#[derive(Debug, Clone)]
struct RawAnswer {
    remaining: usize,
    code: u16,
    body: String,
}

/// State shared by the server's tasks.
struct Shared {
    memory: MemoryServer,
    options: FakeOptions,
    address: String,
    /// The resources served, each once.
    resources: Mutex<Vec<Resource>>,
    /// Incremented to abort every open watch connection. Overflow policy: a `watch` channel
    /// keeps only the latest value; a watch body only needs to see that it changed.
    drops: watch::Sender<u64>,
    /// A pending [`HttpFault::CutNextWatchLine`].
    cut_next_watch: Mutex<Option<usize>>,
    /// Pending raw answers for lists and watches, oldest first; each `remaining >= 1`.
    raw_list: Mutex<VecDeque<RawAnswer>>,
    raw_watch: Mutex<VecDeque<RawAnswer>>,
    /// The last requests (method, path and query, `Authorization`), at most 1,000: for tests.
    log: Mutex<VecDeque<RequestRecord>>,
    /// `remainingItemCount` after each `continue` token handed out, keyed by the list it
    /// belongs to and the token, so that a list's later pages subtract instead of counting
    /// the rest again (which made a paginated list quadratic). Overflow policy: cleared at
    /// [`REMAINING_COUNTS`] entries; a page whose token is not found counts again.
    remaining_items: Mutex<HashMap<String, usize>>,
}

/// Most `continue` tokens whose remaining counts [`Shared`] keeps.
const REMAINING_COUNTS: usize = 1024;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct RequestRecord {
    /// `GET`, `POST`, ...
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The `User-Agent` headers, in order (a client may send none, or several).
    pub user_agents: Vec<String>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section is a single assignment: a poisoned lock still holds valid data.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
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
    shared: Arc<Shared>,
    addr: SocketAddr,
    ca_pem: Option<String>,
    accept: JoinHandle<()>,
    bookmarks: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for FakeApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeApiServer")
            .field("address", &self.shared.address)
            .finish_non_exhaustive()
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.accept.abort();
        if let Some(task) = &self.bookmarks {
            task.abort();
        }
        self.shared.drops.send_modify(|n| *n += 1);
    }
}

impl FakeApiServer {
    /// Starts a server on a free port of 127.0.0.1, on the current tokio runtime.
    ///
    /// Each watch gets events from the [`MemoryServer`] over a channel bounded at 100,000
    /// events: a watch that falls that far behind is ended (the client re-watches), so that
    /// writes never wait for a slow client.
    pub async fn start(options: FakeOptions) -> Result<Self, FakeServerError> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(FakeServerError::Bind)?;
        let addr = listener.local_addr().map_err(FakeServerError::Bind)?;
        let scheme = if options.tls { "https" } else { "http" };
        let memory = MemoryServer::with_config(ServerConfig {
            history: options.history,
            watch_buffer: 100_000,
            streaming_list: options.streaming_list,
        });
        let (drops, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            memory,
            address: format!("{scheme}://{addr}"),
            resources: Mutex::new(builtin_resources()),
            drops,
            cut_next_watch: Mutex::new(None),
            raw_list: Mutex::default(),
            raw_watch: Mutex::default(),
            log: Mutex::new(VecDeque::new()),
            remaining_items: Mutex::default(),
            options,
        });
        let (tls, ca_pem) = if shared.options.tls {
            let (acceptor, ca) = tls_acceptor()?;
            (Some(acceptor), Some(ca))
        } else {
            (None, None)
        };
        let accept = tokio::spawn(routes::accept_loop(listener, shared.clone(), tls));
        let bookmarks = shared.options.bookmark_every.map(|every| {
            let memory = shared.memory.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                loop {
                    tick.tick().await;
                    memory.bookmark();
                }
            })
        });
        Ok(Self {
            shared,
            addr,
            ca_pem,
            accept,
            bookmarks,
        })
    }

    /// The server's address, e.g. `http://127.0.0.1:40123`.
    pub fn address(&self) -> &str {
        &self.shared.address
    }

    /// The socket address.
    pub fn socket_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The PEM of the CA that signed the server's certificate (HTTPS only).
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// The storage behind the server: write objects here directly (faster than HTTP), read
    /// snapshots, count calls.
    pub fn memory(&self) -> &MemoryServer {
        &self.shared.memory
    }

    /// Serves `resource` from now on (discovery included), like installing a CRD.
    pub fn serve(&self, resource: Resource) {
        let mut resources = lock(&self.shared.resources);
        if !resources.contains(&resource) {
            resources.push(resource);
        }
    }

    /// Sends a BOOKMARK with the current resourceVersion to every watch that asked for them.
    pub fn bookmark(&self) {
        self.shared.memory.bookmark();
    }

    /// The requests seen so far (the last 1,000).
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared.log).iter().cloned().collect()
    }

    /// Injects a fault; see [`HttpFault`].
    pub fn inject(&self, fault: HttpFault) {
        let memory = &self.shared.memory;
        match fault {
            HttpFault::DropWatches => self.shared.drops.send_modify(|n| *n += 1),
            HttpFault::CutNextWatchLine { after } => {
                *lock(&self.shared.cut_next_watch) = Some(after);
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
            } => {
                let slot = match call {
                    Call::List => &self.shared.raw_list,
                    Call::Watch => &self.shared.raw_watch,
                };
                if times > 0 {
                    lock(slot).push_back(RawAnswer {
                        remaining: times,
                        code,
                        body,
                    });
                }
            }
            HttpFault::Stall { call, delay } => memory.inject(Fault::Stall { call, delay }),
            HttpFault::Compact => memory.inject(Fault::Compact),
            HttpFault::Restart => {
                memory.inject(Fault::Restart { keep_history: true });
                self.shared.drops.send_modify(|n| *n += 1);
            }
            HttpFault::Garbage(garbage) => memory.inject(Fault::Garbage(garbage)),
        }
    }

    /// A kubeconfig (context `fake`, namespace `default`) pointing at this server, with the
    /// server's bearer token and CA when it has them.
    pub fn kubeconfig_yaml(&self, ca_file: Option<&Path>) -> String {
        let mut cluster = format!("    server: {}\n", self.shared.address);
        if let Some(ca) = ca_file {
            cluster.push_str(&format!("    certificate-authority: {}\n", ca.display()));
        }
        let user = match &self.shared.options.bearer_token {
            Some(token) => format!("    token: {token}\n"),
            None => "    {}\n".to_owned(),
        };
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n{cluster}\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    \
             namespace: default\ncurrent-context: fake\nusers:\n- name: fake\n  user:\n{user}"
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

/// The `reason` the API server gives with an HTTP code.
pub(crate) fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Expired",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
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
