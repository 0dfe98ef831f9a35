//! Hostile test guest: writes as fast as it can. For each batch it records `writes` Events
//! (setting `writes`, default 1000) on the first object, one after the other in one call,
//! counting those accepted in `written_total` and those refused in `refused_total` (it stops
//! at the first refusal: the host's write rate said no).

use kubeplug_sdk::prelude::*;
use serde_json::Value;

struct Flood {
    writes: u64,
}

impl Plugin for Flood {
    fn init(settings: Settings) -> Result<Self, InitError> {
        let settings: Value = settings.parse()?;
        Ok(Flood {
            writes: settings["writes"].as_u64().unwrap_or(1000),
        })
    }

    fn describe(&self) -> Description {
        let mut d = Description::events(
            "hostile-flood",
            "0.1.0",
            vec![Subscription::to(gvk("", "v1", "Pod"))],
        );
        d.writes.push(WriteRequest {
            resource_type: gvk("", "v1", "Pod"),
            verbs: vec![WriteVerb::RecordEvent],
        });
        d
    }

    fn handle_events(&mut self, batch: Vec<Event>) -> Result<(), String> {
        let Some(first) = batch.first() else {
            return Ok(());
        };
        let regarding = ObjectRef::new(
            gvk("", "v1", "Pod"),
            first.meta.namespace.as_deref(),
            &first.meta.name,
        );
        let count =
            |name: &str, n: u64| metrics::counter_add(name, &[], n).map_err(|e| e.to_string());
        for written in 0..self.writes {
            let recorded = cluster::record_event(
                &regarding,
                cluster::EventSeverity::Normal,
                "Flood",
                "one more",
            );
            if let Err(error) = recorded {
                count("written_total", written)?;
                count("refused_total", 1)?;
                return Err(format!("stopped after {written} writes: {error:?}"));
            }
        }
        count("written_total", self.writes)
    }
}

export_plugin!(Flood);
