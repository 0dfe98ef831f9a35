//! Resource types as plugins and grants name them: group, version, kind.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Text that is not a resource type written `apiVersion/Kind`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a type; write apiVersion/Kind, e.g. apps/v1/Deployment")]
pub struct GvkParseError {
    /// The text.
    pub text: String,
}

/// A resource type by API group, version and kind, as plugins and grants name it.
///
/// Contract: the core group is `""`; `Display` writes `v1/Pod` for the core group and
/// `apps/v1/Deployment` otherwise, and [`parse`](Self::parse) reads that form back. Ordered
/// and hashable, so it keys maps and grant sets.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Gvk {
    /// API group; empty for the core group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
}

impl Gvk {
    /// A resource type from its parts.
    pub fn new(group: &str, version: &str, kind: &str) -> Self {
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
        }
    }

    /// `v1/Secret` or `apps/v1/Deployment`, as the configuration writes types; the error
    /// says what was expected.
    pub fn parse(text: &str) -> Result<Self, GvkParseError> {
        let parts: Vec<&str> = text.split('/').collect();
        match parts.as_slice() {
            [version, kind] if !version.is_empty() && !kind.is_empty() => {
                Ok(Self::new("", version, kind))
            }
            [group, version, kind]
                if !group.is_empty() && !version.is_empty() && !kind.is_empty() =>
            {
                Ok(Self::new(group, version, kind))
            }
            _ => Err(GvkParseError {
                text: text.to_owned(),
            }),
        }
    }

    /// Whether each part is a valid name of its kind ([`names`](crate::names)): a type a
    /// plugin gives reaches discovery URLs and request paths only once checked.
    pub fn check(&self) -> Result<(), crate::NameError> {
        crate::names::check_group(&self.group)?;
        crate::names::check_version(&self.version)?;
        crate::names::check_kind(&self.kind)
    }

    /// The `apiVersion` field of its objects: `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl fmt::Display for Gvk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.api_version(), self.kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_parse_are_inverse() {
        for text in ["v1/Secret", "apps/v1/Deployment"] {
            assert_eq!(Gvk::parse(text).unwrap().to_string(), text);
        }
        assert_eq!(Gvk::parse("v1/Pod").unwrap(), Gvk::new("", "v1", "Pod"));
    }

    #[test]
    fn a_malformed_type_is_refused_saying_what_to_write() {
        for text in ["", "Pod", "v1/", "/v1/Pod", "a/b/c/d", "apps//Deployment"] {
            let error = Gvk::parse(text).unwrap_err().to_string();
            assert!(error.contains("write apiVersion/Kind"), "{text:?}: {error}");
        }
    }
}
