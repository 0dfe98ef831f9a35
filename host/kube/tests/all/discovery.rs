//! Discovery against the fake server: built-ins, unknown kinds, a CRD served after start, and
//! an informer built through the factory for it.

use std::sync::Arc;
use std::time::Duration;

use kubeplug_fake_apiserver::FakeOptions;
use kubeplug_informer::factory::{InformerKey, SharedInformerFactory};
use kubeplug_informer::informer::HandlerOptions;
use kubeplug_informer::resource::Resource;
use kubeplug_kube::discovery::{DiscoveryError, MISS_TTL};
use kubeplug_kube::lister::KubeSourceOptions;
use kubeplug_kube::provider::KubeSourceProvider;

use crate::support::{quick_config, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_served_after_start_is_discovered_and_watched() {
    let f = start(FakeOptions::default()).await;
    let provider = KubeSourceProvider::new(f.client.clone(), KubeSourceOptions::default());
    let discovery = provider.discovery().clone();
    let lease = discovery
        .resolve("coordination.k8s.io", "v1", "Lease")
        .await
        .unwrap();
    assert_eq!((lease.plural.as_str(), lease.namespaced), ("leases", true));
    let node = discovery.resolve("", "v1", "Node").await.unwrap();
    assert_eq!((node.plural.as_str(), node.namespaced), ("nodes", false));
    match discovery.resolve("", "v1", "Gizmo").await {
        Err(DiscoveryError::KindNotServed { kind, served, .. }) => {
            assert_eq!(kind, "Gizmo");
            assert!(served.contains("ConfigMap"));
        }
        other => panic!("{other:?}"),
    }
    let error = discovery
        .resolve("example.com", "v1", "Widget")
        .await
        .unwrap_err();
    assert!(
        matches!(error, DiscoveryError::GroupVersionNotServed { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("Widget"), "{error}");

    // The CRD is installed: the next lookup after the miss cache's time refreshes and finds
    // it.
    tokio::time::sleep(MISS_TTL).await;
    let widgets = Resource::new("example.com", "v1", "Widget", "widgets", false);
    f.server.serve(widgets.clone());
    f.server
        .memory()
        .create(&widgets, r#"{"metadata":{"name":"w1"}}"#)
        .unwrap();
    let resolved = discovery
        .resolve("example.com", "v1", "Widget")
        .await
        .unwrap();
    assert_eq!(resolved, widgets);

    let factory = SharedInformerFactory::new(Arc::new(provider), quick_config());
    let subscription = factory
        .subscribe(InformerKey::all(resolved), HandlerOptions::default())
        .unwrap();
    tokio::time::timeout(Duration::from_secs(20), factory.wait_for_cache_sync())
        .await
        .unwrap();
    assert!(subscription.informer().indexer().get("w1").is_some());
    factory.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_caches_every_served_group_version() {
    let f = start(FakeOptions::default()).await;
    let discovery = KubeSourceProvider::new(f.client.clone(), KubeSourceOptions::default())
        .discovery()
        .clone();
    assert_eq!(discovery.cached("coordination.k8s.io", "v1", "Lease"), None);
    // v1, events.k8s.io/v1 and coordination.k8s.io/v1 are built in.
    assert_eq!(discovery.warm().await.unwrap(), 3);
    let requests_after_warm = f.server.requests().len();
    let lease = discovery
        .cached("coordination.k8s.io", "v1", "Lease")
        .unwrap();
    assert_eq!((lease.plural.as_str(), lease.namespaced), ("leases", true));
    let node = discovery.cached("", "v1", "Node").unwrap();
    assert_eq!((node.plural.as_str(), node.namespaced), ("nodes", false));
    assert_eq!(discovery.cached("", "v1", "Gizmo"), None);
    assert_eq!(
        f.server.requests().len(),
        requests_after_warm,
        "cached never asks the server"
    );
}

/// Regression (issue 18): every plugin file waiting for a CRD asked discovery again on each
/// retry. Misses are now answered from the last fetch for [`MISS_TTL`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misses_within_the_miss_cache_time_ask_the_server_once() {
    let f = start(FakeOptions::default()).await;
    let discovery = KubeSourceProvider::new(f.client.clone(), KubeSourceOptions::default())
        .discovery()
        .clone();
    let asked = |path: &str| f.server.requests().iter().filter(|r| r.uri == path).count();
    for _ in 0..20 {
        let missing = discovery.resolve("example.com", "v1", "Widget").await;
        assert!(
            matches!(missing, Err(DiscoveryError::GroupVersionNotServed { .. })),
            "{missing:?}"
        );
        let unknown = discovery.resolve("", "v1", "Gizmo").await;
        assert!(
            matches!(unknown, Err(DiscoveryError::KindNotServed { .. })),
            "{unknown:?}"
        );
    }
    assert_eq!(asked("/apis/example.com/v1"), 1);
    assert_eq!(asked("/api/v1"), 1);
    // Kinds the document holds are still answered from it, and after the time a miss asks
    // again.
    assert!(discovery.resolve("", "v1", "ConfigMap").await.is_ok());
    tokio::time::sleep(MISS_TTL).await;
    assert!(discovery.resolve("", "v1", "Gizmo").await.is_err());
    assert_eq!(asked("/api/v1"), 2);
}
