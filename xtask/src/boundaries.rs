//! The crate boundaries `ARCHITECTURE.md` promises, checked on the dependency graph that
//! `cargo metadata` resolves: which crates may never be built into which ([`RULES`]), which
//! workspace crates a crate may name in its manifest ([`DIRECT_RULES`]), and which crates
//! meet in one crate only ([`ONLY_TOGETHER_IN`]).
//!
//! A dependency counts when it is built into the crate: normal and build dependencies, with
//! the optional ones its features turn on when it is built on its own (`graph`);
//! dev-dependencies are the tests' and benches' own.

mod graph;

use std::fmt;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

use graph::Graph;

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

/// One boundary on a manifest: among workspace crates, `package` depends directly (normal
/// or build dependency, optional or not) on those `allowed` names only. [`Rule`]s follow
/// dependencies transitively, so they cannot say "only these"; this can.
#[derive(Debug)]
pub struct DirectRule {
    /// The workspace package the rule is about.
    pub package: &'static str,
    /// The workspace packages it may depend on.
    pub allowed: &'static [&'static str],
    /// Why, for the message.
    pub why: &'static str,
}

/// Two crate families that meet in one workspace package only: no other is built with a
/// crate of each.
#[derive(Debug)]
pub struct OnlyTogether {
    /// The one workspace package built with both.
    pub package: &'static str,
    /// The two crate families (as in [`Rule::forbidden`]).
    pub families: [&'static [&'static str]; 2],
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
    Rule {
        package: "kubeplug-leader",
        forbidden: &["wasmtime", "kubeplug-runtime"],
        why: "leader election is a Lease and a clock; the binary adds and removes plugins on its signal",
    },
];

/// The workspace crates each crate may name in its manifest, as `ARCHITECTURE.md` says.
pub const DIRECT_RULES: &[DirectRule] = &[
    DirectRule {
        package: "kubeplug-local",
        allowed: &["kubeplug-informer", "kubeplug-memory"],
        why: "the local cluster is the in-memory server behind the informer's SourceProvider",
    },
    DirectRule {
        package: "kubeplug-leader",
        allowed: &[],
        why: "leader election knows nothing of informers, plugins or the rest of the host",
    },
];

/// The crates that meet in the binary only.
pub const ONLY_TOGETHER_IN: &[OnlyTogether] = &[OnlyTogether {
    package: "kubeplug",
    families: [&["kubeplug-runtime"], KUBE],
    why: "only the binary wires the Wasm runtime to a real cluster",
}];

/// A boundary broken.
#[derive(Debug, PartialEq, Eq)]
pub enum Violation {
    /// A [`Rule`]'s package is built with a forbidden crate.
    Forbidden {
        /// The rule's package, then each crate on the way, ending with the forbidden one.
        chain: Vec<String>,
        /// The rule's reason.
        why: &'static str,
    },
    /// A [`DirectRule`]'s package names a workspace crate it may not.
    Direct {
        /// The rule's package.
        package: String,
        /// The workspace crate it depends on.
        dependency: String,
        /// The rule's reason.
        why: &'static str,
    },
    /// A package other than an [`OnlyTogether`]'s is built with both families.
    Together {
        /// The chain to a crate of each family, each starting with the package.
        chains: [Vec<String>; 2],
        /// The package that may be built with both.
        only: &'static str,
        /// The rule's reason.
        why: &'static str,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Forbidden { chain, why } => {
                let (package, forbidden) = (&chain[0], &chain[chain.len() - 1]);
                write!(
                    f,
                    "{package} depends on {forbidden} ({}): {why}",
                    chain.join(" → ")
                )
            }
            Self::Direct {
                package,
                dependency,
                why,
            } => write!(
                f,
                "{package} depends directly on the workspace crate {dependency}, which its \
                 boundary does not allow: {why}"
            ),
            Self::Together { chains, only, why } => {
                let [first, second] = chains;
                write!(
                    f,
                    "{} is built with both {} ({}) and {} ({}), as only {only} may be: {why}",
                    first[0],
                    first[first.len() - 1],
                    first.join(" → "),
                    second[second.len() - 1],
                    second.join(" → "),
                )
            }
        }
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

/// The workspace member `package`; an error when there is none, so that a renamed crate
/// cannot leave its rule checking nothing.
fn member<'a>(graph: &Graph<'a>, package: &str) -> Result<&'a str> {
    graph
        .member(package)
        .with_context(|| format!("no workspace package {package} for its boundary rule"))
}

/// The rules `metadata` breaks. Fails when a rule's package is not in the workspace.
pub fn check(metadata: &serde_json::Value, rules: &[Rule]) -> Result<Vec<Violation>> {
    let graph = Graph::new(metadata)?;
    let mut violations = Vec::new();
    for rule in rules {
        let start = member(&graph, rule.package)?;
        let forbidden = |name: &str| rule.forbidden.iter().any(|f| in_family(name, f));
        // Not beyond a forbidden crate: its own dependencies are its business.
        let built = graph.built(start, forbidden);
        for &id in &built.order[1..] {
            if forbidden(graph.name(id)) {
                violations.push(Violation::Forbidden {
                    chain: built.chain(&graph, id),
                    why: rule.why,
                });
            }
        }
    }
    Ok(violations)
}

/// The [`DirectRule`]s `metadata` breaks. Fails when a rule's package is not in the
/// workspace.
pub fn check_direct(metadata: &serde_json::Value, rules: &[DirectRule]) -> Result<Vec<Violation>> {
    let graph = Graph::new(metadata)?;
    let members: Vec<&str> = graph.members.iter().map(|id| graph.name(id)).collect();
    let mut violations = Vec::new();
    for rule in rules {
        let id = member(&graph, rule.package)?;
        let mut named: Vec<&str> = graph
            .declared(id)
            .filter(|dep| members.contains(dep) && !rule.allowed.contains(dep))
            .collect();
        named.sort_unstable();
        named.dedup();
        violations.extend(named.into_iter().map(|dependency| Violation::Direct {
            package: rule.package.to_owned(),
            dependency: dependency.to_owned(),
            why: rule.why,
        }));
    }
    Ok(violations)
}

/// The [`OnlyTogether`] rules `metadata` breaks: every workspace package is looked at.
/// Fails when a rule's package is not in the workspace.
pub fn check_together(
    metadata: &serde_json::Value,
    rules: &[OnlyTogether],
) -> Result<Vec<Violation>> {
    let graph = Graph::new(metadata)?;
    let mut violations = Vec::new();
    for rule in rules {
        let only = member(&graph, rule.package)?;
        for &id in graph.members.iter().filter(|&&id| id != only) {
            let built = graph.built(id, |_| false);
            let first_of = |family: &[&str]| {
                built
                    .order
                    .iter()
                    .find(|at| family.iter().any(|f| in_family(graph.name(at), f)))
                    .map(|at| built.chain(&graph, at))
            };
            if let (Some(first), Some(second)) =
                (first_of(rule.families[0]), first_of(rule.families[1]))
            {
                violations.push(Violation::Together {
                    chains: [first, second],
                    only: rule.package,
                    why: rule.why,
                });
            }
        }
    }
    Ok(violations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Layout;
    use serde_json::json;

    #[test]
    fn the_workspace_keeps_its_boundaries() {
        let metadata = metadata(&Layout::from_manifest_dir().root).unwrap();
        let mut violations = check(&metadata, RULES).unwrap();
        violations.extend(check_direct(&metadata, DIRECT_RULES).unwrap());
        violations.extend(check_together(&metadata, ONLY_TOGETHER_IN).unwrap());
        let lines: Vec<String> = violations.iter().map(ToString::to_string).collect();
        assert!(lines.is_empty(), "{}", lines.join("\n"));
    }

    /// A package and its dependencies, each with its kind (`None` for a normal one).
    type Node<'a> = (&'a str, &'a [(&'a str, Option<&'a str>)]);

    /// The graph of `nodes`, as `cargo metadata` writes it: every package a workspace
    /// member, every dependency declared plainly (not optional, default features).
    fn graph(nodes: &[Node]) -> serde_json::Value {
        json!({
            "packages": nodes.iter().map(|(name, deps)| json!({
                "id": name, "name": name, "features": {},
                "dependencies": deps.iter().map(|(dep, kind)| json!({
                    "name": dep, "rename": null, "kind": kind, "optional": false,
                    "uses_default_features": true, "features": [],
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "workspace_members": nodes.iter().map(|(name, _)| name).collect::<Vec<_>>(),
            "resolve": {"nodes": nodes.iter().map(|(name, deps)| json!({
                "id": name,
                "deps": deps.iter().map(|(dep, kind)| json!({
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
            ("wasmtime-environ", &[("wasmtime-internal", None)]),
            ("wasmtime-internal", &[]),
        ]);
        let violations = check(&metadata, &[CONFIG]).unwrap();
        assert_eq!(
            violations,
            [Violation::Forbidden {
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
        let direct = DirectRule {
            package: "kubeplug-local",
            allowed: &[],
            why: "",
        };
        assert!(check_direct(&metadata, &[direct]).is_err());
        let together = OnlyTogether {
            package: "kubeplug",
            families: [&["a"], &["b"]],
            why: "",
        };
        assert!(check_together(&metadata, &[together]).is_err());
    }

    /// `checks` takes `kubeplug-kube` without default features, and so without `kube`
    /// (behind its default `client` feature), unless `asks_client` turns `client` on.
    fn optional_kube(asks_client: bool) -> serde_json::Value {
        let mut metadata = graph(&[
            ("checks", &[("kubeplug-kube", None), ("helper", None)]),
            ("helper", &[("kubeplug-kube", None)]),
            ("kubeplug-kube", &[("kube", None)]),
            ("kube", &[]),
        ]);
        let packages = metadata["packages"].as_array_mut().unwrap();
        packages[0]["dependencies"][0]["uses_default_features"] = json!(false);
        packages[1]["dependencies"][0]["uses_default_features"] = json!(false);
        if asks_client {
            packages[1]["dependencies"][0]["features"] = json!(["client"]);
        }
        packages[2]["features"] = json!({"default": ["client"], "client": ["dep:kube"]});
        packages[2]["dependencies"][0]["optional"] = json!(true);
        metadata
    }

    #[test]
    fn an_optional_dependency_counts_when_a_feature_of_the_same_build_turns_it_on() {
        let rules = [
            Rule {
                package: "checks",
                forbidden: &["kube"],
                why: "no client",
            },
            // Built on its own, with its default features, `kubeplug-kube` has `kube`.
            Rule {
                package: "kubeplug-kube",
                forbidden: &["kube"],
                why: "no client",
            },
        ];
        let chain = |names: &[&str]| names.iter().map(|&n| n.to_owned()).collect::<Vec<_>>();
        assert_eq!(
            check(&optional_kube(false), &rules).unwrap(),
            [Violation::Forbidden {
                chain: chain(&["kubeplug-kube", "kube"]),
                why: "no client"
            }]
        );
        assert_eq!(
            check(&optional_kube(true), &rules[..1]).unwrap(),
            [Violation::Forbidden {
                chain: chain(&["checks", "kubeplug-kube", "kube"]),
                why: "no client"
            }]
        );
    }

    #[test]
    fn a_direct_rule_names_each_workspace_crate_it_does_not_allow() {
        let mut metadata = graph(&[
            (
                "kubeplug-local",
                &[
                    ("kubeplug-informer", None),
                    ("kubeplug-runtime", Some("build")),
                    ("kubeplug-config", Some("dev")),
                    ("notify", None),
                ],
            ),
            ("kubeplug-informer", &[("kubeplug-json", None)]),
            ("kubeplug-json", &[]),
            ("kubeplug-runtime", &[]),
            ("kubeplug-config", &[]),
            ("notify", &[]),
        ]);
        // A crate from the registry, not a workspace member.
        metadata["workspace_members"]
            .as_array_mut()
            .unwrap()
            .retain(|id| id != "notify");
        let rule = DirectRule {
            package: "kubeplug-local",
            allowed: &["kubeplug-informer"],
            why: "the informer's source",
        };
        let violations = check_direct(&metadata, &[rule]).unwrap();
        assert_eq!(
            violations,
            [Violation::Direct {
                package: "kubeplug-local".into(),
                dependency: "kubeplug-runtime".into(),
                why: "the informer's source",
            }]
        );
        assert_eq!(
            violations[0].to_string(),
            "kubeplug-local depends directly on the workspace crate kubeplug-runtime, which its \
             boundary does not allow: the informer's source"
        );
    }

    #[test]
    fn only_one_package_may_be_built_with_both_families() {
        let metadata = graph(&[
            ("kubeplug", &[("kubeplug-runtime", None), ("kube", None)]),
            (
                "tool",
                &[("kubeplug-leader", None), ("kubeplug-runtime", None)],
            ),
            (
                "checks",
                &[("kubeplug-runtime", None), ("kube", Some("dev"))],
            ),
            ("kubeplug-leader", &[("kube-client", None)]),
            ("kubeplug-runtime", &[]),
            ("kube", &[]),
            ("kube-client", &[]),
        ]);
        let rule = OnlyTogether {
            package: "kubeplug",
            families: [&["kubeplug-runtime"], &["kube"]],
            why: "the binary wires them",
        };
        let violations = check_together(&metadata, &[rule]).unwrap();
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert_eq!(
            violations[0].to_string(),
            "tool is built with both kubeplug-runtime (tool → kubeplug-runtime) and kube-client \
             (tool → kubeplug-leader → kube-client), as only kubeplug may be: the binary wires \
             them"
        );
    }
}
