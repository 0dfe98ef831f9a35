//! Hot reload end to end: real files in a plugins directory, the watcher, the load pipeline
//! and the swap, with informers over the local cluster and recorder guests that report
//! every delta they handle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use kubeplug_informer::factory::{FactoryError, Form, SharedInformerFactory, SourceProvider};
use kubeplug_informer::reflector::ReflectorConfig;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::source::{
    ListPage, ListRequest, ListerWatcher, SourceError, Status, WatchRequest, WatchStream,
};
use kubeplug_local::LocalCluster;
use kubeplug_runtime::view::BoxFuture;
use kubeplug_runtime::{ClusterWriter, Gvk, Runtime, RuntimeConfig, Write, WriteError};
use kubeplug_workqueue::WorkqueueMetrics;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::config::Config;

/// Builds the test guests once per test binary.
fn guest(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let layout = xtask::Layout::from_manifest_dir();
    let names = [
        "recorder",
        "recorder-v2",
        "recorder-pods",
        "recorder-pods-json",
        "recorder-unknown-kind",
        "recorder-describe-trap",
        "recorder-describe-slow",
        "label-reader",
        "reconciler",
        "hostile-secrets",
        "field-reader",
    ]
    .map(String::from);
    BUILT
        .get_or_init(|| {
            xtask::build_plugins(&layout, &names)
                .map(drop)
                .map_err(|e| format!("{e:#}"))
        })
        .clone()
        .expect("building the test guests");
    layout.test_output_dir().join(format!("{name}.wasm"))
}

fn guest_bytes(name: &str) -> Vec<u8> {
    std::fs::read(guest(name)).unwrap()
}

/// One delta a recorder guest handled.
#[derive(Debug, Clone)]
struct Handled {
    at: Instant,
    version: String,
    key: String,
    resource_version: u64,
}

/// The cluster writer of these tests: collects the recorders' `Handled` Events, the
/// keys whose reconcile the `reconciler` guest finished, and the `field-reader` guest's
/// observations. A write waits while a test holds `gate` for writing (a cluster that
/// stopped answering), and fails while the last field is set (a cluster that refuses).
#[derive(Default)]
struct Recorded(
    Mutex<Vec<Handled>>,
    Mutex<BTreeSet<String>>,
    Arc<tokio::sync::RwLock<()>>,
    Mutex<Vec<serde_json::Value>>,
    std::sync::atomic::AtomicBool,
);

impl Recorded {
    fn all(&self) -> Vec<Handled> {
        self.0.lock().unwrap().clone()
    }

    fn reconciled(&self) -> BTreeSet<String> {
        self.1.lock().unwrap().clone()
    }
}

impl ClusterWriter for Recorded {
    fn write<'a>(
        &'a self,
        _plugin: &'a str,
        write: Write,
    ) -> BoxFuture<'a, Result<String, WriteError>> {
        Box::pin(async move {
            let _open = self.2.read().await;
            if self.4.load(Ordering::Relaxed) {
                return Err(WriteError::Unavailable(
                    "the test refuses writes".to_owned(),
                ));
            }
            self.record(write);
            Ok(String::new())
        })
    }
}

impl Recorded {
    fn record(&self, write: Write) {
        if let Write::RecordEvent {
            reason, message, ..
        } = &write
            && reason == "Handled"
        {
            let at = Instant::now();
            let mut words = message.split(' ');
            let version = words.next().unwrap_or_default().to_owned();
            let mut records = self.0.lock().unwrap();
            for word in words {
                let (key, rv) = word.rsplit_once('@').expect("key@rv");
                records.push(Handled {
                    at,
                    version: version.clone(),
                    key: key.to_owned(),
                    resource_version: rv.parse().unwrap(),
                });
            }
        }
        if let Write::Create { json, .. } = &write {
            let observation: serde_json::Value = serde_json::from_str(json).unwrap();
            if observation["phase"] == "end" {
                let key = observation["key"].as_str().unwrap().to_owned();
                self.1.lock().unwrap().insert(key);
            }
            if observation.get("projected").is_some() {
                self.3.lock().unwrap().push(observation);
            }
        }
    }
}

const CONFIG: &str = r#"
[defaults]
call_deadline_ms = 300

# These tests are not about reads: every plugin reads every type (Secrets apart).
[defaults.grants]
read = ["*"]

[plugins.recorder.grants]
write = { "v1/ConfigMap" = ["record-event"] }

[plugins.reconciler.grants]
write = { "test.kubeplug.io/v1/Observation" = ["create"] }
"#;

fn config_maps() -> Resource {
    Resource::new("", "v1", "ConfigMap", "configmaps", true)
}

fn pods() -> Resource {
    Resource::new("", "v1", "Pod", "pods", true)
}

/// Resources (by plural) the harness's API server refuses to list or watch, as an API
/// server does for a service account without the RBAC rule: `403 Forbidden`.
type Refused = Arc<Mutex<BTreeSet<String>>>;

/// The local cluster as the informers' source, in both forms (whole objects and metadata
/// alone), refusing the resources of `refused`.
struct Refusing {
    cluster: LocalCluster,
    refused: Refused,
}

impl SourceProvider for Refusing {
    fn lister_watcher(&self, key: &InformerKey) -> Result<Arc<dyn ListerWatcher>, FactoryError> {
        Ok(Arc::new(RefusingSource {
            inner: self.cluster.lister_watcher(key)?,
            plural: key.resource.plural.clone(),
            refused: self.refused.clone(),
        }))
    }

    fn metadata_lister_watcher(
        &self,
        key: &InformerKey,
    ) -> Result<Option<Arc<dyn ListerWatcher>>, FactoryError> {
        let Some(inner) = self.cluster.metadata_lister_watcher(key)? else {
            return Ok(None);
        };
        Ok(Some(Arc::new(RefusingSource {
            inner,
            plural: key.resource.plural.clone(),
            refused: self.refused.clone(),
        })))
    }
}

struct RefusingSource {
    inner: Arc<dyn ListerWatcher>,
    plural: String,
    refused: Refused,
}

impl RefusingSource {
    fn check(&self) -> Result<(), SourceError> {
        if self.refused.lock().unwrap().contains(&self.plural) {
            return Err(SourceError::status(Status::new(
                403,
                "Forbidden",
                format!("{} is forbidden: the harness refuses it", self.plural),
            )));
        }
        Ok(())
    }
}

impl ListerWatcher for RefusingSource {
    fn list(
        &self,
        request: ListRequest,
    ) -> futures::future::BoxFuture<'_, Result<ListPage, SourceError>> {
        match self.check() {
            Ok(()) => self.inner.list(request),
            Err(error) => Box::pin(async { Err(error) }),
        }
    }

    fn watch(
        &self,
        request: WatchRequest,
    ) -> futures::future::BoxFuture<'_, Result<WatchStream, SourceError>> {
        match self.check() {
            Ok(()) => self.inner.watch(request),
            Err(error) => Box::pin(async { Err(error) }),
        }
    }

    fn supports_streaming_list(&self) -> bool {
        self.inner.supports_streaming_list()
    }
}

/// A host watching a temporary plugins directory, over an empty local cluster.
struct Harness {
    plugins: tempfile::TempDir,
    cluster_dir: tempfile::TempDir,
    _artifacts: tempfile::TempDir,
    cluster: LocalCluster,
    factory: SharedInformerFactory,
    runtime: Runtime,
    host: Arc<PluginHost>,
    recorded: Arc<Recorded>,
    cancel: CancellationToken,
    watching: tokio::task::JoinHandle<()>,
    /// Every resourceVersion written per ConfigMap key, in order.
    written: Arc<Mutex<BTreeMap<String, Vec<u64>>>>,
}

impl Harness {
    async fn start(settle: Duration) -> Self {
        Self::start_with(DirConfig {
            settle,
            ..DirConfig::default()
        })
        .await
    }

    async fn start_with(dir_config: DirConfig) -> Self {
        Self::configured(dir_config, CONFIG).await
    }

    /// A harness whose host reads the configuration `config` (TOML).
    async fn configured(dir_config: DirConfig, config: &str) -> Self {
        Self::with_files(dir_config, config, &[]).await
    }

    /// A harness whose plugins directory holds `files` (name, content) before the host
    /// first looks at it, all settled: they load as one batch.
    async fn with_files(dir_config: DirConfig, config: &str, files: &[(&str, Vec<u8>)]) -> Self {
        Self::build(
            dir_config,
            config,
            files,
            Refused::default(),
            None,
            |host| host,
        )
        .await
    }

    /// The most general harness: its API server refuses `refused`, the host watches only
    /// `namespace` if given, and replays the cache on every swap if `replay_on_swap`.
    async fn build(
        dir_config: DirConfig,
        config: &str,
        files: &[(&str, Vec<u8>)],
        refused: Refused,
        namespace: Option<&str>,
        tune: impl FnOnce(PluginHost) -> PluginHost,
    ) -> Self {
        let cluster_dir = tempfile::tempdir().unwrap();
        let plugins = tempfile::tempdir().unwrap();
        for (name, bytes) in files {
            std::fs::write(plugins.path().join(name), bytes).unwrap();
        }
        if !files.is_empty() {
            tokio::time::sleep(dir_config.settle * 2).await;
        }
        let artifacts = tempfile::tempdir().unwrap();
        let (cluster, _) = LocalCluster::open(cluster_dir.path()).unwrap();
        let provider = Refusing {
            cluster: cluster.clone(),
            refused,
        };
        let factory = SharedInformerFactory::new(Arc::new(provider), ReflectorConfig::default());
        let runtime = Runtime::new(RuntimeConfig {
            artifact_cache: Some(artifacts.path().join("cache")),
            ..RuntimeConfig::default()
        })
        .unwrap();
        let resolving = cluster.clone();
        let resolve: Resolver =
            Arc::new(move |gvk: &Gvk| resolving.resolve(&gvk.api_version(), &gvk.kind));
        let recorded = Arc::new(Recorded::default());
        let config = Config::parse(config).unwrap();
        let host = Arc::new(tune(PluginHost::new(
            runtime.clone(),
            factory.clone(),
            resolve,
            recorded.clone(),
            WorkqueueMetrics::register(&mut prometheus_client::registry::Registry::default()),
            config,
            namespace.map(str::to_owned),
        )));
        let dir = PluginDir::new(plugins.path(), dir_config).unwrap();
        let cancel = CancellationToken::new();
        let applying = host.clone();
        let watching = tokio::spawn(watch(dir, cancel.clone(), move |changes| {
            let host = applying.clone();
            async move { host.apply(changes).await }
        }));
        Self {
            plugins,
            cluster_dir,
            _artifacts: artifacts,
            cluster,
            factory,
            runtime,
            host,
            recorded,
            cancel,
            watching,
            written: Arc::default(),
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.plugins.path().join(name)
    }

    /// The identity of the plugin in file `name`.
    fn id(&self, name: &str) -> PluginId {
        PluginId::File(self.file(name))
    }

    /// Publishes `bytes` as `file` the atomic way: write aside, rename into place.
    fn publish(&self, file: &str, bytes: &[u8]) -> Instant {
        let aside = self.file(&format!(".{file}.tmp"));
        std::fs::write(&aside, bytes).unwrap();
        std::fs::rename(&aside, self.file(file)).unwrap();
        Instant::now()
    }

    fn report(&self, file: &str) -> Option<PluginReport> {
        let path = self.file(file);
        self.host.reports().into_iter().find(|r| r.file == path)
    }

    fn loads(&self) -> (u64, u64) {
        let counts = self.host.reload_counts();
        (
            counts.success.load(Ordering::Relaxed),
            counts.failure.load(Ordering::Relaxed),
        )
    }

    /// Creates or updates ConfigMap `default/<name>` and remembers the version written.
    fn write_config_map(&self, name: &str, value: u64) {
        self.write_padded_config_map(name, value, 0);
    }

    /// [`write_config_map`](Self::write_config_map), with `padding` more bytes in an
    /// annotation: metadata, so that a metadata-only informer holds them too.
    fn write_padded_config_map(&self, name: &str, value: u64, padding: usize) {
        let pad = "x".repeat(padding);
        let json = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"default","annotations":{{"pad":"{pad}"}}}},"data":{{"n":"{value}"}}}}"#
        );
        let written = self.cluster.server().apply(&config_maps(), &json).unwrap();
        self.written
            .lock()
            .unwrap()
            .entry(format!("default/{name}"))
            .or_default()
            .push(written.resource_version);
    }

    /// Updates `count` ConfigMaps round-robin every millisecond until the token fires.
    fn churn(
        self: &Arc<Self>,
        count: usize,
        stop: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.is_cancelled() {
                this.write_config_map(&format!("cm-{}", n as usize % count), n);
                n += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    }

    async fn stop(self) {
        self.cancel.cancel();
        self.watching.await.unwrap();
        self.host.stop().await;
        self.factory.shutdown().await;
    }
}

async fn eventually(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

const LONG: Duration = Duration::from_secs(60);

/// Every key's handled resourceVersions, across all versions of the plugin, are exactly the
/// versions written from the first one handled on: no gap, no duplicate.
fn assert_exactly_once(harness: &Harness) -> usize {
    let written = harness.written.lock().unwrap().clone();
    let mut handled: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for record in harness.recorded.all() {
        handled
            .entry(record.key)
            .or_default()
            .push(record.resource_version);
    }
    assert_eq!(
        handled.keys().collect::<Vec<_>>(),
        written.keys().collect::<Vec<_>>()
    );
    let mut total = 0;
    for (key, seen) in &handled {
        let all = &written[key];
        let from = all
            .iter()
            .position(|rv| *rv == seen[0])
            .unwrap_or_else(|| panic!("{key}: first handled version {} never written", seen[0]));
        assert_eq!(
            seen,
            &all[from..],
            "{key}: handled versions differ from the versions written"
        );
        total += seen.len();
    }
    total
}

/// Waits until every key's last written version was handled.
async fn drained(harness: &Harness) {
    eventually("every write is handled", LONG, || {
        let written = harness.written.lock().unwrap().clone();
        let records = harness.recorded.all();
        written.iter().all(|(key, rvs)| {
            records
                .iter()
                .any(|r| &r.key == key && Some(&r.resource_version) == rvs.last())
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_in_replace_under_churn_and_remove() {
    let harness = Arc::new(Harness::start(Duration::from_millis(100)).await);
    for i in 0..10 {
        harness.write_config_map(&format!("cm-{i}"), 0);
    }
    harness.publish("recorder.wasm", &guest_bytes("recorder"));
    eventually("the first version handles the initial list", LONG, || {
        harness.recorded.all().len() >= 10
    })
    .await;
    let report = harness.report("recorder.wasm").unwrap();
    assert_eq!(report.state, "running");
    assert_eq!(report.version.as_deref(), Some("0.1.0"));

    let stop = CancellationToken::new();
    let churn = harness.churn(10, stop.clone());
    for (round, next) in ["recorder-v2", "recorder", "recorder-v2"]
        .iter()
        .enumerate()
    {
        let expected = if round % 2 == 0 { "0.2.0" } else { "0.1.0" };
        let renamed = harness.publish("recorder.wasm", &guest_bytes(next));
        eventually("the new version handles a delta", LONG, || {
            harness
                .recorded
                .all()
                .iter()
                .any(|r| r.version == expected && r.at > renamed)
        })
        .await;
    }
    stop.cancel();
    churn.await.unwrap();
    drained(&harness).await;
    let handled = assert_exactly_once(&harness);
    assert!(handled > 10, "churn was handled: {handled}");
    let versions: Vec<String> =
        harness
            .recorded
            .all()
            .into_iter()
            .map(|r| r.version)
            .fold(Vec::new(), |mut runs, v| {
                if runs.last() != Some(&v) {
                    runs.push(v);
                }
                runs
            });
    assert_eq!(
        versions,
        ["0.1.0", "0.2.0", "0.1.0", "0.2.0"],
        "one run per version"
    );
    let report = harness.report("recorder.wasm").unwrap();
    assert_eq!(
        report.events_delivered as usize, handled,
        "totals survive swaps"
    );
    assert_eq!(harness.loads(), (4, 0));

    std::fs::remove_file(harness.file("recorder.wasm")).unwrap();
    eventually("the plugin is unloaded", LONG, || {
        harness.host.reports().is_empty()
    })
    .await;
    eventually("the unused informer stops", LONG, || {
        harness.factory.keys().is_empty()
    })
    .await;
    let before = harness.recorded.all().len();
    harness.write_config_map("cm-0", 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        harness.recorded.all().len(),
        before,
        "no delivery after removal"
    );
    let live = harness.runtime.live();
    assert_eq!((live.plugins, live.instances), (0, 0), "{live:?}");
    Arc::into_inner(harness).unwrap().stop().await;
}

/// The component `bytes` as if built against `version` of `kubeplug:plugin`: every
/// `kubeplug:plugin/<interface>@0.2.0` it names, imports, exports and the type information
/// beside them, renamed to `@<version>` (the same length, so nothing else moves).
fn with_interface_version(mut bytes: Vec<u8>, version: &str) -> Vec<u8> {
    let (package, served) = (b"kubeplug:plugin/", b"@0.2.0");
    assert_eq!(version.len(), 5, "a version as long as the served one");
    let mut renamed = 0;
    let mut at = 0;
    while let Some(offset) = bytes[at..]
        .windows(package.len())
        .position(|w| w == package)
    {
        let name = at + offset + package.len();
        let interface = bytes[name..]
            .iter()
            .take_while(|b| b.is_ascii_lowercase() || **b == b'-')
            .count();
        let suffix = name + interface;
        if bytes[suffix..].starts_with(served) {
            bytes[suffix + 1..suffix + served.len()].copy_from_slice(version.as_bytes());
            renamed += 1;
        }
        at = suffix;
    }
    assert!(renamed > 0, "the guest names kubeplug:plugin interfaces");
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_replacement_leaves_the_old_version_serving() {
    let harness = Harness::start(Duration::from_millis(100)).await;
    harness.write_config_map("cm-0", 0);
    harness.publish("recorder.wasm", &guest_bytes("recorder"));
    eventually("the plugin runs", LONG, || {
        !harness.recorded.all().is_empty()
    })
    .await;
    let good = harness.report("recorder.wasm").unwrap().hash;

    let recorder = guest_bytes("recorder");
    let broken: Vec<(&str, Vec<u8>, &[&str])> = vec![
        ("empty", Vec::new(), &["compile", "the file is empty"]),
        (
            "truncated",
            recorder[..recorder.len() / 2].to_vec(),
            &["compile"],
        ),
        (
            "not wasm",
            b"#!/bin/sh\necho hi\n".to_vec(),
            &["compile", "not a WebAssembly binary"],
        ),
        (
            "core module",
            b"\0asm\x01\0\0\0".to_vec(),
            &["compile", "core WebAssembly module, not a component"],
        ),
        (
            "missing every export",
            b"\0asm\x0d\0\x01\0".to_vec(),
            &[
                "link against the kubeplug:plugin world",
                "kubeplug:plugin/handler@0.2.0",
            ],
        ),
        (
            "another interface minor",
            with_interface_version(recorder.clone(), "0.9.0"),
            &[
                "built against kubeplug:plugin@0.9.0",
                "this host serves kubeplug:plugin@0.2.0",
            ],
        ),
        (
            "trapping in describe",
            guest_bytes("recorder-describe-trap"),
            &["describe", "trapped", "unreachable"],
        ),
        (
            "slow in describe",
            guest_bytes("recorder-describe-slow"),
            &["describe", "exceeded its 300ms deadline"],
        ),
        (
            "asking for an unknown kind",
            guest_bytes("recorder-unknown-kind"),
            &["resolve", "example.com/v1/Widget", "does not serve"],
        ),
    ];
    for (n, (what, bytes, expected)) in broken.into_iter().enumerate() {
        harness.publish("recorder.wasm", &bytes);
        eventually(what, LONG, || harness.loads().1 == n as u64 + 1).await;
        let report = harness.report("recorder.wasm").unwrap();
        assert_eq!(report.state, "running", "{what}: the old version serves");
        assert_eq!(report.hash, good, "{what}: the old version serves");
        assert_eq!(report.version.as_deref(), Some("0.1.0"));
        let error = report.last_error.unwrap_or_default();
        assert!(
            error.contains(&harness.file("recorder.wasm").display().to_string()),
            "{what}: {error} names the file"
        );
        for part in expected {
            assert!(
                error.contains(part),
                "{what}: {error:?} should say {part:?}"
            );
        }
        let before = harness.recorded.all().len();
        harness.write_config_map("cm-0", n as u64 + 1);
        eventually("the old version still handles deltas", LONG, || {
            harness.recorded.all().len() > before
        })
        .await;
    }
    assert_eq!(harness.loads().0, 1);
    // A working file again clears the error; built against a later patch of the interface,
    // it links all the same.
    let later_patch = with_interface_version(guest_bytes("recorder-v2"), "0.2.7");
    harness.publish("recorder.wasm", &later_patch);
    eventually("the fixed file loads", LONG, || harness.loads().0 == 2).await;
    let report = harness.report("recorder.wasm").unwrap();
    assert_eq!(report.version.as_deref(), Some("0.2.0"));
    assert_eq!(report.last_error, None);
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_written_slowly_in_place_is_loaded_once_complete() {
    let harness = Harness::start(Duration::from_millis(300)).await;
    harness.write_config_map("cm-0", 0);
    let bytes = guest_bytes("recorder");
    let path = harness.file("recorder.wasm");
    {
        use std::io::Write as _;
        let mut file = std::fs::File::create(&path).unwrap();
        for chunk in bytes.chunks(bytes.len() / 8 + 1) {
            file.write_all(chunk).unwrap();
            file.flush().unwrap();
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    }
    eventually("the plugin runs", LONG, || {
        !harness.recorded.all().is_empty()
    })
    .await;
    assert_eq!(harness.loads(), (1, 0), "loaded once, never half-written");
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_volume_swap_reloads_exactly_the_changed_plugins() {
    let harness = Harness::start(Duration::from_millis(100)).await;
    let root = harness.plugins.path();
    let version = |dir: &str, recorder: &str| {
        std::fs::create_dir(root.join(dir)).unwrap();
        std::fs::write(root.join(dir).join("recorder.wasm"), guest_bytes(recorder)).unwrap();
        std::fs::write(
            root.join(dir).join("label-reader.wasm"),
            guest_bytes("label-reader"),
        )
        .unwrap();
    };
    version("..2026_11_29_a", "recorder");
    std::os::unix::fs::symlink("..2026_11_29_a", root.join("..data_tmp")).unwrap();
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    for file in ["recorder.wasm", "label-reader.wasm"] {
        std::os::unix::fs::symlink(format!("..data/{file}"), root.join(file)).unwrap();
    }
    eventually("both plugins run", LONG, || harness.loads() == (2, 0)).await;
    let reader_loaded = harness.report("label-reader.wasm").unwrap().loaded_at_ms;

    version("..2026_11_29_b", "recorder-v2");
    std::os::unix::fs::symlink("..2026_11_29_b", root.join("..data_tmp")).unwrap();
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    std::fs::remove_dir_all(root.join("..2026_11_29_a")).unwrap();
    eventually("the changed plugin reloads", LONG, || {
        harness.loads() == (3, 0)
    })
    .await;
    let recorder = harness.report("recorder.wasm").unwrap();
    assert_eq!(recorder.version.as_deref(), Some("0.2.0"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        harness.loads(),
        (3, 0),
        "the unchanged plugin is not reloaded"
    );
    assert_eq!(
        harness.report("label-reader.wasm").unwrap().loaded_at_ms,
        reader_loaded
    );

    // A link that leaves the directory is refused; the version serving stays.
    // Renamed over the old link, so that no scan sees the file missing in between.
    std::os::unix::fs::symlink("/etc/passwd", root.join(".escape")).unwrap();
    std::fs::rename(root.join(".escape"), root.join("recorder.wasm")).unwrap();
    eventually("the escaping link is refused", LONG, || {
        harness.loads().1 == 1
    })
    .await;
    let recorder = harness.report("recorder.wasm").unwrap();
    assert_eq!(recorder.state, "running");
    assert_eq!(recorder.version.as_deref(), Some("0.2.0"));
    assert!(
        recorder
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("outside the plugins directory")),
        "{recorder:?}"
    );
    harness.stop().await;
}

/// The swap with different subscriptions: new registrations, the cache replayed as initial
/// adds, the old informer stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_with_other_subscriptions_gets_new_registrations() {
    let harness = Harness::start(Duration::from_millis(100)).await;
    harness.write_config_map("cm-0", 0);
    harness.publish("recorder.wasm", &guest_bytes("recorder"));
    eventually("the recorder runs", LONG, || {
        !harness.recorded.all().is_empty()
    })
    .await;
    assert_eq!(harness.factory.keys().len(), 1);
    harness.publish("recorder.wasm", &guest_bytes("recorder-pods"));
    eventually("the version on Pods replaced it", LONG, || {
        harness.loads() == (2, 0)
    })
    .await;
    let keys = harness.factory.keys();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(
        keys[0].resource.kind, "Pod",
        "the ConfigMap informer stopped"
    );
    harness.stop().await;
}

/// Issue 41: a plugin that reads a type only through one subscription reads that
/// subscription's informer, as controller-runtime's per-object cache selectors do: a
/// selected subscription's cache holds only what it selects, and no second, unselected
/// informer of the type starts for its reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selected_subscription_reads_only_what_it_selects() {
    let config = format!(
        "{CONFIG}\n[plugins.field-reader]\n\
         settings = {{ cache_reads = [[\"node\", \"spec.nodeName\"]], label_selector = \"app=web\" }}\n\
         [plugins.field-reader.grants]\n\
         write = {{ \"test.kubeplug.io/v1/Observation\" = [\"create\"] }}\n"
    );
    let harness = Harness::configured(settled(), &config).await;
    for (name, app) in [("web", "web"), ("db", "db")] {
        let json = format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"default","labels":{{"app":"{app}"}}}},"spec":{{"nodeName":"node-{name}"}}}}"#
        );
        harness.cluster.server().apply(&pods(), &json).unwrap();
    }
    harness.publish("field-reader.wasm", &guest_bytes("field-reader"));
    eventually("the field reader observed the web Pod", LONG, || {
        !harness.recorded.3.lock().unwrap().is_empty()
    })
    .await;
    let observation = harness.recorded.3.lock().unwrap()[0].clone();
    assert_eq!(observation["key"], "default/web", "{observation}");
    assert_eq!(observation["cached"]["node"], "node-web", "{observation}");
    let listed: Vec<&str> = observation["listed"]
        .as_array()
        .unwrap_or_else(|| panic!("a list: {observation}"))
        .iter()
        .map(|o| o["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        listed,
        ["default/web"],
        "only what the subscription selects"
    );
    let pod_informers: Vec<String> = harness
        .factory
        .keys()
        .into_iter()
        .filter(|key| key.resource.kind == "Pod")
        .map(|key| key.to_string())
        .collect();
    assert_eq!(pod_informers.len(), 1, "{pod_informers:?}");
    assert!(pod_informers[0].contains("app=web"), "{pod_informers:?}");
    harness.stop().await;
}

/// Issue 41: a swap that changes a subscription's form (metadata alone to whole objects)
/// registers on the other form's informer: the new version is handed the cache as initial
/// adds, then every change. A plugin on the old form, whose needs did not change, sees
/// nothing of it: no replay, no repeated event, no relist of its informer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_that_changes_the_form_replays_and_its_neighbour_sees_nothing() {
    let harness = Harness::configured(settled(), CONFIG).await;
    let count = 10;
    let pod = |name: &str| {
        format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"default"}}}}"#
        )
    };
    for i in 0..count {
        harness
            .cluster
            .server()
            .apply(&pods(), &pod(&format!("p-{i}")))
            .unwrap();
    }
    let by = |version: &str| -> Vec<String> {
        let records = harness.recorded.all();
        let of_version = records.into_iter().filter(|r| r.version == version);
        of_version.map(|r| r.key).collect()
    };
    let neighbour = || {
        harness
            .report("label-reader.wasm")
            .map_or(0, |r| r.events_delivered)
    };
    harness.publish("label-reader.wasm", &guest_bytes("label-reader"));
    harness.publish("recorder.wasm", &guest_bytes("recorder-pods"));
    eventually("both saw every Pod", LONG, || {
        by("0.1.0").len() == count && neighbour() == count as u64
    })
    .await;
    let metadata = informer_of(&harness, "Pod", Form::Metadata).expect("a metadata informer");
    assert!(informer_of(&harness, "Pod", Form::Objects).is_none());

    harness.publish("recorder.wasm", &guest_bytes("recorder-pods-json"));
    eventually("the version reading JSON is handed every Pod", LONG, || {
        by("0.3.0").len() == count
    })
    .await;
    assert!(informer_of(&harness, "Pod", Form::Objects).is_some());
    harness
        .cluster
        .server()
        .apply(&pods(), &pod("late"))
        .unwrap();
    eventually("both saw the late Pod", LONG, || {
        by("0.3.0").len() > count && neighbour() > count as u64
    })
    .await;
    let mut handled = by("0.3.0");
    handled.sort();
    handled.dedup();
    assert_eq!(handled.len(), count + 1, "each Pod once, the late one too");
    assert_eq!(by("0.3.0").len(), count + 1);
    assert_eq!(
        neighbour(),
        count as u64 + 1,
        "the neighbour saw each change once"
    );
    assert_eq!(metadata.reflector_counts().lists, 1, "never relisted");
    assert_eq!(harness.report("recorder.wasm").unwrap().last_error, None);
    harness.stop().await;
}

/// Issue 41, hostile: a plugin whose every version asks for new informers spends its budget
/// of informer starts; past it, its next version fails to load (tried again later) and the
/// version serving keeps serving. Starts are counted, refusals too; a version that finds
/// its informers running costs nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_keeps_asking_for_new_informers_is_bounded() {
    let budget = StartBudget {
        burst: 2,
        refill: Duration::from_secs(3600),
    };
    let harness = Harness::build(settled(), CONFIG, &[], Refused::default(), None, |host| {
        host.with_start_budget(budget)
    })
    .await;
    let report = || harness.report("recorder.wasm").unwrap();
    harness.publish("recorder.wasm", &guest_bytes("recorder"));
    eventually("the first version runs", LONG, || harness.loads() == (1, 0)).await;
    harness.publish("recorder.wasm", &guest_bytes("recorder-v2"));
    eventually("a version with the same needs runs", LONG, || {
        harness.loads() == (2, 0)
    })
    .await;
    assert_eq!(report().informer_starts, 1, "the swap started nothing");
    harness.publish("recorder.wasm", &guest_bytes("recorder-pods"));
    eventually("a version on Pods runs", LONG, || harness.loads() == (3, 0)).await;
    assert_eq!(report().informer_starts, 2);

    harness.publish("recorder.wasm", &guest_bytes("recorder-pods-json"));
    eventually("the version past the budget fails", LONG, || {
        harness.loads().1 >= 1
    })
    .await;
    let report = report();
    assert_eq!(report.state, "running", "the version on Pods keeps serving");
    assert_eq!(report.version.as_deref(), Some("0.1.0"));
    let error = report.last_error.unwrap_or_default();
    assert!(
        error.contains("a plugin may start 2 informers at once and one more each 3600s"),
        "{error}"
    );
    // A retry of the failed load (at the next rescan) is refused again.
    assert_eq!(report.informer_starts, 2);
    assert!(report.informer_starts_refused >= 1);
    let whole_pods = harness
        .factory
        .keys()
        .into_iter()
        .filter(|key| key.form == Form::Objects);
    assert_eq!(
        whole_pods.filter(|key| key.resource.kind == "Pod").count(),
        0
    );
    harness.stop().await;
}

/// Issue 21: with `--replay-on-swap`, a version with the same subscriptions is handed the
/// whole cache again, so that an edit shows at once without an object changing. Without
/// it (every other test here), the version inherits the listeners and sees only changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_on_swap_hands_the_new_version_the_whole_cache() {
    let harness = Harness::build(settled(), CONFIG, &[], Refused::default(), None, |host| {
        host.replaying_on_swap(true)
    })
    .await;
    harness.write_config_map("cm-0", 0);
    harness.write_config_map("cm-1", 0);
    harness.publish("recorder.wasm", &guest_bytes("recorder"));
    let by = |version: &str| -> BTreeSet<String> {
        let records = harness.recorded.all();
        let of_version = records.into_iter().filter(|r| r.version == version);
        of_version.map(|r| r.key).collect()
    };
    eventually("the first version handles both", LONG, || {
        by("0.1.0").len() == 2
    })
    .await;
    harness.publish("recorder.wasm", &guest_bytes("recorder-v2"));
    eventually("the second version is handed both again", LONG, || {
        by("0.2.0").len() == 2
    })
    .await;
    harness.stop().await;
}

/// Each plugin of a batch starts as soon as it is loaded: one whose `describe()` runs into
/// its deadline does not hold back the one beside it, and `/plugins` shows each one's own
/// state. Regression (issue 20): every plugin of the start-up batch waited for the slowest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_plugin_holds_back_no_other_plugin_of_its_batch() {
    let config = format!("{CONFIG}\n[plugins.slow]\ncall_deadline_ms = 6000\n");
    let files = [
        ("slow.wasm", guest_bytes("recorder-describe-slow")),
        ("recorder.wasm", guest_bytes("recorder")),
    ];
    let settle = DirConfig {
        settle: Duration::from_millis(100),
        ..DirConfig::default()
    };
    let harness = Harness::with_files(settle, &config, &files).await;
    harness.write_config_map("cm-0", 0);
    eventually("the recorder runs", LONG, || {
        !harness.recorded.all().is_empty()
    })
    .await;
    assert_eq!(harness.report("recorder.wasm").unwrap().state, "running");
    assert_eq!(harness.report("slow.wasm").unwrap().state, "loading");
    harness.stop().await;
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// R4: swaps between two versions under churn; nothing lost or duplicated, and retired
/// versions give back their stores and instances. 100 swaps by default, 1,000 with
/// `KUBEPLUG_STORM_FULL=1`; prints the swap latency (rename to first delta handled by the
/// new version) and RSS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_storm() {
    let swaps: usize = if std::env::var_os("KUBEPLUG_STORM_FULL").is_some() {
        1000
    } else {
        100
    };
    let harness = Arc::new(Harness::start(Duration::from_millis(100)).await);
    for i in 0..20 {
        harness.write_config_map(&format!("cm-{i}"), 0);
    }
    let versions = [guest_bytes("recorder"), guest_bytes("recorder-v2")];
    let names = ["0.1.0", "0.2.0"];
    harness.publish("recorder.wasm", &versions[0]);
    eventually("the first version runs", LONG, || {
        harness.recorded.all().len() >= 20
    })
    .await;
    let stop = CancellationToken::new();
    let churn = harness.churn(20, stop.clone());
    let mut latencies = Vec::new();
    let mut first_uncached = None;
    let mut rss_after_100 = 0;
    for swap in 1..=swaps {
        let next = swap % 2;
        let renamed = harness.publish("recorder.wasm", &versions[next]);
        let mut first = None;
        eventually("the new version handles a delta", LONG, || {
            first = harness
                .recorded
                .all()
                .iter()
                .find(|r| r.version == names[next] && r.at > renamed)
                .map(|r| r.at - renamed);
            first.is_some()
        })
        .await;
        let latency = first.expect("found above");
        if swap == 1 {
            first_uncached = Some(latency);
        } else {
            latencies.push(latency);
        }
        if swap == 100.min(swaps) {
            rss_after_100 = rss_kib();
        }
    }
    stop.cancel();
    churn.await.unwrap();
    drained(&harness).await;
    let handled = assert_exactly_once(&harness);
    assert_eq!(harness.loads(), (swaps as u64 + 1, 0));
    eventually("retired versions are dropped", LONG, || {
        let live = harness.runtime.live();
        live.plugins == 1 && live.instances <= 1
    })
    .await;
    latencies.sort();
    let rss_end = rss_kib();
    #[allow(clippy::print_stdout)]
    {
        println!(
            "reload storm: {swaps} swaps, {handled} deltas handled, 0 lost, 0 duplicated; \
             rename → first delta on the new version: uncached {:?}, cached p50 {:?} p99 {:?} \
             max {:?}; RSS after {} swaps {rss_after_100} KiB, at the end {rss_end} KiB; \
             live after: {:?}",
            first_uncached.unwrap(),
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.99),
            latencies.last().unwrap(),
            100.min(swaps),
            harness.runtime.live(),
        );
    }
    Arc::into_inner(harness).unwrap().stop().await;
}

/// `bytes` with a custom section appended: a different file, the same plugin.
fn with_custom_section(mut bytes: Vec<u8>, name: &str) -> Vec<u8> {
    fn leb128(out: &mut Vec<u8>, mut n: usize) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let mut payload = Vec::new();
    leb128(&mut payload, name.len());
    payload.extend_from_slice(name.as_bytes());
    bytes.push(0);
    leb128(&mut bytes, payload.len());
    bytes.extend(payload);
    bytes
}

impl Harness {
    /// The serving version's hash and the events it handled itself.
    fn serving(&self, file: &str) -> Option<(ContentHash, u64)> {
        let table = self.host.table();
        let running = table.get(&self.id(file))?.lifecycle.serving()?;
        Some((running.hash, running.plugin.status().events_delivered))
    }

    /// Updates Pod `default/churn` every millisecond until the token fires.
    fn churn_pods(&self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let server = self.cluster.server().clone();
        let pods = Resource::new("", "v1", "Pod", "pods", true);
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.is_cancelled() {
                let json = format!(
                    r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"churn","namespace":"default","annotations":{{"n":"{n}"}}}}}}"#
                );
                server.apply(&pods, &json).unwrap();
                n += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    }

    /// Publishes `bytes` over the serving version of `file` and waits until the new version
    /// has handled a delta; returns how long that took from the rename.
    async fn swap_to(&self, file: &str, bytes: &[u8]) -> Duration {
        let hash = ContentHash::of(bytes);
        let renamed = self.publish(file, bytes);
        // Not a measure, a bound: an uncached 18 MiB Python component alone takes about 30 s
        // to compile on two cores, and the tests beside it share them.
        let deadline = Instant::now() + 3 * LONG;
        while !self
            .serving(file)
            .is_some_and(|(serving, events)| serving == hash && events > 0)
        {
            assert!(
                Instant::now() < deadline,
                "timed out waiting until the new version of {file} handles a delta: {:?}",
                self.report(file)
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        renamed.elapsed()
    }
}

/// Every language's label-audit survives hot reloads, uncached and cached; prints the time
/// from the rename to the first delta the new version handled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_language_survives_a_hot_reload() {
    let names = [
        "label-audit",
        "label-audit-c",
        "label-audit-js",
        "label-audit-py",
    ];
    let layout = xtask::Layout::from_manifest_dir();
    let built = xtask::build_plugins(&layout, &names.map(String::from)).expect("examples build");
    let harness = Harness::start(Duration::from_millis(100)).await;
    let stop = CancellationToken::new();
    let churn = harness.churn_pods(stop.clone());
    let mut figures = Vec::new();
    for (name, path) in names.iter().zip(&built) {
        let file = format!("{name}.wasm");
        let first = std::fs::read(path).unwrap();
        let second = with_custom_section(first.clone(), "kubeplug-test-variant");
        harness.swap_to(&file, &first).await;
        let uncached = harness.swap_to(&file, &second).await;
        let cached = harness.swap_to(&file, &first).await;
        let report = harness.report(&file).unwrap();
        assert_eq!(report.state, "running", "{report:?}");
        assert_eq!(report.last_error, None, "{report:?}");
        figures.push(format!(
            "{name} ({} KiB): uncached {uncached:?}, cached {cached:?}",
            first.len() / 1024
        ));
        std::fs::remove_file(harness.file(&file)).unwrap();
        eventually("the plugin is unloaded", LONG, || {
            harness.report(&file).is_none()
        })
        .await;
    }
    assert_eq!(harness.loads(), (3 * names.len() as u64, 0));
    stop.cancel();
    churn.await.unwrap();
    #[allow(clippy::print_stdout)]
    {
        println!(
            "rename → first delta on the new version: {}",
            figures.join("; ")
        );
    }
    harness.stop().await;
}

/// The handlers registered on the informer of ConfigMaps, if it runs.
fn config_map_handlers(harness: &Harness) -> Option<usize> {
    let key = harness
        .factory
        .keys()
        .into_iter()
        .find(|key| key.resource.kind == "ConfigMap")?;
    Some(harness.factory.informer(&key)?.handler_count())
}

fn handled_keys(harness: &Harness) -> BTreeSet<String> {
    harness.recorded.all().into_iter().map(|h| h.key).collect()
}

/// Leader election's side of the host: a follower loads plugins and keeps their informers
/// warm but registers no handler; leading replays the cache; losing the lead unregisters at
/// once; leading again replays what changed meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_loads_plugins_and_delivers_only_while_it_leads() {
    let harness = Harness::start(Duration::from_millis(50)).await;
    harness.host.follow().await;
    harness.write_config_map("before", 1);
    harness.publish("recorder.wasm", &guest_bytes("recorder"));
    eventually("the recorder waits on standby", LONG, || {
        harness
            .report("recorder.wasm")
            .is_some_and(|r| r.state == "standby")
    })
    .await;
    assert_eq!(
        config_map_handlers(&harness),
        Some(0),
        "informer warm, no handler"
    );

    harness.host.lead().await;
    assert_eq!(harness.report("recorder.wasm").unwrap().state, "running");
    assert_eq!(config_map_handlers(&harness), Some(1));
    eventually(
        "the leader gets the cache as its initial list",
        LONG,
        || handled_keys(&harness).contains("default/before"),
    )
    .await;

    harness.host.follow().await;
    assert_eq!(config_map_handlers(&harness), Some(0));
    assert_eq!(harness.report("recorder.wasm").unwrap().state, "standby");
    harness.write_config_map("while-following", 2);
    eventually("the warm informer sees the change", LONG, || {
        harness
            .factory
            .informer(&harness.factory.keys()[0])
            .is_some_and(|i| i.indexer().len() == 2)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !handled_keys(&harness).contains("default/while-following"),
        "a follower delivered"
    );

    harness.host.lead().await;
    eventually("the new leader gets what changed meanwhile", LONG, || {
        handled_keys(&harness).contains("default/while-following")
    })
    .await;
    harness.stop().await;
}

/// Writes `count` ConfigMaps, loads the reconciler, and waits until every key is queued
/// and some reconciled.
async fn reconciler_with_a_queue(count: usize) -> Harness {
    let harness = Harness::start(Duration::from_millis(50)).await;
    for i in 0..count {
        harness.write_config_map(&format!("cm-{i}"), i as u64);
    }
    harness.publish("reconciler.wasm", &guest_bytes("reconciler"));
    eventually(
        "the reconciler took its keys from its listener",
        LONG,
        || {
            harness.report("reconciler.wasm").is_some_and(|r| {
                r.state == "running"
                    && r.buffer_depth == 0
                    && !harness.recorded.reconciled().is_empty()
            })
        },
    )
    .await;
    harness
}

/// Graceful shutdown: informers stop, then the keys already queued are still reconciled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_reconciles_every_queued_key_before_the_deadline() {
    let count = 200;
    let harness = reconciler_with_a_queue(count).await;
    harness.cancel.cancel();
    harness.factory.shutdown().await;
    harness.host.drain(tokio::time::Instant::now() + LONG).await;
    assert_eq!(harness.recorded.reconciled().len(), count);
}

/// Past the deadline, queued keys are dropped: only the calls in flight finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_drops_the_keys_left_at_the_deadline() {
    // Each reconcile spins 2 ms on one of 4 workers: at least half a second of work queued.
    let count = 1000;
    let harness = reconciler_with_a_queue(count).await;
    harness.cancel.cancel();
    harness.factory.shutdown().await;
    harness.host.drain(tokio::time::Instant::now()).await;
    let reconciled = harness.recorded.reconciled().len();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        harness.recorded.reconciled().len(),
        reconciled,
        "a plugin was called after the drain returned"
    );
    assert!(
        reconciled < count,
        "all {count} keys were reconciled at once"
    );
}

/// A load that failed on the cluster, not on the file, is tried again: a plugin for a type
/// not served yet loads, unchanged, once a CustomResourceDefinition serves the type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_for_a_type_not_served_yet_loads_once_its_crd_is_installed() {
    let harness = Harness::start_with(DirConfig {
        settle: Duration::from_millis(50),
        rescan_every: Duration::from_millis(100),
        ..DirConfig::default()
    })
    .await;
    harness.publish("recorder.wasm", &guest_bytes("recorder-unknown-kind"));
    eventually(
        "the load failed on the unserved type, naming the plugin",
        LONG,
        || {
            harness.report("recorder.wasm").is_some_and(|r| {
                r.state == "failed"
                    && r.name.as_deref() == Some("recorder")
                    && r.last_error.as_deref().is_some_and(|e| {
                        e.contains("example.com/v1/Widget") && e.contains("tried again")
                    })
            })
        },
    )
    .await;

    std::fs::write(
        harness.cluster_dir.path().join("crd.yaml"),
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.example.com\nspec:\n  group: example.com\n  scope: Namespaced\n  names: {kind: Widget, plural: widgets}\n  versions: [{name: v1, served: true, storage: true}]\n",
    )
    .unwrap();
    harness
        .cluster
        .rescan(kubeplug_local::ScanReason::Requested);
    eventually("the unchanged file loads", LONG, || {
        harness
            .report("recorder.wasm")
            .is_some_and(|r| r.state == "running" && r.last_error.is_none())
    })
    .await;
    let (loaded, failed) = harness.loads();
    assert_eq!(loaded, 1);
    assert!(failed >= 1);
    harness.stop().await;
}

/// Issue 19: a file is the plugin it is named after, so that two files cannot hold one
/// name and `[plugins.NAME]` grants go where they say. A file named otherwise fails at the
/// `name` stage, once (nothing outside the file can fix it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_named_unlike_its_plugin_is_refused() {
    let harness = Harness::start(Duration::from_millis(100)).await;
    harness.publish("impostor.wasm", &guest_bytes("recorder"));
    eventually("the load fails", LONG, || harness.loads() == (0, 1)).await;
    let report = harness.report("impostor.wasm").unwrap();
    assert_eq!(report.state, "failed");
    let error = report.last_error.unwrap();
    assert!(
        error.contains("name: the plugin describes itself as \"recorder\", so its file must be named recorder.wasm"),
        "{error}"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(harness.loads(), (0, 1), "not retried");
    // Its entry in `/plugins` goes with the file.
    std::fs::remove_file(harness.file("impostor.wasm")).unwrap();
    eventually("the failed file's entry goes", LONG, || {
        harness.report("impostor.wasm").is_none()
    })
    .await;
    harness.stop().await;
}

/// Issue 44: a subscription's field selector on a field the type does not select on is the
/// plugin's mistake: the load fails once, naming the selector, and the same file is not
/// tried again. Before, it was retried (every 10 s at last) for ever, logging each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_field_selector_fails_the_load_once() {
    let config = format!(
        "{CONFIG}\n[plugins.label-reader]\nsettings = {{ field_selector = \"spec.color=red\" }}\n"
    );
    let harness = Harness::configured(
        DirConfig {
            settle: Duration::from_millis(100),
            ..DirConfig::default()
        },
        &config,
    )
    .await;
    harness.publish("label-reader.wasm", &guest_bytes("label-reader"));
    eventually("the load fails", LONG, || harness.loads() == (0, 1)).await;
    let error = harness
        .report("label-reader.wasm")
        .and_then(|r| r.last_error)
        .unwrap();
    assert!(
        error.contains("subscribe: plugin label-reader")
            && error.contains("field label not supported: spec.color"),
        "{error}"
    );
    // The first retry of a failure worth retrying comes after 1 s.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(harness.loads(), (0, 1), "not retried");
    harness.stop().await;
}

/// `sha256` in `[plugins.NAME]` pins the content: only that file loads under the name,
/// and another is refused before it is compiled; the version serving stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_name_loads_only_its_content() {
    let pinned = guest_bytes("recorder");
    let digest = super::dir::ContentHash::of(&pinned).to_string();
    let config = format!("{CONFIG}\n[plugins.recorder]\nsha256 = \"{digest}\"\n");
    let harness = Harness::configured(
        DirConfig {
            settle: Duration::from_millis(100),
            ..DirConfig::default()
        },
        &config,
    )
    .await;
    harness.publish("recorder.wasm", &pinned);
    eventually("the pinned content loads", LONG, || {
        harness.loads() == (1, 0)
    })
    .await;
    harness.publish("recorder.wasm", &guest_bytes("recorder-v2"));
    eventually("other content is refused", LONG, || {
        harness.loads() == (1, 1)
    })
    .await;
    let report = harness.report("recorder.wasm").unwrap();
    assert_eq!(report.state, "running", "{report:?}");
    assert_eq!(report.version.as_deref(), Some("0.1.0"));
    let error = report.last_error.unwrap();
    assert!(
        error.contains("pin: its SHA-256 is") && error.contains(&digest),
        "{error}"
    );
    harness.stop().await;
}

/// Issue 19: Secrets (`[host] sensitive`) open only to a plugin's own exact grant, never to
/// `[defaults.grants]` or a pattern; a plugin whose declared reads are not all granted does
/// not load, and the error holds the lines that would grant them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_open_only_to_a_plugins_own_exact_grant() {
    let dir_config = DirConfig {
        settle: Duration::from_millis(100),
        ..DirConfig::default()
    };
    // CONFIG grants `*` to every plugin; hostile-secrets also declares a read of Secrets.
    let patterns = format!("{CONFIG}\n[plugins.hostile-secrets.grants]\nread = [\"core/*\"]\n");
    let harness = Harness::configured(dir_config.clone(), &patterns).await;
    harness.publish("hostile-secrets.wasm", &guest_bytes("hostile-secrets"));
    eventually("the load fails", LONG, || harness.loads() == (0, 1)).await;
    let error = harness
        .report("hostile-secrets.wasm")
        .unwrap()
        .last_error
        .unwrap();
    assert!(
        error.contains("reads types it is not granted: v1/Secret")
            && error.contains("[plugins.hostile-secrets.grants]\nread = [\"v1/Secret\"]"),
        "{error}"
    );
    harness.stop().await;

    let exact = format!("{CONFIG}\n[plugins.hostile-secrets.grants]\nread = [\"v1/Secret\"]\n");
    let harness = Harness::configured(dir_config, &exact).await;
    harness.publish("hostile-secrets.wasm", &guest_bytes("hostile-secrets"));
    eventually("it loads", LONG, || harness.loads() == (1, 0)).await;
    harness.stop().await;
}

fn settled() -> DirConfig {
    DirConfig {
        settle: Duration::from_millis(100),
        ..DirConfig::default()
    }
}

fn refusing(plurals: &[&str]) -> Refused {
    Arc::new(Mutex::new(
        plurals.iter().map(|p| (*p).to_owned()).collect(),
    ))
}

/// Issue 20: a plugin whose informer cannot sync (the API server answers `403`) is failed
/// at its sync deadline with a host-written reason, holds back no other plugin or the
/// host's readiness, and starts by itself once the informer syncs. Regression: it was
/// `running` at once, delivering nothing, and the host never became ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_whose_informer_cannot_sync_fails_at_its_deadline_and_starts_once_it_syncs() {
    let config = format!("{CONFIG}\n[plugins.label-reader]\nsync_deadline_s = 1\n");
    let files = [
        ("recorder.wasm", guest_bytes("recorder")),
        ("label-reader.wasm", guest_bytes("label-reader")),
    ];
    let refused = refusing(&["pods"]);
    let harness = Harness::build(settled(), &config, &files, refused.clone(), None, |host| {
        host
    })
    .await;
    let at_start: BTreeSet<PluginId> =
        [harness.id("recorder.wasm"), harness.id("label-reader.wasm")].into();
    let state = |file: &str| harness.report(file).map(|r| r.state);
    eventually("the recorder runs", LONG, || {
        state("recorder.wasm") == Some("running")
    })
    .await;
    eventually("the label reader waits for its informer", LONG, || {
        state("label-reader.wasm") == Some("syncing")
    })
    .await;
    assert_eq!(
        harness.host.start_readiness(&at_start).verdict(2),
        Err("waiting for plugins label-reader".to_owned())
    );

    eventually("the label reader fails at its deadline", LONG, || {
        state("label-reader.wasm") == Some("failed")
    })
    .await;
    let error = harness
        .report("label-reader.wasm")
        .unwrap()
        .last_error
        .unwrap();
    assert!(
        error.contains("sync: plugin label-reader is loaded, but after 1s (sync_deadline_s) this informer has not synced: informer v1/Pod: 403 Forbidden")
            && error.contains("pods is forbidden"),
        "{error}"
    );
    assert_eq!(
        harness.host.start_readiness(&at_start).verdict(2),
        Ok(vec![
            "plugin label-reader failed: informer v1/Pod: 403 Forbidden".to_owned()
        ]),
        "the host is ready with one plugin running"
    );
    let only_the_failed_one = [harness.id("label-reader.wasm")].into();
    let verdict = harness
        .host
        .start_readiness(&only_the_failed_one)
        .verdict(1);
    assert!(
        verdict
            .as_ref()
            .is_err_and(|reason| reason.starts_with("every plugin present at start failed")),
        "{verdict:?}"
    );

    refused.lock().unwrap().clear();
    eventually(
        "the label reader starts once its informer syncs",
        LONG,
        || state("label-reader.wasm") == Some("running"),
    )
    .await;
    let report = harness.report("label-reader.wasm").unwrap();
    assert_eq!(report.last_error, None);
    assert_eq!(
        harness.host.start_readiness(&at_start).verdict(2),
        Ok(Vec::new())
    );
    harness.stop().await;
}

/// Issue 20: a plugin starts only once the caches it reads have synced, so that its first
/// read never answers from an empty cache; those caches hold only the host's namespace
/// (`--namespace`), as the namespaced Role `kubeplug rbac --namespace` allows. Regression:
/// the Secrets cache was started at the first read, over all namespaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_starts_once_the_caches_it_reads_have_synced_within_the_hosts_namespace() {
    let config = format!("{CONFIG}\n[plugins.hostile-secrets.grants]\nread = [\"v1/Secret\"]\n");
    let files = [("hostile-secrets.wasm", guest_bytes("hostile-secrets"))];
    let refused = refusing(&["secrets"]);
    let harness = Harness::build(
        settled(),
        &config,
        &files,
        refused.clone(),
        Some("team-a"),
        |host| host,
    )
    .await;
    let state = |file: &str| harness.report(file).map(|r| r.state);
    eventually("it loads and waits for the Secrets cache", LONG, || {
        state("hostile-secrets.wasm") == Some("syncing")
    })
    .await;
    let secrets: Vec<_> = harness
        .factory
        .keys()
        .into_iter()
        .filter(|key| key.resource.kind == "Secret")
        .collect();
    assert_eq!(secrets.len(), 1, "{secrets:?}");
    assert_eq!(secrets[0].namespace.as_deref(), Some("team-a"));
    refused.lock().unwrap().clear();
    eventually("it starts once the cache synced", LONG, || {
        state("hostile-secrets.wasm") == Some("running")
    })
    .await;
    harness.stop().await;
}

/// Issue 20: an events-mode plugin that stops taking notifications (its writes hang) holds
/// at most `buffer_budget_mib` of superseded objects: past it, its buffer keeps the latest
/// state per key, counts the merges (`/plugins`), and every key's final state still
/// arrives. Regression: the buffer kept every notification, however many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_plugins_buffer_keeps_the_latest_state_per_key_past_its_budget() {
    let config =
        format!("{CONFIG}\n[plugins.recorder]\ncall_deadline_ms = 60000\nbuffer_budget_mib = 1\n");
    let files = [("recorder.wasm", guest_bytes("recorder"))];
    let harness = Harness::with_files(settled(), &config, &files).await;
    let report = || harness.report("recorder.wasm").unwrap();
    eventually("the recorder runs", LONG, || {
        harness.report("recorder.wasm").map(|r| r.state) == Some("running")
    })
    .await;

    let gate = harness.recorded.2.clone();
    let stalled = gate.write().await;
    // 10 keys, 40 versions each of 64 KiB: 25 MiB of superseded states against 1 MiB.
    for round in 0..40 {
        for key in 0..10 {
            harness.write_padded_config_map(&format!("cm-{key}"), round, 64 << 10);
        }
    }
    eventually("the informer handed every change over", LONG, || {
        harness
            .factory
            .keys()
            .iter()
            .filter_map(|key| harness.factory.informer(key))
            .all(|informer| informer.queued_keys() == 0)
    })
    .await;
    let waiting = report();
    // Within the budget: about 16 superseded states and the latest per key wait. How many
    // merged depends on how many the hung call took before it hung (265 to 370 seen), so
    // the bound is loose: without the budget, none merge and 384 wait.
    assert!(
        waiting.buffer_depth <= 64,
        "{} waiting",
        waiting.buffer_depth
    );
    assert!(
        waiting.buffer_merged >= 100,
        "{} merged",
        waiting.buffer_merged
    );

    drop(stalled);
    drained(&harness).await;
    assert_eq!(report().last_error, None);
    harness.stop().await;
}

/// The factory's informer of `kind` in `form` (the only one), if it runs.
fn informer_of(harness: &Harness, kind: &str, form: Form) -> Option<SharedIndexInformer> {
    let keys = harness.factory.keys();
    let mut of_kind = keys
        .iter()
        .filter(|key| key.resource.kind == kind && key.form == form);
    let key = of_kind.next()?;
    assert!(
        of_kind.next().is_none(),
        "one informer of {kind} ({form:?}): {keys:?}"
    );
    harness.factory.informer(key)
}

/// Issue 24: a reconcile plugin that reads its objects' metadata through the cache keeps
/// their informer metadata-only: its cache holds no bodies, and each reconcile still reads
/// what it needs there. Regression: every cache read leased whole objects, so any plugin
/// that read the cache made its types' informers list and watch bodies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_reading_metadata_through_the_cache_keeps_its_informer_metadata_only() {
    let count = 20;
    let harness = reconciler_with_a_queue(count).await;
    eventually("every key is reconciled", LONG, || {
        harness.recorded.reconciled().len() == count
    })
    .await;
    let informer =
        informer_of(&harness, "ConfigMap", Form::Metadata).expect("the ConfigMap informer runs");
    assert!(informer_of(&harness, "ConfigMap", Form::Objects).is_none());
    assert!(informer.is_metadata_only());
    let cached = informer.indexer().list();
    assert_eq!(cached.len(), count);
    for object in cached {
        assert!(!object.json().contains("\"data\""), "{}", object.json());
    }
    let report = harness.report("reconciler.wasm").unwrap();
    assert_eq!(report.last_error, None);
    assert!(
        report.informers.iter().all(|i| i.metadata_only),
        "{report:?}"
    );
    harness.stop().await;
}

/// Issue 41: a plugin that reads Pods' bodies through the cache, loaded beside one that
/// watches their metadata alone, gets an informer of whole Pods of its own and reads bodies
/// from its first event on. The metadata informer sees nothing of it: it never relists, and
/// the plugin on it sees each Pod once, before, during and after the other's life.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_reading_bodies_through_the_cache_never_reads_metadata_alone() {
    let config = format!(
        "{CONFIG}\n[plugins.field-reader]\n\
         settings = {{ projections = [], cache_reads = [[\"node\", \"spec.nodeName\"]], read_bodies = true }}\n\
         [plugins.field-reader.grants]\n\
         write = {{ \"test.kubeplug.io/v1/Observation\" = [\"create\"] }}\n"
    );
    let harness = Harness::configured(settled(), &config).await;
    let count = 30;
    for i in 0..count {
        let json = format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p-{i}","namespace":"default"}},"spec":{{"nodeName":"node-{i}"}}}}"#
        );
        harness.cluster.server().apply(&pods(), &json).unwrap();
    }
    harness.publish("recorder.wasm", &guest_bytes("recorder-pods"));
    eventually("the recorder saw every Pod", LONG, || {
        harness.recorded.all().len() >= count
    })
    .await;
    let metadata = informer_of(&harness, "Pod", Form::Metadata).expect("a metadata informer");
    assert!(metadata.is_metadata_only());
    assert!(informer_of(&harness, "Pod", Form::Objects).is_none());

    harness.publish("field-reader.wasm", &guest_bytes("field-reader"));
    eventually("the field reader observed every Pod", LONG, || {
        harness.recorded.3.lock().unwrap().len() >= count
    })
    .await;
    let whole = informer_of(&harness, "Pod", Form::Objects).expect("an informer of whole Pods");
    assert!(!whole.is_metadata_only());
    for observation in harness.recorded.3.lock().unwrap().iter() {
        let key = observation["key"].as_str().unwrap();
        let node = key.replace("default/p-", "node-");
        assert_eq!(
            observation["cached"]["node"],
            node.as_str(),
            "{observation}"
        );
    }

    std::fs::remove_file(harness.file("field-reader.wasm")).unwrap();
    eventually("the informer of whole Pods stops", LONG, || {
        informer_of(&harness, "Pod", Form::Objects).is_none()
    })
    .await;
    let json =
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"late","namespace":"default"}}"#;
    harness.cluster.server().apply(&pods(), json).unwrap();
    eventually("the recorder saw the late Pod", LONG, || {
        harness.recorded.all().len() > count
    })
    .await;
    assert_eq!(
        harness.recorded.all().len(),
        count + 1,
        "each Pod once: the other plugin's coming and going repeated none"
    );
    assert_eq!(metadata.reflector_counts().lists, 1, "never relisted");
    assert!(
        metadata
            .indexer()
            .list()
            .iter()
            .all(|o| !o.json().contains("\"spec\""))
    );
    assert_eq!(harness.report("recorder.wasm").unwrap().last_error, None);
    harness.stop().await;
}

/// Waits, woken by the host's change notifications alone (never by polling), until
/// `file`'s report satisfies `done`.
async fn notified_until(
    harness: &Harness,
    changes: &mut tokio::sync::watch::Receiver<u64>,
    file: &str,
    what: &str,
    done: impl Fn(&PluginReport) -> bool,
) -> PluginReport {
    let waited = tokio::time::timeout(LONG, async {
        loop {
            if let Some(report) = harness.report(file).filter(|r| done(r)) {
                return report;
            }
            changes.changed().await.unwrap();
        }
    })
    .await;
    waited.unwrap_or_else(|_| panic!("no change notification saying {what}"))
}

/// The lifecycle learns of a quarantine from the driver, as an event: `/plugins` shows it
/// and whoever follows the host's changes is woken by it; a version swapped in starts
/// afresh, however its predecessor fared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantine_reaches_the_lifecycle_as_an_event() {
    let harness = Harness::start(Duration::from_millis(50)).await;
    let mut changes = harness.host.subscribe_changes();
    harness.publish("recorder.wasm", &guest_bytes("recorder"));
    notified_until(&harness, &mut changes, "recorder.wasm", "running", |r| {
        r.state == "running"
    })
    .await;
    harness.recorded.4.store(true, Ordering::Relaxed);
    // Two batches: a batch gives up after three attempts, five failures quarantine.
    harness.write_config_map("a", 1);
    tokio::time::sleep(Duration::from_millis(500)).await;
    harness.write_config_map("b", 1);
    let report = notified_until(
        &harness,
        &mut changes,
        "recorder.wasm",
        "quarantined",
        |r| r.state == "quarantined",
    )
    .await;
    let error = report.last_error.unwrap_or_default();
    assert!(error.contains("the test refuses writes"), "{error}");

    harness.recorded.4.store(false, Ordering::Relaxed);
    harness.publish("recorder.wasm", &guest_bytes("recorder-v2"));
    let report = notified_until(&harness, &mut changes, "recorder.wasm", "v2 running", |r| {
        r.version.as_deref() == Some("0.2.0") && r.state == "running"
    })
    .await;
    assert_eq!(report.last_error, None);
    harness.stop().await;
}
