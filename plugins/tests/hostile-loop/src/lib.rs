//! Hostile test guest: never returns from handle-events. The host's deadline must stop it.

use kubeplug_sdk::prelude::*;

struct Loop;

impl Plugin for Loop {
    fn init(_settings: Settings) -> Result<Self, InitError> {
        Ok(Loop)
    }

    fn describe(&self) -> Description {
        Description::events(
            "hostile-loop",
            "0.1.0",
            vec![Subscription::to(gvk("", "v1", "Pod"))],
        )
    }

    fn handle_events(&mut self, batch: Vec<Event>) -> Result<(), String> {
        let mut n = batch.len() as u64;
        loop {
            n = std::hint::black_box(n.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
}

export_plugin!(Loop);
