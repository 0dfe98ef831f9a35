//! The `kubeplug` binary as a user runs it: bad input, and a running host's HTTP endpoints.

mod support;

use std::ffi::OsStr;

use support::{Host, built_plugin, kubeplug};

fn fails_naming(args: &[&str], expected: &[&str]) {
    let output = kubeplug().args(args).output().unwrap();
    assert!(!output.status.success(), "{args:?} succeeded");
    let stderr = String::from_utf8_lossy(&output.stderr);
    for part in expected {
        assert!(
            stderr.contains(part),
            "{args:?}: {stderr:?} does not name {part:?}"
        );
    }
}

#[test]
fn bad_input_exits_non_zero_with_a_message_naming_the_problem() {
    let cluster = tempfile::tempdir().unwrap();
    let plugins = tempfile::tempdir().unwrap();
    let cluster_dir = cluster.path().to_str().unwrap();
    let plugins_dir = plugins.path().to_str().unwrap();
    fails_naming(
        &[
            "run",
            "--local",
            cluster_dir,
            "--plugins",
            "/nonexistent/kubeplug-plugins",
        ],
        &["/nonexistent/kubeplug-plugins"],
    );
    fails_naming(
        &[
            "run",
            "--local",
            "/nonexistent/kubeplug-cluster",
            "--plugins",
            plugins_dir,
        ],
        &["/nonexistent/kubeplug-cluster"],
    );
    fails_naming(
        &[
            "run",
            "--local",
            cluster_dir,
            "--plugins",
            plugins_dir,
            "--config",
            "/nonexistent/kubeplug.toml",
        ],
        &["/nonexistent/kubeplug.toml"],
    );
    let bad_config = cluster.path().join("bad.toml");
    std::fs::write(&bad_config, "[defaults]\nbatch_size = \"many\"\n").unwrap();
    fails_naming(
        &[
            "run",
            "--local",
            cluster_dir,
            "--plugins",
            plugins_dir,
            "--config",
            bad_config.to_str().unwrap(),
        ],
        &["bad.toml", "batch_size"],
    );
    fails_naming(
        &[
            "run",
            "--local",
            cluster_dir,
            "--plugins",
            plugins_dir,
            "--http",
            "not-an-address",
        ],
        &["--http", "not-an-address"],
    );
    fails_naming(
        &[
            "run",
            "--plugins",
            plugins_dir,
            "--kubeconfig",
            "/nonexistent/kubeconfig",
        ],
        &["/nonexistent/kubeconfig", "--local"],
    );
    // The local cluster has no API server to authenticate callers with.
    fails_naming(
        &[
            "run",
            "--local",
            cluster_dir,
            "--plugins",
            plugins_dir,
            "--metrics-secure",
        ],
        &["--metrics-secure", "local cluster"],
    );
}

#[test]
fn check_describes_a_valid_plugin_and_names_what_is_wrong_with_an_invalid_one() {
    let output = kubeplug()
        .arg("check")
        .arg(built_plugin("label-audit"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.starts_with("label-audit 0.1.0"), "{stdout}");
    assert!(stdout.contains("delivery: events"), "{stdout}");
    assert!(
        stdout.contains(
            "  apps/v1/Deployment (metadata: key, labels)\n  v1/Pod (metadata: key, labels)\n"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("writes v1/Pod: record-event"), "{stdout}");
    // Without a configuration nothing is granted, and that is only reported.
    assert!(stdout.contains("\ngrants:\n"), "{stdout}");
    for line in [
        "read apps/v1/Deployment",
        "read v1/Pod",
        "record-event v1/Pod",
    ] {
        assert!(
            stdout.contains(&format!("  {line}: not granted (no configuration given)\n")),
            "{line}: {stdout}"
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let truncated = dir.path().join("truncated.wasm");
    let bytes = std::fs::read(built_plugin("label-audit")).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    fails_naming(
        &["check", truncated.to_str().unwrap()],
        &["truncated.wasm", "compile"],
    );
    fails_naming(
        &["check", "/nonexistent/plugin.wasm"],
        &["/nonexistent/plugin.wasm"],
    );
    let config = dir.path().join("kubeplug.toml");
    let audit = dir.path().join("label-audit.wasm");
    std::fs::write(&audit, &bytes).unwrap();
    let check = |config_text: &str| {
        std::fs::write(&config, config_text).unwrap();
        kubeplug()
            .arg("check")
            .arg(&audit)
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap()
    };
    // Each read and write, granted or refused by the configuration; a refused read fails.
    let granted = check(
        "[plugins.label-audit.grants]\nread = [\"apps/v1/Deployment\", \"v1/Pod\"]\n\
         write = { \"v1/Pod\" = [\"record-event\"] }\n",
    );
    let stdout = String::from_utf8_lossy(&granted.stdout);
    assert!(granted.status.success(), "{stdout}");
    for line in [
        "  read v1/Pod: granted",
        "  record-event v1/Pod: granted",
        "  record-event apps/v1/Deployment: refused",
    ] {
        assert!(stdout.contains(line), "{line}: {stdout}");
    }
    let refused = check("[plugins.label-audit.grants]\nread = [\"v1/Pod\"]\n");
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stdout).contains("  read apps/v1/Deployment: refused")
    );
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("grants: the configuration grants label-audit none of: apps/v1/Deployment"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    std::fs::write(
        &config,
        "[plugins.label-audit]\nsettings = { required_labels = [] }\n",
    )
    .unwrap();
    fails_naming(
        &[
            "check",
            audit.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ],
        &["label-audit.wasm", "required_labels is empty"],
    );
}

/// The log filter comes from `KUBEPLUG_LOG`, else `RUST_LOG`, else `info`; a filter that
/// does not parse is named, and the default applies.
#[test]
fn rust_log_sets_the_log_level_and_kubeplug_log_wins() {
    let plugin = built_plugin("label-audit");
    let stderr = |variables: &[(&str, &str)]| {
        let mut command = kubeplug();
        command.envs(variables.iter().copied());
        let output = command.arg("check").arg(&plugin).output().unwrap();
        assert!(output.status.success(), "{variables:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let levels = |text: &str, level: &str| text.lines().filter(|l| l.contains(level)).count();

    let default = stderr(&[]);
    assert!(levels(&default, " INFO ") > 0, "{default}");
    assert_eq!(levels(&default, " DEBUG "), 0, "{default}");
    // Compiling the plugin: wasmtime logs at debug.
    let debug = stderr(&[("RUST_LOG", "wasmtime=debug")]);
    assert!(levels(&debug, " DEBUG wasmtime") > 0, "{debug}");
    let quiet = stderr(&[("RUST_LOG", "debug"), ("KUBEPLUG_LOG", "error")]);
    assert_eq!(
        levels(&quiet, " INFO ") + levels(&quiet, " DEBUG "),
        0,
        "{quiet}"
    );
    let refused = stderr(&[("RUST_LOG", "debug[")]);
    assert!(
        refused.contains("RUST_LOG=\"debug[\" is not a log filter"),
        "{refused}"
    );
    assert!(
        levels(&refused, " INFO ") > 0,
        "the default applies: {refused}"
    );
}

fn plugin_state<'a>(plugins: &'a serde_json::Value, file: &str) -> &'a serde_json::Value {
    plugins
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["file"].as_str().unwrap().ends_with(file))
        .unwrap_or_else(|| panic!("no {file} in {plugins}"))
}

#[test]
fn a_running_host_serves_probes_metrics_and_plugin_status_and_follows_the_manifests() {
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(
        built_plugin("label-audit"),
        plugins.path().join("label-audit.wasm"),
    )
    .unwrap();
    std::fs::copy(
        built_plugin("reconciler"),
        plugins.path().join("reconciler.wasm"),
    )
    .unwrap();
    std::fs::copy(
        built_plugin("label-reader"),
        plugins.path().join("label-reader.wasm"),
    )
    .unwrap();
    std::fs::write(plugins.path().join("broken.wasm"), b"\0asm but not really").unwrap();

    let cluster = tempfile::tempdir().unwrap();
    let deployment = |labels: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: team-a\n{labels}"
        )
    };
    std::fs::write(cluster.path().join("web.yaml"), deployment("")).unwrap();
    std::fs::write(
        cluster.path().join("cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: team-a\n  labels: {mode: ok}\n",
    )
    .unwrap();
    std::fs::write(
        cluster.path().join("pod.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web-1\n  namespace: team-a\n  labels: {app: web}\n",
    )
    .unwrap();
    let config = cluster.path().join("kubeplug.toml");
    std::fs::write(
        &config,
        "[defaults.grants]\nread = [\"*\"]\n\
         [plugins.label-audit.grants]\nwrite = { \"apps/v1/Deployment\" = [\"record-event\"] }\n",
    )
    .unwrap();

    let host = Host::start([
        OsStr::new("--local"),
        cluster.path().as_os_str(),
        OsStr::new("--plugins"),
        plugins.path().as_os_str(),
        OsStr::new("--config"),
        config.as_os_str(),
    ]);
    assert_eq!(host.get("/healthz"), (200, "ok".to_owned()));
    let ready = host.wait_for("/readyz?verbose", |status, _| status == 200);
    assert!(ready.contains("[+]plugins ok"), "{ready}");

    let status: serde_json::Value = serde_json::from_str(&host.get("/plugins").1).unwrap();
    assert_eq!(
        plugin_state(&status, "label-audit.wasm")["state"],
        "running"
    );
    // The reconciler test guest's own writes fail here, so it may be quarantined already:
    // loaded either way.
    let reconciler = &plugin_state(&status, "reconciler.wasm")["state"];
    assert!(
        reconciler == "running" || reconciler == "quarantined",
        "{reconciler}"
    );
    let broken = plugin_state(&status, "broken.wasm");
    assert_eq!(broken["state"], "failed");
    assert!(
        broken["last_error"]
            .as_str()
            .unwrap()
            .contains("broken.wasm"),
        "{broken}"
    );
    let logged: Vec<String> = host
        .stderr_lines()
        .into_iter()
        .filter(|line| line.contains(" ERROR ") && line.contains("broken.wasm"))
        .collect();
    assert_eq!(
        logged.len(),
        1,
        "the broken file is reported once: {logged:?}"
    );

    // The label-audit plugin saw the Deployment; editing the manifest reaches it as an update.
    let delivered = |body: &str| {
        let status: serde_json::Value = serde_json::from_str(body).unwrap();
        plugin_state(&status, "label-audit.wasm")["events_delivered"]
            .as_u64()
            .unwrap()
    };
    host.wait_for("/plugins", |_, body| delivered(body) >= 1);
    std::fs::write(
        cluster.path().join("web.yaml"),
        deployment("  labels:\n    app.kubernetes.io/name: web\n"),
    )
    .unwrap();
    host.wait_for("/plugins", |_, body| delivered(body) >= 2);

    let metrics = host.wait_for("/metrics", |_, body| {
        body.contains("workqueue_adds_total{name=\"reconciler\"}")
            && body.contains("web_total{plugin=\"label-reader\"} 1")
    });
    let lines = metrics.lines().map(|l| Ok(l.to_owned()));
    let scrape =
        prometheus_parse::Scrape::parse(lines).expect("/metrics parses as Prometheus text");
    let has = |name: &str, label: (&str, &str)| {
        scrape
            .samples
            .iter()
            .any(|s| s.metric == name && s.labels.get(label.0) == Some(label.1))
    };
    // label-audit reads Deployments' labels alone: their informer is of the metadata form.
    assert!(has(
        "kubeplug_informer_objects",
        ("informer", "apps/v1/deployments metadata")
    ));
    assert!(has("kubeplug_plugin_loaded", ("plugin", "label-audit")));
    assert!(has(
        "kubeplug_plugin_events_total",
        ("plugin", "label-audit")
    ));
    assert!(has("workqueue_adds_total", ("name", "reconciler")));
    assert!(has("workqueue_depth", ("name", "reconciler")));
    assert!(has("kubeplug_plugin_reloads_total", ("result", "success")));
    // Series a plugin defines through `metrics`, labelled with the plugin.
    assert!(has("events_total", ("plugin", "label-reader")));
    assert!(!metrics.contains("_total_total"), "{metrics}");

    // The directory is live: a file dropped in loads (here it is refused: label-audit in a
    // file named otherwise), and removing a file unloads its plugin.
    let aside = plugins.path().join(".copy.tmp");
    std::fs::copy(built_plugin("label-audit"), &aside).unwrap();
    std::fs::rename(&aside, plugins.path().join("audit-copy.wasm")).unwrap();
    let status = host.wait_for("/plugins", |_, body| {
        body.contains("audit-copy.wasm") && {
            let status: serde_json::Value = serde_json::from_str(body).unwrap();
            plugin_state(&status, "audit-copy.wasm")["state"] != "loading"
        }
    });
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    let copy = plugin_state(&status, "audit-copy.wasm");
    assert_eq!(copy["state"], "failed", "{copy}");
    assert_eq!(copy["name"], "label-audit", "it described itself: {copy}");
    assert!(
        copy["last_error"]
            .as_str()
            .unwrap()
            .contains("so its file must be named label-audit.wasm"),
        "{copy}"
    );
    // One series per plugin: the refused copy is keyed by its file.
    let (_, metrics) = host.get("/metrics");
    let loaded: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("kubeplug_plugin_loaded{plugin=\"label-audit\"}"))
        .collect();
    assert_eq!(loaded.len(), 1, "{loaded:?}");
    std::fs::remove_file(plugins.path().join("reconciler.wasm")).unwrap();
    host.wait_for("/plugins", |_, body| !body.contains("reconciler.wasm"));
}

/// Issue 44: a plugin's log fields cannot forge a line of the host's log or pass for the
/// host's own fields, and its metrics cannot make `/metrics` an exposition Prometheus
/// refuses; the good plugin beside it keeps receiving events.
#[test]
fn a_plugin_cannot_forge_the_hosts_log_or_break_its_metrics() {
    let plugins = tempfile::tempdir().unwrap();
    for name in ["hostile-telemetry", "label-reader"] {
        std::fs::copy(
            built_plugin(name),
            plugins.path().join(format!("{name}.wasm")),
        )
        .unwrap();
    }
    let cluster = tempfile::tempdir().unwrap();
    let configmap = |mode: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: team-a\n\
             data: {{mode: {mode}}}\n"
        )
    };
    let pod = |app: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web-1\n  namespace: team-a\n  \
             labels: {{app: {app}}}\n"
        )
    };
    std::fs::write(cluster.path().join("cm.yaml"), configmap("a")).unwrap();
    std::fs::write(cluster.path().join("pod.yaml"), pod("web")).unwrap();
    let config = plugins.path().join("kubeplug.toml");
    std::fs::write(&config, "[defaults.grants]\nread = [\"*\"]\n").unwrap();
    let host = Host::start([
        OsStr::new("--local"),
        cluster.path().as_os_str(),
        OsStr::new("--plugins"),
        plugins.path().as_os_str(),
        OsStr::new("--config"),
        config.as_os_str(),
    ]);
    let sample = |metrics: &str, name: &str, plugin: &str| -> Option<f64> {
        let prefix = format!("{name}{{plugin=\"{plugin}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .map(|v| v.parse().unwrap())
    };
    host.wait_for("/metrics", |_, body| {
        sample(body, "events_total", "label-reader").is_some()
            && sample(body, "accepted_total", "hostile-telemetry").is_some()
    });
    // A second batch for each: the good plugin keeps receiving beside the hostile one.
    std::fs::write(cluster.path().join("cm.yaml"), configmap("b")).unwrap();
    std::fs::write(cluster.path().join("pod.yaml"), pod("db")).unwrap();
    let metrics = host.wait_for("/metrics", |_, body| {
        sample(body, "events_total", "label-reader") >= Some(2.0)
            && sample(body, "events_total", "hostile-telemetry") >= Some(2.0)
    });

    // Every update the runtime accepted is exposed in a family of its own type, and the
    // ones Prometheus would refuse were refused: four of each per batch.
    let refused = sample(&metrics, "refused_total", "hostile-telemetry").unwrap();
    let accepted = sample(&metrics, "accepted_total", "hostile-telemetry").unwrap();
    assert!(refused >= 8.0 && refused == accepted, "{metrics}");
    let lines = metrics.lines().map(|l| Ok(l.to_owned()));
    prometheus_parse::Scrape::parse(lines).expect("/metrics parses as Prometheus text");
    let mut declared = std::collections::BTreeSet::new();
    for line in metrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let family = rest.split(' ').next().unwrap();
            assert!(
                declared.insert(family),
                "{family} declared twice:\n{metrics}"
            );
            continue;
        }
        let Some((_, labels)) = line.split_once('{') else {
            continue;
        };
        // Label values are the plugins' text; the names are what a parser refuses.
        let mut names = std::collections::BTreeSet::new();
        for pair in labels.split("\",").filter(|p| p.contains("=\"")) {
            let name = pair.split_once("=\"").unwrap().0.trim_start_matches(',');
            let valid = !name.starts_with("__")
                && name
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            assert!(valid, "label name {name:?} in {line:?}");
            assert!(names.insert(name), "label {name:?} twice in {line:?}");
        }
    }

    // The forged key did not start a line; the plugin's fields are its own, after the
    // message, and the ones it may not use are counted, not written.
    let lines = host.stderr_lines();
    assert!(
        lines.iter().all(|l| !l.starts_with("2000-01-01")),
        "a forged line: {lines:#?}"
    );
    let logged: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("a hostile telemetry record"))
        .collect();
    assert!(!logged.is_empty(), "{lines:#?}");
    for line in logged {
        assert!(line.contains("kept=\"yes\""), "{line}");
        assert!(line.contains("fields_refused=3"), "{line}");
        assert!(!line.contains("label-audit"), "{line}");
        assert!(!line.contains("dropped=\"0\""), "{line}");
    }
}

#[test]
fn rbac_prints_the_rules_the_plugins_and_their_grants_need() {
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(
        built_plugin("label-audit"),
        plugins.path().join("label-audit.wasm"),
    )
    .unwrap();
    let config = plugins.path().join("kubeplug.toml");
    let rules = |extra: &[&str]| -> Vec<serde_json::Value> {
        let output = kubeplug()
            .arg("rbac")
            .arg("--plugins")
            .arg(plugins.path())
            .arg("--config")
            .arg(&config)
            .args(extra)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let text = String::from_utf8(output.stdout).unwrap();
        text.split("\n---\n")
            .map(|doc| serde_yaml_ng::from_str(doc).unwrap())
            .collect()
    };
    let verbs = |docs: &[serde_json::Value], kind: &str, resource: &str| -> Vec<String> {
        docs.iter()
            .filter(|d| d["kind"] == kind)
            .flat_map(|d| d["rules"].as_array().unwrap().iter())
            .filter(|r| r["resources"][0] == resource)
            .flat_map(|r| r["verbs"].as_array().unwrap().iter())
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };

    // Without its read grants the plugin would not load: no rules, but the lines to add.
    std::fs::write(&config, "").unwrap();
    fails_naming(
        &[
            "rbac",
            "--plugins",
            plugins.path().to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ],
        &[
            "reads types it is not granted",
            "[plugins.label-audit.grants]\nread = [\"v1/Pod\", \"apps/v1/Deployment\"]",
        ],
    );
    // Reads granted, no write: the plugin's wish to record Events needs no rule.
    let reads = "[plugins.label-audit.grants]\nread = [\"apps/v1/Deployment\", \"v1/Pod\"]\n";
    std::fs::write(&config, reads).unwrap();
    let docs = rules(&[]);
    assert_eq!(
        verbs(&docs, "ClusterRole", "deployments"),
        ["get", "list", "watch"]
    );
    assert_eq!(
        verbs(&docs, "ClusterRole", "pods"),
        ["get", "list", "watch"]
    );
    assert!(verbs(&docs, "ClusterRole", "events").is_empty());
    assert_eq!(docs[1]["kind"], "ClusterRoleBinding");
    assert_eq!(docs[1]["subjects"][0]["name"], "kubeplug");

    std::fs::write(
        &config,
        format!("{reads}write = {{ \"apps/v1/Deployment\" = [\"record-event\"] }}\n"),
    )
    .unwrap();
    let docs = rules(&["--namespace", "team-a", "--metrics-secure=false"]);
    assert_eq!(docs[0]["kind"], "Role");
    assert_eq!(docs[0]["metadata"]["namespace"], "team-a");
    assert_eq!(verbs(&docs, "Role", "events"), ["create", "patch"]);
    assert_eq!(docs.len(), 2, "no cluster-scoped rules are needed");

    fails_naming(
        &["rbac", "--plugins", "/nonexistent/kubeplug-plugins"],
        &["/nonexistent/kubeplug-plugins"],
    );
}
