//! Work queue throughput: 1M adds and 1M gets over 10k distinct keys, with 1, 2 and 8 workers
//! on a multi-threaded tokio runtime (one thread per core).
//!
//! Run with `cargo xtask bench workqueue`. Prints one JSON line per figure
//! (`workqueue.<queue>.<scenario>.<n>_workers`, its ratio against the baseline queue of the same
//! scenario and workers), then a table with, for each figure, the ratio to the 1-worker run
//! and to the baseline queue, both measured in the same process.
//!
//! Each figure is run once (1/10 of the size) to warm up, then `KUBEPLUG_BENCH_REPETITIONS`
//! times (default 5); the median is reported. `KUBEPLUG_BENCH_OPS` sets the items per run
//! (default 1000000). `cargo test` runs it at tiny sizes so it cannot rot. Workers are tokio tasks that call `tokio::task::consume_budget` after each item,
//! as a real handler awaiting I/O would: every 128 items or so, a worker yields its thread to
//! the other workers. Without that, a worker whose queue never runs dry would keep its thread
//! to itself and the workers would take turns instead of contending.
//!
//! Scenarios:
//! - `requeue`: the queue starts with the 10k keys; every worker loops
//!   get → done → add(same key) until 1M items were handed out. The queue never runs dry, so
//!   this measures the operations under lock contention.
//! - `feed`: one producer adds 1M keys (`i % 10k`) while the workers get → done. The queue
//!   often runs dry, so getters sleep and are woken: this measures the wake-ups. Adds of a
//!   key that is still waiting are deduplicated (fewer gets); adds and gets both count.
//!
//! Queues: `workqueue` (no metrics), `workqueue_with_metrics`, and `baseline`: the simplest
//! async queue, a mutexed `VecDeque` and the same `Notify` protocol, without dedup,
//! processing set or metrics. The baseline shows what the machine and the runtime cost
//! whatever the queue; the ratio to it is what the work queue's bookkeeping costs.

// A benchmark reports its figures on stdout.
#![allow(clippy::print_stdout)]

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kubeplug_bench_support::{Figure, Run as BenchRun, peak_rss_bytes};
use kubeplug_workqueue::{Queue, WorkqueueMetrics};
use prometheus_client::registry::Registry;
use tokio::sync::Notify;

const KEYS: u64 = 10_000;
const WORKER_COUNTS: [usize; 3] = [1, 2, 8];

/// The operations the scenarios use, implemented by the work queue and the baseline.
trait BenchQueue: Clone + Send + Sync + 'static {
    fn add(&self, key: u64);
    fn get(&self) -> impl Future<Output = Option<u64>> + Send;
    fn done(&self, key: u64);
    fn shut_down(&self);
}

impl BenchQueue for Queue<u64> {
    fn add(&self, key: u64) {
        Queue::add(self, key);
    }
    fn get(&self) -> impl Future<Output = Option<u64>> + Send {
        Queue::get(self)
    }
    fn done(&self, key: u64) {
        Queue::done(self, &key);
    }
    fn shut_down(&self) {
        Queue::shut_down(self);
    }
}

/// The baseline: a FIFO with the same wake-up protocol as `Queue::get` and nothing else.
#[derive(Clone, Default)]
struct Baseline {
    inner: Arc<BaselineInner>,
}

#[derive(Default)]
struct BaselineInner {
    /// The items, and whether the queue is shut down.
    state: Mutex<(VecDeque<u64>, bool)>,
    ready: Notify,
}

impl BenchQueue for Baseline {
    fn add(&self, key: u64) {
        self.inner.state.lock().unwrap().0.push_back(key);
        self.inner.ready.notify_one();
    }

    async fn get(&self) -> Option<u64> {
        let notified = self.inner.ready.notified();
        tokio::pin!(notified);
        loop {
            notified.as_mut().enable();
            {
                let mut state = self.inner.state.lock().unwrap();
                if let Some(key) = state.0.pop_front() {
                    return Some(key);
                }
                if state.1 {
                    return None;
                }
            }
            notified.as_mut().await;
            notified.set(self.inner.ready.notified());
        }
    }

    fn done(&self, _key: u64) {}

    fn shut_down(&self) {
        self.inner.state.lock().unwrap().1 = true;
        self.inner.ready.notify_waiters();
    }
}

/// What one run measured.
struct Run {
    elapsed: Duration,
    adds: u64,
    gets: u64,
}

impl Run {
    fn ops_per_sec(&self) -> f64 {
        (self.adds + self.gets) as f64 / self.elapsed.as_secs_f64()
    }
}

/// Every worker loops get → done → add(same key) until `total` items were handed out.
async fn requeue<Q: BenchQueue>(queue: Q, workers: usize, total: u64) -> Run {
    for key in 0..KEYS {
        queue.add(key);
    }
    let handed_out = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (queue, handed_out) = (queue.clone(), handed_out.clone());
            tokio::spawn(async move {
                let mut gets = 0u64;
                while handed_out.fetch_add(1, Ordering::Relaxed) < total {
                    let key = queue.get().await.expect("the queue is never shut down");
                    gets += 1;
                    queue.done(key);
                    queue.add(key);
                    tokio::task::consume_budget().await;
                }
                gets
            })
        })
        .collect();
    let mut gets = 0;
    for task in tasks {
        gets += task.await.expect("worker");
    }
    let elapsed = start.elapsed();
    assert_eq!(gets, total);
    Run {
        elapsed,
        adds: KEYS + gets,
        gets,
    }
}

/// One producer adds `total` keys while the workers get → done until shutdown.
async fn feed<Q: BenchQueue>(queue: Q, workers: usize, total: u64) -> Run {
    let start = Instant::now();
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let queue = queue.clone();
            tokio::spawn(async move {
                let mut gets = 0u64;
                while let Some(key) = queue.get().await {
                    gets += 1;
                    queue.done(key);
                    tokio::task::consume_budget().await;
                }
                gets
            })
        })
        .collect();
    let producer = tokio::spawn({
        let queue = queue.clone();
        async move {
            for i in 0..total {
                queue.add(i % KEYS);
                tokio::task::consume_budget().await;
            }
        }
    });
    producer.await.expect("producer");
    queue.shut_down();
    let mut gets = 0;
    for task in tasks {
        gets += task.await.expect("worker");
    }
    Run {
        elapsed: start.elapsed(),
        adds: total,
        gets,
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Workqueue,
    WorkqueueWithMetrics,
    Baseline,
}

#[derive(Clone, Copy, PartialEq)]
enum Scenario {
    Requeue,
    Feed,
}

fn figure(kind: Kind, scenario: Scenario) -> &'static str {
    match (kind, scenario) {
        (Kind::Workqueue, Scenario::Requeue) => "workqueue.queue.requeue",
        (Kind::WorkqueueWithMetrics, Scenario::Requeue) => "workqueue.queue_with_metrics.requeue",
        (Kind::Baseline, Scenario::Requeue) => "workqueue.baseline.requeue",
        (Kind::Workqueue, Scenario::Feed) => "workqueue.queue.feed",
        (Kind::WorkqueueWithMetrics, Scenario::Feed) => "workqueue.queue_with_metrics.feed",
        (Kind::Baseline, Scenario::Feed) => "workqueue.baseline.feed",
    }
}

async fn run(kind: Kind, scenario: Scenario, workers: usize, total: u64) -> Run {
    async fn on<Q: BenchQueue>(queue: Q, scenario: Scenario, workers: usize, total: u64) -> Run {
        match scenario {
            Scenario::Requeue => requeue(queue, workers, total).await,
            Scenario::Feed => feed(queue, workers, total).await,
        }
    }
    match kind {
        Kind::Workqueue => on(Queue::new(), scenario, workers, total).await,
        Kind::WorkqueueWithMetrics => {
            // A fresh registry per run: a queue name is taken until its queue is dropped.
            let mut registry = Registry::default();
            let metrics = WorkqueueMetrics::register(&mut registry);
            let queue = Queue::builder("bench")
                .metrics(&metrics)
                .expect("a fresh registry has no queue named bench")
                .build();
            on(queue, scenario, workers, total).await
        }
        Kind::Baseline => on(Baseline::default(), scenario, workers, total).await,
    }
}

/// The median run by ops/s.
fn median(mut runs: Vec<Run>) -> Run {
    runs.sort_by(|a, b| a.ops_per_sec().total_cmp(&b.ops_per_sec()));
    runs.swap_remove(runs.len() / 2)
}

fn main() {
    let bench_run = BenchRun::from_args();
    let ops = bench_run.size("KUBEPLUG_BENCH_OPS", 1_000_000, 2_000) as u64;
    let repetitions = bench_run.repetitions();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let threads = runtime.metrics().num_workers();

    struct Row {
        kind: Kind,
        scenario: Scenario,
        workers: usize,
        run: Run,
    }
    let mut rows: Vec<Row> = Vec::new();
    for scenario in [Scenario::Requeue, Scenario::Feed] {
        for kind in [Kind::Baseline, Kind::Workqueue, Kind::WorkqueueWithMetrics] {
            for workers in WORKER_COUNTS {
                runtime.block_on(run(kind, scenario, workers, ops / 10)); // warm-up
                let runs = (0..repetitions)
                    .map(|_| runtime.block_on(run(kind, scenario, workers, ops)))
                    .collect();
                let run = median(runs);
                let name = |kind| format!("{}.{workers}_workers", figure(kind, scenario));
                let value = Figure::new(name(kind), run.ops_per_sec(), "ops/s");
                // The baseline queue of this scenario and worker count ran first.
                let value = match rows.iter().find(|r| {
                    r.kind == Kind::Baseline && r.scenario == scenario && r.workers == workers
                }) {
                    Some(baseline) if kind != Kind::Baseline => value.against(
                        name(Kind::Baseline),
                        run.ops_per_sec() / baseline.run.ops_per_sec(),
                    ),
                    _ => value,
                };
                value.print();
                rows.push(Row {
                    kind,
                    scenario,
                    workers,
                    run,
                });
            }
        }
    }

    Figure::new("workqueue.peak_rss", peak_rss_bytes() as f64, "bytes").print();
    let ops_of = |kind: Kind, scenario: Scenario, workers: usize| {
        rows.iter()
            .find(|r| r.kind == kind && r.scenario == scenario && r.workers == workers)
            .map_or(f64::NAN, |r| r.run.ops_per_sec())
    };
    println!();
    println!(
        "{threads} runtime threads; {ops} gets (requeue) or adds (feed) over {KEYS} keys; \
         median of {repetitions}"
    );
    println!(
        "{:<40} {:>7} {:>8} {:>8} {:>9} {:>12} {:>9} {:>11}",
        "figure", "workers", "adds", "gets", "time", "ops/s", "vs 1 wkr", "vs baseline"
    );
    for row in &rows {
        let value = row.run.ops_per_sec();
        println!(
            "{:<40} {:>7} {:>8} {:>8} {:>7.1}ms {:>12.0} {:>8.2}x {:>10.2}x",
            figure(row.kind, row.scenario),
            row.workers,
            row.run.adds,
            row.run.gets,
            row.run.elapsed.as_secs_f64() * 1e3,
            value,
            value / ops_of(row.kind, row.scenario, 1),
            value / ops_of(Kind::Baseline, row.scenario, row.workers),
        );
    }
}
