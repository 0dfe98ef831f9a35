//! Informers shared between handlers, and keyed by what their selectors mean.

use std::time::Duration;

use std::sync::Arc;

use kubeplug_informer::factory::{
    FactoryError, Form, InformerKey, SharedInformerFactory, SourceProvider, StartGate,
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
    let lease = factory.lease(with("", "")).unwrap();
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
    let lease = factory.lease(pods()).unwrap();
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

/// Issue 41: an informer nobody uses lingers before it stops. A user back within the linger
/// finds it warm (no new list, no new watch); once the linger passes with nobody back, it
/// stops and closes its watch.
#[tokio::test(start_paused = true)]
async fn an_unused_informer_lingers_then_stops() {
    let server = MemoryServer::new();
    let linger = Duration::from_secs(30);
    let factory =
        SharedInformerFactory::new(Arc::new(Memory(server.clone())), ReflectorConfig::default())
            .with_linger(linger);
    let lease = factory.lease(pods()).unwrap();
    factory.wait_for_cache_sync().await;
    drop(lease);
    tokio::time::sleep(linger - Duration::from_secs(1)).await;
    assert_eq!(factory.keys(), [pods()], "lingering");
    let back = factory.lease(pods()).unwrap();
    assert!(back.informer().has_synced(), "warm");
    // The first linger ends while a user holds it: nothing happens.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(factory.keys(), [pods()]);
    drop(back);
    tokio::time::sleep(linger - Duration::from_secs(1)).await;
    assert_eq!(
        factory.keys(),
        [pods()],
        "a second linger, from the second drop"
    );
    assert_eq!((server.list_calls(), server.open_watches()), (1, 1));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(factory.keys().is_empty());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        server.open_watches(),
        0,
        "the stopped informer closed its watch"
    );
}

/// Issue 41: a caller's gate is asked before each informer it would start, never for one
/// that runs or lingers, and a refusal starts nothing.
#[tokio::test(start_paused = true)]
async fn a_start_gate_is_asked_only_for_new_informers() {
    struct Budget(std::sync::Mutex<Vec<String>>, usize);
    impl StartGate for Budget {
        fn admit(&self, key: &InformerKey) -> bool {
            let mut asked = self.0.lock().unwrap();
            asked.push(key.to_string());
            asked.len() <= self.1
        }
    }
    let server = MemoryServer::new();
    let factory =
        SharedInformerFactory::new(Arc::new(Memory(server.clone())), ReflectorConfig::default())
            .with_linger(Duration::from_secs(30));
    let budget = Budget(std::sync::Mutex::default(), 1);
    let first = factory.lease_gated(pods(), &budget).unwrap();
    let again = factory
        .subscribe_gated(pods(), HandlerOptions::default(), &budget)
        .unwrap();
    drop((first, again));
    let lingering = factory.lease_gated(pods(), &budget).unwrap();
    let metadata = InformerKey {
        form: Form::Metadata,
        ..pods()
    };
    let refused = factory.lease_gated(metadata.clone(), &budget).unwrap_err();
    assert!(
        matches!(&refused, FactoryError::StartRefused { key } if key == &metadata.to_string()),
        "{refused}"
    );
    assert_eq!(
        *budget.0.lock().unwrap(),
        [pods().to_string(), metadata.to_string()],
        "asked once per informer it would start"
    );
    assert_eq!(factory.keys(), [pods()], "the refused one never started");
    factory.wait_for_cache_sync().await;
    assert_eq!(server.list_calls(), 1);
    drop(lingering);
}

/// Issue 41: the form is part of the key. A type read both ways at once is two informers,
/// one of metadata alone and one of whole objects; each handler sees every change once, and
/// one form's users coming and going never relists the other's.
#[tokio::test(start_paused = true)]
async fn each_form_is_an_informer_of_its_own() {
    let server = MemoryServer::new();
    let pod = |name: &str, x: u32| {
        format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}},"spec":{{"x":{x}}}}}"#)
    };
    server.create(&pods().resource, &pod("a", 1)).unwrap();
    let factory =
        SharedInformerFactory::new(Arc::new(Memory(server.clone())), ReflectorConfig::default());
    let metadata_key = InformerKey {
        form: Form::Metadata,
        ..pods()
    };
    let mut labels = factory
        .subscribe(metadata_key.clone(), HandlerOptions::default())
        .unwrap();
    let mut bodies = factory
        .subscribe(pods(), HandlerOptions::default())
        .unwrap();
    assert_eq!(labels.key(), &metadata_key);
    factory.wait_for_cache_sync().await;
    let metadata = factory.informer(&metadata_key).unwrap();
    let whole = factory.informer(&pods()).unwrap();
    assert!(metadata.is_metadata_only() && !whole.is_metadata_only());
    let json = |informer: &kubeplug_informer::informer::SharedIndexInformer| {
        informer.indexer().get("ns/a").unwrap().json().to_owned()
    };
    assert!(!json(&metadata).contains("spec") && json(&whole).contains("spec"));
    assert_eq!(server.list_calls(), 2, "one list per form");

    server.update(&pods().resource, &pod("a", 2)).unwrap();
    server.create(&pods().resource, &pod("b", 1)).unwrap();
    for receiver in [&mut labels, &mut bodies] {
        let mut seen = Vec::new();
        while seen.len() < 3 {
            let batch = receiver.recv_batch(8).await.unwrap();
            seen.extend(batch.iter().map(|n| n.key().to_string()));
        }
        assert_eq!(
            seen,
            ["ns/a", "ns/a", "ns/b"],
            "the add, the update, the new pod"
        );
    }

    // Another user of whole objects comes and goes: the metadata informer sees nothing of it.
    let reader = factory.lease(pods()).unwrap();
    drop(reader);
    drop(bodies);
    assert_eq!(factory.keys(), std::slice::from_ref(&metadata_key));
    server.update(&pods().resource, &pod("b", 2)).unwrap();
    let batch = labels.recv_batch(8).await.unwrap();
    assert_eq!(batch.len(), 1, "only the live change");
    assert_eq!(server.list_calls(), 2, "nobody relisted");
    assert_eq!(metadata.reflector_counts().lists, 1);
}

/// A provider that serves no metadata serves whole objects to readers of metadata, under the
/// key of whole objects: one informer, not two of the same form.
#[tokio::test(start_paused = true)]
async fn without_metadata_from_the_provider_both_forms_share_the_whole_objects() {
    struct WholeOnly(MemoryServer);
    impl SourceProvider for WholeOnly {
        fn lister_watcher(
            &self,
            key: &InformerKey,
        ) -> Result<Arc<dyn ListerWatcher>, FactoryError> {
            Memory(self.0.clone()).lister_watcher(key)
        }
    }
    let server = MemoryServer::new();
    let factory = SharedInformerFactory::new(
        Arc::new(WholeOnly(server.clone())),
        ReflectorConfig::default(),
    );
    let metadata_key = InformerKey {
        form: Form::Metadata,
        ..pods()
    };
    let labels = factory
        .subscribe(metadata_key, HandlerOptions::default())
        .unwrap();
    let lease = factory.lease(pods()).unwrap();
    assert_eq!(labels.key(), &pods());
    assert_eq!(factory.keys(), [pods()]);
    assert!(!lease.informer().is_metadata_only());
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
