//! The plugins directory, live: complete files become running plugins, a replaced file's
//! new version is swapped in at a notification boundary, a removed file is unloaded.
//!
//! [`dir`] turns the directory into changes; [`PluginHost::apply`] is the only writer of the
//! plugin table and carries them out. Plugins keep no memory state across a swap: they keep
//! their state in the cluster or read it from the cache.
//!
//! This module holds the plugin table, its entries and the host's entry points; the work on
//! them is split by job: `load` (a file's content through every load stage, the wait for
//! its informers to sync, and the swap), `delivery` (a version's handler registrations and
//! the drivers that deliver to it) and `leadership` (leading, following, and the keys each
//! replica delivers with `--sharding`).

mod cache;
mod delivery;
mod dir;
mod failure;
mod health;
mod identity;
mod leadership;
mod lifecycle;
mod load;
mod resolver;
mod settings;
mod starts;
mod status;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use futures::StreamExt as _;
use kubeplug_informer::factory::{
    Form, InformerKey, InformerLease, Registration, SharedInformerFactory,
};
use kubeplug_informer::informer::SharedIndexInformer;
use kubeplug_informer::listener::{ListenerProbe, ListenerReceiver};
use kubeplug_runtime::status::{MetricValue, SeriesKey};
use kubeplug_runtime::{
    ClusterWriter, Description, DriverControl, Gvk, KeyShare, ObjectRef, Plugin, Runtime,
};
use kubeplug_workqueue::{Queue, Workers, WorkqueueMetrics};
use tokio::task::JoinHandle;
use tokio_util::task::AbortOnDropHandle;
use tracing::{error, info};

pub(crate) use cache::FactoryCache;
pub(crate) use dir::{Change, ContentHash, DirConfig, FileContent, Hints, PluginDir, watch};
pub(crate) use failure::LoadFailure;
pub(crate) use identity::PluginId;
use lifecycle::{Ended, Failure, Lifecycle};
pub(crate) use resolver::{Resolve, Resolver};
pub(crate) use settings::{PluginSettings, name_mismatch, plugin_settings};
pub(crate) use starts::InformerStarts;
pub(crate) use starts::StartBudget;
pub(crate) use status::{PluginReport, ReloadCounts, StartReadiness};
use status::{Retired, report};

use crate::config::Config;

/// A plugin's handler registrations, not yet delivered to.
#[derive(Default)]
struct Registered {
    subscriptions: Vec<Registration>,
    receivers: Vec<ListenerReceiver>,
}

/// A plugin version that passed every load stage and is ready to be swapped in once the
/// informers it reads have synced.
struct Prepared {
    id: PluginId,
    hash: ContentHash,
    plugin: Arc<Plugin>,
    /// The informers its subscriptions need, in their order.
    keys: Vec<InformerKey>,
    /// Keep the informers of `keys` running from now on.
    warm: Vec<InformerLease>,
    /// Every informer it may read, subscriptions' and caches' alike, with its type.
    reads: Vec<(Gvk, SharedIndexInformer)>,
    /// How long it waits for `reads` to sync before it is reported failed.
    sync_deadline: Duration,
    /// Its events-mode buffers' budget, bytes.
    buffer_budget: usize,
    load_time: Duration,
}

/// A plugin version that is loaded and serving this file. It keeps the informers of its
/// subscriptions running, so that a replica that takes the lead over starts warm; it is
/// delivered to only while this replica leads (its lifecycle holds the [`Delivering`]).
struct Serving {
    plugin: Arc<Plugin>,
    hash: ContentHash,
    loaded_at: SystemTime,
    load_time: Duration,
    keys: Vec<InformerKey>,
    /// Its events-mode buffers' budget, bytes.
    buffer_budget: usize,
    /// Keep the informers of `keys` running whether or not this replica leads.
    warm: Vec<InformerLease>,
    /// Tells the lifecycle of `plugin`'s run state ([`health`]); held for its drop, which
    /// ends it with the version.
    _health: AbortOnDropHandle<()>,
}

/// What keeps a plugin's deliveries going.
struct Delivering {
    control: DriverControl,
    /// Owners of its handler registrations; dropping them unregisters the plugin (its
    /// listeners close and drop what they buffer).
    subscriptions: Vec<Registration>,
    probes: Vec<ListenerProbe>,
    /// The events driver, or the reconcile feeders.
    tasks: Vec<JoinHandle<()>>,
    reconcile: Option<(Queue<ObjectRef>, Workers)>,
}

/// What happened to a plugin identity, in the host's terms.
type Event = lifecycle::Event<Serving, Delivering>;

/// One plugin identity (today a file of the plugins directory): its lifecycle, and the
/// counts of its versions that stopped serving, which outlive each of them.
struct Entry {
    lifecycle: Lifecycle<Serving, Delivering>,
    retired: Retired,
}

/// Loads, swaps and unloads the plugins of one directory, and delivers to them while this
/// replica leads.
///
/// Contract: an entry changes only through [`step`](Self::step), its lifecycle's transition
/// function. What serves and delivers is changed by [`apply`](Self::apply) (called by one
/// task) and by the leadership changes [`lead`](Self::lead) and [`follow`](Self::follow);
/// `writing` serialises them, so that each sees the table as the last one left it (loading,
/// the slow part, runs outside it). [`reports`](Self::reports) reads snapshots. A change never
/// interrupts a call in flight; a file that fails any load stage leaves the version already
/// serving in place. A new host leads; call `follow` before loading to start as a follower.
pub(crate) struct PluginHost {
    runtime: Runtime,
    factory: SharedInformerFactory,
    resolve: Resolver,
    writer: Arc<dyn ClusterWriter>,
    queue_metrics: WorkqueueMetrics,
    config: Config,
    /// Subscriptions without a namespace of their own watch only this one, if set.
    namespace: Option<String>,
    // A std mutex: held only for short, synchronous updates, never across an `.await`.
    table: Mutex<BTreeMap<PluginId, Entry>>,
    /// Held by whoever changes what serves or delivers.
    writing: tokio::sync::Mutex<()>,
    /// Whether plugins are delivered to; read without `writing` by new versions' installs.
    leading: AtomicBool,
    reloads: ReloadCounts,
    /// Bumped whenever a file's state changes, for whoever follows readiness.
    changes: tokio::sync::watch::Sender<u64>,
    /// A new version gets new registrations, and so the whole cache again, even when it
    /// could inherit the running listeners (`--replay-on-swap`, for development).
    replay_on_swap: bool,
    /// With `--sharding`, the keys each plugin (by name) delivers; a plugin not in the map
    /// delivers none. `None`: every plugin delivers every key. Written under `writing`, so
    /// that a delivery started by a swap takes the share in force.
    shares: Option<Mutex<BTreeMap<String, KeyShare>>>,
    /// How many informers a plugin may start, and how soon one more.
    start_budget: StartBudget,
    /// Each plugin identity's budget of informer starts, spent and counted. An identity
    /// costs this map an entry for the host's life (a few dozen bytes), so that removing
    /// and adding a file again does not refill its budget.
    starts: Mutex<BTreeMap<PluginId, Arc<InformerStarts>>>,
}

impl std::fmt::Debug for PluginHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginHost")
            .field("files", &self.table().len())
            .finish_non_exhaustive()
    }
}

impl PluginHost {
    pub(crate) fn new(
        runtime: Runtime,
        factory: SharedInformerFactory,
        resolve: Resolver,
        writer: Arc<dyn ClusterWriter>,
        queue_metrics: WorkqueueMetrics,
        config: Config,
        namespace: Option<String>,
    ) -> Self {
        Self {
            runtime,
            factory,
            resolve,
            writer,
            queue_metrics,
            config,
            namespace,
            table: Mutex::default(),
            writing: tokio::sync::Mutex::default(),
            leading: AtomicBool::new(true),
            reloads: ReloadCounts::default(),
            changes: tokio::sync::watch::Sender::new(0),
            replay_on_swap: false,
            shares: None,
            start_budget: StartBudget::default(),
            starts: Mutex::default(),
        }
    }

    /// The plugins that serve, by name, with their content hashes.
    pub(crate) fn served(&self) -> BTreeMap<String, String> {
        self.table()
            .values()
            .filter_map(|entry| entry.lifecycle.serving())
            .map(|serving| (serving.plugin.name().to_owned(), serving.hash.to_string()))
            .collect()
    }

    /// Makes every swap replay the cache to the new version (see `replay_on_swap`).
    pub(crate) fn replaying_on_swap(mut self, replay: bool) -> Self {
        self.replay_on_swap = replay;
        self
    }

    /// Wakes whoever follows the files' states.
    fn changed(&self) {
        self.changes.send_modify(|generation| *generation += 1);
    }

    /// Changes whenever a file's state does.
    pub(crate) fn subscribe_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn table(&self) -> MutexGuard<'_, BTreeMap<PluginId, Entry>> {
        self.table.lock().expect("plugin table poisoned by a panic")
    }

    /// Steps the lifecycle of plugin `id` through `event`, its counts kept while it lives,
    /// and wakes whoever follows the states. Returns what ended, for the caller to stop.
    fn step(&self, id: &PluginId, event: Event) -> Ended<Serving, Delivering> {
        let ended = Self::step_in(&mut self.table(), id, event);
        self.changed();
        ended
    }

    /// [`step`](Self::step) in `table`, held by a caller that changes or checks the serving
    /// version in the same hold; the caller wakes the followers.
    fn step_in(
        table: &mut BTreeMap<PluginId, Entry>,
        id: &PluginId,
        event: Event,
    ) -> Ended<Serving, Delivering> {
        let (current, retired) = match table.remove(id) {
            Some(entry) => (Some(entry.lifecycle), entry.retired),
            None => (None, Retired::default()),
        };
        let step = Lifecycle::step(current, event);
        if let Some(lifecycle) = step.next {
            table.insert(id.clone(), Entry { lifecycle, retired });
        }
        step.ended
    }

    /// Plugin `id`'s budget of informer starts, kept from its first load on, through
    /// every version and its file's removal: removing and adding a file again does not
    /// refill it.
    fn starts_of(&self, id: &PluginId) -> Arc<InformerStarts> {
        let mut starts = self
            .starts
            .lock()
            .expect("start budgets poisoned by a panic");
        let budget = self.start_budget;
        starts
            .entry(id.clone())
            .or_insert_with(|| Arc::new(InformerStarts::new(budget)))
            .clone()
    }

    /// Bounds the informers each plugin starts by `budget` instead of the default.
    #[cfg(test)]
    pub(crate) fn with_start_budget(mut self, budget: StartBudget) -> Self {
        self.start_budget = budget;
        self
    }

    /// Loads of new or changed files so far, by result.
    pub(crate) fn reload_counts(&self) -> &ReloadCounts {
        &self.reloads
    }

    /// Carries out one batch of directory changes: new and changed files are loaded in
    /// parallel (bounded by the cores), each swapped in as soon as it is loaded and the
    /// informers it reads have synced, so that a slow one holds back no other; removed files
    /// are unloaded. Returns the files whose load failed for a reason outside the file, to be
    /// tried again later ([`PluginDir::retry`]).
    pub(crate) async fn apply(self: &Arc<Self>, changes: Vec<Change>) -> Vec<PathBuf> {
        let mut contents = Vec::new();
        for change in changes {
            match change {
                Change::Present(content) => {
                    // This content supersedes a version still waiting to start; what serves
                    // keeps serving.
                    let id = PluginId::File(content.path.clone());
                    let _ = self.step(&id, Event::Proposed(content.hash));
                    contents.push(content);
                }
                Change::Rejected { path, error } => {
                    self.failed(LoadFailure::Rejected { path, cause: error });
                }
                Change::Removed(path) => self.remove(&PluginId::File(path)).await,
            }
        }
        let parallel = std::thread::available_parallelism().map_or(1, usize::from);
        let retry = Mutex::new(Vec::new());
        futures::stream::iter(contents)
            .for_each_concurrent(parallel, |content| async {
                let installed = match self.prepare(content).await {
                    Ok(prepared) if prepared.synced() => self.install(prepared).await,
                    Ok(prepared) => {
                        self.start_when_synced(prepared);
                        Ok(())
                    }
                    Err(failure) => Err(failure),
                };
                if let Err(failure) = installed {
                    if failure.is_retryable() {
                        retry
                            .lock()
                            .expect("retry list poisoned by a panic")
                            .push(failure.path().to_owned());
                    }
                    self.failed(failure);
                }
            })
            .await;
        retry.into_inner().expect("retry list poisoned by a panic")
    }

    /// Records a failed load; a version already serving keeps serving, and one whose
    /// informers are late keeps waiting for them.
    fn failed(&self, failure: LoadFailure) {
        let id = failure.id();
        let mut message = failure.message();
        if failure.is_retryable() {
            message.push_str(" (tried again at each rescan of the directory)");
        }
        let keeps = self
            .table()
            .get(&id)
            .and_then(|entry| entry.lifecycle.serving())
            .map(|serving| serving.plugin.name().to_owned());
        if let Some(name) = failure.plugin() {
            let _ = self.step(&id, Event::Described(name.to_owned()));
        }
        let recorded = Failure {
            message: message.clone(),
            summary: failure.summary(),
        };
        let event = match failure {
            LoadFailure::NotSynced { .. } => Event::Stalled(recorded),
            _ => Event::Failed(recorded),
        };
        // A failure ends nothing: a version serving keeps serving.
        let _ = self.step(&id, event);
        self.reloads.failure.fetch_add(1, Ordering::Relaxed);
        match keeps {
            Some(plugin) => {
                error!(file = %id, %plugin, "{message}; the version already running keeps serving");
            }
            None => error!(file = %id, "{message}"),
        }
    }

    /// Unloads a plugin its source withdrew (its file was removed) once its calls in flight
    /// finish.
    async fn remove(&self, id: &PluginId) {
        let _writing = self.writing.lock().await;
        let ended = self.step(id, Event::Withdrawn);
        let Some(serving) = ended.retired else {
            return;
        };
        let name = serving.plugin.name();
        if let Some(delivering) = ended.stopped {
            delivering.stop(name).await;
        }
        info!(plugin = %name, file = %id, "plugin unloaded: its file was removed");
    }

    /// The series each serving plugin defined through `metrics`, by plugin name.
    pub(crate) fn plugin_series(&self) -> Vec<(String, BTreeMap<SeriesKey, MetricValue>)> {
        self.table()
            .values()
            .filter_map(|entry| entry.lifecycle.serving())
            .map(|serving| {
                let plugin = &serving.plugin;
                (plugin.name().to_owned(), plugin.metrics().snapshot())
            })
            .collect()
    }

    /// Empties the table, every plugin withdrawn: versions waiting to start never will; the
    /// serving ones and their deliveries are returned to be stopped.
    fn take_serving(&self) -> Vec<(Serving, Delivering)> {
        let table = std::mem::take(&mut *self.table());
        self.changed();
        table
            .into_values()
            .filter_map(|entry| {
                let ended = Lifecycle::step(Some(entry.lifecycle), Event::Withdrawn).ended;
                Some((ended.retired?, ended.stopped?))
            })
            .collect()
    }

    /// Whether the plugins of `at_start` (those present when the host started) let the
    /// host be ready; see [`StartReadiness`].
    pub(crate) fn start_readiness(&self, at_start: &BTreeSet<PluginId>) -> StartReadiness {
        StartReadiness::of(self.table().iter(), at_start)
    }

    /// Every plugin seen, whatever its state.
    pub(crate) fn plugin_ids(&self) -> BTreeSet<PluginId> {
        self.table().keys().cloned().collect()
    }

    /// Every plugin file seen, with its state.
    pub(crate) fn reports(&self) -> Vec<PluginReport> {
        let starts = self
            .starts
            .lock()
            .expect("start budgets poisoned by a panic");
        self.table()
            .iter()
            .map(|(id, entry)| report(id, entry, starts.get(id).map(Arc::as_ref)))
            .collect()
    }

    /// Stops every plugin at once: calls in flight finish, queued keys are dropped, handlers
    /// unregistered.
    #[cfg(test)]
    pub(crate) async fn stop(&self) {
        let _writing = self.writing.lock().await;
        for (serving, delivering) in self.take_serving() {
            delivering.stop(serving.plugin.name()).await;
        }
    }

    /// Stops every plugin gracefully, for shutdown: no new notifications; reconcile queues
    /// are worked off until `deadline`, all plugins at once; calls in flight finish.
    pub(crate) async fn drain(&self, deadline: tokio::time::Instant) {
        let _writing = self.writing.lock().await;
        futures::future::join_all(self.take_serving().into_iter().map(
            |(serving, delivering)| async move {
                delivering.drain(serving.plugin.name(), deadline).await;
            },
        ))
        .await;
    }
}

/// The form of the informers a plugin version reads `resource` through, its subscriptions'
/// and its cache's alike: whole objects when it reads their bodies anywhere
/// ([`Description::body_types`]), metadata alone otherwise. One form per type, so that an
/// unselected subscription and the cache are one informer, and a read is never older than
/// the event being handled.
pub(crate) fn form_of(description: &Description, resource: &Gvk) -> Form {
    match description.body_types().contains(resource) {
        true => Form::Objects,
        false => Form::Metadata,
    }
}

#[cfg(test)]
mod tests;
