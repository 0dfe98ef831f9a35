//! What a plugin did, collected from the host's `tracing` events: its log records (and
//! stdout/stderr), its cluster writes (reported by [`RecordingWriter`]), refused writes,
//! reconcile results and failed calls. The runtime reports these as events carrying a
//! `plugin` field; reconcile calls run in a `reconcile` span whose `key` groups what each
//! call did, so that parallel workers still give a stable report.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use kubeplug_runtime::view::{BoxFuture, EventSeverity, PatchType};
use kubeplug_runtime::{ClusterWriter, Write, WriteError};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// The target of the events [`RecordingWriter`] emits.
const WRITE_TARGET: &str = "kubeplug::replay::write";
/// The runtime's targets this journal reads.
const LOG_TARGET: &str = "kubeplug_runtime::host::log";
const STDIO_TARGET: &str = "kubeplug_runtime::state";
const RECONCILE_TARGET: &str = "kubeplug_runtime::reconcile";
const GRANTS_TARGET: &str = "kubeplug_runtime::host::cluster";

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
}

impl Call {
    /// Whether this is a failed call of the plugin.
    pub(crate) fn is_failure(&self) -> bool {
        match self {
            Call::Failure { .. } => true,
            Call::Reconcile { result, .. } => result == "error",
            Call::Log { .. } | Call::Write { .. } | Call::Denied { .. } => false,
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

/// Calls collected since the last [`take`](Self::take). Cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct Journal {
    // A std mutex: pushes and takes are short and never span an `.await`.
    entries: Arc<Mutex<Vec<Entry>>>,
    /// Numbers the reconcile calls.
    reconciles: Arc<AtomicU64>,
}

impl Journal {
    fn lock(&self) -> MutexGuard<'_, Vec<Entry>> {
        self.entries.lock().expect("journal poisoned by a panic")
    }

    /// The layer that fills this journal; only the runtime's events and the writer's pass
    /// its filter, at every level.
    pub(crate) fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let targets = Targets::new()
            .with_target("kubeplug_runtime", Level::TRACE)
            .with_target(WRITE_TARGET, Level::TRACE);
        Capture {
            journal: self.clone(),
        }
        .with_filter(targets)
    }

    /// The calls so far, emptied: first those made outside any reconcile, in order, then
    /// those of each reconciled key in key order, each key's reconcile calls in order.
    ///
    /// A reconcile call that did exactly what the one before it on the same key did is
    /// left out: how often a key is reconciled depends on how its notifications coalesce
    /// in the work queue, which timing decides, and the report must not.
    pub(crate) fn take(&self) -> Vec<Call> {
        let mut entries = std::mem::take(&mut *self.lock());
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
        calls
    }
}

struct Capture {
    journal: Journal,
}

impl<S> Layer<S> for Capture
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attributes: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let metadata = attributes.metadata();
        if metadata.target() != RECONCILE_TARGET || metadata.name() != "reconcile" {
            return;
        }
        let mut fields = Fields::default();
        attributes.record(&mut fields);
        if let (Some(key), Some(span)) = (fields.take("key"), ctx.span(id)) {
            let number = self.journal.reconciles.fetch_add(1, Ordering::Relaxed);
            span.extensions_mut().insert(ReconcileCall { key, number });
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let metadata = event.metadata();
        let Some(call) = to_call(metadata.target(), *metadata.level(), fields) else {
            return;
        };
        let reconcile = ctx.event_scope(event).and_then(|scope| {
            scope
                .into_iter()
                .find_map(|span| span.extensions().get::<ReconcileCall>().cloned())
        });
        self.journal.lock().push(Entry { reconcile, call });
    }
}

/// The call an event reports, if it reports one of the plugin's.
fn to_call(target: &str, level: Level, mut fields: Fields) -> Option<Call> {
    fields.take("plugin")?;
    let message = fields.take("message").unwrap_or_default();
    let level_name = level.as_str().to_ascii_lowercase();
    match target {
        LOG_TARGET => {
            let (message, logged) = split_fields(&message);
            Some(Call::Log {
                level: level_name,
                message: message.to_owned(),
                fields: logged.into_iter().collect(),
            })
        }
        STDIO_TARGET => Some(Call::Log {
            level: level_name,
            message,
            fields: fields
                .take("stream")
                .map(|s| ("stream".into(), s))
                .into_iter()
                .collect(),
        }),
        WRITE_TARGET => Some(Call::Write {
            verb: fields.take("verb")?,
            resource: fields.take("resource")?,
            key: fields.take("key")?,
            summary: fields.take("summary").unwrap_or_default(),
            error: fields.take("error"),
        }),
        RECONCILE_TARGET if message == "reconciled" => Some(Call::Reconcile {
            key: fields.take("key")?,
            result: fields.take("result")?,
            requeue_after_ms: fields
                .take("requeue_after_ms")
                .and_then(|ms| ms.parse().ok()),
            error: fields.take("error"),
        }),
        GRANTS_TARGET if message == "write refused by grants" => Some(Call::Denied {
            verb: fields.take("verb")?,
            resource: fields.take("resource")?,
        }),
        // A failed call is reported at warn or error with the error; other warnings (load
        // notes, follow-ups such as "skipping a batch") say nothing more about the plugin.
        _ if level <= Level::WARN => {
            let error = fields.take("error")?;
            Some(Call::Failure {
                message: format!("{message}: {error}"),
            })
        }
        _ => None,
    }
}

/// An event's fields as text.
#[derive(Default)]
struct Fields(BTreeMap<&'static str, String>);

impl Fields {
    fn take(&mut self, name: &str) -> Option<String> {
        self.0.remove(name)
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name(), format!("{value:?}"));
    }
}

/// Splits the fields the host appends to a plugin's log message (` key="value"` each, the
/// value as a Rust string literal) off the message.
fn split_fields(text: &str) -> (&str, Vec<(String, String)>) {
    let mut rest = text;
    let mut fields = Vec::new();
    while let Some((before, key, value)) = last_field(rest) {
        fields.push((key.to_owned(), value));
        rest = before;
    }
    fields.reverse();
    (rest, fields)
}

/// The last ` key="value"` of `text`: what comes before it, the key, the unescaped value.
fn last_field(text: &str) -> Option<(&str, &str, String)> {
    let body = text.strip_suffix('"')?;
    // The opening quote is the last one not escaped by an odd run of backslashes.
    let open = body.char_indices().rev().find_map(|(at, c)| {
        let backslashes = body[..at].chars().rev().take_while(|&c| c == '\\').count();
        (c == '"' && backslashes % 2 == 0).then_some(at)
    })?;
    let before_value = body[..open].strip_suffix('=')?;
    let space = before_value.rfind(' ')?;
    let key = &before_value[space + 1..];
    if key.is_empty() {
        return None;
    }
    let value = unescape(&body[open + 1..])?;
    Some((&text[..space], key, value))
}

/// The inverse of `str`'s `Debug` escaping.
fn unescape(literal: &str) -> Option<String> {
    let mut out = String::with_capacity(literal.len());
    let mut chars = literal.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            '0' => out.push('\0'),
            'u' => {
                let hex: String = chars.by_ref().skip(1).take_while(|&c| c != '}').collect();
                out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
            }
            other => out.push(other),
        }
    }
    Some(out)
}

/// The longest body kept in a write's summary.
const MAX_SUMMARY: usize = 300;

/// The local cluster's writer, reporting every write (and its error) to the journal.
pub(crate) struct RecordingWriter<W> {
    inner: W,
}

impl<W: ClusterWriter> RecordingWriter<W> {
    pub(crate) fn new(inner: W) -> Self {
        Self { inner }
    }
}

impl<W: ClusterWriter> ClusterWriter for RecordingWriter<W> {
    fn write<'a>(
        &'a self,
        plugin: &'a str,
        write: Write,
    ) -> BoxFuture<'a, Result<String, WriteError>> {
        let (verb, resource, key, summary) = describe(&write);
        Box::pin(async move {
            let result = self.inner.write(plugin, write).await;
            let error = result.as_ref().err().map(ToString::to_string);
            tracing::info!(
                target: WRITE_TARGET,
                plugin,
                verb,
                resource = resource.as_str(),
                key = key.as_str(),
                summary = summary.as_str(),
                error = error.as_deref(),
                "write"
            );
            result
        })
    }
}

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
            subresource,
        } => {
            let verb = match subresource.as_deref() {
                Some("status") => "patch-status",
                _ => "patch",
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
    fn fields_come_off_the_message_as_the_host_appends_them() {
        let fields = [
            ("kind", "Pod"),
            ("why", "a \"quoted\" \\ value\n"),
            ("k", ""),
        ];
        let appended: String = fields.iter().map(|(k, v)| format!(" {k}={v:?}")).collect();
        let logged = format!("object lacks labels{appended}");
        let (message, split) = split_fields(&logged);
        assert_eq!(message, "object lacks labels");
        let expected: Vec<(String, String)> = fields
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        assert_eq!(split, expected);
        assert_eq!(split_fields("no fields here").1, []);
        assert_eq!(unescape(r"\u{7f}x").as_deref(), Some("\u{7f}x"));
    }

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
            journal.lock().push(Entry {
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
}
