//! The one Event builder of both writers: an `events.k8s.io/v1` Event as client-go's
//! recorder writes it, whether the local cluster stores it or the API server receives it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kubeplug_runtime::ObjectRef;
use kubeplug_runtime::view::EventSeverity;
use serde_json::Value;

/// The longest `note` the API server accepts on an `events.k8s.io/v1` Event (bytes).
const MAX_NOTE_BYTES: usize = 1024;

/// A plugin's Event, before it gets its name.
pub(crate) struct NewEvent<'a> {
    /// The object concerned.
    pub(crate) regarding: &'a ObjectRef,
    /// Its uid when known: `kubectl describe` finds an object's Events by uid.
    pub(crate) regarding_uid: Option<&'a str>,
    /// Normal or Warning.
    pub(crate) severity: EventSeverity,
    /// CamelCase reason, also the Event's action.
    pub(crate) reason: &'a str,
    /// The note for humans; cut to what the API server accepts.
    pub(crate) message: &'a str,
    /// `kubeplug/<plugin>`.
    pub(crate) reporting_controller: &'a str,
    /// The host that records it.
    pub(crate) reporting_instance: &'a str,
}

impl NewEvent<'_> {
    /// Where the Event lives: the object's namespace, or `default` for a cluster-scoped
    /// object, as client-go records them.
    pub(crate) fn namespace(&self) -> &str {
        self.regarding.namespace.as_deref().unwrap_or("default")
    }

    /// `Normal` or `Warning`, as the Event's `type`.
    pub(crate) fn severity(&self) -> &'static str {
        match self.severity {
            EventSeverity::Normal => "Normal",
            EventSeverity::Warning => "Warning",
        }
    }

    /// The Event object, named `<regarding>.<suffix in hex>` (client-go uses the time; the
    /// writer chooses a suffix unique within its process).
    pub(crate) fn to_json(&self, name_suffix: u64) -> Value {
        let regarding = self.regarding;
        let mut event = serde_json::json!({
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {
                "name": format!("{}.{name_suffix:x}", regarding.name),
                "namespace": self.namespace(),
            },
            "eventTime": MicroTime(Timestamp::now()),
            "regarding": {
                "apiVersion": regarding.resource.api_version(),
                "kind": regarding.resource.kind,
                "namespace": regarding.namespace,
                "name": regarding.name,
            },
            "type": self.severity(),
            "reason": self.reason,
            "note": truncate(self.message, MAX_NOTE_BYTES),
            "action": self.reason,
            "reportingController": self.reporting_controller,
            "reportingInstance": self.reporting_instance,
        });
        if let Some(uid) = self.regarding_uid {
            event["regarding"]["uid"] = Value::from(uid);
        }
        event
    }
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeplug_runtime::Gvk;

    #[test]
    fn an_event_about_a_cluster_scoped_object_lives_in_default_with_its_note_cut() {
        let regarding = ObjectRef {
            resource: Gvk::new("", "v1", "Node"),
            namespace: None,
            name: "n1".into(),
        };
        let long = "é".repeat(MAX_NOTE_BYTES);
        let event = NewEvent {
            regarding: &regarding,
            regarding_uid: None,
            severity: EventSeverity::Warning,
            reason: "Drained",
            message: &long,
            reporting_controller: "kubeplug/drainer",
            reporting_instance: "host-1",
        }
        .to_json(0x2a);
        assert_eq!(event["metadata"]["name"], "n1.2a");
        assert_eq!(event["metadata"]["namespace"], "default");
        assert_eq!(event["regarding"]["namespace"], Value::Null);
        assert_eq!(event["regarding"].get("uid"), None, "unknown, so left out");
        assert_eq!(event["type"], "Warning");
        let note = event["note"].as_str().unwrap();
        assert!(note.len() <= MAX_NOTE_BYTES && note.len() > MAX_NOTE_BYTES - 2);
    }
}
