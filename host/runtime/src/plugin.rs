//! Loading a plugin (compile, check imports, pre-instantiate, init, describe, indexes) and
//! calling it (fresh deadline per call, faults contained).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubeplug_informer::indexer::IndexHandle;
use kubeplug_informer::informer::CacheHandle;
use kubeplug_policy::names::excerpt;
use wasmtime::component::Component;
use wasmtime::{Store, Trap, UpdateDeadline};

use crate::Grants;
use crate::bindings::{self, guest, wit};
use crate::description::{Description, DescriptionBounds, DescriptionError};
use crate::engine::{CompileSource, EngineError, LiveToken, Runtime};
use crate::grants::{self, Policy};
use crate::gvk::Gvk;
use crate::index::informer_spec;
use crate::interface::{NameCheck, SERVED_VERSION, check_name};
use crate::observer::{CallRecord, PluginObserver, ReconcileCall};
use crate::state::{HostContext, StoreState};
use crate::status::{PluginMetrics, PluginStats, PluginStatus};
use crate::view::{CacheView, ClusterWriter, ObjectRef};

/// Opens, once, the cache of every type `description` declares and `policy` lets it read,
/// each as the plugin reads it ([`Description::type_read`]); a type no informer serves has
/// none.
async fn open_caches(
    view: &dyn CacheView,
    description: &Description,
    policy: &Policy,
) -> BTreeMap<Gvk, CacheHandle> {
    let mut caches = BTreeMap::new();
    for resource in description.read_types() {
        if !policy.may_read(&resource) {
            continue;
        }
        if let Some(cache) = view.open(&resource, description.type_read(&resource)).await {
            caches.insert(resource, cache);
        }
    }
    caches
}

/// Per-plugin limits and fault handling. The first group is what the host's configuration
/// sets (`[defaults]`, `[plugins.NAME]`); the second how failures are handled.
#[derive(Debug, Clone)]
pub struct PluginLimits {
    /// Linear memory cap per instance (default 64 MiB); growing past it fails.
    pub max_memory: usize,
    /// Wall-clock budget of one call (default 1 s); past it the call traps. Time spent
    /// waiting for the write rate does not count.
    pub call_deadline: Duration,
    /// Events per `handle-events` call (default 64).
    pub batch_size: usize,
    /// What the plugin may describe: subscriptions, indexes and reconcile workers.
    pub description: DescriptionBounds,
    /// The shortest resync period a subscription gets (default 30 s); a shorter one is
    /// raised to it at load.
    pub min_resync_period: Duration,
    /// Core instances per plugin instance (default 32).
    pub max_instances: usize,
    /// Elements of one WebAssembly table (default 10,000).
    pub max_table_elements: usize,
    /// WASI resources an instance may hold at once (default 4,096).
    pub max_wasi_resources: usize,
    /// Cluster writes: their average rate and burst (default 20 per second, 30 at once).
    pub writes: Rate,
    /// Reconcile calls, however caused (events, `map-event` keys, requeues, retries): their
    /// average rate and burst (default 1,000 per second, 1,000 at once). A worker waits for
    /// its turn before it calls the plugin.
    pub reconciles: Rate,
    /// Attempts per events-mode batch before it is skipped (default 3).
    pub attempts: u32,
    /// First retry delay of a failed batch, doubling (default 100 ms).
    pub retry_backoff: Duration,
    /// Consecutive failed calls before quarantine (default 5).
    pub max_consecutive_failures: u64,
    /// First quarantine back-off, doubling (default 1 s).
    pub quarantine_backoff: Duration,
    /// Longest quarantine back-off (default 5 min).
    pub quarantine_backoff_max: Duration,
}

/// A rate of something a plugin does (cluster writes, reconciles): `per_second` on
/// average, up to `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// How many per second, on average.
    pub per_second: f64,
    /// How many at once above the average.
    pub burst: u32,
}

impl Rate {
    /// No pacing a measurement could notice: for benchmarks of the rest of the path.
    pub const UNPACED: Rate = Rate {
        per_second: 1e12,
        burst: u32::MAX,
    };
}

impl Default for PluginLimits {
    fn default() -> Self {
        Self {
            max_memory: 64 << 20,
            call_deadline: Duration::from_secs(1),
            batch_size: 64,
            description: DescriptionBounds::default(),
            min_resync_period: Duration::from_secs(30),
            max_instances: 32,
            max_table_elements: 10_000,
            max_wasi_resources: 4096,
            writes: Rate {
                per_second: 20.0,
                burst: 30,
            },
            reconciles: Rate {
                per_second: 1000.0,
                burst: 1000,
            },
            attempts: 3,
            retry_backoff: Duration::from_millis(100),
            max_consecutive_failures: 5,
            quarantine_backoff: Duration::from_secs(1),
            quarantine_backoff_max: Duration::from_secs(300),
        }
    }
}

/// Everything needed to load one plugin.
pub struct PluginSpec {
    /// Where it came from, for messages (its bytes are passed separately, already read).
    pub path: PathBuf,
    /// The component.
    pub bytes: Vec<u8>,
    /// Its settings document (JSON); `{}` when none.
    pub settings: String,
    /// What the host allows it.
    pub grants: Grants,
    /// Its limits.
    pub limits: PluginLimits,
    /// The caches it reads.
    pub cache: Arc<dyn CacheView>,
    /// Where its writes go.
    pub writer: Arc<dyn ClusterWriter>,
}

/// Why a plugin could not be loaded. Every message names the file and the stage.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Not a valid component for this engine.
    #[error("{path}: compile")]
    CompileFailed {
        /// The file.
        path: PathBuf,
        /// The engine's reason: not a component, or wasmtime's error.
        #[source]
        source: EngineError,
    },
    /// The task compiling it panicked (a wasmtime bug).
    #[error("{path}: compile: the compiling task panicked")]
    CompilePanicked {
        /// The file.
        path: PathBuf,
        /// The task's end.
        #[source]
        source: tokio::task::JoinError,
    },
    /// It imports something outside `wasi:*@0.2` and `kubeplug:plugin`.
    #[error(
        "{path}: imports {import:?}; a plugin may import only wasi:*@0.2.x and kubeplug:plugin/* interfaces"
    )]
    ForbiddenImport {
        /// The file.
        path: PathBuf,
        /// The import, cut ([`excerpt`]).
        import: String,
    },
    /// It was built against a version of `kubeplug:plugin` this host does not serve. The
    /// name and version are cut ([`excerpt`]).
    #[error(
        "{path}: built against kubeplug:plugin@{found} ({name}), but this host serves kubeplug:plugin@{served} and its patch releases; rebuild the plugin against the WIT or SDK of that version"
    )]
    InterfaceVersion {
        /// The file.
        path: PathBuf,
        /// The import or export that names it.
        name: String,
        /// The version it names.
        found: String,
        /// [`SERVED_VERSION`].
        served: &'static str,
    },
    /// Its imports or exports do not match the `plugin` world.
    #[error("{path}: link against the kubeplug:plugin world")]
    LinkFailed {
        /// The file.
        path: PathBuf,
        /// wasmtime's reason.
        #[source]
        source: wasmtime::Error,
    },
    /// Instantiating it, or its `init` or `describe`, trapped or timed out.
    #[error("{path}: {stage}")]
    StartFailed {
        /// The file.
        path: PathBuf,
        /// `instantiate`, `init` or `describe`.
        stage: &'static str,
        /// The failed call.
        #[source]
        source: CallError,
    },
    /// `init` refused its settings.
    #[error("{path}: init: {message}")]
    InitRefused {
        /// The file.
        path: PathBuf,
        /// The plugin's own message, cut ([`excerpt`]): text for the operator that crossed
        /// the WIT as a string, not an error value of the host's, so it is data, not a
        /// source.
        message: String,
    },
    /// `describe` returned something invalid.
    #[error("{path}: describe: {source}")]
    InvalidDescription {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: Box<DescriptionError>,
    },
    /// `describe()` declares reads (subscriptions, owners, reads, indexes) its grants do not
    /// allow.
    #[error(
        "{path}: grants: plugin {plugin} reads types it is not granted: {}; grant them in the \
         configuration with:\n{grant}",
        missing.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    )]
    ReadsNotGranted {
        /// The file.
        path: PathBuf,
        /// The plugin's name.
        plugin: String,
        /// The types.
        missing: Vec<Gvk>,
        /// The configuration lines that would grant them.
        grant: String,
    },
    /// A declared index could not be set up.
    #[error("{path}: index {name:?} on {resource}: no informer serves {resource}")]
    IndexUnavailable {
        /// The file.
        path: PathBuf,
        /// The index.
        name: String,
        /// Its resource.
        resource: Gvk,
    },
}

impl LoadError {
    /// The file that failed to load.
    pub fn path(&self) -> &std::path::Path {
        match self {
            LoadError::CompileFailed { path, .. }
            | LoadError::CompilePanicked { path, .. }
            | LoadError::ForbiddenImport { path, .. }
            | LoadError::InterfaceVersion { path, .. }
            | LoadError::LinkFailed { path, .. }
            | LoadError::StartFailed { path, .. }
            | LoadError::InitRefused { path, .. }
            | LoadError::InvalidDescription { path, .. }
            | LoadError::ReadsNotGranted { path, .. }
            | LoadError::IndexUnavailable { path, .. } => path,
        }
    }
}

/// Why one call into a plugin failed. The instance that failed must be discarded.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// Past the call deadline: interrupted.
    #[error("plugin {plugin}: {call} exceeded its {deadline:?} deadline")]
    DeadlineExceeded {
        /// The plugin.
        plugin: String,
        /// The export.
        call: &'static str,
        /// The budget.
        deadline: Duration,
    },
    /// Trapped after its memory cap refused a growth: out of memory.
    #[error(
        "plugin {plugin}: {call} trapped after its memory cap of {cap_mib} MiB refused to \
         grow it (memory_limit_mib): {cause}"
    )]
    MemoryCap {
        /// The plugin.
        plugin: String,
        /// The export.
        call: &'static str,
        /// The cap, MiB.
        cap_mib: usize,
        /// The trap.
        cause: String,
    },
    /// Trapped (panic, unreachable, bad host-call arguments...).
    #[error("plugin {plugin}: {call} trapped: {cause}")]
    Trapped {
        /// The plugin.
        plugin: String,
        /// The export.
        call: &'static str,
        /// The trap, with wasm backtrace when available.
        cause: String,
    },
}

/// A loaded plugin: compiled, pre-instantiated, described. Instances are made from it.
///
/// Contract: one `InstancePre` per plugin; every instance gets `init(settings)` before any
/// other call; the declared indexes stay registered on the informers as long as this value
/// lives (dropping it releases them).
pub struct Plugin {
    path: PathBuf,
    description: Description,
    pre: bindings::PluginPre<StoreState>,
    host: Arc<HostContext>,
    settings: String,
    limits: PluginLimits,
    runtime: Runtime,
    compile_source: CompileSource,
    compile_time: Duration,
    _indexes: Vec<IndexHandle>,
    _live: LiveToken,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("path", &self.path)
            .field("name", &self.description.name)
            .finish()
    }
}

/// A plugin as far as [`Runtime::start`] takes it.
struct Started {
    pre: bindings::PluginPre<StoreState>,
    description: Description,
    stats: Arc<PluginStats>,
    compile_source: CompileSource,
    compile_time: Duration,
}

impl Runtime {
    /// Loads a plugin: compile (off the async threads, through the artefact cache), check
    /// its imports, pre-instantiate, `init(settings)` and `describe()` under the call
    /// deadline, validate within its limits, check that its grants allow every read it
    /// declares, register its indexes.
    pub async fn load(&self, mut spec: PluginSpec) -> Result<Plugin, LoadError> {
        let Started {
            pre,
            description,
            stats,
            compile_source,
            compile_time,
        } = self.start(&mut spec).await?;
        let path = spec.path;
        let unread = grants::reads_not_granted(&spec.grants, &description);
        if !unread.is_empty() {
            return Err(LoadError::ReadsNotGranted {
                path,
                grant: grants::grant_lines(&description.name, &unread),
                plugin: description.name,
                missing: unread,
            });
        }
        let unwritten = grants::writes_not_granted(&spec.grants, &description);
        if !unwritten.is_empty() {
            tracing::warn!(
                plugin = %description.name, path = %path.display(),
                "the plugin asks for writes its grants do not allow (it will get not-permitted): {}",
                unwritten.join(", ")
            );
        }
        let policy = Policy::new(&spec.grants, &description);
        let caches = open_caches(&*spec.cache, &description, &policy).await;
        let mut handles = Vec::new();
        let mut indexes = BTreeMap::new();
        for decl in &description.indexes {
            let Some(indexer) = caches.get(&decl.resource).map(CacheHandle::indexer) else {
                return Err(LoadError::IndexUnavailable {
                    path,
                    name: decl.name.clone(),
                    resource: decl.resource.clone(),
                });
            };
            let handle = indexer.add_index(informer_spec(&decl.spec));
            indexes.insert(
                (decl.resource.clone(), decl.name.clone()),
                handle.name().to_owned(),
            );
            handles.push(handle);
        }
        let host = Arc::new(HostContext {
            stats,
            caches,
            indexes,
            observer: self.config.observer.clone().map(PluginObserver::new),
            ..HostContext::new(
                description.name.as_str().into(),
                policy,
                spec.cache,
                spec.writer,
                &spec.limits,
            )
        });
        tracing::info!(
            plugin = %description.name, version = %description.version, path = %path.display(),
            ?compile_source, ?compile_time, "plugin loaded"
        );
        Ok(Plugin {
            path,
            description,
            pre,
            host,
            settings: spec.settings,
            limits: spec.limits,
            runtime: self.clone(),
            compile_source,
            compile_time,
            _indexes: handles,
            _live: LiveToken::plugin(&self.live),
        })
    }

    /// What a plugin describes itself as, loaded as far as that takes (compile, link,
    /// `init`, `describe`, validation within its limits) but not granted or started: for
    /// tools that report on a plugin whatever its grants (`kubeplug check`).
    pub async fn inspect(&self, mut spec: PluginSpec) -> Result<Description, LoadError> {
        let started = self.start(&mut spec).await?;
        let description = started.description;
        tracing::info!(
            plugin = %description.name, version = %description.version,
            path = %spec.path.display(), compile_source = ?started.compile_source,
            compile_time = ?started.compile_time, "plugin inspected"
        );
        Ok(description)
    }

    /// The stages every load shares: compile, imports, link, instantiate, `init`,
    /// `describe`, validation, and the resync floor. Takes the component's bytes out of
    /// `spec` (compiled, they are not needed again).
    async fn start(&self, spec: &mut PluginSpec) -> Result<Started, LoadError> {
        let path = spec.path.clone();
        let started = Instant::now();
        let runtime = self.clone();
        let bytes = std::mem::take(&mut spec.bytes);
        let (component, compile_source) =
            tokio::task::spawn_blocking(move || runtime.compile(&bytes))
                .await
                .map_err(|source| LoadError::CompilePanicked {
                    path: path.clone(),
                    source,
                })?
                .map_err(|source| LoadError::CompileFailed {
                    path: path.clone(),
                    source,
                })?;
        let compile_time = started.elapsed();
        self.check_names(&path, &component)?;
        let pre = self
            .linker
            .instantiate_pre(&component)
            .and_then(bindings::PluginPre::new)
            .map_err(|source| LoadError::LinkFailed {
                path: path.clone(),
                source,
            })?;

        let stem = path
            .file_stem()
            .map_or_else(|| "plugin".into(), |s| s.to_string_lossy().into_owned());
        let stats = Arc::new(PluginStats::default());
        let boot = Arc::new(HostContext {
            stats: stats.clone(),
            observer: self.config.observer.clone().map(PluginObserver::new),
            ..HostContext::new(
                stem.into(),
                Policy::default(),
                spec.cache.clone(),
                spec.writer.clone(),
                &spec.limits,
            )
        });
        let start_failed = |stage, source| LoadError::StartFailed {
            path: path.clone(),
            stage,
            source,
        };
        let mut instance = PluginInstance::new(self, &pre, boot, &spec.limits)
            .await
            .map_err(|e| start_failed("instantiate", e))?;
        match instance.init(&spec.settings).await {
            Ok(Ok(())) => {}
            Ok(Err(refused)) => {
                return Err(LoadError::InitRefused {
                    path,
                    message: excerpt(&refused),
                });
            }
            Err(e) => return Err(start_failed("init", e)),
        }
        let raw = instance
            .describe()
            .await
            .map_err(|e| start_failed("describe", e))?;
        drop(instance);
        let mut description =
            Description::from_guest(raw, &spec.limits.description).map_err(|source| {
                LoadError::InvalidDescription {
                    path: path.clone(),
                    source: Box::new(source),
                }
            })?;
        // As client-go clamps a handler's resync period: a resync replays the whole cache
        // to every handler of the informer.
        let floor = spec.limits.min_resync_period;
        for (index, subscription) in description.subscriptions.iter_mut().enumerate() {
            if let Some(period) = subscription.resync_period
                && period < floor
            {
                tracing::warn!(
                    plugin = %description.name, subscription = index, asked = ?period, raised_to = ?floor,
                    "resync period raised to the configured minimum (min_resync_period_s)"
                );
                subscription.resync_period = Some(floor);
            }
        }
        Ok(Started {
            pre,
            description,
            stats,
            compile_source,
            compile_time,
        })
    }

    /// Refuses a component built against another version of `kubeplug:plugin`, naming both,
    /// and one importing anything but WASI 0.2 and `kubeplug:plugin`.
    fn check_names(&self, path: &std::path::Path, component: &Component) -> Result<(), LoadError> {
        let ty = component.component_type();
        let imports = ty.imports(&self.engine).map(|(name, _)| (name, true));
        let exports = ty.exports(&self.engine).map(|(name, _)| (name, false));
        let mut foreign = None;
        for (name, imported) in imports.chain(exports) {
            match check_name(name) {
                NameCheck::Served => {}
                // The names are the plugin author's: cut, as every echo of them.
                NameCheck::OtherVersion { found } => {
                    return Err(LoadError::InterfaceVersion {
                        path: path.to_path_buf(),
                        name: excerpt(name),
                        found: excerpt(&found),
                        served: SERVED_VERSION,
                    });
                }
                // Unknown exports are the linker's to judge.
                NameCheck::Foreign if imported => {
                    foreign.get_or_insert_with(|| excerpt(name));
                }
                NameCheck::Foreign => {}
            }
        }
        match foreign {
            Some(import) => Err(LoadError::ForbiddenImport {
                path: path.to_path_buf(),
                import,
            }),
            None => Ok(()),
        }
    }
}

impl Plugin {
    /// Fences its cluster writes, or lifts the fence. While fenced, every write answers
    /// `unavailable` at once and a write waiting for the write rate gives up, so that a call
    /// in flight writes nothing more: a replica that stops leading fences its plugins, and a
    /// call it cannot stop ends within its deadline without writing after another replica
    /// took over. Writes of calls that start later are fenced the same way until lifted.
    pub fn fence_writes(&self, fenced: bool) {
        self.host.writes_fenced.send_replace(fenced);
    }

    /// Its self-description.
    pub fn description(&self) -> &Description {
        &self.description
    }

    /// Its name (from `describe`).
    pub fn name(&self) -> &str {
        &self.description.name
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Its limits.
    pub fn limits(&self) -> &PluginLimits {
        &self.limits
    }

    /// Whether the compiled code came from the artefact cache, and how long compiling (or
    /// loading it) took.
    pub fn compiled(&self) -> (CompileSource, Duration) {
        (self.compile_source, self.compile_time)
    }

    /// Whether objects of `resource` live in namespaces, as the host knows it (`None` when
    /// it does not).
    pub fn namespaced(&self, resource: &Gvk) -> Option<bool> {
        self.host.cache.namespaced(resource)
    }

    /// Its counters.
    pub fn stats(&self) -> &Arc<PluginStats> {
        &self.host.stats
    }

    /// Its status now.
    pub fn status(&self) -> PluginStatus {
        self.host.stats.snapshot()
    }

    /// Its plugin-defined metrics.
    pub fn metrics(&self) -> &Arc<PluginMetrics> {
        &self.host.metrics
    }

    /// A new reconcile call of `target`, if an observer wants to know.
    pub(crate) fn reconcile_call(&self, target: &ObjectRef) -> Option<Arc<ReconcileCall>> {
        let observer = self.host.observer.as_ref()?;
        Some(observer.reconcile_call(target))
    }

    /// Tells the observer, if any, what happened `during` a reconcile call, or outside one.
    pub(crate) fn observe(
        &self,
        during: Option<Arc<ReconcileCall>>,
        record: impl FnOnce() -> CallRecord,
    ) {
        self.host.observe(|| during, record);
    }

    /// A fresh instance, `init` already called with the plugin's settings.
    pub async fn instantiate(&self) -> Result<PluginInstance, CallError> {
        let mut instance =
            PluginInstance::new(&self.runtime, &self.pre, self.host.clone(), &self.limits).await?;
        match instance.init(&self.settings).await? {
            Ok(()) => Ok(instance),
            // It accepted these settings at load; refusing them now is a broken plugin.
            Err(refused) => Err(CallError::Trapped {
                plugin: self.name().to_owned(),
                call: "init",
                cause: format!("refused its settings on re-instantiation: {refused}"),
            }),
        }
    }
}

/// One live instance of a plugin, with its own store.
///
/// Contract: calls run one at a time (`&mut self`), each with a fresh deadline; after any
/// [`CallError`] the instance must be dropped and a new one made.
pub struct PluginInstance {
    store: Store<StoreState>,
    bindings: bindings::Plugin,
    plugin: Arc<str>,
    deadline: Duration,
    _live: LiveToken,
}

impl PluginInstance {
    async fn new(
        runtime: &Runtime,
        pre: &bindings::PluginPre<StoreState>,
        host: Arc<HostContext>,
        limits: &PluginLimits,
    ) -> Result<Self, CallError> {
        let plugin = host.plugin.clone();
        PluginStats::add(&host.stats.instances_created, 1);
        let mut store = Store::new(&runtime.engine, StoreState::new(host, limits));
        store.limiter(|state| &mut state.limits);
        store.epoch_deadline_callback(|ctx| {
            if Instant::now() >= ctx.data().deadline {
                Ok(UpdateDeadline::Interrupt)
            } else {
                Ok(UpdateDeadline::Yield(1))
            }
        });
        // Instantiating runs the guest's start code: a call like the others.
        let deadline = limits.call_deadline;
        arm(&mut store, deadline);
        let bindings = pre.instantiate_async(&mut store).await;
        let bindings = finish(&store, &plugin, "instantiate", deadline, bindings)?;
        // Until its first call, the guest's time is up.
        store.data_mut().deadline = Instant::now();
        Ok(Self {
            store,
            bindings,
            plugin,
            deadline,
            _live: LiveToken::instance(&runtime.live),
        })
    }

    /// Bytes of linear memory this instance holds (all its core memories): what the guest
    /// reserved, whether or not it touched the pages.
    pub fn linear_memory_bytes(&self) -> usize {
        self.store.data().limits.linear_memory
    }

    /// Starts a call's clock ([`arm`]).
    fn arm(&mut self) {
        arm(&mut self.store, self.deadline);
    }

    /// How the call ended ([`finish`]).
    fn finish<T>(&self, call: &'static str, result: wasmtime::Result<T>) -> Result<T, CallError> {
        finish(&self.store, &self.plugin, call, self.deadline, result)
    }

    /// `init(settings)`. The outer error is the call's (a trap, the deadline); the inner one
    /// is the plugin's refusal, its own text as the WIT carries it: data for the operator,
    /// not a cause, so it stays a `String`.
    pub(crate) async fn init(&mut self, settings: &str) -> Result<Result<(), String>, CallError> {
        self.arm();
        let r = self
            .bindings
            .kubeplug_plugin_handler()
            .call_init(&mut self.store, settings)
            .await;
        self.finish("init", r)
    }

    pub(crate) async fn describe(&mut self) -> Result<guest::Description, CallError> {
        self.arm();
        let r = self
            .bindings
            .kubeplug_plugin_handler()
            .call_describe(&mut self.store)
            .await;
        self.finish("describe", r)
    }

    /// `handle-events(batch)`. The inner error, as `init`'s, is the plugin's own text.
    pub(crate) async fn handle_events(
        &mut self,
        batch: &[wit::Event],
    ) -> Result<Result<(), String>, CallError> {
        self.arm();
        let started = Instant::now();
        let r = self
            .bindings
            .kubeplug_plugin_handler()
            .call_handle_events(&mut self.store, batch)
            .await;
        let stats = &self.store.data().host.stats;
        PluginStats::add(&stats.call_nanos, started.elapsed().as_nanos() as u64);
        self.finish("handle-events", r)
    }

    /// Calls `reconcile` for `target`.
    pub async fn reconcile(
        &mut self,
        target: &ObjectRef,
    ) -> Result<guest::ReconcileResult, CallError> {
        self.observed_reconcile(target, None).await
    }

    /// Calls `reconcile` for `target`, as the observed `call` when there is one: what the
    /// plugin does meanwhile is recorded as done during it.
    pub(crate) async fn observed_reconcile(
        &mut self,
        target: &ObjectRef,
        call: Option<Arc<ReconcileCall>>,
    ) -> Result<guest::ReconcileResult, CallError> {
        let current_call = self.store.data().current_call.clone();
        current_call.set(call);
        let result = self.call_reconcile(target).await;
        current_call.set(None);
        result
    }

    async fn call_reconcile(
        &mut self,
        target: &ObjectRef,
    ) -> Result<guest::ReconcileResult, CallError> {
        self.arm();
        let resource = wit::Gvk::from(&target.resource);
        let r = self
            .bindings
            .kubeplug_plugin_handler()
            .call_reconcile(
                &mut self.store,
                &resource,
                target.namespace.as_deref(),
                &target.name,
            )
            .await;
        self.finish("reconcile", r)
    }

    pub(crate) async fn map_event(
        &mut self,
        event: &wit::Event,
    ) -> Result<Vec<ObjectRef>, CallError> {
        self.arm();
        let r = self
            .bindings
            .kubeplug_plugin_handler()
            .call_map_event(&mut self.store, event)
            .await;
        let refs = self.finish("map-event", r)?;
        Ok(refs
            .into_iter()
            .map(|r| ObjectRef {
                resource: r.resource_type.into(),
                namespace: r.namespace.filter(|ns| !ns.is_empty()),
                name: r.name,
            })
            .collect())
    }
}

/// A wasmtime error from a call, as a [`CallError`]; `memory_cap` is the cap when the call
/// had a memory growth refused, which a trap that follows is blamed on.
/// Starts the clock of a call into `store`'s guest (its instantiation included): `deadline`
/// from now, its write waits and memory refusals from nothing.
fn arm(store: &mut Store<StoreState>, deadline: Duration) {
    let state = store.data_mut();
    state.deadline = Instant::now() + deadline;
    state.write_wait = Duration::ZERO;
    state.limits.refused_memory = false;
    store.set_epoch_deadline(1);
}

/// The result of `call` into `plugin`'s guest, armed with `deadline`: its error classified,
/// a memory refusal during the call counted as the cap.
fn finish<T>(
    store: &Store<StoreState>,
    plugin: &str,
    call: &'static str,
    deadline: Duration,
    result: wasmtime::Result<T>,
) -> Result<T, CallError> {
    let limits = &store.data().limits;
    let memory_cap = limits.refused_memory.then_some(limits.max_memory);
    classify(plugin, call, deadline, memory_cap, result)
}

fn classify<T>(
    plugin: &str,
    call: &'static str,
    deadline: Duration,
    memory_cap: Option<usize>,
    result: wasmtime::Result<T>,
) -> Result<T, CallError> {
    result.map_err(|e| match (e.downcast_ref::<Trap>(), memory_cap) {
        (Some(Trap::Interrupt), _) => CallError::DeadlineExceeded {
            plugin: plugin.to_owned(),
            call,
            deadline,
        },
        (_, Some(cap)) => CallError::MemoryCap {
            plugin: plugin.to_owned(),
            call,
            cap_mib: cap >> 20,
            cause: format!("{e:#}"),
        },
        (_, None) => CallError::Trapped {
            plugin: plugin.to_owned(),
            call,
            cause: format!("{e:#}"),
        },
    })
}
