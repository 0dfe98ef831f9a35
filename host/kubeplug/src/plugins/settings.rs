//! What the configuration gives one plugin file: its settings, its grants and its sandbox
//! limits. The only place a plugin's permissions come from; nothing here is taken from the
//! plugin itself.

use std::path::Path;

use kubeplug_runtime::PluginLimits;

use crate::config::Config;

/// A plugin's settings (JSON), grants and limits from the configuration section named like
/// its file's stem (`label-audit.wasm` → `[plugins.label-audit]`).
pub(crate) fn plugin_settings(
    config: &Config,
    file: &Path,
) -> Result<(String, kubeplug_runtime::Grants, PluginLimits), String> {
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
    Ok((settings, grants, limits))
}
