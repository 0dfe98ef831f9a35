//! How a plugin's lifecycle learns of its serving version's run state: the runtime's driver
//! publishes each change (quarantined, running again, stopped) on the version's state
//! channel, and a task per serving version steps the lifecycle with it. The lifecycle is
//! told, never polled: `/plugins` reads the state from the lifecycle alone.

use std::sync::Arc;

use kubeplug_runtime::{Plugin, RunState};
use tokio_util::task::AbortOnDropHandle;

use super::lifecycle::Event;
use super::{PluginHost, PluginId};

impl PluginHost {
    /// Starts stepping plugin `id`'s lifecycle with every change of `plugin`'s run state,
    /// its state now first, for as long as `plugin` is the version serving. The task holds
    /// neither the host nor the plugin; it is aborted when the returned handle drops, with
    /// the version that holds it.
    pub(super) fn follow_health(
        self: &Arc<Self>,
        id: &PluginId,
        plugin: &Arc<Plugin>,
    ) -> AbortOnDropHandle<()> {
        let host = Arc::downgrade(self);
        let version = Arc::downgrade(plugin);
        let mut states = plugin.stats().watch_state();
        states.mark_changed();
        let id = id.clone();
        AbortOnDropHandle::new(tokio::spawn(async move {
            while states.changed().await.is_ok() {
                let state = states.borrow_and_update().clone();
                let (Some(host), Some(plugin)) = (host.upgrade(), version.upgrade()) else {
                    return;
                };
                host.health_changed(&id, &plugin, state);
            }
        }))
    }

    /// Steps plugin `id`'s lifecycle with `state` if `plugin` is still the version serving:
    /// a report of a version swapped out, or not yet installed, is stale.
    fn health_changed(&self, id: &PluginId, plugin: &Arc<Plugin>, state: RunState) {
        let mut table = self.table();
        let serves = table
            .get(id)
            .and_then(|entry| entry.lifecycle.serving())
            .is_some_and(|serving| Arc::ptr_eq(&serving.plugin, plugin));
        if !serves {
            return;
        }
        // A report retires nothing.
        let _ = Self::step_in(&mut table, id, Event::Health(state));
        drop(table);
        self.changed();
    }
}
