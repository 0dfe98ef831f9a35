//! How a plugin's lifecycle learns of its serving version's run state: the runtime's driver
//! publishes each change (quarantined, running again, stopped) on the version's state
//! channel, and a task per serving version steps the lifecycle with it. The lifecycle is
//! told, never polled: `/plugins` reads the state from the lifecycle alone.

use std::path::Path;
use std::sync::Arc;

use kubeplug_runtime::{Plugin, RunState};
use tokio_util::task::AbortOnDropHandle;

use super::PluginHost;
use super::lifecycle::Event;

impl PluginHost {
    /// Starts stepping the lifecycle at `path` with every change of `plugin`'s run state,
    /// its state now first, for as long as `plugin` serves there. The task holds neither
    /// the host nor the plugin; it is aborted when the returned handle drops, with the
    /// version that holds it.
    pub(super) fn follow_health(
        self: &Arc<Self>,
        path: &Path,
        plugin: &Arc<Plugin>,
    ) -> AbortOnDropHandle<()> {
        let host = Arc::downgrade(self);
        let version = Arc::downgrade(plugin);
        let mut states = plugin.stats().watch_state();
        states.mark_changed();
        let path = path.to_owned();
        AbortOnDropHandle::new(tokio::spawn(async move {
            while states.changed().await.is_ok() {
                let state = states.borrow_and_update().clone();
                let (Some(host), Some(plugin)) = (host.upgrade(), version.upgrade()) else {
                    return;
                };
                host.health_changed(&path, &plugin, state);
            }
        }))
    }

    /// Steps the lifecycle at `path` with `state` if `plugin` still serves there: a report of
    /// a version swapped out, or not yet installed, is stale.
    fn health_changed(&self, path: &Path, plugin: &Arc<Plugin>, state: RunState) {
        let mut table = self.table();
        let serves = table
            .get(path)
            .and_then(|entry| entry.lifecycle.serving())
            .is_some_and(|serving| Arc::ptr_eq(&serving.plugin, plugin));
        if !serves {
            return;
        }
        // A report retires nothing.
        let _ = Self::step_in(&mut table, path, Event::Health(state));
        drop(table);
        self.changed();
    }
}
