//! Resource types as plugins name them: group, version, kind.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A resource type by API group, version and kind, as plugins and grants name it.
///
/// Contract: the core group is `""`; `Display` writes `v1/Pod` for the core group and
/// `apps/v1/Deployment` otherwise. Ordered and hashable, so it keys maps and grant sets.
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

impl From<crate::bindings::wit::Gvk> for Gvk {
    fn from(g: crate::bindings::wit::Gvk) -> Self {
        Self {
            group: g.group,
            version: g.version,
            kind: g.kind,
        }
    }
}

impl From<&Gvk> for crate::bindings::wit::Gvk {
    fn from(g: &Gvk) -> Self {
        Self {
            group: g.group.clone(),
            version: g.version.clone(),
            kind: g.kind.clone(),
        }
    }
}
