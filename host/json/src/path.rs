//! Field paths into JSON text: dotted field names where a `[*]` suffix iterates over an array,
//! e.g. `spec.template.spec.containers[*].image`. The path language of `path` indexes and
//! projections, evaluated with the scanners of this crate: the members on the path are
//! walked, everything else is skipped, and no tree is built.

use std::borrow::Cow;
use std::fmt;

use crate::{ArrayScanner, ObjectScanner, ScanError};

/// A parsed field path.
///
/// Contract: evaluated over a JSON value, the path selects, step by step, the member of each
/// object with the step's field name (every member of that name, should an object repeat
/// one), or each element of each array (`[*]`). A value of the wrong type for a step (an
/// array where a field is asked for, a string where `[*]` is) and a missing field select
/// nothing; they are not errors.
#[derive(Clone, PartialEq, Eq)]
pub struct FieldPath {
    text: String,
    steps: Box<[Step]>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Field(Box<str>),
    Each,
}

/// Why a path does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The text is empty.
    #[error("the path is empty")]
    Empty,
    /// One dot-separated segment is not a field name with optional `[*]` suffixes.
    #[error(
        "path segment {position} ({segment:?}) must be a field name, optionally followed by [*]"
    )]
    BadSegment {
        /// The segment's position, from 1.
        position: usize,
        /// The segment, cut to [`SHOWN_SEGMENT`] bytes.
        segment: String,
    },
}

/// How much of a bad segment an error shows.
pub const SHOWN_SEGMENT: usize = 64;

impl FieldPath {
    /// Parses `text`; the error names the first bad segment.
    pub fn parse(text: &str) -> Result<Self, PathError> {
        if text.is_empty() {
            return Err(PathError::Empty);
        }
        let mut steps = Vec::new();
        for (index, segment) in text.split('.').enumerate() {
            let mut field = segment;
            let mut each = 0;
            while let Some(rest) = field.strip_suffix("[*]") {
                field = rest;
                each += 1;
            }
            if field.is_empty() || field.contains(['[', ']', '*']) {
                return Err(PathError::BadSegment {
                    position: index + 1,
                    segment: cut(segment, SHOWN_SEGMENT).to_owned(),
                });
            }
            steps.push(Step::Field(field.into()));
            steps.extend(std::iter::repeat_n(Step::Each, each));
        }
        Ok(Self {
            text: text.to_owned(),
            steps: steps.into(),
        })
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Calls `found` with the raw text of each value the path selects in `json` (one JSON
    /// value), in document order. Strings on the way are checked strictly; an object or
    /// array handed out is checked only structurally (see the crate docs).
    ///
    /// An error means `json` is malformed where the walk went; `found` may have been called
    /// for values before that point.
    pub fn for_each_raw<'a>(
        &self,
        json: &'a str,
        mut found: impl FnMut(&'a str),
    ) -> Result<(), ScanError> {
        walk_value(json, &self.steps, &mut found)
    }

    /// Calls `found` with each value the path selects in `json`, typed; an error as for
    /// [`for_each_raw`](Self::for_each_raw), or a selected number or literal that is not
    /// valid JSON.
    pub fn for_each<'a>(
        &self,
        json: &'a str,
        mut found: impl FnMut(Found<'a>),
    ) -> Result<(), ScanError> {
        let mut failed = None;
        self.for_each_raw(json, |raw| {
            if failed.is_none() {
                match Found::classify(raw) {
                    Ok(value) => found(value),
                    Err(error) => failed = Some(error),
                }
            }
        })?;
        failed.map_or(Ok(()), Err)
    }
}

impl fmt::Debug for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("FieldPath").field(&self.text).finish()
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// One selected value.
#[derive(Debug, Clone, PartialEq)]
pub enum Found<'a> {
    /// A string, unescaped.
    String(Cow<'a, str>),
    /// A number without fraction or exponent that fits in an `i64`.
    Integer(i64),
    /// Any other number (an integer outside the `i64` range among them).
    Float(f64),
    /// `true` or `false`.
    Bool(bool),
    /// `null`.
    Null,
    /// An object or array, as its JSON text as sent.
    Json(&'a str),
}

impl<'a> Found<'a> {
    /// Types one raw JSON value as [`FieldPath::for_each_raw`] hands it out: strings are
    /// unescaped, numbers and literals checked strictly, objects and arrays passed through.
    pub fn classify(raw: &'a str) -> Result<Self, ScanError> {
        let malformed = |what| ScanError { at: 0, what };
        match raw.as_bytes().first() {
            Some(b'"') if raw.len() >= 2 => {
                let inner = &raw[1..raw.len() - 1];
                if inner.contains('\\') {
                    serde_json::from_str::<String>(raw)
                        .map(|s| Self::String(Cow::Owned(s)))
                        .map_err(|_| malformed("malformed string"))
                } else {
                    Ok(Self::String(Cow::Borrowed(inner)))
                }
            }
            Some(b'{' | b'[') => Ok(Self::Json(raw)),
            _ => match raw {
                "true" => Ok(Self::Bool(true)),
                "false" => Ok(Self::Bool(false)),
                "null" => Ok(Self::Null),
                _ => {
                    let number = serde_json::from_str::<serde_json::Number>(raw)
                        .map_err(|_| malformed("malformed number or literal"))?;
                    Ok(match number.as_i64() {
                        Some(integer) if !raw.contains(['.', 'e', 'E']) => Self::Integer(integer),
                        _ => Self::Float(number.as_f64().unwrap_or(f64::NAN)),
                    })
                }
            },
        }
    }
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn first_byte(text: &str) -> Option<u8> {
    text.bytes()
        .find(|byte| !matches!(byte, b' ' | b'\n' | b'\r' | b'\t'))
}

/// Applies `steps` to the one JSON value `text`.
fn walk_value<'a>(
    text: &'a str,
    steps: &[Step],
    found: &mut impl FnMut(&'a str),
) -> Result<(), ScanError> {
    let Some(step) = steps.first() else {
        found(text.trim_matches([' ', '\n', '\r', '\t']));
        return Ok(());
    };
    match (step, first_byte(text)) {
        (Step::Field(_), Some(b'{')) => {
            walk_object(&mut ObjectScanner::new(text)?, text, steps, found)
        }
        (Step::Each, Some(b'[')) => {
            let mut elements = ArrayScanner::new(text)?;
            while let Some(range) = elements.next_element()? {
                walk_value(&text[range], &steps[1..], found)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Walks every member of the object under `scanner` (to its end, so that a parent can leave
/// it), applying `steps`, whose first is a field step, to the members it names.
fn walk_object<'a>(
    scanner: &mut ObjectScanner<'a>,
    text: &'a str,
    steps: &[Step],
    found: &mut impl FnMut(&'a str),
) -> Result<(), ScanError> {
    let Some((Step::Field(name), rest)) = steps.split_first() else {
        unreachable!("walk_object is called for field steps only");
    };
    while let Some(key) = scanner.next_key()? {
        if key != **name {
            scanner.skip_value()?;
            continue;
        }
        let into_object = matches!(rest.first(), Some(Step::Field(_)))
            && text.as_bytes().get(scanner.position()) == Some(&b'{');
        if into_object {
            // Walk the member's object in place, not skip it and scan it again.
            let mut child = scanner.enter_object()?;
            walk_object(&mut child, text, rest, found)?;
            scanner.leave_object(child);
        } else {
            let range = scanner.skip_value()?;
            walk_value(&text[range], rest, found)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::Value;

    use super::*;

    fn raw(path: &str, json: &str) -> Vec<String> {
        let mut out = Vec::new();
        FieldPath::parse(path)
            .unwrap()
            .for_each_raw(json, |v| out.push(v.to_owned()))
            .unwrap();
        out
    }

    #[test]
    fn fields_and_arrays_select_in_document_order() {
        let json = r#" {"spec": {"template": {"spec": {"volumes": [
            {"configMap": {"name": "b"}}, {"secret": {"secretName": "s"}},
            {"configMap": {"name": "a", "items": [1]}}, 7, {"configMap": []}]}}}} "#;
        assert_eq!(
            raw("spec.template.spec.volumes[*].configMap.name", json),
            [r#""b""#, r#""a""#]
        );
        assert_eq!(
            raw("spec.template.spec.volumes[*].configMap", json),
            [r#"{"name": "b"}"#, r#"{"name": "a", "items": [1]}"#, "[]"]
        );
        assert_eq!(
            raw("m[*][*]", r#"{"m":[[1,true],["x",null,{}],3]}"#),
            ["1", "true", r#""x""#, "null", "{}"]
        );
        assert!(raw("spec.missing", json).is_empty());
        assert!(raw("spec[*]", json).is_empty());
        assert!(raw("a.b", r#"{"a":"b"}"#).is_empty());
    }

    #[test]
    fn repeated_members_each_count() {
        assert_eq!(raw("a", r#"{"a":1,"b":{"a":2},"a":3}"#), ["1", "3"]);
    }

    #[test]
    fn escaped_keys_match_their_unescaped_names() {
        assert_eq!(raw("a.b", r#"{"\u0061":{"\u0062":"x"}}"#), [r#""x""#]);
    }

    #[test]
    fn values_are_typed() {
        let mut got = Vec::new();
        FieldPath::parse("v[*]")
            .unwrap()
            .for_each(
                r#"{"v":["a\nb","plain",-3,9223372036854775808,1.5,2e1,true,false,null,{"k":1},[2]]}"#,
                |v| got.push(v),
            )
            .unwrap();
        assert_eq!(
            got,
            [
                Found::String("a\nb".into()),
                Found::String("plain".into()),
                Found::Integer(-3),
                Found::Float(9_223_372_036_854_775_808.0),
                Found::Float(1.5),
                Found::Float(20.0),
                Found::Bool(true),
                Found::Bool(false),
                Found::Null,
                Found::Json(r#"{"k":1}"#),
                Found::Json("[2]"),
            ]
        );
    }

    #[test]
    fn malformed_input_on_the_path_is_an_error() {
        let path = FieldPath::parse("a[*]").unwrap();
        for bad in [r#"{"a":[1,}"#, r#"{"a":[tru]}"#, r#"{"a":[nan]}"#, "{"] {
            assert!(path.for_each(bad, |_| {}).is_err(), "{bad}");
        }
        // A root of the wrong type selects nothing, as any other value does.
        assert!(raw("a", "not json").is_empty());
        // Off the path, only the structure is checked.
        assert!(path.for_each(r#"{"b":[1 2],"a":[]}"#, |_| {}).is_ok());
    }

    #[test]
    fn bad_paths_are_refused_with_the_segment() {
        assert_eq!(FieldPath::parse(""), Err(PathError::Empty));
        for (bad, position) in [
            ("a..b", 2),
            ("a[0]", 1),
            ("[*]", 1),
            ("a.*", 2),
            ("a.b[*]x", 2),
        ] {
            match FieldPath::parse(bad) {
                Err(PathError::BadSegment { position: at, .. }) => {
                    assert_eq!(at, position, "{bad}")
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
        let long = format!("a.{}]", "é".repeat(100));
        let message = FieldPath::parse(&long).unwrap_err().to_string();
        assert!(message.len() < 140, "{message}");
    }

    /// The reference: the same contract over a `serde_json::Value` tree.
    fn reference<'v>(root: &'v Value, steps: &[Step]) -> Vec<&'v Value> {
        let mut current = vec![root];
        for step in steps {
            current = match step {
                Step::Field(name) => current.into_iter().filter_map(|v| v.get(&**name)).collect(),
                Step::Each => current
                    .into_iter()
                    .filter_map(Value::as_array)
                    .flatten()
                    .collect(),
            };
        }
        current
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            "[a-c\"\\\\é]{0,4}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-c]", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn path_text() -> impl Strategy<Value = String> {
        prop::collection::vec(("[a-c]", 0..3usize), 1..4).prop_map(|segments| {
            segments
                .iter()
                .map(|(field, each)| format!("{field}{}", "[*]".repeat(*each)))
                .collect::<Vec<_>>()
                .join(".")
        })
    }

    proptest! {
        #[test]
        fn agrees_with_a_tree_walk(value in json_value(), path in path_text(), pretty in any::<bool>()) {
            let root = Value::Object([("a".to_owned(), value.clone()), ("b".to_owned(), value)].into_iter().collect());
            let text = if pretty { serde_json::to_string_pretty(&root) } else { serde_json::to_string(&root) }.unwrap();
            let path = FieldPath::parse(&path).unwrap();
            let mut got = Vec::new();
            path.for_each_raw(&text, |raw| got.push(serde_json::from_str::<Value>(raw).unwrap())).unwrap();
            let want: Vec<Value> = reference(&root, &path.steps).into_iter().cloned().collect();
            prop_assert_eq!(got, want);
        }
    }
}
