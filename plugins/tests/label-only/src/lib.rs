//! Test guest: reads the label `app` of every event from typed metadata (no JSON) and counts
//! the `web` ones; nothing else, so that the pipeline bench measures one label read (unlike
//! `label-reader`, which also tracks resourceVersions per key). With the settings
//! `{"stamp_label": "...", "report_every": N}` it also times the stamped updates (see
//! `bench-latency`).

use bench_latency::LatencyProbe;
use kubeplug_sdk::prelude::*;

struct LabelOnly {
    web: u64,
    probe: Option<LatencyProbe>,
}

impl Plugin for LabelOnly {
    fn init(settings: Settings) -> Result<Self, InitError> {
        Ok(Self {
            web: 0,
            probe: LatencyProbe::from_settings(&settings)?,
        })
    }

    fn describe(&self) -> Description {
        Description::events(
            "label-only",
            "0.1.0",
            vec![Subscription::to(gvk("", "v1", "Pod")).meta(MetaFields::LABELS)],
        )
    }

    fn handle_events(&mut self, batch: Vec<Event>) -> Result<(), String> {
        for event in &batch {
            if event.label("app") == Some("web") {
                self.web += 1;
            }
            if let Some(probe) = &mut self.probe {
                probe.observe(event)?;
            }
        }
        // Keeps the count, and so the label reads, from being optimised away.
        std::hint::black_box(self.web);
        Ok(())
    }
}

export_plugin!(LabelOnly);
