//! Delivering to a plugin version: registering a handler per subscription, starting the
//! events driver or the reconcile workers, and stopping or draining them.

use std::sync::Arc;

use kubeplug_informer::factory::{FactoryError, InformerKey};
use kubeplug_informer::informer::HandlerOptions;
use kubeplug_informer::listener::{BufferPolicy, ListenerProbe, ListenerReceiver};
use kubeplug_runtime::{Delivery, DriverControl, DriverError, Plugin};
use kubeplug_workqueue::Queue;
use tokio::task::JoinHandle;
use tracing::{error, warn};

use super::starts::StartBudget;
use super::{Delivering, Event, PluginHost, PluginId, Registered};

/// Why a version's deliveries could not start, by step; the informer factory's, the driver's
/// or the work queue's error is the source. Retried at the next rescan
/// ([`super::failure::LoadFailure::Start`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    /// An informer the version subscribes to or reads could not be leased.
    #[error("leasing its informers")]
    Lease(#[source] FactoryError),
    /// The plugin's budget of informer starts is spent: its versions asked for too many new
    /// informers too quickly.
    #[error("leasing its informers: {budget}")]
    TooManyStarts {
        budget: StartBudget,
        #[source]
        source: FactoryError,
    },
    /// A handler could not be registered on a subscription's informer.
    #[error("registering its handlers")]
    Subscribe(#[source] FactoryError),
    /// The events driver did not start.
    #[error("starting the events driver")]
    StartEvents(#[source] DriverError),
    /// The reconcile queue's metrics could not be registered.
    #[error("registering the work queue's metrics")]
    QueueMetrics(#[source] kubeplug_workqueue::Error),
    /// The reconcile feeders and workers did not start.
    #[error("starting the reconcile workers")]
    StartReconcile(#[source] DriverError),
}

impl Delivering {
    /// Notifications its buffers merged over their budget.
    pub(super) fn merged(&self) -> u64 {
        self.probes.iter().map(ListenerProbe::merged).sum()
    }

    /// Ends deliveries after the calls in flight, then unregisters the handlers. Keys waiting
    /// in a reconcile queue are dropped.
    pub(super) async fn stop(self, plugin: &str) {
        self.control.stop();
        if let Some((queue, workers)) = self.reconcile {
            queue.shut_down();
            workers.join().await;
        }
        join_all(plugin, self.tasks).await;
        drop(self.subscriptions);
    }

    /// Ends deliveries gracefully: no new notifications; what the listeners hold and the
    /// keys already queued are still delivered until `deadline`, then dropped; calls in
    /// flight always finish. A quarantine pause is not waited out past `deadline`.
    pub(super) async fn drain(self, plugin: &str, deadline: tokio::time::Instant) {
        // Closing the listeners ends the events driver and the feeders once they have
        // delivered what their buffers hold, which a quarantined plugin would do only after
        // its pause (up to 5 minutes).
        drop(self.subscriptions);
        let drivers = join_all(plugin, self.tasks);
        self.control
            .drain_by(drivers, deadline, || {
                warn!(
                    plugin,
                    "the shutdown deadline passed with notifications undelivered; they are dropped"
                );
            })
            .await;
        if let Some((queue, workers)) = self.reconcile {
            queue.shut_down();
            // Past the deadline, workers drop the keys they take without calling the plugin.
            self.control
                .drain_by(workers.join(), deadline, || {
                    warn!(
                        plugin,
                        dropped = queue.len(),
                        "the shutdown deadline passed with keys still queued; they are dropped"
                    );
                })
                .await;
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

impl PluginHost {
    /// Hands `delivering` to plugin `id`'s serving version. Whatever it displaces, or itself
    /// when no version of `id` serves any more, is stopped. Whether it was placed.
    pub(super) async fn place(&self, id: &PluginId, delivering: Delivering, plugin: &str) -> bool {
        let (placed, ended) = {
            let mut table = self.table();
            let placed = table
                .get(id)
                .is_some_and(|entry| entry.lifecycle.serving().is_some());
            (
                placed,
                Self::step_in(&mut table, id, Event::Deliver(delivering)),
            )
        };
        self.changed();
        if let Some(stopped) = ended.stopped {
            stopped.stop(plugin).await;
        }
        placed
    }

    /// Registers a handler for each of `plugin`'s subscriptions (`keys` in their order). An
    /// events-mode plugin's buffers keep every notification within `budget` bytes of
    /// superseded object JSON, and the latest state per key past it; a reconcile plugin's
    /// keep a key once anyway.
    pub(super) fn register(
        &self,
        plugin: &Plugin,
        keys: &[InformerKey],
        budget: usize,
    ) -> Result<Registered, StartError> {
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
            };
            let (registration, receiver) = self
                .factory
                .subscribe(key.clone(), options)
                .map_err(StartError::Subscribe)?
                .into_parts();
            registered.receivers.push(receiver);
            registered.subscriptions.push(registration);
        }
        Ok(registered)
    }

    /// Starts delivering `registered`'s notifications to `plugin`.
    pub(super) fn deliver(
        &self,
        plugin: &Arc<Plugin>,
        registered: Registered,
    ) -> Result<Delivering, StartError> {
        let Registered {
            subscriptions,
            receivers,
        } = registered;
        let probes = receivers.iter().map(ListenerReceiver::probe).collect();
        let control = match self.shares {
            Some(_) => DriverControl::sharing(plugin.clone(), self.share_of(plugin.name())),
            None => DriverControl::new(plugin.clone()),
        };
        let (tasks, reconcile) = match plugin.description().delivery {
            Delivery::Events => {
                let task = kubeplug_runtime::events::drive_events(&control, receivers)
                    .map_err(StartError::StartEvents)?;
                (vec![task], None)
            }
            Delivery::Reconcile { .. } => {
                let queue = Queue::builder(plugin.name())
                    .metrics(&self.queue_metrics)
                    .map_err(StartError::QueueMetrics)?
                    .build();
                let reconciler =
                    kubeplug_runtime::reconcile::drive_reconcile(&control, receivers, queue)
                        .map_err(StartError::StartReconcile)?;
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
}
