//! Custom indexes declared as data (`index-spec`) and evaluated by the host.

use std::sync::Arc;

use kubeplug_informer::indexer::IndexSpec;
use kubeplug_informer::object::Object;
use kubeplug_json::path::{FieldPath, Found, PathError};

use crate::description::IndexSource;

/// A `path` index: a [`FieldPath`] into an object's JSON, e.g.
/// `spec.template.spec.volumes[*].configMap.name`.
///
/// Contract: each string, number or bool the path selects is one index value (a number as
/// its JSON text as sent, a bool as `true` or `false`); objects, arrays and nulls, and
/// missing fields, add nothing. Values are deduplicated and sorted. An object whose JSON is
/// malformed along the path is filed under no value.
///
/// Evaluated by the structural scanner of `kubeplug-json`: the members on the path are
/// walked and the rest skipped, without a `serde_json::Value` tree, since it runs for the
/// old and the new object of every update, under the Indexer's lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexPath(FieldPath);

impl IndexPath {
    /// Parses the path text; the error names the bad segment.
    pub fn parse(text: &str) -> Result<Self, PathError> {
        FieldPath::parse(text).map(Self)
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// The values the path finds in `json`.
    pub fn values(&self, json: &str) -> Vec<String> {
        let mut values = Vec::new();
        let mut malformed = false;
        let walked = self.0.for_each_raw(json, |raw| match Found::classify(raw) {
            Ok(Found::String(s)) => values.push(s.into_owned()),
            Ok(Found::Integer(_) | Found::Float(_) | Found::Bool(_)) => values.push(raw.to_owned()),
            Ok(Found::Null | Found::Json(_)) => {}
            Err(_) => malformed = true,
        });
        if malformed || walked.is_err() {
            return Vec::new();
        }
        values.sort();
        values.dedup();
        values
    }
}

/// The informer index for a declared source. Same source, same name: plugins share it.
pub fn informer_spec(source: &IndexSource) -> IndexSpec {
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
            path.values(r#"{"m":[[1,true],["x",null,{}],[2.50,"a\"b"]]}"#),
            ["1", "2.50", "a\"b", "true", "x"]
        );
    }

    #[test]
    fn malformed_json_on_the_path_files_nothing() {
        let path = IndexPath::parse("m[*]").unwrap();
        assert!(path.values(r#"{"m":["a",tru]}"#).is_empty());
        assert!(path.values(r#"{"m":["a","b"#).is_empty());
    }

    #[test]
    fn bad_paths_are_refused() {
        for bad in ["", "a..b", "a[0]", "[*]", "a.*"] {
            assert!(IndexPath::parse(bad).is_err(), "{bad}");
        }
    }
}
