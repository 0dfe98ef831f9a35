//! What `cargo build -p PACKAGE` builds, read from `cargo metadata`: each package's declared
//! dependencies and features, resolved for that package alone.
//!
//! `cargo metadata`'s resolve graph unifies features over the whole workspace, so there a
//! crate that takes `kubeplug-kube` without its `client` feature still reaches `kube`,
//! because the binary turns `client` on. A boundary is about the crate built on its own, so
//! the optional dependencies followed are those its own features, and the features its
//! dependents ask for, turn on. Platform conditions are ignored (every target's dependencies
//! count), and so is resolver 2's separation of build and normal features: both can only
//! add crates, never hide one.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use anyhow::{Context, Result};

/// The packages of a `cargo metadata` document, with their non-dev dependencies.
#[derive(Debug)]
pub(crate) struct Graph<'a> {
    packages: BTreeMap<&'a str, Package<'a>>,
    /// The workspace members' ids, in `cargo metadata`'s order.
    pub(crate) members: Vec<&'a str>,
}

#[derive(Debug)]
struct Package<'a> {
    name: &'a str,
    /// Feature → what it turns on: features, `dep:NAME`, `NAME/FEATURE`, `NAME?/FEATURE`.
    features: BTreeMap<&'a str, Vec<&'a str>>,
    deps: Vec<Dependency<'a>>,
}

/// One normal or build dependency as the manifest declares it.
#[derive(Debug)]
struct Dependency<'a> {
    /// The package's name.
    name: &'a str,
    /// The name features use for it: its `rename`, or its package name.
    key: &'a str,
    optional: bool,
    default_features: bool,
    features: Vec<&'a str>,
    /// The packages it resolved to; empty for an optional dependency no build turns on.
    ids: Vec<&'a str>,
}

/// The crates a package is built with: each reached id and the id it was reached from
/// (breadth first, so each chain is a shortest one), in the order reached.
#[derive(Debug)]
pub(crate) struct Built<'a> {
    pub(crate) order: Vec<&'a str>,
    came_from: BTreeMap<&'a str, &'a str>,
}

impl<'a> Built<'a> {
    /// The names from the root to `id`.
    pub(crate) fn chain(&self, graph: &Graph<'a>, id: &'a str) -> Vec<String> {
        let mut chain = vec![graph.name(id).to_owned()];
        let mut at = id;
        while self.came_from[at] != at {
            at = self.came_from[at];
            chain.push(graph.name(at).to_owned());
        }
        chain.reverse();
        chain
    }
}

/// Features asked of packages: each package id with the features one dependent asks for.
type Asked<'a> = Vec<(&'a str, Vec<&'a str>)>;

/// What a package's features turn on.
#[derive(Debug, Default)]
struct Enabled<'a> {
    /// Optional dependencies, by key.
    deps: BTreeSet<&'a str>,
    /// Features of dependencies, by key: `NAME/FEATURE` and `NAME?/FEATURE`.
    dep_features: Vec<(&'a str, &'a str)>,
}

fn strs(value: &serde_json::Value) -> Vec<&str> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(serde_json::Value::as_str)
        .collect()
}

fn is_dev(kind: &serde_json::Value) -> bool {
    kind.as_str() == Some("dev")
}

impl<'a> Graph<'a> {
    /// The graph `metadata` describes.
    pub(crate) fn new(metadata: &'a serde_json::Value) -> Result<Self> {
        let mut names = BTreeMap::new();
        for package in metadata["packages"]
            .as_array()
            .context("cargo metadata without packages")?
        {
            let id = package["id"].as_str().context("a package without an id")?;
            let name = package["name"]
                .as_str()
                .context("a package without a name")?;
            names.insert(id, name);
        }
        // Package id → (package name → the ids its non-dev dependencies of that name are).
        let mut resolved: BTreeMap<&str, BTreeMap<&str, Vec<&str>>> = BTreeMap::new();
        for node in metadata["resolve"]["nodes"]
            .as_array()
            .context("cargo metadata without a resolve graph")?
        {
            let id = node["id"].as_str().context("a node without an id")?;
            let deps = resolved.entry(id).or_default();
            for dep in node["deps"].as_array().into_iter().flatten() {
                let built = dep["dep_kinds"]
                    .as_array()
                    .is_some_and(|kinds| kinds.iter().any(|k| !is_dev(&k["kind"])));
                let Some(pkg) = dep["pkg"].as_str().filter(|_| built) else {
                    continue;
                };
                let name = names.get(pkg).context("a dependency that is no package")?;
                deps.entry(*name).or_default().push(pkg);
            }
        }
        let mut packages = BTreeMap::new();
        for package in metadata["packages"].as_array().into_iter().flatten() {
            let id = package["id"].as_str().unwrap_or_default();
            let features = package["features"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(feature, turns_on)| (feature.as_str(), strs(turns_on)))
                .collect();
            let none = BTreeMap::new();
            let resolved = resolved.get(id).unwrap_or(&none);
            let deps = package["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|dep| !is_dev(&dep["kind"]))
                .filter_map(|dep| {
                    let name = dep["name"].as_str()?;
                    Some(Dependency {
                        name,
                        key: dep["rename"].as_str().unwrap_or(name),
                        optional: dep["optional"].as_bool().unwrap_or(false),
                        default_features: dep["uses_default_features"].as_bool().unwrap_or(true),
                        features: strs(&dep["features"]),
                        ids: resolved.get(name).cloned().unwrap_or_default(),
                    })
                })
                .collect();
            let name = names[id];
            packages.insert(
                id,
                Package {
                    name,
                    features,
                    deps,
                },
            );
        }
        let members = strs(&metadata["workspace_members"]);
        Ok(Self { packages, members })
    }

    /// The name of package `id`.
    pub(crate) fn name(&self, id: &str) -> &'a str {
        self.packages.get(id).map_or("", |p| p.name)
    }

    /// The workspace member named `name`.
    pub(crate) fn member(&self, name: &str) -> Option<&'a str> {
        self.members
            .iter()
            .copied()
            .find(|id| self.name(id) == name)
    }

    /// The names of the packages `id` declares as normal or build dependencies, optional
    /// ones included.
    pub(crate) fn declared(&self, id: &str) -> impl Iterator<Item = &'a str> + '_ {
        self.packages
            .get(id)
            .into_iter()
            .flat_map(|p| p.deps.iter().map(|d| d.name))
    }

    /// What `cargo build -p` of package `root` builds, with its default features: features
    /// are collected from every dependent until none is added. The crates `stop` names are
    /// reached but not walked beyond.
    pub(crate) fn built(&self, root: &'a str, stop: impl Fn(&str) -> bool) -> Built<'a> {
        let mut features: BTreeMap<&str, BTreeSet<&str>> =
            BTreeMap::from([(root, BTreeSet::from(["default"]))]);
        loop {
            let (_, asked) = self.walk(root, &features, |_| false);
            let mut grew = false;
            for (id, wanted) in asked {
                let on = features.entry(id).or_default();
                for feature in wanted {
                    grew |= on.insert(feature);
                }
            }
            if !grew {
                return self.walk(root, &features, stop).0;
            }
        }
    }

    /// One walk from `root` over the dependencies `features` turn on, and the features each
    /// dependency is asked for on the way.
    fn walk(
        &self,
        root: &'a str,
        features: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        stop: impl Fn(&str) -> bool,
    ) -> (Built<'a>, Asked<'a>) {
        let mut built = Built {
            order: vec![root],
            came_from: BTreeMap::from([(root, root)]),
        };
        let mut asked = Vec::new();
        let mut queue = VecDeque::from([root]);
        while let Some(id) = queue.pop_front() {
            let Some(package) = self.packages.get(id) else {
                continue;
            };
            if id != root && stop(package.name) {
                continue;
            }
            let enabled = package.enabled(features.get(id));
            for dep in &package.deps {
                if dep.optional && !enabled.deps.contains(dep.key) {
                    continue;
                }
                let mut wanted = dep.features.clone();
                if dep.default_features {
                    wanted.push("default");
                }
                let of_dep = enabled
                    .dep_features
                    .iter()
                    .filter(|(key, _)| *key == dep.key);
                wanted.extend(of_dep.map(|(_, feature)| *feature));
                for &to in &dep.ids {
                    asked.push((to, wanted.clone()));
                    if !built.came_from.contains_key(to) {
                        built.came_from.insert(to, id);
                        built.order.push(to);
                        queue.push_back(to);
                    }
                }
            }
        }
        (built, asked)
    }
}

impl<'a> Package<'a> {
    /// What `features` (and the features they name) turn on.
    fn enabled(&self, features: Option<&BTreeSet<&'a str>>) -> Enabled<'a> {
        let mut enabled = Enabled::default();
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&str> = features.into_iter().flatten().copied().collect();
        while let Some(feature) = stack.pop() {
            if !seen.insert(feature) {
                continue;
            }
            let Some(turns_on) = self.features.get(feature) else {
                // No such feature: an optional dependency's implicit one (or `default` of a
                // package without defaults, which turns nothing on).
                enabled.deps.insert(feature);
                continue;
            };
            for &item in turns_on {
                if let Some(dep) = item.strip_prefix("dep:") {
                    enabled.deps.insert(dep);
                } else if let Some((dep, feature)) = item.split_once('/') {
                    match dep.strip_suffix('?') {
                        // Weak: only if something else turns the dependency on.
                        Some(dep) => enabled.dep_features.push((dep, feature)),
                        None => {
                            enabled.deps.insert(dep);
                            enabled.dep_features.push((dep, feature));
                        }
                    }
                } else {
                    stack.push(item);
                }
            }
        }
        enabled
    }
}
