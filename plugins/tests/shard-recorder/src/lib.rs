//! Test guest for sharding: handles ConfigMap events and does nothing else but spin.
//! `kubeplug run --delivery-log` records what each replica delivered to it and when.
//! Settings: `{"spin": N}` spins N steps of arithmetic per event (about a nanosecond each),
//! so that calls take time and notifications queue up behind them, as behind a busy plugin.

use std::collections::BTreeMap;

use kubeplug_sdk::prelude::*;

struct ShardRecorder {
    spin: u64,
}

impl Plugin for ShardRecorder {
    fn init(settings: Settings) -> Result<Self, String> {
        let settings: BTreeMap<String, u64> = settings.parse()?;
        Ok(ShardRecorder {
            spin: settings.get("spin").copied().unwrap_or(0),
        })
    }

    fn describe(&self) -> Description {
        Description::events(
            "shard-recorder",
            "0.1.0",
            vec![Subscription::to(gvk("", "v1", "ConfigMap"))],
        )
    }

    fn handle_events(&mut self, batch: Vec<Event>) -> Result<(), String> {
        let mut state = batch.len() as u64;
        for _ in 0..self.spin * batch.len() as u64 {
            state = std::hint::black_box(state.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        Ok(())
    }
}

export_plugin!(ShardRecorder);
