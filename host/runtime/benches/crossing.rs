//! Measures what the runtime costs, in one process, against baselines run the same way:
//!
//! - per-event cost of delivering notifications from a listener into a no-op Rust plugin and
//!   into one that reads a label from typed metadata, against a native Rust closure that
//!   drains its own listener of the same informer; the ratio is native time / Wasm time
//!   (1.0 = as fast as native; the target is ≥ 0.8);
//! - memory per live instance, and instantiation time, with the on-demand and the pooling
//!   allocator;
//! - compile time of a component, cold and from the artefact cache.
//!
//! Sizes: `KUBEPLUG_BENCH_OBJECTS` (default 20000) Pods.

// A benchmark reports on stdout by design.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kubeplug_informer::informer::{HandlerOptions, SharedIndexInformer};
use kubeplug_informer::listener::ListenerReceiver;
use kubeplug_informer::memory::MemoryServer;
use kubeplug_informer::object::ObjectDecoder;
use kubeplug_informer::reflector::ReflectorConfig;
use kubeplug_informer::resource::Resource;
use kubeplug_runtime::events::run_events;
use kubeplug_runtime::{
    Allocator, CompileSource, Grants, Gvk, IndexerMap, NoCluster, Plugin, PluginLimits, PluginSpec,
    Runtime, RuntimeConfig,
};

fn pods() -> Resource {
    Resource::new("", "v1", "Pod", "pods", true)
}

/// A Pod of about 1 KB, with a few labels.
fn pod(i: usize) -> String {
    let app = if i.is_multiple_of(3) { "web" } else { "db" };
    format!(
        r#"{{"metadata":{{"name":"p{i}","namespace":"ns{}","uid":"u{i}","labels":{{"app":"{app}","tier":"t{}","team":"platform"}},"ownerReferences":[{{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs{}","uid":"rs-u{}","controller":true}}]}},"spec":{{"containers":[{{"name":"c","image":"registry.example.com/app:{i}","args":["--port=8080","--verbose"],"resources":{{"requests":{{"cpu":"100m","memory":"64Mi"}}}}}}],"nodeName":"node-{}"}},"status":{{"phase":"Running","podIP":"10.0.{}.{}"}}}}"#,
        i % 10,
        i % 4,
        i / 10,
        i / 10,
        i % 50,
        (i / 256) % 256,
        i % 256
    )
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn guest(name: &str) -> Result<Vec<u8>> {
    let layout = xtask::Layout::from_manifest_dir();
    let path = layout.test_output_dir().join(format!("{name}.wasm"));
    std::fs::read(&path).with_context(|| format!("reading {}", path.display()))
}

async fn load(
    runtime: &Runtime,
    name: &str,
    informer: &SharedIndexInformer,
) -> Result<Arc<Plugin>> {
    let caches = BTreeMap::from([(Gvk::new("", "v1", "Pod"), informer.indexer().clone())]);
    let plugin = runtime
        .load(PluginSpec {
            path: format!("target/test-plugins/{name}.wasm").into(),
            bytes: guest(name)?,
            settings: "{}".into(),
            grants: Grants::default(),
            limits: PluginLimits::default(),
            cache: Arc::new(IndexerMap(caches)),
            writer: Arc::new(NoCluster),
        })
        .await?;
    Ok(Arc::new(plugin))
}

/// Drains `rx` of `n` notifications with a native closure reading one label per event.
async fn drain_native(rx: &mut ListenerReceiver, n: usize) -> Duration {
    let started = Instant::now();
    let mut seen = 0;
    let mut web = 0u64;
    while seen < n {
        let batch = rx.recv_batch(64).await.expect("listener open");
        for notification in batch.iter() {
            if notification.object().label("app") == Some("web") {
                web += 1;
            }
        }
        seen += batch.len();
    }
    std::hint::black_box(web);
    started.elapsed()
}

/// Drains `rx` of `n` notifications into `plugin` (events mode, batches of 64).
async fn drain_plugin(plugin: Arc<Plugin>, rx: ListenerReceiver, n: u64) -> Result<Duration> {
    let started = Instant::now();
    let driver = run_events(plugin.clone(), vec![rx])?;
    while plugin.status().events_delivered < n {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let elapsed = started.elapsed();
    driver.abort();
    Ok(elapsed)
}

async fn crossing(objects: usize, allocator: Allocator) -> Result<()> {
    let server = MemoryServer::new();
    for i in 0..objects {
        server
            .create(&pods(), &pod(i))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    }
    let source = Arc::new(server.lister_watcher(pods(), None, None, None));
    let informer = SharedIndexInformer::new(
        source,
        ObjectDecoder::new(pods()),
        ReflectorConfig::default(),
    );
    // Three listeners on one informer; their buffers fill during the sync, then each is
    // drained in turn, so each handler is timed alone on the same notifications.
    let mut native_rx = informer.add_handler(HandlerOptions::default());
    let noop_rx = informer.add_handler(HandlerOptions::default());
    let label_rx = informer.add_handler(HandlerOptions::default());
    informer.start();
    informer.wait_for_sync().await;
    while native_rx.depth() < objects || label_rx.depth() < objects {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let runtime = Runtime::new(RuntimeConfig {
        allocator,
        ..RuntimeConfig::default()
    })?;
    let noop = load(&runtime, "noop", &informer).await?;
    let label = load(&runtime, "label-reader", &informer).await?;

    let native = drain_native(&mut native_rx, objects).await;
    let noop_time = drain_plugin(noop.clone(), noop_rx, objects as u64).await?;
    let label_time = drain_plugin(label.clone(), label_rx, objects as u64).await?;
    let per = |d: Duration| d.as_nanos() as f64 / objects as f64;
    println!(
        "per-event cost, {objects} Pods of ~{} bytes, batches of 64, {allocator:?} allocator:",
        pod(0).len()
    );
    println!(
        "  native closure (reads one label): {:8.0} ns/event",
        per(native)
    );
    println!(
        "  no-op Rust plugin:                {:8.0} ns/event   Wasm/native throughput ratio {:.3}",
        per(noop_time),
        native.as_secs_f64() / noop_time.as_secs_f64()
    );
    println!(
        "  label-reading Rust plugin:        {:8.0} ns/event   Wasm/native throughput ratio {:.3}",
        per(label_time),
        native.as_secs_f64() / label_time.as_secs_f64()
    );
    println!(
        "  of which inside the wasm call (lower, run, lift): no-op {:.0} ns/event, label-reading {:.0} ns/event",
        noop.status().call_nanos as f64 / objects as f64,
        label.status().call_nanos as f64 / objects as f64
    );
    informer.stop().await;
    Ok(())
}

async fn instances(allocator: Allocator, label: &str) -> Result<()> {
    const N: usize = 100;
    let runtime = Runtime::new(RuntimeConfig {
        allocator,
        ..RuntimeConfig::default()
    })?;
    let server = MemoryServer::new();
    let source = Arc::new(server.lister_watcher(pods(), None, None, None));
    let informer = SharedIndexInformer::new(
        source,
        ObjectDecoder::new(pods()),
        ReflectorConfig::default(),
    );
    let plugin = load(&runtime, "label-reader", &informer).await?;
    // Warm up (first instantiation touches lazily initialised engine state).
    drop(plugin.instantiate().await?);
    let before = rss_bytes();
    let started = Instant::now();
    let mut live = Vec::with_capacity(N);
    for _ in 0..N {
        live.push(plugin.instantiate().await?);
    }
    let elapsed = started.elapsed();
    let after = rss_bytes();
    println!(
        "  {label:<10} instantiate + init: {:6.1} µs each; RSS per live instance: {:6.1} KiB",
        elapsed.as_secs_f64() * 1e6 / N as f64,
        after.saturating_sub(before) as f64 / 1024.0 / N as f64
    );
    drop(live);
    Ok(())
}

fn compile_times() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let runtime = Runtime::new(RuntimeConfig {
        artifact_cache: Some(dir.path().join("artefacts")),
        ..RuntimeConfig::default()
    })?;
    println!("compile time (Cranelift), cold vs from the artefact cache:");
    for name in ["noop", "label-reader", "cache-querier"] {
        let bytes = guest(name)?;
        let started = Instant::now();
        let (_, source) = runtime.compile(&bytes).map_err(anyhow::Error::msg)?;
        let cold = started.elapsed();
        assert_eq!(source, CompileSource::Compiled);
        let started = Instant::now();
        let (_, source) = runtime.compile(&bytes).map_err(anyhow::Error::msg)?;
        let cached = started.elapsed();
        assert_eq!(source, CompileSource::Cached);
        println!(
            "  {name:<14} {:>4} KiB component: cold {:7.1} ms, cached {:5.2} ms",
            bytes.len() / 1024,
            cold.as_secs_f64() * 1e3,
            cached.as_secs_f64() * 1e3
        );
    }
    Ok(())
}

fn main() -> Result<()> {
    xtask::build_plugins(
        &xtask::Layout::from_manifest_dir(),
        &["noop".into(), "label-reader".into(), "cache-querier".into()],
    )?;
    let objects = std::env::var("KUBEPLUG_BENCH_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        crossing(objects, Allocator::OnDemand).await?;
        crossing(objects, Allocator::Pooling { instances: 16 }).await?;
        println!("instances of label-reader (100 live):");
        instances(Allocator::OnDemand, "on-demand").await?;
        instances(Allocator::Pooling { instances: 200 }, "pooling").await?;
        anyhow::Ok(())
    })?;
    compile_times()
}
