//! The limits the host's configuration sets on what a plugin chooses (issue 19, item 3):
//! its write rate, on tokio's paused clock (never wall-clock time); label-audit converging
//! over 1,000 unlabelled objects under the default rate; the resync floor; and the caps on
//! core instances, table elements and WASI resources, each shown refusing a real guest.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, ensure};
use kubeplug_informer::informer::SharedIndexInformer;
use kubeplug_memory::MemoryServer;
use kubeplug_runtime::events::run_events;
use kubeplug_runtime::{Grants, LoadError, Plugin, PluginLimits, WriteVerb};
use tokio::time::Instant;

use crate::fixtures::*;

fn flood_grants() -> Grants {
    Grants::default().allow_write(gvk(&pods()), WriteVerb::RecordEvent)
}

/// hostile-flood, asked for `writes` writes per call through `writer` under `limits`,
/// delivering from an informer on one Pod: the informer (stop it at the end) and the
/// plugin, its driver running.
async fn flooding(
    writes: u64,
    writer: Arc<dyn kubeplug_runtime::ClusterWriter>,
    limits: PluginLimits,
) -> Result<(
    SharedIndexInformer,
    Arc<Plugin>,
    tokio::task::JoinHandle<()>,
)> {
    let server = MemoryServer::new();
    server.create(&pods(), &pod("p", &[], &[])).unwrap();
    let (informer, mut receivers) = informer(&server, pods(), 1);
    let settings = serde_json::json!({ "writes": writes }).to_string();
    let spec = spec(
        "hostile-flood",
        &settings,
        BTreeMap::from([(gvk(&pods()), informer.indexer().clone())]),
        writer,
        flood_grants(),
        PluginLimits {
            attempts: 1,
            ..limits
        },
    )?;
    let plugin = Arc::new(runtime().load(spec).await?);
    let driver = run_events(plugin.clone(), vec![receivers.remove(0)])?;
    Ok((informer, plugin, driver))
}

/// How long (paused time) a flood of `writes` takes to be written under the default rate of
/// 20 a second in bursts of 30, and how many of them got through.
async fn flood(writes: u64) -> Result<(Duration, u64, u64)> {
    let recorder = Arc::new(Recorder::default());
    let started = Instant::now();
    let (informer, plugin, driver) =
        flooding(writes, recorder.clone(), PluginLimits::default()).await?;
    let settled = || {
        counter(&plugin, "written_total") + counter(&plugin, "refused_total") > 0
            && plugin.status().events_delivered + plugin.status().calls_failed > 0
    };
    while !settled() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let elapsed = started.elapsed();
    informer.stop().await;
    driver.await?;
    let written = recorder.writes.lock().unwrap().len() as u64;
    ensure!(written == counter(&plugin, "written_total"), "{written}");
    Ok((elapsed, written, counter(&plugin, "refused_total")))
}

/// 200 writes in one call: 30 at once, then one every 50 ms: 8.5 s of paused time, all
/// written. The wait does not count against the 1 s call deadline.
#[tokio::test(start_paused = true)]
async fn writes_over_the_rate_wait_for_it() -> Result<()> {
    let (elapsed, written, refused) = flood(200).await?;
    ensure!(
        written == 200 && refused == 0,
        "{written} written, {refused} refused"
    );
    ensure!(
        (Duration::from_millis(8500)..Duration::from_millis(8700)).contains(&elapsed),
        "{elapsed:?}"
    );
    Ok(())
}

/// 1,000 writes in one call: after 30 s of waiting in all (630 written: 30 at once, 600 at
/// the rate), the next write is refused with `unavailable`, and the plugin stops.
#[tokio::test(start_paused = true)]
async fn a_call_that_waited_30_s_for_its_rate_is_refused_further_writes() -> Result<()> {
    let (_, written, refused) = flood(1000).await?;
    ensure!(
        (629..=631).contains(&written) && refused == 1,
        "{written} written, {refused} refused"
    );
    Ok(())
}

/// label-audit records an Event for each of 1,000 unlabelled Pods under the default rate:
/// its batches of 64 wait at most 3.2 s each, far from the 30 s bound, and every object is
/// flagged, about 48 s of paused time after the start.
#[tokio::test(start_paused = true)]
async fn label_audit_converges_over_1000_unlabelled_objects_at_the_default_rate() -> Result<()> {
    let server = MemoryServer::new();
    for i in 0..1000 {
        server
            .create(&pods(), &pod(&format!("p{i}"), &[], &[]))
            .unwrap();
    }
    // label-audit subscribes to Deployments (none here), then Pods.
    let deployments =
        kubeplug_informer::resource::Resource::new("apps", "v1", "Deployment", "deployments", true);
    let (deployment_informer, mut deployment_receivers) = informer(&server, deployments.clone(), 1);
    let (informer, mut receivers) = informer(&server, pods(), 1);
    let recorder = Arc::new(Recorder::default());
    let path = xtask::Layout::from_manifest_dir()
        .output_dir()
        .join("label-audit.wasm");
    guest("label-audit")?;
    let spec = kubeplug_runtime::PluginSpec {
        bytes: std::fs::read(&path)?,
        path,
        settings: "{}".into(),
        grants: flood_grants()
            .allow_write(gvk(&deployments), WriteVerb::RecordEvent)
            .allow_read(gvk(&pods()))
            .allow_read(gvk(&deployments)),
        limits: PluginLimits::default(),
        cache: Arc::new(kubeplug_runtime::IndexerMap(BTreeMap::from([
            (gvk(&pods()), informer.indexer().clone()),
            (gvk(&deployments), deployment_informer.indexer().clone()),
        ]))),
        writer: recorder.clone(),
    };
    let plugin = Arc::new(runtime().load(spec).await?);
    let started = Instant::now();
    let driver = run_events(
        plugin.clone(),
        vec![deployment_receivers.remove(0), receivers.remove(0)],
    )?;
    while recorder.writes.lock().unwrap().len() < 1000 {
        ensure!(
            started.elapsed() < Duration::from_secs(120),
            "{} Events after 120 s",
            recorder.writes.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = started.elapsed();
    ensure!(
        (Duration::from_secs(48)..Duration::from_secs(50)).contains(&elapsed),
        "{elapsed:?}"
    );
    ensure!(plugin.status().calls_failed == 0, "{:?}", plugin.status());
    informer.stop().await;
    deployment_informer.stop().await;
    driver.await?;
    Ok(())
}

/// Core instances, table elements and WASI resources are capped per instance: with caps
/// below what a real guest needs, it cannot even start (with the defaults it can).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_tables_and_resources_are_capped() -> Result<()> {
    let runtime = runtime();
    let load = |limits: PluginLimits| {
        let runtime = runtime.clone();
        async move {
            let spec = spec(
                "label-reader",
                "{}",
                BTreeMap::new(),
                Arc::new(Recorder::default()),
                Grants::default().allow_read(gvk(&pods())),
                limits,
            )?;
            anyhow::Ok(runtime.load(spec).await)
        }
    };
    ensure!(load(PluginLimits::default()).await?.is_ok());
    for (what, limits) in [
        (
            "max_instances",
            PluginLimits {
                max_instances: 1,
                ..PluginLimits::default()
            },
        ),
        (
            "max_table_elements",
            PluginLimits {
                max_table_elements: 1,
                ..PluginLimits::default()
            },
        ),
    ] {
        let error = load(limits).await?.expect_err(what);
        ensure!(
            matches!(
                error,
                LoadError::StartFailed {
                    stage: "instantiate",
                    ..
                }
            ),
            "{what}: {error}"
        );
    }
    // A guest that prints holds WASI streams: with room for none, printing traps.
    let spec = spec(
        "sandbox-probe",
        "{}",
        BTreeMap::from([
            (
                kubeplug_runtime::Gvk::new("", "v1", "ConfigMap"),
                kubeplug_informer::indexer::new_indexer().1,
            ),
            (
                kubeplug_runtime::Gvk::new("", "v1", "Secret"),
                kubeplug_informer::indexer::new_indexer().1,
            ),
        ]),
        Arc::new(Recorder::default()),
        Grants::default().allow_read(kubeplug_runtime::Gvk::new("", "v1", "Secret")),
        PluginLimits {
            max_wasi_resources: 1,
            ..PluginLimits::default()
        },
    )?;
    let probe = runtime.load(spec).await?;
    let mut instance = probe.instantiate().await?;
    let target = kubeplug_runtime::ObjectRef {
        resource: kubeplug_runtime::Gvk::new("", "v1", "ConfigMap"),
        namespace: None,
        name: "print-1".to_owned(),
    };
    let error = instance.reconcile(&target).await.expect_err("no room");
    ensure!(error.to_string().contains("trapped"), "{error}");
    Ok(())
}

/// A plugin waiting for its write rate holds nothing of anyone else's: beside a flood that
/// waits 30 s (paused time) in its first call, a well-behaved plugin on the same informer
/// handles every notification at once, in order.
#[tokio::test(start_paused = true)]
async fn a_plugin_waiting_for_its_rate_does_not_slow_the_others() -> Result<()> {
    let server = MemoryServer::new();
    server.create(&pods(), &pod("p", &[], &[])).unwrap();
    let (informer, mut receivers) = informer(&server, pods(), 2);
    let caches = BTreeMap::from([(gvk(&pods()), informer.indexer().clone())]);
    let runtime = runtime();
    let flood = Arc::new(
        runtime
            .load(spec(
                "hostile-flood",
                r#"{"writes": 1000}"#,
                caches.clone(),
                Arc::new(Recorder::default()),
                flood_grants(),
                PluginLimits::default(),
            )?)
            .await?,
    );
    let good = load(
        &runtime,
        "label-reader",
        caches,
        Arc::new(Recorder::default()),
        Grants::default(),
        PluginLimits::default(),
    )
    .await?;
    let drivers = [
        run_events(flood.clone(), vec![receivers.remove(0)])?,
        run_events(good.clone(), vec![receivers.remove(0)])?,
    ];
    let started = Instant::now();
    for i in 0..40 {
        server
            .create(&pods(), &pod(&format!("q{i}"), &[("app", "web")], &[]))
            .unwrap();
    }
    while counter(&good, "events_total") < 41 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let handled_in = started.elapsed();
    ensure!(
        handled_in < Duration::from_secs(1),
        "the good plugin took {handled_in:?} of paused time"
    );
    ensure!(counter(&good, "out_of_order_total") == 0);
    ensure!(
        counter(&flood, "written_total") == 0 && counter(&flood, "refused_total") == 0,
        "the flood is still in its first call, waiting"
    );
    informer.stop().await;
    for driver in drivers {
        driver.abort();
    }
    Ok(())
}

/// A writer whose cluster never answers, as over a stalled connection.
struct Stalled;

impl kubeplug_runtime::ClusterWriter for Stalled {
    fn write<'a>(
        &'a self,
        _plugin: &'a str,
        _write: kubeplug_runtime::Write,
    ) -> kubeplug_runtime::view::BoxFuture<'a, Result<String, kubeplug_runtime::WriteError>> {
        Box::pin(std::future::pending())
    }
}

/// Issue 20: a write to a cluster that never answers ends with the call's deadline, so that
/// a stalled API server holds no plugin (nor a leader that lost its Lease) past it.
/// Regression: the call waited on the write for as long as the connection stalled.
#[tokio::test]
async fn a_write_the_cluster_never_answers_ends_with_the_calls_deadline() -> Result<()> {
    let started = std::time::Instant::now();
    let limits = PluginLimits {
        call_deadline: Duration::from_millis(500),
        ..PluginLimits::default()
    };
    let (informer, plugin, driver) = flooding(1, Arc::new(Stalled), limits).await?;
    // Its write answers `unavailable` at the deadline; the guest is interrupted right after.
    until("the call ends", Duration::from_secs(60), || {
        let status = plugin.status();
        status.calls_failed + status.events_delivered > 0
    })
    .await?;
    let elapsed = started.elapsed();
    ensure!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    informer.stop().await;
    driver.await?;
    Ok(())
}

/// Issue 20: a fenced plugin (its replica stopped leading) writes nothing more, even in a
/// call already in flight and waiting for its write rate: that wait gives up at once.
/// Regression: the call went on writing for up to 30 s after the fence was wanted.
#[tokio::test(start_paused = true)]
async fn a_fence_stops_the_writes_of_a_call_in_flight() -> Result<()> {
    let recorder = Arc::new(Recorder::default());
    let (informer, plugin, driver) =
        flooding(1000, recorder.clone(), PluginLimits::default()).await?;
    // 30 at once, then one every 50 ms: about 50 by now, the call waiting for the next
    // (between two of its writes, not at one).
    tokio::time::sleep(Duration::from_millis(1025)).await;
    plugin.fence_writes(true);
    let fenced = Instant::now();
    let written_before = recorder.writes.lock().unwrap().len();
    until("the call ends", Duration::from_secs(60), || {
        counter(&plugin, "refused_total") > 0
    })
    .await?;
    let written = recorder.writes.lock().unwrap().len();
    ensure!(
        (40..=60).contains(&written_before) && written == written_before,
        "{written_before} written before the fence, {written} in all"
    );
    ensure!(
        fenced.elapsed() < Duration::from_millis(100),
        "{:?}",
        fenced.elapsed()
    );
    informer.stop().await;
    driver.await?;
    Ok(())
}

/// Issue 44: what the host builds for one call is bounded by the plugin's memory before it
/// is built. hostile-projections asks for a 2 MB Pod's JSON, its old JSON and its spec 16
/// times over: 34 MB an add, 68 MB an update, which a 16 MiB plugin could never take. Each
/// event is refused unbuilt and the plugin told why, naming what it needs; label-reader
/// beside it receives every change. Before, the host built every copy (three such plugins
/// took it from 87 MB to 1.26 GB on one `kubectl label`), then the guest trapped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_larger_than_the_plugins_memory_is_refused_unbuilt() -> Result<()> {
    let server = MemoryServer::new();
    let big = |app: &str| {
        format!(
            r#"{{"metadata":{{"name":"big","namespace":"ns","labels":{{"app":"{app}"}}}},"spec":{{"pad":"{}"}}}}"#,
            "x".repeat(2 << 20)
        )
    };
    server.create(&pods(), &big("web")).unwrap();
    let (informer, mut receivers) = informer(&server, pods(), 2);
    let caches = BTreeMap::from([(gvk(&pods()), informer.indexer().clone())]);
    let runtime = runtime();
    let limits = PluginLimits {
        max_memory: 16 << 20,
        ..PluginLimits::default()
    };
    let hostile = load(
        &runtime,
        "hostile-projections",
        caches.clone(),
        Arc::new(Recorder::default()),
        Grants::default(),
        limits,
    )
    .await?;
    let good = load(
        &runtime,
        "label-reader",
        caches,
        Arc::new(Recorder::default()),
        Grants::default(),
        PluginLimits::default(),
    )
    .await?;
    let drivers = [
        run_events(hostile.clone(), vec![receivers.remove(0)])?,
        run_events(good.clone(), vec![receivers.remove(0)])?,
    ];
    server.update(&pods(), &big("db")).unwrap();
    until(
        "label-reader sees both changes",
        Duration::from_secs(60),
        || counter(&good, "events_total") == 2,
    )
    .await?;
    until(
        "hostile-projections is told twice",
        Duration::from_secs(60),
        || hostile.status().batches_skipped == 2,
    )
    .await?;
    let status = hostile.status();
    let error = status.last_error.clone().unwrap_or_default();
    ensure!(
        error.contains("the event for ns/big needs")
            && error.contains("more than its memory limit of 16 MiB"),
        "{error}"
    );
    ensure!(counter(&hostile, "events_total") == 0);
    ensure!(
        status.instances_created <= 1,
        "no call was made to fail: {status:?}"
    );
    informer.stop().await;
    for driver in drivers {
        driver.await?;
    }
    Ok(())
}
