//! SharedIndexInformer: one Reflector, one DeltaFIFO, one Indexer, and a listener per handler.
//!
//! Contract (client-go's): the cache is eventually consistent with the server; notifications
//! for one object reach each handler in order; a handler is notified only after the cache
//! holds the change it is told about; a slow handler delays nobody else.

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kubeplug_json::path::FieldPath;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::fifo::{DeltaFifo, DeltaType, Deltas, Processed};
use crate::indexer::{Indexer, IndexerWriter, new_indexer};
use crate::listener::{BufferPolicy, Listener, ListenerId, ListenerReceiver, Notification};
use crate::object::{Object, ObjectDecoder};
use crate::reflector::{
    Reflector, ReflectorConfig, ReflectorCounts, ReflectorError, ReflectorStats, SourceSwitch,
    WatchErrorHandler,
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
    /// The handler reads each object's metadata alone (no JSON, no projections, no path
    /// indexes), so objects without bodies do for it: added while the informer switches to
    /// a source with bodies ([`switch_source`](SharedIndexInformer::switch_source)), it
    /// starts at once instead of after the relist.
    pub metadata_only: bool,
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
    /// The Reflector's source; the newest value is the one it uses or is switching to.
    switches: watch::Sender<SourceSwitch>,
    /// The generation of the newest source with bodies: handlers that need bodies wait for
    /// its relist ([`DeltaFifo::relisted`]) before they start.
    bodies_since: AtomicU64,
    reflector_stats: Arc<ReflectorStats>,
    started: AtomicBool,
    cancel: CancellationToken,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Wakes the resync task when handlers come and go.
    handlers_changed: Notify,
}

struct Processor {
    listeners: Vec<Listener>,
    /// Handlers that need bodies, added while the informer switches to a source with them.
    waiting: Vec<Waiting>,
    /// Listeners whose resync was due at the last check: the only ones that get Sync
    /// notifications.
    syncing: HashSet<ListenerId>,
    next_id: u64,
}

/// A handler that starts (the cache replayed to it) once the relist from source generation
/// `relist` has been processed, when every cached object has its body.
struct Waiting {
    relist: u64,
    listener: Listener,
    /// The handler's synced flag, false until it starts.
    synced: Arc<AtomicBool>,
}

impl Inner {
    fn shutdown(&self) {
        self.cancel.cancel();
        self.fifo.close();
        let processor = lock(&self.processor);
        for listener in processor
            .listeners
            .iter()
            .chain(processor.waiting.iter().map(|w| &w.listener))
        {
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
        let (switches, switched) = watch::channel(SourceSwitch {
            source: source.clone(),
            decoder: decoder.clone(),
            generation: 0,
        });
        let mut reflector =
            Reflector::new(source, decoder, fifo.clone(), config).with_switches(switched);
        if let Some(handler) = on_error {
            reflector = reflector.with_error_handler(handler);
        }
        let inner = Arc::new(Inner {
            fifo,
            indexer,
            processor: Mutex::new(Processor {
                listeners: Vec::new(),
                waiting: Vec::new(),
                syncing: HashSet::new(),
                next_id: 0,
            }),
            writer: Mutex::new(Some(writer)),
            reflector_stats: reflector.stats(),
            reflector: Mutex::new(Some(reflector)),
            switches,
            bodies_since: AtomicU64::new(0),
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
            let started = inner.started.load(Ordering::Acquire);
            let bodies_since = inner.bodies_since.load(Ordering::Acquire);
            let waits = started && !options.metadata_only && inner.fifo.relisted() < bodies_since;
            // A waiting handler has not synced until it starts, whatever the informer has.
            let synced = match waits {
                true => Arc::new(AtomicBool::new(false)),
                false => inner.fifo.synced_flag(),
            };
            let (mut listener, receiver) = Listener::new(
                id,
                options.buffer,
                options.budget,
                options.resync_period,
                synced.clone(),
            );
            listener.keep_projections(projections);
            if waits {
                processor.waiting.push(Waiting {
                    relist: bodies_since,
                    listener,
                    synced,
                });
            } else {
                if started {
                    replay_cache(&inner.indexer, &mut listener);
                }
                processor.listeners.push(listener);
            }
            receiver
        });
        inner.handlers_changed.notify_one();
        receiver
    }

    /// Lists and watches `source` from now on, decoding with `decoder`: whatever the
    /// Reflector was doing is dropped, and a fresh list from `source` replaces the cache.
    /// Handlers see the switch as a relist (client-go's Replace): no repeated adds, updates
    /// only for objects whose resourceVersion changed, deletions (tombstones) for objects
    /// gone. The factory switches between whole objects and metadata alone this way.
    ///
    /// When the decoder keeps bodies, handlers added from now on that need them
    /// ([`HandlerOptions::metadata_only`] unset) start once the relist has been processed,
    /// so that the cache replayed to them holds bodies.
    pub fn switch_source(&self, source: Arc<dyn ListerWatcher>, decoder: ObjectDecoder) {
        let inner = &self.inner;
        inner.switches.send_modify(|current| {
            let generation = current.generation + 1;
            if !decoder.is_metadata_only() {
                inner.bodies_since.store(generation, Ordering::Release);
            }
            *current = SourceSwitch {
                source,
                decoder,
                generation,
            };
        });
    }

    /// Whether the source in use, or being switched to, sends metadata alone.
    pub fn is_metadata_only(&self) -> bool {
        self.inner.switches.borrow().decoder.is_metadata_only()
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
        processor.waiting.retain(|w| unregister(&w.listener));
        drop(processor);
        self.inner.handlers_changed.notify_one();
    }

    /// Hands the handler `id` the cached objects `filter` picks, as adds flagged
    /// `in_initial_list`, in order with the live changes: whatever it receives after them is
    /// newer. Returns how many. A handler not started yet (waiting for bodies) gets the whole
    /// cache when it starts and nothing now. A sharded replica replays the keys it gains this
    /// way, as client-go replays the cache to a handler added late.
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
        processor.waiting.retain(|w| !w.listener.is_closed());
        processor.listeners.len() + processor.waiting.len()
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

    /// True once the cache holds what its users need: synced, and, when the source sends
    /// bodies, every cached object came from such a source (the relist of a switch to it
    /// has been processed). A reader of bodies waits for this rather than for
    /// [`has_synced`](Self::has_synced): a switched informer stays synced while it relists.
    pub fn has_complete_cache(&self) -> bool {
        self.has_synced()
            && (self.is_metadata_only()
                || self.inner.fifo.relisted() >= self.inner.bodies_since.load(Ordering::Acquire))
    }

    /// Waits until [`has_complete_cache`](Self::has_complete_cache).
    pub async fn wait_for_complete_cache(&self) {
        self.wait_for_sync().await;
        loop {
            let since = self.inner.bodies_since.load(Ordering::Acquire);
            if self.is_metadata_only() {
                return;
            }
            self.inner.fifo.wait_for_relist(since).await;
            // A switch meanwhile has a relist of its own to wait for.
            if self.inner.bodies_since.load(Ordering::Acquire) == since {
                return;
            }
        }
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

/// The delta processor: client-go's HandleDeltas, run for each popped key while the FIFO is
/// locked. It updates the cache first, then notifies; it never waits on a handler.
async fn process_deltas(inner: Arc<Inner>, mut writer: IndexerWriter) {
    let fifo = inner.fifo.clone();
    loop {
        let popped = fifo.pop(|_, deltas, in_initial_list| {
            handle_deltas(&inner, &mut writer, deltas, in_initial_list);
            Processed::Done
        });
        tokio::select! {
            more = popped => if !more {
                return;
            },
            // A relist that queued nothing (nothing listed, nothing cached) pops no key.
            () = fifo.relist_done() => fifo.exclusive(|| {
                start_waiting(&inner.indexer, &mut lock(&inner.processor), &fifo);
            }),
        }
    }
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
    // This key may have been the last of a relist.
    start_waiting(&inner.indexer, &mut processor, &inner.fifo);
}

/// Starts the handlers waiting for a relist the FIFO has done: the cache is replayed to
/// each. Called with the FIFO locked, after a key's deltas were processed or when a relist
/// that queued nothing is done.
fn start_waiting(indexer: &Indexer, processor: &mut Processor, fifo: &DeltaFifo) {
    if processor.waiting.is_empty() {
        return;
    }
    let relisted = fifo.relisted();
    let (ready, waiting): (Vec<Waiting>, Vec<Waiting>) = std::mem::take(&mut processor.waiting)
        .into_iter()
        .partition(|w| w.relist <= relisted);
    processor.waiting = waiting;
    for Waiting {
        mut listener,
        synced,
        ..
    } in ready
    {
        replay_cache(indexer, &mut listener);
        // The relist came after the first list: the informer has synced.
        synced.store(true, Ordering::Release);
        processor.listeners.push(listener);
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
