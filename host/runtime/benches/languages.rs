//! What label-audit costs in each guest language (Rust, C, JavaScript, Python), against the
//! Rust original, measured side by side in one process:
//!
//! - component size;
//! - compile time, cold (an empty artefact cache) and cached (the artefact cache hit);
//! - instantiation (`instantiate` + `init` with the settings), and memory per live instance:
//!   the process's RSS growth over `instances` live instances, and the linear memory wasmtime
//!   granted them;
//! - per-event cost through the events-mode driver, notifications taken from an informer's
//!   listeners in batches as `crossing.rs` does; half the Pods lack the required label, so
//!   the plugin records an Event for them (into a writer that counts and drops it, so the
//!   cost is the plugin's and the host's, not a cluster's).
//!
//! Every figure is the median of `repetitions` runs, each running every language in turn.
//! For times, its ratio is the Rust figure divided by the language's, as `crossing.rs`
//! divides native time by Wasm time: 1.0 = as fast as Rust, 0.1 = ten times the Rust time.
//! For sizes (bytes) it is the language's figure over Rust's, as every memory ratio of the
//! benches: 10 = ten times Rust's size.
//! The output is a table, then one JSON object per line and figure:
//! `{"figure":"languages.label-audit-py.per_event","value":..,"unit":"ns","baseline":"languages.label-audit.per_event","ratio":..}`.
//!
//! `cargo bench -p kubeplug-runtime --bench languages`. Sizes: `KUBEPLUG_BENCH_EVENTS`
//! (default 10000 Pods), `KUBEPLUG_BENCH_INSTANCES` (default 20 live instances),
//! `KUBEPLUG_BENCH_REPETITIONS` (default 5). `cargo test` runs the same code without
//! `--bench`: a smoke run at tiny sizes whose figures mean nothing, sharing the runtime tests'
//! artefact cache (`target/test-artefacts`) so an unoptimised host need not compile the
//! Python component again.

// A benchmark reports on stdout by design.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use kubeplug_bench_support::{Figure as FigureLine, median, rss_bytes};
use kubeplug_informer::informer::{HandlerOptions, SharedIndexInformer};
use kubeplug_informer::listener::ListenerReceiver;
use kubeplug_informer::object::ObjectDecoder;
use kubeplug_informer::reflector::ReflectorConfig;
use kubeplug_informer::resource::Resource;
use kubeplug_memory::MemoryServer;
use kubeplug_runtime::events::run_events;
use kubeplug_runtime::view::BoxFuture;
use kubeplug_runtime::{
    ClusterWriter, CompileSource, Grants, Gvk, IndexerMap, Plugin, PluginLimits, PluginSpec, Rate,
    Runtime, RuntimeConfig, Write, WriteError, WriteVerb,
};

/// label-audit in every language, the Rust original (the baseline) first.
const LANGUAGES: [(&str, &str); 4] = [
    ("Rust", "label-audit"),
    ("C", "label-audit-c"),
    ("JavaScript", "label-audit-js"),
    ("Python", "label-audit-py"),
];

const BASELINE: &str = LANGUAGES[0].1;

/// The label label-audit requires, as `examples/kubeplug.toml` configures it.
const REQUIRED_LABEL: &str = "app.kubernetes.io/name";

/// How much to measure.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    /// Pods delivered per language and repetition.
    events: usize,
    /// Instances alive at once per language for the memory figures.
    instances: usize,
    /// Runs of every measurement; figures are their medians.
    repetitions: usize,
    /// A `cargo test` run: tiny sizes, the tests' persistent artefact cache.
    smoke: bool,
}

impl Sizes {
    /// `cargo bench` passes `--bench` to a `harness = false` target; `cargo test` does not.
    fn from_args_and_env() -> Self {
        if !std::env::args().any(|arg| arg == "--bench") {
            return Self {
                events: 64,
                instances: 2,
                repetitions: 1,
                smoke: true,
            };
        }
        let knob = |name: &str, default: usize| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|&v: &usize| v > 0)
                .unwrap_or(default)
        };
        Self {
            events: knob("KUBEPLUG_BENCH_EVENTS", 10_000),
            instances: knob("KUBEPLUG_BENCH_INSTANCES", 20),
            repetitions: knob("KUBEPLUG_BENCH_REPETITIONS", 5),
            smoke: false,
        }
    }
}

fn pods() -> Resource {
    Resource::new("", "v1", "Pod", "pods", true)
}

fn deployments() -> Resource {
    Resource::new("apps", "v1", "Deployment", "deployments", true)
}

fn gvk(resource: &Resource) -> Gvk {
    Gvk::new(&resource.group, &resource.version, &resource.kind)
}

/// A Pod of about 500 bytes; odd ones lack the required label, so label-audit flags half of them.
fn pod(i: usize) -> String {
    let name_label = if i.is_multiple_of(2) {
        format!(r#""{REQUIRED_LABEL}":"app{}","#, i % 7)
    } else {
        String::new()
    };
    format!(
        r#"{{"metadata":{{"name":"p{i}","namespace":"ns{}","uid":"u{i}","labels":{{{name_label}"tier":"t{}","team":"platform"}},"ownerReferences":[{{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs{}","uid":"rs-u{}","controller":true}}]}},"spec":{{"containers":[{{"name":"c","image":"registry.example.com/app:{i}","args":["--port=8080","--verbose"],"resources":{{"requests":{{"cpu":"100m","memory":"64Mi"}}}}}}],"nodeName":"node-{}"}},"status":{{"phase":"Running","podIP":"10.0.{}.{}"}}}}"#,
        i % 10,
        i % 4,
        i / 10,
        i / 10,
        i % 50,
        (i / 256) % 256,
        i % 256
    )
}

fn component(name: &str) -> Result<Vec<u8>> {
    let path = xtask::Layout::from_manifest_dir()
        .output_dir()
        .join(format!("{name}.wasm"));
    std::fs::read(&path).with_context(|| format!("reading {}", path.display()))
}

/// Counts the Events a plugin records and drops them, so that a write costs the plugin and
/// the host's grant check but no cluster.
#[derive(Debug, Default)]
struct CountingWriter {
    events: AtomicU64,
}

impl ClusterWriter for CountingWriter {
    fn write<'a>(
        &'a self,
        plugin: &'a str,
        write: Write,
    ) -> BoxFuture<'a, Result<String, WriteError>> {
        Box::pin(async move {
            match write {
                Write::RecordEvent { .. } => {
                    self.events.fetch_add(1, Ordering::Relaxed);
                    Ok(String::new())
                }
                other => Err(WriteError::Invalid(format!(
                    "{plugin} made a write label-audit never makes: {other:?}"
                ))),
            }
        })
    }
}

/// Loads label-audit `name` as `examples/kubeplug.toml` configures it, reading `caches` and
/// writing into `writer`.
async fn load(
    runtime: &Runtime,
    name: &str,
    caches: IndexerMap,
    writer: Arc<CountingWriter>,
) -> Result<Arc<Plugin>> {
    let grants = Grants::default()
        .allow_read(gvk(&deployments()))
        .allow_read(gvk(&pods()))
        .allow_write(gvk(&deployments()), WriteVerb::RecordEvent)
        .allow_write(gvk(&pods()), WriteVerb::RecordEvent);
    let plugin = runtime
        .load(PluginSpec {
            path: format!("target/plugins/{name}.wasm").into(),
            bytes: component(name)?,
            settings: format!(r#"{{"required_labels":["{REQUIRED_LABEL}"]}}"#),
            grants,
            limits: PluginLimits {
                // An unoptimised host (the smoke run) runs Python's start-up slowly.
                call_deadline: Duration::from_secs(10),
                // The cost per event is measured, not the write rate's pacing.
                writes: Rate::UNPACED,
                ..PluginLimits::default()
            },
            cache: Arc::new(caches),
            writer,
        })
        .await
        .with_context(|| format!("loading {name}"))?;
    Ok(Arc::new(plugin))
}

/// The host-private directory compiled artefacts go to: a fresh one per cold compile, or, in
/// the smoke run, the tests' persistent one.
struct ArtefactDir {
    path: PathBuf,
    _fresh: Option<tempfile::TempDir>,
}

impl ArtefactDir {
    fn new(sizes: Sizes) -> Result<Self> {
        if sizes.smoke {
            let path = xtask::Layout::from_manifest_dir()
                .root
                .join("target")
                .join("test-artefacts");
            return Ok(Self { path, _fresh: None });
        }
        let fresh = tempfile::tempdir()?;
        Ok(Self {
            path: fresh.path().join("artefacts"),
            _fresh: Some(fresh),
        })
    }

    fn runtime(&self) -> Result<Runtime> {
        Ok(Runtime::new(RuntimeConfig {
            artifact_cache: Some(self.path.clone()),
            ..RuntimeConfig::default()
        })?)
    }
}

/// One language's samples, one per repetition (per-instance and per-event figures already
/// divided).
#[derive(Debug, Default)]
struct Samples {
    size_bytes: f64,
    compile_cold_ms: Vec<f64>,
    compile_cached_ms: Vec<f64>,
    instantiate_us: Vec<f64>,
    rss_per_instance_bytes: Vec<f64>,
    linear_memory_per_instance_bytes: Vec<f64>,
    per_event_ns: Vec<f64>,
    per_event_in_call_ns: Vec<f64>,
}

/// Compiles every language cold then from the cache, each repetition in a fresh artefact
/// directory; returns the last one, which holds every language's artefact.
fn compile_times(sizes: Sizes, samples: &mut [Samples]) -> Result<ArtefactDir> {
    let mut last = None;
    for _ in 0..sizes.repetitions {
        let dir = ArtefactDir::new(sizes)?;
        let runtime = dir.runtime()?;
        for ((_, name), samples) in LANGUAGES.iter().zip(samples.iter_mut()) {
            let bytes = component(name)?;
            samples.size_bytes = bytes.len() as f64;
            let started = Instant::now();
            let (_, source) = runtime.compile(&bytes)?;
            let cold = started.elapsed();
            // The smoke run's cache may already hold it: its figure is then no cold compile.
            if !sizes.smoke && source != CompileSource::Compiled {
                bail!("{name}: the cold compile found an artefact in a fresh directory");
            }
            let started = Instant::now();
            let (_, source) = runtime.compile(&bytes)?;
            let cached = started.elapsed();
            ensure!(
                source == CompileSource::Cached,
                "{name}: the second compile missed the artefact cache"
            );
            samples.compile_cold_ms.push(cold.as_secs_f64() * 1e3);
            samples.compile_cached_ms.push(cached.as_secs_f64() * 1e3);
        }
        last = Some(dir);
    }
    last.context("at least one repetition")
}

/// Instantiates `sizes.instances` live instances of every language, after one thrown away
/// (the first touches lazily initialised engine state).
async fn instances(runtime: &Runtime, sizes: Sizes, samples: &mut [Samples]) -> Result<()> {
    let n = sizes.instances;
    for ((_, name), samples) in LANGUAGES.iter().zip(samples.iter_mut()) {
        let plugin = load(
            runtime,
            name,
            IndexerMap::default(),
            Arc::new(CountingWriter::default()),
        )
        .await?;
        drop(plugin.instantiate().await?);
        let before = rss_bytes();
        let started = Instant::now();
        let mut live = Vec::with_capacity(n);
        for _ in 0..n {
            live.push(plugin.instantiate().await?);
        }
        let elapsed = started.elapsed();
        let grown = rss_bytes().saturating_sub(before);
        let linear: usize = live.iter().map(|i| i.linear_memory_bytes()).sum();
        samples
            .instantiate_us
            .push(elapsed.as_secs_f64() * 1e6 / n as f64);
        samples.rss_per_instance_bytes.push(grown as f64 / n as f64);
        samples
            .linear_memory_per_instance_bytes
            .push(linear as f64 / n as f64);
    }
    Ok(())
}

/// Delivers `sizes.events` Pods to every language, each draining listeners of its own that
/// filled during one informer's sync, so each plugin is timed alone on the same
/// notifications. The order of the languages rotates with `repetition`.
async fn per_event(
    runtime: &Runtime,
    sizes: Sizes,
    repetition: usize,
    samples: &mut [Samples],
) -> Result<()> {
    let n = sizes.events;
    let server = MemoryServer::new();
    for i in 0..n {
        server
            .create(&pods(), &pod(i))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    }
    let informer = |resource: Resource| {
        SharedIndexInformer::new(
            Arc::new(server.lister_watcher(resource.clone(), None, None, None)),
            ObjectDecoder::new(resource),
            ReflectorConfig::default(),
        )
    };
    // label-audit subscribes to Deployments (none here) and Pods, in that order.
    let deployment_informer = informer(deployments());
    let pod_informer = informer(pods());
    let mut receivers: Vec<[ListenerReceiver; 2]> = LANGUAGES
        .iter()
        .map(|_| {
            [
                deployment_informer.add_handler(HandlerOptions::default()),
                pod_informer.add_handler(HandlerOptions::default()),
            ]
        })
        .collect();
    deployment_informer.start();
    pod_informer.start();
    deployment_informer.wait_for_sync().await;
    pod_informer.wait_for_sync().await;
    while receivers.iter().any(|[_, pods]| pods.depth() < n) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let caches = IndexerMap(BTreeMap::from([
        (gvk(&deployments()), deployment_informer.indexer().clone()),
        (gvk(&pods()), pod_informer.indexer().clone()),
    ]));

    let mut order: Vec<usize> = (0..LANGUAGES.len()).collect();
    order.rotate_left(repetition % LANGUAGES.len());
    let mut taken: Vec<Option<[ListenerReceiver; 2]>> = receivers.drain(..).map(Some).collect();
    for language in order {
        let name = LANGUAGES[language].1;
        let writer = Arc::new(CountingWriter::default());
        let plugin = load(runtime, name, caches.clone(), writer.clone()).await?;
        let listeners = taken[language]
            .take()
            .context("each language drains once")?;
        let started = Instant::now();
        let driver = run_events(plugin.clone(), listeners.into())?;
        while plugin.status().events_delivered < n as u64 {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        let elapsed = started.elapsed();
        driver.abort();
        let status = plugin.status();
        ensure!(
            status.calls_failed == 0 && status.batches_skipped == 0,
            "{name} failed calls: {:?}",
            status.last_error
        );
        let recorded = writer.events.load(Ordering::Relaxed);
        ensure!(
            recorded == (n / 2) as u64,
            "{name} recorded {recorded} Events for {n} Pods, half of them unlabelled"
        );
        let samples = &mut samples[language];
        samples
            .per_event_ns
            .push(elapsed.as_nanos() as f64 / n as f64);
        samples
            .per_event_in_call_ns
            .push(status.call_nanos as f64 / n as f64);
    }
    deployment_informer.stop().await;
    pod_informer.stop().await;
    Ok(())
}

/// One reported measure for every language: medians, their unit, and each one's ratio to Rust.
struct Figure {
    measure: &'static str,
    unit: &'static str,
    values: Vec<f64>,
}

impl Figure {
    /// The figure `pick` takes from each language's samples.
    fn of(
        measure: &'static str,
        unit: &'static str,
        samples: &[Samples],
        pick: impl Fn(&Samples) -> f64,
    ) -> Self {
        Self {
            measure,
            unit,
            values: samples.iter().map(pick).collect(),
        }
    }

    /// Rust time / this language's time, or this language's size / Rust's size.
    fn ratio(&self, language: usize) -> f64 {
        if self.unit == "bytes" {
            self.values[language] / self.values[0]
        } else {
            self.values[0] / self.values[language]
        }
    }
}

fn figures(samples: &[Samples]) -> Vec<Figure> {
    let m = |runs: &Vec<f64>| median(runs.clone());
    vec![
        Figure::of("component_size", "bytes", samples, |s| s.size_bytes),
        Figure::of("compile_cold", "ms", samples, |s| m(&s.compile_cold_ms)),
        Figure::of("compile_cached", "ms", samples, |s| m(&s.compile_cached_ms)),
        Figure::of("instantiate", "µs", samples, |s| m(&s.instantiate_us)),
        Figure::of("rss_per_instance", "bytes", samples, |s| {
            m(&s.rss_per_instance_bytes)
        }),
        Figure::of("linear_memory_per_instance", "bytes", samples, |s| {
            m(&s.linear_memory_per_instance_bytes)
        }),
        Figure::of("per_event", "ns", samples, |s| m(&s.per_event_ns)),
        Figure::of("per_event_in_call", "ns", samples, |s| {
            m(&s.per_event_in_call_ns)
        }),
    ]
}

fn readable(value: f64, unit: &str) -> String {
    match unit {
        "bytes" if value >= 1024.0 * 1024.0 => format!("{:.1} MiB", value / 1024.0 / 1024.0),
        "bytes" => format!("{:.0} KiB", value / 1024.0),
        "ms" if value >= 1000.0 => format!("{:.1} s", value / 1000.0),
        "ms" => format!("{value:.1} ms"),
        "ns" if value >= 1000.0 => format!("{:.1} µs", value / 1000.0),
        _ => format!("{value:.1} {unit}"),
    }
}

fn report(sizes: Sizes, figures: &[Figure]) {
    println!(
        "label-audit per language: medians of {} runs; {} Pods of ~{} bytes per run (half \
         unlabelled, so flagged), batches of 64; {} live instances; ratio = Rust time / language \
         time, language bytes / Rust bytes",
        sizes.repetitions,
        sizes.events,
        pod(0).len(),
        sizes.instances
    );
    if sizes.smoke {
        println!(
            "smoke run (no --bench): tiny sizes, an unoptimised host; the figures mean nothing"
        );
    }
    print!("{:<28}", "");
    for (language, _) in LANGUAGES {
        print!("{language:>20}");
    }
    println!();
    for figure in figures {
        print!("{:<28}", figure.measure);
        for (language, value) in figure.values.iter().enumerate() {
            let cell = format!(
                "{} ({:.3})",
                readable(*value, figure.unit),
                figure.ratio(language)
            );
            print!("{cell:>20}");
        }
        println!();
    }
    for figure in figures {
        for (language, (_, name)) in LANGUAGES.iter().enumerate() {
            FigureLine::new(
                format!("languages.{name}.{}", figure.measure),
                figure.values[language],
                figure.unit,
            )
            .against(
                format!("languages.{BASELINE}.{}", figure.measure),
                figure.ratio(language),
            )
            .print();
        }
    }
}

fn main() -> Result<()> {
    let sizes = Sizes::from_args_and_env();
    let names: Vec<String> = LANGUAGES.iter().map(|(_, n)| (*n).to_owned()).collect();
    xtask::build_plugins(&xtask::Layout::from_manifest_dir(), &names)?;
    let mut samples: Vec<Samples> = LANGUAGES.iter().map(|_| Samples::default()).collect();
    let artefacts = compile_times(sizes, &mut samples)?;
    let runtime = artefacts.runtime()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        for repetition in 0..sizes.repetitions {
            instances(&runtime, sizes, &mut samples).await?;
            per_event(&runtime, sizes, repetition, &mut samples).await?;
        }
        anyhow::Ok(())
    })?;
    report(sizes, &figures(&samples));
    Ok(())
}
