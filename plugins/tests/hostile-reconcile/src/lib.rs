//! Hostile test guest, reconcile mode over ConfigMaps, keys computed by `map-event`. Each
//! event maps to the ConfigMap's own key plus what the settings ask for:
//! - `"keys": "invalid"`: keys the host must drop: an empty name, `..`, `a/b`, a newline, a
//!   100 KB name, a namespace that is no DNS label, a namespace on a cluster-scoped type,
//!   none on a namespaced one, and types the plugin does not subscribe to (`v1/Secret`,
//!   `evil.io/v1/Thing`);
//! - `"keys": "many"`: 100,000 more ConfigMap keys, `ns/many-0` and on.
//!
//! `reconcile` counts its calls in `reconciles_total` and answers `requeue-after` with
//! `"requeue_ms"` when set, else `done`.

use kubeplug_sdk::prelude::*;

struct HostileReconcile {
    keys: String,
    requeue_ms: Option<u64>,
}

fn config_maps() -> Gvk {
    gvk("", "v1", "ConfigMap")
}

impl Plugin for HostileReconcile {
    fn init(settings: Settings) -> Result<Self, InitError> {
        let parsed: serde_json::Value = settings.parse()?;
        Ok(Self {
            keys: parsed["keys"].as_str().unwrap_or("").to_owned(),
            requeue_ms: parsed["requeue_ms"].as_u64(),
        })
    }

    fn describe(&self) -> Description {
        Description::reconcile(
            "hostile-reconcile",
            "0.1.0",
            2,
            vec![Subscription::to(config_maps()).enqueue(KeyMapping::Computed)],
        )
    }

    fn map_event(&mut self, event: Event) -> Vec<ObjectRef> {
        let namespace = event.meta.namespace.clone();
        let mut keys = vec![ObjectRef::new(
            config_maps(),
            namespace.as_deref(),
            &event.meta.name,
        )];
        let in_ns = |name: &str| ObjectRef::new(config_maps(), Some("ns"), name);
        match self.keys.as_str() {
            "invalid" => {
                let long = "x".repeat(100_000);
                keys.extend(["", "..", "a/b", "a\nb", long.as_str()].map(in_ns));
                keys.push(ObjectRef::new(config_maps(), Some("Not_A_Label"), "p"));
                keys.push(ObjectRef::new(config_maps(), None, "no-namespace"));
                keys.push(ObjectRef::new(gvk("", "v1", "Namespace"), Some("ns"), "x"));
                keys.push(ObjectRef::new(gvk("", "v1", "Secret"), Some("ns"), "token"));
                keys.push(ObjectRef::new(
                    gvk("evil.io", "v1", "Thing"),
                    Some("ns"),
                    "x",
                ));
            }
            "many" => keys.extend((0..100_000).map(|i| in_ns(&format!("many-{i}")))),
            _ => {}
        }
        keys
    }

    fn reconcile(&mut self, _target: ObjectRef) -> ReconcileResult {
        if let Err(e) = metrics::counter_add("reconciles_total", &[], 1) {
            return ReconcileResult::Error(e.to_string());
        }
        match self.requeue_ms {
            Some(ms) => ReconcileResult::RequeueAfter(ms),
            None => ReconcileResult::Done,
        }
    }
}

export_plugin!(HostileReconcile);
