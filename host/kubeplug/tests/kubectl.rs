//! Issue 22: kubectl against `kubeplug run --local DIR --serve-api`: the verbs a user types,
//! a plugin's writes seen through kubectl, kubectl's writes seen by a plugin, strategic merge
//! patches refused, and requests without the token refused; and one kubectl session on the
//! served cluster and on a real kube-apiserver v1.32 (envtest), which must end alike. The
//! kubectl is the machine's (`kubectl` on PATH).

// Shared by the binary's test targets; this one needs the running host, polling and plugins.
#[allow(dead_code)]
mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use kubeplug_envtest::{Envtest, User};
use support::{Host, built_plugin, kubeplug, wait_until};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A host serving a local cluster's API, and kubectl pointed at it.
struct Served {
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    _host: Host,
}

impl Served {
    /// `kubeplug run --local` on a ConfigMap and a Deployment lacking the name label, with
    /// namespace-defaults and label-audit loaded, serving its API on a free loopback port.
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let cluster = dir.path().join("cluster");
        let plugins = dir.path().join("plugins");
        std::fs::create_dir_all(&cluster).unwrap();
        std::fs::create_dir_all(&plugins).unwrap();
        std::fs::write(
            cluster.join("objects.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web, namespace: default}\n\
             data: {greeting: hello}\n---\n\
             apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: worker, namespace: default}\n\
             spec: {replicas: 1, selector: {matchLabels: {app: worker}}, \
             template: {metadata: {labels: {app: worker}}, \
             spec: {containers: [{name: w, image: busybox}]}}}\n---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {name: worker-1, namespace: default, \
             labels: {app.kubernetes.io/name: worker}}\n\
             spec: {containers: [{name: w, image: busybox}]}\nstatus: {phase: Running, \
             containerStatuses: [{name: w, image: busybox, ready: false, restartCount: 7, \
             state: {waiting: {reason: CrashLoopBackOff}}}]}\n",
        )
        .unwrap();
        for name in ["namespace-defaults", "label-audit"] {
            let built = built_plugin(name);
            std::fs::copy(&built, plugins.join(format!("{name}.wasm"))).unwrap();
        }
        let config = dir.path().join("kubeplug.toml");
        std::fs::write(
            &config,
            "[plugins.namespace-defaults.grants]\n\
             read = [\"v1/Namespace\", \"v1/ResourceQuota\"]\n\
             write = { \"v1/Namespace\" = [\"apply\"], \"v1/ResourceQuota\" = [\"apply\"] }\n\
             [plugins.label-audit.grants]\n\
             read = [\"apps/v1/Deployment\", \"v1/Pod\"]\n\
             write = { \"apps/v1/Deployment\" = [\"record-event\"], \"v1/Pod\" = [\"record-event\"] }\n",
        )
        .unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        let host = Host::start([
            "--local".as_ref(),
            cluster.as_os_str(),
            "--plugins".as_ref(),
            plugins.as_os_str(),
            "--config".as_ref(),
            config.as_os_str(),
            "--serve-api".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--kubeconfig-out".as_ref(),
            kubeconfig.as_os_str(),
        ]);
        wait_until("the kubeconfig", || kubeconfig.is_file().then_some(()));
        Self {
            dir,
            kubeconfig,
            _host: host,
        }
    }

    /// kubectl with the kubeconfig and a scratch `HOME` (its discovery cache).
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("kubectl");
        command
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.dir.path())
            .args(["--request-timeout", "20s"])
            .args(args);
        command
    }

    fn kubectl(&self, args: &[&str]) -> Output {
        self.command(args)
            .output()
            .expect("kubectl is installed on this machine")
    }

    /// kubectl that must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let output = self.kubectl(args);
        assert!(
            output.status.success(),
            "kubectl {}: {}{}",
            args.join(" "),
            text(&output.stdout),
            text(&output.stderr)
        );
        text(&output.stdout)
    }

    /// Writes `manifest` into the scratch directory; its path.
    fn manifest(&self, name: &str, manifest: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, manifest).unwrap();
        path
    }
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn kubectl_reads_and_writes_the_local_cluster() {
    let served = Served::start();

    let resources = served.ok(&["api-resources"]);
    for name in ["configmaps", "deployments", "namespaces", "events"] {
        assert!(resources.contains(name), "{resources}");
    }
    assert!(served.ok(&["get", "configmaps"]).contains("web"));
    // Short names and categories, from the real server's discovery; ages, from the
    // creationTimestamp the local cluster sets.
    let deployments = served.ok(&["get", "deploy"]);
    assert!(deployments.contains("worker"), "{deployments}");
    assert!(!deployments.contains("<unknown>"), "{deployments}");
    // Tables with the real server's columns, `-o wide`'s when asked.
    assert!(
        deployments.starts_with("NAME ") && deployments.contains(" UP-TO-DATE "),
        "{deployments}"
    );
    let pods = served.ok(&["get", "pods", "-o", "wide"]);
    let pod = pods
        .lines()
        .find(|line| line.starts_with("worker-1 "))
        .unwrap_or_default();
    let columns: Vec<&str> = pod.split_whitespace().collect();
    assert_eq!(
        columns.get(1..4),
        Some(&["0/1", "CrashLoopBackOff", "7"][..]),
        "READY, STATUS and RESTARTS of the crash-looping Pod: {pods}"
    );
    assert!(pods.contains(" NOMINATED NODE "), "{pods}");
    assert!(
        served
            .ok(&["get", "cm", "web", "-o", "name"])
            .contains("configmap/web")
    );
    let all = served.ok(&["get", "all", "-o", "name"]);
    assert!(all.contains("deployment.apps/worker"), "{all}");
    let yaml = served.ok(&["get", "configmap", "web", "-o", "yaml"]);
    assert!(
        yaml.contains("kind: ConfigMap") && yaml.contains("greeting: hello"),
        "{yaml}"
    );

    // A watch sees what the other verbs do.
    let mut watch = served
        .command(&[
            "get",
            "configmaps",
            "-w",
            "--output-watch-events",
            "-o",
            r#"jsonpath={.type} {.object.metadata.name}{"\n"}"#,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, seen) = mpsc::channel();
    let stdout = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let created = served.manifest(
        "settings.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {level: low}\n",
    );
    assert!(
        served
            .ok(&["create", "-f", path_str(&created)])
            .contains("created")
    );
    let label = served.ok(&["label", "configmap", "settings", "tier=gold"]);
    assert!(label.contains("labeled"), "{label}");
    let annotate = served.ok(&["annotate", "configmap", "settings", "owner=me"]);
    assert!(annotate.contains("annotated"), "{annotate}");
    served.ok(&[
        "patch",
        "configmap",
        "settings",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"level":"high"}}"#,
    ]);
    served.ok(&[
        "patch",
        "configmap",
        "settings",
        "--type",
        "json",
        "-p",
        r#"[{"op":"add","path":"/data/extra","value":"1"}]"#,
    ]);
    let settings = served.ok(&["get", "configmap", "settings", "-o", "json"]);
    let settings: serde_json::Value = serde_json::from_str(&settings).unwrap();
    assert_eq!(
        settings["data"],
        serde_json::json!({"level": "high", "extra": "1"})
    );
    assert_eq!(settings["metadata"]["labels"]["tier"], "gold");
    assert_eq!(settings["metadata"]["annotations"]["owner"], "me");

    // kubectl delete waits for the deletion on a watch with a metadata.name field selector.
    let deleted = served.ok(&["delete", "configmap", "settings", "--timeout", "20s"]);
    assert!(deleted.contains("deleted"), "{deleted}");
    // Lines of `TYPE NAME` (the table printer would buffer them in a pipe).
    let mut events = Vec::new();
    while let Ok(line) = seen.recv_timeout(Duration::from_secs(20)) {
        let done = line == "DELETED settings";
        events.push(line);
        if done {
            break;
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();
    for expected in [
        "ADDED web",
        "ADDED settings",
        "MODIFIED settings",
        "DELETED settings",
    ] {
        assert!(
            events.iter().any(|e| e == expected),
            "{expected}: {events:?}"
        );
    }
}

#[test]
fn plugins_see_kubectl_writes_and_kubectl_sees_plugin_writes() {
    let served = Served::start();
    // namespace-defaults labels every Namespace and gives it a quota: one applied by kubectl
    // too, as the informers see the same store.
    let namespace = served.manifest(
        "namespace.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: from-kubectl}\n",
    );
    let applied = served.ok(&["apply", "--server-side", "-f", path_str(&namespace)]);
    assert!(applied.contains("serverside-applied"), "{applied}");
    let label = r"jsonpath={.metadata.labels.pod-security\.kubernetes\.io/warn}";
    wait_until("namespace-defaults labels the Namespace", || {
        (served.ok(&["get", "namespace", "from-kubectl", "-o", label]) == "baseline").then_some(())
    });
    wait_until("namespace-defaults gives it a quota", || {
        served
            .ok(&["get", "resourcequotas", "-n", "from-kubectl", "-o", "name"])
            .contains("resourcequota/namespace-defaults")
            .then_some(())
    });
    // label-audit's Event on the Deployment without the name label, in both groups, as a
    // real API server shows one stored Event.
    wait_until("label-audit's Event", || {
        let events = served.ok(&["get", "events.events.k8s.io", "-o", "yaml"]);
        events.contains("reason: MissingLabels").then_some(())
    });
    let core = served.ok(&[
        "get",
        "events",
        "-o",
        "jsonpath={.items[0].reason} {.items[0].involvedObject.name} {.items[0].message}",
    ]);
    assert!(
        core.starts_with("MissingLabels worker missing required labels"),
        "{core}"
    );
    // And as kubectl prints Events from a real server: the columns of
    // `kubectl get events`, a row per Event.
    let table = served.ok(&["get", "events"]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        "{table}"
    );
    assert!(
        lines.any(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            cells.get(1..5) == Some(&["Warning", "MissingLabels", "deployment/worker", "missing"])
        }),
        "{table}"
    );
    // `kubectl describe` finds an object's Events with a field selector on the regarded
    // object, its uid among them. (It reads `spec.replicas` unchecked: a real server
    // defaults it, the local cluster does not, so the manifest above sets it.)
    let described = served.ok(&["describe", "deployment", "worker"]);
    let events = described.split("Events:").nth(1).unwrap_or_default();
    assert!(
        events.contains("Warning  MissingLabels") && events.contains("missing required labels"),
        "{described}"
    );
}

#[test]
fn a_strategic_merge_patch_is_refused_naming_what_works() {
    let served = Served::start();
    let output = served.kubectl(&["patch", "configmap", "web", "-p", r#"{"data":{"x":"1"}}"#]);
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("strategic-merge-patch+json is not supported")
            && stderr.contains("--server-side")
            && stderr.contains("--type merge"),
        "{stderr}"
    );
    let web = served.ok(&["get", "configmap", "web", "-o", "jsonpath={.data}"]);
    assert_eq!(web, r#"{"greeting":"hello"}"#);
}

#[test]
fn requests_without_the_token_are_refused() {
    let served = Served::start();
    let output = served.kubectl(&["get", "configmaps", "--token", "not-the-token"]);
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("Unauthorized")
            || text(&output.stderr).contains("credentials"),
        "{}",
        text(&output.stderr)
    );
    // The kubeconfig holds the token: its owner alone may read it.
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&served.kubeconfig)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn the_api_is_served_on_loopback_only() {
    let dir = tempfile::tempdir().unwrap();
    let output = kubeplug()
        .args(["run", "--local"])
        .arg(dir.path())
        .args(["--plugins"])
        .arg(dir.path())
        .args(["--serve-api", "0.0.0.0:0", "--http", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("0.0.0.0:0 is not a loopback address"),
        "{stderr}"
    );
}

/// The outputs of one kubectl session in `namespace`, each kubectl's stdout or, when it
/// failed, `error: ` and its stderr.
fn session(kubectl: &dyn Fn(&[&str]) -> Output, manifest: &Path, namespace: &str) -> Vec<String> {
    let steps: [&[&str]; 9] = [
        &["create", "-f", path_str(manifest)],
        &["label", "configmap", "session", "tier=gold"],
        &["annotate", "configmap", "session", "owner=me"],
        &[
            "patch",
            "configmap",
            "session",
            "--type",
            "merge",
            "-p",
            r#"{"data":{"level":"high"}}"#,
        ],
        &[
            "patch",
            "configmap",
            "session",
            "--type",
            "json",
            "-p",
            r#"[{"op":"add","path":"/data/extra","value":"1"}]"#,
        ],
        &[
            "get",
            "configmap",
            "session",
            "-o",
            "jsonpath={.data} {.metadata.labels} {.metadata.annotations}",
        ],
        &["create", "-f", path_str(manifest)],
        &["delete", "configmap", "session"],
        &["get", "configmap", "session"],
    ];
    steps
        .iter()
        .map(|args| {
            let mut args = args.to_vec();
            args.extend(["-n", namespace]);
            let output = kubectl(&args);
            if output.status.success() {
                text(&output.stdout)
            } else {
                format!("error: {}", text(&output.stderr))
            }
        })
        .collect()
}

/// Where the served cluster and the real API server answer the same session differently,
/// the real one is right.
#[test]
fn a_kubectl_session_ends_as_on_a_real_api_server() {
    let Some(env) = Envtest::shared() else {
        return;
    };
    let served = Served::start();
    let manifest = served.manifest(
        "session.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: session}\ndata: {level: low}\n",
    );
    let namespace = env.namespace("kubectl").unwrap();
    let real = |args: &[&str]| {
        Command::new("kubectl")
            .env("KUBECONFIG", env.kubeconfig_of(User::Admin))
            .env("HOME", served.dir.path().join("real-home"))
            .args(["--request-timeout", "20s"])
            .args(args)
            .output()
            .expect("kubectl is installed on this machine")
    };
    let expected = session(&real, &manifest, &namespace);
    assert!(expected[5].contains(r#""tier":"gold""#), "{expected:?}");
    assert!(expected[6].contains("AlreadyExists"), "{expected:?}");
    assert!(expected[8].contains("NotFound"), "{expected:?}");
    let local = session(&|args| served.kubectl(args), &manifest, "default");
    let local: Vec<String> = local
        .into_iter()
        .map(|output| output.replace("default", &namespace))
        .collect();
    assert_eq!(local, expected);
}
