//! Informer objects and notifications into WIT values.

use kubeplug_informer::listener::Notification;
use kubeplug_informer::object::Object;
use kubeplug_informer::selected::Selection;
use kubeplug_json::path::Found;

use crate::bindings::wit;
use crate::description::{MetaFields, Projections, SubscriptionSpec};

/// The typed metadata of `object`: the parts `fields` names, the others empty.
pub(crate) fn meta(object: &Object, fields: MetaFields) -> wit::ObjectMeta {
    wit::ObjectMeta {
        namespace: object.namespace().map(str::to_owned),
        name: object.name().to_owned(),
        uid: object.uid().filter(|_| fields.uid).map(str::to_owned),
        resource_version: object.resource_version_text().into_owned(),
        generation: object.generation(),
        labels: if fields.labels {
            object
                .labels()
                .map(|(key, value)| wit::Label {
                    key: key.to_owned(),
                    value: value.to_owned(),
                })
                .collect()
        } else {
            Vec::new()
        },
        owner_references: if fields.owner_references {
            object
                .owner_references()
                .iter()
                .map(|o| wit::OwnerReference {
                    api_version: o.api_version().to_owned(),
                    kind: o.kind().to_owned(),
                    name: o.name().to_owned(),
                    uid: o.uid().to_owned(),
                    controller: o.controller(),
                })
                .collect()
        } else {
            Vec::new()
        },
        deletion_timestamp: object
            .deletion_timestamp()
            .filter(|_| fields.deletion_timestamp)
            .map(str::to_owned),
    }
}

/// The bytes of the strings [`meta`] copies of `object` with every field: what an answer
/// of metadata costs the plugin's memory, for the bound on answers.
pub(crate) fn meta_size(object: &Object) -> usize {
    let labels: usize = object.labels().map(|(k, v)| k.len() + v.len()).sum();
    let owners: usize = object
        .owner_references()
        .iter()
        .map(|o| o.api_version().len() + o.kind().len() + o.name().len() + o.uid().len())
        .sum();
    object.namespace().map_or(0, str::len)
        + object.name().len()
        + object.uid().map_or(0, str::len)
        + object.resource_version_text().len()
        + object.deletion_timestamp().map_or(0, str::len)
        + labels
        + owners
}

/// What each of `projections` selects in `object`: the values its Indexer kept when it
/// stored the object (the subscription registered the paths), else all of them in one walk
/// of its JSON. An object whose JSON is malformed along a path gets no values for that path
/// (the host's decoder checked its metadata only).
pub(crate) fn projected(object: &Object, projections: &Projections) -> Vec<wit::Projected> {
    to_projected(projections, select_raw(object, projections))
}

/// The raw JSON of each value each of `projections` selects in `object`, borrowed from it:
/// what [`to_projected`] copies, so that its cost is known before anything is copied.
fn select_raw<'a>(object: &'a Object, projections: &Projections) -> Vec<Option<Vec<&'a str>>> {
    if projections.is_empty() {
        return Vec::new();
    }
    let kept: Option<Vec<Option<Vec<&str>>>> = projections
        .iter()
        .map(|projection| {
            object
                .selected(&projection.path)
                .map(Selection::into_values)
        })
        .collect();
    kept.unwrap_or_else(|| {
        projections
            .paths()
            .select(object.json())
            .into_iter()
            .map(Result::ok)
            .collect()
    })
}

/// The bytes [`to_projected`] copies of `raw` (each value's text is at most its raw JSON),
/// with the projections' names.
fn raw_size(projections: &Projections, raw: &[Option<Vec<&str>>]) -> usize {
    projections
        .iter()
        .zip(raw)
        .map(|(projection, values)| {
            projection.name.len() + values.iter().flatten().map(|v| v.len()).sum::<usize>()
        })
        .sum()
}

fn to_projected(projections: &Projections, raw: Vec<Option<Vec<&str>>>) -> Vec<wit::Projected> {
    projections
        .iter()
        .zip(raw)
        .map(|(projection, raw_values)| wit::Projected {
            name: projection.name.clone(),
            values: raw_values
                .and_then(|raw_values| {
                    raw_values
                        .into_iter()
                        .map(|raw| Found::classify(raw).map(field_value))
                        .collect::<Result<_, _>>()
                        .ok()
                })
                .unwrap_or_default(),
        })
        .collect()
}

/// `object` read through `projections`, with all its metadata.
pub(crate) fn projected_object(object: &Object, projections: &Projections) -> wit::ProjectedObject {
    wit::ProjectedObject {
        meta: meta(object, MetaFields::ALL),
        projected: projected(object, projections),
    }
}

/// About how many bytes `value` costs an answer: its text, or a word.
pub(crate) fn value_size(value: &wit::FieldValue) -> usize {
    match value {
        wit::FieldValue::Text(text) | wit::FieldValue::Json(text) => text.len(),
        _ => 8,
    }
}

fn field_value(found: Found<'_>) -> wit::FieldValue {
    match found {
        Found::String(s) => wit::FieldValue::Text(s.into_owned()),
        Found::Integer(i) => wit::FieldValue::Integer(i),
        Found::Float(f) => wit::FieldValue::Float(f),
        Found::Bool(b) => wit::FieldValue::Boolean(b),
        Found::Null => wit::FieldValue::Null,
        Found::Json(text) => wit::FieldValue::Json(text.to_owned()),
    }
}

/// `object` as the cache hands it out: all its metadata.
pub(crate) fn cached(object: &Object, with_json: bool) -> wit::CachedObject {
    wit::CachedObject {
        meta: meta(object, MetaFields::ALL),
        json: with_json.then(|| object.json().to_owned()),
    }
}

/// An event that would not fit: what it needs, in bytes of the strings it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EventTooLarge {
    pub(crate) bytes: usize,
}

/// The events of the first notifications of `pending`, of subscription `index`, whose
/// strings add up to at most `budget` bytes: at least the first one's, else `Err` with what
/// it needs. Each event's cost is counted before anything of it is copied, so that what
/// the host builds for one call stays within `budget` however large the objects, their
/// JSON and their projections are.
pub(crate) fn events_within(
    index: u32,
    spec: &SubscriptionSpec,
    pending: &[&Notification],
    budget: usize,
) -> Result<Vec<wit::Event>, EventTooLarge> {
    let mut left = budget;
    let mut events = Vec::new();
    for n in pending {
        match event(index, spec, n, left) {
            Ok((event, size)) => {
                left -= size;
                events.push(event);
            }
            Err(too_large) if events.is_empty() => return Err(too_large),
            Err(_) => break,
        }
    }
    Ok(events)
}

/// One notification of subscription `index` as a WIT event, with the JSON it asked for, and
/// its size; `Err` when that is over `budget`, before anything is copied.
pub(crate) fn event(
    index: u32,
    spec: &SubscriptionSpec,
    n: &Notification,
    budget: usize,
) -> Result<(wit::Event, usize), EventTooLarge> {
    let (change, object, old, initial, resync, tombstone) = match n {
        Notification::Add {
            object,
            in_initial_list,
        } => (
            wit::EventType::Added,
            object,
            None,
            *in_initial_list,
            false,
            false,
        ),
        Notification::Update { old, new, resync } => (
            wit::EventType::Updated,
            new,
            Some(old),
            false,
            *resync,
            false,
        ),
        Notification::Delete {
            object,
            final_state_unknown,
        } => (
            wit::EventType::Deleted,
            object,
            None,
            false,
            false,
            *final_state_unknown,
        ),
    };
    let old_json = old.filter(|_| spec.wants_old_json);
    let projected = select_raw(object, &spec.projections);
    let old_projected = old.map_or_else(Vec::new, |o| select_raw(o, &spec.projections));
    let size = meta_size(object)
        + if spec.wants_object_json {
            object.json().len()
        } else {
            0
        }
        + old_json.map_or(0, |o| o.json().len())
        + raw_size(&spec.projections, &projected)
        + raw_size(&spec.projections, &old_projected);
    if size > budget {
        return Err(EventTooLarge { bytes: size });
    }
    let event = wit::Event {
        subscription: index,
        change,
        in_initial_list: initial,
        resync,
        tombstone,
        meta: meta(object, spec.meta_fields),
        object_json: spec.wants_object_json.then(|| object.json().to_owned()),
        old_json: old_json.map(|o| o.json().to_owned()),
        projected: to_projected(&spec.projections, projected),
        old_projected: to_projected(&spec.projections, old_projected),
    };
    Ok((event, size))
}

#[cfg(test)]
mod tests {
    use kubeplug_informer::object::ObjectDecoder;
    use kubeplug_informer::resource::Resource;
    use kubeplug_informer::selector::{FieldSelector, LabelSelector};

    use super::*;

    fn pod() -> Object {
        let json = br#"{"metadata":{"name":"web-1","namespace":"prod","uid":"u1",
            "resourceVersion":"7","generation":2,"deletionTimestamp":"2026-12-01T10:00:00Z",
            "labels":{"app":"web","tier":"front"},
            "ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web",
                "uid":"rs1","controller":true}]}}"#;
        ObjectDecoder::new(Resource::new("", "v1", "Pod", "pods", true))
            .decode(json)
            .expect("a valid Pod")
    }

    #[test]
    fn every_part_when_all_are_asked_for() {
        let meta = meta(&pod(), MetaFields::ALL);
        assert_eq!(meta.uid.as_deref(), Some("u1"));
        assert_eq!(meta.labels.len(), 2);
        assert_eq!(meta.owner_references[0].uid, "rs1");
        assert_eq!(
            meta.deletion_timestamp.as_deref(),
            Some("2026-12-01T10:00:00Z")
        );
    }

    #[test]
    fn parts_left_out_arrive_empty_and_the_key_and_versions_always_come() {
        let labels_only = MetaFields {
            labels: true,
            ..MetaFields::NONE
        };
        let labelled = meta(&pod(), labels_only);
        assert_eq!(
            (labelled.namespace.as_deref(), labelled.name.as_str()),
            (Some("prod"), "web-1")
        );
        assert_eq!(
            (labelled.resource_version.as_str(), labelled.generation),
            ("7", Some(2))
        );
        let labels: Vec<_> = labelled.labels.iter().map(|l| l.key.as_str()).collect();
        assert_eq!(labels, ["app", "tier"]);
        assert_eq!(labelled.uid, None);
        assert!(labelled.owner_references.is_empty());
        assert_eq!(labelled.deletion_timestamp, None);

        let key_only = meta(&pod(), MetaFields::NONE);
        assert_eq!(key_only.name, "web-1");
        assert!(key_only.labels.is_empty() && key_only.uid.is_none());
    }

    fn big_add(name: &str, pad: usize) -> Notification {
        let json = format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"prod","resourceVersion":"1"}},"data":{{"pad":"{}"}}}}"#,
            "x".repeat(pad)
        );
        let object = ObjectDecoder::new(Resource::new("", "v1", "ConfigMap", "configmaps", true))
            .decode(json.as_bytes())
            .expect("a valid ConfigMap");
        Notification::Add {
            object: std::sync::Arc::new(object),
            in_initial_list: false,
        }
    }

    fn with_json() -> SubscriptionSpec {
        SubscriptionSpec {
            resource: crate::gvk::Gvk::new("", "v1", "ConfigMap"),
            namespace: None,
            labels: LabelSelector::everything(),
            fields: FieldSelector::everything(),
            resync_period: None,
            meta_fields: MetaFields::ALL,
            wants_object_json: true,
            wants_old_json: false,
            enqueue: crate::description::KeyMapping::OwnKey,
            projections: Projections::default(),
        }
    }

    /// Issue 44: a batch is cut where the plugin's memory ends, counted before anything is
    /// copied; a first event over it alone is refused with what it needs.
    #[test]
    fn a_batch_is_cut_where_the_budget_ends() {
        let batch: Vec<Notification> = (0..3).map(|i| big_add(&format!("c{i}"), 1 << 20)).collect();
        let pending: Vec<&Notification> = batch.iter().collect();
        let spec = with_json();
        let events = events_within(0, &spec, &pending, (5 << 20) / 2).unwrap();
        assert_eq!(events.len(), 2);
        assert!(events.iter().all(|e| e.object_json.is_some()));
        assert_eq!(events_within(0, &spec, &pending, 4 << 20).unwrap().len(), 3);
        let too_large = events_within(0, &spec, &pending, 1 << 19).unwrap_err();
        assert!(too_large.bytes > 1 << 20, "{too_large:?}");
    }
}
