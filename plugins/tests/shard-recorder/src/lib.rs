//! Test guest for sharding: handles ConfigMap events and does nothing else but spin.
//! `kubeplug run --delivery-log` records what each replica delivered to it and when.
//! Settings: `{"spin": N}` spins N steps of arithmetic per event (about a nanosecond each),
//! so that calls take time and notifications queue up behind them, as behind a busy plugin;
//! `{"reconcile": 1, "fail_first": K}` makes it a reconcile-mode plugin (one worker) whose
//! first K reconciles of each key named `*-flaky` fail, so that the key is retried with
//! back-off (few enough failures in a row that the plugin is not quarantined).

use std::collections::BTreeMap;

use kubeplug_sdk::prelude::*;

struct ShardRecorder {
    spin: u64,
    reconcile: bool,
    fail_first: u64,
    /// Reconciles of each key so far, in this instance.
    attempts: BTreeMap<String, u64>,
}

impl Plugin for ShardRecorder {
    fn init(settings: Settings) -> Result<Self, InitError> {
        let settings: BTreeMap<String, u64> = settings.parse()?;
        Ok(ShardRecorder {
            spin: settings.get("spin").copied().unwrap_or(0),
            reconcile: settings.get("reconcile").is_some_and(|&on| on != 0),
            fail_first: settings.get("fail_first").copied().unwrap_or(0),
            attempts: BTreeMap::new(),
        })
    }

    fn describe(&self) -> Description {
        let subscriptions = vec![Subscription::to(gvk("", "v1", "ConfigMap"))];
        match self.reconcile {
            true => Description::reconcile("shard-recorder", "0.1.0", 1, subscriptions),
            false => Description::events("shard-recorder", "0.1.0", subscriptions),
        }
    }

    fn reconcile(&mut self, target: ObjectRef) -> ReconcileResult {
        spin(self.spin, 1);
        let attempts = self.attempts.entry(target.key()).or_default();
        *attempts += 1;
        match target.name.ends_with("-flaky") && *attempts <= self.fail_first {
            true => ReconcileResult::Error(format!("attempt {attempts} fails on purpose")),
            false => ReconcileResult::Done,
        }
    }

    fn handle_events(&mut self, batch: Vec<Event>) -> Result<(), String> {
        spin(self.spin, batch.len() as u64);
        Ok(())
    }
}

/// `steps` steps of arithmetic per item.
fn spin(steps: u64, items: u64) {
    let mut state = items;
    for _ in 0..steps * items {
        state = std::hint::black_box(state.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

export_plugin!(ShardRecorder);
