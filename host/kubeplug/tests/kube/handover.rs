//! A leader whose connection stalls hands over without overlap, on a real API server: only
//! its own connection (through a proxy) stops moving bytes, so its Lease renewals and its
//! plugin's writes hang. It must stop leading at its renew deadline, its calls in flight
//! must end (a hanging write ends with its call's deadline, the write fence ends the rest),
//! and the new leader's first call must start after the old leader's last call ended.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::cluster::{Cluster, Server};
use crate::support::Host;
use crate::{PluginSetup, elected_replica};

/// One replica's deliveries, from its log: when each call started and how many ended.
struct Deliveries {
    /// The timestamps (RFC 3339, UTC, microseconds: they sort as text) of each start.
    starts: Vec<String>,
    /// The timestamps of each end: the plugin's `delivery end`, or the host's failed batch.
    ends: Vec<String>,
}

impl Deliveries {
    fn of(host: &Host) -> Self {
        let mut deliveries = Self {
            starts: Vec::new(),
            ends: Vec::new(),
        };
        for line in host.stderr_lines() {
            let Some(at) = line.split_whitespace().next().map(str::to_owned) else {
                continue;
            };
            if !line.contains("delivery-log") {
                continue;
            }
            if line.contains("delivery start") {
                deliveries.starts.push(at);
            } else if line.contains("delivery end") || line.contains("batch failed") {
                deliveries.ends.push(at);
            }
        }
        deliveries
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_leader_ends_its_last_call_before_the_new_leader_begins() {
    let Some(cluster) = Cluster::start(Server::Real, "handover").await else {
        return;
    };
    let env = cluster.envtest().expect("a real server");
    let proxy = env.proxy().unwrap();
    let through_proxy = cluster.kubeconfig_via(&proxy, "kubeconfig-via-proxy");
    let PluginSetup { plugins, config } = PluginSetup::of(
        cluster.dir.path(),
        "delivery-log",
        "[plugins.delivery-log.grants]\nread = [\"v1/ConfigMap\"]\n\
         write = { \"v1/ConfigMap\" = [\"record-event\"] }\n",
    );

    let a = elected_replica("a", &through_proxy, &plugins, &config, &cluster.namespace);
    crate::wait_until("a leads", || a.leads().then_some(()));
    let b = elected_replica(
        "b",
        &cluster.kubeconfig,
        &plugins,
        &config,
        &cluster.namespace,
    );
    b.wait_for("/readyz", |status, _| status == 200);

    // ConfigMaps every 20 ms keep the leader busy, writing an Event per batch.
    let mut created = 0;
    churn(&cluster, &mut created, || {
        Deliveries::of(&a).ends.len() >= 5
    })
    .await;

    proxy.stall();
    churn(&cluster, &mut created, || {
        !a.leads() && b.leads() && Deliveries::of(&b).ends.len() >= 5
    })
    .await;
    // What a had in flight has ended by now (its call deadline is 1 s).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let old = Deliveries::of(&a);
    let new = Deliveries::of(&b);
    proxy.resume();

    assert_eq!(
        old.starts.len(),
        old.ends.len(),
        "every call of the old leader ended: started {:?}, ended {:?}",
        old.starts,
        old.ends
    );
    let last_old = old.ends.iter().max().expect("a delivered");
    let first_new = new.starts.iter().min().expect("b delivered");
    eprintln!(
        "old leader's last call ended at {last_old}; new leader's first began at {first_new}"
    );
    assert!(
        last_old < first_new,
        "the old leader's last call ended at {last_old}, after the new leader's first began at {first_new}"
    );
}

/// Creates a ConfigMap every 20 ms until `done` (checked every tenth), for at most a minute.
async fn churn(cluster: &Cluster, created: &mut u32, done: impl Fn() -> bool) {
    let config_maps = format!("/api/v1/namespaces/{}/configmaps", cluster.namespace);
    let started = Instant::now();
    loop {
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": format!("cm-{created}")}});
        cluster.create(&config_maps, &object).await;
        *created += 1;
        if created.is_multiple_of(10) && done() {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not as expected after a minute of churn"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
