//! One informer the API server refuses must not hold the host hostage: on a real
//! kube-apiserver with RBAC, a plugin whose types the host's ServiceAccount may not list
//! fails at its sync deadline with the server's answer, the other plugin runs, the host is
//! ready and leads, and the failed plugin starts by itself once the access is granted.

use std::path::Path;

use serde_json::{Value, json};

use crate::PluginSetup;
use crate::cluster::{Cluster, Server, eventually};
use crate::support::{Host, built_plugin};

/// The state `/plugins` reports for the plugin of `file`.
fn state_of(host: &Host, file: &str) -> String {
    let (_, body) = host.get("/plugins");
    let plugins: Vec<Value> = serde_json::from_str(&body).unwrap();
    plugins
        .iter()
        .find(|plugin| plugin["file"].as_str().is_some_and(|f| f.ends_with(file)))
        .and_then(|plugin| plugin["state"].as_str())
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_the_host_may_not_list_for_fails_while_the_host_is_ready_and_leads() {
    let Some(cluster) = Cluster::start(Server::Real, "sync").await else {
        return;
    };
    let namespace = cluster.namespace.clone();
    let PluginSetup { plugins, config } = PluginSetup::label_audit(cluster.dir.path());

    // The ServiceAccount gets what label-audit alone needs, and leader election.
    let name = format!("kubeplug-{namespace}");
    let args = [
        "--config".as_ref(),
        config.as_os_str(),
        "--leader-elect".as_ref(),
    ];
    let kubeconfig = cluster.as_printed_rbac_allows(&name, &plugins, &args).await;

    // configmap-reload also reads ConfigMaps, which that role does not cover.
    std::fs::copy(
        built_plugin("configmap-reload"),
        plugins.join("configmap-reload.wasm"),
    )
    .unwrap();
    let mut toml = std::fs::read_to_string(&config).unwrap();
    toml.push_str(
        "[defaults]\nsync_deadline_s = 3\n\
         [plugins.configmap-reload]\nsettings = { secrets = false }\n\
         [plugins.configmap-reload.grants]\nread = [\"apps/v1/Deployment\", \"v1/ConfigMap\"]\n\
         write = { \"apps/v1/Deployment\" = [\"patch\"] }\n",
    );
    std::fs::write(&config, toml).unwrap();

    let host = Host::start([
        Path::new("--kubeconfig"),
        &kubeconfig,
        Path::new("--plugins"),
        &plugins,
        Path::new("--config"),
        &config,
        Path::new("--leader-elect"),
        Path::new("--leader-elect-namespace"),
        Path::new(&namespace),
    ]);
    let ready = host.wait_for("/readyz?verbose", |status, _| status == 200);
    assert!(
        ready.contains("[+]plugins ok\n    plugin configmap-reload failed: informer v1/ConfigMap: 403 Forbidden"),
        "{ready}"
    );
    assert_eq!(state_of(&host, "label-audit.wasm"), "running");
    assert_eq!(state_of(&host, "configmap-reload.wasm"), "failed");
    let (_, metrics) = host.get("/metrics");
    assert!(
        metrics.contains("leader_election_master_status{name=\"kubeplug\"} 1"),
        "the election did not wait for the failed plugin"
    );

    // Granted the list and watch, it starts as its informer's next attempt syncs.
    let reader = format!("{name}-config-maps");
    cluster
        .create(
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            &json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": reader},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                           "verbs": ["get", "list", "watch"]}],
            }),
        )
        .await;
    cluster
        .bind_cluster_role(&reader, &reader, "kubeplug")
        .await;
    eventually("configmap-reload starts once it may list", || async {
        (state_of(&host, "configmap-reload.wasm") == "running").then_some(())
    })
    .await;
    let ready = host.wait_for("/readyz?verbose", |status, _| status == 200);
    assert!(!ready.contains("failed"), "{ready}");
}
