//! Test guest for hot reload: records every event it handles, so that a test can check that
//! each notification is handled exactly once across swaps, and by which version.
//!
//! Per batch it records one Event on the first object, reason `Handled`, with the message
//! `<version> <key>@<resourceVersion> <key>@<resourceVersion> ...`. Several packages build
//! this one source; the package name picks the variant (a swap needs two files with
//! different bytes, and each broken variant must fail at one precise load stage):
//! - `recorder` (0.1.0) and `recorder-v2` (0.2.0): record ConfigMap events;
//! - `recorder-unknown-kind`: subscribes to a type no cluster serves;
//! - `recorder-pods`: subscribes to Pods instead (a version that changes its
//!   subscriptions);
//! - `recorder-pods-json` (0.3.0): subscribes to Pods with their JSON (a version that
//!   changes its subscription's form: whole objects instead of metadata alone);
//! - `recorder-describe-trap`: panics in `describe`;
//! - `recorder-describe-slow`: never returns from `describe`.

use kubeplug_sdk::prelude::*;

const VARIANT: &str = env!("CARGO_PKG_NAME");
const VERSION: &str = env!("CARGO_PKG_VERSION");

struct Recorder;

fn config_maps() -> Gvk {
    gvk("", "v1", "ConfigMap")
}

impl Plugin for Recorder {
    fn init(_settings: Settings) -> Result<Self, InitError> {
        Ok(Recorder)
    }

    fn describe(&self) -> Description {
        let subscribed = match VARIANT {
            "recorder-unknown-kind" => gvk("example.com", "v1", "Widget"),
            "recorder-pods" => gvk("", "v1", "Pod"),
            "recorder-describe-trap" => panic!("describe fails on purpose"),
            "recorder-describe-slow" => loop {
                std::hint::black_box(());
            },
            _ => config_maps(),
        };
        let subscription = match VARIANT {
            "recorder-pods-json" => Subscription::to(gvk("", "v1", "Pod")).with_json(),
            _ => Subscription::to(subscribed),
        };
        let mut description = Description::events("recorder", VERSION, vec![subscription]);
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
        let mut message = VERSION.to_owned();
        for event in &batch {
            message.push_str(&format!(" {}@{}", event.key(), event.meta.resource_version));
        }
        let regarding = ObjectRef {
            resource_type: config_maps(),
            namespace: first.meta.namespace.clone(),
            name: first.meta.name.clone(),
        };
        cluster::record_event(
            &regarding,
            cluster::EventSeverity::Normal,
            "Handled",
            &message,
        )
        .map_err(|e| format!("recording the batch: {e:?}"))
    }
}

export_plugin!(Recorder);
