//! What a plugin did, as the runtime's [`CallObserver`] reports it: its log records (and
//! stdout/stderr lines), its cluster writes and refused writes, reconcile results and failed
//! calls. Each record names the reconcile call it happened in, if any, so that parallel
//! workers still give a stable report.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};

use kubeplug_runtime::view::{EventSeverity, PatchType, PatchedPart};
use kubeplug_runtime::{CallObserver, CallRecord, Observed, Write};
use kubeplug_workqueue::Outcome;

/// One thing the plugin did, or that happened to one of its calls.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "call", rename_all = "kebab-case")]
pub(crate) enum Call {
    /// A log record (or a line of its stdout or stderr, with the field `stream`).
    Log {
        level: String,
        message: String,
        fields: BTreeMap<String, String>,
    },
    /// A write its grants allowed, applied to the in-memory cluster.
    Write {
        verb: String,
        resource: String,
        key: String,
        /// The body, shortened: the object or patch as JSON, or an Event's type, reason and
        /// note.
        summary: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A write its grants refused (the plugin got a `not-permitted` error).
    Denied { verb: String, resource: String },
    /// The result of one `reconcile` call.
    Reconcile {
        /// `apiVersion/Kind namespace/name`.
        key: String,
        /// `done`, `requeue-after` or `error`.
        result: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        requeue_after_ms: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A call that failed (error result, trap, deadline, memory) outside reconcile results:
    /// `handle-events` or `map-event`.
    Failure { message: String },
    /// Calls left out of this step, past [`MAX_STEP_CALLS`].
    Dropped { count: u64 },
}

impl Call {
    /// Whether this is a failed call of the plugin.
    pub(crate) fn is_failure(&self) -> bool {
        match self {
            Call::Failure { .. } => true,
            Call::Reconcile { result, .. } => result == "error",
            Call::Log { .. } | Call::Write { .. } | Call::Denied { .. } | Call::Dropped { .. } => {
                false
            }
        }
    }
}

/// A call, and the reconcile call it happened in.
struct Entry {
    reconcile: Option<ReconcileCall>,
    call: Call,
}

/// One `reconcile` call: its key, and its number among all reconcile calls.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ReconcileCall {
    key: String,
    number: u64,
}

/// The most calls one step keeps: a plugin printing in a loop must not grow the host's
/// memory (and the report) without bound. Later calls of the step are counted instead.
pub(crate) const MAX_STEP_CALLS: usize = 10_000;

/// Calls collected since the last [`take`](Self::take), at most [`MAX_STEP_CALLS`]. Cheap
/// to clone.
#[derive(Clone, Default)]
pub(crate) struct Journal {
    // A std mutex: pushes and takes are short and never span an `.await`.
    step: Arc<Mutex<Step>>,
}

#[derive(Default)]
struct Step {
    entries: Vec<Entry>,
    /// Entries refused past [`MAX_STEP_CALLS`].
    dropped: u64,
}

impl Journal {
    fn lock(&self) -> MutexGuard<'_, Step> {
        self.step.lock().expect("journal poisoned by a panic")
    }

    fn push(&self, entry: Entry) {
        let mut step = self.lock();
        if step.entries.len() < MAX_STEP_CALLS {
            step.entries.push(entry);
        } else {
            step.dropped += 1;
        }
    }

    /// The calls so far, emptied: first those made outside any reconcile, in order, then
    /// those of each reconciled key in key order, each key's reconcile calls in order.
    ///
    /// A reconcile call that did exactly what the one before it on the same key did is
    /// left out: how often a key is reconciled depends on how its notifications coalesce
    /// in the work queue, which timing decides, and the report must not. Calls dropped
    /// past [`MAX_STEP_CALLS`] are counted in a last [`Call::Dropped`].
    pub(crate) fn take(&self) -> Vec<Call> {
        let Step {
            mut entries,
            dropped,
        } = std::mem::take(&mut *self.lock());
        // Stable: each call's entries keep their order.
        entries.sort_by(|a, b| a.reconcile.cmp(&b.reconcile));
        let mut calls = Vec::new();
        let mut previous: Option<(String, Vec<Call>)> = None;
        let mut current: Option<(ReconcileCall, Vec<Call>)> = None;
        let mut finish = |current: Option<(ReconcileCall, Vec<Call>)>, calls: &mut Vec<Call>| {
            let Some((call, made)) = current else { return };
            let repeated = previous
                .as_ref()
                .is_some_and(|(key, before)| *key == call.key && *before == made);
            if !repeated {
                calls.extend(made.iter().cloned());
            }
            previous = Some((call.key, made));
        };
        for entry in entries {
            match entry.reconcile {
                None => calls.push(entry.call),
                Some(call) => match &mut current {
                    Some((open, made)) if *open == call => made.push(entry.call),
                    _ => {
                        finish(current.take(), &mut calls);
                        current = Some((call, vec![entry.call]));
                    }
                },
            }
        }
        finish(current, &mut calls);
        if dropped > 0 {
            calls.push(Call::Dropped { count: dropped });
        }
        calls
    }
}

impl CallObserver for Journal {
    fn observe(&self, observed: Observed) {
        let reconcile = observed.during.as_ref().map(|call| ReconcileCall {
            key: call.target.to_string(),
            number: call.number,
        });
        let Some(call) = to_call(observed) else {
            return;
        };
        self.push(Entry { reconcile, call });
    }
}

/// The call a record reports; `None` for a reconcile result outside a reconcile call,
/// which the runtime never sends.
fn to_call(observed: Observed) -> Option<Call> {
    Some(match observed.record {
        CallRecord::Log {
            level,
            message,
            fields,
        } => Call::Log {
            level: level.as_str().to_ascii_lowercase(),
            message,
            fields: fields.into_iter().collect(),
        },
        CallRecord::Output { stream, line } => Call::Log {
            // The levels the host logs these lines at.
            level: if stream == "stderr" { "warn" } else { "info" }.to_owned(),
            message: line,
            fields: BTreeMap::from([("stream".to_owned(), stream.to_owned())]),
        },
        CallRecord::Write { write, result } => {
            let (verb, resource, key, summary) = describe(&write);
            Call::Write {
                verb: verb.to_owned(),
                resource,
                key,
                summary,
                error: result.err().map(|e| e.to_string()),
            }
        }
        CallRecord::Refused { verb, resource } => Call::Denied {
            verb: verb.to_string(),
            resource: resource.to_string(),
        },
        CallRecord::Reconciled { outcome } => {
            let key = observed.during?.target.to_string();
            let (result, requeue_after_ms, error) = match outcome {
                Outcome::Done => ("done", None, None),
                Outcome::RequeueAfter(delay) => {
                    ("requeue-after", Some(delay.as_millis() as u64), None)
                }
                // The queue's word for a short requeue-after; the observer is told what the
                // plugin answered, so a journal shows none.
                Outcome::Requeue => ("requeue", None, None),
                Outcome::Error(error) => ("error", None, Some(error)),
            };
            Call::Reconcile {
                key,
                result: result.to_owned(),
                requeue_after_ms,
                error,
            }
        }
        CallRecord::Failed { error } => Call::Failure { message: error },
        // A record kind this version of the report does not know yet.
        _ => return None,
    })
}

/// The longest body kept in a write's summary.
const MAX_SUMMARY: usize = 300;

/// Verb, type, key and a short summary of the body.
fn describe(write: &Write) -> (&'static str, String, String, String) {
    match write {
        Write::Apply { target, json, .. } => (
            "apply",
            target.resource.to_string(),
            target.key(),
            shorten(json),
        ),
        Write::Patch {
            target,
            patch_type,
            patch,
            part,
        } => {
            let verb = match part {
                PatchedPart::Status => "patch-status",
                PatchedPart::Object => "patch",
            };
            let kind = match patch_type {
                PatchType::Merge => "merge",
                PatchType::Json => "json",
            };
            let summary = format!("{kind} {}", shorten(patch));
            (verb, target.resource.to_string(), target.key(), summary)
        }
        Write::Create {
            resource,
            namespace,
            json,
        } => {
            let name = serde_json::from_str::<serde_json::Value>(json)
                .ok()
                .and_then(|object| object["metadata"]["name"].as_str().map(str::to_owned))
                .unwrap_or_default();
            let key = match namespace {
                Some(namespace) => format!("{namespace}/{name}"),
                None => name,
            };
            ("create", resource.to_string(), key, shorten(json))
        }
        Write::Delete { target } => (
            "delete",
            target.resource.to_string(),
            target.key(),
            String::new(),
        ),
        Write::RecordEvent {
            regarding,
            severity,
            reason,
            message,
            ..
        } => {
            let severity = match severity {
                EventSeverity::Normal => "Normal",
                EventSeverity::Warning => "Warning",
            };
            (
                "record-event",
                regarding.resource.to_string(),
                regarding.key(),
                format!("{severity} {reason}: {message}"),
            )
        }
    }
}

/// A JSON body on one line, cut to [`MAX_SUMMARY`] bytes.
fn shorten(json: &str) -> String {
    let compact = serde_json::from_str::<serde_json::Value>(json)
        .map_or_else(|_| json.to_owned(), |value| value.to_string());
    if compact.len() <= MAX_SUMMARY {
        return compact;
    }
    let mut end = MAX_SUMMARY;
    while !compact.is_char_boundary(end) {
        end -= 1;
    }
    let mut cut = compact[..end].to_owned();
    let _ = write!(cut, "… ({} bytes)", compact.len());
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_grouped_by_key_and_a_repeated_reconcile_is_shown_once() {
        let journal = Journal::default();
        let log = |message: &str| Call::Log {
            level: "info".into(),
            message: message.into(),
            fields: BTreeMap::new(),
        };
        let entries = [
            (Some(("b", 0)), "patch"),
            (None, "x"),
            (Some(("a", 1)), "done"),
            (Some(("b", 0)), "done"),
            (Some(("b", 2)), "done"),
            (Some(("b", 3)), "done"),
            (Some(("a", 4)), "patch"),
        ];
        for (reconcile, message) in entries {
            journal.push(Entry {
                reconcile: reconcile.map(|(key, number)| ReconcileCall {
                    key: key.into(),
                    number,
                }),
                call: log(message),
            });
        }
        let messages: Vec<String> = journal
            .take()
            .into_iter()
            .map(|call| match call {
                Call::Log { message, .. } => message,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(messages, ["x", "done", "patch", "patch", "done", "done"]);
        assert!(journal.take().is_empty());
    }

    #[test]
    fn a_step_keeps_a_bounded_number_of_calls_and_counts_the_rest() {
        let journal = Journal::default();
        for line in 0..MAX_STEP_CALLS + 5 {
            journal.observe(Observed {
                plugin: "chatty".into(),
                during: None,
                record: CallRecord::Output {
                    stream: "stdout",
                    line: line.to_string(),
                },
            });
        }
        let calls = journal.take();
        assert_eq!(calls.len(), MAX_STEP_CALLS + 1);
        assert_eq!(calls.last(), Some(&Call::Dropped { count: 5 }));
        assert!(journal.take().is_empty(), "the next step starts empty");
    }
}
