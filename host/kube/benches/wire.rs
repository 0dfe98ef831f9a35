//! What the wire costs on top of decoding: ~6 KB Pods as MODIFIED watch lines, through
//! `decode_watch_line` (the envelope) alone, `ObjectDecoder` alone (the baseline), and both,
//! as a watch does; and as the items of list pages of [`PAGE`] Pods, through `decode_list`
//! and the decoder, as a paginated list does. The ratio of each against the decoder alone is
//! the share of an object's decoding time left to the object: 1.0 would be a free wire.
//!
//! `cargo xtask bench wire` (under `taskset -c 0`); for instruction counts, run the built
//! binary under `valgrind --tool=callgrind` with `KUBEPLUG_BENCH_OBJECTS=2000`.
//! `KUBEPLUG_BENCH_OBJECTS` lines per run (default 200000), `KUBEPLUG_BENCH_REPETITIONS` runs
//! (default 5; figures are medians). `cargo test` runs it at tiny sizes so it cannot rot.

// A benchmark's job is to print its figures.
#![allow(clippy::print_stdout)]

use std::time::Instant;

use bytes::Bytes;
use kubeplug_bench_support::{Figure, Run, median, pod_json};
use kubeplug_informer::object::ObjectDecoder;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::source::WatchEvent;
use kubeplug_kube::wire::{decode_list, decode_watch_line};

/// Items per list page: client-go's and kubeplug's page size.
const PAGE: usize = 500;

/// The object of a MODIFIED line.
fn modified(line: &Bytes) -> Bytes {
    match decode_watch_line(line).expect("a valid line") {
        WatchEvent::Modified(object) => object,
        other => panic!("not MODIFIED: {other:?}"),
    }
}

/// Objects per second over `count` steps of `step`, the median of the repetitions.
fn rate(run: &Run, count: usize, mut step: impl FnMut(usize)) -> f64 {
    let rates = (0..run.repetitions())
        .map(|_| {
            let started = Instant::now();
            (0..count).for_each(&mut step);
            count as f64 / started.elapsed().as_secs_f64()
        })
        .collect();
    median(rates)
}

fn main() {
    let run = Run::from_args();
    let count = run.size("KUBEPLUG_BENCH_OBJECTS", 200_000, 100);
    let lines: Vec<Bytes> = (0..1000)
        .map(|i| Bytes::from(format!(r#"{{"type":"MODIFIED","object":{}}}"#, pod_json(i))))
        .collect();
    let objects: Vec<Bytes> = lines.iter().map(modified).collect();
    let pods = Resource::new("", "v1", "Pod", "pods", true);
    let decoder = ObjectDecoder::new(pods.clone());
    let items: Vec<String> = (0..PAGE).map(pod_json).collect();
    let page = Bytes::from(format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"7","continue":"next"}},"items":[{}]}}"#,
        items.join(",")
    ));

    let envelope = rate(&run, count, |i| {
        std::hint::black_box(modified(&lines[i % lines.len()]));
    });
    let decoded = rate(&run, count, |i| {
        let object = decoder.decode(&objects[i % objects.len()]);
        std::hint::black_box(object.expect("a valid Pod"));
    });
    let watched = rate(&run, count, |i| {
        let object = decoder.decode(&modified(&lines[i % lines.len()]));
        std::hint::black_box(object.expect("a valid Pod"));
    });
    let listed = rate(&run, count.div_ceil(PAGE), |_| {
        let (page, _) = decode_list(&pods, &page, false).expect("a valid PodList");
        for item in &page.items {
            std::hint::black_box(decoder.decode(item).expect("a valid Pod"));
        }
    }) * PAGE as f64;

    let average = lines.iter().map(Bytes::len).sum::<usize>() / lines.len();
    println!("# {count} watch lines of {average} bytes per run");
    Figure::new("wire.envelope_lines_per_second", envelope, "lines/s").print();
    Figure::new("wire.decode_objects_per_second", decoded, "objects/s").print();
    Figure::new("wire.watched_objects_per_second", watched, "objects/s")
        .against("wire.decode_objects_per_second", watched / decoded)
        .print();
    Figure::new("wire.listed_objects_per_second", listed, "objects/s")
        .against("wire.decode_objects_per_second", listed / decoded)
        .print();
}
