//! The plugins of a directory: loaded at start, subscribed to the informers they ask for,
//! and driven in events or reconcile mode.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use kubeplug_informer::factory::{InformerKey, InformerLease, SharedInformerFactory, Subscription};
use kubeplug_informer::indexer::Indexer;
use kubeplug_informer::informer::HandlerOptions;
use kubeplug_informer::listener::BufferPolicy;
use kubeplug_informer::resource::Resource;
use kubeplug_runtime::{
    CacheView, ClusterWriter, Delivery, Gvk, Plugin, PluginLimits, PluginSpec, PluginStatus,
    RunState, Runtime,
};
use kubeplug_workqueue::{Queue, WorkqueueMetrics};
use tokio::task::JoinHandle;
use tracing::{error, info};

use crate::config::Config;

/// Maps a plugin's resource types to served resources (discovery, or the local registry).
pub(crate) type Resolver = Arc<dyn Fn(&Gvk) -> Option<Resource> + Send + Sync>;

/// The caches plugins read: one informer per resource type, kept running by a lease while
/// any plugin may read it. Subscriptions without a namespace or selectors share these
/// informers, so such a plugin reads exactly what its events come from.
pub(crate) struct FactoryCache {
    factory: SharedInformerFactory,
    resolve: Resolver,
    // A std mutex: lookups are short and never span an `.await`.
    leases: Mutex<BTreeMap<Gvk, InformerLease>>,
}

impl FactoryCache {
    pub(crate) fn new(factory: SharedInformerFactory, resolve: Resolver) -> Self {
        Self {
            factory,
            resolve,
            leases: Mutex::default(),
        }
    }

    fn leases(&self) -> MutexGuard<'_, BTreeMap<Gvk, InformerLease>> {
        self.leases
            .lock()
            .expect("cache leases poisoned by a panic")
    }
}

impl CacheView for FactoryCache {
    fn indexer(&self, resource: &Gvk) -> Option<Indexer> {
        let mut leases = self.leases();
        if let Some(lease) = leases.get(resource) {
            return Some(lease.informer().indexer().clone());
        }
        let served = (self.resolve)(resource)?;
        match self.factory.lease(InformerKey::all(served)) {
            Ok(lease) => {
                let indexer = lease.informer().indexer().clone();
                leases.insert(resource.clone(), lease);
                Some(indexer)
            }
            Err(error) => {
                error!(%resource, %error, "cannot start an informer for plugin reads");
                None
            }
        }
    }
}

/// A plugin's settings (JSON), grants and limits from the configuration section named like
/// its file's stem (`label-audit.wasm` → `[plugins.label-audit]`).
pub(crate) fn plugin_settings(
    config: &Config,
    file: &Path,
) -> Result<(String, kubeplug_runtime::Grants, PluginLimits), String> {
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let section = config.plugins.get(&stem);
    let settings = section
        .and_then(|s| s.settings.as_ref())
        .map(|table| serde_json::to_string(table).expect("TOML tables are JSON"))
        .unwrap_or_else(|| "{}".to_owned());
    let grants = section
        .map(|s| s.grants.to_runtime())
        .transpose()
        .map_err(|e| format!("grants of [plugins.{stem}]: {e}"))?
        .unwrap_or_default();
    let defaults = &config.defaults;
    let limits = PluginLimits {
        max_memory: (defaults.memory_limit_mib as usize) << 20,
        call_deadline: std::time::Duration::from_millis(defaults.call_deadline_ms),
        batch_size: defaults.batch_size as usize,
        ..PluginLimits::default()
    };
    Ok((settings, grants, limits))
}

/// A plugin that is running: what keeps its deliveries going.
struct Running {
    plugin: Arc<Plugin>,
    /// Owners of its handler registrations; dropping them unregisters the plugin.
    _subscriptions: Vec<Subscription>,
    tasks: Vec<JoinHandle<()>>,
    queue: Option<Queue<kubeplug_runtime::ObjectRef>>,
}

/// One plugin file and what became of it, as `/plugins` reports it.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct PluginReport {
    pub(crate) file: PathBuf,
    pub(crate) name: Option<String>,
    pub(crate) version: Option<String>,
    pub(crate) state: String,
    pub(crate) last_error: Option<String>,
    pub(crate) events_delivered: u64,
    pub(crate) failures: u64,
}

/// Loads and runs the plugins of one directory.
pub(crate) struct PluginHost {
    runtime: Runtime,
    factory: SharedInformerFactory,
    resolve: Resolver,
    cache: Arc<FactoryCache>,
    writer: Arc<dyn ClusterWriter>,
    queue_metrics: WorkqueueMetrics,
    /// Subscriptions without a namespace of their own watch only this one, if set.
    namespace: Option<String>,
    running: Mutex<Vec<Running>>,
    failed: Mutex<Vec<(PathBuf, String)>>,
}

impl std::fmt::Debug for PluginHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginHost")
            .field("running", &self.running.lock().expect("poisoned").len())
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
        namespace: Option<String>,
    ) -> Self {
        let cache = Arc::new(FactoryCache::new(factory.clone(), resolve.clone()));
        Self {
            runtime,
            factory,
            resolve,
            cache,
            writer,
            queue_metrics,
            namespace,
            running: Mutex::default(),
            failed: Mutex::default(),
        }
    }

    /// Loads every `*.wasm` in `dir` (hidden files skipped). A plugin that fails is reported
    /// and left out; the others run.
    pub(crate) async fn load_dir(&self, dir: &Path, config: &Config) -> std::io::Result<()> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| {
                path.extension().is_some_and(|e| e == "wasm")
                    && !path
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .collect();
        files.sort();
        for file in files {
            if let Err(message) = self.load(&file, config).await {
                error!(file = %file.display(), "{message}");
                self.failed.lock().expect("poisoned").push((file, message));
            }
        }
        Ok(())
    }

    /// Settings and grants come from the configuration section named like the file's stem.
    async fn load(&self, file: &Path, config: &Config) -> Result<(), String> {
        let bytes =
            std::fs::read(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let (settings, grants, limits) = plugin_settings(config, file)?;
        let plugin = self
            .runtime
            .load(PluginSpec {
                path: file.to_owned(),
                bytes,
                settings,
                grants,
                limits,
                cache: self.cache.clone(),
                writer: self.writer.clone(),
            })
            .await
            .map_err(|e| e.to_string())?;
        let plugin = Arc::new(plugin);
        let description = plugin.description().clone();
        let reconcile = matches!(description.delivery, Delivery::Reconcile { .. });
        let mut subscriptions = Vec::new();
        let mut receivers = Vec::new();
        for wanted in &description.subscriptions {
            let resource = (self.resolve)(&wanted.resource).ok_or_else(|| {
                format!(
                    "plugin {} subscribes to {}, which the cluster does not serve",
                    description.name, wanted.resource
                )
            })?;
            let key = InformerKey {
                resource,
                namespace: wanted.namespace.clone().or_else(|| self.namespace.clone()),
                label_selector: wanted.label_selector.clone(),
                field_selector: wanted.field_selector.clone(),
            };
            let options = HandlerOptions {
                buffer: if reconcile {
                    BufferPolicy::CoalesceByKey
                } else {
                    BufferPolicy::Unbounded
                },
                resync_period: wanted.resync_period,
            };
            let mut subscription = self
                .factory
                .subscribe(key, options)
                .map_err(|e| format!("plugin {}: {e}", description.name))?;
            receivers.push(subscription.take_receiver());
            subscriptions.push(subscription);
        }
        let (tasks, queue) = match description.delivery {
            Delivery::Events => {
                let task = kubeplug_runtime::events::run_events(plugin.clone(), receivers)
                    .map_err(|e| e.to_string())?;
                (vec![task], None)
            }
            Delivery::Reconcile { .. } => {
                let queue = Queue::builder(&description.name)
                    .metrics(&self.queue_metrics)
                    .map_err(|e| format!("plugin {}: {e}", description.name))?
                    .build();
                let reconciler = kubeplug_runtime::reconcile::run_reconcile(
                    plugin.clone(),
                    receivers,
                    queue.clone(),
                )
                .map_err(|e| e.to_string())?;
                (reconciler.feeders, Some(reconciler.queue))
            }
        };
        info!(plugin = %description.name, version = %description.version, file = %file.display(), "plugin running");
        self.running.lock().expect("poisoned").push(Running {
            plugin,
            _subscriptions: subscriptions,
            tasks,
            queue,
        });
        Ok(())
    }

    /// Every plugin file seen, with its state.
    pub(crate) fn reports(&self) -> Vec<PluginReport> {
        let mut reports: Vec<PluginReport> = self
            .running
            .lock()
            .expect("poisoned")
            .iter()
            .map(|running| {
                let status: PluginStatus = running.plugin.status();
                let (state, last_error) = match &status.state {
                    RunState::Running => ("running".to_owned(), None),
                    RunState::Quarantined { last_error, .. } => {
                        ("quarantined".to_owned(), Some(last_error.clone()))
                    }
                    RunState::Stopped => ("stopped".to_owned(), None),
                };
                PluginReport {
                    file: running.plugin.path().to_owned(),
                    name: Some(running.plugin.name().to_owned()),
                    version: Some(running.plugin.description().version.clone()),
                    state,
                    last_error,
                    events_delivered: status.events_delivered,
                    failures: status.calls_failed,
                }
            })
            .collect();
        reports.extend(
            self.failed
                .lock()
                .expect("poisoned")
                .iter()
                .map(|(file, message)| PluginReport {
                    file: file.clone(),
                    name: None,
                    version: None,
                    state: "failed".to_owned(),
                    last_error: Some(message.clone()),
                    events_delivered: 0,
                    failures: 0,
                }),
        );
        reports
    }

    /// Stops every plugin: queues drained, drivers ended, handlers unregistered.
    pub(crate) async fn stop(&self) {
        let running = std::mem::take(&mut *self.running.lock().expect("poisoned"));
        for plugin in running {
            if let Some(queue) = plugin.queue {
                queue.shut_down();
            }
            for task in plugin.tasks {
                task.abort();
            }
        }
    }
}
