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
use kubeplug_kube::wire::decode_status;
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
                subresource,
            } => {
                let part = subresource
                    .as_deref()
                    .map(|s| format!(" ({s})"))
                    .unwrap_or_default();
                let what = format!("patch {target}{part}");
                let resource = self.resource(&target.resource, &what).await?;
                let path = object_path(&resource, &target, subresource.as_deref())?;
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
                info!(plugin, "event: {severity} {reason} {regarding}: {message}");
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

/// `…/namespaces/{ns}/{plural}` or `…/{plural}`; `None` when the resource is namespaced and
/// no namespace is given. A namespace given for a cluster-scoped resource is ignored.
fn collection_path(resource: &Resource, namespace: Option<&str>) -> Option<String> {
    let mut path = if resource.group.is_empty() {
        format!("/api/{}", resource.version)
    } else {
        format!("/apis/{}/{}", resource.group, resource.version)
    };
    if resource.namespaced {
        path.push_str("/namespaces/");
        path.push_str(namespace?);
    }
    path.push('/');
    path.push_str(&resource.plural);
    Some(path)
}

/// The path of `target`, or of its `subresource`.
fn object_path(
    resource: &Resource,
    target: &ObjectRef,
    subresource: Option<&str>,
) -> Result<String, WriteError> {
    let mut path = collection_path(resource, target.namespace.as_deref())
        .ok_or_else(|| needs_namespace(&target.to_string(), &target.resource))?;
    path.push('/');
    path.push_str(&target.name);
    if let Some(subresource) = subresource {
        path.push('/');
        path.push_str(subresource);
    }
    Ok(path)
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
mod tests {
    use kubeplug_fake_apiserver::{FakeApiServer, FakeOptions};
    use kubeplug_kube::config::ConfigSource;
    use kubeplug_runtime::view::EventSeverity;

    use super::*;

    fn deployments() -> Resource {
        Resource::new("apps", "v1", "Deployment", "deployments", true)
    }

    fn target(name: &str) -> ObjectRef {
        ObjectRef {
            resource: Gvk::new("apps", "v1", "Deployment"),
            namespace: Some("team-a".into()),
            name: name.into(),
        }
    }

    /// A fake server serving Deployments, one of them (`web`) stored, and a writer on it.
    async fn setup(options: FakeOptions) -> (FakeApiServer, KubeWriter, tempfile::TempDir) {
        let server = FakeApiServer::start(options).await.unwrap();
        server.serve(deployments());
        server
            .memory()
            .create(
                &deployments(),
                r#"{"metadata":{"name":"web","namespace":"team-a","labels":{"a":"b"}},"spec":{"replicas":1},"status":{"replicas":0}}"#,
            )
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let writer = writer_for(&server.write_kubeconfig(dir.path()).unwrap()).await;
        (server, writer, dir)
    }

    async fn writer_for(kubeconfig: &std::path::Path) -> KubeWriter {
        let source = ConfigSource::Kubeconfig {
            path: kubeconfig.to_owned(),
            context: None,
        };
        let client = KubeClient::from_source(&source).await.unwrap();
        KubeWriter::new(client.clone(), Discovery::new(client), "host-1".into())
    }

    fn stored(server: &FakeApiServer, name: &str) -> Value {
        let key = kubeplug_informer::object::ObjectKey::new(Some("team-a"), name);
        serde_json::from_slice(&server.memory().get(&deployments(), &key).unwrap()).unwrap()
    }

    #[tokio::test]
    async fn apply_creates_then_merges_under_the_field_manager() {
        let (server, writer, _dir) = setup(FakeOptions::default()).await;
        for (name, json) in [
            ("new", r#"{"metadata":{"labels":{"x":"1"}}}"#),
            ("web", r#"{"metadata":{"labels":{"x":"1"}}}"#),
        ] {
            let written = writer
                .write(
                    "test",
                    Write::Apply {
                        target: target(name),
                        json: json.into(),
                        force: true,
                        field_manager: "kubeplug/test".into(),
                    },
                )
                .await
                .unwrap();
            let written: Value = serde_json::from_str(&written).unwrap();
            assert_eq!(written["metadata"]["labels"]["x"], "1", "{written}");
            let object = stored(&server, name);
            assert_eq!(object["metadata"]["labels"]["x"], "1");
            assert_eq!(
                object["metadata"]["managedFields"][0]["manager"],
                "kubeplug/test"
            );
        }
        assert_eq!(stored(&server, "web")["metadata"]["labels"]["a"], "b");
        let applies: Vec<_> = server
            .requests()
            .into_iter()
            .filter(|r| r.method == "PATCH")
            .map(|r| r.uri)
            .collect();
        assert_eq!(
            applies,
            [
                "/apis/apps/v1/namespaces/team-a/deployments/new?fieldManager=kubeplug%2Ftest&force=true",
                "/apis/apps/v1/namespaces/team-a/deployments/web?fieldManager=kubeplug%2Ftest&force=true",
            ]
        );
    }

    #[tokio::test]
    async fn patches_reach_the_object_or_its_status() {
        let (server, writer, _dir) = setup(FakeOptions::default()).await;
        let patch = |patch_type, patch: &str, subresource: Option<&str>| Write::Patch {
            target: target("web"),
            patch_type,
            patch: patch.into(),
            subresource: subresource.map(str::to_owned),
        };
        writer
            .write(
                "test",
                patch(PatchType::Merge, r#"{"spec":{"replicas":3}}"#, None),
            )
            .await
            .unwrap();
        writer
            .write(
                "test",
                patch(
                    PatchType::Json,
                    r#"[{"op":"add","path":"/metadata/labels/j","value":"k"}]"#,
                    None,
                ),
            )
            .await
            .unwrap();
        writer
            .write(
                "test",
                patch(
                    PatchType::Merge,
                    r#"{"status":{"replicas":3}}"#,
                    Some("status"),
                ),
            )
            .await
            .unwrap();
        let object = stored(&server, "web");
        assert_eq!(object["spec"]["replicas"], 3);
        assert_eq!(object["metadata"]["labels"]["j"], "k");
        assert_eq!(object["status"]["replicas"], 3);
        let error = writer
            .write(
                "test",
                patch(PatchType::Json, r#"[{"op":"remove","path":"/nope"}]"#, None),
            )
            .await
            .unwrap_err();
        assert!(matches!(error, WriteError::Invalid(_)), "{error:?}");
    }

    #[tokio::test]
    async fn create_and_delete_and_their_errors() {
        let (server, writer, _dir) = setup(FakeOptions::default()).await;
        let create = |name: &str| Write::Create {
            resource: Gvk::new("apps", "v1", "Deployment"),
            namespace: Some("team-a".into()),
            json: format!(r#"{{"metadata":{{"name":"{name}"}},"spec":{{"replicas":2}}}}"#),
        };
        let created = writer.write("test", create("api")).await.unwrap();
        let created: Value = serde_json::from_str(&created).unwrap();
        assert!(
            created["metadata"]["resourceVersion"].is_string(),
            "{created}"
        );
        assert_eq!(stored(&server, "api")["spec"]["replicas"], 2);

        let error = writer.write("test", create("api")).await.unwrap_err();
        assert!(
            matches!(&error, WriteError::Conflict(m) if m.contains("api") && m.contains("already exists")),
            "{error:?}"
        );
        let error = writer
            .write("test", create("Not_A_Name"))
            .await
            .unwrap_err();
        assert!(
            matches!(&error, WriteError::Invalid(m) if m.contains("Not_A_Name")),
            "{error:?}"
        );

        let delete = || Write::Delete {
            target: target("api"),
        };
        assert_eq!(writer.write("test", delete()).await.unwrap(), "");
        let error = writer.write("test", delete()).await.unwrap_err();
        assert!(
            matches!(&error, WriteError::NotFound(m) if m.contains("team-a/api")),
            "{error:?}"
        );
        let unserved = Write::Delete {
            target: ObjectRef {
                resource: Gvk::new("example.com", "v1", "Widget"),
                ..target("w")
            },
        };
        let error = writer.write("test", unserved).await.unwrap_err();
        assert!(
            matches!(&error, WriteError::NotFound(m) if m.contains("example.com/v1")),
            "{error:?}"
        );
    }

    #[tokio::test]
    async fn events_are_events_k8s_io_v1_objects() {
        let (server, writer, _dir) = setup(FakeOptions::default()).await;
        for _ in 0..2 {
            writer
                .write(
                    "test",
                    Write::RecordEvent {
                        regarding: target("web"),
                        severity: EventSeverity::Warning,
                        reason: "MissingLabels".into(),
                        message: "é".repeat(600),
                        reporting_controller: "kubeplug/test".into(),
                    },
                )
                .await
                .unwrap();
        }
        let events = Resource::new("events.k8s.io", "v1", "Event", "events", true);
        let stored = server.memory().snapshot(&events);
        assert_eq!(stored.len(), 2, "names are unique");
        let event: Value = serde_json::from_slice(stored.values().next().unwrap()).unwrap();
        assert_eq!(event["metadata"]["namespace"], "team-a");
        assert!(
            event["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("web.")
        );
        assert_eq!(
            event["regarding"],
            serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "team-a", "name": "web"})
        );
        for (field, value) in [
            ("type", "Warning"),
            ("reason", "MissingLabels"),
            ("action", "MissingLabels"),
            ("reportingController", "kubeplug/test"),
            ("reportingInstance", "host-1"),
        ] {
            assert_eq!(event[field], value, "{field}");
        }
        assert_eq!(event["note"].as_str().unwrap().len(), 1024);
        // RFC 3339 with microseconds, as `MicroTime`: 2026-11-29T08:34:24.123456Z.
        let time = event["eventTime"].as_str().unwrap();
        assert_eq!(
            (time.len(), &time[19..20], &time[26..]),
            (27, ".", "Z"),
            "{time}"
        );
    }

    #[tokio::test]
    async fn refusals_and_an_unreachable_server_are_unavailable() {
        let (server, _, dir) = setup(FakeOptions {
            bearer_token: Some("secret".into()),
            ..FakeOptions::default()
        })
        .await;
        // A kubeconfig without the token: every request is 401.
        let yaml = server.kubeconfig_yaml(None).replace("token: secret", "{}");
        let path = dir.path().join("no-token");
        std::fs::write(&path, yaml).unwrap();
        let writer = writer_for(&path).await;
        let error = writer
            .write(
                "test",
                Write::Delete {
                    target: target("web"),
                },
            )
            .await
            .unwrap_err();
        assert!(matches!(error, WriteError::Unavailable(_)), "{error:?}");

        let address = server.address().to_owned();
        let writer = writer_for(&server.write_kubeconfig(dir.path()).unwrap()).await;
        drop(server);
        let error = writer
            .write(
                "test",
                Write::Delete {
                    target: target("web"),
                },
            )
            .await
            .unwrap_err();
        assert!(
            matches!(&error, WriteError::Unavailable(m) if m.contains(&address) && m.contains("team-a/web")),
            "{error:?}"
        );
    }

    #[test]
    fn status_codes_map_to_write_errors() {
        for (code, expected) in [
            (404, "not found"),
            (409, "conflict"),
            (400, "invalid"),
            (422, "invalid"),
            (401, "unavailable"),
            (403, "unavailable"),
            (429, "unavailable"),
            (500, "unavailable"),
            (503, "unavailable"),
        ] {
            let status = Status::new(code, "Reason", "the message");
            let error = status_error(&status, "patch apps/v1/Deployment team-a/web");
            let text = error.to_string();
            assert!(text.starts_with(expected), "{code}: {text}");
            assert!(
                text.contains("team-a/web") && text.contains("the message"),
                "{text}"
            );
        }
    }
}
