//! processorListener: one buffer per handler, so the informer never waits on a handler.
//!
//! The informer appends notifications (`Listener::push`) without blocking; the handler's
//! side, a [`ListenerReceiver`], takes them out in order, in batches, at its own pace.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::indexer::ProjectionHandle;
use crate::object::{Object, ObjectKey};

mod buffer;

use buffer::Buffer;

/// What a handler is told.
#[derive(Debug, Clone)]
pub enum Notification {
    /// An object appeared in the cache.
    Add {
        /// The object.
        object: Arc<Object>,
        /// Part of the state the handler started from (the initial list, or the cache
        /// replayed to a handler added later), not a live change.
        in_initial_list: bool,
    },
    /// An object in the cache changed (or was re-delivered by a resync).
    Update {
        /// The state before.
        old: Arc<Object>,
        /// The state now.
        new: Arc<Object>,
        /// A periodic resync, or a relist that found the object unchanged.
        resync: bool,
    },
    /// An object left the cache.
    Delete {
        /// Its last known state.
        object: Arc<Object>,
        /// The deletion was inferred by a relist; `object` may be older than the real final
        /// state (client-go's `DeletedFinalStateUnknown`).
        final_state_unknown: bool,
    },
}

impl Notification {
    /// The key of the object concerned.
    pub fn key(&self) -> &ObjectKey {
        match self {
            Self::Add { object, .. } | Self::Delete { object, .. } => object.key(),
            Self::Update { new, .. } => new.key(),
        }
    }

    /// The object as it is now (for a deletion, its last known state).
    pub fn object(&self) -> &Arc<Object> {
        match self {
            Self::Add { object, .. } | Self::Delete { object, .. } => object,
            Self::Update { new, .. } => new,
        }
    }

    fn is_initial(&self) -> bool {
        matches!(
            self,
            Self::Add {
                in_initial_list: true,
                ..
            }
        )
    }
}

/// How a listener's buffer grows when its handler falls behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BufferPolicy {
    /// Keep every notification, in order (client-go's growing ring buffer). Memory grows with
    /// the backlog; watch [`ListenerReceiver::depth`].
    #[default]
    Unbounded,
    /// Keep only the latest notification per key, at the position the key first took. The
    /// buffer is then bounded by the number of objects. For handlers that only need keys
    /// (reconcile mode), and for paused (quarantined) handlers.
    CoalesceByKey,
}

/// Identifies a listener within its informer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListenerId(pub(crate) u64);

/// The informer's side of one handler's buffer.
pub(crate) struct Listener {
    id: ListenerId,
    shared: Arc<Shared>,
    resync_period: Option<Duration>,
    next_resync: Option<Instant>,
    /// Keep the handler's projection paths registered while it is.
    projections: Vec<ProjectionHandle>,
}

struct Shared {
    // A std mutex: pushes and pops are short and never span an `.await`.
    buffer: Mutex<Buffer>,
    /// Wakes the receiver; `notify_one` keeps a permit, so no wake-up is lost.
    ready: Notify,
    /// Initial-list adds pushed but not yet handled (their batch not yet dropped).
    initial_pending: AtomicUsize,
    /// Number of buffered notifications (the depth gauge).
    depth: AtomicUsize,
    /// Notifications pushed and not yet handled: buffered, or in a batch not yet dropped.
    /// Invariant: `unhandled >= depth`.
    unhandled: AtomicUsize,
    /// The informer's own HasSynced.
    informer_synced: Arc<AtomicBool>,
    /// Pushes merged into a key's waiting notification because the buffer was over budget.
    merged: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Buffer> {
        self.buffer
            .lock()
            .expect("listener buffer lock poisoned: a push or pop panicked")
    }

    /// Accounts for notifications leaving the buffer unhandled (replaced or dropped).
    fn forget(&self, dropped: &[Notification]) {
        if !dropped.is_empty() {
            self.unhandled.fetch_sub(dropped.len(), Ordering::AcqRel);
        }
        let initial = dropped.iter().filter(|n| n.is_initial()).count();
        if initial > 0 {
            self.initial_pending.fetch_sub(initial, Ordering::AcqRel);
        }
    }
}

impl Listener {
    /// A listener and its receiving half.
    pub(crate) fn new(
        id: ListenerId,
        policy: BufferPolicy,
        budget: Option<usize>,
        resync_period: Option<Duration>,
        informer_synced: Arc<AtomicBool>,
    ) -> (Self, ListenerReceiver) {
        let shared = Arc::new(Shared {
            buffer: Mutex::new(Buffer::new(policy, budget)),
            merged: AtomicU64::new(0),
            ready: Notify::new(),
            initial_pending: AtomicUsize::new(0),
            depth: AtomicUsize::new(0),
            unhandled: AtomicUsize::new(0),
            informer_synced,
        });
        let listener = Self {
            id,
            shared: shared.clone(),
            resync_period: resync_period.filter(|p| !p.is_zero()),
            next_resync: resync_period.map(|p| Instant::now() + p),
            projections: Vec::new(),
        };
        (
            listener,
            ListenerReceiver {
                id,
                shared,
                woken: None,
            },
        )
    }

    /// Keeps `projections` registered for as long as this listener lives.
    pub(crate) fn keep_projections(&mut self, projections: Vec<ProjectionHandle>) {
        self.projections = projections;
    }

    pub(crate) fn id(&self) -> ListenerId {
        self.id
    }

    /// Appends a notification; never blocks. Returns false if the receiver is gone.
    pub(crate) fn push(&self, notification: Notification) -> bool {
        let initial = notification.is_initial();
        let mut buffer = self.shared.lock();
        if buffer.closed {
            return false;
        }
        if initial {
            self.shared.initial_pending.fetch_add(1, Ordering::AcqRel);
        }
        self.shared.unhandled.fetch_add(1, Ordering::AcqRel);
        let pushed = buffer.push(notification);
        match pushed.forgotten {
            Some(forgotten) => self.shared.forget(&[forgotten]),
            None => {
                self.shared.depth.fetch_add(1, Ordering::Relaxed);
            }
        }
        if pushed.merged {
            self.shared.merged.fetch_add(1, Ordering::Relaxed);
        }
        drop(buffer);
        self.shared.ready.notify_one();
        true
    }

    /// Whether this listener's resync is due at `now`; if so, schedules the next one.
    pub(crate) fn take_resync_due(&mut self, now: Instant) -> bool {
        match (self.resync_period, self.next_resync) {
            (Some(period), Some(next)) if now >= next => {
                self.next_resync = Some(now + period);
                true
            }
            _ => false,
        }
    }

    pub(crate) fn resync_period(&self) -> Option<Duration> {
        self.resync_period
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.shared.lock().closed
    }

    /// Stops delivery: the receiver gets `None` at once and the backlog is dropped.
    pub(crate) fn close(&self) {
        close(&self.shared);
    }
}

fn close(shared: &Shared) {
    let mut buffer = shared.lock();
    buffer.closed = true;
    let dropped: Vec<_> = std::mem::take(&mut buffer.order).into();
    buffer.clear();
    drop(buffer);
    shared.depth.store(0, Ordering::Relaxed);
    shared.forget(&dropped);
    shared.ready.notify_one();
}

/// The handler's side of a listener: notifications in order, in batches.
///
/// Contract: every notification the informer pushed is returned exactly once, in push order
/// (with [`BufferPolicy::CoalesceByKey`], only the latest per key). `has_synced` is true once
/// the informer has synced and every initial-list add delivered here has been handled, i.e.
/// its batch dropped. Dropping the receiver unregisters the handler's buffer.
///
/// As a [`Stream`], each item is a batch of every notification waiting, up to
/// [`STREAM_BATCH_MAX`]; the stream ends where [`recv_batch`](Self::recv_batch) returns `None`.
pub struct ListenerReceiver {
    id: ListenerId,
    shared: Arc<Shared>,
    /// The stream's pending wait for a push, kept across polls.
    woken: Option<Pin<Box<dyn Future<Output = ()> + Send + Sync>>>,
}

/// The most notifications one item of the [`Stream`] holds: large enough to amortise the
/// lock, small enough that a handler is not handed a whole relist at once.
pub const STREAM_BATCH_MAX: usize = 256;

/// What the buffer held when a receiver looked.
enum Taken {
    Batch(NotificationBatch),
    Empty,
    Closed,
}

impl fmt::Debug for ListenerReceiver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListenerReceiver")
            .field("id", &self.id)
            .field("depth", &self.depth())
            .finish()
    }
}

impl ListenerReceiver {
    /// Waits for at least one notification and returns up to `max` of them; `None` once the
    /// handler was removed or the informer stopped.
    pub async fn recv_batch(&mut self, max: usize) -> Option<NotificationBatch> {
        loop {
            match self.take(max) {
                Taken::Batch(batch) => return Some(batch),
                Taken::Closed => return None,
                Taken::Empty => self.shared.ready.notified().await,
            }
        }
    }

    fn take(&self, max: usize) -> Taken {
        let mut buffer = self.shared.lock();
        if buffer.closed {
            return Taken::Closed;
        }
        if buffer.order.is_empty() {
            return Taken::Empty;
        }
        let mut notifications = Vec::with_capacity(max.clamp(1, buffer.order.len()));
        while notifications.len() < max.max(1) {
            match buffer.pop() {
                Some(n) => notifications.push(n),
                None => break,
            }
        }
        drop(buffer);
        self.shared
            .depth
            .fetch_sub(notifications.len(), Ordering::Relaxed);
        let initial = notifications.iter().filter(|n| n.is_initial()).count();
        Taken::Batch(NotificationBatch {
            notifications,
            initial,
            shared: self.shared.clone(),
        })
    }

    /// Notifications waiting in the buffer.
    pub fn depth(&self) -> usize {
        self.probe().depth()
    }

    /// The informer has synced and this handler has handled its initial list.
    pub fn has_synced(&self) -> bool {
        self.probe().has_synced()
    }

    /// Changes the buffer policy, e.g. to coalesce while the handler is paused.
    pub fn set_policy(&self, policy: BufferPolicy) {
        let dropped = self.shared.lock().set_policy(policy);
        self.shared
            .depth
            .fetch_sub(dropped.len(), Ordering::Relaxed);
        self.shared.forget(&dropped);
    }

    /// Which listener this is.
    pub fn id(&self) -> ListenerId {
        self.id
    }

    /// A read-only view of this buffer for whoever does not own the receiver (status pages,
    /// readiness).
    pub fn probe(&self) -> ListenerProbe {
        ListenerProbe {
            shared: self.shared.clone(),
        }
    }
}

/// Reads a listener's depth and sync state without receiving from it.
#[derive(Clone)]
pub struct ListenerProbe {
    shared: Arc<Shared>,
}

impl fmt::Debug for ListenerProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListenerProbe")
            .field("depth", &self.depth())
            .finish()
    }
}

impl ListenerProbe {
    /// Notifications waiting in the buffer.
    pub fn depth(&self) -> usize {
        self.shared.depth.load(Ordering::Relaxed)
    }

    /// The informer has synced and the handler has handled its initial list.
    pub fn has_synced(&self) -> bool {
        self.shared.informer_synced.load(Ordering::Acquire)
            && self.shared.initial_pending.load(Ordering::Acquire) == 0
    }

    /// Notifications pushed and not yet handled: waiting in the buffer, or taken in a batch
    /// that has not been dropped. Zero means the handler has finished with everything it was
    /// given (e.g. for a test harness waiting until a handler is idle).
    pub fn unhandled(&self) -> usize {
        self.shared.unhandled.load(Ordering::Acquire)
    }

    /// Notifications merged into their key's waiting one because the buffer was over its
    /// budget ([`HandlerOptions::budget`](crate::informer::HandlerOptions::budget)).
    pub fn merged(&self) -> u64 {
        self.shared.merged.load(Ordering::Relaxed)
    }
}

impl Stream for ListenerReceiver {
    type Item = NotificationBatch;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            match self.take(STREAM_BATCH_MAX) {
                Taken::Batch(batch) => {
                    self.woken = None;
                    return Poll::Ready(Some(batch));
                }
                Taken::Closed => {
                    self.woken = None;
                    return Poll::Ready(None);
                }
                Taken::Empty => {}
            }
            // `ready` keeps a permit when nobody waits, so a push between the look above
            // and this wait still wakes it.
            let shared = &self.shared;
            if self.woken.is_none() {
                let shared = shared.clone();
                self.woken = Some(Box::pin(async move { shared.ready.notified().await }));
            }
            let woken = self.woken.as_mut().expect("set above");
            match woken.as_mut().poll(cx) {
                Poll::Ready(()) => self.woken = None,
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl Drop for ListenerReceiver {
    fn drop(&mut self) {
        close(&self.shared);
    }
}

/// Notifications taken from a listener. Drop it once they are handled: that is what moves
/// the handler's `has_synced`.
pub struct NotificationBatch {
    notifications: Vec<Notification>,
    initial: usize,
    shared: Arc<Shared>,
}

impl fmt::Debug for NotificationBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.notifications).finish()
    }
}

impl std::ops::Deref for NotificationBatch {
    type Target = [Notification];
    fn deref(&self) -> &[Notification] {
        &self.notifications
    }
}

impl Drop for NotificationBatch {
    fn drop(&mut self) {
        self.shared
            .unhandled
            .fetch_sub(self.notifications.len(), Ordering::AcqRel);
        if self.initial > 0 {
            self.shared
                .initial_pending
                .fetch_sub(self.initial, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::ObjectDecoder;
    use crate::resource::Resource;

    fn obj(name: &str, rv: u64) -> Arc<Object> {
        let json = format!(r#"{{"metadata":{{"name":"{name}","resourceVersion":"{rv}"}}}}"#);
        let decoder = ObjectDecoder::new(Resource::new("", "v1", "Namespace", "namespaces", false));
        Arc::new(decoder.decode(json.as_bytes()).unwrap())
    }

    fn add(name: &str, rv: u64, in_initial_list: bool) -> Notification {
        Notification::Add {
            object: obj(name, rv),
            in_initial_list,
        }
    }

    /// A listener of a synced informer.
    fn listener(policy: BufferPolicy, budget: Option<usize>) -> (Listener, ListenerReceiver) {
        let synced = Arc::new(AtomicBool::new(true));
        Listener::new(ListenerId(1), policy, budget, None, synced)
    }

    fn summary(batch: &NotificationBatch) -> Vec<(String, u64)> {
        batch
            .iter()
            .map(|n| (n.key().to_string(), n.object().resource_version()))
            .collect()
    }

    #[tokio::test]
    async fn a_notification_is_unhandled_until_its_batch_is_dropped() {
        let (listener, mut rx) = listener(BufferPolicy::CoalesceByKey, None);
        let probe = rx.probe();
        listener.push(add("a", 1, false));
        listener.push(add("a", 2, false));
        listener.push(add("b", 3, false));
        assert_eq!(probe.unhandled(), 2, "a coalesced notification counts once");
        let batch = rx.recv_batch(10).await.unwrap();
        assert_eq!((probe.depth(), probe.unhandled()), (0, 2));
        drop(batch);
        assert_eq!(probe.unhandled(), 0);
        listener.push(add("c", 4, false));
        drop(rx);
        assert_eq!(probe.unhandled(), 0, "a closed buffer drops its backlog");
    }

    #[tokio::test]
    async fn delivers_in_order_in_batches() {
        let (listener, mut rx) = listener(BufferPolicy::Unbounded, None);
        for rv in 1..=5 {
            listener.push(add("a", rv, false));
        }
        assert_eq!(rx.depth(), 5);
        let first = rx.recv_batch(3).await.unwrap();
        assert_eq!(
            summary(&first),
            [("a".into(), 1), ("a".into(), 2), ("a".into(), 3)]
        );
        let rest = rx.recv_batch(64).await.unwrap();
        assert_eq!(summary(&rest), [("a".into(), 4), ("a".into(), 5)]);
        assert_eq!(rx.depth(), 0);
    }

    #[tokio::test]
    async fn as_a_stream_it_yields_bounded_batches_waits_for_pushes_and_ends_on_close() {
        use futures::StreamExt;

        let (listener, mut rx) = listener(BufferPolicy::Unbounded, None);
        for rv in 1..=300 {
            listener.push(add("a", rv, false));
        }
        let first = rx.next().await.unwrap();
        assert_eq!(first.len(), STREAM_BATCH_MAX);
        let rest = rx.next().await.unwrap();
        assert_eq!(rest.len(), 300 - STREAM_BATCH_MAX);
        assert_eq!(summary(&rest).last(), Some(&("a".into(), 300)));

        let reader = tokio::spawn(async move {
            let batch = rx.next().await.map(|b| summary(&b));
            (batch, rx.next().await.is_none())
        });
        tokio::task::yield_now().await;
        listener.push(add("b", 301, false));
        tokio::task::yield_now().await;
        listener.close();
        let (batch, ended) = reader.await.unwrap();
        assert_eq!(batch, Some(vec![("b".into(), 301)]));
        assert!(ended, "a closed listener ends the stream");
    }

    #[tokio::test]
    async fn coalescing_keeps_latest_per_key_in_first_arrival_order() {
        let (listener, mut rx) = listener(BufferPolicy::CoalesceByKey, None);
        listener.push(add("a", 1, false));
        listener.push(add("b", 2, false));
        listener.push(add("a", 3, false));
        assert_eq!(rx.depth(), 2);
        let batch = rx.recv_batch(1).await.unwrap();
        assert_eq!(summary(&batch), [("a".into(), 3)]);
        listener.push(add("a", 4, false));
        let batch = rx.recv_batch(10).await.unwrap();
        assert_eq!(summary(&batch), [("b".into(), 2), ("a".into(), 4)]);
    }

    #[tokio::test]
    async fn switching_to_coalescing_compacts_the_backlog() {
        let (listener, mut rx) = listener(BufferPolicy::Unbounded, None);
        for (name, rv) in [("a", 1), ("b", 2), ("a", 3), ("c", 4), ("b", 5)] {
            listener.push(add(name, rv, false));
        }
        rx.set_policy(BufferPolicy::CoalesceByKey);
        assert_eq!(rx.depth(), 3);
        let batch = rx.recv_batch(10).await.unwrap();
        assert_eq!(
            summary(&batch),
            [("a".into(), 3), ("b".into(), 5), ("c".into(), 4)]
        );
    }

    #[tokio::test]
    async fn has_synced_waits_for_initial_batch_to_be_handled() {
        let synced = Arc::new(AtomicBool::new(false));
        let (listener, mut rx) = Listener::new(
            ListenerId(1),
            BufferPolicy::Unbounded,
            None,
            None,
            synced.clone(),
        );
        listener.push(add("a", 1, true));
        listener.push(add("b", 2, false));
        assert!(!rx.has_synced());
        synced.store(true, Ordering::Release);
        assert!(!rx.has_synced(), "initial add not handled yet");
        let batch = rx.recv_batch(10).await.unwrap();
        assert!(!rx.has_synced(), "initial add being handled");
        drop(batch);
        assert!(rx.has_synced());
    }

    #[tokio::test]
    async fn close_ends_delivery_and_dropping_the_receiver_closes() {
        let (listener, mut rx) = listener(BufferPolicy::Unbounded, None);
        listener.push(add("a", 1, false));
        listener.close();
        assert!(rx.recv_batch(1).await.is_none());
        assert!(!listener.push(add("a", 2, false)));

        let synced = Arc::new(AtomicBool::new(true));
        let (listener, rx) =
            Listener::new(ListenerId(2), BufferPolicy::Unbounded, None, None, synced);
        drop(rx);
        assert!(listener.is_closed());
    }

    #[tokio::test(start_paused = true)]
    async fn resync_is_due_per_period() {
        let synced = Arc::new(AtomicBool::new(true));
        let (mut listener, _rx) = Listener::new(
            ListenerId(1),
            BufferPolicy::Unbounded,
            None,
            Some(Duration::from_secs(10)),
            synced,
        );
        assert!(!listener.take_resync_due(Instant::now()));
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(listener.take_resync_due(Instant::now()));
        assert!(!listener.take_resync_due(Instant::now()));
    }

    fn update(name: &str, old: u64, new: u64) -> Notification {
        Notification::Update {
            old: obj(name, old),
            new: obj(name, new),
            resync: false,
        }
    }

    /// Issue 20: a slow handler's buffer stays within its budget by merging per key; the
    /// handler still gets every key's final state, each update's old state is the one it
    /// was last given, and the merges are counted. Regression: the buffer grew with every
    /// notification (935 to 3,939 events, +15 MB, in the host's test).
    #[tokio::test]
    async fn over_budget_a_buffer_merges_per_key_and_keeps_each_keys_history_consistent() {
        // Each update's old state costs about 60 bytes: the budget holds a few.
        let (listener, mut rx) = listener(BufferPolicy::Unbounded, Some(300));
        let probe = rx.probe();
        listener.push(add("a", 1, true));
        listener.push(add("b", 2, true));
        let mut last = std::collections::BTreeMap::from([("a", 1), ("b", 2)]);
        for rv in 3..=1000 {
            let name = if rv % 2 == 0 { "a" } else { "b" };
            listener.push(update(name, last[name], rv));
            last.insert(name, rv);
        }
        listener.push(Notification::Delete {
            object: obj("b", 1001),
            final_state_unknown: false,
        });
        assert!(probe.depth() < 20, "{} waiting", probe.depth());
        assert!(probe.merged() > 900, "{} merged", probe.merged());
        assert!(!probe.has_synced(), "the initial adds are still waiting");

        // What the handler gets is a consistent history of each key.
        let mut given: std::collections::BTreeMap<String, Option<u64>> = Default::default();
        while probe.depth() > 0 {
            let batch = rx.recv_batch(64).await.unwrap();
            for notification in batch.iter() {
                let key = notification.key().to_string();
                let rv = notification.object().resource_version();
                match notification {
                    Notification::Add { .. } => assert_eq!(given.get(&key), None, "{key}"),
                    Notification::Update { old, .. } => {
                        assert_eq!(given[&key], Some(old.resource_version()), "{key}")
                    }
                    Notification::Delete { .. } => {}
                }
                let state = (!matches!(notification, Notification::Delete { .. })).then_some(rv);
                given.insert(key, state);
            }
        }
        assert_eq!(given["a"], Some(1000));
        assert_eq!(given["b"], None, "b's deletion arrived");
        assert!(probe.has_synced());
    }

    #[tokio::test]
    async fn within_budget_every_notification_is_kept() {
        let (listener, rx) = listener(BufferPolicy::Unbounded, Some(1 << 20));
        listener.push(add("a", 1, false));
        for rv in 2..=100 {
            listener.push(update("a", rv - 1, rv));
        }
        assert_eq!((rx.depth(), rx.probe().merged()), (100, 0));
    }

    fn resync(name: &str, rv: u64) -> Notification {
        Notification::Update {
            old: obj(name, rv),
            new: obj(name, rv),
            resync: true,
        }
    }

    /// Issue 60: a handler slower than its resync period gets at most one resync per key
    /// waiting; real changes queue as ever. Before, every period added one per key (28
    /// waiting per key after 30 s at a 1 s period).
    #[tokio::test]
    async fn a_key_waits_with_at_most_one_resync() {
        for policy in [BufferPolicy::Unbounded, BufferPolicy::CoalesceByKey] {
            let (listener, mut rx) = listener(policy, None);
            let probe = rx.probe();
            for period in 0..30 {
                listener.push(resync("a", 1));
                listener.push(resync("b", 2));
                if period == 10 {
                    listener.push(update("a", 1, 3));
                }
            }
            let expected = match policy {
                // a's resync, b's resync, and a's update, which carries a's latest state.
                BufferPolicy::Unbounded => 3,
                BufferPolicy::CoalesceByKey => 2,
            };
            assert_eq!(probe.depth(), expected, "{policy:?}");
            assert_eq!(probe.unhandled(), expected, "{policy:?}");
            // Once taken, the next period's resync waits again.
            let batch = rx.recv_batch(64).await.unwrap();
            drop(batch);
            listener.push(resync("a", 3));
            listener.push(resync("a", 3));
            assert_eq!(probe.depth(), 1, "{policy:?}");
        }
    }
}
