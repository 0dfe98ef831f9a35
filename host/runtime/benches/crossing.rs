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
//! Each figure is the median of `KUBEPLUG_BENCH_REPETITIONS` runs (default 5) after a
//! warm-up; sizes: `KUBEPLUG_BENCH_OBJECTS` (default 20000) Pods per run,
//! `KUBEPLUG_BENCH_INSTANCES` (default 100) live instances. JSON figures `crossing.*`; the
//! per-event ones carry their ratio against `crossing.native.per_event`. Run with
//! `cargo xtask bench crossing`; `cargo test` runs it at tiny sizes so it cannot rot.

// A benchmark reports on stdout by design.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kubeplug_bench_support::{Figure, Run, median, peak_rss_bytes, rss_bytes};
use kubeplug_informer::informer::{HandlerOptions, SharedIndexInformer};
use kubeplug_informer::listener::ListenerReceiver;
use kubeplug_informer::object::ObjectDecoder;
use kubeplug_informer::reflector::ReflectorConfig;
use kubeplug_informer::resource::Resource;
use kubeplug_memory::MemoryServer;
use kubeplug_runtime::events::run_events;
use kubeplug_runtime::{
    Allocator, CompileSource, Grants, Gvk, IndexerMap, NoCluster, Plugin, PluginLimits, PluginSpec,
    Runtime, RuntimeConfig,
};

fn pods() -> Resource {
    Resource::new("", "v1", "Pod", "pods", true)
}

/// A Pod of about 450 bytes, with a few labels.
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
            grants: Grants::default().allow_read(Gvk::new("", "v1", "Pod")),
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

/// Per-event nanoseconds of one run: the native closure, the no-op plugin, the label-reading
/// plugin, and the part of each plugin's time spent inside its Wasm calls.
struct CrossingRun {
    native: f64,
    noop: f64,
    label: f64,
    noop_in_call: f64,
    label_in_call: f64,
}

async fn crossing(objects: usize, allocator: Allocator) -> Result<CrossingRun> {
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
    let label = load(&runtime, "label-only", &informer).await?;

    let native = drain_native(&mut native_rx, objects).await;
    let noop_time = drain_plugin(noop.clone(), noop_rx, objects as u64).await?;
    let label_time = drain_plugin(label.clone(), label_rx, objects as u64).await?;
    informer.stop().await;
    let per = |d: Duration| d.as_nanos() as f64 / objects as f64;
    Ok(CrossingRun {
        native: per(native),
        noop: per(noop_time),
        label: per(label_time),
        noop_in_call: noop.status().call_nanos as f64 / objects as f64,
        label_in_call: label.status().call_nanos as f64 / objects as f64,
    })
}

/// The per-event figures of `runs` under `prefix`; speeds are compared as throughputs, so the
/// ratio is native time / Wasm time.
fn crossing_figures(prefix: &str, runs: &[CrossingRun]) -> Vec<Figure> {
    let m = |pick: fn(&CrossingRun) -> f64| median(runs.iter().map(pick).collect());
    let native = m(|r| r.native);
    let baseline = format!("{prefix}.native.per_event");
    let plugin = |name: &str, ns: f64| {
        Figure::new(format!("{prefix}.{name}.per_event"), ns, "ns").against(&baseline, native / ns)
    };
    let noop = m(|r| r.noop);
    vec![
        Figure::new(&baseline, native, "ns"),
        plugin("noop", noop),
        Figure::new(
            format!("{prefix}.noop.events_per_second"),
            1e9 / noop,
            "events/s",
        ),
        plugin("label", m(|r| r.label)),
        Figure::new(
            format!("{prefix}.noop.per_event_in_call"),
            m(|r| r.noop_in_call),
            "ns",
        ),
        Figure::new(
            format!("{prefix}.label.per_event_in_call"),
            m(|r| r.label_in_call),
            "ns",
        ),
    ]
}

async fn instances(allocator: Allocator, label: &str, n: usize) -> Result<Vec<Figure>> {
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
    let plugin = load(&runtime, "label-only", &informer).await?;
    // Warm up (first instantiation touches lazily initialised engine state).
    drop(plugin.instantiate().await?);
    let before = rss_bytes();
    let started = Instant::now();
    let mut live = Vec::with_capacity(n);
    for _ in 0..n {
        live.push(plugin.instantiate().await?);
    }
    let elapsed = started.elapsed();
    let after = rss_bytes();
    drop(live);
    Ok(vec![
        Figure::new(
            format!("crossing.{label}.instantiate"),
            elapsed.as_secs_f64() * 1e6 / n as f64,
            "µs",
        ),
        Figure::new(
            format!("crossing.{label}.rss_per_instance"),
            after.saturating_sub(before) as f64 / n as f64,
            "bytes",
        ),
    ])
}

fn compile_times() -> Result<Vec<Figure>> {
    let dir = tempfile::tempdir()?;
    let runtime = Runtime::new(RuntimeConfig {
        artifact_cache: Some(dir.path().join("artefacts")),
        ..RuntimeConfig::default()
    })?;
    let mut figures = Vec::new();
    for name in ["noop", "label-only", "cache-querier"] {
        let bytes = guest(name)?;
        let started = Instant::now();
        let (_, source) = runtime.compile(&bytes)?;
        let cold = started.elapsed();
        assert_eq!(source, CompileSource::Compiled);
        let started = Instant::now();
        let (_, source) = runtime.compile(&bytes)?;
        let cached = started.elapsed();
        assert_eq!(source, CompileSource::Cached);
        let name = name.replace('-', "_");
        figures.push(Figure::new(
            format!("crossing.{name}.compile_cold"),
            cold.as_secs_f64() * 1e3,
            "ms",
        ));
        figures.push(Figure::new(
            format!("crossing.{name}.compile_cached"),
            cached.as_secs_f64() * 1e3,
            "ms",
        ));
    }
    Ok(figures)
}

fn main() -> Result<()> {
    xtask::build_plugins(
        &xtask::Layout::from_manifest_dir(),
        &["noop".into(), "label-only".into(), "cache-querier".into()],
    )?;
    let run = Run::from_args();
    let objects = run.size("KUBEPLUG_BENCH_OBJECTS", 20_000, 64);
    let instance_count = run.size("KUBEPLUG_BENCH_INSTANCES", 100, 2);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut figures = rt.block_on(async {
        let mut figures = Vec::new();
        for (prefix, allocator) in [
            ("crossing", Allocator::OnDemand),
            ("crossing.pooling", Allocator::Pooling { instances: 16 }),
        ] {
            crossing(objects / 10 + 1, allocator).await?; // warm-up
            let mut runs = Vec::new();
            for _ in 0..run.repetitions() {
                runs.push(crossing(objects, allocator).await?);
            }
            figures.extend(crossing_figures(prefix, &runs));
        }
        figures.extend(instances(Allocator::OnDemand, "on_demand", instance_count).await?);
        figures.extend(
            instances(
                Allocator::Pooling {
                    instances: 2 * instance_count as u32,
                },
                "pooling",
                instance_count,
            )
            .await?,
        );
        anyhow::Ok(figures)
    })?;
    figures.extend(compile_times()?);
    figures.push(Figure::new(
        "crossing.peak_rss",
        peak_rss_bytes() as f64,
        "bytes",
    ));
    println!(
        "{objects} Pods of ~{} bytes per run, batches of 64, median of {} runs; {instance_count} live instances; \
         ratio = native time / Wasm time",
        pod(0).len(),
        run.repetitions()
    );
    for figure in &figures {
        println!(
            "  {:<44} {:>14.1} {:<6} {}",
            figure.figure,
            figure.value,
            figure.unit,
            figure.ratio.map_or(String::new(), |r| format!("({r:.3})"))
        );
    }
    for figure in &figures {
        figure.print();
    }
    Ok(())
}
