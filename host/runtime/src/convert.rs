//! Informer objects and notifications into WIT values.

use kubeplug_informer::listener::Notification;
use kubeplug_informer::object::Object;

use crate::bindings::wit;
use crate::description::SubscriptionSpec;

/// The typed metadata of `object`.
pub(crate) fn meta(object: &Object) -> wit::ObjectMeta {
    wit::ObjectMeta {
        namespace: object.namespace().map(str::to_owned),
        name: object.name().to_owned(),
        uid: object.uid().map(str::to_owned),
        resource_version: object.resource_version(),
        generation: object.generation(),
        labels: object
            .labels()
            .map(|(key, value)| wit::Label {
                key: key.to_owned(),
                value: value.to_owned(),
            })
            .collect(),
        owner_references: object
            .owner_references()
            .iter()
            .map(|o| wit::OwnerReference {
                api_version: o.api_version.to_string(),
                kind: o.kind.to_string(),
                name: o.name.to_string(),
                uid: o.uid.to_string(),
                controller: o.controller,
            })
            .collect(),
        deletion_timestamp: object.deletion_timestamp().map(str::to_owned),
    }
}

/// `object` as the cache hands it out.
pub(crate) fn cached(object: &Object) -> wit::CachedObject {
    wit::CachedObject {
        meta: meta(object),
        json: object.json().to_owned(),
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
        meta: meta(object),
        object_json: spec.wants_object_json.then(|| object.json().to_owned()),
        old_json: old
            .filter(|_| spec.wants_old_json)
            .map(|o| o.json().to_owned()),
    }
}
