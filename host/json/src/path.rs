//! Field paths into JSON text: dotted field names where a `[*]` suffix iterates over an array,
//! e.g. `spec.template.spec.containers[*].image`. The path language of `path` indexes and
//! projections, evaluated with the scanners of this crate: the members on the path are
//! walked, everything else is skipped, and no tree is built.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use crate::{ObjectScanner, ScanError};

/// A parsed field path.
///
/// Contract: evaluated over a JSON value, the path selects, step by step, the member of each
/// object with the step's field name (the first, should an object repeat a name: the API
/// server never sends a repeated one), or each element of each array (`[*]`). A value of the
/// wrong type for a step (an array where a field is asked for, a string where `[*]` is) and a
/// missing field select nothing; they are not errors. The walk leaves an object as soon as it
/// met every name it looks for there, so what follows is not read.
#[derive(Clone)]
pub struct FieldPath {
    text: String,
    steps: Box<[Step]>,
    /// The path as a one-path [`Trie`], which is what is walked.
    trie: Trie,
}

impl PartialEq for FieldPath {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for FieldPath {}

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
        let trie = Trie::new([steps.as_slice()]);
        Ok(Self {
            text: text.to_owned(),
            steps: steps.into(),
            trie,
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
        self.trie.walk(json, &mut |_, raw| found(raw), &mut [None])
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

/// Several field paths evaluated together: one walk of the JSON selects the values of all
/// of them, so that the twelve `path` indexes of an informer, or a plugin's projections, cost
/// about one scan of the object, not one each.
///
/// Contract: per path, the values and their order are those of [`FieldPath::for_each_raw`];
/// a path may appear more than once (each copy gets the values).
#[derive(Clone, Debug)]
pub struct PathSet {
    paths: Box<[FieldPath]>,
    trie: Trie,
    /// Per path, the number of its first field among the root's ([`root_of`](Self::root_of)).
    roots_of: Box<[usize]>,
}

/// Where, per first field of a set's paths, the object's member of that name lies: the
/// range of its value, `None` when the object has none.
pub type Roots = Vec<Option<Range<usize>>>;

/// Each path's raw values in one object, or the error that stopped its walk.
pub type Values<'a> = Vec<Result<Vec<&'a str>, ScanError>>;

impl Default for PathSet {
    fn default() -> Self {
        Self::new([])
    }
}

impl PathSet {
    /// The set of `paths`, numbered in the order given.
    pub fn new(paths: impl IntoIterator<Item = FieldPath>) -> Self {
        let paths: Box<[FieldPath]> = paths.into_iter().collect();
        let trie = Trie::new(paths.iter().map(|path| &*path.steps));
        let roots_of = paths
            .iter()
            .map(|path| {
                let Some(Step::Field(first)) = path.steps.first() else {
                    unreachable!("a path starts with a field");
                };
                trie.nodes[0]
                    .fields
                    .iter()
                    .position(|(field, _)| field == first)
                    .expect("every first field is a child of the root")
            })
            .collect();
        Self {
            paths,
            trie,
            roots_of,
        }
    }

    /// The number of path `path`'s first field among the set's first fields (the index into
    /// [`Roots`]).
    pub fn root_of(&self, path: usize) -> usize {
        self.roots_of[path]
    }

    /// How many distinct first fields the paths have.
    pub fn root_count(&self) -> usize {
        self.trie.nodes[0].fields.len()
    }

    /// The paths, in the order [`new`](Self::new) was given them.
    pub fn paths(&self) -> &[FieldPath] {
        &self.paths
    }

    /// Each path's raw values in `json`, or the error that stopped its walk, as if each
    /// path were evaluated alone: one walk when `json` is well-formed where it goes, and
    /// one per path only when it is not.
    pub fn select<'a>(&self, json: &'a str) -> Values<'a> {
        self.select_roots(json).0
    }

    /// [`select`](Self::select), and where the walk found the root members (`None` when
    /// it failed and the paths were evaluated one by one).
    pub fn select_roots<'a>(&self, json: &'a str) -> (Values<'a>, Option<Roots>) {
        let mut selected = vec![Vec::new(); self.paths.len()];
        let mut roots = vec![None; self.root_count()];
        match self
            .trie
            .walk(json, &mut |path, raw| selected[path].push(raw), &mut roots)
        {
            Ok(()) => (selected.into_iter().map(Ok).collect(), Some(roots)),
            Err(_) => (
                self.paths.iter().map(|path| alone(path, json)).collect(),
                None,
            ),
        }
    }

    /// Where the root members the paths start in lie in `json`, without walking into them:
    /// what tells whether one is the same text as in an earlier version of the object.
    pub fn roots(&self, json: &str) -> Result<Roots, ScanError> {
        let mut roots = vec![None; self.root_count()];
        let root = &self.trie.nodes[0];
        if root.fields.is_empty() || first_byte(json) != Some(b'{') {
            return Ok(roots);
        }
        let mut scanner = ObjectScanner::new(json)?;
        let mut met = Met::new(root.fields.len());
        while let Some(key) = scanner.next_key()? {
            let range = scanner.skip_value()?;
            if let Some(field) = root.fields.iter().position(|(field, _)| **field == *key)
                && met.first(field)
            {
                roots[field] = Some(range);
                if met.all() {
                    break;
                }
            }
        }
        Ok(roots)
    }

    /// The values of the paths whose first field's number `r` has `walk[r]`, walking only
    /// those root members (at `roots`, as [`roots`](Self::roots) found them in `json`), as if
    /// each path were evaluated alone; the other paths get no values.
    pub fn select_under<'a>(
        &self,
        json: &'a str,
        roots: &[Option<Range<usize>>],
        walk: &[bool],
    ) -> Values<'a> {
        let mut selected: Values<'a> = vec![Ok(Vec::new()); self.paths.len()];
        let root = &self.trie.nodes[0];
        for (number, &(_, node)) in root.fields.iter().enumerate() {
            let Some(range) = roots[number].clone().filter(|_| walk[number]) else {
                continue;
            };
            let mut found: Vec<Vec<&'a str>> = vec![Vec::new(); self.paths.len()];
            let mut cursor = ObjectScanner::cursor_at(json, range.start);
            let walked = self
                .trie
                .walk_value(&mut cursor, node, &mut |path, raw| found[path].push(raw));
            for (path, values) in found.into_iter().enumerate() {
                if self.roots_of[path] != number {
                    continue;
                }
                selected[path] = match walked {
                    Ok(_) => Ok(values),
                    Err(_) => alone(&self.paths[path], json),
                };
            }
        }
        selected
    }
}

/// One path's values in `json`, walked alone.
fn alone<'a>(path: &FieldPath, json: &'a str) -> Result<Vec<&'a str>, ScanError> {
    let mut values = Vec::new();
    path.for_each_raw(json, |raw| values.push(raw))
        .map(|()| values)
}

/// Field paths merged on their common prefixes. Node 0 is the root, a value that is not
/// selected itself (a path has at least one step).
#[derive(Clone, Debug)]
struct Trie {
    nodes: Box<[Node]>,
}

#[derive(Clone, Debug, Default)]
struct Node {
    /// Field steps from here: the field name and its node. Few per node, so a linear search.
    fields: Vec<(Box<str>, usize)>,
    /// The node of an `[*]` step from here.
    each: Option<usize>,
    /// The numbers of the paths that end here: they select the value at this node.
    ends: Vec<usize>,
}

impl Trie {
    fn new<'s>(paths: impl IntoIterator<Item = &'s [Step]>) -> Self {
        let mut nodes = vec![Node::default()];
        for (number, steps) in paths.into_iter().enumerate() {
            let mut at = 0;
            for step in steps {
                let next = match step {
                    Step::Field(name) => nodes[at]
                        .fields
                        .iter()
                        .find(|(field, _)| field == name)
                        .map(|&(_, node)| node),
                    Step::Each => nodes[at].each,
                };
                at = next.unwrap_or_else(|| {
                    let node = nodes.len();
                    nodes.push(Node::default());
                    match step {
                        Step::Field(name) => nodes[at].fields.push((name.clone(), node)),
                        Step::Each => nodes[at].each = Some(node),
                    }
                    node
                });
            }
            nodes[at].ends.push(number);
        }
        Self {
            nodes: nodes.into(),
        }
    }

    /// Walks the one JSON value `text`: a root that is not an object selects nothing.
    /// Walks the one JSON value `text`: a root that is not an object selects nothing. Notes
    /// in `roots` the range of each root member walked, by its field's number.
    fn walk<'a>(
        &self,
        text: &'a str,
        found: &mut impl FnMut(usize, &'a str),
        roots: &mut [Option<Range<usize>>],
    ) -> Result<(), ScanError> {
        let root = &self.nodes[0];
        if root.fields.is_empty() || first_byte(text) != Some(b'{') {
            return Ok(());
        }
        // The root's rest is never read: no parent needs to know where it ends.
        self.walk_members(&mut ObjectScanner::new(text)?, root, found, Some(roots))
    }

    /// Walks the members of the object under `scanner`, each the first of its name at its
    /// field's node under `node`, until it met every field the node names or the object
    /// ended. The caller of a nested object skips its rest before leaving it.
    fn walk_members<'a>(
        &self,
        scanner: &mut ObjectScanner<'a>,
        node: &Node,
        found: &mut impl FnMut(usize, &'a str),
        mut ranges: Option<&mut [Option<Range<usize>>]>,
    ) -> Result<(), ScanError> {
        let mut met = Met::new(node.fields.len());
        while let Some(key) = scanner.next_key()? {
            let field = node.fields.iter().position(|(field, _)| **field == *key);
            match field {
                Some(field) if met.first(field) => {
                    let range = self.walk_value(scanner, node.fields[field].1, found)?;
                    if let Some(ranges) = ranges.as_deref_mut() {
                        ranges[field] = Some(range);
                    }
                    if met.all() {
                        return Ok(());
                    }
                }
                _ => {
                    scanner.skip_value()?;
                }
            }
        }
        Ok(())
    }

    /// Walks the value under the cursor (an object member's, after its key, or an array
    /// element's) at node `at` and moves past it: into an object or array in place when
    /// steps go on from here, else skipping it; then hands it to the paths that end here.
    fn walk_value<'a>(
        &self,
        cursor: &mut ObjectScanner<'a>,
        at: usize,
        found: &mut impl FnMut(usize, &'a str),
    ) -> Result<Range<usize>, ScanError> {
        let node = &self.nodes[at];
        let text = cursor.text;
        let range = match (cursor.peek(), node.each) {
            (Some(b'{'), _) if !node.fields.is_empty() => {
                let mut child = cursor.enter_object()?;
                self.walk_members(&mut child, node, found, None)?;
                child.skip_rest()?;
                cursor.leave_object(child)
            }
            (Some(b'['), Some(each)) => {
                let mut elements = cursor.enter_array()?;
                while elements.next_is_element()? {
                    self.walk_value(&mut elements.inner, each, found)?;
                }
                cursor.leave_array(elements)
            }
            _ => cursor.skip_value()?,
        };
        for &path in &node.ends {
            found(path, &text[range.clone()]);
        }
        Ok(range)
    }
}

/// Which of a node's fields an object walk has met.
enum Met {
    /// A bit per field, for up to 64 fields (all but hostile sets of paths).
    Few {
        met: u64,
        all: u64,
    },
    Many {
        met: Vec<bool>,
        left: usize,
    },
}

impl Met {
    fn new(fields: usize) -> Self {
        match fields {
            0..64 => Self::Few {
                met: 0,
                all: (1 << fields) - 1,
            },
            64.. => Self::Many {
                met: vec![false; fields],
                left: fields,
            },
        }
    }

    /// Marks `field` met; whether it was not before.
    fn first(&mut self, field: usize) -> bool {
        match self {
            Self::Few { met, .. } => {
                let first = *met & (1 << field) == 0;
                *met |= 1 << field;
                first
            }
            Self::Many { met, left } => {
                let first = !std::mem::replace(&mut met[field], true);
                *left -= usize::from(first);
                first
            }
        }
    }

    fn all(&self) -> bool {
        match self {
            Self::Few { met, all } => met == all,
            Self::Many { left, .. } => *left == 0,
        }
    }
}

fn first_byte(text: &str) -> Option<u8> {
    text.bytes()
        .find(|byte| !matches!(byte, b' ' | b'\n' | b'\r' | b'\t'))
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
    fn the_first_of_repeated_members_counts() {
        assert_eq!(raw("a", r#"{"a":1,"b":{"a":2},"a":3}"#), ["1"]);
        assert_eq!(
            raw("b.a", r#"{"a":1,"b":{"a":2,"a":4},"b":{"a":3}}"#),
            ["2"]
        );
    }

    #[test]
    fn a_walk_leaves_an_object_once_it_has_what_it_looks_for() {
        // What follows the last member a walk needs is not read, malformed or not...
        assert_eq!(raw("a", r#"{"a":1,"b":[1 2}"#), ["1"]);
        // ...but a nested object's end is still found, across strings and brackets in them.
        let json = r#"{"o":{"x":"}","y":{"z":"]"},"w":[{}]},"p":{"x":2}}"#;
        assert_eq!(raw("o.x", json), [r#""}""#]);
        let selected = set(&["o.x", "p.x"]).select(json);
        assert_eq!(selected[0].as_deref().unwrap(), [r#""}""#]);
        assert_eq!(selected[1].as_deref().unwrap(), ["2"]);
        // Sixty-five fields under one object: the many-field bookkeeping.
        let paths: Vec<String> = (0..65).map(|i| format!("f{i}")).collect();
        let members: Vec<String> = (0..65).rev().map(|i| format!(r#""f{i}":{i}"#)).collect();
        let json = format!("{{{},\"f0\":99}}", members.join(","));
        let set = PathSet::new(paths.iter().map(|p| FieldPath::parse(p).unwrap()));
        let got = set.select(&json);
        assert!(
            got.iter()
                .enumerate()
                .all(|(i, v)| *v.as_deref().unwrap() == [i.to_string()]),
            "{got:?}"
        );
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

    fn set(paths: &[&str]) -> PathSet {
        PathSet::new(paths.iter().map(|p| FieldPath::parse(p).unwrap()))
    }

    #[test]
    fn a_set_selects_each_path_as_alone_in_one_walk() {
        let json = r#"{"spec":{"a":{"b":1,"c":[{"d":"x"},{"d":"y","e":[true]}]},"f":2},"g":null}"#;
        let paths = [
            "spec.a.c[*].d",
            "spec.a",
            "spec.a.c[*].e[*]",
            "spec.f",
            "spec.a.c[*].d",
            "g",
            "h",
        ];
        let set = set(&paths);
        let got: Vec<Vec<&str>> = set.select(json).into_iter().map(Result::unwrap).collect();
        for (path, values) in paths.iter().zip(&got) {
            assert_eq!(values, &raw(path, json), "{path}");
        }
        assert_eq!(got[0], [r#""x""#, r#""y""#]);
        assert_eq!(got[4], got[0]);
        assert!(got[6].is_empty());
        assert_eq!(set.paths()[3].as_str(), "spec.f");
    }

    #[test]
    fn root_members_are_found_and_walked_alone() {
        let set = set(&["b.x", "a", "b.y[*]", "c"]);
        let json = r#"{"a":1,"b":{"y":[2,3],"x":"s"},"d":4}"#;
        let roots = set.roots(json).unwrap();
        let texts: Vec<Option<&str>> = roots.iter().map(|r| r.clone().map(|r| &json[r])).collect();
        assert_eq!(set.root_of(0), set.root_of(2));
        assert_eq!(texts[set.root_of(0)], Some(r#"{"y":[2,3],"x":"s"}"#));
        assert_eq!(texts[set.root_of(1)], Some("1"));
        assert_eq!(texts[set.root_of(3)], None);
        let mut walk = vec![false; set.root_count()];
        walk[set.root_of(0)] = true;
        let selected = set.select_under(json, &roots, &walk);
        assert_eq!(selected[0].as_deref().unwrap(), [r#""s""#]);
        assert_eq!(selected[2].as_deref().unwrap(), ["2", "3"]);
        assert!(selected[1].as_deref().unwrap().is_empty(), "not walked");
        // A malformed member is each of its paths' own error.
        let json = r#"{"b":{"y":[2,,3],"x":"s"}}"#;
        let selected = set.select_under(json, &set.roots(json).unwrap(), &walk);
        assert_eq!(selected[0].as_deref().unwrap(), [r#""s""#]);
        assert!(selected[2].is_err());
    }

    #[test]
    fn select_keeps_a_malformed_path_from_spoiling_the_others() {
        let set = set(&["a[*]", "b", "c.d"]);
        let selected = set.select(r#"{"a":[1,tru],"b":"ok","c":{"d":[1 2]}}"#);
        assert!(
            selected[0].is_ok(),
            "literals are checked when classified, not walked"
        );
        assert_eq!(selected[1].as_deref().unwrap(), [r#""ok""#]);
        let selected = set.select(r#"{"a":[1,,2],"b":"ok","c":{"d":3}}"#);
        assert!(selected[0].is_err());
        assert_eq!(selected[1].as_deref().unwrap(), [r#""ok""#]);
        assert_eq!(selected[2].as_deref().unwrap(), ["3"]);
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

        #[test]
        fn sets_agree_with_a_tree_walk(
            value in json_value(),
            paths in prop::collection::vec(path_text(), 1..6),
            pretty in any::<bool>(),
        ) {
            let root = Value::Object([("a".to_owned(), value.clone()), ("b".to_owned(), value)].into_iter().collect());
            let text = if pretty { serde_json::to_string_pretty(&root) } else { serde_json::to_string(&root) }.unwrap();
            let set = PathSet::new(paths.iter().map(|p| FieldPath::parse(p).unwrap()));
            let got = set.select(&text).into_iter().map(|values| {
                values.unwrap().into_iter().map(|raw| serde_json::from_str::<Value>(raw).unwrap()).collect::<Vec<_>>()
            });
            for (path, values) in set.paths().iter().zip(got) {
                let want: Vec<Value> = reference(&root, &path.steps).into_iter().cloned().collect();
                prop_assert_eq!(values, want, "{}", path);
            }
            // Walking root member by root member finds the same, and the same members.
            let (selected, walked_roots) = set.select_roots(&text);
            let roots = set.roots(&text).unwrap();
            prop_assert_eq!(Some(&roots), walked_roots.as_ref());
            let every = vec![true; set.root_count()];
            prop_assert_eq!(set.select_under(&text, &roots, &every), selected.clone());
            let none = vec![false; set.root_count()];
            prop_assert!(set.select_under(&text, &roots, &none).iter().all(|v| v.as_ref().is_ok_and(Vec::is_empty)));
        }
    }
}
