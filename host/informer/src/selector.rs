//! Kubernetes label and field selectors: parsing, matching, and their canonical text.
//!
//! The syntax is the API server's (`labelSelector=` and `fieldSelector=` query parameters), so
//! a selector parsed here can be sent to a real server as its [`Display`](fmt::Display) text,
//! and the in-memory server (`kubeplug-memory`) filters with the same rules a real one does.

use std::collections::BTreeMap;

use crate::object::Object;

mod fields;
mod labels;
#[cfg(test)]
mod tests;

pub use fields::FieldSelector;
pub use labels::LabelSelector;

/// Why a selector string was refused. Every message quotes the selector and the offending part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
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
