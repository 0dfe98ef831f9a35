//! Hostile test guest: panics in handle-events (a trap for the host).

use kubeplug_sdk::prelude::*;

struct Panic;

impl Plugin for Panic {
    fn init(_settings: Settings) -> Result<Self, InitError> {
        Ok(Panic)
    }

    fn describe(&self) -> Description {
        Description::events(
            "hostile-panic",
            "0.1.0",
            vec![Subscription::to(gvk("", "v1", "Pod"))],
        )
    }

    fn handle_events(&mut self, batch: Vec<Event>) -> Result<(), String> {
        panic!("hostile-panic was given {} events", batch.len());
    }
}

export_plugin!(Panic);
