//! The crate boundaries `ARCHITECTURE.md` promises, checked on the dependency graph that
//! `cargo metadata` resolves: which crates may never be built into which.
//!
//! A dependency counts when it is built into the crate: normal and build dependencies,
//! followed transitively; dev-dependencies are the tests' and benches' own.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// One boundary: `package` is never built with a crate that one of `forbidden` names.
#[derive(Debug)]
pub struct Rule {
    /// The workspace package the rule is about.
    pub package: &'static str,
    /// Crate families: `kube` stands for `kube` and every `kube-*` crate.
    pub forbidden: &'static [&'static str],
    /// Why, for the message.
    pub why: &'static str,
}

/// The Kubernetes client crates.
const KUBE: &[&str] = &["kube", "k8s-openapi"];
/// The Wasm runtime, and the Kubernetes client.
const WASMTIME_OR_KUBE: &[&str] = &["wasmtime", "kube", "k8s-openapi"];

/// Every boundary, as `ARCHITECTURE.md`'s invariants state them.
pub const RULES: &[Rule] = &[
    Rule {
        package: "kubeplug-informer",
        forbidden: WASMTIME_OR_KUBE,
        why: "the informer is client-go's tools/cache, for any source and any handler",
    },
    Rule {
        package: "kubeplug-workqueue",
        forbidden: WASMTIME_OR_KUBE,
        why: "the workqueue is client-go's util/workqueue and knows neither plugins nor clusters",
    },
    Rule {
        package: "kubeplug-local",
        forbidden: WASMTIME_OR_KUBE,
        why: "the local cluster stands in for an API server, without a client or plugins",
    },
    Rule {
        package: "kubeplug-memory",
        forbidden: WASMTIME_OR_KUBE,
        why: "the in-memory API server is the local cluster's engine and the tests' stand-in",
    },
    Rule {
        package: "kubeplug-apiserver",
        forbidden: WASMTIME_OR_KUBE,
        why: "the HTTP API serves the in-memory server to clients; it is never one itself",
    },
    Rule {
        package: "kubeplug-json",
        forbidden: WASMTIME_OR_KUBE,
        why: "the JSON scanner sits under the informer and the memory server",
    },
    Rule {
        package: "kubeplug-policy",
        forbidden: WASMTIME_OR_KUBE,
        why: "the policy vocabulary is the lowest crate the configuration and the runtime share",
    },
    Rule {
        package: "kubeplug-runtime",
        forbidden: KUBE,
        why: "the Wasm runtime reaches clusters only through the binary's CacheView and ClusterWriter",
    },
    Rule {
        package: "kubeplug-build",
        forbidden: WASMTIME_OR_KUBE,
        why: "building plugins runs the guest toolchains; checking what was built is the binary's",
    },
    Rule {
        package: "kubeplug-shard",
        forbidden: WASMTIME_OR_KUBE,
        why: "the sharding protocol is pure logic, tested without a cluster or plugins",
    },
    Rule {
        package: "kubeplug-config",
        forbidden: &["wasmtime"],
        why: "parsing the configuration (and fuzzing it) must not build the Wasm runtime",
    },
];

/// A dependency that breaks a rule, with the chain that brings it in.
#[derive(Debug, PartialEq, Eq)]
pub struct Violation {
    /// The rule's package, then each crate on the way, ending with the forbidden one.
    pub chain: Vec<String>,
    /// The rule's reason.
    pub why: &'static str,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (package, forbidden) = (&self.chain[0], &self.chain[self.chain.len() - 1]);
        write!(
            f,
            "{package} depends on {forbidden} ({}): {}",
            self.chain.join(" → "),
            self.why
        )
    }
}

/// Whether crate `name` belongs to `family` (`kube` covers `kube-client`, not `kubeplug`).
fn in_family(name: &str, family: &str) -> bool {
    name == family
        || name
            .strip_prefix(family)
            .is_some_and(|rest| rest.starts_with('-'))
}

/// `cargo metadata` of the workspace at `root`.
pub fn metadata(root: &Path) -> Result<serde_json::Value> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .current_dir(root)
        .args(["metadata", "--format-version", "1", "--locked"])
        .output()
        .context("running cargo metadata")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    serde_json::from_slice(&output.stdout).context("reading cargo metadata's output")
}

/// The rules `metadata` breaks. Fails when a rule's package is not in the workspace, so a
/// renamed crate cannot leave its rule checking nothing.
pub fn check(metadata: &serde_json::Value, rules: &[Rule]) -> Result<Vec<Violation>> {
    let name_of = |id: &str| -> Option<String> {
        metadata["packages"]
            .as_array()?
            .iter()
            .find(|p| p["id"] == id)?["name"]
            .as_str()
            .map(str::to_owned)
    };
    // Package id → the ids it is built with.
    let mut built_with: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for node in metadata["resolve"]["nodes"]
        .as_array()
        .context("cargo metadata without a resolve graph")?
    {
        let id = node["id"].as_str().context("a node without an id")?;
        let deps = node["deps"].as_array().into_iter().flatten();
        let built = deps.filter(|dep| {
            dep["dep_kinds"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|k| k["kind"] != "dev"))
        });
        built_with.insert(id, built.filter_map(|dep| dep["pkg"].as_str()).collect());
    }
    let members = metadata["workspace_members"]
        .as_array()
        .context("cargo metadata without workspace members")?;
    let mut violations = Vec::new();
    for rule in rules {
        let Some(start) = members
            .iter()
            .filter_map(|id| id.as_str())
            .find(|id| name_of(id).as_deref() == Some(rule.package))
        else {
            bail!(
                "no workspace package {} for its boundary rule",
                rule.package
            );
        };
        // Breadth first, so each chain reported is a shortest one.
        let mut came_from: BTreeMap<&str, &str> = BTreeMap::from([(start, start)]);
        let mut queue = VecDeque::from([start]);
        while let Some(id) = queue.pop_front() {
            let name = name_of(id).unwrap_or_default();
            if id != start && rule.forbidden.iter().any(|f| in_family(&name, f)) {
                let mut chain = vec![name];
                let mut at = id;
                while at != start {
                    at = came_from[at];
                    chain.push(name_of(at).unwrap_or_default());
                }
                chain.reverse();
                violations.push(Violation {
                    chain,
                    why: rule.why,
                });
                continue;
            }
            for dep in built_with.get(id).into_iter().flatten() {
                if !came_from.contains_key(dep) {
                    came_from.insert(dep, id);
                    queue.push_back(dep);
                }
            }
        }
    }
    Ok(violations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Layout;

    #[test]
    fn the_workspace_keeps_its_boundaries() {
        let metadata = metadata(&Layout::from_manifest_dir().root).unwrap();
        let violations = check(&metadata, RULES).unwrap();
        let lines: Vec<String> = violations.iter().map(ToString::to_string).collect();
        assert!(lines.is_empty(), "{}", lines.join("\n"));
    }

    /// A package and its dependencies, each with its kind (`None` for a normal one).
    type Node<'a> = (&'a str, &'a [(&'a str, Option<&'a str>)]);

    /// The graph of `nodes`, as `cargo metadata` writes it.
    fn graph(nodes: &[Node]) -> serde_json::Value {
        serde_json::json!({
            "packages": nodes.iter().map(|(name, _)| serde_json::json!({"id": name, "name": name})).collect::<Vec<_>>(),
            "workspace_members": nodes.iter().map(|(name, _)| name).collect::<Vec<_>>(),
            "resolve": {"nodes": nodes.iter().map(|(name, deps)| serde_json::json!({
                "id": name,
                "deps": deps.iter().map(|(dep, kind)| serde_json::json!({
                    "pkg": dep, "dep_kinds": [{"kind": kind, "target": null}],
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>()},
        })
    }

    const CONFIG: Rule = Rule {
        package: "kubeplug-config",
        forbidden: &["wasmtime"],
        why: "no runtime in the parser",
    };

    #[test]
    fn a_forbidden_crate_is_named_with_the_chain_that_brings_it_in() {
        let metadata = graph(&[
            ("kubeplug-config", &[("kubeplug-runtime", None)]),
            ("kubeplug-runtime", &[("wasmtime-environ", Some("build"))]),
            ("wasmtime-environ", &[]),
        ]);
        let violations = check(&metadata, &[CONFIG]).unwrap();
        assert_eq!(
            violations,
            [Violation {
                chain: vec![
                    "kubeplug-config".into(),
                    "kubeplug-runtime".into(),
                    "wasmtime-environ".into()
                ],
                why: "no runtime in the parser",
            }]
        );
        assert_eq!(
            violations[0].to_string(),
            "kubeplug-config depends on wasmtime-environ (kubeplug-config → kubeplug-runtime → \
             wasmtime-environ): no runtime in the parser"
        );
    }

    #[test]
    fn dev_dependencies_and_look_alike_names_do_not_count() {
        let metadata = graph(&[
            (
                "kubeplug-config",
                &[("wasmtime", Some("dev")), ("wasmtimex", None)],
            ),
            ("wasmtime", &[]),
            ("wasmtimex", &[]),
        ]);
        assert_eq!(check(&metadata, &[CONFIG]).unwrap(), []);
        assert!(in_family("kube-client", "kube"));
        assert!(!in_family("kubeplug-kube", "kube"));
        assert!(!in_family("kubeplug", "kube"));
    }

    #[test]
    fn a_rule_for_a_package_that_is_not_there_fails() {
        let metadata = graph(&[("kubeplug-runtime", &[])]);
        let error = check(&metadata, &[CONFIG]).unwrap_err();
        assert!(error.to_string().contains("kubeplug-config"), "{error}");
    }
}
