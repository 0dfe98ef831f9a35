//! The plugins directory, live: complete files become running plugins, a replaced file's
//! new version is swapped in at a notification boundary, a removed file is unloaded.
//!
//! [`dir`] turns the directory into changes; [`PluginHost::apply`] is the only writer of the
//! plugin table and carries them out. Plugins keep no memory state across a swap: they keep
//! their state in the cluster or read it from the cache.

mod cache;
mod dir;
mod failure;
mod resolver;
mod settings;
mod status;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt as _;
use kubeplug_informer::factory::{
    InformerKey, InformerLease, Needs, Registration, SharedInformerFactory,
};
use kubeplug_informer::informer::{HandlerOptions, SharedIndexInformer};
use kubeplug_informer::listener::{BufferPolicy, ListenerProbe, ListenerReceiver};
use kubeplug_runtime::status::{MetricValue, SeriesKey};
use kubeplug_runtime::{
    ClusterWriter, Delivery, DriverControl, Gvk, KeyMapping, KeyShare, ObjectRef, Plugin,
    PluginSpec, Runtime, SubscriptionSpec,
};
use kubeplug_workqueue::{Queue, Workers, WorkqueueMetrics};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

pub(crate) use cache::FactoryCache;
pub(crate) use dir::{Change, ContentHash, DirConfig, FileContent, Hints, PluginDir, watch};
pub(crate) use failure::LoadFailure;
pub(crate) use resolver::{Resolve, Resolver};
pub(crate) use settings::{PluginSettings, name_mismatch, plugin_settings};
pub(crate) use status::{PluginReport, ReloadCounts, StartReadiness};
use status::{Retired, Totals, report};

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
    path: PathBuf,
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

impl Prepared {
    fn synced(&self) -> bool {
        self.reads
            .iter()
            .all(|(_, informer)| informer.has_complete_cache())
    }

    /// Why it has not started: each informer not synced, and the reason it gives.
    fn not_synced(&self) -> LoadFailure {
        let mut informers: Vec<(String, String)> = self
            .reads
            .iter()
            .filter(|(_, informer)| !informer.has_complete_cache())
            .map(|(resource, informer)| {
                let error = informer.last_error();
                (
                    format!(
                        "informer {resource}: {}",
                        failure::why_not_synced(error.as_ref())
                    ),
                    error.map_or_else(|| "no error yet".to_owned(), |e| e.to_string()),
                )
            })
            .collect();
        informers.sort();
        informers.dedup();
        LoadFailure::NotSynced {
            path: self.path.clone(),
            plugin: self.plugin.name().to_owned(),
            deadline: self.sync_deadline,
            informers,
        }
    }
}

/// A loaded version waiting for its informers to sync; cancelled when a newer version or
/// the file's removal supersedes it.
struct Syncing {
    cancel: CancellationToken,
}

/// A plugin version that is loaded and serving this file. It keeps the informers of its
/// subscriptions running, so that a replica that takes the lead over starts warm; it is
/// delivered to only while this replica leads.
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
    /// `None` while this replica follows.
    delivering: Option<Delivering>,
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

impl Delivering {
    /// Notifications its buffers merged over their budget.
    fn merged(&self) -> u64 {
        self.probes.iter().map(ListenerProbe::merged).sum()
    }

    /// Ends deliveries after the calls in flight, then unregisters the handlers. Keys waiting
    /// in a reconcile queue are dropped.
    async fn stop(self, plugin: &str) {
        self.control.stop();
        if let Some((queue, workers)) = self.reconcile {
            queue.shut_down();
            workers.join().await;
        }
        join_all(plugin, self.tasks).await;
        drop(self.subscriptions);
    }

    /// Ends deliveries gracefully: no new notifications; the keys already queued are still
    /// reconciled until `deadline`, then dropped; calls in flight always finish.
    async fn drain(self, plugin: &str, deadline: tokio::time::Instant) {
        // Closing the listeners ends the events driver and the feeders after their batch.
        drop(self.subscriptions);
        join_all(plugin, self.tasks).await;
        if let Some((queue, workers)) = self.reconcile {
            queue.shut_down();
            let joined = workers.join();
            tokio::pin!(joined);
            if tokio::time::timeout_at(deadline, joined.as_mut())
                .await
                .is_err()
            {
                warn!(
                    plugin,
                    dropped = queue.len(),
                    "the shutdown deadline passed with keys still queued; they are dropped"
                );
                // Workers now drop the keys they take without calling the plugin.
                self.control.stop();
                joined.await;
            }
        }
        self.control.stop();
    }
}

async fn join_all(plugin: &str, tasks: Vec<JoinHandle<()>>) {
    for task in tasks {
        if let Err(error) = task.await
            && error.is_panic()
        {
            error!(plugin, %error, "a plugin driver panicked");
        }
    }
}

/// One file of the plugins directory.
#[derive(Default)]
struct Entry {
    serving: Option<Serving>,
    /// A new version is being loaded (not set while unchanged content is tried again, so
    /// that a failing file does not flap between `failed` and `loading`).
    loading: bool,
    /// The content last tried.
    tried: Option<ContentHash>,
    /// The last failure to load or replace it; cleared by a successful load.
    last_error: Option<String>,
    /// The name a version that failed after describing itself gave, so that `/plugins`
    /// names a plugin that never ran.
    described_as: Option<String>,
    /// A loaded version waiting for its informers to sync.
    syncing: Option<Syncing>,
    /// The last failure in host-written words only (stage, resource, HTTP status), for
    /// `/readyz`, which is open to anyone.
    failure_summary: Option<String>,
    /// Counts of its retired versions.
    retired: Retired,
}

/// Loads, swaps and unloads the plugins of one directory, and delivers to them while this
/// replica leads.
///
/// Contract: the plugin table is written by [`apply`](Self::apply) (called by one task) and
/// by the leadership changes [`lead`](Self::lead) and [`follow`](Self::follow); `writing`
/// serialises them, so that each sees the table as the last one left it (loading, the slow
/// part, runs outside it). [`reports`](Self::reports) reads snapshots. A change never
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
    table: Mutex<BTreeMap<PathBuf, Entry>>,
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
        }
    }

    /// Makes the host deliver to each plugin only the keys [`share`](Self::share) gives it
    /// (none until then): replicas share the work (`--sharding`).
    pub(crate) fn sharded(mut self) -> Self {
        self.shares = Some(Mutex::default());
        self
    }

    /// The share a delivery of `plugin` starts with.
    fn share_of(&self, plugin: &str) -> KeyShare {
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

    /// The plugins that serve, by name, with their content hashes.
    pub(crate) fn served(&self) -> BTreeMap<String, String> {
        self.table()
            .values()
            .filter_map(|entry| entry.serving.as_ref())
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

    fn table(&self) -> MutexGuard<'_, BTreeMap<PathBuf, Entry>> {
        self.table.lock().expect("plugin table poisoned by a panic")
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
                    let mut table = self.table();
                    let entry = table.entry(content.path.clone()).or_default();
                    if entry.tried.replace(content.hash) != Some(content.hash) {
                        entry.loading = true;
                    }
                    // This content supersedes a version still waiting to start.
                    if let Some(syncing) = entry.syncing.take() {
                        syncing.cancel.cancel();
                    }
                    drop(table);
                    self.changed();
                    contents.push(content);
                }
                Change::Rejected { path, error } => {
                    self.failed(LoadFailure::Rejected { path, cause: error });
                }
                Change::Removed(path) => self.remove(&path).await,
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

    /// Every load stage short of swapping in: settings, compile (through the artefact
    /// cache, off the async threads), instantiate, init, describe under the deadline,
    /// validation and grants, indexes, resolving the subscribed types.
    async fn prepare(&self, content: FileContent) -> Result<Prepared, LoadFailure> {
        let started = Instant::now();
        let FileContent { path, bytes, hash } = content;
        let PluginSettings {
            settings,
            grants,
            limits,
            sha256,
            sync_deadline,
            buffer_budget,
        } = plugin_settings(&self.config, &path, self.namespace.as_deref()).map_err(|cause| {
            LoadFailure::Settings {
                path: path.clone(),
                cause,
            }
        })?;
        // Checked before a byte of it is compiled.
        if let Some(expected) = sha256
            && expected != hash.to_string()
        {
            return Err(LoadFailure::NotPinned {
                name: path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                path,
                expected,
                actual: hash.to_string(),
            });
        }
        // Each version leases the caches it reads for itself, so that unloading it stops
        // the informers only it needed.
        let cache = Arc::new(FactoryCache::new(
            self.factory.clone(),
            self.resolve.clone(),
            self.namespace.clone(),
        ));
        let plugin = self
            .runtime
            .load(PluginSpec {
                path: path.clone(),
                bytes,
                settings,
                grants,
                limits,
                cache: cache.clone(),
                writer: self.writer.clone(),
            })
            .await?;
        let description = plugin.description();
        // `/plugins` names it from now on, while the rest of its load goes on.
        if let Some(entry) = self.table().get_mut(&path) {
            entry.described_as = Some(description.name.clone());
        }
        if let Some(cause) = name_mismatch(&path, &description.name) {
            return Err(LoadFailure::NameMismatch {
                path,
                plugin: description.name.clone(),
                cause,
            });
        }
        let mut keys = Vec::with_capacity(description.subscriptions.len());
        for wanted in &description.subscriptions {
            let resource = self
                .resolve
                .resolve(&wanted.resource)
                .await
                .ok_or_else(|| LoadFailure::Unresolved {
                    path: path.clone(),
                    plugin: description.name.clone(),
                    resource: wanted.resource.clone(),
                })?;
            // The host's namespace limits only namespaced types; a namespace on a
            // cluster-scoped type is a plugin error.
            let namespace = match (&wanted.namespace, resource.namespaced) {
                (Some(namespace), false) => {
                    return Err(LoadFailure::ClusterScoped {
                        path: path.clone(),
                        plugin: description.name.clone(),
                        resource: wanted.resource.clone(),
                        namespace: namespace.clone(),
                    });
                }
                (_, false) => None,
                // The host's namespace bounds every subscription.
                (Some(namespace), true)
                    if self
                        .namespace
                        .as_ref()
                        .is_some_and(|host| host != namespace) =>
                {
                    return Err(LoadFailure::OutsideNamespace {
                        path: path.clone(),
                        plugin: description.name.clone(),
                        resource: wanted.resource.clone(),
                        namespace: namespace.clone(),
                        host: self.namespace.clone().unwrap_or_default(),
                    });
                }
                (namespace, true) => namespace.clone().or_else(|| self.namespace.clone()),
            };
            keys.push(InformerKey {
                resource,
                namespace,
                label_selector: wanted.label_selector.clone(),
                field_selector: wanted.field_selector.clone(),
            });
        }
        let warm = keys
            .iter()
            .zip(&description.subscriptions)
            .map(|(key, wanted)| self.factory.lease(key.clone(), needs(wanted)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| LoadFailure::Start {
                path: path.clone(),
                cause: e.to_string(),
            })?;
        let mut reads: Vec<(Gvk, SharedIndexInformer)> = description
            .subscriptions
            .iter()
            .zip(&warm)
            .map(|(wanted, lease)| (wanted.resource.clone(), lease.informer().clone()))
            .collect();
        // Its cache reads start now, so that its first read finds a synced cache. A read of
        // a type the cluster does not serve answers `not-found`; nothing to wait for.
        let cached = description
            .reads
            .iter()
            .map(|read| &read.resource)
            .chain(description.indexes.iter().map(|index| &index.resource));
        for resource in cached {
            if self.resolve.resolve(resource).await.is_some()
                && let Some(informer) = cache.informer(resource)
            {
                reads.push((resource.clone(), informer));
            }
        }
        Ok(Prepared {
            path,
            hash,
            plugin: Arc::new(plugin),
            keys,
            warm,
            reads,
            sync_deadline,
            buffer_budget,
            load_time: started.elapsed(),
        })
    }

    /// Starts `prepared` from a task of its own once every informer it reads has synced.
    /// Past its sync deadline it is reported failed, naming each informer and why it has not
    /// synced; it still starts when they do (they keep retrying with back-off), unless a
    /// newer version or the file's removal supersedes it first.
    fn start_when_synced(self: &Arc<Self>, prepared: Prepared) {
        let cancel = CancellationToken::new();
        {
            let mut table = self.table();
            let entry = table.entry(prepared.path.clone()).or_default();
            if let Some(older) = entry.syncing.replace(Syncing {
                cancel: cancel.clone(),
            }) {
                older.cancel.cancel();
            }
            entry.loading = false;
        }
        self.changed();
        info!(
            plugin = prepared.plugin.name(),
            file = %prepared.path.display(),
            "plugin loaded; it starts once the informers it reads have synced"
        );
        let host = self.clone();
        tokio::spawn(async move {
            let late = async {
                match tokio::time::Instant::now().checked_add(prepared.sync_deadline) {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            };
            let informers: Vec<SharedIndexInformer> = prepared
                .reads
                .iter()
                .map(|(_, informer)| informer.clone())
                .collect();
            // Complete, not only synced: a type switched to whole objects for a reader of
            // bodies relists before the plugin may read it.
            let synced = futures::future::join_all(
                informers
                    .iter()
                    .map(SharedIndexInformer::wait_for_complete_cache),
            );
            tokio::pin!(synced);
            tokio::select! {
                biased;
                () = cancel.cancelled() => return,
                _ = &mut synced => {}
                () = late => {
                    host.failed(prepared.not_synced());
                    tokio::select! {
                        biased;
                        () = cancel.cancelled() => return,
                        _ = synced => {}
                    }
                }
            }
            let _writing = host.writing.lock().await;
            // Superseded while it waited for the writer?
            if cancel.is_cancelled() {
                return;
            }
            if let Some(entry) = host.table().get_mut(&prepared.path) {
                entry.syncing = None;
            }
            if let Err(failure) = host.install_locked(prepared).await {
                host.failed(failure);
            }
        });
    }

    /// Swaps `prepared` in. With the same subscriptions it inherits the running listeners
    /// (every notification delivered exactly once across the swap); otherwise, or when the
    /// host replays on swap, it gets new registrations, whose replay of the cache arrives as
    /// in-initial-list adds, and the old ones are removed after the old version's call in
    /// flight. While this replica follows,
    /// the version only waits, its informers warm.
    async fn install(&self, prepared: Prepared) -> Result<(), LoadFailure> {
        let _writing = self.writing.lock().await;
        self.install_locked(prepared).await
    }

    /// [`install`](Self::install), for a caller that holds `writing`.
    async fn install_locked(&self, prepared: Prepared) -> Result<(), LoadFailure> {
        let Prepared {
            path,
            hash,
            plugin,
            keys,
            warm,
            buffer_budget,
            load_time,
            ..
        } = prepared;
        let name = plugin.name().to_owned();
        let version = plugin.description().version.clone();
        // A follower's plugins write nothing until it leads.
        plugin.fence_writes(!self.is_leading());
        {
            let mut table = self.table();
            let entry = table.entry(path.clone()).or_default();
            if let Some(serving) = entry.serving.as_mut()
                && serving.keys == keys
                && !self.replay_on_swap
                && let Some(delivering) = &serving.delivering
                && let Ok(Some(old)) = delivering.control.replace(plugin.clone())
            {
                entry.retired.retire(old.stats().clone());
                serving.plugin = plugin;
                serving.hash = hash;
                serving.loaded_at = SystemTime::now();
                serving.load_time = load_time;
                entry.loading = false;
                entry.last_error = None;
                entry.failure_summary = None;
                drop(table);
                self.reloads.success.fetch_add(1, Ordering::Relaxed);
                self.changed();
                info!(plugin = %name, %version, file = %path.display(), %hash, "plugin swapped in; it inherits the running listeners");
                return Ok(());
            }
        }
        let start = |cause: String| LoadFailure::Start {
            path: path.clone(),
            cause,
        };
        // New registrations first, so that informers shared with the old version keep
        // running; they buffer while the old version finishes.
        let registered = if self.is_leading() {
            Some(
                self.register(&plugin, &keys, buffer_budget)
                    .map_err(start)?,
            )
        } else {
            None
        };
        let old = self.table().get_mut(&path).and_then(|e| e.serving.take());
        if let Some(old) = old {
            let mut merged = 0;
            if let Some(delivering) = old.delivering {
                merged = delivering.merged();
                delivering.stop(old.plugin.name()).await;
            }
            // After the stop: the calls that were in flight count too.
            let totals = Totals::of(&old.plugin).with_merged(merged);
            if let Some(entry) = self.table().get_mut(&path) {
                entry.retired.add(totals);
            }
        }
        let delivering = match registered {
            Some(registered) => Some(self.deliver(&plugin, registered).map_err(start)?),
            None => None,
        };
        let mut table = self.table();
        let entry = table.entry(path.clone()).or_default();
        let state = if delivering.is_some() {
            "plugin running"
        } else {
            "plugin loaded; it runs once this replica leads"
        };
        entry.serving = Some(Serving {
            plugin,
            hash,
            loaded_at: SystemTime::now(),
            load_time,
            keys,
            buffer_budget,
            warm,
            delivering,
        });
        entry.loading = false;
        entry.last_error = None;
        entry.failure_summary = None;
        drop(table);
        self.reloads.success.fetch_add(1, Ordering::Relaxed);
        self.changed();
        info!(plugin = %name, %version, file = %path.display(), %hash, "{state}");
        Ok(())
    }

    /// Registers a handler for each of `plugin`'s subscriptions (`keys` in their order). An
    /// events-mode plugin's buffers keep every notification within `budget` bytes of
    /// superseded object JSON, and the latest state per key past it; a reconcile plugin's
    /// keep a key once anyway.
    fn register(
        &self,
        plugin: &Plugin,
        keys: &[InformerKey],
        budget: usize,
    ) -> Result<Registered, String> {
        let (buffer, budget) = match plugin.description().delivery {
            Delivery::Reconcile { .. } => (BufferPolicy::CoalesceByKey, None),
            Delivery::Events => (BufferPolicy::Unbounded, Some(budget)),
        };
        let mut registered = Registered::default();
        for (key, wanted) in keys.iter().zip(&plugin.description().subscriptions) {
            let options = HandlerOptions {
                buffer,
                budget,
                resync_period: wanted.resync_period,
                projections: wanted.projections.paths().paths().to_vec(),
                metadata_only: needs(wanted) == Needs::Metadata,
            };
            let (registration, receiver) = self
                .factory
                .subscribe(key.clone(), options)
                .map_err(|e| e.to_string())?
                .into_parts();
            registered.receivers.push(receiver);
            registered.subscriptions.push(registration);
        }
        Ok(registered)
    }

    /// Starts delivering `registered`'s notifications to `plugin`.
    fn deliver(&self, plugin: &Arc<Plugin>, registered: Registered) -> Result<Delivering, String> {
        let Registered {
            subscriptions,
            receivers,
        } = registered;
        let probes = receivers.iter().map(ListenerReceiver::probe).collect();
        let control = DriverControl::new(plugin.clone());
        control.share(self.share_of(plugin.name()));
        let (tasks, reconcile) = match plugin.description().delivery {
            Delivery::Events => {
                let task = kubeplug_runtime::events::drive_events(&control, receivers)
                    .map_err(|e| e.to_string())?;
                (vec![task], None)
            }
            Delivery::Reconcile { .. } => {
                let queue = Queue::builder(plugin.name())
                    .metrics(&self.queue_metrics)
                    .map_err(|e| e.to_string())?
                    .build();
                let reconciler =
                    kubeplug_runtime::reconcile::drive_reconcile(&control, receivers, queue)
                        .map_err(|e| e.to_string())?;
                (
                    reconciler.feeders,
                    Some((reconciler.queue, reconciler.workers)),
                )
            }
        };
        Ok(Delivering {
            control,
            subscriptions,
            probes,
            tasks,
            reconcile,
        })
    }

    fn is_leading(&self) -> bool {
        self.leading.load(Ordering::Acquire)
    }

    /// This replica took the lead: every loaded plugin starts receiving, the cache replayed
    /// to it as the initial list.
    pub(crate) async fn lead(&self) {
        let _writing = self.writing.lock().await;
        self.leading.store(true, Ordering::Release);
        let waiting: Vec<(PathBuf, Arc<Plugin>, Vec<InformerKey>, usize)> = self
            .table()
            .iter()
            .filter_map(|(path, entry)| {
                let serving = entry.serving.as_ref()?;
                serving.delivering.is_none().then(|| {
                    let plugin = serving.plugin.clone();
                    (
                        path.clone(),
                        plugin,
                        serving.keys.clone(),
                        serving.buffer_budget,
                    )
                })
            })
            .collect();
        for (path, plugin, keys, budget) in waiting {
            plugin.fence_writes(false);
            let started = self
                .register(&plugin, &keys, budget)
                .and_then(|registered| self.deliver(&plugin, registered));
            let mut table = self.table();
            let Some(entry) = table.get_mut(&path) else {
                continue;
            };
            match started {
                Ok(delivering) => {
                    if let Some(serving) = entry.serving.as_mut() {
                        serving.delivering = Some(delivering);
                    }
                    info!(plugin = plugin.name(), file = %path.display(), "plugin running: this replica leads");
                }
                Err(cause) => {
                    let failure = LoadFailure::Start {
                        path: path.clone(),
                        cause,
                    };
                    error!(plugin = plugin.name(), "{failure}");
                    entry.last_error = Some(failure.to_string());
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
            let Some(serving) = entry.serving.as_ref() else {
                continue;
            };
            serving.plugin.fence_writes(true);
            if let Some(delivering) = &serving.delivering {
                delivering.control.stop();
            }
        }
        let _writing = self.writing.lock().await;
        let stopping: Vec<(Arc<Plugin>, Delivering)> = self
            .table()
            .values_mut()
            .filter_map(|entry| {
                let serving = entry.serving.as_mut()?;
                let delivering = serving.delivering.take()?;
                // The next registration's buffers count from zero.
                entry.retired.add_merged(delivering.merged());
                Some((serving.plugin.clone(), delivering))
            })
            .collect();
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

    /// Records a failed load; a version already serving keeps serving.
    fn failed(&self, failure: LoadFailure) {
        let path = failure.path().to_owned();
        let mut message = failure.to_string();
        if failure.is_retryable() {
            message.push_str(" (tried again at each rescan of the directory)");
        }
        let mut table = self.table();
        let entry = table.entry(path.clone()).or_default();
        let keeps = entry.serving.as_ref().map(|r| r.plugin.name().to_owned());
        entry.loading = false;
        entry.last_error = Some(message.clone());
        entry.failure_summary = Some(failure.summary());
        if let Some(name) = failure.plugin() {
            entry.described_as = Some(name.to_owned());
        }
        drop(table);
        self.reloads.failure.fetch_add(1, Ordering::Relaxed);
        self.changed();
        match keeps {
            Some(plugin) => {
                error!(file = %path.display(), %plugin, "{message}; the version already running keeps serving");
            }
            None => error!(file = %path.display(), "{message}"),
        }
    }

    /// Unloads the plugin of a removed file once its calls in flight finish.
    async fn remove(&self, path: &Path) {
        let _writing = self.writing.lock().await;
        let entry = self.table().remove(path);
        self.changed();
        if let Some(syncing) = entry.as_ref().and_then(|e| e.syncing.as_ref()) {
            syncing.cancel.cancel();
        }
        if let Some(serving) = entry.and_then(|e| e.serving) {
            let name = serving.plugin.name().to_owned();
            if let Some(delivering) = serving.delivering {
                delivering.stop(&name).await;
            }
            info!(plugin = %name, file = %path.display(), "plugin unloaded: its file was removed");
        }
    }

    /// The series each serving plugin defined through `metrics`, by plugin name.
    pub(crate) fn plugin_series(&self) -> Vec<(String, BTreeMap<SeriesKey, MetricValue>)> {
        self.table()
            .values()
            .filter_map(|entry| entry.serving.as_ref())
            .map(|serving| {
                let plugin = &serving.plugin;
                (plugin.name().to_owned(), plugin.metrics().snapshot())
            })
            .collect()
    }

    /// Empties the table: versions waiting to start never will; the serving ones are
    /// returned to be stopped.
    fn take_serving(&self) -> Vec<Serving> {
        std::mem::take(&mut *self.table())
            .into_values()
            .filter_map(|entry| {
                if let Some(syncing) = &entry.syncing {
                    syncing.cancel.cancel();
                }
                entry.serving
            })
            .collect()
    }

    /// Whether the plugins of `at_start` (the files present when the host started) let the
    /// host be ready; see [`StartReadiness`].
    pub(crate) fn start_readiness(
        &self,
        at_start: &std::collections::BTreeSet<PathBuf>,
    ) -> StartReadiness {
        StartReadiness::of(self.table().iter(), at_start)
    }

    /// Every plugin file seen, with its state.
    pub(crate) fn reports(&self) -> Vec<PluginReport> {
        self.table()
            .iter()
            .map(|(file, entry)| report(file, entry))
            .collect()
    }

    /// Stops every plugin at once: calls in flight finish, queued keys are dropped, handlers
    /// unregistered.
    #[cfg(test)]
    pub(crate) async fn stop(&self) {
        let _writing = self.writing.lock().await;
        let serving = self.take_serving();
        for serving in serving {
            if let Some(delivering) = serving.delivering {
                delivering.stop(serving.plugin.name()).await;
            }
        }
    }

    /// Stops every plugin gracefully, for shutdown: no new notifications; reconcile queues
    /// are worked off until `deadline`, all plugins at once; calls in flight finish.
    pub(crate) async fn drain(&self, deadline: tokio::time::Instant) {
        let _writing = self.writing.lock().await;
        let serving = self.take_serving();
        futures::future::join_all(serving.into_iter().filter_map(|serving| {
            let delivering = serving.delivering?;
            Some(async move { delivering.drain(serving.plugin.name(), deadline).await })
        }))
        .await;
    }
}

/// The version of `plugin` (by name) that serves and delivers, if any.
fn delivering_named<'a>(
    table: &'a BTreeMap<PathBuf, Entry>,
    plugin: &str,
) -> Option<(&'a Serving, &'a Delivering)> {
    let serving = table
        .values()
        .filter_map(|entry| entry.serving.as_ref())
        .find(|serving| serving.plugin.name() == plugin)?;
    Some((serving, serving.delivering.as_ref()?))
}

/// What a subscription needs of its informer's objects: bodies unless its events carry
/// metadata alone.
pub(crate) fn needs(subscription: &SubscriptionSpec) -> Needs {
    match subscription.reads_metadata_only() {
        true => Needs::Metadata,
        false => Needs::Bodies,
    }
}

#[cfg(test)]
mod tests;
