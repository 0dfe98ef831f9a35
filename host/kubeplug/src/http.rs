//! The HTTP server: `/healthz`, `/readyz`, `/metrics` and `/plugins`, over plain HTTP or, in
//! secure mode, HTTPS with `/metrics` and `/plugins` behind the API server's authentication
//! and authorisation. `/healthz` and `/readyz` stay open either way, and say only what the
//! host wrote (check names, stages, HTTP statuses), never a plugin's text.

mod auth;
mod tls;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

pub(crate) use auth::KubeReviews;
pub(crate) use tls::CertificateSource;

/// How the endpoints are served.
pub(crate) enum Serving {
    /// Plain HTTP, open to whoever reaches the port.
    Plain,
    /// HTTPS with the certificate of `certificate`; `/metrics` and `/plugins` answer only
    /// callers the API server of `reviews` authenticates and allows to `get` them.
    Secure {
        certificate: CertificateSource,
        reviews: Arc<dyn auth::Reviews>,
    },
}

/// Named readiness checks; the host is ready when every one is. Cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct Readiness {
    checks: Arc<Mutex<BTreeMap<String, Check>>>,
}

/// One readiness check's state.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Check {
    /// Ready, with notes `/readyz?verbose` shows under it (plugins that failed while others
    /// run).
    Ready(Vec<String>),
    /// Not yet ready (still starting).
    Pending,
    /// Not ready, and why: shown by `/readyz`, so that an operator sees what to fix.
    Failed(String),
}

impl Readiness {
    /// Sets one check.
    pub(crate) fn set(&self, name: &str, ready: bool) {
        let check = if ready {
            Check::Ready(Vec::new())
        } else {
            Check::Pending
        };
        self.lock().insert(name.to_owned(), check);
    }

    /// Marks one check ready, with notes for `/readyz?verbose`.
    pub(crate) fn ready_with_notes(&self, name: &str, notes: Vec<String>) {
        self.lock().insert(name.to_owned(), Check::Ready(notes));
    }

    /// Marks one check failed, with the reason `/readyz` shows.
    pub(crate) fn fail(&self, name: &str, reason: String) {
        self.lock().insert(name.to_owned(), Check::Failed(reason));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Check>> {
        self.checks
            .lock()
            .expect("readiness lock poisoned by a panic")
    }

    fn snapshot(&self) -> BTreeMap<String, Check> {
        self.lock().clone()
    }
}

/// What the handlers read.
#[derive(Clone)]
pub(crate) struct HttpState {
    pub(crate) readiness: Readiness,
    pub(crate) registry: Arc<Registry>,
    /// The plugins' status, as `/plugins` serves it.
    pub(crate) plugins: Arc<dyn Fn() -> serde_json::Value + Send + Sync>,
    /// What `/healthz?verbose` notes under `[+]ping ok`: parts that failed and recovered
    /// by themselves, in host-written words.
    pub(crate) health_notes: Arc<dyn Fn() -> Vec<String> + Send + Sync>,
}

/// The routes; with a gate, `/metrics` and `/plugins` pass it first.
fn router(state: HttpState, gate: Option<Arc<auth::Gate>>) -> Router {
    let mut guarded = Router::new()
        .route("/metrics", get(metrics))
        .route("/plugins", get(plugins));
    if let Some(gate) = gate {
        guarded = guarded.route_layer(axum::middleware::from_fn_with_state(gate, auth::guard));
    }
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(guarded)
        .with_state(state)
}

/// Serves until `cancel` fires. Errors name the address, or the certificate that does not
/// load.
pub(crate) async fn serve(
    address: SocketAddr,
    serving: Serving,
    state: HttpState,
    cancel: CancellationToken,
) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {address} for HTTP: {e}"))?;
    let bound = listener.local_addr()?;
    let shutdown = cancel.clone();
    let stopped = |result: std::io::Result<()>| {
        if let Err(error) = result {
            tracing::error!(%error, "HTTP server stopped");
        }
    };
    match serving {
        Serving::Plain => {
            let server = axum::serve(listener, router(state, None))
                .with_graceful_shutdown(async move { shutdown.cancelled().await });
            tokio::spawn(async move { stopped(server.await) });
        }
        Serving::Secure {
            certificate,
            reviews,
        } => {
            let config = tls::serving_config(&certificate, cancel.clone())?;
            let listener = tls::TlsListener::new(listener, config, cancel)?;
            let gate = Arc::new(auth::Gate::new(reviews));
            let server = axum::serve(listener, router(state, Some(gate)))
                .with_graceful_shutdown(async move { shutdown.cancelled().await });
            tokio::spawn(async move { stopped(server.await) });
        }
    }
    Ok(bound)
}

#[derive(serde::Deserialize)]
struct VerboseQuery {
    verbose: Option<String>,
}

/// `ok` while the process serves; with `?verbose`, kube-apiserver's `[+]ping ok` and a note
/// per part that failed and recovered by itself (an informer whose Reflector panicked).
async fn healthz(State(state): State<HttpState>, Query(query): Query<VerboseQuery>) -> String {
    if query.verbose.is_none() {
        return "ok".to_owned();
    }
    let mut body = "[+]ping ok\n".to_owned();
    for note in (state.health_notes)() {
        let _ = writeln!(body, "    {note}");
    }
    body.push_str("ok\n");
    body
}

/// kube-apiserver's format: `ok`, or with `?verbose` one `[+]name ok` / `[-]name not ready`
/// / `[-]name failed: reason` line per check.
async fn readyz(State(state): State<HttpState>, Query(query): Query<VerboseQuery>) -> Response {
    let checks = state.readiness.snapshot();
    let ready = !checks.is_empty()
        && checks
            .values()
            .all(|check| matches!(check, Check::Ready(_)));
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut body = String::new();
    if query.verbose.is_some() || !ready {
        for (name, check) in &checks {
            let _ = match check {
                Check::Ready(notes) => {
                    let _ = writeln!(body, "[+]{name} ok");
                    notes
                        .iter()
                        .try_for_each(|note| writeln!(body, "    {note}"))
                }
                Check::Pending => writeln!(body, "[-]{name} not ready"),
                Check::Failed(reason) => writeln!(body, "[-]{name} failed: {reason}"),
            };
        }
        if checks.is_empty() {
            body.push_str("[-]startup not ready\n");
        }
    }
    body.push_str(if ready { "ok\n" } else { "not ready\n" });
    (status, body).into_response()
}

async fn metrics(State(state): State<HttpState>) -> Response {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &state.registry) {
        Ok(()) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}

async fn plugins(State(state): State<HttpState>) -> Json<serde_json::Value> {
    Json((state.plugins)())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(notes: Vec<String>) -> HttpState {
        HttpState {
            readiness: Readiness::default(),
            registry: Arc::new(Registry::default()),
            plugins: Arc::new(|| serde_json::Value::Null),
            health_notes: Arc::new(move || notes.clone()),
        }
    }

    #[tokio::test]
    async fn healthz_notes_what_recovered_only_when_asked() {
        let note =
            "informer v1/pods: its reflector panicked 1 times and listed again (see the log)";
        let verbose = |verbose: Option<&str>| VerboseQuery {
            verbose: verbose.map(str::to_owned),
        };
        assert_eq!(
            healthz(State(state(vec![note.to_owned()])), Query(verbose(None))).await,
            "ok"
        );
        assert_eq!(
            healthz(
                State(state(vec![note.to_owned()])),
                Query(verbose(Some("")))
            )
            .await,
            format!("[+]ping ok\n    {note}\nok\n")
        );
        assert_eq!(
            healthz(State(state(Vec::new())), Query(verbose(Some("")))).await,
            "[+]ping ok\nok\n"
        );
    }
}
