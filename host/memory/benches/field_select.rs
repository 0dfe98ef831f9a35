//! What selecting on a body field costs: how many stored ~5 KB Pods per second a list
//! filters with `spec.nodeName=…` and `status.phase=…` (read from each object's JSON), against
//! `metadata.name=…` (answered by the key) in the same run. Every selector matches no Pod,
//! so the figures are the filter's cost and not the copying of the objects that match.
//!
//! `cargo xtask bench field-select` (under `taskset -c 0`). `KUBEPLUG_BENCH_OBJECTS` stored
//! Pods (default 20000), `KUBEPLUG_BENCH_LISTS` lists per run (default 10),
//! `KUBEPLUG_BENCH_REPETITIONS` runs per selector (default 5, the figure is their median).
//! `cargo test` runs it at tiny sizes so it cannot rot.

// A benchmark's job is to print its figures.
#![allow(clippy::print_stdout)]

use std::time::Instant;

use kubeplug_bench_support::{Figure, Run, median, pod_json};
use kubeplug_informer::resource::Resource;
use kubeplug_informer::selector::FieldSelector;
use kubeplug_informer::source::{ListRequest, ListerWatcher as _};
use kubeplug_memory::MemoryServer;

fn main() {
    let run = Run::from_args();
    let count = run.size("KUBEPLUG_BENCH_OBJECTS", 20_000, 100);
    let lists = run.size("KUBEPLUG_BENCH_LISTS", 10, 1);
    let pods = Resource::new("", "v1", "Pod", "pods", true);
    let server = MemoryServer::new();
    for i in 0..count {
        server.create(&pods, &pod_json(i)).expect("a valid Pod");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let rate = |selector: &str| {
        let selector = FieldSelector::parse(selector).expect("a valid selector");
        let lister = server.lister_watcher(pods.clone(), None, None, Some(selector));
        let mut rates = Vec::new();
        for _ in 0..run.repetitions() {
            let started = Instant::now();
            for _ in 0..lists {
                let page = runtime
                    .block_on(lister.list(ListRequest::default()))
                    .expect("a list");
                assert!(page.items.is_empty(), "the selector matches no Pod");
            }
            rates.push((count * lists) as f64 / started.elapsed().as_secs_f64());
        }
        median(rates)
    };
    let by_key = rate("metadata.name=none");
    println!("# lists of {count} stored Pods, each selector matching none");
    Figure::new("field_select.key.objects_per_second", by_key, "objects/s").print();
    for (name, selector) in [
        ("node_name", "spec.nodeName=none"),
        ("phase", "status.phase=none"),
    ] {
        let body = rate(selector);
        Figure::new(
            format!("field_select.{name}.objects_per_second"),
            body,
            "objects/s",
        )
        .against("field_select.key.objects_per_second", body / by_key)
        .print();
    }
}
