//! The contract of a [`Description`], checked on what a plugin sent: counts first, then
//! each name, type, selector, index and projection, each refusal naming its field.

use std::collections::BTreeSet;

use kubeplug_informer::selector::{FieldSelector, LabelSelector};
use kubeplug_json::path::FieldPath;
use kubeplug_policy::names::{check_namespace, is_dns_label, quoted};

use super::projection::{ProjectionListError, invalid_projection_name, is_projection_name};
use super::{
    Delivery, Description, DescriptionBounds, DescriptionError, IndexDecl, IndexSource, KeyMapping,
    MAX_PROJECTION_PATH, MAX_RESOURCES, MAX_TEXT, MAX_VERSION, Projection, Projections,
    RawDescription, RawIndexSpec, RawSubscription, SubscriptionSpec,
};
use crate::bindings::wit;
use crate::gvk::Gvk;

fn check_count(
    field: &'static str,
    count: usize,
    limit: usize,
    setting: Option<&'static str>,
) -> Result<(), DescriptionError> {
    if count > limit {
        return Err(DescriptionError::TooMany {
            field,
            count,
            limit,
            setting,
        });
    }
    Ok(())
}

/// Whether `text` reads as a version: what semantic versions, `v`-prefixed tags and dates use.
fn is_version(text: &str) -> bool {
    (1..=MAX_VERSION).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+' | b'_'))
}

/// `Err(TooLong)` naming `field()` (built only then) when `text` is over [`MAX_TEXT`].
fn check_text(field: impl FnOnce() -> String, text: &str) -> Result<(), DescriptionError> {
    if text.len() > MAX_TEXT {
        return Err(DescriptionError::TooLong {
            field: field(),
            length: text.len(),
            limit: MAX_TEXT,
        });
    }
    Ok(())
}

/// Its length, then each part by its rule: a type reaches discovery URLs.
fn check_gvk(field: &dyn Fn() -> String, gvk: &Gvk) -> Result<(), DescriptionError> {
    check_text(|| format!("{}.group", field()), &gvk.group)?;
    check_text(|| format!("{}.version", field()), &gvk.version)?;
    check_text(|| format!("{}.kind", field()), &gvk.kind)?;
    gvk.check()
        .map_err(|source| DescriptionError::InvalidIdentifier {
            field: field(),
            source,
        })
}

pub(super) fn check_subscription_count(
    count: usize,
    bounds: &DescriptionBounds,
) -> Result<(), DescriptionError> {
    check_count(
        "subscriptions",
        count,
        bounds.subscriptions,
        Some("max_subscriptions"),
    )
}

/// The guest's projections of subscription `subscription`, parsed and checked.
pub(super) fn parse_projections(
    subscription: usize,
    projections: Vec<wit::Projection>,
    bounds: &DescriptionBounds,
) -> Result<Projections, DescriptionError> {
    Projections::parse_list(projections, bounds.projections).map_err(|error| match error {
        ProjectionListError::TooMany { count } => DescriptionError::TooManyProjections {
            subscription,
            count,
            limit: bounds.projections,
        },
        ProjectionListError::Invalid {
            projection,
            field,
            reason,
        } => DescriptionError::InvalidProjection {
            subscription,
            projection,
            field,
            reason,
        },
    })
}

fn check_projection_count(
    subscription: usize,
    count: usize,
    bounds: &DescriptionBounds,
) -> Result<(), DescriptionError> {
    if count > bounds.projections {
        return Err(DescriptionError::TooManyProjections {
            subscription,
            count,
            limit: bounds.projections,
        });
    }
    Ok(())
}

/// The contract of [`Projection`] for each of a subscription's projections, and its count.
fn check_projections(
    subscription: usize,
    projections: &[Projection],
    bounds: &DescriptionBounds,
) -> Result<(), DescriptionError> {
    check_projection_count(subscription, projections.len(), bounds)?;
    let mut names = BTreeSet::new();
    for (projection, p) in projections.iter().enumerate() {
        let invalid = |field, reason| DescriptionError::InvalidProjection {
            subscription,
            projection,
            field,
            reason,
        };
        if !is_projection_name(&p.name) {
            return Err(invalid("name", invalid_projection_name(&p.name)));
        }
        if !names.insert(p.name.as_str()) {
            return Err(invalid(
                "name",
                format!("{} is used twice", quoted(&p.name)),
            ));
        }
        let length = p.path.as_str().len();
        if length > MAX_PROJECTION_PATH {
            return Err(invalid(
                "path",
                format!("{length} bytes; at most {MAX_PROJECTION_PATH}"),
            ));
        }
    }
    Ok(())
}

/// Checks one subscription as sent and parses its selectors.
fn check_subscription(
    index: usize,
    raw: &RawSubscription,
    bounds: &DescriptionBounds,
) -> Result<(LabelSelector, FieldSelector), DescriptionError> {
    let s = &raw.spec;
    let at = |field: &str| format!("subscriptions[{index}].{field}");
    check_projections(index, &s.projections, bounds)?;
    check_gvk(&|| at("resource-type"), &s.resource)?;
    if let KeyMapping::Owner(owner) = &s.enqueue {
        check_gvk(&|| at("enqueue.owner"), owner)?;
    }
    for (field, text) in [
        ("namespace", &s.namespace),
        ("label-selector", &raw.label_selector),
        ("field-selector", &raw.field_selector),
    ] {
        if let Some(text) = text {
            check_text(|| at(field), text)?;
        }
    }
    if let Some(namespace) = s.namespace.as_deref().filter(|ns| !ns.is_empty()) {
        check_namespace(namespace).map_err(|source| DescriptionError::InvalidIdentifier {
            field: at("namespace"),
            source,
        })?;
    }
    let invalid = |what, text: &str, reason: String| DescriptionError::InvalidSelector {
        index,
        resource: s.resource.to_string(),
        what,
        text: text.to_owned(),
        reason,
    };
    let labels = match &raw.label_selector {
        Some(text) => LabelSelector::parse(text)
            .map_err(|e| invalid("label-selector", text, e.to_string()))?,
        None => LabelSelector::everything(),
    };
    let fields = match &raw.field_selector {
        Some(text) => FieldSelector::parse(text)
            .map_err(|e| invalid("field-selector", text, e.to_string()))?,
        None => FieldSelector::everything(),
    };
    Ok((labels, fields))
}

impl Description {
    /// Checks a raw description against the contract of [`Description`], `bounds` and the
    /// fixed bounds ([`MAX_RESOURCES`], [`MAX_TEXT`]); parses the selectors, drops empty
    /// namespaces and merges duplicate verbs. Counts are checked before anything is looked
    /// at one by one.
    pub fn check(
        raw: RawDescription,
        bounds: &DescriptionBounds,
    ) -> Result<Self, DescriptionError> {
        if !is_dns_label(&raw.name) {
            return Err(DescriptionError::InvalidName(raw.name));
        }
        if !is_version(&raw.version) {
            return Err(DescriptionError::InvalidVersion(raw.version));
        }
        if raw.subscriptions.is_empty() {
            return Err(DescriptionError::NoSubscription);
        }
        check_subscription_count(raw.subscriptions.len(), bounds)?;
        check_count(
            "indexes",
            raw.indexes.len(),
            bounds.indexes,
            Some("max_indexes"),
        )?;
        check_count("reads", raw.reads.len(), MAX_RESOURCES, None)?;
        check_count("writes", raw.writes.len(), MAX_RESOURCES, None)?;
        if let Delivery::Reconcile { workers } = raw.delivery
            && workers > bounds.reconcile_workers
        {
            return Err(DescriptionError::TooManyWorkers {
                workers,
                limit: bounds.reconcile_workers,
            });
        }
        let mut subscriptions = Vec::with_capacity(raw.subscriptions.len());
        for (index, s) in raw.subscriptions.into_iter().enumerate() {
            let (labels, fields) = check_subscription(index, &s, bounds)?;
            subscriptions.push(SubscriptionSpec {
                namespace: s.spec.namespace.filter(|ns| !ns.is_empty()),
                labels,
                fields,
                ..s.spec
            });
        }
        for (index, read) in raw.reads.iter().enumerate() {
            check_gvk(&|| format!("reads[{index}].resource-type"), &read.resource)?;
        }
        for (index, (resource, _)) in raw.writes.iter().enumerate() {
            check_gvk(&|| format!("writes[{index}].resource-type"), resource)?;
        }
        let mut names = BTreeSet::from(["namespace".to_owned()]);
        let mut indexes = Vec::with_capacity(raw.indexes.len());
        for (index, decl) in raw.indexes.into_iter().enumerate() {
            let at = |field: &str| format!("indexes[{index}].{field}");
            check_text(|| at("name"), &decl.name)?;
            check_gvk(&|| at("resource-type"), &decl.resource)?;
            if let RawIndexSpec::Label(text) | RawIndexSpec::Path(text) = &decl.spec {
                check_text(|| at("spec"), text)?;
            }
            if !subscriptions.iter().any(|s| s.resource == decl.resource)
                && !raw.reads.iter().any(|read| read.resource == decl.resource)
            {
                return Err(DescriptionError::IndexOnUnknownResource {
                    index,
                    name: decl.name,
                    resource: decl.resource,
                });
            }
            if !names.insert(decl.name.clone()) {
                return Err(DescriptionError::DuplicateIndex {
                    index,
                    name: decl.name,
                });
            }
            let spec = match decl.spec {
                RawIndexSpec::Label(key) => IndexSource::Label(key),
                RawIndexSpec::OwnerUid => IndexSource::OwnerUid,
                RawIndexSpec::Path(text) => {
                    IndexSource::Path(FieldPath::parse(&text).map_err(|reason| {
                        DescriptionError::InvalidIndexPath {
                            index,
                            name: decl.name.clone(),
                            reason,
                        }
                    })?)
                }
            };
            indexes.push(IndexDecl {
                name: decl.name,
                resource: decl.resource,
                spec,
            });
        }
        Ok(Self {
            name: raw.name,
            version: raw.version,
            subscriptions,
            delivery: match raw.delivery {
                Delivery::Events => Delivery::Events,
                Delivery::Reconcile { workers } => Delivery::Reconcile {
                    workers: workers.max(1),
                },
            },
            indexes,
            reads: raw.reads,
            writes: raw
                .writes
                .into_iter()
                .map(|(resource, verbs)| (resource, verbs.into_iter().collect()))
                .collect(),
        })
    }
}
