//! Connections, routing and the answers of the server.
//!
//! This module checks the bearer token ([`auth`]), declares the paths served as axum routes
//! and negotiates the form of the answer; the answers are in its children, one per family of
//! operations: [`discovery`] (the groups, versions and OpenAPI documents), [`read`] (get and
//! list), [`watch`] (the streamed watch body) and [`write`] (create, update, patch, apply and
//! delete).

// Helpers return the early answer (a whole `Response`) as their error: once per request,
// boxing would only add noise.
#![allow(clippy::result_large_err)]

#[cfg(test)]
mod tests;

mod discovery;
mod read;
mod watch;
mod write;

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, Request, State};
use axum::response::IntoResponse;
use axum::routing::any;
use bytes::Bytes;
use http::{Method, Response, StatusCode, Uri, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::service::Service as _;
use hyper_util::service::TowerToHyperService;
use kubeplug_informer::object::ObjectKey;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::selector::{FieldSelector, LabelSelector};
use kubeplug_informer::source::{SourceError, Status};
use kubeplug_memory::{Call, SelectableFields};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth;
use crate::events::View;
use crate::form::{Answer, Form, Shape};
use crate::serve::{BodyError, read_body};
use crate::table::{self, IncludeObject, TableOf};
use crate::{Shared, lock, reason_for};

use discovery::{group_version, groups, openapi_group_version, openapi_root};

type Body = UnsyncBoxBody<Bytes, io::Error>;

fn full(code: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(
            Full::new(body.into())
                .map_err(|e| match e {})
                .boxed_unsync(),
        )
        .expect("a valid response")
}

fn json_response(code: StatusCode, value: &Value) -> Response<Body> {
    full(code, value.to_string())
}

/// A `Status` answer like the API server's.
fn status_response(status: &Status, details: Option<Value>) -> Response<Body> {
    let mut body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": status.message, "reason": status.reason, "code": status.code,
    });
    if let Some(details) = details {
        body["details"] = details;
    }
    let code = StatusCode::from_u16(status.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(code, &body)
}

fn error(code: u16, message: impl Into<String>) -> Response<Body> {
    status_response(&Status::new(code, reason_for(code), message), None)
}

/// The answer to a request body not read whole: a `Status` as kube-apiserver's, naming the
/// bound.
fn body_error(failure: &BodyError) -> Response<Body> {
    let code = match failure {
        BodyError::TooLarge { .. } => 413,
        BodyError::TimedOut { .. } => 408,
        BodyError::ReadFailed(_) => 400,
    };
    error(code, failure.to_string())
}

fn source_error(failure: SourceError) -> Response<Body> {
    match failure {
        SourceError::Status {
            status,
            retry_after,
        } => {
            let mut response = status_response(&status, None);
            if let Some(delay) = retry_after {
                response.headers_mut().insert(
                    header::RETRY_AFTER,
                    delay.as_secs().to_string().parse().expect("digits"),
                );
            }
            response
        }
        other => error(500, other.to_string()),
    }
}

/// An object as the server answers it: the stored JSON with `kind` and `apiVersion` first.
fn with_kind(resource: &Resource, stored: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(stored.len() + 64);
    out.extend_from_slice(b"{\"kind\":");
    out.extend_from_slice(Value::from(resource.kind.as_str()).to_string().as_bytes());
    out.extend_from_slice(b",\"apiVersion\":");
    out.extend_from_slice(Value::from(resource.api_version()).to_string().as_bytes());
    if stored.len() > 2 {
        out.push(b',');
    }
    out.extend_from_slice(&stored[1..]);
    Bytes::from(out)
}

/// The routes, served as a hyper service by each connection (`serve`).
pub(crate) type Routes = TowerToHyperService<Router>;

/// The paths the server answers, as kube-apiserver lays them out. Every route takes every
/// method: which methods a path takes is its handler's answer, a `405` `Status` like the
/// server's, never axum's empty one. Anything else is a `404` `Status`.
pub(crate) fn routes(shared: Arc<Shared>) -> Routes {
    let router = Router::new()
        .route("/version", any(version))
        .route("/api", any(core_versions))
        .route("/apis", any(api_groups))
        .route("/api/{version}", any(resources_of))
        .route("/apis/{group}/{version}", any(resources_of))
        .route("/openapi/v3", any(openapi_documents))
        .route("/openapi/v3/api/{version}", any(openapi_document))
        .route("/openapi/v3/apis/{group}/{version}", any(openapi_document))
        // Cluster-scoped resources, and namespaced ones across all namespaces.
        .route("/api/{version}/{plural}", any(objects))
        .route("/api/{version}/{plural}/{name}", any(objects))
        .route("/api/{version}/{plural}/{name}/status", any(status))
        .route("/apis/{group}/{version}/{plural}", any(objects))
        .route("/apis/{group}/{version}/{plural}/{name}", any(objects))
        .route(
            "/apis/{group}/{version}/{plural}/{name}/status",
            any(status),
        )
        // Namespaced resources in one namespace.
        .route(
            "/api/{version}/namespaces/{namespace}/{plural}",
            any(objects),
        )
        .route(
            "/api/{version}/namespaces/{namespace}/{plural}/{name}",
            any(objects),
        )
        .route(
            "/api/{version}/namespaces/{namespace}/{plural}/{name}/status",
            any(status),
        )
        .route(
            "/apis/{group}/{version}/namespaces/{namespace}/{plural}",
            any(objects),
        )
        .route(
            "/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}",
            any(objects),
        )
        .route(
            "/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}/status",
            any(status),
        )
        .fallback(|| async { not_found() })
        .with_state(shared);
    TowerToHyperService::new(router)
}

/// Answers one request: the bearer token first, so that nothing of an unauthenticated
/// request's body is read (nor its path looked at); then the route its path names, with
/// slashes at either end of the path ignored.
pub(crate) async fn handle<B>(
    shared: &Shared,
    routes: &Routes,
    mut request: Request<B>,
) -> axum::response::Response
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    shared.faults.record(&request);
    if !auth::authorized(shared.bearer_token.as_deref(), request.headers()) {
        return error(401, "Unauthorized").into_response();
    }
    trim_slashes(request.uri_mut());
    let Ok(response) = routes.call(request).await;
    response
}

/// `/api/v1/` and `//api/v1` name `/api/v1`, as they always have here.
fn trim_slashes(uri: &mut Uri) {
    let trimmed = uri.path().trim_matches('/');
    if uri.path().strip_prefix('/') == Some(trimmed) {
        return;
    }
    let path_and_query = match uri.query() {
        Some(query) => format!("/{trimmed}?{query}"),
        None => format!("/{trimmed}"),
    };
    let mut parts = uri.clone().into_parts();
    if let Ok(path_and_query) = path_and_query.parse() {
        parts.path_and_query = Some(path_and_query);
        if let Ok(trimmed) = Uri::from_parts(parts) {
            *uri = trimmed;
        }
    }
}

/// The answer to a path that names nothing served.
fn not_found() -> Response<Body> {
    error(404, "the server could not find the requested resource")
}

async fn version() -> Response<Body> {
    json_response(
        StatusCode::OK,
        &json!({"major": "1", "minor": "32", "gitVersion": "v1.32.0-fake", "platform": "linux/amd64"}),
    )
}

async fn core_versions(State(shared): State<Arc<Shared>>) -> Response<Body> {
    json_response(
        StatusCode::OK,
        &json!({"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": shared.address}]}),
    )
}

async fn api_groups(State(shared): State<Arc<Shared>>) -> Response<Body> {
    groups(&shared)
}

/// A group-version as a route captures it: no `group` for the core group.
#[derive(Deserialize)]
struct GroupVersion {
    #[serde(default)]
    group: String,
    version: String,
}

async fn resources_of(
    State(shared): State<Arc<Shared>>,
    path: Result<Path<GroupVersion>, PathRejection>,
) -> Response<Body> {
    match path {
        Ok(Path(gv)) => group_version(&shared, &gv.group, &gv.version),
        Err(_) => not_found(),
    }
}

async fn openapi_documents(State(shared): State<Arc<Shared>>) -> Response<Body> {
    openapi_root(&shared)
}

async fn openapi_document(
    State(shared): State<Arc<Shared>>,
    path: Result<Path<GroupVersion>, PathRejection>,
) -> Response<Body> {
    match path {
        Ok(Path(gv)) => openapi_group_version(&shared, &gv.group, &gv.version),
        Err(_) => not_found(),
    }
}

/// A resource path as a route captures it, each segment percent-decoded as kube-apiserver
/// decodes them (one that decodes to no UTF-8 names nothing: `404`).
#[derive(Deserialize)]
struct Segments {
    /// Empty for the core group.
    #[serde(default)]
    group: String,
    version: String,
    namespace: Option<String>,
    plural: String,
    name: Option<String>,
}

/// What a resource path names.
struct ResourcePath {
    group: String,
    version: String,
    namespace: Option<String>,
    plural: String,
    name: Option<String>,
    /// The `/status` subresource.
    status: bool,
}

impl ResourcePath {
    /// What `segments` name: `namespaces/{name}/status` is a Namespace's `status`
    /// subresource, not a resource `status` in a namespace, and `namespaces/{name}/finalize`
    /// (not served) is not one either.
    fn new(segments: Segments, status: bool) -> Option<Self> {
        let Segments {
            group,
            version,
            namespace,
            plural,
            name,
        } = segments;
        let (namespace, plural, name, status) = match (namespace, plural.as_str(), name) {
            (Some(namespace), "status", None) if !status => {
                (None, "namespaces".to_owned(), Some(namespace), true)
            }
            (Some(_), "status" | "finalize", _) => return None,
            (namespace, _, name) => (namespace, plural, name, status),
        };
        Some(Self {
            group,
            version,
            namespace,
            plural,
            name,
            status,
        })
    }
}

/// A resource's collection or one of its objects.
async fn objects(
    State(shared): State<Arc<Shared>>,
    path: Result<Path<Segments>, PathRejection>,
    RawQuery(query): RawQuery,
    request: Request,
) -> Response<Body> {
    resource_request(shared, path, false, query, request).await
}

/// An object's `status` subresource.
async fn status(
    State(shared): State<Arc<Shared>>,
    path: Result<Path<Segments>, PathRejection>,
    RawQuery(query): RawQuery,
    request: Request,
) -> Response<Body> {
    resource_request(shared, path, true, query, request).await
}

/// Answers a request on a resource: the form of the answer negotiated (and refused before
/// the body is read when none can be given), then the body read, then the operation.
async fn resource_request(
    shared: Arc<Shared>,
    path: Result<Path<Segments>, PathRejection>,
    status: bool,
    query: Option<String>,
    request: Request,
) -> Response<Body> {
    let query: BTreeMap<String, String> = query
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let Some(path) = path
        .ok()
        .and_then(|Path(segments)| ResourcePath::new(segments, status))
    else {
        return not_found();
    };
    let resource = lock(&shared.resources)
        .iter()
        .find(|r| r.group == path.group && r.version == path.version && r.plural == path.plural)
        .cloned();
    let Some(resource) = resource else {
        return not_found();
    };
    let (view, storage) = View::of(&resource, &lock(&shared.resources));
    let method = request.method().clone();
    let (form, table) = match negotiate(&shared, &resource, &path, &query, &request) {
        Ok(negotiated) => negotiated,
        Err(refused) => return refused,
    };
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_owned();
    let body = match read_body(request.into_body(), &shared.limits).await {
        Ok(body) => body,
        Err(e) => return body_error(&e),
    };
    let ctx = Ctx {
        shared: &shared,
        resource: &resource,
        storage: &storage,
        view,
        form,
        table,
        path: &path,
        query: &query,
    };
    match (method, path.name.is_some()) {
        (Method::PUT | Method::PATCH, true) if view == View::CoreEvents => error(
            405,
            "v1 Events are events.k8s.io/v1 Events here: update or patch them there",
        ),
        (Method::GET, false) if is_true(query.get("watch")) => ctx.watch().await,
        (Method::GET, false) => ctx.list().await,
        (Method::GET, true) => ctx.get(),
        (Method::POST, false) => ctx.create(&body),
        (Method::PUT, true) => ctx.update(&body),
        (Method::PATCH, true) => ctx.patch(&content_type, &body),
        (Method::DELETE, true) => ctx.delete(),
        _ => error(405, "method not allowed"),
    }
}

/// The form of the objects a request on `resource` is answered with, and the table they
/// make when it asks for one: from its `Accept` header, for a `GET`; `406` when no form
/// served is acceptable.
fn negotiate(
    shared: &Shared,
    resource: &Resource,
    path: &ResourcePath,
    query: &BTreeMap<String, String>,
    request: &Request,
) -> Result<(Form, Option<TableOf>), Response<Body>> {
    let answer = match (request.method(), path.name.is_some()) {
        (&Method::GET, false) if !is_true(query.get("watch")) => Answer::List,
        _ => Answer::Objects,
    };
    let accept = request
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok());
    // A streaming list is answered in objects, even to a table's Accept, as kube-apiserver
    // v1.32 answers it.
    let printer = table::printer(&resource.group, &resource.kind)
        .filter(|_| !is_true(query.get("sendInitialEvents")));
    let negotiated = match lock(&shared.whole_only).contains(resource) {
        true => Form::negotiate_whole_only(accept),
        false => Form::negotiate(accept, answer, printer.is_some()),
    };
    let shape = match negotiated {
        Some(shape) if request.method() == Method::GET => shape,
        Some(_) => Shape::Objects(Form::Full),
        None => {
            let accept: String = accept.unwrap_or_default().chars().take(200).collect();
            return Err(error(
                406,
                format!(
                    "the server can answer only application/json: whole, as PartialObjectMetadata, or as a Table for some types; the request accepts {accept:?}"
                ),
            ));
        }
    };
    Ok(match (shape, printer) {
        (Shape::Table, Some(printer)) => {
            match IncludeObject::parse(query.get("includeObject").map(String::as_str)) {
                Ok(include) => (Form::Full, Some(TableOf { printer, include })),
                Err(unknown) => return Err(error(400, unknown.to_string())),
            }
        }
        (Shape::Objects(form), _) => (form, None),
        // Not negotiated without a printer.
        (Shape::Table, None) => (Form::Full, None),
    })
}

fn is_true(value: Option<&String>) -> bool {
    value.is_some_and(|v| v == "1" || v == "true")
}

/// One request on a resource.
struct Ctx<'a> {
    shared: &'a Shared,
    /// The resource the request names: what answers are.
    resource: &'a Resource,
    /// The resource whose objects it reads and writes (another for a [`View`]).
    storage: &'a Resource,
    view: View,
    /// The form of the objects a read answers.
    form: Form,
    /// A read answered as a table: its rows are made from whole objects.
    table: Option<TableOf>,
    path: &'a ResourcePath,
    query: &'a BTreeMap<String, String>,
}

/// The answer scripted for the next `call`, if any (the `faults` feature).
fn take_raw(shared: &Shared, call: Call) -> Option<Response<Body>> {
    let (code, body) = shared.faults.take_raw(call)?;
    Some(full(
        StatusCode::from_u16(code).unwrap_or(StatusCode::OK),
        body,
    ))
}

impl Ctx<'_> {
    fn namespace(&self) -> Option<String> {
        self.path
            .namespace
            .clone()
            .filter(|_| self.resource.namespaced)
    }

    fn key(&self) -> ObjectKey {
        ObjectKey::new(
            self.namespace().as_deref(),
            self.path.name.as_deref().unwrap_or_default(),
        )
    }

    fn not_found(&self) -> Response<Body> {
        let name = self.path.name.clone().unwrap_or_default();
        status_response(
            &Status::new(
                404,
                "NotFound",
                format!("{} \"{name}\" not found", self.resource.plural),
            ),
            Some(json!({"name": name, "kind": self.resource.plural})),
        )
    }

    fn lister(&self) -> Result<kubeplug_memory::MemoryListerWatcher, Response<Body>> {
        let labels = match self.query.get("labelSelector").filter(|s| !s.is_empty()) {
            Some(text) => Some(LabelSelector::parse(text).map_err(|e| error(400, e.to_string()))?),
            None => None,
        };
        let fields = match self.query.get("fieldSelector").filter(|s| !s.is_empty()) {
            Some(text) => Some(FieldSelector::parse(text).map_err(|e| error(400, e.to_string()))?),
            None => None,
        };
        let lister = self.shared.memory.lister_watcher(
            self.storage.clone(),
            self.namespace(),
            labels,
            fields,
        );
        Ok(match self.view {
            View::Own => lister,
            View::CoreEvents => {
                lister.selecting_fields_as(SelectableFields::core_events_stored_as_events_k8s_io())
            }
        })
    }
}
