//! DeltaFIFO: per-key lists of changes, and a queue of keys in first-arrival order.
//!
//! The Reflector writes (add, update, delete, replace, resync); one consumer pops a key with
//! all its deltas and processes them while the FIFO is locked, so that a relist (`replace`) or
//! a resync can never interleave with the processing of a key (client-go gets the same by
//! holding the FIFO lock during `Pop`'s process function).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use smallvec::{SmallVec, smallvec};
use tokio::sync::Notify;

use crate::indexer::Indexer;
use crate::object::{Object, ObjectKey};
use crate::{KeyMap, KeySet};

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeltaType {
    /// Created (seen in a watch).
    Added,
    /// Changed (seen in a watch).
    Updated,
    /// Deleted; the object is its last known state.
    Deleted,
    /// Seen in a (re)list.
    Replaced,
    /// Re-delivered by a resync.
    Sync,
}

/// One change of one object.
#[derive(Debug, Clone)]
pub struct Delta {
    /// What happened.
    pub kind: DeltaType,
    /// The object after the change, or for `Deleted` its last known state.
    pub object: Arc<Object>,
    /// For `Deleted` only: the deletion was inferred from a relist that no longer had the
    /// object, and `object` is the last state we knew (client-go's `DeletedFinalStateUnknown`).
    pub final_state_unknown: bool,
}

impl Delta {
    fn new(kind: DeltaType, object: Arc<Object>) -> Self {
        Self {
            kind,
            object,
            final_state_unknown: false,
        }
    }

    fn tombstone(object: Arc<Object>) -> Self {
        Self {
            kind: DeltaType::Deleted,
            object,
            final_state_unknown: true,
        }
    }
}

/// The deltas of one key, oldest first. Never empty while queued. Most keys wait with one
/// delta, held inline.
pub type Deltas = SmallVec<[Delta; 1]>;

#[derive(Default)]
struct State {
    /// Pending deltas per key. Invariant: a key is in `items` if and only if it is in `queue`,
    /// exactly once, and its deltas are never empty.
    items: KeyMap<ObjectKey, Deltas>,
    /// Keys in the order they first got a pending delta.
    queue: VecDeque<ObjectKey>,
    /// A first `replace` (or any add/update/delete) happened.
    populated: bool,
    /// Keys queued by the first `replace` that have not been popped yet.
    initial_population_count: usize,
    closed: bool,
}

impl State {
    fn queue_action(&mut self, delta: Delta) {
        let key = delta.object.key().clone();
        match self.items.get_mut(&key) {
            Some(deltas) => {
                deltas.push(delta);
                dedup_deletes(deltas);
            }
            None => {
                self.queue.push_back(key.clone());
                self.items.insert(key, smallvec![delta]);
            }
        }
    }
}

/// Two deletions in a row collapse into one; the one that is not a tombstone carries more.
fn dedup_deletes(deltas: &mut Deltas) {
    let n = deltas.len();
    if n < 2 || deltas[n - 1].kind != DeltaType::Deleted || deltas[n - 2].kind != DeltaType::Deleted
    {
        return;
    }
    let last = deltas.pop().expect("two deltas");
    if deltas[n - 2].final_state_unknown && !last.final_state_unknown {
        deltas[n - 2] = last;
    }
}

/// What [`DeltaFifo::pop`]'s process function asks for.
pub enum Processed {
    /// The deltas were handled.
    Done,
    /// Put these deltas back at the end of the queue (client-go's `ErrRequeue`). No delta can
    /// arrive for the key meanwhile, since processing holds the FIFO.
    Requeue(Deltas),
}

/// The DeltaFIFO. See the module docs for the contract.
///
/// `known` is the Indexer the consumer keeps up to date: `replace` uses it to find objects
/// that vanished, `resync` re-delivers from it, and `delete` drops deletions of keys that are
/// neither cached nor queued.
///
/// Overflow policy: unbounded, never back-pressured, never dropping (client-go's DeltaFIFO
/// is the same). A producer never waits for room, so the Reflector reads its watch at the
/// server's pace. What bounds it:
/// - keys: each key is queued once however many deltas it gets (`State::queue_action`), so
///   the queue holds at most the keys the source sent plus the cached keys a relist
///   tombstones; `resync` adds only keys with nothing queued;
/// - deltas per key: one per change the source sent since the key was last popped, which
///   takes them all at once (`pop`); only two deletions in a row collapse into one
///   (`dedup_deletes`), and a relist adds one delta per key it lists or tombstones. Each
///   delta is an `Arc` of an object the Reflector decoded anyway.
///
/// So the backlog is what the source sends while the consumer works through the keys ahead
/// of it. The consumer, the informer's delta processor, never awaits inside `pop` and never
/// waits on a handler (listener buffers take the notifications), so a slow plugin cannot
/// grow it; only a consumer short of CPU can. [`len`](Self::len) (the informer's
/// `queued_keys`) reads its depth.
pub struct DeltaFifo {
    // A std mutex: every critical section is short and synchronous, including the consumer's
    // process function, which by contract never awaits.
    state: Mutex<State>,
    /// Wakes the single consumer; `notify_one` keeps a permit, so no wake-up is lost.
    ready: Notify,
    known: Indexer,
    /// Mirrors `has_synced` for lock-free readers (each handler's HasSynced).
    synced: Arc<AtomicBool>,
    /// Wakes every [`wait_for_sync`](Self::wait_for_sync) once `synced` turns true.
    synced_now: Notify,
}

impl std::fmt::Debug for DeltaFifo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("DeltaFifo")
            .field("queued", &state.queue.len())
            .field("populated", &state.populated)
            .finish()
    }
}

impl DeltaFifo {
    /// An empty FIFO that consults `known` (the consumer's cache).
    pub fn new(known: Indexer) -> Self {
        Self {
            state: Mutex::default(),
            ready: Notify::new(),
            known,
            synced: Arc::default(),
            synced_now: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("DeltaFIFO lock poisoned by a panicking delta processor")
    }

    fn push(&self, delta: Delta) {
        let mut state = self.lock();
        state.populated = true;
        state.queue_action(delta);
        drop(state);
        self.ready.notify_one();
    }

    /// Queues an `Added` delta.
    pub fn add(&self, object: Arc<Object>) {
        self.push(Delta::new(DeltaType::Added, object));
    }

    /// Queues an `Updated` delta.
    pub fn update(&self, object: Arc<Object>) {
        self.push(Delta::new(DeltaType::Updated, object));
    }

    /// Queues a `Deleted` delta, unless the key is neither cached nor queued.
    pub fn delete(&self, object: Arc<Object>) {
        let mut state = self.lock();
        let key = object.key();
        if !state.items.contains_key(key) && !self.known.contains(key.as_str()) {
            return;
        }
        state.populated = true;
        state.queue_action(Delta::new(DeltaType::Deleted, object));
        drop(state);
        self.ready.notify_one();
    }

    /// Replaces the whole state with a (re)list: a `Replaced` delta per listed object, and a
    /// tombstone `Deleted` for every cached or queued key that the list no longer has.
    pub fn replace(&self, objects: Vec<Arc<Object>>) {
        let mut state = self.lock();
        let listed: KeySet<ObjectKey> = objects.iter().map(|o| o.key().clone()).collect();
        let listed_count = listed.len();
        for object in objects {
            state.queue_action(Delta::new(DeltaType::Replaced, object));
        }

        let mut queued_deletions = 0;
        // Keys only queued (never cached): their newest delta is the last state we know.
        let queued_vanished: Vec<Arc<Object>> = state
            .items
            .iter()
            .filter(|(key, _)| !listed.contains(*key))
            .filter_map(|(_, deltas)| deltas.last().map(|d| d.object.clone()))
            .collect();
        for last in queued_vanished {
            queued_deletions += 1;
            state.queue_action(Delta::tombstone(last));
        }
        for key in self.known.list_keys() {
            if listed.contains(&key) || state.items.contains_key(&key) {
                continue;
            }
            if let Some(last) = self.known.get(key.as_str()) {
                queued_deletions += 1;
                state.queue_action(Delta::tombstone(last));
            }
        }

        if !state.populated {
            state.populated = true;
            state.initial_population_count = listed_count + queued_deletions;
            self.update_synced(&state);
        }
        drop(state);
        self.ready.notify_one();
    }

    /// Queues a `Sync` delta with the cached object for every cached key with nothing queued.
    pub fn resync(&self) {
        let mut state = self.lock();
        let mut queued = false;
        for object in self.known.list() {
            if !state.items.contains_key(object.key()) {
                state.queue_action(Delta::new(DeltaType::Sync, object));
                queued = true;
            }
        }
        drop(state);
        if queued {
            self.ready.notify_one();
        }
    }

    fn update_synced(&self, state: &State) {
        if state.populated
            && state.initial_population_count == 0
            && !self.synced.swap(true, Ordering::AcqRel)
        {
            self.synced_now.notify_waiters();
        }
    }

    /// Waits for a key, removes it with all its deltas, and calls `process` with the FIFO
    /// locked. `process` also learns whether the key is part of the initial population (the
    /// FIFO had not synced yet). Returns `false` once the FIFO is closed and empty.
    ///
    /// `process` must not block: it runs while producers wait for the lock.
    pub async fn pop(&self, process: impl FnOnce(ObjectKey, Deltas, bool) -> Processed) -> bool {
        let mut process = Some(process);
        loop {
            {
                let mut state = self.lock();
                if let Some(key) = state.queue.pop_front() {
                    let deltas = state.items.remove(&key).expect("queued key has deltas");
                    let in_initial_list = !(state.populated && state.initial_population_count == 0);
                    state.initial_population_count =
                        state.initial_population_count.saturating_sub(1);
                    let process = process.take().expect("process runs once");
                    if let Processed::Requeue(deltas) =
                        process(key.clone(), deltas, in_initial_list)
                    {
                        state.queue.push_back(key.clone());
                        state.items.insert(key, deltas);
                    }
                    // After `process`: whoever the sync wakes finds the last item cached.
                    self.update_synced(&state);
                    return true;
                }
                if state.closed {
                    return false;
                }
            }
            self.ready.notified().await;
        }
    }

    /// Runs `f` with the FIFO locked, so that no delta is processed meanwhile (used to add a
    /// handler with a consistent snapshot of the cache).
    pub fn exclusive<R>(&self, f: impl FnOnce() -> R) -> R {
        let _state = self.lock();
        f()
    }

    /// True once the first `replace` happened and every key it queued was popped.
    pub fn has_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Waits until [`has_synced`](Self::has_synced); woken by the pop that syncs the FIFO.
    pub async fn wait_for_sync(&self) {
        loop {
            let synced_now = self.synced_now.notified();
            tokio::pin!(synced_now);
            // Registered before the check, so a sync between the two still wakes it.
            synced_now.as_mut().enable();
            if self.has_synced() {
                return;
            }
            synced_now.await;
        }
    }

    /// A flag that follows [`has_synced`](Self::has_synced).
    pub fn synced_flag(&self) -> Arc<AtomicBool> {
        self.synced.clone()
    }

    /// Number of keys waiting.
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// Whether no key is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops the consumer once the queue is drained.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::indexer::{IndexerWriter, new_indexer};
    use crate::object::ObjectDecoder;
    use crate::resource::Resource;

    fn obj(name: &str, rv: u64) -> Arc<Object> {
        let json = format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}}}}"#
        );
        let decoder = ObjectDecoder::new(Resource::new("", "v1", "Pod", "pods", true));
        Arc::new(decoder.decode(json.as_bytes()).unwrap())
    }

    fn fifo() -> (DeltaFifo, IndexerWriter) {
        let (writer, reader) = new_indexer();
        (DeltaFifo::new(reader), writer)
    }

    /// Pops one key without blocking; applies its deltas to the cache like the informer does.
    async fn pop_one(
        fifo: &DeltaFifo,
        cache: &mut IndexerWriter,
    ) -> (ObjectKey, Vec<(DeltaType, u64, bool)>) {
        let mut out = None;
        fifo.pop(|key, deltas, _| {
            for d in &deltas {
                match d.kind {
                    DeltaType::Deleted => {
                        cache.delete(d.object.key());
                    }
                    _ => {
                        cache.put(d.object.clone());
                    }
                }
            }
            let summary = deltas
                .iter()
                .map(|d| (d.kind, d.object.resource_version(), d.final_state_unknown))
                .collect();
            out = Some((key, summary));
            Processed::Done
        })
        .await;
        out.expect("a key was queued")
    }

    #[tokio::test]
    async fn deltas_of_a_key_are_popped_together_in_order() {
        let (fifo, mut cache) = fifo();
        fifo.add(obj("a", 1));
        fifo.add(obj("b", 2));
        fifo.update(obj("a", 3));
        assert_eq!(fifo.len(), 2);
        let (key, deltas) = pop_one(&fifo, &mut cache).await;
        assert_eq!(key.as_str(), "ns/a");
        assert_eq!(
            deltas,
            [(DeltaType::Added, 1, false), (DeltaType::Updated, 3, false)]
        );
        assert_eq!(pop_one(&fifo, &mut cache).await.0.as_str(), "ns/b");
    }

    #[tokio::test]
    async fn consecutive_deletes_collapse_keeping_the_real_object() {
        let (fifo, mut cache) = fifo();
        fifo.add(obj("a", 1));
        fifo.delete(obj("a", 2));
        fifo.replace(vec![]); // would add a tombstone delete right after the real one
        let (_, deltas) = pop_one(&fifo, &mut cache).await;
        assert_eq!(
            deltas,
            [(DeltaType::Added, 1, false), (DeltaType::Deleted, 2, false)]
        );
    }

    #[tokio::test]
    async fn delete_of_unknown_key_is_dropped() {
        let (fifo, _cache) = fifo();
        fifo.delete(obj("ghost", 1));
        assert!(fifo.is_empty());
    }

    #[tokio::test]
    async fn replace_emits_tombstones_for_cached_and_queued_keys() {
        let (fifo, mut cache) = fifo();
        fifo.replace(vec![obj("cached", 1), obj("kept", 2)]);
        pop_one(&fifo, &mut cache).await;
        pop_one(&fifo, &mut cache).await;
        fifo.add(obj("queued-only", 3));

        fifo.replace(vec![obj("kept", 4)]);
        let mut popped = Vec::new();
        while !fifo.is_empty() {
            popped.push(pop_one(&fifo, &mut cache).await);
        }
        popped.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            popped,
            [
                ("ns/cached".into(), vec![(DeltaType::Deleted, 1, true)]),
                ("ns/kept".into(), vec![(DeltaType::Replaced, 4, false)]),
                (
                    "ns/queued-only".into(),
                    vec![(DeltaType::Added, 3, false), (DeltaType::Deleted, 3, true)]
                ),
            ]
        );
        assert_eq!(cache.reader().list_keys(), ["ns/kept".into()]);
    }

    #[tokio::test]
    async fn has_synced_only_after_initial_items_are_popped() {
        let (fifo, mut cache) = fifo();
        assert!(!fifo.has_synced());
        fifo.replace(vec![obj("a", 1), obj("b", 2)]);
        assert!(!fifo.has_synced());
        pop_one(&fifo, &mut cache).await;
        assert!(!fifo.has_synced());
        fifo.add(obj("c", 3));
        pop_one(&fifo, &mut cache).await;
        assert!(fifo.has_synced());
    }

    #[tokio::test]
    async fn empty_initial_list_is_synced_at_once() {
        let (fifo, _cache) = fifo();
        fifo.replace(vec![]);
        assert!(fifo.has_synced());
    }

    #[tokio::test]
    async fn resync_skips_keys_with_queued_deltas() {
        let (fifo, mut cache) = fifo();
        fifo.replace(vec![obj("a", 1), obj("b", 2)]);
        pop_one(&fifo, &mut cache).await;
        pop_one(&fifo, &mut cache).await;
        fifo.update(obj("a", 3));
        fifo.resync();
        let (key, deltas) = pop_one(&fifo, &mut cache).await;
        assert_eq!(
            (key.as_str(), deltas),
            ("ns/a", vec![(DeltaType::Updated, 3, false)])
        );
        let (key, deltas) = pop_one(&fifo, &mut cache).await;
        assert_eq!(
            (key.as_str(), deltas),
            ("ns/b", vec![(DeltaType::Sync, 2, false)])
        );
        assert!(fifo.is_empty());
    }

    #[tokio::test]
    async fn requeue_puts_deltas_back() {
        let (fifo, _cache) = fifo();
        fifo.add(obj("a", 1));
        fifo.pop(|_, deltas, _| Processed::Requeue(deltas)).await;
        assert_eq!(fifo.len(), 1);
        let mut seen = Vec::new();
        fifo.pop(|key, deltas, _| {
            seen.push((key, deltas.len()));
            Processed::Done
        })
        .await;
        assert_eq!(seen, [("ns/a".into(), 1)]);
        assert!(fifo.is_empty());
    }

    #[tokio::test]
    async fn close_ends_pop_once_drained() {
        let (fifo, mut cache) = fifo();
        fifo.add(obj("a", 1));
        fifo.close();
        pop_one(&fifo, &mut cache).await;
        assert!(!fifo.pop(|_, _, _| Processed::Done).await);
    }
}
