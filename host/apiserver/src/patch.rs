//! JSON helpers of the server's writes: JSON patch (RFC 6902, through the `json-patch` crate,
//! whose `merge` is the merge patch), the managed-fields set of an apply, name validation and
//! timestamps. Writes through this API are a person's `kubectl` or a test, never the
//! informers' hot path, so a `serde_json::Value` tree per write is fine.

use serde_json::{Map, Value};

/// Why a patch does not apply: a `422 Invalid`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PatchError {
    /// The JSON patch is not a list of RFC 6902 operations.
    #[error("the JSON patch is malformed")]
    Malformed(#[source] serde_json::Error),
    /// An operation of the JSON patch failed: which one, at which path, and why.
    #[error(transparent)]
    Failed(#[from] json_patch::PatchError),
    /// A server-side apply names no field manager.
    #[error(
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required \
         for apply patch"
    )]
    NoFieldManager,
}

impl PatchError {
    /// The message of the `422` answer: the error with its cause, in one line as
    /// kube-apiserver writes it.
    pub(crate) fn message(&self) -> String {
        match self {
            Self::Malformed(cause) => format!("{self}: {cause}"),
            Self::Failed(_) | Self::NoFieldManager => self.to_string(),
        }
    }
}

/// Applies an RFC 6902 JSON patch; the error says which operation failed, as the API
/// server's 422 does.
pub(crate) fn json_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let patch: json_patch::Patch =
        serde_json::from_value(patch.clone()).map_err(PatchError::Malformed)?;
    Ok(json_patch::patch(target, &patch)?)
}

/// The `fieldsV1` set of an applied configuration: every member path as `f:<name>`, with
/// `apiVersion`, `kind`, `metadata.name` and `metadata.namespace` left out, as the API server
/// records them.
pub(crate) fn fields_v1(applied: &Value) -> Value {
    fn walk(value: &Value, top: bool, in_metadata: bool) -> Value {
        let mut out = Map::new();
        if let Value::Object(map) = value {
            for (key, child) in map {
                if top && (key == "apiVersion" || key == "kind") {
                    continue;
                }
                if in_metadata && (key == "name" || key == "namespace") {
                    continue;
                }
                let sub = walk(child, false, top && key == "metadata");
                if top && key == "metadata" && sub.as_object().is_some_and(Map::is_empty) {
                    continue;
                }
                out.insert(format!("f:{key}"), sub);
            }
        }
        Value::Object(out)
    }
    walk(applied, true, false)
}

/// The API server's message for a name that is not a DNS subdomain
/// (`kubeplug_policy::names::is_dns_subdomain`).
pub(crate) const SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower \
case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character \
(e.g. 'example.com', regex used for validation is \
'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_patch_operations() {
        let mut doc = json!({"spec": {"list": [1, 2]}, "x": 1});
        json_patch(
            &mut doc,
            &json!([
                {"op": "add", "path": "/spec/list/-", "value": 3},
                {"op": "replace", "path": "/x", "value": 2},
                {"op": "test", "path": "/x", "value": 2},
                {"op": "move", "from": "/x", "path": "/y"},
                {"op": "remove", "path": "/spec/list/0"}
            ]),
        )
        .unwrap();
        assert_eq!(doc, json!({"spec": {"list": [2, 3]}, "y": 2}));
        let error = json_patch(&mut doc, &json!([{"op": "test", "path": "/y", "value": 9}]));
        let error = error.unwrap_err();
        assert!(matches!(error, PatchError::Failed(_)), "{error:?}");
        assert!(error.message().contains("/y"), "{error}");
        let error = json_patch(&mut doc, &json!([{"op": "explode", "path": "/y"}])).unwrap_err();
        assert!(matches!(error, PatchError::Malformed(_)), "{error:?}");
        let message = error.message();
        assert!(
            message.starts_with("the JSON patch is malformed: ") && message.contains("explode"),
            "{message}"
        );
    }

    #[test]
    fn fields_of_an_apply_like_the_captured_one() {
        let applied = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "applied", "labels": {"owner": "kubeplug"}}, "data": {"a": "1"}});
        assert_eq!(
            fields_v1(&applied),
            json!({"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:owner": {}}}})
        );
    }
}
