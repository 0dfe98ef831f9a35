//! Scripted failures (the `faults` feature, on by default): what a real server and network
//! do wrong, for tests. `--local` builds without it.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::source::{SourceError, Status, WatchEvent};
use kubeplug_json::push_json_string;

use crate::server::{Call, MemoryServer};
use crate::state::State;

/// A malformed `ADDED` event, as a broken server or proxy might send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Garbage {
    /// Bytes that are not JSON at all.
    NotJson,
    /// A valid object cut in half.
    Truncated,
    /// A well-formed object whose `kind` is not the watched resource's (`Not<Kind>`).
    WrongKind,
    /// A well-formed object of the right kind without `metadata.name`.
    MissingName,
}

/// A failure to inject with [`MemoryServer::inject`].
///
/// Faults that say "now" act when injected; the others wait for the calls they name.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Now: every open watch ends as if its connection dropped. Events queued but not yet read
    /// are lost, and the streams end without an error event.
    EndWatches,
    /// The next watch that opens ends (connection drop) after delivering this many events.
    EndNextWatchAfter(usize),
    /// The next `times` calls of `call` fail with `status` (and `Retry-After: retry_after`).
    /// Replaces a pending failure of the same call.
    Fail {
        /// Which calls fail.
        call: Call,
        /// How many of them.
        times: usize,
        /// What the server answers, e.g. `500 InternalError` or `429 TooManyRequests`.
        status: Status,
        /// The `Retry-After` the server asks for.
        retry_after: Option<Duration>,
    },
    /// The next call of `call` waits `delay` (tokio time) before it is answered. Replaces a
    /// pending stall of the same call.
    Stall {
        /// Which call waits.
        call: Call,
        /// How long.
        delay: Duration,
    },
    /// The next watch that opens delivers this garbage `ADDED` event first, then behaves
    /// normally. Several pending garbage events all go to that watch, in injection order.
    /// (To hit a running informer, follow with [`Fault::EndWatches`] so that it re-watches.)
    Garbage(Garbage),
    /// Now: drop all retained history, as etcd compaction does. A watch or `continue` token
    /// from a version older than the current one answers `410 Gone`.
    Compact,
    /// Now: the server restarts. All watches end as with [`Fault::EndWatches`]; the history is
    /// kept or dropped (as with [`Fault::Compact`]); objects and versions survive, and later
    /// versions keep increasing.
    Restart {
        /// Keep the history (a watch cache warmed from etcd) or not (a cold cache).
        keep_history: bool,
    },
}

/// Whether the server cut a watch's connection: shared by the server's side of the watch
/// and its stream, which ends at once, queued events unread.
#[derive(Debug, Clone, Default)]
pub(crate) struct CutFlag(Arc<AtomicBool>);

impl CutFlag {
    fn cut(&self) {
        self.0.store(true, Ordering::Release);
    }

    pub(crate) fn is_cut(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

impl State {
    /// Drops all retained history, as etcd compaction does.
    fn compact(&mut self) {
        self.history.clear();
        self.compacted = self.revision;
    }

    /// Ends every open watch as a dropped connection would.
    fn end_watches(&mut self) {
        for table in &mut self.tables {
            for watcher in table.watchers.drain(..) {
                // Dropping the sender wakes a stream waiting for events; the flag makes it
                // end without reading the ones already queued.
                watcher.cut.cut();
            }
        }
    }
}

/// Faults waiting for the calls they apply to.
#[derive(Default)]
pub(crate) struct PendingFaults {
    fail_lists: Option<Failure>,
    fail_watches: Option<Failure>,
    stall_list: Option<Duration>,
    stall_watch: Option<Duration>,
    garbage: Vec<Garbage>,
    cut_next_watch_after: Option<usize>,
}

/// A pending [`Fault::Fail`]. `remaining` is at least 1.
struct Failure {
    remaining: usize,
    status: Status,
    retry_after: Option<Duration>,
}

impl PendingFaults {
    fn failure(&mut self, call: Call) -> &mut Option<Failure> {
        match call {
            Call::List => &mut self.fail_lists,
            Call::Watch => &mut self.fail_watches,
        }
    }

    fn stall(&mut self, call: Call) -> &mut Option<Duration> {
        match call {
            Call::List => &mut self.stall_list,
            Call::Watch => &mut self.stall_watch,
        }
    }
}

impl PendingFaults {
    /// Takes the stall pending for `call`.
    pub(crate) fn take_stall(&mut self, call: Call) -> Option<Duration> {
        self.stall(call).take()
    }

    /// Fails the call if a [`Fault::Fail`] is pending for it.
    pub(crate) fn take_failure(&mut self, call: Call) -> Result<(), SourceError> {
        let slot = self.failure(call);
        let Some(failure) = slot else {
            return Ok(());
        };
        let error = SourceError::Status {
            status: failure.status.clone(),
            retry_after: failure.retry_after,
        };
        failure.remaining -= 1;
        if failure.remaining == 0 {
            *slot = None;
        }
        Err(error)
    }

    /// The garbage events the next watch of `resource` at version `rv` starts with.
    pub(crate) fn take_garbage(&mut self, resource: &Resource, rv: u64) -> Vec<WatchEvent> {
        self.garbage
            .drain(..)
            .map(|garbage| WatchEvent::Added(garbage_event(garbage, resource, rv)))
            .collect()
    }

    /// How many events the next watch delivers before it is cut, if a cut is pending.
    pub(crate) fn take_watch_budget(&mut self) -> Option<usize> {
        self.cut_next_watch_after.take()
    }
}

impl MemoryServer {
    /// Injects a fault; see each [`Fault`] variant for what it does and when.
    pub fn inject(&self, fault: Fault) {
        let mut state = self.lock();
        match fault {
            Fault::EndWatches => state.end_watches(),
            Fault::EndNextWatchAfter(events) => state.faults.cut_next_watch_after = Some(events),
            Fault::Fail {
                call,
                times,
                status,
                retry_after,
            } => {
                *state.faults.failure(call) = (times > 0).then_some(Failure {
                    remaining: times,
                    status,
                    retry_after,
                });
            }
            Fault::Stall { call, delay } => *state.faults.stall(call) = Some(delay),
            Fault::Garbage(garbage) => state.faults.garbage.push(garbage),
            Fault::Compact => state.compact(),
            Fault::Restart { keep_history } => {
                state.end_watches();
                if !keep_history {
                    state.compact();
                }
            }
        }
    }
}

/// The bytes of a [`Garbage`] event for `resource` at version `rv`.
fn garbage_event(garbage: Garbage, resource: &Resource, rv: u64) -> Bytes {
    let object = |kind: &str, name: Option<&str>| {
        let mut out = String::from("{\"kind\":");
        push_json_string(&mut out, kind);
        out.push_str(",\"apiVersion\":");
        push_json_string(&mut out, &resource.api_version());
        out.push_str(",\"metadata\":{");
        if let Some(name) = name {
            out.push_str("\"name\":");
            push_json_string(&mut out, name);
            out.push(',');
        }
        if resource.namespaced {
            out.push_str("\"namespace\":\"garbage\",");
        }
        write!(out, "\"resourceVersion\":\"{rv}\"}}}}").expect("writing to a String");
        out
    };
    match garbage {
        Garbage::NotJson => Bytes::from_static(b"<html>502 Bad Gateway</html>"),
        Garbage::Truncated => {
            let whole = object(&resource.kind, Some("garbage"));
            Bytes::copy_from_slice(&whole.as_bytes()[..whole.len() / 2])
        }
        Garbage::WrongKind => {
            Bytes::from(object(&format!("Not{}", resource.kind), Some("garbage")))
        }
        Garbage::MissingName => Bytes::from(object(&resource.kind, None)),
    }
}
