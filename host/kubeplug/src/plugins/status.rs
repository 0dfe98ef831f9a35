//! What `/plugins` and `/metrics` report of each file: its state, last error and counts that
//! survive reloads.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::SystemTime;

use kubeplug_informer::listener::ListenerProbe;
use kubeplug_runtime::{Plugin, PluginStats};

use super::{Delivering, Entry, InformerStarts, PluginId};

/// Counts of versions that stopped serving, so that a file's totals survive reloads.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Totals {
    events: u64,
    failures: u64,
    /// Notifications merged by its buffers over their budget.
    merged: u64,
    /// Keys its `map-event` named that were dropped.
    keys_refused: u64,
}

impl Totals {
    pub(super) fn of(plugin: &Plugin) -> Self {
        Self::of_stats(plugin.stats())
    }

    pub(super) fn of_stats(stats: &PluginStats) -> Self {
        let status = stats.snapshot();
        Self {
            events: status.events_delivered,
            failures: status.calls_failed,
            merged: 0,
            keys_refused: status.keys_refused,
        }
    }

    pub(super) fn with_merged(self, merged: u64) -> Self {
        Self { merged, ..self }
    }

    pub(super) fn add(&mut self, other: Self) {
        self.events += other.events;
        self.failures += other.failures;
        self.merged += other.merged;
        self.keys_refused += other.keys_refused;
    }
}

/// The counts of a file's versions that stopped serving, so that they survive reloads.
#[derive(Default)]
pub(super) struct Retired {
    /// Of versions that no longer run.
    done: Totals,
    /// Of versions swapped out whose call in flight may still finish; folded into `done`
    /// once nothing else holds them.
    finishing: Vec<Arc<PluginStats>>,
}

impl Retired {
    pub(super) fn add(&mut self, totals: Totals) {
        self.done.add(totals);
    }

    pub(super) fn add_merged(&mut self, merged: u64) {
        self.done.merged += merged;
    }

    pub(super) fn retire(&mut self, stats: Arc<PluginStats>) {
        self.finishing.push(stats);
        let (done, finishing): (Vec<_>, Vec<_>) = std::mem::take(&mut self.finishing)
            .into_iter()
            .partition(|stats| Arc::strong_count(stats) == 1);
        for stats in done {
            self.done.add(Totals::of_stats(&stats));
        }
        self.finishing = finishing;
    }

    pub(super) fn totals(&self) -> Totals {
        let mut totals = self.done;
        for stats in &self.finishing {
            totals.add(Totals::of_stats(stats));
        }
        totals
    }
}

/// One plugin file and what became of it, as `/plugins` reports it.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct PluginReport {
    pub(crate) file: PathBuf,
    /// SHA-256 of the version serving.
    pub(crate) hash: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) version: Option<String>,
    /// `loading`, `syncing` (loaded; waiting for the informers it reads), `running`,
    /// `standby` (loaded; this replica does not lead), `quarantined`, `stopped` or `failed`.
    pub(crate) state: &'static str,
    pub(crate) last_error: Option<String>,
    /// When the serving version was swapped in, in milliseconds since the Unix epoch.
    pub(crate) loaded_at_ms: Option<u64>,
    /// How long loading it took (compile or cache, init, describe, validation).
    pub(crate) load_ms: Option<f64>,
    /// Notifications waiting in its listeners.
    pub(crate) buffer_depth: usize,
    /// Over every version of this file: notifications its buffers merged into a key's
    /// waiting one because they were over `buffer_budget_mib` (the plugin then got the
    /// latest state per key, not every change).
    pub(crate) buffer_merged: u64,
    /// Over every version of this file.
    pub(crate) events_delivered: u64,
    /// Over every version of this file.
    pub(crate) failures: u64,
    /// Over every version of this file: keys its `map-event` named that were dropped (past
    /// the first 1,000 of one call, of a type it enqueues no keys of, or naming no possible
    /// object).
    pub(crate) keys_refused: u64,
    /// The informers of the serving version's subscriptions, in their order.
    pub(crate) informers: Vec<InformerReport>,
    /// Over every version of this file: informers started for it (its subscriptions and
    /// cache reads; not those it found running or lingering).
    pub(crate) informer_starts: u64,
    /// Over every version of this file: informer starts refused because it had started
    /// too many too quickly.
    pub(crate) informer_starts_refused: u64,
}

/// An informer a plugin subscribes to, as `/plugins` reports it.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct InformerReport {
    /// Resource, namespace and selectors.
    pub(crate) informer: String,
    /// It lists and watches metadata alone: none of its users needs objects' bodies.
    pub(crate) metadata_only: bool,
}

/// Loads of new or changed plugin files, by result.
#[derive(Debug, Default)]
pub(crate) struct ReloadCounts {
    pub(crate) success: AtomicU64,
    pub(crate) failure: AtomicU64,
}

pub(super) fn report(
    id: &PluginId,
    entry: &Entry,
    starts: Option<&InformerStarts>,
) -> PluginReport {
    let lifecycle = &entry.lifecycle;
    let serving = lifecycle.serving();
    let delivering = lifecycle.delivering();
    let state = lifecycle.state_name();
    let last_error = lifecycle.last_error().map(str::to_owned);
    let mut totals = entry.retired.totals();
    if let Some(serving) = serving {
        let merged = delivering.map_or(0, Delivering::merged);
        totals.add(Totals::of(&serving.plugin).with_merged(merged));
    }
    PluginReport {
        file: id.file().to_owned(),
        hash: serving.map(|r| r.hash.to_string()),
        name: serving
            .map(|r| r.plugin.name().to_owned())
            .or_else(|| lifecycle.described_as().map(str::to_owned)),
        version: serving.map(|r| r.plugin.description().version.clone()),
        state,
        last_error,
        loaded_at_ms: serving.and_then(|r| {
            r.loaded_at
                .duration_since(SystemTime::UNIX_EPOCH)
                .ok()
                .map(|d| d.as_millis() as u64)
        }),
        load_ms: serving.map(|r| r.load_time.as_secs_f64() * 1e3),
        buffer_depth: delivering.map_or(0, |d| d.probes.iter().map(ListenerProbe::depth).sum()),
        events_delivered: totals.events,
        failures: totals.failures,
        keys_refused: totals.keys_refused,
        buffer_merged: totals.merged,
        informer_starts: starts.map_or(0, InformerStarts::started),
        informer_starts_refused: starts.map_or(0, InformerStarts::refused),
        informers: serving.map_or_else(Vec::new, |r| {
            r.warm
                .iter()
                .map(|lease| InformerReport {
                    informer: lease.key().to_string(),
                    metadata_only: lease.informer().is_metadata_only(),
                })
                .collect()
        }),
    }
}

/// Whether the plugins present at start let the host be ready: each has started (it is
/// loaded and its informers synced; `running`, `standby` while another replica leads, or
/// since quarantined) or failed, and at least one has started, so that a rollout whose
/// every plugin fails stops. Files removed since do not count; with no plugin at start there
/// is nothing to wait for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StartReadiness {
    /// Files present at start that are still loading or syncing, by plugin name.
    pub(crate) waiting: Vec<String>,
    /// How many files present at start have started.
    pub(crate) started: usize,
    /// Every file that failed and has no version serving (whenever it appeared): its plugin
    /// name and the failure in host-written words.
    pub(crate) failed: Vec<(String, String)>,
}

impl StartReadiness {
    pub(super) fn of<'a>(
        entries: impl Iterator<Item = (&'a PluginId, &'a Entry)>,
        at_start: &BTreeSet<PluginId>,
    ) -> Self {
        let mut readiness = Self {
            waiting: Vec::new(),
            started: 0,
            failed: Vec::new(),
        };
        for (id, entry) in entries {
            let lifecycle = &entry.lifecycle;
            let serving = lifecycle.serving();
            let name = serving
                .map(|serving| serving.plugin.name().to_owned())
                .or_else(|| lifecycle.described_as().map(str::to_owned))
                .unwrap_or_else(|| file_stem(id.file()));
            let failed = lifecycle.has_failed();
            if failed && let Some(failure) = lifecycle.failure() {
                readiness
                    .failed
                    .push((name.clone(), failure.summary.clone()));
            }
            if !at_start.contains(id) {
                continue;
            }
            if serving.is_some() {
                readiness.started += 1;
            } else if !failed {
                readiness.waiting.push(name);
            }
        }
        readiness
    }

    /// `Ok` with a line per failed plugin when ready, else why not.
    pub(crate) fn verdict(&self, present_at_start: usize) -> Result<Vec<String>, String> {
        let failed = self
            .failed
            .iter()
            .map(|(name, summary)| format!("plugin {name} failed: {summary}"));
        if !self.waiting.is_empty() {
            return Err(format!("waiting for plugins {}", self.waiting.join(", ")));
        }
        if present_at_start > 0 && self.started == 0 {
            let mut reason = "every plugin present at start failed".to_owned();
            for line in failed {
                reason.push_str("; ");
                reason.push_str(&line);
            }
            return Err(reason);
        }
        Ok(failed.collect())
    }
}

/// A plugin's name from its file, quoted when it is not a plain name, for a file that
/// failed before describing itself.
fn file_stem(file: &Path) -> String {
    let stem = file
        .file_stem()
        .map(|stem| stem.to_string_lossy())
        .unwrap_or_default();
    kubeplug_policy::names::quoted(&stem)
}
