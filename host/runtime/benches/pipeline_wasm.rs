//! Issue 9 scenario 1 end to end: source → Reflector → DeltaFIFO → Indexer → listener →
//! handler, where the handler is a native closure (the baseline) or a Wasm plugin driven by
//! the events driver, all on one current-thread runtime (`cargo xtask bench pipeline-wasm`
//! pins the process to one core).
//!
//! The source is `pipeline.rs`'s: `KUBEPLUG_BENCH_OBJECTS` (100000) generated Pods of 5–6 KB
//! with managedFields, listed, then MODIFIED events cycling over them. Each Pod carries the
//! label `bench-written-at`, zero except in the latency runs. Per handler:
//!
//! - **max rate**: after the initial sync and a warm-up, `KUBEPLUG_BENCH_UPDATES` (200000)
//!   updates as fast as the source can emit them, `KUBEPLUG_BENCH_REPETITIONS` (5) times on
//!   one informer; `deltas_per_second` is the median over the time until the handler has
//!   had the last one, `per_delta` its inverse with the ratio native time / this time (1.0 =
//!   as fast as native);
//! - **latency at half that rate**: on a fresh informer, updates paced at half the handler's
//!   median max rate for `KUBEPLUG_BENCH_LATENCY_SECONDS` (2) per repetition, each stamped
//!   with the wall-clock time at which the source emits it. The handler reads its clock when
//!   it sees the update and keeps now − stamp: the native closure itself, the Wasm guests
//!   through a latency probe that reports p50/p99 through plugin metrics (`bench-latency`).
//!   The no-op's latency comes from `noop-timed` (the no-op plus the probe), since `noop`
//!   cannot report anything. Figures: medians of the repetitions' p50 and p99.
//!
//! Handlers: the native no-op closure, the same on an informer keeping configmap-reload's 12
//! `path` indexes (over the Pod spec), `noop`, `label-only` (one label from typed
//! metadata), `json-parse` (serde_json over the whole object), and `label-only-js` and
//! `label-only-py`, the label reading in JavaScript and Python; `KUBEPLUG_BENCH_HANDLERS`
//! (e.g. `noop,label`) runs only those named, and the native baseline (for profiling). `cargo test` runs it at tiny
//! sizes (its figures mean nothing), sharing the runtime tests' artefact cache so that an
//! unoptimised host does not compile the Python component again.

// A benchmark reports on stdout by design.
#![allow(clippy::print_stdout)]

/// The binary's allocator (`host/kubeplug/src/main.rs`), so that these are the host's figures.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, ensure};
use bytes::Bytes;
use kubeplug_bench_support::{Figure, Run, median, peak_rss_bytes};
use kubeplug_informer::indexer::{IndexHandle, ProjectionHandle};
use kubeplug_informer::informer::{HandlerOptions, SharedIndexInformer};
use kubeplug_informer::listener::{ListenerReceiver, Notification};
use kubeplug_informer::object::ObjectDecoder;
use kubeplug_informer::reflector::ReflectorConfig;
use kubeplug_informer::selected::Selection;
use kubeplug_json::path::{FieldPath, Found};
use kubeplug_runtime::description::IndexSource;
use kubeplug_runtime::events::run_events;
use kubeplug_runtime::index::informer_spec;
use kubeplug_runtime::status::MetricValue;
use kubeplug_runtime::{
    Grants, Gvk, IndexerMap, NoCluster, Plugin, PluginLimits, PluginSpec, Runtime, RuntimeConfig,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use common::{Phase, Pods, Replay, STAMP_LABEL, ensure_no_failed_call, pod_resource};

mod common;

/// Notifications per handler call, native or Wasm (the events driver's default batch).
const BATCH: usize = 64;

/// The Pod-spec places configmap-reload indexes in a Deployment's pod template: 12 `path`
/// indexes, each a walk into the object's spec.
const PATH_INDEXES: [&str; 12] = [
    "spec.volumes[*].configMap.name",
    "spec.volumes[*].projected.sources[*].configMap.name",
    "spec.containers[*].envFrom[*].configMapRef.name",
    "spec.containers[*].env[*].valueFrom.configMapKeyRef.name",
    "spec.initContainers[*].envFrom[*].configMapRef.name",
    "spec.initContainers[*].env[*].valueFrom.configMapKeyRef.name",
    "spec.volumes[*].secret.secretName",
    "spec.volumes[*].projected.sources[*].secret.name",
    "spec.containers[*].envFrom[*].secretRef.name",
    "spec.containers[*].env[*].valueFrom.secretKeyRef.name",
    "spec.initContainers[*].envFrom[*].secretRef.name",
    "spec.initContainers[*].env[*].valueFrom.secretKeyRef.name",
];

/// The three Pod spec fields the field-reading handlers read, as (projection name, path).
const FIELDS: [(&str, &str); 3] = [
    ("node", "spec.nodeName"),
    ("policy", "spec.restartPolicy"),
    ("scheduler", "spec.schedulerName"),
];

/// The three fields as a native handler reads them from the object's JSON with serde:
/// borrowed strings, everything else skipped (the fastest serde can do it).
#[derive(serde::Deserialize)]
struct PodFields<'a> {
    #[serde(borrow)]
    spec: SpecFields<'a>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecFields<'a> {
    node_name: Option<&'a str>,
    restart_policy: Option<&'a str>,
    scheduler_name: Option<&'a str>,
}

/// What a native closure does with each notification.
#[derive(Debug, Clone, Copy)]
enum NativeWork {
    /// Nothing: the baseline.
    Nothing,
    /// Nothing, on an informer that also keeps the [`PATH_INDEXES`], declared as a plugin
    /// declares them: its ratio to `Nothing` is what the indexes cost.
    NothingWithPathIndexes,
    /// Reads the [`FIELDS`] with serde from the object's JSON ([`PodFields`]).
    SerdeFields,
    /// Reads the [`FIELDS`] as the host projects them for a plugin: the values the Indexer
    /// kept when it stored the object, typed, without the crossing into Wasm.
    ProjectedFields,
}

/// A handler under test.
#[derive(Debug, Clone, Copy)]
enum Handler {
    /// A native closure draining the listener in batches of [`BATCH`].
    Native(NativeWork),
    /// A Wasm plugin: `throughput` for the max rate, `timed` (the same work plus the
    /// latency probe) for the latency, when it has one.
    Wasm {
        throughput: &'static str,
        timed: Option<&'static str>,
    },
}

impl Handler {
    /// Whether its latency is measured: the native closures that read fields and the
    /// field-reading guests have no latency probe.
    fn timed(self) -> bool {
        match self {
            Handler::Native(work) => matches!(work, NativeWork::Nothing),
            Handler::Wasm { timed, .. } => timed.is_some(),
        }
    }
}

const fn wasm(throughput: &'static str, timed: Option<&'static str>) -> Handler {
    Handler::Wasm { throughput, timed }
}

/// Every handler, the baseline first: (figure name, handler, the figure name of the handler
/// its `per_delta` ratio is against).
const HANDLERS: [(&str, Handler, &str); 12] = [
    ("native", Handler::Native(NativeWork::Nothing), "native"),
    (
        "native_path_indexes",
        Handler::Native(NativeWork::NothingWithPathIndexes),
        "native",
    ),
    ("noop", wasm("noop", Some("noop-timed")), "native"),
    ("label", wasm("label-only", Some("label-only")), "native"),
    ("json", wasm("json-parse", Some("json-parse")), "native"),
    (
        "label_js",
        wasm("label-only-js", Some("label-only-js")),
        "native",
    ),
    (
        "label_py",
        wasm("label-only-py", Some("label-only-py")),
        "native",
    ),
    (
        "native_serde_fields",
        Handler::Native(NativeWork::SerdeFields),
        "native",
    ),
    (
        "native_projected_fields",
        Handler::Native(NativeWork::ProjectedFields),
        "native_serde_fields",
    ),
    (
        "fields",
        wasm("fields-projected", None),
        "native_serde_fields",
    ),
    (
        "fields_js",
        wasm("fields-projected-js", None),
        "native_serde_fields",
    ),
    (
        "fields_py",
        wasm("fields-projected-py", None),
        "native_serde_fields",
    ),
];

/// The Rust field-reading guest is also compared with the native closure that reads the same
/// projections: what the crossing into Wasm costs on top of the host's projection.
const FIELDS_VS_PROJECTED: (&str, &str) = ("fields", "native_projected_fields");

/// How much to measure.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    objects: usize,
    updates: usize,
    latency_seconds: f64,
    repetitions: usize,
    smoke: bool,
}

/// What a latency run reports: p50 and p99 in nanoseconds, and how many reports so far.
#[derive(Debug, Clone, Copy, Default)]
struct LatencyReport {
    reports: u64,
    p50_ns: f64,
    p99_ns: f64,
}

/// The native closure's latency probe: the same sampling as the guests' `bench-latency`.
#[derive(Debug)]
struct NativeProbe {
    report_every: usize,
    samples: Vec<u64>,
    report: Arc<Mutex<LatencyReport>>,
}

impl NativeProbe {
    fn observe(&mut self, notification: &Notification) {
        let Some(stamp) = notification
            .object()
            .label(STAMP_LABEL)
            .and_then(|s| s.parse::<u64>().ok())
            .filter(|&s| s > 0)
        else {
            return;
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos() as u64;
        self.samples.push(now.saturating_sub(stamp));
        if self.samples.len() >= self.report_every {
            self.samples.sort_unstable();
            let last = self.samples.len() - 1;
            let mut report = self.report.lock().expect("not poisoned");
            report.reports += 1;
            report.p50_ns = self.samples[last * 50 / 100] as f64;
            report.p99_ns = self.samples[last * 99 / 100] as f64;
            self.samples.clear();
        }
    }
}

/// A handler attached to a listener: how many notifications it has handled, and its latency
/// reports.
enum Attached {
    Native {
        handled: Arc<AtomicU64>,
        report: Arc<Mutex<LatencyReport>>,
        task: JoinHandle<()>,
        /// The paths it reads from what the Indexer keeps.
        projections: Vec<FieldPath>,
    },
    Wasm {
        plugin: Arc<Plugin>,
        driver: JoinHandle<()>,
    },
}

impl Attached {
    fn handled(&self) -> u64 {
        match self {
            Self::Native { handled, .. } => handled.load(Ordering::Relaxed),
            Self::Wasm { plugin, .. } => plugin.status().events_delivered,
        }
    }

    fn latency(&self) -> LatencyReport {
        match self {
            Self::Native { report, .. } => *report.lock().expect("not poisoned"),
            Self::Wasm { plugin, .. } => {
                let series = plugin.metrics().snapshot();
                let value = |name: &str| match series.get(&(name.to_owned(), Vec::new())) {
                    Some(MetricValue::Gauge(v)) => *v,
                    Some(MetricValue::Counter(n)) => *n as f64,
                    None => 0.0,
                };
                LatencyReport {
                    reports: value("latency_reports_total") as u64,
                    p50_ns: value("latency_p50_ns"),
                    p99_ns: value("latency_p99_ns"),
                }
            }
        }
    }

    fn abort(&self) {
        match self {
            Self::Native { task, .. } => task.abort(),
            Self::Wasm { driver, .. } => driver.abort(),
        }
    }
}

/// The runtime with the artefact cache the runtime tests share, so that neither the bench
/// nor its smoke run compiles an unchanged component twice.
fn runtime() -> Result<Runtime> {
    let artefacts = xtask::Layout::from_manifest_dir()
        .root
        .join("target")
        .join("test-artefacts");
    Ok(Runtime::new(RuntimeConfig {
        artifact_cache: Some(artefacts),
        ..RuntimeConfig::default()
    })?)
}

fn component(name: &str) -> Result<Vec<u8>> {
    let path = xtask::Layout::from_manifest_dir()
        .test_output_dir()
        .join(format!("{name}.wasm"));
    std::fs::read(&path).with_context(|| format!("reading {}", path.display()))
}

/// Attaches `handler` to `rx`; `report_every` turns the latency probe on.
async fn attach(
    runtime: &Runtime,
    handler: Handler,
    informer: &SharedIndexInformer,
    mut rx: ListenerReceiver,
    report_every: Option<usize>,
) -> Result<Attached> {
    match handler {
        Handler::Native(work) => {
            let handled = Arc::new(AtomicU64::new(0));
            let report = Arc::new(Mutex::new(LatencyReport::default()));
            let mut probe = report_every.map(|report_every| NativeProbe {
                report_every,
                samples: Vec::with_capacity(report_every),
                report: report.clone(),
            });
            let count = handled.clone();
            let paths: Vec<FieldPath> = FIELDS
                .iter()
                .map(|(_, path)| FieldPath::parse(path))
                .collect::<Result<_, _>>()?;
            let kept_paths = match work {
                NativeWork::ProjectedFields => paths.clone(),
                _ => Vec::new(),
            };
            let task = tokio::spawn(async move {
                while let Some(batch) = rx.recv_batch(BATCH).await {
                    for notification in batch.iter() {
                        match (&mut probe, work) {
                            (Some(probe), _) => probe.observe(notification),
                            (None, NativeWork::SerdeFields) => {
                                let json = notification.object().json();
                                let fields = serde_json::from_str::<PodFields<'_>>(json)
                                    .expect("a generated Pod");
                                std::hint::black_box((
                                    fields.spec.node_name,
                                    fields.spec.restart_policy,
                                    fields.spec.scheduler_name,
                                ));
                            }
                            (None, NativeWork::ProjectedFields) => {
                                let object = notification.object();
                                for path in &paths {
                                    let Some(Selection::Values(values)) = object.selected(path)
                                    else {
                                        panic!("{path} is not kept with {}", object.key());
                                    };
                                    for raw in values {
                                        std::hint::black_box(
                                            Found::classify(raw).expect("a generated Pod"),
                                        );
                                    }
                                }
                            }
                            (None, NativeWork::Nothing | NativeWork::NothingWithPathIndexes) => {
                                std::hint::black_box(notification);
                            }
                        }
                    }
                    count.fetch_add(batch.len() as u64, Ordering::Relaxed);
                }
            });
            Ok(Attached::Native {
                handled,
                report,
                task,
                projections: kept_paths,
            })
        }
        Handler::Wasm { throughput, timed } => {
            let (name, settings) = match (report_every, timed) {
                (Some(n), Some(timed)) => (
                    timed,
                    format!(r#"{{"stamp_label":"{STAMP_LABEL}","report_every":{n}}}"#),
                ),
                _ => (throughput, "{}".to_owned()),
            };
            let caches = BTreeMap::from([(Gvk::new("", "v1", "Pod"), informer.indexer().clone())]);
            let plugin = runtime
                .load(PluginSpec {
                    path: format!("target/test-plugins/{name}.wasm").into(),
                    bytes: component(name)?,
                    settings,
                    grants: Grants::default().allow_read(Gvk::new("", "v1", "Pod")),
                    limits: PluginLimits {
                        // An unoptimised host (the smoke run) runs Python's start-up slowly.
                        call_deadline: Duration::from_secs(10),
                        batch_size: BATCH,
                        ..PluginLimits::default()
                    },
                    cache: Arc::new(IndexerMap(caches)),
                    writer: Arc::new(NoCluster),
                })
                .await
                .with_context(|| format!("loading {name}"))?;
            let plugin = Arc::new(plugin);
            let driver = run_events(plugin.clone(), vec![rx])?;
            Ok(Attached::Wasm { plugin, driver })
        }
    }
}

/// One informer over the replayed Pods with `handler` attached, synced into it.
struct Bench {
    source: Arc<Replay>,
    informer: SharedIndexInformer,
    phases: mpsc::UnboundedSender<Phase>,
    handler: Attached,
    /// The indexes live while their handles do.
    _indexes: Vec<IndexHandle>,
    /// So do the projection paths the handler registered, as the host registers a
    /// subscription's.
    _projections: Vec<ProjectionHandle>,
}

impl Bench {
    async fn start(
        runtime: &Runtime,
        pods: &Arc<Pods>,
        handler: Handler,
        report_every: Option<usize>,
    ) -> Result<Self> {
        let (source, phases) = Replay::new(pods.clone());
        let source = Arc::new(source);
        let informer = SharedIndexInformer::new(
            source.clone(),
            ObjectDecoder::new(pod_resource()),
            ReflectorConfig::default(),
        );
        let mut indexes = Vec::new();
        if let Handler::Native(NativeWork::NothingWithPathIndexes) = handler {
            for path in PATH_INDEXES {
                let source = IndexSource::Path(FieldPath::parse(path).map_err(anyhow::Error::msg)?);
                indexes.push(informer.indexer().add_index(informer_spec(&source)));
            }
        }
        let rx = informer.add_handler(HandlerOptions::default());
        let handler = attach(runtime, handler, &informer, rx, report_every).await?;
        let projections = match &handler {
            Attached::Native { projections, .. } => projections.clone(),
            Attached::Wasm { plugin, .. } => plugin.description().subscriptions[0]
                .projections
                .paths()
                .paths()
                .to_vec(),
        };
        let projections = projections
            .iter()
            .map(|path| informer.indexer().add_projection(path))
            .collect();
        informer.start();
        let bench = Self {
            source,
            informer,
            phases,
            handler,
            _indexes: indexes,
            _projections: projections,
        };
        bench.wait_handled(pods.json.len() as u64).await?;
        Ok(bench)
    }

    /// Waits until the handler has handled `n` notifications in all.
    async fn wait_handled(&self, n: u64) -> Result<()> {
        while self.handler.handled() < n {
            self.check_alive()?;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok(())
    }

    fn check_alive(&self) -> Result<()> {
        match &self.handler {
            Attached::Wasm { plugin, .. } => ensure_no_failed_call(plugin),
            Attached::Native { .. } => Ok(()),
        }
    }

    /// Runs `phase` and returns the time until the handler has had its last update.
    async fn run(&self, phase: Phase) -> Result<Duration> {
        let target = self.handler.handled() + phase.updates as u64;
        let started = Instant::now();
        self.phases
            .send(phase)
            .context("the source's watch is gone")?;
        self.wait_handled(target).await?;
        Ok(started.elapsed())
    }

    /// Stops it, checking that the figures come from one uninterrupted watch.
    async fn stop(self) -> Result<()> {
        self.handler.abort();
        self.informer.stop().await;
        let watches = self.source.watches();
        ensure!(watches == 1, "the informer opened {watches} watches, not 1");
        Ok(())
    }
}

/// The handler's max rates (deltas/s), one per repetition.
async fn max_rates(
    runtime: &Runtime,
    pods: &Arc<Pods>,
    handler: Handler,
    sizes: Sizes,
) -> Result<Vec<f64>> {
    let bench = Bench::start(runtime, pods, handler, None).await?;
    let flat_out = |updates| Phase {
        updates,
        paced: None,
    };
    bench.run(flat_out(sizes.updates / 5 + 1)).await?; // warm-up
    let mut rates = Vec::new();
    for _ in 0..sizes.repetitions {
        let elapsed = bench.run(flat_out(sizes.updates)).await?;
        rates.push(sizes.updates as f64 / elapsed.as_secs_f64());
    }
    bench.stop().await?;
    Ok(rates)
}

/// The handler's (p50, p99) latencies in nanoseconds at `rate` updates/s, one per repetition.
async fn latencies(
    runtime: &Runtime,
    pods: &Arc<Pods>,
    handler: Handler,
    rate: f64,
    sizes: Sizes,
) -> Result<Vec<(f64, f64)>> {
    let samples = ((rate * sizes.latency_seconds) as usize).max(10);
    let bench = Bench::start(runtime, pods, handler, Some(samples)).await?;
    let paced = Phase {
        updates: samples,
        paced: Some(rate),
    };
    let mut results = Vec::new();
    // The first is the warm-up.
    for repetition in 0..=sizes.repetitions {
        let before = bench.handler.latency().reports;
        bench.run(paced).await?;
        while bench.handler.latency().reports == before {
            bench.check_alive()?;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let report = bench.handler.latency();
        if repetition > 0 {
            results.push((report.p50_ns, report.p99_ns));
        }
    }
    bench.stop().await?;
    Ok(results)
}

fn main() -> Result<()> {
    let run = Run::from_args();
    let sizes = Sizes {
        objects: run.size("KUBEPLUG_BENCH_OBJECTS", 100_000, 200),
        updates: run.size("KUBEPLUG_BENCH_UPDATES", 200_000, 1_000),
        latency_seconds: run.size("KUBEPLUG_BENCH_LATENCY_SECONDS", 2, 1) as f64,
        repetitions: run.repetitions(),
        smoke: run == Run::Smoke,
    };
    // The handlers named, and the baselines their ratios are against (the native no-op
    // always).
    let chosen = std::env::var("KUBEPLUG_BENCH_HANDLERS").ok();
    let named = |name: &str| {
        chosen
            .as_deref()
            .is_none_or(|list| list.split(',').any(|n| n.trim() == name))
    };
    let mut wanted = BTreeSet::from(["native"]);
    for (name, _, baseline) in HANDLERS {
        if named(name) {
            wanted.extend([name, baseline]);
            if name == FIELDS_VS_PROJECTED.0 {
                wanted.insert(FIELDS_VS_PROJECTED.1);
            }
        }
    }
    let handlers: Vec<(&str, Handler, &str)> = HANDLERS
        .into_iter()
        .filter(|(name, ..)| wanted.contains(name))
        .collect();
    let mut guests: Vec<String> = Vec::new();
    for &(_, handler, _) in &handlers {
        if let Handler::Wasm { throughput, timed } = handler {
            guests.push(throughput.to_owned());
            guests.extend(timed.map(str::to_owned));
        }
    }
    guests.dedup();
    xtask::build_plugins(&xtask::Layout::from_manifest_dir(), &guests)?;
    let pods = Arc::new(Pods::generate(sizes.objects));
    let average = pods.json.iter().map(Bytes::len).sum::<usize>() / sizes.objects;
    println!(
        "# {} Pods of {average} bytes, then {} updates per run, median of {} runs; latency at \
         half each handler's max rate for {} s per run; current-thread runtime{}",
        sizes.objects,
        sizes.updates,
        sizes.repetitions,
        sizes.latency_seconds,
        if sizes.smoke {
            " (smoke run: the figures mean nothing)"
        } else {
            ""
        }
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let rows = rt.block_on(async {
        let runtime = runtime()?;
        let mut per_delta_ns: BTreeMap<&str, f64> = BTreeMap::new();
        let mut rows = Vec::new();
        for &(name, handler, baseline) in &handlers {
            let rate = median(max_rates(&runtime, &pods, handler, sizes).await?);
            let ns = 1e9 / rate;
            per_delta_ns.insert(name, ns);
            let figure = |what: &str, value: f64, unit: &str| {
                Figure::new(format!("pipeline_wasm.{name}.{what}"), value, unit)
            };
            let against = |figure: Figure, baseline: &str| {
                let baseline_ns = per_delta_ns[baseline];
                figure.against(
                    format!("pipeline_wasm.{baseline}.per_delta"),
                    baseline_ns / ns,
                )
            };
            let mut figures = vec![figure("deltas_per_second", rate, "deltas/s")];
            let per_delta = figure("per_delta", ns, "ns");
            let per_delta = if name == baseline {
                per_delta
            } else {
                against(per_delta, baseline)
            };
            let ratio = per_delta.ratio;
            figures.push(per_delta);
            if name == FIELDS_VS_PROJECTED.0 {
                figures.push(against(
                    figure("per_delta_vs_projected", ns, "ns"),
                    FIELDS_VS_PROJECTED.1,
                ));
            }
            let mut latency = None;
            if handler.timed() {
                let runs = latencies(&runtime, &pods, handler, rate / 2.0, sizes).await?;
                let p50 = median(runs.iter().map(|r| r.0).collect()) / 1e3;
                let p99 = median(runs.iter().map(|r| r.1).collect()) / 1e3;
                figures.push(figure("latency_rate", rate / 2.0, "deltas/s"));
                figures.push(figure("latency_p50", p50, "µs"));
                figures.push(figure("latency_p99", p99, "µs"));
                latency = Some((p50, p99));
            }
            for figure in &figures {
                figure.print();
            }
            rows.push((name, baseline, rate, ratio, latency));
        }
        anyhow::Ok(rows)
    })?;
    let rss = Figure::new("pipeline_wasm.peak_rss", peak_rss_bytes() as f64, "bytes");
    rss.print();
    println!();
    println!("| handler | deltas/s | ratio | against | p50 | p99 (at half rate) |");
    println!("|---|---|---|---|---|---|");
    for (name, baseline, rate, ratio, latency) in rows {
        let (p50, p99) = latency.map_or(("-".into(), "-".into()), |(p50, p99)| {
            (format!("{p50:.1} µs"), format!("{p99:.1} µs"))
        });
        println!(
            "| {name} | {rate:.0} | {} | {baseline} | {p50} | {p99} |",
            ratio.map_or("1".into(), |r| format!("{r:.3}")),
        );
    }
    Ok(())
}
