//! Label selectors: the API server's syntax, its validation of keys and values, and
//! matching.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use kubeplug_policy::names::{excerpt, is_dns_subdomain};

use super::{Labels, SelectorError};

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
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
            Token::Ident(text) => return write!(f, "'{}'", excerpt(text)),
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
            if !is_dns_subdomain(prefix) {
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
