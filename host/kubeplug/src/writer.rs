//! Plugin writes on the local cluster: applied to its in-memory state and reported in the log.

use std::sync::atomic::{AtomicU64, Ordering};

use kubeplug_informer::object::ObjectKey;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::source::Status;
use kubeplug_local::LocalCluster;
use kubeplug_memory::creation_timestamp;
use kubeplug_memory::status::Endpoint;
use kubeplug_policy::names::printable;
use kubeplug_runtime::view::{BoxFuture, PatchType, PatchedPart};
use kubeplug_runtime::{ClusterWriter, Gvk, ObjectRef, Write, WriteError};
use serde_json::Value;
use tracing::info;

use crate::event::NewEvent;

/// Writes to a [`LocalCluster`], as a real API server would apply them: server-side apply
/// merges the manifest into the stored object, patches are merge (RFC 7386) or JSON
/// (RFC 6902) patches, Events become `events.k8s.io/v1` objects; the `status` subresource
/// changes only the status, and nothing else does ([`Endpoint`]).
pub(crate) struct LocalWriter {
    cluster: LocalCluster,
    /// Makes Event names unique, as the API server's `generateName` would.
    events: AtomicU64,
}

impl LocalWriter {
    pub(crate) fn new(cluster: LocalCluster) -> Self {
        Self {
            cluster,
            events: AtomicU64::new(0),
        }
    }

    fn resource(&self, gvk: &Gvk) -> Result<Resource, WriteError> {
        self.cluster
            .resolve(&gvk.api_version(), &gvk.kind)
            .ok_or_else(|| WriteError::NotFound(format!("the local cluster serves no {gvk}")))
    }

    fn stored(&self, target: &ObjectRef) -> Result<(Resource, Value), WriteError> {
        let resource = self.resource(&target.resource)?;
        let key = ObjectKey::new(target.namespace.as_deref(), &target.name);
        let bytes = self
            .cluster
            .server()
            .get(&resource, &key)
            .ok_or_else(|| WriteError::NotFound(target.to_string()))?;
        let object = serde_json::from_slice(&bytes)
            .map_err(|e| WriteError::Unavailable(format!("{target} is stored as bad JSON: {e}")))?;
        Ok((resource, object))
    }

    fn apply(&self, plugin: &str, write: Write) -> Result<String, WriteError> {
        let server = self.cluster.server();
        let (resource, object, what) = match write {
            Write::Apply { target, json, .. } => {
                let manifest = parse(&json)?;
                let (resource, object) = match self.stored(&target) {
                    Ok((resource, stored)) => {
                        let mut applied = stored.clone();
                        json_patch::merge(&mut applied, &manifest);
                        (resource, Endpoint::Object.stored(Some(&stored), applied))
                    }
                    Err(WriteError::NotFound(_)) => (
                        self.resource(&target.resource)?,
                        created(Endpoint::Object.stored(None, manifest)),
                    ),
                    Err(error) => return Err(error),
                };
                (resource, object, format!("applied {target}"))
            }
            Write::Patch {
                target,
                patch_type,
                patch,
                part,
            } => {
                let (resource, stored) = self.stored(&target)?;
                let patch = parse(&patch)?;
                let mut object = stored.clone();
                match patch_type {
                    PatchType::Merge => json_patch::merge(&mut object, &patch),
                    PatchType::Json => {
                        let patch: json_patch::Patch = serde_json::from_value(patch)
                            .map_err(|e| WriteError::Invalid(format!("JSON patch: {e}")))?;
                        json_patch::patch(&mut object, &patch).map_err(|e| {
                            WriteError::Invalid(format!("JSON patch on {target}: {e}"))
                        })?;
                    }
                }
                // As the API server: a patch cannot move the object.
                for (field, expected) in [
                    ("name", Some(target.name.as_str())),
                    ("namespace", target.namespace.as_deref()),
                ] {
                    if object["metadata"][field].as_str() != expected {
                        return Err(WriteError::Invalid(format!(
                            "patch on {target}: metadata.{field} cannot change"
                        )));
                    }
                }
                let endpoint = match part {
                    PatchedPart::Status => Endpoint::Status,
                    PatchedPart::Object => Endpoint::Object,
                };
                let object = endpoint.stored(Some(&stored), object);
                let part = part
                    .subresource()
                    .map(|s| format!(" ({s})"))
                    .unwrap_or_default();
                (resource, object, format!("patched {target}{part}"))
            }
            Write::Create {
                resource,
                namespace,
                json,
            } => {
                let mut object = created(Endpoint::Object.stored(None, parse(&json)?));
                if let Some(namespace) = namespace {
                    object["metadata"]["namespace"] = Value::String(namespace);
                }
                let what = format!("created {resource} {}", object["metadata"]["name"]);
                let resource = self.resource(&resource)?;
                let json = object.to_string();
                let written = server.create(&resource, &json).map_err(status_error)?;
                info!(plugin, "local cluster: {what}");
                return Ok(String::from_utf8_lossy(&written.json).into_owned());
            }
            Write::Delete { target } => {
                let resource = self.resource(&target.resource)?;
                let key = ObjectKey::new(target.namespace.as_deref(), &target.name);
                server.delete(&resource, &key).map_err(status_error)?;
                info!(plugin, "local cluster: deleted {target}");
                return Ok(String::new());
            }
            Write::RecordEvent {
                regarding,
                regarding_uid,
                severity,
                reason,
                message,
                reporting_controller,
            } => {
                let events = self.resource(&Gvk::new("events.k8s.io", "v1", "Event"))?;
                let event = NewEvent {
                    regarding: &regarding,
                    regarding_uid: regarding_uid.as_deref(),
                    severity,
                    reason: &reason,
                    message: &message,
                    reporting_controller: &reporting_controller,
                    reporting_instance: "kubeplug-local",
                };
                let severity = event.severity();
                let number = self.events.fetch_add(1, Ordering::Relaxed);
                let event = created(event.to_json(number));
                server
                    .create(&events, &event.to_string())
                    .map_err(status_error)?;
                // The note is the plugin's text: a newline in it must not forge a log line.
                let note = printable(&message);
                info!(plugin, "event: {severity} {reason} {regarding}: {note}");
                return Ok(String::new());
            }
        };
        let written = server
            .apply(&resource, &object.to_string())
            .map_err(status_error)?;
        info!(
            plugin,
            rv = written.resource_version,
            "local cluster: {what}"
        );
        Ok(String::from_utf8_lossy(&written.json).into_owned())
    }
}

impl ClusterWriter for LocalWriter {
    fn write<'a>(
        &'a self,
        plugin: &'a str,
        write: Write,
    ) -> BoxFuture<'a, Result<String, WriteError>> {
        let result = self.apply(plugin, write);
        Box::pin(async move { result })
    }
}

/// `object` with `metadata.creationTimestamp` now (whole seconds, as the API server writes
/// it) unless it carries one: what a real server does on create, and kubectl's AGE reads.
fn created(mut object: Value) -> Value {
    if object.is_object() && object["metadata"].get("creationTimestamp").is_none() {
        object["metadata"]["creationTimestamp"] = Value::String(creation_timestamp());
    }
    object
}

fn parse(json: &str) -> Result<Value, WriteError> {
    serde_json::from_str(json).map_err(|e| WriteError::Invalid(format!("not JSON: {e}")))
}

fn status_error(status: Status) -> WriteError {
    match status.code {
        404 => WriteError::NotFound(status.message),
        409 => WriteError::Conflict(status.message),
        400 | 422 => WriteError::Invalid(status.message),
        _ => WriteError::Unavailable(status.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;
    use kubeplug_runtime::view::EventSeverity;

    /// As on kube-apiserver (the kube writer's tests show it there): the status subresource
    /// changes only the status, the object's own writes never do.
    #[tokio::test]
    async fn only_the_status_subresource_writes_status() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("web.yaml"),
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: ns\n\
             spec:\n  replicas: 1\nstatus:\n  replicas: 1\n",
        )
        .unwrap();
        let (cluster, _) = LocalCluster::open(dir.path()).unwrap();
        let writer = LocalWriter::new(cluster.clone());
        let target = ObjectRef {
            resource: Gvk::new("apps", "v1", "Deployment"),
            namespace: Some("ns".into()),
            name: "web".into(),
        };
        let patch = |patch: &str, part: PatchedPart| Write::Patch {
            target: target.clone(),
            patch_type: PatchType::Merge,
            patch: patch.into(),
            part,
        };
        for write in [
            patch(
                r#"{"spec":{"replicas":2},"status":{"replicas":9}}"#,
                PatchedPart::Object,
            ),
            patch(
                r#"{"spec":{"replicas":9},"metadata":{"labels":{"s":"t"}},"status":{"replicas":3}}"#,
                PatchedPart::Status,
            ),
        ] {
            writer.write("test", write).await.unwrap();
        }
        let (_, stored) = writer.stored(&target).unwrap();
        assert_eq!(stored["spec"]["replicas"], 2, "{stored}");
        assert_eq!(stored["status"]["replicas"], 3, "{stored}");
        assert_eq!(stored["metadata"].get("labels"), None, "{stored}");
    }

    /// Regression (issue 19): a merge patch naming another namespace wrote `kube-system/c`
    /// for a target in `ns`. As on the API server, a patch cannot move its object.
    #[tokio::test]
    async fn a_patch_cannot_move_its_object() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("cm.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: ns\n",
        )
        .unwrap();
        let (cluster, _) = LocalCluster::open(dir.path()).unwrap();
        let writer = LocalWriter::new(cluster.clone());
        let target = ObjectRef {
            resource: Gvk::new("", "v1", "ConfigMap"),
            namespace: Some("ns".into()),
            name: "c".into(),
        };
        for (patch_type, patch) in [
            (
                PatchType::Merge,
                r#"{"metadata":{"namespace":"kube-system"}}"#,
            ),
            (
                PatchType::Json,
                r#"[{"op":"replace","path":"/metadata/name","value":"d"}]"#,
            ),
        ] {
            let error = writer
                .write(
                    "test",
                    Write::Patch {
                        target: target.clone(),
                        patch_type,
                        patch: patch.into(),
                        part: PatchedPart::Object,
                    },
                )
                .await
                .unwrap_err();
            assert!(
                matches!(&error, WriteError::Invalid(m) if m.contains("cannot change")),
                "{error:?}"
            );
        }
        let config_maps = cluster.resolve("v1", "ConfigMap").unwrap();
        let keys: Vec<String> = cluster
            .server()
            .snapshot(&config_maps)
            .keys()
            .map(ToString::to_string)
            .collect();
        assert_eq!(keys, ["ns/c"]);
    }

    #[tokio::test]
    async fn writes_reach_the_local_state() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("cm.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: ns\ndata:\n  a: b\n",
        )
        .unwrap();
        let (cluster, _) = LocalCluster::open(dir.path()).unwrap();
        let writer = LocalWriter::new(cluster.clone());
        let target = ObjectRef {
            resource: Gvk::new("", "v1", "ConfigMap"),
            namespace: Some("ns".into()),
            name: "c".into(),
        };
        let patched = writer
            .write(
                "test",
                Write::Patch {
                    target: target.clone(),
                    patch_type: PatchType::Merge,
                    patch: r#"{"data":{"x":"y"}}"#.into(),
                    part: PatchedPart::Object,
                },
            )
            .await
            .unwrap();
        let patched: Value = serde_json::from_str(&patched).unwrap();
        assert_eq!(patched["data"], serde_json::json!({"a": "b", "x": "y"}));

        writer
            .write(
                "test",
                Write::RecordEvent {
                    regarding: target.clone(),
                    regarding_uid: None,
                    severity: EventSeverity::Warning,
                    reason: "MissingLabel".into(),
                    message: "no app label".into(),
                    reporting_controller: "kubeplug/test".into(),
                },
            )
            .await
            .unwrap();
        let events = cluster.resolve("events.k8s.io/v1", "Event").unwrap();
        let stored = cluster.server().snapshot(&events);
        let event: Value = serde_json::from_slice(stored.values().next().unwrap()).unwrap();
        assert_eq!(
            (event["reason"].as_str(), event["type"].as_str()),
            (Some("MissingLabel"), Some("Warning"))
        );
        // As the API server sets on create.
        let stamped = event["metadata"]["creationTimestamp"].as_str().unwrap();
        assert!(stamped.parse::<Timestamp>().is_ok(), "{stamped}");

        let missing = ObjectRef {
            name: "nope".into(),
            ..target
        };
        let error = writer
            .write("test", Write::Delete { target: missing })
            .await
            .unwrap_err();
        assert!(matches!(error, WriteError::NotFound(_)), "{error:?}");
    }
}
