//! The report of `kubeplug test`: per replayed event the plugin's calls, then its status
//! and metrics, as text or as one JSON document (schema in docs/testing-plugins.md).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use kubeplug_runtime::status::{MetricValue, PluginStatus};
use kubeplug_runtime::{Delivery, Plugin};

use super::events::Change;
use super::journal::Call;

/// The version of the JSON document's schema; changed only with an incompatible change.
const SCHEMA: &str = "kubeplug.dev/test-report/v1";

/// Everything `kubeplug test` prints.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Report {
    schema: &'static str,
    plugin: PluginInfo,
    configuration: Configuration,
    /// The start (load and initial list) first, then one step per replayed event.
    steps: Vec<Step>,
    status: Status,
    metrics: Vec<Series>,
    /// Whether any call failed; the exit code says the same.
    pub(crate) failed: bool,
}

#[derive(Debug, serde::Serialize)]
struct PluginInfo {
    name: String,
    version: String,
    file: String,
    /// `events` or `reconcile`.
    delivery: &'static str,
}

/// The configuration whose settings, grants and limits the plugin ran with, as under `run`.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Configuration {
    /// The file given with `--config`; `None`: none, so only the defaults (no grants).
    pub(crate) file: Option<String>,
    /// `[plugins.NAME]`, when the file has a section for the plugin; else `[defaults]` only.
    pub(crate) section: Option<String>,
}

impl std::fmt::Display for Configuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.file, &self.section) {
            (None, _) => write!(
                f,
                "none given (--config): the defaults, which grant nothing"
            ),
            (Some(file), Some(section)) => write!(f, "{file} {section}"),
            (Some(file), None) => write!(
                f,
                "{file}, which has no section for this plugin: its [defaults]"
            ),
        }
    }
}

/// What the plugin did after one event (or at the start, with no event).
#[derive(Debug, serde::Serialize)]
pub(crate) struct Step {
    pub(crate) event: Option<EventInfo>,
    pub(crate) calls: Vec<Call>,
}

/// The replayed event.
#[derive(Debug, serde::Serialize)]
pub(crate) struct EventInfo {
    /// Its position in the events file, from 1.
    pub(crate) index: usize,
    /// `FILE:LINE`.
    pub(crate) source: String,
    #[serde(rename = "type")]
    pub(crate) change: Change,
    /// `apiVersion/Kind`.
    pub(crate) resource: String,
    /// `namespace/name`, or `name`.
    pub(crate) key: String,
    /// What each projection of the plugin's subscriptions to the type selected in the
    /// object as stored, by name: the values its event carries.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) projected: BTreeMap<String, Vec<serde_json::Value>>,
}

/// The plugin's counters at the end.
#[derive(Debug, serde::Serialize)]
struct Status {
    events_delivered: u64,
    calls_failed: u64,
    batches_skipped: u64,
    /// The reconciles the steps report, not the plugin's own counter: that one also counts
    /// the repeats the steps leave out, and how many there are is for timing to decide.
    reconciles: u64,
    denied: u64,
}

impl Status {
    fn new(plugin: &PluginStatus, steps: &[Step]) -> Self {
        let reported = steps.iter().flat_map(|s| &s.calls);
        Self {
            events_delivered: plugin.events_delivered,
            calls_failed: plugin.calls_failed,
            batches_skipped: plugin.batches_skipped,
            reconciles: reported
                .filter(|call| matches!(call, Call::Reconcile { .. }))
                .count() as u64,
            denied: plugin.denied,
        }
    }
}

/// One plugin-defined metric series.
#[derive(Debug, serde::Serialize)]
struct Series {
    name: String,
    labels: BTreeMap<String, String>,
    /// `counter` or `gauge`.
    kind: &'static str,
    value: f64,
}

impl Report {
    pub(crate) fn new(
        plugin: &Plugin,
        file: &Path,
        configuration: Configuration,
        steps: Vec<Step>,
    ) -> Self {
        let description = plugin.description();
        let status = plugin.status();
        let failed =
            status.calls_failed > 0 || steps.iter().flat_map(|s| &s.calls).any(Call::is_failure);
        let metrics = plugin
            .metrics()
            .snapshot()
            .into_iter()
            .map(|((name, labels), value)| {
                let (kind, value) = match value {
                    MetricValue::Counter(count) => ("counter", count as f64),
                    MetricValue::Gauge(value) => ("gauge", value),
                };
                Series {
                    name,
                    labels: labels.into_iter().collect(),
                    kind,
                    value,
                }
            })
            .collect();
        Self {
            schema: SCHEMA,
            plugin: PluginInfo {
                name: description.name.clone(),
                version: description.version.clone(),
                file: file.display().to_string(),
                delivery: match description.delivery {
                    Delivery::Events => "events",
                    Delivery::Reconcile { .. } => "reconcile",
                },
            },
            configuration,
            status: Status::new(&status, &steps),
            steps,
            metrics,
            failed,
        }
    }

    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the report is plain data") + "\n"
    }

    pub(crate) fn to_text(&self) -> String {
        let mut out = String::new();
        let plugin = &self.plugin;
        let _ = writeln!(
            out,
            "{} {} ({}, {})",
            plugin.name, plugin.version, plugin.delivery, plugin.file
        );
        let _ = writeln!(out, "configuration: {}", self.configuration);
        for step in &self.steps {
            let _ = match &step.event {
                None => writeln!(out, "start (load and initial list):"),
                Some(event) => writeln!(
                    out,
                    "event {} ({}): {} {} {}",
                    event.index, event.source, event.change, event.resource, event.key
                ),
            };
            if let Some(event) = step.event.as_ref().filter(|e| !e.projected.is_empty()) {
                let fields: Vec<String> = event
                    .projected
                    .iter()
                    .map(|(name, values)| {
                        let values: Vec<String> = values.iter().map(ToString::to_string).collect();
                        format!("{name}=[{}]", values.join(", "))
                    })
                    .collect();
                let _ = writeln!(out, "  projected: {}", fields.join(" "));
            }
            if step.calls.is_empty() {
                let _ = writeln!(out, "  (no calls)");
            }
            for call in &step.calls {
                let _ = writeln!(out, "  {}", render_call(call));
            }
        }
        let status = &self.status;
        let _ = writeln!(
            out,
            "status: {} events delivered, {} reconciles, {} calls failed, {} batches skipped, {} writes denied",
            status.events_delivered,
            status.reconciles,
            status.calls_failed,
            status.batches_skipped,
            status.denied
        );
        if !self.metrics.is_empty() {
            let _ = writeln!(out, "metrics:");
        }
        for series in &self.metrics {
            let labels: Vec<String> = series
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v:?}"))
                .collect();
            let _ = writeln!(
                out,
                "  {}{{{}}} {} ({})",
                series.name,
                labels.join(","),
                series.value,
                series.kind
            );
        }
        let _ = writeln!(out, "{}", if self.failed { "FAILED" } else { "ok" });
        out
    }
}

fn render_call(call: &Call) -> String {
    match call {
        Call::Log {
            level,
            message,
            fields,
        } => {
            let fields: String = fields.iter().map(|(k, v)| format!(" {k}={v:?}")).collect();
            format!("log {level}: {message}{fields}")
        }
        Call::Write {
            verb,
            resource,
            key,
            summary,
            error,
        } => {
            let error = error
                .as_ref()
                .map(|e| format!(" -> error: {e}"))
                .unwrap_or_default();
            format!("write {verb} {resource} {key}: {summary}{error}")
        }
        Call::Denied { verb, resource } => format!("denied {verb} {resource} (not granted)"),
        Call::Reconcile {
            key,
            result,
            requeue_after_ms,
            error,
        } => match (requeue_after_ms, error) {
            (Some(ms), _) => format!("reconcile {key}: {result} {ms}ms"),
            (None, Some(error)) => format!("reconcile {key}: {result}: {error}"),
            (None, None) => format!("reconcile {key}: {result}"),
        },
        Call::Failure { message } => format!("failed: {message}"),
        Call::Dropped { count } => format!(
            "dropped: {count} more calls (a step keeps {})",
            super::journal::MAX_STEP_CALLS
        ),
    }
}

#[cfg(test)]
mod tests {
    use kubeplug_runtime::status::RunState;

    use super::*;

    fn reconcile(key: &str) -> Call {
        Call::Reconcile {
            key: key.to_owned(),
            result: "done".to_owned(),
            requeue_after_ms: None,
            error: None,
        }
    }

    /// The plugin counted 7 reconciles (a repeat the journal left out among them); the
    /// report says 6, the number it shows, on every run.
    #[test]
    fn reconciles_are_those_the_steps_report() {
        let plugin = PluginStatus {
            state: RunState::Stopped,
            events_delivered: 8,
            calls_failed: 0,
            batches_skipped: 0,
            instances_created: 1,
            denied: 0,
            reconciles: 7,
            keys_refused: 0,
            quarantines: 0,
            call_nanos: 1,
            last_error: None,
        };
        let start = Step {
            event: None,
            calls: vec![reconcile("web"), reconcile("web"), reconcile("worker")],
        };
        let modified = Step {
            event: None,
            calls: vec![
                Call::Failure {
                    message: "not a reconcile".to_owned(),
                },
                reconcile("web"),
                reconcile("web"),
                reconcile("web"),
            ],
        };
        let status = Status::new(&plugin, &[start, modified]);
        assert_eq!((status.reconciles, status.events_delivered), (6, 8));
    }
}
