//! Kubernetes label and field selectors: parsing, matching, and their canonical text.
//!
//! The syntax is the API server's (`labelSelector=` and `fieldSelector=` query parameters), so
//! a selector parsed here can be sent to a real server as its [`Display`](fmt::Display) text,
//! and the in-memory server ([`crate::memory`]) filters with the same rules a real one does.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use crate::object::{Object, ObjectKey};

/// Why a selector string was refused. Every message quotes the selector and the offending part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The label selector does not follow the grammar.
    #[error("label selector {selector:?}: at byte {at}: found {found}, expected {expected}")]
    Syntax {
        /// The whole selector.
        selector: String,
        /// Byte offset of the offending token.
        at: usize,
        /// The offending token, quoted, or `end of string`.
        found: String,
        /// What the grammar allows there.
        expected: &'static str,
    },
    /// A label key is not a valid qualified name.
    #[error("label selector {selector:?}: invalid label key {key:?}: {reason}")]
    InvalidKey {
        /// The whole selector.
        selector: String,
        /// The offending key.
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A label value is not valid (or not an integer where `>`/`<` need one).
    #[error("label selector {selector:?}: invalid value {value:?} for label {key:?}: {reason}")]
    InvalidValue {
        /// The whole selector.
        selector: String,
        /// The label the value belongs to.
        key: String,
        /// The offending value.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A field selector term is malformed.
    #[error("field selector {selector:?}: term {term:?}: {reason}")]
    FieldSyntax {
        /// The whole selector.
        selector: String,
        /// The offending term.
        term: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A field selector names a field other than `metadata.name` and `metadata.namespace`.
    #[error(
        "field selector {selector:?}: field {field:?} is not supported; \
         use metadata.name or metadata.namespace"
    )]
    UnsupportedField {
        /// The whole selector.
        selector: String,
        /// The unsupported field.
        field: String,
    },
}

/// Something with labels that a [`LabelSelector`] can test.
pub trait Labels {
    /// The value of label `key`, if present.
    fn label(&self, key: &str) -> Option<&str>;
}

impl Labels for Object {
    fn label(&self, key: &str) -> Option<&str> {
        Object::label(self, key)
    }
}

impl Labels for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// A label selector: a conjunction of requirements on an object's labels.
///
/// Contract: [`parse`](Self::parse) accepts the API server's syntax (`a=b`, `a==b`, `a!=b`,
/// `a in (x,y)`, `a notin (x)`, `a`, `!a`, `a>1`, `a<1`, joined by commas, white space between
/// tokens ignored) and validates keys and values as the server does. The empty selector
/// matches everything. [`matches`](Self::matches) follows the server: `!=` and `notin` also
/// match objects without the label; `>` and `<` match only integer label values.
/// [`Display`](fmt::Display) writes the canonical text (requirements sorted, `==` written `=`,
/// set values sorted), which parses back to an equal selector. Two selectors that differ only
/// in the order of their requirements are equal and hash alike.
///
/// One leniency: `in` and `notin` are accepted as label keys (the server's lexer refuses them
/// there), so that every valid key round-trips.
///
/// ```
/// use std::collections::BTreeMap;
/// use kubeplug_informer::selector::LabelSelector;
///
/// let selector = LabelSelector::parse("tier in (web, api), !legacy, team == a").unwrap();
/// assert_eq!(selector.to_string(), "!legacy,team=a,tier in (api,web)");
/// let labels = BTreeMap::from([
///     ("team".to_owned(), "a".to_owned()),
///     ("tier".to_owned(), "web".to_owned()),
/// ]);
/// assert!(selector.matches(&labels));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    /// Sorted and without duplicates, so that equal selectors compare and print equal.
    requirements: Vec<Requirement>,
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Requirement {
    /// A valid qualified name.
    key: String,
    op: Operator,
}

/// What a requirement asks of its label. Every value is a valid label value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Operator {
    Exists,
    DoesNotExist,
    Equals(String),
    NotEquals(String),
    /// Never empty (`()` means the one value `""`, as on the server).
    In(BTreeSet<String>),
    /// Never empty.
    NotIn(BTreeSet<String>),
    GreaterThan(i64),
    LessThan(i64),
}

impl LabelSelector {
    /// Parses the API server's label selector syntax; the empty string selects everything.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let mut parser = Parser {
            selector: text,
            lexer: Lexer { text, pos: 0 },
        };
        let mut requirements = Vec::new();
        if parser.lexer.peek().1 != Token::End {
            loop {
                requirements.push(parser.requirement()?);
                match parser.lexer.next() {
                    (_, Token::End) => break,
                    (_, Token::Comma) => {}
                    (at, token) => return Err(parser.syntax(at, token, "',' or end of string")),
                }
            }
        }
        requirements.sort_unstable();
        requirements.dedup();
        Ok(Self { requirements })
    }

    /// The selector that matches everything.
    pub fn everything() -> Self {
        Self::default()
    }

    /// Whether this selector matches everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

impl FromStr for LabelSelector {
    type Err = SelectorError;

    fn from_str(text: &str) -> Result<Self, SelectorError> {
        Self::parse(text)
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, requirement) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}

impl Requirement {
    fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        let value = labels.label(&self.key);
        let integer = || value.and_then(|v| v.parse::<i64>().ok());
        match &self.op {
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::Equals(expected) => value == Some(expected),
            Operator::NotEquals(expected) => value != Some(expected),
            Operator::In(set) => value.is_some_and(|v| set.contains(v)),
            Operator::NotIn(set) => !value.is_some_and(|v| set.contains(v)),
            Operator::GreaterThan(bound) => integer().is_some_and(|v| v > *bound),
            Operator::LessThan(bound) => integer().is_some_and(|v| v < *bound),
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = &self.key;
        let set = |f: &mut fmt::Formatter<'_>, op: &str, values: &BTreeSet<String>| {
            write!(f, "{key} {op} (")?;
            for (i, value) in values.iter().enumerate() {
                if i > 0 {
                    f.write_str(",")?;
                }
                f.write_str(value)?;
            }
            f.write_str(")")
        };
        match &self.op {
            Operator::Exists => write!(f, "{key}"),
            Operator::DoesNotExist => write!(f, "!{key}"),
            Operator::Equals(value) => write!(f, "{key}={value}"),
            Operator::NotEquals(value) => write!(f, "{key}!={value}"),
            Operator::In(values) => set(f, "in", values),
            Operator::NotIn(values) => set(f, "notin", values),
            Operator::GreaterThan(bound) => write!(f, "{key}>{bound}"),
            Operator::LessThan(bound) => write!(f, "{key}<{bound}"),
        }
    }
}

/// A token of the label selector syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token<'a> {
    /// A run of anything but white space and the symbols below; keys, values, `in`, `notin`.
    Ident(&'a str),
    Bang,
    Equals,
    DoubleEquals,
    NotEquals,
    Greater,
    Less,
    Open,
    Close,
    Comma,
    End,
}

impl fmt::Display for Token<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let symbol = match self {
            Token::Ident(text) => return write!(f, "'{text}'"),
            Token::End => return f.write_str("end of string"),
            Token::Bang => "!",
            Token::Equals => "=",
            Token::DoubleEquals => "==",
            Token::NotEquals => "!=",
            Token::Greater => ">",
            Token::Less => "<",
            Token::Open => "(",
            Token::Close => ")",
            Token::Comma => ",",
        };
        write!(f, "'{symbol}'")
    }
}

/// Splits a label selector into tokens, as the server's lexer does.
#[derive(Clone)]
struct Lexer<'a> {
    text: &'a str,
    /// Byte offset of the next unread byte; always on a character boundary.
    pos: usize,
}

impl<'a> Lexer<'a> {
    /// The next token and its byte offset.
    fn next(&mut self) -> (usize, Token<'a>) {
        let bytes = self.text.as_bytes();
        while bytes.get(self.pos).is_some_and(|&b| is_space(b)) {
            self.pos += 1;
        }
        let start = self.pos;
        let Some(&byte) = bytes.get(start) else {
            return (start, Token::End);
        };
        let followed_by_equals = bytes.get(start + 1) == Some(&b'=');
        let (token, len) = match byte {
            b'!' if followed_by_equals => (Token::NotEquals, 2),
            b'!' => (Token::Bang, 1),
            b'=' if followed_by_equals => (Token::DoubleEquals, 2),
            b'=' => (Token::Equals, 1),
            b'>' => (Token::Greater, 1),
            b'<' => (Token::Less, 1),
            b'(' => (Token::Open, 1),
            b')' => (Token::Close, 1),
            b',' => (Token::Comma, 1),
            _ => {
                let len = bytes[start..]
                    .iter()
                    .position(|&b| is_space(b) || is_symbol(b))
                    .unwrap_or(bytes.len() - start);
                // Symbols and spaces are ASCII, so `start + len` is a character boundary.
                (Token::Ident(&self.text[start..start + len]), len)
            }
        };
        self.pos += len;
        (start, token)
    }

    /// The next token without consuming it.
    fn peek(&self) -> (usize, Token<'a>) {
        self.clone().next()
    }
}

fn is_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_symbol(byte: u8) -> bool {
    matches!(byte, b'!' | b'=' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Recursive descent over the label selector grammar.
struct Parser<'a> {
    selector: &'a str,
    lexer: Lexer<'a>,
}

impl<'a> Parser<'a> {
    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        let (mut at, mut token) = self.lexer.next();
        let negated = token == Token::Bang;
        if negated {
            (at, token) = self.lexer.next();
        }
        let Token::Ident(key) = token else {
            return Err(self.syntax(at, token, "a label key or '!'"));
        };
        check_key(key).map_err(|reason| SelectorError::InvalidKey {
            selector: self.selector.to_owned(),
            key: key.to_owned(),
            reason,
        })?;
        let (at, token) = self.lexer.peek();
        if matches!(token, Token::End | Token::Comma) {
            let op = if negated {
                Operator::DoesNotExist
            } else {
                Operator::Exists
            };
            return Ok(Requirement {
                key: key.to_owned(),
                op,
            });
        }
        if negated {
            return Err(self.syntax(at, token, "',' or end of string after '!key'"));
        }
        self.lexer.next();
        let op = match token {
            Token::Equals | Token::DoubleEquals => Operator::Equals(self.exact_value(key)?),
            Token::NotEquals => Operator::NotEquals(self.exact_value(key)?),
            Token::Ident("in") => Operator::In(self.value_set(key)?),
            Token::Ident("notin") => Operator::NotIn(self.value_set(key)?),
            Token::Greater => Operator::GreaterThan(self.integer(key)?),
            Token::Less => Operator::LessThan(self.integer(key)?),
            _ => {
                return Err(self.syntax(
                    at,
                    token,
                    "'=', '==', '!=', 'in', 'notin', '>', '<', ',' or end of string",
                ));
            }
        };
        Ok(Requirement {
            key: key.to_owned(),
            op,
        })
    }

    /// The value after `=`, `==` or `!=`; empty when a comma or the end follows.
    fn exact_value(&mut self, key: &str) -> Result<String, SelectorError> {
        if matches!(self.lexer.peek().1, Token::End | Token::Comma) {
            return Ok(String::new());
        }
        match self.lexer.next() {
            (_, Token::Ident(value)) => self.value(key, value),
            (at, token) => Err(self.syntax(at, token, "a label value")),
        }
    }

    /// `(v1, v2, ...)`; empty items are the value `""`, so `()` is `{""}` as on the server.
    fn value_set(&mut self, key: &str) -> Result<BTreeSet<String>, SelectorError> {
        match self.lexer.next() {
            (_, Token::Open) => {}
            (at, token) => return Err(self.syntax(at, token, "'('")),
        }
        let mut values = BTreeSet::new();
        loop {
            match self.lexer.next() {
                (_, Token::Ident(value)) => {
                    values.insert(self.value(key, value)?);
                    match self.lexer.next() {
                        (_, Token::Comma) => {}
                        (_, Token::Close) => return Ok(values),
                        (at, token) => return Err(self.syntax(at, token, "',' or ')'")),
                    }
                }
                (_, Token::Comma) => {
                    values.insert(String::new());
                }
                (_, Token::Close) => {
                    values.insert(String::new());
                    return Ok(values);
                }
                (at, token) => return Err(self.syntax(at, token, "a label value, ',' or ')'")),
            }
        }
    }

    /// The integer after `>` or `<`.
    fn integer(&mut self, key: &str) -> Result<i64, SelectorError> {
        let (at, token) = self.lexer.next();
        let Token::Ident(text) = token else {
            return Err(self.syntax(at, token, "an integer"));
        };
        let value = self.value(key, text)?;
        value.parse().map_err(|_| SelectorError::InvalidValue {
            selector: self.selector.to_owned(),
            key: key.to_owned(),
            value,
            reason: "'>' and '<' need an integer",
        })
    }

    fn value(&self, key: &str, value: &str) -> Result<String, SelectorError> {
        check_value(value).map_err(|reason| SelectorError::InvalidValue {
            selector: self.selector.to_owned(),
            key: key.to_owned(),
            value: value.to_owned(),
            reason,
        })?;
        Ok(value.to_owned())
    }

    fn syntax(&self, at: usize, found: Token<'_>, expected: &'static str) -> SelectorError {
        SelectorError::Syntax {
            selector: self.selector.to_owned(),
            at,
            found: found.to_string(),
            expected,
        }
    }
}

/// Checks a label key: an optional DNS-1123 subdomain prefix and `/`, then a name.
fn check_key(key: &str) -> Result<(), &'static str> {
    let name = match key.split_once('/') {
        Some((prefix, name)) => {
            if prefix.is_empty() {
                return Err("the prefix before '/' is empty");
            }
            if prefix.len() > 253 {
                return Err("the prefix before '/' is longer than 253 characters");
            }
            if !prefix.split('.').all(is_dns_label) {
                return Err(
                    "the prefix before '/' must be a DNS subdomain (lower-case alphanumerics, \
                     '-' and '.', each part starting and ending with an alphanumeric)",
                );
            }
            name
        }
        None => key,
    };
    if name.is_empty() {
        return Err("the name is empty");
    }
    check_value(name)
}

/// Checks a label value (also the name part of a key): at most 63 characters, alphanumerics,
/// `-`, `_` and `.`, starting and ending with an alphanumeric; empty is allowed.
fn check_value(value: &str) -> Result<(), &'static str> {
    let bytes = value.as_bytes();
    if bytes.len() > 63 {
        return Err("longer than 63 characters");
    }
    let Some((&first, rest)) = bytes.split_first() else {
        return Ok(());
    };
    let last = rest.last().copied().unwrap_or(first);
    if !first.is_ascii_alphanumeric() || !last.is_ascii_alphanumeric() {
        return Err("must start and end with an alphanumeric character");
    }
    if !bytes
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err("may contain only alphanumerics, '-', '_' and '.'");
    }
    Ok(())
}

/// One dot-separated part of a DNS-1123 subdomain: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
fn is_dns_label(part: &str) -> bool {
    let bytes = part.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
        && bytes.iter().all(|b| alnum(b) || *b == b'-')
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn selects(selector: &str, pairs: &[(&str, &str)]) -> bool {
        LabelSelector::parse(selector)
            .unwrap_or_else(|e| panic!("{e}"))
            .matches(&labels(pairs))
    }

    #[test]
    fn every_operator_matches_as_on_the_server() {
        let web = [("app", "web"), ("tier", "front"), ("replicas", "3")];
        assert!(selects("", &web));
        assert!(selects("app=web", &web));
        assert!(selects("app==web", &web));
        assert!(!selects("app=api", &web));
        assert!(selects("app!=api", &web));
        assert!(selects("missing!=x", &web), "!= matches a missing label");
        assert!(selects("app in (api,web)", &web));
        assert!(!selects("missing in (x)", &web));
        assert!(selects("app notin (api)", &web));
        assert!(
            selects("missing notin (x)", &web),
            "notin matches a missing label"
        );
        assert!(!selects("app notin (web)", &web));
        assert!(selects("app", &web));
        assert!(!selects("missing", &web));
        assert!(selects("!missing", &web));
        assert!(!selects("!app", &web));
        assert!(selects("replicas>2", &web));
        assert!(!selects("replicas>3", &web));
        assert!(selects("replicas<4", &web));
        assert!(
            !selects("app>1", &web),
            "> never matches a non-integer value"
        );
        assert!(!selects("missing<1", &web));
        assert!(selects("app=web,tier=front", &web));
        assert!(!selects("app=web,tier=back", &web));
        assert!(selects("empty=", &[("empty", "")]));
        assert!(!selects("empty=", &[]));
        assert!(selects("empty in ()", &[("empty", "")]));
    }

    #[test]
    fn white_space_and_canonical_text() {
        let cases = [
            ("  ", ""),
            ("a = b", "a=b"),
            ("a == b", "a=b"),
            ("a!=b", "a!=b"),
            ("b, a", "a,b"),
            ("z in ( y , x ), !w", "!w,z in (x,y)"),
            ("a notin (x,)", "a notin (,x)"),
            ("a in ()", "a in ()"),
            ("x.io/a>07", "x.io/a>7"),
            ("a<1", "a<1"),
            ("a=", "a="),
            ("a=b,a=b", "a=b"),
            ("in=notin", "in=notin"),
            ("a in (in,notin)", "a in (in,notin)"),
            ("\ta\n", "a"),
        ];
        for (text, canonical) in cases {
            let selector = LabelSelector::parse(text).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(selector.to_string(), canonical, "{text:?}");
            assert_eq!(LabelSelector::parse(canonical).unwrap(), selector);
        }
        assert!(LabelSelector::parse("").unwrap().is_empty());
        assert_eq!(
            "a=b".parse::<LabelSelector>().unwrap(),
            LabelSelector::parse("a==b").unwrap()
        );
    }

    #[test]
    fn syntax_errors_name_the_selector_and_the_token() {
        let err = LabelSelector::parse("team===a").unwrap_err();
        assert_eq!(
            err.to_string(),
            "label selector \"team===a\": at byte 6: found '=', expected a label value"
        );
        for (text, at, found) in [
            ("a=b,", 4, "end of string"),
            (",a", 0, "','"),
            ("a b", 2, "'b'"),
            ("!a=b", 2, "'='"),
            ("a in x", 5, "'x'"),
            ("a in (x", 7, "end of string"),
            ("a in (x y)", 8, "'y'"),
            ("a in (=)", 6, "'='"),
            ("a=b c", 4, "'c'"),
            ("a>", 2, "end of string"),
            ("!", 1, "end of string"),
            ("(a)", 0, "'('"),
            ("a ! = b", 2, "'!'"),
        ] {
            match LabelSelector::parse(text) {
                Err(SelectorError::Syntax {
                    selector,
                    at: got_at,
                    found: got,
                    ..
                }) => {
                    assert_eq!(selector, text);
                    assert_eq!((got_at, got.as_str()), (at, found), "{text:?}");
                }
                other => panic!("{text:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn keys_and_values_are_validated() {
        for key in [
            "-a",
            "a-",
            "a/b/c",
            "/a",
            "A.io/a",
            "a..b/c",
            "x/",
            "a b",
            "ké",
            &"a".repeat(64),
            &format!("{}/a", "a".repeat(254)),
        ] {
            let text = format!("{key}=x");
            match LabelSelector::parse(&text) {
                Err(SelectorError::InvalidKey { key: got, .. }) => assert_eq!(got, key),
                Err(SelectorError::Syntax { .. }) if key.contains(' ') => {}
                other => panic!("{text:?} gave {other:?}"),
            }
        }
        for key in [
            "a",
            "A_b.c-D9",
            "example.com/a",
            "k8s.io/x",
            &"a".repeat(63),
            &format!("{}/{}", "a".repeat(253), "b".repeat(63)),
        ] {
            LabelSelector::parse(key).unwrap_or_else(|e| panic!("{e}"));
        }
        for value in ["-x", "x-", "a/b", "ä", &"v".repeat(64)] {
            let text = format!("k={value}");
            let err = LabelSelector::parse(&text).unwrap_err();
            let SelectorError::InvalidValue { value: v, key, .. } = &err else {
                panic!("{text:?} gave {err:?}");
            };
            assert_eq!((v.as_str(), key.as_str()), (value, "k"));
        }
        let err = LabelSelector::parse("k>x").unwrap_err();
        assert!(err.to_string().contains("need an integer"), "{err}");
        let err = LabelSelector::parse("k in (a, -b)").unwrap_err();
        assert!(err.to_string().contains("\"-b\""), "{err}");
        assert!(err.to_string().contains("\"k in (a, -b)\""), "{err}");
    }

    #[test]
    fn field_selectors() {
        let prod_web = ObjectKey::new(Some("prod"), "web");
        let node = ObjectKey::new(None, "node-1");
        let sel = |text: &str| FieldSelector::parse(text).unwrap_or_else(|e| panic!("{e}"));
        assert!(sel("").matches_key(&prod_web));
        assert!(sel("metadata.name=web").matches_key(&prod_web));
        assert!(sel("metadata.name==web").matches_key(&prod_web));
        assert!(!sel("metadata.name!=web").matches_key(&prod_web));
        assert!(sel("metadata.namespace=prod,metadata.name=web").matches_key(&prod_web));
        assert!(!sel("metadata.namespace=prod,metadata.name=api").matches_key(&prod_web));
        assert!(sel("metadata.namespace=").matches_key(&node));
        assert!(!sel("metadata.namespace=").matches_key(&prod_web));
        assert!(sel(" metadata.name = node-1 ").matches_key(&node));
        assert_eq!(
            sel("metadata.name=a\\,b").to_string(),
            "metadata.name=a\\,b"
        );
        assert!(sel("metadata.name=a\\=b").matches_key(&ObjectKey::new(None, "a=b")));

        let err = FieldSelector::parse("metadata.name=a,spec.nodeName=n1").unwrap_err();
        assert_eq!(
            err,
            SelectorError::UnsupportedField {
                selector: "metadata.name=a,spec.nodeName=n1".into(),
                field: "spec.nodeName".into()
            }
        );
        assert!(err.to_string().contains("spec.nodeName"), "{err}");
        for bad in ["metadata.name", "metadata.name=a=b", "metadata.name=a\\x"] {
            let err = FieldSelector::parse(bad).unwrap_err();
            assert!(
                matches!(&err, SelectorError::FieldSyntax { selector, .. } if selector == bad),
                "{bad:?} gave {err:?}"
            );
        }
    }

    /// A requirement as plain data, with its own obviously correct evaluation.
    #[derive(Debug, Clone)]
    enum Spec {
        Exists(String),
        Absent(String),
        Eq(String, String, bool),
        Ne(String, String),
        In(String, Vec<String>),
        NotIn(String, Vec<String>),
        Gt(String, u8),
        Lt(String, u8),
    }

    impl Spec {
        fn holds(&self, labels: &BTreeMap<String, String>) -> bool {
            let get = |k: &String| labels.get(k).map(String::as_str);
            let int = |k: &String| get(k).and_then(|v| v.parse::<i64>().ok());
            match self {
                Spec::Exists(k) => labels.contains_key(k),
                Spec::Absent(k) => !labels.contains_key(k),
                Spec::Eq(k, v, _) => get(k) == Some(v.as_str()),
                Spec::Ne(k, v) => get(k) != Some(v.as_str()),
                Spec::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
                Spec::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
                Spec::Gt(k, n) => int(k).is_some_and(|x| x > i64::from(*n)),
                Spec::Lt(k, n) => int(k).is_some_and(|x| x < i64::from(*n)),
            }
        }

        /// The requirement as text, with `sp` around the tokens.
        fn text(&self, sp: &str) -> String {
            let list = |vs: &Vec<String>| {
                if vs.is_empty() {
                    String::new()
                } else {
                    vs.join(&format!("{sp},{sp}"))
                }
            };
            match self {
                Spec::Exists(k) => format!("{sp}{k}{sp}"),
                Spec::Absent(k) => format!("{sp}!{sp}{k}{sp}"),
                Spec::Eq(k, v, double) => {
                    let op = if *double { "==" } else { "=" };
                    format!("{sp}{k}{sp}{op}{sp}{v}{sp}")
                }
                Spec::Ne(k, v) => format!("{sp}{k}{sp}!={sp}{v}{sp}"),
                Spec::In(k, vs) => format!("{k} in{sp}({sp}{}{sp})", list(vs)),
                Spec::NotIn(k, vs) => format!("{k} notin{sp}({sp}{}{sp})", list(vs)),
                Spec::Gt(k, n) => format!("{k}{sp}>{sp}{n}"),
                Spec::Lt(k, n) => format!("{k}{sp}<{sp}{n}"),
            }
        }
    }

    const KEYS: [&str; 4] = ["app", "example.com/tier", "n", "in"];
    const VALUES: [&str; 5] = ["", "a", "b", "1", "10"];

    fn key() -> impl Strategy<Value = String> {
        prop::sample::select(&KEYS[..]).prop_map(str::to_owned)
    }
    fn value() -> impl Strategy<Value = String> {
        prop::sample::select(&VALUES[..]).prop_map(str::to_owned)
    }
    fn nonempty_value() -> impl Strategy<Value = String> {
        prop::sample::select(&VALUES[1..]).prop_map(str::to_owned)
    }

    fn spec() -> impl Strategy<Value = Spec> {
        let set = || prop::collection::vec(nonempty_value(), 1..4);
        prop_oneof![
            key().prop_map(Spec::Exists),
            key().prop_map(Spec::Absent),
            (key(), value(), any::<bool>()).prop_map(|(k, v, d)| Spec::Eq(k, v, d)),
            (key(), value()).prop_map(|(k, v)| Spec::Ne(k, v)),
            (key(), set()).prop_map(|(k, vs)| Spec::In(k, vs)),
            (key(), set()).prop_map(|(k, vs)| Spec::NotIn(k, vs)),
            (key(), 0u8..12).prop_map(|(k, n)| Spec::Gt(k, n)),
            (key(), 0u8..12).prop_map(|(k, n)| Spec::Lt(k, n)),
        ]
    }

    fn label_map() -> impl Strategy<Value = BTreeMap<String, String>> {
        prop::collection::btree_map(key(), value(), 0..4)
    }

    fn term() -> impl Strategy<Value = (bool, bool, String)> {
        let value = prop::sample::select(&["", "a", "web-1", "a,b", "x=y", "back\\slash"][..]);
        (any::<bool>(), any::<bool>(), value.prop_map(str::to_owned))
    }

    /// Checks one case of `label_selectors_agree_with_the_reference`.
    fn label_selector_case(
        specs: &[Spec],
        spaced: bool,
        maps: &[BTreeMap<String, String>],
    ) -> Result<(), TestCaseError> {
        let sp = if spaced { " " } else { "" };
        let text = specs
            .iter()
            .map(|s| s.text(sp))
            .collect::<Vec<_>>()
            .join(",");
        let selector =
            LabelSelector::parse(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let reparsed = LabelSelector::parse(&selector.to_string())
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&reparsed, &selector);
        prop_assert_eq!(reparsed.to_string(), selector.to_string());
        for labels in maps {
            let expected = specs.iter().all(|s| s.holds(labels));
            prop_assert_eq!(
                selector.matches(labels),
                expected,
                "{} on {:?}",
                text,
                labels
            );
        }
        Ok(())
    }

    /// Checks one case of `field_selectors_round_trip`.
    fn field_selector_case(terms: &[(bool, bool, String)]) -> Result<(), TestCaseError> {
        let text = terms
            .iter()
            .map(|(namespace, negated, value)| {
                let field = if *namespace {
                    "metadata.namespace"
                } else {
                    "metadata.name"
                };
                let op = if *negated { "!=" } else { "==" };
                let escaped = value
                    .replace('\\', "\\\\")
                    .replace(',', "\\,")
                    .replace('=', "\\=");
                format!("{field}{op}{escaped}")
            })
            .collect::<Vec<_>>()
            .join(",");
        let selector =
            FieldSelector::parse(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(
            FieldSelector::parse(&selector.to_string()).unwrap(),
            selector.clone()
        );
        let keys = [
            (Some("a"), "web-1"),
            (None, "a,b"),
            (Some("x=y"), "back\\slash"),
        ];
        for (namespace, name) in keys {
            let key = ObjectKey::new(namespace, name);
            let expected = terms.iter().all(|(on_namespace, negated, value)| {
                let actual = if *on_namespace {
                    namespace.unwrap_or("")
                } else {
                    name
                };
                (actual == value) != *negated
            });
            prop_assert_eq!(selector.matches_key(&key), expected, "{} on {}", text, key);
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn label_selectors_agree_with_the_reference(
            specs in prop::collection::vec(spec(), 0..5),
            spaced in any::<bool>(),
            maps in prop::collection::vec(label_map(), 1..8),
        ) {
            label_selector_case(&specs, spaced, &maps)?;
        }

        #[test]
        fn field_selectors_round_trip(terms in prop::collection::vec(term(), 0..4)) {
            field_selector_case(&terms)?;
        }
    }
}
