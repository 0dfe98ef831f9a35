//! The values a `path` index files an object under; all of an Indexer's paths are walked
//! together ([`SelectedPaths`](crate::selected::SelectedPaths)).

use kubeplug_json::path::{FieldPath, Found};

use crate::object::Object;

/// The index values a path yields for one object's JSON, from its raw selected values
/// (`None`: the JSON is malformed along the path).
///
/// Contract: each string, number or bool the path selects is one index value (a number as
/// its JSON text as sent, a bool as `true` or `false`); objects, arrays and nulls, and
/// missing fields, add nothing. Values are deduplicated and sorted. An object whose JSON is
/// malformed along the path is filed under no value.
pub(super) fn index_values(selected: Option<&[&str]>) -> Vec<String> {
    let Some(raw_values) = selected else {
        return Vec::new();
    };
    let mut values = Vec::with_capacity(raw_values.len());
    for &raw in raw_values {
        match Found::classify(raw) {
            Ok(Found::String(s)) => values.push(s.into_owned()),
            Ok(Found::Integer(_) | Found::Float(_) | Found::Bool(_)) => values.push(raw.to_owned()),
            Ok(Found::Null | Found::Json(_)) => {}
            Err(_) => return Vec::new(),
        }
    }
    values.sort_unstable();
    values.dedup();
    values
}

/// The values `path` files `object` under, evaluated alone (to build a new index).
pub(super) fn values_of(path: &FieldPath, object: &Object) -> Vec<String> {
    let mut raw_values = Vec::new();
    let walked = path.for_each_raw(object.json(), |raw| raw_values.push(raw));
    index_values(walked.ok().map(|()| raw_values.as_slice()))
}
