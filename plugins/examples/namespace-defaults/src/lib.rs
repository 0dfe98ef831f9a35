//! namespace-defaults: gives every Namespace default labels and a ResourceQuota.
//!
//! Reconciles Namespaces. Labels are defaults: one the Namespace already carries, with any
//! value, is left alone. The quota (`namespace-defaults` by default) is the plugin's own
//! object: it is applied with `force`, so edits to its limits are reverted, and a
//! ResourceQuota event maps to its Namespace (`map-event`), so a deleted quota is restored.
//! Both are written with server-side apply under the host's field manager
//! `kubeplug/namespace-defaults`, and only when something is missing or different.
//!
//! Settings (defaults shown):
//! `{"labels": {"pod-security.kubernetes.io/warn": "baseline"},
//!   "quota_name": "namespace-defaults",
//!   "quota_hard": {"pods": "100", "services": "20", "persistentvolumeclaims": "20",
//!                  "services.loadbalancers": "2"},
//!   "skip_namespaces": ["kube-system", "kube-public", "kube-node-lease"]}`

use std::collections::{BTreeMap, BTreeSet};

use kubeplug_sdk::prelude::*;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default = "default_labels")]
    labels: BTreeMap<String, String>,
    #[serde(default = "default_quota_name")]
    quota_name: String,
    #[serde(default = "default_hard")]
    quota_hard: BTreeMap<String, String>,
    #[serde(default = "default_skip")]
    skip_namespaces: BTreeSet<String>,
}

/// Pod Security Admission in `warn` mode: users see warnings for pods that break the
/// baseline policy, and nothing is refused.
fn default_labels() -> BTreeMap<String, String> {
    BTreeMap::from([(
        "pod-security.kubernetes.io/warn".to_owned(),
        "baseline".to_owned(),
    )])
}

fn default_quota_name() -> String {
    "namespace-defaults".to_owned()
}

/// Object counts only: a quota on `requests.cpu` or `limits.memory` makes the API server
/// refuse every pod that does not declare them, which a default must not do.
fn default_hard() -> BTreeMap<String, String> {
    [
        ("pods", "100"),
        ("services", "20"),
        ("persistentvolumeclaims", "20"),
        ("services.loadbalancers", "2"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

fn default_skip() -> BTreeSet<String> {
    ["kube-system", "kube-public", "kube-node-lease"]
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// Subscription index of ResourceQuotas, which `Event::subscription` refers to (Namespaces
/// are 0).
const QUOTAS: u32 = 1;

/// The label that marks the quotas this plugin manages.
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "kubeplug");

fn namespaces() -> Gvk {
    gvk("", "v1", "Namespace")
}

fn quotas() -> Gvk {
    gvk("", "v1", "ResourceQuota")
}

/// Whether `name` is a DNS-1123 subdomain, as object names must be.
fn is_object_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// What reconcile reads of a ResourceQuota: its limits, as a projection.
fn hard_projection() -> Vec<Projection> {
    vec![Projection::new("hard", "spec.hard")]
}

struct NamespaceDefaults {
    labels: BTreeMap<String, String>,
    quota_name: String,
    hard: BTreeMap<String, String>,
    skip: BTreeSet<String>,
}

impl NamespaceDefaults {
    fn ensure(&self, name: &str) -> Result<(), String> {
        if self.skip.contains(name) {
            return Ok(());
        }
        let cached = cache::get(&namespaces(), name)
            .map_err(|e| format!("reading Namespace {name}: {}", e.explain()))?;
        let Some(namespace) = cached else {
            return Ok(());
        };
        // Terminating: the API server refuses new objects in it, and it is going away.
        if namespace.meta.deletion_timestamp.is_some() {
            return Ok(());
        }
        self.ensure_labels(&namespace.meta)?;
        self.ensure_quota(name)
    }

    /// Applies the default labels the Namespace lacks.
    fn ensure_labels(&self, meta: &ObjectMeta) -> Result<(), String> {
        if self.labels.keys().all(|key| meta.label(key).is_some()) {
            return Ok(());
        }
        // With server-side apply, leaving out a label this manager applied before removes
        // it; so apply every default the Namespace lacks or already carries with our value,
        // and leave out only those someone set to another value.
        let labels: BTreeMap<&String, &String> = self
            .labels
            .iter()
            .filter(|(key, value)| {
                meta.label(key)
                    .is_none_or(|current| current == value.as_str())
            })
            .collect();
        let name = &meta.name;
        let target = ObjectRef::new(namespaces(), None, name);
        let fields = json!({"metadata": {"labels": labels}});
        cluster::apply_fields(&target, fields, false)
            .map_err(|e| format!("applying labels to Namespace {name}: {}", e.explain()))?;
        let applied: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        log::info(
            "labelled Namespace",
            &[("namespace", name), ("labels", &applied.join(","))],
        );
        Ok(())
    }

    /// Applies the quota when it is missing or its limits differ from the settings.
    fn ensure_quota(&self, namespace: &str) -> Result<(), String> {
        if self.hard.is_empty() {
            return Ok(());
        }
        let key = format!("{namespace}/{}", self.quota_name);
        let cached = cache::get_projected(&quotas(), &key, &hard_projection())
            .map_err(|e| format!("reading ResourceQuota {key}: {}", e.explain()))?;
        let restoring = cached.is_none();
        if let Some(quota) = cached {
            // Absent, or not a map of strings: not what the settings ask for either way.
            let current: BTreeMap<String, String> = quota
                .field("hard")
                .first()
                .and_then(|hard| hard.parse().ok())
                .unwrap_or_default();
            if self
                .hard
                .iter()
                .all(|(resource, limit)| current.get(resource) == Some(limit))
            {
                return Ok(());
            }
        }
        let target = ObjectRef::new(quotas(), Some(namespace), &self.quota_name);
        let fields = json!({
            "metadata": {"labels": {MANAGED_BY.0: MANAGED_BY.1}},
            "spec": {"hard": self.hard},
        });
        // The quota is ours: force takes its limits back from whoever edited them.
        cluster::apply_fields(&target, fields, true)
            .map_err(|e| format!("applying ResourceQuota {key}: {}", e.explain()))?;
        log::info(
            if restoring {
                "created ResourceQuota"
            } else {
                "reset ResourceQuota limits"
            },
            &[("quota", &key)],
        );
        Ok(())
    }
}

impl Plugin for NamespaceDefaults {
    fn init(settings: Settings) -> Result<Self, InitError> {
        let config: Config = settings.parse()?;
        if config.labels.is_empty() && config.quota_hard.is_empty() {
            return Err("settings: labels and quota_hard are both empty; nothing to do".into());
        }
        if !is_object_name(&config.quota_name) {
            return Err(format!(
                "settings: quota_name {:?} is not a valid object name (lowercase DNS subdomain)",
                config.quota_name
            )
            .into());
        }
        Ok(Self {
            labels: config.labels,
            quota_name: config.quota_name,
            hard: config.quota_hard,
            skip: config.skip_namespaces,
        })
    }

    fn describe(&self) -> Description {
        let mut subscriptions = vec![Subscription::to(namespaces())];
        let mut writes = Vec::new();
        if !self.labels.is_empty() {
            writes.push(WriteRequest {
                resource_type: namespaces(),
                verbs: vec![WriteVerb::Apply],
            });
        }
        if !self.hard.is_empty() {
            subscriptions.push(Subscription::to(quotas()).enqueue(KeyMapping::Computed));
            writes.push(WriteRequest {
                resource_type: quotas(),
                verbs: vec![WriteVerb::Apply],
            });
        }
        let mut description =
            Description::reconcile("namespace-defaults", "0.1.0", 2, subscriptions);
        if !self.hard.is_empty() {
            // Its limits, through a projection: the quota's body, not only its metadata.
            description.reads = vec![Read::bodies(quotas())];
        }
        description.writes = writes;
        description
    }

    fn reconcile(&mut self, target: ObjectRef) -> ReconcileResult {
        match self.ensure(&target.name) {
            Ok(()) => ReconcileResult::Done,
            Err(message) => ReconcileResult::Error(message),
        }
    }

    /// A ResourceQuota event: its Namespace, if it is our quota. (An `owner` mapping cannot
    /// do this: the quota has no owner reference, and a Namespace is cluster-scoped.)
    fn map_event(&mut self, event: Event) -> Vec<ObjectRef> {
        if event.subscription != QUOTAS || event.resync || event.meta.name != self.quota_name {
            return Vec::new();
        }
        event
            .meta
            .namespace
            .iter()
            .map(|namespace| ObjectRef::new(namespaces(), None, namespace))
            .collect()
    }
}

export_plugin!(NamespaceDefaults);
