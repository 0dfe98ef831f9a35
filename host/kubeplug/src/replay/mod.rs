//! `kubeplug test PLUGIN.wasm --events FILE`: replays events into one plugin and reports
//! every call it made.
//!
//! The plugin runs as under `run --local`: the cache fixtures are an in-memory local cluster,
//! each event is written to that cluster, and the informers, listeners, drivers (batches in
//! events mode; key mapping, work queue and workers in reconcile mode) and the local writer
//! are the host's own, so the plugin's writes change what later events and reads see. Only
//! the clock is taken out, so that a report is the same on every run:
//! - events are replayed one at a time; the next is written once the plugin is idle (see
//!   [`Pipeline::busy`]);
//! - a failed call is reported once: no retries, no quarantine, and failed reconciles are
//!   requeued too late to come back during the replay (a `requeue-after` key comes back only
//!   if its delay runs out while later events are replayed);
//! - resyncs are left out.

mod events;
mod journal;
mod report;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use kubeplug_informer::factory::{InformerKey, Registration, SharedInformerFactory};
use kubeplug_informer::informer::HandlerOptions;
use kubeplug_informer::listener::{BufferPolicy, ListenerProbe};
use kubeplug_informer::object::ObjectKey;
use kubeplug_informer::reflector::ReflectorConfig;
use kubeplug_local::LocalCluster;
use kubeplug_runtime::{
    CacheView, ClusterWriter, Delivery, Description, DriverControl, Grants, Gvk, ObjectRef, Plugin,
    PluginLimits, PluginSpec, Runtime, RuntimeConfig,
};
use kubeplug_workqueue::{ItemExponential, Queue, Workers};
use tokio::task::JoinHandle;

pub(crate) use events::{Change, Format};
use journal::Journal;

use crate::cli::{OutputFormat, TestArgs};
use crate::config::Config;
use crate::plugins::{FactoryCache, PluginSettings, Resolver, plugin_settings};
use crate::run::artifact_cache_dir;
use crate::writer::LocalWriter;
use events::InputEvent;
use report::{EventInfo, Report, Step};

/// The log filter of stderr under `kubeplug test` unless `KUBEPLUG_LOG` says otherwise:
/// the plugin's own records are in the report (the runtime hands them to the [`Journal`]
/// whatever the filter), so stderr keeps the host's warnings. Load warnings are left out
/// too: a write grant missing from a configuration shows in the report as a `denied` write.
pub(crate) const DEFAULT_LOG_FILTER: &str = "warn,kubeplug_runtime::host::log=off,\
     kubeplug_runtime::state=off,kubeplug_runtime::plugin=error";

/// The delay before a failed reconcile is retried: longer than any replay.
const RETRY_AFTER_THE_REPLAY: Duration = Duration::from_secs(24 * 3600);

/// How often [`Pipeline::settle`] looks again while the plugin is busy.
const SETTLE_POLL: Duration = Duration::from_millis(1);

/// How long an informer may stay behind a bookmark before another is sent.
const REBOOKMARK: Duration = Duration::from_millis(100);

/// Replays `args.events` and prints the report; fails when the input is bad, the plugin
/// does not load or settle, or one of its calls failed.
pub(crate) async fn test(args: TestArgs) -> anyhow::Result<()> {
    let journal = Journal::default();
    let config = Config::load(args.config.as_deref())?;
    let events = events::read(&args.events)?;
    let (cluster, scan) =
        LocalCluster::open_paths(args.cache.clone()).context("cannot read the cache fixtures")?;
    if !scan.errors.is_empty() {
        let errors: Vec<String> = scan.errors.iter().map(ToString::to_string).collect();
        bail!("the cache fixtures are invalid:\n  {}", errors.join("\n  "));
    }
    for event in &events {
        if cluster.resolve(event.api_version(), event.kind()).is_none() {
            bail!(
                "{}:{}: event {}: no resource serves {} {}; put its CustomResourceDefinition in a --cache file",
                args.events.display(),
                event.line,
                event.index,
                event.api_version(),
                event.kind()
            );
        }
    }

    let bytes = std::fs::read(&args.plugin)
        .with_context(|| format!("cannot read the plugin {}", args.plugin.display()))?;
    let PluginSettings {
        settings,
        grants: configured_grants,
        limits,
        ..
    } = plugin_settings(&config, &args.plugin, None).map_err(anyhow::Error::msg)?;
    let settings = match args.settings.clone() {
        Some(json) => {
            serde_json::from_str::<serde_json::Value>(&json)
                .with_context(|| format!("--settings is not JSON: {json}"))?;
            json
        }
        None => settings,
    };
    let limits = PluginLimits {
        attempts: 1,
        max_consecutive_failures: u64::MAX,
        ..limits
    };

    let runtime = Runtime::new(RuntimeConfig {
        artifact_cache: artifact_cache_dir(),
        observer: Some(Arc::new(journal.clone())),
        ..RuntimeConfig::default()
    })
    .context("cannot start the WebAssembly engine")?;
    let factory = SharedInformerFactory::new(Arc::new(cluster.clone()), ReflectorConfig::default());
    let resolving = cluster.clone();
    let resolve: Resolver =
        Arc::new(move |gvk: &Gvk| resolving.resolve(&gvk.api_version(), &gvk.kind));
    let cache = Arc::new(FactoryCache::new(factory.clone(), resolve, None));
    let writer: Arc<dyn ClusterWriter> = Arc::new(LocalWriter::new(cluster.clone()));
    let spec = |grants: Grants| PluginSpec {
        path: args.plugin.clone(),
        bytes: bytes.clone(),
        settings: settings.clone(),
        grants,
        limits: limits.clone(),
        cache: cache.clone(),
        writer: writer.clone(),
    };
    let grants = if has_section(&config, &args.plugin) {
        configured_grants
    } else {
        requested_grants(&runtime.inspect(spec(Grants::default())).await?)
    };
    // Only what the plugin that runs does is reported.
    journal.take();
    let plugin = Arc::new(runtime.load(spec(grants)).await?);

    let pipeline =
        Pipeline::start(&plugin, &cluster, &factory, cache.as_ref(), args.timeout).await?;
    let mut steps = Vec::new();
    let replayed = replay(&args, &events, &cluster, &pipeline, &journal, &mut steps).await;
    pipeline.stop().await;
    factory.shutdown().await;
    let report = Report::new(&plugin, &args.plugin, steps);
    // The report is this command's output, also when the replay stopped early.
    #[allow(clippy::print_stdout)]
    {
        match args.output {
            OutputFormat::Text => print!("{}", report.to_text()),
            OutputFormat::Json => print!("{}", report.to_json()),
        }
    }
    replayed?;
    if report.failed {
        bail!(
            "plugin {} failed (see the report)",
            plugin.description().name
        );
    }
    Ok(())
}

/// The initial list, then each event in turn, each step waiting until the plugin is idle.
async fn replay(
    args: &TestArgs,
    events: &[InputEvent],
    cluster: &LocalCluster,
    pipeline: &Pipeline,
    journal: &Journal,
    steps: &mut Vec<Step>,
) -> anyhow::Result<()> {
    pipeline.settle(args.timeout).await.map_err(|busy| {
        anyhow!(
            "the plugin did not finish with the initial list within {:?}: {busy}",
            args.timeout
        )
    })?;
    steps.push(Step {
        event: None,
        calls: journal.take(),
    });
    for event in events {
        let place = format!(
            "{}:{}: event {}",
            args.events.display(),
            event.line,
            event.index
        );
        let info = write_event(cluster, event, &args.events)
            .map_err(|reason| anyhow!("{place}: {reason}"))?;
        let settled = pipeline.settle(args.timeout).await;
        steps.push(Step {
            event: Some(info),
            calls: journal.take(),
        });
        settled.map_err(|busy| {
            anyhow!(
                "{place}: the plugin did not finish within {:?}: {busy}",
                args.timeout
            )
        })?;
    }
    Ok(())
}

/// Whether the configuration has a `[plugins.NAME]` section for this file.
fn has_section(config: &Config, plugin: &Path) -> bool {
    plugin
        .file_stem()
        .is_some_and(|stem| config.plugins.contains_key(&*stem.to_string_lossy()))
}

/// Exactly the reads and writes `description` asks for.
fn requested_grants(description: &Description) -> Grants {
    let mut grants = Grants::default();
    for read in description.read_types() {
        grants = grants.allow_read(read);
    }
    for (resource, verbs) in &description.writes {
        for verb in verbs {
            grants = grants.allow_write(resource.clone(), *verb);
        }
    }
    grants
}

/// Writes one event to the cluster as an API client would: ADDED and MODIFIED create or
/// replace the object (the server assigns its resourceVersion), DELETED deletes it.
fn write_event(
    cluster: &LocalCluster,
    event: &InputEvent,
    file: &Path,
) -> Result<EventInfo, String> {
    let resource = cluster
        .resolve(event.api_version(), event.kind())
        .ok_or_else(|| {
            format!(
                "no resource serves {} {}",
                event.api_version(),
                event.kind()
            )
        })?;
    let mut object = event.object.clone();
    let metadata = object["metadata"]
        .as_object_mut()
        .ok_or("metadata is not a mapping")?;
    // A recorded version belongs to another server: it would be a precondition here.
    metadata.remove("resourceVersion");
    let namespace = kubeplug_local::scope_namespace(&resource, metadata);
    let name = metadata["name"].as_str().unwrap_or_default().to_owned();
    let key = ObjectKey::new(namespace.as_deref(), &name);
    let server = cluster.server();
    match event.change {
        Change::Added | Change::Modified => server
            .apply(&resource, &object.to_string())
            .map(drop)
            .map_err(|status| format!("the cluster refused it: {status}"))?,
        Change::Deleted => server.delete(&resource, &key).map(drop).map_err(|status| {
            if status.code == 404 {
                format!("DELETED {resource} {key}, which does not exist")
            } else {
                format!("the cluster refused it: {status}")
            }
        })?,
    }
    Ok(EventInfo {
        index: event.index,
        source: format!("{}:{}", file.display(), event.line),
        change: event.change,
        resource: format!("{}/{}", event.api_version(), event.kind()),
        key: key.to_string(),
    })
}

/// The plugin's deliveries, wired as `PluginHost` wires them (see `PluginHost::install`),
/// with what [`busy`](Self::busy) needs to see that it is idle.
struct Pipeline {
    cluster: LocalCluster,
    factory: SharedInformerFactory,
    control: DriverControl,
    /// Its handler registrations; dropped at the end.
    subscriptions: Vec<Registration>,
    probes: Vec<ListenerProbe>,
    /// The events driver, or the reconcile feeders.
    tasks: Vec<JoinHandle<()>>,
    reconcile: Option<(Queue<ObjectRef>, Workers)>,
    /// The resourceVersion last sent as a bookmark, and when. A std mutex: never held across
    /// an `.await`.
    bookmarked: Mutex<(u64, Instant)>,
}

impl Pipeline {
    /// Registers the plugin's handlers and, once their initial lists are all buffered,
    /// starts its drivers: a driver that starts earlier would see the subscriptions' initial
    /// lists arrive in an order that timing decides.
    async fn start(
        plugin: &Arc<Plugin>,
        cluster: &LocalCluster,
        factory: &SharedInformerFactory,
        cache: &FactoryCache,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        let description = plugin.description();
        // What the plugin may read gets its informer now, so that its first read finds a
        // synced cache rather than one that depends on timing.
        let subscribed = description.subscriptions.iter().map(|s| &s.resource);
        for readable in description.reads.iter().chain(subscribed) {
            cache.indexer(readable);
        }
        let reconcile = matches!(description.delivery, Delivery::Reconcile { .. });
        let options = HandlerOptions {
            buffer: if reconcile {
                BufferPolicy::CoalesceByKey
            } else {
                BufferPolicy::Unbounded
            },
            resync_period: None,
        };
        let mut subscriptions = Vec::new();
        let mut receivers = Vec::new();
        for wanted in &description.subscriptions {
            let resource = cluster
                .resolve(&wanted.resource.api_version(), &wanted.resource.kind)
                .ok_or_else(|| {
                    anyhow!(
                        "plugin {} subscribes to {}, which the cluster does not serve; put its CustomResourceDefinition in a --cache file",
                        description.name,
                        wanted.resource
                    )
                })?;
            let namespace = match (&wanted.namespace, resource.namespaced) {
                (Some(namespace), false) => bail!(
                    "plugin {} subscribes to {} in namespace {namespace}, but {} is cluster-scoped",
                    description.name,
                    wanted.resource,
                    wanted.resource
                ),
                (_, false) => None,
                (wanted, true) => wanted.clone(),
            };
            let key = InformerKey {
                resource,
                namespace,
                label_selector: wanted.label_selector.clone(),
                field_selector: wanted.field_selector.clone(),
            };
            let (registration, receiver) = factory.subscribe(key, options.clone())?.into_parts();
            receivers.push(receiver);
            subscriptions.push(registration);
        }
        let probes = receivers.iter().map(|r| r.probe()).collect();
        let mut pipeline = Self {
            cluster: cluster.clone(),
            factory: factory.clone(),
            control: DriverControl::new(plugin.clone()),
            subscriptions,
            probes,
            tasks: Vec::new(),
            reconcile: None,
            bookmarked: Mutex::new((0, Instant::now())),
        };
        pipeline
            .wait(timeout, Self::informers_behind)
            .await
            .map_err(|behind| anyhow!("the cache did not sync within {timeout:?}: {behind}"))?;
        let control = &pipeline.control;
        let (tasks, reconcile) = match description.delivery {
            Delivery::Events => (
                vec![kubeplug_runtime::events::drive_events(control, receivers)?],
                None,
            ),
            Delivery::Reconcile { .. } => {
                let queue = Queue::builder(&description.name)
                    .rate_limiter(ItemExponential::new(
                        RETRY_AFTER_THE_REPLAY,
                        RETRY_AFTER_THE_REPLAY,
                    ))
                    .build();
                let reconciler =
                    kubeplug_runtime::reconcile::drive_reconcile(control, receivers, queue)?;
                (
                    reconciler.feeders,
                    Some((reconciler.queue, reconciler.workers)),
                )
            }
        };
        pipeline.tasks = tasks;
        pipeline.reconcile = reconcile;
        Ok(pipeline)
    }

    /// What is still moving, if anything. The checks follow the data (informers, listener
    /// buffers and the batches taken from them, the work queue), then make sure nothing
    /// was written meanwhile: whatever moves later was caused by a stage seen busy.
    fn busy(&self) -> Option<String> {
        let server = self.cluster.server();
        let target = server.current_resource_version();
        if let Some(behind) = self.informers_behind() {
            return Some(behind);
        }
        let unhandled: usize = self.probes.iter().map(ListenerProbe::unhandled).sum();
        if unhandled > 0 {
            return Some(format!(
                "{unhandled} notifications are not yet handled by the plugin"
            ));
        }
        if let Some((queue, _)) = &self.reconcile {
            let work = queue.len() + queue.processing();
            if work > 0 {
                return Some(format!("{work} keys are queued or being reconciled"));
            }
        }
        (server.current_resource_version() != target)
            .then(|| "the plugin wrote to the cluster meanwhile".to_owned())
    }

    /// An informer that has not yet handed every change of the cluster to its listeners.
    fn informers_behind(&self) -> Option<String> {
        let target = self.cluster.server().current_resource_version();
        for key in self.factory.keys() {
            let Some(informer) = self.factory.informer(&key) else {
                continue;
            };
            let synced = informer.last_sync_resource_version();
            if synced.parse::<u64>().ok() < Some(target) || informer.queued_keys() > 0 {
                self.bookmark(target);
                return Some(format!(
                    "the informer of {key} is at resourceVersion {synced:?}, the cluster at {target}"
                ));
            }
        }
        None
    }

    /// Sends a bookmark: it moves every watching informer to `target` even when no change
    /// of its own is on the way. Sent again after [`REBOOKMARK`], for a watch reopened since.
    fn bookmark(&self, target: u64) {
        let mut last = self.bookmarked.lock().expect("bookmark lock poisoned");
        if last.0 != target || last.1.elapsed() >= REBOOKMARK {
            self.cluster.server().bookmark();
            *last = (target, Instant::now());
        }
    }

    /// Waits until the plugin is idle; after `timeout`, says what is still busy.
    async fn settle(&self, timeout: Duration) -> Result<(), String> {
        self.wait(timeout, Self::busy).await
    }

    /// Waits until `busy` says nothing; after `timeout`, returns what it says.
    async fn wait(
        &self,
        timeout: Duration,
        busy: fn(&Self) -> Option<String>,
    ) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let Some(busy) = busy(self) else {
                return Ok(());
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(busy);
            }
            tokio::time::sleep(SETTLE_POLL).await;
        }
    }

    /// Ends deliveries after the calls in flight, then unregisters the handlers.
    async fn stop(self) {
        self.control.stop();
        if let Some((queue, workers)) = self.reconcile {
            queue.shut_down();
            workers.join().await;
        }
        for task in self.tasks {
            let _ = task.await;
        }
        drop(self.subscriptions);
    }
}
