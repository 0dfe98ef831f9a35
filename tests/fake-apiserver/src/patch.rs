//! JSON helpers of the fake server's writes: merge patch (RFC 7386), JSON patch (RFC 6902,
//! the `add`, `remove`, `replace`, `test`, `copy` and `move` operations), the managed-fields
//! set of an apply, name validation and timestamps. Trees are fine here: this is test code.

use serde_json::{Map, Value};

/// Applies an RFC 7386 merge patch to `target`.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let map = target.as_object_mut().expect("made an object above");
    for (key, value) in patch {
        if value.is_null() {
            map.remove(key);
        } else {
            merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// Applies an RFC 6902 JSON patch; the error says which operation failed.
pub(crate) fn json_patch(target: &mut Value, patch: &Value) -> Result<(), String> {
    let ops = patch
        .as_array()
        .ok_or_else(|| "a JSON patch must be an array of operations".to_owned())?;
    for (i, op) in ops.iter().enumerate() {
        let field = |name: &str| {
            op.get(name)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("operation {i}: missing {name:?}"))
        };
        let path = field("path")?;
        match field("op")? {
            "add" => add(target, path, value_of(op, i)?)?,
            "replace" => {
                remove(target, path).map_err(|e| format!("operation {i}: {e}"))?;
                add(target, path, value_of(op, i)?)?;
            }
            "remove" => {
                remove(target, path).map_err(|e| format!("operation {i}: {e}"))?;
            }
            "test" => {
                if target.pointer(path) != Some(&value_of(op, i)?) {
                    return Err(format!("operation {i}: test of {path} failed"));
                }
            }
            "copy" | "move" => {
                let from = field("from")?;
                let value = if field("op")? == "move" {
                    remove(target, from).map_err(|e| format!("operation {i}: {e}"))?
                } else {
                    target
                        .pointer(from)
                        .cloned()
                        .ok_or_else(|| format!("operation {i}: {from} does not exist"))?
                };
                add(target, path, value)?;
            }
            other => return Err(format!("operation {i}: unsupported op {other:?}")),
        }
    }
    Ok(())
}

fn value_of(op: &Value, i: usize) -> Result<Value, String> {
    op.get("value")
        .cloned()
        .ok_or_else(|| format!("operation {i}: missing \"value\""))
}

fn split(path: &str) -> Result<(String, String), String> {
    let (parent, last) = path
        .rsplit_once('/')
        .ok_or_else(|| format!("bad JSON pointer {path:?}"))?;
    let last = last.replace("~1", "/").replace("~0", "~");
    Ok((parent.to_owned(), last))
}

fn add(target: &mut Value, path: &str, value: Value) -> Result<(), String> {
    if path.is_empty() {
        *target = value;
        return Ok(());
    }
    let (parent, last) = split(path)?;
    match target.pointer_mut(&parent) {
        Some(Value::Object(map)) => {
            map.insert(last, value);
            Ok(())
        }
        Some(Value::Array(items)) => {
            let at = if last == "-" {
                items.len()
            } else {
                last.parse::<usize>()
                    .ok()
                    .filter(|i| *i <= items.len())
                    .ok_or_else(|| format!("bad array index in {path}"))?
            };
            items.insert(at, value);
            Ok(())
        }
        _ => Err(format!("the parent of {path} does not exist")),
    }
}

fn remove(target: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, last) = split(path)?;
    let missing = || format!("{path} does not exist");
    match target.pointer_mut(&parent) {
        Some(Value::Object(map)) => map.remove(&last).ok_or_else(missing),
        Some(Value::Array(items)) => {
            let i = last
                .parse::<usize>()
                .ok()
                .filter(|i| *i < items.len())
                .ok_or_else(missing)?;
            Ok(items.remove(i))
        }
        _ => Err(missing()),
    }
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

/// Whether `name` is a lowercase RFC 1123 subdomain, as object names must be.
pub(crate) fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// The API server's message for an invalid name.
pub(crate) const SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower \
case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character \
(e.g. 'example.com', regex used for validation is \
'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// Now as RFC 3339 in UTC, to the second, as `metadata.creationTimestamp`.
pub(crate) fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil-from-days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut doc = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut doc, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(doc, json!({"a": "z", "c": {"d": "e"}}));
    }

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
        assert!(error.unwrap_err().contains("test of /y failed"));
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

    #[test]
    fn names_and_timestamps() {
        assert!(is_dns_subdomain("cm-1.example"));
        assert!(!is_dns_subdomain("Bad_Name"));
        assert!(!is_dns_subdomain("-a"));
        let now = now_rfc3339();
        assert_eq!(now.len(), 20, "{now}");
        assert!(now.starts_with("20"));
    }
}
