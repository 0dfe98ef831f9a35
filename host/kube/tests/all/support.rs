//! Shared fixtures: a fake API server reached through a real kube client, informers, handler
//! views, bounded waits.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kubeplug_fake_apiserver::{FakeApiServer, FakeOptions};
use kubeplug_informer::informer::{HandlerOptions, SharedIndexInformer};
use kubeplug_informer::listener::Notification;
use kubeplug_informer::object::ObjectDecoder;
use kubeplug_informer::reflector::{ReflectorConfig, ReflectorError, WatchErrorHandler};
use kubeplug_informer::resource::Resource;
use kubeplug_kube::config::{ConfigSource, KubeClient};
use kubeplug_kube::lister::{KubeListerWatcher, KubeSourceOptions};

pub(crate) struct Fixture {
    pub(crate) server: FakeApiServer,
    pub(crate) client: KubeClient,
    pub(crate) _dir: tempfile::TempDir,
}

pub(crate) async fn start(options: FakeOptions) -> Fixture {
    let server = FakeApiServer::start(options).await.expect("fake server");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = server.write_kubeconfig(dir.path()).expect("kubeconfig");
    let source = ConfigSource::Kubeconfig {
        path,
        context: None,
    };
    let client = KubeClient::from_source(&source).await.expect("client");
    Fixture {
        server,
        client,
        _dir: dir,
    }
}

pub(crate) fn configmaps() -> Resource {
    Resource::new("", "v1", "ConfigMap", "configmaps", true)
}

pub(crate) fn cm(ns: &str, name: &str, team: &str, data: &str) -> String {
    serde_json::json!({"metadata": {"name": name, "namespace": ns, "labels": {"team": team}}, "data": {"k": data}})
        .to_string()
}

impl Fixture {
    pub(crate) fn lister(
        &self,
        resource: Resource,
        namespace: Option<&str>,
        options: KubeSourceOptions,
    ) -> KubeListerWatcher {
        KubeListerWatcher::new(
            self.client.clone(),
            resource,
            namespace.map(str::to_owned),
            options,
        )
    }
}

/// A fast-retrying Reflector configuration for tests.
pub(crate) fn quick_config() -> ReflectorConfig {
    ReflectorConfig {
        page_size: Some(2),
        backoff_initial: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
        ..ReflectorConfig::default()
    }
}

/// Every error the Reflector reported, as text with its sources (as the log shows it).
#[derive(Clone, Default)]
pub(crate) struct Errors(pub(crate) Arc<Mutex<Vec<String>>>);

impl Errors {
    pub(crate) fn handler(&self) -> WatchErrorHandler {
        let errors = self.0.clone();
        Arc::new(move |e: &ReflectorError| {
            errors
                .lock()
                .unwrap()
                .push(kubeplug_kube::config::error_chain(e));
        })
    }

    pub(crate) fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// What one handler last saw of each key: `Some(resourceVersion)`, or `None` once deleted.
/// Also counts deletions inferred by a relist.
#[derive(Clone, Default)]
pub(crate) struct View {
    pub(crate) last: Arc<Mutex<BTreeMap<String, Option<u64>>>>,
    pub(crate) tombstones: Arc<Mutex<Vec<String>>>,
}

impl View {
    pub(crate) fn follow(informer: &SharedIndexInformer) -> Self {
        let view = Self::default();
        let mut receiver = informer.add_handler(HandlerOptions::default());
        let task_view = view.clone();
        tokio::spawn(async move {
            while let Some(batch) = receiver.recv_batch(512).await {
                let mut last = task_view.last.lock().unwrap();
                for notification in batch.iter() {
                    let key = notification.key().to_string();
                    match notification {
                        Notification::Delete {
                            final_state_unknown,
                            ..
                        } => {
                            if *final_state_unknown {
                                task_view.tombstones.lock().unwrap().push(key.clone());
                            }
                            last.insert(key, None);
                        }
                        other => {
                            last.insert(key, Some(other.object().resource_version()));
                        }
                    }
                }
            }
        });
        view
    }

    /// The keys present in this view with their versions.
    pub(crate) fn present(&self) -> BTreeMap<String, u64> {
        self.last
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(k, v)| v.map(|v| (k.clone(), v)))
            .collect()
    }
}

pub(crate) fn informer(
    lw: KubeListerWatcher,
    resource: Resource,
    config: ReflectorConfig,
    errors: &Errors,
) -> SharedIndexInformer {
    SharedIndexInformer::with_error_handler(
        Arc::new(lw),
        ObjectDecoder::new(resource),
        config,
        Some(errors.handler()),
    )
}

/// The server's state of `resource` as key → resourceVersion.
pub(crate) fn server_state(server: &FakeApiServer, resource: &Resource) -> BTreeMap<String, u64> {
    server
        .memory()
        .snapshot(resource)
        .into_iter()
        .map(|(key, json)| {
            let value: serde_json::Value = serde_json::from_slice(&json).unwrap();
            let rv = value["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            (key.to_string(), rv)
        })
        .collect()
}

/// The informer's cache as key → resourceVersion.
pub(crate) fn cache_state(informer: &SharedIndexInformer) -> BTreeMap<String, u64> {
    informer
        .indexer()
        .list()
        .into_iter()
        .map(|o| (o.key().to_string(), o.resource_version()))
        .collect()
}

/// Polls `condition` every 10 ms until it holds; false after `timeout`.
pub(crate) async fn eventually(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits for the informer to sync, failing the test after `timeout`.
pub(crate) async fn synced(informer: &SharedIndexInformer, timeout: Duration) {
    tokio::time::timeout(timeout, informer.wait_for_sync())
        .await
        .expect("the informer did not sync in time");
}
