//! The HTTP server: `/healthz`, `/readyz`, `/metrics` and `/plugins`.

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

/// Named readiness checks; the host is ready when every one is. Cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct Readiness {
    checks: Arc<Mutex<BTreeMap<String, Check>>>,
}

/// One readiness check's state.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Check {
    Ready,
    /// Not yet ready (still starting).
    Pending,
    /// Not ready, and why: shown by `/readyz`, so that an operator sees what to fix.
    Failed(String),
}

impl Readiness {
    /// Sets one check.
    pub(crate) fn set(&self, name: &str, ready: bool) {
        let check = if ready { Check::Ready } else { Check::Pending };
        self.lock().insert(name.to_owned(), check);
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
}

fn router(state: HttpState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/plugins", get(plugins))
        .with_state(state)
}

/// Serves until `cancel` fires. Binding errors name the address.
pub(crate) async fn serve(
    address: SocketAddr,
    state: HttpState,
    cancel: CancellationToken,
) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {address} for HTTP: {e}"))?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        let server = axum::serve(listener, router(state))
            .with_graceful_shutdown(async move { cancel.cancelled().await });
        if let Err(error) = server.await {
            tracing::error!(%error, "HTTP server stopped");
        }
    });
    Ok(bound)
}

#[derive(serde::Deserialize)]
struct ReadyzQuery {
    verbose: Option<String>,
}

/// kube-apiserver's format: `ok`, or with `?verbose` one `[+]name ok` / `[-]name not ready`
/// / `[-]name failed: reason` line per check.
async fn readyz(State(state): State<HttpState>, Query(query): Query<ReadyzQuery>) -> Response {
    let checks = state.readiness.snapshot();
    let ready = !checks.is_empty() && checks.values().all(|check| *check == Check::Ready);
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut body = String::new();
    if query.verbose.is_some() || !ready {
        for (name, check) in &checks {
            let _ = match check {
                Check::Ready => writeln!(body, "[+]{name} ok"),
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
