//! kubeplug's configuration file: host settings, plugin defaults, and per-plugin settings
//! and grants. Its own crate, apart from the binary, so that the fuzz checks can parse it
//! without the binary's dependencies.
//!
//! ```toml
//! [host]
//! http = "0.0.0.0:8080"
//! namespace = "team-a"
//! # Readable only when a plugin's own section names them exactly (this is the default).
//! sensitive = ["v1/Secret"]
//!
//! # Every plugin's sandbox; the values shown are the built-in ones.
//! [defaults]
//! memory_limit_mib = 64
//! call_deadline_ms = 1000
//! batch_size = 64
//! max_reconcile_workers = 16
//! min_resync_period_s = 30
//! max_subscriptions = 32
//! max_indexes = 32
//! max_projections = 16
//! max_instances = 32
//! max_table_elements = 10000
//! max_wasi_resources = 4096
//! write_qps = 20.0
//! write_burst = 30
//! reconcile_qps = 1000.0
//! reconcile_burst = 1000
//! sync_deadline_s = 120
//! buffer_budget_mib = 16
//!
//! # Grants every plugin gets besides its own; patterns in `read` only.
//! [defaults.grants]
//! read = ["core/*"]
//!
//! # Sections are named like the plugin's file: `label-audit.wasm` reads this one.
//! [plugins.label-audit]
//! settings = { required_labels = ["app.kubernetes.io/name", "team"] }
//! # Optional: only this content loads as label-audit.
//! sha256 = "0b8d5e4c7a1f3e2d6c9b8a7f6e5d4c3b2a19f8e7d6c5b4a3928170f6e5d4c3b2"
//! # Any key of [defaults] may be set for one plugin.
//! memory_limit_mib = 128
//!
//! [plugins.label-audit.grants]
//! # Types as `apiVersion/Kind`, or `GROUP/*`, `core/*`, `*`; a plugin reads nothing it is
//! # not granted, not even what it subscribes to.
//! read = ["apps/v1/Deployment", "v1/Secret"]
//! # Writes per type, as verbs.
//! write = { "apps/v1/Deployment" = ["record-event"], "v1/Pod" = ["record-event"] }
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use kubeplug_policy::Gvk;
use serde::Deserialize;

mod grants;
mod limits;

pub use grants::{DEFAULT_SENSITIVE, GrantError, Grants};
pub use limits::{Limits, SandboxLimits};

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read the configuration file {}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML, has unknown or mistyped keys, or values no plugin could
    /// run under.
    #[error("the configuration file {} is invalid", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where.
        #[source]
        source: ParseError,
    },
}

/// What is wrong in a configuration's text; every message names the line or the key.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// Not TOML, or a key unknown or of the wrong type: the parser's error, with line and
    /// column.
    #[error(transparent)]
    Syntax(#[from] toml::de::Error),
    /// A count limit is 0.
    #[error("{section} {key} is 0; it must be at least 1")]
    LimitZero {
        /// `[defaults]` or `[plugins.NAME]`.
        section: String,
        /// The limit.
        key: &'static str,
    },
    /// A rate is not a positive number.
    #[error("{section} {key} is {value}; it must be a positive number")]
    RateNotPositive {
        /// `[defaults]` or `[plugins.NAME]`.
        section: String,
        /// The rate.
        key: &'static str,
        /// What it is.
        value: f64,
    },
    /// More memory than a plugin can address.
    #[error(
        "{section} memory_limit_mib is {mib}; at most {} (a plugin addresses 4 GiB)",
        SandboxLimits::MAX_MEMORY_LIMIT_MIB
    )]
    MemoryTooLarge {
        /// `[defaults]` or `[plugins.NAME]`.
        section: String,
        /// What it is.
        mib: u32,
    },
    /// A grants section, or `[host] sensitive`, names something that is not a grant.
    #[error("{section}")]
    Grants {
        /// `[defaults.grants]`, `[plugins.NAME.grants]` or `[host] sensitive`.
        section: String,
        /// The entry, and what is wrong with it; boxed, as a name error is large.
        #[source]
        source: Box<GrantError>,
    },
    /// A pin that is not a SHA-256 digest.
    #[error(
        "[plugins.{name}] sha256 = {digest:?} is not a SHA-256 digest (64 lowercase hex \
         digits, as `sha256sum FILE` prints)"
    )]
    Pin {
        /// The plugin.
        name: String,
        /// What it is.
        digest: String,
    },
}

impl ParseError {
    /// [`ParseError::Grants`] of `section`, for `map_err`.
    pub(crate) fn grants(section: String) -> impl FnOnce(GrantError) -> Self {
        move |source| Self::Grants {
            section,
            source: Box::new(source),
        }
    }
}

/// Why a `[defaults]` or `[plugins.NAME]` table is not one. Serde keeps only the text of a
/// `try_from` error, so each message carries the parser's error itself rather than as a
/// source.
#[derive(Debug, thiserror::Error)]
pub enum SectionError {
    /// `settings`, `grants` or `sha256` has the wrong type.
    #[error("{key}: {cause}")]
    Key {
        /// The key.
        key: &'static str,
        /// The parser's error.
        cause: toml::de::Error,
    },
    /// A limit is unknown or has the wrong type.
    #[error("{cause}; besides these limits, {section} holds {others}")]
    Limits {
        /// `[defaults]` or `a plugin's section`.
        section: &'static str,
        /// The keys it holds besides the limits.
        others: &'static str,
        /// The parser's error.
        cause: toml::de::Error,
    },
}

/// The whole file. Every section is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Host settings; flags override them.
    #[serde(default)]
    pub host: HostConfig,
    /// Limits and grants every plugin gets unless its own section says otherwise.
    #[serde(default)]
    pub defaults: DefaultsConfig,
    /// Per plugin, by the name its `describe()` returns.
    #[serde(default)]
    pub plugins: BTreeMap<String, PluginConfig>,
}

/// `[host]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    /// Address of the HTTP server.
    pub http: Option<SocketAddr>,
    /// Watch only this namespace; plugins read and write only there too.
    pub namespace: Option<String>,
    /// Types only a plugin's own exact read grant opens (default [`DEFAULT_SENSITIVE`]).
    pub sensitive: Option<Vec<String>>,
    /// Serve `/metrics` and `/plugins` over HTTPS to authenticated, authorised callers only.
    pub metrics_secure: Option<bool>,
    /// The directory of the secure endpoints' `tls.crt` and `tls.key`.
    pub metrics_cert_dir: Option<PathBuf>,
}

impl HostConfig {
    /// The sensitive types; an error names the entry that is not a type.
    pub fn sensitive_types(&self) -> Result<BTreeSet<Gvk>, ParseError> {
        match &self.sensitive {
            Some(types) => types
                .iter()
                .map(|text| {
                    grants::exact_type(text)
                        .map_err(ParseError::grants("[host] sensitive".to_owned()))
                })
                .collect(),
            None => Ok(DEFAULT_SENSITIVE
                .iter()
                .map(|text| Gvk::parse(text).expect("the defaults are types"))
                .collect()),
        }
    }
}

/// `[defaults]`: the limits every plugin gets, and `[defaults.grants]`, the grants every
/// plugin gets besides its own.
#[derive(Debug, Default, Deserialize)]
#[serde(try_from = "toml::Table")]
pub struct DefaultsConfig {
    /// The limits.
    pub limits: Limits,
    /// The grants.
    pub grants: Grants,
}

/// Written by hand, as [`PluginConfig`]'s: unknown keys are refused.
impl TryFrom<toml::Table> for DefaultsConfig {
    type Error = SectionError;

    fn try_from(mut table: toml::Table) -> Result<Self, SectionError> {
        let grants = take(&mut table, "grants")?.unwrap_or_default();
        let limits =
            toml::Value::Table(table)
                .try_into()
                .map_err(|cause| SectionError::Limits {
                    section: "[defaults]",
                    others: "`grants`",
                    cause,
                })?;
        Ok(Self { limits, grants })
    }
}

/// `[plugins.NAME]`: its settings, grants, pin, and the limits of `[defaults]` it overrides.
#[derive(Debug, Default, Deserialize)]
#[serde(try_from = "toml::Table")]
pub struct PluginConfig {
    /// The settings document handed to the plugin at load, as JSON.
    pub settings: Option<toml::Table>,
    /// What the plugin may read beyond its subscriptions, and write.
    pub grants: Grants,
    /// The SHA-256 of the only content that may load under this name (64 lowercase hex
    /// digits), as Kubewarden pins policies by digest; any other file of this name is
    /// refused.
    pub sha256: Option<String>,
    /// Limits of this plugin's own, over `[defaults]`.
    pub limits: Limits,
}

/// Written by hand rather than with `#[serde(flatten)]`, which cannot refuse unknown keys:
/// a misspelt limit must not pass silently.
impl TryFrom<toml::Table> for PluginConfig {
    type Error = SectionError;

    fn try_from(mut table: toml::Table) -> Result<Self, SectionError> {
        let settings = take(&mut table, "settings")?;
        let grants = take(&mut table, "grants")?.unwrap_or_default();
        let sha256 = take(&mut table, "sha256")?;
        let limits =
            toml::Value::Table(table)
                .try_into()
                .map_err(|cause| SectionError::Limits {
                    section: "a plugin's section",
                    others: "`settings`, `grants` and `sha256`",
                    cause,
                })?;
        Ok(Self {
            settings,
            grants,
            sha256,
            limits,
        })
    }
}

/// Removes `key` from `table` and reads it as a `T`; an error names the key.
fn take<T: serde::de::DeserializeOwned>(
    table: &mut toml::Table,
    key: &'static str,
) -> Result<Option<T>, SectionError> {
    table
        .remove(key)
        .map(toml::Value::try_into)
        .transpose()
        .map_err(|cause| SectionError::Key { key, cause })
}

impl Config {
    /// Reads `path`, or the defaults when there is none.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let Some(path) = path else {
            return Ok(Self::default());
        };
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Unreadable {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text).map_err(|source| ConfigError::Invalid {
            path: path.to_owned(),
            source,
        })
    }

    /// Parses the text of a configuration file and checks its `[defaults]`; the error says
    /// what is wrong where (the TOML parser's line and column, or the key).
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let config: Self = toml::from_str(text)?;
        config.defaults.limits.check("[defaults]")?;
        config
            .defaults
            .grants
            .to_policy()
            .map_err(ParseError::grants("[defaults.grants]".to_owned()))?;
        config.host.sensitive_types()?;
        for (name, plugin) in &config.plugins {
            plugin.limits.check(&format!("[plugins.{name}]"))?;
            plugin
                .grants
                .to_policy()
                .map_err(ParseError::grants(format!("[plugins.{name}.grants]")))?;
            if let Some(digest) = &plugin.sha256 {
                let hex = digest.len() == 64
                    && digest
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
                if !hex {
                    return Err(ParseError::Pin {
                        name: name.clone(),
                        digest: digest.clone(),
                    });
                }
            }
        }
        Ok(config)
    }
}

impl Config {
    /// The limits of the plugin named `name`: its section's keys over `[defaults]`.
    pub fn limits_of(&self, name: &str) -> SandboxLimits {
        Limits::resolve(
            self.plugins.get(name).map(|p| &p.limits),
            &self.defaults.limits,
        )
    }

    /// The grants of the plugin named `name`, as the host applies them: its section's and
    /// `[defaults.grants]` together, sensitive types only through its own exact grants, and
    /// within `namespace` (the host's, which a flag may set over `[host] namespace`). Fails
    /// only on a configuration [`parse`](Self::parse) did not check.
    pub fn grants_of(
        &self,
        name: &str,
        namespace: Option<&str>,
    ) -> Result<kubeplug_policy::Grants, ParseError> {
        grants::effective(
            name,
            self.plugins.get(name).map(|p| &p.grants),
            &self.defaults.grants,
            &self.host.sensitive_types()?,
            namespace,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_digest_must_be_sha256_hex() {
        let pinned = |digest: &str| Config::parse(&format!("[plugins.a]\nsha256 = {digest:?}\n"));
        assert!(pinned(&"0f".repeat(32)).is_ok());
        for bad in [
            "",
            "abc",
            &"0F".repeat(32),
            &"0g".repeat(32),
            &"0f".repeat(33),
        ] {
            let error = pinned(bad).unwrap_err().to_string();
            assert!(error.contains("[plugins.a] sha256"), "{bad:?}: {error}");
        }
    }

    #[test]
    fn the_documented_example_parses() {
        let example: String = include_str!("lib.rs")
            .lines()
            .skip_while(|l| !l.starts_with("//! ```toml"))
            .skip(1)
            .take_while(|l| !l.starts_with("//! ```"))
            .map(|l| format!("{}\n", l.trim_start_matches("//!").trim_start()))
            .collect();
        let config: Config = toml::from_str(&example).unwrap();
        assert_eq!(config.host.namespace.as_deref(), Some("team-a"));
        assert_eq!(config.limits_of("label-audit").memory_limit_mib, 128);
        // The example's [defaults] are the built-in values.
        assert_eq!(config.limits_of("other"), SandboxLimits::BUILT_IN);
        let audit = &config.plugins["label-audit"];
        assert!(
            audit
                .settings
                .as_ref()
                .unwrap()
                .contains_key("required_labels")
        );
        let grants = config.grants_of("label-audit", None).unwrap();
        let secrets = Gvk::new("", "v1", "Secret");
        assert!(grants.may_read(&secrets), "its own exact grant");
        assert!(
            grants.may_read(&Gvk::new("", "v1", "Pod")),
            "[defaults.grants]"
        );
        assert!(grants.may_write(
            &Gvk::new("apps", "v1", "Deployment"),
            kubeplug_policy::WriteVerb::RecordEvent
        ));
        let other = config.grants_of("other", None).unwrap();
        assert!(!other.may_read(&secrets), "core/* does not open Secrets");
        assert!(
            Gvk::parse("Deployment")
                .unwrap_err()
                .to_string()
                .contains("apiVersion/Kind")
        );
    }

    #[test]
    fn defaults_left_out_keep_their_values() {
        let config = Config::parse("[defaults]\ncall_deadline_ms = 300\n").unwrap();
        let limits = config.limits_of("any");
        assert_eq!(limits.call_deadline_ms, 300);
        assert_eq!(limits.memory_limit_mib, 64);
    }

    #[test]
    fn a_plugins_section_overrides_defaults_and_refuses_unknown_keys() {
        let config = Config::parse(
            "[defaults]\nwrite_qps = 5.0\n[plugins.a]\nwrite_qps = 50.0\nmax_reconcile_workers = 2\n",
        )
        .unwrap();
        let a = config.limits_of("a");
        assert_eq!((a.write_qps, a.max_reconcile_workers), (50.0, 2));
        assert_eq!(config.limits_of("b").write_qps, 5.0);
        let error = Config::parse("[plugins.a]\nmemory_limit_mb = 128\n")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("memory_limit_mb")
                && error.contains("`settings`, `grants` and `sha256`"),
            "{error}"
        );
        let error = Config::parse("[plugins.a]\nwrite_burst = 0\n")
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("[plugins.a] write_burst is 0"), "{error}");
    }

    #[test]
    fn defaults_no_plugin_could_run_under_are_refused_naming_the_key() {
        for (text, expected) in [
            ("memory_limit_mib = 0", "[defaults] memory_limit_mib is 0"),
            ("call_deadline_ms = 0", "[defaults] call_deadline_ms is 0"),
            ("batch_size = 0", "[defaults] batch_size is 0"),
            ("reconcile_burst = 0", "[defaults] reconcile_burst is 0"),
            (
                "reconcile_qps = 0.0",
                "[defaults] reconcile_qps is 0; it must be a positive number",
            ),
            (
                "memory_limit_mib = 4097",
                "[defaults] memory_limit_mib is 4097; at most 4096",
            ),
        ] {
            let error = Config::parse(&format!("[defaults]\n{text}\n"))
                .unwrap_err()
                .to_string();
            assert!(error.starts_with(expected), "{text}: {error}");
        }
        assert!(Config::parse("[defaults]\nmemory_limit_mib = 4096\n").is_ok());
    }

    /// The whole chain, as the binary prints it.
    fn chain(error: &dyn std::error::Error) -> String {
        let mut text = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            text = format!("{text}: {cause}");
            source = cause.source();
        }
        text
    }

    #[test]
    fn grant_errors_name_the_section_and_the_entry() {
        for (text, expected) in [
            (
                "[defaults.grants]\nread = [\"apps\"]\n",
                "[defaults.grants]: \"apps\" is not a read grant",
            ),
            (
                "[plugins.a.grants]\nwrite = { \"apps/*\" = [\"patch\"] }\n",
                "[plugins.a.grants]: `write` takes exact types (patterns are allowed in `read` \
                 only): \"apps/*\": kind",
            ),
            (
                "[host]\nsensitive = [\"Secret\"]\n",
                "[host] sensitive: \"Secret\" is not a type",
            ),
        ] {
            let error = chain(&Config::parse(text).unwrap_err());
            assert!(error.starts_with(expected), "{text}: {error}");
        }
    }

    #[test]
    fn errors_name_the_file_and_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.toml");
        let error = chain(&Config::load(Some(&missing)).unwrap_err());
        assert!(
            error.contains("missing.toml") && error.contains("No such file"),
            "{error}"
        );

        let typo = dir.path().join("typo.toml");
        std::fs::write(&typo, "[host]\nhtp = \"0.0.0.0:1\"\n").unwrap();
        let error = chain(&Config::load(Some(&typo)).unwrap_err());
        assert!(
            error.contains("typo.toml") && error.contains("htp"),
            "{error}"
        );
    }
}
