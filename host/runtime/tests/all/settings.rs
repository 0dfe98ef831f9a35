//! Settings reach the plugin at load (`init`), and a load that fails names file and stage.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use kubeplug_memory::MemoryServer;
use kubeplug_runtime::events::run_events;
use kubeplug_runtime::{Grants, LoadError, NoCluster, PluginLimits};

use crate::fixtures::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_change_behaviour_without_a_recompile() -> Result<()> {
    let server = MemoryServer::new();
    server
        .create(&pods(), &pod("a", &[("tier", "front")], &[]))
        .unwrap();
    server
        .create(&pods(), &pod("b", &[("tier", "back")], &[]))
        .unwrap();
    let (informer, mut receivers) = informer(&server, pods(), 1);
    let caches = BTreeMap::from([(gvk(&pods()), informer.indexer().clone())]);
    let settings = r#"{"label": "tier", "value": "front"}"#;
    let spec = spec(
        "label-reader",
        settings,
        caches,
        Arc::new(NoCluster),
        Grants::default(),
        PluginLimits::default(),
    )?;
    let plugin = Arc::new(runtime().load(spec).await?);
    let driver = run_events(plugin.clone(), vec![receivers.remove(0)])?;
    until("both pods", Duration::from_secs(30), || {
        counter(&plugin, "events_total") == 2
    })
    .await?;
    assert_eq!(counter(&plugin, "web_total"), 1, "only tier=front matched");
    informer.stop().await;
    driver.await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_settings_fail_the_load_naming_file_and_stage() -> Result<()> {
    let spec = spec(
        "label-reader",
        r#"{"label": 5}"#,
        BTreeMap::new(),
        Arc::new(NoCluster),
        Grants::default(),
        PluginLimits::default(),
    )?;
    let error = runtime().load(spec).await.unwrap_err();
    assert!(
        matches!(error, LoadError::StartFailed { stage: "init", .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("label-reader.wasm: init: settings: label must be a string"),
        "{message}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_is_not_a_component_fails_at_compile() -> Result<()> {
    let mut spec = spec(
        "noop",
        "{}",
        BTreeMap::new(),
        Arc::new(NoCluster),
        Grants::default(),
        PluginLimits::default(),
    )?;
    spec.bytes.truncate(spec.bytes.len() / 2);
    let error = runtime().load(spec).await.unwrap_err();
    assert!(
        matches!(error, LoadError::CompileFailed { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("noop.wasm: compile:"), "{error}");
    Ok(())
}
