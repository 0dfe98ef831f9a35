//! Leadership and sharding: a replica that leads delivers to its plugins, one that follows
//! keeps them loaded and their informers warm; with `--sharding`, each plugin delivers only
//! the keys of its share, and keys a replica gains are replayed to it.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use kubeplug_informer::factory::InformerKey;
use kubeplug_runtime::{Delivery, KeyMapping, KeyShare, Plugin};
use tracing::{error, info};

use super::{Delivering, Entry, Event, Failure, LoadFailure, PluginHost, PluginId, Serving};

impl PluginHost {
    /// Makes the host deliver to each plugin only the keys [`share`](Self::share) gives it
    /// (none until then): replicas share the work (`--sharding`).
    pub(crate) fn sharded(mut self) -> Self {
        self.shares = Some(Mutex::default());
        self
    }

    /// The share a delivery of `plugin` starts with.
    pub(super) fn share_of(&self, plugin: &str) -> KeyShare {
        match &self.shares {
            None => KeyShare::all(),
            Some(shares) => shares
                .lock()
                .expect("shares poisoned by a panic")
                .get(plugin)
                .cloned()
                .unwrap_or_else(|| KeyShare::only(|_| false)),
        }
    }

    /// Delivers only `share`'s keys to `plugin` from its next call on, and to any version
    /// of it started later. The future resolves once no call under the previous share is in
    /// flight.
    pub(crate) async fn share(
        &self,
        plugin: &str,
        share: KeyShare,
    ) -> impl Future<Output = ()> + Send + use<> {
        let _writing = self.writing.lock().await;
        if let Some(shares) = &self.shares {
            shares
                .lock()
                .expect("shares poisoned by a panic")
                .insert(plugin.to_owned(), share.clone());
        }
        let settled = delivering_named(&self.table(), plugin).map(|(_, delivering)| {
            let control = &delivering.control;
            control.settled(control.share(share))
        });
        async move {
            if let Some(settled) = settled {
                settled.await;
            }
        }
    }

    /// Replays to `plugin` the cached objects of the keys `gained` picks, as in-initial-list
    /// adds: the keys a sharded replica takes over. A reconcile plugin that maps events to
    /// other keys (owners, computed) gets every cached object, since which of them map to a
    /// gained key is known only after mapping; its share drops the rest. Returns how many
    /// objects were replayed.
    pub(crate) fn replay(&self, plugin: &str, gained: &dyn Fn(&str) -> bool) -> usize {
        let table = self.table();
        let Some((serving, delivering)) = delivering_named(&table, plugin) else {
            return 0;
        };
        let description = serving.plugin.description();
        delivering
            .subscriptions
            .iter()
            .zip(&description.subscriptions)
            .map(|(registration, spec)| {
                let by_own_key = matches!(description.delivery, Delivery::Events)
                    || matches!(spec.enqueue, KeyMapping::OwnKey);
                match by_own_key {
                    true => registration.replay(&|object| gained(object.key().as_str())),
                    false => registration.replay(&|_| true),
                }
            })
            .sum()
    }

    /// How many distinct cached keys of `plugin`'s subscriptions `owns` picks.
    pub(crate) fn count_keys(&self, plugin: &str, owns: &dyn Fn(&str) -> bool) -> usize {
        let table = self.table();
        let Some((_, delivering)) = delivering_named(&table, plugin) else {
            return 0;
        };
        let mut keys = std::collections::BTreeSet::new();
        for registration in &delivering.subscriptions {
            for object in registration.informer().indexer().list() {
                if owns(object.key().as_str()) {
                    keys.insert(object.key().as_str().to_owned());
                }
            }
        }
        keys.len()
    }

    pub(super) fn is_leading(&self) -> bool {
        self.leading.load(Ordering::Acquire)
    }

    /// This replica took the lead: every loaded plugin starts receiving, the cache replayed
    /// to it as the initial list.
    pub(crate) async fn lead(&self) {
        let _writing = self.writing.lock().await;
        self.leading.store(true, Ordering::Release);
        let waiting: Vec<(PluginId, Arc<Plugin>, Vec<InformerKey>, usize)> = self
            .table()
            .iter()
            .filter_map(|(id, entry)| {
                let serving = entry.lifecycle.serving()?;
                entry.lifecycle.delivering().is_none().then(|| {
                    let plugin = serving.plugin.clone();
                    (
                        id.clone(),
                        plugin,
                        serving.keys.clone(),
                        serving.buffer_budget,
                    )
                })
            })
            .collect();
        for (id, plugin, keys, budget) in waiting {
            plugin.fence_writes(false);
            let started = self
                .register(&plugin, &keys, budget)
                .and_then(|registered| self.deliver(&plugin, registered));
            match started {
                Ok(delivering) => {
                    if !self.place(&id, delivering, plugin.name()).await {
                        continue;
                    }
                    info!(plugin = plugin.name(), file = %id, "plugin running: this replica leads");
                }
                Err(source) => {
                    let failure = LoadFailure::Start {
                        path: id.file().to_owned(),
                        source,
                    };
                    let message = failure.message();
                    error!(plugin = plugin.name(), "{message}");
                    // It stays loaded, its informers warm; it serves as soon as it can.
                    let _ = self.step(
                        &id,
                        Event::Stalled(Failure {
                            message,
                            summary: failure.summary(),
                        }),
                    );
                }
            }
        }
    }

    /// This replica lost the lead (or never had it): deliveries stop at once, after the calls
    /// in flight; the plugins stay loaded and their informers warm.
    pub(crate) async fn follow(&self) {
        self.leading.store(false, Ordering::Release);
        // Before waiting for the writer: a swap in progress must not delay this. A call in
        // flight writes nothing more: another replica may lead once the margin passes.
        for entry in self.table().values() {
            let Some(serving) = entry.lifecycle.serving() else {
                continue;
            };
            serving.plugin.fence_writes(true);
            if let Some(delivering) = entry.lifecycle.delivering() {
                delivering.control.stop();
            }
        }
        let _writing = self.writing.lock().await;
        let stopping = self.stand_by();
        self.changed();
        for (plugin, delivering) in stopping {
            // Again: a version swapped in meanwhile was not in the table above.
            plugin.fence_writes(true);
            delivering.stop(plugin.name()).await;
            info!(
                plugin = plugin.name(),
                "plugin stopped: this replica no longer leads"
            );
        }
    }

    /// Every serving version that delivers stands by; returns their deliveries, to be
    /// stopped, with their plugins. The caller holds `writing` and wakes the followers.
    fn stand_by(&self) -> Vec<(Arc<Plugin>, Delivering)> {
        let mut table = self.table();
        let delivering: Vec<(PluginId, Arc<Plugin>)> = table
            .iter()
            .filter(|(_, entry)| entry.lifecycle.delivering().is_some())
            .filter_map(|(id, entry)| Some((id.clone(), entry.lifecycle.serving()?.plugin.clone())))
            .collect();
        delivering
            .into_iter()
            .filter_map(|(id, plugin)| {
                let stopped = Self::step_in(&mut table, &id, Event::Standby).stopped?;
                // The next registration's buffers count from zero.
                if let Some(entry) = table.get_mut(&id) {
                    entry.retired.add_merged(stopped.merged());
                }
                Some((plugin, stopped))
            })
            .collect()
    }
}

/// The version of `plugin` (by name) that serves and delivers, if any.
fn delivering_named<'a>(
    table: &'a BTreeMap<PluginId, Entry>,
    plugin: &str,
) -> Option<(&'a Serving, &'a Delivering)> {
    let lifecycle = &table
        .values()
        .find(|entry| {
            entry
                .lifecycle
                .serving()
                .is_some_and(|serving| serving.plugin.name() == plugin)
        })?
        .lifecycle;
    Some((lifecycle.serving()?, lifecycle.delivering()?))
}
