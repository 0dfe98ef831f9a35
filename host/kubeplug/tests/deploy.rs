//! The manifests of `examples/deploy/`: every document is a Kubernetes object the API server
//! accepts as written, the Deployments run the host the way the README promises (non-root,
//! read-only, probed, limited, leader-elected), and `rbac.yaml` is what `kubeplug rbac`
//! prints for the example plugins as they build now.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, EnvVar, Namespace, PodSpec, Probe, Service, ServiceAccount, Volume,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The arguments `rbac.yaml` was printed with, run from the repository root after
/// `cargo xtask build-plugins`; the file's header repeats them.
const RBAC_ARGS: &[&str] = &[
    "rbac",
    "--plugins",
    "target/plugins",
    "--config",
    "examples/kubeplug.toml",
    "--leader-elect",
];

fn repository() -> PathBuf {
    xtask::Layout::from_manifest_dir().root
}

fn deploy_dir() -> PathBuf {
    repository().join("examples").join("deploy")
}

fn regenerate_rbac_command() -> String {
    format!(
        "cargo xtask build-plugins && cargo run -q -p kubeplug -- {} > examples/deploy/rbac.yaml",
        RBAC_ARGS.join(" ")
    )
}

/// The YAML documents of `text`, without empty ones (a file's leading comment).
fn documents(text: &str, origin: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|document| {
            serde::Deserialize::deserialize(document)
                .unwrap_or_else(|error| panic!("{origin}: not YAML: {error}"))
        })
        .filter(|document: &Value| !document.is_null())
        .collect()
}

/// The documents of one file of `examples/deploy/`.
fn manifest(file: &str) -> Vec<Value> {
    let path = deploy_dir().join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
    documents(&text, file)
}

/// The manifest files, but the kustomization, which is not an object.
fn manifest_files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(deploy_dir())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml") && name != "kustomization.yaml")
        .collect();
    files.sort();
    files
}

/// Where `typed` and `source` first differ, as a path like `spec.template.spec.containers[0]`.
fn first_difference(source: &Value, typed: &Value, path: &str) -> Option<String> {
    match (source, typed) {
        (Value::Object(source), Value::Object(typed)) => source
            .keys()
            .chain(typed.keys())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .find_map(|key| {
                let path = format!("{path}.{key}");
                match (source.get(key), typed.get(key)) {
                    (Some(source), Some(typed)) => first_difference(source, typed, &path),
                    (Some(_), None) => Some(format!("{path} (unknown field)")),
                    (None, _) => Some(format!("{path} (added by the typed object)")),
                }
            }),
        (Value::Array(source), Value::Array(typed)) if source.len() == typed.len() => source
            .iter()
            .zip(typed)
            .enumerate()
            .find_map(|(i, (source, typed))| {
                first_difference(source, typed, &format!("{path}[{i}]"))
            }),
        _ if source == typed => None,
        _ => Some(format!("{path}: {source} became {typed}")),
    }
}

/// `document` as the typed object `K`, failing on a field `K` does not know: k8s-openapi
/// ignores unknown fields, so the object must serialise back to the same document.
fn typed<K: DeserializeOwned + Serialize>(document: &Value, origin: &str) -> K {
    let object: K = serde_json::from_value(document.clone()).unwrap_or_else(|error| {
        panic!(
            "{origin}: not a valid {}: {error}",
            std::any::type_name::<K>()
        )
    });
    let round_trip = serde_json::to_value(&object).unwrap();
    if let Some(difference) = first_difference(document, &round_trip, "") {
        panic!("{origin}: {difference}");
    }
    object
}

/// Parses `document` as the type its apiVersion and kind name; fails on any other kind.
fn check_typed(document: &Value, origin: &str) {
    let api_version = document["apiVersion"].as_str().unwrap_or_default();
    let kind = document["kind"].as_str().unwrap_or_default();
    match (api_version, kind) {
        ("v1", "Namespace") => {
            typed::<Namespace>(document, origin);
        }
        ("v1", "ServiceAccount") => {
            typed::<ServiceAccount>(document, origin);
        }
        ("v1", "ConfigMap") => {
            typed::<ConfigMap>(document, origin);
        }
        ("v1", "Service") => {
            typed::<Service>(document, origin);
        }
        ("apps/v1", "Deployment") => {
            typed::<Deployment>(document, origin);
        }
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
            typed::<ClusterRole>(document, origin);
        }
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            typed::<ClusterRoleBinding>(document, origin);
        }
        ("rbac.authorization.k8s.io/v1", "Role") => {
            typed::<Role>(document, origin);
        }
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
            typed::<RoleBinding>(document, origin);
        }
        _ => panic!("{origin}: no typed object known for {api_version} {kind}"),
    }
}

#[test]
fn every_manifest_parses_into_its_typed_kubernetes_object_without_unknown_fields() {
    let files = manifest_files();
    assert!(files.contains(&"deployment.yaml".to_owned()), "{files:?}");
    for file in &files {
        let documents = manifest(file);
        assert!(!documents.is_empty(), "{file} holds no object");
        for (i, document) in documents.iter().enumerate() {
            check_typed(document, &format!("{file}, document {}", i + 1));
            // The host's objects live in its own namespace, which namespace.yaml creates.
            let namespaced = !matches!(
                document["kind"].as_str(),
                Some("Namespace" | "ClusterRole" | "ClusterRoleBinding")
            );
            if namespaced {
                assert_eq!(document["metadata"]["namespace"], "kubeplug", "{file}");
            }
        }
    }
    assert_eq!(
        manifest("namespace.yaml")[0]["metadata"]["name"],
        "kubeplug"
    );
}

#[test]
fn a_typo_in_a_field_name_is_caught() {
    let misspelt = documents(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: a\nautomountServiceAcountToken: false\n",
        "test",
    );
    let caught = std::panic::catch_unwind(|| check_typed(&misspelt[0], "test"));
    let message = *caught.unwrap_err().downcast::<String>().unwrap();
    assert!(
        message.contains(".automountServiceAcountToken (unknown field)"),
        "{message}"
    );
}

#[test]
fn the_kustomization_applies_every_manifest_but_the_init_container_variant() {
    let kustomization = &manifest("kustomization.yaml")[0];
    let resources: BTreeSet<&str> = kustomization["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    let files = manifest_files();
    let expected: BTreeSet<&str> = files
        .iter()
        .map(String::as_str)
        .filter(|f| *f != "deployment-init-container.yaml")
        .collect();
    assert_eq!(resources, expected);
}

/// The value of `--flag=VALUE` or `--flag VALUE` in `args`.
fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let prefix = format!("{name}=");
    args.iter().enumerate().find_map(|(i, arg)| {
        if arg == name {
            args.get(i + 1).map(String::as_str)
        } else {
            arg.strip_prefix(&prefix)
        }
    })
}

fn env_var<'a>(container: &'a Container, name: &str) -> Option<&'a EnvVar> {
    container.env.iter().flatten().find(|e| e.name == name)
}

/// The volume mounted at the directory holding `path` (or at `path` itself), and whether the
/// mount is read-only.
fn volume_at<'a>(pod: &'a PodSpec, container: &Container, path: &str) -> (&'a Volume, bool) {
    let mount = container
        .volume_mounts
        .iter()
        .flatten()
        .filter(|m| Path::new(path).starts_with(&m.mount_path))
        .max_by_key(|m| m.mount_path.len())
        .unwrap_or_else(|| panic!("no volume is mounted at {path}"));
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .unwrap_or_else(|| panic!("no volume {}", mount.name));
    (volume, mount.read_only == Some(true))
}

fn assert_locked_down(container: &Container, file: &str) {
    let security = container.security_context.as_ref().unwrap_or_else(|| {
        panic!(
            "{file}: container {} has no securityContext",
            container.name
        )
    });
    let name = &container.name;
    assert_eq!(
        security.allow_privilege_escalation,
        Some(false),
        "{file}: {name}"
    );
    assert_eq!(
        security.read_only_root_filesystem,
        Some(true),
        "{file}: {name}"
    );
    let dropped = security.capabilities.as_ref().and_then(|c| c.drop.clone());
    assert_eq!(dropped, Some(vec!["ALL".to_owned()]), "{file}: {name}");
    let resources = container.resources.as_ref().unwrap();
    let requests = resources.requests.as_ref().unwrap();
    let limits = resources.limits.as_ref().unwrap();
    assert!(
        requests.contains_key("cpu") && requests.contains_key("memory"),
        "{file}: {name}"
    );
    assert!(limits.contains_key("memory"), "{file}: {name}");
}

/// The port number `port` names in `container`.
fn port_number(port: &IntOrString, container: &Container) -> i32 {
    match port {
        IntOrString::Int(port) => *port,
        IntOrString::String(name) => {
            container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name))
                .unwrap_or_else(|| panic!("no container port named {name}"))
                .container_port
        }
    }
}

/// The port and path a probe's `httpGet` reaches.
fn probe_target(probe: Option<&Probe>, container: &Container) -> (i32, String) {
    let get = probe
        .and_then(|p| p.http_get.as_ref())
        .expect("an httpGet probe");
    (
        port_number(&get.port, container),
        get.path.clone().unwrap_or_default(),
    )
}

/// What both Deployments share: the host's container, its security, probes, resources,
/// configuration, artefact cache and leader election. Returns the pod and its host container.
fn check_host_deployment(file: &str) -> (PodSpec, Container) {
    let documents = manifest(file);
    let deployment: Deployment = typed(&documents[0], file);
    let spec = deployment.spec;
    assert_eq!(
        spec.replicas,
        Some(2),
        "{file}: a standby takes over from the leader"
    );
    let pod_labels = spec.template.metadata.unwrap().labels.unwrap();
    let pod = spec.template.spec.unwrap();
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("kubeplug"),
        "{file}"
    );

    let pod_security = pod.security_context.clone().unwrap();
    assert_eq!(pod_security.run_as_non_root, Some(true), "{file}");
    assert!(
        pod_security.run_as_user.is_some_and(|uid| uid != 0),
        "{file}"
    );
    assert_eq!(
        pod_security.seccomp_profile.unwrap().type_,
        "RuntimeDefault",
        "{file}"
    );
    for container in pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
    {
        assert_locked_down(container, file);
    }

    let host = pod
        .containers
        .iter()
        .find(|c| c.name == "kubeplug")
        .unwrap_or_else(|| panic!("{file}: no container called kubeplug"))
        .clone();
    let args = host.args.clone().unwrap_or_default();
    assert_eq!(args.first().map(String::as_str), Some("run"), "{file}");
    assert!(
        args.iter().any(|a| a == "--leader-elect"),
        "{file}: {args:?}"
    );

    // The probes reach the port the host listens on, on every interface.
    let http: std::net::SocketAddr = flag(&args, "--http")
        .unwrap_or_else(|| panic!("{file}: no --http in {args:?}"))
        .parse()
        .unwrap();
    assert!(
        http.ip().is_unspecified(),
        "{file}: the kubelet cannot reach {http}"
    );
    let port = i32::from(http.port());
    assert_eq!(
        probe_target(host.liveness_probe.as_ref(), &host),
        (port, "/healthz".to_owned()),
        "{file}"
    );
    assert_eq!(
        probe_target(host.readiness_probe.as_ref(), &host),
        (port, "/readyz".to_owned()),
        "{file}"
    );
    assert_eq!(
        probe_target(host.startup_probe.as_ref(), &host),
        (port, "/healthz".to_owned()),
        "{file}"
    );
    // Served securely, as stated: the probes speak HTTPS.
    assert!(
        args.iter().any(|a| a == "--metrics-secure"),
        "{file}: {args:?}"
    );
    for probe in [
        &host.startup_probe,
        &host.liveness_probe,
        &host.readiness_probe,
    ] {
        let scheme = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref()?.scheme.clone());
        assert_eq!(scheme.as_deref(), Some("HTTPS"), "{file}");
    }

    // The Service sends metrics scrapes to these pods, on the same port.
    let service: Service = typed(&manifest("service.yaml")[0], "service.yaml");
    let service = service.spec.unwrap();
    for (key, value) in service.selector.unwrap() {
        assert_eq!(
            pod_labels.get(&key),
            Some(&value),
            "{file}: the Service selects {key}"
        );
    }
    let target = service.ports.unwrap()[0].target_port.clone().unwrap();
    assert_eq!(
        port_number(&target, &host),
        port,
        "{file}: the Service's targetPort"
    );

    // The configuration file comes from config.yaml's ConfigMap.
    let config_file = flag(&args, "--config").unwrap_or_else(|| panic!("{file}: no --config"));
    let (volume, read_only) = volume_at(&pod, &host, config_file);
    assert!(read_only, "{file}");
    let config_map: ConfigMap = typed(&manifest("config.yaml")[0], "config.yaml");
    assert_eq!(
        volume.config_map.as_ref().map(|c| c.name.as_str()),
        config_map.metadata.name.as_deref(),
        "{file}: the config volume"
    );
    let key = Path::new(config_file)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    assert!(
        config_map.data.unwrap().contains_key(key),
        "{file}: config.yaml has no key {key}"
    );

    // Compiled plugins are cached on a writable volume, the root file system being read-only.
    let cache = env_var(&host, "XDG_CACHE_HOME")
        .and_then(|e| e.value.clone())
        .unwrap_or_else(|| panic!("{file}: no XDG_CACHE_HOME"));
    let (volume, read_only) = volume_at(&pod, &host, &cache);
    assert!(
        volume.empty_dir.is_some() && !read_only,
        "{file}: {cache} is not writable"
    );

    // The Lease is in the pod's namespace, held under the pod's name.
    for (variable, field) in [
        ("KUBEPLUG_LEADER_ELECT_NAMESPACE", "metadata.namespace"),
        ("KUBEPLUG_LEADER_ELECT_IDENTITY", "metadata.name"),
        ("POD_NAME", "metadata.name"),
    ] {
        let from = env_var(&host, variable)
            .and_then(|e| e.value_from.as_ref())
            .and_then(|from| from.field_ref.as_ref())
            .map(|field| field.field_path.as_str());
        assert_eq!(from, Some(field), "{file}: {variable}");
    }
    // The host's `--shutdown-timeout` (30 s by default) must run out before the kubelet kills it.
    assert!(
        pod.termination_grace_period_seconds.unwrap_or(30) > 30,
        "{file}"
    );
    (pod, host)
}

#[test]
fn the_deployment_runs_the_host_locked_down_with_plugins_from_a_config_map() {
    let (pod, host) = check_host_deployment("deployment.yaml");
    let plugins = flag(host.args.as_deref().unwrap(), "--plugins").unwrap();
    let (volume, read_only) = volume_at(&pod, &host, plugins);
    assert!(read_only);
    assert_eq!(
        volume.config_map.as_ref().map(|c| c.name.as_str()),
        Some("kubeplug-plugins"),
        "the README creates the plugins ConfigMap under this name"
    );
}

#[test]
fn the_init_container_variant_fills_an_empty_dir_with_the_plugins_before_the_host_starts() {
    let (pod, host) = check_host_deployment("deployment-init-container.yaml");
    let plugins = flag(host.args.as_deref().unwrap(), "--plugins").unwrap();
    let (volume, _) = volume_at(&pod, &host, plugins);
    assert!(volume.empty_dir.is_some(), "{volume:?}");
    let writers: Vec<&str> = pod
        .init_containers
        .iter()
        .flatten()
        .filter(|init| {
            let (filled, read_only) = volume_at(&pod, init, plugins);
            filled.name == volume.name && !read_only
        })
        .map(|init| init.name.as_str())
        .collect();
    assert_eq!(writers, ["fetch-plugins"]);
}

#[test]
fn the_config_map_holds_the_example_configuration_the_rbac_was_generated_from() {
    let config_map: ConfigMap = typed(&manifest("config.yaml")[0], "config.yaml");
    let deployed: toml::Table = config_map.data.unwrap()["kubeplug.toml"].parse().unwrap();
    let example = std::fs::read_to_string(repository().join("examples/kubeplug.toml")).unwrap();
    let example: toml::Table = example.parse().unwrap();
    assert_eq!(
        deployed, example,
        "config.yaml's kubeplug.toml differs from examples/kubeplug.toml"
    );
}

/// The example plugins, built now, alone in a directory.
fn built_example_plugins() -> tempfile::TempDir {
    let layout = xtask::Layout::from_manifest_dir();
    let names: Vec<String> = std::fs::read_dir(layout.plugins_dir().join("examples"))
        .unwrap()
        .map(|entry| entry.unwrap())
        .filter(|entry| entry.path().is_dir())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    let built = xtask::build_plugins(&layout, &names).expect("the example plugins build");
    assert_eq!(built.len(), names.len(), "{built:?} for {names:?}");
    let dir = tempfile::tempdir().unwrap();
    for plugin in built {
        std::fs::copy(&plugin, dir.path().join(plugin.file_name().unwrap())).unwrap();
    }
    dir
}

#[test]
fn rbac_yaml_is_what_kubeplug_rbac_prints_for_the_example_plugins() {
    let committed_text = std::fs::read_to_string(deploy_dir().join("rbac.yaml")).unwrap();
    let command = format!("`kubeplug {}`", RBAC_ARGS.join(" "));
    assert!(
        committed_text
            .lines()
            .take_while(|line| line.starts_with('#'))
            .any(|line| line.contains(&command)),
        "rbac.yaml's header does not name the command that regenerates it: {}",
        regenerate_rbac_command()
    );
    let committed = documents(&committed_text, "rbac.yaml");
    for (i, document) in committed.iter().enumerate() {
        check_typed(document, &format!("rbac.yaml, document {}", i + 1));
    }

    let plugins = built_example_plugins();
    let mut args: Vec<&std::ffi::OsStr> = RBAC_ARGS.iter().map(std::ffi::OsStr::new).collect();
    args[2] = plugins.path().as_os_str();
    let output = Command::new(env!("CARGO_BIN_EXE_kubeplug"))
        .args(args)
        .current_dir(repository())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = documents(&String::from_utf8(output.stdout).unwrap(), "kubeplug rbac");
    assert!(
        committed == printed,
        "examples/deploy/rbac.yaml is not what `kubeplug rbac` prints for the example plugins \
         now; regenerate it from the repository root with\n  {}\n\ncommitted:\n{}\nprinted:\n{}",
        regenerate_rbac_command(),
        serde_yaml_ng::to_string(&committed).unwrap(),
        serde_yaml_ng::to_string(&printed).unwrap()
    );
    // The documents bind the ServiceAccount the Deployments run as.
    let account: ServiceAccount = typed(&manifest("serviceaccount.yaml")[0], "serviceaccount.yaml");
    for binding in committed
        .iter()
        .filter(|d| d["kind"].as_str().unwrap().ends_with("Binding"))
    {
        assert_eq!(
            binding["subjects"][0]["name"].as_str(),
            account.metadata.name.as_deref()
        );
        assert_eq!(
            binding["subjects"][0]["namespace"].as_str(),
            account.metadata.namespace.as_deref()
        );
    }
}

/// The sharded overlay (issue 26): it replaces the base Deployment's `--leader-elect` (at the
/// index its patch names) with `--sharding`, runs three replicas with the Leases in the pod's
/// namespace, and adds the Role `kubeplug rbac --sharding` prints.
#[test]
fn the_sharded_overlay_switches_the_deployment_to_sharding_with_its_role() {
    let overlay = deploy_dir().join("sharded");
    let kustomization = documents(
        &std::fs::read_to_string(overlay.join("kustomization.yaml")).unwrap(),
        "sharded/kustomization.yaml",
    );
    let kustomization = &kustomization[0];
    assert_eq!(
        kustomization["resources"],
        serde_json::json!(["..", "rbac-sharding.yaml"])
    );
    let patch = kustomization["patches"][0]["patch"].as_str().unwrap();
    let operations: Vec<Value> = documents(patch, "sharded patch")[0]
        .as_array()
        .unwrap()
        .clone();
    let base = &manifest("deployment.yaml")[0];
    let mut args_replaced = false;
    for operation in &operations {
        let path = operation["path"].as_str().unwrap();
        match path {
            "/spec/replicas" => assert_eq!(operation["value"], 3),
            "/spec/template/spec/containers/0/args/5" => {
                assert_eq!(
                    base["spec"]["template"]["spec"]["containers"][0]["args"][5], "--leader-elect",
                    "the patch replaces the base's --leader-elect"
                );
                assert_eq!(operation["value"], "--sharding");
                args_replaced = true;
            }
            "/spec/template/spec/containers/0/env/-" => {
                assert_eq!(operation["value"]["name"], "KUBEPLUG_SHARDING_NAMESPACE");
            }
            other => panic!("unexpected patch of {other}"),
        }
    }
    assert!(args_replaced);

    let committed = documents(
        &std::fs::read_to_string(overlay.join("rbac-sharding.yaml")).unwrap(),
        "sharded/rbac-sharding.yaml",
    );
    for (i, document) in committed.iter().enumerate() {
        check_typed(document, &format!("rbac-sharding.yaml, document {}", i + 1));
    }
    let plugins = built_example_plugins();
    let output = Command::new(env!("CARGO_BIN_EXE_kubeplug"))
        .args(["rbac", "--plugins"])
        .arg(plugins.path())
        .args(["--config", "examples/kubeplug.toml", "--sharding"])
        .args(["--metrics-secure=false"])
        .current_dir(repository())
        .output()
        .unwrap();
    assert!(output.status.success());
    let printed: Vec<Value> =
        documents(&String::from_utf8(output.stdout).unwrap(), "kubeplug rbac")
            .into_iter()
            .filter(|document| document["metadata"]["name"] == "kubeplug-sharding")
            .collect();
    assert_eq!(committed, printed);
}
