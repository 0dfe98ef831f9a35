//! Informer pipeline figures: initial sync, steady-state deltas/s, and cache bytes per object.
//!
//! Source → Reflector (metadata decoding, managedFields dropped) → DeltaFIFO → Indexer → one
//! no-op listener, on a current-thread runtime. The source replays pre-encoded ~5 KB Pods, so
//! the figures are the pipeline's own. For "one core", pin it:
//! `cargo xtask bench pipeline` (which runs it under `taskset -c 0`).
//! `KUBEPLUG_BENCH_OBJECTS` and `KUBEPLUG_BENCH_UPDATES` change the sizes (defaults 100000 and
//! 1000000), `KUBEPLUG_BENCH_REPETITIONS` the measured runs (default 5; the figures are their
//! medians). `cargo test` runs it at tiny sizes so it cannot rot.

// A benchmark's job is to print its figures.
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::FutureExt;
use kubeplug_bench_support::{Figure, Run, median, peak_rss_bytes, pod_json};
use kubeplug_informer::informer::{HandlerOptions, SharedIndexInformer};
use kubeplug_informer::object::ObjectDecoder;
use kubeplug_informer::reflector::ReflectorConfig;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::source::{
    ListPage, ListRequest, ListerWatcher, SourceError, WatchEvent, WatchRequest, WatchStream,
};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// Lists `objects` in pages; its first watch streams `updates` MODIFIED events cycling over
/// them once `go` is notified, yielding now and then as a network read would.
struct Replay {
    objects: Arc<Vec<Bytes>>,
    updates: usize,
    watched: std::sync::atomic::AtomicBool,
    go: Arc<tokio::sync::Notify>,
}

impl ListerWatcher for Replay {
    fn list(
        &self,
        request: ListRequest,
    ) -> futures::future::BoxFuture<'_, Result<ListPage, SourceError>> {
        let start: usize = request
            .continue_token
            .map_or(0, |t| t.parse().expect("our token"));
        let end = (start + request.limit.unwrap_or(u32::MAX) as usize).min(self.objects.len());
        let page = ListPage {
            items: self.objects[start..end].to_vec(),
            resource_version: "1".into(),
            continue_token: (end < self.objects.len()).then(|| end.to_string()),
        };
        async move { Ok(page) }.boxed()
    }

    fn watch(
        &self,
        _: WatchRequest,
    ) -> futures::future::BoxFuture<'_, Result<WatchStream, SourceError>> {
        let stream: WatchStream = if self
            .watched
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            Box::pin(futures::stream::pending())
        } else {
            let objects = self.objects.clone();
            let updates = self.updates;
            let go = self.go.clone();
            Box::pin(futures::stream::unfold(0, move |i| {
                let objects = objects.clone();
                let go = go.clone();
                async move {
                    if i == 0 {
                        go.notified().await;
                    }
                    if i == updates {
                        return None;
                    }
                    if i % 64 == 63 {
                        tokio::task::yield_now().await;
                    }
                    let event = WatchEvent::Modified(objects[i % objects.len()].clone());
                    Some((Ok(event), i + 1))
                }
            }))
        };
        async move { Ok(stream) }.boxed()
    }
}

fn live_bytes(region: &Region<'_, std::alloc::System>) -> i64 {
    let change = region.change();
    change.bytes_allocated as i64 - change.bytes_deallocated as i64
}

async fn run_once(
    objects: &Arc<Vec<Bytes>>,
    updates: usize,
    measure_memory: bool,
) -> (Duration, Duration, Option<(i64, usize)>) {
    let pods = Resource::new("", "v1", "Pod", "pods", true);
    let go = Arc::new(tokio::sync::Notify::new());
    let source = Arc::new(Replay {
        objects: objects.clone(),
        updates,
        watched: Default::default(),
        go: go.clone(),
    });
    let region = Region::new(ALLOCATOR);
    let informer =
        SharedIndexInformer::new(source, ObjectDecoder::new(pods), ReflectorConfig::default());
    let mut handler = informer.add_handler(HandlerOptions::default());
    let started = Instant::now();
    informer.start();
    let mut seen = 0;
    while seen < objects.len() {
        seen += handler
            .recv_batch(256)
            .await
            .expect("informer running")
            .len();
    }
    let synced_at = started.elapsed();
    let memory = measure_memory.then(|| {
        let json: usize = informer
            .indexer()
            .list()
            .iter()
            .map(|o| o.json().len())
            .sum();
        (live_bytes(&region), json)
    });
    let streaming = Instant::now();
    go.notify_one();
    while seen < objects.len() + updates {
        seen += handler
            .recv_batch(256)
            .await
            .expect("informer running")
            .len();
    }
    let streamed = streaming.elapsed();
    informer.stop().await;
    (synced_at, streamed, memory)
}

fn main() {
    let run = Run::from_args();
    let object_count = run.size("KUBEPLUG_BENCH_OBJECTS", 100_000, 200);
    let updates = run.size("KUBEPLUG_BENCH_UPDATES", 1_000_000, 1_000);
    let objects: Arc<Vec<Bytes>> = Arc::new(
        (0..object_count)
            .map(|i| Bytes::from(pod_json(i)))
            .collect(),
    );
    let average = objects.iter().map(Bytes::len).sum::<usize>() / object_count;
    println!(
        "# {object_count} Pods of {average} bytes on the wire, then {updates} updates; current-thread runtime"
    );

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // Warm-up, then the measured runs; memory from the first measured run.
    runtime.block_on(run_once(&objects, updates.min(100_000), false));
    let mut syncs = Vec::new();
    let mut rates = Vec::new();
    let mut memory = None;
    for repetition in 0..run.repetitions() {
        let (sync, streamed, mem) = runtime.block_on(run_once(&objects, updates, repetition == 0));
        syncs.push(sync.as_secs_f64());
        rates.push(updates as f64 / streamed.as_secs_f64());
        memory = memory.or(mem);
    }
    let sync = median(syncs);
    let rate = median(rates);
    let (cache_bytes, json_bytes) = memory.expect("measured");
    let cache_per_object = cache_bytes as f64 / object_count as f64;
    let json_per_object = json_bytes as f64 / object_count as f64;
    let figures = [
        Figure::new("pipeline.initial_sync", sync, "s"),
        Figure::new(
            "pipeline.initial_sync_objects_per_second",
            object_count as f64 / sync,
            "objects/s",
        ),
        Figure::new("pipeline.steady_state_deltas_per_second", rate, "deltas/s"),
        Figure::new(
            "pipeline.cached_json_bytes_per_object",
            json_per_object,
            "bytes",
        ),
        Figure::new("pipeline.cache_bytes_per_object", cache_per_object, "bytes").against(
            "pipeline.cached_json_bytes_per_object",
            cache_per_object / json_per_object,
        ),
        Figure::new("pipeline.peak_rss", peak_rss_bytes() as f64, "bytes"),
    ];
    for figure in &figures {
        figure.print();
    }
    println!();
    println!("| figure | value |");
    println!("|---|---|");
    println!(
        "| initial sync of {object_count} | {sync:.3} s ({:.0} objects/s) |",
        object_count as f64 / sync
    );
    println!("| steady state | {rate:.0} deltas/s |");
    println!(
        "| cache | {cache_per_object:.0} bytes/object for {json_per_object:.0} bytes of JSON ({:.2}x) |",
        cache_per_object / json_per_object
    );
}
