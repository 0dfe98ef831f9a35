//! Field selectors: `metadata.name` and `metadata.namespace`, which an object's key answers,
//! and the other fields a server selects some types on (`spec.nodeName` of Pods).

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use super::SelectorError;
use crate::object::ObjectKey;

/// A field selector.
///
/// Contract: [`parse`](Self::parse) accepts the API server's syntax, comma-separated
/// `field=value`, `field==value` and `field!=value` terms (all must hold), with `\`, `,` and
/// `=` in values escaped by a backslash, and fields that are dotted names (`spec.nodeName`).
/// Which fields a type supports is the server's to say, as kube-apiserver says it: a selector
/// parses whatever it names, and a server refuses the fields its type lacks when asked.
/// `metadata.name` and `metadata.namespace` are read from an object's key (a cluster-scoped
/// object's namespace is `""`), every other field from its body, where an absent field reads
/// as `""`. The empty selector matches everything. [`Display`](fmt::Display) writes the
/// canonical text, which parses back to an equal selector.
///
/// ```
/// use kubeplug_informer::object::ObjectKey;
/// use kubeplug_informer::selector::FieldSelector;
///
/// let selector = FieldSelector::parse("metadata.namespace==prod, metadata.name!=canary").unwrap();
/// assert_eq!(selector.to_string(), "metadata.name!=canary,metadata.namespace=prod");
/// let no_body = |_: &str| None;
/// assert!(selector.matches(&ObjectKey::new(Some("prod"), "web"), no_body));
/// assert!(!selector.matches(&ObjectKey::new(Some("prod"), "canary"), no_body));
///
/// let on_node = FieldSelector::parse("spec.nodeName=node-1").unwrap();
/// let key = ObjectKey::new(Some("prod"), "web-1");
/// assert!(on_node.matches(&key, |field| (field == "spec.nodeName").then(|| "node-1".into())));
/// assert!(!on_node.matches(&key, no_body));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
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

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Field {
    Name,
    Namespace,
    /// Any other, read from the object's body: a dotted name.
    Body(Box<str>),
}

impl Field {
    fn parse(label: &str) -> Option<Self> {
        Some(match label {
            "metadata.name" => Field::Name,
            "metadata.namespace" => Field::Namespace,
            other => {
                let dotted_name = other.split('.').all(|part| {
                    !part.is_empty()
                        && part
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                });
                if !dotted_name {
                    return None;
                }
                Field::Body(other.into())
            }
        })
    }

    fn label(&self) -> &str {
        match self {
            Field::Name => "metadata.name",
            Field::Namespace => "metadata.namespace",
            Field::Body(label) => label,
        }
    }
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
            let field = Field::parse(lhs.trim()).ok_or_else(|| {
                syntax(
                    term,
                    "a field is a dotted name of letters, digits, '_' and '-', like spec.nodeName",
                )
            })?;
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

    /// The fields it names, each once, in the order of their text (the order in which
    /// kube-apiserver checks them, so the first it lacks is the one it names).
    pub fn fields(&self) -> BTreeSet<&str> {
        self.terms.iter().map(|term| term.field.label()).collect()
    }

    /// Whether it names no field but `metadata.name` and `metadata.namespace`, so that an
    /// object's key alone answers it.
    pub fn reads_key_only(&self) -> bool {
        self.terms
            .iter()
            .all(|term| !matches!(term.field, Field::Body(_)))
    }

    /// Whether the object with this key matches, `body_field` giving the value of each other
    /// field it names (`None` for an absent field, which reads as `""`).
    pub fn matches(
        &self,
        key: &ObjectKey,
        mut body_field: impl FnMut(&str) -> Option<String>,
    ) -> bool {
        self.terms.iter().all(|term| {
            let matched = match &term.field {
                Field::Name => key.name() == term.value,
                Field::Namespace => key.namespace().unwrap_or("") == term.value,
                Field::Body(label) => body_field(label).unwrap_or_default() == term.value,
            };
            matched != term.negated
        })
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
            let field = term.field.label();
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
