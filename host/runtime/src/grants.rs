//! Host-side policy: what a loaded plugin may read and write, from its [`Grants`] alone (the
//! configuration's, from `kubeplug-policy`), and what its description asks beyond them.

use std::collections::BTreeSet;

use kubeplug_policy::{Grants, Gvk, WriteVerb};

use crate::description::Description;

/// The effective policy of a loaded plugin: it reads what it both declares and is granted,
/// and writes what it is granted. Nothing the plugin declares adds to its grants; a
/// subscription is a read like any other.
#[derive(Debug, Clone, Default)]
pub(crate) struct Policy {
    grants: Grants,
    /// The types it declares it reads ([`Description::read_types`]).
    declared: BTreeSet<Gvk>,
}

impl Policy {
    pub(crate) fn new(grants: &Grants, declared: BTreeSet<Gvk>) -> Self {
        Self {
            grants: grants.clone(),
            declared,
        }
    }

    pub(crate) fn may_read(&self, resource: &Gvk) -> bool {
        self.declared.contains(resource) && self.grants.may_read(resource)
    }

    pub(crate) fn may_write(&self, resource: &Gvk, verb: WriteVerb) -> bool {
        self.grants.may_write(resource, verb)
    }

    /// Whether a write may go to `namespace` (`None`: a cluster-scoped object).
    pub(crate) fn may_write_in(&self, namespace: Option<&str>) -> bool {
        self.grants.may_write_in(namespace)
    }
}

/// The reads of `description` that `grants` do not allow: the load fails on any.
pub(crate) fn reads_not_granted(grants: &Grants, description: &Description) -> Vec<Gvk> {
    description
        .read_types()
        .into_iter()
        .filter(|read| !grants.may_read(read))
        .collect()
}

/// The writes `description` asks for that `grants` do not allow, as readable lines (logged
/// at load: the plugin loads, and gets `not-permitted` when it tries them).
pub(crate) fn writes_not_granted(grants: &Grants, description: &Description) -> Vec<String> {
    let mut missing = Vec::new();
    for (resource, verbs) in &description.writes {
        for verb in verbs {
            if !grants.may_write(resource, *verb) {
                missing.push(format!("{verb} {resource}"));
            }
        }
    }
    missing
}

/// The configuration lines that would grant `plugin` the reads `missing`.
pub(crate) fn grant_lines(plugin: &str, missing: &[Gvk]) -> String {
    let types: Vec<String> = missing.iter().map(|gvk| format!("\"{gvk}\"")).collect();
    format!("[plugins.{plugin}.grants]\nread = [{}]", types.join(", "))
}
