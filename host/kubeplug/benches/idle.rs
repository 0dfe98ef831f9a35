//! The CPU an idle host uses: the release `kubeplug` binary with the example plugins, ready
//! and with nothing happening, on the embedded local cluster and against the fake API server.
//! Each figure is the host process's CPU time over the window (user and system, every
//! thread) as a share of one core; the target is under 1 %. The scans of the watched
//! directories in the window come beside it: an idle host makes only periodic ones.
//!
//! Knobs (full runs): `KUBEPLUG_BENCH_IDLE_SECONDS` (default 60); a smoke run measures one
//! second with label-audit alone.

#[path = "../tests/support/mod.rs"]
#[allow(dead_code)] // The binary tests' helpers; this bench uses the host and plugin ones.
mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kubeplug_bench_support::{Figure, Run, cpu_time};
use kubeplug_fake_apiserver::{FakeApiServer, FakeOptions, builtin_resources};
use kubeplug_informer::resource::Resource;
use kubeplug_local::LocalCluster;
use support::{Host, built_plugin};

/// The repository's `examples/`.
fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// A plugins directory with the example plugins built (label-audit alone in a smoke run).
fn plugins_dir(run: Run, dir: &Path) -> PathBuf {
    let plugins = dir.join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    let names: Vec<String> = match run {
        Run::Smoke => vec!["label-audit".to_owned()],
        Run::Full => {
            let sources = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins/examples");
            let mut names: Vec<String> = std::fs::read_dir(sources)
                .unwrap()
                .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        }
    };
    for name in names {
        std::fs::copy(built_plugin(&name), plugins.join(format!("{name}.wasm"))).unwrap();
    }
    plugins
}

/// The sum of a counter family's series in a `/metrics` answer.
fn total(metrics: &str, family: &str) -> u64 {
    metrics
        .lines()
        .filter(|line| line.starts_with(family))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum()
}

/// Measures `host` idle for `window` once ready: its CPU share of one core, in percent, and
/// the directory scans it made meanwhile.
fn measure_idle(host: &Host, window: Duration, warm_up: Duration) -> (f64, u64) {
    host.wait_for("/readyz", |status, _| status == 200);
    std::thread::sleep(warm_up);
    let scans = || {
        let (_, metrics) = host.get("/metrics");
        total(&metrics, "kubeplug_plugin_dir_scans_total")
            + total(&metrics, "kubeplug_local_manifest_scans_total")
    };
    let pid = host.child.id();
    let (cpu_before, scans_before, started) = (cpu_time(pid).unwrap(), scans(), Instant::now());
    std::thread::sleep(window);
    let (cpu_after, elapsed) = (cpu_time(pid).unwrap(), started.elapsed());
    let share = (cpu_after - cpu_before).as_secs_f64() / elapsed.as_secs_f64() * 100.0;
    (share, scans() - scans_before)
}

fn report(backend: &str, (share, scans): (f64, u64)) {
    Figure::new(format!("idle.{backend}.cpu_share"), share, "% of a core").print();
    Figure::new(format!("idle.{backend}.scans"), scans as f64, "scans").print();
}

/// The example cluster's objects, served by the fake API server.
fn seeded(server: &FakeApiServer) {
    let (local, _) = LocalCluster::open(examples().join("cluster")).unwrap();
    let mut resources = builtin_resources();
    resources.extend([
        Resource::new("apps", "v1", "Deployment", "deployments", true),
        Resource::new("", "v1", "ResourceQuota", "resourcequotas", true),
    ]);
    for resource in resources {
        server.serve(resource.clone());
        for json in local.server().snapshot(&resource).into_values() {
            // As a client would create it: the server assigns the resourceVersion.
            let mut object: serde_json::Value = serde_json::from_slice(&json).unwrap();
            object["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("resourceVersion");
            server
                .memory()
                .create(&resource, &object.to_string())
                .unwrap();
        }
    }
}

fn main() {
    let run = Run::from_args();
    let seconds = run.size("KUBEPLUG_BENCH_IDLE_SECONDS", 60, 1);
    let window = Duration::from_secs(seconds as u64);
    let warm_up = match run {
        Run::Full => Duration::from_secs(2),
        Run::Smoke => Duration::ZERO,
    };
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugins_dir(run, dir.path());
    let config = examples().join("kubeplug.toml");

    let local = Host::start([
        "--local".as_ref(),
        examples().join("cluster").as_os_str(),
        "--plugins".as_ref(),
        plugins.as_os_str(),
        "--config".as_ref(),
        config.as_os_str(),
    ]);
    report("local", measure_idle(&local, window, warm_up));
    drop(local);

    // The fake server answers on this runtime's workers while the main thread measures.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = runtime.block_on(FakeApiServer::start(FakeOptions::default()));
    let server = server.unwrap();
    seeded(&server);
    let kubeconfig = server.write_kubeconfig(dir.path()).unwrap();
    let kube = Host::start([
        "--kubeconfig".as_ref(),
        kubeconfig.as_os_str(),
        "--plugins".as_ref(),
        plugins.as_os_str(),
        "--config".as_ref(),
        config.as_os_str(),
    ]);
    report("kube", measure_idle(&kube, window, warm_up));
    drop(kube);
    drop(server);
}
