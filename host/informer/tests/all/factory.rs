//! Informers shared between handlers, and keyed by what their selectors mean.

use std::time::Duration;

use std::sync::Arc;

use kubeplug_informer::factory::{
    FactoryError, InformerKey, Needs, SharedInformerFactory, SourceProvider,
};
use kubeplug_informer::informer::HandlerOptions;
use kubeplug_informer::reflector::ReflectorConfig;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::source::ListerWatcher;
use kubeplug_memory::MemoryServer;

/// Serves every key from one in-memory server.
struct Memory(MemoryServer);

impl SourceProvider for Memory {
    fn lister_watcher(&self, key: &InformerKey) -> Result<Arc<dyn ListerWatcher>, FactoryError> {
        Ok(Arc::new(self.0.lister_watcher(
            key.resource.clone(),
            key.namespace.clone(),
            None,
            None,
        )))
    }

    fn metadata_lister_watcher(
        &self,
        key: &InformerKey,
    ) -> Result<Option<Arc<dyn ListerWatcher>>, FactoryError> {
        let source = self
            .0
            .lister_watcher(key.resource.clone(), key.namespace.clone(), None, None);
        Ok(Some(Arc::new(source.metadata_only())))
    }
}

fn pods() -> InformerKey {
    InformerKey::all(Resource::new("", "v1", "Pod", "pods", true))
}

#[tokio::test(start_paused = true)]
async fn selectors_that_say_the_same_share_one_informer() {
    let server = MemoryServer::new();
    let factory =
        SharedInformerFactory::new(Arc::new(Memory(server.clone())), ReflectorConfig::default());
    let with = |labels: &str, fields: &str| InformerKey {
        labels: labels.parse().unwrap(),
        fields: fields.parse().unwrap(),
        ..pods()
    };
    let first = factory
        .subscribe(
            with("app=web,tier in (b, a)", "metadata.name=x"),
            HandlerOptions::default(),
        )
        .unwrap();
    let second = factory
        .subscribe(
            with(" tier in (a,b), app = web,app=web", " metadata.name=x "),
            HandlerOptions::default(),
        )
        .unwrap();
    let lease = factory.lease(with("", ""), Needs::Bodies).unwrap();
    factory.wait_for_cache_sync().await;
    let keys = factory.keys();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(
        keys.contains(&pods()),
        "empty selectors select all: {keys:?}"
    );
    assert!(keys.contains(&with("app=web,tier in (a,b)", "metadata.name=x")));
    assert_eq!(server.list_calls(), 2);
    assert!(
        factory
            .informer(&with("tier in (a,b),app=web", "metadata.name=x"))
            .is_some()
    );
    drop((first, second, lease));
}

#[tokio::test(start_paused = true)]
async fn handlers_share_one_informer_which_stops_after_the_last_user() {
    let server = MemoryServer::new();
    server
        .create(
            &pods().resource,
            r#"{"metadata":{"name":"a","namespace":"ns"}}"#,
        )
        .unwrap();
    let factory =
        SharedInformerFactory::new(Arc::new(Memory(server.clone())), ReflectorConfig::default());
    let first = factory
        .subscribe(pods(), HandlerOptions::default())
        .unwrap();
    let second = factory
        .subscribe(pods(), HandlerOptions::default())
        .unwrap();
    let lease = factory.lease(pods(), Needs::Bodies).unwrap();
    factory.wait_for_cache_sync().await;
    assert_eq!(factory.keys(), [pods()]);
    assert_eq!(
        server.list_calls(),
        1,
        "N handlers cost one list and one watch"
    );
    assert_eq!(lease.informer().indexer().len(), 1);

    let (first, mut receiver) = first.into_parts();
    let batch = receiver.recv_batch(10).await.unwrap();
    assert_eq!(batch[0].key().as_str(), "ns/a");
    drop(batch);

    drop(second);
    drop(first);
    assert_eq!(factory.keys(), [pods()], "the lease keeps it running");
    assert!(
        receiver.recv_batch(1).await.is_none(),
        "dropping the registration unregisters"
    );
    drop(lease);
    assert!(factory.keys().is_empty());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        server.open_watches(),
        0,
        "the stopped informer closed its watch"
    );
}

/// Issue 24: an informer lists and watches metadata alone while none of its users needs
/// bodies; the first that does switches it to whole objects, the last one's going back.
#[tokio::test(start_paused = true)]
async fn an_informer_sends_metadata_alone_while_no_user_needs_bodies() {
    let server = MemoryServer::new();
    server
        .create(
            &pods().resource,
            r#"{"metadata":{"name":"a","namespace":"ns"},"spec":{"x":1}}"#,
        )
        .unwrap();
    let factory =
        SharedInformerFactory::new(Arc::new(Memory(server.clone())), ReflectorConfig::default());
    let metadata = HandlerOptions {
        metadata_only: true,
        ..HandlerOptions::default()
    };
    let labels = factory.subscribe(pods(), metadata.clone()).unwrap();
    factory.wait_for_cache_sync().await;
    let informer = factory.informer(&pods()).unwrap();
    let has_body = || {
        informer
            .indexer()
            .get("ns/a")
            .unwrap()
            .json()
            .contains("spec")
    };
    assert!(informer.is_metadata_only());
    assert!(!has_body());

    let reader = factory.lease(pods(), Needs::Bodies).unwrap();
    assert!(!informer.is_metadata_only());
    while !has_body() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let more_labels = factory.subscribe(pods(), metadata).unwrap();
    assert!(!informer.is_metadata_only(), "a user still needs bodies");

    drop(reader);
    assert!(informer.is_metadata_only());
    while has_body() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(server.list_calls(), 3, "one list per form");
    drop((labels, more_labels));
    assert!(factory.keys().is_empty());
}

/// Sharding: a replica that gains keys has the cache replay them to its handler, in order
/// with the live changes, as adds flagged `in_initial_list`.
#[tokio::test(start_paused = true)]
async fn a_registration_replays_the_cached_objects_it_picks_in_order_with_live_changes() {
    let server = MemoryServer::new();
    for name in ["a", "b", "c"] {
        server
            .create(
                &pods().resource,
                &format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}}}}"#),
            )
            .unwrap();
    }
    let factory =
        SharedInformerFactory::new(Arc::new(Memory(server.clone())), ReflectorConfig::default());
    let (registration, mut receiver) = factory
        .subscribe(pods(), HandlerOptions::default())
        .unwrap()
        .into_parts();
    factory.wait_for_cache_sync().await;
    let initial = receiver.recv_batch(10).await.unwrap();
    assert_eq!(initial.len(), 3);
    drop(initial);

    let replayed = registration.replay(&|object| object.name() != "b");
    assert_eq!(replayed, 2);
    server
        .update(
            &pods().resource,
            r#"{"metadata":{"name":"a","namespace":"ns","labels":{"v":"2"}}}"#,
        )
        .unwrap();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let batch = receiver.recv_batch(10).await.unwrap();
        seen.extend(batch.iter().map(|n| {
            let initial = matches!(
                n,
                kubeplug_informer::listener::Notification::Add {
                    in_initial_list: true,
                    ..
                }
            );
            (n.key().as_str().to_owned(), initial)
        }));
    }
    // The cache's order is a map's; the live change comes after the replay.
    seen[..2].sort();
    assert_eq!(
        seen,
        [
            ("ns/a".to_owned(), true),
            ("ns/c".to_owned(), true),
            ("ns/a".to_owned(), false),
        ]
    );
}
