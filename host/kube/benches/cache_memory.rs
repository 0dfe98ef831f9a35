//! Cache memory against kube-rs (issue 9, scenario 2): what holding `KUBEPLUG_BENCH_OBJECTS`
//! (default 100000) ~5 KB Pods costs in kubeplug's informer cache and in kube-rs's own
//! `reflector` store of `DynamicObject`s, both with managedFields dropped.
//!
//! Each phase runs in a child process (this binary again, with `--phase <name>`), so that its
//! RSS is its own: the parent starts `KUBEPLUG_BENCH_REPETITIONS` children per phase (default
//! 5) and reports medians. A child fills an in-memory API server (`MemoryServer`) with the
//! same generated Pods, then:
//!
//! - `kubeplug`: an informer syncs from the server's `ListerWatcher` (pages of 500, decoded
//!   into the cache's compact JSON plus parsed metadata);
//! - `kube-rs`: the same pages go through `serde_json` into `DynamicObject`s, managedFields
//!   cleared as kube-rs users do with `.modify()`, then as `Init`/`InitApply`/`InitDone`
//!   watcher events through `kube::runtime::reflector` into its `Store`.
//!
//! It measures the heap the cache keeps (bytes allocated minus freed across the sync, by an
//! instrumented allocator: exact, and free of allocator slack), the RSS growth across the sync
//! and the peak RSS. Figures: `cache_memory.<phase>.bytes_per_object` with its ratio over the
//! JSON the cache holds (managedFields dropped), `cache_memory.kubeplug_vs_kube_rs` (kubeplug's
//! bytes over kube-rs's; target ≤ 0.5), RSS growth per object and peak RSS per phase.
//!
//! `cargo xtask bench cache-memory`; `cargo test` runs it at tiny sizes so it cannot rot.

// A benchmark's job is to print its figures.
#![allow(clippy::print_stdout)]

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::{reflector, watcher};
use kubeplug_bench_support::{Figure, Run, median, peak_rss_bytes, pod_json, rss_bytes};
use kubeplug_informer::informer::SharedIndexInformer;
use kubeplug_informer::object::ObjectDecoder;
use kubeplug_informer::reflector::ReflectorConfig;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::source::{ListRequest, ListerWatcher};
use kubeplug_memory::MemoryServer;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

const PHASES: [&str; 2] = ["kubeplug", "kube-rs"];

/// Objects per list page, as the informer's reflector asks for them.
const PAGE: u32 = 500;

fn pods() -> Resource {
    Resource::new("", "v1", "Pod", "pods", true)
}

/// What one child measured across its sync.
#[derive(Debug, Default, Clone, Copy)]
struct PhaseRun {
    /// Heap bytes allocated and not freed across the sync.
    heap_bytes: f64,
    /// RSS after the sync minus RSS before it.
    rss_growth_bytes: f64,
    /// Peak RSS of the child.
    peak_rss_bytes: f64,
    /// The JSON the kubeplug cache holds (managedFields dropped); 0 for kube-rs.
    cached_json_bytes: f64,
    seconds: f64,
}

impl PhaseRun {
    fn to_json(self) -> String {
        serde_json::json!({
            "heap_bytes": self.heap_bytes,
            "rss_growth_bytes": self.rss_growth_bytes,
            "peak_rss_bytes": self.peak_rss_bytes,
            "cached_json_bytes": self.cached_json_bytes,
            "seconds": self.seconds,
        })
        .to_string()
    }

    fn from_json(line: &str) -> Option<Self> {
        let v: serde_json::Value = serde_json::from_str(line).ok()?;
        let field = |name: &str| v.get(name).and_then(serde_json::Value::as_f64);
        Some(Self {
            heap_bytes: field("heap_bytes")?,
            rss_growth_bytes: field("rss_growth_bytes")?,
            peak_rss_bytes: field("peak_rss_bytes")?,
            cached_json_bytes: field("cached_json_bytes")?,
            seconds: field("seconds")?,
        })
    }
}

/// Measures `sync` (whose output must keep its cache alive) against the state before it, and
/// returns the measurement with the cache. A future allocates nothing before it is polled.
async fn measure<T>(sync: impl Future<Output = (T, f64)>) -> (PhaseRun, T) {
    let rss_before = rss_bytes();
    let region = Region::new(ALLOCATOR);
    let started = Instant::now();
    let (cache, cached_json_bytes) = sync.await;
    let seconds = started.elapsed().as_secs_f64();
    // Let buffers of the last page and tasks go.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let change = region.change();
    let run = PhaseRun {
        heap_bytes: change.bytes_allocated as f64 - change.bytes_deallocated as f64,
        rss_growth_bytes: rss_bytes().saturating_sub(rss_before) as f64,
        peak_rss_bytes: peak_rss_bytes() as f64,
        cached_json_bytes,
        seconds,
    };
    (run, cache)
}

/// kubeplug's informer syncs from `server`; returns its informer, which holds the cache.
async fn kubeplug_sync(server: &MemoryServer, objects: usize) -> (SharedIndexInformer, f64) {
    let source = Arc::new(server.lister_watcher(pods(), None, None, None));
    let informer = SharedIndexInformer::new(
        source,
        ObjectDecoder::new(pods()),
        ReflectorConfig::default(),
    );
    informer.start();
    informer.wait_for_sync().await;
    let cached = informer.indexer().list();
    assert_eq!(cached.len(), objects, "the informer cached every Pod");
    let json: usize = cached.iter().map(|o| o.json().len()).sum();
    (informer, json as f64)
}

/// kube-rs's reflector store fed the pages of `server`; returns the store.
async fn kube_rs_sync(
    server: &MemoryServer,
    objects: usize,
) -> (reflector::Store<DynamicObject>, f64) {
    let source = server.lister_watcher(pods(), None, None, None);
    let api_resource = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Pod"));
    let writer = reflector::store::Writer::new(api_resource);
    let store = writer.as_reader();
    // The watcher's initial list, page by page, each object decoded as kube-rs's watcher does.
    let pages = futures::stream::unfold(Some(None), |token: Option<Option<String>>| async {
        let continue_token = token?;
        let page = source
            .list(ListRequest {
                limit: Some(PAGE),
                continue_token,
                resource_version: None,
            })
            .await
            .expect("the memory server lists");
        let events: Vec<_> = page
            .items
            .iter()
            .map(|item| {
                let mut object: DynamicObject =
                    serde_json::from_slice(item).expect("a Pod decodes as a DynamicObject");
                object.metadata.managed_fields = None;
                Ok(watcher::Event::InitApply(object))
            })
            .collect();
        Some((futures::stream::iter(events), page.continue_token.map(Some)))
    })
    .flatten();
    let events = futures::stream::once(async { Ok(watcher::Event::Init) })
        .chain(pages)
        .chain(futures::stream::once(async {
            Ok(watcher::Event::InitDone)
        }));
    reflector(writer, events)
        .for_each(|event: watcher::Result<_>| {
            event.expect("no watcher errors");
            std::future::ready(())
        })
        .await;
    assert_eq!(store.len(), objects, "the store holds every Pod");
    (store, 0.0)
}

/// One phase in this (child) process; prints its `PhaseRun` as the last line.
fn run_phase(phase: &str, objects: usize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let server = MemoryServer::new();
        for i in 0..objects {
            server.apply(&pods(), &pod_json(i)).expect("apply a Pod");
        }
        let run = match phase {
            "kubeplug" => {
                let (run, informer) = measure(kubeplug_sync(&server, objects)).await;
                informer.stop().await;
                run
            }
            "kube-rs" => {
                let (run, store) = measure(kube_rs_sync(&server, objects)).await;
                drop(store);
                run
            }
            other => panic!("no phase {other:?}; the phases are {PHASES:?}"),
        };
        println!("{}", run.to_json());
    });
}

/// Runs `phase` in a child process and reads its `PhaseRun`.
fn child(phase: &str, run: Run, objects: usize) -> PhaseRun {
    let executable = std::env::current_exe().expect("own executable");
    let mut command = Command::new(executable);
    command
        .args(["--phase", phase])
        .env("KUBEPLUG_BENCH_OBJECTS", objects.to_string());
    if run == Run::Full {
        command.arg("--bench");
    }
    let output = command.output().expect("start a phase");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "phase {phase} failed ({}): {}{}",
        output.status,
        stdout,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .rev()
        .find_map(PhaseRun::from_json)
        .unwrap_or_else(|| panic!("phase {phase} printed no measurement: {stdout}"))
}

fn main() {
    let run = Run::from_args();
    let objects = run.size("KUBEPLUG_BENCH_OBJECTS", 100_000, 200);
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--phase") {
        run_phase(args.get(at + 1).expect("--phase NAME"), objects);
        return;
    }
    let wire = (0..objects.min(1000))
        .map(|i| pod_json(i).len())
        .sum::<usize>()
        / objects.min(1000);
    let mut runs: Vec<Vec<PhaseRun>> = vec![Vec::new(); PHASES.len()];
    // Alternate the phases so that a disturbance of the machine falls on both.
    for _ in 0..run.repetitions() {
        for (phase, samples) in PHASES.iter().zip(runs.iter_mut()) {
            samples.push(child(phase, run, objects));
        }
    }
    let per_object = |phase: usize, pick: fn(&PhaseRun) -> f64| {
        median(runs[phase].iter().map(pick).collect()) / objects as f64
    };
    let json = per_object(0, |r| r.cached_json_bytes);
    let mut figures = vec![Figure::new(
        "cache_memory.cached_json_bytes_per_object",
        json,
        "bytes",
    )];
    for (index, name) in ["kubeplug", "kube_rs"].into_iter().enumerate() {
        let heap = per_object(index, |r| r.heap_bytes);
        figures.push(
            Figure::new(
                format!("cache_memory.{name}.bytes_per_object"),
                heap,
                "bytes",
            )
            .against("cache_memory.cached_json_bytes_per_object", heap / json),
        );
        figures.push(Figure::new(
            format!("cache_memory.{name}.rss_growth_per_object"),
            per_object(index, |r| r.rss_growth_bytes),
            "bytes",
        ));
        figures.push(Figure::new(
            format!("cache_memory.{name}.peak_rss"),
            median(runs[index].iter().map(|r| r.peak_rss_bytes).collect()),
            "bytes",
        ));
        figures.push(Figure::new(
            format!("cache_memory.{name}.sync_objects_per_second"),
            objects as f64 / median(runs[index].iter().map(|r| r.seconds).collect()),
            "objects/s",
        ));
    }
    let kubeplug = per_object(0, |r| r.heap_bytes);
    let kube_rs = per_object(1, |r| r.heap_bytes);
    figures.push(
        Figure::new("cache_memory.kubeplug_vs_kube_rs", kubeplug / kube_rs, "x")
            .against("cache_memory.kube_rs.bytes_per_object", kubeplug / kube_rs),
    );
    let rss_ratio = per_object(0, |r| r.rss_growth_bytes) / per_object(1, |r| r.rss_growth_bytes);
    figures.push(
        Figure::new("cache_memory.kubeplug_vs_kube_rs_rss", rss_ratio, "x")
            .against("cache_memory.kube_rs.rss_growth_per_object", rss_ratio),
    );
    println!(
        "# {objects} Pods of {wire} bytes with managedFields ({json:.0} bytes cached without), \
         each phase in its own process, median of {} runs",
        run.repetitions()
    );
    println!("| per object | kubeplug | kube-rs | kubeplug / kube-rs |");
    println!("|---|---|---|---|");
    println!(
        "| heap kept | {kubeplug:.0} B ({:.2}x JSON) | {kube_rs:.0} B ({:.2}x JSON) | {:.2} |",
        kubeplug / json,
        kube_rs / json,
        kubeplug / kube_rs
    );
    println!(
        "| RSS growth | {:.0} B | {:.0} B | {rss_ratio:.2} |",
        per_object(0, |r| r.rss_growth_bytes),
        per_object(1, |r| r.rss_growth_bytes),
    );
    for figure in &figures {
        figure.print();
    }
}
