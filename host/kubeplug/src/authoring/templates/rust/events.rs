//! __NAME__: logs every ConfigMap event it is handed and counts them by change, in the
//! metric `events_total`.
//!
//! Edit `describe` to watch other types (and grant their reads in kubeplug.toml), and
//! `on_event` to act on them. `kubeplug build` builds it; `kubeplug test` replays
//! events.yaml into it.

use kubeplug_sdk::prelude::*;
use kubeplug_sdk::Label;

struct Handler;

fn config_maps() -> Gvk {
    gvk("", "v1", "ConfigMap")
}

impl Plugin for Handler {
    fn init(_settings: Settings) -> Result<Self, InitError> {
        Ok(Handler)
    }

    fn describe(&self) -> Description {
        Description::events("__NAME__", "0.1.0", vec![Subscription::to(config_maps())])
    }

    fn on_event(&mut self, event: &Event) -> Result<(), String> {
        let change = match event.change {
            EventType::Added => "added",
            EventType::Updated => "updated",
            EventType::Deleted => "deleted",
        };
        log::info("event", &[("change", change), ("key", &event.key())]);
        let labels = [Label {
            key: "change".to_owned(),
            value: change.to_owned(),
        }];
        metrics::counter_add("events_total", &labels, 1)
            .map_err(|error| format!("counting the event: {error:?}"))
    }
}

export_plugin!(Handler);
