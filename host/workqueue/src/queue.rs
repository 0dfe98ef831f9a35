//! Layer 1, the dedup queue: client-go's `workqueue.Interface` (`Add`, `Get`, `Done`, `Len`,
//! `ShutDown`, `ShutDownWithDrain`, `ShuttingDown`).
//!
//! The delaying layer (`add_after`) lives in `delay.rs` and the rate-limiting layer
//! (`add_rate_limited`, `forget`, `num_requeues`) in `rate_limit.rs`; both are further `impl`
//! blocks on the same [`Queue`] type and only ever reach this layer through [`Queue::add`].

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::delay::Delay;
use crate::keyed::{Key, KeyRef, Keyed, PassThrough};
use crate::metrics::QueueMetrics;
use crate::rate_limit::{RateLimiter, default_controller_rate_limiter};
#[cfg(feature = "prometheus")]
use crate::{
    Error,
    metrics::{GaugeValues, ScrapeGauges, WorkqueueMetrics},
};

/// A work queue of keys, as client-go's rate-limited work queue: dedup, delays and back-off.
///
/// # Contract
///
/// - **Dedup.** [`add`](Self::add) of an item that is already waiting does nothing: however
///   often a key is added before a worker takes it, it is handed out once.
/// - **One worker per item.** [`get`](Self::get) hands each waiting item to exactly one caller.
///   Until that caller calls [`done`](Self::done), the item is *processing*: adding it again
///   marks it dirty, and it is queued once more (once, however many adds) when `done` is called.
///   So no item is ever held by two workers at once, and an add that happens while an item is
///   processing is never lost.
/// - **Order.** Items are handed out in the order they became waiting (FIFO).
/// - **Shutdown.** After [`shut_down`](Self::shut_down), adds are ignored, pending
///   [`add_after`](Self::add_after) timers are cancelled, and `get` keeps handing out the items
///   already waiting, then returns `None`. [`shut_down_with_drain`](Self::shut_down_with_drain)
///   does the same and also waits until every item in flight is `done`.
/// - **Delays and back-off.** [`add_after`](Self::add_after) adds an item once a delay has
///   passed; the same item waiting twice keeps the earlier deadline.
///   [`add_rate_limited`](Self::add_rate_limited) asks the queue's [`RateLimiter`] for the
///   delay; [`forget`](Self::forget) resets the item's back-off.
///
/// `Queue` is a cheap handle (an `Arc`): clone it into every producer and worker. All clones
/// are the same queue. The queue's timer task ends when the queue shuts down or the last
/// handle is dropped.
///
/// # Example
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use kubeplug_workqueue::Queue;
///
/// let queue: Queue<String> = Queue::new();
/// queue.add("default/web".to_string());
/// queue.add("default/web".to_string()); // deduplicated: still one waiting item
/// assert_eq!(queue.len(), 1);
///
/// let key = queue.get().await.expect("not shut down");
/// queue.add(key.clone()); // added while processing: queued again at `done`
/// assert_eq!(queue.len(), 0);
/// queue.done(&key);
/// assert_eq!(queue.len(), 1);
/// # }
/// ```
pub struct Queue<T> {
    pub(crate) shared: Arc<Shared<T>>,
}

/// The state behind every clone of one [`Queue`].
pub(crate) struct Shared<T> {
    /// Used as the `name` label of the metrics and in logs; may be empty without metrics.
    pub(crate) name: String,
    /// A blocking `std` mutex: each critical section is a few hash-map operations that never
    /// await, which is cheaper than an async mutex; the guard is never held across `.await`.
    state: Mutex<State<T>>,
    /// Hashes items before `state` is locked (see `keyed.rs`): the maps only compare.
    hasher: RandomState,
    /// Signalled once per item pushed onto `state.queue` (`notify_one`), and to all waiters on
    /// shutdown (`notify_waiters`). `get` registers before it looks, so no wake-up is lost.
    item_ready: Notify,
    /// Signalled to all waiters when `processing` becomes empty during shutdown.
    drained: Notify,
    /// Layer 2: the items waiting for a deadline, and the timer task's wake-up.
    pub(crate) delay: Arc<Delay<T>>,
    /// Layer 3: decides the delay of `add_rate_limited`.
    pub(crate) limiter: Box<dyn RateLimiter<T>>,
    /// `None` for a queue without metrics: every metric update is then skipped, and no clock
    /// is read.
    pub(crate) metrics: Option<QueueMetrics>,
}

/// The dedup bookkeeping, as client-go's `queue`, `dirty` and `processing`. Items are stored
/// with their hash ([`Keyed`]), computed before the lock is taken.
///
/// Invariants (checked by `check_invariants` in the tests after every step):
/// - every element of `queue` is in `dirty` and not in `processing`, and appears only once;
/// - every element of `dirty` is in `queue` or in `processing` (exactly one of them);
/// - so an item is in at most one of "waiting" (`queue`) and "held by a worker" (`processing`).
struct State<T> {
    /// Items ready to be handed out by `get`, oldest first.
    queue: VecDeque<Keyed<T>>,
    /// Items that need processing: those in `queue`, plus those added again while processing.
    /// The value is when the item was added (only with metrics), observed as time in queue.
    dirty: HashMap<Keyed<T>, Option<Instant>, PassThrough>,
    /// Items handed out by `get` and not yet `done`. The value is when processing started
    /// (only with metrics), for the work-duration and in-flight metrics.
    processing: HashMap<Keyed<T>, Option<Instant>, PassThrough>,
    /// Set once by `shut_down` or `shut_down_with_drain`; never cleared.
    shutting_down: bool,
    /// `shut_down_with_drain` is waiting for `processing` to empty; cleared by `shut_down`,
    /// which stops the wait.
    draining: bool,
}

/// What `try_get` found.
enum Take<T> {
    /// An item, now processing.
    Item(T),
    /// Nothing waiting and shutting down: `get` returns `None`.
    Closed,
    /// Nothing waiting yet: wait for `item_ready`.
    Empty,
}

impl<T> Clone for Queue<T> {
    fn clone(&self) -> Self {
        Queue {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T> fmt::Debug for Queue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("Queue")
            .field("name", &self.shared.name)
            .field("len", &state.queue.len())
            .field("processing", &state.processing.len())
            .field("shutting_down", &state.shutting_down)
            .finish_non_exhaustive()
    }
}

impl<T: Hash + Eq + Clone + Send + 'static> Default for Queue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Shared<T> {
    /// Locks the state. A panic while the lock is held can only come from the item's own
    /// `Hash`, `Eq` or `Clone`; the queue keeps working rather than poisoning every worker.
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the clock only when some metric needs it.
    fn stamp(&self) -> Option<Instant> {
        self.metrics.as_ref().map(|_| Instant::now())
    }
}

impl<T: Hash + Eq + Clone + Send + 'static> Queue<T> {
    /// An unnamed queue without metrics, with [`default_controller_rate_limiter`].
    pub fn new() -> Self {
        QueueBuilder::new(String::new()).build()
    }

    /// Starts building a queue called `name`: the `name` label of its metrics, and the queue
    /// named in the worker helper's logs.
    pub fn builder(name: impl Into<String>) -> QueueBuilder<T> {
        QueueBuilder::new(name.into())
    }

    /// The name given to [`Queue::builder`] (empty for [`Queue::new`]).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Marks `item` as needing processing.
    ///
    /// Does nothing if the item is already waiting, or if the queue is shutting down. If the
    /// item is being processed, it is queued again when its worker calls [`done`](Self::done).
    pub fn add(&self, item: T) {
        let shared = &*self.shared;
        let now = shared.stamp();
        // Hash and copy before locking: the critical section only compares and moves. The
        // copy goes to `queue` (handed out by `get`), the original to `dirty`.
        let item = Keyed::new(&shared.hasher, item);
        let copy = Keyed {
            hash: item.hash,
            item: item.item.clone(),
        };
        let pushed = {
            let mut state = shared.lock();
            if state.shutting_down {
                return;
            }
            let State {
                queue,
                dirty,
                processing,
                ..
            } = &mut *state;
            match dirty.entry(item) {
                Entry::Occupied(_) => return,
                Entry::Vacant(slot) => {
                    let in_flight = processing.contains_key(slot.key());
                    slot.insert(now);
                    if !in_flight {
                        queue.push_back(copy);
                    }
                    !in_flight
                }
            }
        };
        if let Some(metrics) = &shared.metrics {
            metrics.added();
        }
        if pushed {
            shared.item_ready.notify_one();
        }
    }

    /// Waits for an item and hands it to the caller alone; returns `None` once the queue is
    /// shutting down and nothing is waiting.
    ///
    /// The caller must call [`done`](Self::done) with the item when it has finished with it,
    /// or the item can never be handed out again. [`run_workers`](crate::run_workers) does
    /// that for you. Cancel-safe: dropping the future before it completes takes no item.
    pub async fn get(&self) -> Option<T> {
        // Fast path: an item is waiting, no need to touch the `Notify`.
        match self.try_get() {
            Take::Item(item) => return Some(item),
            Take::Closed => return None,
            Take::Empty => {}
        }
        let notified = self.shared.item_ready.notified();
        tokio::pin!(notified);
        loop {
            // Register before looking, so an add between the look and the wait still wakes us.
            notified.as_mut().enable();
            match self.try_get() {
                Take::Item(item) => return Some(item),
                Take::Closed => return None,
                Take::Empty => {}
            }
            notified.as_mut().await;
            notified.set(self.shared.item_ready.notified());
        }
    }

    fn try_get(&self) -> Take<T> {
        let shared = &*self.shared;
        let now = shared.stamp();
        let (item, added_at) = {
            let mut state = shared.lock();
            let Some(item) = state.queue.pop_front() else {
                return if state.shutting_down {
                    Take::Closed
                } else {
                    Take::Empty
                };
            };
            // Move the dirty entry's own copy of the key to `processing`: no clone needed.
            let (key, added_at) = state
                .dirty
                .remove_entry(&item)
                .expect("invariant: every element of `queue` is in `dirty`");
            state.processing.insert(key, now);
            (item.item, added_at)
        };
        if let Some(metrics) = &shared.metrics {
            metrics.taken(since(added_at, now));
        }
        Take::Item(item)
    }

    /// Marks `item`, handed out by [`get`](Self::get), as finished. If it was added again
    /// while processing, it is queued now (once). Does nothing for an item not being processed.
    pub fn done(&self, item: &T) {
        let shared = &*self.shared;
        let now = shared.stamp();
        let item = KeyRef {
            hash: shared.hasher.hash_one(item),
            item,
        };
        let (requeued, started_at, all_done) = {
            let mut state = shared.lock();
            let Some((key, started_at)) = state.processing.remove_entry(&item as &dyn Key<T>)
            else {
                return;
            };
            let requeued = state.dirty.contains_key(&key);
            if requeued {
                state.queue.push_back(key);
            }
            let all_done = state.shutting_down && state.processing.is_empty();
            (requeued, started_at, all_done)
        };
        if let Some(metrics) = &shared.metrics {
            metrics.finished(since(started_at, now));
        }
        if requeued {
            shared.item_ready.notify_one();
        }
        if all_done {
            shared.drained.notify_waiters();
        }
    }

    /// The number of items waiting to be handed out (not those being processed, nor those
    /// waiting for an [`add_after`](Self::add_after) deadline).
    pub fn len(&self) -> usize {
        self.shared.lock().queue.len()
    }

    /// Whether no item is waiting to be handed out; see [`len`](Self::len).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of items handed out by [`get`](Self::get) and not yet [`done`](Self::done)
    /// (client-go's unfinished work). With [`len`](Self::len) zero too, no item is waiting or
    /// being worked on; only [`add_after`](Self::add_after) deadlines may still be pending.
    pub fn processing(&self) -> usize {
        self.shared.lock().processing.len()
    }

    /// Stops the queue: later adds are ignored, pending [`add_after`](Self::add_after) timers
    /// are cancelled, and every waiting [`get`](Self::get) wakes up. Items already waiting are
    /// still handed out; `get` returns `None` once none are left. Also ends a
    /// [`shut_down_with_drain`](Self::shut_down_with_drain) that is still waiting.
    pub fn shut_down(&self) {
        {
            let mut state = self.shared.lock();
            state.shutting_down = true;
            state.draining = false;
        }
        self.stop();
        self.shared.drained.notify_waiters();
    }

    /// Like [`shut_down`](Self::shut_down), then waits until every item handed out by
    /// [`get`](Self::get) is [`done`](Self::done) (or until `shut_down` is called).
    ///
    /// Workers keep calling `get` meanwhile, so that they see the shutdown and the waiting
    /// items; an item added again while processing is still queued at `done` and handed out.
    pub async fn shut_down_with_drain(&self) {
        {
            let mut state = self.shared.lock();
            state.shutting_down = true;
            state.draining = true;
        }
        self.stop();
        let drained = self.shared.drained.notified();
        tokio::pin!(drained);
        loop {
            drained.as_mut().enable();
            {
                let state = self.shared.lock();
                if state.processing.is_empty() || !state.draining {
                    return;
                }
            }
            drained.as_mut().await;
            drained.set(self.shared.drained.notified());
        }
    }

    /// Whether [`shut_down`](Self::shut_down) or
    /// [`shut_down_with_drain`](Self::shut_down_with_drain) has been called.
    pub fn is_shutting_down(&self) -> bool {
        self.shared.lock().shutting_down
    }

    /// The part of shutting down shared by both flavours.
    fn stop(&self) {
        self.shared.delay.close();
        self.shared.item_ready.notify_waiters();
    }
}

/// `now - earlier`, or zero when either time was not taken (no metrics).
fn since(earlier: Option<Instant>, now: Option<Instant>) -> std::time::Duration {
    match (earlier, now) {
        (Some(earlier), Some(now)) => now.saturating_duration_since(earlier),
        _ => std::time::Duration::ZERO,
    }
}

#[cfg(feature = "prometheus")]
impl<T: Send> ScrapeGauges for Shared<T> {
    fn gauges(&self, now: Instant) -> GaugeValues {
        let state = self.lock();
        let mut stats = GaugeValues {
            depth: state.dirty.len(),
            ..GaugeValues::default()
        };
        for started in state.processing.values().flatten() {
            let running = now.saturating_duration_since(*started).as_secs_f64();
            stats.unfinished_seconds += running;
            stats.longest_running_seconds = stats.longest_running_seconds.max(running);
        }
        stats
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        // The timer task holds only a weak handle to us: tell it to stop.
        self.delay.close();
    }
}

/// Configures a [`Queue`]: its name, its metrics (with the `prometheus` feature) and its rate
/// limiter.
///
/// Without metrics the queue records nothing and reads no clock; without
/// [`rate_limiter`](Self::rate_limiter) it uses [`default_controller_rate_limiter`]. The name
/// is the queue's `name` label and appears in the worker helper's logs.
///
/// ```
/// use kubeplug_workqueue::{ItemExponential, Queue};
/// use std::time::Duration;
///
/// let queue: Queue<String> = Queue::builder("pods")
///     .rate_limiter(ItemExponential::new(Duration::from_millis(10), Duration::from_secs(60)))
///     .build();
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct QueueBuilder<T> {
    name: String,
    metrics: Option<QueueMetrics>,
    limiter: Option<Box<dyn RateLimiter<T>>>,
}

impl<T> fmt::Debug for QueueBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueBuilder")
            .field("name", &self.name)
            .field("metrics", &self.metrics.is_some())
            .field("custom_rate_limiter", &self.limiter.is_some())
            .finish()
    }
}

impl<T: Hash + Eq + Clone + Send + 'static> QueueBuilder<T> {
    fn new(name: String) -> Self {
        QueueBuilder {
            name,
            metrics: None,
            limiter: None,
        }
    }

    /// Reports the queue in `metrics` under `name="<queue name>"`. The name stays taken until
    /// the queue (its last handle) is dropped; its series are then removed.
    ///
    /// ```
    /// use kubeplug_workqueue::{Queue, WorkqueueMetrics};
    /// use prometheus_client::registry::Registry;
    ///
    /// let mut registry = Registry::default();
    /// let metrics = WorkqueueMetrics::register(&mut registry);
    /// let queue: Queue<String> = Queue::builder("pods").metrics(&metrics)?.build();
    /// # Ok::<(), kubeplug_workqueue::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::DuplicateQueueName`] if a live queue already uses this name in `metrics`;
    /// [`Error::EmptyQueueName`] if the queue's name is empty.
    #[cfg(feature = "prometheus")]
    pub fn metrics(mut self, metrics: &WorkqueueMetrics) -> Result<Self, Error> {
        self.metrics = Some(metrics.reserve(&self.name)?);
        Ok(self)
    }

    /// Uses `limiter` for [`Queue::add_rate_limited`] instead of
    /// [`default_controller_rate_limiter`].
    pub fn rate_limiter(mut self, limiter: impl RateLimiter<T> + 'static) -> Self {
        self.limiter = Some(Box::new(limiter));
        self
    }

    /// Creates the queue. No task is started until the first [`Queue::add_after`] with a
    /// positive delay.
    pub fn build(self) -> Queue<T> {
        let shared = Arc::new(Shared {
            name: self.name,
            state: Mutex::new(State {
                queue: VecDeque::new(),
                dirty: HashMap::default(),
                processing: HashMap::default(),
                shutting_down: false,
                draining: false,
            }),
            hasher: RandomState::new(),
            item_ready: Notify::new(),
            drained: Notify::new(),
            delay: Arc::new(Delay::new()),
            limiter: self
                .limiter
                .unwrap_or_else(|| Box::new(default_controller_rate_limiter())),
            metrics: self.metrics,
        });
        #[cfg(feature = "prometheus")]
        if let Some(metrics) = &shared.metrics {
            let weak: std::sync::Weak<dyn ScrapeGauges> =
                Arc::downgrade(&shared) as std::sync::Weak<Shared<T>>;
            metrics.attach(weak);
        }
        Queue { shared }
    }
}

#[cfg(test)]
impl<T: Hash + Eq + Clone + Send + 'static> Queue<T> {
    /// Panics if the invariants written on [`State`] do not hold.
    pub(crate) fn check_invariants(&self) {
        let state = self.shared.lock();
        let mut seen = std::collections::HashSet::new();
        for item in &state.queue {
            assert!(seen.insert(&item.item), "an item is queued twice");
            assert!(state.dirty.contains_key(item), "a queued item is not dirty");
            assert!(
                !state.processing.contains_key(item),
                "a queued item is processing"
            );
        }
        for item in state.dirty.keys() {
            assert!(
                seen.contains(&item.item) || state.processing.contains_key(item),
                "a dirty item is neither queued nor processing"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet, VecDeque};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use futures::FutureExt;
    use proptest::prelude::*;

    use super::*;

    /// `get` that must not wait: the item, or `None` when the queue is closed and empty.
    /// Panics if `get` would block.
    fn get_now<T: Hash + Eq + Clone + Send + 'static>(queue: &Queue<T>) -> Option<T> {
        queue
            .get()
            .now_or_never()
            .expect("get() should not have to wait")
    }

    fn would_block<T: Hash + Eq + Clone + Send + 'static>(queue: &Queue<T>) -> bool {
        queue.get().now_or_never().is_none()
    }

    #[tokio::test(start_paused = true)]
    async fn add_dedups_waiting_items_and_keeps_fifo_order() {
        let queue = Queue::new();
        queue.add("a");
        queue.add("b");
        queue.add("a");
        queue.add("c");
        queue.add("b");
        assert_eq!(queue.len(), 3);
        assert_eq!(get_now(&queue), Some("a"));
        assert_eq!(get_now(&queue), Some("b"));
        assert_eq!(get_now(&queue), Some("c"));
        assert!(would_block(&queue), "each key must be handed out once");
        queue.check_invariants();
    }

    #[tokio::test(start_paused = true)]
    async fn re_add_while_processing_is_delivered_after_done_exactly_once() {
        let queue = Queue::new();
        queue.add("a");
        let held = get_now(&queue).unwrap();
        queue.add("a");
        queue.add("a");
        queue.check_invariants();
        // Not handed to a second worker while the first one holds it.
        assert_eq!(queue.len(), 0);
        assert!(would_block(&queue));

        queue.done(&held);
        queue.check_invariants();
        assert_eq!(queue.len(), 1);
        assert_eq!(get_now(&queue), Some("a"));
        queue.done(&"a");
        assert!(
            would_block(&queue),
            "three adds while processing give one more delivery"
        );
        assert_eq!(queue.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn done_without_re_add_does_not_requeue_and_unknown_done_is_ignored() {
        let queue = Queue::new();
        queue.add(1);
        let item = get_now(&queue).unwrap();
        queue.done(&item);
        queue.done(&item);
        queue.done(&42);
        assert!(would_block(&queue));
        assert_eq!(queue.processing(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_get_is_woken_by_add() {
        let queue = Queue::new();
        let getter = tokio::spawn({
            let queue = queue.clone();
            async move { queue.get().await }
        });
        tokio::task::yield_now().await;
        assert!(!getter.is_finished());
        queue.add("x");
        assert_eq!(getter.await.unwrap(), Some("x"));
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_wakes_getters_hands_out_what_is_left_and_ignores_adds() {
        let queue: Queue<&str> = Queue::new();
        let getters: Vec<_> = (0..3)
            .map(|_| {
                let queue = queue.clone();
                tokio::spawn(async move { queue.get().await })
            })
            .collect();
        tokio::task::yield_now().await;
        queue.shut_down();
        for getter in getters {
            assert_eq!(getter.await.unwrap(), None);
        }
        assert!(queue.is_shutting_down());
        queue.add("late");
        assert_eq!(queue.len(), 0, "adds after shutdown are ignored");
        assert_eq!(get_now(&queue), None);

        let queue = Queue::new();
        queue.add("left");
        queue.shut_down();
        assert_eq!(
            get_now(&queue),
            Some("left"),
            "waiting items are still handed out"
        );
        assert_eq!(get_now(&queue), None);
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_with_drain_waits_for_in_flight_items() {
        let queue = Queue::new();
        queue.add("a");
        queue.add("b");
        let a = get_now(&queue).unwrap();
        let b = get_now(&queue).unwrap();

        let drain = tokio::spawn({
            let queue = queue.clone();
            async move { queue.shut_down_with_drain().await }
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!drain.is_finished(), "two items are still processing");
        assert!(queue.is_shutting_down());
        queue.add("c");
        assert_eq!(queue.len(), 0, "no new work while draining");

        queue.done(&a);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!drain.is_finished(), "one item is still processing");
        queue.done(&b);
        drain.await.unwrap();
        assert_eq!(get_now(&queue), None);
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_with_drain_returns_at_once_when_idle_and_shut_down_ends_a_drain() {
        let queue: Queue<u32> = Queue::new();
        queue.shut_down_with_drain().await;
        assert_eq!(get_now(&queue), None);

        let queue = Queue::new();
        queue.add(1);
        let _held = get_now(&queue).unwrap();
        let drain = tokio::spawn({
            let queue = queue.clone();
            async move { queue.shut_down_with_drain().await }
        });
        tokio::task::yield_now().await;
        assert!(!drain.is_finished());
        queue.shut_down();
        drain.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn cancelled_get_takes_no_item() {
        let queue = Queue::new();
        let result = tokio::time::timeout(Duration::from_secs(1), queue.get()).await;
        assert!(result.is_err());
        queue.add(7);
        assert_eq!(get_now(&queue), Some(7));
    }

    /// One step of the sequential model test.
    #[derive(Debug, Clone)]
    enum Op {
        Add(u8),
        /// Worker `w` calls `get` if it holds nothing.
        Get(usize),
        /// Worker `w` calls `done` if it holds something.
        Done(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..6).prop_map(Op::Add),
            (0usize..4).prop_map(Op::Get),
            (0usize..4).prop_map(Op::Done),
        ]
    }

    /// client-go's documented semantics written as plainly as possible.
    #[derive(Default)]
    struct Model {
        queue: VecDeque<u8>,
        dirty: HashSet<u8>,
        processing: HashSet<u8>,
    }

    impl Model {
        fn add(&mut self, item: u8) {
            if self.dirty.insert(item) && !self.processing.contains(&item) {
                self.queue.push_back(item);
            }
        }
        fn get(&mut self) -> Option<u8> {
            let item = self.queue.pop_front()?;
            self.dirty.remove(&item);
            self.processing.insert(item);
            Some(item)
        }
        fn done(&mut self, item: u8) {
            self.processing.remove(&item);
            if self.dirty.contains(&item) {
                self.queue.push_back(item);
            }
        }
    }

    proptest! {
        /// Random add/get/done sequences by four workers behave exactly as the model: same
        /// item handed out at every step, never one item held by two workers, and after a
        /// final drain every item was processed after its last add.
        #[test]
        fn sequential_ops_match_the_model(ops in proptest::collection::vec(op(), 1..200)) {
            let queue = Queue::new();
            let mut model = Model::default();
            let mut held: [Option<u8>; 4] = [None; 4];
            let mut last_add: HashMap<u8, usize> = HashMap::new();
            let mut last_start: HashMap<u8, usize> = HashMap::new();
            for (step, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Add(item) => {
                        queue.add(item);
                        model.add(item);
                        last_add.insert(item, step);
                    }
                    Op::Get(w) if held[w].is_none() => {
                        let got = queue.get().now_or_never().flatten();
                        prop_assert_eq!(got, model.get());
                        if let Some(item) = got {
                            prop_assert!(!held.contains(&Some(item)), "{} held twice", item);
                            held[w] = Some(item);
                            last_start.insert(item, step);
                        }
                    }
                    Op::Done(w) => {
                        if let Some(item) = held[w].take() {
                            queue.done(&item);
                            model.done(item);
                        }
                    }
                    Op::Get(_) => {}
                }
                queue.check_invariants();
                prop_assert_eq!(queue.len(), model.queue.len());
            }
            // Finish: the workers finish, then one worker drains the queue.
            let mut step = usize::MAX / 2;
            for item in held.iter_mut().filter_map(Option::take) {
                queue.done(&item);
            }
            while let Some(item) = queue.get().now_or_never().flatten() {
                last_start.insert(item, step);
                step += 1;
                queue.done(&item);
            }
            for (item, added) in last_add {
                let started = last_start.get(&item).copied();
                prop_assert!(
                    started.is_some_and(|s| s > added),
                    "item {} added at step {} was not processed afterwards", item, added
                );
            }
        }

        /// Many concurrent producers and workers on a multi-threaded runtime: no item is ever
        /// held by two workers at once, and every item is processed after its last add.
        #[test]
        fn concurrent_workers_never_share_an_item_and_lose_nothing(
            scripts in proptest::collection::vec(
                proptest::collection::vec((0u8..16, 0u8..4), 1..60), 1..5),
            workers in 1usize..9,
        ) {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(4)
                .build()
                .unwrap();
            runtime.block_on(concurrent_run(scripts, workers));
        }
    }

    /// The body of the concurrent property test. Panics (failing the test) on a violation.
    async fn concurrent_run(scripts: Vec<Vec<(u8, u8)>>, workers: usize) {
        let queue: Queue<u8> = Queue::new();
        // A global clock of events: an add is stamped before it happens, a start after `get`
        // returns, so "start > last add" means a get began after the add was requested.
        let clock = Arc::new(AtomicU64::new(1));
        let last_add: Arc<Mutex<HashMap<u8, u64>>> = Arc::default();
        let last_start: Arc<Mutex<HashMap<u8, u64>>> = Arc::default();
        let held: Arc<Mutex<HashSet<u8>>> = Arc::default();

        let worker_tasks: Vec<_> = (0..workers)
            .map(|_| {
                let (queue, clock, last_start, held) = (
                    queue.clone(),
                    clock.clone(),
                    last_start.clone(),
                    held.clone(),
                );
                tokio::spawn(async move {
                    while let Some(item) = queue.get().await {
                        let now = clock.fetch_add(1, Ordering::SeqCst);
                        assert!(
                            held.lock().unwrap().insert(item),
                            "item {item} handed to two workers at once"
                        );
                        last_start.lock().unwrap().insert(item, now);
                        for _ in 0..(item % 3) {
                            tokio::task::yield_now().await;
                        }
                        // Release our claim before `done`: afterwards another worker may get it.
                        held.lock().unwrap().remove(&item);
                        queue.done(&item);
                    }
                })
            })
            .collect();

        let producers: Vec<_> = scripts
            .into_iter()
            .map(|script| {
                let (queue, clock, last_add) = (queue.clone(), clock.clone(), last_add.clone());
                tokio::spawn(async move {
                    for (item, pause) in script {
                        let now = clock.fetch_add(1, Ordering::SeqCst);
                        last_add.lock().unwrap().insert(item, now);
                        queue.add(item);
                        for _ in 0..pause {
                            tokio::task::yield_now().await;
                        }
                    }
                })
            })
            .collect();
        for producer in producers {
            producer.await.unwrap();
        }
        // Items still waiting are handed out after shutdown, and re-adds while processing are
        // still queued at `done`, so every worker's `get` returns `None` only when all is done.
        queue.shut_down();
        for worker in worker_tasks {
            worker.await.unwrap();
        }
        queue.check_invariants();
        assert_eq!(queue.processing(), 0);
        let last_start = last_start.lock().unwrap();
        for (item, added) in last_add.lock().unwrap().iter() {
            let started = last_start.get(item).copied().unwrap_or(0);
            assert!(
                started > *added,
                "item {item} added at {added} was last started at {started}"
            );
        }
    }
}
