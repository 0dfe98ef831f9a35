//! The worker helper: N tasks that take items from a queue and run a handler on each, the
//! loop every client-go controller writes by hand (`processNextWorkItem`).

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::task::JoinHandle;

use crate::Queue;

/// What a handler says about the item it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<E> {
    /// Success: the item's back-off is reset ([`Queue::forget`]).
    Done,
    /// Success, but look again later: the back-off is reset and the item is added again
    /// after the delay ([`Queue::add_after`]), e.g. to poll an external state.
    RequeueAfter(Duration),
    /// Success, but look again soon: the item is added again through its rate limiter
    /// ([`Queue::add_rate_limited`]), its back-off kept and not logged as a failure: what
    /// controller-runtime does for `Result{Requeue: true}`.
    Requeue,
    /// Failure: logged, and the item is retried with back-off ([`Queue::add_rate_limited`]).
    Error(E),
}

/// The worker tasks started by [`run_workers`].
///
/// Dropping it leaves the workers running (like dropping a [`JoinHandle`]); they stop on
/// their own once the queue shuts down and is empty.
#[must_use = "workers are awaited with `join`; dropping the handle leaves them running"]
#[derive(Debug)]
pub struct Workers {
    tasks: Vec<JoinHandle<()>>,
}

impl Workers {
    /// Waits until every worker has stopped: after the queue shut down and handed out its
    /// last item, or after [`abort`](Self::abort).
    ///
    /// # Panics
    ///
    /// If a worker itself panicked (not the handler: its panics are caught), with that panic.
    pub async fn join(self) {
        for task in self.tasks {
            match task.await {
                Ok(()) => {}
                // Handler panics are caught; a worker panics only on a bug in this crate or
                // in the item's `Hash`/`Eq`/`Clone`/`Debug`: pass it on.
                Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
                // Cancelled by `abort`, as the caller asked.
                Err(_) => {}
            }
        }
    }

    /// Cancels every worker at once, dropping the handler futures in flight. Their items are
    /// still marked [`done`](Queue::done) (but neither forgotten nor retried).
    pub fn abort(&self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Runs `workers` tasks that each loop: [`get`](Queue::get) an item, call `handler` with
/// it, act on the [`Outcome`], [`done`](Queue::done). Returns the handle to await them.
///
/// # Contract
///
/// - At most `workers` handler calls run at once, and never two for the same item (the
///   queue's guarantee).
/// - The item is always marked done: after the handler returns, when it panics (the panic is
///   caught, logged and treated as an error, so the item is retried with back-off), and when
///   the worker is cancelled ([`Workers::abort`], or the runtime shutting down).
/// - On [`Outcome::Error`] the error is logged with `tracing` at `warn`, with the queue name,
///   the item (its `Debug`) and its retry count, then the item is added rate-limited.
/// - Workers stop once the queue shuts down and has no waiting items left.
///
/// Must be called within a Tokio runtime; the workers are spawned on it.
///
/// ```
/// use kubeplug_workqueue::{Outcome, Queue, run_workers};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let queue: Queue<String> = Queue::new();
/// let workers = run_workers(&queue, 4, |key: String| async move {
///     if key.is_empty() {
///         return Outcome::Error("empty key");
///     }
///     // reconcile `key` ...
///     Outcome::Done
/// });
/// queue.add("default/web".to_string());
/// queue.shut_down_with_drain().await;
/// workers.join().await;
/// # }
/// ```
pub fn run_workers<T, F, Fut, E>(queue: &Queue<T>, workers: usize, handler: F) -> Workers
where
    T: Hash + Eq + Clone + Send + fmt::Debug + 'static,
    F: Fn(T) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome<E>> + Send + 'static,
    E: fmt::Display + Send + 'static,
{
    let handler = Arc::new(handler);
    let tasks = (0..workers)
        .map(|_| tokio::spawn(work(queue.clone(), Arc::clone(&handler))))
        .collect();
    Workers { tasks }
}

/// One worker's loop.
async fn work<T, F, Fut, E>(queue: Queue<T>, handler: Arc<F>)
where
    T: Hash + Eq + Clone + Send + fmt::Debug + 'static,
    F: Fn(T) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome<E>> + Send + 'static,
    E: fmt::Display + Send + 'static,
{
    while let Some(item) = queue.get().await {
        // From here on, however this iteration ends (even by cancellation), `done` is called.
        let guard = DoneGuard {
            queue: &queue,
            item,
        };
        let (handler, item) = (&*handler, guard.item.clone());
        let call = AssertUnwindSafe(async move { handler(item).await });
        match call.catch_unwind().await {
            Ok(Outcome::Done) => queue.forget(&guard.item),
            Ok(Outcome::RequeueAfter(delay)) => {
                queue.forget(&guard.item);
                queue.add_after(guard.item.clone(), delay);
            }
            Ok(Outcome::Requeue) => queue.add_rate_limited(guard.item.clone()),
            Ok(Outcome::Error(error)) => {
                tracing::warn!(
                    queue = queue.name(),
                    item = ?guard.item,
                    retries = queue.num_requeues(&guard.item),
                    error = %error,
                    "work queue handler failed; retrying with back-off"
                );
                queue.add_rate_limited(guard.item.clone());
            }
            Err(panic) => {
                tracing::error!(
                    queue = queue.name(),
                    item = ?guard.item,
                    retries = queue.num_requeues(&guard.item),
                    panic = panic_message(&*panic),
                    "work queue handler panicked; retrying with back-off"
                );
                queue.add_rate_limited(guard.item.clone());
            }
        }
        drop(guard);
    }
}

/// Calls [`Queue::done`] when dropped: at the end of an iteration, or when the worker's
/// future is dropped mid-handler.
struct DoneGuard<'q, T: Hash + Eq + Clone + Send + 'static> {
    queue: &'q Queue<T>,
    item: T,
}

impl<T: Hash + Eq + Clone + Send + 'static> Drop for DoneGuard<'_, T> {
    fn drop(&mut self) {
        self.queue.done(&self.item);
    }
}

/// The text of a panic payload, when it has one.
fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(message) = payload.downcast_ref::<&str>() {
        message
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message
    } else {
        "(non-string panic payload)"
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use tokio::sync::mpsc;
    use tokio::time::Instant;

    use super::*;
    use crate::ItemExponential;

    const MS: Duration = Duration::from_millis(1);

    /// A queue with a 10 ms doubling back-off, for predictable retry times.
    fn queue() -> Queue<&'static str> {
        Queue::builder("test")
            .rate_limiter(ItemExponential::new(10 * MS, Duration::from_secs(10)))
            .build()
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_handler_still_marks_done_and_the_item_is_retried() {
        let queue = queue();
        let (seen, mut calls) = mpsc::unbounded_channel();
        let workers = run_workers(&queue, 1, move |item: &'static str| {
            let seen = seen.clone();
            async move {
                seen.send((item, Instant::now())).unwrap();
                if item == "boom" {
                    panic!("handler exploded on {item}");
                }
                Outcome::<String>::Done
            }
        });
        let start = Instant::now();
        queue.add("boom");
        let (item, at) = calls.recv().await.unwrap();
        assert_eq!((item, at - start), ("boom", Duration::ZERO));
        // Retried after the first back-off step: done was called, or it could not be handed
        // out again.
        let (item, at) = calls.recv().await.unwrap();
        assert_eq!((item, at - start), ("boom", 10 * MS));
        assert_eq!(queue.num_requeues(&"boom"), 2);

        // Another item still goes through the same (single) worker.
        queue.add("fine");
        let mut next = calls.recv().await.unwrap().0;
        while next == "boom" {
            next = calls.recv().await.unwrap().0;
        }
        assert_eq!(next, "fine");

        queue.shut_down();
        workers.join().await;
        assert_eq!(queue.processing(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_is_retried_with_back_off_until_it_succeeds_then_forgotten() {
        let queue = queue();
        let attempts: Arc<Mutex<Vec<Duration>>> = Arc::default();
        let start = Instant::now();
        let workers = run_workers(&queue, 2, {
            let attempts = attempts.clone();
            move |_item: &'static str| {
                let attempts = attempts.clone();
                async move {
                    let mut attempts = attempts.lock().unwrap();
                    attempts.push(start.elapsed());
                    if attempts.len() < 4 {
                        Outcome::Error(format!("attempt {} failed", attempts.len()))
                    } else {
                        Outcome::Done
                    }
                }
            }
        });
        queue.add("flaky");
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Back-off 10, 20, 40 ms between attempts.
        assert_eq!(
            *attempts.lock().unwrap(),
            [Duration::ZERO, 10 * MS, 30 * MS, 70 * MS]
        );
        assert_eq!(queue.num_requeues(&"flaky"), 0, "success forgets the item");
        queue.shut_down();
        workers.join().await;
    }

    #[tokio::test(start_paused = true)]
    async fn requeue_after_comes_back_after_the_delay_without_back_off() {
        let queue = queue();
        let calls: Arc<Mutex<Vec<Duration>>> = Arc::default();
        let start = Instant::now();
        let workers = run_workers(&queue, 1, {
            let calls = calls.clone();
            move |_item: &'static str| {
                let calls = calls.clone();
                async move {
                    let mut calls = calls.lock().unwrap();
                    calls.push(start.elapsed());
                    if calls.len() < 3 {
                        Outcome::<String>::RequeueAfter(Duration::from_secs(5))
                    } else {
                        Outcome::Done
                    }
                }
            }
        });
        queue.add("poll");
        tokio::time::sleep(Duration::from_secs(60)).await;
        let secs = Duration::from_secs;
        assert_eq!(*calls.lock().unwrap(), [secs(0), secs(5), secs(10)]);
        assert_eq!(queue.num_requeues(&"poll"), 0);
        queue.shut_down();
        workers.join().await;
    }

    #[tokio::test(start_paused = true)]
    async fn workers_run_in_parallel_never_on_the_same_item_and_stop_on_shutdown() {
        let queue: Queue<u32> = Queue::new();
        let running: Arc<Mutex<HashMap<u32, u32>>> = Arc::default();
        let peak = Arc::new(Mutex::new(0usize));
        let workers = run_workers(&queue, 3, {
            let (running, peak) = (running.clone(), peak.clone());
            move |item: u32| {
                let (running, peak) = (running.clone(), peak.clone());
                async move {
                    {
                        let mut running = running.lock().unwrap();
                        let count = running.entry(item).or_default();
                        *count += 1;
                        assert_eq!(*count, 1, "item {item} processed twice at once");
                        let mut peak = peak.lock().unwrap();
                        *peak = (*peak).max(running.values().sum::<u32>() as usize);
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    *running.lock().unwrap().get_mut(&item).unwrap() -= 1;
                    Outcome::<String>::Done
                }
            }
        });
        for item in 0..10 {
            queue.add(item % 5);
            queue.add(item);
        }
        queue.shut_down_with_drain().await;
        workers.join().await;
        assert_eq!(*peak.lock().unwrap(), 3);
        assert!(running.lock().unwrap().values().all(|&n| n == 0));
    }

    #[tokio::test(start_paused = true)]
    async fn aborting_workers_marks_in_flight_items_done() {
        let queue = queue();
        let workers = run_workers(&queue, 1, |_item: &'static str| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Outcome::<String>::Done
        });
        queue.add("slow");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(queue.processing(), 1);
        workers.abort();
        workers.join().await;
        assert_eq!(queue.processing(), 0, "the cancelled item is done");
        queue.add("slow");
        assert_eq!(queue.len(), 1, "and can be handed out again");
    }
}
