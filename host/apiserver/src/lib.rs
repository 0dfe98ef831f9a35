//! The Kubernetes HTTP API over a [`MemoryServer`]: HTTP/1.1 (or HTTPS, given an acceptor) on
//! a loopback address, speaking the wire format of the responses captured from real
//! kube-apiservers in `shared/fixtures/kube-apiserver/`. `kubeplug run --local --serve-api`
//! serves the local cluster to kubectl with it; the fake API server of the tests serves its
//! objects with it and scripts faults on top.
//!
//! What it serves:
//! - discovery: `/api`, `/api/v1`, `/apis`, `/apis/{group}/{version}`, and `/version`, for the
//!   resources it is told about ([`ApiOptions::resources`], [`ApiServer::serve`]);
//! - list (paginated, selectors, `410` with a `Status` for an expired `continue`), get, watch
//!   (chunked, one JSON object per line; a too-old version answers `200` and one `ERROR` line
//!   with a `410 Expired` Status), create (`409 AlreadyExists`, `422 Invalid` names), update
//!   (`409 Conflict` on a stale `metadata.resourceVersion`: Leases rely on it), delete;
//! - PATCH with `application/merge-patch+json`, `application/json-patch+json` and
//!   `application/apply-patch+yaml` (server-side apply, a documented subset: the body must be
//!   JSON; create-or-merge; a `managedFields` entry with operation `Apply` for the
//!   `fieldManager`; no conflict detection); a strategic merge patch is refused with `415`
//!   naming the alternatives, never applied as a merge patch;
//! - the `/status` subresource (GET, PUT and PATCH change only `status`);
//! - lists, gets and watches in the `PartialObjectMetadata` form when `Accept` asks for it
//!   (`application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1`), as metadata
//!   informers do; `406` for an `Accept` naming no form served (JSON only);
//! - for kubectl, lists, gets and watches of Pods, Deployments, Namespaces, ConfigMaps,
//!   Secrets and Events as `meta.k8s.io/v1` `Table`s with kube-apiserver's columns (`table`), so
//!   `kubectl get` prints READY, STATUS and the rest; other types fall back to NAME and AGE;
//! - core `v1` Events as a view of the `events.k8s.io/v1` ones (list, get, watch, create,
//!   delete), as kube-apiserver serves one stored Event in both groups;
//! - `/openapi/v3`: per group-version, each resource's PATCH taking `fieldValidation`, which
//!   is what kubectl's validation asks (it then leaves validation to the server, which
//!   stores what it is sent: no schemas, no field validation).
//!
//! With a bearer token ([`ApiOptions::bearer_token`]) every request must carry it (compared
//! in constant time), else `401`, and its body is not read. Every connection is bounded, token or not (`serve`): at
//! most 512 at once (fewer under a low descriptor limit), a TLS handshake and each request
//! head within 10 s (an idle keep-alive connection too), an answer the client stops reading
//! abandoned after 60 s without progress; an authenticated request's body is read up to
//! 3 MiB (else `413`) within 30 s (else `408`). With the `faults` feature, [`HttpFaults`]
//! scripts raw answers and cut watch lines and records requests, for the tests.

mod auth;
mod events;
#[cfg(feature = "faults")]
mod faults;
#[cfg(not(feature = "faults"))]
#[path = "no_faults.rs"]
mod faults;
mod form;
mod patch;
mod routes;
mod serve;
mod table;

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use kubeplug_informer::resource::Resource;
use kubeplug_memory::MemoryServer;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[cfg(feature = "faults")]
pub use faults::{HttpFaults, RequestRecord};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ApiServerError {
    /// The address is not a loopback address: the API is served to this machine only.
    #[error("{0} is not a loopback address: the API is served on 127.0.0.1 or ::1 only")]
    NotLoopback(SocketAddr),
    /// Binding the address failed.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// What the server serves and whom it answers.
#[derive(Debug, Clone, Default)]
pub struct ApiOptions {
    /// When set, every request must carry `Authorization: Bearer <token>`, else `401`.
    pub bearer_token: Option<String>,
    /// The resources served from the start; [`ApiServer::serve`] adds more.
    pub resources: Vec<Resource>,
    /// What discovery says of resources besides their names, by (group, plural).
    pub aliases: BTreeMap<(String, String), Aliases>,
}

/// A resource's short names (`deploy`) and categories (`all`), as discovery lists them:
/// kubectl resolves `kubectl get deploy` and `kubectl get all` with them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Aliases {
    /// Short names.
    pub short_names: Vec<String>,
    /// Categories.
    pub categories: Vec<String>,
}

/// State shared by the server's tasks.
struct Shared {
    memory: MemoryServer,
    bearer_token: Option<String>,
    address: String,
    /// The resources served, each once.
    resources: Mutex<Vec<Resource>>,
    /// Resources served without the `PartialObjectMetadata` form.
    whole_only: Mutex<Vec<Resource>>,
    /// Short names and categories, by (group, plural).
    aliases: BTreeMap<(String, String), Aliases>,
    /// Incremented to close every open watch connection. Overflow policy: a `watch` channel
    /// keeps only the latest value; a watch body only needs to see that it changed.
    drops: watch::Sender<u64>,
    /// `remainingItemCount` after each `continue` token handed out, keyed by the list it
    /// belongs to and the token, so that a list's later pages subtract instead of counting
    /// the rest again (which made a paginated list quadratic). Overflow policy: cleared at
    /// [`REMAINING_COUNTS`] entries; a page whose token is not found counts again.
    remaining_items: Mutex<HashMap<String, usize>>,
    /// Scripted faults (the `faults` feature); nothing without it.
    faults: faults::HttpFaults,
    /// The bounds on connections and request bodies.
    limits: serve::Limits,
}

/// Most `continue` tokens whose remaining counts [`Shared`] keeps.
const REMAINING_COUNTS: usize = 1024;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section is a single assignment: a poisoned lock still holds valid data.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running API server. Dropping it stops it, as a stopped server: no new connections, and
/// the open ones (watches included) are closed.
pub struct ApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    accept: JoinHandle<()>,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer")
            .field("address", &self.shared.address)
            .finish_non_exhaustive()
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.accept.abort();
        self.close_watches();
    }
}

impl ApiServer {
    /// Serves `memory` on `address` (port 0: a free one), which must be a loopback address,
    /// on the current tokio runtime; over TLS when `tls` is given.
    ///
    /// Each watch gets its events from the [`MemoryServer`] over the channel its
    /// configuration bounds: a watch that falls that far behind is ended (the client watches
    /// again), so that writes never wait for a slow client.
    pub async fn bind(
        address: SocketAddr,
        memory: MemoryServer,
        options: ApiOptions,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> Result<Self, ApiServerError> {
        if !address.ip().is_loopback() {
            return Err(ApiServerError::NotLoopback(address));
        }
        let bind = |source| ApiServerError::Bind { address, source };
        let listener = TcpListener::bind(address).await.map_err(bind)?;
        let addr = listener.local_addr().map_err(bind)?;
        let limits = serve::Limits::for_this_process();
        Ok(Self::serve_on(listener, addr, memory, options, tls, limits))
    }

    /// Serves `memory` on `listener`, bound to `addr`, within `limits`.
    fn serve_on(
        listener: TcpListener,
        addr: SocketAddr,
        memory: MemoryServer,
        options: ApiOptions,
        tls: Option<tokio_rustls::TlsAcceptor>,
        limits: serve::Limits,
    ) -> Self {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let (drops, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            memory,
            bearer_token: options.bearer_token,
            address: format!("{scheme}://{addr}"),
            resources: Mutex::new(options.resources),
            whole_only: Mutex::default(),
            aliases: options.aliases,
            drops,
            remaining_items: Mutex::default(),
            faults: faults::HttpFaults::new(),
            limits,
        });
        let accept = tokio::spawn(serve::accept_loop(listener, shared.clone(), tls));
        Self {
            shared,
            addr,
            accept,
        }
    }

    /// The server's address, e.g. `http://127.0.0.1:40123`.
    pub fn address(&self) -> &str {
        &self.shared.address
    }

    /// The socket address.
    pub fn socket_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The storage behind the server.
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

    /// Serves `resource` without the `PartialObjectMetadata` form, as some aggregated APIs
    /// do: a request that also accepts plain JSON gets whole objects, one that does not gets
    /// `406`.
    pub fn serve_whole_only(&self, resource: Resource) {
        let mut whole_only = lock(&self.shared.whole_only);
        if !whole_only.contains(&resource) {
            whole_only.push(resource.clone());
        }
        drop(whole_only);
        self.serve(resource);
    }

    /// Closes every open watch connection mid-stream (no closing chunk); the clients watch
    /// again.
    pub fn close_watches(&self) {
        self.shared.drops.send_modify(|n| *n += 1);
    }

    /// The faults scripted on this server, and the requests it saw.
    #[cfg(feature = "faults")]
    pub fn faults(&self) -> &HttpFaults {
        &self.shared.faults
    }
}

/// The certificate authority a kubeconfig trusts for an HTTPS server.
#[derive(Debug, Clone, Copy)]
pub enum CertificateAuthority<'a> {
    /// A PEM file, by path.
    File(&'a std::path::Path),
    /// PEM text, written into the kubeconfig.
    Pem(&'a str),
}

/// A kubeconfig (cluster, user and context all `name`, namespace `default`) for the server at
/// `address`, with its bearer token and the authority that signed its certificate when it
/// has them. Clients send the token over HTTPS only (client-go drops a kubeconfig's
/// credentials for an `http://` server).
pub fn kubeconfig_yaml(
    name: &str,
    address: &str,
    bearer_token: Option<&str>,
    ca: Option<CertificateAuthority<'_>>,
) -> String {
    use base64::Engine as _;
    let mut cluster = format!("    server: {address}\n");
    match ca {
        Some(CertificateAuthority::File(path)) => {
            cluster.push_str(&format!("    certificate-authority: {}\n", path.display()));
        }
        Some(CertificateAuthority::Pem(pem)) => {
            let data = base64::engine::general_purpose::STANDARD.encode(pem);
            cluster.push_str(&format!("    certificate-authority-data: {data}\n"));
        }
        None => {}
    }
    let user = match bearer_token {
        Some(token) => format!("    token: {token}\n"),
        None => "    {}\n".to_owned(),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n{cluster}\
         contexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\n    \
         namespace: default\ncurrent-context: {name}\nusers:\n- name: {name}\n  user:\n{user}"
    )
}

/// The `reason` the API server gives with an HTTP code.
pub fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        408 => "Timeout",
        409 => "Conflict",
        410 => "Expired",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    }
}
