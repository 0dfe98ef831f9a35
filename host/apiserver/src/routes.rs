//! Connections, routing and the answers of the server.

// Helpers return the early answer (a whole `Response`) as their error: once per request,
// boxing would only add noise.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io;
use std::sync::Arc;

use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use kubeplug_informer::object::ObjectKey;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::selector::{FieldSelector, LabelSelector};
use kubeplug_informer::source::{
    ListPage, ListRequest, ListerWatcher, SourceError, Status, WatchEvent, WatchRequest,
    WatchStream,
};
use kubeplug_memory::status::Endpoint;
use kubeplug_memory::{Call, SelectableFields};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::events::View;
use crate::form::{Answer, Form, Shape};
use crate::patch;
use crate::table::{self, IncludeObject, TableOf};
use crate::{Shared, lock, reason_for};

type Body = UnsyncBoxBody<Bytes, io::Error>;

/// Accepts connections until the task is aborted; one task per connection, each ended when
/// this task is, as a server that stops closes its connections.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
            Some(_) = connections.join_next() => continue,
        };
        let shared = shared.clone();
        let tls = tls.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(handle(shared, request).await) }
            });
            let http = hyper::server::conn::http1::Builder::new();
            // Errors are the client going away or an aborted watch: nothing to report.
            match tls {
                Some(acceptor) => {
                    if let Ok(stream) = acceptor.accept(stream).await {
                        let _ = http.serve_connection(TokioIo::new(stream), service).await;
                    }
                }
                None => {
                    let _ = http.serve_connection(TokioIo::new(stream), service).await;
                }
            }
        });
    }
}

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

async fn handle(shared: Arc<Shared>, request: Request<Incoming>) -> Response<Body> {
    shared.faults.record(&request);
    if let Some(token) = &shared.bearer_token {
        let authorization = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        if authorization != Some(&format!("Bearer {token}")) {
            return error(401, "Unauthorized");
        }
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
            let body = match request.into_body().collect().await {
                Ok(body) => body.to_bytes(),
                Err(e) => return error(400, format!("reading the request body: {e}")),
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

fn groups(shared: &Shared) -> Response<Body> {
    let mut by_group: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for resource in lock(&shared.resources)
        .iter()
        .filter(|r| !r.group.is_empty())
    {
        let versions = by_group.entry(resource.group.clone()).or_default();
        if !versions.contains(&resource.version) {
            versions.push(resource.version.clone());
        }
    }
    let groups: Vec<Value> = by_group
        .into_iter()
        .map(|(name, versions)| {
            let entries: Vec<Value> = versions
                .iter()
                .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
                .collect();
            let preferred = entries[0].clone();
            json!({"name": name, "versions": entries, "preferredVersion": preferred})
        })
        .collect();
    json_response(
        StatusCode::OK,
        &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}),
    )
}

fn group_version(shared: &Shared, group: &str, version: &str) -> Response<Body> {
    let resources: Vec<Value> = lock(&shared.resources)
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .flat_map(|r| {
            let singular = r.kind.to_lowercase();
            let mut resource = json!({"name": r.plural, "singularName": singular,
                "namespaced": r.namespaced, "kind": r.kind,
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]});
            if let Some(aliases) = shared.aliases.get(&(r.group.clone(), r.plural.clone())) {
                if !aliases.short_names.is_empty() {
                    resource["shortNames"] = json!(aliases.short_names);
                }
                if !aliases.categories.is_empty() {
                    resource["categories"] = json!(aliases.categories);
                }
            }
            [
                resource,
                json!({"name": format!("{}/status", r.plural), "singularName": "",
                    "namespaced": r.namespaced, "kind": r.kind, "verbs": ["get", "patch", "update"]}),
            ]
        })
        .collect();
    if resources.is_empty() {
        return error(404, "the server could not find the requested resource");
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    json_response(
        StatusCode::OK,
        &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    )
}

/// The path of a group-version's API, `api/v1` or `apis/{group}/{version}`.
fn api_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: a document per group-version served. What kubectl reads of them is whether
/// a PATCH takes `fieldValidation` (then it leaves validation to the server and does not
/// fetch schemas), so that is all they say; the hash changes when the resources do.
fn openapi_root(shared: &Shared) -> Response<Body> {
    let resources = lock(&shared.resources).clone();
    let mut paths = serde_json::Map::new();
    for resource in &resources {
        let path = api_path(&resource.group, &resource.version);
        let hash = format!("{:016x}", fingerprint(&resources, resource));
        paths.insert(
            path.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={hash}")}),
        );
    }
    json_response(StatusCode::OK, &json!({"paths": paths}))
}

/// A hash of the resources of `of`'s group-version.
fn fingerprint(resources: &[Resource], of: &Resource) -> u64 {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut hasher = DefaultHasher::new();
    for resource in resources
        .iter()
        .filter(|r| r.group == of.group && r.version == of.version)
    {
        (&resource.kind, &resource.plural, resource.namespaced).hash(&mut hasher);
    }
    hasher.finish()
}

/// A group-version's OpenAPI v3 document: each resource's object path, whose PATCH names its
/// kind and takes `fieldValidation`. No schemas: the server does not validate fields, it
/// stores what it is sent.
fn openapi_group_version(shared: &Shared, group: &str, version: &str) -> Response<Body> {
    let mut paths = serde_json::Map::new();
    for resource in lock(&shared.resources)
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let scope = if resource.namespaced {
            "namespaces/{namespace}/"
        } else {
            ""
        };
        let path = format!(
            "/{}/{scope}{}/{{name}}",
            api_path(group, version),
            resource.plural
        );
        let kind = json!({"group": group, "version": version, "kind": resource.kind});
        paths.insert(
            path,
            json!({"patch": {
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": kind,
                "parameters": [{"name": "fieldValidation", "in": "query",
                    "schema": {"type": "string", "uniqueItems": true}}],
                "responses": {"200": {"description": "OK"}},
            }}),
        );
    }
    if paths.is_empty() {
        return error(404, "the server could not find the requested resource");
    }
    json_response(
        StatusCode::OK,
        &json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0"}, "paths": paths}),
    )
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

    async fn list(&self) -> Response<Body> {
        if let Some(raw) = take_raw(self.shared, Call::List) {
            return raw;
        }
        let lister = match self.lister() {
            Ok(lister) => lister,
            Err(response) => return response,
        };
        let request = ListRequest {
            limit: self.query.get("limit").and_then(|l| l.parse().ok()),
            continue_token: self.query.get("continue").cloned(),
            resource_version: self.query.get("resourceVersion").cloned(),
        };
        let page = match lister.list(request.clone()).await {
            Ok(page) => page,
            Err(e) => return source_error(e),
        };
        let mut metadata = json!({"resourceVersion": page.resource_version});
        if let Some(token) = &page.continue_token {
            metadata["continue"] = json!(token);
            if let Some(remaining) = self.remaining_items(&lister, &request, &page, token).await {
                metadata["remainingItemCount"] = json!(remaining);
            }
        }
        if let Some(table) = self.table {
            let objects: Vec<Bytes> = page
                .items
                .iter()
                .map(|item| with_kind(self.resource, &self.view.show(item.clone())))
                .collect();
            return full(StatusCode::OK, table.table(metadata, true, &objects));
        }
        let mut out =
            Vec::with_capacity(page.items.iter().map(|i| i.len() + 1).sum::<usize>() + 256);
        let (kind, api_version) = self
            .form
            .list_kind(&self.resource.kind, &self.resource.api_version());
        let mut head =
            json!({"kind": kind, "apiVersion": api_version, "metadata": metadata}).to_string();
        head.pop(); // the closing brace: the items follow
        out.extend_from_slice(head.as_bytes());
        out.extend_from_slice(b",\"items\":[");
        for (i, item) in page.items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&self.form.object(self.view.show(item.clone())));
        }
        out.extend_from_slice(b"]}");
        full(StatusCode::OK, out)
    }

    /// The objects a list still holds after `page`, which ends at `token`: counted on a
    /// list's first page, then carried from page to page (all of a list's pages read one
    /// version, so the count only shrinks by what each page served).
    async fn remaining_items(
        &self,
        lister: &kubeplug_memory::MemoryListerWatcher,
        request: &ListRequest,
        page: &ListPage,
        token: &str,
    ) -> Option<usize> {
        // Tokens are only unique within one list: the same version and last key can end a
        // page of another namespace's or selector's list.
        let list = format!(
            "{}/{}/{:?}?{:?}&{:?}#",
            self.resource.api_version(),
            self.resource.plural,
            self.namespace(),
            self.query.get("labelSelector"),
            self.query.get("fieldSelector"),
        );
        let carried = request
            .continue_token
            .as_ref()
            .and_then(|served| lock(&self.shared.remaining_items).remove(&(list.clone() + served)));
        let remaining = match carried {
            Some(before) => before.checked_sub(page.items.len())?,
            None => {
                let rest = lister
                    .list(ListRequest {
                        limit: None,
                        continue_token: Some(token.to_owned()),
                        resource_version: None,
                    })
                    .await
                    .ok()?;
                rest.items.len()
            }
        };
        let mut counts = lock(&self.shared.remaining_items);
        if counts.len() >= crate::REMAINING_COUNTS {
            counts.clear();
        }
        counts.insert(list + token, remaining);
        Some(remaining)
    }

    fn get(&self) -> Response<Body> {
        let stored = self.shared.memory.get(self.storage, &self.key());
        let Some(json) = stored else {
            return self.not_found();
        };
        let object = with_kind(self.resource, &self.view.show(json));
        match self.table {
            Some(table) => {
                let metadata = json!({"resourceVersion": table::resource_version(&object)});
                full(StatusCode::OK, table.table(metadata, true, [&object]))
            }
            None => full(StatusCode::OK, self.form.object(object)),
        }
    }

    async fn watch(&self) -> Response<Body> {
        if let Some(raw) = take_raw(self.shared, Call::Watch) {
            return raw;
        }
        let lister = match self.lister() {
            Ok(lister) => lister,
            Err(response) => return response,
        };
        let request = WatchRequest {
            resource_version: self
                .query
                .get("resourceVersion")
                .cloned()
                .unwrap_or_default(),
            timeout: self
                .query
                .get("timeoutSeconds")
                .and_then(|t| t.parse().ok())
                .map(std::time::Duration::from_secs),
            bookmarks: is_true(self.query.get("allowWatchBookmarks")),
            send_initial_events: is_true(self.query.get("sendInitialEvents")),
        };
        let mut drops = self.shared.drops.subscribe();
        drops.mark_unchanged();
        let feed = match lister.watch(request).await {
            Ok(feed) => feed,
            Err(e) => return source_error(e),
        };
        let cut = self.shared.faults.take_cut();
        let body = WatchBody {
            feed,
            drops,
            cut,
            resource: self.resource.clone(),
            view: self.view,
            form: self.form,
            table: self.table,
            columns_sent: false,
            done: false,
        };
        let stream = futures::stream::unfold(body, WatchBody::next_chunk);
        Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CACHE_CONTROL, "no-cache, private")
            .body(BodyExt::boxed_unsync(StreamBody::new(stream)))
            .expect("a valid response")
    }

    /// The body as an object with the path's name and namespace checked and filled in.
    fn object_from(&self, body: &[u8], name_from_path: bool) -> Result<Value, Response<Body>> {
        let mut object: Value = serde_json::from_slice(body)
            .map_err(|e| error(400, format!("the request body is not JSON: {e}")))?;
        if !object.is_object() {
            return Err(error(400, "the request body is not a JSON object"));
        }
        if !object["metadata"].is_object() {
            object["metadata"] = json!({});
        }
        let metadata = &mut object["metadata"];
        if let Some(ns) = self.namespace() {
            match metadata.get("namespace").and_then(Value::as_str) {
                Some(given) if given != ns => {
                    return Err(error(
                        400,
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => metadata["namespace"] = json!(ns),
            }
        }
        if name_from_path {
            let name = self.path.name.clone().unwrap_or_default();
            match metadata.get("name").and_then(Value::as_str) {
                Some(given) if given != name => {
                    return Err(error(
                        400,
                        "the name of the object does not match the name on the URL",
                    ));
                }
                _ => metadata["name"] = json!(name),
            }
        }
        if let Some(map) = object.as_object_mut() {
            map.remove("kind");
            map.remove("apiVersion");
        }
        Ok(object)
    }

    fn invalid_name(&self, name: &str, field: &str) -> Response<Body> {
        let message = format!("Invalid value: \"{name}\": {}", patch::SUBDOMAIN_MESSAGE);
        status_response(
            &Status::new(
                422,
                "Invalid",
                format!(
                    "{} \"{name}\" is invalid: {field}: {message}",
                    self.resource.kind
                ),
            ),
            Some(json!({"name": name, "kind": self.resource.kind,
                "causes": [{"reason": "FieldValueInvalid", "message": message, "field": field}]})),
        )
    }

    fn create(&self, body: &[u8]) -> Response<Body> {
        let mut object = match self.object_from(body, false) {
            Ok(object) => self.view.store(object),
            Err(response) => return response,
        };
        let metadata = &mut object["metadata"];
        let name = match metadata.get("name").and_then(Value::as_str) {
            Some(name) if !name.is_empty() => name.to_owned(),
            _ => match metadata.get("generateName").and_then(Value::as_str) {
                Some(prefix) => {
                    if !patch::is_dns_subdomain(&format!("{prefix}a")) {
                        return self.invalid_name(prefix, "metadata.generateName");
                    }
                    let suffix: String = (0..5)
                        .map(|_| char::from(b"bcdfghjklmnpqrstvwxz2456789"[rand_index(27)]))
                        .collect();
                    format!("{prefix}{suffix}")
                }
                None => {
                    return error(
                        422,
                        format!(
                            "{} \"\" is invalid: metadata.name: Required value: name or generateName is required",
                            self.resource.kind
                        ),
                    );
                }
            },
        };
        if !patch::is_dns_subdomain(&name) {
            return self.invalid_name(&name, "metadata.name");
        }
        metadata["name"] = json!(name);
        if let Some(map) = metadata.as_object_mut() {
            map.remove("resourceVersion");
            map.remove("uid");
        }
        metadata["creationTimestamp"] = json!(patch::now_rfc3339());
        let object = Endpoint::Object.stored(None, object);
        match self.shared.memory.create(self.storage, &object.to_string()) {
            Ok(written) => full(
                StatusCode::CREATED,
                with_kind(self.resource, &self.view.show(written.json)),
            ),
            Err(status) if status.reason == "AlreadyExists" => status_response(
                &Status::new(
                    409,
                    "AlreadyExists",
                    format!("{} \"{name}\" already exists", self.resource.plural),
                ),
                Some(json!({"name": name, "kind": self.resource.plural})),
            ),
            Err(status) => status_response(&status, None),
        }
    }

    /// Whether the request is for the object or its `status`.
    fn endpoint(&self) -> Endpoint {
        if self.path.status {
            Endpoint::Status
        } else {
            Endpoint::Object
        }
    }

    fn current(&self) -> Option<Value> {
        let json = self.shared.memory.get(self.storage, &self.key())?;
        serde_json::from_slice(&json).ok()
    }

    /// Stores `object` as the new state, with the current version as precondition unless
    /// `object` carries its own.
    fn store(&self, mut object: Value, current: &Value) -> Result<Bytes, Response<Body>> {
        if object["metadata"].get("resourceVersion").is_none() {
            object["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
        }
        for keep in ["uid", "creationTimestamp"] {
            if let Some(value) = current["metadata"].get(keep) {
                object["metadata"][keep] = value.clone();
            }
        }
        match self.shared.memory.update(self.storage, &object.to_string()) {
            Ok(written) => Ok(written.json),
            Err(status) if status.reason == "Conflict" => {
                let name = self.path.name.clone().unwrap_or_default();
                Err(status_response(
                    &Status::new(
                        409,
                        "Conflict",
                        format!(
                            "Operation cannot be fulfilled on {}.{} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                            self.resource.plural,
                            if self.resource.group.is_empty() { "" } else { &self.resource.group }
                        ).replace(". \"", " \""),
                    ),
                    Some(json!({"name": name, "kind": self.resource.plural})),
                ))
            }
            Err(status) if status.code == 404 => Err(self.not_found()),
            Err(status) => Err(status_response(&status, None)),
        }
    }

    fn update(&self, body: &[u8]) -> Response<Body> {
        let object = match self.object_from(body, true) {
            Ok(object) => object,
            Err(response) => return response,
        };
        let Some(current) = self.current() else {
            return self.not_found();
        };
        let object = self.endpoint().stored(Some(&current), object);
        match self.store(object, &current) {
            Ok(json) => full(
                StatusCode::OK,
                with_kind(self.resource, &self.view.show(json)),
            ),
            Err(response) => response,
        }
    }

    fn patch(&self, content_type: &str, body: &[u8]) -> Response<Body> {
        let media = content_type.split(';').next().unwrap_or_default().trim();
        // Strategic merge patches need every built-in type's merge keys: applied as a merge
        // patch, one would replace a Deployment's containers with only the changed ones.
        if media == "application/strategic-merge-patch+json" {
            return error(
                415,
                "strategic merge patches are not supported by kubeplug's local API server (kubectl edit, \
                 client-side kubectl apply and kubectl patch without --type send them): use \
                 kubectl apply --server-side, or kubectl patch --type merge or --type json",
            );
        }
        let patch: Value = match serde_json::from_slice(body) {
            Ok(patch) => patch,
            Err(e) => {
                return error(
                    415,
                    format!(
                        "this server accepts JSON patch bodies only (YAML is not supported): {e}"
                    ),
                );
            }
        };
        let apply = media == "application/apply-patch+yaml";
        // Read-modify-write with the read version as precondition; retried on a conflict.
        for _ in 0..10 {
            let current = self.current();
            let response = match (current, apply) {
                (None, false) => return self.not_found(),
                (None, true) => return self.apply_create(&patch),
                (Some(current), _) => {
                    // The patch applies to the whole object, whichever the endpoint; what the
                    // endpoint may not change is then taken back from the current object.
                    let mut next = current.clone();
                    let patched = match media {
                        "application/merge-patch+json" => {
                            json_patch::merge(&mut next, &patch);
                            Ok(())
                        }
                        "application/json-patch+json" => patch::json_patch(&mut next, &patch),
                        "application/apply-patch+yaml" => {
                            json_patch::merge(&mut next, &patch);
                            self.record_apply(&mut next, &patch)
                        }
                        other => {
                            return error(
                                415,
                                format!(
                                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {other:?})"
                                ),
                            );
                        }
                    };
                    if let Err(message) = patched {
                        return error(422, message);
                    }
                    next["metadata"]["name"] = json!(self.path.name.clone().unwrap_or_default());
                    if let Some(ns) = self.namespace() {
                        next["metadata"]["namespace"] = json!(ns);
                    }
                    next["metadata"]["resourceVersion"] =
                        current["metadata"]["resourceVersion"].clone();
                    if let Some(map) = next.as_object_mut() {
                        map.remove("kind");
                        map.remove("apiVersion");
                    }
                    let next = self.endpoint().stored(Some(&current), next);
                    self.store(next, &current)
                }
            };
            match response {
                Ok(json) => {
                    return full(
                        StatusCode::OK,
                        with_kind(self.resource, &self.view.show(json)),
                    );
                }
                Err(response) if response.status() == StatusCode::CONFLICT => continue,
                Err(response) => return response,
            }
        }
        error(409, "too many concurrent writes")
    }

    /// Adds or replaces the `Apply` managedFields entry of the request's field manager.
    fn record_apply(&self, object: &mut Value, applied: &Value) -> Result<(), String> {
        let manager = self
            .query
            .get("fieldManager")
            .filter(|m| !m.is_empty())
            .ok_or_else(|| "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch".to_owned())?;
        let entry = json!({"manager": manager, "operation": "Apply", "apiVersion": self.resource.api_version(),
            "time": patch::now_rfc3339(), "fieldsType": "FieldsV1", "fieldsV1": patch::fields_v1(applied)});
        let fields = &mut object["metadata"]["managedFields"];
        if !fields.is_array() {
            *fields = json!([]);
        }
        let list = fields.as_array_mut().expect("made an array above");
        list.retain(|e| !(e["manager"] == json!(manager) && e["operation"] == json!("Apply")));
        list.push(entry);
        Ok(())
    }

    fn apply_create(&self, applied: &Value) -> Response<Body> {
        if self.path.status {
            return self.not_found();
        }
        let mut object = match self.object_from(applied.to_string().as_bytes(), true) {
            Ok(object) => object,
            Err(response) => return response,
        };
        let name = self.path.name.clone().unwrap_or_default();
        if !patch::is_dns_subdomain(&name) {
            return self.invalid_name(&name, "metadata.name");
        }
        if let Err(message) = self.record_apply(&mut object, applied) {
            return error(422, message);
        }
        object["metadata"]["creationTimestamp"] = json!(patch::now_rfc3339());
        let object = Endpoint::Object.stored(None, object);
        match self.shared.memory.create(self.storage, &object.to_string()) {
            Ok(written) => full(
                StatusCode::CREATED,
                with_kind(self.resource, &self.view.show(written.json)),
            ),
            Err(status) => status_response(&status, None),
        }
    }

    fn delete(&self) -> Response<Body> {
        match self.shared.memory.delete(self.storage, &self.key()) {
            Ok(written) => full(
                StatusCode::OK,
                with_kind(self.resource, &self.view.show(written.json)),
            ),
            Err(_) => self.not_found(),
        }
    }
}

fn rand_index(n: usize) -> usize {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);
    let mut x = STATE.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    (x % n as u64) as usize
}

/// A watch response body: events as lines, batched into chunks of what is ready.
struct WatchBody {
    feed: WatchStream,
    /// Changes when the server drops every watch connection.
    drops: tokio::sync::watch::Receiver<u64>,
    /// Whole events left before this watch is cut in the middle of a line.
    cut: Option<usize>,
    resource: Resource,
    view: View,
    form: Form,
    /// Events answered as one-row tables, the first with the column definitions.
    table: Option<TableOf>,
    columns_sent: bool,
    done: bool,
}

fn aborted() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "the API server closed the watch",
    )
}

impl WatchBody {
    /// An event's object (whole JSON, with `kind` and `apiVersion`) as the watch answers it.
    fn shown(&mut self, object: Bytes) -> Bytes {
        let object = self.view.show(object);
        let Some(table) = self.table else {
            return self.form.object(object);
        };
        let metadata = json!({"resourceVersion": table::resource_version(&object)});
        let columns = !std::mem::replace(&mut self.columns_sent, true);
        table.table(metadata, columns, [&object])
    }

    fn line(&mut self, event: WatchEvent) -> Vec<u8> {
        let (kind, object): (&str, Bytes) = match event {
            WatchEvent::Added(object) => ("ADDED", self.shown(object)),
            WatchEvent::Modified(object) => ("MODIFIED", self.shown(object)),
            WatchEvent::Deleted(object) => ("DELETED", self.shown(object)),
            WatchEvent::Bookmark {
                resource_version,
                initial_events_end,
            } => {
                let mut metadata =
                    json!({"resourceVersion": resource_version, "creationTimestamp": null});
                if initial_events_end {
                    metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
                }
                let api_version = self.resource.api_version();
                let (kind, api_version) =
                    self.form.bookmark_kind(&self.resource.kind, &api_version);
                let object = json!({"kind": kind, "apiVersion": api_version, "metadata": metadata});
                ("BOOKMARK", Bytes::from(object.to_string()))
            }
            WatchEvent::Error(status) => {
                let object = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": status.message, "reason": status.reason, "code": status.code});
                ("ERROR", Bytes::from(object.to_string()))
            }
        };
        let mut line = Vec::with_capacity(object.len() + 32);
        line.extend_from_slice(b"{\"type\":\"");
        line.extend_from_slice(kind.as_bytes());
        line.extend_from_slice(b"\",\"object\":");
        line.extend_from_slice(&object);
        line.extend_from_slice(b"}\n");
        line
    }

    /// The next chunk: every event ready now (at least one), or the end.
    async fn next_chunk(mut self) -> Option<(Result<Frame<Bytes>, io::Error>, Self)> {
        if self.done {
            return None;
        }
        let first = tokio::select! {
            biased;
            _ = self.drops.changed() => {
                self.done = true;
                return Some((Err(aborted()), self));
            }
            event = self.feed.next() => event,
        };
        let mut chunk = Vec::new();
        let mut next = first;
        loop {
            match next {
                Some(Ok(event)) => {
                    let line = self.line(event);
                    if self.cut == Some(0) {
                        chunk.extend_from_slice(&line[..line.len() / 2]);
                        self.done = true;
                        // The half line goes out; the connection is aborted on the next poll.
                        return Some((Ok(Frame::data(Bytes::from(chunk))), self.into_abort()));
                    }
                    if let Some(left) = &mut self.cut {
                        *left -= 1;
                    }
                    chunk.extend_from_slice(&line);
                }
                Some(Err(e)) => {
                    self.done = true;
                    if chunk.is_empty() {
                        return Some((Err(io::Error::other(e.to_string())), self));
                    }
                    break;
                }
                None => {
                    self.done = true;
                    if chunk.is_empty() {
                        return None;
                    }
                    break;
                }
            }
            if chunk.len() > 256 * 1024 {
                break;
            }
            match self.feed.next().now_or_never() {
                Some(event) => next = event,
                None => break,
            }
        }
        Some((Ok(Frame::data(Bytes::from(chunk))), self))
    }

    /// A body that aborts the connection on its next poll.
    fn into_abort(mut self) -> Self {
        // Give the connection time to flush the half line before it is aborted.
        self.feed = futures::stream::once(async {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            Err(SourceError::Transport("cut".into()))
        })
        .boxed();
        self.done = false;
        self.cut = None;
        self
    }
}
