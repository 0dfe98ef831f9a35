//! The kube source against a real kube-apiserver v1.32 (`kubeplug-envtest`): one control
//! plane for the binary, a namespace per test. CI runs it on etcd 3.5.16 and on Debian's etcd
//! 3.4, which lacks `RequestWatchProgress`.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kubeplug_envtest::{Envtest, User};
use kubeplug_informer::informer::SharedIndexInformer;
use kubeplug_informer::object::ObjectDecoder;
use kubeplug_informer::reflector::{ReflectorConfig, ReflectorError};
use kubeplug_informer::resource::Resource;
use kubeplug_kube::config::{ConfigSource, KubeClient};
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
        None,
        None,
        KubeSourceOptions::default(),
    );
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = errors.clone();
    let informer = SharedIndexInformer::with_error_handler(
        Arc::new(source),
        ObjectDecoder::new(configmaps()),
        ReflectorConfig::default(),
        Some(Arc::new(move |error: &ReflectorError| {
            seen.lock().unwrap().push(error.to_string());
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
