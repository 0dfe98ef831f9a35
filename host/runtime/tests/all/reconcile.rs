//! Reconcile mode: done, requeue-after and error back-off, with N workers and never two at
//! once on one key.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use kubeplug_memory::MemoryServer;
use kubeplug_runtime::reconcile::{drive_reconcile, run_reconcile};
use kubeplug_runtime::{DriverControl, DriverError, Grants, ObjectRef, PluginLimits, WriteVerb};
use kubeplug_workqueue::{ItemExponential, Queue};

use crate::fixtures::*;

fn config_map(name: &str, mode: &str, generation: u32) -> String {
    format!(
        r#"{{"metadata":{{"name":"{name}","namespace":"ns","labels":{{"mode":"{mode}"}}}},"data":{{"g":"{generation}"}}}}"#
    )
}

fn target(name: &str) -> ObjectRef {
    ObjectRef {
        resource: gvk(&config_maps()),
        namespace: Some("ns".into()),
        name: name.into(),
    }
}

fn starts(recorder: &Recorder, key: &str) -> usize {
    recorder
        .observations()
        .iter()
        .filter(|o| o["key"] == key && o["phase"] == "start")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_error_backoff_and_one_worker_per_key() -> Result<()> {
    let server = MemoryServer::new();
    let names: Vec<String> = (0..8).map(|i| format!("ok-{i}")).collect();
    for name in &names {
        server
            .create(&config_maps(), &config_map(name, "ok", 0))
            .unwrap();
    }
    server
        .create(&config_maps(), &config_map("again", "requeue", 0))
        .unwrap();
    server
        .create(&config_maps(), &config_map("broken", "fail", 0))
        .unwrap();
    let (informer, receivers) = informer(&server, config_maps(), 1);
    let recorder = Arc::new(Recorder::default());
    let runtime = runtime();
    let limits = PluginLimits {
        max_consecutive_failures: u64::MAX,
        ..PluginLimits::default()
    };
    let plugin = load(
        &runtime,
        "reconciler",
        BTreeMap::from([(gvk(&config_maps()), informer.indexer().clone())]),
        recorder.clone(),
        Grants::default().allow_write(observations(), WriteVerb::Create),
        limits,
    )
    .await?;
    let queue: Queue<ObjectRef> = Queue::builder("reconciler")
        .rate_limiter(ItemExponential::new(
            Duration::from_millis(5),
            Duration::from_secs(1),
        ))
        .build();
    let reconciler = run_reconcile(plugin.clone(), receivers, queue.clone())?;

    // Churn the ok keys so that they are re-added while being reconciled.
    for generation in 1..=5 {
        for name in &names {
            server
                .update(&config_maps(), &config_map(name, "ok", generation))
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    until(
        "requeue-after and error back-off",
        Duration::from_secs(60),
        || starts(&recorder, "ns/again") >= 4 && queue.num_requeues(&target("broken")) >= 4,
    )
    .await?;
    until("every ok key reconciled", Duration::from_secs(60), || {
        names
            .iter()
            .all(|n| starts(&recorder, &format!("ns/{n}")) >= 1)
    })
    .await?;

    // Every notification reached the plugin as a key: 10 adds and 8 × 5 updates.
    until(
        "every event counted as delivered",
        Duration::from_secs(60),
        || plugin.status().events_delivered == 50,
    )
    .await?;
    assert_eq!(
        *recorder.overlaps.lock().unwrap(),
        0,
        "a key was reconciled by two workers at once"
    );
    assert_eq!(
        queue.num_requeues(&target("again")),
        0,
        "requeue-after is not a failure"
    );
    assert_eq!(queue.num_requeues(&target("ok-0")), 0);
    let status = plugin.status();
    assert!(status.calls_failed >= 4, "{status:?}");
    assert!(
        status
            .last_error
            .unwrap()
            .contains("ns/broken is labelled mode=fail")
    );
    assert!(
        status.instances_created <= 1 + 4,
        "one instance per worker, none lost: {}",
        status.instances_created
    );

    queue.shut_down();
    reconciler.workers.abort();
    informer.stop().await;
    Ok(())
}

/// Hot reload in reconcile mode: the queue and listeners stay, the next keys go to the new
/// version, an incompatible version is refused, and a stop ends the workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swapped_version_takes_the_next_keys() -> Result<()> {
    let server = MemoryServer::new();
    let names: Vec<String> = (0..4).map(|i| format!("ok-{i}")).collect();
    for name in &names {
        server
            .create(&config_maps(), &config_map(name, "ok", 0))
            .unwrap();
    }
    let (informer, receivers) = informer(&server, config_maps(), 1);
    let recorder = Arc::new(Recorder::default());
    let runtime = runtime();
    let caches = BTreeMap::from([(gvk(&config_maps()), informer.indexer().clone())]);
    let grants = Grants::default().allow_write(observations(), WriteVerb::Create);
    let version = || {
        load(
            &runtime,
            "reconciler",
            caches.clone(),
            recorder.clone(),
            grants.clone(),
            PluginLimits::default(),
        )
    };
    let (old, new) = (version().await?, version().await?);
    let control = DriverControl::new(old.clone());
    let queue: Queue<ObjectRef> = Queue::builder("swap").build();
    let reconciler = drive_reconcile(&control, receivers, queue.clone())?;
    until(
        "the first version reconciles",
        Duration::from_secs(60),
        || old.status().reconciles >= 4,
    )
    .await?;

    let reader = load(
        &runtime,
        "label-reader",
        BTreeMap::new(),
        recorder.clone(),
        Grants::default().allow_read(gvk(&pods())),
        PluginLimits::default(),
    )
    .await?;
    assert!(matches!(
        control.replace(reader),
        Err(DriverError::Incompatible {
            what: "subscriptions",
            ..
        })
    ));
    let replaced = control.replace(new.clone())?.expect("it was running");
    assert!(Arc::ptr_eq(&replaced, &old));
    let old_calls = old.status().reconciles;
    for name in &names {
        server
            .update(&config_maps(), &config_map(name, "ok", 1))
            .unwrap();
    }
    until(
        "the new version reconciles",
        Duration::from_secs(60),
        || new.status().reconciles >= 4,
    )
    .await?;
    assert!(
        old.status().reconciles <= old_calls + 2,
        "at most the calls in flight finish on the old version"
    );

    control.stop();
    queue.shut_down();
    reconciler.workers.join().await;
    for feeder in reconciler.feeders {
        feeder.await?;
    }
    informer.stop().await;
    drop((old, new, replaced));
    let live = runtime.live();
    assert_eq!((live.plugins, live.instances), (0, 0), "{live:?}");
    Ok(())
}

/// Issue 44: a stop ends a quarantine pause at once. A worker that took a key while the
/// plugin was quarantined waited out the whole pause before it looked at the stop (pauses
/// double up to `quarantine_backoff_max`, 5 minutes by default), and the host's shutdown
/// waited with it: 61 s against a 30 s shutdown timeout. Paused time: the join takes none.
#[tokio::test(start_paused = true)]
async fn a_stop_ends_a_quarantine_pause_at_once() -> Result<()> {
    let server = MemoryServer::new();
    for name in ["broken-1", "broken-2"] {
        server
            .create(&config_maps(), &config_map(name, "fail", 0))
            .unwrap();
    }
    let (informer, receivers) = informer(&server, config_maps(), 1);
    let pause = Duration::from_secs(256);
    let limits = PluginLimits {
        max_consecutive_failures: 1,
        quarantine_backoff: pause,
        quarantine_backoff_max: pause,
        ..PluginLimits::default()
    };
    let plugin = load(
        &runtime(),
        "reconciler",
        BTreeMap::from([(gvk(&config_maps()), informer.indexer().clone())]),
        Arc::new(Recorder::default()),
        Grants::default().allow_write(observations(), WriteVerb::Create),
        limits,
    )
    .await?;
    let queue: Queue<ObjectRef> = Queue::builder("quarantined")
        .rate_limiter(ItemExponential::new(
            Duration::from_millis(5),
            Duration::from_secs(1),
        ))
        .build();
    let control = DriverControl::new(plugin.clone());
    let reconciler = drive_reconcile(&control, receivers, queue.clone())?;
    until("quarantined", Duration::from_secs(60), || {
        plugin.status().quarantines >= 1
    })
    .await?;
    // The failed keys come back after their 5 ms back-off, and the workers that take them
    // wait in the pause.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let reconciles = plugin.status().reconciles;

    let stopping = tokio::time::Instant::now();
    control.stop();
    queue.shut_down();
    reconciler.workers.join().await;
    let waited = stopping.elapsed();
    assert!(
        waited < pause / 2,
        "the workers waited out the pause: {waited:?}"
    );
    assert_eq!(
        plugin.status().reconciles,
        reconciles,
        "no call after the stop"
    );
    for feeder in reconciler.feeders {
        feeder.await?;
    }
    informer.stop().await;
    Ok(())
}
