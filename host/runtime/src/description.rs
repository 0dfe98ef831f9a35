//! What a plugin says about itself (`describe()`), checked and in host types.

use std::collections::BTreeSet;
use std::time::Duration;

use kubeplug_informer::selector::{FieldSelector, LabelSelector};

use crate::bindings::guest;
use crate::gvk::Gvk;
use crate::index::IndexPath;

/// A plugin's self-description, validated.
///
/// Contract: `name` is a DNS label (lowercase letters, digits, `-`, at most 63 bytes);
/// there is at least one subscription; every selector parses; every index names a resource
/// the plugin subscribes to or reads, and its path parses; index names are unique.
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
    /// Resource types it reads beyond its subscriptions.
    pub reads: Vec<Gvk>,
    /// Writes it asks for.
    pub writes: Vec<(Gvk, BTreeSet<WriteVerb>)>,
}

/// One watched resource type.
#[derive(Debug, Clone, PartialEq)]
pub struct SubscriptionSpec {
    /// The resource type.
    pub resource: Gvk,
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Label selector text (validated).
    pub label_selector: Option<String>,
    /// Field selector text (validated).
    pub field_selector: Option<String>,
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
    /// A path into the object.
    Path(IndexPath),
}

/// A kind of write.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
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

/// Why a description was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DescriptionError {
    /// The name is not a DNS label.
    #[error("name {0:?} is not a DNS label (lowercase letters, digits, '-', at most 63 bytes)")]
    InvalidName(String),
    /// No subscription.
    #[error("describe() returned no subscription")]
    NoSubscription,
    /// A selector did not parse.
    #[error("subscription {index} ({resource}): {what} {text:?} does not parse: {reason}")]
    InvalidSelector {
        /// Subscription index.
        index: usize,
        /// Its resource (`group/version/Kind`).
        resource: String,
        /// `label selector` or `field selector`.
        what: &'static str,
        /// The text.
        text: String,
        /// The parser's complaint.
        reason: String,
    },
    /// An index is on a resource the plugin neither subscribes to nor reads.
    #[error(
        "index {name:?} is on {resource}, which the plugin neither subscribes to nor lists in reads"
    )]
    IndexOnUnknownResource {
        /// Index name.
        name: String,
        /// Its resource.
        resource: Gvk,
    },
    /// Two indexes share a name (or one is called `namespace`).
    #[error("index name {0:?} is used twice (or is the built-in `namespace`)")]
    DuplicateIndex(String),
    /// An index path did not parse.
    #[error("index {name:?}: {reason}")]
    InvalidIndexPath {
        /// Index name.
        name: String,
        /// The parser's complaint.
        reason: String,
    },
}

fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

impl Description {
    /// Converts and checks what a plugin's `describe()` returned.
    pub(crate) fn from_guest(raw: guest::Description) -> Result<Self, DescriptionError> {
        if !is_dns_label(&raw.name) {
            return Err(DescriptionError::InvalidName(raw.name));
        }
        if raw.subscriptions.is_empty() {
            return Err(DescriptionError::NoSubscription);
        }
        let mut subscriptions = Vec::with_capacity(raw.subscriptions.len());
        for (index, s) in raw.subscriptions.into_iter().enumerate() {
            let resource = Gvk::from(s.resource_type);
            if let Some(text) = &s.label_selector {
                LabelSelector::parse(text).map_err(|e| DescriptionError::InvalidSelector {
                    index,
                    resource: resource.to_string(),
                    what: "label selector",
                    text: text.clone(),
                    reason: e.to_string(),
                })?;
            }
            if let Some(text) = &s.field_selector {
                FieldSelector::parse(text).map_err(|e| DescriptionError::InvalidSelector {
                    index,
                    resource: resource.to_string(),
                    what: "field selector",
                    text: text.clone(),
                    reason: e.to_string(),
                })?;
            }
            subscriptions.push(SubscriptionSpec {
                resource,
                namespace: s.namespace.filter(|ns| !ns.is_empty()),
                label_selector: s.label_selector.filter(|s| !s.is_empty()),
                field_selector: s.field_selector.filter(|s| !s.is_empty()),
                resync_period: s.resync_period_ms.map(Duration::from_millis),
                meta_fields: s.meta_fields.into(),
                wants_object_json: s.wants_object_json,
                wants_old_json: s.wants_old_json,
                enqueue: match s.enqueue {
                    guest::KeyMapping::OwnKey => KeyMapping::OwnKey,
                    guest::KeyMapping::Owner(g) => KeyMapping::Owner(g.into()),
                    guest::KeyMapping::Computed => KeyMapping::Computed,
                },
            });
        }
        let reads: Vec<Gvk> = raw.reads.into_iter().map(Gvk::from).collect();
        let mut names = BTreeSet::from(["namespace".to_owned()]);
        let mut indexes = Vec::with_capacity(raw.indexes.len());
        for decl in raw.indexes {
            let resource = Gvk::from(decl.resource_type);
            if !subscriptions.iter().any(|s| s.resource == resource) && !reads.contains(&resource) {
                return Err(DescriptionError::IndexOnUnknownResource {
                    name: decl.name,
                    resource,
                });
            }
            if !names.insert(decl.name.clone()) {
                return Err(DescriptionError::DuplicateIndex(decl.name));
            }
            let spec = match decl.spec {
                guest::IndexSpec::Label(key) => IndexSource::Label(key),
                guest::IndexSpec::OwnerUid => IndexSource::OwnerUid,
                guest::IndexSpec::Path(text) => {
                    IndexSource::Path(IndexPath::parse(&text).map_err(|reason| {
                        DescriptionError::InvalidIndexPath {
                            name: decl.name.clone(),
                            reason,
                        }
                    })?)
                }
            };
            indexes.push(IndexDecl {
                name: decl.name,
                resource,
                spec,
            });
        }
        let writes = raw
            .writes
            .into_iter()
            .map(|w| {
                let verbs = w
                    .verbs
                    .into_iter()
                    .map(|v| match v {
                        guest::WriteVerb::Apply => WriteVerb::Apply,
                        guest::WriteVerb::Patch => WriteVerb::Patch,
                        guest::WriteVerb::PatchStatus => WriteVerb::PatchStatus,
                        guest::WriteVerb::Create => WriteVerb::Create,
                        guest::WriteVerb::Delete => WriteVerb::Delete,
                        guest::WriteVerb::RecordEvent => WriteVerb::RecordEvent,
                    })
                    .collect();
                (Gvk::from(w.resource_type), verbs)
            })
            .collect();
        Ok(Self {
            name: raw.name,
            version: raw.version,
            subscriptions,
            delivery: match raw.delivery {
                guest::Delivery::Events => Delivery::Events,
                guest::Delivery::Reconcile(n) => Delivery::Reconcile {
                    workers: n.max(1) as usize,
                },
            },
            indexes,
            reads,
            writes,
        })
    }

    /// Every resource type the plugin subscribes to.
    pub fn subscribed(&self) -> impl Iterator<Item = &Gvk> {
        self.subscriptions.iter().map(|s| &s.resource)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels() {
        assert!(is_dns_label("label-audit"));
        assert!(is_dns_label("a1"));
        assert!(!is_dns_label("Label"));
        assert!(!is_dns_label("-a"));
        assert!(!is_dns_label(""));
        assert!(!is_dns_label(&"a".repeat(64)));
    }
}
