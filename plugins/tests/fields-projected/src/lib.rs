//! Test guest: reads three Pod spec fields (`spec.nodeName`, `spec.restartPolicy`,
//! `spec.schedulerName`) of every event through projections, with no object JSON and only
//! the key of the metadata, and counts per batch the events that had all three as strings
//! (`complete_total`). The pipeline bench's field-reading handler; its JavaScript and Python
//! ports do the same, and the polyglot test compares their counts.

use kubeplug_sdk::prelude::*;

struct FieldsProjected;

impl Plugin for FieldsProjected {
    fn init(_settings: Settings) -> Result<Self, InitError> {
        Ok(FieldsProjected)
    }

    fn describe(&self) -> Description {
        let pods = Subscription::to(gvk("", "v1", "Pod"))
            .meta(MetaFields::empty())
            .project("node", "spec.nodeName")
            .project("policy", "spec.restartPolicy")
            .project("scheduler", "spec.schedulerName");
        Description::events("fields-projected", "0.1.0", vec![pods])
    }

    fn handle_events(&mut self, batch: Vec<Event>) -> Result<(), String> {
        let complete = batch
            .iter()
            .filter(|event| {
                let fields = [
                    event.field_str("node"),
                    event.field_str("policy"),
                    event.field_str("scheduler"),
                ];
                fields.iter().all(Option::is_some)
            })
            .count();
        metrics::counter_add("complete_total", &[], complete as u64)
            .map_err(|e| format!("complete_total: {}", e.explain()))
    }
}

export_plugin!(FieldsProjected);
