//! configmap-reload: rolls a Deployment when a ConfigMap or Secret its pods use changes.
//!
//! Pods read ConfigMaps and Secrets at start (environment) or see them change late
//! (volumes), so a Deployment keeps running old configuration until something restarts it.
//! This plugin writes a hash of everything a Deployment's pod template reads from
//! ConfigMaps and Secrets into a pod template annotation (`kubeplug.dev/config-hash`); when
//! the content changes, so does the template, and the Deployment rolls out new pods.
//!
//! Controller-runtime shape: it reconciles Deployments (`For`), and a ConfigMap or Secret
//! event enqueues the Deployments of that namespace that reference the object (`Watches`
//! with a map function over field indexes). The indexes are declared as data and kept by
//! the host; reconcile re-derives the references from the Deployment itself, so a stale
//! index only costs a no-op reconcile. Reconcile patches only when the hash differs.
//!
//! Reconcile reads through projections, in the indexes' path language: the host hands it
//! each place's reference objects, the template's annotations and each ConfigMap's or
//! Secret's content maps, so no whole object is copied into the plugin or parsed in it.
//!
//! Secret content never leaves the plugin except as part of the hash, and is never logged.
//!
//! Settings: `{"annotation": "kubeplug.dev/config-hash", "secrets": true}` (the defaults).

use std::collections::{BTreeMap, BTreeSet};

use Source::{ConfigMap, Secret};
use kubeplug_sdk::prelude::*;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// The pod template annotation that carries the hash.
    #[serde(default = "default_annotation")]
    annotation: String,
    /// Whether Secrets count too (false: no Secret is watched or read).
    #[serde(default = "yes")]
    secrets: bool,
}

fn default_annotation() -> String {
    "kubeplug.dev/config-hash".to_owned()
}

fn yes() -> bool {
    true
}

/// Subscription indexes, which `Event::subscription` refers to (Deployments are 0).
const CONFIG_MAPS: u32 = 1;
const SECRETS: u32 = 2;

fn deployments() -> Gvk {
    gvk("apps", "v1", "Deployment")
}

/// The kinds of object a pod template can take configuration from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Source {
    ConfigMap,
    Secret,
}

impl Source {
    fn gvk(self) -> Gvk {
        gvk("", "v1", self.kind())
    }

    fn kind(self) -> &'static str {
        match self {
            ConfigMap => "ConfigMap",
            Secret => "Secret",
        }
    }
}

/// One place in a pod spec that names a ConfigMap or Secret: each object found at `holder`
/// (a path under `spec.template.spec`, in the host's index path language) carries the name
/// in `field` and may say `optional: true`. Each place is one custom index on Deployments,
/// at `spec.template.spec.<holder>.<field>`.
struct Place {
    index: &'static str,
    source: Source,
    holder: &'static str,
    field: &'static str,
}

const fn place(
    index: &'static str,
    source: Source,
    holder: &'static str,
    field: &'static str,
) -> Place {
    Place {
        index,
        source,
        holder,
        field,
    }
}

// One row per line: the table reads as the list of places it is.
#[rustfmt::skip]
const PLACES: [Place; 12] = [
    place("configmap-volumes", ConfigMap, "volumes[*].configMap", "name"),
    place("configmap-projected", ConfigMap, "volumes[*].projected.sources[*].configMap", "name"),
    place("configmap-env-from", ConfigMap, "containers[*].envFrom[*].configMapRef", "name"),
    place("configmap-env", ConfigMap, "containers[*].env[*].valueFrom.configMapKeyRef", "name"),
    place("configmap-init-env-from", ConfigMap, "initContainers[*].envFrom[*].configMapRef", "name"),
    place("configmap-init-env", ConfigMap, "initContainers[*].env[*].valueFrom.configMapKeyRef", "name"),
    place("secret-volumes", Secret, "volumes[*].secret", "secretName"),
    place("secret-projected", Secret, "volumes[*].projected.sources[*].secret", "name"),
    place("secret-env-from", Secret, "containers[*].envFrom[*].secretRef", "name"),
    place("secret-env", Secret, "containers[*].env[*].valueFrom.secretKeyRef", "name"),
    place("secret-init-env-from", Secret, "initContainers[*].envFrom[*].secretRef", "name"),
    place("secret-init-env", Secret, "initContainers[*].env[*].valueFrom.secretKeyRef", "name"),
];

/// The kinds of source the plugin watches: ConfigMaps, and Secrets unless `secrets` is off.
fn sources(secrets: bool) -> impl Iterator<Item = Source> {
    [ConfigMap, Secret]
        .into_iter()
        .filter(move |source| secrets || *source != Secret)
}

/// A reference found at one place: the object's name (in `name`, or `secretName` for a
/// Secret volume) and whether the pod starts without it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Reference {
    name: Option<String>,
    secret_name: Option<String>,
    #[serde(default)]
    optional: bool,
}

/// What reconcile reads of a Deployment, as projections: each place's holders (projection
/// `index`, whose values are the holder objects) and the pod template's annotations (an
/// annotation key has dots, which a path cannot name, so the whole small map).
fn deployment_projections(secrets: bool) -> Vec<Projection> {
    PLACES
        .iter()
        .filter(|p| secrets || p.source != Secret)
        .map(|p| Projection::new(p.index, &format!("spec.template.spec.{}", p.holder)))
        .chain([Projection::new(
            ANNOTATIONS,
            "spec.template.metadata.annotations",
        )])
        .collect()
}

/// The projection of the pod template's annotations.
const ANNOTATIONS: &str = "annotations";

/// The ConfigMaps and Secrets a Deployment's pod template names, each with whether every
/// reference to it is optional (one required reference makes it required). A holder that is
/// not an object with a string name at its place's field names nothing, as in the index.
fn references(deployment: &ProjectedObject, secrets: bool) -> BTreeMap<(Source, String), bool> {
    let mut found: BTreeMap<(Source, String), bool> = BTreeMap::new();
    for place in PLACES.iter().filter(|p| secrets || p.source != Secret) {
        for holder in deployment.field(place.index) {
            let Ok(reference) = holder.parse::<Reference>() else {
                continue;
            };
            let name = match place.field {
                "secretName" => reference.secret_name,
                _ => reference.name,
            };
            let Some(name) = name else {
                continue;
            };
            found
                .entry((place.source, name))
                .and_modify(|all_optional| *all_optional &= reference.optional)
                .or_insert(reference.optional);
        }
    }
    found
}

/// What reconcile reads of a ConfigMap or Secret: its content maps, one projection each.
fn content_projections() -> Vec<Projection> {
    ["data", "binaryData", "stringData"]
        .map(|field| Projection::new(field, field))
        .to_vec()
}

/// What a pod can read from a ConfigMap (`data`, `binaryData`) or a Secret (`data`, and
/// `stringData` as it stays in manifests the local cluster serves unconverted).
struct Content {
    data: BTreeMap<String, String>,
    binary_data: BTreeMap<String, String>,
    string_data: BTreeMap<String, String>,
}

impl Content {
    /// The content maps of an object read through [`content_projections`]; `None` when one
    /// is not a map of strings. An absent or `null` map is empty.
    fn of(object: &ProjectedObject) -> Option<Self> {
        let map = |name: &str| match object.field(name).first() {
            None | Some(FieldValue::Null) => Some(BTreeMap::new()),
            Some(value) => value.parse().ok(),
        };
        Some(Self {
            data: map("data")?,
            binary_data: map("binaryData")?,
            string_data: map("stringData")?,
        })
    }
}

/// Feeds `text` length-prefixed, so that no two different contents feed the same bytes.
fn feed(hasher: &mut Sha256, text: &str) {
    hasher.update((text.len() as u64).to_le_bytes());
    hasher.update(text.as_bytes());
}

/// SHA-256, in hex, over every referenced object in order (kind, then name) and, for each,
/// its fields and keys in sorted order; an absent optional object counts as `absent`.
/// Equal content gives an equal hash whatever order the server lists keys in.
fn digest(contents: &BTreeMap<(Source, String), Option<Content>>) -> String {
    let mut hasher = Sha256::new();
    for ((source, name), content) in contents {
        feed(&mut hasher, source.kind());
        feed(&mut hasher, name);
        let Some(content) = content else {
            feed(&mut hasher, "absent");
            continue;
        };
        for (field, map) in [
            ("data", &content.data),
            ("binaryData", &content.binary_data),
            ("stringData", &content.string_data),
        ] {
            feed(&mut hasher, field);
            hasher.update((map.len() as u64).to_le_bytes());
            for (key, value) in map {
                feed(&mut hasher, key);
                feed(&mut hasher, value);
            }
        }
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether `key` is a valid Kubernetes annotation key: an optional DNS subdomain prefix and
/// `/`, then a name of at most 63 alphanumerics, `-`, `_` or `.`, alphanumeric at both ends.
fn is_annotation_key(key: &str) -> bool {
    let (prefix, name) = key.rsplit_once('/').unwrap_or(("", key));
    let prefix_ok = !key.contains('/')
        || (!prefix.is_empty()
            && prefix.len() <= 253
            && prefix.split('.').all(|label| {
                !label.is_empty()
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            }));
    let edge = |b: Option<&u8>| b.is_some_and(u8::is_ascii_alphanumeric);
    prefix_ok
        && name.len() <= 63
        && edge(name.as_bytes().first())
        && edge(name.as_bytes().last())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

struct ConfigMapReload {
    annotation: String,
    secrets: bool,
    /// What reconcile reads of a Deployment and of a ConfigMap or Secret, built once.
    deployment_projections: Vec<Projection>,
    content_projections: Vec<Projection>,
}

impl ConfigMapReload {
    /// Brings Deployment `target`'s hash annotation up to date; patches only when it differs.
    fn reconcile_deployment(&self, target: &ObjectRef) -> Result<(), String> {
        let key = target.key();
        let Some(namespace) = target.namespace.as_deref() else {
            return Err(format!(
                "Deployment {key} has no namespace; the host mapped a key wrongly"
            ));
        };
        let cached = cache::get_projected(&deployments(), &key, &self.deployment_projections)
            .map_err(|e| format!("reading Deployment {key}: {}", e.explain()))?;
        let Some(deployment) = cached else {
            return Ok(());
        };
        if deployment.meta.deletion_timestamp.is_some() {
            return Ok(());
        }
        let references = references(&deployment, self.secrets);
        // A Deployment that reads no configuration is not this plugin's business.
        if references.is_empty() {
            return Ok(());
        }
        let mut contents = BTreeMap::new();
        for ((source, name), optional) in references {
            let object_key = format!("{namespace}/{name}");
            let found = cache::get_projected(&source.gvk(), &object_key, &self.content_projections)
                .map_err(|e| {
                    format!(
                        "Deployment {key}: reading {} {object_key}: {}",
                        source.kind(),
                        e.explain()
                    )
                })?;
            let content = match found {
                // No Secret text in the message: serde's errors may quote the value.
                Some(found) => Some(Content::of(&found).ok_or_else(|| {
                    format!(
                        "{} {object_key}: data, binaryData or stringData is not a map of strings",
                        source.kind()
                    )
                })?),
                None if optional => None,
                // Missing or not cached yet: its pods cannot start either way, and its
                // arrival enqueues this Deployment again.
                None => {
                    log::debug(
                        "waiting for a required object before hashing",
                        &[
                            ("deployment", &key),
                            ("kind", source.kind()),
                            ("name", &name),
                        ],
                    );
                    return Ok(());
                }
            };
            contents.insert((source, name), content);
        }
        let hash = digest(&contents);
        let annotations: BTreeMap<String, Value> = deployment
            .field(ANNOTATIONS)
            .first()
            .and_then(|map| map.parse().ok())
            .unwrap_or_default();
        if annotations.get(&self.annotation).and_then(Value::as_str) == Some(hash.as_str()) {
            return Ok(());
        }
        let annotation = Map::from_iter([(self.annotation.clone(), Value::from(hash))]);
        let patch = json!({"spec": {"template": {"metadata": {"annotations": annotation}}}});
        match cluster::patch(target, cluster::PatchType::Merge, &patch.to_string(), None) {
            Ok(_) => {
                let sources: Vec<String> = contents
                    .keys()
                    .map(|(source, name)| format!("{}/{name}", source.kind()))
                    .collect();
                log::info(
                    "rolling Deployment: its configuration changed",
                    &[("deployment", &key), ("reads", &sources.join(", "))],
                );
                Ok(())
            }
            // Deleted since the cache saw it: nothing left to roll.
            Err(Error::NotFound(_)) => Ok(()),
            Err(e) => Err(format!(
                "patching Deployment {key} ({}): {}",
                self.annotation,
                e.explain()
            )),
        }
    }
}

impl Plugin for ConfigMapReload {
    fn init(settings: Settings) -> Result<Self, InitError> {
        let config: Config = settings.parse()?;
        if !is_annotation_key(&config.annotation) {
            return Err(format!(
                "settings: annotation {:?} is not a valid annotation key (prefix/name)",
                config.annotation
            )
            .into());
        }
        Ok(Self {
            annotation: config.annotation,
            secrets: config.secrets,
            deployment_projections: deployment_projections(config.secrets),
            content_projections: content_projections(),
        })
    }

    fn describe(&self) -> Description {
        let mut subscriptions = vec![
            Subscription::to(deployments()),
            Subscription::to(ConfigMap.gvk()).enqueue(KeyMapping::Computed),
        ];
        if self.secrets {
            subscriptions.push(Subscription::to(Secret.gvk()).enqueue(KeyMapping::Computed));
        }
        let mut description = Description::reconcile("configmap-reload", "0.1.0", 2, subscriptions);
        description.indexes = PLACES
            .iter()
            .filter(|p| self.secrets || p.source != Secret)
            .map(|p| {
                let path = format!("spec.template.spec.{}.{}", p.holder, p.field);
                IndexDecl::path(p.index, deployments(), &path)
            })
            .collect();
        // Their content, through projections: the bodies, not only the metadata. (The
        // Deployments' path indexes keep theirs.)
        description.reads = sources(self.secrets)
            .map(|source| Read::bodies(source.gvk()))
            .collect();
        description.writes = vec![WriteRequest {
            resource_type: deployments(),
            verbs: vec![WriteVerb::Patch],
        }];
        description
    }

    fn reconcile(&mut self, target: ObjectRef) -> ReconcileResult {
        match self.reconcile_deployment(&target) {
            Ok(()) => ReconcileResult::Done,
            Err(message) => ReconcileResult::Error(message),
        }
    }

    /// A ConfigMap or Secret event: the Deployments of its namespace that reference it.
    fn map_event(&mut self, event: Event) -> Vec<ObjectRef> {
        let source = match event.subscription {
            CONFIG_MAPS => ConfigMap,
            SECRETS => Secret,
            _ => return Vec::new(),
        };
        // A resync, or a relist that found it unchanged: nothing new to roll out.
        if event.resync {
            return Vec::new();
        }
        let Some(namespace) = event.meta.namespace.as_deref() else {
            return Vec::new();
        };
        let mut names = BTreeSet::new();
        for place in PLACES.iter().filter(|p| p.source == source) {
            match cache::by_index(&deployments(), place.index, &event.meta.name) {
                Ok(found) => names.extend(
                    found
                        .into_iter()
                        .filter(|d| d.meta.namespace.as_deref() == Some(namespace))
                        .map(|d| d.meta.name),
                ),
                // map-event cannot fail; the Deployment's own next event catches up.
                Err(e) => log::warn(
                    "cannot look up the Deployments that use an object",
                    &[
                        ("kind", source.kind()),
                        ("key", &event.key()),
                        ("index", place.index),
                        ("error", &e.explain()),
                    ],
                ),
            }
        }
        names
            .into_iter()
            .map(|name| ObjectRef::new(deployments(), Some(namespace), &name))
            .collect()
    }
}

export_plugin!(ConfigMapReload);
