//! __NAME__: a reconciler over ConfigMaps. Each key is reconciled with the object read from
//! the cache and comes back every minute, as a controller-runtime reconciler that returns
//! `RequeueAfter` does; a deleted object is done.
//!
//! Edit `describe` to watch other types (and grant their reads in kubeplug.toml), and
//! `reconcile` to bring each object to its desired state. `kubeplug build` builds it;
//! `kubeplug test` replays events.yaml into it.

use kubeplug_sdk::prelude::*;

struct Reconciler;

fn config_maps() -> Gvk {
    gvk("", "v1", "ConfigMap")
}

/// How long until a key is reconciled again, in milliseconds.
const RESYNC_MS: u64 = 60_000;

impl Plugin for Reconciler {
    fn init(_settings: Settings) -> Result<Self, InitError> {
        Ok(Reconciler)
    }

    fn describe(&self) -> Description {
        Description::reconcile("__NAME__", "0.1.0", 1, vec![Subscription::to(config_maps())])
    }

    fn reconcile(&mut self, target: ObjectRef) -> ReconcileResult {
        let key = target.key();
        match cache::get(&target.resource_type, &key) {
            Ok(Some(object)) => {
                let version = &object.meta.resource_version;
                log::info("reconciling", &[("key", &key), ("resourceVersion", version)]);
                ReconcileResult::RequeueAfter(RESYNC_MS)
            }
            Ok(None) => {
                log::info("gone: nothing to do", &[("key", &key)]);
                ReconcileResult::Done
            }
            Err(error) => ReconcileResult::Error(format!("reading {key}: {error:?}")),
        }
    }
}

export_plugin!(Reconciler);
