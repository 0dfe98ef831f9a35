//! Events mode: every notification, in order, in batches, into one instance.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::select_all;
use kubeplug_informer::backoff::Backoff;
use kubeplug_informer::listener::{
    BufferPolicy, ListenerReceiver, Notification, NotificationBatch,
};
use kubeplug_policy::names::excerpt;
use tokio::task::JoinHandle;

use crate::bindings::wit;
use crate::convert;
use crate::description::Delivery;
use crate::driver::{DriverControl, DriverError, Follower, KeyShare, Version, check_receivers};
use crate::observer::CallRecord;
use crate::plugin::{CallError, Plugin};
use crate::status::{PluginStats, RunState, bounded};

/// Starts delivering to an events-mode plugin that is never swapped: `receivers[i]` is the
/// listener of `plugin.description().subscriptions[i]`. See [`drive_events`]. For tests and
/// benches (feature `testing`): the binary always drives plugins under a [`DriverControl`].
#[cfg(feature = "testing")]
pub fn run_events(
    plugin: Arc<Plugin>,
    receivers: Vec<ListenerReceiver>,
) -> Result<JoinHandle<()>, DriverError> {
    drive_events(&DriverControl::new(plugin), receivers)
}

/// Starts delivering to the events-mode plugin `control` names: `receivers[i]` is the
/// listener of its `subscriptions[i]`.
///
/// Contract:
/// - notifications of one receiver reach the plugin in order, in batches of at most
///   `limits.batch_size`, one call at a time, on one instance;
/// - a failed call (error, trap, deadline, memory) is retried `limits.attempts` times with
///   doubling back-off on a fresh instance, then the batch is skipped and counted;
/// - after `limits.max_consecutive_failures` failed calls the plugin is quarantined: its
///   buffers switch to [`BufferPolicy::CoalesceByKey`], nothing is delivered during the
///   back-off, then delivery is retried; the first success, or a new version, restores
///   [`BufferPolicy::Unbounded`];
/// - a version swapped in through `control` gets the next batch (see [`DriverControl`]);
/// - only the keys of the control's [`KeyShare`] are delivered; the rest are dropped;
/// - the task ends when every receiver is closed or `control` stops it; it never blocks an
///   informer.
pub fn drive_events(
    control: &DriverControl,
    receivers: Vec<ListenerReceiver>,
) -> Result<JoinHandle<()>, DriverError> {
    let plugin = control.current().ok_or(DriverError::Stopped)?;
    let description = plugin.description();
    if description.delivery != Delivery::Events {
        return Err(DriverError::WrongMode {
            plugin: plugin.name().to_owned(),
            expected: "events",
            actual: description.delivery,
        });
    }
    check_receivers(&plugin, &receivers)?;
    Ok(tokio::spawn(deliver_events(control.follow(), receivers)))
}

/// The next batch from whichever receiver has one; `None` once all are closed. The receiver
/// polled first rotates with `turn`, so a busy subscription cannot starve the others.
/// Cancel-safe: a batch is taken from a receiver only by the future that returns it.
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

/// Why one attempt at a batch failed.
#[derive(Debug, thiserror::Error)]
enum AttemptFailed {
    /// No instance could be made, or the call trapped or ran past its deadline.
    #[error(transparent)]
    Call(#[from] CallError),
    /// `handle-events` returned an error.
    #[error("plugin {plugin}: handle-events returned an error: {message}")]
    Returned {
        /// The plugin.
        plugin: String,
        /// The plugin's own message, cut ([`excerpt`]): text that crossed the WIT as a
        /// string, data for the operator rather than a cause.
        message: String,
    },
}

/// One attempt: a call on a warm instance (made first if needed).
async fn attempt(version: &Version, events: &[wit::Event]) -> Result<(), AttemptFailed> {
    let plugin = &version.plugin;
    let mut instance = version.take_instance().await?;
    match instance.handle_events(events).await {
        Ok(Ok(())) => {
            version.put_instance(instance);
            Ok(())
        }
        Ok(Err(message)) => {
            version.put_instance(instance);
            Err(AttemptFailed::Returned {
                plugin: plugin.name().to_owned(),
                message: excerpt(&message),
            })
        }
        // The instance is dropped: a trapped one is never called again.
        Err(fault) => Err(fault.into()),
    }
}

async fn deliver_events(mut follower: Follower, mut receivers: Vec<ListenerReceiver>) {
    let mut open = vec![true; receivers.len()];
    let mut version: Option<Version> = None;
    let mut turn = 0usize;
    loop {
        let Some(plugin) = follower.current() else {
            break;
        };
        let stale = !version
            .as_ref()
            .is_some_and(|v| Arc::ptr_eq(&v.plugin, &plugin));
        if stale && let Some(old) = version.replace(Version::new(plugin)) {
            old.plugin.stats().set_state(RunState::Stopped);
            // A quarantine belonged to the old version.
            set_policy(&receivers, BufferPolicy::Unbounded);
        }
        let current = version.as_ref().expect("a version was just set");
        tokio::select! {
            biased;
            () = follower.changed() => continue,
            () = current.breaker.wait() => {}
        }
        let batch_size = current.plugin.limits().batch_size;
        let next = tokio::select! {
            biased;
            () = follower.changed() => continue,
            next = next_batch(&mut receivers, &mut open, batch_size, turn) => next,
        };
        let Some((index, batch)) = next else {
            break;
        };
        turn = turn.wrapping_add(1);
        deliver(current, &follower, &receivers, index, batch).await;
    }
    if let Some(last) = version {
        last.plugin.stats().set_state(RunState::Stopped);
    }
}

/// How delivering one part of a batch ended.
enum Part {
    /// The plugin took it.
    Delivered,
    /// It kept failing and was skipped (counted).
    Skipped,
    /// It failed into a quarantine: the rest of the batch is not delivered.
    Quarantined,
    /// Deliveries stopped: nothing more is delivered.
    Stopped,
}

/// Delivers one batch, in parts each within the plugin's memory (`max_memory`: what the
/// host builds for one call is bounded by what the plugin could take, before it is built),
/// with retries; skips a part (counted) when the plugin keeps failing, and the rest of the
/// batch once it is quarantined. Once deliveries stop (this replica stopped leading, the
/// plugin was removed), no retry starts: the batch is dropped, and whoever delivers next
/// starts from the cache. Each attempt delivers only the keys of the share current when it
/// starts (see [`KeyShare`]).
async fn deliver(
    version: &Version,
    follower: &Follower,
    receivers: &[ListenerReceiver],
    index: usize,
    batch: NotificationBatch,
) {
    let plugin = &version.plugin;
    let subscription = &plugin.description().subscriptions[index];
    let budget = plugin.limits().max_memory;
    let mut pending: Vec<&Notification> = batch.iter().collect();
    // Keys another replica owns are not converted.
    keep_owned(&follower.share(), &mut pending, &mut Vec::new());
    while !pending.is_empty() {
        let events = match convert::events_within(index as u32, subscription, &pending, budget) {
            Ok(events) => events,
            Err(too_large) => {
                let notification = pending.remove(0);
                if refuse_too_large(version, receivers, notification, too_large) {
                    return;
                }
                continue;
            }
        };
        let rest = pending.split_off(events.len());
        match deliver_part(version, follower, receivers, pending, events).await {
            Part::Delivered | Part::Skipped => pending = rest,
            Part::Quarantined if !rest.is_empty() => {
                PluginStats::add(&plugin.stats().batches_skipped, 1);
                tracing::warn!(
                    plugin = plugin.name(),
                    events = rest.len(),
                    "quarantined: the rest of the batch is not delivered"
                );
                return;
            }
            Part::Quarantined | Part::Stopped => return,
        }
    }
}

/// A notification whose event alone needs more than the plugin's memory could never be
/// lowered into it: it is not built, and counts as a failed call would (the plugin's
/// subscription asks for too much of an object that large). True when that quarantines it.
fn refuse_too_large(
    version: &Version,
    receivers: &[ListenerReceiver],
    notification: &Notification,
    too_large: convert::EventTooLarge,
) -> bool {
    let plugin = &version.plugin;
    let error = format!(
        "plugin {}: the event for {} needs {} bytes, more than its memory limit of {} MiB \
         (memory_limit_mib): not delivered; subscribe to less of such objects (projections, \
         JSON) or raise the limit",
        plugin.name(),
        notification.key().as_str(),
        too_large.bytes,
        plugin.limits().max_memory >> 20
    );
    tracing::warn!(plugin = plugin.name(), %error, "event not delivered");
    plugin.observe(None, || CallRecord::Failed {
        error: error.clone(),
    });
    PluginStats::add(&plugin.stats().batches_skipped, 1);
    match version.breaker.failure(&error) {
        Some(pause) => {
            quarantine(plugin, receivers, pause, &error);
            true
        }
        None => false,
    }
}

/// Delivers `events`, made of `notifications`, with retries.
async fn deliver_part(
    version: &Version,
    follower: &Follower,
    receivers: &[ListenerReceiver],
    mut notifications: Vec<&Notification>,
    mut events: Vec<wit::Event>,
) -> Part {
    let plugin = &version.plugin;
    let limits = plugin.limits();
    let stats = plugin.stats();
    // Retries are bounded by `attempts`, so the delay needs no cap of its own.
    let mut backoff = Backoff::new(limits.retry_backoff, Duration::MAX);
    for round in 1..=limits.attempts.max(1) {
        let (share, call) = follower.begin();
        keep_owned(&share, &mut notifications, &mut events);
        if notifications.is_empty() {
            return Part::Delivered;
        }
        let started = SystemTime::now();
        let result = attempt(version, &events).await;
        plugin.observe(None, || CallRecord::Delivered {
            keys: notifications
                .iter()
                .map(|n| {
                    let object = n.object();
                    (
                        object.key().as_str().to_owned(),
                        object.resource_version_text().into_owned(),
                    )
                })
                .collect(),
            started,
            ended: SystemTime::now(),
            ok: result.is_ok(),
        });
        match result {
            Ok(()) => {
                PluginStats::add(&stats.events_delivered, events.len() as u64);
                if version.breaker.success() {
                    tracing::info!(
                        plugin = plugin.name(),
                        "plugin recovered; leaving quarantine"
                    );
                    set_policy(receivers, BufferPolicy::Unbounded);
                }
                return Part::Delivered;
            }
            Err(error) => {
                let error = bounded(&error.to_string());
                tracing::warn!(plugin = plugin.name(), round, events = events.len(), %error, "batch failed");
                plugin.observe(None, || CallRecord::Failed {
                    error: error.clone(),
                });
                if let Some(pause) = version.breaker.failure(&error) {
                    quarantine(plugin, receivers, pause, &error);
                    skip(plugin, &notifications);
                    return Part::Quarantined;
                }
                // The call and its bookkeeping are over; the back-off is no call in flight.
                drop(call);
                if round < limits.attempts {
                    tokio::select! {
                        () = tokio::time::sleep(backoff.next_delay()) => {}
                        () = follower.stopped() => {
                            tracing::debug!(plugin = plugin.name(), "deliveries stopped; the failed batch is not retried");
                            return Part::Stopped;
                        }
                    }
                }
            }
        }
    }
    skip(plugin, &notifications);
    Part::Skipped
}

fn skip(plugin: &Plugin, notifications: &[&Notification]) {
    PluginStats::add(&plugin.stats().batches_skipped, 1);
    tracing::error!(
        plugin = plugin.name(), events = notifications.len(),
        first = %notifications.first().map(|n| n.key().as_str()).unwrap_or(""),
        "skipping a batch the plugin keeps failing"
    );
}

/// Drops the notifications whose keys `share` does not own, and their converted events
/// (`events` is empty before the first conversion, and parallel to `notifications` after).
fn keep_owned(
    share: &KeyShare,
    notifications: &mut Vec<&Notification>,
    events: &mut Vec<wit::Event>,
) {
    if share.is_all() {
        return;
    }
    let owned: Vec<bool> = notifications
        .iter()
        .map(|n| share.owns(n.key().as_str()))
        .collect();
    if owned.iter().all(|&owned| owned) {
        return;
    }
    let mut flags = owned.iter();
    notifications.retain(|_| *flags.next().expect("one flag per notification"));
    if !events.is_empty() {
        let mut flags = owned.iter();
        events.retain(|_| *flags.next().expect("one flag per event"));
    }
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
