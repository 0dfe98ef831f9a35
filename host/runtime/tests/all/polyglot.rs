//! Plugins in other languages, built by xtask's C, JavaScript and Python toolchains: the
//! ports of label-audit make exactly the writes the Rust original makes, refuse the same
//! settings and describe themselves the same way; crashloop-alert (JavaScript) keeps its
//! per-namespace gauge through the `metrics` interface; the SDKs read projected fields alike,
//! from events and, in reconcile mode, from the cache.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context, Result};
use kubeplug_informer::object::ObjectKey;
use kubeplug_informer::resource::Resource;
use kubeplug_memory::MemoryServer;
use kubeplug_runtime::events::run_events;
use kubeplug_runtime::reconcile::run_reconcile;
use kubeplug_runtime::status::MetricValue;
use kubeplug_runtime::view::EventSeverity;
use kubeplug_runtime::{
    ClusterWriter, Grants, IndexerMap, LoadError, ObjectRef, Plugin, PluginLimits, PluginSpec,
    Runtime, RuntimeConfig, Write, WriteVerb,
};
use kubeplug_workqueue::Queue;
use serde_json::{Value, json};

use crate::fixtures::*;

/// label-audit in every language, the Rust original first.
const LABEL_AUDITS: [&str; 4] = [
    "label-audit",
    "label-audit-c",
    "label-audit-js",
    "label-audit-py",
];

/// How long a plugin may take to handle what a test made happen.
const PATIENCE: Duration = Duration::from_secs(60);

fn deployments() -> Resource {
    Resource::new("apps", "v1", "Deployment", "deployments", true)
}

/// The component of example plugin `name` (`target/plugins`). The fixtures build every
/// plugin, examples included, once per test binary: asking for any guest waits for that.
fn example(name: &str) -> Result<PathBuf> {
    guest("noop")?;
    Ok(xtask::Layout::from_manifest_dir()
        .output_dir()
        .join(format!("{name}.wasm")))
}

/// A runtime whose compiled artefacts persist in `target/test-artefacts`, with every
/// example compiled into it first, once per test binary.
///
/// Cranelift in a debug build takes minutes for the 18 MB Python component and most of a
/// minute for a JavaScript one: compiled once and loaded from the cache afterwards (also by
/// later runs, for as long as the component's bytes stay the same), the tests stay quick.
fn cached_runtime() -> Result<Runtime> {
    static COMPILED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let compile_all = || {
        let cache = xtask::Layout::from_manifest_dir()
            .root
            .join("target")
            .join("test-artefacts");
        let runtime = cached_runtime_in(&cache).map_err(|e| format!("{e:#}"))?;
        for name in LABEL_AUDITS.into_iter().chain(["crashloop-alert"]) {
            let path = example(name).map_err(|e| format!("{e:#}"))?;
            let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            runtime
                .compile(&bytes)
                .map_err(|e| format!("compiling {}: {e}", path.display()))?;
        }
        Ok(cache)
    };
    // Compiling blocks this worker thread of the test's runtime; let it run other tasks.
    let cache = tokio::task::block_in_place(|| COMPILED.get_or_init(compile_all).clone())
        .map_err(anyhow::Error::msg)?;
    cached_runtime_in(&cache)
}

fn cached_runtime_in(cache: &Path) -> Result<Runtime> {
    Ok(Runtime::new(RuntimeConfig {
        artifact_cache: Some(cache.to_path_buf()),
        ..RuntimeConfig::default()
    })?)
}

async fn load_example(
    runtime: &Runtime,
    name: &str,
    settings: &str,
    caches: &IndexerMap,
    writer: Arc<dyn ClusterWriter>,
    grants: Grants,
) -> Result<Plugin, LoadError> {
    let path = example(name).unwrap_or_else(|e| panic!("{e:#}"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // It reads what the test gives it caches of.
    let grants = caches.0.keys().fold(grants, |grants, resource| {
        grants.allow_read(resource.clone())
    });
    runtime
        .load(PluginSpec {
            path,
            bytes,
            settings: settings.into(),
            grants,
            limits: PluginLimits {
                // A debug build of the host runs the Python interpreter's start-up slowly.
                call_deadline: Duration::from_secs(10),
                ..PluginLimits::default()
            },
            cache: Arc::new(caches.clone()),
            writer,
        })
        .await
}

/// An object of `kind` in namespace `ns` with `labels`.
fn object(kind: &str, ns: &str, name: &str, labels: &[(&str, &str)]) -> String {
    let labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Value::from(*v)))
        .collect();
    json!({
        "apiVersion": if kind == "Pod" { "v1" } else { "apps/v1" },
        "kind": kind,
        "metadata": {"name": name, "namespace": ns, "labels": labels, "uid": uid(ns, name)},
    })
    .to_string()
}

/// The uid of the test's object `ns/name`.
fn uid(ns: &str, name: &str) -> String {
    format!("uid-{ns}-{name}")
}

/// An Event a plugin recorded: regarding, its uid, severity, reason and message.
type Recorded = (ObjectRef, Option<String>, EventSeverity, String, String);

/// The Events a plugin recorded, sorted, since the two subscriptions' batches interleave in
/// no fixed order.
fn recorded(recorder: &Recorder) -> Vec<Recorded> {
    let mut events: Vec<_> = recorder
        .writes
        .lock()
        .unwrap()
        .iter()
        .map(|(_, write)| match write {
            Write::RecordEvent {
                regarding,
                regarding_uid,
                severity,
                reason,
                message,
                ..
            } => (
                regarding.clone(),
                regarding_uid.clone(),
                *severity,
                reason.clone(),
                message.clone(),
            ),
            other => panic!("label-audit made a write other than an Event: {other:?}"),
        })
        .collect();
    events.sort_by(|a, b| (&a.0, &a.3, &a.4).cmp(&(&b.0, &b.3, &b.4)));
    events
}

fn missing(kind: &Resource, ns: &str, name: &str, labels: &str) -> Recorded {
    (
        ObjectRef {
            resource: gvk(kind),
            namespace: Some(ns.to_owned()),
            name: name.to_owned(),
        },
        Some(uid(ns, name)),
        EventSeverity::Warning,
        "MissingLabels".to_owned(),
        format!("missing required labels: {labels}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_audit_behaves_the_same_in_every_language() -> Result<()> {
    let server = MemoryServer::new();
    let app = "app.kubernetes.io/name";
    server
        .create(
            &deployments(),
            &object("Deployment", "a", "web", &[(app, "web"), ("team", "x")]),
        )
        .unwrap();
    server
        .create(&deployments(), &object("Deployment", "a", "worker", &[]))
        .unwrap();
    server
        .create(&pods(), &object("Pod", "a", "web-1", &[(app, "web")]))
        .unwrap();
    server
        .create(&pods(), &object("Pod", "b", "worker-1", &[("team", "y")]))
        .unwrap();
    let (deploy_informer, mut deploy_rx) = informer(&server, deployments(), LABEL_AUDITS.len());
    let (pod_informer, mut pod_rx) = informer(&server, pods(), LABEL_AUDITS.len());
    let caches = IndexerMap(BTreeMap::from([
        (gvk(&deployments()), deploy_informer.indexer().clone()),
        (gvk(&pods()), pod_informer.indexer().clone()),
    ]));
    // Events on Pods are granted, on Deployments not: both paths of every port run. Reading
    // Pods is granted, so their Events carry the uid the cache holds.
    let grants = Grants::default()
        .allow_write(gvk(&pods()), WriteVerb::RecordEvent)
        .allow_read(gvk(&pods()));
    // Other keys and every kind of JSON value must be skipped, as serde skips them.
    let settings = r#"{"note": {"nested": [1, -2.5e3, null, true, false, "\u00e9\"\\"]},
                      "required_labels": ["app.kubernetes.io/name", "team"]}"#;
    let runtime = cached_runtime()?;
    let mut plugins = Vec::new();
    let mut drivers = Vec::new();
    for name in LABEL_AUDITS {
        let recorder = Arc::new(Recorder::default());
        let plugin = load_example(
            &runtime,
            name,
            settings,
            &caches,
            recorder.clone(),
            grants.clone(),
        )
        .await
        .with_context(|| format!("loading {name}"))?;
        let plugin = Arc::new(plugin);
        drivers.push(run_events(
            plugin.clone(),
            vec![deploy_rx.remove(0), pod_rx.remove(0)],
        )?);
        plugins.push((name, plugin, recorder));
    }

    // Every port describes itself as the original does, under its own name.
    let original = plugins[0].1.description().clone();
    assert_eq!(original.subscriptions.len(), 2);
    assert_eq!(original.writes.len(), 2);
    for (name, plugin, _) in &plugins {
        let mut description = plugin.description().clone();
        assert_eq!(description.name, *name, "describe() names the file");
        description.name = original.name.clone();
        assert_eq!(description, original, "{name} describes itself differently");
    }

    // Flagged in the initial list: Deployment a/worker (both labels), Pods a/web-1 and
    // b/worker-1 (one each).
    let wait_for = |events: u64, what: &'static str| {
        let plugins = &plugins;
        async move {
            for (name, plugin, _) in plugins {
                until(&format!("{name} to handle {what}"), PATIENCE, || {
                    plugin.status().events_delivered >= events
                })
                .await?;
            }
            anyhow::Ok(())
        }
    };
    wait_for(4, "the initial list").await?;

    // Live: a Pod arrives without labels, worker-1 gets its name label (nothing missing now),
    // the Deployment worker gets `team` (still flagged), a flagged Pod is deleted.
    server
        .create(&pods(), &object("Pod", "a", "bare", &[]))
        .unwrap();
    server
        .update(
            &pods(),
            &object("Pod", "b", "worker-1", &[("team", "y"), (app, "worker")]),
        )
        .unwrap();
    server
        .update(
            &deployments(),
            &object("Deployment", "a", "worker", &[("team", "z")]),
        )
        .unwrap();
    server
        .delete(&pods(), &ObjectKey::new(Some("a"), "bare"))
        .unwrap();
    wait_for(8, "the live changes").await?;

    // `bare` is deleted at once: by the time its Event is recorded the cache may no longer
    // hold it, so whether its uid was known is left out.
    let mut bare = missing(&pods(), "a", "bare", "app.kubernetes.io/name, team");
    bare.1 = None;
    let expected = vec![
        bare,
        missing(&pods(), "a", "web-1", "team"),
        missing(&pods(), "b", "worker-1", "app.kubernetes.io/name"),
    ];
    for (name, plugin, recorder) in &plugins {
        let status = plugin.status();
        let mut events = recorded(recorder);
        for event in &mut events {
            if event.0.name == "bare" {
                event.1 = None;
            }
        }
        assert_eq!(events, expected, "{name} recorded other Events");
        assert_eq!(status.events_delivered, 8, "{name}");
        assert_eq!(
            (status.calls_failed, status.batches_skipped),
            (0, 0),
            "{name}: a missing grant is logged, not a failure: {:?}",
            status.last_error
        );
        assert_eq!(
            status.denied, 2,
            "{name} tried to record an Event on Deployment a/worker twice, without a grant"
        );
    }

    deploy_informer.stop().await;
    pod_informer.stop().await;
    for driver in drivers {
        driver.await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_label_audit_refuses_the_same_settings() -> Result<()> {
    let runtime = cached_runtime()?;
    let caches = IndexerMap::default();
    for (settings, why) in [
        (r#"{"required_labels": []}"#, "required_labels is empty"),
        (r#"{"required_labels": ["a", 5]}"#, "invalid settings"),
        (r#"{"required_labels": "a"}"#, "invalid settings"),
        (r#"{"required_labels": ["a"]"#, "invalid settings"),
        (r#"["a"]"#, "invalid settings"),
    ] {
        for name in LABEL_AUDITS {
            let error = load_example(
                &runtime,
                name,
                settings,
                &caches,
                Arc::new(Recorder::default()),
                Grants::default(),
            )
            .await
            .err()
            .with_context(|| format!("{name} accepted the settings {settings}"))?;
            assert!(
                matches!(error, LoadError::InitRefused { .. }),
                "{name}, {settings}: {error:?}"
            );
            assert!(
                error.to_string().contains(why),
                "{name}, {settings}: {error}"
            );
        }
    }
    Ok(())
}

/// A Pod in namespace `ns` whose one container is waiting for `reason` (running when `None`).
fn pod_waiting(ns: &str, name: &str, reason: Option<&str>) -> String {
    let state = match reason {
        Some(reason) => json!({"waiting": {"reason": reason}}),
        None => json!({"running": {"startedAt": "2026-01-01T00:00:00Z"}}),
    };
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "status": {"containerStatuses": [{"name": "app", "restartCount": 3, "state": state}]},
    })
    .to_string()
}

/// crashloop-alert's gauge for `namespace`, if it set one.
fn gauge(plugin: &Plugin, namespace: &str) -> Option<f64> {
    let key = (
        "crashloop_pods".to_owned(),
        vec![("namespace".to_owned(), namespace.to_owned())],
    );
    match plugin.metrics().snapshot().get(&key) {
        Some(MetricValue::Gauge(value)) => Some(*value),
        Some(other) => panic!("crashloop_pods is not a gauge: {other:?}"),
        None => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashloop_alert_counts_crash_looping_pods_per_namespace() -> Result<()> {
    let server = MemoryServer::new();
    server
        .create(
            &pods(),
            &pod_waiting("a", "looping", Some("CrashLoopBackOff")),
        )
        .unwrap();
    server
        .create(
            &pods(),
            &pod_waiting("a", "pulling", Some("ContainerCreating")),
        )
        .unwrap();
    server
        .create(&pods(), &pod_waiting("b", "fine", None))
        .unwrap();
    let (informer, mut receivers) = informer(&server, pods(), 1);
    let caches = IndexerMap(BTreeMap::from([(gvk(&pods()), informer.indexer().clone())]));
    let runtime = cached_runtime()?;
    let plugin = Arc::new(
        load_example(
            &runtime,
            "crashloop-alert",
            "{}",
            &caches,
            Arc::new(Recorder::default()),
            Grants::default(),
        )
        .await?,
    );
    let description = plugin.description();
    let subscription = &description.subscriptions[0];
    assert!(
        !subscription.wants_object_json && subscription.projections[0].name == "statuses",
        "it reads the Pod's container statuses as a projection, not the whole JSON"
    );
    let driver = run_events(plugin.clone(), vec![receivers.remove(0)])?;
    let settled = |a: Option<f64>, b: Option<f64>| {
        let plugin = plugin.clone();
        async move {
            until(&format!("gauges a={a:?} b={b:?}"), PATIENCE, || {
                gauge(&plugin, "a") == a && gauge(&plugin, "b") == b
            })
            .await
        }
    };
    settled(Some(1.0), Some(0.0)).await?;

    // A second Pod starts crash-looping, in another namespace.
    server
        .update(&pods(), &pod_waiting("b", "fine", Some("CrashLoopBackOff")))
        .unwrap();
    settled(Some(1.0), Some(1.0)).await?;
    // The first recovers; the second is deleted.
    server
        .update(&pods(), &pod_waiting("a", "looping", None))
        .unwrap();
    settled(Some(0.0), Some(1.0)).await?;
    server
        .delete(&pods(), &ObjectKey::new(Some("b"), "fine"))
        .unwrap();
    settled(Some(0.0), Some(0.0)).await?;
    // Back into CrashLoopBackOff: counted again.
    server
        .update(
            &pods(),
            &pod_waiting("a", "looping", Some("CrashLoopBackOff")),
        )
        .unwrap();
    settled(Some(1.0), Some(0.0)).await?;

    let status = plugin.status();
    assert_eq!(status.events_delivered, 7);
    assert_eq!(status.calls_failed, 0, "{:?}", status.last_error);
    informer.stop().await;
    driver.await?;
    Ok(())
}

/// A Pod whose spec holds these fields (a field left `None` is absent).
fn pod_with_fields(name: &str, node: Value, policy: Option<&str>) -> String {
    let mut spec = json!({"nodeName": node, "schedulerName": "default-scheduler"});
    if let Some(policy) = policy {
        spec["restartPolicy"] = json!(policy);
    }
    json!({"metadata": {"name": name, "namespace": "ns"}, "spec": spec}).to_string()
}

fn counter(plugin: &Plugin, name: &str) -> Option<u64> {
    match plugin
        .metrics()
        .snapshot()
        .get(&(name.to_owned(), Vec::new()))
    {
        Some(MetricValue::Counter(n)) => Some(*n),
        Some(other) => panic!("{name} is not a counter: {other:?}"),
        None => None,
    }
}

/// Loads test guest `name` reading Pods from `caches`, with no settings.
async fn load_guest(runtime: &Runtime, name: &str, caches: &IndexerMap) -> Result<Arc<Plugin>> {
    let path = guest(name)?;
    let plugin = runtime
        .load(PluginSpec {
            bytes: std::fs::read(&path)?,
            path,
            settings: "{}".into(),
            grants: Grants::default().allow_read(gvk(&pods())),
            limits: PluginLimits {
                call_deadline: Duration::from_secs(10),
                ..PluginLimits::default()
            },
            cache: Arc::new(caches.clone()),
            writer: Arc::new(Recorder::default()),
        })
        .await
        .with_context(|| format!("loading {name}"))?;
    Ok(Arc::new(plugin))
}

/// The SDKs' projection readers: the Rust, C, JavaScript and Python ports of
/// fields-projected read the same three projected fields, typed, and count the same events
/// complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projected_fields_read_the_same_in_every_language() -> Result<()> {
    let server = MemoryServer::new();
    for (name, node, policy) in [
        ("complete", json!("node-1"), Some("Always")),
        ("no-policy", json!("node-1"), None),
        ("numeric-node", json!(7), Some("Never")),
    ] {
        server
            .create(&pods(), &pod_with_fields(name, node, policy))
            .unwrap();
    }
    let names = [
        "fields-projected",
        "fields-projected-c",
        "fields-projected-js",
        "fields-projected-py",
    ];
    let (informer, receivers) = informer(&server, pods(), names.len());
    let caches = IndexerMap(BTreeMap::from([(gvk(&pods()), informer.indexer().clone())]));
    let runtime = cached_runtime()?;
    let mut plugins = Vec::new();
    let mut drivers = Vec::new();
    for (name, rx) in names.into_iter().zip(receivers) {
        let plugin = load_guest(&runtime, name, &caches).await?;
        assert!(
            !plugin.description().subscriptions[0].wants_object_json,
            "{name} reads projections, not JSON"
        );
        drivers.push(run_events(plugin.clone(), vec![rx])?);
        plugins.push(plugin);
    }
    let counted = |n: u64| {
        let plugins = plugins.clone();
        async move {
            until(
                &format!("complete_total = {n} everywhere"),
                PATIENCE,
                || {
                    plugins
                        .iter()
                        .all(|p| counter(p, "complete_total") == Some(n))
                },
            )
            .await
        }
    };
    counted(1).await?;
    // The Pod without a restart policy gets one: its update is complete.
    server
        .update(
            &pods(),
            &pod_with_fields("no-policy", json!("node-2"), Some("Always")),
        )
        .unwrap();
    counted(2).await?;
    for driver in drivers {
        driver.abort();
    }
    informer.stop().await;
    Ok(())
}

/// projected-reconciler in every language, the Rust original first.
const PROJECTED_RECONCILERS: [&str; 4] = [
    "projected-reconciler",
    "projected-reconciler-c",
    "projected-reconciler-js",
    "projected-reconciler-py",
];

/// A Pod in namespace `ns` with this spec.
fn pod_spec(ns: &str, name: &str, spec: Value) -> String {
    json!({"metadata": {"name": name, "namespace": ns}, "spec": spec}).to_string()
}

/// What a projected-reconciler counted: the labels of each `reads_total` series.
fn reads(plugin: &Plugin) -> BTreeSet<BTreeMap<String, String>> {
    plugin
        .metrics()
        .snapshot()
        .into_keys()
        .filter(|(name, _)| name == "reads_total")
        .map(|(_, labels)| labels.into_iter().collect())
        .collect()
}

/// One reconcile's reading, as projected-reconciler renders it.
fn read(key: &str, got: &str, listed: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("key".to_owned(), key.to_owned()),
        ("got".to_owned(), got.to_owned()),
        ("listed".to_owned(), listed.to_owned()),
    ])
}

/// Reconcile mode, through the cache: the four ports of projected-reconciler read their
/// key's Pod with get-projected and its namespace's Pods with list-projected, and every one
/// reads the same typed values (string, integer, bool, null, absent, object), the same
/// namespace's Pods in key order, and nothing for a deleted Pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciles_read_projections_the_same_in_every_language() -> Result<()> {
    let server = MemoryServer::new();
    for (ns, name, spec) in [
        (
            "ns",
            "a",
            json!({"nodeName": "node-1", "restartPolicy": "Always", "priority": 5,
                   "enableServiceLinks": true, "overhead": null}),
        ),
        (
            "ns",
            "b",
            json!({"nodeName": 7, "priority": -3, "enableServiceLinks": false}),
        ),
        (
            "other",
            "c",
            json!({"nodeName": "node-2", "restartPolicy": "Never", "priority": 0,
                   "enableServiceLinks": true}),
        ),
    ] {
        server.create(&pods(), &pod_spec(ns, name, spec)).unwrap();
    }
    let (informer, receivers) = informer(&server, pods(), PROJECTED_RECONCILERS.len());
    // The first reconciles start from a full cache, so that every port lists the same Pods.
    informer.wait_for_sync().await;
    let caches = IndexerMap(BTreeMap::from([(gvk(&pods()), informer.indexer().clone())]));
    let runtime = cached_runtime()?;
    let mut plugins = Vec::new();
    let mut queues = Vec::new();
    let mut reconcilers = Vec::new();
    for (name, rx) in PROJECTED_RECONCILERS.into_iter().zip(receivers) {
        let plugin = load_guest(&runtime, name, &caches).await?;
        let queue = Queue::builder(name).build();
        reconcilers.push(run_reconcile(plugin.clone(), vec![rx], queue.clone())?);
        queues.push(queue);
        plugins.push((name, plugin));
    }
    let read_everywhere = |n: usize, what: &'static str| {
        let plugins = &plugins;
        async move {
            for (name, plugin) in plugins {
                until(&format!("{name} to read {what}"), PATIENCE, || {
                    reads(plugin).len() >= n
                })
                .await?;
            }
            anyhow::Ok(())
        }
    };
    read_everywhere(3, "the initial Pods").await?;

    // b gets a restart policy, another node and an object where null was; c goes.
    server
        .update(
            &pods(),
            &pod_spec(
                "ns",
                "b",
                json!({"nodeName": "node-3", "restartPolicy": "OnFailure", "priority": 1,
                       "enableServiceLinks": true, "overhead": {"cpu": "250m"}}),
            ),
        )
        .unwrap();
    server
        .delete(&pods(), &ObjectKey::new(Some("other"), "c"))
        .unwrap();
    read_everywhere(5, "the live changes").await?;

    let a = "node=text:node-1 policy=text:Always priority=integer:5 links=boolean:true \
             overhead=null";
    let b = "node=integer:7 policy=absent priority=integer:-3 links=boolean:false \
             overhead=absent";
    let b_now = "node=text:node-3 policy=text:OnFailure priority=integer:1 links=boolean:true \
                 overhead=other";
    let c = "node=text:node-2 policy=text:Never priority=integer:0 links=boolean:true \
             overhead=absent";
    let ns = format!("ns/a: {a}; ns/b: {b}");
    let expected = BTreeSet::from([
        read("ns/a", a, &ns),
        read("ns/b", b, &ns),
        read("other/c", c, &format!("other/c: {c}")),
        read("ns/b", b_now, &format!("ns/a: {a}; ns/b: {b_now}")),
        read("other/c", "none", ""),
    ]);
    for (name, plugin) in &plugins {
        assert_eq!(reads(plugin), expected, "{name} read other values");
        let status = plugin.status();
        assert_eq!(status.calls_failed, 0, "{name}: {:?}", status.last_error);
    }

    for queue in queues {
        queue.shut_down();
    }
    for reconciler in reconcilers {
        reconciler.workers.abort();
    }
    informer.stop().await;
    Ok(())
}
