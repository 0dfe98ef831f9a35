//! The `kubeplug` binary against an API server: the fake one of `tests/fake-apiserver`, on
//! 127.0.0.1, speaking the real wire format.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kubeplug_fake_apiserver::{FakeApiServer, FakeOptions};
use kubeplug_informer::resource::Resource;
use support::{Host, built_plugin, kubeplug, wait_until};

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

/// A kubeconfig for `server`, a plugins directory holding label-audit, and a configuration
/// granting it Events on Deployments, all under one directory.
struct LabelAuditSetup {
    kubeconfig: PathBuf,
    plugins: PathBuf,
    config: PathBuf,
}

impl LabelAuditSetup {
    fn new(server: &FakeApiServer, dir: &Path) -> Self {
        let kubeconfig = server.write_kubeconfig(dir).unwrap();
        let plugins = dir.join("plugins");
        std::fs::create_dir(&plugins).unwrap();
        std::fs::copy(
            built_plugin("label-audit"),
            plugins.join("label-audit.wasm"),
        )
        .unwrap();
        let config = dir.join("kubeplug.toml");
        std::fs::write(
            &config,
            "[plugins.label-audit.grants]\nwrite = { \"apps/v1/Deployment\" = [\"record-event\"] }\n",
        )
        .unwrap();
        Self {
            kubeconfig,
            plugins,
            config,
        }
    }
}

fn deployments() -> Resource {
    Resource::new("apps", "v1", "Deployment", "deployments", true)
}

// The fake server runs on this runtime's workers while the test thread blocks on HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_audit_records_an_event_on_the_api_server() {
    let server = FakeApiServer::start(FakeOptions::default()).await.unwrap();
    server.serve(deployments());
    server
        .memory()
        .create(
            &deployments(),
            r#"{"metadata":{"name":"web","namespace":"team-a"},"spec":{"replicas":1}}"#,
        )
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let LabelAuditSetup {
        kubeconfig,
        plugins,
        config,
    } = LabelAuditSetup::new(&server, dir.path());

    let host = Host::start(&[
        Path::new("--kubeconfig"),
        &kubeconfig,
        Path::new("--plugins"),
        &plugins,
        Path::new("--config"),
        &config,
    ]);
    let ready = host.wait_for("/readyz?verbose", |status, _| status == 200);
    for check in ["[+]cluster ok", "[+]plugins ok", "[+]informers ok"] {
        assert!(ready.contains(check), "{ready}");
    }

    let events = Resource::new("events.k8s.io", "v1", "Event", "events", true);
    let event = wait_until("a label-audit Event on the server", || {
        server
            .memory()
            .snapshot(&events)
            .values()
            .map(|json| serde_json::from_slice::<serde_json::Value>(json).unwrap())
            .find(|event| event["regarding"]["name"] == "web")
    });
    assert_eq!(event["metadata"]["namespace"], "team-a", "{event}");
    assert_eq!(
        event["regarding"],
        serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "team-a", "name": "web"})
    );
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
    let requests = server.requests();
    let writes: Vec<_> = requests.iter().filter(|r| r.method == "POST").collect();
    let uris: Vec<&str> = writes.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(uris, ["/apis/events.k8s.io/v1/namespaces/team-a/events"]);
    // Audit logs tell kubeplug's requests, and each plugin's writes, apart.
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        writes[0].user_agents,
        [format!("kubeplug/{version} (plugin label-audit)")]
    );
    for request in requests.iter().filter(|r| r.method == "GET") {
        assert_eq!(
            request.user_agents,
            [format!("kubeplug/{version}")],
            "{}",
            request.uri
        );
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

/// Names of the objects label-audit recorded an Event about.
fn audited(server: &FakeApiServer) -> std::collections::BTreeSet<String> {
    let events = Resource::new("events.k8s.io", "v1", "Event", "events", true);
    server
        .memory()
        .snapshot(&events)
        .values()
        .map(|json| serde_json::from_slice::<serde_json::Value>(json).unwrap())
        .filter_map(|event| Some(event["regarding"]["name"].as_str()?.to_owned()))
        .collect()
}

fn lease_holder(server: &FakeApiServer) -> Option<String> {
    let leases = Resource::new("coordination.k8s.io", "v1", "Lease", "leases", true);
    let key = kubeplug_informer::object::ObjectKey::new(Some("kubeplug"), "kubeplug");
    let lease: serde_json::Value =
        serde_json::from_slice(&server.memory().get(&leases, &key)?).unwrap();
    lease["spec"]["holderIdentity"]
        .as_str()
        .filter(|holder| !holder.is_empty())
        .map(str::to_owned)
}

/// Two replicas with `--leader-elect` and short durations: only the leader delivers. When
/// it stops renewing (SIGSTOP), the other takes over within the lease duration and a retry
/// period, and handles every Deployment, also those created meanwhile; the old leader, woken
/// up, steps down. SIGTERM stops a replica gracefully, releasing the Lease if it holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_elect_one_leader_and_the_other_takes_over() {
    let server = FakeApiServer::start(FakeOptions::default()).await.unwrap();
    server.serve(deployments());
    let deployment = |name: &str| {
        server
            .memory()
            .create(
                &deployments(),
                &format!(r#"{{"metadata":{{"name":"{name}","namespace":"team-a"}}}}"#),
            )
            .unwrap();
    };
    deployment("before");
    let dir = tempfile::tempdir().unwrap();
    let LabelAuditSetup {
        kubeconfig,
        plugins,
        config,
    } = LabelAuditSetup::new(&server, dir.path());
    let lease = Duration::from_secs(1);
    let retry = Duration::from_millis(200);
    let replica = |identity: &str| {
        let identity = format!("--leader-elect-identity={identity}");
        let args = [
            "--kubeconfig".as_ref(),
            kubeconfig.as_os_str(),
            "--plugins".as_ref(),
            plugins.as_os_str(),
            "--config".as_ref(),
            config.as_os_str(),
            "--leader-elect".as_ref(),
            "--leader-elect-namespace=kubeplug".as_ref(),
            "--leader-elect-lease-duration=1s".as_ref(),
            "--leader-elect-renew-deadline=700ms".as_ref(),
            "--leader-elect-retry-period=200ms".as_ref(),
            identity.as_ref(),
        ]
        .map(Path::new);
        Host::start(&args)
    };

    let mut a = replica("a");
    wait_until("a leads", || a.leads().then_some(()));
    let mut b = replica("b");
    b.wait_for("/readyz", |status, _| status == 200);
    wait_until("a audited the Deployment", || {
        audited(&server).contains("before").then_some(())
    });
    assert!(!b.leads());
    assert_eq!(b.plugin_state(), "standby");
    assert_eq!(a.plugin_state(), "running");
    assert_eq!(lease_holder(&server).as_deref(), Some("a"));

    a.signal("STOP");
    let stopped = Instant::now();
    deployment("meanwhile");
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
    wait_until("b audited what was created meanwhile", || {
        audited(&server).contains("meanwhile").then_some(())
    });
    assert_eq!(lease_holder(&server).as_deref(), Some("b"));

    a.signal("CONT");
    wait_until("the old leader steps down", || {
        (!a.leads() && a.plugin_state() == "standby").then_some(())
    });

    assert!(a.terminate().success());
    assert_eq!(lease_holder(&server).as_deref(), Some("b"));
    assert!(b.terminate().success());
    assert_eq!(lease_holder(&server), None, "b released the Lease");
}
