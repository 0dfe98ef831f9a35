//! Sharding (issue 26): `kubeplug run --sharding` replicas, each a process of its own with
//! its own client, share a plugin's keys on the fake API server. Every replica appends each
//! delivery to one shared `--delivery-log`: the recorder the checks read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use http::Method;
use kubeplug_shard::Ring;
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest as _, Sha256};

use crate::PluginSetup;
use crate::cluster::{Cluster, Server, on_both_servers};
use crate::support::{Host, wait_until};

/// One delivered key, as the delivery log has it.
#[derive(Debug, Clone, Deserialize)]
struct Delivery {
    replica: String,
    key: String,
    rv: String,
    start: u64,
    end: u64,
    ok: bool,
    /// Its replica's Lease had lapsed when the call ended: it froze in the call, and its
    /// writes were refused from then on.
    #[serde(default)]
    fenced: bool,
}

/// Every delivery so far, in the order the replicas wrote them; a line still being written
/// (no newline yet) is left for the next read. The log is the record these tests check, so
/// it must be whole: a `{"dropped":N}` line (its queue overflowed) fails the test.
fn deliveries(log: &Path) -> Vec<Delivery> {
    complete_lines(log)
        .iter()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
        .collect()
}

/// The delivery log's complete lines, checked to have lost none.
fn complete_lines(log: &Path) -> Vec<String> {
    let lines: Vec<String> = std::fs::read_to_string(log)
        .unwrap_or_default()
        .split_inclusive('\n')
        .filter(|line| line.ends_with('\n'))
        .map(str::to_owned)
        .collect();
    let dropped: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("{\"dropped\""))
        .collect();
    assert!(
        dropped.is_empty(),
        "the delivery log lost calls: {dropped:?}"
    );
    lines
}

/// Deliveries of one key by two replicas whose times overlap. A fenced call (its replica
/// froze in it) is left out: it can overlap, and could write nothing.
fn overlaps(deliveries: &[Delivery]) -> Vec<String> {
    let mut by_key: BTreeMap<&str, Vec<&Delivery>> = BTreeMap::new();
    for delivery in deliveries.iter().filter(|d| !d.fenced) {
        by_key.entry(&delivery.key).or_default().push(delivery);
    }
    let mut found = Vec::new();
    for (key, of_key) in by_key {
        for (i, a) in of_key.iter().enumerate() {
            for b in &of_key[i + 1..] {
                if a.replica != b.replica && a.start <= b.end && b.start <= a.end {
                    found.push(format!("{key}: {a:?} and {b:?}"));
                }
            }
        }
    }
    found
}

/// Keys whose deliveries, in the order they started, change replica more than `changes`
/// times: a key moves once per membership change that moves it, and never back and forth
/// between two replicas that both deliver it.
fn handed_back_and_forth(deliveries: &[Delivery], changes: usize) -> Vec<String> {
    let mut by_key: BTreeMap<&str, Vec<&Delivery>> = BTreeMap::new();
    for delivery in deliveries {
        by_key.entry(&delivery.key).or_default().push(delivery);
    }
    by_key
        .into_iter()
        .filter_map(|(key, mut of_key)| {
            of_key.sort_by_key(|d| d.start);
            let replicas: Vec<&str> = of_key.iter().map(|d| d.replica.as_str()).collect();
            let switches = replicas.windows(2).filter(|w| w[0] != w[1]).count();
            (switches > changes).then(|| format!("{key}: {replicas:?}"))
        })
        .collect()
}

/// A sharded replica `identity`, with the short Lease durations of the election tests,
/// watching only the cluster's test namespace.
fn replica(identity: &str, cluster: &Cluster, setup: &PluginSetup, log: &Path) -> Host {
    replica_in(identity, cluster, setup, log, Some(&cluster.namespace))
}

/// [`replica`], watching `namespace`, or every namespace.
fn replica_in(
    identity: &str,
    cluster: &Cluster,
    setup: &PluginSetup,
    log: &Path,
    namespace: Option<&str>,
) -> Host {
    let mut flags = vec![
        format!("--kubeconfig={}", cluster.kubeconfig.display()),
        format!("--plugins={}", setup.plugins.display()),
        format!("--config={}", setup.config.display()),
        "--sharding".to_owned(),
        format!("--sharding-namespace={}", cluster.namespace),
        format!("--sharding-identity={identity}"),
        "--leader-elect-lease-duration=2s".to_owned(),
        "--leader-elect-renew-deadline=800ms".to_owned(),
        "--leader-elect-retry-period=200ms".to_owned(),
        format!("--delivery-log={}", log.display()),
    ];
    flags.extend(namespace.map(|namespace| format!("--namespace={namespace}")));
    Host::start(&flags)
}

/// Waits until `host` has completed a handover of `plugin` to the ring of exactly `members`.
fn wait_for_ring_of(host: &Host, plugin: &str, members: &[&str]) {
    let (named, wanted) = (
        format!("plugin=\"{plugin}\""),
        format!("members={members:?}"),
    );
    wait_until(&format!("a handover of {plugin} to {wanted}"), || {
        host.stderr_lines()
            .iter()
            .rev()
            .find(|line| line.contains("handover done") && line.contains(&named))
            .is_some_and(|line| line.contains(&wanted))
            .then_some(())
    });
}

/// [`wait_for_ring_of`] the shard recorder.
fn wait_for_ring(host: &Host, members: &[&str]) {
    wait_for_ring_of(host, "shard-recorder", members);
}

/// The ring the replicas build for the plugin file at `path` over `members`.
fn ring(path: &Path, members: &[&str]) -> Ring {
    let content: String = Sha256::digest(std::fs::read(path).unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ring::new(&content, members.iter().copied())
}

/// Writes ConfigMap `cm-<index>` with `version` in its data: created the first time, then
/// replaced. Returns its resourceVersion.
async fn write(cluster: &Cluster, index: usize, version: usize) -> String {
    write_named(cluster, &format!("cm-{index}"), version).await
}

/// [`write`] of the ConfigMap `name`.
async fn write_named(cluster: &Cluster, name: &str, version: usize) -> String {
    let collection = format!("/api/v1/namespaces/{}/configmaps", cluster.namespace);
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": name},
                        "data": {"version": version.to_string()}});
    let written = match version {
        0 => cluster.create(&collection, &object).await,
        _ => cluster
            .request(Method::PUT, &format!("{collection}/{name}"), Some(&object))
            .await
            .unwrap_or_else(|e| panic!("replacing {name}: {e:?}")),
    };
    written["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Waits (a minute at most) until every key's latest resourceVersion has been delivered by
/// its owner in `ring`.
async fn final_states_reach_their_owners(
    log: &Path,
    latest: &BTreeMap<String, String>,
    ring: &Ring,
) {
    let missing = || {
        let delivered: BTreeSet<(String, String, String)> = deliveries(log)
            .into_iter()
            .map(|d| (d.key, d.rv, d.replica))
            .collect();
        latest
            .iter()
            .filter(|(key, rv)| {
                let owner = ring.owner(key).unwrap().to_owned();
                !delivered.contains(&((*key).clone(), (*rv).clone(), owner))
            })
            .map(|(key, rv)| format!("{key}@{rv}"))
            .collect::<Vec<_>>()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !missing().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let missing = missing();
    assert!(
        missing.is_empty(),
        "{} keys' final state did not reach their final owner, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
}

/// Fails naming the first overlapping deliveries and keys that went back and forth more
/// than `changes` times.
fn assert_no_overlap(all: &[Delivery], changes: usize) {
    let overlapping = overlaps(all);
    assert!(
        overlapping.is_empty(),
        "{} overlapping deliveries, e.g. {:?}",
        overlapping.len(),
        &overlapping[..overlapping.len().min(3)]
    );
    let back_and_forth = handed_back_and_forth(all, changes);
    assert!(
        back_and_forth.is_empty(),
        "{} keys went back and forth, e.g. {:?}",
        back_and_forth.len(),
        &back_and_forth[..back_and_forth.len().min(3)]
    );
}

const KEYS: usize = 1_000;
const CHANGES: usize = 10_000;

/// The shard recorder, spinning about a millisecond per event, one event per call.
fn recorder_setup(cluster: &Cluster) -> PluginSetup {
    PluginSetup::of(
        cluster.dir.path(),
        "shard-recorder",
        "[plugins.shard-recorder]\nbatch_size = 1\nsettings = { spin = 1_000_000 }\n\
         [plugins.shard-recorder.grants]\nread = [\"v1/ConfigMap\"]\n",
    )
}

on_both_servers!(
    shard_three_replicas_share_the_keys_and_hand_over_without_overlap,
    shard_a_frozen_replica_drops_its_keys_and_rejoins_without_overlap,
);

/// 1,000 keys; 10,000 changes on the fake server, 3,000 on the real one (the smaller
/// churn: each change there is an etcd write).
async fn shard_three_replicas_share_the_keys_and_hand_over_without_overlap(server: Server) {
    let changes = match server {
        Server::Fake => CHANGES,
        Server::Real => 3 * KEYS,
    };
    let Some(cluster) = Cluster::start(server, "shard").await else {
        return;
    };
    let setup = recorder_setup(&cluster);
    let plugin_file = setup.plugins.join("shard-recorder.wasm");
    let log: PathBuf = cluster.dir.path().join("deliveries.jsonl");
    let mut replicas: BTreeMap<&str, Host> = BTreeMap::new();
    for identity in ["r0", "r1", "r2"] {
        replicas.insert(identity, replica(identity, &cluster, &setup, &log));
    }
    for host in replicas.values() {
        wait_for_ring(host, &["r0", "r1", "r2"]);
    }
    let r0 = &replicas["r0"];
    let ready = r0.wait_for("/readyz?verbose", |status, _| status == 200);
    assert!(ready.contains("[+]sharding ok"), "{ready}");
    let (_, plugins) = r0.get("/plugins");
    let plugins: serde_json::Value = serde_json::from_str(&plugins).unwrap();
    let shard = &plugins[0]["shard"];
    assert_eq!(shard["identity"], "r0", "{plugins}");
    assert_eq!(shard["lease_valid"], true, "{plugins}");
    assert_eq!(shard["members"], json!(["r0", "r1", "r2"]), "{plugins}");
    assert_eq!(
        shard["ring_members"],
        json!(["r0", "r1", "r2"]),
        "{plugins}"
    );
    let (_, metrics) = r0.get("/metrics");
    assert!(metrics.contains("kubeplug_shard_members 3"), "{metrics}");
    assert!(
        metrics.contains("kubeplug_shard_handovers_total"),
        "{metrics}"
    );

    // Steady state: every key delivered by exactly its owner, shares within ±15 % of even.
    let key = |index: usize| format!("{}/cm-{index}", cluster.namespace);
    let mut latest: BTreeMap<String, String> = BTreeMap::new();
    for index in 0..KEYS {
        latest.insert(key(index), write(&cluster, index, 0).await);
    }
    wait_until("every creation is delivered", || {
        let delivered: BTreeSet<String> = deliveries(&log).into_iter().map(|d| d.key).collect();
        (delivered.len() == KEYS).then_some(())
    });
    let three = ring(&plugin_file, &["r0", "r1", "r2"]);
    let steady = deliveries(&log);
    // Keys, not deliveries: an object can be delivered twice (a relist's update).
    let mut owned: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for delivery in &steady {
        assert_eq!(
            three.owner(&delivery.key),
            Some(delivery.replica.as_str()),
            "{delivery:?}"
        );
        owned
            .entry(delivery.replica.clone())
            .or_default()
            .insert(delivery.key.clone());
    }
    let shares: BTreeMap<String, usize> = owned
        .into_iter()
        .map(|(replica, keys)| (replica, keys.len()))
        .collect();
    eprintln!("steady state, deliveries per replica: {shares:?}");
    // The bound holds for fixed keys: the fake server's namespace is fixed, the real one's is
    // made per run, so there the shares are printed only.
    let bounded = matches!(server, Server::Fake);
    for (replica, count) in shares.iter().filter(|_| bounded) {
        let share = *count as f64 / KEYS as f64;
        assert!(
            (share - 1.0 / 3.0).abs() <= 0.15 / 3.0,
            "{replica} delivered {share:.3} of the keys"
        );
    }

    // Churn; r2 is killed (its Lease left to expire) after a third, r3 added after two.
    let churn_started = Instant::now();
    for change in KEYS..changes {
        if change == KEYS + (changes - KEYS) / 3 {
            drop(replicas.remove("r2"));
        }
        if change == KEYS + 2 * (changes - KEYS) / 3 {
            replicas.insert("r3", replica("r3", &cluster, &setup, &log));
        }
        let index = change % KEYS;
        latest.insert(key(index), write(&cluster, index, change / KEYS).await);
    }
    eprintln!(
        "churn of {} changes took {:?}",
        changes - KEYS,
        churn_started.elapsed()
    );
    for host in replicas.values() {
        wait_for_ring(host, &["r0", "r1", "r3"]);
    }
    let last = ring(&plugin_file, &["r0", "r1", "r3"]);
    final_states_reach_their_owners(&log, &latest, &last).await;

    let all = deliveries(&log);
    assert_no_overlap(&all, 2);
    let two = ring(&plugin_file, &["r0", "r1"]);
    let moved_by_kill = latest
        .keys()
        .filter(|key| three.owner(key) != two.owner(key))
        .count();
    let moved_by_add = latest
        .keys()
        .filter(|key| two.owner(key) != last.owner(key))
        .count();
    let mut per_replica: BTreeMap<&str, usize> = BTreeMap::new();
    for delivery in &all {
        *per_replica.entry(&delivery.replica).or_default() += 1;
    }
    eprintln!(
        "{} deliveries, per replica {per_replica:?}; keys moved by the kill {moved_by_kill} \
         (ideal {}), by the add {moved_by_add} (ideal {})",
        all.len(),
        KEYS / 3,
        KEYS / 3
    );
}

/// A replica frozen (SIGSTOP) past its Lease while the others churn: they take its keys once
/// its Lease expires; resumed (SIGCONT), it finds its Lease lapsed on its own clock, delivers
/// nothing more of what it held, and rejoins as a new member.
async fn shard_a_frozen_replica_drops_its_keys_and_rejoins_without_overlap(server: Server) {
    const FROZEN_KEYS: usize = 300;
    let Some(cluster) = Cluster::start(server, "shard-freeze").await else {
        return;
    };
    let setup = recorder_setup(&cluster);
    let plugin_file = setup.plugins.join("shard-recorder.wasm");
    let log: PathBuf = cluster.dir.path().join("deliveries.jsonl");
    let replicas: Vec<Host> = ["r0", "r1", "r2"]
        .iter()
        .map(|identity| replica(identity, &cluster, &setup, &log))
        .collect();
    for host in &replicas {
        wait_for_ring(host, &["r0", "r1", "r2"]);
    }
    let key = |index: usize| format!("{}/cm-{index}", cluster.namespace);
    let mut latest: BTreeMap<String, String> = BTreeMap::new();
    let mut change = 0;
    let mut churn = async |until: Instant, latest: &mut BTreeMap<String, String>| {
        while Instant::now() < until {
            let index = change % FROZEN_KEYS;
            latest.insert(
                key(index),
                write(&cluster, index, change / FROZEN_KEYS).await,
            );
            change += 1;
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    churn(Instant::now() + Duration::from_secs(2), &mut latest).await;
    replicas[1].signal("STOP");
    // Twice the Lease duration: the others expire r1 and hand its keys over.
    churn(Instant::now() + Duration::from_secs(4), &mut latest).await;
    for host in [&replicas[0], &replicas[2]] {
        wait_for_ring(host, &["r0", "r2"]);
    }
    replicas[1].signal("CONT");
    churn(Instant::now() + Duration::from_secs(2), &mut latest).await;
    for host in &replicas {
        wait_for_ring(host, &["r0", "r1", "r2"]);
    }
    churn(Instant::now() + Duration::from_secs(1), &mut latest).await;
    final_states_reach_their_owners(&log, &latest, &ring(&plugin_file, &["r0", "r1", "r2"])).await;
    assert!(
        replicas[1]
            .stderr_lines()
            .iter()
            .any(|line| line.contains("was not renewed in time")),
        "r1 noticed that its Lease lapsed"
    );
    let all = deliveries(&log);
    let fenced = all.iter().filter(|d| d.fenced).count();
    assert!(
        fenced <= 1,
        "{fenced} fenced calls: only the one in flight at the freeze"
    );
    assert_no_overlap(&all, 2);
    eprintln!(
        "{} deliveries over {change} changes, {fenced} fenced",
        all.len()
    );
}

/// The example plugins, sharded: label-audit (events, Deployments) and namespace-defaults
/// (reconcile mode, Namespaces) each deliver every key on exactly one replica, and do their
/// work: every Namespace gets its labels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_the_example_plugins_deliver_each_key_on_one_replica() {
    const OBJECTS: usize = 30;
    let cluster = Cluster::start(Server::Fake, "shard-examples")
        .await
        .unwrap();
    let quotas = kubeplug_informer::resource::Resource::new(
        "",
        "v1",
        "ResourceQuota",
        "resourcequotas",
        true,
    );
    cluster.fake().unwrap().serve(quotas);
    let plugins = cluster.dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    for name in ["label-audit", "namespace-defaults"] {
        std::fs::copy(
            crate::support::built_plugin(name),
            plugins.join(format!("{name}.wasm")),
        )
        .unwrap();
    }
    let config = cluster.dir.path().join("kubeplug.toml");
    let repository = xtask::Layout::from_manifest_dir().root;
    std::fs::copy(repository.join("examples/kubeplug.toml"), &config).unwrap();
    let setup = PluginSetup { plugins, config };
    let log: PathBuf = cluster.dir.path().join("deliveries.jsonl");
    let replicas: Vec<Host> = ["r0", "r1", "r2"]
        .iter()
        .map(|identity| replica_in(identity, &cluster, &setup, &log, None))
        .collect();
    for host in &replicas {
        for plugin in ["label-audit", "namespace-defaults"] {
            wait_for_ring_of(host, plugin, &["r0", "r1", "r2"]);
        }
    }
    for index in 0..OBJECTS {
        cluster.create_deployment(&format!("web-{index}")).await;
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": format!("ns-{index}")}});
        cluster.create("/api/v1/namespaces", &namespace).await;
    }
    let labelled = |index: usize| {
        let path = format!("/api/v1/namespaces/ns-{index}");
        let cluster = &cluster;
        async move {
            let namespace = cluster.request(Method::GET, &path, None).await.ok()?;
            (namespace["metadata"]["labels"]["pod-security.kubernetes.io/warn"] == "baseline")
                .then_some(())
        }
    };
    for index in 0..OBJECTS {
        crate::cluster::eventually(&format!("ns-{index} labelled"), || labelled(index)).await;
    }
    let of = |plugin: &str, key: &str| -> BTreeSet<String> {
        #[derive(Deserialize)]
        struct Line {
            plugin: String,
            replica: String,
            key: String,
        }
        complete_lines(&log)
            .iter()
            .map(|line| serde_json::from_str::<Line>(line).unwrap())
            .filter(|line| line.plugin == plugin && line.key == key)
            .map(|line| line.replica)
            .collect()
    };
    for index in 0..OBJECTS {
        let deployment = format!("{}/web-{index}", cluster.namespace);
        let namespace = format!("ns-{index}");
        wait_until(&format!("{deployment} delivered"), || {
            (!of("label-audit", &deployment).is_empty()).then_some(())
        });
        assert_eq!(of("label-audit", &deployment).len(), 1, "{deployment}");
        assert_eq!(of("namespace-defaults", &namespace).len(), 1, "{namespace}");
    }
}

/// Reconcile mode: each key is reconciled on its owner only, its failed attempts retried with
/// back-off there; when its owner dies, its new owner reconciles it, never both at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_reconcile_keys_and_their_retries_stay_with_their_owner() {
    const RECONCILED: usize = 200;
    let cluster = Cluster::start(Server::Fake, "shard-reconcile")
        .await
        .unwrap();
    let setup = PluginSetup::of(
        cluster.dir.path(),
        "shard-recorder",
        "[plugins.shard-recorder]\nsettings = { reconcile = 1, fail_first = 1 }\n\
         [plugins.shard-recorder.grants]\nread = [\"v1/ConfigMap\"]\n",
    );
    let plugin_file = setup.plugins.join("shard-recorder.wasm");
    let log: PathBuf = cluster.dir.path().join("deliveries.jsonl");
    let mut replicas: BTreeMap<&str, Host> = ["r0", "r1", "r2"]
        .into_iter()
        .map(|identity| (identity, replica(identity, &cluster, &setup, &log)))
        .collect();
    for host in replicas.values() {
        wait_for_ring(host, &["r0", "r1", "r2"]);
    }
    // Every tenth key fails its first reconcile on each replica that owns it.
    let name = |index: usize| match index % 10 {
        0 => format!("cm-{index}-flaky"),
        _ => format!("cm-{index}"),
    };
    let key = |index: usize| format!("{}/{}", cluster.namespace, name(index));
    // Whether every key has been reconciled by its owner in `ring` since line `from`.
    let succeeded = |ring: &Ring, from: usize| {
        let all = deliveries(&log);
        (0..RECONCILED).all(|index| {
            let key = key(index);
            let owner = ring.owner(&key).unwrap();
            all[from.min(all.len())..]
                .iter()
                .any(|d| d.key == key && d.replica == owner && d.ok)
        })
    };
    for index in 0..RECONCILED {
        write_named(&cluster, &name(index), 0).await;
    }
    let three = ring(&plugin_file, &["r0", "r1", "r2"]);
    wait_until("every key reconciled by its owner", || {
        succeeded(&three, 0).then_some(())
    });
    for delivery in deliveries(&log) {
        assert_eq!(
            three.owner(&delivery.key),
            Some(delivery.replica.as_str()),
            "retries stay with the owner: {delivery:?}"
        );
    }
    let failed: BTreeSet<String> = deliveries(&log)
        .into_iter()
        .filter(|d| !d.ok)
        .map(|d| d.key)
        .collect();
    let flaky: BTreeSet<String> = (0..RECONCILED).step_by(10).map(key).collect();
    assert_eq!(failed, flaky, "the flaky keys failed once and were retried");

    drop(replicas.remove("r2"));
    for host in replicas.values() {
        wait_for_ring(host, &["r0", "r1"]);
    }
    let before_updates = deliveries(&log).len();
    for index in 0..RECONCILED {
        write_named(&cluster, &name(index), 1).await;
    }
    let two = ring(&plugin_file, &["r0", "r1"]);
    wait_until("every key reconciled again by its new owner", || {
        succeeded(&two, before_updates).then_some(())
    });
    assert_no_overlap(&deliveries(&log), 1);
}
