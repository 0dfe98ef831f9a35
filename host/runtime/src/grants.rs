//! Host-side policy: a loaded plugin's [`Grants`] (the configuration's, from
//! `kubeplug-policy`) joined with its subscriptions.

use std::collections::{BTreeMap, BTreeSet};

use kubeplug_policy::{Grants, Gvk, WriteVerb};

use crate::description::Description;

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

/// What `description` asks for beyond `grants`, as readable lines (logged at load).
pub(crate) fn shortfall(grants: &Grants, description: &Description) -> Vec<String> {
    let mut missing = Vec::new();
    for read in &description.reads {
        if !grants.read.contains(read) && !description.subscribed().any(|s| s == read) {
            missing.push(format!("read {read}"));
        }
    }
    for (resource, verbs) in &description.writes {
        for verb in verbs {
            if !grants.may_write(resource, *verb) {
                missing.push(format!("{verb} {resource}"));
            }
        }
    }
    missing
}
