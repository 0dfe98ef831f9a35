//! The example plugins of `plugins/examples/`, end to end: real informers over the
//! in-memory API server, and a writer that records each write and applies it to the server
//! as the local cluster does, so that a plugin's own writes come back to it as events.
//!
//! Each plugin has a driver test (`run_reconcile`: events, `map-event`, the work queue) and a
//! test calling `reconcile` directly on one instance, where "no write" can be asserted
//! exactly.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use kubeplug_informer::indexer::Indexer;
use kubeplug_informer::informer::SharedIndexInformer;
use kubeplug_informer::object::ObjectKey;
use kubeplug_informer::resource::Resource;
use kubeplug_memory::MemoryServer;
use kubeplug_runtime::reconcile::{Reconciler, run_reconcile};
use kubeplug_runtime::view::{BoxFuture, PatchType, PatchedPart};
use kubeplug_runtime::{
    ClusterWriter, Grants, Gvk, IndexerMap, ObjectRef, Plugin, PluginInstance, PluginLimits,
    PluginSpec, Write, WriteError, WriteVerb,
};
use kubeplug_workqueue::{ItemExponential, Queue};
use serde_json::{Value, json};

use crate::fixtures::{guest, gvk, informer, runtime, until};

const WAIT: Duration = Duration::from_secs(30);
const HASH: &str = "kubeplug.dev/config-hash";

fn deployments() -> Resource {
    Resource::new("apps", "v1", "Deployment", "deployments", true)
}

fn config_maps() -> Resource {
    Resource::new("", "v1", "ConfigMap", "configmaps", true)
}

fn secrets() -> Resource {
    Resource::new("", "v1", "Secret", "secrets", true)
}

fn namespaces() -> Resource {
    Resource::new("", "v1", "Namespace", "namespaces", false)
}

fn quotas() -> Resource {
    Resource::new("", "v1", "ResourceQuota", "resourcequotas", true)
}

/// Example `name`'s component, built with every plugin by the shared fixture.
fn example(name: &str) -> Result<PathBuf> {
    // `guest` builds every plugin under plugins/ once, the examples included; it only
    // names the test guests' directory.
    guest(name)?;
    Ok(xtask::Layout::from_manifest_dir()
        .output_dir()
        .join(format!("{name}.wasm")))
}

/// A cluster over a [`MemoryServer`]: records every write, and applies patches (merge) and
/// server-side applies (merged into the stored object, or created) to the server.
struct Cluster {
    server: MemoryServer,
    resources: Vec<Resource>,
    writes: Mutex<Vec<Write>>,
}

impl Cluster {
    fn new(server: &MemoryServer, resources: Vec<Resource>) -> Arc<Self> {
        Arc::new(Self {
            server: server.clone(),
            resources,
            writes: Mutex::default(),
        })
    }

    fn writes(&self) -> Vec<Write> {
        self.writes.lock().unwrap().clone()
    }

    fn count(&self) -> usize {
        self.writes.lock().unwrap().len()
    }

    fn perform(&self, write: &Write) -> Result<String, WriteError> {
        let (target, change) = match write {
            Write::Patch {
                target,
                patch_type: PatchType::Merge,
                patch,
                part: PatchedPart::Object,
            } => (target, patch),
            Write::Apply { target, json, .. } => (target, json),
            other => return Err(WriteError::Invalid(format!("not expected: {other:?}"))),
        };
        let resource = self
            .resources
            .iter()
            .find(|r| gvk(r) == target.resource)
            .ok_or_else(|| WriteError::NotFound(format!("no resource {}", target.resource)))?;
        let key = ObjectKey::new(target.namespace.as_deref(), &target.name);
        let change: Value =
            serde_json::from_str(change).map_err(|e| WriteError::Invalid(e.to_string()))?;
        let mut object = match (self.server.get(resource, &key), write) {
            (Some(stored), _) => serde_json::from_slice(&stored).expect("stored JSON"),
            (None, Write::Apply { .. }) => json!({}),
            (None, _) => return Err(WriteError::NotFound(target.to_string())),
        };
        merge(&mut object, change);
        let written = self
            .server
            .apply(resource, &object.to_string())
            .map_err(|s| WriteError::Invalid(s.to_string()))?;
        Ok(String::from_utf8_lossy(&written.json).into_owned())
    }
}

impl ClusterWriter for Cluster {
    fn write<'a>(
        &'a self,
        _plugin: &'a str,
        write: Write,
    ) -> BoxFuture<'a, Result<String, WriteError>> {
        let result = self.perform(&write);
        self.writes.lock().unwrap().push(write);
        Box::pin(async move { result })
    }
}

/// RFC 7386 merge patch, as the local cluster's writer applies patches and applies.
fn merge(target: &mut Value, patch: Value) {
    let Value::Object(patch) = patch else {
        *target = patch;
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let target = target.as_object_mut().expect("an object");
    for (key, value) in patch {
        if value.is_null() {
            target.remove(&key);
        } else {
            merge(target.entry(key).or_insert(Value::Null), value);
        }
    }
}

/// Started informers, one per resource, and the caches the plugin reads.
struct Informers {
    informers: Vec<SharedIndexInformer>,
    caches: BTreeMap<Gvk, Indexer>,
}

impl Informers {
    /// One informer per resource; returns one receiver each, in `resources`' order (the
    /// plugin's subscription order).
    async fn start(
        server: &MemoryServer,
        resources: &[Resource],
    ) -> Result<(Self, Vec<kubeplug_informer::listener::ListenerReceiver>)> {
        let mut informers = Vec::new();
        let mut receivers = Vec::new();
        let mut caches = BTreeMap::new();
        for resource in resources {
            let (informer, mut rx) = informer(server, resource.clone(), 1);
            caches.insert(gvk(resource), informer.indexer().clone());
            receivers.push(rx.remove(0));
            informers.push(informer);
        }
        until("the informers' initial lists", WAIT, || {
            informers.iter().all(SharedIndexInformer::has_synced)
        })
        .await?;
        Ok((Self { informers, caches }, receivers))
    }

    fn cache(&self, resource: &Resource) -> &Indexer {
        &self.caches[&gvk(resource)]
    }

    /// The cached object `key` of `resource`, as JSON.
    fn get(&self, resource: &Resource, key: &str) -> Option<Value> {
        self.cache(resource)
            .get(key)
            .map(|o| serde_json::from_str(o.json()).expect("cached JSON"))
    }

    /// Waits until the cache holds `resource` `key` at `version` or later.
    async fn caught_up(&self, resource: &Resource, key: &str, version: u64) -> Result<()> {
        let cache = self.cache(resource);
        until(&format!("{key} at version {version}"), WAIT, || {
            cache
                .get(key)
                .is_some_and(|o| o.resource_version() >= version)
        })
        .await
    }

    /// Waits until the cache holds `resource` `key` as `server` stores it now.
    async fn in_step(&self, server: &MemoryServer, resource: &Resource, key: &str) -> Result<()> {
        let (namespace, name) = match key.split_once('/') {
            Some((namespace, name)) => (Some(namespace), name),
            None => (None, key),
        };
        let stored = server
            .get(resource, &ObjectKey::new(namespace, name))
            .with_context(|| format!("the server has no {key}"))?;
        let stored: Value = serde_json::from_slice(&stored)?;
        let version = stored["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("{key} has no numeric resourceVersion"))?;
        self.caught_up(resource, key, version).await
    }

    async fn stop(self) {
        for informer in self.informers {
            informer.stop().await;
        }
    }
}

/// Loads example `name` with `settings` over these caches, granted their reads.
async fn load(
    name: &str,
    settings: &str,
    informers: &Informers,
    writer: Arc<dyn ClusterWriter>,
    grants: Grants,
) -> Result<Arc<Plugin>> {
    let path = example(name)?;
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    // It reads what the test gives it caches of.
    let grants = informers.caches.keys().fold(grants, |grants, resource| {
        grants.allow_read(resource.clone())
    });
    let spec = PluginSpec {
        path,
        bytes,
        settings: settings.into(),
        grants,
        // These tests are about what the examples do, not about deadlines: on a loaded CI
        // machine a call can pass the default second, and a `map-event` call that does
        // loses its event (a deleted quota would never be restored).
        limits: PluginLimits {
            call_deadline: Duration::from_secs(10),
            ..PluginLimits::default()
        },
        cache: Arc::new(IndexerMap(informers.caches.clone())),
        writer,
    };
    Ok(Arc::new(runtime().load(spec).await?))
}

/// Runs `plugin` in reconcile mode off `receivers`.
fn drive(
    plugin: &Arc<Plugin>,
    receivers: Vec<kubeplug_informer::listener::ListenerReceiver>,
) -> Result<Reconciler> {
    let queue: Queue<ObjectRef> = Queue::builder(plugin.name())
        .rate_limiter(ItemExponential::new(
            Duration::from_millis(5),
            Duration::from_secs(1),
        ))
        .build();
    Ok(run_reconcile(plugin.clone(), receivers, queue)?)
}

fn stop(reconciler: Reconciler) {
    reconciler.queue.shut_down();
    reconciler.workers.abort();
    reconciler.feeders.iter().for_each(|f| f.abort());
}

/// Calls `reconcile` on `instance` and fails unless it returned `done`.
async fn reconcile_done(instance: &mut PluginInstance, target: &ObjectRef) -> Result<()> {
    let result = format!("{:?}", instance.reconcile(target).await?);
    if !result.ends_with("Done") {
        bail!("reconcile {target}: {result}");
    }
    Ok(())
}

fn target(resource: &Resource, namespace: Option<&str>, name: &str) -> ObjectRef {
    ObjectRef {
        resource: gvk(resource),
        namespace: namespace.map(str::to_owned),
        name: name.to_owned(),
    }
}

// configmap-reload

fn config_map(namespace: &str, name: &str, data: Value) -> String {
    json!({"metadata": {"name": name, "namespace": namespace}, "data": data}).to_string()
}

fn secret(namespace: &str, name: &str, data: Value) -> String {
    json!({"metadata": {"name": name, "namespace": namespace}, "type": "Opaque", "data": data})
        .to_string()
}

/// A Deployment whose pod spec is `pod_spec` (one container `app` is added when it has
/// none).
fn deployment(namespace: &str, name: &str, mut pod_spec: Value) -> String {
    if pod_spec.get("containers").is_none() {
        pod_spec["containers"] = json!([{"name": "app", "image": "example.com/app:1"}]);
    }
    json!({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec},
        },
    })
    .to_string()
}

fn hash_of(deployment: &Value) -> Option<String> {
    deployment["spec"]["template"]["metadata"]["annotations"][HASH]
        .as_str()
        .map(str::to_owned)
}

/// The hash each patch wrote, by Deployment key, in order; fails on any other write or
/// on a patch that is not exactly the annotation.
fn patched(writes: &[Write]) -> Result<Vec<(String, String)>> {
    writes
        .iter()
        .map(|write| {
            let Write::Patch { target, patch, .. } = write else {
                bail!("configmap-reload wrote something else than a patch: {write:?}");
            };
            let patch: Value = serde_json::from_str(patch)?;
            let hash = hash_of(&patch).ok_or_else(|| anyhow!("patch without hash: {patch}"))?;
            let only_the_annotation =
                json!({"spec": {"template": {"metadata": {"annotations": {HASH: &hash}}}}});
            if patch != only_the_annotation {
                bail!("patch of {target} touches more than {HASH}: {patch}");
            }
            if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                bail!("{target}: hash {hash:?} is not hex SHA-256");
            }
            Ok((target.key(), hash))
        })
        .collect()
}

fn reload_grants() -> Grants {
    Grants::default().allow_write(gvk(&deployments()), WriteVerb::Patch)
}

/// A Deployment is patched when a ConfigMap it mounts, a ConfigMap it takes its environment
/// from, or a Secret one of its variables reads changes; never one that does not use it
/// (another namespace's object of the same name, or nothing at all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_reload_rolls_the_deployments_that_use_a_changed_object() -> Result<()> {
    let server = MemoryServer::new();
    let greeting = json!({"greeting": "hello", "color": "blue"});
    let objects = [
        (
            config_maps(),
            config_map("shop", "web-config", greeting.clone()),
        ),
        (
            config_maps(),
            config_map("shop", "web-env", json!({"LOG_LEVEL": "info"})),
        ),
        (
            config_maps(),
            config_map("other", "web-config", json!({"greeting": "hi"})),
        ),
        (
            secrets(),
            secret("shop", "db", json!({"password": "aHVudGVyMg=="})),
        ),
        (
            deployments(),
            deployment(
                "shop",
                "frontend",
                json!({"volumes": [{"name": "config", "configMap": {"name": "web-config"}}]}),
            ),
        ),
        (
            deployments(),
            deployment(
                "shop",
                "worker",
                json!({"containers": [{"name": "worker", "image": "example.com/worker:1",
                    "envFrom": [{"configMapRef": {"name": "web-env"}}]}]}),
            ),
        ),
        (
            deployments(),
            deployment(
                "shop",
                "api",
                json!({"containers": [{"name": "api", "image": "example.com/api:1",
                    "env": [{"name": "DB_PASSWORD", "valueFrom":
                        {"secretKeyRef": {"name": "db", "key": "password"}}}]}]}),
            ),
        ),
        (deployments(), deployment("shop", "plain", json!({}))),
        (
            deployments(),
            deployment(
                "other",
                "frontend",
                json!({"volumes": [{"name": "config", "configMap": {"name": "web-config"}}]}),
            ),
        ),
    ];
    for (resource, json) in &objects {
        server.create(resource, json).unwrap();
    }
    let watched = [deployments(), config_maps(), secrets()];
    let cluster = Cluster::new(&server, watched.to_vec());
    let (informers, receivers) = Informers::start(&server, &watched).await?;
    let plugin = load(
        "configmap-reload",
        "{}",
        &informers,
        cluster.clone(),
        reload_grants(),
    )
    .await?;
    let reconciler = drive(&plugin, receivers)?;

    let users = ["shop/frontend", "shop/worker", "shop/api", "other/frontend"];
    let hashes = |informers: &Informers| -> BTreeMap<&str, Option<String>> {
        users
            .iter()
            .chain(&["shop/plain"])
            .map(|k| {
                (
                    *k,
                    informers.get(&deployments(), k).and_then(|d| hash_of(&d)),
                )
            })
            .collect()
    };
    until(
        "every Deployment that uses an object annotated",
        WAIT,
        || {
            hashes(&informers)
                .iter()
                .all(|(k, h)| h.is_some() || *k == "shop/plain")
        },
    )
    .await?;
    let initial = hashes(&informers);
    assert_eq!(
        initial["shop/plain"], None,
        "it uses no ConfigMap or Secret"
    );
    let before = cluster.count();

    let changes: [(&str, Resource, String); 3] = [
        (
            "shop/frontend",
            config_maps(),
            config_map(
                "shop",
                "web-config",
                json!({"greeting": "bonjour", "color": "blue"}),
            ),
        ),
        (
            "shop/worker",
            config_maps(),
            config_map("shop", "web-env", json!({"LOG_LEVEL": "debug"})),
        ),
        (
            "shop/api",
            secrets(),
            secret("shop", "db", json!({"password": "c3dvcmRmaXNo"})),
        ),
    ];
    for (user, resource, json) in &changes {
        server.update(resource, json).unwrap();
        until(&format!("{user} rolled"), WAIT, || {
            let now = informers
                .get(&deployments(), user)
                .and_then(|d| hash_of(&d));
            now.is_some() && now != initial[user]
        })
        .await?;
    }
    // The first content again, keys in another order: the first hash again.
    let reordered = r#"{"metadata":{"name":"web-config","namespace":"shop"},"data":{"color":"blue","greeting":"hello"}}"#;
    server.update(&config_maps(), reordered).unwrap();
    until("shop/frontend back at its first hash", WAIT, || {
        informers
            .get(&deployments(), "shop/frontend")
            .and_then(|d| hash_of(&d))
            == initial["shop/frontend"]
    })
    .await?;

    let patches = patched(&cluster.writes()[before..])?;
    let rolled: BTreeSet<&str> = patches.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        rolled,
        BTreeSet::from(["shop/frontend", "shop/worker", "shop/api"]),
        "exactly the users of the changed objects are patched: {patches:?}"
    );
    let last = hashes(&informers);
    assert_eq!(last["other/frontend"], initial["other/frontend"]);
    assert_eq!(last["shop/plain"], None);
    let status = plugin.status();
    assert_eq!(status.calls_failed, 0, "{status:?}");

    stop(reconciler);
    informers.stop().await;
    Ok(())
}

/// Reconcile patches only when the hash changes: not twice for the same content, not for a
/// ConfigMap change outside its data; and it waits for a required ConfigMap rather than
/// hashing its absence (an optional one may be absent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_reload_patches_only_when_the_hash_changes() -> Result<()> {
    let server = MemoryServer::new();
    server
        .create(
            &config_maps(),
            &config_map("shop", "web-config", json!({"greeting": "hello"})),
        )
        .unwrap();
    server
        .create(
            &secrets(),
            &secret("shop", "db", json!({"password": "aHVudGVyMg=="})),
        )
        .unwrap();
    server
        .create(
            &deployments(),
            &deployment(
                "shop",
                "web",
                json!({
                    "volumes": [
                        {"name": "config", "configMap": {"name": "web-config"}},
                        {"name": "extra", "configMap": {"name": "maybe", "optional": true}},
                    ],
                    "containers": [{"name": "web", "image": "example.com/web:1",
                        "envFrom": [{"secretRef": {"name": "db"}}]}],
                }),
            ),
        )
        .unwrap();
    server
        .create(
            &deployments(),
            &deployment(
                "shop",
                "early",
                json!({"initContainers": [{"name": "init", "image": "example.com/init:1",
                    "env": [{"name": "MODE", "valueFrom":
                        {"configMapKeyRef": {"name": "later", "key": "mode"}}}]}]}),
            ),
        )
        .unwrap();
    let watched = [deployments(), config_maps(), secrets()];
    let cluster = Cluster::new(&server, watched.to_vec());
    let (informers, _receivers) = Informers::start(&server, &watched).await?;
    let plugin = load(
        "configmap-reload",
        r#"{"annotation": "kubeplug.dev/config-hash"}"#,
        &informers,
        cluster.clone(),
        reload_grants(),
    )
    .await?;
    let mut instance = plugin.instantiate().await?;
    let web = target(&deployments(), Some("shop"), "web");
    let early = target(&deployments(), Some("shop"), "early");

    // Reconciles `target` and returns the hashes it patched.
    async fn round(
        instance: &mut PluginInstance,
        cluster: &Cluster,
        target: &ObjectRef,
    ) -> Result<Vec<String>> {
        let before = cluster.count();
        reconcile_done(instance, target).await?;
        Ok(patched(&cluster.writes()[before..])?
            .into_iter()
            .map(|(key, hash)| {
                assert_eq!(key, target.key());
                hash
            })
            .collect())
    }
    let first = round(&mut instance, &cluster, &web).await?;
    assert_eq!(first.len(), 1, "the first reconcile writes the hash");
    informers
        .in_step(&server, &deployments(), "shop/web")
        .await?;
    assert_eq!(
        round(&mut instance, &cluster, &web).await?,
        Vec::<String>::new(),
        "same content, no patch"
    );

    let relabelled = json!({"metadata": {"name": "web-config", "namespace": "shop",
        "labels": {"touched": "yes"}}, "data": {"greeting": "hello"}});
    let written = server
        .update(&config_maps(), &relabelled.to_string())
        .unwrap();
    informers
        .caught_up(&config_maps(), "shop/web-config", written.resource_version)
        .await?;
    assert_eq!(
        round(&mut instance, &cluster, &web).await?,
        Vec::<String>::new(),
        "a label is not content"
    );

    let written = server
        .update(
            &secrets(),
            &secret("shop", "db", json!({"password": "c3dvcmRmaXNo"})),
        )
        .unwrap();
    informers
        .caught_up(&secrets(), "shop/db", written.resource_version)
        .await?;
    let second = round(&mut instance, &cluster, &web).await?;
    assert_eq!(second.len(), 1, "the Secret changed");
    assert_ne!(second, first);

    assert_eq!(
        round(&mut instance, &cluster, &early).await?,
        Vec::<String>::new(),
        "a required ConfigMap that does not exist is waited for"
    );
    let written = server
        .create(
            &config_maps(),
            &config_map("shop", "later", json!({"mode": "fast"})),
        )
        .unwrap();
    informers
        .caught_up(&config_maps(), "shop/later", written.resource_version)
        .await?;
    assert_eq!(round(&mut instance, &cluster, &early).await?.len(), 1);

    informers.stop().await;
    Ok(())
}

// namespace-defaults

fn namespace(name: &str, labels: Value) -> String {
    json!({"metadata": {"name": name, "labels": labels}}).to_string()
}

fn defaults_grants() -> Grants {
    Grants::default()
        .allow_write(gvk(&namespaces()), WriteVerb::Apply)
        .allow_write(gvk(&quotas()), WriteVerb::Apply)
}

/// One server-side apply a plugin made.
#[derive(Debug)]
struct Applied {
    kind: String,
    key: String,
    manifest: Value,
    force: bool,
    field_manager: String,
}

/// The applies of `writes`; fails on any other write.
fn applies(writes: &[Write]) -> Result<Vec<Applied>> {
    writes
        .iter()
        .map(|write| {
            let Write::Apply {
                target,
                json,
                force,
                field_manager,
            } = write
            else {
                bail!("namespace-defaults wrote something else than an apply: {write:?}");
            };
            Ok(Applied {
                kind: target.resource.kind.clone(),
                key: target.key(),
                manifest: serde_json::from_str(json)?,
                force: *force,
                field_manager: field_manager.clone(),
            })
        })
        .collect()
}

/// With the default settings: a new Namespace gets the label and the quota, a label
/// someone set to another value stays, the kube-* Namespaces are left alone, and a
/// deleted quota comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_defaults_label_and_quota_namespaces_and_restore_a_deleted_quota() -> Result<()> {
    const LABEL: &str = "pod-security.kubernetes.io/warn";
    let server = MemoryServer::new();
    for (name, labels) in [
        ("team-a", json!({})),
        ("team-b", json!({LABEL: "restricted"})),
        ("kube-system", json!({})),
        ("kube-public", json!({})),
    ] {
        server
            .create(&namespaces(), &namespace(name, labels))
            .unwrap();
    }
    let watched = [namespaces(), quotas()];
    let cluster = Cluster::new(&server, watched.to_vec());
    let (informers, receivers) = Informers::start(&server, &watched).await?;
    let plugin = load(
        "namespace-defaults",
        "{}",
        &informers,
        cluster.clone(),
        defaults_grants(),
    )
    .await?;
    let reconciler = drive(&plugin, receivers)?;

    let label = |name: &str| {
        informers
            .get(&namespaces(), name)
            .and_then(|ns| ns["metadata"]["labels"][LABEL].as_str().map(str::to_owned))
    };
    let quota = |ns: &str| informers.get(&quotas(), &format!("{ns}/namespace-defaults"));
    until(
        "team-a labelled, team-a and team-b with a quota",
        WAIT,
        || label("team-a").is_some() && quota("team-a").is_some() && quota("team-b").is_some(),
    )
    .await?;
    assert_eq!(label("team-a").as_deref(), Some("baseline"));
    assert_eq!(label("team-b").as_deref(), Some("restricted"), "not ours");
    let hard = json!({"pods": "100", "services": "20", "persistentvolumeclaims": "20",
        "services.loadbalancers": "2"});
    assert_eq!(quota("team-a").unwrap()["spec"]["hard"], hard);

    server
        .delete(
            &quotas(),
            &ObjectKey::new(Some("team-a"), "namespace-defaults"),
        )
        .unwrap();
    let gone = server.current_resource_version();
    until("the deleted quota restored", WAIT, || {
        informers
            .cache(&quotas())
            .get("team-a/namespace-defaults")
            .is_some_and(|q| q.resource_version() > gone)
    })
    .await
    .with_context(|| format!("the plugin's status: {:?}", plugin.status()))?;
    server
        .create(&namespaces(), &namespace("team-c", json!({})))
        .unwrap();
    until("the new team-c labelled and with a quota", WAIT, || {
        label("team-c").is_some() && quota("team-c").is_some()
    })
    .await?;

    let written = applies(&cluster.writes())?;
    let touched: BTreeSet<(&str, &str)> = written
        .iter()
        .map(|a| (a.kind.as_str(), a.key.as_str()))
        .collect();
    assert_eq!(
        touched,
        BTreeSet::from([
            ("Namespace", "team-a"),
            ("Namespace", "team-c"),
            ("ResourceQuota", "team-a/namespace-defaults"),
            ("ResourceQuota", "team-b/namespace-defaults"),
            ("ResourceQuota", "team-c/namespace-defaults"),
        ]),
    );
    let restores = written
        .iter()
        .filter(|a| a.kind == "ResourceQuota" && a.key == "team-a/namespace-defaults")
        .count();
    assert!(restores >= 2, "created, then restored: {restores}");
    for a in &written {
        assert_eq!(a.field_manager, "kubeplug/namespace-defaults");
        assert_eq!(a.manifest["apiVersion"], "v1");
        assert_eq!(a.manifest["kind"], a.kind.as_str());
        if a.kind == "ResourceQuota" {
            assert!(a.force, "{}: the quota is the plugin's own", a.key);
            assert_eq!(a.manifest["spec"]["hard"], hard);
        } else {
            assert!(!a.force, "{}: labels are defaults, never forced", a.key);
            assert_eq!(a.manifest["metadata"]["labels"], json!({LABEL: "baseline"}));
        }
    }
    let status = plugin.status();
    assert_eq!(status.calls_failed, 0, "{status:?}");

    stop(reconciler);
    informers.stop().await;
    Ok(())
}

/// Reconcile writes only what is missing or different: nothing twice, nothing for a
/// skipped or terminating Namespace, a label set to another value stays, and edited
/// limits are put back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_defaults_writes_only_what_is_missing() -> Result<()> {
    let server = MemoryServer::new();
    server
        .create(&namespaces(), &namespace("team-a", json!({})))
        .unwrap();
    server
        .create(&namespaces(), &namespace("sandbox", json!({})))
        .unwrap();
    let leaving = json!({"metadata": {"name": "leaving",
        "deletionTimestamp": "2026-01-01T00:00:00Z"}});
    server.create(&namespaces(), &leaving.to_string()).unwrap();
    let watched = [namespaces(), quotas()];
    let cluster = Cluster::new(&server, watched.to_vec());
    let (informers, _receivers) = Informers::start(&server, &watched).await?;
    let settings = json!({
        "labels": {"example.com/tier": "standard", "example.com/owner": "platform"},
        "quota_name": "limits",
        "quota_hard": {"pods": "10"},
        "skip_namespaces": ["sandbox"],
    });
    let plugin = load(
        "namespace-defaults",
        &settings.to_string(),
        &informers,
        cluster.clone(),
        defaults_grants(),
    )
    .await?;
    let mut instance = plugin.instantiate().await?;
    let ns = |name: &str| target(&namespaces(), None, name);

    async fn round(
        instance: &mut PluginInstance,
        cluster: &Cluster,
        informers: &Informers,
        target: &ObjectRef,
    ) -> Result<Vec<Applied>> {
        let before = cluster.count();
        reconcile_done(instance, target).await?;
        let written = applies(&cluster.writes()[before..])?;
        for a in &written {
            let resource = if a.kind == "Namespace" {
                namespaces()
            } else {
                quotas()
            };
            informers
                .in_step(&cluster.server, &resource, &a.key)
                .await?;
        }
        Ok(written)
    }

    for skipped in ["sandbox", "leaving"] {
        let written = round(&mut instance, &cluster, &informers, &ns(skipped)).await?;
        assert!(written.is_empty(), "{skipped}: {written:?}");
    }
    let written = round(&mut instance, &cluster, &informers, &ns("team-a")).await?;
    let keys: Vec<(&str, &str)> = written
        .iter()
        .map(|a| (a.kind.as_str(), a.key.as_str()))
        .collect();
    assert_eq!(
        keys,
        [("Namespace", "team-a"), ("ResourceQuota", "team-a/limits")]
    );
    assert_eq!(
        written[1].manifest["spec"]["hard"],
        json!({"pods": "10"}),
        "the configured limits"
    );
    let written = round(&mut instance, &cluster, &informers, &ns("team-a")).await?;
    assert!(written.is_empty(), "all in place: {written:?}");

    // Someone else's label value stays; the one missing default is applied, without the
    // other.
    let edited = json!({"metadata": {"name": "team-a", "labels": {"example.com/tier": "gold"}}});
    let version = server
        .update(&namespaces(), &edited.to_string())
        .unwrap()
        .resource_version;
    informers
        .caught_up(&namespaces(), "team-a", version)
        .await?;
    let written = round(&mut instance, &cluster, &informers, &ns("team-a")).await?;
    assert_eq!(written.len(), 1, "{written:?}");
    assert_eq!(
        written[0].manifest["metadata"]["labels"],
        json!({"example.com/owner": "platform"})
    );

    // Edited limits are put back.
    let mut quota = informers
        .get(&quotas(), "team-a/limits")
        .context("the quota")?;
    quota["spec"]["hard"] = json!({"pods": "999"});
    let version = server
        .update(&quotas(), &quota.to_string())
        .unwrap()
        .resource_version;
    informers
        .caught_up(&quotas(), "team-a/limits", version)
        .await?;
    let written = round(&mut instance, &cluster, &informers, &ns("team-a")).await?;
    assert_eq!(written.len(), 1, "{written:?}");
    assert_eq!(
        informers.get(&quotas(), "team-a/limits").unwrap()["spec"]["hard"],
        json!({"pods": "10"})
    );

    informers.stop().await;
    Ok(())
}
