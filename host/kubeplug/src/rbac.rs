//! `kubeplug rbac`: the RBAC rules the plugins of a directory need, as YAML to apply.
//!
//! The host lists and watches what plugins subscribe to and the reads their grants allow, and
//! makes only the writes both the plugin asks for and its grants allow: those are the rules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use kubeplug_informer::resource::Resource;
use kubeplug_local::{KindRegistry, LocalCluster};
use kubeplug_runtime::{Gvk, Plugin, WriteVerb};
use serde_json::{Value, json};

use crate::check::{load_offline, offline_runtime};
use crate::cli::RbacArgs;
use crate::config::Config;

/// The verbs one write needs. Server-side apply is authorised as `create` when the object
/// does not exist yet, and as `patch` otherwise.
fn verbs_of(verb: WriteVerb) -> &'static [&'static str] {
    match verb {
        WriteVerb::Apply => &["create", "patch"],
        WriteVerb::Patch | WriteVerb::PatchStatus => &["patch"],
        WriteVerb::Create => &["create"],
        WriteVerb::Delete => &["delete"],
        // Events are created; `patch` lets a later version aggregate repeats as client-go does.
        WriteVerb::RecordEvent => &["create", "patch"],
    }
}

/// Verbs per (API group, resource, namespaced), the namespaced flag deciding Role or
/// ClusterRole.
type Rules = BTreeMap<(String, String, bool), BTreeSet<&'static str>>;

/// Maps resource types to their plural names and scope.
struct Kinds {
    registry: KindRegistry,
    /// Where custom kinds can be declared, for the error message.
    crds: Option<PathBuf>,
}

impl Kinds {
    fn resource(&self, gvk: &Gvk, plugin: &Plugin) -> anyhow::Result<Resource> {
        if let Some(resource) = self.registry.resolve(&gvk.api_version(), &gvk.kind) {
            return Ok(resource.clone());
        }
        let hint = match &self.crds {
            Some(dir) => format!(
                "no CustomResourceDefinition in {} declares it",
                dir.display()
            ),
            None => "pass --crds DIR with its CustomResourceDefinition".to_owned(),
        };
        bail!(
            "{}: plugin {} uses {gvk}, which is not a built-in kind: {hint}",
            plugin.path().display(),
            plugin.name()
        )
    }
}

/// What one plugin needs.
fn add_rules(
    plugin: &Plugin,
    grants: &kubeplug_runtime::Grants,
    kinds: &Kinds,
    rules: &mut Rules,
) -> anyhow::Result<()> {
    let description = plugin.description();
    let mut add = |gvk: &Gvk, suffix: &str, verbs: &[&'static str]| -> anyhow::Result<()> {
        let resource = kinds.resource(gvk, plugin)?;
        let key = (
            resource.group.clone(),
            format!("{}{suffix}", resource.plural),
            resource.namespaced,
        );
        rules.entry(key).or_default().extend(verbs);
        Ok(())
    };
    const READ: &[&str] = &["get", "list", "watch"];
    // What it both declares and is granted (a plugin whose declared reads are not all
    // granted does not load, here as under `run`).
    for read in description
        .read_types()
        .iter()
        .filter(|read| grants.may_read(read))
    {
        add(read, "", READ)?;
    }
    for (resource, asked) in &description.writes {
        let granted = grants.write.get(resource);
        for verb in asked
            .iter()
            .filter(|v| granted.is_some_and(|g| g.contains(*v)))
        {
            match verb {
                WriteVerb::RecordEvent => {
                    let events = Gvk::new("events.k8s.io", "v1", "Event");
                    add(&events, "", verbs_of(*verb))?;
                }
                WriteVerb::PatchStatus => add(resource, "/status", verbs_of(*verb))?,
                _ => add(resource, "", verbs_of(*verb))?,
            }
        }
    }
    Ok(())
}

fn rule_list(rules: &Rules, namespaced: Option<bool>) -> Vec<Value> {
    rules
        .iter()
        .filter(|((_, _, scoped), _)| namespaced.is_none_or(|n| n == *scoped))
        .map(|((group, resource, _), verbs)| {
            json!({"apiGroups": [group], "resources": [resource], "verbs": verbs})
        })
        .collect()
}

/// What `run --leader-elect` needs: client-go's Lease lock gets the Lease, creates it when
/// missing and updates it to acquire, renew and release, in the ServiceAccount's namespace
/// (where the pod runs, the default of `--leader-elect-namespace`). No `resourceNames`: an
/// authoriser cannot restrict `create` by name.
fn leader_election_documents(args: &RbacArgs) -> [Value; 2] {
    lease_documents(args, "leader-election", &["create", "get", "update"])
}

/// What `run --sharding` needs, in the ServiceAccount's namespace (the default of
/// `--sharding-namespace`): an informer on the ring's Leases (list, watch), its own Lease
/// written by server-side apply (patch, and create for the first), and deleted when it
/// leaves the ring.
fn sharding_documents(args: &RbacArgs) -> [Value; 2] {
    lease_documents(
        args,
        "sharding",
        &["create", "delete", "get", "list", "patch", "watch"],
    )
}

/// A Role named `<name>-<purpose>` with `verbs` on Leases in the ServiceAccount's namespace,
/// and its binding to the ServiceAccount. Named apart from the plugins' Role, which shares
/// the namespace under `--namespace`.
fn lease_documents(args: &RbacArgs, purpose: &str, verbs: &[&str]) -> [Value; 2] {
    let name = format!("{}-{purpose}", args.name);
    let namespace = &args.service_account_namespace;
    [
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": name, "namespace": namespace},
            "rules": [{
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "verbs": verbs,
            }],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{
                "kind": "ServiceAccount",
                "name": args.service_account,
                "namespace": namespace,
            }],
        }),
    ]
}

/// What the secure endpoints (`run --metrics-secure`, the default against a cluster) need:
/// the host reviews its callers' tokens and access, as controller-runtime's
/// `metrics-auth-role`; and `{name}-metrics-reader`, to bind to whoever scrapes (such as
/// Prometheus's ServiceAccount), as controller-runtime's `metrics-reader`.
fn metrics_documents(args: &RbacArgs) -> [Value; 3] {
    let auth = format!("{}-metrics-auth", args.name);
    [
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": auth},
            "rules": [
                {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
                {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
            ],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": auth},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": auth},
            "subjects": [{
                "kind": "ServiceAccount",
                "name": args.service_account,
                "namespace": args.service_account_namespace,
            }],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": format!("{}-metrics-reader", args.name)},
            "rules": [{"nonResourceURLs": ["/metrics", "/plugins"], "verbs": ["get"]}],
        }),
    ]
}

/// The Role/ClusterRole and binding documents for `rules`, then leader election's and the
/// secure endpoints'.
fn documents(rules: &Rules, args: &RbacArgs) -> Vec<Value> {
    let mut documents = plugin_documents(rules, args);
    if args.leader_elect {
        documents.extend(leader_election_documents(args));
    }
    if args.sharding {
        documents.extend(sharding_documents(args));
    }
    if args.metrics_secure {
        documents.extend(metrics_documents(args));
    }
    documents
}

/// The Role/ClusterRole and binding documents for `rules`.
fn plugin_documents(rules: &Rules, args: &RbacArgs) -> Vec<Value> {
    let subject = json!([{
        "kind": "ServiceAccount",
        "name": args.service_account,
        "namespace": args.service_account_namespace,
    }]);
    let cluster_role = |rules: Vec<Value>| {
        [
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": args.name},
                "rules": rules,
            }),
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": args.name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": args.name},
                "subjects": subject,
            }),
        ]
    };
    match &args.namespace {
        None => cluster_role(rule_list(rules, None)).into(),
        Some(namespace) => {
            let mut documents = vec![
                json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "Role",
                    "metadata": {"name": args.name, "namespace": namespace},
                    "rules": rule_list(rules, Some(true)),
                }),
                json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {"name": args.name, "namespace": namespace},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": args.name},
                    "subjects": subject,
                }),
            ];
            let cluster_scoped = rule_list(rules, Some(false));
            if !cluster_scoped.is_empty() {
                documents.extend(cluster_role(cluster_scoped));
            }
            documents
        }
    }
}

/// The plugin files of `dir`, as `run` would load them at start.
fn plugin_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list the plugins directory {}", dir.display()))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            name.is_some_and(|n| n.ends_with(".wasm") && !n.starts_with('.'))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// This command as typed, so that saved output says how to regenerate it.
fn invocation() -> String {
    std::iter::once("kubeplug".into())
        .chain(std::env::args_os().skip(1))
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Loads every plugin of the directory offline and prints the RBAC documents they need.
pub(crate) async fn rbac(args: RbacArgs) -> anyhow::Result<()> {
    let config = Config::load(args.config.as_deref())?;
    let registry = match &args.crds {
        Some(dir) => {
            let (cluster, _) = LocalCluster::open(dir).with_context(|| {
                format!(
                    "cannot read CustomResourceDefinitions from {}",
                    dir.display()
                )
            })?;
            cluster.registry()
        }
        None => KindRegistry::default(),
    };
    let kinds = Kinds {
        registry,
        crds: args.crds.clone(),
    };
    let runtime = offline_runtime()?;
    let mut rules = Rules::new();
    for file in plugin_files(&args.plugins)? {
        let (plugin, configured) =
            load_offline(&runtime, &file, &config, args.namespace.as_deref()).await?;
        add_rules(&plugin, &configured.grants, &kinds, &mut rules)?;
    }
    let yaml: Vec<String> = documents(&rules, &args)
        .iter()
        .map(serde_yaml_ng::to_string)
        .collect::<Result<_, _>>()
        .context("cannot render the RBAC documents")?;
    // The documents are this command's output.
    #[allow(clippy::print_stdout)]
    {
        print!(
            "# RBAC for the plugins in {}: `kubectl apply -f` this.\n\
             # Printed by `{}`; run it again to regenerate.\n{}",
            args.plugins.display(),
            invocation(),
            yaml.join("---\n")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::{Cli, Command};

    fn rbac_args(flags: &[&str]) -> RbacArgs {
        let cli = Cli::try_parse_from(
            ["kubeplug", "rbac", "--plugins", "plugins"]
                .iter()
                .chain(flags),
        )
        .unwrap();
        match cli.command {
            Command::Rbac(args) => args,
            other => panic!("parsed as {other:?}"),
        }
    }

    fn deployments_watched() -> Rules {
        Rules::from([(
            ("apps".to_owned(), "deployments".to_owned(), true),
            BTreeSet::from(["get", "list", "watch"]),
        )])
    }

    #[test]
    fn leader_election_adds_a_role_on_leases_in_the_service_account_namespace() {
        let args = rbac_args(&[
            "--metrics-secure=false",
            "--leader-elect",
            "--namespace",
            "team-a",
            "--service-account",
            "host",
            "--service-account-namespace",
            "ops",
        ]);
        let documents = documents(&deployments_watched(), &args);
        let kinds: Vec<&str> = documents
            .iter()
            .map(|d| d["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["Role", "RoleBinding", "Role", "RoleBinding"]);
        let (role, binding) = (&documents[2], &documents[3]);
        assert_eq!(
            role["metadata"],
            json!({"name": "kubeplug-leader-election", "namespace": "ops"})
        );
        assert_eq!(
            role["rules"],
            json!([{
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "verbs": ["create", "get", "update"],
            }])
        );
        assert_eq!(binding["metadata"], role["metadata"]);
        assert_eq!(binding["roleRef"]["kind"], "Role");
        assert_eq!(binding["roleRef"]["name"], "kubeplug-leader-election");
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": "host", "namespace": "ops"}])
        );
        // The plugins' Role keeps its name and namespace: the two never collide.
        assert_eq!(
            documents[0]["metadata"],
            json!({"name": "kubeplug", "namespace": "team-a"})
        );
    }

    #[test]
    fn sharding_adds_a_role_to_watch_apply_and_delete_leases() {
        let args = rbac_args(&["--metrics-secure=false", "--sharding"]);
        let documents = documents(&deployments_watched(), &args);
        let role = documents
            .iter()
            .find(|d| d["metadata"]["name"] == "kubeplug-sharding")
            .expect("a sharding Role");
        assert_eq!(role["kind"], "Role");
        assert_eq!(role["metadata"]["namespace"], "kubeplug");
        assert_eq!(
            role["rules"][0]["verbs"],
            json!(["create", "delete", "get", "list", "patch", "watch"])
        );
    }

    #[test]
    fn without_leader_election_no_lease_is_granted() {
        let documents = documents(&deployments_watched(), &rbac_args(&[]));
        assert!(!documents.iter().any(|d| d.to_string().contains("leases")));
    }

    #[test]
    fn the_secure_endpoints_get_their_reviews_and_a_reader_role_unless_turned_off() {
        let names = |documents: &[Value]| -> Vec<String> {
            documents
                .iter()
                .map(|d| {
                    format!(
                        "{} {}",
                        d["kind"].as_str().unwrap(),
                        d["metadata"]["name"].as_str().unwrap()
                    )
                })
                .collect()
        };
        let documents = documents(&deployments_watched(), &rbac_args(&["--name", "kp"]));
        assert_eq!(
            names(&documents),
            [
                "ClusterRole kp",
                "ClusterRoleBinding kp",
                "ClusterRole kp-metrics-auth",
                "ClusterRoleBinding kp-metrics-auth",
                "ClusterRole kp-metrics-reader",
            ]
        );
        assert_eq!(
            documents[2]["rules"],
            json!([
                {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
                {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
            ])
        );
        assert_eq!(
            documents[4]["rules"],
            json!([{"nonResourceURLs": ["/metrics", "/plugins"], "verbs": ["get"]}])
        );
        let plain = super::documents(
            &deployments_watched(),
            &rbac_args(&["--name", "kp", "--metrics-secure=false"]),
        );
        assert_eq!(names(&plain), ["ClusterRole kp", "ClusterRoleBinding kp"]);
    }
}
