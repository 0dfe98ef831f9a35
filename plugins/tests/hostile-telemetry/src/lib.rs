//! Hostile test guest: on every batch of ConfigMap events, tries to forge a line of the
//! host's log (a field key carrying a newline and a whole log line), to pass as another
//! plugin (its own `plugin` field), and to define series that break a Prometheus scrape (a
//! `__name__` label, a label named twice, a label name with a colon, a counter and a gauge
//! that expose one family). It logs one valid field, `kept="yes"`, beside them, and counts
//! the metric updates the host refused in `refused_total` and accepted in `accepted_total`.

use kubeplug_sdk::prelude::*;

struct Telemetry;

/// The line a forged key would start on the host's stderr.
const FORGED: &str = "2000-01-01T00:00:00.000000Z  INFO kubeplug: forged by hostile-telemetry";

impl Plugin for Telemetry {
    fn init(_settings: Settings) -> Result<Self, InitError> {
        Ok(Telemetry)
    }

    fn describe(&self) -> Description {
        Description::events(
            "hostile-telemetry",
            "0.1.0",
            vec![Subscription::to(gvk("", "v1", "ConfigMap"))],
        )
    }

    fn handle_events(&mut self, batch: Vec<Event>) -> Result<(), String> {
        let forged_key = format!("x\n{FORGED} key");
        log::warn(
            "a hostile telemetry record",
            &[
                (forged_key.as_str(), "v"),
                ("plugin", "label-audit"),
                ("dropped", "0"),
                ("kept", "yes"),
            ],
        );
        let updates = [
            metrics::counter_add("hx_name_total", &[label("__name__", "up")], 1),
            metrics::counter_add("hx_reserved_total", &[label("__meta", "x")], 1),
            metrics::counter_add("hx_twice_total", &[label("a", "1"), label("a", "2")], 1),
            metrics::gauge_set("hx_colon", &[label("a:b", "1")], 1.0),
            metrics::counter_add("hx_clash_total", &[], 1),
            // Exposed as the family `hx_clash` too: one family, two types.
            metrics::gauge_set("hx_clash", &[], 1.0),
            metrics::gauge_set("hx_total_clash_total", &[], 1.0),
            // A counter named without `_total` is exposed with it: `hx_total_clash_total`.
            metrics::counter_add("hx_total_clash", &[], 1),
        ];
        let refused = updates.iter().filter(|u| u.is_err()).count() as u64;
        metrics::counter_add("refused_total", &[], refused).map_err(|e| e.to_string())?;
        metrics::counter_add("accepted_total", &[], updates.len() as u64 - refused)
            .map_err(|e| e.to_string())?;
        metrics::counter_add("events_total", &[], batch.len() as u64).map_err(|e| e.to_string())
    }
}

fn label(key: &str, value: &str) -> metrics::Label {
    metrics::Label {
        key: key.to_owned(),
        value: value.to_owned(),
    }
}

export_plugin!(Telemetry);
