//! Layer 2, the delaying queue: client-go's `DelayingInterface` (`AddAfter`).
//!
//! Waiting items sit in a min-heap ordered by deadline. One tokio task per queue sleeps until
//! the earliest deadline (tokio time, so `tokio::time::pause` drives it in tests), then calls
//! [`Queue::add`] for every item that is due. The task is started by the first `add_after`
//! with a positive delay and ends when the queue shuts down or is dropped.

use std::cmp::Ordering;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::Queue;
use crate::queue::Shared;

/// Delays longer than this (about 30 years) are treated as this: far enough to mean "never"
/// without overflowing `Instant`.
const LONGEST_DELAY: Duration = Duration::from_secs(30 * 365 * 24 * 60 * 60);

/// The items waiting for a deadline, shared by the queue and its timer task.
pub(crate) struct Delay<T> {
    /// A blocking `std` mutex: the critical sections are a few heap and map operations that
    /// never await.
    state: Mutex<DelayState<T>>,
    /// Wakes the timer task: a new earliest deadline, or `closed`. Only one task waits, and
    /// `notify_one` keeps a permit, so a wake-up sent while the task is busy is not lost.
    wake: Notify,
}

struct DelayState<T> {
    /// Entries ordered by deadline; may hold stale entries (see `deadlines`).
    heap: BinaryHeap<Waiting<T>>,
    /// The live deadline of each waiting item, and the `seq` of its heap entry.
    /// Invariant: every key has exactly one heap entry with the same `(at, seq)`; heap entries
    /// whose `(item, seq)` is not here are stale (superseded by an earlier deadline) and are
    /// dropped when popped or when the heap is compacted.
    deadlines: HashMap<T, (Instant, u64)>,
    /// Source of `Waiting::seq`: orders equal deadlines first come, first served.
    next_seq: u64,
    /// The timer task has been spawned.
    task_started: bool,
    /// The queue shut down or was dropped: nothing is accepted, the task ends.
    closed: bool,
}

/// A heap entry. Ordered so that `BinaryHeap` (a max-heap) pops the *earliest* deadline first,
/// ties broken by the lower `seq`.
struct Waiting<T> {
    at: Instant,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Waiting<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<T> Eq for Waiting<T> {}

impl<T> PartialOrd for Waiting<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Waiting<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: the smaller (at, seq) is the "greater" entry, at the top of the heap.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

impl<T> Delay<T> {
    pub(crate) fn new() -> Self {
        Delay {
            state: Mutex::new(DelayState {
                heap: BinaryHeap::new(),
                deadlines: HashMap::new(),
                next_seq: 0,
                task_started: false,
                closed: false,
            }),
            wake: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, DelayState<T>> {
        // A panic under this lock can only come from the item's `Hash`/`Eq`/`Clone`.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Cancels every wait and stops the timer task. Idempotent.
    pub(crate) fn close(&self) {
        {
            let mut state = self.lock();
            state.closed = true;
            state.heap = BinaryHeap::new();
            state.deadlines = HashMap::new();
        }
        self.wake.notify_one();
    }
}

impl<T: Hash + Eq + Clone + Send + 'static> Queue<T> {
    /// Adds `item` once `delay` has passed, as [`add`](Self::add) would then.
    ///
    /// If the item is already waiting for a deadline, the earlier of the two deadlines is
    /// kept. A zero delay adds at once. Ignored once the queue is shutting down; shutting
    /// down cancels all pending waits. Counts as a retry in `workqueue_retries_total`, as
    /// in client-go.
    ///
    /// # Panics
    ///
    /// If called with a positive delay outside a Tokio runtime (the first such call spawns
    /// the queue's timer task).
    pub fn add_after(&self, item: T, delay: Duration) {
        if self.is_shutting_down() {
            return;
        }
        if let Some(metrics) = &self.shared.metrics {
            metrics.retried();
        }
        if delay.is_zero() {
            self.add(item);
            return;
        }
        let now = Instant::now();
        let at = now + delay.min(LONGEST_DELAY);
        let delayed = &*self.shared.delay;
        let (wake, start_task) = {
            let mut state = delayed.lock();
            if state.closed {
                return;
            }
            let DelayState {
                heap,
                deadlines,
                next_seq,
                ..
            } = &mut *state;
            let seq = *next_seq;
            let item = match deadlines.entry(item) {
                Entry::Occupied(mut live) => {
                    if live.get().0 <= at {
                        return; // The earlier deadline wins.
                    }
                    live.insert((at, seq));
                    live.key().clone()
                }
                Entry::Vacant(slot) => {
                    let item = slot.key().clone();
                    slot.insert((at, seq));
                    item
                }
            };
            heap.push(Waiting { at, seq, item });
            *next_seq += 1;
            state.compact_if_mostly_stale();
            let wake = state.heap.peek().is_some_and(|top| top.seq == seq);
            let start_task = !state.task_started;
            state.task_started = true;
            (wake, start_task)
        };
        if start_task {
            let runtime = tokio::runtime::Handle::try_current().expect(
                "Queue::add_after with a positive delay must be called within a Tokio runtime",
            );
            runtime.spawn(run_timer(
                Arc::clone(&self.shared.delay),
                Arc::downgrade(&self.shared),
            ));
        } else if wake {
            delayed.wake.notify_one();
        }
    }
}

impl<T: Hash + Eq> DelayState<T> {
    /// Rebuilds the heap from `deadlines` when stale entries make up most of it, so that
    /// repeatedly shortening a long delay cannot grow the heap without bound.
    fn compact_if_mostly_stale(&mut self) {
        if self.heap.len() <= 2 * self.deadlines.len() + 64 {
            return;
        }
        let heap = std::mem::take(&mut self.heap);
        self.heap = heap
            .into_iter()
            .filter(|entry| self.deadlines.get(&entry.item) == Some(&(entry.at, entry.seq)))
            .collect();
    }

    /// Removes the live entries due at `now` into `ready`, dropping stale ones on the way, and
    /// returns the next live deadline.
    fn pop_due(&mut self, now: Instant, ready: &mut Vec<T>) -> Option<Instant> {
        while let Some(top) = self.heap.peek() {
            let live = self.deadlines.get(&top.item) == Some(&(top.at, top.seq));
            if live && top.at > now {
                return Some(top.at);
            }
            let entry = self.heap.pop().expect("peeked");
            if live {
                self.deadlines.remove(&entry.item);
                ready.push(entry.item);
            }
        }
        None
    }
}

/// The timer task of one queue. Holds the queue weakly, so that dropping every [`Queue`]
/// handle drops the queue (whose `Drop` closes `delay`, ending this task).
async fn run_timer<T: Hash + Eq + Clone + Send + 'static>(
    delay: Arc<Delay<T>>,
    queue: Weak<Shared<T>>,
) {
    let mut ready = Vec::new();
    loop {
        let next = {
            let mut state = delay.lock();
            if state.closed {
                return;
            }
            state.pop_due(Instant::now(), &mut ready)
        };
        if !ready.is_empty() {
            let Some(shared) = queue.upgrade() else {
                return;
            };
            let queue = Queue { shared };
            for item in ready.drain(..) {
                queue.add(item);
            }
        }
        match next {
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = delay.wake.notified() => {}
                }
            }
            None => delay.wake.notified().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::FutureExt;
    use tokio::time::Instant;

    use crate::Queue;

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test(start_paused = true)]
    async fn items_arrive_in_deadline_order_at_their_deadline() {
        let queue = Queue::new();
        let start = Instant::now();
        queue.add_after("thirty", 30 * MS);
        queue.add_after("ten", 10 * MS);
        queue.add_after("twenty", 20 * MS);
        queue.add_after("twenty-too", 20 * MS);
        assert_eq!(queue.len(), 0, "nothing is due yet");

        let mut arrivals = Vec::new();
        for _ in 0..4 {
            let item = queue.get().await.unwrap();
            arrivals.push((item, start.elapsed()));
            queue.done(&item);
        }
        assert_eq!(
            arrivals,
            [
                ("ten", 10 * MS),
                ("twenty", 20 * MS),
                ("twenty-too", 20 * MS),
                ("thirty", 30 * MS)
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_earlier_deadline_wins_and_the_item_arrives_once() {
        let queue = Queue::new();
        let start = Instant::now();
        queue.add_after("a", 50 * MS);
        queue.add_after("a", 10 * MS); // earlier: replaces
        queue.add_after("a", 40 * MS); // later: ignored
        assert_eq!(queue.get().await, Some("a"));
        assert_eq!(start.elapsed(), 10 * MS);
        queue.done(&"a");

        let again = tokio::time::timeout(Duration::from_secs(5), queue.get()).await;
        assert!(
            again.is_err(),
            "the superseded deadlines must not deliver it again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn zero_delay_adds_at_once_and_due_items_dedup_with_waiting_ones() {
        let queue = Queue::new();
        queue.add_after(1, Duration::ZERO);
        assert_eq!(queue.len(), 1);

        queue.add_after(1, 10 * MS);
        tokio::time::sleep(20 * MS).await;
        assert_eq!(queue.len(), 1, "the due item was already waiting");
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_cancels_waits() {
        let queue = Queue::new();
        queue.add_after("a", 10 * MS);
        queue.shut_down();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(queue.len(), 0);
        assert_eq!(queue.get().await, None);
        queue.add_after("b", 10 * MS);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(queue.len(), 0, "add_after after shutdown is ignored");
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_last_handle_ends_the_timer_task() {
        let queue: Queue<u32> = Queue::new();
        queue.add_after(1, Duration::from_secs(3600));
        let delay = std::sync::Arc::downgrade(&queue.shared.delay);
        drop(queue);
        // Let the task see `closed` and drop its handle on `delay`.
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        assert!(delay.upgrade().is_none(), "the timer task still runs");
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_earlier_deadline_wakes_a_sleeping_timer() {
        let queue = Queue::new();
        let start = Instant::now();
        queue.add_after("late", Duration::from_secs(60));
        tokio::time::sleep(MS).await; // the timer now sleeps until 60 s
        queue.add_after("soon", 5 * MS);
        assert_eq!(queue.get().await, Some("soon"));
        assert_eq!(start.elapsed(), 6 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn shortening_a_delay_many_times_keeps_the_heap_small() {
        let queue = Queue::new();
        for i in 0..10_000u64 {
            queue.add_after(0u8, Duration::from_secs(100_000 - i));
        }
        let heap_len = queue.shared.delay.lock().heap.len();
        assert!(
            heap_len <= 2 + 64 + 1,
            "heap holds {heap_len} entries for one item"
        );
        assert!(queue.get().now_or_never().is_none());
    }
}
