//! What a plugin says about itself (`describe()`), checked and in host types.
//!
//! This module holds the checked [`Description`], its parts and the bounds it is checked
//! against; its children hold the rest, one job each: `raw` (what `describe()` returned, not
//! yet checked, and the conversion from the guest's types), `check` (the contract of a
//! `Description`, checked on a [`RawDescription`]), `error` (why a description was refused:
//! [`DescriptionError`]) and `projection` (the field paths events carry: [`Projection`]).

use std::collections::BTreeSet;
use std::time::Duration;

use kubeplug_informer::selector::{FieldSelector, LabelSelector};
use kubeplug_json::path::FieldPath;
use kubeplug_policy::WriteVerb;

use crate::bindings::guest;
use crate::gvk::Gvk;
use crate::view::TypeRead;

mod check;
mod error;
mod projection;
mod raw;

pub use error::DescriptionError;
pub(crate) use projection::ProjectionListError;
pub use projection::{
    MAX_PROJECTION_NAME, MAX_PROJECTION_PATH, MAX_PROJECTIONS, Projection, Projections,
};
pub use raw::{RawDescription, RawIndex, RawIndexSpec, RawSubscription};

/// A plugin's self-description, validated.
///
/// Contract: `name` is a DNS label (lowercase letters, digits, `-`, at most 63 bytes);
/// there is at least one subscription and at most [`MAX_SUBSCRIPTIONS`]; at most
/// [`MAX_INDEXES`] indexes and [`MAX_RESOURCES`] reads and writes; no string is over
/// [`MAX_TEXT`] bytes; every selector parses; every index names a resource the plugin
/// subscribes to or reads, and its path parses; index names are unique and none is
/// `namespace`; each subscription's projections keep the contract of [`Projection`]; a
/// reconcile plugin has at least one worker.
#[derive(Debug, Clone, PartialEq)]
pub struct Description {
    /// The plugin's name.
    pub name: String,
    /// Its version text.
    pub version: String,
    /// What it watches, in the order events refer to them.
    pub subscriptions: Vec<SubscriptionSpec>,
    /// How it is driven.
    pub delivery: Delivery,
    /// Custom indexes the host evaluates for it.
    pub indexes: Vec<IndexDecl>,
    /// What it reads beyond its subscriptions, and the types whose bodies it reads.
    pub reads: Vec<Read>,
    /// Writes it asks for.
    pub writes: Vec<(Gvk, BTreeSet<WriteVerb>)>,
}

/// A declared read: a resource type the plugin reads through the cache, and whether it reads
/// the objects' bodies (their JSON, or values through projections) or metadata only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// The resource type.
    pub resource: Gvk,
    /// Whether its cache reads carry the objects' JSON and may project.
    pub wants_object_json: bool,
}

impl Read {
    /// A read of `resource`'s metadata only.
    pub fn metadata(resource: Gvk) -> Self {
        Self {
            resource,
            wants_object_json: false,
        }
    }

    /// A read of `resource`'s objects whole.
    pub fn bodies(resource: Gvk) -> Self {
        Self {
            resource,
            wants_object_json: true,
        }
    }
}

/// One watched resource type.
#[derive(Debug, Clone, PartialEq)]
pub struct SubscriptionSpec {
    /// The resource type.
    pub resource: Gvk,
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only objects whose labels match; parsed once, when the description was checked.
    pub labels: LabelSelector,
    /// Only objects whose fields match, as the server decides.
    pub fields: FieldSelector,
    /// Resync period.
    pub resync_period: Option<Duration>,
    /// The parts of the metadata each event carries besides the key and versions.
    pub meta_fields: MetaFields,
    /// Send object JSON with each event.
    pub wants_object_json: bool,
    /// Send the old object's JSON with updates.
    pub wants_old_json: bool,
    /// Reconcile mode: which key an event enqueues.
    pub enqueue: KeyMapping,
    /// Field paths each event carries the values of, in the order events list them.
    pub projections: Projections,
}

impl SubscriptionSpec {
    /// Whether the plugin reads nothing of this subscription's objects but their metadata:
    /// no JSON, old or new, and no projections. Its informer may then list and watch
    /// metadata alone.
    pub fn reads_metadata_only(&self) -> bool {
        !self.wants_object_json && !self.wants_old_json && self.projections.is_empty()
    }
}

/// The optional parts of an object's metadata that a subscription's events carry; namespace,
/// name, resourceVersion and generation always come. Each part costs every event a copy
/// into the plugin's memory per string, so plugins ask only for what they read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetaFields {
    /// `uid`.
    pub uid: bool,
    /// `labels`.
    pub labels: bool,
    /// `owner-references`.
    pub owner_references: bool,
    /// `deletion-timestamp`.
    pub deletion_timestamp: bool,
}

impl MetaFields {
    /// No part: events carry the key and versions only.
    pub const NONE: Self = Self {
        uid: false,
        labels: false,
        owner_references: false,
        deletion_timestamp: false,
    };

    /// Every part.
    pub const ALL: Self = Self {
        uid: true,
        labels: true,
        owner_references: true,
        deletion_timestamp: true,
    };
}

impl From<guest::MetaFields> for MetaFields {
    fn from(fields: guest::MetaFields) -> Self {
        Self {
            uid: fields.contains(guest::MetaFields::UID),
            labels: fields.contains(guest::MetaFields::LABELS),
            owner_references: fields.contains(guest::MetaFields::OWNER_REFERENCES),
            deletion_timestamp: fields.contains(guest::MetaFields::DELETION_TIMESTAMP),
        }
    }
}

/// How a reconcile-mode event becomes work-queue keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyMapping {
    /// The object's own key.
    OwnKey,
    /// Its owner of this kind (group and kind compared; version ignored).
    Owner(Gvk),
    /// Whatever the plugin's `map-event` returns.
    Computed,
}

/// How a plugin is driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Every notification in order, in batches, to one instance.
    Events,
    /// Keys through a rate-limited queue to this many workers (at least 1).
    Reconcile {
        /// Worker count.
        workers: usize,
    },
}

/// A custom index the plugin declared.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexDecl {
    /// The plugin's name for it.
    pub name: String,
    /// The resource it indexes.
    pub resource: Gvk,
    /// What it is computed from.
    pub spec: IndexSource,
}

/// What a declared index is computed from.
#[derive(Debug, Clone, PartialEq)]
pub enum IndexSource {
    /// A label's value.
    Label(String),
    /// Owner uids.
    OwnerUid,
    /// A path into the object; the values it files an object under are
    /// [`IndexSpec::Path`](kubeplug_informer::indexer::IndexSpec::Path)'s.
    Path(FieldPath),
}

/// The most subscriptions a plugin may declare by default (`max_subscriptions`): 32. Each
/// one is an informer handler (and often an informer of its own, with a watch on the API
/// server); the example plugins use one to three.
pub const MAX_SUBSCRIPTIONS: usize = 32;

/// The most custom indexes a plugin may declare by default (`max_indexes`): 32. Every index is
/// evaluated on every change of its resource, for every plugin's sake, on the informer's own
/// task.
pub const MAX_INDEXES: usize = 32;

/// The most reconcile workers a plugin may ask for by default: 16, more than a host's cores
/// can run at once (`max_reconcile_workers` in the configuration).
pub const MAX_RECONCILE_WORKERS: usize = 16;

/// What the host's configuration lets a plugin describe: how many subscriptions, indexes,
/// reconcile workers and projections per subscription (`max_subscriptions`, `max_indexes`,
/// `max_reconcile_workers`, `max_projections`). The default is the built-in bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DescriptionBounds {
    /// The most subscriptions.
    pub subscriptions: usize,
    /// The most projections in one subscription.
    pub projections: usize,
    /// The most custom indexes.
    pub indexes: usize,
    /// The most reconcile workers.
    pub reconcile_workers: usize,
}

impl Default for DescriptionBounds {
    fn default() -> Self {
        Self {
            subscriptions: MAX_SUBSCRIPTIONS,
            projections: MAX_PROJECTIONS,
            indexes: MAX_INDEXES,
            reconcile_workers: MAX_RECONCILE_WORKERS,
        }
    }
}

/// The most resource types a plugin may list in `reads`, and in `writes`: 64 each, more
/// than the built-in types a controller could reasonably touch.
pub const MAX_RESOURCES: usize = 64;

/// The longest string in a description (name parts, namespaces, selectors, index names and
/// specs, the version text): 4096 bytes, the bound on a host-call argument, so that whatever
/// a plugin declares it can also pass to the cache.
pub const MAX_TEXT: usize = 4096;

/// The longest version text: 128 bytes, room for any semantic version with pre-release and
/// build parts.
pub const MAX_VERSION: usize = 128;

impl Description {
    /// Every type the plugin reads, each of which its grants must allow: its
    /// subscriptions, the owners its keys map to (a reconcile reads them through the cache),
    /// its declared reads and its indexes' types.
    pub fn read_types(&self) -> BTreeSet<Gvk> {
        let mut reads: BTreeSet<Gvk> = self.subscribed().cloned().collect();
        for subscription in &self.subscriptions {
            if let KeyMapping::Owner(owner) = &subscription.enqueue {
                reads.insert(owner.clone());
            }
        }
        reads.extend(self.reads.iter().map(|read| read.resource.clone()));
        reads.extend(self.indexes.iter().map(|index| index.resource.clone()));
        reads
    }

    /// How the plugin reads `resource`, one of its [`read_types`](Self::read_types): with
    /// bodies or not, and through one subscription alone when it is the plugin's only
    /// subscription of the type and nothing else (a read, an index, an owner its keys map
    /// to) declares the type.
    pub fn type_read(&self, resource: &Gvk) -> TypeRead<'_> {
        let mut subscriptions = self
            .subscriptions
            .iter()
            .filter(|s| &s.resource == resource);
        let only = subscriptions
            .next()
            .filter(|_| subscriptions.next().is_none());
        let declared_otherwise = self.reads.iter().any(|r| &r.resource == resource)
            || self.indexes.iter().any(|i| &i.resource == resource)
            || self
                .subscriptions
                .iter()
                .any(|s| matches!(&s.enqueue, KeyMapping::Owner(owner) if owner == resource));
        TypeRead {
            bodies: self.body_types().contains(resource),
            subscription: only.filter(|_| !declared_otherwise),
        }
    }

    /// The types whose cache reads carry the objects' JSON: those of a read or a
    /// subscription that wants it.
    pub fn json_types(&self) -> BTreeSet<Gvk> {
        let reads = self.reads.iter().filter(|r| r.wants_object_json);
        let subscriptions = self.subscriptions.iter().filter(|s| s.wants_object_json);
        reads
            .map(|r| r.resource.clone())
            .chain(subscriptions.map(|s| s.resource.clone()))
            .collect()
    }

    /// The types whose objects' bodies the plugin needs in the cache: its JSON types, and
    /// those of a subscription with old JSON or projections and of a `path` index. On every
    /// other type it reads metadata only, and a projected cache read is refused.
    pub fn body_types(&self) -> BTreeSet<Gvk> {
        let mut types = self.json_types();
        types.extend(
            self.subscriptions
                .iter()
                .filter(|s| s.wants_old_json || !s.projections.is_empty())
                .map(|s| s.resource.clone()),
        );
        types.extend(
            self.indexes
                .iter()
                .filter(|i| matches!(i.spec, IndexSource::Path(_)))
                .map(|i| i.resource.clone()),
        );
        types
    }

    /// Every resource type the plugin subscribes to.
    pub fn subscribed(&self) -> impl Iterator<Item = &Gvk> {
        self.subscriptions.iter().map(|s| &s.resource)
    }
}

#[cfg(test)]
mod tests;
