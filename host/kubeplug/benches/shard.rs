//! Sharding (issue 26): release `kubeplug run --sharding` replicas against the fake API
//! server, with the Lease durations of the tests (2 s lease, 800 ms renew deadline, 200 ms
//! retry).
//!
//! - `shard.handover_after_kill.{p50,max}_seconds`: from SIGKILL of one of three replicas to
//!   the last survivor's completed handover to the two-member ring. It includes waiting for
//!   the dead replica's Lease to expire (2 s), which is the protocol's price for never
//!   overlapping.
//! - `shard.handover_after_add.{p50,max}_seconds`: from a new replica's first valid Lease to
//!   the last of the three's completed handover to the three-member ring, once the killed
//!   replica's Lease has been deleted (a newcomer that sees a dead member's Lease waits a
//!   lease duration for it to expire in its own eyes).
//! - `shard.throughput.{1,2,3}_replicas`: deliveries a second of a CPU-heavy plugin (the
//!   shard recorder spinning per event) over objects created before the replicas start,
//!   from the first delivery's start to the last one's end, as the delivery log has them; `shard.share.N_replicas.rK` is each
//!   replica's part. On two cores, expect it to flatten at two replicas.
//!
//! Knobs (full runs): `KUBEPLUG_BENCH_SHARD_TRIALS` (default 20), `KUBEPLUG_BENCH_SHARD_OBJECTS`
//! (default 2000), `KUBEPLUG_BENCH_SHARD_SPIN` (default 2,000,000 steps an event).

#[path = "../tests/support/mod.rs"]
#[allow(dead_code)] // The binary tests' helpers; this bench uses the host and plugin ones.
mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kubeplug_bench_support::{Figure, Run, median};
use kubeplug_fake_apiserver::{FakeApiServer, FakeOptions};
use kubeplug_informer::resource::Resource;
use support::{Host, built_plugin};

/// A sharded replica of the shard recorder, logging its deliveries to `log`.
fn replica(identity: &str, kubeconfig: &Path, dir: &Path, log: &Path) -> Host {
    let flags = [
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--plugins={}", dir.join("plugins").display()),
        format!("--config={}", dir.join("kubeplug.toml").display()),
        "--namespace=bench".to_owned(),
        "--sharding".to_owned(),
        "--sharding-namespace=bench".to_owned(),
        format!("--sharding-identity={identity}"),
        "--leader-elect-lease-duration=2s".to_owned(),
        "--leader-elect-renew-deadline=800ms".to_owned(),
        "--leader-elect-retry-period=200ms".to_owned(),
        format!("--delivery-log={}", log.display()),
    ];
    Host::start(&flags)
}

/// How many handovers to a ring of `members` (as `Debug` prints them) `host` has completed.
fn handovers_to(host: &Host, members: &str) -> usize {
    let wanted = format!("members={members}");
    host.stderr_lines()
        .iter()
        .filter(|line| line.contains("handover done") && line.contains(&wanted))
        .count()
}

/// Polls every 5 ms until `done`; panics after two minutes.
fn poll(what: &str, mut done: impl FnMut() -> bool) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within two minutes");
        std::thread::sleep(Duration::from_millis(5));
    }
    Instant::now()
}

/// A plugins directory with the shard recorder spinning `spin` steps an event.
fn setup(dir: &Path, spin: usize) {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(
        built_plugin("shard-recorder"),
        plugins.join("shard-recorder.wasm"),
    )
    .unwrap();
    std::fs::write(
        dir.join("kubeplug.toml"),
        format!(
            "[plugins.shard-recorder]\nsettings = {{ spin = {spin} }}\n\
             [plugins.shard-recorder.grants]\nread = [\"v1/ConfigMap\"]\n"
        ),
    )
    .unwrap();
}

fn seconds(samples: &[Duration]) -> Vec<f64> {
    samples.iter().map(Duration::as_secs_f64).collect()
}

fn handovers(run: Run, kubeconfig: &Path, dir: &Path) {
    let trials = run.size("KUBEPLUG_BENCH_SHARD_TRIALS", 20, 1);
    let log = dir.join("handovers.jsonl");
    let mut hosts: BTreeMap<String, Host> = BTreeMap::new();
    let names = |hosts: &BTreeMap<String, Host>| format!("{:?}", hosts.keys().collect::<Vec<_>>());
    for identity in ["a", "b", "c0"] {
        hosts.insert(
            identity.to_owned(),
            replica(identity, kubeconfig, dir, &log),
        );
    }
    let members = names(&hosts);
    poll("the first ring", || {
        hosts.values().all(|h| handovers_to(h, &members) > 0)
    });
    let (mut after_kill, mut after_add) = (Vec::new(), Vec::new());
    for trial in 0..trials {
        let gone = format!("c{trial}");
        let remaining = format!("{:?}", ["a", "b"]);
        let before: Vec<usize> = ["a", "b"]
            .iter()
            .map(|name| handovers_to(&hosts[*name], &remaining))
            .collect();
        let killed = Instant::now();
        drop(hosts.remove(&gone));
        let done = poll("the handover after a kill", || {
            ["a", "b"]
                .iter()
                .zip(&before)
                .all(|(name, before)| handovers_to(&hosts[*name], &remaining) > *before)
        });
        after_kill.push(done - killed);
        // A replica that sees a dead member's Lease for the first time waits a lease duration
        // for it to expire in its own eyes; the survivors delete it a lease duration after it
        // expired, and the add is measured from then, as on a cluster where adds do not
        // follow kills within seconds.
        let deleted = |host: &Host| {
            host.stderr_lines()
                .iter()
                .filter(|line| line.contains("deleted the Lease of a member dead for long"))
                .count()
        };
        let deletions: usize = ["a", "b"].iter().map(|name| deleted(&hosts[*name])).sum();
        poll("the dead member's Lease deleted", || {
            ["a", "b"]
                .iter()
                .map(|name| deleted(&hosts[*name]))
                .sum::<usize>()
                > deletions
        });

        let added = format!("c{}", trial + 1);
        hosts.insert(added.clone(), replica(&added, kubeconfig, dir, &log));
        let members = names(&hosts);
        let joined = poll("the new replica's Lease", || {
            hosts[&added]
                .stderr_lines()
                .iter()
                .any(|line| line.contains("takes part in the ring"))
        });
        let done = poll("the handover after an add", || {
            hosts.values().all(|h| handovers_to(h, &members) > 0)
        });
        after_add.push(done - joined);
    }
    for (name, samples) in [
        ("handover_after_kill", seconds(&after_kill)),
        ("handover_after_add", seconds(&after_add)),
    ] {
        let max = samples.iter().copied().fold(0.0, f64::max);
        Figure::new(format!("shard.{name}.p50_seconds"), median(samples), "s").print();
        Figure::new(format!("shard.{name}.max_seconds"), max, "s").print();
    }
}

fn throughput(run: Run, server: &FakeApiServer, kubeconfig: &Path, dir: &Path) {
    let objects = run.size("KUBEPLUG_BENCH_SHARD_OBJECTS", 2000, 20);
    let config_maps = Resource::new("", "v1", "ConfigMap", "configmaps", true);
    for index in 0..objects {
        let json = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"load-{index}","namespace":"bench"}},"data":{{"n":"{index}"}}}}"#
        );
        server.memory().create(&config_maps, &json).unwrap();
    }
    let mut one = None;
    for replicas in 1..=3 {
        let log = dir.join(format!("throughput-{replicas}.jsonl"));
        let names: Vec<String> = (0..replicas).map(|i| format!("t{replicas}-{i}")).collect();
        let hosts: Vec<Host> = names
            .iter()
            .map(|name| replica(name, kubeconfig, dir, &log))
            .collect();
        let members = format!("{names:?}");
        poll("the ring", || {
            hosts.iter().all(|h| handovers_to(h, &members) > 0)
        });
        // Each object's first delivery: its replica, start and end (microseconds).
        let mut first: BTreeMap<String, (String, u64, u64)> = BTreeMap::new();
        poll("every object delivered", || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            first.clear();
            // A line the replicas are still writing has no newline yet.
            for line in text
                .split_inclusive('\n')
                .filter(|line| line.ends_with('\n'))
            {
                let line: serde_json::Value = serde_json::from_str(line).unwrap();
                let key = line["key"].as_str().unwrap_or_default();
                if key.starts_with("bench/load-") && !first.contains_key(key) {
                    let replica = line["replica"].as_str().unwrap().to_owned();
                    let times = (
                        line["start"].as_u64().unwrap(),
                        line["end"].as_u64().unwrap(),
                    );
                    first.insert(key.to_owned(), (replica, times.0, times.1));
                }
            }
            first.len() == objects
        });
        let begin = first.values().map(|(_, start, _)| *start).min().unwrap();
        let end = first.values().map(|(_, _, end)| *end).max().unwrap();
        let rate = objects as f64 / ((end - begin) as f64 / 1e6);
        let mut per_replica: BTreeMap<String, usize> = BTreeMap::new();
        for (replica, _, _) in first.values() {
            *per_replica.entry(replica.clone()).or_default() += 1;
        }
        let figure = Figure::new(
            format!("shard.throughput.{replicas}_replicas"),
            rate,
            "deliveries/s",
        );
        match one {
            None => {
                one = Some(rate);
                figure.print();
            }
            Some(one) => figure
                .against("shard.throughput.1_replicas", rate / one)
                .print(),
        }
        for (replica, count) in per_replica {
            Figure::new(
                format!("shard.share.{replicas}_replicas.{replica}"),
                count as f64,
                "deliveries",
            )
            .print();
        }
        drop(hosts);
    }
}

fn main() {
    let run = Run::from_args();
    let spin = run.size("KUBEPLUG_BENCH_SHARD_SPIN", 2_000_000, 1000);
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), spin);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = runtime
        .block_on(FakeApiServer::start(FakeOptions::default()))
        .unwrap();
    let kubeconfig: PathBuf = server.write_kubeconfig(dir.path()).unwrap();
    handovers(run, &kubeconfig, dir.path());
    throughput(run, &server, &kubeconfig, dir.path());
}
