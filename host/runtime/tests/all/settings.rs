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
    assert!(matches!(error, LoadError::InitRefused { .. }), "{error:?}");
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
    let message = format!("{:#}", anyhow::Error::new(error));
    assert!(message.contains("noop.wasm: compile: "), "{message}");
    Ok(())
}

/// Issue 21: the C SDK's settings reader (compiled into every C plugin) reads each kind of
/// setting, skips other keys whatever their JSON, and refuses a wrong document naming the
/// key, the type it must have and where; the `settings-c` guest reports what it read in
/// its version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_c_sdk_reads_settings_of_every_kind_and_names_what_is_wrong() -> Result<()> {
    let runtime = runtime();
    let load = |settings: &'static str| {
        let runtime = runtime.clone();
        async move {
            let spec = spec(
                "settings-c",
                settings,
                BTreeMap::new(),
                Arc::new(NoCluster),
                Grants::default(),
                PluginLimits::default(),
            )?;
            anyhow::Ok(runtime.inspect(spec).await)
        }
    };
    for (settings, version) in [
        ("{}", "c7.n0.v0-g0"),
        (
            r#"{"greeting": "h\u00e9\"", "names": ["a", "b"], "count": -9223372036854775808,
                "verbose": true, "other": {"deep": [1, -2.5e3, null, true, "x"]}}"#,
            // h, é (two bytes) and the escaped quote.
            "c-9223372036854775808.n2.v1-g4",
        ),
        (r#" { "count" : 42 , "names" : [ ] } "#, "c42.n0.v0-g0"),
    ] {
        let description = load(settings).await??;
        assert_eq!(description.version, version, "{settings}");
    }
    for (settings, why) in [
        (r#"{"count": 1.5}"#, "count must be an integer at byte 10"),
        (
            r#"{"count": 9223372036854775808}"#,
            "count must be an integer within 64 bits",
        ),
        (r#"{"verbose": "yes"}"#, "verbose must be true or false"),
        (r#"{"greeting": 5}"#, "greeting must be a string"),
        (r#"{"names": ["a", 5]}"#, "names must be a list of strings"),
        (r#"{"names": "a"}"#, "names must be a list of strings"),
        (r#"{"count": 1, "count": 2}"#, "duplicate field count"),
        (r#"{"greeting": "a"} x"#, "trailing characters"),
        (r#"["a"]"#, "expected an object at byte 0"),
        (r#"{"greeting": "a""#, "expected ',' or '}'"),
    ] {
        let error = load(settings).await?.unwrap_err();
        assert!(
            matches!(error, LoadError::InitRefused { .. }),
            "{settings}: {error:?}"
        );
        let message = error.to_string();
        assert!(
            message.contains(&format!("invalid settings: {why}")),
            "{settings}: {message} should say {why:?}"
        );
    }
    Ok(())
}

/// The C SDK defines `handle_events`, `reconcile` and `map_event` weakly, so a C plugin
/// writes only the exports its mode calls: `settings-c` defines none of them, links, and
/// handles its events through the default (each batch taken, none failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_c_sdk_defines_the_exports_a_plugin_leaves_out() -> Result<()> {
    let server = MemoryServer::new();
    for name in ["a", "b", "c"] {
        let object = format!(
            r#"{{"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {{"namespace": "default", "name": "{name}"}}}}"#
        );
        server.create(&config_maps(), &object).unwrap();
    }
    let (informer, mut receivers) = informer(&server, config_maps(), 1);
    let caches = BTreeMap::from([(gvk(&config_maps()), informer.indexer().clone())]);
    let spec = spec(
        "settings-c",
        "{}",
        caches,
        Arc::new(NoCluster),
        Grants::default(),
        PluginLimits::default(),
    )?;
    let plugin = Arc::new(runtime().load(spec).await?);
    let driver = run_events(plugin.clone(), vec![receivers.remove(0)])?;
    until("the three ConfigMaps", Duration::from_secs(30), || {
        plugin.status().events_delivered == 3
    })
    .await?;
    let status = plugin.status();
    assert_eq!(
        (status.calls_failed, status.batches_skipped),
        (0, 0),
        "{:?}",
        status.last_error
    );
    informer.stop().await;
    driver.await?;
    Ok(())
}
