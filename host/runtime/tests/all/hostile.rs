//! Hostile plugins, each its own guest, next to a well-behaved one on the same informer:
//! the host stays up, the good plugin gets every delivery in order, the offenders fail
//! cleanly, are quarantined and retried.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use kubeplug_informer::object::ObjectKey;
use kubeplug_memory::MemoryServer;
use kubeplug_runtime::events::run_events;
use kubeplug_runtime::{Grants, Plugin, PluginLimits, RunState, WriteVerb};

use crate::fixtures::*;

const HOSTILE: [&str; 7] = [
    "hostile-loop",
    "hostile-alloc",
    "hostile-panic",
    "hostile-output",
    "hostile-args",
    "hostile-sandbox",
    "hostile-paths",
];

/// What each hostile plugin is granted: nothing, but hostile-paths every write on Pods, so
/// that only the host's checks of names stand between it and other objects.
fn grants_of(name: &str) -> Grants {
    if name != "hostile-paths" {
        return Grants::default();
    }
    [
        WriteVerb::Apply,
        WriteVerb::Patch,
        WriteVerb::PatchStatus,
        WriteVerb::Create,
        WriteVerb::Delete,
        WriteVerb::RecordEvent,
    ]
    .into_iter()
    .fold(Grants::default(), |grants, verb| {
        grants.allow_write(gvk(&pods()), verb)
    })
}

/// Whose calls must fail (and so be quarantined); the others are contained but succeed.
fn fails(name: &str) -> bool {
    matches!(
        name,
        "hostile-loop" | "hostile-alloc" | "hostile-panic" | "hostile-output"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_plugins_are_contained_and_the_good_one_sees_everything() -> Result<()> {
    let server = MemoryServer::new();
    let (informer, mut receivers) = informer(&server, pods(), 1 + HOSTILE.len());
    let caches = BTreeMap::from([(gvk(&pods()), informer.indexer().clone())]);
    let recorder = Arc::new(Recorder::default());
    let runtime = runtime();
    let limits = PluginLimits {
        call_deadline: Duration::from_millis(300),
        attempts: 2,
        retry_backoff: Duration::from_millis(5),
        max_consecutive_failures: 3,
        quarantine_backoff: Duration::from_millis(100),
        quarantine_backoff_max: Duration::from_millis(400),
        ..PluginLimits::default()
    };
    let good = load(
        &runtime,
        "label-reader",
        caches.clone(),
        recorder.clone(),
        Grants::default(),
        PluginLimits::default(),
    )
    .await?;
    let mut drivers = vec![run_events(good.clone(), vec![receivers.remove(0)])?];
    let mut hostile: Vec<(&str, Arc<Plugin>)> = Vec::new();
    for name in HOSTILE {
        let plugin = load(
            &runtime,
            name,
            caches.clone(),
            recorder.clone(),
            grants_of(name),
            limits.clone(),
        )
        .await?;
        drivers.push(run_events(plugin.clone(), vec![receivers.remove(0)])?);
        hostile.push((name, plugin));
    }

    // 40 creates, 40 updates, 10 deletes, spread over time so that batches keep coming.
    let started = Instant::now();
    for i in 0..40u32 {
        let app = if i.is_multiple_of(2) { "web" } else { "db" };
        server
            .create(&pods(), &pod(&format!("p{i}"), &[("app", app)], &[]))
            .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for i in 0..40 {
        server
            .update(&pods(), &pod(&format!("p{i}"), &[("app", "web")], &[]))
            .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for i in 0..10 {
        server
            .delete(&pods(), &ObjectKey::new(Some("ns"), &format!("p{i}")))
            .unwrap();
    }
    until(
        "the good plugin to see all 90 notifications",
        Duration::from_secs(60),
        || counter(&good, "events_total") == 90,
    )
    .await?;
    let elapsed = started.elapsed();
    assert_eq!(
        counter(&good, "out_of_order_total"),
        0,
        "per-key order kept"
    );
    assert_eq!(counter(&good, "web_total"), 20 + 40 + 10);
    let status = good.status();
    assert_eq!(
        (status.calls_failed, status.batches_skipped, status.denied),
        (0, 0, 0)
    );
    eprintln!(
        "well-behaved plugin beside {} hostile ones: 90 notifications in {elapsed:?}",
        HOSTILE.len()
    );

    // Keep a trickle of changes so quarantined plugins have something to be retried on.
    for (name, plugin) in hostile.iter().filter(|(n, _)| fails(n)) {
        let mut i = 100;
        until(
            &format!("{name} to be quarantined and retried"),
            Duration::from_secs(60),
            || {
                i += 1;
                let _ = server.create(&pods(), &pod(&format!("p{i}"), &[], &[]));
                let s = plugin.status();
                s.quarantines >= 2 && s.instances_created >= 3
            },
        )
        .await?;
        let s = plugin.status();
        assert!(
            matches!(s.state, RunState::Quarantined { .. } | RunState::Running),
            "{name}: {s:?}"
        );
        assert!(s.batches_skipped >= 1, "{name}: {s:?}");
    }

    let status_of = |name: &str| hostile.iter().find(|(n, _)| *n == name).unwrap().1.status();
    let plugin_of = |name: &str| hostile.iter().find(|(n, _)| *n == name).unwrap().1.clone();
    let looped = status_of("hostile-loop");
    assert!(
        looped
            .last_error
            .as_deref()
            .unwrap()
            .contains("exceeded its 300ms deadline"),
        "{looped:?}"
    );
    let alloc = plugin_of("hostile-alloc");
    assert!(counter(&alloc, "alloc_refused_total") >= 1);
    // The trap after the cap refused to grow says so (issue 19: it read "unreachable").
    let trapped = status_of("hostile-alloc").last_error.unwrap_or_default();
    assert!(
        trapped.contains("memory cap of 64 MiB refused to grow it"),
        "{trapped}"
    );
    assert_eq!(
        counter(&alloc, "alloc_granted_total"),
        0,
        "1 GiB must never be granted"
    );
    assert!(
        status_of("hostile-panic")
            .last_error
            .unwrap()
            .contains("trapped")
    );
    let output = status_of("hostile-output");
    assert!(
        output
            .last_error
            .as_deref()
            .is_some_and(|e| e.len() < 8 << 10),
        "{:?}",
        output.last_error.map(|e| e.len())
    );

    let args = plugin_of("hostile-args");
    assert!(counter(&args, "host_errors_total") >= 14);
    assert_eq!(
        counter(&args, "host_accepted_total"),
        0,
        "invalid host calls must be refused"
    );
    assert_eq!(
        args.status().calls_failed,
        0,
        "invalid arguments are errors, not traps"
    );
    let sandbox = plugin_of("hostile-sandbox");
    assert!(counter(&sandbox, "blocked_total") >= 4);
    assert_eq!(
        counter(&sandbox, "escaped_total"),
        0,
        "file, env or socket access escaped"
    );
    // Issue 19: names, namespaces, types and bodies that would reach other objects.
    let paths = plugin_of("hostile-paths");
    assert!(counter(&paths, "invalid_total") >= 66);
    assert_eq!(counter(&paths, "accepted_total"), 0);
    assert_eq!(
        counter(&paths, "refused_otherwise_total"),
        0,
        "refused as invalid input, before grants or writers"
    );
    let reached: Vec<_> = recorder
        .writes
        .lock()
        .unwrap()
        .iter()
        .filter(|(plugin, _)| plugin == "hostile-paths")
        .cloned()
        .collect();
    assert!(reached.is_empty(), "{reached:?}");
    informer.stop().await;
    for driver in drivers {
        driver.await?;
    }
    Ok(())
}

/// What an instance reports holding is what wasmtime granted it: whole 64 KiB pages, within
/// the plugin's cap, the same for every fresh instance (the figure `benches/languages.rs`
/// prints beside RSS).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_reports_the_linear_memory_it_was_granted() -> Result<()> {
    let runtime = runtime();
    let limits = PluginLimits::default();
    let plugin = load(
        &runtime,
        "noop",
        BTreeMap::new(),
        Arc::new(Recorder::default()),
        Grants::default().allow_read(gvk(&pods())),
        limits.clone(),
    )
    .await?;
    let granted = plugin.instantiate().await?.linear_memory_bytes();
    assert!(
        granted > 0 && granted.is_multiple_of(64 << 10) && granted <= limits.max_memory,
        "{granted} bytes"
    );
    assert_eq!(plugin.instantiate().await?.linear_memory_bytes(), granted);
    Ok(())
}

/// hostile-secrets subscribes to Pods and declares a read of Secrets: without a grant for
/// Secrets it does not load (issue 19: a plugin's own description used to grant it its
/// reads); with one, it reads them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_not_granted_the_secrets_it_declares_does_not_load() -> Result<()> {
    let secrets = kubeplug_runtime::Gvk::new("", "v1", "Secret");
    let runtime = runtime();
    let caches = BTreeMap::from([
        (gvk(&pods()), kubeplug_informer::indexer::new_indexer().1),
        (secrets.clone(), kubeplug_informer::indexer::new_indexer().1),
    ]);
    let load_with = |grants: Grants| {
        let runtime = runtime.clone();
        let caches = caches.clone();
        async move {
            let spec = exact_spec(
                "hostile-secrets",
                "{}",
                caches,
                Arc::new(Recorder::default()),
                grants,
                PluginLimits::default(),
            )?;
            anyhow::Ok(runtime.load(spec).await)
        }
    };
    let pods_only = Grants::default().allow_read(gvk(&pods()));
    let refused = load_with(pods_only.clone())
        .await?
        .err()
        .context("loaded")?;
    assert!(
        matches!(&refused, kubeplug_runtime::LoadError::ReadsNotGranted { missing, .. } if *missing == [secrets.clone()]),
        "{refused}"
    );
    let plugin = load_with(pods_only.allow_read(secrets)).await??;
    assert_eq!(plugin.name(), "hostile-secrets");
    Ok(())
}
