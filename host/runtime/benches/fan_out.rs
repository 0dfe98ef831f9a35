//! Issue 9 scenario 4 (P6), fan-out: 1, 10 and 100 `noop` Rust plugins subscribed to Pods on
//! one shared informer, each with its own listener and events driver, on one current-thread
//! runtime (`cargo xtask bench fan-out` pins the process to one core).
//!
//! The source is `pipeline_wasm.rs`'s (`common`): `KUBEPLUG_BENCH_OBJECTS` (10000) generated
//! Pods of 5–6 KB, then MODIFIED events. Plugins are added in steps (1, then 9 more, then 90
//! more) to the running informer, which replays its cache to each new listener; after each
//! step:
//!
//! - `fan_out.<n>_plugins.rss_per_added_plugin`: the process's RSS growth over the step,
//!   divided by the plugins it added (instance, compiled code, listener buffer, driver);
//! - `fan_out.<n>_plugins.deltas_per_second`: `KUBEPLUG_BENCH_UPDATES` (20000) updates as fast
//!   as the source emits them, timed until every plugin has handled the last one; the figure
//!   counts deltas handled by all the plugins together (updates × plugins / time), median
//!   of `KUBEPLUG_BENCH_REPETITIONS` (5) runs after a warm-up. `..._source_updates_per_second`
//!   is the same time counted in source updates;
//! - `fan_out.watches`: watches the informer opened at the source, over all the steps
//!   (target: 1).
//!
//! `cargo test` runs it at tiny sizes so it cannot rot.

// A benchmark reports on stdout by design.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kubeplug_bench_support::{Figure, Run, median, peak_rss_bytes, rss_bytes};
use kubeplug_informer::informer::{HandlerOptions, SharedIndexInformer};
use kubeplug_informer::object::ObjectDecoder;
use kubeplug_informer::reflector::ReflectorConfig;
use kubeplug_runtime::events::run_events;
use kubeplug_runtime::{
    Grants, Gvk, IndexerMap, NoCluster, Plugin, PluginLimits, PluginSpec, Runtime, RuntimeConfig,
};
use tokio::task::JoinHandle;

use common::{Phase, Pods, Replay, ensure_no_failed_call, pod_resource};

mod common;

/// The plugin counts measured, in the order they are reached.
const STEPS: [usize; 3] = [1, 10, 100];

/// The plugins attached so far, their drivers, and how many notifications each has been
/// sent: the cache replayed to it when it joined, then every update since.
struct Fleet {
    plugins: Vec<Arc<Plugin>>,
    drivers: Vec<JoinHandle<()>>,
    sent: Vec<u64>,
}

impl Fleet {
    /// Counts `updates` more notifications sent to every plugin.
    fn sent_to_all(&mut self, updates: usize) {
        for sent in &mut self.sent {
            *sent += updates as u64;
        }
    }

    /// Waits until every plugin has handled everything sent to it.
    async fn wait_all_handled(&self) -> Result<()> {
        loop {
            let mut behind = false;
            for (plugin, &sent) in self.plugins.iter().zip(&self.sent) {
                ensure_no_failed_call(plugin)?;
                behind |= plugin.status().events_delivered < sent;
            }
            if !behind {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// Adds plugins to `fleet` until it has `count`, each a `noop` on its own listener of
/// `informer`, and waits until each has handled the cache replayed to it.
async fn grow(
    runtime: &Runtime,
    noop: &[u8],
    informer: &SharedIndexInformer,
    fleet: &mut Fleet,
    count: usize,
) -> Result<()> {
    let caches = IndexerMap(BTreeMap::from([(
        Gvk::new("", "v1", "Pod"),
        informer.indexer().clone(),
    )]));
    while fleet.plugins.len() < count {
        let plugin = runtime
            .load(PluginSpec {
                path: format!("fan-out/noop-{}.wasm", fleet.plugins.len()).into(),
                bytes: noop.to_vec(),
                settings: "{}".into(),
                grants: Grants::default().allow_read(Gvk::new("", "v1", "Pod")),
                limits: PluginLimits {
                    // On one thread, a call suspended at an epoch tick resumes only after
                    // every other driver's turn: an unoptimised smoke run passes 1 s.
                    call_deadline: Duration::from_secs(10),
                    ..PluginLimits::default()
                },
                cache: Arc::new(caches.clone()),
                writer: Arc::new(NoCluster),
            })
            .await
            .context("loading noop")?;
        let plugin = Arc::new(plugin);
        let rx = informer.add_handler(HandlerOptions::default());
        fleet.drivers.push(run_events(plugin.clone(), vec![rx])?);
        fleet.plugins.push(plugin);
        fleet.sent.push(informer.indexer().len() as u64);
    }
    fleet.wait_all_handled().await
}

fn main() -> Result<()> {
    let layout = xtask::Layout::from_manifest_dir();
    xtask::build_plugins(&layout, &["noop".into()])?;
    let noop_path = layout.test_output_dir().join("noop.wasm");
    let noop =
        std::fs::read(&noop_path).with_context(|| format!("reading {}", noop_path.display()))?;
    let run = Run::from_args();
    let objects = run.size("KUBEPLUG_BENCH_OBJECTS", 10_000, 50);
    let updates = run.size("KUBEPLUG_BENCH_UPDATES", 20_000, 200);
    let repetitions = run.repetitions();
    let pods = Arc::new(Pods::generate(objects));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let figures = rt.block_on(async {
        let runtime = Runtime::new(RuntimeConfig::default())?;
        // Compiled once here, so that no step's RSS holds the compiler's transient memory.
        runtime.compile(&noop)?;
        let (source, phases) = Replay::new(pods.clone());
        let source = Arc::new(source);
        let informer = SharedIndexInformer::new(
            source.clone(),
            ObjectDecoder::new(pod_resource()),
            ReflectorConfig::default(),
        );
        informer.start();
        informer.wait_for_sync().await;
        let mut fleet = Fleet {
            plugins: Vec::new(),
            drivers: Vec::new(),
            sent: Vec::new(),
        };
        let mut figures = Vec::new();
        for count in STEPS {
            let added = count - fleet.plugins.len();
            let before = rss_bytes();
            grow(&runtime, &noop, &informer, &mut fleet, count).await?;
            let grown = rss_bytes().saturating_sub(before);
            let mut times = Vec::new();
            // The first is the warm-up.
            for repetition in 0..=repetitions {
                let started = Instant::now();
                phases
                    .send(Phase {
                        updates,
                        paced: None,
                    })
                    .context("the source's watch is gone")?;
                fleet.sent_to_all(updates);
                fleet.wait_all_handled().await?;
                if repetition > 0 {
                    times.push(started.elapsed().as_secs_f64());
                }
            }
            let time = median(times);
            let figure = |what: &str, value: f64, unit: &str| {
                Figure::new(format!("fan_out.{count}_plugins.{what}"), value, unit)
            };
            let step = [
                figure("rss_per_added_plugin", grown as f64 / added as f64, "bytes"),
                figure(
                    "deltas_per_second",
                    (updates * count) as f64 / time,
                    "deltas/s",
                ),
                figure(
                    "source_updates_per_second",
                    updates as f64 / time,
                    "updates/s",
                ),
            ];
            for figure in &step {
                figure.print();
            }
            figures.extend(step);
        }
        for driver in &fleet.drivers {
            driver.abort();
        }
        informer.stop().await;
        let watches = Figure::new("fan_out.watches", source.watches() as f64, "watches");
        watches.print();
        figures.push(watches);
        anyhow::Ok(figures)
    })?;
    Figure::new("fan_out.peak_rss", peak_rss_bytes() as f64, "bytes").print();
    println!();
    println!("# {objects} Pods of 5–6 KB, {updates} updates per run, median of {repetitions} runs");
    println!("| plugins | RSS per added plugin | deltas/s (all plugins) | source updates/s |");
    println!("|---|---|---|---|");
    for (count, step) in STEPS.iter().zip(figures.chunks(3)) {
        println!(
            "| {count} | {:.0} KiB | {:.0} | {:.0} |",
            step[0].value / 1024.0,
            step[1].value,
            step[2].value
        );
    }
    Ok(())
}
