//! Host-side policy: what each plugin may read beyond its subscriptions and what it may write.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::description::{Description, WriteVerb};
use crate::gvk::Gvk;

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

    /// What `description` asks for beyond these grants, as readable lines (logged at load).
    pub fn shortfall(&self, description: &Description) -> Vec<String> {
        let mut missing = Vec::new();
        for read in &description.reads {
            if !self.read.contains(read) && !description.subscribed().any(|s| s == read) {
                missing.push(format!("read {read}"));
            }
        }
        for (resource, verbs) in &description.writes {
            for verb in verbs {
                if !self.write.get(resource).is_some_and(|v| v.contains(verb)) {
                    missing.push(format!("{verb} {resource}"));
                }
            }
        }
        missing
    }
}

/// The effective policy of a loaded plugin: its grants plus its subscriptions.
#[derive(Debug, Clone, Default)]
pub(crate) struct Policy {
    readable: BTreeSet<Gvk>,
    writable: BTreeMap<Gvk, BTreeSet<WriteVerb>>,
}

impl Policy {
    pub(crate) fn new(grants: &Grants, subscribed: impl IntoIterator<Item = Gvk>) -> Self {
        let mut readable = grants.read.clone();
        readable.extend(subscribed);
        Self {
            readable,
            writable: grants.write.clone(),
        }
    }

    pub(crate) fn may_read(&self, resource: &Gvk) -> bool {
        self.readable.contains(resource)
    }

    pub(crate) fn may_write(&self, resource: &Gvk, verb: WriteVerb) -> bool {
        self.writable
            .get(resource)
            .is_some_and(|v| v.contains(&verb))
    }
}
