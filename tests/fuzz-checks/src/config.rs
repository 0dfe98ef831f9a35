//! Checks for the host configuration file: written by people, templated by deploy tools,
//! mounted from ConfigMaps; it decides what each plugin may read and write.

use kubeplug_config::{Config, SandboxLimits};
use kubeplug_policy::Gvk;

/// A configuration file's text.
///
/// Properties: parsing never panics; a file kubeplug accepts is TOML, and its defaults are
/// limits a plugin can run under; an error on valid TOML points at a line and column or names
/// the key; every plugin's settings become a JSON object (what the plugin's `init`
/// receives); its grants either convert, each type written as `apiVersion/Kind` reading back
/// to the same text, or are refused with the error that names the first type that does not
/// parse.
pub fn config_file(data: &[u8]) {
    // The file is read as UTF-8 text; other bytes never reach the parser.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let is_toml = text.parse::<toml::Table>().is_ok();
    let config = match Config::parse(text) {
        Ok(config) => config,
        Err(message) => {
            assert!(
                !is_toml
                    || message.starts_with("TOML parse error at line")
                    || message.contains("in `")
                    || message.starts_with("[defaults] ")
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
            u64::from(limits.max_instances),
            u64::from(limits.max_table_elements),
            u64::from(limits.max_wasi_resources),
            u64::from(limits.write_burst),
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
        let typed = plugin
            .grants
            .read
            .iter()
            .chain(plugin.grants.write.keys())
            .map(|text| (text, Gvk::parse(text)));
        let first_bad = typed.clone().find_map(|(_, parsed)| parsed.err());
        match (plugin.grants.to_policy(), first_bad) {
            (Ok(grants), None) => {
                for (text, parsed) in typed {
                    let gvk = parsed.expect("checked above");
                    assert_eq!(&gvk.to_string(), text, "{gvk:?} prints as written");
                    assert_eq!(Gvk::parse(&gvk.to_string()), Ok(gvk.clone()));
                    let granted = grants.read.contains(&gvk) || grants.write.contains_key(&gvk);
                    assert!(granted || write_of_no_verb(&config, name, text), "{text}");
                }
            }
            (Err(error), Some(expected)) => assert_eq!(error, expected),
            (outcome, expected) => panic!(
                "[plugins.{name}] grants: converted to {outcome:?}, expected the error {expected:?}"
            ),
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
