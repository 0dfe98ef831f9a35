//! What `describe()` returned, in host types and not yet checked, and the conversion of the
//! guest's answer into it.

use std::time::Duration;

use kubeplug_informer::selector::{FieldSelector, LabelSelector};
use kubeplug_policy::WriteVerb;

use super::check::{check_subscription_count, parse_projections};
use super::{
    Delivery, Description, DescriptionBounds, DescriptionError, KeyMapping, Read, SubscriptionSpec,
};
use crate::bindings::guest;
use crate::gvk::Gvk;

/// What `describe()` returned, in host types and not yet checked. The runtime converts the
/// guest's answer into it; tests and fuzzing build it directly. [`Description::check`]
/// turns it into a [`Description`] or names the field that is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct RawDescription {
    /// `name`.
    pub name: String,
    /// `version`.
    pub version: String,
    /// `subscriptions`, as sent (empty namespaces not yet dropped, selectors not parsed).
    pub subscriptions: Vec<RawSubscription>,
    /// `delivery`; `Reconcile { workers: 0 }` means one worker.
    pub delivery: Delivery,
    /// `indexes`.
    pub indexes: Vec<RawIndex>,
    /// `reads`.
    pub reads: Vec<Read>,
    /// `writes`, verbs as sent (duplicates allowed).
    pub writes: Vec<(Gvk, Vec<WriteVerb>)>,
}

/// A `subscription` as sent: its selectors still text.
#[derive(Debug, Clone, PartialEq)]
pub struct RawSubscription {
    /// Everything else; its selectors select everything until [`Description::check`] puts
    /// the parsed `label_selector` and `field_selector` in their place.
    pub spec: SubscriptionSpec,
    /// `label-selector`.
    pub label_selector: Option<String>,
    /// `field-selector`.
    pub field_selector: Option<String>,
}

/// An `index-decl` as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawIndex {
    /// `name`.
    pub name: String,
    /// `resource-type`.
    pub resource: Gvk,
    /// `spec`.
    pub spec: RawIndexSpec,
}

/// An `index-spec` as sent: a path is still text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawIndexSpec {
    /// `label(key)`.
    Label(String),
    /// `owner-uid`.
    OwnerUid,
    /// `path(text)`.
    Path(String),
}

impl Description {
    /// Converts and checks what a plugin's `describe()` returned, within `bounds`.
    pub(crate) fn from_guest(
        raw: guest::Description,
        bounds: &DescriptionBounds,
    ) -> Result<Self, DescriptionError> {
        let gvk = Gvk::from;
        // Bound the work before parsing any path.
        check_subscription_count(raw.subscriptions.len(), bounds)?;
        let subscriptions = raw
            .subscriptions
            .into_iter()
            .enumerate()
            .map(|(index, s)| {
                let projections = parse_projections(index, s.projections, bounds)?;
                Ok(RawSubscription {
                    spec: SubscriptionSpec {
                        resource: gvk(s.resource_type),
                        namespace: s.namespace,
                        labels: LabelSelector::everything(),
                        fields: FieldSelector::everything(),
                        resync_period: s.resync_period_ms.map(Duration::from_millis),
                        meta_fields: s.meta_fields.into(),
                        wants_object_json: s.wants_object_json,
                        wants_old_json: s.wants_old_json,
                        enqueue: match s.enqueue {
                            guest::KeyMapping::OwnKey => KeyMapping::OwnKey,
                            guest::KeyMapping::Owner(g) => KeyMapping::Owner(g.into()),
                            guest::KeyMapping::Computed => KeyMapping::Computed,
                        },
                        projections,
                    },
                    label_selector: s.label_selector,
                    field_selector: s.field_selector,
                })
            })
            .collect::<Result<Vec<_>, DescriptionError>>()?;
        let indexes = raw
            .indexes
            .into_iter()
            .map(|decl| RawIndex {
                name: decl.name,
                resource: gvk(decl.resource_type),
                spec: match decl.spec {
                    guest::IndexSpec::Label(key) => RawIndexSpec::Label(key),
                    guest::IndexSpec::OwnerUid => RawIndexSpec::OwnerUid,
                    guest::IndexSpec::Path(text) => RawIndexSpec::Path(text),
                },
            })
            .collect();
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
                (gvk(w.resource_type), verbs)
            })
            .collect();
        Self::check(
            RawDescription {
                name: raw.name,
                version: raw.version,
                subscriptions,
                delivery: match raw.delivery {
                    guest::Delivery::Events => Delivery::Events,
                    guest::Delivery::Reconcile(n) => Delivery::Reconcile {
                        workers: n as usize,
                    },
                },
                indexes,
                reads: raw
                    .reads
                    .into_iter()
                    .map(|r| Read {
                        resource: gvk(r.resource_type),
                        wants_object_json: r.wants_object_json,
                    })
                    .collect(),
                writes,
            },
            bounds,
        )
    }
}
