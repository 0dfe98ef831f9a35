//! Which resource serves a kind: the built-in types, plus the custom resources that
//! CustomResourceDefinitions in the manifests declare.

use std::collections::HashMap;

use kubeplug_informer::resource::Resource;

/// Built-in resources: (group, version, kind, plural, namespaced).
const BUILT_IN: &[(&str, &str, &str, &str, bool)] = &[
    ("", "v1", "ConfigMap", "configmaps", true),
    ("", "v1", "Endpoints", "endpoints", true),
    ("", "v1", "Event", "events", true),
    ("", "v1", "LimitRange", "limitranges", true),
    ("", "v1", "Namespace", "namespaces", false),
    ("", "v1", "Node", "nodes", false),
    ("", "v1", "PersistentVolume", "persistentvolumes", false),
    (
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        true,
    ),
    ("", "v1", "Pod", "pods", true),
    ("", "v1", "ResourceQuota", "resourcequotas", true),
    ("", "v1", "Secret", "secrets", true),
    ("", "v1", "Service", "services", true),
    ("", "v1", "ServiceAccount", "serviceaccounts", true),
    ("apps", "v1", "DaemonSet", "daemonsets", true),
    ("apps", "v1", "Deployment", "deployments", true),
    ("apps", "v1", "ReplicaSet", "replicasets", true),
    ("apps", "v1", "StatefulSet", "statefulsets", true),
    (
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        true,
    ),
    ("batch", "v1", "CronJob", "cronjobs", true),
    ("batch", "v1", "Job", "jobs", true),
    ("coordination.k8s.io", "v1", "Lease", "leases", true),
    ("events.k8s.io", "v1", "Event", "events", true),
    ("networking.k8s.io", "v1", "Ingress", "ingresses", true),
    (
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        true,
    ),
    (
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        true,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
    ),
    ("rbac.authorization.k8s.io", "v1", "Role", "roles", true),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        true,
    ),
    (
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        false,
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
    ),
];

/// Kinds the local cluster can serve, keyed by (`apiVersion`, kind).
#[derive(Debug, Clone)]
pub struct KindRegistry {
    kinds: HashMap<(String, String), Resource>,
}

impl Default for KindRegistry {
    fn default() -> Self {
        let mut registry = Self {
            kinds: HashMap::new(),
        };
        for &(group, version, kind, plural, namespaced) in BUILT_IN {
            registry.insert(Resource::new(group, version, kind, plural, namespaced));
        }
        registry
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

        let crd = serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Cluster",
                     "names": {"kind": "Widget", "plural": "widgets"},
                     "versions": [{"name": "v1", "served": true}, {"name": "v0", "served": false}]}
        });
        assert_eq!(registry.learn_crd(&crd).len(), 1);
        let widgets = registry.resolve("example.com/v1", "Widget").unwrap();
        assert_eq!(
            (widgets.plural.as_str(), widgets.namespaced),
            ("widgets", false)
        );
        assert!(registry.resolve("example.com/v0", "Widget").is_none());
    }
}
