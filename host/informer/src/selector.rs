//! Kubernetes label and field selectors: parsing, matching, and their canonical text.
//!
//! The syntax is the API server's (`labelSelector=` and `fieldSelector=` query parameters), so
//! a selector parsed here can be sent to a real server as its [`Display`](fmt::Display) text,
//! and the in-memory server (`kubeplug-memory`) filters with the same rules a real one does.

use std::collections::BTreeMap;

use kubeplug_policy::names::quoted;

use crate::object::Object;

mod fields;
mod labels;
#[cfg(test)]
mod tests;

pub use fields::FieldSelector;
pub use labels::LabelSelector;

/// Why a selector string was refused. Every message quotes the selector and the offending part,
/// each cut to [`MAX_QUOTED`](kubeplug_policy::names::MAX_QUOTED) bytes: a plugin chooses its
/// selectors, and one of 4 KiB would otherwise be printed whole in every message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SelectorError {
    /// The label selector does not follow the grammar.
    #[error("label selector {}: at byte {at}: found {found}, expected {expected}", quoted(.selector))]
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
    #[error("label selector {}: invalid label key {}: {reason}", quoted(.selector), quoted(.key))]
    InvalidKey {
        /// The whole selector.
        selector: String,
        /// The offending key.
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A label value is not valid (or not an integer where `>`/`<` need one).
    #[error(
        "label selector {}: invalid value {} for label {}: {reason}",
        quoted(.selector),
        quoted(.value),
        quoted(.key)
    )]
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
    #[error("field selector {}: term {}: {reason}", quoted(.selector), quoted(.term))]
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
