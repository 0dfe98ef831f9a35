//! What the host's configuration allows one plugin to read beyond its subscriptions and to
//! write.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::gvk::Gvk;

/// A kind of write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WriteVerb {
    /// Server-side apply.
    Apply,
    /// Patch of the object.
    Patch,
    /// Patch of its status subresource.
    PatchStatus,
    /// Create.
    Create,
    /// Delete.
    Delete,
    /// Record a Kubernetes Event about objects of the type.
    RecordEvent,
}

impl std::fmt::Display for WriteVerb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Apply => "apply",
            Self::Patch => "patch",
            Self::PatchStatus => "patch-status",
            Self::Create => "create",
            Self::Delete => "delete",
            Self::RecordEvent => "record-event",
        })
    }
}

/// What the host's configuration allows one plugin. Never taken from the plugin itself.
///
/// Contract: the default grants nothing: the plugin reads only what it subscribes to and
/// writes nothing. A read is allowed if the type is subscribed or in `read`; a write if its
/// verb is listed for the type in `write`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grants {
    /// Resource types readable beyond the subscriptions.
    #[serde(default)]
    pub read: BTreeSet<Gvk>,
    /// Writes allowed, by resource type.
    #[serde(default)]
    pub write: BTreeMap<Gvk, BTreeSet<WriteVerb>>,
}

impl Grants {
    /// Allows reading `resource`.
    pub fn allow_read(mut self, resource: Gvk) -> Self {
        self.read.insert(resource);
        self
    }

    /// Allows `verb` on `resource`.
    pub fn allow_write(mut self, resource: Gvk, verb: WriteVerb) -> Self {
        self.write.entry(resource).or_default().insert(verb);
        self
    }

    /// Whether `verb` on `resource` is granted.
    pub fn may_write(&self, resource: &Gvk, verb: WriteVerb) -> bool {
        self.write
            .get(resource)
            .is_some_and(|verbs| verbs.contains(&verb))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_read_and_print_in_kebab_case() {
        let verb: WriteVerb = serde_json::from_str("\"patch-status\"").unwrap();
        assert_eq!(verb, WriteVerb::PatchStatus);
        assert_eq!(WriteVerb::RecordEvent.to_string(), "record-event");
        assert!(serde_json::from_str::<WriteVerb>("\"destroy\"").is_err());
    }

    #[test]
    fn the_default_grants_nothing() {
        let pods = Gvk::new("", "v1", "Pod");
        let grants = Grants::default();
        assert!(grants.read.is_empty());
        assert!(!grants.may_write(&pods, WriteVerb::Create));
        let grants = grants.allow_write(pods.clone(), WriteVerb::Create);
        assert!(grants.may_write(&pods, WriteVerb::Create));
        assert!(!grants.may_write(&pods, WriteVerb::Delete));
    }
}
