//! Grants as the configuration writes them: `[plugins.NAME.grants]`, `[defaults.grants]`
//! for every plugin, and `[host] sensitive`, the types only a plugin's own exact grant opens.

use std::collections::{BTreeMap, BTreeSet};

use kubeplug_policy::{Gvk, GvkParseError, NameError, ReadGrant, ReadGrantParseError, WriteVerb};
use serde::Deserialize;

use crate::ParseError;

/// Why an entry of a grants section, or of `[host] sensitive`, is not a grant; each names
/// the entry.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// A `read` entry that is no read grant.
    #[error(transparent)]
    Read(#[from] ReadGrantParseError),
    /// A type not written `apiVersion/Kind`.
    #[error(transparent)]
    NotAType(#[from] GvkParseError),
    /// A type with a group, version or kind that is not a valid name.
    #[error("{text:?}")]
    InvalidName {
        /// The type as written.
        text: String,
        /// The part that is not valid, and why.
        #[source]
        source: NameError,
    },
    /// A `write` key that is not one type; boxed, as it holds [`NotAType`](Self::NotAType)
    /// or [`InvalidName`](Self::InvalidName).
    #[error("`write` takes exact types (patterns are allowed in `read` only)")]
    WriteNotAType(#[source] Box<GrantError>),
}

/// One section's grants, types written `apiVersion/Kind` (`v1/Secret`,
/// `apps/v1/Deployment`); in `read` also `GROUP/*` (`apps/*`, `core/*`) and `*`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grants {
    /// What the plugin may read: the types it subscribes to, reads and indexes.
    #[serde(default)]
    pub read: Vec<String>,
    /// Writes per type: `apply`, `patch`, `patch-status`, `create`, `delete`, `record-event`.
    #[serde(default)]
    pub write: BTreeMap<String, Vec<WriteVerb>>,
}

/// The types only a plugin's own exact read grant opens, unless `[host] sensitive` says
/// otherwise: Secrets.
pub const DEFAULT_SENSITIVE: &[&str] = &["v1/Secret"];

impl Grants {
    /// The policy's form; an error names the entry that does not parse.
    pub fn to_policy(&self) -> Result<kubeplug_policy::Grants, GrantError> {
        let mut grants = kubeplug_policy::Grants::default();
        for grant in &self.read {
            grants = grants.allow_reads(ReadGrant::parse(grant)?);
        }
        for (resource, verbs) in &self.write {
            let gvk = exact_type(resource).map_err(|e| GrantError::WriteNotAType(Box::new(e)))?;
            for verb in verbs {
                grants = grants.allow_write(gvk.clone(), *verb);
            }
        }
        Ok(grants)
    }

    /// The types `read` names exactly (no pattern).
    fn exact_reads(&self) -> BTreeSet<Gvk> {
        self.read
            .iter()
            .filter_map(|text| match ReadGrant::parse(text) {
                Ok(ReadGrant::Type(gvk)) => Some(gvk),
                _ => None,
            })
            .collect()
    }
}

/// `text` as one resource type whose parts are valid names.
pub(crate) fn exact_type(text: &str) -> Result<Gvk, GrantError> {
    let gvk = Gvk::parse(text)?;
    gvk.check().map_err(|source| GrantError::InvalidName {
        text: text.to_owned(),
        source,
    })?;
    Ok(gvk)
}

/// The grants of the plugin named `name` as the host applies them: its own section's
/// (`own`) and `[defaults.grants]` together, except that a type of `sensitive` is readable
/// only when `own` names it exactly (never through `[defaults.grants]` or a pattern), and
/// writes go only to `namespace` when the host watches one. An error names the section.
pub(crate) fn effective(
    name: &str,
    own: Option<&Grants>,
    defaults: &Grants,
    sensitive: &BTreeSet<Gvk>,
    namespace: Option<&str>,
) -> Result<kubeplug_policy::Grants, ParseError> {
    let mut grants = defaults
        .to_policy()
        .map_err(ParseError::grants("[defaults.grants]".to_owned()))?;
    let opened = match own {
        Some(own) => {
            let own_grants = own
                .to_policy()
                .map_err(ParseError::grants(format!("[plugins.{name}.grants]")))?;
            grants.read.extend(own_grants.read);
            for (resource, verbs) in own_grants.write {
                grants.write.entry(resource).or_default().extend(verbs);
            }
            own.exact_reads()
        }
        None => BTreeSet::new(),
    };
    grants.unreadable = sensitive.difference(&opened).cloned().collect();
    grants.namespace = namespace.map(str::to_owned);
    Ok(grants)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(read: &[&str]) -> Grants {
        Grants {
            read: read.iter().map(|r| (*r).to_owned()).collect(),
            ..Grants::default()
        }
    }

    #[test]
    fn secrets_open_only_to_an_exact_grant_of_the_plugins_own() {
        let secrets = Gvk::new("", "v1", "Secret");
        let pods = Gvk::new("", "v1", "Pod");
        let sensitive = BTreeSet::from([secrets.clone()]);
        let read = |own: Option<&Grants>, defaults: &Grants| {
            effective("a", own, defaults, &sensitive, None)
                .unwrap()
                .may_read(&secrets)
        };
        assert!(read(Some(&section(&["v1/Secret"])), &Grants::default()));
        assert!(!read(Some(&section(&["core/*"])), &Grants::default()));
        assert!(!read(Some(&section(&["*"])), &Grants::default()));
        assert!(
            !read(None, &section(&["v1/Secret"])),
            "not through [defaults.grants]"
        );
        let grants = effective("a", None, &section(&["core/*"]), &sensitive, None).unwrap();
        assert!(
            grants.may_read(&pods),
            "[defaults.grants] patterns apply to the rest"
        );
    }

    #[test]
    fn patterns_are_refused_in_writes_and_entries_are_checked() {
        let mut grants = Grants::default();
        grants
            .write
            .insert("apps/*".to_owned(), vec![WriteVerb::Patch]);
        let error = grants.to_policy().unwrap_err();
        assert!(
            matches!(&error, GrantError::WriteNotAType(cause)
                if matches!(**cause, GrantError::InvalidName { .. })),
            "{error:?}"
        );
        assert!(
            error
                .to_string()
                .contains("patterns are allowed in `read` only"),
            "{error}"
        );
        let error = section(&["v1/namespaces/x/secrets/Secret"])
            .to_policy()
            .unwrap_err();
        assert!(matches!(error, GrantError::Read(_)), "{error:?}");
        assert!(error.to_string().contains("is not a read grant"), "{error}");
    }
}
