//! The fields kube-apiserver v1.32 selects each type on (`fieldSelector=`), beyond the
//! `metadata.name` and `metadata.namespace` that a key answers, where each value is read, and
//! how a field a type lacks is refused. Written from the real server's answers, which the
//! kube source's real-server tests hold this server to; no crate carries them.

use std::borrow::Cow;
use std::sync::LazyLock;

use kubeplug_informer::object::ObjectKey;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::selector::FieldSelector;
use kubeplug_json::path::{FieldPath, Found};

/// Where a selectable field's value is, and how it reads as text.
#[derive(Debug)]
enum Read {
    /// A string at this path; absent, `""`.
    Text(FieldPath),
    /// A boolean at this path, `true` or `false`; absent, `false`.
    Flag(FieldPath),
    /// An integer at this path, in decimal; absent, `0`.
    Count(FieldPath),
    /// Accepted, but not in the server's field set: always `""` (a Pod's `status.podIPs`).
    Unset,
}

fn text(path: &str) -> Read {
    Read::Text(parsed(path))
}

fn flag(path: &str) -> Read {
    Read::Flag(parsed(path))
}

fn count(path: &str) -> Read {
    Read::Count(parsed(path))
}

fn parsed(path: &str) -> FieldPath {
    FieldPath::parse(path).expect("the tables' paths are valid")
}

/// A field selector naming a field the type does not select on, refused in kube-apiserver's
/// words (a `400 BadRequest`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnselectableField {
    /// The type has no selectable fields of its own: the generic conversion's words.
    #[error(
        "{field:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
    )]
    NotKnown {
        /// The field.
        field: String,
    },
    /// The type has fields of its own: its conversion function's words.
    #[error("field label not supported: {field}")]
    NotSupported {
        /// The field.
        field: String,
    },
}

/// One type's selectable fields beyond the key's: each name in selectors, and where its value
/// is read. Parsed once per process, on first use: selectors are matched per object and per
/// watch event.
type Table = LazyLock<Vec<(&'static str, Read)>>;

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

static POD: Table = LazyLock::new(|| {
    vec![
        ("spec.nodeName", text("spec.nodeName")),
        ("spec.restartPolicy", text("spec.restartPolicy")),
        ("spec.schedulerName", text("spec.schedulerName")),
        ("spec.serviceAccountName", text("spec.serviceAccountName")),
        ("spec.hostNetwork", flag("spec.hostNetwork")),
        ("status.phase", text("status.phase")),
        ("status.podIP", text("status.podIP")),
        ("status.podIPs", Read::Unset),
        ("status.nominatedNodeName", text("status.nominatedNodeName")),
    ]
});

/// Core `v1` Events.
static CORE_EVENT: Table = LazyLock::new(|| {
    vec![
        ("involvedObject.kind", text("involvedObject.kind")),
        ("involvedObject.namespace", text("involvedObject.namespace")),
        ("involvedObject.name", text("involvedObject.name")),
        ("involvedObject.uid", text("involvedObject.uid")),
        (
            "involvedObject.apiVersion",
            text("involvedObject.apiVersion"),
        ),
        (
            "involvedObject.resourceVersion",
            text("involvedObject.resourceVersion"),
        ),
        ("involvedObject.fieldPath", text("involvedObject.fieldPath")),
        ("reason", text("reason")),
        ("reportingComponent", text("reportingComponent")),
        ("source", text("source.component")),
        ("type", text("type")),
    ]
});

/// `events.k8s.io/v1` Events.
static EVENT: Table = LazyLock::new(|| {
    vec![
        ("regarding.kind", text("regarding.kind")),
        ("regarding.namespace", text("regarding.namespace")),
        ("regarding.name", text("regarding.name")),
        ("regarding.uid", text("regarding.uid")),
        ("regarding.apiVersion", text("regarding.apiVersion")),
        (
            "regarding.resourceVersion",
            text("regarding.resourceVersion"),
        ),
        ("regarding.fieldPath", text("regarding.fieldPath")),
        ("reason", text("reason")),
        ("reportingController", text("reportingController")),
        ("type", text("type")),
    ]
});

/// Core Events' fields read from `events.k8s.io/v1` Events, as an API server that stores
/// Events once serves them in both groups.
static CORE_EVENT_OF_EVENT: Table = LazyLock::new(|| {
    vec![
        ("involvedObject.kind", text("regarding.kind")),
        ("involvedObject.namespace", text("regarding.namespace")),
        ("involvedObject.name", text("regarding.name")),
        ("involvedObject.uid", text("regarding.uid")),
        ("involvedObject.apiVersion", text("regarding.apiVersion")),
        (
            "involvedObject.resourceVersion",
            text("regarding.resourceVersion"),
        ),
        ("involvedObject.fieldPath", text("regarding.fieldPath")),
        ("reason", text("reason")),
        ("reportingComponent", text("reportingController")),
        ("source", text("deprecatedSource.component")),
        ("type", text("type")),
    ]
});

static SECRET: Table = LazyLock::new(|| vec![("type", text("type"))]);

static SERVICE: Table = LazyLock::new(|| {
    vec![
        ("spec.clusterIP", text("spec.clusterIP")),
        ("spec.type", text("spec.type")),
    ]
});

static REPLICATION_CONTROLLER: Table =
    LazyLock::new(|| vec![("status.replicas", count("status.replicas"))]);

static JOB: Table = LazyLock::new(|| vec![("status.successful", count("status.successful"))]);

static NAMESPACE: Table = LazyLock::new(|| vec![("status.phase", text("status.phase"))]);

static NODE: Table = LazyLock::new(|| vec![("spec.unschedulable", flag("spec.unschedulable"))]);

impl SelectableFields {
    /// Those of `resource`'s type; a type kube-apiserver gives no fields of its own has
    /// `metadata.name` and `metadata.namespace` alone.
    pub fn of(resource: &Resource) -> Self {
        let namespaced = |fields: &'static [(&'static str, Read)]| Self {
            fields,
            namespace: true,
        };
        match (resource.group.as_str(), resource.kind.as_str()) {
            ("", "Pod") => namespaced(&POD),
            ("", "Event") => namespaced(&CORE_EVENT),
            ("events.k8s.io", "Event") => namespaced(&EVENT),
            ("", "Secret") => namespaced(&SECRET),
            ("", "Service") => namespaced(&SERVICE),
            ("", "ReplicationController") => namespaced(&REPLICATION_CONTROLLER),
            ("batch", "Job") => namespaced(&JOB),
            ("", "Namespace") => Self {
                fields: &NAMESPACE,
                namespace: false,
            },
            ("", "Node") => Self {
                fields: &NODE,
                namespace: false,
            },
            _ => namespaced(&[]),
        }
    }

    /// Core `v1` Events' fields, read from the `events.k8s.io/v1` Events they are a view of.
    pub fn core_events_stored_as_events_k8s_io() -> Self {
        Self {
            fields: &CORE_EVENT_OF_EVENT,
            namespace: true,
        }
    }

    /// Whether the type selects on every field `selector` names; the error names the first
    /// it does not.
    pub fn check(&self, selector: &FieldSelector) -> Result<(), UnselectableField> {
        let Some(lacking) = selector.fields().into_iter().find(|field| !self.has(field)) else {
            return Ok(());
        };
        let field = lacking.to_owned();
        Err(if self.fields.is_empty() {
            UnselectableField::NotKnown { field }
        } else {
            UnselectableField::NotSupported { field }
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
            let (name, how) = self.fields.iter().find(|(name, _)| *name == field)?;
            if let Some((_, value)) = read.iter().find(|(seen, _)| seen == name) {
                return value.clone();
            }
            let value = read_value(json, how).map(Cow::into_owned);
            read.push((*name, value.clone()));
            value
        })
    }
}

/// The text value `read` finds in `json`, `None` where it reads as `""`.
fn read_value<'a>(json: &'a str, read: &Read) -> Option<Cow<'a, str>> {
    let (path, absent) = match read {
        Read::Text(path) => (path, None),
        Read::Flag(path) => (path, Some("false")),
        Read::Count(path) => (path, Some("0")),
        Read::Unset => return None,
    };
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

    /// The tables are parsed on first use: a bad path would fail a list, not the build.
    #[test]
    fn every_tables_paths_parse() {
        let types = [
            ("", "Pod"),
            ("", "Event"),
            ("events.k8s.io", "Event"),
            ("", "Secret"),
            ("", "Service"),
            ("", "ReplicationController"),
            ("batch", "Job"),
            ("", "Namespace"),
            ("", "Node"),
        ];
        let mut tables: Vec<_> = types
            .iter()
            .map(|(group, kind)| SelectableFields::of(&Resource::new(group, "v1", kind, "x", true)))
            .collect();
        tables.push(SelectableFields::core_events_stored_as_events_k8s_io());
        let fields: usize = tables.iter().map(|table| table.fields.len()).sum();
        assert_eq!(fields, 9 + 11 + 10 + 1 + 2 + 1 + 1 + 1 + 1 + 11);
    }

    #[test]
    fn refuses_as_kube_apiserver_does() {
        let pods = SelectableFields::of(&pods());
        assert_eq!(
            pods.check(&selector("spec.nodeName=n1,metadata.name=a")),
            Ok(())
        );
        let refused = |fields: SelectableFields, text| fields.check(&selector(text)).unwrap_err();
        assert_eq!(
            refused(pods, "status.phase=x,spec.x=y,spec.a=b").to_string(),
            "field label not supported: spec.a"
        );
        let maps = SelectableFields::of(&Resource::new("", "v1", "ConfigMap", "configmaps", true));
        assert_eq!(
            refused(maps, "data.x=y").to_string(),
            r#""data.x" is not a known field selector: only "metadata.name", "metadata.namespace""#
        );
        let namespaces =
            SelectableFields::of(&Resource::new("", "v1", "Namespace", "namespaces", false));
        assert_eq!(
            refused(namespaces, "metadata.namespace=x"),
            UnselectableField::NotSupported {
                field: "metadata.namespace".to_owned()
            }
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
