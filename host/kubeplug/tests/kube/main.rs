//! The `kubeplug` binary against an API server: each scenario on the fake one of
//! `tests/fake-apiserver` and on a real kube-apiserver v1.32 (see [`cluster`]), and what only
//! one of them can show on its own.

mod cluster;
mod handover;
mod secure;
mod shard;
#[path = "../support/mod.rs"]
mod support;
mod sync;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cluster::{Cluster, Server, eventually, on_both_servers};
use kubeplug_envtest::{AfterCut, User};
use kubeplug_fake_apiserver::{FakeApiServer, FakeOptions};
use support::{Host, built_plugin, kubeplug, wait_until};

on_both_servers!(
    label_audit_records_an_event_on_the_api_server,
    two_replicas_elect_one_leader_and_the_other_takes_over,
    a_stop_signal_is_honoured_while_plugins_load,
    configmap_reload_rolls_a_deployment_when_its_config_map_changes,
);

/// What only these tests ask of a running host.
impl Host {
    /// Sends `signal` (`STOP`, `CONT`, `TERM`) to the host process.
    fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{signal}");
    }

    /// SIGTERM, then the exit status once the host has stopped (within a minute).
    fn terminate(&mut self) -> std::process::ExitStatus {
        self.signal("TERM");
        wait_until("the host exits after SIGTERM", || {
            self.child.try_wait().unwrap()
        })
    }

    /// Whether `leader_election_master_status` says this replica leads.
    fn leads(&self) -> bool {
        let (_, metrics) = self.get("/metrics");
        metrics.contains("leader_election_master_status{name=\"kubeplug\"} 1")
    }

    /// The state `/plugins` reports for the only plugin.
    fn plugin_state(&self) -> String {
        let (_, body) = self.get("/plugins");
        let plugins: serde_json::Value = serde_json::from_str(&body).unwrap();
        plugins[0]["state"].as_str().unwrap_or_default().to_owned()
    }
}

/// A plugins directory holding one plugin, and a configuration for it, both under `dir`.
struct PluginSetup {
    plugins: PathBuf,
    config: PathBuf,
}

impl PluginSetup {
    /// label-audit, granted Events on Deployments.
    fn label_audit(dir: &Path) -> Self {
        Self::of(
            dir,
            "label-audit",
            "[plugins.label-audit.grants]\nread = [\"apps/v1/Deployment\", \"v1/Pod\"]\n\
             write = { \"apps/v1/Deployment\" = [\"record-event\"] }\n",
        )
    }

    /// The built plugin `name`, configured by `config` (TOML).
    fn of(dir: &Path, name: &str, config: &str) -> Self {
        let plugins = dir.join("plugins");
        std::fs::create_dir(&plugins).unwrap();
        std::fs::copy(built_plugin(name), plugins.join(format!("{name}.wasm"))).unwrap();
        let path = dir.join("kubeplug.toml");
        std::fs::write(&path, config).unwrap();
        Self {
            plugins,
            config: path,
        }
    }
}

async fn label_audit_records_an_event_on_the_api_server(server: Server) {
    let Some(cluster) = Cluster::start(server, "label-audit").await else {
        return;
    };
    cluster.create_deployment("web").await;
    let PluginSetup { plugins, config } = PluginSetup::label_audit(cluster.dir.path());

    let host = Host::start(&[
        Path::new("--kubeconfig"),
        &cluster.kubeconfig,
        Path::new("--plugins"),
        &plugins,
        Path::new("--config"),
        &config,
    ]);
    let ready = host.wait_for("/readyz?verbose", |status, _| status == 200);
    for check in ["[+]cluster ok", "[+]plugins ok"] {
        assert!(ready.contains(check), "{ready}");
    }

    let event = eventually("a label-audit Event on the server", || async {
        cluster
            .events()
            .await
            .into_iter()
            .find(|event| event["regarding"]["name"] == "web")
    })
    .await;
    assert_eq!(
        event["metadata"]["namespace"],
        cluster.namespace.as_str(),
        "{event}"
    );
    // With the uid from the cache, by which `kubectl describe` finds an object's Events.
    let web = format!(
        "/apis/apps/v1/namespaces/{}/deployments/web",
        cluster.namespace
    );
    let web = cluster
        .request(http::Method::GET, &web, None)
        .await
        .unwrap();
    assert_eq!(
        event["regarding"],
        serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
                           "namespace": cluster.namespace, "name": "web",
                           "uid": web["metadata"]["uid"]})
    );
    if let Some(env) = cluster.envtest() {
        let described = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(env.kubeconfig())
            .args(["describe", "deployment", "web", "-n", &cluster.namespace])
            .output()
            .unwrap();
        let described = String::from_utf8_lossy(&described.stdout);
        let events = described.split("Events:").nth(1).unwrap_or_default();
        assert!(
            events.contains("Warning") && events.contains("MissingLabels"),
            "kubectl describe shows label-audit's Event: {described}"
        );
    }
    assert_eq!(event["type"], "Warning", "{event}");
    assert_eq!(event["reason"], "MissingLabels", "{event}");
    assert_eq!(event["reportingController"], "kubeplug/label-audit");
    assert!(
        event["note"]
            .as_str()
            .unwrap()
            .contains("app.kubernetes.io/name"),
        "{event}"
    );
    assert!(!event["reportingInstance"].as_str().unwrap().is_empty());

    // Audit logs tell kubeplug's requests, and each plugin's writes, apart.
    let version = env!("CARGO_PKG_VERSION");
    let host_agent = format!("kubeplug/{version}");
    let plugin_agent = format!("kubeplug/{version} (plugin label-audit)");
    let events_path = format!(
        "/apis/events.k8s.io/v1/namespaces/{}/events",
        cluster.namespace
    );
    match (cluster.fake(), cluster.envtest()) {
        (Some(fake), _) => {
            let requests = fake.requests();
            let writes: Vec<_> = requests.iter().filter(|r| r.method == "POST").collect();
            let uris: Vec<&str> = writes.iter().map(|r| r.uri.as_str()).collect();
            // The test's own creation of `web`, then the plugin's Event.
            assert_eq!(
                uris,
                ["/apis/apps/v1/namespaces/team-a/deployments", &events_path]
            );
            assert_eq!(writes[1].user_agents, [plugin_agent]);
            // Every read is the host's, or this test's own.
            for request in requests.iter().filter(|r| r.method == "GET") {
                let agents = &request.user_agents;
                assert!(
                    *agents == [host_agent.as_str()] || *agents == [cluster::TEST_AGENT],
                    "{}: {agents:?}",
                    request.uri
                );
            }
        }
        (None, Some(env)) => {
            let audit = env.audit_events().unwrap();
            let recorded = audit
                .iter()
                .find(|e| e.verb == "create" && e.request_uri.starts_with(&events_path))
                .expect("the Event's creation is in the audit log");
            assert_eq!(recorded.user_agent, plugin_agent);
            assert_eq!(recorded.user, User::Admin.name());
            let reads: Vec<_> = audit
                .iter()
                .filter(|e| e.user_agent.starts_with("kubeplug/"))
                .filter(|e| matches!(e.verb.as_str(), "get" | "list" | "watch"))
                .collect();
            assert!(!reads.is_empty(), "the host's reads are in the audit log");
            for read in reads {
                assert_eq!(read.user_agent, host_agent, "{read:?}");
            }
        }
        (None, None) => unreachable!("a cluster is fake or real"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_names_an_unreachable_server() {
    let server = FakeApiServer::start(FakeOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.write_kubeconfig(dir.path()).unwrap();
    let address = server.address().to_owned();
    // Nothing listens there any more.
    drop(server);
    let plugins = tempfile::tempdir().unwrap();

    let host = Host::start(&[
        Path::new("--kubeconfig"),
        &kubeconfig,
        Path::new("--plugins"),
        plugins.path(),
    ]);
    let body = host.wait_for("/readyz?verbose", |status, body| {
        status == 503 && body.contains("[-]cluster failed")
    });
    assert!(body.contains(&address), "{body}");
    assert!(body.contains(kubeconfig.to_str().unwrap()), "{body}");
    assert_eq!(host.get("/healthz"), (200, "ok".to_owned()));
    // Each failed attempt is kubeplug's own line; the kube client's copy of it is not logged.
    wait_until("a second failed attempt", || {
        let attempts = host
            .stderr_lines()
            .iter()
            .filter(|line| line.contains("cannot reach the cluster; retrying in"))
            .count();
        (attempts >= 2).then_some(())
    });
    let kube_client: Vec<String> = host
        .stderr_lines()
        .into_iter()
        .filter(|line| line.contains("kube_client"))
        .collect();
    assert!(kube_client.is_empty(), "{kube_client:?}");
    // Still connecting, it stops on the first SIGTERM.
    let mut host = host;
    assert!(host.terminate().success());
}

#[test]
fn local_and_kubeconfig_exclude_each_other_and_a_bad_kubeconfig_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let output = kubeplug()
        .args([
            "run",
            "--plugins",
            path,
            "--local",
            path,
            "--kubeconfig",
            path,
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("--local") && stderr.contains("--kubeconfig"),
        "{stderr}"
    );

    let output = kubeplug()
        .args(["run", "--plugins", path])
        .args([
            "--kubeconfig",
            "/nonexistent/kubeconfig",
            "--context",
            "prod",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("/nonexistent/kubeconfig") && stderr.contains("--local"),
        "{stderr}"
    );
}

/// Two replicas with `--leader-elect` and short durations: only the leader delivers. When
/// it stops renewing (SIGSTOP), the other takes over within the lease duration and a retry
/// period, and handles every Deployment, also those created meanwhile; the old leader, woken
/// up, steps down. SIGTERM stops a replica gracefully, releasing the Lease if it holds it.
async fn two_replicas_elect_one_leader_and_the_other_takes_over(server: Server) {
    let Some(cluster) = Cluster::start(server, "election").await else {
        return;
    };
    cluster.create_deployment("before").await;
    let PluginSetup { plugins, config } = PluginSetup::label_audit(cluster.dir.path());
    let lease = Duration::from_secs(2);
    let retry = Duration::from_millis(200);
    let kubeconfig = cluster.kubeconfig.clone();
    let replica = |identity: &str| {
        elected_replica(identity, &kubeconfig, &plugins, &config, &cluster.namespace)
    };

    let mut a = replica("a");
    wait_until("a leads", || a.leads().then_some(()));
    let mut b = replica("b");
    b.wait_for("/readyz", |status, _| status == 200);
    eventually("a audited the Deployment", || async {
        cluster
            .noted("MissingLabels")
            .await
            .contains("before")
            .then_some(())
    })
    .await;
    assert!(!b.leads());
    assert_eq!(b.plugin_state(), "standby");
    assert_eq!(a.plugin_state(), "running");
    assert_eq!(cluster.lease_holder("kubeplug").await.as_deref(), Some("a"));

    a.signal("STOP");
    let stopped = Instant::now();
    cluster.create_deployment("meanwhile").await;
    wait_until("b takes over", || b.leads().then_some(()));
    let takeover = stopped.elapsed();
    eprintln!("takeover {takeover:?} after the leader stopped renewing");
    // Scheduling and the 100 ms polling of this test add to the protocol's bound.
    let slack = Duration::from_secs(2);
    assert!(
        takeover <= lease + retry + slack,
        "took {takeover:?} to take over a {lease:?} lease retried every {retry:?}"
    );
    assert_eq!(b.plugin_state(), "running");
    eventually("b audited what was created meanwhile", || async {
        cluster
            .noted("MissingLabels")
            .await
            .contains("meanwhile")
            .then_some(())
    })
    .await;
    assert_eq!(cluster.lease_holder("kubeplug").await.as_deref(), Some("b"));

    a.signal("CONT");
    wait_until("the old leader steps down", || {
        (!a.leads() && a.plugin_state() == "standby").then_some(())
    });

    assert!(a.terminate().success());
    assert_eq!(cluster.lease_holder("kubeplug").await.as_deref(), Some("b"));
    assert!(b.terminate().success());
    assert_eq!(
        cluster.lease_holder("kubeplug").await,
        None,
        "b released the Lease"
    );
}

/// A replica with `--leader-elect` and durations short enough for a test: a lease of 2 s,
/// renewed within 800 ms, retried every 200 ms, the Lease in `namespace`. The margin,
/// 1.2 s, holds the default call deadline of 1 s.
fn elected_replica(
    identity: &str,
    kubeconfig: &Path,
    plugins: &Path,
    config: &Path,
    namespace: &str,
) -> Host {
    let identity = format!("--leader-elect-identity={identity}");
    let namespace = format!("--leader-elect-namespace={namespace}");
    let args = [
        "--kubeconfig".as_ref(),
        kubeconfig.as_os_str(),
        "--plugins".as_ref(),
        plugins.as_os_str(),
        "--config".as_ref(),
        config.as_os_str(),
        "--leader-elect".as_ref(),
        namespace.as_ref(),
        "--leader-elect-lease-duration=2s".as_ref(),
        "--leader-elect-renew-deadline=800ms".as_ref(),
        "--leader-elect-retry-period=200ms".as_ref(),
        identity.as_ref(),
    ]
    .map(Path::new);
    Host::start(&args)
}

/// On the real server only: the leader's own connection is cut (through a proxy only it
/// uses), so its renewals fail while the API server stays up for everyone else. It stops
/// delivering; the other replica takes over and handles what is created meanwhile; when
/// the connection comes back, the old leader stays a follower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_api_server_is_replaced() {
    let Some(cluster) = Cluster::start(Server::Real, "cut-leader").await else {
        return;
    };
    let env = cluster.envtest().expect("a real server");
    let proxy = env.proxy().unwrap();
    let through_proxy = cluster.kubeconfig_via(&proxy, "kubeconfig-via-proxy");
    cluster.create_deployment("before").await;
    let PluginSetup { plugins, config } = PluginSetup::label_audit(cluster.dir.path());

    let a = elected_replica("a", &through_proxy, &plugins, &config, &cluster.namespace);
    wait_until("a leads", || a.leads().then_some(()));
    let b = elected_replica(
        "b",
        &cluster.kubeconfig,
        &plugins,
        &config,
        &cluster.namespace,
    );
    b.wait_for("/readyz", |status, _| status == 200);
    eventually("a audited the Deployment", || async {
        cluster
            .noted("MissingLabels")
            .await
            .contains("before")
            .then_some(())
    })
    .await;

    proxy.cut(AfterCut::Refuse);
    wait_until("a, cut off, stops leading", || (!a.leads()).then_some(()));
    wait_until("b takes over", || b.leads().then_some(()));
    assert_eq!(a.plugin_state(), "standby");
    cluster.create_deployment("meanwhile").await;
    eventually("b audited what was created meanwhile", || async {
        cluster
            .noted("MissingLabels")
            .await
            .contains("meanwhile")
            .then_some(())
    })
    .await;
    assert_eq!(cluster.lease_holder("kubeplug").await.as_deref(), Some("b"));

    proxy.accept_again();
    // Several retry periods with its connection back: b renews, a stays a follower.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!a.leads());
    assert!(b.leads());
    assert_eq!(cluster.lease_holder("kubeplug").await.as_deref(), Some("b"));
    // Its failed requests were logged by kubeplug, with their back-off; the kube client's
    // own copy of each (issue 18's log noise) was not.
    let lines = a.stderr_lines();
    assert!(
        lines.iter().any(|line| line.contains("retry_in")),
        "no failed attempt logged with its back-off"
    );
    let kube_client: Vec<&String> = lines.iter().filter(|l| l.contains("kube_client")).collect();
    assert!(kube_client.is_empty(), "{kube_client:?}");
}

/// On the real server only: a plugin subscribing to a custom resource whose CRD does not
/// exist yet fails at `resolve`, named, and is tried again on a back-off (never a storm);
/// once the CRD is installed it loads by itself and handles the custom objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_for_a_crd_installed_later_starts_once_it_is_served() {
    let Some(cluster) = Cluster::start(Server::Real, "crd-later").await else {
        return;
    };
    let plugins = cluster.dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    // It describes itself as `recorder`: the file is named after that.
    std::fs::copy(
        built_plugin("recorder-unknown-kind"),
        plugins.join("recorder.wasm"),
    )
    .unwrap();
    let config = cluster.dir.path().join("kubeplug.toml");
    std::fs::write(
        &config,
        // It records its Events as about ConfigMaps of the names it handles.
        "[plugins.recorder.grants]\nread = [\"example.com/v1/Widget\"]\n\
         write = { \"v1/ConfigMap\" = [\"record-event\"] }\n",
    )
    .unwrap();
    let host = Host::start(&[
        Path::new("--kubeconfig"),
        &cluster.kubeconfig,
        Path::new("--plugins"),
        &plugins,
        Path::new("--config"),
        &config,
    ]);
    let failed = host.wait_for("/plugins", |_, body| body.contains("\"failed\""));
    let report: serde_json::Value = serde_json::from_str(&failed).unwrap();
    assert_eq!(report[0]["name"], "recorder", "{report}");
    let error = report[0]["last_error"].as_str().unwrap();
    assert!(
        error.contains("resolve") && error.contains("example.com/v1/Widget"),
        "{error}"
    );
    // Retried from 1 s, doubling: in 6 s at most 1 + 3 attempts (at 1–2, 3–6 s...).
    let attempts_at_start = failed_loads(&host);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let retried = failed_loads(&host) - attempts_at_start;
    assert!((1..=4).contains(&retried), "{retried} retries in 6 s");

    let crd = serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}},
            }],
        },
    });
    cluster
        .create(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &crd,
        )
        .await;
    let widgets = format!(
        "/apis/example.com/v1/namespaces/{}/widgets",
        cluster.namespace
    );
    let widget = serde_json::json!({
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"},
    });
    // The CRD is served a moment after it is created.
    eventually("the Widget created", || async {
        cluster
            .request(http::Method::POST, &widgets, Some(&widget))
            .await
            .ok()
    })
    .await;
    // The longest retry interval is the rescan period, 10 s.
    host.wait_for("/plugins", |_, body| body.contains("\"running\""));
    eventually("the recorder handled the Widget", || async {
        cluster.noted("Handled").await.contains("w1").then_some(())
    })
    .await;
}

/// `kubeplug_plugin_reloads_total{result="failure"}`.
fn failed_loads(host: &Host) -> u64 {
    let (_, metrics) = host.get("/metrics");
    metrics
        .lines()
        .find_map(|line| {
            line.strip_prefix("kubeplug_plugin_reloads_total{result=\"failure\"} ")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// A host whose plugin is still loading (its `describe` runs until a ten-minute deadline)
/// stops on the first SIGTERM. Regression (issue 18): signals were ignored until the host
/// was ready.
async fn a_stop_signal_is_honoured_while_plugins_load(server: Server) {
    let Some(cluster) = Cluster::start(server, "stop-loading").await else {
        return;
    };
    let plugins = cluster.dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::copy(
        built_plugin("recorder-describe-slow"),
        plugins.join("recorder-describe-slow.wasm"),
    )
    .unwrap();
    let config = cluster.dir.path().join("kubeplug.toml");
    std::fs::write(
        &config,
        "[defaults]\ncall_deadline_ms = 600000\n[defaults.grants]\nread = [\"*\"]\n",
    )
    .unwrap();
    let mut host = Host::start(&[
        Path::new("--kubeconfig"),
        &cluster.kubeconfig,
        Path::new("--plugins"),
        &plugins,
        Path::new("--config"),
        &config,
    ]);
    host.wait_for("/plugins", |_, body| body.contains("\"loading\""));
    assert!(host.terminate().success());
}

/// On the real server, as a user RBAC lets discover but not list: the plugin loads and its
/// informer never syncs (403), and the first SIGTERM stops the host while it waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_signal_is_honoured_while_informers_sync() {
    let Some(cluster) = Cluster::start(Server::Real, "stop-syncing").await else {
        return;
    };
    let env = cluster.envtest().expect("a real server");
    let PluginSetup { plugins, config } = PluginSetup::label_audit(cluster.dir.path());
    let mut host = Host::start(&[
        Path::new("--kubeconfig"),
        env.kubeconfig_of(User::Unprivileged),
        Path::new("--plugins"),
        &plugins,
        Path::new("--config"),
        &config,
    ]);
    host.wait_for("/readyz?verbose", |_, body| {
        body.contains("[-]plugins failed: waiting for plugins label-audit")
    });
    assert_eq!(host.plugin_state(), "syncing");
    assert!(host.terminate().success());
}

/// A second SIGTERM ends a draining host at once, with status 1: here the drain waits for a
/// call that runs until a ten-minute deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_stop_signal_ends_a_draining_host_at_once() {
    let Some(cluster) = Cluster::start(Server::Fake, "stop-draining").await else {
        return;
    };
    let pods = kubeplug_informer::resource::Resource::new("", "v1", "Pod", "pods", true);
    cluster
        .fake()
        .expect("a fake server")
        .memory()
        .create(&pods, r#"{"metadata":{"name":"p","namespace":"team-a"}}"#)
        .unwrap();
    let plugins = cluster.dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::copy(
        built_plugin("hostile-loop"),
        plugins.join("hostile-loop.wasm"),
    )
    .unwrap();
    let config = cluster.dir.path().join("kubeplug.toml");
    std::fs::write(
        &config,
        "[defaults]\ncall_deadline_ms = 600000\n[defaults.grants]\nread = [\"*\"]\n",
    )
    .unwrap();
    let mut host = Host::start(&[
        Path::new("--kubeconfig"),
        &cluster.kubeconfig,
        Path::new("--plugins"),
        &plugins,
        Path::new("--config"),
        &config,
        Path::new("--shutdown-timeout=10m"),
    ]);
    host.wait_for("/readyz", |status, _| status == 200);
    host.signal("TERM");
    wait_until("the host drains", || {
        host.stderr_lines()
            .iter()
            .any(|line| line.contains("shutting down"))
            .then_some(())
    });
    assert!(host.child.try_wait().unwrap().is_none(), "still draining");
    let status = host.terminate();
    assert_eq!(status.code(), Some(1), "{status:?}");
}

/// A reconcile-mode plugin end to end: configmap-reload patches the pod template of the
/// Deployment that mounts a ConfigMap, again when the ConfigMap changes, and `/plugins`
/// counts what it was delivered (issue 18: reconcile plugins reported 0).
async fn configmap_reload_rolls_a_deployment_when_its_config_map_changes(server: Server) {
    let Some(cluster) = Cluster::start(server, "configmap-reload").await else {
        return;
    };
    let config_maps = format!("/api/v1/namespaces/{}/configmaps", cluster.namespace);
    let config_map = |value: &str| {
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "web-config"}, "data": {"mode": value}})
    };
    cluster.create(&config_maps, &config_map("a")).await;
    let mut web = cluster::deployment("web");
    web["spec"]["template"]["spec"]["volumes"] =
        serde_json::json!([{"name": "config", "configMap": {"name": "web-config"}}]);
    let deployments = format!("/apis/apps/v1/namespaces/{}/deployments", cluster.namespace);
    cluster.create(&deployments, &web).await;

    let plugins = cluster.dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    // Beside label-audit, which reads Deployments' metadata alone: the informer they share
    // is whole for configmap-reload's path indexes and reads, whichever loads first.
    for name in ["configmap-reload", "label-audit"] {
        std::fs::copy(built_plugin(name), plugins.join(format!("{name}.wasm"))).unwrap();
    }
    let config = cluster.dir.path().join("kubeplug.toml");
    std::fs::write(
        &config,
        "[plugins.configmap-reload]\nsettings = { secrets = false }\n\
         [plugins.configmap-reload.grants]\nread = [\"apps/v1/Deployment\", \"v1/ConfigMap\"]\n\
         write = { \"apps/v1/Deployment\" = [\"patch\"] }\n\
         [plugins.label-audit.grants]\nread = [\"apps/v1/Deployment\", \"v1/Pod\"]\n\
         write = { \"apps/v1/Deployment\" = [\"record-event\"] }\n",
    )
    .unwrap();
    let host = Host::start(&[
        Path::new("--kubeconfig"),
        &cluster.kubeconfig,
        Path::new("--plugins"),
        &plugins,
        Path::new("--config"),
        &config,
    ]);
    let hash = || async {
        let web = cluster
            .request(http::Method::GET, &format!("{deployments}/web"), None)
            .await
            .ok()?;
        web["spec"]["template"]["metadata"]["annotations"]["kubeplug.dev/config-hash"]
            .as_str()
            .map(str::to_owned)
    };
    let first = eventually("web gets its config hash", hash).await;
    cluster
        .request(
            http::Method::PUT,
            &format!("{config_maps}/web-config"),
            Some(&config_map("b")),
        )
        .await
        .unwrap();
    eventually("web's hash follows the change", || async {
        hash().await.filter(|now| *now != first)
    })
    .await;
    // configmap-reload can roll the Deployment before label-audit has finished loading.
    let body = host.wait_for("/plugins", |_, body| {
        serde_json::from_str::<serde_json::Value>(body).is_ok_and(|report| {
            report.as_array().is_some_and(|plugins| {
                plugins.len() == 2 && plugins.iter().all(|p| p["state"] == "running")
            })
        })
    });
    let report: serde_json::Value = serde_json::from_str(&body).unwrap();
    let plugin = |name: &str| {
        let plugins = report.as_array().unwrap().iter();
        plugins
            .into_iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {report}"))
    };
    let reload = plugin("configmap-reload");
    assert_eq!(reload["state"], "running", "{report}");
    assert!(
        reload["events_delivered"].as_u64().unwrap() >= 2,
        "{report}"
    );
    // label-audit reads labels alone: both its informers are of the metadata form, even
    // where another plugin reads the same type whole (its informer is another).
    let informers: Vec<(String, bool)> = plugin("label-audit")["informers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let key = i["informer"].as_str().unwrap();
            (key.to_owned(), i["metadata_only"].as_bool().unwrap())
        })
        .collect();
    assert_eq!(informers.len(), 2, "{report}");
    for (informer, metadata_only) in informers {
        assert!(metadata_only, "{informer}: {report}");
        assert!(informer.ends_with(" metadata"), "{informer}: {report}");
    }
}
