//! Checks for label and field selectors: they come from plugins' `describe()` and from the
//! command line, and are sent to the API server as their canonical text.

use std::collections::BTreeMap;

use kubeplug_informer::object::ObjectKey;
use kubeplug_informer::selector::{FieldSelector, LabelSelector};

/// The input as text lines; `None` for bytes that are not UTF-8 (selectors are `&str`).
fn lines(data: &[u8]) -> Option<Vec<&str>> {
    std::str::from_utf8(data)
        .ok()
        .map(|text| text.split('\n').collect())
}

/// Line 1 is a label selector; each further line is a label `key=value` (or `key`, for the
/// value `""`).
///
/// Properties: a parsed selector's canonical text parses back to an equal selector and prints
/// the same; it matches the labels exactly when the naive reference below, reading that text,
/// says so; a refused selector gets an error that quotes it.
pub fn label_selector(data: &[u8]) {
    let Some(lines) = lines(data) else {
        return;
    };
    let (text, label_lines) = lines.split_first().expect("split yields at least one line");
    let labels: BTreeMap<String, String> = label_lines
        .iter()
        .map(|line| {
            let (key, value) = line.split_once('=').unwrap_or((line, ""));
            (key.to_owned(), value.to_owned())
        })
        .collect();
    match LabelSelector::parse(text) {
        Ok(selector) => {
            let canonical = selector.to_string();
            let again = LabelSelector::parse(&canonical)
                .unwrap_or_else(|e| panic!("canonical text {canonical:?} refused: {e}"));
            assert_eq!(again, selector, "{canonical:?} parses back");
            assert_eq!(again.to_string(), canonical);
            assert_eq!(
                selector.matches(&labels),
                reference_label_match(&canonical, &labels),
                "{canonical:?} on {labels:?}"
            );
        }
        Err(error) => {
            let message = error.to_string();
            assert!(message.contains(&format!("{text:?}")), "{message}");
        }
    }
}

/// Matching as the Kubernetes documentation describes it, read from a canonical selector text
/// (requirements joined by `,`; set values in parentheses).
fn reference_label_match(canonical: &str, labels: &BTreeMap<String, String>) -> bool {
    let mut requirements = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in canonical.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                requirements.push(&canonical[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if !canonical.is_empty() {
        requirements.push(&canonical[start..]);
    }
    requirements.into_iter().all(|requirement| {
        let value = |key: &str| labels.get(key).map(String::as_str);
        let integer = |key: &str| value(key).and_then(|v| v.parse::<i64>().ok());
        let set = |key: &str, values: &str| {
            let values = values.strip_prefix('(').unwrap().strip_suffix(')').unwrap();
            value(key).is_some_and(|v| values.split(',').any(|member| member == v))
        };
        if let Some(key) = requirement.strip_prefix('!') {
            value(key).is_none()
        } else if let Some((key, values)) = requirement.split_once(" notin ") {
            !set(key, values)
        } else if let Some((key, values)) = requirement.split_once(" in ") {
            set(key, values)
        } else if let Some((key, expected)) = requirement.split_once("!=") {
            value(key) != Some(expected)
        } else if let Some((key, expected)) = requirement.split_once('=') {
            value(key) == Some(expected)
        } else if let Some((key, bound)) = requirement.split_once('>') {
            integer(key).is_some_and(|v| v > bound.parse().unwrap())
        } else if let Some((key, bound)) = requirement.split_once('<') {
            integer(key).is_some_and(|v| v < bound.parse().unwrap())
        } else {
            value(requirement).is_some()
        }
    })
}

/// Line 1 is a field selector, line 2 an object's namespace (empty for cluster-scoped), line
/// 3 its name.
///
/// Properties: a parsed selector's canonical text parses back to an equal selector; it matches
/// the object (which has no body fields) exactly when the naive reference, reading that
/// text, says so; a refused selector gets an error that quotes it.
pub fn field_selector(data: &[u8]) {
    let Some(lines) = lines(data) else {
        return;
    };
    let text = lines[0];
    let namespace = lines.get(1).copied().unwrap_or("");
    let name = lines.get(2).copied().unwrap_or("name");
    match FieldSelector::parse(text) {
        Ok(selector) => {
            let canonical = selector.to_string();
            let again = FieldSelector::parse(&canonical)
                .unwrap_or_else(|e| panic!("canonical text {canonical:?} refused: {e}"));
            assert_eq!(again, selector, "{canonical:?} parses back");
            assert_eq!(again.to_string(), canonical);
            // Keys are `namespace/name`; a `/` in either part is refused before a key is built.
            if !namespace.contains('/') && !name.contains('/') && !name.is_empty() {
                let key = ObjectKey::new(Some(namespace), name);
                // With no body: every field but the key's two reads as "".
                assert_eq!(
                    selector.matches(&key, |_| None),
                    reference_field_match(&canonical, namespace, name),
                    "{canonical:?} on {key}"
                );
            }
        }
        Err(error) => {
            let message = error.to_string();
            assert!(message.contains(&format!("{text:?}")), "{message}");
        }
    }
}

/// Field matching read from a canonical field selector text: `field=value` or `field!=value`
/// terms joined by unescaped commas, with `\\`, `\,` and `\=` escapes in values.
fn reference_field_match(canonical: &str, namespace: &str, name: &str) -> bool {
    let mut terms = vec![String::new()];
    let mut chars = canonical.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => terms
                .last_mut()
                .unwrap()
                .extend(['\\', chars.next().unwrap()]),
            ',' => terms.push(String::new()),
            c => terms.last_mut().unwrap().push(c),
        }
    }
    terms.iter().filter(|term| !term.is_empty()).all(|term| {
        let (field, negated, raw) = if let Some((field, raw)) = term.split_once("!=") {
            (field, true, raw)
        } else {
            let (field, raw) = term.split_once('=').unwrap();
            (field, false, raw)
        };
        let mut value = String::new();
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            value.push(if c == '\\' { chars.next().unwrap() } else { c });
        }
        let actual = match field {
            "metadata.name" => name,
            "metadata.namespace" => namespace,
            _ => "",
        };
        (actual == value) != negated
    })
}
