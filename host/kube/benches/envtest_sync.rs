//! Initial sync against a real kube-apiserver (issue 18), kubeplug against kube-rs: how long
//! each takes from the start of its informer or watcher until every object is in its cache,
//! and the process's RSS once synced.
//!
//! The parent starts etcd and kube-apiserver through `kubeplug-envtest` (binaries from
//! `KUBEBUILDER_ASSETS`; without them it prints the harness's one skip line and passes, and
//! with `CI` set it fails), creates `KUBEPLUG_BENCH_OBJECTS` (default 10000) ConfigMaps of
//! ~5 KB in one namespace with 32 requests in flight, then measures six runners, each in a
//! process of its own (this binary again, with `--runner NAME`; it prints one JSON line), so
//! that each RSS is its own. All watch that one namespace:
//!
//! - `kubeplug_list_then_watch`: `SharedIndexInformer` over `KubeListerWatcher`, paginated
//!   list (pages of 500) then watch;
//! - `kubeplug_streaming_list`: the same with a streaming list (`sendInitialEvents`);
//! - `kube_rs_reflector`: kube-rs's `reflector` over `watcher` of `DynamicObject`, its
//!   default list-then-watch (pages of 500);
//! - `kube_rs_streaming_list`: the same with `InitialListStrategy::StreamingList`;
//! - `kubeplug_metadata_only` (issue 24): kubeplug's streaming list of `PartialObjectMetadata`
//!   (`KubeListerWatcher::metadata_only`, `ObjectDecoder::metadata_only`);
//! - `kube_rs_metadata_watcher`: kube-rs's reflector over its metadata watcher (a `watcher`
//!   of `PartialObjectMeta`), default configuration.
//!
//! The two streaming lists differ in what they ask: kube-rs opens its watch at
//! `resourceVersion=0` (any version, possibly stale), kubeplug, as client-go, leaves it unset
//! (a consistent read); both paginated lists leave it unset. On this server the two
//! streaming requests take the same time (`benches/README.md`).
//!
//! kube-rs's objects lose their managedFields before the store (`.modify()`, as kube-rs
//! recommends to save memory), as kubeplug's decoder drops them. Synced: kubeplug's
//! `wait_for_sync`, kube-rs's `InitDone` (its store swaps the whole list in then); each
//! runner then checks it holds exactly the objects created. RSS is read 200 ms later, with
//! the watch still running. Rounds are interleaved (every runner once per round), one
//! warm-up round, then `KUBEPLUG_BENCH_REPETITIONS` (default 5) measured rounds.
//!
//! Figures `envtest_sync.<runner>.*`: `sync` (median, s) with `sync_min`/`sync_max`,
//! `objects_per_second`, `sync_cpu` (median CPU time of the runner's process over the sync:
//! the client's share of the work, which the wall-clock time mixes with the servers'),
//! `rss_synced` (median, bytes) with `rss_synced_min`/`rss_synced_max`, `rss_start`
//! (median RSS just before the start, its client built: the floor without a cache), and
//! `rss_growth` (median of synced minus start: what the cache costs).
//! Ratios: kubeplug's objects/s and CPU time against kube-rs's in the same initial-list mode,
//! as throughputs (kube-rs's time over kubeplug's, higher is better: the issue's "time ≤ 0.8×
//! kube-rs streaming" is a ratio ≥ 1.25), kubeplug's RSS over the kube-rs reflector's (lower
//! is better; target ≤ 0.6). The metadata-only runner: against kube-rs's metadata watcher
//! (time ≤ 1.0×, a ratio ≥ 1.0), and its RSS growth over the whole-object streaming list's
//! (target ≤ 0.3).
//!
//! Run: `KUBEBUILDER_ASSETS=$PWD/../shared/envtest/v1.32 cargo xtask bench envtest-sync`;
//! `cargo test` runs it with 50 ConfigMaps and one round after the warm-up, so it cannot rot.

// A benchmark's job is to print its figures.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind, PartialObjectMeta};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kubeplug_bench_support::{Figure, Run, cpu_time, median, rss_bytes};
use kubeplug_envtest::{Assets, Envtest, Options, User};
use kubeplug_informer::informer::SharedIndexInformer;
use kubeplug_informer::object::ObjectDecoder;
use kubeplug_informer::reflector::{InitialListMode, ReflectorConfig};
use kubeplug_informer::resource::Resource;
use kubeplug_kube::config::{ConfigSource, KubeClient};
use kubeplug_kube::lister::{KubeListerWatcher, KubeSourceOptions};

/// Create requests in flight while filling the server: enough to keep both cores busy.
const IN_FLIGHT: usize = 32;

/// A runner that has not synced by then never will (a backend without streaming lists makes
/// a forced streaming list retry for ever): its process fails instead of hanging the bench.
const SYNC_TIMEOUT: Duration = Duration::from_secs(300);

/// How long after the sync a runner reads its RSS: the last responses' buffers are gone by
/// then and every runner is in the same state, synced and watching.
const SETTLE: Duration = Duration::from_millis(200);

/// The ways of syncing that are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Runner {
    /// kubeplug's informer, paginated list then watch.
    KubeplugListThenWatch,
    /// kubeplug's informer, streaming list.
    KubeplugStreamingList,
    /// kube-rs's reflector over its default watcher: paginated list then watch.
    KubeRsReflector,
    /// kube-rs's reflector over a streaming-list watcher.
    KubeRsStreamingList,
    /// kubeplug's informer of `PartialObjectMetadata`, streaming list (issue 24).
    KubeplugMetadataOnly,
    /// kube-rs's reflector over its metadata watcher (a `watcher` of `PartialObjectMeta`),
    /// default configuration.
    KubeRsMetadataWatcher,
}

impl Runner {
    /// Every runner in declaration order, so that `runner as usize` indexes it; also the
    /// order of every round.
    const ALL: [Runner; 6] = [
        Runner::KubeplugListThenWatch,
        Runner::KubeplugStreamingList,
        Runner::KubeRsReflector,
        Runner::KubeRsStreamingList,
        Runner::KubeplugMetadataOnly,
        Runner::KubeRsMetadataWatcher,
    ];

    /// Its name in figures and on the child's command line.
    fn name(self) -> &'static str {
        match self {
            Runner::KubeplugListThenWatch => "kubeplug_list_then_watch",
            Runner::KubeplugStreamingList => "kubeplug_streaming_list",
            Runner::KubeRsReflector => "kube_rs_reflector",
            Runner::KubeRsStreamingList => "kube_rs_streaming_list",
            Runner::KubeplugMetadataOnly => "kubeplug_metadata_only",
            Runner::KubeRsMetadataWatcher => "kube_rs_metadata_watcher",
        }
    }

    fn from_name(name: &str) -> Option<Runner> {
        Runner::ALL.into_iter().find(|runner| runner.name() == name)
    }

    /// The kube-rs runner syncing the same way, whose objects/s and CPU time this one's are
    /// compared with.
    fn kube_rs_counterpart(self) -> Option<Runner> {
        match self {
            Runner::KubeplugListThenWatch => Some(Runner::KubeRsReflector),
            Runner::KubeplugStreamingList => Some(Runner::KubeRsStreamingList),
            Runner::KubeplugMetadataOnly => Some(Runner::KubeRsMetadataWatcher),
            Runner::KubeRsReflector
            | Runner::KubeRsStreamingList
            | Runner::KubeRsMetadataWatcher => None,
        }
    }
}

/// What a runner is to sync: the child's command line.
struct Target {
    kubeconfig: PathBuf,
    namespace: String,
    objects: usize,
}

impl Target {
    fn args(&self) -> Vec<String> {
        vec![
            "--kubeconfig".into(),
            self.kubeconfig.display().to_string(),
            "--namespace".into(),
            self.namespace.clone(),
            "--objects".into(),
            self.objects.to_string(),
        ]
    }

    fn from_args(args: &[String]) -> Target {
        let value = |flag: &str| {
            let at = args.iter().position(|arg| arg == flag);
            at.and_then(|at| args.get(at + 1))
                .unwrap_or_else(|| panic!("a runner needs {flag} VALUE: {args:?}"))
        };
        Target {
            kubeconfig: PathBuf::from(value("--kubeconfig")),
            namespace: value("--namespace").clone(),
            objects: value("--objects")
                .parse()
                .unwrap_or_else(|_| panic!("--objects takes a count: {args:?}")),
        }
    }
}

/// What one runner's process measured; it prints this as its one JSON line.
#[derive(Debug, Clone, Copy)]
struct Measured {
    sync_seconds: f64,
    /// The process's CPU time (user and system, all threads) over the sync: the client's
    /// share of the work, which the wall-clock time mixes with the servers'.
    cpu_seconds: f64,
    /// RSS just before the informer or watcher starts, its client built: what the process
    /// costs without a cache.
    rss_start_bytes: f64,
    /// RSS once synced (and [`SETTLE`]d).
    rss_bytes: f64,
}

impl Measured {
    fn to_json(self) -> String {
        serde_json::json!({
            "sync_seconds": self.sync_seconds,
            "cpu_seconds": self.cpu_seconds,
            "rss_start_bytes": self.rss_start_bytes,
            "rss_bytes": self.rss_bytes,
        })
        .to_string()
    }

    fn from_json(line: &str) -> Option<Measured> {
        let value: serde_json::Value = serde_json::from_str(line).ok()?;
        let field = |name: &str| value.get(name).and_then(serde_json::Value::as_f64);
        Some(Measured {
            sync_seconds: field("sync_seconds")?,
            cpu_seconds: field("cpu_seconds")?,
            rss_start_bytes: field("rss_start_bytes")?,
            rss_bytes: field("rss_bytes")?,
        })
    }
}

/// The `i`th ConfigMap: ~4.8 KB of data, ~5 KB with its metadata (as `kube_sync`'s).
fn config_map(i: usize) -> ConfigMap {
    let blob: String = (0..4_800)
        .map(|j| char::from(b'a' + ((i + j) % 26) as u8))
        .collect();
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("cm-{i:06}")),
            labels: Some(BTreeMap::from([
                ("app".to_owned(), "bench".to_owned()),
                ("shard".to_owned(), (i % 16).to_string()),
            ])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("blob".to_owned(), blob)])),
        ..ConfigMap::default()
    }
}

/// Creates `objects` ConfigMaps in `namespace`, [`IN_FLIGHT`] at a time; returns the bytes of
/// JSON the server answered with, the objects as the runners will list them.
async fn create_config_maps(client: kube::Client, namespace: &str, objects: usize) -> usize {
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    let sizes: Vec<usize> = futures::stream::iter(0..objects)
        .map(|i| {
            let api = api.clone();
            async move {
                let created = api
                    .create(&PostParams::default(), &config_map(i))
                    .await
                    .unwrap_or_else(|error| panic!("creating ConfigMap {i}: {error}"));
                serde_json::to_vec(&created).map_or(0, |json| json.len())
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    sizes.iter().sum()
}

/// This process's CPU time so far, in seconds (one clock tick's resolution, 10 ms).
fn own_cpu_seconds() -> f64 {
    cpu_time(std::process::id()).map_or(0.0, |time| time.as_secs_f64())
}

/// kubeplug's informer in `mode`, of metadata alone with `metadata`; synced when
/// `wait_for_sync` returns.
async fn kubeplug_sync(mode: InitialListMode, metadata: bool, target: &Target) -> Measured {
    let client = KubeClient::from_source(&ConfigSource::Kubeconfig {
        path: target.kubeconfig.clone(),
        context: None,
    })
    .await
    .expect("a client from the control plane's kubeconfig");
    let resource = Resource::new("", "v1", "ConfigMap", "configmaps", true);
    let source = KubeListerWatcher::new(
        client,
        resource.clone(),
        Some(target.namespace.clone()),
        KubeSourceOptions::default(),
    );
    let config = ReflectorConfig {
        initial_list: mode,
        ..ReflectorConfig::default()
    };
    let decoder = ObjectDecoder::new(resource);
    let informer = match metadata {
        true => SharedIndexInformer::new(
            Arc::new(source.metadata_only()),
            decoder.metadata_only(),
            config,
        ),
        false => SharedIndexInformer::new(Arc::new(source), decoder, config),
    };
    let rss_start = rss_bytes();
    let cpu_start = own_cpu_seconds();
    let started = Instant::now();
    informer.start();
    informer.wait_for_sync().await;
    let sync_seconds = started.elapsed().as_secs_f64();
    let cpu_seconds = own_cpu_seconds() - cpu_start;
    assert_eq!(
        informer.indexer().len(),
        target.objects,
        "kubeplug's cache holds every ConfigMap once synced"
    );
    tokio::time::sleep(SETTLE).await;
    let rss = rss_bytes();
    informer.stop().await;
    Measured {
        sync_seconds,
        cpu_seconds,
        rss_start_bytes: rss_start as f64,
        rss_bytes: rss as f64,
    }
}

/// kube-rs's reflector store fed by its watcher over `DynamicObject`s with `config` (with
/// `metadata`, over `PartialObjectMeta`s: kube-rs 5's metadata watcher, which deprecates
/// `metadata_watcher` for it); synced at `InitDone`.
/// A watcher error fails the run: the figures are of clean syncs.
async fn kube_rs_sync(config: watcher::Config, metadata: bool, target: &Target) -> Measured {
    let kubeconfig = Kubeconfig::read_from(&target.kubeconfig).expect("the kubeconfig reads");
    let client_config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("the kubeconfig makes a kube configuration");
    let client = kube::Client::try_from(client_config).expect("a kube client");
    let api_resource = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap"));
    let namespace = &target.namespace;
    if metadata {
        // kube-rs 5's metadata watcher: `PartialObjectMeta` objects ask for the metadata form.
        let api: Api<PartialObjectMeta<DynamicObject>> =
            Api::namespaced_with(client, namespace, &api_resource);
        let writer = reflector::store::Writer::new(api_resource);
        let store = writer.as_reader();
        let watch = watcher(api, config).modify(|object| object.managed_fields_mut().clear());
        follow_until_synced(reflector(writer, watch), || store.len(), target).await
    } else {
        let api: Api<DynamicObject> = Api::namespaced_with(client, namespace, &api_resource);
        let writer = reflector::store::Writer::new(api_resource);
        let store = writer.as_reader();
        let watch = watcher(api, config).modify(|object| object.managed_fields_mut().clear());
        follow_until_synced(reflector(writer, watch), || store.len(), target).await
    }
}

/// Polls a kube-rs reflector's `events` until `InitDone`, checks that its store (`stored`
/// objects) holds every ConfigMap, and measures.
async fn follow_until_synced<K: Send + 'static>(
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    stored: impl Fn() -> usize,
    target: &Target,
) -> Measured {
    let rss_start = rss_bytes();
    let cpu_start = own_cpu_seconds();
    let started = Instant::now();
    let mut events = events.boxed();
    loop {
        let event = events
            .next()
            .await
            .expect("a watcher's stream does not end")
            .unwrap_or_else(|error| panic!("kube-rs's watcher failed: {error}"));
        if matches!(event, watcher::Event::InitDone) {
            break;
        }
    }
    let sync_seconds = started.elapsed().as_secs_f64();
    let cpu_seconds = own_cpu_seconds() - cpu_start;
    assert_eq!(
        stored(),
        target.objects,
        "kube-rs's store holds every ConfigMap once synced"
    );
    // The watch goes on, as a controller's would, while the RSS settles.
    let watching = tokio::spawn(events.for_each(|_| std::future::ready(())));
    tokio::time::sleep(SETTLE).await;
    let rss = rss_bytes();
    watching.abort();
    Measured {
        sync_seconds,
        cpu_seconds,
        rss_start_bytes: rss_start as f64,
        rss_bytes: rss as f64,
    }
}

/// One runner in this (child) process: prints its measurement as one JSON line.
fn run_child(runner: Runner, target: &Target) {
    // The same runtime for every runner: two workers, the machine's cores.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let measured = runtime.block_on(async {
        let sync = async {
            match runner {
                Runner::KubeplugListThenWatch => {
                    kubeplug_sync(InitialListMode::ListThenWatch, false, target).await
                }
                Runner::KubeplugStreamingList => {
                    kubeplug_sync(InitialListMode::StreamingList, false, target).await
                }
                Runner::KubeplugMetadataOnly => {
                    kubeplug_sync(InitialListMode::StreamingList, true, target).await
                }
                Runner::KubeRsReflector => {
                    kube_rs_sync(watcher::Config::default(), false, target).await
                }
                Runner::KubeRsStreamingList => {
                    let config = watcher::Config::default().streaming_lists();
                    kube_rs_sync(config, false, target).await
                }
                Runner::KubeRsMetadataWatcher => {
                    kube_rs_sync(watcher::Config::default(), true, target).await
                }
            }
        };
        tokio::time::timeout(SYNC_TIMEOUT, sync)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{} did not sync {} ConfigMaps within {SYNC_TIMEOUT:?}",
                    runner.name(),
                    target.objects
                )
            })
    });
    println!("{}", measured.to_json());
}

/// Runs `runner` in a child process, waits for it and reads its measurement. Its stderr
/// passes through, so a failure explains itself.
fn measure_in_child(runner: Runner, target: &Target) -> Measured {
    let executable = std::env::current_exe().expect("the bench's own executable");
    let output = Command::new(executable)
        .args(["--runner", runner.name()])
        .args(target.args())
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|error| panic!("cannot start the {} runner: {error}", runner.name()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the {} runner failed ({}): {stdout}",
        runner.name(),
        output.status
    );
    stdout
        .lines()
        .rev()
        .find_map(Measured::from_json)
        .unwrap_or_else(|| {
            panic!(
                "the {} runner printed no measurement: {stdout}",
                runner.name()
            )
        })
}

/// The control plane's binaries, or `None` after the harness's one skip line (with `CI` set,
/// a panic). Asked on a thread named after the bench: the harness names what it skips by the
/// current thread, which would otherwise be `main`.
fn assets_or_skip() -> Option<Assets> {
    std::thread::Builder::new()
        .name("the envtest_sync bench".into())
        .spawn(Assets::discover_or_skip)
        .expect("a thread")
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// The median and range of one runner's samples of one measurement.
#[derive(Debug, Clone, Copy)]
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn of(samples: impl Iterator<Item = f64>) -> Spread {
        let samples: Vec<f64> = samples.collect();
        Spread {
            min: samples.iter().copied().fold(f64::INFINITY, f64::min),
            max: samples.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            median: median(samples),
        }
    }
}

fn mib(bytes: f64) -> f64 {
    bytes / (1024.0 * 1024.0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|arg| arg == "--runner") {
        let name = args.get(at + 1).map_or("", String::as_str);
        let runner = Runner::from_name(name).unwrap_or_else(|| {
            let known = Runner::ALL.map(Runner::name);
            panic!("no runner {name:?}; the runners are {known:?}")
        });
        run_child(runner, &Target::from_args(&args));
        return;
    }
    let run = Run::from_args();
    let objects = run.size("KUBEPLUG_BENCH_OBJECTS", 10_000, 50);
    let Some(assets) = assets_or_skip() else {
        return;
    };
    let env = Envtest::start_with(&assets, &Options::default())
        .unwrap_or_else(|error| panic!("the envtest control plane failed to start: {error}"));
    let namespace = env
        .namespace("envtest-sync")
        .expect("a namespace for the ConfigMaps");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let started = Instant::now();
    let served_bytes = runtime.block_on(async {
        let client = env.client(User::Admin).expect("an admin client");
        create_config_maps(client, &namespace, objects).await
    });
    let create_seconds = started.elapsed().as_secs_f64();
    // The clients of the creation are idle from here on; the runtime goes so that nothing of
    // the parent's runs beside the runners.
    drop(runtime);
    let target = Target {
        kubeconfig: env.kubeconfig().to_path_buf(),
        namespace,
        objects,
    };

    // Indexed as `Runner::ALL`.
    let mut samples: [Vec<Measured>; Runner::ALL.len()] = Default::default();
    // Round 0 warms the API server's caches and the page cache of the binary; its figures
    // are dropped. Interleaved rounds spread a disturbance of the machine over all runners.
    for round in 0..=run.repetitions() {
        for (runner, kept) in Runner::ALL.into_iter().zip(&mut samples) {
            let measured = measure_in_child(runner, &target);
            if round > 0 {
                kept.push(measured);
            }
        }
    }
    drop(env);

    println!(
        "# {objects} ConfigMaps of {} bytes as served, created in {create_seconds:.1} s \
         ({IN_FLIGHT} in flight), one namespace; each runner in its own process, medians of \
         {} interleaved rounds after a warm-up round, [min, max]",
        served_bytes / objects,
        run.repetitions()
    );
    println!("| runner | sync | objects/s | client CPU | RSS synced | RSS at start |");
    println!("|---|---|---|---|---|---|");
    let sync = samples
        .each_ref()
        .map(|runs| Spread::of(runs.iter().map(|m| m.sync_seconds)));
    let rss = samples
        .each_ref()
        .map(|runs| Spread::of(runs.iter().map(|m| m.rss_bytes)));
    let cpus = samples
        .each_ref()
        .map(|runs| median(runs.iter().map(|m| m.cpu_seconds).collect()));
    let rss_start = samples
        .each_ref()
        .map(|runs| median(runs.iter().map(|m| m.rss_start_bytes).collect()));
    // What the cache costs: the RSS synced over the same process's before the start.
    let rss_growth = samples.each_ref().map(|runs| {
        median(
            runs.iter()
                .map(|m| m.rss_bytes - m.rss_start_bytes)
                .collect(),
        )
    });
    let mut figures = Vec::new();
    // Printed after the table, which they would split.
    let mut ratios = Vec::new();
    for runner in Runner::ALL {
        let (time, cpu, memory, start, growth) = (
            sync[runner as usize],
            cpus[runner as usize],
            rss[runner as usize],
            rss_start[runner as usize],
            rss_growth[runner as usize],
        );
        println!(
            "| {} | {:.3} s [{:.3}, {:.3}] | {:.0} | {cpu:.2} s | {:.0} MiB [{:.0}, {:.0}] | {:.0} MiB |",
            runner.name(),
            time.median,
            time.min,
            time.max,
            objects as f64 / time.median,
            mib(memory.median),
            mib(memory.min),
            mib(memory.max),
            mib(start),
        );
        let prefix = format!("envtest_sync.{}", runner.name());
        figures.extend([
            Figure::new(format!("{prefix}.sync"), time.median, "s"),
            Figure::new(format!("{prefix}.sync_min"), time.min, "s"),
            Figure::new(format!("{prefix}.sync_max"), time.max, "s"),
            Figure::new(format!("{prefix}.rss_synced_min"), memory.min, "bytes"),
            Figure::new(format!("{prefix}.rss_synced_max"), memory.max, "bytes"),
            Figure::new(format!("{prefix}.rss_start"), start, "bytes"),
        ]);
        let speed = Figure::new(
            format!("{prefix}.objects_per_second"),
            objects as f64 / time.median,
            "objects/s",
        );
        let client = Figure::new(format!("{prefix}.sync_cpu"), cpu, "s");
        let resident = Figure::new(format!("{prefix}.rss_synced"), memory.median, "bytes");
        let grown = Figure::new(format!("{prefix}.rss_growth"), growth, "bytes");
        let Some(kube_rs) = runner.kube_rs_counterpart() else {
            figures.extend([speed, client, resident, grown]);
            continue;
        };
        // Throughput over throughput: the kube-rs runner's time over this one's.
        let speed_ratio = sync[kube_rs as usize].median / time.median;
        figures.extend([
            speed.against(
                format!("envtest_sync.{}.objects_per_second", kube_rs.name()),
                speed_ratio,
            ),
            client.against(
                format!("envtest_sync.{}.sync_cpu", kube_rs.name()),
                cpus[kube_rs as usize] / cpu,
            ),
        ]);
        if runner == Runner::KubeplugMetadataOnly {
            // Issue 24's memory target: the cache's growth against whole objects'.
            let whole = Runner::KubeplugStreamingList;
            let growth_ratio = growth / rss_growth[whole as usize];
            figures.extend([
                resident,
                grown.against(
                    format!("envtest_sync.{}.rss_growth", whole.name()),
                    growth_ratio,
                ),
            ]);
            ratios.push(format!(
                "# {}: time {:.2}x {}'s (target <= 1.0), RSS growth {growth_ratio:.2}x {}'s \
                 (target <= 0.3)",
                runner.name(),
                1.0 / speed_ratio,
                kube_rs.name(),
                whole.name(),
            ));
            continue;
        }
        let reflector = Runner::KubeRsReflector;
        let rss_ratio = memory.median / rss[reflector as usize].median;
        figures.extend([
            resident.against(
                format!("envtest_sync.{}.rss_synced", reflector.name()),
                rss_ratio,
            ),
            grown,
        ]);
        ratios.push(format!(
            "# {}: time {:.2}x {}'s (target for the streaming list: <= 0.8), RSS {rss_ratio:.2}x \
             {}'s (target <= 0.6)",
            runner.name(),
            1.0 / speed_ratio,
            kube_rs.name(),
            reflector.name(),
        ));
    }
    for line in &ratios {
        println!("{line}");
    }
    for figure in &figures {
        figure.print();
    }
}
