//! Test guest: subscribes to Pods and accepts every event without looking at it. The
//! baseline for the cost of a batch crossing.

use kubeplug_sdk::prelude::*;

struct Noop;

impl Plugin for Noop {
    fn init(_settings: Settings) -> Result<Self, InitError> {
        Ok(Noop)
    }

    fn describe(&self) -> Description {
        Description::events(
            "noop",
            "0.1.0",
            vec![Subscription::to(gvk("", "v1", "Pod")).meta(MetaFields::empty())],
        )
    }

    fn handle_events(&mut self, _batch: Vec<Event>) -> Result<(), String> {
        Ok(())
    }
}

export_plugin!(Noop);
