//! The fields kube-apiserver v1.32 selects each type on (`fieldSelector=`), beyond the
//! `metadata.name` and `metadata.namespace` that a key answers, where each value is read, and
//! how a field a type lacks is refused. Written from the real server's answers, which the
//! kube source's real-server tests hold this server to; no crate carries them.

use std::borrow::Cow;

use kubeplug_informer::object::ObjectKey;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::selector::FieldSelector;
use kubeplug_json::path::{FieldPath, Found};

/// Where a selectable field's value is, and how it reads as text.
#[derive(Debug, Clone, Copy)]
enum Read {
    /// A string at this path; absent, `""`.
    Text(&'static str),
    /// A boolean at this path, `true` or `false`; absent, `false`.
    Flag(&'static str),
    /// An integer at this path, in decimal; absent, `0`.
    Count(&'static str),
    /// Accepted, but not in the server's field set: always `""` (a Pod's `status.podIPs`).
    Unset,
}

/// The selectable fields of one type, as kube-apiserver's field label conversion for it
/// accepts them and its field set reads them.
///
/// Contract: [`check`](Self::check) refuses a selector naming a field the type lacks with
/// the real server's message, naming the first such field in text order;
/// [`matches`](Self::matches) reads each field a selector names from the object's JSON as the
/// server's field set does.
#[derive(Debug, Clone, Copy)]
pub struct SelectableFields {
    /// Those beyond `metadata.name` and `metadata.namespace`.
    fields: &'static [(&'static str, Read)],
    /// Whether `metadata.namespace` is one: every type's except the cluster-scoped ones
    /// with fields of their own (Namespaces, Nodes).
    namespace: bool,
}

const POD: &[(&str, Read)] = &[
    ("spec.nodeName", Read::Text("spec.nodeName")),
    ("spec.restartPolicy", Read::Text("spec.restartPolicy")),
    ("spec.schedulerName", Read::Text("spec.schedulerName")),
    (
        "spec.serviceAccountName",
        Read::Text("spec.serviceAccountName"),
    ),
    ("spec.hostNetwork", Read::Flag("spec.hostNetwork")),
    ("status.phase", Read::Text("status.phase")),
    ("status.podIP", Read::Text("status.podIP")),
    ("status.podIPs", Read::Unset),
    (
        "status.nominatedNodeName",
        Read::Text("status.nominatedNodeName"),
    ),
];

/// Core `v1` Events.
const CORE_EVENT: &[(&str, Read)] = &[
    ("involvedObject.kind", Read::Text("involvedObject.kind")),
    (
        "involvedObject.namespace",
        Read::Text("involvedObject.namespace"),
    ),
    ("involvedObject.name", Read::Text("involvedObject.name")),
    ("involvedObject.uid", Read::Text("involvedObject.uid")),
    (
        "involvedObject.apiVersion",
        Read::Text("involvedObject.apiVersion"),
    ),
    (
        "involvedObject.resourceVersion",
        Read::Text("involvedObject.resourceVersion"),
    ),
    (
        "involvedObject.fieldPath",
        Read::Text("involvedObject.fieldPath"),
    ),
    ("reason", Read::Text("reason")),
    ("reportingComponent", Read::Text("reportingComponent")),
    ("source", Read::Text("source.component")),
    ("type", Read::Text("type")),
];

/// `events.k8s.io/v1` Events.
const EVENT: &[(&str, Read)] = &[
    ("regarding.kind", Read::Text("regarding.kind")),
    ("regarding.namespace", Read::Text("regarding.namespace")),
    ("regarding.name", Read::Text("regarding.name")),
    ("regarding.uid", Read::Text("regarding.uid")),
    ("regarding.apiVersion", Read::Text("regarding.apiVersion")),
    (
        "regarding.resourceVersion",
        Read::Text("regarding.resourceVersion"),
    ),
    ("regarding.fieldPath", Read::Text("regarding.fieldPath")),
    ("reason", Read::Text("reason")),
    ("reportingController", Read::Text("reportingController")),
    ("type", Read::Text("type")),
];

/// Core Events' fields read from `events.k8s.io/v1` Events, as an API server that stores
/// Events once serves them in both groups.
const CORE_EVENT_OF_EVENT: &[(&str, Read)] = &[
    ("involvedObject.kind", Read::Text("regarding.kind")),
    (
        "involvedObject.namespace",
        Read::Text("regarding.namespace"),
    ),
    ("involvedObject.name", Read::Text("regarding.name")),
    ("involvedObject.uid", Read::Text("regarding.uid")),
    (
        "involvedObject.apiVersion",
        Read::Text("regarding.apiVersion"),
    ),
    (
        "involvedObject.resourceVersion",
        Read::Text("regarding.resourceVersion"),
    ),
    (
        "involvedObject.fieldPath",
        Read::Text("regarding.fieldPath"),
    ),
    ("reason", Read::Text("reason")),
    ("reportingComponent", Read::Text("reportingController")),
    ("source", Read::Text("deprecatedSource.component")),
    ("type", Read::Text("type")),
];

impl SelectableFields {
    /// Those of `resource`'s type; a type kube-apiserver gives no fields of its own has
    /// `metadata.name` and `metadata.namespace` alone.
    pub fn of(resource: &Resource) -> Self {
        let namespaced = |fields| Self {
            fields,
            namespace: true,
        };
        match (resource.group.as_str(), resource.kind.as_str()) {
            ("", "Pod") => namespaced(POD),
            ("", "Event") => namespaced(CORE_EVENT),
            ("events.k8s.io", "Event") => namespaced(EVENT),
            ("", "Secret") => namespaced(&[("type", Read::Text("type"))]),
            ("", "Service") => namespaced(&[
                ("spec.clusterIP", Read::Text("spec.clusterIP")),
                ("spec.type", Read::Text("spec.type")),
            ]),
            ("", "ReplicationController") => {
                namespaced(&[("status.replicas", Read::Count("status.replicas"))])
            }
            ("batch", "Job") => {
                namespaced(&[("status.successful", Read::Count("status.successful"))])
            }
            ("", "Namespace") => Self {
                fields: &[("status.phase", Read::Text("status.phase"))],
                namespace: false,
            },
            ("", "Node") => Self {
                fields: &[("spec.unschedulable", Read::Flag("spec.unschedulable"))],
                namespace: false,
            },
            _ => namespaced(&[]),
        }
    }

    /// Core `v1` Events' fields, read from the `events.k8s.io/v1` Events they are a view of.
    pub fn core_events_stored_as_events_k8s_io() -> Self {
        Self {
            fields: CORE_EVENT_OF_EVENT,
            namespace: true,
        }
    }

    /// `selector`, or the message kube-apiserver refuses it with (a `400 BadRequest`).
    pub fn check(&self, selector: &FieldSelector) -> Result<(), String> {
        let Some(lacking) = selector.fields().into_iter().find(|field| !self.has(field)) else {
            return Ok(());
        };
        // Types with fields of their own refuse in their conversion function's words, the
        // others in the generic conversion's.
        Err(if self.fields.is_empty() {
            format!(
                "{lacking:?} is not a known field selector: only \"metadata.name\", \
                 \"metadata.namespace\""
            )
        } else {
            format!("field label not supported: {lacking}")
        })
    }

    fn has(&self, field: &str) -> bool {
        match field {
            "metadata.name" => true,
            "metadata.namespace" => self.namespace,
            other => self.fields.iter().any(|(name, _)| *name == other),
        }
    }

    /// Whether the object with `key` and JSON text `json` matches `selector`, which
    /// [`check`](Self::check) accepted. A body that does not scan reads as if absent.
    /// Each field is read once however many terms name it, so a selector's length (a
    /// plugin's to choose) costs comparisons, not scans of the object.
    pub fn matches(&self, selector: &FieldSelector, key: &ObjectKey, json: &str) -> bool {
        let mut read: Vec<(&'static str, Option<String>)> = Vec::new();
        selector.matches(key, |field| {
            let (name, how) = *self.fields.iter().find(|(name, _)| *name == field)?;
            if let Some((_, value)) = read.iter().find(|(seen, _)| *seen == name) {
                return value.clone();
            }
            let value = read_value(json, how).map(Cow::into_owned);
            read.push((name, value.clone()));
            value
        })
    }
}

/// The text value `read` finds in `json`, `None` where it reads as `""`.
fn read_value(json: &str, read: Read) -> Option<Cow<'_, str>> {
    let (path, absent) = match read {
        Read::Text(path) => (path, None),
        Read::Flag(path) => (path, Some("false")),
        Read::Count(path) => (path, Some("0")),
        Read::Unset => return None,
    };
    let path = FieldPath::parse(path).expect("the tables' paths are valid");
    let mut value = None;
    // A malformed body was refused when written; one that fails here reads as absent.
    let _ = path.for_each(json, |found| {
        if value.is_none() {
            value = match found {
                Found::String(text) => Some(text),
                Found::Bool(flag) => Some(Cow::Borrowed(if flag { "true" } else { "false" })),
                Found::Integer(number) => Some(Cow::Owned(number.to_string())),
                Found::Float(_) | Found::Null | Found::Json(_) => None,
            };
        }
    });
    value.or(absent.map(Cow::Borrowed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selector(text: &str) -> FieldSelector {
        FieldSelector::parse(text).unwrap()
    }

    fn pods() -> Resource {
        Resource::new("", "v1", "Pod", "pods", true)
    }

    #[test]
    fn refuses_as_kube_apiserver_does() {
        let pods = SelectableFields::of(&pods());
        assert_eq!(
            pods.check(&selector("spec.nodeName=n1,metadata.name=a")),
            Ok(())
        );
        assert_eq!(
            pods.check(&selector("status.phase=x,spec.x=y,spec.a=b")),
            Err("field label not supported: spec.a".to_owned())
        );
        let maps = SelectableFields::of(&Resource::new("", "v1", "ConfigMap", "configmaps", true));
        assert_eq!(
            maps.check(&selector("data.x=y")),
            Err(r#""data.x" is not a known field selector: only "metadata.name", "metadata.namespace""#
                .to_owned())
        );
        let namespaces =
            SelectableFields::of(&Resource::new("", "v1", "Namespace", "namespaces", false));
        assert_eq!(
            namespaces.check(&selector("metadata.namespace=x")),
            Err("field label not supported: metadata.namespace".to_owned())
        );
        assert_eq!(namespaces.check(&selector("status.phase=Active")), Ok(()));
    }

    /// A plugin's subscription chooses the selector: hundreds of terms on one field read it
    /// once and still decide as each term says.
    #[test]
    fn a_long_selector_reads_each_field_once() {
        let pods = SelectableFields::of(&pods());
        let key = ObjectKey::new(Some("ns"), "p");
        let pod = r#"{"spec":{"nodeName":"n7"}}"#;
        let others: Vec<String> = (0..300)
            .filter(|n| *n != 7)
            .map(|n| format!("spec.nodeName!=n{n}"))
            .collect();
        let text = others.join(",");
        assert!(pods.matches(&selector(&text), &key, pod));
        let with_own = format!("{text},spec.nodeName!=n7");
        assert!(!pods.matches(&selector(&with_own), &key, pod));
    }

    #[test]
    fn reads_text_flags_counts_and_absent_fields() {
        let pods = SelectableFields::of(&pods());
        let key = ObjectKey::new(Some("ns"), "p");
        let pod = r#"{"metadata":{"name":"p"},"spec":{"nodeName":"n\u0031","hostNetwork":true},
                      "status":{"podIPs":[{"ip":"10.0.0.1"}]}}"#;
        let matches = |text| pods.matches(&selector(text), &key, pod);
        assert!(matches("spec.nodeName=n1"));
        assert!(matches("spec.hostNetwork=true"));
        assert!(!matches("spec.hostNetwork=True"));
        assert!(matches("status.phase="));
        assert!(matches("status.podIPs="), "never in the field set");
        assert!(pods.matches(&selector("spec.hostNetwork=false"), &key, "{}"));

        let jobs = SelectableFields::of(&Resource::new("batch", "v1", "Job", "jobs", true));
        let job = r#"{"status":{"successful":3}}"#;
        assert!(jobs.matches(&selector("status.successful=3"), &key, job));
        assert!(jobs.matches(&selector("status.successful=0"), &key, "{}"));

        let stored = r#"{"regarding":{"kind":"Deployment","name":"web"},
                         "reportingController":"kubeplug/label-audit",
                         "deprecatedSource":{"component":"kubelet"}}"#;
        let core = SelectableFields::core_events_stored_as_events_k8s_io();
        assert!(core.matches(
            &selector("involvedObject.kind=Deployment,involvedObject.name=web,source=kubelet"),
            &key,
            stored
        ));
        assert!(core.matches(
            &selector("reportingComponent=kubeplug/label-audit"),
            &key,
            stored
        ));
        assert!(!core.matches(&selector("involvedObject.uid=u1"), &key, stored));
    }
}
