//! The core `v1` Event as a view of `events.k8s.io/v1` Events, as kube-apiserver serves one
//! stored Event under both groups: `kubectl get events` reads the core group, and plugins
//! record Events in the new one. Events are few and small, so each crosses as a tree.

use bytes::Bytes;
use kubeplug_informer::resource::Resource;
use serde_json::{Map, Value};

/// The fields that differ, as (`v1`, `events.k8s.io/v1`); the others have one name in both.
const RENAMED: [(&str, &str); 7] = [
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

/// Which objects a request reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum View {
    /// The resource's own.
    Own,
    /// Core `v1` Events, stored as `events.k8s.io/v1` ones.
    CoreEvents,
}

impl View {
    /// The view for `resource`, and the resource whose objects it reads: core Events are
    /// `events.k8s.io/v1` ones when that is served too.
    pub(crate) fn of(resource: &Resource, served: &[Resource]) -> (View, Resource) {
        let is_core_event =
            resource.group.is_empty() && resource.version == "v1" && resource.plural == "events";
        let stored = served
            .iter()
            .find(|r| r.group == "events.k8s.io" && r.version == "v1" && r.plural == "events");
        match stored {
            Some(stored) if is_core_event => (View::CoreEvents, stored.clone()),
            _ => (View::Own, resource.clone()),
        }
    }

    /// A stored object as this view shows it.
    pub(crate) fn show(self, stored: Bytes) -> Bytes {
        match self {
            View::Own => stored,
            View::CoreEvents => match serde_json::from_slice::<Value>(&stored) {
                Ok(object) => Bytes::from(rename(object, Direction::ToCore).to_string()),
                Err(_) => stored,
            },
        }
    }

    /// An object written through this view as it is stored.
    pub(crate) fn store(self, written: Value) -> Value {
        match self {
            View::Own => written,
            View::CoreEvents => rename(written, Direction::FromCore),
        }
    }
}

/// Which way [`rename`] goes.
#[derive(Clone, Copy)]
enum Direction {
    ToCore,
    FromCore,
}

/// An `events.k8s.io/v1` Event as the core `v1` one.
pub(crate) fn as_core(object: Value) -> Value {
    rename(object, Direction::ToCore)
}

/// `object` with the fields of [`RENAMED`] renamed `direction`'s way.
fn rename(object: Value, direction: Direction) -> Value {
    let Value::Object(fields) = object else {
        return object;
    };
    let renamed: Map<String, Value> = fields
        .into_iter()
        .map(|(name, value)| {
            let to = RENAMED.iter().find_map(|&(core, new)| match direction {
                Direction::ToCore => (name == new).then_some(core),
                Direction::FromCore => (name == core).then_some(new),
            });
            (to.map_or(name, str::to_owned), value)
        })
        .collect();
    Value::Object(renamed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_events_k8s_io_event_reads_as_a_core_one_and_back() {
        let stored = json!({
            "metadata": {"name": "web.1", "namespace": "default"},
            "regarding": {"kind": "Deployment", "name": "web"},
            "note": "missing labels", "reason": "MissingLabels", "type": "Warning",
            "reportingController": "kubeplug", "reportingInstance": "host-1",
            "eventTime": "2026-12-02T10:00:00.000000Z", "action": "Audit",
            "deprecatedCount": 2,
        });
        let shown: Value =
            serde_json::from_slice(&View::CoreEvents.show(Bytes::from(stored.to_string())))
                .unwrap();
        assert_eq!(
            shown,
            json!({
                "metadata": {"name": "web.1", "namespace": "default"},
                "involvedObject": {"kind": "Deployment", "name": "web"},
                "message": "missing labels", "reason": "MissingLabels", "type": "Warning",
                "reportingComponent": "kubeplug", "reportingInstance": "host-1",
                "eventTime": "2026-12-02T10:00:00.000000Z", "action": "Audit",
                "count": 2,
            })
        );
        assert_eq!(View::CoreEvents.store(shown), stored);
    }

    #[test]
    fn core_events_are_a_view_only_where_both_are_served() {
        let core = Resource::new("", "v1", "Event", "events", true);
        let new = Resource::new("events.k8s.io", "v1", "Event", "events", true);
        assert_eq!(
            View::of(&core, &[core.clone(), new.clone()]),
            (View::CoreEvents, new.clone())
        );
        assert_eq!(
            View::of(&core, std::slice::from_ref(&core)),
            (View::Own, core.clone())
        );
        assert_eq!(View::of(&new, &[core, new.clone()]), (View::Own, new));
    }
}
