//! Hostile test guest: writes 100 MB to stdout per batch, then returns a 1 MB error string.

use std::io::Write;

use kubeplug_sdk::prelude::*;

struct Output;

impl Plugin for Output {
    fn init(_settings: Settings) -> Result<Self, InitError> {
        Ok(Output)
    }

    fn describe(&self) -> Description {
        Description::events(
            "hostile-output",
            "0.1.0",
            vec![Subscription::to(gvk("", "v1", "Pod"))],
        )
    }

    fn handle_events(&mut self, _batch: Vec<Event>) -> Result<(), String> {
        let line = [b'x'; 1 << 16];
        let mut stdout = std::io::stdout().lock();
        for _ in 0..1600 {
            let _ = stdout.write_all(&line);
            let _ = stdout.write_all(b"\n");
        }
        Err("y".repeat(1 << 20))
    }
}

export_plugin!(Output);
