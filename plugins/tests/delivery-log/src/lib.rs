//! Test guest: logs `delivery start` and `delivery end` around every batch, with the first
//! key, and records one Event about the first ConfigMap in between, so that a test can
//! tell from each replica's log when its calls ran and whether a write held one.

use kubeplug_sdk::prelude::*;

struct DeliveryLog;

fn config_maps() -> Gvk {
    gvk("", "v1", "ConfigMap")
}

impl Plugin for DeliveryLog {
    fn init(_settings: Settings) -> Result<Self, InitError> {
        Ok(DeliveryLog)
    }

    fn describe(&self) -> Description {
        let mut description = Description::events(
            "delivery-log",
            "0.1.0",
            vec![Subscription::to(config_maps())],
        );
        description.writes = vec![WriteRequest {
            resource_type: config_maps(),
            verbs: vec![WriteVerb::RecordEvent],
        }];
        description
    }

    fn handle_events(&mut self, batch: Vec<Event>) -> Result<(), String> {
        let Some(first) = batch.first() else {
            return Ok(());
        };
        let key = first.key();
        log::info("delivery start", &[("key", &key)]);
        let regarding = ObjectRef {
            resource_type: config_maps(),
            namespace: first.meta.namespace.clone(),
            name: first.meta.name.clone(),
        };
        cluster::record_event(
            &regarding,
            cluster::EventSeverity::Normal,
            "Delivered",
            &key,
        )
        .map_err(|e| format!("recording the delivery: {e:?}"))?;
        log::info("delivery end", &[("key", &key)]);
        Ok(())
    }
}

export_plugin!(DeliveryLog);
