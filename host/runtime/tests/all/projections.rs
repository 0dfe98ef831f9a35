//! Projections: a subscription's named field paths, read out of each object by the host and
//! delivered with its events, so that a plugin reads fields without the object's JSON. And
//! the bounds on what a plugin may declare.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, ensure};
use kubeplug_informer::informer::{HandlerOptions, SharedIndexInformer};
use kubeplug_informer::object::ObjectKey;
use kubeplug_json::path::FieldPath;
use kubeplug_memory::MemoryServer;
use kubeplug_runtime::description::DescriptionBounds;
use kubeplug_runtime::events::run_events;
use kubeplug_runtime::{Grants, PluginLimits, WriteVerb};
use serde_json::{Value, json};

use crate::fixtures::*;

fn pod(name: &str, node: &str, images: &[&str]) -> String {
    let containers: Vec<Value> = images
        .iter()
        .enumerate()
        .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
        .collect();
    json!({
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"nodeName": node, "containers": containers, "priority": 5,
                 "enableServiceLinks": true, "overhead": null,
                 "activeDeadlineSeconds": 1.5e3},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    })
    .to_string()
}

fn grants() -> Grants {
    Grants::default().allow_write(observations(), WriteVerb::Create)
}

/// The field-reader's projections in [`projected_events`].
const PROJECTIONS: [(&str, &str); 8] = [
    ("node", "spec.nodeName"),
    ("images", "spec.containers[*].image"),
    ("conditions", "status.conditions[*]"),
    ("priority", "spec.priority"),
    ("links", "spec.enableServiceLinks"),
    ("overhead", "spec.overhead"),
    ("deadline", "spec.activeDeadlineSeconds"),
    ("missing", "spec.affinity.nodeAffinity"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_carry_projected_values_typed_and_no_json() -> Result<()> {
    projected_events(HandlerOptions::default()).await
}

/// The same events when the handler registered the paths with the informer, as the host
/// does for a subscription: the values were selected when each object was stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_carry_the_values_kept_with_the_stored_objects() -> Result<()> {
    let projections = PROJECTIONS
        .iter()
        .map(|(_, path)| FieldPath::parse(path))
        .collect::<Result<_, _>>()?;
    projected_events(HandlerOptions {
        projections,
        ..HandlerOptions::default()
    })
    .await
}

async fn projected_events(options: HandlerOptions) -> Result<()> {
    let server = MemoryServer::new();
    server
        .create(&pods(), &pod("a", "node-1", &["nginx:1", "envoy:2"]))
        .unwrap();
    let (informer, mut receivers) = informer_with(&server, pods(), 1, &options);
    let recorder = Arc::new(Recorder::default());
    let runtime = runtime();
    let settings = json!({ "projections": PROJECTIONS });
    let spec = spec(
        "field-reader",
        &settings.to_string(),
        BTreeMap::from([(gvk(&pods()), informer.indexer().clone())]),
        recorder.clone(),
        grants(),
        PluginLimits::default(),
    )?;
    let plugin = Arc::new(runtime.load(spec).await?);
    let driver = run_events(plugin.clone(), vec![receivers.remove(0)])?;
    until("the initial list", Duration::from_secs(30), || {
        recorder.observations().len() == 1
    })
    .await?;
    let kept = |informer: &SharedIndexInformer| {
        let stored = informer.indexer().get("ns/a").expect("stored");
        let path = FieldPath::parse(PROJECTIONS[0].1).expect("a path");
        stored.selected(&path).is_some()
    };
    assert_eq!(kept(&informer), !options.projections.is_empty());
    let added = &recorder.observations()[0];
    assert_eq!(added["change"], "Added");
    assert_eq!(added["has_json"], false, "{added}");
    assert_eq!(
        added["projected"],
        json!({
            "node": [{"text": "node-1"}],
            "images": [{"text": "nginx:1"}, {"text": "envoy:2"}],
            "conditions": [{"json": r#"{"status":"True","type":"Ready"}"#}],
            "priority": [{"integer": 5}],
            "links": [{"boolean": true}],
            "overhead": [{"null": null}],
            "deadline": [{"float": 1500.0}],
            "missing": [],
        }),
        "{added}"
    );
    assert_eq!(
        added["old_projected"],
        json!({}),
        "only updates carry old values"
    );
    assert_eq!(added["node"], "node-1", "the SDK's typed reader");

    server
        .update(&pods(), &pod("a", "node-2", &["nginx:1"]))
        .unwrap();
    until("the update", Duration::from_secs(30), || {
        recorder.observations().len() == 2
    })
    .await?;
    assert_eq!(kept(&informer), !options.projections.is_empty());
    let updated = &recorder.observations()[1];
    assert_eq!(updated["change"], "Updated");
    assert_eq!(updated["projected"]["node"], json!([{"text": "node-2"}]));
    assert_eq!(updated["projected"]["images"], json!([{"text": "nginx:1"}]));
    assert_eq!(
        updated["old_projected"]["node"],
        json!([{"text": "node-1"}])
    );
    assert_eq!(updated["old_node"], "node-1");

    server
        .delete(&pods(), &ObjectKey::new(Some("ns"), "a"))
        .unwrap();
    until("the deletion", Duration::from_secs(30), || {
        recorder.observations().len() == 3
    })
    .await?;
    let deleted = &recorder.observations()[2];
    assert_eq!(
        deleted["projected"]["node"],
        json!([{"text": "node-2"}]),
        "a deletion carries the last state's values"
    );
    driver.abort();
    informer.stop().await;
    Ok(())
}

/// What a hostile or careless plugin declares is bounded and checked at load, and the
/// refusal names the subscription, the projection and the field.
#[tokio::test]
async fn bad_projections_fail_the_load_naming_what_is_wrong() -> Result<()> {
    let runtime = runtime();
    let load = |projections: Value, limits: PluginLimits| {
        let runtime = &runtime;
        async move {
            let spec = spec(
                "field-reader",
                &json!({ "projections": projections }).to_string(),
                BTreeMap::new(),
                Arc::new(Recorder::default()),
                grants().allow_read(gvk(&pods())),
                limits,
            )?;
            let message = match runtime.load(spec).await {
                Ok(_) => "loaded".to_owned(),
                Err(error) => format!("{error:#}"),
            };
            anyhow::Ok(message)
        }
    };
    let many: Vec<Value> = (0..17)
        .map(|i| json!([format!("f{i}"), "spec.nodeName"]))
        .collect();
    let long = format!("spec.{}", "a".repeat(600));
    let cases = [
        (
            json!(many),
            "subscriptions[0].projections: 17 entries; at most 16 (max_projections)",
        ),
        (
            json!([["x", "spec..nodeName"]]),
            "subscriptions[0].projections[0].path: path segment 2 (\"\") must be a field name",
        ),
        (
            json!([["x", "spec.a"], ["x", "spec.b"]]),
            "subscriptions[0].projections[1].name: \"x\" is used twice",
        ),
        (
            json!([["a b", "spec.a"]]),
            "subscriptions[0].projections[0].name: \"a b\" is not 1 to 63 bytes",
        ),
        (
            json!([["x", long]]),
            "subscriptions[0].projections[0].path: 605 bytes; at most 512",
        ),
    ];
    for (projections, expected) in cases {
        let message = load(projections, PluginLimits::default()).await?;
        ensure!(message.contains(expected), "{message:?} lacks {expected:?}");
    }
    // The configuration's bound, not only the built-in one.
    let tight = PluginLimits {
        description: DescriptionBounds {
            projections: 1,
            ..DescriptionBounds::default()
        },
        ..PluginLimits::default()
    };
    let message = load(json!([["a", "spec.a"], ["b", "spec.b"]]), tight).await?;
    ensure!(
        message.contains("subscriptions[0].projections: 2 entries; at most 1 (max_projections)"),
        "{message}"
    );
    Ok(())
}

/// Loads `field-reader` on Pods with `cache_reads`, declaring that it reads Pods' bodies,
/// and waits for the event of `a`; returns what it recorded.
async fn cache_read_observation(server: &MemoryServer, cache_reads: Value) -> Result<Value> {
    let settings = json!({ "projections": [], "cache_reads": cache_reads, "read_bodies": true });
    observe_a(server, settings).await
}

/// Loads `field-reader` on Pods with `settings` and waits for the event of `a`; returns what
/// it recorded.
async fn observe_a(server: &MemoryServer, settings: Value) -> Result<Value> {
    let (informer, mut receivers) = informer(server, pods(), 1);
    let recorder = Arc::new(Recorder::default());
    let runtime = runtime();
    let spec = spec(
        "field-reader",
        &settings.to_string(),
        BTreeMap::from([(gvk(&pods()), informer.indexer().clone())]),
        recorder.clone(),
        grants().allow_read(gvk(&pods())),
        PluginLimits::default(),
    )?;
    let plugin = Arc::new(runtime.load(spec).await?);
    let driver = run_events(plugin.clone(), vec![receivers.remove(0)])?;
    until("the initial list", Duration::from_secs(30), || {
        recorder.observations().iter().any(|o| o["key"] == "ns/a")
    })
    .await?;
    driver.abort();
    informer.stop().await;
    let observations = recorder.observations();
    Ok(observations
        .into_iter()
        .find(|o| o["key"] == "ns/a")
        .expect("waited for it"))
}

/// A reconcile-style read through the cache asks for projections instead of JSON and gets
/// the same typed values an event carries, for one object and for a list, sorted by key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_reads_return_projected_values() -> Result<()> {
    let server = MemoryServer::new();
    server
        .create(&pods(), &pod("a", "node-1", &["nginx:1", "envoy:2"]))
        .unwrap();
    server.create(&pods(), &pod("b", "node-2", &[])).unwrap();
    let reads = json!([
        ["node", "spec.nodeName"],
        ["images", "spec.containers[*].image"],
        ["priority", "spec.priority"],
    ]);
    let observed = cache_read_observation(&server, reads).await?;
    assert_eq!(
        observed["cached"],
        json!({
            "key": "ns/a",
            "projected": {
                "node": [{"text": "node-1"}],
                "images": [{"text": "nginx:1"}, {"text": "envoy:2"}],
                "priority": [{"integer": 5}],
            },
            "node": "node-1",
        }),
        "{observed}"
    );
    assert_eq!(
        observed["listed"],
        json!([
            {"key": "ns/a", "projected": {
                "node": [{"text": "node-1"}],
                "images": [{"text": "nginx:1"}, {"text": "envoy:2"}],
                "priority": [{"integer": 5}],
            }},
            {"key": "ns/b", "projected": {
                "node": [{"text": "node-2"}],
                "images": [],
                "priority": [{"integer": 5}],
            }},
        ]),
        "{observed}"
    );
    Ok(())
}

/// The projections a cache read asks for are checked like a subscription's, per call: a
/// hostile list is `invalid-input` naming the entry, and the plugin goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_cache_read_projections_are_invalid_input() -> Result<()> {
    let server = MemoryServer::new();
    server
        .create(&pods(), &pod("a", "node-1", &["nginx:1"]))
        .unwrap();
    let many: Vec<Value> = (0..17)
        .map(|i| json!([format!("f{i}"), "spec.nodeName"]))
        .collect();
    let cases = [
        (
            json!(many),
            "invalid input: projections: 17 entries; at most 16 (max_projections)",
        ),
        (
            json!([["x", "spec..nodeName"]]),
            "invalid input: projections[0].path: path segment 2 (\"\") must be a field name",
        ),
        (
            json!([["x", "spec.a"], ["x", "spec.b"]]),
            "invalid input: projections[1].name: \"x\" is used twice",
        ),
        (
            json!([["", "spec.a"]]),
            "invalid input: projections[0].name: \"\" is not 1 to 63 bytes",
        ),
    ];
    for (reads, expected) in cases {
        let observed = cache_read_observation(&server, reads).await?;
        expect_refusals(&observed, expected)?;
    }
    Ok(())
}

fn expect_refusals(observed: &Value, expected: &str) -> Result<()> {
    for call in ["cached", "listed"] {
        let error = observed[call]["error"].as_str().unwrap_or_default();
        ensure!(
            error.contains(expected),
            "{call}: {error:?} lacks {expected:?}"
        );
    }
    Ok(())
}

/// A plugin that never said it reads Pods' bodies (no JSON, no projection, no `path` index on
/// them, no read with `wants-object-json`) reads their metadata only: a projected read is
/// refused, so that the host may keep such a type without bodies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projected_cache_reads_need_a_declared_body_read() -> Result<()> {
    let server = MemoryServer::new();
    server
        .create(&pods(), &pod("a", "node-1", &["nginx:1"]))
        .unwrap();
    let reads = json!([["node", "spec.nodeName"]]);
    let settings = json!({ "projections": [], "cache_reads": reads, "read_bodies": false });
    let observed = observe_a(&server, settings).await?;
    expect_refusals(
        &observed,
        "not permitted: plugin field-reader reads v1/Pod without bodies",
    )?;
    // A subscription's own projections are enough.
    let settings = json!({ "projections": [["node", "spec.nodeName"]], "cache_reads": reads });
    let observed = observe_a(&server, settings).await?;
    assert_eq!(observed["cached"]["node"], "node-1", "{observed}");
    Ok(())
}
