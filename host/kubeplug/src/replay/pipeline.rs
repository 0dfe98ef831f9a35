//! The plugin's deliveries under `kubeplug test`, wired as `PluginHost` wires them, and
//! what takes the clock out of them: the replay waits until they are idle, and a plugin's
//! write returns only once the informers have it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use kubeplug_informer::factory::{InformerKey, Registration, SharedInformerFactory};
use kubeplug_informer::informer::HandlerOptions;
use kubeplug_informer::listener::{BufferPolicy, ListenerProbe};
use kubeplug_local::LocalCluster;
use kubeplug_runtime::view::BoxFuture;
use kubeplug_runtime::{
    ClusterWriter, Delivery, DriverControl, ObjectRef, Plugin, Write, WriteError,
};
use kubeplug_workqueue::{ItemExponential, Queue, Workers};
use tokio::task::JoinHandle;

use crate::plugins::form_of;
use crate::writer::LocalWriter;

/// The delay before a failed reconcile is retried: longer than any replay.
const RETRY_AFTER_THE_REPLAY: Duration = Duration::from_secs(24 * 3600);

/// How often [`Pipeline::settle`] looks again while the plugin is busy.
const SETTLE_POLL: Duration = Duration::from_millis(1);

/// How long an informer may stay behind a bookmark before another is sent.
const REBOOKMARK: Duration = Duration::from_millis(100);

/// The longest a plugin's write waits for the informers to have it.
const CATCH_UP: Duration = Duration::from_secs(5);

/// What keeps the plugin from being idle: what a wait that ran out reports.
#[derive(Debug, thiserror::Error)]
pub(super) enum Busy {
    /// An informer has not yet handed every change of the cluster to its listeners.
    #[error("the informer of {informer} is at resourceVersion {synced:?}, the cluster at {target}")]
    InformerBehind {
        /// The informer's key.
        informer: String,
        /// The resourceVersion it last synced to.
        synced: String,
        /// The cluster's.
        target: u64,
    },
    /// Notifications wait in the listeners' buffers or in a batch being delivered.
    #[error("{0} notifications are not yet handled by the plugin")]
    Unhandled(usize),
    /// Keys wait in the work queue or are being reconciled.
    #[error("{0} keys are queued or being reconciled")]
    Reconciling(usize),
    /// The cluster changed while the other checks ran.
    #[error("the plugin wrote to the cluster meanwhile")]
    WroteMeanwhile,
}

/// The plugin's deliveries, wired as `PluginHost` wires them (see `PluginHost::install`),
/// with what [`busy`](Self::busy) needs to see that it is idle.
pub(super) struct Pipeline {
    control: DriverControl,
    /// Its handler registrations; dropped at the end.
    subscriptions: Vec<Registration>,
    probes: Vec<ListenerProbe>,
    /// The events driver, or the reconcile feeders.
    tasks: Vec<JoinHandle<()>>,
    reconcile: Option<(Queue<ObjectRef>, Workers)>,
    informers: Arc<Informers>,
}

impl Pipeline {
    /// Registers the plugin's handlers and, once their initial lists are all buffered,
    /// starts its drivers: a driver that starts earlier would see the subscriptions' initial
    /// lists arrive in an order that timing decides.
    pub(super) async fn start(
        plugin: &Arc<Plugin>,
        informers: &Arc<Informers>,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        let Informers {
            cluster, factory, ..
        } = informers.as_ref();
        // What the plugin may read got its informer when the runtime loaded it, so that its
        // first read finds a synced cache rather than one that depends on timing.
        let description = plugin.description();
        // Every notification is delivered, in reconcile mode too, where `run` coalesces them
        // by key: how many would coalesce, and so the events delivered and the `map-event`
        // calls made, depends on timing. The work queue still merges keys.
        let options = HandlerOptions {
            budget: None,
            buffer: BufferPolicy::Unbounded,
            ..HandlerOptions::default()
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
                labels: wanted.labels.clone(),
                fields: wanted.fields.clone(),
                form: form_of(description, &wanted.resource),
            };
            let options = HandlerOptions {
                projections: wanted.projections.paths().paths().to_vec(),
                ..options.clone()
            };
            let (registration, receiver) = factory.subscribe(key, options)?.into_parts();
            receivers.push(receiver);
            subscriptions.push(registration);
        }
        let probes = receivers.iter().map(|r| r.probe()).collect();
        let mut pipeline = Self {
            control: DriverControl::new(plugin.clone()),
            subscriptions,
            probes,
            tasks: Vec::new(),
            reconcile: None,
            informers: informers.clone(),
        };
        pipeline
            .wait(timeout, |pipeline| pipeline.informers.behind())
            .await
            .with_context(|| format!("the cache did not sync within {timeout:?}"))?;
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
    fn busy(&self) -> Option<Busy> {
        let server = self.informers.cluster.server();
        let target = server.current_resource_version();
        if let Some(behind) = self.informers.behind() {
            return Some(behind);
        }
        let unhandled: usize = self.probes.iter().map(ListenerProbe::unhandled).sum();
        if unhandled > 0 {
            return Some(Busy::Unhandled(unhandled));
        }
        if let Some((queue, _)) = &self.reconcile {
            let work = queue.len() + queue.processing();
            if work > 0 {
                return Some(Busy::Reconciling(work));
            }
        }
        (server.current_resource_version() != target).then_some(Busy::WroteMeanwhile)
    }

    /// Waits until the plugin is idle; after `timeout`, says what is still busy.
    pub(super) async fn settle(&self, timeout: Duration) -> Result<(), Busy> {
        self.wait(timeout, Self::busy).await
    }

    /// Waits until `busy` says nothing; after `timeout`, returns what it says.
    async fn wait(
        &self,
        timeout: Duration,
        busy: impl Fn(&Self) -> Option<Busy>,
    ) -> Result<(), Busy> {
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
    pub(super) async fn stop(self) {
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

/// The cluster and the informers over it, as far as the replay waits for them.
pub(super) struct Informers {
    cluster: LocalCluster,
    factory: SharedInformerFactory,
    /// The resourceVersion last sent as a bookmark, and when. A std mutex: never held across
    /// an `.await`.
    bookmarked: Mutex<(u64, Instant)>,
}

impl Informers {
    pub(super) fn new(cluster: LocalCluster, factory: SharedInformerFactory) -> Self {
        Self {
            cluster,
            factory,
            bookmarked: Mutex::new((0, Instant::now())),
        }
    }

    /// An informer that has not yet handed every change of the cluster to its listeners.
    fn behind(&self) -> Option<Busy> {
        let target = self.cluster.server().current_resource_version();
        for key in self.factory.keys() {
            let Some(informer) = self.factory.informer(&key) else {
                continue;
            };
            let synced = informer.last_sync_resource_version();
            if synced.parse::<u64>().ok() < Some(target) || informer.queued_keys() > 0 {
                self.bookmark(target);
                return Some(Busy::InformerBehind {
                    informer: key.to_string(),
                    synced,
                    target,
                });
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
}

/// The local writer, each write returning only once every informer has it: a plugin then
/// reads its own writes from the cache, as it does on a cluster once the watch catches up,
/// but without a race that timing decides (a reconcile that reads the object it just
/// patched, before the informer has the patch, patches again).
pub(super) struct ReadYourWrites {
    writer: LocalWriter,
    informers: Arc<Informers>,
}

impl ReadYourWrites {
    pub(super) fn new(writer: LocalWriter, informers: Arc<Informers>) -> Self {
        Self { writer, informers }
    }
}

impl ClusterWriter for ReadYourWrites {
    fn write<'a>(
        &'a self,
        plugin: &'a str,
        write: Write,
    ) -> BoxFuture<'a, Result<String, WriteError>> {
        Box::pin(async move {
            let written = self.writer.write(plugin, write).await?;
            // Bounded: a write still answers if an informer cannot catch up; the replay's own
            // wait then reports what is behind.
            let deadline = tokio::time::Instant::now() + CATCH_UP;
            while self.informers.behind().is_some() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(SETTLE_POLL).await;
            }
            Ok(written)
        })
    }
}
