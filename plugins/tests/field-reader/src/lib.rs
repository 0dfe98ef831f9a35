//! Test guest: subscribes to Pods with the projections its settings name and no object JSON,
//! and records every event's projected values (new and old), each tagged with its WIT case,
//! as one `Observation` created through `cluster`, so the test sees exactly what the guest
//! got. Settings: `{"projections": [["name", "path"], ...], "cache_reads": [...],
//! "read_bodies": true}`; the default projections read the node, each container's image, the
//! restart policy and the conditions. With `cache_reads`, each event also reads its object
//! through `cache.get-projected` and its namespace through `cache.list-projected` with those
//! projections (unchecked: a test may pass hostile ones) and records the answers (`cached`,
//! `listed`); with `read_bodies` it declares that it reads Pods' bodies, and with
//! `label_selector` its subscription selects by labels.

use kubeplug_sdk::Projected;
use kubeplug_sdk::prelude::*;
use serde_json::{Map, Value, json};

struct FieldReader {
    projections: Vec<(String, String)>,
    cache_reads: Option<Vec<Projection>>,
    read_bodies: bool,
    label_selector: Option<String>,
}

fn pods() -> Gvk {
    gvk("", "v1", "Pod")
}

/// Each value as `{"<case>": value}`, so that a test sees its type.
fn tagged(values: &[FieldValue]) -> Value {
    values
        .iter()
        .map(|v| match v {
            FieldValue::Text(s) => json!({ "text": s }),
            FieldValue::Integer(i) => json!({ "integer": i }),
            FieldValue::Float(f) => json!({ "float": f }),
            FieldValue::Boolean(b) => json!({ "boolean": b }),
            FieldValue::Null => json!({ "null": null }),
            FieldValue::Json(text) => json!({ "json": text }),
        })
        .collect()
}

/// Each projection's values, tagged, by its name.
fn by_name(projected: &[Projected]) -> Map<String, Value> {
    projected
        .iter()
        .map(|p| (p.name.clone(), tagged(&p.values)))
        .collect()
}

impl Plugin for FieldReader {
    fn init(settings: Settings) -> Result<Self, InitError> {
        #[derive(serde::Deserialize)]
        struct Config {
            projections: Option<Vec<(String, String)>>,
            cache_reads: Option<Vec<(String, String)>>,
            #[serde(default)]
            read_bodies: bool,
            label_selector: Option<String>,
        }
        let config: Config = settings.parse()?;
        let projections = config.projections.unwrap_or_else(|| {
            [
                ("node", "spec.nodeName"),
                ("images", "spec.containers[*].image"),
                ("restart", "spec.restartPolicy"),
                ("conditions", "status.conditions[*]"),
            ]
            .map(|(name, path)| (name.to_owned(), path.to_owned()))
            .to_vec()
        });
        let cache_reads = config.cache_reads.map(|reads| {
            reads
                .iter()
                .map(|(name, path)| Projection::new(name, path))
                .collect()
        });
        Ok(Self {
            projections,
            cache_reads,
            read_bodies: config.read_bodies,
            label_selector: config.label_selector,
        })
    }

    fn describe(&self) -> Description {
        let selected = Subscription {
            label_selector: self.label_selector.clone(),
            ..Subscription::to(pods())
        };
        let subscription = self
            .projections
            .iter()
            .fold(selected, |s, (name, path)| s.project(name, path));
        let mut d = Description::events("field-reader", "0.1.0", vec![subscription]);
        if self.read_bodies {
            d.reads.push(Read::bodies(pods()));
        }
        d.writes.push(WriteRequest {
            resource_type: gvk("test.kubeplug.io", "v1", "Observation"),
            verbs: vec![WriteVerb::Create],
        });
        d
    }

    fn on_event(&mut self, event: &Event) -> Result<(), String> {
        let mut observation = json!({
            "change": match event.change {
                EventType::Added => "Added",
                EventType::Updated => "Updated",
                EventType::Deleted => "Deleted",
            },
            "key": event.key(),
            "has_json": event.object_json.is_some(),
            "projected": by_name(&event.projected),
            "old_projected": by_name(&event.old_projected),
            "node": event.field_str("node"),
            "old_node": event.old_field("node").first().and_then(FieldValue::as_str),
        });
        if let Some(reads) = &self.cache_reads {
            observation["cached"] = match cache::get_projected(&pods(), &event.key(), reads) {
                Ok(Some(object)) => json!({
                    "key": object.meta.key(),
                    "projected": by_name(&object.projected),
                    "node": object.field_str("node"),
                }),
                Ok(None) => Value::Null,
                Err(e) => json!({ "error": e.explain() }),
            };
            let namespace = event.meta.namespace.as_deref();
            observation["listed"] = match cache::list_projected(&pods(), namespace, None, reads) {
                Ok(objects) => objects
                    .iter()
                    .map(|o| json!({ "key": o.meta.key(), "projected": by_name(&o.projected) }))
                    .collect(),
                Err(e) => json!({ "error": e.explain() }),
            };
        }
        cluster::create(
            &gvk("test.kubeplug.io", "v1", "Observation"),
            None,
            &observation.to_string(),
        )
        .map(drop)
        .map_err(|e| format!("recording the observation: {e}"))
    }
}

export_plugin!(FieldReader);
