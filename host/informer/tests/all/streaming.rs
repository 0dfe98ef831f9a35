//! Streaming lists that fail after the server accepted them, as kube-apiserver v1.32 does on
//! an etcd without `RequestWatchProgress`: the informer falls back to list-then-watch as
//! client-go does, and syncs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{self, StreamExt};
use kubeplug_informer::informer::{HandlerOptions, SharedIndexInformer};
use kubeplug_informer::listener::Notification;
use kubeplug_informer::object::ObjectDecoder;
use kubeplug_informer::reflector::ReflectorConfig;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::source::{
    ListPage, ListRequest, ListerWatcher, SourceError, Status, WatchEvent, WatchRequest,
    WatchStream,
};
use kubeplug_memory::{Call, Fault, MemoryListerWatcher, MemoryServer, ServerConfig};

fn pods() -> Resource {
    Resource::new("", "v1", "Pod", "pods", true)
}

/// How a streaming list fails after the watch opened.
#[derive(Clone, Copy)]
enum Failure {
    /// An `ERROR` event, code 500: the server refuses streaming lists.
    ErrorEvent,
    /// The connection breaks: a failure of that attempt only.
    Transport,
}

/// The in-memory server, except that every streaming-list watch fails with `failure`.
struct FailingStreams {
    inner: MemoryListerWatcher,
    failure: Failure,
    streaming_attempts: AtomicUsize,
}

impl ListerWatcher for FailingStreams {
    fn list(&self, request: ListRequest) -> BoxFuture<'_, Result<ListPage, SourceError>> {
        self.inner.list(request)
    }

    fn watch(&self, request: WatchRequest) -> BoxFuture<'_, Result<WatchStream, SourceError>> {
        if !request.send_initial_events {
            return self.inner.watch(request);
        }
        self.streaming_attempts.fetch_add(1, Ordering::Relaxed);
        let failed = match self.failure {
            Failure::ErrorEvent => Ok(WatchEvent::Error(Status::new(
                500,
                "InternalError",
                "Internal error occurred: RequestWatchProgress is disabled",
            ))),
            Failure::Transport => Err(SourceError::transport("connection reset")),
        };
        Box::pin(async move { Ok(stream::iter([failed]).boxed()) })
    }

    fn supports_streaming_list(&self) -> bool {
        true
    }
}

/// An informer over `failure`-ing streams of a server holding one Pod; it has synced.
async fn synced_over(failure: Failure) -> (MemoryServer, Arc<FailingStreams>, SharedIndexInformer) {
    let server = MemoryServer::with_config(ServerConfig {
        streaming_list: true,
        ..Default::default()
    });
    server
        .create(&pods(), r#"{"metadata":{"name":"a","namespace":"ns"}}"#)
        .unwrap();
    let source = Arc::new(FailingStreams {
        inner: server.lister_watcher(pods(), None, None, None),
        failure,
        streaming_attempts: AtomicUsize::new(0),
    });
    let informer = SharedIndexInformer::new(
        source.clone(),
        ObjectDecoder::new(pods()),
        ReflectorConfig::default(),
    );
    informer.start();
    tokio::time::timeout(Duration::from_secs(60), informer.wait_for_sync())
        .await
        .expect("the informer syncs by falling back to list-then-watch");
    assert_eq!(informer.indexer().len(), 1);
    (server, source, informer)
}

/// Ends the informer's watch and, while its re-watch waits, writes Pod `b` and compacts the
/// history away: the re-watch gets `410 Gone` and the informer relists.
async fn force_relist(server: &MemoryServer) {
    server.inject(Fault::Stall {
        call: Call::Watch,
        delay: Duration::from_secs(10),
    });
    server.inject(Fault::EndWatches);
    server
        .create(&pods(), r#"{"metadata":{"name":"b","namespace":"ns"}}"#)
        .unwrap();
    server.inject(Fault::Compact);
    tokio::time::sleep(Duration::from_secs(120)).await;
}

#[tokio::test(start_paused = true)]
async fn an_error_event_before_the_initial_events_end_falls_back_for_good() {
    let (server, source, informer) = synced_over(Failure::ErrorEvent).await;
    assert_eq!(source.streaming_attempts.load(Ordering::Relaxed), 1);
    assert_eq!(server.list_calls(), 1);
    // A relist (after 410 Gone) lists again; it does not try streaming any more.
    force_relist(&server).await;
    assert_eq!(informer.indexer().len(), 2);
    assert_eq!(server.list_calls(), 2);
    assert_eq!(source.streaming_attempts.load(Ordering::Relaxed), 1);
    informer.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_broken_streaming_list_lists_once_and_streams_again_at_the_next_relist() {
    let (server, source, informer) = synced_over(Failure::Transport).await;
    assert_eq!(source.streaming_attempts.load(Ordering::Relaxed), 1);
    assert_eq!(server.list_calls(), 1);
    // The next relist (after 410 Gone) tries streaming again, then lists once more.
    force_relist(&server).await;
    assert_eq!(informer.indexer().len(), 2);
    assert_eq!(source.streaming_attempts.load(Ordering::Relaxed), 2);
    assert_eq!(server.list_calls(), 2);
    informer.stop().await;
}

/// A server whose streaming list sends `events` and then keeps the watch open.
struct ScriptedStream {
    events: Vec<WatchEvent>,
}

impl ListerWatcher for ScriptedStream {
    fn list(&self, _request: ListRequest) -> BoxFuture<'_, Result<ListPage, SourceError>> {
        unreachable!("the informer streams its initial list")
    }

    fn watch(&self, _request: WatchRequest) -> BoxFuture<'_, Result<WatchStream, SourceError>> {
        let events: Vec<_> = self.events.iter().cloned().map(Ok).collect();
        Box::pin(async move { Ok(stream::iter(events).chain(stream::pending()).boxed()) })
    }

    fn supports_streaming_list(&self) -> bool {
        true
    }
}

fn pod_at(name: &str, resource_version: u64) -> bytes::Bytes {
    format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{resource_version}"}}}}"#).into()
}

/// client-go's watch list keeps the initial events in a store: an object modified before
/// the end-of-initial-events bookmark is listed once, in its last state, and one deleted
/// before it not at all. Regression (issue 20): both stayed in the initial list.
#[tokio::test(start_paused = true)]
async fn a_streaming_list_holds_each_objects_last_state_and_drops_the_deleted() {
    let source = Arc::new(ScriptedStream {
        events: vec![
            WatchEvent::Added(pod_at("a", 1)),
            WatchEvent::Added(pod_at("b", 2)),
            WatchEvent::Modified(pod_at("b", 3)),
            WatchEvent::Deleted(pod_at("a", 4)),
            WatchEvent::Bookmark {
                resource_version: "4".to_owned(),
                initial_events_end: true,
            },
        ],
    });
    let informer = SharedIndexInformer::new(
        source,
        ObjectDecoder::new(pods()),
        ReflectorConfig::default(),
    );
    let mut handler = informer.add_handler(HandlerOptions::default());
    informer.start();
    informer.wait_for_sync().await;
    let cached: Vec<(String, u64)> = informer
        .indexer()
        .list()
        .iter()
        .map(|o| (o.key().to_string(), o.resource_version()))
        .collect();
    assert_eq!(cached, [("ns/b".to_owned(), 3)]);
    let batch = handler.recv_batch(64).await.expect("registered");
    let told: Vec<String> = batch
        .iter()
        .map(|n| match n {
            Notification::Add {
                object,
                in_initial_list,
            } => {
                format!(
                    "add {} {} {in_initial_list}",
                    object.key(),
                    object.resource_version()
                )
            }
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(told, ["add ns/b 3 true"]);
    informer.stop().await;
}

/// Issue 20: an aggregated API server's resourceVersions are any text: its objects are
/// cached with it, not skipped as undecodable (they were).
#[tokio::test(start_paused = true)]
async fn objects_with_opaque_resource_versions_are_cached() {
    let at = |name: &str, version: &str| -> bytes::Bytes {
        format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{version}"}}}}"#
        )
        .into()
    };
    let source = Arc::new(ScriptedStream {
        events: vec![
            WatchEvent::Added(at("a", "v-a1")),
            WatchEvent::Added(at("b", "v-b1")),
            WatchEvent::Bookmark {
                resource_version: "v-9".to_owned(),
                initial_events_end: true,
            },
        ],
    });
    let informer = SharedIndexInformer::new(
        source,
        ObjectDecoder::new(pods()),
        ReflectorConfig::default(),
    );
    informer.start();
    informer.wait_for_sync().await;
    let mut cached: Vec<String> = informer
        .indexer()
        .list()
        .iter()
        .map(|o| format!("{}@{}", o.key(), o.resource_version_text()))
        .collect();
    cached.sort();
    assert_eq!(cached, ["ns/a@v-a1", "ns/b@v-b1"]);
    assert_eq!(informer.reflector_counts().skipped_objects, 0);
    assert_eq!(informer.last_sync_resource_version(), "v-9");
    informer.stop().await;
}
