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
    let raw_values = kept.unwrap_or_else(|| {
        projections
            .paths()
            .select(object.json())
            .into_iter()
            .map(Result::ok)
            .collect()
    });
    projections
        .iter()
        .zip(raw_values)
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

/// One notification of subscription `index` as a WIT event, with the JSON it asked for.
pub(crate) fn event(index: u32, spec: &SubscriptionSpec, n: &Notification) -> wit::Event {
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
    wit::Event {
        subscription: index,
        change,
        in_initial_list: initial,
        resync,
        tombstone,
        meta: meta(object, spec.meta_fields),
        object_json: spec.wants_object_json.then(|| object.json().to_owned()),
        old_json: old
            .filter(|_| spec.wants_old_json)
            .map(|o| o.json().to_owned()),
        projected: projected(object, &spec.projections),
        old_projected: old.map_or_else(Vec::new, |o| projected(o, &spec.projections)),
    }
}

#[cfg(test)]
mod tests {
    use kubeplug_informer::object::ObjectDecoder;
    use kubeplug_informer::resource::Resource;

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
}
