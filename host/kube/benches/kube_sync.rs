//! Initial sync through the real HTTP path: the fake API server, a real kube client,
//! `KubeListerWatcher`, the informer. Prints sync time and cache bytes per object, for
//! list-then-watch, for a streaming list and for a streaming list of metadata alone (issue 24;
//! their ratios are their objects/s over list-then-watch's, and the metadata-only cache's
//! bytes per object over the whole-object streaming list's), so the informer's memory target
//! can be checked on this path too, and
//! the process's RSS once synced (the fake API server, holding every object, runs in the
//! same process: compare the modes with each other, not with a real host).
//! `KUBEPLUG_BENCH_OBJECTS` sets the sizes, comma-separated (default `10000,100000`
//! ConfigMaps of ~5 KB; the server gets the objects of the larger size added to those it
//! has), `KUBEPLUG_BENCH_REPETITIONS` the measured syncs per mode after one warm-up (default
//! 5, figures are medians). Figures are `kube_sync.<objects>.<mode>.<what>`. Run:
//! `cargo xtask bench kube-sync`; `cargo test` runs it at tiny sizes so it cannot rot.

// A benchmark's job is to print its figures.
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use kubeplug_bench_support::{Figure, Run, median, peak_rss_bytes, rss_bytes};
use kubeplug_fake_apiserver::{FakeApiServer, FakeOptions};
use kubeplug_informer::informer::SharedIndexInformer;
use kubeplug_informer::object::ObjectDecoder;
use kubeplug_informer::reflector::{InitialListMode, ReflectorConfig};
use kubeplug_informer::resource::Resource;
use kubeplug_kube::config::{ConfigSource, KubeClient};
use kubeplug_kube::lister::{KubeListerWatcher, KubeSourceOptions};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

fn configmap(i: usize) -> String {
    let filler: String = (0..4_800)
        .map(|j| char::from(b'a' + ((i + j) % 26) as u8))
        .collect();
    serde_json::json!({
        "metadata": {"name": format!("cm-{i:06}"), "namespace": format!("ns-{}", i % 10),
            "labels": {"app": "bench", "shard": (i % 16).to_string()},
            "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {".": {}, "f:blob": {}}}}]},
        "data": {"blob": filler},
    })
    .to_string()
}

/// One sync in `mode`, of metadata alone with `metadata`.
async fn sync_once(
    server: &FakeApiServer,
    client: &KubeClient,
    mode: InitialListMode,
    metadata: bool,
) -> (Duration, i64, usize, u64) {
    let resource = Resource::new("", "v1", "ConfigMap", "configmaps", true);
    let region = Region::new(ALLOCATOR);
    let lw = KubeListerWatcher::new(
        client.clone(),
        resource.clone(),
        None,
        KubeSourceOptions::default(),
    );
    let config = ReflectorConfig {
        initial_list: mode,
        ..ReflectorConfig::default()
    };
    let decoder = ObjectDecoder::new(resource);
    let informer = match metadata {
        true => SharedIndexInformer::new(
            Arc::new(lw.metadata_only()),
            decoder.metadata_only(),
            config,
        ),
        false => SharedIndexInformer::new(Arc::new(lw), decoder, config),
    };
    let started = Instant::now();
    informer.start();
    informer.wait_for_sync().await;
    let took = started.elapsed();
    // Let the page buffers of the last responses go.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss = rss_bytes();
    let change = region.change();
    let live = change.bytes_allocated as i64 - change.bytes_deallocated as i64;
    let json: usize = informer
        .indexer()
        .list()
        .iter()
        .map(|o| o.json().len())
        .sum();
    let _ = server;
    informer.stop().await;
    (took, live, json, rss)
}

fn main() {
    let run = Run::from_args();
    let sizes = run.sizes("KUBEPLUG_BENCH_OBJECTS", &[10_000, 100_000], &[50]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let server = FakeApiServer::start(FakeOptions::default())
            .await
            .expect("server");
        let resource = Resource::new("", "v1", "ConfigMap", "configmaps", true);
        let dir = tempfile::tempdir().expect("temp dir");
        let path = server.write_kubeconfig(dir.path()).expect("kubeconfig");
        let client = KubeClient::from_source(&ConfigSource::Kubeconfig {
            path,
            context: None,
        })
        .await
        .expect("client");
        let mut figures = Vec::new();
        let (mut created, mut wire_bytes) = (0, 0);
        for objects in sizes {
            for i in created..objects {
                let json = configmap(i);
                wire_bytes += json.len();
                server.memory().create(&resource, &json).expect("create");
            }
            created = created.max(objects);
            println!(
                "# {objects} ConfigMaps of {} bytes as written, through HTTP and a kube client",
                wire_bytes / created
            );
            println!(
                "| mode | sync | objects/s | cache bytes/object | cached JSON bytes/object | ratio | RSS synced |"
            );
            println!("|---|---|---|---|---|---|---|");
            let prefix = format!("kube_sync.{objects}");
            // The other modes are compared with list-then-watch, the first.
            let mut list_then_watch_rate = None;
            // The metadata-only cache is compared with the streaming list's, of whole objects.
            let mut whole_cache = None;
            for (name, mode, metadata) in [
                ("list_then_watch", InitialListMode::ListThenWatch, false),
                ("streaming_list", InitialListMode::StreamingList, false),
                ("metadata_only", InitialListMode::StreamingList, true),
            ] {
                sync_once(&server, &client, mode, metadata).await; // warm-up
                let (mut rates, mut lives, mut jsons, mut rsses) =
                    (Vec::new(), Vec::new(), Vec::new(), Vec::new());
                for _ in 0..run.repetitions() {
                    let (took, live, json, rss) =
                        sync_once(&server, &client, mode, metadata).await;
                    rates.push(objects as f64 / took.as_secs_f64());
                    lives.push(live as f64 / objects as f64);
                    jsons.push(json as f64 / objects as f64);
                    rsses.push(rss as f64);
                }
                let (rate, live, json, rss) =
                    (median(rates), median(lives), median(jsons), median(rsses));
                println!(
                    "| {name} | {:.3} s | {rate:.0} | {live:.0} | {json:.0} | {:.2}x | {:.0} MiB |",
                    objects as f64 / rate,
                    live / json,
                    rss / 1024.0 / 1024.0,
                );
                let speed = Figure::new(
                    format!("{prefix}.{name}.objects_per_second"),
                    rate,
                    "objects/s",
                );
                figures.push(match list_then_watch_rate {
                    None => speed,
                    Some(baseline) => speed.against(
                        format!("{prefix}.list_then_watch.objects_per_second"),
                        rate / baseline,
                    ),
                });
                list_then_watch_rate.get_or_insert(rate);
                figures.push(Figure::new(
                    format!("{prefix}.{name}.sync"),
                    objects as f64 / rate,
                    "s",
                ));
                let json_figure = format!("{prefix}.{name}.cached_json_bytes_per_object");
                figures.push(
                    Figure::new(
                        format!("{prefix}.{name}.cache_bytes_per_object"),
                        live,
                        "bytes",
                    )
                    .against(&json_figure, live / json),
                );
                figures.push(Figure::new(json_figure, json, "bytes"));
                if metadata {
                    // The same bytes per object, against the whole objects' cache.
                    let whole: f64 = whole_cache.expect("the streaming list ran first");
                    figures.push(
                        Figure::new(format!("{prefix}.{name}.cache_against_whole"), live, "bytes")
                            .against(
                                format!("{prefix}.streaming_list.cache_bytes_per_object"),
                                live / whole,
                            ),
                    );
                } else if mode == InitialListMode::StreamingList {
                    whole_cache = Some(live);
                }
                figures.push(Figure::new(
                    format!("{prefix}.{name}.rss_synced"),
                    rss,
                    "bytes",
                ));
            }
        }
        figures.push(Figure::new(
            "kube_sync.peak_rss",
            peak_rss_bytes() as f64,
            "bytes",
        ));
        for figure in &figures {
            figure.print();
        }
    });
}
