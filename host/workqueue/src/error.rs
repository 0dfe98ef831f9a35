//! The crate's one error type.

/// What can fail in this crate: only attaching a queue to `WorkqueueMetrics` (the
/// `prometheus` feature); without the feature nothing can, and this enum has no variant.
///
/// Every queue operation itself is infallible, as in client-go: adding to a queue that is
/// shutting down is silently ignored rather than an error.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// Another live queue already reports under this `name` label; two queues sharing one
    /// label would overwrite each other's depth and in-flight gauges.
    #[cfg(feature = "prometheus")]
    #[error(
        "a work queue named {name:?} is already registered with these metrics; \
         give each queue a unique name, or drop the old queue first"
    )]
    DuplicateQueueName {
        /// The name that is already taken.
        name: String,
    },
    /// A metered queue needs a non-empty name: an empty `name` label is the same as no label
    /// to Prometheus, so its series would mix with every other unnamed series.
    #[cfg(feature = "prometheus")]
    #[error("a work queue with metrics needs a non-empty name; pass one to `Queue::builder`")]
    EmptyQueueName,
}
