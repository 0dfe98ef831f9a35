//! Hostile test guest: subscribes to Pods with the object's JSON, its old JSON and `spec`
//! projected 16 times, so that every event of a large Pod asks the host to copy it 34 times
//! over. Counts the events it is given in `events_total`.

use kubeplug_sdk::prelude::*;

struct Projections;

impl Plugin for Projections {
    fn init(_settings: Settings) -> Result<Self, InitError> {
        Ok(Projections)
    }

    fn describe(&self) -> Description {
        let mut pods = Subscription::to(gvk("", "v1", "Pod")).with_json();
        pods.wants_old_json = true;
        let pods = (0..16).fold(pods, |pods, i| pods.project(&format!("spec{i}"), "spec"));
        Description::events("hostile-projections", "0.1.0", vec![pods])
    }

    fn handle_events(&mut self, batch: Vec<Event>) -> Result<(), String> {
        metrics::counter_add("events_total", &[], batch.len() as u64).map_err(|e| e.to_string())
    }
}

export_plugin!(Projections);
