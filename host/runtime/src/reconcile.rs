//! Reconcile mode: events become keys in a rate-limited work queue; N workers, each with its
//! own instance, call `reconcile`.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kubeplug_informer::listener::{ListenerReceiver, Notification};
use kubeplug_policy::names::excerpt;
use kubeplug_workqueue::{Outcome, Queue, TokenBucket, Workers, run_workers};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::bindings::guest::ReconcileResult;
use crate::convert;
use crate::description::{Delivery, KeyMapping};
use crate::driver::{
    DriverControl, DriverError, Follower, SharedVersion, Version, check_receivers,
};
use crate::fault::Breaker;
use crate::gvk::Gvk;
pub use crate::mapped::MAX_MAPPED_KEYS;
use crate::mapped::{DroppedKeys, check_key};
use crate::observer::{CallRecord, ReconcileCall};
use crate::plugin::{Plugin, PluginInstance};
use crate::status::{PluginStats, bounded};
use crate::view::ObjectRef;

/// The shortest `requeue-after` taken as the plugin asks. A shorter one, 0 included, is a
/// requeue through the key's rate limiter ([`Outcome::Requeue`], controller-runtime's
/// `Requeue: true`: client-go's default limiter waits 5 ms, doubling with each requeue in a
/// row): `requeue-after(0)` otherwise called the plugin again at once, 270,000 times a
/// second.
pub const MIN_REQUEUE_AFTER: Duration = Duration::from_millis(100);

/// The running parts of a reconcile-mode plugin.
#[derive(Debug)]
pub struct Reconciler {
    /// The work queue (keys coalesce while they wait).
    pub queue: Queue<ObjectRef>,
    /// The workers.
    pub workers: Workers,
    /// One feeder per subscription, turning notifications into keys.
    pub feeders: Vec<JoinHandle<()>>,
}

/// Starts a reconcile-mode plugin that is never swapped. See [`drive_reconcile`].
pub fn run_reconcile(
    plugin: Arc<Plugin>,
    receivers: Vec<ListenerReceiver>,
    queue: Queue<ObjectRef>,
) -> Result<Reconciler, DriverError> {
    drive_reconcile(&DriverControl::new(plugin), receivers, queue)
}

/// Starts the reconcile-mode plugin `control` names: `receivers[i]` feeds `subscriptions[i]`
/// into `queue` (build it with the rate limiter and metrics the host wants), and
/// `Delivery::Reconcile { workers }` workers reconcile keys from it.
///
/// Contract:
/// - a notification enqueues the keys its subscription's [`KeyMapping`] gives (own key,
///   owner of a kind, or the plugin's `map-event`); a key waiting is not queued twice;
/// - no key is reconciled by two workers at once (the queue's guarantee); each worker has
///   its own instance, re-created after a fault;
/// - `done` forgets the key's back-off, `requeue-after` re-adds it after the delay, `error`
///   and faults re-add it rate-limited;
/// - after `max_consecutive_failures` failures in a row the plugin is quarantined: workers
///   wait out an exponential back-off before the next call (keys keep coalescing), or
///   until `control` stops, whichever comes first;
/// - calls are paced by the plugin's `reconciles` rate ([`PluginLimits`]): a worker waits
///   for its turn (or for the stop) before it calls;
/// - a `requeue-after` under [`MIN_REQUEUE_AFTER`] requeues the key rate-limited;
/// - of the keys one `map-event` call names, at most [`MAX_MAPPED_KEYS`] are taken, and
///   only those the plugin may reconcile (its types, names and namespaces an object can
///   have); the others are dropped, counted in `keys_refused` and logged at most once every
///   10 s per subscription;
/// - keys outside the control's [`KeyShare`](crate::KeyShare) are not enqueued, and a worker
///   that takes one forgets it without calling the plugin;
/// - a version swapped in through `control` maps the next batch and reconciles the next key
///   a worker takes; once `control` stops, feeders end and workers drop the keys they take
///   without calling the plugin (shut the queue down to end them).
pub fn drive_reconcile(
    control: &DriverControl,
    receivers: Vec<ListenerReceiver>,
    queue: Queue<ObjectRef>,
) -> Result<Reconciler, DriverError> {
    let plugin = control.current().ok_or(DriverError::Stopped)?;
    let description = plugin.description();
    let Delivery::Reconcile { workers } = description.delivery else {
        return Err(DriverError::WrongMode {
            plugin: plugin.name().to_owned(),
            expected: "reconcile",
            actual: description.delivery,
        });
    };
    check_receivers(&plugin, &receivers)?;
    let feeders = receivers
        .into_iter()
        .enumerate()
        .map(|(index, receiver)| {
            tokio::spawn(feed(control.follow(), index, receiver, queue.clone()))
        })
        .collect();
    let follower = control.follow();
    let shared: Arc<SharedVersion> = Arc::default();
    let rate = plugin.limits().reconciles;
    let pace = Arc::new(TokenBucket::new(rate.per_second, rate.burst));
    let workers = run_workers(&queue, workers, move |target: ObjectRef| {
        let current = follower.peek();
        let shared = shared.clone();
        let (share, call) = follower.begin();
        let stopped = follower.stopped();
        let pace = pace.clone();
        async move {
            let _call = call;
            match current {
                // Another replica owns the key now; its back-off stays here, forgotten.
                Some(_) if !share.owns_target(&target) => Outcome::Done,
                Some(plugin) => {
                    let version = shared.of(plugin);
                    // A quarantine pause lasts up to `quarantine_backoff_max`, and a turn
                    // of the rate as long as the keys queued ahead; a stop (the host
                    // shutting down or unloading the plugin) waits out neither.
                    tokio::pin!(stopped);
                    tokio::select! {
                        biased;
                        () = &mut stopped => return Outcome::Done,
                        () = version.breaker.wait() => {}
                    }
                    let turn = pace.reserve(Instant::now(), Duration::MAX);
                    if let Some(wait) = turn.filter(|wait| !wait.is_zero()) {
                        tokio::select! {
                            biased;
                            () = &mut stopped => return Outcome::Done,
                            () = tokio::time::sleep(wait) => {}
                        }
                    }
                    let span = tracing::debug_span!(
                        "reconcile",
                        plugin = version.plugin.name(),
                        key = %target
                    );
                    reconcile_one(&version, target).instrument(span).await
                }
                // Stopped: the host is discarding this queue.
                None => Outcome::Done,
            }
        }
    });
    Ok(Reconciler {
        queue,
        workers,
        feeders,
    })
}

/// The key of `object`'s owner of kind `owner` (group and kind compared). A namespaced owner
/// lives in its dependent's namespace (owner references never cross namespaces); a
/// cluster-scoped one has none.
fn owner_key(n: &Notification, owner: &Gvk, owner_namespaced: bool) -> Option<ObjectRef> {
    let object = n.object();
    object.owner_references().iter().find_map(|r| {
        let group = r.api_version().rsplit_once('/').map_or("", |(g, _)| g);
        (group == owner.group && r.kind() == owner.kind).then(|| ObjectRef {
            resource: owner.clone(),
            namespace: object
                .namespace()
                .filter(|_| owner_namespaced)
                .map(str::to_owned),
            name: r.name().to_owned(),
        })
    })
}

/// Turns one subscription's notifications into keys.
async fn feed(
    mut follower: Follower,
    index: usize,
    mut receiver: ListenerReceiver,
    queue: Queue<ObjectRef>,
) {
    // The instance `map-event` runs on, with the version it belongs to.
    let mut mapper: Option<(Arc<Plugin>, PluginInstance)> = None;
    let mut dropped = DroppedKeys::default();
    loop {
        let Some(plugin) = follower.current() else {
            return;
        };
        let next = tokio::select! {
            biased;
            () = follower.changed() => continue,
            next = receiver.recv_batch(plugin.limits().batch_size) => next,
        };
        let Some(batch) = next else {
            return;
        };
        let spec = &plugin.description().subscriptions[index];
        let share = follower.share();
        let add = |key: ObjectRef| {
            if share.owns_target(&key) {
                queue.add(key);
            }
        };
        // Notifications turned into keys (none, for an object without the owner asked for):
        // what reconcile mode delivers to the plugin.
        let mut delivered = 0;
        for n in batch.iter() {
            match &spec.enqueue {
                KeyMapping::OwnKey => {
                    add(ObjectRef {
                        resource: spec.resource.clone(),
                        namespace: n.object().namespace().map(str::to_owned),
                        name: n.object().name().to_owned(),
                    });
                    delivered += 1;
                }
                KeyMapping::Owner(owner) => {
                    let owner_namespaced = plugin.namespaced(owner).unwrap_or(true);
                    if let Some(key) = owner_key(n, owner, owner_namespaced) {
                        add(key);
                    }
                    delivered += 1;
                }
                KeyMapping::Computed => {
                    let budget = plugin.limits().max_memory;
                    let event = match convert::event(index as u32, spec, n, budget) {
                        Ok((event, _)) => event,
                        // It could never be lowered into the plugin's memory: a failure, as a
                        // trap in map-event would be, without building it first.
                        Err(too_large) => {
                            let error = format!(
                                "plugin {}: the event for {} needs {} bytes, more than its \
                                 memory limit (memory_limit_mib): not mapped",
                                plugin.name(),
                                n.key().as_str(),
                                too_large.bytes
                            );
                            plugin.stats().record_failure(&error);
                            tracing::warn!(plugin = plugin.name(), %error, "map-event skipped");
                            plugin.observe(None, || CallRecord::Failed { error });
                            continue;
                        }
                    };
                    if !mapper
                        .as_ref()
                        .is_some_and(|(p, _)| Arc::ptr_eq(p, &plugin))
                    {
                        mapper = None;
                        match plugin.instantiate().await {
                            Ok(i) => mapper = Some((plugin.clone(), i)),
                            Err(e) => {
                                tracing::warn!(plugin = plugin.name(), error = %e, "map-event: no instance");
                                plugin.observe(None, || CallRecord::Failed {
                                    error: e.to_string(),
                                });
                                continue;
                            }
                        }
                    }
                    let (_, live) = mapper.as_mut().expect("mapper was just made");
                    match live.map_event(&event).await {
                        Ok(keys) => {
                            let named = keys.len();
                            let mut refused = named.saturating_sub(MAX_MAPPED_KEYS);
                            let mut why = format!("past the first {MAX_MAPPED_KEYS} of one call");
                            let namespaced = |t: &Gvk| plugin.namespaced(t);
                            for key in keys.into_iter().take(MAX_MAPPED_KEYS) {
                                match check_key(plugin.description(), namespaced, key) {
                                    Ok(key) => add(key),
                                    Err(reason) => {
                                        refused += 1;
                                        why = reason.to_string();
                                    }
                                }
                            }
                            if refused > 0 {
                                let refused = refused as u64;
                                PluginStats::add(&plugin.stats().keys_refused, refused);
                                dropped.dropped(plugin.name(), refused, &why);
                            }
                            delivered += 1;
                        }
                        Err(e) => {
                            mapper = None;
                            plugin.stats().record_failure(&e.to_string());
                            tracing::warn!(plugin = plugin.name(), key = n.key().as_str(), error = %e, "map-event failed; event dropped");
                            plugin.observe(None, || CallRecord::Failed {
                                error: e.to_string(),
                            });
                        }
                    }
                }
            }
        }
        PluginStats::add(&plugin.stats().events_delivered, delivered);
    }
}

/// One `reconcile` call on a pooled instance, as a worker outcome. The observer is told
/// what the plugin answered; the outcome, with a `requeue-after` under
/// [`MIN_REQUEUE_AFTER`] made a [`Outcome::Requeue`], goes to a `debug` event "reconciled"
/// (fields `plugin`, `key`, `result`: `done`, `requeue-after` with `requeue_after_ms`,
/// `requeue`, or `error` with `error`) and to the queue.
async fn reconcile_one(version: &Version, target: ObjectRef) -> Outcome<String> {
    let plugin = version.plugin.name();
    let call = version.plugin.reconcile_call(&target);
    let started = SystemTime::now();
    let outcome = call_reconcile(version, &target, call.clone()).await;
    // About the call, not made in it: untagged, as for handle-events.
    version.plugin.observe(None, || CallRecord::Delivered {
        keys: vec![(target.key(), String::new())],
        started,
        ended: SystemTime::now(),
        ok: !matches!(outcome, Outcome::Error(_)),
    });
    version.plugin.observe(call, || CallRecord::Reconciled {
        outcome: outcome.clone(),
    });
    let outcome = match outcome {
        Outcome::RequeueAfter(delay) if delay < MIN_REQUEUE_AFTER => Outcome::Requeue,
        outcome => outcome,
    };
    match &outcome {
        Outcome::Done => tracing::debug!(plugin, key = %target, result = "done", "reconciled"),
        Outcome::RequeueAfter(delay) => tracing::debug!(
            plugin, key = %target, result = "requeue-after",
            requeue_after_ms = delay.as_millis() as u64, "reconciled"
        ),
        Outcome::Requeue => {
            tracing::debug!(plugin, key = %target, result = "requeue", "reconciled");
        }
        Outcome::Error(error) => {
            tracing::debug!(plugin, key = %target, result = "error", %error, "reconciled");
        }
    }
    outcome
}

async fn call_reconcile(
    version: &Version,
    target: &ObjectRef,
    call: Option<Arc<ReconcileCall>>,
) -> Outcome<String> {
    let (plugin, breaker) = (&version.plugin, &version.breaker);
    let mut instance = match version.take_instance().await {
        Ok(i) => i,
        Err(e) => return fail(plugin, breaker, e.to_string()),
    };
    PluginStats::add(&plugin.stats().reconciles, 1);
    match instance.observed_reconcile(target, call).await {
        Ok(result) => {
            version.put_instance(instance);
            match result {
                ReconcileResult::Done => {
                    breaker.success();
                    Outcome::Done
                }
                ReconcileResult::RequeueAfter(ms) => {
                    breaker.success();
                    Outcome::RequeueAfter(Duration::from_millis(ms))
                }
                ReconcileResult::Error(message) => fail(
                    plugin,
                    breaker,
                    format!(
                        "plugin {}: reconcile {target}: {}",
                        plugin.name(),
                        excerpt(&message)
                    ),
                ),
            }
        }
        // The instance is dropped: a trapped instance is never called again.
        Err(fault) => fail(plugin, breaker, bounded(&fault.to_string())),
    }
}

fn fail(plugin: &Plugin, breaker: &Breaker, error: String) -> Outcome<String> {
    if let Some(pause) = breaker.failure(&error) {
        tracing::error!(plugin = plugin.name(), ?pause, %error, "plugin quarantined");
    }
    Outcome::Error(error)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kubeplug_informer::object::ObjectDecoder;
    use kubeplug_informer::resource::Resource;

    use super::*;

    fn pod_owned_by(api_version: &str, kind: &str) -> Notification {
        let json = format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p","namespace":"ns","resourceVersion":"3","ownerReferences":[{{"apiVersion":"{api_version}","kind":"{kind}","name":"owner","uid":"u1","controller":true}}]}}}}"#
        );
        let decoder = ObjectDecoder::new(Resource::new("", "v1", "Pod", "pods", true));
        Notification::Add {
            object: Arc::new(decoder.decode(json.as_bytes()).unwrap()),
            in_initial_list: false,
        }
    }

    #[test]
    fn owner_keys_match_group_and_kind_in_any_version() {
        let replica_sets = Gvk::new("apps", "v1", "ReplicaSet");
        let n = pod_owned_by("apps/v1beta2", "ReplicaSet");
        let key = owner_key(&n, &replica_sets, true).unwrap();
        assert_eq!(key.key(), "ns/owner");
        assert_eq!(key.resource, replica_sets, "the key names the owner's type");
        assert_eq!(
            owner_key(&n, &Gvk::new("apps", "v1", "Deployment"), true),
            None
        );
        assert_eq!(
            owner_key(&pod_owned_by("v1", "ReplicaSet"), &replica_sets, true),
            None,
            "core group differs"
        );
    }

    #[test]
    fn a_cluster_scoped_owner_has_no_namespace() {
        let namespaces = Gvk::new("", "v1", "Namespace");
        let key = owner_key(&pod_owned_by("v1", "Namespace"), &namespaces, false).unwrap();
        assert_eq!(key.namespace, None);
        assert_eq!(key.key(), "owner");
    }
}
