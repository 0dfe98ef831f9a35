//! What the configuration gives one plugin file: its settings, its grants and its sandbox
//! limits. The only place a plugin's permissions come from; nothing here is taken from the
//! plugin itself.

use std::path::Path;
use std::time::Duration;

use kubeplug_runtime::{DescriptionBounds, PluginLimits, Rate};

use crate::config::{Config, ParseError, SandboxLimits};

/// What the configuration gives one plugin file.
#[derive(Debug, Clone)]
pub(crate) struct PluginSettings {
    /// Its settings document (JSON); `{}` without a section.
    pub(crate) settings: String,
    /// What it may read and write.
    pub(crate) grants: kubeplug_runtime::Grants,
    /// Its sandbox.
    pub(crate) limits: PluginLimits,
    /// The only content that may load under this name (SHA-256, lowercase hex), if pinned.
    pub(crate) sha256: Option<String>,
    /// How long it waits for the informers it reads to sync before it is reported failed.
    pub(crate) sync_deadline: Duration,
    /// Bytes of object JSON each of its events-mode buffers may keep alive on its own.
    pub(crate) buffer_budget: usize,
}

/// The settings, grants, limits and pin of the section named like `file`'s stem
/// (`label-audit.wasm` → `[plugins.label-audit]`), with `[defaults]` for what it leaves out;
/// writes bounded to `namespace`, the host's; an error names the section at fault.
pub(crate) fn plugin_settings(
    config: &Config,
    file: &Path,
    namespace: Option<&str>,
) -> Result<PluginSettings, ParseError> {
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let section = config.plugins.get(&stem);
    let settings = section
        .and_then(|s| s.settings.as_ref())
        .map(|table| serde_json::to_string(table).expect("TOML tables are JSON"))
        .unwrap_or_else(|| "{}".to_owned());
    let limits = config.limits_of(&stem);
    Ok(PluginSettings {
        settings,
        grants: config.grants_of(&stem, namespace)?,
        limits: runtime_limits(&limits),
        sync_deadline: Duration::from_secs(limits.sync_deadline_s),
        buffer_budget: (limits.buffer_budget_mib as usize) << 20,
        sha256: section.and_then(|s| s.sha256.clone()),
    })
}

/// The runtime's form of a plugin's configured limits; how failures are handled stays the
/// runtime's own.
fn runtime_limits(configured: &SandboxLimits) -> PluginLimits {
    let count = |n: u32| n as usize;
    PluginLimits {
        max_memory: count(configured.memory_limit_mib) << 20,
        call_deadline: Duration::from_millis(configured.call_deadline_ms),
        batch_size: count(configured.batch_size),
        description: DescriptionBounds {
            subscriptions: count(configured.max_subscriptions),
            indexes: count(configured.max_indexes),
            projections: count(configured.max_projections),
            reconcile_workers: count(configured.max_reconcile_workers),
        },
        min_resync_period: Duration::from_secs(configured.min_resync_period_s),
        max_instances: count(configured.max_instances),
        max_table_elements: count(configured.max_table_elements),
        max_wasi_resources: count(configured.max_wasi_resources),
        writes: Rate {
            per_second: configured.write_qps,
            burst: configured.write_burst,
        },
        reconciles: Rate {
            per_second: configured.reconcile_qps,
            burst: configured.reconcile_burst,
        },
        ..PluginLimits::default()
    }
}

/// `None` when `description_name` is `file`'s stem; else why the file may not load: a file
/// is the plugin it is named after, so that two files cannot hold one name and the grants
/// of `[plugins.NAME]` go to the plugin called NAME.
pub(crate) fn name_mismatch(file: &Path, description_name: &str) -> Option<String> {
    let stem = file.file_stem().map(|s| s.to_string_lossy());
    if stem.as_deref() == Some(description_name) {
        return None;
    }
    Some(format!(
        "the plugin describes itself as {}, so its file must be named {description_name}.wasm",
        kubeplug_policy::names::quoted(description_name)
    ))
}
