//! Test guest, reconcile mode with 4 workers over ConfigMaps. For each key it reads the
//! object from the cache and, by its `mode` label: `ok` → done, `requeue` → requeue-after
//! 150 ms (over the host's 100 ms floor), `fail` → error. It brackets each call with
//! `start`/`end` Observations (created through `cluster`) and spins ~2 ms in between, so
//! the test can see overlapping calls.

use kubeplug_sdk::prelude::*;
use serde_json::json;

struct Reconciler;

fn observe(key: &str, phase: &str) -> Result<(), String> {
    let doc = json!({ "key": key, "phase": phase }).to_string();
    cluster::create(&gvk("test.kubeplug.io", "v1", "Observation"), None, &doc)
        .map(drop)
        .map_err(|e| e.to_string())
}

fn spin(ms: u128) {
    let start = std::time::Instant::now();
    while start.elapsed().as_millis() < ms {
        std::hint::spin_loop();
    }
}

impl Plugin for Reconciler {
    fn init(_settings: Settings) -> Result<Self, InitError> {
        Ok(Reconciler)
    }

    fn describe(&self) -> Description {
        let mut d = Description::reconcile(
            "reconciler",
            "0.1.0",
            4,
            vec![Subscription::to(gvk("", "v1", "ConfigMap"))],
        );
        d.writes.push(WriteRequest {
            resource_type: gvk("test.kubeplug.io", "v1", "Observation"),
            verbs: vec![WriteVerb::Create],
        });
        d
    }

    fn reconcile(&mut self, target: ObjectRef) -> ReconcileResult {
        let key = target.key();
        if let Err(e) = observe(&key, "start") {
            return ReconcileResult::Error(e);
        }
        spin(2);
        let mode = match cache::get(&target.resource_type, &key) {
            Ok(Some(object)) => object.meta.label("mode").unwrap_or("ok").to_owned(),
            Ok(None) => "gone".to_owned(),
            Err(e) => return ReconcileResult::Error(e.to_string()),
        };
        if let Err(e) = observe(&key, "end") {
            return ReconcileResult::Error(e);
        }
        match mode.as_str() {
            "requeue" => ReconcileResult::RequeueAfter(150),
            "fail" => ReconcileResult::Error(format!("{key} is labelled mode=fail")),
            _ => ReconcileResult::Done,
        }
    }
}

export_plugin!(Reconciler);
