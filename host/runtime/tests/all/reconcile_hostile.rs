//! Issue 44: what a reconcile-mode plugin returns is bounded and checked. Its `map-event`
//! keys are checked as a cache read's keys are and at most `MAX_MAPPED_KEYS` are taken per
//! call; a `requeue-after` under `MIN_REQUEUE_AFTER` goes through the key's rate limiter;
//! its reconciles are paced by its `reconciles` rate. Counted, never timed by the clock on
//! the wall: the rate test runs in paused time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use kubeplug_informer::informer::SharedIndexInformer;
use kubeplug_memory::MemoryServer;
use kubeplug_runtime::reconcile::{MAX_MAPPED_KEYS, Reconciler, run_reconcile};
use kubeplug_runtime::{Grants, ObjectRef, Plugin, PluginLimits, Rate};
use kubeplug_workqueue::Queue;

use crate::fixtures::*;

fn config_map(name: &str) -> String {
    format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}}}}"#)
}

/// hostile-reconcile with `settings` over one ConfigMap, `ns/a`, on a queue with client-go's
/// default rate limiter.
async fn start(
    settings: &str,
    limits: PluginLimits,
) -> Result<(
    SharedIndexInformer,
    Arc<Plugin>,
    Queue<ObjectRef>,
    Reconciler,
)> {
    let server = MemoryServer::new();
    server.create(&config_maps(), &config_map("a")).unwrap();
    let (informer, receivers) = informer(&server, config_maps(), 1);
    let caches = BTreeMap::from([(gvk(&config_maps()), informer.indexer().clone())]);
    let recorder = Arc::new(Recorder::default());
    let spec = spec(
        "hostile-reconcile",
        settings,
        caches,
        recorder,
        Grants::default(),
        limits,
    )?;
    let plugin = Arc::new(runtime().load(spec).await?);
    let queue: Queue<ObjectRef> = Queue::builder("hostile-reconcile").build();
    let reconciler = run_reconcile(plugin.clone(), receivers, queue.clone())?;
    Ok((informer, plugin, queue, reconciler))
}

async fn stop(informer: SharedIndexInformer, queue: Queue<ObjectRef>, reconciler: Reconciler) {
    queue.shut_down();
    reconciler.workers.abort();
    informer.stop().await;
}

/// Nine keys no object can have, or of types the plugin enqueues none of, are dropped and
/// counted; the ConfigMap's own key (and one without a namespace: the test cache does not
/// know whether ConfigMaps are namespaced) is reconciled. Before, all eleven were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn map_event_keys_the_plugin_may_not_reconcile_are_dropped() -> Result<()> {
    let (informer, plugin, queue, reconciler) =
        start(r#"{"keys": "invalid"}"#, PluginLimits::default()).await?;
    until("the event is mapped", Duration::from_secs(60), || {
        plugin.status().events_delivered == 1 && queue.is_empty()
    })
    .await?;
    until(
        "the valid keys are reconciled",
        Duration::from_secs(60),
        || counter(&plugin, "reconciles_total") >= 2,
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(plugin.status().keys_refused, 9);
    assert_eq!(counter(&plugin, "reconciles_total"), 2);
    stop(informer, queue, reconciler).await;
    Ok(())
}

/// 100,001 keys from one call: the first `MAX_MAPPED_KEYS` are reconciled, once each, and
/// the rest dropped and counted. Before, every one was reconciled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_map_event_call_gives_at_most_max_mapped_keys() -> Result<()> {
    let (informer, plugin, queue, reconciler) =
        start(r#"{"keys": "many"}"#, PluginLimits::default()).await?;
    until(
        "the mapped keys are reconciled",
        Duration::from_secs(60),
        || counter(&plugin, "reconciles_total") >= MAX_MAPPED_KEYS as u64 && queue.is_empty(),
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(counter(&plugin, "reconciles_total"), MAX_MAPPED_KEYS as u64);
    assert_eq!(
        plugin.status().keys_refused,
        100_001 - MAX_MAPPED_KEYS as u64
    );
    stop(informer, queue, reconciler).await;
    Ok(())
}

/// `requeue-after(0)` and `requeue-after(1)` are requeues through the key's rate limiter:
/// 5 ms, doubling, so one key is reconciled at most 9 times in its first 1.3 s however fast
/// the machine is, and the back-off is no failure. Before, the key was reconciled at once
/// again, hundreds of thousands of times a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_requeue_goes_through_the_keys_rate_limiter() -> Result<()> {
    for requeue_ms in [0, 1] {
        let settings = format!(r#"{{"requeue_ms": {requeue_ms}}}"#);
        let (informer, plugin, queue, reconciler) =
            start(&settings, PluginLimits::default()).await?;
        until("the key is reconciled", Duration::from_secs(60), || {
            counter(&plugin, "reconciles_total") >= 1
        })
        .await?;
        // 5 + 10 + ... + 640 ms = 1.275 s: eight requeues after the first call.
        tokio::time::sleep(Duration::from_millis(1275)).await;
        let reconciles = counter(&plugin, "reconciles_total");
        assert!(reconciles <= 9, "requeue-after({requeue_ms}): {reconciles}");
        assert_eq!(plugin.status().calls_failed, 0);
        stop(informer, queue, reconciler).await;
    }
    Ok(())
}

/// Reconciles are paced by the plugin's `reconciles` rate: with 10 a second in bursts of
/// 10, 30 calls take at least 2 s of (paused) time. Before, they took none.
#[tokio::test(start_paused = true)]
async fn reconciles_are_paced_by_the_plugins_rate() -> Result<()> {
    let limits = PluginLimits {
        reconciles: Rate {
            per_second: 10.0,
            burst: 10,
        },
        ..PluginLimits::default()
    };
    let (informer, plugin, queue, reconciler) = start(r#"{"keys": "many"}"#, limits).await?;
    let started = tokio::time::Instant::now();
    until("30 reconciles", Duration::from_secs(60), || {
        counter(&plugin, "reconciles_total") >= 30
    })
    .await?;
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(2), "{took:?}");
    stop(informer, queue, reconciler).await;
    Ok(())
}
