//! SharedIndexInformer: one Reflector, one DeltaFIFO, one Indexer, and a listener per handler.
//!
//! Contract (client-go's): the cache is eventually consistent with the server; notifications
//! for one object reach each handler in order; a handler is notified only after the cache
//! holds the change it is told about; a slow handler delays nobody else.

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kubeplug_json::path::FieldPath;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::fifo::{DeltaFifo, DeltaType, Deltas, Processed};
use crate::indexer::{Indexer, IndexerWriter, new_indexer};
use crate::listener::{BufferPolicy, Listener, ListenerId, ListenerReceiver, Notification};
use crate::object::{Object, ObjectDecoder};
use crate::reflector::{
    Reflector, ReflectorConfig, ReflectorCounts, ReflectorError, ReflectorStats, WatchErrorHandler,
};
use crate::source::ListerWatcher;

/// How a handler wants its notifications.
#[derive(Debug, Clone, Default)]
pub struct HandlerOptions {
    /// Buffer policy of the handler's listener.
    pub buffer: BufferPolicy,
    /// Re-deliver the whole cache as `Update { resync: true }` this often. `None`: never.
    pub resync_period: Option<Duration>,
    /// With [`BufferPolicy::Unbounded`]: once the object JSON only the buffer keeps alive
    /// (updates' old states, deleted objects) is over this many bytes, a notification for a
    /// key that already waits is merged into the waiting one: the handler gets each key's
    /// latest state, an update's old state is the one it was last given, and
    /// [`ListenerProbe::merged`](crate::listener::ListenerProbe::merged) counts the merges.
    /// `None`: every notification is kept, in order, however many.
    pub budget: Option<usize>,
    /// Field paths the handler reads from each object: registered with the informer's
    /// Indexer ([`Indexer::add_projection`](crate::indexer::Indexer::add_projection)) while
    /// the handler is, so that their values are selected once when an object is stored and
    /// shared by every handler that reads them ([`Object::selected`](crate::object::Object::selected)).
    pub projections: Vec<FieldPath>,
}

/// A shared informer for one resource (and namespace and selectors, fixed by its source).
///
/// Cloning gives another handle on the same informer.
///
/// ```no_run
/// # async fn demo(source: std::sync::Arc<dyn kubeplug_informer::source::ListerWatcher>) {
/// use kubeplug_informer::informer::{HandlerOptions, SharedIndexInformer};
/// use kubeplug_informer::object::ObjectDecoder;
/// use kubeplug_informer::reflector::ReflectorConfig;
/// use kubeplug_informer::resource::Resource;
///
/// let pods = Resource::new("", "v1", "Pod", "pods", true);
/// let informer = SharedIndexInformer::new(source, ObjectDecoder::new(pods), ReflectorConfig::default());
/// let mut handler = informer.add_handler(HandlerOptions::default());
/// informer.start();
/// while let Some(batch) = handler.recv_batch(64).await {
///     for notification in batch.iter() {
///         println!("{:?} {}", notification.key(), notification.object().resource_version());
///     }
/// }
/// # }
/// ```
///
/// Dropping the last clone shuts it down as [`shutdown`](Self::shutdown) does: its tasks
/// and its watch end.
#[derive(Clone)]
pub struct SharedIndexInformer {
    inner: Arc<Inner>,
    /// Shared by the clones only, not by the informer's own tasks: the last clone's drop
    /// shuts the informer down.
    _last_clone: Arc<ShutdownOnDrop>,
}

/// Shuts its informer down when dropped.
struct ShutdownOnDrop(Arc<Inner>);

impl Drop for ShutdownOnDrop {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

struct Inner {
    fifo: Arc<DeltaFifo>,
    indexer: Indexer,
    // Lock order: the FIFO, then `processor`, then the Indexer. The delta processor takes all
    // three; `add_handler` takes the FIFO (to stop processing) and then `processor`.
    processor: Mutex<Processor>,
    /// Taken by the task that processes deltas, its only writer.
    writer: Mutex<Option<IndexerWriter>>,
    reflector: Mutex<Option<Reflector>>,
    /// Its source sends each object's metadata alone.
    metadata_only: bool,
    reflector_stats: Arc<ReflectorStats>,
    started: AtomicBool,
    cancel: CancellationToken,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Wakes the resync task when handlers come and go.
    handlers_changed: Notify,
}

struct Processor {
    listeners: Vec<Listener>,
    /// Listeners whose resync was due at the last check: the only ones that get Sync
    /// notifications.
    syncing: HashSet<ListenerId>,
    next_id: u64,
}

impl Inner {
    fn shutdown(&self) {
        self.cancel.cancel();
        self.fifo.close();
        let processor = lock(&self.processor);
        for listener in &processor.listeners {
            listener.close();
        }
    }
}

impl Processor {
    fn distribute(&mut self, notification: Notification, sync: bool) {
        let syncing = &self.syncing;
        self.listeners
            .retain(|l| (sync && !syncing.contains(&l.id())) || l.push(notification.clone()));
    }
}

impl fmt::Debug for SharedIndexInformer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedIndexInformer")
            .field("cached", &self.inner.indexer.len())
            .field("handlers", &self.handler_count())
            .finish()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().expect("informer lock poisoned by a panic")
}

impl SharedIndexInformer {
    /// An informer that will list and watch `source`; nothing runs until [`start`](Self::start).
    pub fn new(
        source: Arc<dyn ListerWatcher>,
        decoder: ObjectDecoder,
        config: ReflectorConfig,
    ) -> Self {
        Self::with_error_handler(source, decoder, config, None)
    }

    /// Like [`new`](Self::new), with a hook that sees every list, watch and decode error.
    pub fn with_error_handler(
        source: Arc<dyn ListerWatcher>,
        decoder: ObjectDecoder,
        config: ReflectorConfig,
        on_error: Option<WatchErrorHandler>,
    ) -> Self {
        let (writer, indexer) = new_indexer();
        let fifo = Arc::new(DeltaFifo::new(indexer.clone()));
        let metadata_only = decoder.is_metadata_only();
        let mut reflector = Reflector::new(source, decoder, fifo.clone(), config);
        if let Some(handler) = on_error {
            reflector = reflector.with_error_handler(handler);
        }
        let inner = Arc::new(Inner {
            fifo,
            indexer,
            processor: Mutex::new(Processor {
                listeners: Vec::new(),
                syncing: HashSet::new(),
                next_id: 0,
            }),
            writer: Mutex::new(Some(writer)),
            reflector_stats: reflector.stats(),
            reflector: Mutex::new(Some(reflector)),
            metadata_only,
            started: AtomicBool::new(false),
            cancel: CancellationToken::new(),
            tasks: Mutex::new(Vec::new()),
            handlers_changed: Notify::new(),
        });
        Self {
            _last_clone: Arc::new(ShutdownOnDrop(inner.clone())),
            inner,
        }
    }

    /// Starts the Reflector, the delta processor and the resync timer on the current tokio
    /// runtime. Calling it again does nothing.
    pub fn start(&self) {
        let (Some(reflector), Some(writer)) = (
            lock(&self.inner.reflector).take(),
            lock(&self.inner.writer).take(),
        ) else {
            return;
        };
        // `started` is set under the FIFO lock, and before any task runs, so that a
        // concurrent `add_handler` either replays the cache or gets every change through the
        // FIFO, never both and never neither.
        self.inner
            .fifo
            .exclusive(|| self.inner.started.store(true, Ordering::Release));
        let cancel = self.inner.cancel.clone();
        let processing = tokio::spawn(process_deltas(self.inner.clone(), writer));
        let reflecting = tokio::spawn(reflector.run(cancel));
        let resyncing = tokio::spawn(resync(self.inner.clone()));
        lock(&self.inner.tasks).extend([processing, reflecting, resyncing]);
    }

    /// Stops everything without waiting for the tasks to finish; every handler's receiver
    /// then returns `None`. Usable from synchronous code such as `Drop`.
    pub fn shutdown(&self) {
        self.inner.shutdown();
    }

    /// Stops everything and waits for the tasks to end.
    pub async fn stop(&self) {
        self.shutdown();
        let tasks = std::mem::take(&mut *lock(&self.inner.tasks));
        for task in tasks {
            // A task that panicked has nothing left to clean up.
            let _ = task.await;
        }
    }

    /// Registers a handler. On a running informer, the current cache is replayed to it first
    /// as adds flagged `in_initial_list`, then live changes follow. Dropping the receiver (or
    /// [`remove_handler`](Self::remove_handler)) unregisters it.
    pub fn add_handler(&self, options: HandlerOptions) -> ListenerReceiver {
        let inner = &self.inner;
        let projections = options
            .projections
            .iter()
            .map(|path| inner.indexer.add_projection(path))
            .collect();
        let receiver = inner.fifo.exclusive(|| {
            let mut processor = lock(&inner.processor);
            let id = ListenerId(processor.next_id);
            processor.next_id += 1;
            let (mut listener, receiver) = Listener::new(
                id,
                options.buffer,
                options.budget,
                options.resync_period,
                inner.fifo.synced_flag(),
            );
            listener.keep_projections(projections);
            if inner.started.load(Ordering::Acquire) {
                replay_cache(&inner.indexer, &mut listener);
            }
            processor.listeners.push(listener);
            receiver
        });
        inner.handlers_changed.notify_one();
        receiver
    }

    /// Whether its source sends each object's metadata alone.
    pub fn is_metadata_only(&self) -> bool {
        self.inner.metadata_only
    }

    /// Unregisters a handler at once: its receiver returns `None`, its backlog is dropped.
    pub fn remove_handler(&self, id: ListenerId) {
        let mut processor = lock(&self.inner.processor);
        let unregister = |l: &Listener| {
            if l.id() == id {
                l.close();
            }
            l.id() != id
        };
        processor.listeners.retain(unregister);
        drop(processor);
        self.inner.handlers_changed.notify_one();
    }

    /// Hands the handler `id` the cached objects `filter` picks, as adds flagged
    /// `in_initial_list`, in order with the live changes: whatever it receives after them is
    /// newer. Returns how many. A sharded replica replays the keys it gains this way, as
    /// client-go replays the cache to a handler added late.
    pub fn replay(&self, id: ListenerId, filter: &dyn Fn(&Object) -> bool) -> usize {
        let inner = &self.inner;
        inner.fifo.exclusive(|| {
            let mut processor = lock(&inner.processor);
            let Some(listener) = processor.listeners.iter_mut().find(|l| l.id() == id) else {
                return 0;
            };
            let mut replayed = 0;
            for object in inner.indexer.list() {
                if filter(&object) {
                    listener.push(Notification::Add {
                        object,
                        in_initial_list: true,
                    });
                    replayed += 1;
                }
            }
            replayed
        })
    }

    /// Number of registered handlers whose receivers are alive.
    pub fn handler_count(&self) -> usize {
        let mut processor = lock(&self.inner.processor);
        processor.listeners.retain(|l| !l.is_closed());
        processor.listeners.len()
    }

    /// A reader's handle on its cache: the Indexer and whether it has synced, without
    /// keeping the informer running (whoever holds the handle holds a lease for that).
    pub fn cache_handle(&self) -> CacheHandle {
        CacheHandle {
            indexer: self.inner.indexer.clone(),
            synced: Some(self.inner.fifo.synced_flag()),
        }
    }

    /// The informer's cache.
    pub fn indexer(&self) -> &Indexer {
        &self.inner.indexer
    }

    /// True once the initial list has been processed into the cache.
    pub fn has_synced(&self) -> bool {
        self.inner.fifo.has_synced()
    }

    /// Waits until [`has_synced`](Self::has_synced).
    pub async fn wait_for_sync(&self) {
        self.inner.fifo.wait_for_sync().await;
    }

    /// The Reflector's counters now.
    pub fn reflector_counts(&self) -> ReflectorCounts {
        self.inner.reflector_stats.counts()
    }

    /// The last failure to list or watch since the last complete list: why an informer that
    /// has not synced has not (it keeps retrying with back-off).
    pub fn last_error(&self) -> Option<ReflectorError> {
        self.inner.reflector_stats.last_error()
    }

    /// client-go's `LastSyncResourceVersion`: the Reflector has handed every change up to
    /// this version to the DeltaFIFO. Empty before the first list.
    pub fn last_sync_resource_version(&self) -> String {
        self.inner.reflector_stats.last_sync_resource_version()
    }

    /// Keys waiting in the DeltaFIFO. A key is popped and handled (cache updated, listeners
    /// notified) under the FIFO's lock, so zero means every change received so far is in the
    /// cache and in the listeners' buffers.
    pub fn queued_keys(&self) -> usize {
        self.inner.fifo.len()
    }
}

/// A reader's handle on one informer's cache ([`SharedIndexInformer::cache_handle`]), or on
/// a cache that is complete by construction ([`complete`](Self::complete)). Cheap to clone;
/// reading it takes no lock but the Indexer's.
#[derive(Debug, Clone)]
pub struct CacheHandle {
    indexer: Indexer,
    /// The informer's synced flag; `None` for a complete cache.
    synced: Option<Arc<AtomicBool>>,
}

impl CacheHandle {
    /// A handle on a cache that holds everything it ever will (a fixed map, a test's).
    pub fn complete(indexer: Indexer) -> Self {
        Self {
            indexer,
            synced: None,
        }
    }

    /// The cache.
    pub fn indexer(&self) -> &Indexer {
        &self.indexer
    }

    /// Whether the cache holds the informer's first complete list.
    pub fn has_synced(&self) -> bool {
        self.synced
            .as_ref()
            .is_none_or(|synced| synced.load(Ordering::Acquire))
    }
}

/// The delta processor: client-go's HandleDeltas, run for each popped key while the FIFO is
/// locked. It updates the cache first, then notifies; it never waits on a handler.
async fn process_deltas(inner: Arc<Inner>, mut writer: IndexerWriter) {
    let fifo = inner.fifo.clone();
    while fifo
        .pop(|_, deltas, in_initial_list| {
            handle_deltas(&inner, &mut writer, deltas, in_initial_list);
            Processed::Done
        })
        .await
    {}
}

fn handle_deltas(inner: &Inner, writer: &mut IndexerWriter, deltas: Deltas, in_initial_list: bool) {
    let mut processor = lock(&inner.processor);
    for delta in deltas {
        match delta.kind {
            DeltaType::Deleted => {
                writer.delete(delta.object.key());
                let notification = Notification::Delete {
                    object: delta.object,
                    final_state_unknown: delta.final_state_unknown,
                };
                processor.distribute(notification, false);
            }
            kind => match writer.put(delta.object.clone()) {
                Some(old) => {
                    let resync = kind == DeltaType::Sync
                        || (kind == DeltaType::Replaced && old.same_version(&delta.object));
                    let notification = Notification::Update {
                        old,
                        new: delta.object,
                        resync,
                    };
                    processor.distribute(notification, resync);
                }
                None => {
                    let notification = Notification::Add {
                        object: delta.object,
                        in_initial_list,
                    };
                    processor.distribute(notification, false);
                }
            },
        }
    }
}

/// Hands `listener` the whole cache as adds flagged `in_initial_list`.
fn replay_cache(indexer: &Indexer, listener: &mut Listener) {
    for object in indexer.list() {
        listener.push(Notification::Add {
            object,
            in_initial_list: true,
        });
    }
}

/// Every shortest resync period, marks the handlers whose resync is due and, if any, asks
/// the FIFO for Sync deltas.
async fn resync(inner: Arc<Inner>) {
    loop {
        let period = lock(&inner.processor)
            .listeners
            .iter()
            .filter_map(Listener::resync_period)
            .min();
        let Some(period) = period else {
            tokio::select! {
                () = inner.cancel.cancelled() => return,
                () = inner.handlers_changed.notified() => continue,
            }
        };
        tokio::select! {
            () = inner.cancel.cancelled() => return,
            () = inner.handlers_changed.notified() => continue,
            () = tokio::time::sleep(period) => {}
        }
        let now = Instant::now();
        let any_due = {
            let mut processor = lock(&inner.processor);
            let due: HashSet<ListenerId> = processor
                .listeners
                .iter_mut()
                .filter_map(|l| l.take_resync_due(now).then(|| l.id()))
                .collect();
            processor.syncing = due;
            !processor.syncing.is_empty()
        };
        if any_due {
            inner.fifo.resync();
        }
    }
}
