//! Field selectors on `metadata.name` and `metadata.namespace`.

use std::fmt;
use std::str::FromStr;

use super::SelectorError;
use crate::object::{Object, ObjectKey};

/// A field selector on `metadata.name` and `metadata.namespace`.
///
/// Contract: [`parse`](Self::parse) accepts the API server's syntax, comma-separated
/// `field=value`, `field==value` and `field!=value` terms (all must hold), with `\`, `,` and
/// `=` in values escaped by a backslash; other fields are refused with
/// [`SelectorError::UnsupportedField`] (a real server supports more per type; the in-memory
/// server and the cache need only these two). A cluster-scoped object's namespace is `""`.
/// The empty selector matches everything. [`Display`](fmt::Display) writes the canonical text,
/// which parses back to an equal selector.
///
/// ```
/// use kubeplug_informer::object::ObjectKey;
/// use kubeplug_informer::selector::FieldSelector;
///
/// let selector = FieldSelector::parse("metadata.namespace==prod, metadata.name!=canary").unwrap();
/// assert_eq!(selector.to_string(), "metadata.name!=canary,metadata.namespace=prod");
/// assert!(selector.matches_key(&ObjectKey::new(Some("prod"), "web")));
/// assert!(!selector.matches_key(&ObjectKey::new(Some("prod"), "canary")));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldSelector {
    /// Sorted and without duplicates.
    terms: Vec<FieldTerm>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct FieldTerm {
    field: Field,
    /// `!=` rather than `=`.
    negated: bool,
    /// Unescaped.
    value: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Field {
    Name,
    Namespace,
}

impl FieldSelector {
    /// Parses the API server's field selector syntax; the empty string selects everything.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let syntax = |term: &str, reason| SelectorError::FieldSyntax {
            selector: text.to_owned(),
            term: term.to_owned(),
            reason,
        };
        let mut terms = Vec::new();
        for term in split_unescaped_commas(text) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            let (lhs, negated, rhs) = split_term(term)
                .ok_or_else(|| syntax(term, "expected field=value or field!=value"))?;
            let field = match lhs.trim() {
                "metadata.name" => Field::Name,
                "metadata.namespace" => Field::Namespace,
                other => {
                    return Err(SelectorError::UnsupportedField {
                        selector: text.to_owned(),
                        field: other.to_owned(),
                    });
                }
            };
            let value = unescape(rhs.trim()).map_err(|reason| syntax(term, reason))?;
            terms.push(FieldTerm {
                field,
                negated,
                value,
            });
        }
        terms.sort_unstable();
        terms.dedup();
        Ok(Self { terms })
    }

    /// The selector that matches everything.
    pub fn everything() -> Self {
        Self::default()
    }

    /// Whether this selector matches everything.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Whether the object with this key matches (both fields are parts of the key).
    pub fn matches_key(&self, key: &ObjectKey) -> bool {
        self.terms.iter().all(|term| {
            let actual = match term.field {
                Field::Name => key.name(),
                Field::Namespace => key.namespace().unwrap_or(""),
            };
            (actual == term.value) != term.negated
        })
    }

    /// Whether `object` matches.
    pub fn matches_object(&self, object: &Object) -> bool {
        self.matches_key(object.key())
    }
}

impl FromStr for FieldSelector {
    type Err = SelectorError;

    fn from_str(text: &str) -> Result<Self, SelectorError> {
        Self::parse(text)
    }
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, term) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let field = match term.field {
                Field::Name => "metadata.name",
                Field::Namespace => "metadata.namespace",
            };
            let op = if term.negated { "!=" } else { "=" };
            write!(f, "{field}{op}")?;
            for c in term.value.chars() {
                if matches!(c, '\\' | ',' | '=') {
                    f.write_str("\\")?;
                }
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

/// Splits at commas that are not escaped by a backslash.
fn split_unescaped_commas(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let current = rest?;
        let bytes = current.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' => i += 2,
                b',' => {
                    rest = Some(&current[i + 1..]);
                    return Some(&current[..i]);
                }
                _ => i += 1,
            }
        }
        rest = None;
        Some(current)
    })
}

/// Splits a term at its first operator, trying `!=`, `==`, `=` at each position as the server
/// does; returns (field, negated, raw value).
fn split_term(term: &str) -> Option<(&str, bool, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (op, negated) in [("!=", true), ("==", false), ("=", false)] {
            if let Some(value) = rest.strip_prefix(op) {
                return Some((&term[..i], negated, value));
            }
        }
    }
    None
}

/// Undoes the field selector value escapes `\\`, `\,` and `\=`.
fn unescape(raw: &str) -> Result<String, &'static str> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(escaped @ ('\\' | ',' | '=')) => out.push(escaped),
                _ => return Err("invalid escape sequence: only \\\\, \\, and \\= are allowed"),
            },
            '=' | ',' => return Err("unescaped '=' or ',' in the value (write \\= or \\,)"),
            _ => out.push(c),
        }
    }
    Ok(out)
}
