//! Shared fixtures: built guests, informers over the in-memory server, a recording cluster.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use kubeplug_informer::informer::{HandlerOptions, SharedIndexInformer};
use kubeplug_informer::listener::ListenerReceiver;
use kubeplug_informer::object::ObjectDecoder;
use kubeplug_informer::reflector::ReflectorConfig;
use kubeplug_informer::resource::Resource;
use kubeplug_memory::MemoryServer;
use kubeplug_runtime::view::BoxFuture;
use kubeplug_runtime::{
    ClusterWriter, Grants, Gvk, IndexerMap, Plugin, PluginLimits, PluginSpec, Runtime,
    RuntimeConfig, Write, WriteError,
};
use serde_json::Value;

/// Builds every test guest once per test binary (what `cargo xtask build-plugins` does) and
/// returns the path of `name`'s component. Fails with the install command when the
/// wasm32-wasip2 target is missing.
pub(crate) fn guest(name: &str) -> Result<PathBuf> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let layout = xtask::Layout::from_manifest_dir();
    BUILT
        .get_or_init(|| {
            xtask::build_plugins(&layout, &[])
                .map(drop)
                .map_err(|e| format!("{e:#}"))
        })
        .clone()
        .map_err(|e| anyhow!("building the test guests: {e}"))?;
    Ok(layout.test_output_dir().join(format!("{name}.wasm")))
}

pub(crate) fn pods() -> Resource {
    Resource::new("", "v1", "Pod", "pods", true)
}

pub(crate) fn config_maps() -> Resource {
    Resource::new("", "v1", "ConfigMap", "configmaps", true)
}

pub(crate) fn gvk(resource: &Resource) -> Gvk {
    Gvk::new(&resource.group, &resource.version, &resource.kind)
}

pub(crate) fn observations() -> Gvk {
    Gvk::new("test.kubeplug.io", "v1", "Observation")
}

/// A Pod in namespace `ns` with `labels` and configMap volumes `cms`.
pub(crate) fn pod(name: &str, labels: &[(&str, &str)], cms: &[&str]) -> String {
    let labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Value::from(*v)))
        .collect();
    let volumes: Vec<Value> = cms
        .iter()
        .map(|cm| serde_json::json!({"name": cm, "configMap": {"name": cm}}))
        .collect();
    serde_json::json!({
        "metadata": {"name": name, "namespace": "ns", "labels": labels},
        "spec": {"volumes": volumes},
    })
    .to_string()
}

/// A started informer on `resource` with `handlers` listeners.
pub(crate) fn informer(
    server: &MemoryServer,
    resource: Resource,
    handlers: usize,
) -> (SharedIndexInformer, Vec<ListenerReceiver>) {
    informer_with(server, resource, handlers, &HandlerOptions::default())
}

/// A started informer on `resource` with `handlers` listeners of `options`.
pub(crate) fn informer_with(
    server: &MemoryServer,
    resource: Resource,
    handlers: usize,
    options: &HandlerOptions,
) -> (SharedIndexInformer, Vec<ListenerReceiver>) {
    let source = Arc::new(server.lister_watcher(resource.clone(), None, None, None));
    let informer = SharedIndexInformer::new(
        source,
        ObjectDecoder::new(resource),
        ReflectorConfig::default(),
    );
    let receivers = (0..handlers)
        .map(|_| informer.add_handler(options.clone()))
        .collect();
    informer.start();
    (informer, receivers)
}

/// Records every write; counts overlapping `start`/`end` observations per key.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    pub(crate) writes: Mutex<Vec<(String, Write)>>,
    in_flight: Mutex<HashMap<String, i64>>,
    pub(crate) overlaps: Mutex<u64>,
}

impl Recorder {
    /// The JSON documents of every created Observation, in order.
    pub(crate) fn observations(&self) -> Vec<Value> {
        self.writes
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(_, w)| match w {
                Write::Create { resource, json, .. } if *resource == observations() => {
                    serde_json::from_str(json).ok()
                }
                _ => None,
            })
            .collect()
    }
}

impl ClusterWriter for Recorder {
    fn write<'a>(
        &'a self,
        plugin: &'a str,
        write: Write,
    ) -> BoxFuture<'a, Result<String, WriteError>> {
        Box::pin(async move {
            if let Write::Create { json, .. } = &write {
                let doc: Value =
                    serde_json::from_str(json).map_err(|e| WriteError::Invalid(e.to_string()))?;
                if let (Some(key), Some(phase)) = (doc["key"].as_str(), doc["phase"].as_str()) {
                    let mut in_flight = self.in_flight.lock().unwrap();
                    let n = in_flight.entry(key.to_owned()).or_default();
                    *n += if phase == "start" { 1 } else { -1 };
                    if *n > 1 {
                        *self.overlaps.lock().unwrap() += 1;
                    }
                }
            }
            let json = match &write {
                Write::Create { json, .. } | Write::Apply { json, .. } => json.clone(),
                _ => String::new(),
            };
            self.writes.lock().unwrap().push((plugin.to_owned(), write));
            Ok(json)
        })
    }
}

pub(crate) fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig::default()).expect("engine")
}

/// Loads guest `name` with these caches (granted their reads), writer, grants and limits.
pub(crate) async fn load(
    runtime: &Runtime,
    name: &str,
    caches: BTreeMap<Gvk, kubeplug_informer::indexer::Indexer>,
    writer: Arc<dyn ClusterWriter>,
    grants: Grants,
    limits: PluginLimits,
) -> Result<Arc<Plugin>> {
    let spec = spec(name, "{}", caches, writer, grants, limits)?;
    Ok(Arc::new(runtime.load(spec).await?))
}

/// The load request for guest `name`, granted `grants` and the reads of every type in
/// `caches` (what the test lets it see; a plugin reads nothing it is not granted).
pub(crate) fn spec(
    name: &str,
    settings: &str,
    caches: BTreeMap<Gvk, kubeplug_informer::indexer::Indexer>,
    writer: Arc<dyn ClusterWriter>,
    grants: Grants,
    limits: PluginLimits,
) -> Result<PluginSpec> {
    let grants = caches.keys().fold(grants, |grants, resource| {
        grants.allow_read(resource.clone())
    });
    exact_spec(name, settings, caches, writer, grants, limits)
}

/// The load request for guest `name`, granted exactly `grants`.
pub(crate) fn exact_spec(
    name: &str,
    settings: &str,
    caches: BTreeMap<Gvk, kubeplug_informer::indexer::Indexer>,
    writer: Arc<dyn ClusterWriter>,
    grants: Grants,
    limits: PluginLimits,
) -> Result<PluginSpec> {
    let path = guest(name)?;
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(PluginSpec {
        path,
        bytes,
        settings: settings.into(),
        grants,
        limits,
        cache: Arc::new(IndexerMap(caches)),
        writer,
    })
}

/// Polls `check` every 10 ms until it holds; fails with `what` after `timeout`.
pub(crate) async fn until(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> bool,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while !check() {
        if Instant::now() > deadline {
            return Err(anyhow!("timed out after {timeout:?} waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// A plugin-defined counter's value (0 when never set).
pub(crate) fn counter(plugin: &Plugin, name: &str) -> u64 {
    plugin
        .metrics()
        .snapshot()
        .get(&(name.to_owned(), Vec::new()))
        .map_or(0, |v| match v {
            kubeplug_runtime::status::MetricValue::Counter(n) => *n,
            kubeplug_runtime::status::MetricValue::Gauge(g) => *g as u64,
        })
}
