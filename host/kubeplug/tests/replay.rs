//! `kubeplug test` and `kubeplug record` as a plugin author runs them: the checked-in
//! fixtures of the examples replayed, bad input named, and a recording replayed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn built_plugin(name: &str) -> PathBuf {
    let layout = xtask::Layout::from_manifest_dir();
    let built = xtask::build_plugins(&layout, &[name.to_owned()]).expect("plugins build");
    built.into_iter().next().unwrap()
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `kubeplug` with its artefact cache in `cache`, so that tests write nothing elsewhere.
fn kubeplug(cache: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kubeplug"));
    command
        .env("XDG_CACHE_HOME", cache)
        .env_remove("KUBEPLUG_LOG");
    command
}

fn replay(cache: &Path, plugin: &Path, args: &[&str]) -> Output {
    kubeplug(cache)
        .arg("test")
        .arg(plugin)
        .args(args)
        .output()
        .unwrap()
}

fn fixture(example: &str, file: &str) -> String {
    repository()
        .join("examples/test")
        .join(example)
        .join(file)
        .to_str()
        .unwrap()
        .to_owned()
}

/// The flags that replay configmap-reload's fixture under the examples' configuration.
fn configmap_reload_args() -> Vec<String> {
    let config = repository().join("examples/kubeplug.toml");
    vec![
        "--events".to_owned(),
        fixture("configmap-reload", "events.yaml"),
        "--cache".to_owned(),
        fixture("configmap-reload", "cache.yaml"),
        "--config".to_owned(),
        config.to_str().unwrap().to_owned(),
    ]
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The keys label-audit recorded a `MissingLabels` Event on, per step.
fn flagged_per_step(report: &Value) -> Vec<Vec<String>> {
    report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| {
            step["calls"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|c| c["call"] == "write" && c["verb"] == "record-event")
                .map(|c| {
                    format!(
                        "{} {}",
                        c["resource"].as_str().unwrap(),
                        c["key"].as_str().unwrap()
                    )
                })
                .collect()
        })
        .collect()
}

/// The examples' configuration, which grants every example what it reads.
fn examples_config() -> String {
    repository()
        .join("examples/kubeplug.toml")
        .to_str()
        .unwrap()
        .to_owned()
}

#[test]
fn test_replays_the_label_audit_fixture_in_text_and_json() {
    let cache = tempfile::tempdir().unwrap();
    let plugin = built_plugin("label-audit");
    let events = fixture("label-audit", "events.yaml");
    let fixtures = fixture("label-audit", "cache.yaml");
    let config = examples_config();
    let args = [
        "--events", &events, "--cache", &fixtures, "--config", &config,
    ];

    let output = replay(cache.path(), &plugin, &args);
    let stdout = text(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        text(&output.stderr)
    );
    let flagged: Vec<&str> = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("write record-event"))
        .collect();
    assert_eq!(
        stdout.lines().nth(1),
        Some(format!("configuration: {config} [plugins.label-audit]").as_str()),
        "{stdout}"
    );
    assert_eq!(
        flagged,
        [
            "  write record-event apps/v1/Deployment team-a/worker: Warning MissingLabels: missing required labels: app.kubernetes.io/name",
            "  write record-event v1/Pod team-a/worker-1: Warning MissingLabels: missing required labels: app.kubernetes.io/name",
        ],
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "event 2 ({events}:18): ADDED v1/Pod team-a/worker-1\n  log warn: object lacks required labels key=\"team-a/worker-1\" kind=\"Pod\" missing=\"app.kubernetes.io/name\"\n"
        )),
        "{stdout}"
    );

    // The report does not come from the log: with logging off it says the same.
    let output = kubeplug(cache.path())
        .env("KUBEPLUG_LOG", "off")
        .arg("test")
        .arg(&plugin)
        .args([&args[..], &["--output", "json"]].concat())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["schema"], "kubeplug.dev/test-report/v1");
    assert_eq!(report["plugin"]["delivery"], "events");
    assert_eq!(
        flagged_per_step(&report),
        [
            vec!["apps/v1/Deployment team-a/worker".to_owned()],
            vec![],
            vec!["v1/Pod team-a/worker-1".to_owned()],
            vec![],
            vec![],
        ]
    );
    let step = &report["steps"][2];
    assert_eq!(
        step["event"],
        serde_json::json!({"index": 2, "source": format!("{events}:18"), "type": "ADDED",
                           "resource": "v1/Pod", "key": "team-a/worker-1"})
    );
    assert_eq!(
        step["calls"][0],
        serde_json::json!({"call": "log", "level": "warn", "message": "object lacks required labels",
                           "fields": {"key": "team-a/worker-1", "kind": "Pod", "missing": "app.kubernetes.io/name"}})
    );
    assert_eq!(
        report["status"]["events_delivered"], 6,
        "2 initial + 4 replayed"
    );
    assert_eq!(report["failed"], false);
}

#[test]
fn test_reports_reconcile_results_and_writes_of_configmap_reload() {
    let cache = tempfile::tempdir().unwrap();
    let plugin = built_plugin("configmap-reload");
    let mut args = configmap_reload_args();
    args.extend(["--output".to_owned(), "json".to_owned()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = replay(cache.path(), &plugin, &args);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["plugin"]["delivery"], "reconcile");
    let summary: Vec<Vec<String>> = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| {
            step["calls"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|c| match c["call"].as_str().unwrap() {
                    "write" => Some(format!("{} {} {}", c["verb"], c["resource"], c["key"])),
                    "reconcile" => Some(format!("{} {}", c["key"], c["result"])),
                    _ => None,
                })
                .map(|line| line.replace('"', ""))
                .collect()
        })
        .collect();
    let patch = "patch apps/v1/Deployment team-a/web";
    let web = "apps/v1/Deployment team-a/web done";
    assert_eq!(
        summary,
        [
            // Its first hash; the patch comes back as an update with nothing left to do.
            vec![patch, web, web, "apps/v1/Deployment team-a/worker done"],
            // New content: a new hash.
            vec![patch, web, web],
            // A label only: same hash, no patch.
            vec![web],
            // A ConfigMap no Deployment uses.
            vec![],
        ],
        "{report:#}"
    );
    let hashes: Vec<&str> = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["calls"].as_array().unwrap())
        .filter(|c| c["call"] == "write")
        .map(|c| c["summary"].as_str().unwrap())
        .collect();
    assert_eq!(hashes.len(), 2);
    assert_ne!(hashes[0], hashes[1], "new content, new hash");
    assert!(
        hashes[1].starts_with("merge {\"spec\":{\"template\""),
        "{}",
        hashes[1]
    );
    assert_eq!(report["failed"], false);
}

#[test]
fn test_exits_non_zero_when_a_call_fails_and_reports_it() {
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A section granting the reads but no write: the patch is refused and every reconcile
    // of `web` fails.
    let config = dir.path().join("kubeplug.toml");
    std::fs::write(
        &config,
        "[plugins.configmap-reload.grants]\n\
         read = [\"apps/v1/Deployment\", \"v1/ConfigMap\", \"v1/Secret\"]\n",
    )
    .unwrap();
    let events = fixture("configmap-reload", "events.yaml");
    let fixtures = fixture("configmap-reload", "cache.yaml");
    let output = replay(
        cache.path(),
        &built_plugin("configmap-reload"),
        &[
            "--events",
            &events,
            "--cache",
            &fixtures,
            "--config",
            config.to_str().unwrap(),
        ],
    );
    let stdout = text(&output.stdout);
    assert!(!output.status.success(), "{stdout}");
    assert!(
        stdout.contains("denied patch apps/v1/Deployment (not granted)"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "reconcile apps/v1/Deployment team-a/web: error: plugin configmap-reload: reconcile"
        ),
        "{stdout}"
    );
    assert!(stdout.ends_with("FAILED\n"), "{stdout}");
    assert!(
        text(&output.stderr).contains("plugin configmap-reload failed"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn test_names_the_file_and_event_of_bad_input() {
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let plugin = built_plugin("label-audit");
    let config = examples_config();
    let fails_naming = |args: &[&str], expected: &[&str]| {
        let output = replay(
            cache.path(),
            &plugin,
            &[args, &["--config", &config]].concat(),
        );
        let stderr = text(&output.stderr);
        assert!(!output.status.success(), "{args:?} succeeded");
        for part in expected {
            assert!(
                stderr.contains(part),
                "{args:?}: {stderr:?} does not name {part:?}"
            );
        }
    };
    let missing = dir.path().join("missing.yaml");
    fails_naming(
        &["--events", missing.to_str().unwrap()],
        &["cannot read the events file", "missing.yaml"],
    );

    let malformed = dir.path().join("events.yaml");
    std::fs::write(
        &malformed,
        "type: ADDED\nobject: {apiVersion: v1, kind: Pod, metadata: {name: a}}\n---\n# the second\ntype: ADDED\nobject: {apiVersion: v1, kind: Pod}\n",
    )
    .unwrap();
    fails_naming(
        &["--events", malformed.to_str().unwrap()],
        &["events.yaml:5: event 2", "metadata.name"],
    );

    let unknown = dir.path().join("events.jsonl");
    std::fs::write(
        &unknown,
        "{\"type\":\"ADDED\",\"object\":{\"apiVersion\":\"example.com/v1\",\"kind\":\"Widget\",\"metadata\":{\"name\":\"w\"}}}\n",
    )
    .unwrap();
    fails_naming(
        &["--events", unknown.to_str().unwrap()],
        &[
            "events.jsonl:1: event 1",
            "example.com/v1 Widget",
            "CustomResourceDefinition",
        ],
    );

    let deleted = dir.path().join("deleted.yaml");
    std::fs::write(
        &deleted,
        "type: DELETED\nobject: {apiVersion: v1, kind: Pod, metadata: {name: ghost}}\n",
    )
    .unwrap();
    fails_naming(
        &["--events", deleted.to_str().unwrap()],
        &[
            "deleted.yaml:1: event 1",
            "default/ghost, which does not exist",
        ],
    );

    let bad_cache = dir.path().join("cache.yaml");
    std::fs::write(&bad_cache, "apiVersion: v1\nkind: Pod\nmetadata: {}\n").unwrap();
    fails_naming(
        &[
            "--events",
            &fixture("label-audit", "events.yaml"),
            "--cache",
            bad_cache.to_str().unwrap(),
        ],
        &["cache.yaml, document 1", "metadata.name"],
    );
}

#[test]
fn record_writes_what_test_replays() {
    let cache = tempfile::tempdir().unwrap();
    let cluster = tempfile::tempdir().unwrap();
    std::fs::write(
        cluster.path().join("objects.yaml"),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api, namespace: team-b}\nspec: {}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: api-1, namespace: team-b, labels: {app.kubernetes.io/name: api}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: not-recorded, namespace: team-b}\n",
    )
    .unwrap();
    for file in ["recorded.yaml", "recorded.jsonl"] {
        let out = cluster.path().join("out").join(file);
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        let output = kubeplug(cache.path())
            .args(["record", "--local"])
            .arg(cluster.path())
            .args(["--resource", "apps/v1/Deployment", "--resource", "v1/Pod"])
            .args(["--count", "2", "--out"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", text(&output.stderr));
        let recorded = std::fs::read_to_string(&out).unwrap();
        assert!(!recorded.contains("not-recorded"), "{recorded}");

        let output = replay(
            cache.path(),
            &built_plugin("label-audit"),
            &[
                "--events",
                out.to_str().unwrap(),
                "--config",
                &examples_config(),
                "--output",
                "json",
            ],
        );
        assert!(output.status.success(), "{}", text(&output.stderr));
        let report: Value = serde_json::from_slice(&output.stdout).unwrap();
        let mut replayed: Vec<String> = report["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| {
                s["event"]["key"]
                    .as_str()
                    .map(|k| format!("{} {k}", s["event"]["type"]))
            })
            .collect();
        replayed.sort();
        assert_eq!(
            replayed,
            ["\"ADDED\" team-b/api", "\"ADDED\" team-b/api-1"],
            "{recorded}"
        );
        assert_eq!(
            flagged_per_step(&report).concat(),
            ["apps/v1/Deployment team-b/api"],
            "only the Deployment lacks the label"
        );
    }
}

/// A cache home whose `kubeplug/artifacts` is `target/test-artefacts`, where the runtime's
/// tests keep the examples they compiled: a Python component takes minutes to compile in a
/// debug build, and the host and those tests share the engine configuration, hence the files.
fn shared_artefacts() -> PathBuf {
    let artefacts = repository().join("target/test-artefacts");
    let home = repository().join("target/test-artefacts-home");
    let link = home.join("kubeplug/artifacts");
    std::fs::create_dir_all(&artefacts).unwrap();
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    match std::os::unix::fs::symlink(&artefacts, &link) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(error) => panic!("linking {}: {error}", link.display()),
    }
    home
}

/// The four label-audit implementations, replayed through the same fixture, flag the same
/// keys with the same Event notes and log the same warnings.
#[test]
fn every_label_audit_gives_the_same_report_on_the_fixture() {
    let cache = shared_artefacts();
    let events = fixture("label-audit", "events.yaml");
    let fixtures = fixture("label-audit", "cache.yaml");
    let config = examples_config();
    let args = [
        "--events", &events, "--cache", &fixtures, "--config", &config, "--output", "json",
    ];
    let observable = |report: &Value| -> Vec<Vec<Value>> {
        report["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|step| {
                step["calls"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|call| {
                        serde_json::json!({
                            "call": call["call"], "verb": call["verb"], "key": call["key"],
                            "resource": call["resource"], "level": call["level"],
                            "message": call["message"], "fields": call["fields"],
                            "summary": call["summary"],
                        })
                    })
                    .collect()
            })
            .collect()
    };
    let reports: Vec<(&str, Vec<Vec<Value>>)> = [
        "label-audit",
        "label-audit-c",
        "label-audit-js",
        "label-audit-py",
    ]
    .into_iter()
    .map(|name| {
        let output = replay(&cache, &built_plugin(name), &args);
        assert!(output.status.success(), "{name}: {}", text(&output.stderr));
        let report: Value = serde_json::from_slice(&output.stdout).unwrap();
        (name, observable(&report))
    })
    .collect();
    let (_, rust) = &reports[0];
    assert!(
        rust.iter()
            .flatten()
            .any(|call| call["verb"] == "record-event")
    );
    for (name, report) in &reports[1..] {
        assert_eq!(report, rust, "{name} differs from the Rust original");
    }
}

/// Issue 20: the report is the same on every run of the same input, byte for byte, so
/// that plugin authors can diff it in CI. configmap-reload reconciles the Deployment it
/// patches: before a plugin's write returned only once the informers had it, the
/// reconcile that followed sometimes read the old object and patched again, and the
/// counts of events and reconciles changed from run to run (3 variants in 20 runs).
#[test]
fn the_report_is_the_same_on_every_run() {
    let cache = shared_artefacts();
    let plugin = built_plugin("configmap-reload");
    let args = configmap_reload_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let reports: std::collections::BTreeSet<String> = (0..12)
        .map(|_| {
            let output = replay(&cache, &plugin, &args);
            assert!(output.status.success(), "{}", text(&output.stderr));
            text(&output.stdout)
        })
        .collect();
    assert_eq!(reports.len(), 1, "{reports:#?}");
}

/// Issue 21: `test` grants what `run` grants. Without a configuration that is nothing, so a
/// plugin that reads fails to load, naming the configuration and the lines that would
/// grant its reads (before, `test` granted whatever the plugin asked for).
#[test]
fn test_grants_what_run_grants_and_says_which_configuration_it_used() {
    let cache = shared_artefacts();
    let plugin = built_plugin("label-audit");
    let events = fixture("label-audit", "events.yaml");
    let fixtures = fixture("label-audit", "cache.yaml");
    let output = replay(
        &cache,
        &plugin,
        &["--events", &events, "--cache", &fixtures],
    );
    let stderr = text(&output.stderr);
    assert!(!output.status.success(), "{}", text(&output.stdout));
    for part in [
        "configuration: none given (--config): the defaults, which grant nothing",
        "label-audit.wasm: grants: plugin label-audit reads types it is not granted",
        "[plugins.label-audit.grants]",
    ] {
        assert!(stderr.contains(part), "{stderr} should say {part:?}");
    }

    // A configuration without a section for the plugin: its defaults, said so.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("kubeplug.toml");
    std::fs::write(
        &config,
        "[defaults.grants]\nread = [\"apps/v1/Deployment\", \"v1/Pod\"]\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let output = replay(
        &cache,
        &plugin,
        &[
            "--events", &events, "--cache", &fixtures, "--config", config,
        ],
    );
    let stdout = text(&output.stdout);
    assert_eq!(
        stdout.lines().nth(1),
        Some(
            format!(
                "configuration: {config}, which has no section for this plugin: its [defaults]"
            )
            .as_str()
        ),
        "{stdout}\n{}",
        text(&output.stderr)
    );
    assert!(
        stdout.contains("denied record-event"),
        "the defaults grant no writes: {stdout}"
    );
}

/// Issue 23: `kubeplug check` lists a subscription's projections, and `kubeplug test`
/// reports the values each replayed event carried (crashloop-alert projects the container
/// statuses of Pods).
#[test]
fn check_and_test_show_projections() {
    let cache = tempfile::tempdir().unwrap();
    let plugin = built_plugin("crashloop-alert");
    let check = kubeplug(cache.path())
        .arg("check")
        .arg(&plugin)
        .output()
        .unwrap();
    let checked = text(&check.stdout);
    assert!(check.status.success(), "{checked}");
    assert!(
        checked.contains("  v1/Pod (")
            && checked.contains("\n    projects statuses: status.containerStatuses[*]\n"),
        "{checked}"
    );

    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.yaml");
    std::fs::write(
        &events,
        "type: ADDED\nobject:\n  apiVersion: v1\n  kind: Pod\n  metadata: {name: p, namespace: a}\n  \
         status:\n    containerStatuses:\n    - name: app\n      state: {waiting: {reason: CrashLoopBackOff}}\n\
         ---\ntype: ADDED\nobject:\n  apiVersion: v1\n  kind: Pod\n  metadata: {name: q, namespace: a}\n",
    )
    .unwrap();
    let events = events.to_str().unwrap();
    let config = examples_config();
    let output = replay(
        cache.path(),
        &plugin,
        &["--events", events, "--config", &config, "--output", "json"],
    );
    let stdout = text(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        text(&output.stderr)
    );
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        report["steps"][1]["event"]["projected"],
        serde_json::json!({"statuses": [{"name": "app", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}),
        "{stdout}"
    );
    assert_eq!(
        report["steps"][2]["event"]["projected"],
        serde_json::json!({"statuses": []}),
        "{stdout}"
    );
    let output = replay(
        cache.path(),
        &plugin,
        &["--events", events, "--config", &config],
    );
    let stdout = text(&output.stdout);
    assert!(
        stdout.contains(
            "ADDED v1/Pod a/p\n  projected: statuses=[{\"name\":\"app\",\"state\":{\"waiting\":{\"reason\":\"CrashLoopBackOff\"}}}]\n"
        ),
        "{stdout}"
    );
}
