//! Test guest: reads one label of every event from typed metadata (no JSON), checks that
//! resourceVersions of each key only grow, and reports per batch through `metrics`:
//! `events_total`, `web_total` (events whose label has the wanted value) and
//! `out_of_order_total`. Settings: `{"label": "app", "value": "web"}` (the defaults), and
//! `"field_selector"` for its subscription (none by default).

use std::collections::HashMap;

use kubeplug_sdk::prelude::*;

struct LabelReader {
    label: String,
    value: String,
    field_selector: Option<String>,
    last: HashMap<String, u64>,
}

impl Plugin for LabelReader {
    fn init(settings: Settings) -> Result<Self, InitError> {
        let parsed: serde_json::Value = settings.parse()?;
        let field = |name: &str, default: &str| match &parsed[name] {
            serde_json::Value::Null => Ok(default.to_owned()),
            serde_json::Value::String(s) => Ok(s.clone()),
            other => Err(format!("settings: {name} must be a string, not {other}")),
        };
        Ok(Self {
            label: field("label", "app")?,
            value: field("value", "web")?,
            field_selector: parsed["field_selector"].as_str().map(str::to_owned),
            last: HashMap::new(),
        })
    }

    fn describe(&self) -> Description {
        Description::events(
            "label-reader",
            "0.1.0",
            vec![Subscription {
                field_selector: self.field_selector.clone(),
                ..Subscription::to(gvk("", "v1", "Pod")).meta(MetaFields::LABELS)
            }],
        )
    }

    fn handle_events(&mut self, batch: Vec<Event>) -> Result<(), String> {
        let mut web = 0;
        let mut out_of_order = 0;
        for event in &batch {
            if event.label(&self.label) == Some(self.value.as_str()) {
                web += 1;
            }
            // The memory server writes numbers; anything else counts as out of order.
            let rv: u64 = event.meta.resource_version.parse().unwrap_or(0);
            let previous = self.last.insert(event.key(), rv).unwrap_or(0);
            if rv < previous || (rv == previous && event.change != EventType::Deleted) {
                out_of_order += 1;
            }
        }
        let count = |name: &str, n: u64| {
            metrics::counter_add(name, &[], n).map_err(|e| format!("{name}: {e}"))
        };
        count("events_total", batch.len() as u64)?;
        count("web_total", web)?;
        count("out_of_order_total", out_of_order)
    }
}

export_plugin!(LabelReader);
