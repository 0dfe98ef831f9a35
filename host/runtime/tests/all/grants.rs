//! Grants: a write with a grant reaches the cluster writer; without it, it is refused with
//! `not-permitted`, counted, and never reaches the writer.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use kubeplug_memory::MemoryServer;
use kubeplug_runtime::events::run_events;
use kubeplug_runtime::view::Write;
use kubeplug_runtime::{Grants, PluginLimits, WriteVerb};

use crate::fixtures::*;

async fn run_with(grants: Grants) -> Result<(Arc<Recorder>, kubeplug_runtime::PluginStatus)> {
    let server = MemoryServer::new();
    server
        .create(&pods(), &pod("a", &[("app", "web")], &[]))
        .unwrap();
    let (informer, mut receivers) = informer(&server, pods(), 1);
    let recorder = Arc::new(Recorder::default());
    let limits = PluginLimits {
        attempts: 2,
        retry_backoff: Duration::from_millis(1),
        ..PluginLimits::default()
    };
    let runtime = runtime();
    let plugin = load(
        &runtime,
        "cache-querier",
        BTreeMap::from([(gvk(&pods()), informer.indexer().clone())]),
        recorder.clone(),
        grants,
        limits,
    )
    .await?;
    let driver = run_events(plugin.clone(), vec![receivers.remove(0)])?;
    until(
        "the batch to be handled or skipped",
        Duration::from_secs(30),
        || {
            let s = plugin.status();
            s.events_delivered + s.batches_skipped > 0
        },
    )
    .await?;
    informer.stop().await;
    driver.await?;
    Ok((recorder, plugin.status()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_write_reaches_the_cluster() -> Result<()> {
    let (recorder, status) =
        run_with(Grants::default().allow_write(observations(), WriteVerb::Create)).await?;
    assert_eq!(recorder.observations().len(), 1);
    assert_eq!(
        recorder.writes.lock().unwrap()[0].0,
        "cache-querier",
        "the writer is told who wrote"
    );
    assert_eq!(status.denied, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_without_grant_is_refused_and_counted() -> Result<()> {
    // A grant for another verb on the same type does not help.
    let (recorder, status) =
        run_with(Grants::default().allow_write(observations(), WriteVerb::Delete)).await?;
    assert!(
        recorder.writes.lock().unwrap().is_empty(),
        "nothing reached the cluster"
    );
    assert_eq!(status.denied, 2, "one refusal per attempt");
    assert_eq!(status.batches_skipped, 1);
    let error = status.last_error.unwrap();
    assert!(
        error.contains("no grant to create test.kubeplug.io/v1/Observation"),
        "the error names the verb and the resource: {error}"
    );
    Ok(())
}

/// Issue 19: the host's `--namespace` bounds writes: a plugin granted Events on Pods may not
/// record one about a Pod of another namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_outside_the_hosts_namespace_are_refused() -> Result<()> {
    let server = MemoryServer::new();
    server.create(&pods(), &pod("p", &[], &[])).unwrap();
    let (informer, mut receivers) = informer(&server, pods(), 1);
    let recorder = Arc::new(Recorder::default());
    let grants = Grants {
        namespace: Some("team-a".into()),
        ..Grants::default().allow_write(gvk(&pods()), WriteVerb::RecordEvent)
    };
    let spec = spec(
        "hostile-flood",
        r#"{"writes": 1}"#,
        BTreeMap::from([(gvk(&pods()), informer.indexer().clone())]),
        recorder.clone(),
        grants,
        PluginLimits {
            attempts: 1,
            ..PluginLimits::default()
        },
    )?;
    let plugin = Arc::new(runtime().load(spec).await?);
    let driver = run_events(plugin.clone(), vec![receivers.remove(0)])?;
    until("the write is tried", Duration::from_secs(30), || {
        counter(&plugin, "refused_total") + counter(&plugin, "written_total") > 0
    })
    .await?;
    assert_eq!(counter(&plugin, "refused_total"), 1, "the Pod is in `ns`");
    assert!(recorder.writes.lock().unwrap().is_empty());
    assert_eq!(plugin.status().denied, 1);
    informer.stop().await;
    driver.await?;
    Ok(())
}

/// An Event names its object's uid as the host's cache holds it (the plugin passes none),
/// for `kubectl describe`, which finds an object's Events by uid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_carries_the_uid_the_cache_holds() -> Result<()> {
    let server = MemoryServer::new();
    server.create(&pods(), &pod("p", &[], &[])).unwrap();
    let (informer, mut receivers) = informer(&server, pods(), 1);
    let recorder = Arc::new(Recorder::default());
    let spec = spec(
        "hostile-flood",
        r#"{"writes": 1}"#,
        BTreeMap::from([(gvk(&pods()), informer.indexer().clone())]),
        recorder.clone(),
        Grants::default().allow_write(gvk(&pods()), WriteVerb::RecordEvent),
        PluginLimits::default(),
    )?;
    let plugin = Arc::new(runtime().load(spec).await?);
    let driver = run_events(plugin.clone(), vec![receivers.remove(0)])?;
    until("the Event is written", Duration::from_secs(30), || {
        counter(&plugin, "written_total") > 0
    })
    .await?;
    let cached = informer.indexer().get("ns/p").expect("the Pod is cached");
    informer.stop().await;
    driver.await?;
    let writes = recorder.writes.lock().unwrap();
    let uid = match &writes[..] {
        [(_, Write::RecordEvent { regarding_uid, .. })] => regarding_uid.clone(),
        other => panic!("one Event expected: {other:?}"),
    };
    assert!(cached.uid().is_some(), "the memory server assigns uids");
    assert_eq!(uid.as_deref(), cached.uid());
    Ok(())
}
