//! Scenarios of the kube source written once and run on the fake API server and on the real
//! one (`on_both_servers!`): where the two answer differently, the real one is right.

use std::time::Duration;

use futures::StreamExt as _;
use http::{Method, Request, header};
use http_body_util::BodyExt as _;
use kube::client::Body;
use kubeplug_envtest::Envtest;
use kubeplug_fake_apiserver::{FakeApiServer, FakeOptions};
use kubeplug_informer::factory::{Form, InformerKey, SharedInformerFactory};
use kubeplug_informer::informer::{HandlerOptions, SharedIndexInformer};
use kubeplug_informer::listener::{ListenerReceiver, Notification};
use kubeplug_informer::object::ObjectDecoder;
use kubeplug_informer::reflector::ReflectorConfig;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::source::{ListRequest, ListerWatcher, WatchEvent, WatchRequest};
use kubeplug_kube::config::{ConfigSource, KubeClient};
use kubeplug_kube::lister::{KubeListerWatcher, KubeSourceOptions};
use kubeplug_kube::provider::KubeSourceProvider;

use crate::configmaps;

/// Which API server a scenario runs on.
#[derive(Debug, Clone, Copy)]
enum Server {
    Fake,
    Real,
}

/// Runs each scenario's body on each server, as the tests `fake_apiserver` and
/// `kube_apiserver` of a module named after the scenario.
macro_rules! on_both_servers {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn fake_apiserver() {
                super::$scenario(super::Server::Fake).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn kube_apiserver() {
                super::$scenario(super::Server::Real).await;
            }
        }
    )*};
}

on_both_servers!(
    lists_a_namespaced_type_in_pages_and_honours_selectors,
    lists_and_watches_a_cluster_scoped_type,
    serves_lists_gets_and_watches_as_partial_object_metadata,
    a_metadata_only_informer_caches_metadata_alone,
    each_form_of_a_type_is_an_informer_told_every_change_once,
    serves_kubectl_tables_with_the_real_servers_columns_and_cells,
    selects_on_the_fields_the_real_server_selects_on,
);

enum Backend {
    Fake {
        server: FakeApiServer,
        /// Holds the kubeconfig the client was made from.
        _dir: tempfile::TempDir,
    },
    Real(&'static Envtest),
}

/// A server, the host's client for it, and the test's own writes and request log.
struct Cluster {
    client: KubeClient,
    backend: Backend,
    /// Suffixes of the fake server's namespaces, which need no creation there.
    namespaces: std::sync::atomic::AtomicU64,
}

impl Cluster {
    /// `None` when the real server's assets are missing (the harness said so on stderr).
    async fn start(server: Server) -> Option<Self> {
        let (backend, kubeconfig) = match server {
            Server::Fake => {
                let fake = FakeApiServer::start(FakeOptions::default()).await.unwrap();
                let dir = tempfile::tempdir().unwrap();
                let kubeconfig = fake.write_kubeconfig(dir.path()).unwrap();
                (
                    Backend::Fake {
                        server: fake,
                        _dir: dir,
                    },
                    kubeconfig,
                )
            }
            Server::Real => {
                let env = Envtest::shared()?;
                (Backend::Real(env), env.kubeconfig().to_owned())
            }
        };
        let source = ConfigSource::Kubeconfig {
            path: kubeconfig,
            context: None,
        };
        Some(Self {
            client: KubeClient::from_source(&source).await.unwrap(),
            backend,
            namespaces: Default::default(),
        })
    }

    /// A namespace of its own for a scenario.
    fn namespace(&self, prefix: &str) -> String {
        match &self.backend {
            Backend::Fake { .. } => {
                let n = self
                    .namespaces
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                format!("{prefix}-{n}")
            }
            Backend::Real(env) => env.namespace(prefix).unwrap(),
        }
    }

    /// A namespace of its own for a scenario that creates Pods: the real server admits a Pod
    /// only once its namespace's `default` ServiceAccount exists, which no controller
    /// creates under envtest.
    async fn pod_namespace(&self, prefix: &str) -> String {
        let namespace = self.namespace(prefix);
        let accounts = Resource::new("", "v1", "ServiceAccount", "serviceaccounts", true);
        self.serve(accounts.clone());
        let account = serde_json::json!({"metadata": {"name": "default", "namespace": namespace}});
        self.create(&accounts, account).await;
        namespace
    }

    fn lister(
        &self,
        resource: Resource,
        namespace: Option<&str>,
        labels: &str,
        fields: &str,
    ) -> KubeListerWatcher {
        KubeListerWatcher::new(
            self.client.clone(),
            resource,
            namespace.map(str::to_owned),
            KubeSourceOptions::default(),
        )
        .selecting(&labels.parse().unwrap(), &fields.parse().unwrap())
    }

    /// Creates `object` (JSON) of `resource`, in its `metadata.namespace` if it has one.
    async fn create(&self, resource: &Resource, object: serde_json::Value) {
        let namespace = object["metadata"]["namespace"].as_str();
        let path = collection(resource, namespace);
        self.send(Method::POST, &path, Some(object.to_string()))
            .await;
    }

    /// Replaces `object` (JSON) of `resource` unconditionally.
    async fn replace(&self, resource: &Resource, object: serde_json::Value) {
        let namespace = object["metadata"]["namespace"].as_str();
        let name = object["metadata"]["name"].as_str().unwrap();
        let path = format!("{}/{name}", collection(resource, namespace));
        self.send(Method::PUT, &path, Some(object.to_string()))
            .await;
    }

    /// Deletes `name` of `resource` in `namespace`.
    async fn delete(&self, resource: &Resource, namespace: Option<&str>, name: &str) {
        let path = format!("{}/{name}", collection(resource, namespace));
        self.send(Method::DELETE, &path, None).await;
    }

    /// Serves `resource` on the fake server; the real one serves every built-in type.
    fn serve(&self, resource: Resource) {
        if let Backend::Fake { server, .. } = &self.backend {
            server.serve(resource);
        }
    }

    /// Sets part of the status of `name` of `resource` in `namespace`, by merge patch.
    async fn patch_status(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
        status: serde_json::Value,
    ) {
        let path = format!("{}/{name}/status", collection(resource, Some(namespace)));
        let body = serde_json::json!({ "status": status }).to_string();
        self.send_as(
            Method::PATCH,
            &path,
            Some(body),
            "application/merge-patch+json",
        )
        .await;
    }

    /// An admin request that must succeed.
    async fn send(&self, method: Method, path: &str, body: Option<String>) {
        self.send_as(method, path, body, "application/json").await;
    }

    /// An admin request with a body of `content_type` that must succeed.
    async fn send_as(&self, method: Method, path: &str, body: Option<String>, content_type: &str) {
        let request = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(header::CONTENT_TYPE, content_type)
            .body(Body::from(body.unwrap_or_default().into_bytes()))
            .unwrap();
        let response = self.client.client().send(request).await.unwrap();
        let code = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert!(code.is_success(), "{method} {path}: {code} {body:?}");
    }

    /// `GET path` with `Accept: accept`: the status, the `Content-Type`, and the body (for a
    /// watch, its first line).
    async fn get_as(&self, path: &str, accept: &str) -> (u16, String, serde_json::Value) {
        let (code, content_type, mut lines) = self.lines_as(path, accept, 1).await;
        (code, content_type, lines.remove(0))
    }

    /// `GET path` with `Accept: accept`: the status, the `Content-Type`, and the first
    /// `count` lines of the body (a watch's events), each within 20 s.
    async fn lines_as(
        &self,
        path: &str,
        accept: &str,
        count: usize,
    ) -> (u16, String, Vec<serde_json::Value>) {
        let request = Request::builder()
            .uri(path)
            .header(header::ACCEPT, accept)
            .body(Body::empty())
            .unwrap();
        let response = self.client.client().send(request).await.unwrap();
        let code = response.status().as_u16();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let mut body = response.into_body();
        let mut bytes = Vec::new();
        let mut lines = Vec::new();
        let mut ended = false;
        while lines.len() < count {
            if let Some(end) = bytes.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = bytes.drain(..=end).collect();
                lines.push(parse_line(path, &line[..end]));
                continue;
            }
            if ended {
                lines.push(parse_line(path, &bytes));
                break;
            }
            let frame = tokio::time::timeout(Duration::from_secs(20), body.frame()).await;
            match frame.expect("a line within 20 s") {
                Some(frame) => {
                    bytes.extend_from_slice(&frame.unwrap().into_data().unwrap_or_default())
                }
                None => ended = true,
            }
        }
        (code, content_type, lines)
    }

    /// The paths and queries of the requests the server has answered so far.
    fn request_uris(&self) -> Vec<String> {
        match &self.backend {
            Backend::Fake { server, .. } => server.requests().into_iter().map(|r| r.uri).collect(),
            Backend::Real(env) => env
                .audit_events()
                .unwrap()
                .into_iter()
                .map(|e| e.request_uri)
                .collect(),
        }
    }
}

fn parse_line(path: &str, line: &[u8]) -> serde_json::Value {
    serde_json::from_slice(line)
        .unwrap_or_else(|e| panic!("GET {path}: {e}: {}", String::from_utf8_lossy(line)))
}

/// The path of `resource`'s collection, in `namespace` when given.
fn collection(resource: &Resource, namespace: Option<&str>) -> String {
    let root = if resource.group.is_empty() {
        format!("/api/{}", resource.version)
    } else {
        format!("/apis/{}/{}", resource.group, resource.version)
    };
    match namespace {
        Some(namespace) => format!("{root}/namespaces/{namespace}/{}", resource.plural),
        None => format!("{root}/{}", resource.plural),
    }
}

fn config_map(namespace: &str, name: &str, team: &str) -> serde_json::Value {
    serde_json::json!({"metadata": {"name": name, "namespace": namespace,
                                    "labels": {"team": team}}, "data": {"k": "x"}})
}

fn nodes() -> Resource {
    Resource::new("", "v1", "Node", "nodes", false)
}

/// Seven ConfigMaps in one namespace, listed in pages of three at one resourceVersion; a
/// label selector and a field selector; a watch of the labelled lister sees only matching
/// objects, with bookmarks asked for and the `timeoutSeconds` its request names.
async fn lists_a_namespaced_type_in_pages_and_honours_selectors(server: Server) {
    let Some(cluster) = Cluster::start(server).await else {
        return;
    };
    let (a, b) = (cluster.namespace("pages-a"), cluster.namespace("pages-b"));
    // Label values of this scenario's own: on the real server other tests' objects are
    // listed too.
    let (even, odd) = (format!("{a}-even"), format!("{a}-odd"));
    for i in 1..=7 {
        let team = if i % 2 == 0 { &even } else { &odd };
        cluster
            .create(&configmaps(), config_map(&a, &format!("cm-{i}"), team))
            .await;
    }
    cluster
        .create(&configmaps(), config_map(&b, "other", &odd))
        .await;
    let lw = cluster.lister(configmaps(), Some(&a), "", "");
    let mut pages = Vec::new();
    let mut token = None;
    loop {
        let page = lw
            .list(ListRequest {
                limit: Some(3),
                continue_token: token.clone(),
                resource_version: None,
            })
            .await
            .unwrap();
        token = page.continue_token.clone();
        pages.push(page);
        if token.is_none() {
            break;
        }
    }
    assert_eq!(pages.len(), 3);
    assert!(
        pages
            .iter()
            .all(|p| p.resource_version == pages[0].resource_version)
    );
    let items: usize = pages.iter().map(|p| p.items.len()).sum();
    assert_eq!(items, 7, "only namespace {a}");
    let list_path = format!("/api/v1/namespaces/{a}/configmaps?");
    assert!(
        cluster
            .request_uris()
            .iter()
            .any(|uri| uri.starts_with(&list_path)
                && uri.contains("limit=3")
                && uri.contains("continue=")),
        "a continued page"
    );

    let labelled = cluster.lister(configmaps(), None, &format!("team={even}"), "");
    let page = labelled.list(ListRequest::default()).await.unwrap();
    assert_eq!(page.items.len(), 3, "cm-2, cm-4, cm-6");
    let named = cluster.lister(
        configmaps(),
        None,
        &format!("team={odd}"),
        &format!("metadata.namespace={b}"),
    );
    let page_b = named.list(ListRequest::default()).await.unwrap();
    assert_eq!(page_b.items.len(), 1);
    assert!(
        std::str::from_utf8(&page_b.items[0])
            .unwrap()
            .contains("\"other\"")
    );

    // The watch of the labelled lister only sees matching objects.
    let mut watch = labelled
        .watch(WatchRequest {
            resource_version: page.resource_version.clone(),
            bookmarks: true,
            timeout: Some(Duration::from_secs(437)),
            ..Default::default()
        })
        .await
        .unwrap();
    cluster
        .create(&configmaps(), config_map(&a, "skip", &odd))
        .await;
    cluster
        .create(&configmaps(), config_map(&a, "keep", &even))
        .await;
    let event = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .unwrap();
    match event {
        Some(Ok(WatchEvent::Added(object))) => {
            assert!(std::str::from_utf8(&object).unwrap().contains("\"keep\""))
        }
        other => panic!("expected ADDED keep, got {other:?}"),
    }
    let selector = format!("labelSelector=team%3D{even}");
    let uris = cluster.request_uris();
    let watch_uri = uris
        .iter()
        .rev()
        .find(|uri| uri.contains("watch=") && uri.contains(&selector))
        .unwrap();
    assert!(
        watch_uri.contains("allowWatchBookmarks=true"),
        "{watch_uri}"
    );
    let timeout: u64 = watch_uri
        .split("timeoutSeconds=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(timeout, 437, "the Reflector's draw, as asked");
}

/// A cluster-scoped type is listed and watched without a namespace in its path, whatever
/// namespace the lister was given.
async fn lists_and_watches_a_cluster_scoped_type(server: Server) {
    let Some(cluster) = Cluster::start(server).await else {
        return;
    };
    let name = cluster.namespace("node");
    cluster
        .create(&nodes(), serde_json::json!({"metadata": {"name": name}}))
        .await;
    let lw = cluster.lister(
        nodes(),
        Some("ignored"),
        "",
        &format!("metadata.name={name}"),
    );
    let page = lw.list(ListRequest::default()).await.unwrap();
    assert_eq!(page.items.len(), 1);
    assert!(
        cluster
            .request_uris()
            .iter()
            .any(|uri| uri.starts_with("/api/v1/nodes?"))
    );
    let mut watch = lw
        .watch(WatchRequest {
            resource_version: page.resource_version,
            ..Default::default()
        })
        .await
        .unwrap();
    cluster.delete(&nodes(), None, &name).await;
    let event = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .unwrap();
    assert!(
        matches!(event, Some(Ok(WatchEvent::Deleted(_)))),
        "{event:?}"
    );
}

/// Metadata informers' requests (client-go's metadata client, controller-runtime's
/// `OnlyMetadata`, kube's `metadata_watcher`): lists, gets and watches answered as
/// `meta.k8s.io/v1` `PartialObjectMetadata`, metadata with managedFields and no body.
async fn serves_lists_gets_and_watches_as_partial_object_metadata(server: Server) {
    let Some(cluster) = Cluster::start(server).await else {
        return;
    };
    let namespace = cluster.namespace("meta");
    let resource = configmaps();
    cluster
        .create(&resource, config_map(&namespace, "first", "red"))
        .await;
    let collection = collection(&resource, Some(&namespace));
    const LIST: &str =
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
    const OBJECT: &str =
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

    let (code, content_type, list) = cluster.get_as(&collection, LIST).await;
    assert_eq!(code, 200, "{list}");
    assert_eq!(content_type, "application/json");
    assert_eq!(list["kind"], "PartialObjectMetadataList");
    assert_eq!(list["apiVersion"], "meta.k8s.io/v1");
    let item = &list["items"][0];
    assert_eq!(item["kind"], "PartialObjectMetadata", "{item}");
    assert_eq!(item["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(item["metadata"]["name"], "first");
    assert_eq!(item["metadata"]["labels"]["team"], "red");
    assert!(item.get("data").is_none(), "{item}");

    let (code, content_type, object) = cluster.get_as(&format!("{collection}/first"), OBJECT).await;
    assert_eq!(code, 200, "{object}");
    assert_eq!(content_type, "application/json");
    assert_eq!(object["kind"], "PartialObjectMetadata");
    assert_eq!(object["metadata"]["name"], "first");
    assert!(object.get("data").is_none(), "{object}");

    // A plain JSON get is whole, as ever.
    let (_, _, whole) = cluster
        .get_as(&format!("{collection}/first"), "application/json")
        .await;
    assert_eq!(whole["kind"], "ConfigMap");
    assert_eq!(whole["data"]["k"], "x");

    let version = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let watch = format!("{collection}?watch=1&resourceVersion={version}");
    let watching = cluster.get_as(&watch, OBJECT);
    let creating = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cluster
            .create(&resource, config_map(&namespace, "second", "blue"))
            .await;
    };
    let ((code, _, event), ()) = tokio::join!(watching, creating);
    assert_eq!(code, 200, "{event}");
    assert_eq!(event["type"], "ADDED", "{event}");
    assert_eq!(event["object"]["kind"], "PartialObjectMetadata", "{event}");
    assert_eq!(event["object"]["metadata"]["name"], "second");
    assert!(event["object"].get("data").is_none(), "{event}");
}

/// Issue 24: an informer whose source asks for `PartialObjectMetadata` and whose decoder
/// takes it syncs (by a streaming list on the real server's etcd 3.5, by list-then-watch
/// elsewhere), follows a change, and caches each ConfigMap as a ConfigMap with its metadata
/// and no `data`.
async fn a_metadata_only_informer_caches_metadata_alone(server: Server) {
    let Some(cluster) = Cluster::start(server).await else {
        return;
    };
    let namespace = cluster.namespace("meta-informer");
    let resource = configmaps();
    for name in ["first", "second"] {
        cluster
            .create(&resource, config_map(&namespace, name, "red"))
            .await;
    }
    let source = cluster
        .lister(resource.clone(), Some(&namespace), "", "")
        .metadata_only();
    // The server answers the source in the metadata form.
    let page = source.list(ListRequest::default()).await.unwrap();
    let item: serde_json::Value = serde_json::from_slice(&page.items[0]).unwrap();
    assert_eq!(item["kind"], "PartialObjectMetadata", "{item}");
    let informer = SharedIndexInformer::new(
        std::sync::Arc::new(source),
        ObjectDecoder::new(resource.clone()).metadata_only(),
        ReflectorConfig::default(),
    );
    informer.start();
    tokio::time::timeout(Duration::from_secs(60), informer.wait_for_sync())
        .await
        .expect("synced within a minute");
    cluster
        .create(&resource, config_map(&namespace, "third", "blue"))
        .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while informer.indexer().len() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the watch never delivered third"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for object in informer.indexer().list() {
        let json: serde_json::Value = serde_json::from_str(object.json()).unwrap();
        assert_eq!(json["kind"], "ConfigMap", "{json}");
        assert_eq!(json["apiVersion"], "v1", "{json}");
        assert!(json.get("data").is_none(), "a body was cached: {json}");
        assert!(object.label("team").is_some(), "{json}");
        assert!(json["metadata"].get("managedFields").is_none(), "{json}");
    }
    informer.stop().await;
}

/// What a handler has been told: each live key's resourceVersion, and whether each object it
/// was handed had a body. An add of a live key, or an update to the version it already has,
/// is a repeated event and fails the test.
#[derive(Default, Debug)]
struct Told {
    live: std::collections::BTreeMap<String, String>,
    without_body: usize,
    with_body: usize,
}

impl Told {
    async fn read_until(&mut self, handler: &mut ListenerReceiver, want: &Self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while self.live != want.live {
            let batch = tokio::time::timeout_at(deadline, handler.recv_batch(64))
                .await
                .unwrap_or_else(|_| panic!("never told the server's state {want:?}: {self:?}"))
                .expect("still registered");
            for notification in batch.iter() {
                self.apply(notification);
            }
        }
    }

    fn apply(&mut self, notification: &Notification) {
        let key = notification.key().to_string();
        let object = notification.object();
        let version = object.resource_version_text().into_owned();
        match notification {
            Notification::Add { .. } => {
                let repeated = self.live.insert(key.clone(), version);
                assert!(repeated.is_none(), "{key} added again");
            }
            Notification::Update { resync, .. } => {
                assert!(!resync, "no handler asked for resyncs");
                let before = self.live.insert(key.clone(), version.clone());
                assert_ne!(before, Some(version), "{key} updated to the version it had");
            }
            Notification::Delete { .. } => {
                assert!(
                    self.live.remove(&key).is_some(),
                    "{key} deleted while not live"
                );
            }
        }
        match object.json().contains(r#""data""#) {
            true => self.with_body += 1,
            false => self.without_body += 1,
        }
    }
}

/// Issues 24 and 41: through the factory, a handler that reads metadata gets an informer
/// that lists and watches metadata alone; a handler that needs bodies, added while
/// ConfigMaps change, gets an informer of whole objects of its own. Each is told every
/// change once, and the bodies handler's coming and going never relists the metadata one.
async fn each_form_of_a_type_is_an_informer_told_every_change_once(server: Server) {
    let Some(cluster) = Cluster::start(server).await else {
        return;
    };
    let namespace = cluster.namespace("switch");
    let resource = configmaps();
    for name in ["a", "b", "c"] {
        cluster
            .create(&resource, config_map(&namespace, name, "red"))
            .await;
    }
    let provider = KubeSourceProvider::new(cluster.client.clone(), KubeSourceOptions::default());
    let factory =
        SharedInformerFactory::new(std::sync::Arc::new(provider), ReflectorConfig::default());
    let key = InformerKey {
        namespace: Some(namespace.clone()),
        ..InformerKey::all(resource.clone())
    };
    let metadata_key = InformerKey {
        form: Form::Metadata,
        ..key.clone()
    };
    let mut labels = factory
        .subscribe(metadata_key, HandlerOptions::default())
        .unwrap();
    let informer = labels.informer().clone();
    assert!(informer.is_metadata_only());
    let full = cluster.lister(resource.clone(), Some(&namespace), "", "");
    let server_state = || async {
        let page = full.list(ListRequest::default()).await.unwrap();
        let decoder = ObjectDecoder::new(resource.clone());
        let live = page
            .items
            .iter()
            .map(|raw| {
                let object = decoder.decode(raw).unwrap();
                (
                    object.key().to_string(),
                    object.resource_version_text().into_owned(),
                )
            })
            .collect();
        Told {
            live,
            ..Told::default()
        }
    };
    let mut told_labels = Told::default();
    told_labels
        .read_until(&mut labels, &server_state().await)
        .await;

    // Changes before, during and after the switch to whole objects.
    let churn = |round: usize| {
        let cluster = &cluster;
        let namespace = namespace.clone();
        let resource = resource.clone();
        async move {
            let team = format!("round-{round}");
            cluster
                .replace(&resource, config_map(&namespace, "a", &team))
                .await;
            cluster
                .create(
                    &resource,
                    config_map(&namespace, &format!("new-{round}"), &team),
                )
                .await;
            cluster.delete(&resource, Some(&namespace), "b").await;
            cluster
                .create(&resource, config_map(&namespace, "b", &team))
                .await;
        }
    };
    churn(0).await;
    let mut bodies = factory
        .subscribe(key.clone(), HandlerOptions::default())
        .unwrap();
    assert!(!bodies.informer().is_metadata_only());
    churn(1).await;
    let want = server_state().await;
    told_labels.read_until(&mut labels, &want).await;
    let mut told_bodies = Told::default();
    told_bodies.read_until(&mut bodies, &want).await;
    assert_eq!(told_bodies.without_body, 0, "{told_bodies:?}");
    assert!(told_labels.without_body > 0, "{told_labels:?}");

    drop(bodies);
    assert_eq!(
        factory.keys().len(),
        1,
        "the informer of whole objects stopped"
    );
    churn(2).await;
    told_labels
        .read_until(&mut labels, &server_state().await)
        .await;
    assert!(informer.is_metadata_only());
    assert_eq!(informer.reflector_counts().lists, 1, "never relisted");
    assert!(
        informer
            .indexer()
            .list()
            .iter()
            .all(|object| !object.json().contains(r#""data""#)),
        "no bodies cached"
    );
    drop(labels);
    factory.shutdown().await;
}

/// What kubectl sends for `get`.
const KUBECTL_TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,\
     application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

/// A table's column names and priorities, and its rows' cells without the columns of ages
/// (`Age`, an Event's `Last Seen` and `First Seen`), whose cells must be the age of something
/// new (`0s` to `119s`).
fn table_cells(table: &serde_json::Value) -> (Vec<(String, u64)>, Vec<Vec<serde_json::Value>>) {
    assert_eq!(table["kind"], "Table", "{table}");
    assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
    let columns: Vec<(String, u64)> = table["columnDefinitions"]
        .as_array()
        .unwrap_or_else(|| panic!("no column definitions: {table}"))
        .iter()
        .map(|c| {
            assert_eq!(c["type"], "string", "{c}");
            let format = if c["name"] == "Name" { "name" } else { "" };
            assert_eq!(c["format"], format, "{c}");
            (
                c["name"].as_str().unwrap().to_owned(),
                c["priority"].as_u64().unwrap(),
            )
        })
        .collect();
    let ages: Vec<usize> = (0..columns.len())
        .rev()
        .filter(|&i| ["Age", "Last Seen", "First Seen"].contains(&columns[i].0.as_str()))
        .collect();
    let rows = table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let mut cells = row["cells"].as_array().unwrap().clone();
            assert_eq!(cells.len(), columns.len(), "{row}");
            for &age in &ages {
                let age = cells.remove(age);
                let seconds = age.as_str().and_then(|a| a.strip_suffix('s'));
                assert!(
                    seconds.is_some_and(|s| s.parse::<u32>().is_ok_and(|s| s < 120)),
                    "the age of a new object: {age}"
                );
            }
            cells
        })
        .collect();
    (columns, rows)
}

/// kubectl's tables on both servers, from the same objects: Pods in many states (restarts
/// set minutes and hours ago, init containers, a sidecar, a gate), a Deployment, a
/// Namespace, a ConfigMap and two Secrets print the same columns and cells (ages aside),
/// in lists and gets; a watch's first event carries the column definitions and the next
/// `null`; `includeObject` picks what a row carries; a streaming list stays in objects.
/// The expected cells are kube-apiserver v1.32's, so the real server checks them.
async fn serves_kubectl_tables_with_the_real_servers_columns_and_cells(server: Server) {
    use serde_json::json;
    let Some(cluster) = Cluster::start(server).await else {
        return;
    };
    let namespace = cluster.pod_namespace("tables").await;
    let pods = Resource::new("", "v1", "Pod", "pods", true);
    let deployments = Resource::new("apps", "v1", "Deployment", "deployments", true);
    cluster.serve(deployments.clone());

    // Whole seconds: the real server keeps times to the second.
    let ago = |seconds: i64| {
        let now = jiff::Timestamp::now().as_second();
        jiff::Timestamp::from_second(now - seconds)
            .unwrap()
            .to_string()
    };
    let container = |name: &str| json!({"name": name, "image": "busybox"});
    let running = |name: &str| {
        json!({"name": name, "image": "busybox", "imageID": "", "ready": true,
               "restartCount": 0, "state": {"running": {}}})
    };
    let status = |name: &str, restarts: u32, state: serde_json::Value| {
        json!({"name": name, "image": "busybox", "imageID": "", "ready": false,
               "restartCount": restarts, "state": state})
    };
    let two = json!([container("a"), container("b")]);
    let mut restarted = running("a");
    restarted["restartCount"] = json!(3);
    restarted["lastState"] =
        json!({"terminated": {"exitCode": 1, "finishedAt": ago(5 * 3600 + 15 * 60 + 10)}});
    let mut crashing = status("a", 5, json!({"waiting": {"reason": "CrashLoopBackOff"}}));
    crashing["lastState"] = json!({"terminated": {"exitCode": 2, "finishedAt": ago(45 * 60 + 20)}});
    let completed = |name: &str| {
        status(
            name,
            0,
            json!({"terminated": {"exitCode": 0, "reason": "Completed"}}),
        )
    };
    let cases = [
        ("pending", json!({"containers": two}), None),
        (
            "running",
            json!({"nodeName": "node-a", "containers": two,
                   "readinessGates": [{"conditionType": "example.com/gate"}]}),
            Some(
                json!({"phase": "Running", "podIP": "10.1.2.3", "podIPs": [{"ip": "10.1.2.3"}],
                        "nominatedNodeName": "node-b",
                        "conditions": [{"type": "example.com/gate", "status": "True"},
                                       {"type": "Ready", "status": "True"}],
                        "containerStatuses": [restarted, running("b")]}),
            ),
        ),
        (
            "crashloop",
            json!({"containers": two}),
            Some(json!({"phase": "Running", "containerStatuses": [crashing, running("b")]})),
        ),
        (
            "exited",
            json!({"containers": two}),
            Some(json!({"phase": "Running", "containerStatuses": [
                status("a", 0, json!({"terminated": {"exitCode": 137}})),
                status("b", 0, json!({"terminated": {"exitCode": 0, "signal": 9}}))]})),
        ),
        (
            "signalled",
            json!({"containers": two}),
            Some(json!({"phase": "Running", "containerStatuses": [
                running("a"), status("b", 0, json!({"terminated": {"exitCode": 0, "signal": 9}}))]})),
        ),
        (
            "sidecar",
            json!({"initContainers": [{"name": "side", "image": "busybox", "restartPolicy": "Always"}],
                   "containers": two}),
            Some(json!({"phase": "Running",
                        "conditions": [{"type": "Initialized", "status": "True"}],
                        "initContainerStatuses": [{"name": "side", "image": "busybox", "imageID": "",
                            "started": true, "ready": true, "restartCount": 0,
                            "state": {"running": {}}}],
                        "containerStatuses": [running("a"),
                            status("b", 0, json!({"waiting": {"reason": "ContainerCreating"}}))]})),
        ),
        (
            "init-failed",
            json!({"initContainers": [container("init")], "containers": two}),
            Some(json!({"phase": "Pending", "initContainerStatuses": [
                status("init", 2, json!({"terminated": {"exitCode": 1, "reason": "Error"}}))]})),
        ),
        (
            "init-running",
            json!({"initContainers": [container("init")], "containers": two}),
            Some(json!({"phase": "Pending", "initContainerStatuses": [
                status("init", 0, json!({"running": {}}))]})),
        ),
        (
            "done",
            json!({"restartPolicy": "Never", "containers": two}),
            Some(
                json!({"phase": "Succeeded", "containerStatuses": [completed("a"), completed("b")]}),
            ),
        ),
        (
            "gated",
            json!({"schedulingGates": [{"name": "example.com/wait"}], "containers": two}),
            // What the real server sets at create, set on both.
            Some(
                json!({"conditions": [{"type": "PodScheduled", "status": "False",
                                        "reason": "SchedulingGated"}]}),
            ),
        ),
    ];
    for (name, spec, pod_status) in cases {
        let pod = json!({"metadata": {"name": name, "namespace": namespace}, "spec": spec});
        cluster.create(&pods, pod).await;
        if let Some(pod_status) = pod_status {
            cluster
                .patch_status(&pods, &namespace, name, pod_status)
                .await;
        }
    }
    let none = json!("<none>");
    let pod_row = |name: &str, ready: &str, status: &str, restarts: &str| {
        vec![
            json!(name),
            json!(ready),
            json!(status),
            json!(restarts),
            none.clone(),
            none.clone(),
            none.clone(),
            none.clone(),
        ]
    };
    let (_, _, table) = cluster
        .get_as(&collection(&pods, Some(&namespace)), KUBECTL_TABLE)
        .await;
    let (columns, rows) = table_cells(&table);
    let names_and_priorities = |list: &[(&str, u64)]| -> Vec<(String, u64)> {
        list.iter().map(|(n, p)| ((*n).to_owned(), *p)).collect()
    };
    assert_eq!(
        columns,
        names_and_priorities(&[
            ("Name", 0),
            ("Ready", 0),
            ("Status", 0),
            ("Restarts", 0),
            ("Age", 0),
            ("IP", 1),
            ("Node", 1),
            ("Nominated Node", 1),
            ("Readiness Gates", 1)
        ])
    );
    assert_eq!(
        rows,
        vec![
            pod_row("crashloop", "1/2", "CrashLoopBackOff", "5 (45m ago)"),
            pod_row("done", "0/2", "Completed", "0"),
            pod_row("exited", "0/2", "ExitCode:137", "0"),
            pod_row("gated", "0/2", "SchedulingGated", "0"),
            pod_row("init-failed", "0/2", "Init:Error", "2"),
            pod_row("init-running", "0/2", "Init:0/1", "0"),
            pod_row("pending", "0/2", "Pending", "0"),
            vec![
                json!("running"),
                json!("2/2"),
                json!("Running"),
                json!("3 (5h15m ago)"),
                json!("10.1.2.3"),
                json!("node-a"),
                json!("node-b"),
                json!("1/1")
            ],
            pod_row("sidecar", "2/3", "ContainerCreating", "0"),
            pod_row("signalled", "1/2", "Signal:9", "0"),
        ],
        "{table}"
    );
    let done = &table["rows"][1];
    assert_eq!(
        done["conditions"],
        json!([{"type": "Completed", "status": "True", "reason": "Succeeded",
                "message": "The pod has completed successfully."}]),
        "{done}"
    );
    assert_eq!(done["object"]["kind"], "PartialObjectMetadata", "{done}");
    assert_eq!(done["object"]["metadata"]["name"], "done", "{done}");

    // A get is a table of one row, at the object's version.
    let (code, content_type, one) = cluster
        .get_as(
            &format!("{}/running", collection(&pods, Some(&namespace))),
            KUBECTL_TABLE,
        )
        .await;
    assert_eq!(
        (code, content_type.as_str()),
        (200, "application/json"),
        "{one}"
    );
    assert_eq!(table_cells(&one).1, rows[7..8].to_vec());
    assert!(
        one["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|v| !v.is_empty()),
        "{one}"
    );

    let deployment = json!({
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {"replicas": 3,
                 "selector": {"matchLabels": {"app": "web"}, "matchExpressions": [
                     {"key": "tier", "operator": "In", "values": ["b", "a"]}]},
                 "template": {"metadata": {"labels": {"app": "web", "tier": "a"}},
                              "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"},
                                                      {"name": "side", "image": "busybox"}]}}}
    });
    cluster.create(&deployments, deployment).await;
    let replicas =
        json!({"replicas": 3, "updatedReplicas": 3, "readyReplicas": 2, "availableReplicas": 1});
    cluster
        .patch_status(&deployments, &namespace, "web", replicas)
        .await;
    let (_, _, table) = cluster
        .get_as(&collection(&deployments, Some(&namespace)), KUBECTL_TABLE)
        .await;
    assert_eq!(
        table_cells(&table),
        (
            names_and_priorities(&[
                ("Name", 0),
                ("Ready", 0),
                ("Up-to-date", 0),
                ("Available", 0),
                ("Age", 0),
                ("Containers", 1),
                ("Images", 1),
                ("Selector", 1)
            ]),
            vec![vec![
                json!("web"),
                json!("2/3"),
                json!(3),
                json!(1),
                json!("nginx,side"),
                json!("nginx:1.27,busybox"),
                json!("app=web,tier in (a,b)")
            ]]
        ),
        "{table}"
    );

    let namespaces = Resource::new("", "v1", "Namespace", "namespaces", false);
    let extra = format!("{namespace}-extra");
    cluster
        .create(&namespaces, json!({"metadata": {"name": extra}}))
        .await;
    let (_, _, table) = cluster
        .get_as(
            &format!("{}/{extra}", collection(&namespaces, None)),
            KUBECTL_TABLE,
        )
        .await;
    assert_eq!(
        table_cells(&table),
        (
            names_and_priorities(&[("Name", 0), ("Status", 0), ("Age", 0)]),
            vec![vec![json!(extra), json!("Active")]]
        ),
        "{table}"
    );

    let secrets = Resource::new("", "v1", "Secret", "secrets", true);
    let opaque = json!({"metadata": {"name": "opaque", "namespace": namespace},
                        "data": {"a": "AA=="}, "stringData": {"b": "y"}});
    cluster.create(&secrets, opaque).await;
    let typed = json!({"metadata": {"name": "typed", "namespace": namespace},
                       "type": "example.com/custom"});
    cluster.create(&secrets, typed).await;
    let (_, _, table) = cluster
        .get_as(&collection(&secrets, Some(&namespace)), KUBECTL_TABLE)
        .await;
    assert_eq!(
        table_cells(&table),
        (
            names_and_priorities(&[("Name", 0), ("Type", 0), ("Data", 0), ("Age", 0)]),
            vec![
                vec![json!("opaque"), json!("Opaque"), json!(2)],
                vec![json!("typed"), json!("example.com/custom"), json!(0)]
            ]
        ),
        "{table}"
    );

    let config_maps = configmaps();
    let config_map = json!({"metadata": {"name": "cfg", "namespace": namespace},
                            "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}});
    cluster.create(&config_maps, config_map).await;
    let listed = collection(&config_maps, Some(&namespace));
    let (_, _, table) = cluster.get_as(&listed, KUBECTL_TABLE).await;
    assert_eq!(
        table_cells(&table),
        (
            names_and_priorities(&[("Name", 0), ("Data", 0), ("Age", 0)]),
            vec![vec![json!("cfg"), json!(3)]]
        ),
        "{table}"
    );
    let (_, _, whole) = cluster
        .get_as(&format!("{listed}?includeObject=Object"), KUBECTL_TABLE)
        .await;
    assert_eq!(whole["rows"][0]["object"]["kind"], "ConfigMap", "{whole}");
    assert_eq!(whole["rows"][0]["object"]["data"]["a"], "1", "{whole}");
    let (_, _, bare) = cluster
        .get_as(&format!("{listed}?includeObject=None"), KUBECTL_TABLE)
        .await;
    assert!(
        bare["rows"][0]
            .get("object")
            .is_none_or(serde_json::Value::is_null),
        "{bare}"
    );

    // Events: one printer for both groups, as on the real server.
    let core_events = Resource::new("", "v1", "Event", "events", true);
    cluster.serve(core_events.clone());
    let now_micro = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string();
    let recorded = json!({
        "metadata": {"name": "audit.1", "namespace": namespace},
        "eventTime": now_micro, "reportingController": "kubeplug", "reportingInstance": "host-1",
        "action": "Audit", "reason": "MissingLabels", "type": "Warning",
        "note": "  missing labels: x  ",
        "regarding": {"kind": "Pod", "namespace": namespace, "name": "crashloop",
                      "fieldPath": "spec.containers{a}"},
    });
    let new_events = Resource::new("events.k8s.io", "v1", "Event", "events", true);
    cluster.create(&new_events, recorded).await;
    let legacy = json!({
        "metadata": {"name": "legacy.2", "namespace": namespace},
        "involvedObject": {"kind": "Namespace", "namespace": namespace},
        "reason": "Checked", "type": "Normal", "message": "ok", "count": 3,
        "firstTimestamp": ago(0), "lastTimestamp": ago(0),
        "source": {"component": "checker", "host": "node-a"},
    });
    cluster.create(&core_events, legacy).await;
    let event_columns = names_and_priorities(&[
        ("Last Seen", 0),
        ("Type", 0),
        ("Reason", 0),
        ("Object", 0),
        ("Subobject", 1),
        ("Source", 1),
        ("Message", 0),
        ("First Seen", 1),
        ("Count", 1),
        ("Name", 1),
    ]);
    let event_rows = vec![
        vec![
            json!("Warning"),
            json!("MissingLabels"),
            json!("pod/crashloop"),
            json!("spec.containers{a}"),
            json!("kubeplug, host-1"),
            json!("missing labels: x"),
            json!(1),
            json!("audit.1"),
        ],
        vec![
            json!("Normal"),
            json!("Checked"),
            json!("namespace"),
            json!(""),
            json!("checker, node-a"),
            json!("ok"),
            json!(3),
            json!("legacy.2"),
        ],
    ];
    for events in [&new_events, &core_events] {
        let (_, _, table) = cluster
            .get_as(&collection(events, Some(&namespace)), KUBECTL_TABLE)
            .await;
        assert_eq!(
            table_cells(&table),
            (event_columns.clone(), event_rows.clone()),
            "{table}"
        );
    }

    // A watch: one table per event, the column definitions in the first only.
    let version = table["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let watch = format!("{listed}?watch=1&resourceVersion={version}");
    let watching = cluster.lines_as(&watch, KUBECTL_TABLE, 2);
    let creating = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        for name in ["second", "third"] {
            let config_map =
                json!({"metadata": {"name": name, "namespace": namespace}, "data": {"k": "v"}});
            cluster.create(&config_maps, config_map).await;
        }
    };
    let ((code, _, events), ()) = tokio::join!(watching, creating);
    assert_eq!(code, 200);
    assert_eq!(events[0]["type"], "ADDED", "{}", events[0]);
    let (columns, rows) = table_cells(&events[0]["object"]);
    assert_eq!(
        (columns.len(), rows),
        (3, vec![vec![json!("second"), json!(1)]])
    );
    let next = &events[1]["object"];
    assert_eq!(next["kind"], "Table", "{next}");
    assert!(next["columnDefinitions"].is_null(), "{next}");
    assert_eq!(next["rows"][0]["cells"][0], "third", "{next}");

    // A streaming list is answered in objects, whatever the Accept. kube-apiserver on an
    // etcd without `RequestWatchProgress` (Debian's 3.4, in CI) refuses one in the stream
    // instead, with a Status: not a Table either.
    let streaming = format!(
        "{listed}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
    );
    let (_, _, first) = cluster.get_as(&streaming, KUBECTL_TABLE).await;
    let refused_by_etcd = matches!(cluster.backend, Backend::Real(_))
        && first["type"] == "ERROR"
        && first["object"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("RequestWatchProgress"));
    assert!(
        first["object"]["kind"] == "ConfigMap" || refused_by_etcd,
        "{first}"
    );
}

/// Field selectors beyond the key, as kube-apiserver v1.32 answers them: a Pod's node, phase
/// and host network; core Events by the object they regard (what `kubectl describe` asks
/// for), `events.k8s.io` Events by `regarding`, one stored Event answering in both groups; a
/// watch on a field, where an object that stops matching is `DELETED`; and a field the type
/// lacks, refused in the real server's words.
async fn selects_on_the_fields_the_real_server_selects_on(server: Server) {
    use serde_json::json;
    let Some(cluster) = Cluster::start(server).await else {
        return;
    };
    let namespace = cluster.pod_namespace("fields").await;
    let pods = Resource::new("", "v1", "Pod", "pods", true);
    let core_events = Resource::new("", "v1", "Event", "events", true);
    let new_events = Resource::new("events.k8s.io", "v1", "Event", "events", true);
    cluster.serve(core_events.clone());
    for (name, node, host_network) in [("a", "n1", true), ("b", "n2", false)] {
        let pod = json!({
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeName": node, "hostNetwork": host_network,
                     "containers": [{"name": "c", "image": "busybox"}]},
        });
        cluster.create(&pods, pod).await;
    }
    let running = json!({"phase": "Running", "podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}]});
    cluster.patch_status(&pods, &namespace, "a", running).await;

    // The names a list selects, sorted, and its resourceVersion; or the refusal.
    let select = |collection: String, fields: &str| {
        let path = format!("{collection}?fieldSelector={fields}");
        let cluster = &cluster;
        async move {
            let (code, _, list) = cluster.get_as(&path, "application/json").await;
            if code != 200 {
                return Err((
                    code,
                    list["message"].as_str().unwrap_or_default().to_owned(),
                ));
            }
            let mut names: Vec<String> = list["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|item| item["metadata"]["name"].as_str().unwrap().to_owned())
                .collect();
            names.sort();
            let version = list["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_owned();
            Ok((names, version))
        }
    };
    let pods_in = collection(&pods, Some(&namespace));
    for (fields, expected) in [
        ("spec.nodeName=n1", vec!["a"]),
        ("spec.nodeName!=n1", vec!["b"]),
        ("spec.hostNetwork=true", vec!["a"]),
        ("spec.hostNetwork=false", vec!["b"]),
        ("status.phase=Running", vec!["a"]),
        ("status.podIP=10.0.0.1,metadata.name=a", vec!["a"]),
        // Accepted, and never set.
        ("status.podIPs=", vec!["a", "b"]),
        ("spec.nodeName=n1,status.phase!=Running", vec![]),
    ] {
        let (names, _) = select(pods_in.clone(), fields).await.unwrap();
        assert_eq!(names, expected, "pods with {fields}");
    }

    let regarding_a = json!({"kind": "Pod", "namespace": namespace, "name": "a", "uid": "uid-a",
                             "apiVersion": "v1"});
    let legacy = json!({
        "metadata": {"name": "legacy.1", "namespace": namespace},
        "involvedObject": regarding_a,
        "reason": "Started", "type": "Normal", "message": "started",
        "source": {"component": "kubelet"},
    });
    cluster.create(&core_events, legacy).await;
    let warning = json!({
        "metadata": {"name": "legacy.2", "namespace": namespace},
        "involvedObject": {"kind": "Pod", "namespace": namespace, "name": "b", "uid": "uid-b"},
        "reason": "BackOff", "type": "Warning", "message": "back-off",
        "source": {"component": "kubelet"},
    });
    cluster.create(&core_events, warning).await;
    let now_micro = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string();
    let recorded = json!({
        "metadata": {"name": "audit.1", "namespace": namespace},
        "eventTime": now_micro, "reportingController": "kubeplug/audit",
        "reportingInstance": "host-1", "action": "Audit", "reason": "MissingLabels",
        "type": "Warning", "note": "missing labels: x", "regarding": regarding_a,
    });
    cluster.create(&new_events, recorded).await;
    let core_in = collection(&core_events, Some(&namespace));
    let describe = format!(
        "involvedObject.name=a,involvedObject.namespace={namespace},involvedObject.kind=Pod,\
         involvedObject.uid=uid-a"
    );
    for (fields, expected) in [
        (describe.as_str(), vec!["audit.1", "legacy.1"]),
        ("source=kubelet", vec!["legacy.1", "legacy.2"]),
        ("type=Warning,involvedObject.name!=b", vec!["audit.1"]),
        ("reportingComponent=kubeplug/audit", vec!["audit.1"]),
        ("reason=BackOff", vec!["legacy.2"]),
    ] {
        let (names, _) = select(core_in.clone(), fields).await.unwrap();
        assert_eq!(names, expected, "core Events with {fields}");
    }
    let new_in = collection(&new_events, Some(&namespace));
    for (fields, expected) in [
        ("regarding.name=b", vec!["legacy.2"]),
        ("reportingController=kubeplug/audit", vec!["audit.1"]),
        ("regarding.uid=uid-a,type=Normal", vec!["legacy.1"]),
    ] {
        let (names, _) = select(new_in.clone(), fields).await.unwrap();
        assert_eq!(names, expected, "events.k8s.io Events with {fields}");
    }

    let lacking = [
        (
            pods_in.clone(),
            "spec.priorityClassName=x,status.phase=Running",
            "field label not supported: spec.priorityClassName",
        ),
        (
            pods_in.clone(),
            "status.phase=x,spec.x=y,spec.a=b",
            "field label not supported: spec.a",
        ),
        (
            collection(
                &Resource::new("", "v1", "ConfigMap", "configmaps", true),
                Some(&namespace),
            ),
            "data.x=y",
            r#""data.x" is not a known field selector: only "metadata.name", "metadata.namespace""#,
        ),
        (
            collection(
                &Resource::new("", "v1", "Namespace", "namespaces", false),
                None,
            ),
            "metadata.namespace=x",
            "field label not supported: metadata.namespace",
        ),
        (
            core_in.clone(),
            "regarding.kind=Pod",
            "field label not supported: regarding.kind",
        ),
        (
            new_in.clone(),
            "source=kubelet",
            "field label not supported: source",
        ),
    ];
    for (collection, fields, message) in lacking {
        let refused = select(collection.clone(), fields).await.unwrap_err();
        assert_eq!(
            refused,
            (400, message.to_owned()),
            "{collection} with {fields}"
        );
    }

    // A watch on a field: a Pod that stops matching is DELETED, one that starts is ADDED.
    let (_, version) = select(pods_in.clone(), "status.phase=Running")
        .await
        .unwrap();
    let watch =
        format!("{pods_in}?watch=1&resourceVersion={version}&fieldSelector=status.phase=Running");
    let watching = cluster.lines_as(&watch, "application/json", 2);
    let changing = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let finished = json!({"phase": "Succeeded"});
        cluster.patch_status(&pods, &namespace, "a", finished).await;
        let started = json!({"phase": "Running"});
        cluster.patch_status(&pods, &namespace, "b", started).await;
    };
    let ((code, _, events), ()) = tokio::join!(watching, changing);
    assert_eq!(code, 200);
    let seen: Vec<(&str, &str)> = events
        .iter()
        .map(|event| {
            (
                event["type"].as_str().unwrap(),
                event["object"]["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(seen, [("DELETED", "a"), ("ADDED", "b")], "{events:?}");
}
