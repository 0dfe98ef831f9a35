//! What a write may change of an object's `status`, as kube-apiserver decides for every type
//! with a status subresource (the built-in types that have a status, and custom resources
//! that enable it): a write through the object's own endpoint (create, update, patch, apply)
//! leaves its status as it was, and a write through its `status` subresource changes its
//! status alone. The fake API server and the local cluster's writer both follow this;
//! manifests read from files are the cluster's state rather than writes, and keep their status.
//!
//! Custom resources without a status subresource let the object's endpoint write `status`
//! on a real server; here every type is treated as having one.

use serde_json::Value;

/// The endpoint a write came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// The object itself: `.../NAME`, or its collection for a creation.
    Object,
    /// Its `status` subresource: `.../NAME/status`.
    Status,
}

impl Endpoint {
    /// The object to store for a write through this endpoint that would turn `current`
    /// (`None` for a creation) into `written`: the status from `current` and the rest from
    /// `written` for [`Object`](Self::Object); for [`Status`](Self::Status), `current` with
    /// `written`'s status, and `written`'s `resourceVersion` (a precondition) and
    /// `managedFields` (what a server-side apply recorded).
    pub fn stored(self, current: Option<&Value>, mut written: Value) -> Value {
        match (self, current) {
            (Endpoint::Object, current) => {
                let status = current.and_then(|c| c.get("status")).cloned();
                set_or_remove(&mut written, "status", status);
                written
            }
            (Endpoint::Status, None) => written,
            (Endpoint::Status, Some(current)) => {
                let mut stored = current.clone();
                set_or_remove(&mut stored, "status", written.get("status").cloned());
                for field in ["resourceVersion", "managedFields"] {
                    let value = written["metadata"].get(field).cloned();
                    if let Some(metadata) = stored.get_mut("metadata") {
                        set_or_remove(metadata, field, value);
                    }
                }
                stored
            }
        }
    }
}

/// Sets `object[key]` to `value`, or removes the key for `None`.
fn set_or_remove(object: &mut Value, key: &str, value: Option<Value>) {
    let Some(map) = object.as_object_mut() else {
        return;
    };
    match value {
        Some(value) => {
            map.insert(key.to_owned(), value);
        }
        None => {
            map.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn current() -> Value {
        json!({"metadata": {"name": "web", "labels": {"a": "b"}, "resourceVersion": "4"},
               "spec": {"replicas": 1}, "status": {"replicas": 1}})
    }

    #[test]
    fn the_object_endpoint_keeps_the_status_and_a_creation_sets_none() {
        let written = json!({"metadata": {"name": "web"}, "spec": {"replicas": 3},
                             "status": {"replicas": 9}});
        let stored = Endpoint::Object.stored(Some(&current()), written.clone());
        assert_eq!(stored["spec"]["replicas"], 3);
        assert_eq!(stored["status"], json!({"replicas": 1}));
        let created = Endpoint::Object.stored(None, written);
        assert_eq!(created.get("status"), None);
    }

    #[test]
    fn the_status_endpoint_changes_only_the_status() {
        let written = json!({"metadata": {"name": "web", "labels": {"s": "t"},
                                          "resourceVersion": "4", "managedFields": [{"manager": "m"}]},
                             "spec": {"replicas": 9}, "status": {"replicas": 3}});
        let stored = Endpoint::Status.stored(Some(&current()), written);
        assert_eq!(stored["spec"]["replicas"], 1);
        assert_eq!(stored["metadata"]["labels"], json!({"a": "b"}));
        assert_eq!(
            stored["metadata"]["managedFields"],
            json!([{"manager": "m"}])
        );
        assert_eq!(stored["status"], json!({"replicas": 3}));
    }
}
