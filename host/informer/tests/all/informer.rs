//! The informer against the in-memory server: what a handler author would notice.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use kubeplug_informer::informer::{HandlerOptions, SharedIndexInformer};
use kubeplug_informer::listener::{ListenerReceiver, Notification};
use kubeplug_informer::object::{ObjectDecoder, ObjectKey};
use kubeplug_informer::reflector::{ReflectorConfig, ReflectorError};
use kubeplug_informer::resource::Resource;
use kubeplug_informer::source::Status;
use kubeplug_memory::{Call, Fault, Garbage, MemoryServer, ServerConfig};

fn pods() -> Resource {
    Resource::new("", "v1", "Pod", "pods", true)
}

fn pod(name: &str, generation: u32) -> String {
    format!(
        r#"{{"metadata":{{"name":"{name}","namespace":"ns","labels":{{"gen":"{generation}"}}}},"spec":{{"x":{generation}}}}}"#
    )
}

fn informer_on(server: &MemoryServer) -> SharedIndexInformer {
    let source = Arc::new(server.lister_watcher(pods(), None, None, None));
    SharedIndexInformer::new(
        source,
        ObjectDecoder::new(pods()),
        ReflectorConfig::default(),
    )
}

/// The server's state as key → resourceVersion.
fn server_state(server: &MemoryServer) -> BTreeMap<String, u64> {
    let decoder = ObjectDecoder::new(pods());
    server
        .snapshot(&pods())
        .values()
        .map(|json| {
            let object = decoder.decode(json).unwrap();
            (object.key().to_string(), object.resource_version())
        })
        .collect()
}

fn cache_state(informer: &SharedIndexInformer) -> BTreeMap<String, u64> {
    informer
        .indexer()
        .list()
        .iter()
        .map(|o| (o.key().to_string(), o.resource_version()))
        .collect()
}

/// What one handler has been told, key by key, and the order it was told in.
#[derive(Default, Debug)]
struct View {
    /// Last state per key: its resourceVersion, or gone.
    last: BTreeMap<String, Option<u64>>,
    log: Vec<(String, &'static str, u64, bool)>,
}

impl View {
    fn apply(&mut self, notification: &Notification) {
        let key = notification.key().to_string();
        let rv = notification.object().resource_version();
        let (kind, flag) = match notification {
            Notification::Add {
                in_initial_list, ..
            } => ("add", *in_initial_list),
            Notification::Update { resync, .. } => ("update", *resync),
            Notification::Delete {
                final_state_unknown,
                ..
            } => ("delete", *final_state_unknown),
        };
        self.last
            .insert(key.clone(), (kind != "delete").then_some(rv));
        self.log.push((key, kind, rv, flag));
    }

    fn live(&self) -> BTreeMap<String, u64> {
        self.last
            .iter()
            .filter_map(|(k, rv)| rv.map(|rv| (k.clone(), rv)))
            .collect()
    }
}

/// Reads notifications until `done` holds; panics after a minute of (paused) time.
async fn read_until(rx: &mut ListenerReceiver, view: &mut View, done: impl Fn(&View) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done(view) {
        let batch = tokio::time::timeout_at(deadline, rx.recv_batch(64))
            .await
            .unwrap_or_else(|_| panic!("handler never saw the expected state; it saw {view:?}"))
            .expect("handler still registered");
        for notification in batch.iter() {
            view.apply(notification);
        }
    }
}

async fn wait_for_cache(informer: &SharedIndexInformer, server: &MemoryServer) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    while cache_state(informer) != server_state(server) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "cache never caught up: {:?} vs {:?}",
            cache_state(informer),
            server_state(server)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_late_handler_gets_the_cache_then_live_events() {
    let server = MemoryServer::new();
    for name in ["a", "b", "c"] {
        server.create(&pods(), &pod(name, 1)).unwrap();
    }
    let informer = informer_on(&server);
    let mut early = informer.add_handler(HandlerOptions::default());
    informer.start();
    let mut early_view = View::default();
    read_until(&mut early, &mut early_view, |v| v.last.len() == 3).await;
    assert!(
        early_view
            .log
            .iter()
            .all(|(_, kind, _, initial)| *kind == "add" && *initial)
    );
    assert!(informer.has_synced());
    assert!(early.has_synced());

    let mut late = informer.add_handler(HandlerOptions::default());
    assert!(!late.has_synced(), "its replayed cache is not handled yet");
    let mut late_view = View::default();
    read_until(&mut late, &mut late_view, |v| v.last.len() == 3).await;
    assert!(
        late_view
            .log
            .iter()
            .all(|(_, kind, _, initial)| *kind == "add" && *initial)
    );
    assert!(late.has_synced());

    server.create(&pods(), &pod("d", 1)).unwrap();
    server.update(&pods(), &pod("a", 2)).unwrap();
    for (rx, view) in [(&mut early, &mut early_view), (&mut late, &mut late_view)] {
        read_until(rx, view, |v| v.log.len() == 5).await;
        assert_eq!(view.log[3].0, "ns/d");
        assert_eq!(view.log[3].1, "add");
        assert!(!view.log[3].3, "a live add is not part of the initial list");
        assert_eq!((view.log[4].0.as_str(), view.log[4].1), ("ns/a", "update"));
        assert_eq!(view.live(), server_state(&server));
    }
    informer.stop().await;
}

/// Issue 24: an informer on the metadata form (`PartialObjectMetadata` items and watch
/// objects, as the memory server answers like kube-apiserver) caches metadata alone, as
/// the resource's own kind, and follows adds, updates and deletes.
#[tokio::test(start_paused = true)]
async fn a_metadata_only_informer_caches_no_bodies() {
    let server = MemoryServer::new();
    for name in ["a", "b"] {
        server.create(&pods(), &pod(name, 1)).unwrap();
    }
    let source = Arc::new(
        server
            .lister_watcher(pods(), None, None, None)
            .metadata_only(),
    );
    let informer = SharedIndexInformer::new(
        source,
        ObjectDecoder::new(pods()).metadata_only(),
        ReflectorConfig::default(),
    );
    let mut rx = informer.add_handler(HandlerOptions::default());
    informer.start();
    let mut view = View::default();
    read_until(&mut rx, &mut view, |v| v.last.len() == 2).await;
    server.create(&pods(), &pod("c", 1)).unwrap();
    server.update(&pods(), &pod("a", 2)).unwrap();
    server
        .delete(&pods(), &ObjectKey::new(Some("ns"), "b"))
        .unwrap();
    read_until(&mut rx, &mut view, |v| v.log.len() == 5).await;
    assert_eq!(view.live(), server_state(&server));
    let cached = informer.indexer().get("ns/a").expect("cached");
    assert_eq!(cached.label("gen"), Some("2"));
    let json: serde_json::Value = serde_json::from_str(cached.json()).unwrap();
    assert_eq!(
        (json["apiVersion"].as_str(), json["kind"].as_str()),
        (Some("v1"), Some("Pod"))
    );
    assert!(json.get("spec").is_none(), "no body cached: {json}");
    informer.stop().await;
}

/// `wait_for_sync` is woken by the sync itself: on a paused clock no timer has to fire, and
/// whoever it wakes finds the whole initial list cached.
#[tokio::test(start_paused = true)]
async fn wait_for_sync_wakes_at_the_sync_with_the_list_cached() {
    let server = MemoryServer::new();
    for i in 0..50 {
        server.create(&pods(), &pod(&format!("p{i}"), 1)).unwrap();
    }
    let informer = informer_on(&server);
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let informer = informer.clone();
            tokio::spawn(async move {
                informer.wait_for_sync().await;
                informer.indexer().len()
            })
        })
        .collect();
    let started = tokio::time::Instant::now();
    informer.start();
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap(), 50);
    }
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "no poll interval was waited for"
    );
    informer.wait_for_sync().await;
    informer.stop().await;
}

/// The barrier a test harness uses: after a bookmark, once the last sync version reaches
/// the server's and the FIFO is empty, the handler has been given every change.
#[tokio::test(start_paused = true)]
async fn a_bookmark_moves_the_last_sync_version_past_every_change() {
    let server = MemoryServer::new();
    let informer = informer_on(&server);
    let handler = informer.add_handler(HandlerOptions::default());
    assert_eq!(informer.last_sync_resource_version(), "");
    informer.start();
    informer.wait_for_sync().await;
    server.create(&pods(), &pod("a", 1)).unwrap();
    server.create(&pods(), &pod("b", 1)).unwrap();
    let target = server.current_resource_version();
    server.bookmark();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while informer.last_sync_resource_version().parse::<u64>().ok() < Some(target)
        || informer.queued_keys() > 0
    {
        assert!(tokio::time::Instant::now() < deadline, "never caught up");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(cache_state(&informer), server_state(&server));
    assert_eq!(
        handler.probe().unhandled(),
        2,
        "both adds are in the buffer"
    );
    informer.stop().await;
}

#[tokio::test(start_paused = true)]
async fn remove_handler_stops_delivery() {
    let server = MemoryServer::new();
    let informer = informer_on(&server);
    let mut kept = informer.add_handler(HandlerOptions::default());
    let mut removed = informer.add_handler(HandlerOptions::default());
    informer.start();
    informer.wait_for_sync().await;
    assert_eq!(informer.handler_count(), 2);

    informer.remove_handler(removed.id());
    server.create(&pods(), &pod("a", 1)).unwrap();
    let mut view = View::default();
    read_until(&mut kept, &mut view, |v| v.last.len() == 1).await;
    assert!(removed.recv_batch(10).await.is_none());
    assert_eq!(informer.handler_count(), 1);

    drop(kept);
    assert_eq!(
        informer.handler_count(),
        0,
        "dropping a receiver unregisters it"
    );
    informer.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_relist_after_410_delivers_tombstones_for_objects_deleted_meanwhile() {
    let server = MemoryServer::new();
    for name in ["gone", "kept"] {
        server.create(&pods(), &pod(name, 1)).unwrap();
    }
    let informer = informer_on(&server);
    let mut rx = informer.add_handler(HandlerOptions::default());
    informer.start();
    let mut view = View::default();
    read_until(&mut rx, &mut view, |v| v.last.len() == 2).await;

    // The watch breaks and cannot be reopened for a while; meanwhile "gone" is deleted and
    // history is compacted, so the re-watch gets 410 and the informer relists.
    server.inject(Fault::Fail {
        call: Call::Watch,
        times: 1,
        status: Status::new(500, "InternalError", "etcd is sad"),
        retry_after: None,
    });
    server.inject(Fault::EndWatches);
    tokio::task::yield_now().await;
    server.delete(&pods(), &ObjectKey::from("ns/gone")).unwrap();
    server.create(&pods(), &pod("new", 1)).unwrap();
    server.inject(Fault::Compact);

    read_until(&mut rx, &mut view, |v| v.last.get("ns/gone") == Some(&None)).await;
    let tombstone = view
        .log
        .iter()
        .find(|(k, kind, ..)| k == "ns/gone" && *kind == "delete");
    assert_eq!(
        tombstone.map(|t| t.3),
        Some(true),
        "final state unknown: {view:?}"
    );
    read_until(&mut rx, &mut view, |v| v.last.contains_key("ns/new")).await;
    assert_eq!(view.live(), server_state(&server));
    assert!(informer.reflector_counts().lists >= 2);
    informer.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_slow_handler_does_not_delay_a_fast_one() {
    let server = MemoryServer::new();
    let informer = informer_on(&server);
    let slow = informer.add_handler(HandlerOptions::default());
    let mut fast = informer.add_handler(HandlerOptions::default());
    informer.start();
    informer.wait_for_sync().await;
    for i in 0..500 {
        server.create(&pods(), &pod(&format!("p{i}"), 1)).unwrap();
    }
    let mut view = View::default();
    read_until(&mut fast, &mut view, |v| v.last.len() == 500).await;
    assert_eq!(
        slow.depth(),
        500,
        "the slow handler's backlog waits in its own buffer"
    );
    informer.stop().await;
}

#[tokio::test(start_paused = true)]
async fn resync_goes_only_to_handlers_whose_period_is_due() {
    let server = MemoryServer::new();
    for name in ["a", "b"] {
        server.create(&pods(), &pod(name, 1)).unwrap();
    }
    let informer = informer_on(&server);
    let every_10s = HandlerOptions {
        resync_period: Some(Duration::from_secs(10)),
        ..HandlerOptions::default()
    };
    let every_25s = HandlerOptions {
        resync_period: Some(Duration::from_secs(25)),
        ..HandlerOptions::default()
    };
    let mut fast = informer.add_handler(every_10s);
    let mut slow = informer.add_handler(every_25s);
    let mut never = informer.add_handler(HandlerOptions::default());
    informer.start();
    let (mut fast_view, mut slow_view, mut never_view) = Default::default();
    read_until(&mut fast, &mut fast_view, |v: &View| v.log.len() == 2).await;
    read_until(&mut slow, &mut slow_view, |v: &View| v.log.len() == 2).await;
    read_until(&mut never, &mut never_view, |v: &View| v.log.len() == 2).await;

    tokio::time::sleep(Duration::from_secs(21)).await;
    read_until(&mut fast, &mut fast_view, |v| v.log.len() == 4).await;
    let resyncs = |v: &View| {
        v.log
            .iter()
            .filter(|(_, kind, _, resync)| *kind == "update" && *resync)
            .count()
    };
    // Two periods passed unread: the second found each object's first resync still
    // waiting, and a key waits with one resync at most (issue 60; client-go stacks them).
    assert_eq!(resyncs(&fast_view), 2, "one resync of each object waits");
    assert_eq!(fast.depth(), 0);
    assert_eq!(slow.depth(), 0, "not due yet");
    assert_eq!(never.depth(), 0);

    tokio::time::sleep(Duration::from_secs(10)).await;
    read_until(&mut slow, &mut slow_view, |v| v.log.len() == 4).await;
    assert_eq!(resyncs(&slow_view), 2);
    assert_eq!(never.depth(), 0, "a handler without a period never resyncs");
    informer.stop().await;
}

#[tokio::test(start_paused = true)]
async fn bad_objects_are_skipped_counted_and_reported() {
    let server = MemoryServer::new();
    server.create(&pods(), &pod("a", 1)).unwrap();
    let seen_errors = Arc::new(std::sync::Mutex::new(Vec::new()));
    let errors = seen_errors.clone();
    let informer = SharedIndexInformer::with_error_handler(
        Arc::new(server.lister_watcher(pods(), None, None, None)),
        ObjectDecoder::new(pods()),
        ReflectorConfig::default(),
        Some(Arc::new(move |e: &ReflectorError| {
            errors.lock().unwrap().push(e.to_string());
        })),
    );
    let mut rx = informer.add_handler(HandlerOptions::default());
    informer.start();
    informer.wait_for_sync().await;
    for garbage in [
        Garbage::NotJson,
        Garbage::Truncated,
        Garbage::WrongKind,
        Garbage::MissingName,
    ] {
        server.inject(Fault::Garbage(garbage));
    }
    server.inject(Fault::EndWatches);
    server.create(&pods(), &pod("b", 1)).unwrap();
    let mut view = View::default();
    read_until(&mut rx, &mut view, |v| v.last.len() == 2).await;
    assert_eq!(view.live(), server_state(&server));
    assert_eq!(informer.reflector_counts().skipped_objects, 4);
    let errors = seen_errors.lock().unwrap().clone();
    assert_eq!(
        errors
            .iter()
            .filter(|e| e.contains("skipped an object of v1/pods"))
            .count(),
        4
    );
    assert!(
        errors.iter().any(|e| e.contains("expected v1/Pod")),
        "{errors:?}"
    );
    informer.stop().await;
}

#[tokio::test(start_paused = true)]
async fn streaming_list_is_used_when_offered() {
    let server = MemoryServer::with_config(ServerConfig {
        streaming_list: true,
        ..Default::default()
    });
    server.create(&pods(), &pod("a", 1)).unwrap();
    let informer = informer_on(&server);
    let mut rx = informer.add_handler(HandlerOptions::default());
    informer.start();
    let mut view = View::default();
    read_until(&mut rx, &mut view, |v| v.last.len() == 1).await;
    assert!(informer.has_synced());
    assert_eq!(
        server.list_calls(),
        0,
        "no list call: the watch streamed the initial state"
    );
    informer.stop().await;
}

/// One step of random churn.
#[derive(Debug, Clone)]
enum Step {
    Create(u8),
    Update(u8),
    Delete(u8),
    Fault(u8),
    Wait(u16),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => any::<u8>().prop_map(Step::Create),
        4 => any::<u8>().prop_map(Step::Update),
        2 => any::<u8>().prop_map(Step::Delete),
        1 => (0u8..6).prop_map(Step::Fault),
        2 => (0u16..3000).prop_map(Step::Wait),
    ]
}

async fn churn(steps: Vec<Step>) {
    let server = MemoryServer::with_config(ServerConfig {
        history: 50,
        ..Default::default()
    });
    let informer = informer_on(&server);
    let mut handlers: Vec<_> = (0..2)
        .map(|_| informer.add_handler(HandlerOptions::default()))
        .collect();
    informer.start();
    let mut generation = 0;
    for step in steps {
        generation += 1;
        let name = |i: u8| format!("p{}", i % 40);
        match step {
            Step::Create(i) => {
                let _ = server.create(&pods(), &pod(&name(i), generation));
            }
            Step::Update(i) => {
                let _ = server.update(&pods(), &pod(&name(i), generation));
            }
            Step::Delete(i) => {
                let _ = server.delete(&pods(), &ObjectKey::new(Some("ns"), &name(i)));
            }
            Step::Fault(kind) => server.inject(match kind {
                0 => Fault::EndWatches,
                1 => Fault::Compact,
                2 => Fault::Restart {
                    keep_history: false,
                },
                3 => Fault::Fail {
                    call: Call::Watch,
                    times: 2,
                    status: Status::new(500, "InternalError", "injected"),
                    retry_after: None,
                },
                4 => Fault::Fail {
                    call: Call::List,
                    times: 1,
                    status: Status::new(429, "TooManyRequests", "injected"),
                    retry_after: Some(Duration::from_secs(2)),
                },
                _ => Fault::EndNextWatchAfter(3),
            }),
            Step::Wait(ms) => tokio::time::sleep(Duration::from_millis(u64::from(ms))).await,
        }
    }
    wait_for_cache(&informer, &server).await;
    let expected = server_state(&server);
    for rx in &mut handlers {
        let mut view = View::default();
        read_until(rx, &mut view, |v| v.live() == expected).await;
    }
    informer.stop().await;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// After random churn with injected faults, the cache equals the server's state and every
    /// handler's last view of every key equals the server's.
    #[test]
    fn cache_and_handlers_converge_under_churn_and_faults(steps in prop::collection::vec(step(), 1..200)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(churn(steps));
    }
}

#[tokio::test(start_paused = true)]
async fn an_informer_that_cannot_list_says_why_until_it_lists() {
    let server = MemoryServer::new();
    server.inject(Fault::Fail {
        call: Call::List,
        times: 3,
        status: Status::new(403, "Forbidden", "pods is forbidden"),
        retry_after: None,
    });
    let informer = informer_on(&server);
    informer.start();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!informer.has_synced());
    match informer.last_error() {
        Some(ReflectorError::ListFailed { source, .. }) => {
            assert!(source.to_string().contains("403"), "{source}");
        }
        other => panic!("expected the refused list, got {other:?}"),
    }
    // It keeps retrying with back-off, and a list clears the error.
    informer.wait_for_sync().await;
    assert!(informer.last_error().is_none());
    informer.stop().await;
}

/// Regression (issue 20): an informer dropped without `shutdown` kept its tasks and its
/// watch running for good, each holding the informer alive.
#[tokio::test(start_paused = true)]
async fn an_informer_dropped_without_shutdown_stops_its_tasks_and_its_watch() {
    let server = MemoryServer::new();
    server.create(&pods(), &pod("a", 1)).unwrap();
    let informer = informer_on(&server);
    let mut handler = informer.add_handler(HandlerOptions::default());
    informer.start();
    informer.wait_for_sync().await;
    let clone = informer.clone();
    drop(informer);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(server.open_watches(), 1, "a clone keeps it running");
    drop(clone);
    let mut view = View::default();
    loop {
        match tokio::time::timeout(Duration::from_secs(60), handler.recv_batch(64)).await {
            Ok(Some(batch)) => batch.iter().for_each(|n| view.apply(n)),
            Ok(None) => break,
            Err(_) => panic!("the handler was never closed; it saw {view:?}"),
        }
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(server.open_watches(), 0, "the watch ended");
}

/// The in-memory server, except that its first list panics.
struct PanicsOnce {
    inner: kubeplug_memory::MemoryListerWatcher,
    panicked: std::sync::atomic::AtomicBool,
}

impl kubeplug_informer::source::ListerWatcher for PanicsOnce {
    fn list(
        &self,
        request: kubeplug_informer::source::ListRequest,
    ) -> futures::future::BoxFuture<
        '_,
        Result<kubeplug_informer::source::ListPage, kubeplug_informer::source::SourceError>,
    > {
        let first = !self
            .panicked
            .swap(true, std::sync::atomic::Ordering::SeqCst);
        assert!(!first, "the source panics on its first list");
        self.inner.list(request)
    }

    fn watch(
        &self,
        request: kubeplug_informer::source::WatchRequest,
    ) -> futures::future::BoxFuture<
        '_,
        Result<kubeplug_informer::source::WatchStream, kubeplug_informer::source::SourceError>,
    > {
        self.inner.watch(request)
    }
}

/// Issue 20: a panic in the Reflector (here, its source's) is counted and followed by a
/// fresh list. Regression: the Reflector's task ended, and the informer never synced, with
/// nothing but the panic message on stderr to say why.
#[tokio::test(start_paused = true)]
async fn a_panicking_reflector_lists_again_and_counts_the_panic() {
    let server = MemoryServer::new();
    server.create(&pods(), &pod("a", 1)).unwrap();
    let source = Arc::new(PanicsOnce {
        inner: server.lister_watcher(pods(), None, None, None),
        panicked: std::sync::atomic::AtomicBool::new(false),
    });
    let informer = SharedIndexInformer::new(
        source,
        ObjectDecoder::new(pods()),
        ReflectorConfig::default(),
    );
    informer.start();
    tokio::time::timeout(Duration::from_secs(60), informer.wait_for_sync())
        .await
        .expect("the informer syncs after the panic");
    assert_eq!(informer.indexer().len(), 1);
    assert_eq!(informer.reflector_counts().panics, 1);
    informer.stop().await;
}
