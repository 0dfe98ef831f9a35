//! Plugin writes on a real cluster, through kube's client: the same requests and object
//! shapes as `kubectl` and client-go send, so that what a plugin does in the local cluster
//! (`LocalWriter`) it does here too.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use http::{Method, Request, header};
use http_body_util::BodyExt as _;
use kube::client::Body;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::source::Status;
use kubeplug_kube::config::{KubeClient, error_chain, plugin_user_agent};
use kubeplug_kube::discovery::{Discovery, DiscoveryError};
use kubeplug_kube::paths;
use kubeplug_kube::wire::decode_status;
use kubeplug_policy::names::printable;
use kubeplug_runtime::view::{BoxFuture, PatchType};
use kubeplug_runtime::{ClusterWriter, Gvk, ObjectRef, Write, WriteError};
use serde_json::Value;
use tracing::info;

use crate::event::NewEvent;

/// The longest `reportingInstance` it accepts.
const MAX_INSTANCE_CHARS: usize = 128;

/// Writes to the API server that `client` talks to.
///
/// Contract: every write is one request to the resource path that discovery gives (plural,
/// namespaced or not): server-side apply is `PATCH` with `application/apply-patch+yaml`,
/// the plugin's `fieldManager` and `force`; patches are merge or JSON patches of the object
/// or of a subresource; Events are `events.k8s.io/v1` objects named as client-go names them
/// (`<regarding>.<hex time>`), reported by `kubeplug/<plugin>` from [`instance`]. An answer
/// other than 2xx becomes a [`WriteError`] by its code (404 `NotFound`, 409 `Conflict`,
/// 400/413/415/422 `Invalid`, anything else `Unavailable`), with the server's message and
/// the object named. Nothing is retried here: the plugin decides.
///
/// [`instance`]: reporting_instance
pub(crate) struct KubeWriter {
    client: KubeClient,
    discovery: Discovery,
    /// `reportingInstance` of the Events this host records.
    instance: String,
    /// The last Event's name suffix (nanoseconds since the epoch): names stay unique within
    /// this process even when two Events share a clock tick.
    last_event: AtomicU64,
}

impl KubeWriter {
    /// A writer over `client`, resolving types through `discovery` (shared with the
    /// informers, so that it is usually warm), recording Events as `instance`.
    pub(crate) fn new(client: KubeClient, discovery: Discovery, instance: String) -> Self {
        Self {
            client,
            discovery,
            instance,
            last_event: AtomicU64::new(0),
        }
    }

    /// The served resource of `gvk`; errors name `what` was being written.
    async fn resource(&self, gvk: &Gvk, what: &str) -> Result<Resource, WriteError> {
        self.discovery
            .resolve(&gvk.group, &gvk.version, &gvk.kind)
            .await
            .map_err(|error| match error {
                DiscoveryError::RequestFailed { .. } => {
                    WriteError::Unavailable(format!("{what}: {error}"))
                }
                _ => WriteError::NotFound(format!("{what}: {error}")),
            })
    }

    async fn apply(&self, plugin: &str, write: Write) -> Result<String, WriteError> {
        match write {
            Write::Apply {
                target,
                json,
                force,
                field_manager,
            } => {
                let what = format!("apply {target}");
                let resource = self.resource(&target.resource, &what).await?;
                let mut manifest = parse(&json)?;
                fill_identity(&mut manifest, &target.resource, target.namespace.as_deref());
                let name = &mut manifest["metadata"]["name"];
                if name.is_null() {
                    *name = Value::String(target.name.clone());
                }
                let path = format!(
                    "{}?{}",
                    object_path(&resource, &target, None)?,
                    write_query(&field_manager, force)
                );
                let written = self
                    .send(
                        plugin,
                        Method::PATCH,
                        path,
                        "application/apply-patch+yaml",
                        manifest.to_string(),
                        &what,
                    )
                    .await?;
                info!(plugin, "cluster: applied {target}");
                Ok(written)
            }
            Write::Patch {
                target,
                patch_type,
                patch,
                part,
            } => {
                let subresource = part.subresource();
                let part = subresource.map(|s| format!(" ({s})")).unwrap_or_default();
                let what = format!("patch {target}{part}");
                let resource = self.resource(&target.resource, &what).await?;
                let path = object_path(&resource, &target, subresource)?;
                let content_type = match patch_type {
                    PatchType::Merge => "application/merge-patch+json",
                    PatchType::Json => "application/json-patch+json",
                };
                let path = format!(
                    "{path}?{}",
                    write_query(&format!("kubeplug/{plugin}"), false)
                );
                let written = self
                    .send(plugin, Method::PATCH, path, content_type, patch, &what)
                    .await?;
                info!(plugin, "cluster: patched {target}{part}");
                Ok(written)
            }
            Write::Create {
                resource: gvk,
                namespace,
                json,
            } => {
                let mut object = parse(&json)?;
                fill_identity(&mut object, &gvk, namespace.as_deref());
                let namespace = object["metadata"]["namespace"].as_str().map(str::to_owned);
                let name = object["metadata"]["name"].as_str().unwrap_or_default();
                let what = format!("create {gvk} {name}");
                let resource = self.resource(&gvk, &what).await?;
                let path = collection_path(&resource, namespace.as_deref())
                    .ok_or_else(|| needs_namespace(&what, &gvk))?;
                let path = format!(
                    "{path}?{}",
                    write_query(&format!("kubeplug/{plugin}"), false)
                );
                let written = self
                    .send(
                        plugin,
                        Method::POST,
                        path,
                        "application/json",
                        object.to_string(),
                        &what,
                    )
                    .await?;
                info!(plugin, "cluster: created {gvk} {name}");
                Ok(written)
            }
            Write::Delete { target } => {
                let what = format!("delete {target}");
                let resource = self.resource(&target.resource, &what).await?;
                let path = object_path(&resource, &target, None)?;
                self.send(
                    plugin,
                    Method::DELETE,
                    path,
                    "application/json",
                    String::new(),
                    &what,
                )
                .await?;
                info!(plugin, "cluster: deleted {target}");
                Ok(String::new())
            }
            Write::RecordEvent {
                regarding,
                regarding_uid,
                severity,
                reason,
                message,
                reporting_controller,
            } => {
                let what = format!("record an Event on {regarding}");
                let events = Gvk::new("events.k8s.io", "v1", "Event");
                let resource = self.resource(&events, &what).await?;
                let event = NewEvent {
                    regarding: &regarding,
                    regarding_uid: regarding_uid.as_deref(),
                    severity,
                    reason: &reason,
                    message: &message,
                    reporting_controller: &reporting_controller,
                    reporting_instance: &self.instance,
                };
                let namespace = event.namespace();
                let severity = event.severity();
                let body = event.to_json(self.event_suffix()).to_string();
                let path = collection_path(&resource, Some(namespace))
                    .expect("Events are namespaced and have a namespace here");
                self.send(plugin, Method::POST, path, "application/json", body, &what)
                    .await?;
                // The note is the plugin's text: a newline in it must not forge a log line.
                let note = printable(&message);
                info!(plugin, "event: {severity} {reason} {regarding}: {note}");
                Ok(String::new())
            }
        }
    }

    /// A name suffix later than the last one and not before now (ns since the epoch).
    fn event_suffix(&self) -> u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let previous = self
            .last_event
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                Some(now.max(last + 1))
            })
            .expect("the update always succeeds");
        now.max(previous + 1)
    }

    /// Sends one request for `plugin` (its `User-Agent` names it); the body of a 2xx answer,
    /// else the `Status` as a [`WriteError`] naming `what`.
    async fn send(
        &self,
        plugin: &str,
        method: Method,
        path: String,
        content_type: &str,
        body: String,
        what: &str,
    ) -> Result<String, WriteError> {
        let unavailable = |reason: String| {
            WriteError::Unavailable(format!(
                "{what}: the API server at {} did not answer: {reason}",
                self.client.origin().address
            ))
        };
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::USER_AGENT, plugin_user_agent(plugin))
            .header(header::ACCEPT, "application/json")
            .header(header::CONTENT_TYPE, content_type)
            .body(Body::from(body.into_bytes()))
            .map_err(|e| WriteError::Invalid(format!("{what}: {e}")))?;
        let response = self
            .client
            .client()
            .send(request)
            .await
            .map_err(|e| unavailable(error_chain(&e)))?;
        let code = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| unavailable(error_chain(&e)))?
            .to_bytes();
        if code.is_success() {
            return Ok(String::from_utf8_lossy(&body).into_owned());
        }
        Err(status_error(&decode_status(code.as_u16(), &body), what))
    }
}

impl ClusterWriter for KubeWriter {
    fn write<'a>(
        &'a self,
        plugin: &'a str,
        write: Write,
    ) -> BoxFuture<'a, Result<String, WriteError>> {
        Box::pin(self.apply(plugin, write))
    }
}

/// The `reportingInstance` of this host's Events: the pod's name (`POD_NAME`, from the
/// downward API, else the host name, which Kubernetes sets to the pod's name), at most 128
/// characters as the API server requires.
pub(crate) fn reporting_instance() -> String {
    let name = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "kubeplug".to_owned());
    name.chars().take(MAX_INSTANCE_CHARS).collect()
}

/// The path of `resource`'s collection in `namespace`; `None` when the resource is
/// namespaced and no namespace is given.
fn collection_path(resource: &Resource, namespace: Option<&str>) -> Option<String> {
    if resource.namespaced && namespace.is_none_or(str::is_empty) {
        return None;
    }
    Some(paths::collection_path(resource, namespace))
}

/// The path of `target`, or of its `subresource`.
fn object_path(
    resource: &Resource,
    target: &ObjectRef,
    subresource: Option<&str>,
) -> Result<String, WriteError> {
    if resource.namespaced && target.namespace.is_none() {
        return Err(needs_namespace(&target.to_string(), &target.resource));
    }
    Ok(paths::object_path(
        resource,
        target.namespace.as_deref(),
        &target.name,
        subresource,
    ))
}

/// An error answer as the plugin sees it: the server's message, prefixed with `what`.
fn status_error(status: &Status, what: &str) -> WriteError {
    let message = format!("{what}: {}", status.message);
    match status.code {
        404 => WriteError::NotFound(message),
        409 => WriteError::Conflict(message),
        400 | 413 | 415 | 422 => WriteError::Invalid(message),
        // 401/403 (credentials, RBAC), 429 and 5xx: the cluster refused for now.
        _ => WriteError::Unavailable(format!("{what}: {status}")),
    }
}

fn needs_namespace(what: &str, gvk: &Gvk) -> WriteError {
    WriteError::Invalid(format!("{what}: {gvk} is namespaced; give a namespace"))
}

/// `fieldManager=…` and, to take over conflicting fields in an apply, `force=true`.
fn write_query(field_manager: &str, force: bool) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    query.append_pair("fieldManager", field_manager);
    if force {
        query.append_pair("force", "true");
    }
    query.finish()
}

fn parse(json: &str) -> Result<Value, WriteError> {
    match serde_json::from_str(json) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err(WriteError::Invalid("not a JSON object".to_owned())),
        Err(e) => Err(WriteError::Invalid(format!("not JSON: {e}"))),
    }
}

/// Fills in `apiVersion`, `kind` and `metadata.namespace` where the manifest leaves them
/// out: the API server requires them in an apply body, and a plugin names them already in
/// the write.
fn fill_identity(object: &mut Value, gvk: &Gvk, namespace: Option<&str>) {
    for (field, value) in [
        ("apiVersion", gvk.api_version()),
        ("kind", gvk.kind.clone()),
    ] {
        if object[field].is_null() {
            object[field] = Value::String(value);
        }
    }
    if !object["metadata"].is_object() {
        object["metadata"] = Value::Object(serde_json::Map::new());
    }
    if let Some(namespace) = namespace
        && object["metadata"]["namespace"].is_null()
    {
        object["metadata"]["namespace"] = Value::String(namespace.to_owned());
    }
}

/// At most `max` bytes of `text`, cut at a character boundary.
#[cfg(test)]
mod tests;
