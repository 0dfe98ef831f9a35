//! Test guest: subscribes with the object JSON, parses all of it into a `serde_json::Value`
//! for every event and reads the label `app` from it: what a plugin costs that does not use
//! the typed metadata. With the settings `{"stamp_label": "...", "report_every": N}` it also
//! times the stamped updates (see `bench-latency`).

use bench_latency::LatencyProbe;
use kubeplug_sdk::prelude::*;

struct JsonParse {
    web: u64,
    probe: Option<LatencyProbe>,
}

impl Plugin for JsonParse {
    fn init(settings: Settings) -> Result<Self, InitError> {
        Ok(Self {
            web: 0,
            probe: LatencyProbe::from_settings(&settings)?,
        })
    }

    fn describe(&self) -> Description {
        Description::events(
            "json-parse",
            "0.1.0",
            vec![
                Subscription::to(gvk("", "v1", "Pod"))
                    .meta(MetaFields::LABELS)
                    .with_json(),
            ],
        )
    }

    fn handle_events(&mut self, batch: Vec<Event>) -> Result<(), String> {
        for event in &batch {
            let object: serde_json::Value = event.object()?;
            if object["metadata"]["labels"]["app"] == "web" {
                self.web += 1;
            }
            if let Some(probe) = &mut self.probe {
                probe.observe(event)?;
            }
        }
        // Keeps the count, and so the parses, from being optimised away.
        std::hint::black_box(self.web);
        Ok(())
    }
}

export_plugin!(JsonParse);
