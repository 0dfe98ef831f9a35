//! Plugin writes on the local cluster: applied to its in-memory state and reported in the log.

use std::sync::atomic::{AtomicU64, Ordering};

use kubeplug_informer::object::ObjectKey;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::source::Status;
use kubeplug_local::LocalCluster;
use kubeplug_runtime::view::{BoxFuture, PatchType};
use kubeplug_runtime::{ClusterWriter, Gvk, ObjectRef, Write, WriteError};
use serde_json::Value;
use tracing::info;

use crate::event::NewEvent;

/// Writes to a [`LocalCluster`], as a real API server would apply them: server-side apply
/// merges the manifest into the stored object, patches are merge (RFC 7386) or JSON
/// (RFC 6902) patches, Events become `events.k8s.io/v1` objects.
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
                    Ok((resource, mut stored)) => {
                        merge(&mut stored, manifest);
                        (resource, stored)
                    }
                    Err(WriteError::NotFound(_)) => (self.resource(&target.resource)?, manifest),
                    Err(error) => return Err(error),
                };
                (resource, object, format!("applied {target}"))
            }
            Write::Patch {
                target,
                patch_type,
                patch,
                subresource,
            } => {
                let (resource, mut object) = self.stored(&target)?;
                let patch = parse(&patch)?;
                match (patch_type, subresource.as_deref()) {
                    (PatchType::Merge, _) => merge(&mut object, patch),
                    (PatchType::Json, _) => {
                        let patch: json_patch::Patch = serde_json::from_value(patch)
                            .map_err(|e| WriteError::Invalid(format!("JSON patch: {e}")))?;
                        json_patch::patch(&mut object, &patch).map_err(|e| {
                            WriteError::Invalid(format!("JSON patch on {target}: {e}"))
                        })?;
                    }
                }
                let part = subresource.map(|s| format!(" ({s})")).unwrap_or_default();
                (resource, object, format!("patched {target}{part}"))
            }
            Write::Create {
                resource,
                namespace,
                json,
            } => {
                let mut object = parse(&json)?;
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
                severity,
                reason,
                message,
                reporting_controller,
            } => {
                let events = self.resource(&Gvk::new("events.k8s.io", "v1", "Event"))?;
                let event = NewEvent {
                    regarding: &regarding,
                    severity,
                    reason: &reason,
                    message: &message,
                    reporting_controller: &reporting_controller,
                    reporting_instance: "kubeplug-local",
                };
                let severity = event.severity();
                let number = self.events.fetch_add(1, Ordering::Relaxed);
                let event = event.to_json(number);
                server
                    .create(&events, &event.to_string())
                    .map_err(status_error)?;
                info!(plugin, "event: {severity} {reason} {regarding}: {message}");
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

fn parse(json: &str) -> Result<Value, WriteError> {
    serde_json::from_str(json).map_err(|e| WriteError::Invalid(format!("not JSON: {e}")))
}

/// RFC 7386 merge patch: objects merge recursively, `null` removes, anything else replaces.
fn merge(target: &mut Value, patch: Value) {
    let Value::Object(patch) = patch else {
        *target = patch;
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    let target = target.as_object_mut().expect("made an object above");
    for (key, value) in patch {
        if value.is_null() {
            target.remove(&key);
        } else {
            merge(target.entry(key).or_insert(Value::Null), value);
        }
    }
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
    use kubeplug_runtime::view::EventSeverity;

    #[test]
    fn merge_follows_rfc_7386() {
        let mut target = serde_json::json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge(&mut target, serde_json::json!({"a": "z", "c": {"f": null}}));
        assert_eq!(target, serde_json::json!({"a": "z", "c": {"d": "e"}}));
        merge(&mut target, serde_json::json!({"a": [1]}));
        assert_eq!(target["a"], serde_json::json!([1]));
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
                    subresource: None,
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
