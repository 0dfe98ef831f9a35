//! Decoding cost alone: how many ~5 KB Pods per second `ObjectDecoder` turns into `Object`s.
//!
//! `cargo bench -p kubeplug-informer --bench decode`; for instruction counts that do not
//! depend on machine load, run the built binary under `valgrind --tool=callgrind` with
//! `DECODE_OBJECTS=2000`.

// A benchmark's job is to print its figures.
#![allow(clippy::print_stdout)]

use std::time::Instant;

use kubeplug_informer::object::ObjectDecoder;
use kubeplug_informer::resource::Resource;

mod common;

fn main() {
    let count: usize = std::env::var("DECODE_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let pods: Vec<String> = (0..1000).map(common::pod_json).collect();
    let decoder = ObjectDecoder::new(Resource::new("", "v1", "Pod", "pods", true));
    let mut rates = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        for i in 0..count {
            let object = decoder
                .decode(pods[i % pods.len()].as_bytes())
                .expect("valid pod");
            std::hint::black_box(object);
        }
        rates.push(count as f64 / started.elapsed().as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    let average = pods.iter().map(String::len).sum::<usize>() / pods.len();
    println!(
        r#"{{"figure":"decode_objects_per_second","value":{:.0},"unit":"objects/s","object_bytes":{average}}}"#,
        rates[2]
    );
}
