//! Which resource serves a kind: the built-in types, plus the custom resources that
//! CustomResourceDefinitions in the manifests declare.
//!
//! The built-in types are `builtin-kinds.v1.32.json`, a capture of the discovery of the real
//! kube-apiserver v1.32 that envtest runs (the file's `server` names the build): every
//! top-level resource whose verbs include `list` and `watch`, in every served version, so
//! subresources (`pods/status`) and create-only types (TokenReview, SelfSubjectReview,
//! bindings) are not served. tests/envtest's `builtin_kinds` test compares the file with the
//! live server's discovery and, with `KUBEPLUG_UPDATE_KINDS=1`, rewrites it:
//!
//! ```sh
//! KUBEPLUG_UPDATE_KINDS=1 KUBEBUILDER_ASSETS=DIR cargo test -p kubeplug-envtest builtin_kinds
//! ```

use std::collections::HashMap;
use std::sync::LazyLock;

use kubeplug_informer::resource::Resource;

/// The discovery capture: `resources` lists the built-in types; the other fields say where
/// they came from.
const CAPTURE: &str = include_str!("builtin-kinds.v1.32.json");

/// The built-in types, parsed once per process; every [`KindRegistry::default`] clones it.
static CAPTURED: LazyLock<KindRegistry> = LazyLock::new(|| match built_in(CAPTURE) {
    Ok(registry) => registry,
    // The capture is part of the source; the unit tests parse it.
    Err(error) => panic!("builtin-kinds.v1.32.json is malformed: {error}"),
});

/// The capture's shape; fields other than `resources` are for its readers.
#[derive(serde::Deserialize)]
struct Capture {
    resources: Vec<BuiltIn>,
}

/// One built-in resource of the capture.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct BuiltIn {
    group: String,
    version: String,
    kind: String,
    plural: String,
    namespaced: bool,
    #[serde(default)]
    short_names: Vec<String>,
    #[serde(default)]
    categories: Vec<String>,
}

/// What discovery says of a resource besides its kind and plural, for kubectl: its short
/// names (`deploy`) and the categories it belongs to (`all`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Aliases {
    /// Short names, e.g. `["deploy"]`.
    pub short_names: Vec<String>,
    /// Categories, e.g. `["all"]`.
    pub categories: Vec<String>,
}

/// A registry holding the built-in types of `capture`.
fn built_in(capture: &str) -> Result<KindRegistry, serde_json::Error> {
    let capture: Capture = serde_json::from_str(capture)?;
    let mut registry = KindRegistry {
        kinds: HashMap::with_capacity(capture.resources.len()),
        aliases: HashMap::new(),
    };
    for r in capture.resources {
        registry.set_aliases(&r.group, &r.plural, r.short_names, r.categories);
        registry.insert(Resource::new(
            &r.group,
            &r.version,
            &r.kind,
            &r.plural,
            r.namespaced,
        ));
    }
    Ok(registry)
}

/// Kinds the local cluster can serve, keyed by (`apiVersion`, kind).
#[derive(Debug, Clone)]
pub struct KindRegistry {
    kinds: HashMap<(String, String), Resource>,
    /// By (group, plural): the same in every version.
    aliases: HashMap<(String, String), Aliases>,
}

impl Default for KindRegistry {
    /// The built-in types alone.
    fn default() -> Self {
        CAPTURED.clone()
    }
}

impl KindRegistry {
    /// Adds (or replaces) a served resource.
    pub fn insert(&mut self, resource: Resource) {
        self.kinds
            .insert((resource.api_version(), resource.kind.clone()), resource);
    }

    /// The resource serving `kind` at `api_version` (`v1`, `apps/v1`, ...).
    pub fn resolve(&self, api_version: &str, kind: &str) -> Option<&Resource> {
        self.kinds.get(&(api_version.to_owned(), kind.to_owned()))
    }

    /// Every served resource.
    pub fn resources(&self) -> impl Iterator<Item = &Resource> {
        self.kinds.values()
    }

    /// The short names and categories of `resource`, when it has any.
    pub fn aliases(&self, resource: &Resource) -> Option<&Aliases> {
        self.aliases
            .get(&(resource.group.clone(), resource.plural.clone()))
    }

    fn set_aliases(
        &mut self,
        group: &str,
        plural: &str,
        short_names: Vec<String>,
        categories: Vec<String>,
    ) {
        if !short_names.is_empty() || !categories.is_empty() {
            let aliases = Aliases {
                short_names,
                categories,
            };
            self.aliases
                .insert((group.to_owned(), plural.to_owned()), aliases);
        }
    }

    /// Learns the resources a CustomResourceDefinition declares, one per served version.
    /// Returns them; an object that is not a well-formed CRD yields none.
    pub fn learn_crd(&mut self, crd: &serde_json::Value) -> Vec<Resource> {
        let spec = &crd["spec"];
        let (Some(group), Some(kind), Some(plural)) = (
            spec["group"].as_str(),
            spec["names"]["kind"].as_str(),
            spec["names"]["plural"].as_str(),
        ) else {
            return Vec::new();
        };
        let namespaced = spec["scope"].as_str() != Some("Cluster");
        let names = |field: &str| -> Vec<String> {
            spec["names"][field]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|name| name.as_str().map(str::to_owned))
                .collect()
        };
        self.set_aliases(group, plural, names("shortNames"), names("categories"));
        let learned: Vec<Resource> = spec["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| v["served"].as_bool() != Some(false))
            .filter_map(|v| v["name"].as_str())
            .map(|version| Resource::new(group, version, kind, plural, namespaced))
            .collect();
        for resource in &learned {
            self.insert(resource.clone());
        }
        learned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_ins_and_crds_resolve() {
        let mut registry = KindRegistry::default();
        let deployments = registry.resolve("apps/v1", "Deployment").unwrap();
        assert_eq!(deployments.plural, "deployments");
        assert!(
            registry
                .resolve("v1", "Namespace")
                .is_some_and(|r| !r.namespaced)
        );
        assert!(registry.resolve("example.com/v1", "Widget").is_none());

        assert_eq!(
            registry.aliases(deployments).map(|a| a.short_names.clone()),
            Some(vec!["deploy".to_owned()])
        );
        let crd = serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Cluster",
                     "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"],
                               "categories": ["all"]},
                     "versions": [{"name": "v1", "served": true}, {"name": "v0", "served": false}]}
        });
        assert_eq!(registry.learn_crd(&crd).len(), 1);
        let widgets = registry.resolve("example.com/v1", "Widget").unwrap();
        assert_eq!(
            (widgets.plural.as_str(), widgets.namespaced),
            ("widgets", false)
        );
        assert!(registry.resolve("example.com/v0", "Widget").is_none());
        let widgets = widgets.clone();
        assert_eq!(
            registry.aliases(&widgets),
            Some(&Aliases {
                short_names: vec!["wd".to_owned()],
                categories: vec!["all".to_owned()],
            })
        );
    }

    /// The capture parses, each (`apiVersion`, kind) once, with no subresource in it.
    #[test]
    fn the_discovery_capture_is_well_formed() {
        let capture: Capture = serde_json::from_str(CAPTURE).unwrap();
        let registry = built_in(CAPTURE).unwrap();
        assert_eq!(
            registry.kinds.len(),
            capture.resources.len(),
            "an (apiVersion, kind) listed twice"
        );
        for r in &capture.resources {
            assert!(!r.plural.contains('/'), "a subresource: {}", r.plural);
            assert!(!r.version.is_empty() && !r.kind.is_empty(), "{}", r.plural);
        }
        assert!(built_in(r#"{"resources": [{"group": "", "version": "v1"}]}"#).is_err());
        assert!(built_in("not json").is_err());
    }

    #[test]
    fn discovered_types_resolve_in_every_served_version() {
        let registry = KindRegistry::default();
        let slices = registry
            .resolve("discovery.k8s.io/v1", "EndpointSlice")
            .unwrap();
        assert_eq!(
            (slices.plural.as_str(), slices.namespaced),
            ("endpointslices", true)
        );
        for version in ["autoscaling/v1", "autoscaling/v2"] {
            let hpa = registry.resolve(version, "HorizontalPodAutoscaler");
            assert_eq!(
                hpa.map(|r| r.plural.as_str()),
                Some("horizontalpodautoscalers"),
                "{version}"
            );
        }
        let crds = registry
            .resolve("apiextensions.k8s.io/v1", "CustomResourceDefinition")
            .unwrap();
        assert!(!crds.namespaced);
    }

    #[test]
    fn subresources_and_types_that_cannot_be_watched_do_not_resolve() {
        let registry = KindRegistry::default();
        for (api_version, kind) in [
            // Subresources: deployments/scale, pods/eviction, serviceaccounts/token.
            ("autoscaling/v1", "Scale"),
            ("policy/v1", "Eviction"),
            ("authentication.k8s.io/v1", "TokenRequest"),
            // Create-only types.
            ("authentication.k8s.io/v1", "TokenReview"),
            ("authentication.k8s.io/v1", "SelfSubjectReview"),
            ("authorization.k8s.io/v1", "SubjectAccessReview"),
            ("v1", "Binding"),
            // Listed, never watched.
            ("v1", "ComponentStatus"),
        ] {
            assert!(
                registry.resolve(api_version, kind).is_none(),
                "{api_version} {kind}"
            );
        }
    }
}
