//! The latency probe of the pipeline bench's guests (`host/runtime/benches/pipeline_wasm.rs`).
//!
//! The bench's source stamps each paced update with the label `<stamp_label>=<unix nanos>`
//! as it emits it; a guest with a probe reads its clock (WASI's wall clock, the same clock
//! as the host's) for each stamped update it handles and keeps now − stamp. After
//! `report_every` samples it sets the gauges `latency_p50_ns` and `latency_p99_ns`, adds 1
//! to `latency_reports_total`, and starts again: the host reads them from the plugin's
//! metrics. Unstamped events (the initial list, flat-out updates stamped 0) are not sampled.

use std::time::{SystemTime, UNIX_EPOCH};

use kubeplug_sdk::prelude::*;

/// Source-to-handler latencies of the stamped updates handled since the last report.
#[derive(Debug)]
pub struct LatencyProbe {
    stamp_label: String,
    report_every: usize,
    samples: Vec<u64>,
}

impl LatencyProbe {
    /// The probe the settings `{"stamp_label": "...", "report_every": N}` ask for; `None`
    /// when they name no stamp label (a throughput run, where the guest does its work only).
    pub fn from_settings(settings: &Settings) -> Result<Option<Self>, String> {
        let parsed: serde_json::Value = settings.parse()?;
        let Some(stamp_label) = parsed["stamp_label"].as_str() else {
            return Ok(None);
        };
        let report_every = parsed["report_every"]
            .as_u64()
            .filter(|&n| n > 0)
            .ok_or("settings: report_every must be a positive integer")?;
        Ok(Some(Self {
            stamp_label: stamp_label.to_owned(),
            report_every: report_every as usize,
            samples: Vec::with_capacity(report_every as usize),
        }))
    }

    /// Samples `event` if it carries a stamp; reports once `report_every` samples are in.
    pub fn observe(&mut self, event: &Event) -> Result<(), String> {
        let Some(stamp) = event
            .label(&self.stamp_label)
            .and_then(|s| s.parse::<u64>().ok())
            .filter(|&s| s > 0)
        else {
            return Ok(());
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(|e| format!("clock before 1970: {e}"))?;
        self.samples
            .push((now.as_nanos() as u64).saturating_sub(stamp));
        if self.samples.len() >= self.report_every {
            self.report()?;
        }
        Ok(())
    }

    fn report(&mut self) -> Result<(), String> {
        self.samples.sort_unstable();
        let last = self.samples.len() - 1;
        let at = |percent: usize| self.samples[last * percent / 100] as f64;
        let set = |name: &str, value: f64| {
            metrics::gauge_set(name, &[], value).map_err(|e| format!("{name}: {e}"))
        };
        set("latency_p50_ns", at(50))?;
        set("latency_p99_ns", at(99))?;
        metrics::counter_add("latency_reports_total", &[], 1)
            .map_err(|e| format!("latency_reports_total: {e}"))?;
        self.samples.clear();
        Ok(())
    }
}
