//! Host-side policy: what a loaded plugin may read and write, from its [`Grants`] alone (the
//! configuration's, from `kubeplug-policy`), and what its description asks beyond them.

use std::collections::BTreeSet;

use kubeplug_policy::{Grants, Gvk, WriteVerb};

use crate::description::Description;

/// The effective policy of a loaded plugin: it reads what it both declares and is granted,
/// and writes what it is granted. Nothing the plugin declares adds to its grants; a
/// subscription is a read like any other. Of what it may read, it reads the objects' JSON
/// and projects values only where its description says it reads bodies.
#[derive(Debug, Clone, Default)]
pub(crate) struct Policy {
    grants: Grants,
    /// The types it declares it reads ([`Description::read_types`]).
    declared: BTreeSet<Gvk>,
    /// Those whose cache reads carry JSON ([`Description::json_types`]).
    json: BTreeSet<Gvk>,
    /// Those it may read through projections ([`Description::body_types`]).
    bodies: BTreeSet<Gvk>,
}

impl Policy {
    pub(crate) fn new(grants: &Grants, description: &Description) -> Self {
        Self {
            grants: grants.clone(),
            declared: description.read_types(),
            json: description.json_types(),
            bodies: description.body_types(),
        }
    }

    /// A policy that declares `types` read whole, bodies and all ([`crate::HostCalls`]'s).
    #[cfg(feature = "testing")]
    pub(crate) fn reading_whole(grants: &Grants, types: BTreeSet<Gvk>) -> Self {
        Self {
            grants: grants.clone(),
            declared: types.clone(),
            json: types.clone(),
            bodies: types,
        }
    }

    pub(crate) fn may_read(&self, resource: &Gvk) -> bool {
        self.declared.contains(resource) && self.grants.may_read(resource)
    }

    /// Whether its reads of `resource` (which it may read) carry the objects' JSON.
    pub(crate) fn reads_json(&self, resource: &Gvk) -> bool {
        self.json.contains(resource)
    }

    /// Whether it may read `resource` (which it may read) through projections.
    pub(crate) fn reads_bodies(&self, resource: &Gvk) -> bool {
        self.bodies.contains(resource)
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
