//! Test guest: does nothing with the events but time them. `noop` cannot report when it saw
//! an event, so the pipeline bench takes the no-op's latency from this one (its throughput
//! from `noop`). Settings: `{"stamp_label": "...", "report_every": N}` (see `bench-latency`).

use bench_latency::LatencyProbe;
use kubeplug_sdk::prelude::*;

struct NoopTimed {
    probe: LatencyProbe,
}

impl Plugin for NoopTimed {
    fn init(settings: Settings) -> Result<Self, InitError> {
        let probe = LatencyProbe::from_settings(&settings)?
            .ok_or("settings: noop-timed needs stamp_label and report_every")?;
        Ok(Self { probe })
    }

    fn describe(&self) -> Description {
        Description::events(
            "noop-timed",
            "0.1.0",
            vec![Subscription::to(gvk("", "v1", "Pod")).meta(MetaFields::LABELS)],
        )
    }

    fn handle_events(&mut self, batch: Vec<Event>) -> Result<(), String> {
        batch.iter().try_for_each(|event| self.probe.observe(event))
    }
}

export_plugin!(NoopTimed);
