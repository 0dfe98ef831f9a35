//! Custom indexes declared as data (`index-spec`) and evaluated by the host.

use std::sync::Arc;

use kubeplug_informer::indexer::IndexSpec;
use kubeplug_informer::object::Object;
use serde_json::Value;

use crate::description::IndexSource;

/// A path into an object's JSON: dotted field names, where a `[*]` suffix iterates over an
/// array, e.g. `spec.template.spec.volumes[*].configMap.name`.
///
/// Contract: each string, number or bool found at the end of the path is one index value
/// (numbers and bools as their JSON text); objects, arrays and nulls found there, and
/// missing fields, add nothing. Values are deduplicated and sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexPath {
    text: String,
    steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Field(String),
    Each,
}

impl IndexPath {
    /// Parses the path text; the error says what is wrong where.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Err("empty index path".to_owned());
        }
        let mut steps = Vec::new();
        for segment in text.split('.') {
            let mut field = segment;
            let mut each = 0;
            while let Some(rest) = field.strip_suffix("[*]") {
                field = rest;
                each += 1;
            }
            if field.is_empty() || field.contains(['[', ']', '*']) {
                return Err(format!(
                    "path {text:?}: segment {segment:?} must be a field name, optionally followed by [*]"
                ));
            }
            steps.push(Step::Field(field.to_owned()));
            steps.extend(std::iter::repeat_n(Step::Each, each));
        }
        Ok(Self {
            text: text.to_owned(),
            steps,
        })
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The values the path finds in `json`; nothing when `json` does not parse.
    pub fn values(&self, json: &str) -> Vec<String> {
        let Ok(root) = serde_json::from_str::<Value>(json) else {
            return Vec::new();
        };
        let mut current = vec![&root];
        for step in &self.steps {
            current = match step {
                Step::Field(name) => current.into_iter().filter_map(|v| v.get(name)).collect(),
                Step::Each => current
                    .into_iter()
                    .filter_map(Value::as_array)
                    .flatten()
                    .collect(),
            };
        }
        let mut values: Vec<String> = current
            .into_iter()
            .filter_map(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                Value::Bool(b) => Some(b.to_string()),
                _ => None,
            })
            .collect();
        values.sort();
        values.dedup();
        values
    }
}

/// The informer index for a declared source. Same source, same name: plugins share it.
pub(crate) fn informer_spec(source: &IndexSource) -> IndexSpec {
    match source {
        IndexSource::Label(key) => IndexSpec::Label(key.clone()),
        IndexSource::OwnerUid => IndexSpec::OwnerUid,
        IndexSource::Path(path) => {
            let path = path.clone();
            IndexSpec::Custom {
                name: format!("path:{}", path.as_str()),
                func: Arc::new(move |object: &Object| path.values(object.json())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_iterate_arrays_and_skip_missing_fields() {
        let path = IndexPath::parse("spec.template.spec.volumes[*].configMap.name").unwrap();
        let json = r#"{"spec":{"template":{"spec":{"volumes":[
            {"configMap":{"name":"b"}},{"secret":{"secretName":"s"}},{"configMap":{"name":"a"}},
            {"configMap":{"name":"a"}}]}}}}"#;
        assert_eq!(path.values(json), ["a", "b"]);
        assert!(path.values("{}").is_empty());
        assert!(path.values("not json").is_empty());
    }

    #[test]
    fn nested_arrays_and_scalars() {
        let path = IndexPath::parse("m[*][*]").unwrap();
        assert_eq!(
            path.values(r#"{"m":[[1,true],["x",null,{}]]}"#),
            ["1", "true", "x"]
        );
    }

    #[test]
    fn bad_paths_are_refused() {
        for bad in ["", "a..b", "a[0]", "[*]", "a.*"] {
            assert!(IndexPath::parse(bad).is_err(), "{bad}");
        }
    }
}
