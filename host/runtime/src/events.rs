//! Events mode: every notification, in order, in batches, into one instance.

use std::sync::Arc;
use std::time::Duration;

use futures::future::select_all;
use kubeplug_informer::listener::{BufferPolicy, ListenerReceiver, NotificationBatch};
use tokio::task::JoinHandle;

use crate::bindings::wit;
use crate::convert;
use crate::description::Delivery;
use crate::fault::Breaker;
use crate::plugin::{Plugin, PluginInstance};
use crate::status::{PluginStats, RunState, bounded};

/// Why a driver could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriverError {
    /// The plugin described another delivery mode.
    #[error("plugin {plugin} uses {actual:?} delivery, not {expected}")]
    WrongMode {
        /// The plugin.
        plugin: String,
        /// What the driver is for.
        expected: &'static str,
        /// What the plugin asked for.
        actual: Delivery,
    },
    /// One receiver per subscription is needed, in the order of the description.
    #[error(
        "plugin {plugin} has {subscriptions} subscriptions but {receivers} receivers were given"
    )]
    ReceiverCount {
        /// The plugin.
        plugin: String,
        /// Its subscriptions.
        subscriptions: usize,
        /// Receivers given.
        receivers: usize,
    },
}

/// Both drivers take one receiver per subscription, in the description's order.
pub(crate) fn check_receivers(
    plugin: &Plugin,
    receivers: &[ListenerReceiver],
) -> Result<(), DriverError> {
    let subscriptions = plugin.description().subscriptions.len();
    if receivers.len() != subscriptions {
        return Err(DriverError::ReceiverCount {
            plugin: plugin.name().to_owned(),
            subscriptions,
            receivers: receivers.len(),
        });
    }
    Ok(())
}

/// Starts delivering to an events-mode plugin: `receivers[i]` is the listener of
/// `plugin.description().subscriptions[i]`.
///
/// Contract:
/// - notifications of one receiver reach the plugin in order, in batches of at most
///   `limits.batch_size`, one call at a time, on one instance;
/// - a failed call (error, trap, deadline, memory) is retried `limits.attempts` times with
///   doubling back-off on a fresh instance, then the batch is skipped and counted;
/// - after `limits.max_consecutive_failures` failed calls the plugin is quarantined: its
///   buffers switch to [`BufferPolicy::CoalesceByKey`], nothing is delivered during the
///   back-off, then delivery is retried; the first success restores
///   [`BufferPolicy::Unbounded`];
/// - the task ends when every receiver is closed; it never blocks an informer.
pub fn run_events(
    plugin: Arc<Plugin>,
    receivers: Vec<ListenerReceiver>,
) -> Result<JoinHandle<()>, DriverError> {
    let description = plugin.description();
    if description.delivery != Delivery::Events {
        return Err(DriverError::WrongMode {
            plugin: plugin.name().to_owned(),
            expected: "events",
            actual: description.delivery,
        });
    }
    check_receivers(&plugin, &receivers)?;
    Ok(tokio::spawn(deliver_events(plugin, receivers)))
}

/// The next batch from whichever receiver has one; `None` once all are closed. The receiver
/// polled first rotates with `turn`, so a busy subscription cannot starve the others.
async fn next_batch(
    receivers: &mut [ListenerReceiver],
    open: &mut [bool],
    max: usize,
    turn: usize,
) -> Option<(usize, NotificationBatch)> {
    loop {
        let mut waiting: Vec<_> = receivers
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| open[*i])
            .map(|(i, r)| Box::pin(async move { (i, r.recv_batch(max).await) }))
            .collect();
        if waiting.len() > 1 {
            let by = turn % waiting.len();
            waiting.rotate_left(by);
        }
        if waiting.is_empty() {
            return None;
        }
        let ((index, batch), _, _) = select_all(waiting).await;
        match batch {
            Some(batch) => return Some((index, batch)),
            None => open[index] = false,
        }
    }
}

/// One attempt: a call on the warm instance (made first if needed).
async fn attempt(
    plugin: &Plugin,
    instance: &mut Option<PluginInstance>,
    events: &[wit::Event],
) -> Result<(), String> {
    if instance.is_none() {
        *instance = Some(plugin.instantiate().await.map_err(|e| e.to_string())?);
    }
    let live = instance.as_mut().expect("instance was just made");
    match live.handle_events(events).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(message)) => Err(format!(
            "plugin {}: handle-events returned an error: {}",
            plugin.name(),
            bounded(&message)
        )),
        Err(fault) => {
            // A trapped instance may be in any state: never call it again.
            *instance = None;
            Err(bounded(&fault.to_string()))
        }
    }
}

async fn deliver_events(plugin: Arc<Plugin>, mut receivers: Vec<ListenerReceiver>) {
    let limits = plugin.limits().clone();
    let stats = plugin.stats().clone();
    let breaker = Breaker::new(stats.clone(), limits.clone());
    let subscriptions = plugin.description().subscriptions.clone();
    let mut open = vec![true; receivers.len()];
    let mut instance = None;
    let mut turn = 0usize;
    while let Some((index, batch)) =
        next_batch(&mut receivers, &mut open, limits.batch_size, turn).await
    {
        turn = turn.wrapping_add(1);
        let events: Vec<wit::Event> = batch
            .iter()
            .map(|n| convert::event(index as u32, &subscriptions[index], n))
            .collect();
        let mut delay = limits.retry_backoff;
        let mut delivered = false;
        for round in 1..=limits.attempts.max(1) {
            match attempt(&plugin, &mut instance, &events).await {
                Ok(()) => {
                    PluginStats::add(&stats.events_delivered, events.len() as u64);
                    if breaker.success() {
                        tracing::info!(
                            plugin = plugin.name(),
                            "plugin recovered; leaving quarantine"
                        );
                        set_policy(&receivers, BufferPolicy::Unbounded);
                    }
                    delivered = true;
                    break;
                }
                Err(error) => {
                    tracing::warn!(plugin = plugin.name(), round, events = events.len(), %error, "batch failed");
                    if let Some(pause) = breaker.failure(&error) {
                        quarantine(&plugin, &receivers, pause, &error);
                        break;
                    }
                    if round < limits.attempts {
                        tokio::time::sleep(delay).await;
                        delay = delay.saturating_mul(2);
                    }
                }
            }
        }
        if !delivered {
            PluginStats::add(&stats.batches_skipped, 1);
            tracing::error!(
                plugin = plugin.name(), events = events.len(),
                first = %batch.first().map(|n| n.key().as_str()).unwrap_or(""),
                "skipping a batch the plugin keeps failing"
            );
        }
        drop(batch);
        breaker.wait().await;
    }
    stats.set_state(RunState::Stopped);
}

fn set_policy(receivers: &[ListenerReceiver], policy: BufferPolicy) {
    for receiver in receivers {
        receiver.set_policy(policy);
    }
}

fn quarantine(plugin: &Plugin, receivers: &[ListenerReceiver], pause: Duration, error: &str) {
    tracing::error!(
        plugin = plugin.name(), ?pause, %error,
        "plugin quarantined: deliveries paused, buffers keep the latest state per key"
    );
    set_policy(receivers, BufferPolicy::CoalesceByKey);
}
