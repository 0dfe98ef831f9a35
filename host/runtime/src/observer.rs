//! What a plugin did, as typed records, for a tool that reports on it (`kubeplug test`)
//! rather than a person reading the log.
//!
//! The runtime's host calls, stdout/stderr capture and drivers hand every record to the
//! [`CallObserver`] of [`RuntimeConfig::observer`](crate::RuntimeConfig::observer). Without
//! one (as under `kubeplug run`) nothing is built: no write is copied, no record allocated.
//! Records are independent of the log: rewording a log line, a log filter or the log budget
//! changes nothing an observer sees.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use kubeplug_policy::{Gvk, WriteVerb};
use kubeplug_workqueue::Outcome;

use crate::view::{ObjectRef, Write, WriteError};

/// Receives what plugins did, as it happens.
///
/// Contract: `observe` is called on the plugin's own tasks, often inside a call into the
/// plugin, possibly from several reconcile workers at once; it must return quickly and
/// never block on the plugin.
pub trait CallObserver: Send + Sync + 'static {
    /// One record.
    fn observe(&self, observed: Observed);
}

/// One record, with the plugin it belongs to and the reconcile call it happened in.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    /// The plugin's name (its file stem while it loads, then the name it described).
    pub plugin: Arc<str>,
    /// The `reconcile` call in progress; `None` in any other call (`init`, `describe`,
    /// `handle-events`, `map-event`).
    pub during: Option<Arc<ReconcileCall>>,
    /// What happened.
    pub record: CallRecord,
}

/// One `reconcile` call.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReconcileCall {
    /// The key reconciled.
    pub target: ObjectRef,
    /// Unique among the plugin's reconcile calls, increasing in the order they start.
    pub number: u64,
}

/// What happened. New kinds may be added: match with a wildcard arm.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum CallRecord {
    /// A `log` call, its message and fields cut as the log cuts them.
    Log {
        /// Its level.
        level: tracing::Level,
        /// The message.
        message: String,
        /// Its structured fields, in the order given.
        fields: Vec<(String, String)>,
    },
    /// A complete line the plugin wrote to stdout or stderr.
    Output {
        /// `stdout` or `stderr`.
        stream: &'static str,
        /// The line, without its newline (invalid UTF-8 replaced).
        line: String,
    },
    /// A write the grants allowed, and the writer's answer.
    Write {
        /// The write as the writer got it.
        write: Write,
        /// `Ok` with nothing more, or why the writer refused it.
        result: Result<(), WriteError>,
    },
    /// A write the grants refused: the plugin got `not-permitted`.
    Refused {
        /// The verb asked for.
        verb: WriteVerb,
        /// Its resource type.
        resource: Gvk,
    },
    /// A `reconcile` call ended (its target is [`Observed::during`]).
    Reconciled {
        /// As the work queue takes it: the error is the failure's description.
        outcome: Outcome<String>,
    },
    /// A `handle-events` or `reconcile` call ended: what it delivered and when it ran, for a
    /// record of deliveries (`kubeplug run --delivery-log`). A record about the call, not one
    /// made in it: its [`Observed::during`] is `None`.
    Delivered {
        /// Each event's key and the resourceVersion of the object it carried, in order; for
        /// a reconcile, its key and an empty version.
        keys: Vec<(String, String)>,
        /// When the call started.
        started: std::time::SystemTime,
        /// When it ended.
        ended: std::time::SystemTime,
        /// Whether it succeeded.
        ok: bool,
    },
    /// A `handle-events` or `map-event` call failed: an error result, a trap, the deadline,
    /// the memory cap, or no instance to call.
    Failed {
        /// What failed, naming the plugin and the call.
        error: String,
    },
}

/// The observer as a plugin's host context holds it: shared by its instances, numbering its
/// reconcile calls.
pub(crate) struct PluginObserver {
    observer: Arc<dyn CallObserver>,
    reconcile_calls: AtomicU64,
}

impl PluginObserver {
    pub(crate) fn new(observer: Arc<dyn CallObserver>) -> Self {
        Self {
            observer,
            reconcile_calls: AtomicU64::new(0),
        }
    }

    /// A new reconcile call of `target`.
    pub(crate) fn reconcile_call(&self, target: &ObjectRef) -> Arc<ReconcileCall> {
        Arc::new(ReconcileCall {
            target: target.clone(),
            number: self.reconcile_calls.fetch_add(1, Ordering::Relaxed),
        })
    }

    pub(crate) fn observe(
        &self,
        plugin: &Arc<str>,
        during: Option<Arc<ReconcileCall>>,
        record: CallRecord,
    ) {
        self.observer.observe(Observed {
            plugin: plugin.clone(),
            during,
            record,
        });
    }
}

/// The reconcile call an instance is in, shared by its store and its stdout/stderr
/// captures. A std mutex: held only to read or replace the value.
#[derive(Clone, Default)]
pub(crate) struct CurrentCall(Arc<Mutex<Option<Arc<ReconcileCall>>>>);

impl CurrentCall {
    fn lock(&self) -> MutexGuard<'_, Option<Arc<ReconcileCall>>> {
        // The value is replaced whole, so a panic elsewhere cannot leave it half-written.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn get(&self) -> Option<Arc<ReconcileCall>> {
        self.lock().clone()
    }

    pub(crate) fn set(&self, call: Option<Arc<ReconcileCall>>) {
        *self.lock() = call;
    }
}
