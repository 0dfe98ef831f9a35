//! Work queues as client-go's `k8s.io/client-go/util/workqueue`: dedup, delaying and
//! rate-limited, with the Prometheus metrics client-go and controller-runtime expose.
//!
//! Informer handlers add object keys; workers take them, reconcile, and mark them done. The
//! queue makes that loop safe to run with many workers.
//!
//! # Contract
//!
//! One type, [`Queue`], carries the three layers of client-go's queue:
//!
//! 1. **Dedup** (client-go `Interface`): [`Queue::add`] ignores an item that is already
//!    waiting; [`Queue::get`] hands each item to exactly one worker, which must call
//!    [`Queue::done`]; an item added while a worker holds it is queued once more at `done`.
//!    No item is ever held by two workers, and no add is lost. [`Queue::shut_down`] and
//!    [`Queue::shut_down_with_drain`] stop it.
//! 2. **Delaying** (client-go `DelayingInterface`): [`Queue::add_after`] adds an item once a
//!    delay has passed; the same item waiting twice keeps the earlier deadline; shutdown
//!    cancels the waits. Driven by one tokio task per queue and tokio time.
//! 3. **Rate limiting** (client-go `RateLimitingInterface`): [`Queue::add_rate_limited`]
//!    waits as long as the queue's [`RateLimiter`] says, [`Queue::forget`] resets an item's
//!    back-off, [`Queue::num_requeues`] counts its retries. Limiters: [`ItemExponential`],
//!    [`TokenBucket`], [`MaxOf`], [`FastSlow`], and [`default_controller_rate_limiter`].
//!
//! With the `prometheus` feature, `WorkqueueMetrics` exposes `workqueue_depth`,
//! `workqueue_adds_total`, `workqueue_queue_duration_seconds`,
//! `workqueue_work_duration_seconds`, `workqueue_unfinished_work_seconds`,
//! `workqueue_longest_running_processor_seconds` and `workqueue_retries_total`, each
//! labelled with the queue's `name` (see `QueueBuilder::metrics`). A queue built without
//! metrics pays for none, and without the feature the crate does not build Prometheus.
//!
//! [`run_workers`] runs N workers around a handler returning an [`Outcome`]; the item is
//! always marked done, even when the handler panics or the worker is cancelled.
//!
//! The crate depends on neither kube nor wasmtime: items are any `Hash + Eq + Clone + Send`
//! value, usually a `namespace/name` key.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//!
//! use kubeplug_workqueue::{Outcome, Queue, run_workers};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let queue: Queue<String> = Queue::builder("configmaps").build();
//!
//! let workers = run_workers(&queue, 2, |key: String| async move {
//!     match key.split_once('/') {
//!         // Reconciled; look again in a minute.
//!         Some(_) => Outcome::RequeueAfter(Duration::from_secs(60)),
//!         // Logged, then retried with back-off.
//!         None => Outcome::Error(format!("{key:?} is not a namespace/name key")),
//!     }
//! });
//!
//! // An informer's event handler would do this on every add, update and delete.
//! queue.add("default/settings".to_string());
//! queue.add("default/settings".to_string()); // deduplicated while waiting
//!
//! // On shutdown: stop taking new work, let the items in flight finish.
//! queue.shut_down_with_drain().await;
//! workers.join().await;
//! # }
//! ```

mod delay;
mod error;
mod keyed;
#[cfg(feature = "prometheus")]
mod metrics;
#[cfg(not(feature = "prometheus"))]
#[path = "no_metrics.rs"]
mod metrics;
mod queue;
mod rate_limit;
mod worker;

pub use error::Error;
#[cfg(feature = "prometheus")]
pub use metrics::WorkqueueMetrics;
pub use queue::{Queue, QueueBuilder};
pub use rate_limit::{
    FastSlow, ItemExponential, MaxOf, RateLimiter, TokenBucket, default_controller_rate_limiter,
};
pub use worker::{Outcome, Workers, run_workers};
