//! What the configuration gives one plugin file: its settings, its grants and its sandbox
//! limits. The only place a plugin's permissions come from; nothing here is taken from the
//! plugin itself.

use std::path::Path;

use kubeplug_runtime::PluginLimits;

use crate::config::Config;

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
}

/// The settings, grants, limits and pin of the section named like `file`'s stem
/// (`label-audit.wasm` → `[plugins.label-audit]`).
pub(crate) fn plugin_settings(config: &Config, file: &Path) -> Result<PluginSettings, String> {
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let section = config.plugins.get(&stem);
    let settings = section
        .and_then(|s| s.settings.as_ref())
        .map(|table| serde_json::to_string(table).expect("TOML tables are JSON"))
        .unwrap_or_else(|| "{}".to_owned());
    let grants = section
        .map(|s| s.grants.to_policy())
        .transpose()
        .map_err(|e| format!("grants of [plugins.{stem}]: {e}"))?
        .unwrap_or_default();
    let defaults = &config.defaults;
    let limits = PluginLimits {
        max_memory: (defaults.memory_limit_mib as usize) << 20,
        call_deadline: std::time::Duration::from_millis(defaults.call_deadline_ms),
        batch_size: defaults.batch_size as usize,
        ..PluginLimits::default()
    };
    Ok(PluginSettings {
        settings,
        grants,
        limits,
        sha256: section.and_then(|s| s.sha256.clone()),
    })
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
