//! Initial sync through the real HTTP path: the fake API server, a real kube client,
//! `KubeListerWatcher`, the informer. Prints sync time and cache bytes per object, for
//! list-then-watch and for a streaming list, so the informer's memory target can be checked
//! on this path too. `KUBE_SYNC_OBJECTS` sets the size (default 10000 ConfigMaps of ~5 KB).
//! Run: `cargo bench -p kubeplug-kube --bench kube_sync`.

// A benchmark's job is to print its figures.
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

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

async fn sync_once(
    server: &FakeApiServer,
    client: &KubeClient,
    mode: InitialListMode,
) -> (Duration, i64, usize) {
    let resource = Resource::new("", "v1", "ConfigMap", "configmaps", true);
    let region = Region::new(ALLOCATOR);
    let lw = KubeListerWatcher::new(
        client.clone(),
        resource.clone(),
        None,
        None,
        None,
        KubeSourceOptions::default(),
    );
    let config = ReflectorConfig {
        initial_list: mode,
        ..ReflectorConfig::default()
    };
    let informer = SharedIndexInformer::new(Arc::new(lw), ObjectDecoder::new(resource), config);
    let started = Instant::now();
    informer.start();
    informer.wait_for_sync().await;
    let took = started.elapsed();
    // Let the page buffers of the last responses go.
    tokio::time::sleep(Duration::from_millis(200)).await;
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
    (took, live, json)
}

fn main() {
    let objects: usize = std::env::var("KUBE_SYNC_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
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
        let mut wire_bytes = 0;
        for i in 0..objects {
            let json = configmap(i);
            wire_bytes += json.len();
            server.memory().create(&resource, &json).expect("create");
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let path = server.write_kubeconfig(dir.path()).expect("kubeconfig");
        let client = KubeClient::from_source(&ConfigSource::Kubeconfig {
            path,
            context: None,
        })
        .await
        .expect("client");
        println!(
            "# {objects} ConfigMaps of {} bytes as written, through HTTP and a kube client",
            wire_bytes / objects
        );
        println!(
            "| mode | sync | objects/s | cache bytes/object | cached JSON bytes/object | ratio |"
        );
        println!("|---|---|---|---|---|---|");
        for (name, mode) in [
            ("list-then-watch", InitialListMode::ListThenWatch),
            ("streaming list", InitialListMode::StreamingList),
        ] {
            // A warm-up run, then the measured one.
            sync_once(&server, &client, mode).await;
            let (took, live, json) = sync_once(&server, &client, mode).await;
            println!(
                "| {name} | {:.3} s | {:.0} | {:.0} | {:.0} | {:.2}x |",
                took.as_secs_f64(),
                objects as f64 / took.as_secs_f64(),
                live as f64 / objects as f64,
                json as f64 / objects as f64,
                live as f64 / json as f64,
            );
        }
    });
}
