//! The kube source against a real kube-apiserver v1.32 (`kubeplug-envtest`): one control
//! plane for the binary, a namespace per test, and one of its own for the test that restarts
//! and compacts. CI runs it on etcd 3.5.16 and on Debian's etcd 3.4, which lacks
//! `RequestWatchProgress`.

mod both;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kubeplug_envtest::{AfterCut, Envtest, Options, User};
use kubeplug_informer::informer::{HandlerOptions, SharedIndexInformer};
use kubeplug_informer::listener::{ListenerReceiver, Notification};
use kubeplug_informer::object::ObjectDecoder;
use kubeplug_informer::reflector::{InitialListMode, ReflectorConfig, ReflectorError};
use kubeplug_informer::resource::Resource;
use kubeplug_kube::config::{ConfigSource, KubeClient, Loaded, Origin};
use kubeplug_kube::lister::{KubeListerWatcher, KubeSourceOptions};

fn configmaps() -> Resource {
    Resource::new("", "v1", "ConfigMap", "configmaps", true)
}

/// The kube client the host would build from the control plane's kubeconfig.
async fn host_client(env: &Envtest) -> KubeClient {
    let source = ConfigSource::Kubeconfig {
        path: env.kubeconfig().to_owned(),
        context: None,
    };
    KubeClient::from_source(&source).await.expect("client")
}

/// The regression: on an etcd without `RequestWatchProgress`, v1.32 accepts a streaming list
/// and then sends an in-stream `ERROR` (500); the informer only fell back on 400/422 when
/// opening, so it never synced. Now it falls back as client-go does, and syncs on both
/// backends (by streaming on etcd 3.5.16).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_initial_list_syncs_whether_or_not_etcd_can_stream_it() {
    let Some(env) = Envtest::shared() else { return };
    let namespace = env.namespace("initial-list").unwrap();
    let admin: Api<ConfigMap> = Api::namespaced(env.client(User::Admin).unwrap(), &namespace);
    let mut expected = BTreeSet::new();
    for i in 0..5 {
        let mut map = ConfigMap::default();
        map.metadata.name = Some(format!("cm-{i}"));
        admin.create(&PostParams::default(), &map).await.unwrap();
        expected.insert(format!("{namespace}/cm-{i}"));
    }

    let source = KubeListerWatcher::new(
        host_client(env).await,
        configmaps(),
        Some(namespace),
        KubeSourceOptions::default(),
    );
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = errors.clone();
    let informer = SharedIndexInformer::with_error_handler(
        Arc::new(source),
        ObjectDecoder::new(configmaps()),
        ReflectorConfig::default(),
        Some(Arc::new(move |error: &ReflectorError| {
            seen.lock()
                .unwrap()
                .push(kubeplug_kube::config::error_chain(error));
        })),
    );
    informer.start();
    let synced = tokio::time::timeout(Duration::from_secs(60), informer.wait_for_sync()).await;
    let errors = errors.lock().unwrap().clone();
    assert!(synced.is_ok(), "not synced after 60 s; errors: {errors:?}");
    let cached: BTreeSet<String> = informer
        .indexer()
        .list()
        .iter()
        .map(|object| object.key().to_string())
        .collect();
    assert_eq!(cached, expected);
    // At most the one refusal in the stream; no retry storm.
    assert!(errors.len() <= 1, "{errors:?}");
    informer.stop().await;
}

/// An informer of ConfigMaps in `namespace` over `client`, recording its errors.
fn informer(
    client: KubeClient,
    namespace: &str,
    config: ReflectorConfig,
) -> (SharedIndexInformer, Arc<Mutex<Vec<String>>>) {
    let source = KubeListerWatcher::new(
        client,
        configmaps(),
        Some(namespace.to_owned()),
        KubeSourceOptions::default(),
    );
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = errors.clone();
    let informer = SharedIndexInformer::with_error_handler(
        Arc::new(source),
        ObjectDecoder::new(configmaps()),
        config,
        Some(Arc::new(move |error: &ReflectorError| {
            seen.lock()
                .unwrap()
                .push(kubeplug_kube::config::error_chain(error));
        })),
    );
    (informer, errors)
}

/// Keys and resourceVersions of what `informer` caches.
fn cached(informer: &SharedIndexInformer) -> BTreeMap<String, String> {
    informer
        .indexer()
        .list()
        .iter()
        .map(|o| (o.key().to_string(), o.resource_version().to_string()))
        .collect()
}

/// Keys and resourceVersions of the ConfigMaps the server holds in `namespace`.
async fn on_server(api: &Api<ConfigMap>, namespace: &str) -> BTreeMap<String, String> {
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|map| {
            let meta = map.metadata;
            (
                format!("{namespace}/{}", meta.name.unwrap()),
                meta.resource_version.unwrap(),
            )
        })
        .collect()
}

/// Polls until `informer` caches what the server holds; fails with both after `timeout`.
async fn converges(informer: &SharedIndexInformer, api: &Api<ConfigMap>, namespace: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let expected = on_server(api, namespace).await;
        let cache = cached(informer);
        if cache == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the cache did not converge in 60 s:\n cache  {cache:?}\n server {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What `receiver` holds now: batches until none comes for half a second.
async fn drain(receiver: &mut ListenerReceiver) -> Vec<Notification> {
    let mut notifications = Vec::new();
    while let Ok(Some(batch)) =
        tokio::time::timeout(Duration::from_millis(500), receiver.recv_batch(1024)).await
    {
        notifications.extend(batch.iter().cloned());
    }
    notifications
}

fn named(name: &str, value: &str) -> ConfigMap {
    let mut map = ConfigMap::default();
    map.metadata.name = Some(name.to_owned());
    map.data = Some([("v".to_owned(), value.to_owned())].into());
    map
}

/// A list in pages of two, then a watch; its changes; and bookmarks, which move the informer
/// to the server's current version though nothing in its namespace changed (the API server
/// sends one shortly before a watch's timeout, here a few seconds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paged_list_a_watch_and_its_bookmarks() {
    let Some(env) = Envtest::shared() else { return };
    let namespace = env.namespace("paged").unwrap();
    let admin = env.client(User::Admin).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(admin.clone(), &namespace);
    for i in 0..7 {
        api.create(&PostParams::default(), &named(&format!("cm-{i}"), "0"))
            .await
            .unwrap();
    }
    let config = ReflectorConfig {
        page_size: Some(2),
        initial_list: InitialListMode::ListThenWatch,
        watch_timeout: Duration::from_secs(4)..Duration::from_secs(5),
        ..ReflectorConfig::default()
    };
    let (informer, errors) = informer(host_client(env).await, &namespace, config);
    informer.start();
    tokio::time::timeout(Duration::from_secs(60), informer.wait_for_sync())
        .await
        .expect("synced within 60 s");
    assert_eq!(
        cached(&informer),
        on_server(&api, &namespace).await,
        "7 in pages of 2"
    );

    api.replace("cm-1", &PostParams::default(), &{
        let mut map = api.get("cm-1").await.unwrap();
        map.data = Some([("v".to_owned(), "1".to_owned())].into());
        map
    })
    .await
    .unwrap();
    api.delete("cm-2", &DeleteParams::default()).await.unwrap();
    api.create(&PostParams::default(), &named("cm-new", "0"))
        .await
        .unwrap();
    converges(&informer, &api, &namespace).await;

    // A write elsewhere: only a bookmark can bring this namespace's informer to its version.
    let elsewhere = env.namespace("paged-elsewhere").unwrap();
    let other: Api<ConfigMap> = Api::namespaced(admin, &elsewhere);
    let written = other
        .create(&PostParams::default(), &named("moves-the-version", "0"))
        .await
        .unwrap();
    let target: u64 = written.metadata.resource_version.unwrap().parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while informer
        .last_sync_resource_version()
        .parse::<u64>()
        .is_ok_and(|synced| synced < target)
    {
        assert!(
            Instant::now() < deadline,
            "no bookmark moved the informer from {} to {target} in 30 s",
            informer.last_sync_resource_version()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(informer.reflector_counts().lists, 1, "never relisted");
    assert!(errors.lock().unwrap().is_empty(), "{errors:?}");
    informer.stop().await;
}

/// A type the host's user may not list: the error names the resource, the user and the
/// server's refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbidden_list_names_the_resource_and_the_user() {
    let Some(env) = Envtest::shared() else { return };
    let namespace = env.namespace("forbidden").unwrap();
    let loaded = Loaded {
        config: env.kube_config(User::Unprivileged),
        origin: Origin {
            file: None,
            context: None,
            address: env.apiserver_addr().to_string(),
        },
    };
    let client = KubeClient::new(loaded).unwrap();
    let (informer, errors) = informer(client, &namespace, ReflectorConfig::default());
    informer.start();
    let deadline = Instant::now() + Duration::from_secs(30);
    while errors.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "no error in 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let error = errors.lock().unwrap()[0].clone();
    for part in ["403", "configmaps", User::Unprivileged.name(), &namespace] {
        assert!(error.contains(part), "{error:?} does not name {part:?}");
    }
    assert!(!informer.has_synced());
    informer.stop().await;
}

/// On a control plane of its own without the watch cache (so that a compaction expires
/// watches, as on etcd directly): the API server restarted in the middle of writes, then
/// the informer cut off while objects are deleted and created and etcd compacts: its watch
/// gets `410 Gone`, it lists again, and the deletions it missed reach its handler as
/// tombstones. Each time the cache ends equal to the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_follows_a_restart_mid_churn_and_a_relist_after_410() {
    let Some(mut env) = Envtest::start_or_skip(&Options::default().watch_cache(false)) else {
        return;
    };
    let namespace = env.namespace("outages").unwrap();
    let admin = env.client(User::Admin).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(admin, &namespace);
    for i in 0..20 {
        api.create(&PostParams::default(), &named(&format!("cm-{i:02}"), "0"))
            .await
            .unwrap();
    }
    let proxy = env.proxy().unwrap();
    let loaded = Loaded {
        config: env.kube_config_via(User::Admin, &proxy),
        origin: Origin {
            file: None,
            context: None,
            address: proxy.addr().to_string(),
        },
    };
    let config = ReflectorConfig {
        // Short back-offs: the test waits out the outages, not the schedule.
        backoff_initial: Duration::from_millis(100),
        backoff_max: Duration::from_secs(2),
        ..ReflectorConfig::default()
    };
    let (informer, _errors) = informer(KubeClient::new(loaded).unwrap(), &namespace, config);
    let mut notifications = informer.add_handler(HandlerOptions::default());
    informer.start();
    tokio::time::timeout(Duration::from_secs(60), informer.wait_for_sync())
        .await
        .expect("synced within 60 s");

    // Writes that keep going (retried) while the API server restarts under them.
    let writer = api.clone();
    let churn = tokio::spawn(async move {
        for round in 0..60 {
            let name = format!("cm-{:02}", round % 20);
            loop {
                let done = match round % 3 {
                    0 => writer
                        .delete(&name, &DeleteParams::default())
                        .await
                        .map(drop),
                    _ => writer
                        .create(
                            &PostParams::default(),
                            &named(&format!("{name}-{round}"), "1"),
                        )
                        .await
                        .map(drop),
                };
                match done {
                    Ok(()) | Err(kube::Error::Api(_)) => break,
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    tokio::task::block_in_place(|| env.restart_apiserver()).unwrap();
    churn.await.unwrap();
    converges(&informer, &api, &namespace).await;

    // Cut off: deletions and creations it cannot see, then a compaction past them.
    drain(&mut notifications).await;
    let before = informer.reflector_counts().lists;
    proxy.cut(AfterCut::Refuse);
    let gone: Vec<String> = on_server(&api, &namespace)
        .await
        .into_keys()
        .take(3)
        .collect();
    for key in &gone {
        let name = key.rsplit_once('/').unwrap().1;
        api.delete(name, &DeleteParams::default()).await.unwrap();
    }
    for name in ["late-1", "late-2"] {
        api.create(&PostParams::default(), &named(name, "0"))
            .await
            .unwrap();
    }
    tokio::task::block_in_place(|| env.compact()).unwrap();
    proxy.accept_again();
    converges(&informer, &api, &namespace).await;
    assert!(
        informer.reflector_counts().lists > before,
        "relisted after 410"
    );

    let mut tombstones = Vec::new();
    let mut added = Vec::new();
    for notification in drain(&mut notifications).await {
        match notification {
            Notification::Delete {
                object,
                final_state_unknown,
            } => {
                assert!(final_state_unknown, "a deletion seen only by the relist");
                tombstones.push(object.key().to_string());
            }
            Notification::Add { object, .. } => added.push(object.key().to_string()),
            Notification::Update { .. } => {}
        }
    }
    tombstones.sort();
    assert_eq!(tombstones, gone);
    added.sort();
    assert_eq!(
        added,
        [format!("{namespace}/late-1"), format!("{namespace}/late-2")]
    );
    informer.stop().await;
}
