//! Test guest, reconcile mode over Pods: each reconcile reads its key's Pod with
//! `cache::get_projected` and the Pods of its namespace with `cache::list_projected`, five
//! fields each ([`FIELDS`]), through the SDK's typed readers, and counts what it read in
//! `reads_total{key, got, listed}`. `got` is the Pod's fields, `name=value` joined by
//! spaces, each value `text:<s>`, `integer:<n>`, `boolean:<b>`, `null`, `absent` (nothing
//! selected) or `other`; `none` when the cache holds no such Pod. `listed` is each listed
//! Pod as `<key>: <fields>`, joined by `; `. Its C, JavaScript and Python ports render the
//! same text, and the polyglot test compares what they all read.

use kubeplug_sdk::Label;
use kubeplug_sdk::prelude::*;

/// The projections both reads ask for: (name, path).
const FIELDS: [(&str, &str); 5] = [
    ("node", "spec.nodeName"),
    ("policy", "spec.restartPolicy"),
    ("priority", "spec.priority"),
    ("links", "spec.enableServiceLinks"),
    ("overhead", "spec.overhead"),
];

struct ProjectedReconciler {
    projections: Vec<Projection>,
}

/// The first value projection `name` selected in `object`, typed.
fn value(object: &ProjectedObject, name: &str) -> String {
    if let Some(text) = object.field_str(name) {
        return format!("text:{text}");
    }
    if let Some(integer) = object.field_i64(name) {
        return format!("integer:{integer}");
    }
    if let Some(boolean) = object.field_bool(name) {
        return format!("boolean:{boolean}");
    }
    match object.field(name).first() {
        None => "absent".to_owned(),
        Some(FieldValue::Null) => "null".to_owned(),
        Some(_) => "other".to_owned(),
    }
}

fn render(object: &ProjectedObject) -> String {
    FIELDS
        .iter()
        .map(|(name, _)| format!("{name}={}", value(object, name)))
        .collect::<Vec<_>>()
        .join(" ")
}

fn label(key: &str, value: String) -> Label {
    Label {
        key: key.to_owned(),
        value,
    }
}

impl ProjectedReconciler {
    fn read(&self, target: &ObjectRef) -> Result<(), String> {
        let key = target.key();
        let got = cache::get_projected(&target.resource_type, &key, &self.projections)
            .map_err(|e| format!("get-projected {key}: {}", e.explain()))?;
        let listed = cache::list_projected(
            &target.resource_type,
            target.namespace.as_deref(),
            None,
            &self.projections,
        )
        .map_err(|e| format!("list-projected {key}: {}", e.explain()))?;
        let got = got.as_ref().map_or_else(|| "none".to_owned(), render);
        let listed = listed
            .iter()
            .map(|object| format!("{}: {}", object.meta.key(), render(object)))
            .collect::<Vec<_>>()
            .join("; ");
        let labels = [
            label("key", key),
            label("got", got),
            label("listed", listed),
        ];
        metrics::counter_add("reads_total", &labels, 1)
            .map_err(|e| format!("reads_total: {}", e.explain()))
    }
}

impl Plugin for ProjectedReconciler {
    fn init(_settings: Settings) -> Result<Self, InitError> {
        let projections = FIELDS
            .iter()
            .map(|(name, path)| Projection::new(name, path))
            .collect();
        Ok(ProjectedReconciler { projections })
    }

    fn describe(&self) -> Description {
        let pods = gvk("", "v1", "Pod");
        let mut description = Description::reconcile(
            "projected-reconciler",
            "0.1.0",
            1,
            vec![Subscription::to(pods.clone()).meta(MetaFields::empty())],
        );
        // Projected reads need the Pods' bodies; the subscription alone would keep metadata.
        description.reads.push(Read::bodies(pods));
        description
    }

    fn reconcile(&mut self, target: ObjectRef) -> ReconcileResult {
        match self.read(&target) {
            Ok(()) => ReconcileResult::Done,
            Err(message) => ReconcileResult::Error(message),
        }
    }
}

export_plugin!(ProjectedReconciler);
