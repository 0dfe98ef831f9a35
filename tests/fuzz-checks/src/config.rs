//! Checks for the host configuration file: written by people, templated by deploy tools,
//! mounted from ConfigMaps; it decides what each plugin may read and write.

use kubeplug_config::{Config, SandboxLimits};
use kubeplug_policy::{Gvk, ReadGrant};

/// A configuration file's text.
///
/// Properties: parsing never panics; a file kubeplug accepts is TOML, and every plugin's
/// limits are limits a plugin can run under; an error on valid TOML points at a line and
/// column or names the section and key; every plugin's settings become a JSON object (what
/// the plugin's `init` receives); its grants convert, each entry reading back as written,
/// and allow what they name, a sensitive type only through the plugin's own exact grant.
pub fn config_file(data: &[u8]) {
    // The file is read as UTF-8 text; other bytes never reach the parser.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let is_toml = text.parse::<toml::Table>().is_ok();
    let config = match Config::parse(text) {
        Ok(config) => config,
        Err(error) => {
            let message = error.to_string();
            assert!(
                !is_toml
                    || message.starts_with("TOML parse error at line")
                    || message.contains("in `")
                    || message.starts_with("[defaults")
                    || message.starts_with("[host] ")
                    || message.starts_with("[plugins."),
                "an error on valid TOML says where: {message}"
            );
            return;
        }
    };
    assert!(is_toml, "accepted text that is not TOML");
    // Every plugin's limits, and those of a plugin without a section, are limits a plugin
    // can run under.
    let names = config.plugins.keys().map(String::as_str).chain(["-"]);
    for name in names {
        let limits = config.limits_of(name);
        let counts = [
            u64::from(limits.memory_limit_mib),
            limits.call_deadline_ms,
            u64::from(limits.batch_size),
            u64::from(limits.max_reconcile_workers),
            limits.min_resync_period_s,
            u64::from(limits.max_subscriptions),
            u64::from(limits.max_indexes),
            u64::from(limits.max_projections),
            u64::from(limits.max_instances),
            u64::from(limits.max_table_elements),
            u64::from(limits.max_wasi_resources),
            u64::from(limits.write_burst),
            limits.sync_deadline_s,
            u64::from(limits.buffer_budget_mib),
        ];
        assert!(
            counts.iter().all(|&n| n >= 1)
                && limits.memory_limit_mib <= SandboxLimits::MAX_MEMORY_LIMIT_MIB
                && limits.write_qps.is_finite()
                && limits.write_qps > 0.0,
            "{name}: {limits:?}"
        );
    }
    for (name, plugin) in &config.plugins {
        if let Some(settings) = &plugin.settings {
            let json = serde_json::to_string(settings)
                .unwrap_or_else(|e| panic!("[plugins.{name}] settings are not JSON: {e}"));
            let back: serde_json::Value = serde_json::from_str(&json).expect("JSON reads back");
            assert!(back.is_object(), "[plugins.{name}] settings: {json}");
        }
        // An accepted file's grants all convert: each entry reads back as written, and the
        // plugin may do what its section names; a sensitive type only through its own
        // exact grant.
        let grants = config
            .grants_of(name, None)
            .unwrap_or_else(|e| panic!("[plugins.{name}] accepted, yet: {e}"));
        let sensitive = config.host.sensitive_types().expect("checked when parsed");
        for text in &plugin.grants.read {
            let grant = ReadGrant::parse(text).expect("checked when parsed");
            assert_eq!(&grant.to_string(), text, "{grant:?} prints as written");
            if let ReadGrant::Type(gvk) = &grant {
                assert!(grants.may_read(gvk), "{text}");
            }
        }
        for text in plugin.grants.write.keys() {
            let gvk = Gvk::parse(text).expect("checked when parsed");
            assert_eq!(&gvk.to_string(), text, "{gvk:?} prints as written");
            assert!(
                grants.write.contains_key(&gvk) || write_of_no_verb(&config, name, text),
                "{text}"
            );
        }
        for gvk in &sensitive {
            let named = plugin.grants.read.iter().any(|t| *t == gvk.to_string());
            assert_eq!(grants.may_read(gvk), named, "{gvk} for {name}");
        }
    }
}

/// Whether `text` is a write entry with no verbs (which grants nothing, rightly).
fn write_of_no_verb(config: &Config, plugin: &str, text: &str) -> bool {
    config.plugins[plugin]
        .grants
        .write
        .get(text)
        .is_some_and(Vec::is_empty)
}
