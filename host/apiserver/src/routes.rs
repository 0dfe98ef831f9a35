//! Connections, routing and the answers of the server.
//!
//! This module checks the bearer token ([`auth`]), reads what a path names and
//! negotiates the form of the answer; the answers are in its children, one per family of
//! operations: [`discovery`] (the groups, versions and OpenAPI documents), [`read`] (get and
//! list), [`watch`] (the streamed watch body) and [`write`] (create, update, patch, apply and
//! delete).

// Helpers return the early answer (a whole `Response`) as their error: once per request,
// boxing would only add noise.
#![allow(clippy::result_large_err)]

mod discovery;
mod read;
mod watch;
mod write;

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use kubeplug_informer::object::ObjectKey;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::selector::{FieldSelector, LabelSelector};
use kubeplug_informer::source::{SourceError, Status};
use kubeplug_memory::{Call, SelectableFields};
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

/// What a path names.
enum Target {
    Version,
    /// `/openapi/v3`: the group-versions with a document.
    OpenApiRoot,
    /// `/openapi/v3/api/v1`, `/openapi/v3/apis/{group}/{version}`.
    OpenApi {
        group: String,
        version: String,
    },
    CoreVersions,
    Groups,
    GroupVersion {
        group: String,
        version: String,
    },
    Resource(ResourcePath),
}

struct ResourcePath {
    group: String,
    version: String,
    namespace: Option<String>,
    plural: String,
    name: Option<String>,
    status: bool,
}

fn parse_path(path: &str) -> Option<Target> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segments.as_slice() {
        ["version"] => return Some(Target::Version),
        ["openapi", "v3"] => return Some(Target::OpenApiRoot),
        ["openapi", "v3", "api", version] => {
            return Some(Target::OpenApi {
                group: String::new(),
                version: (*version).to_owned(),
            });
        }
        ["openapi", "v3", "apis", group, version] => {
            return Some(Target::OpenApi {
                group: (*group).to_owned(),
                version: (*version).to_owned(),
            });
        }
        ["api"] => return Some(Target::CoreVersions),
        ["apis"] => return Some(Target::Groups),
        ["api", version] => {
            return Some(Target::GroupVersion {
                group: String::new(),
                version: (*version).to_owned(),
            });
        }
        ["apis", group, version] => {
            return Some(Target::GroupVersion {
                group: (*group).to_owned(),
                version: (*version).to_owned(),
            });
        }
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, tail @ ..] if *plural != "status" && *plural != "finalize" => {
            (Some((*ns).to_owned()), [&[*plural][..], tail].concat())
        }
        other => (None, other.to_vec()),
    };
    let (plural, name, status) = match rest.as_slice() {
        [plural] => (*plural, None, false),
        [plural, name] => (*plural, Some((*name).to_owned()), false),
        [plural, name, "status"] => (*plural, Some((*name).to_owned()), true),
        _ => return None,
    };
    Some(Target::Resource(ResourcePath {
        group: group.to_owned(),
        version: version.to_owned(),
        namespace,
        plural: plural.to_owned(),
        name,
        status,
    }))
}

/// Answers one request: the bearer token first, so that nothing of an unauthenticated
/// request's body is read.
pub(crate) async fn handle(shared: Arc<Shared>, request: Request<Incoming>) -> Response<Body> {
    shared.faults.record(&request);
    if !auth::authorized(shared.bearer_token.as_deref(), request.headers()) {
        return error(401, "Unauthorized");
    }
    let query: BTreeMap<String, String> = request
        .uri()
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let Some(target) = parse_path(request.uri().path()) else {
        return error(404, "the server could not find the requested resource");
    };
    match target {
        Target::Version => json_response(
            StatusCode::OK,
            &json!({"major": "1", "minor": "32", "gitVersion": "v1.32.0-fake", "platform": "linux/amd64"}),
        ),
        Target::CoreVersions => json_response(
            StatusCode::OK,
            &json!({"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": shared.address}]}),
        ),
        Target::Groups => groups(&shared),
        Target::OpenApiRoot => openapi_root(&shared),
        Target::OpenApi { group, version } => openapi_group_version(&shared, &group, &version),
        Target::GroupVersion { group, version } => group_version(&shared, &group, &version),
        Target::Resource(path) => {
            let resource = lock(&shared.resources)
                .iter()
                .find(|r| {
                    r.group == path.group && r.version == path.version && r.plural == path.plural
                })
                .cloned();
            let Some(resource) = resource else {
                return error(404, "the server could not find the requested resource");
            };
            let (view, storage) = View::of(&resource, &lock(&shared.resources));
            let method = request.method().clone();
            let answer = match (&method, path.name.is_some()) {
                (&Method::GET, false) if !is_true(query.get("watch")) => Answer::List,
                _ => Answer::Objects,
            };
            let accept = request
                .headers()
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok());
            // A streaming list is answered in objects, even to a table's Accept, as
            // kube-apiserver v1.32 answers it.
            let printer = table::printer(&resource.group, &resource.kind)
                .filter(|_| !is_true(query.get("sendInitialEvents")));
            let negotiated = match lock(&shared.whole_only).contains(&resource) {
                true => Form::negotiate_whole_only(accept),
                false => Form::negotiate(accept, answer, printer.is_some()),
            };
            let shape = match negotiated {
                Some(shape) if method == Method::GET => shape,
                Some(_) => Shape::Objects(Form::Full),
                None => {
                    let accept: String = accept.unwrap_or_default().chars().take(200).collect();
                    return error(
                        406,
                        format!(
                            "the server can answer only application/json: whole, as PartialObjectMetadata, or as a Table for some types; the request accepts {accept:?}"
                        ),
                    );
                }
            };
            let (form, table) = match (shape, printer) {
                (Shape::Table, Some(printer)) => {
                    match IncludeObject::parse(query.get("includeObject").map(String::as_str)) {
                        Ok(include) => (Form::Full, Some(TableOf { printer, include })),
                        Err(message) => return error(400, message),
                    }
                }
                (Shape::Objects(form), _) => (form, None),
                // Not negotiated without a printer.
                (Shape::Table, None) => (Form::Full, None),
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
    }
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
