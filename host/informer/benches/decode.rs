//! Decoding cost alone: how many ~5 KB Pods per second `ObjectDecoder` turns into `Object`s.
//!
//! `cargo xtask bench decode` (under `taskset -c 0`); for instruction counts that do not
//! depend on machine load, run the built binary under `valgrind --tool=callgrind` with
//! `KUBEPLUG_BENCH_OBJECTS=2000`. `KUBEPLUG_BENCH_OBJECTS` decodes per run (default 200000),
//! `KUBEPLUG_BENCH_REPETITIONS` runs (default 5, the figure is their median). `cargo test`
//! runs it at tiny sizes so it cannot rot.

// A benchmark's job is to print its figures.
#![allow(clippy::print_stdout)]

use std::time::Instant;

use kubeplug_bench_support::{Figure, Run, median, pod_json};
use kubeplug_informer::object::ObjectDecoder;
use kubeplug_informer::resource::Resource;

fn main() {
    let run = Run::from_args();
    let count = run.size("KUBEPLUG_BENCH_OBJECTS", 200_000, 100);
    let pods: Vec<String> = (0..1000).map(pod_json).collect();
    let decoder = ObjectDecoder::new(Resource::new("", "v1", "Pod", "pods", true));
    let mut rates = Vec::new();
    for _ in 0..run.repetitions() {
        let started = Instant::now();
        for i in 0..count {
            let object = decoder
                .decode(pods[i % pods.len()].as_bytes())
                .expect("valid pod");
            std::hint::black_box(object);
        }
        rates.push(count as f64 / started.elapsed().as_secs_f64());
    }
    let average = pods.iter().map(String::len).sum::<usize>() / pods.len();
    println!("# {count} decodes of Pods of {average} bytes per run");
    Figure::new("decode.objects_per_second", median(rates), "objects/s").print();
}
