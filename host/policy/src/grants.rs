//! What the host's configuration allows one plugin to read beyond its subscriptions and to
//! write.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::gvk::Gvk;

/// A kind of write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WriteVerb {
    /// Server-side apply.
    Apply,
    /// Patch of the object.
    Patch,
    /// Patch of its status subresource.
    PatchStatus,
    /// Create.
    Create,
    /// Delete.
    Delete,
    /// Record a Kubernetes Event about objects of the type.
    RecordEvent,
}

impl std::fmt::Display for WriteVerb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Apply => "apply",
            Self::Patch => "patch",
            Self::PatchStatus => "patch-status",
            Self::Create => "create",
            Self::Delete => "delete",
            Self::RecordEvent => "record-event",
        })
    }
}

/// Text that is not a read grant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{text:?} is not a read grant; write apiVersion/Kind (apps/v1/Deployment), GROUP/* \
     (apps/*, core/*) or *"
)]
pub struct ReadGrantParseError {
    /// The text.
    pub text: String,
}

/// What a read grant names: one type, every type of an API group (any version), or every
/// type.
///
/// Contract: written `apps/v1/Deployment` (or `v1/Secret`), `apps/*` (`core/*` for the core
/// group) and `*`; [`parse`](Self::parse) and `Display` are inverse.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ReadGrant {
    /// Exactly this type.
    Type(Gvk),
    /// Every kind of this group, in any version; `""` is the core group.
    Group(String),
    /// Every type.
    All,
}

impl ReadGrant {
    /// `*`, `core/*`, `GROUP/*`, or a type (`v1/Secret`, `apps/v1/Deployment`).
    pub fn parse(text: &str) -> Result<Self, ReadGrantParseError> {
        match text {
            "*" => Ok(Self::All),
            "core/*" => Ok(Self::Group(String::new())),
            _ => match text.strip_suffix("/*") {
                Some(group) if !group.is_empty() && crate::names::check_group(group).is_ok() => {
                    Ok(Self::Group(group.to_owned()))
                }
                _ => Gvk::parse(text)
                    .ok()
                    .filter(|gvk| gvk.check().is_ok())
                    .map(Self::Type)
                    .ok_or_else(|| ReadGrantParseError {
                        text: text.to_owned(),
                    }),
            },
        }
    }

    /// Whether it covers `resource`.
    pub fn matches(&self, resource: &Gvk) -> bool {
        match self {
            Self::Type(exact) => exact == resource,
            Self::Group(group) => *group == resource.group,
            Self::All => true,
        }
    }
}

impl std::fmt::Display for ReadGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Type(gvk) => write!(f, "{gvk}"),
            Self::Group(group) if group.is_empty() => f.write_str("core/*"),
            Self::Group(group) => write!(f, "{group}/*"),
            Self::All => f.write_str("*"),
        }
    }
}

/// What the host's configuration allows one plugin. Never taken from the plugin itself.
///
/// Contract: the default grants nothing: the plugin reads nothing, not even what it
/// subscribes to, and writes nothing. A read is allowed if a grant of `read` covers the
/// type and it is not in `unreadable`; a write if its verb is listed for the type in `write`,
/// and, with a `namespace`, only in that namespace (or of a cluster-scoped object).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grants {
    /// What the plugin may read: types and patterns.
    #[serde(default)]
    pub read: BTreeSet<ReadGrant>,
    /// Types no grant of `read` opens: the sensitive types (`[host] sensitive`) the
    /// plugin's own section does not name exactly.
    #[serde(default)]
    pub unreadable: BTreeSet<Gvk>,
    /// Writes allowed, by resource type.
    #[serde(default)]
    pub write: BTreeMap<Gvk, BTreeSet<WriteVerb>>,
    /// The one namespace the plugin may write in (the host's `--namespace`); `None`: any.
    #[serde(default)]
    pub namespace: Option<String>,
}

impl Grants {
    /// Allows reading `resource`.
    pub fn allow_read(self, resource: Gvk) -> Self {
        self.allow_reads(ReadGrant::Type(resource))
    }

    /// Allows the reads `grant` covers.
    pub fn allow_reads(mut self, grant: ReadGrant) -> Self {
        self.read.insert(grant);
        self
    }

    /// Allows `verb` on `resource`.
    pub fn allow_write(mut self, resource: Gvk, verb: WriteVerb) -> Self {
        self.write.entry(resource).or_default().insert(verb);
        self
    }

    /// Whether reading `resource` is granted.
    pub fn may_read(&self, resource: &Gvk) -> bool {
        !self.unreadable.contains(resource) && self.read.iter().any(|g| g.matches(resource))
    }

    /// Whether `verb` on `resource` is granted (in any namespace the grants allow).
    pub fn may_write(&self, resource: &Gvk, verb: WriteVerb) -> bool {
        self.write
            .get(resource)
            .is_some_and(|verbs| verbs.contains(&verb))
    }

    /// Whether a write may go to `namespace` (`None`: a cluster-scoped object).
    pub fn may_write_in(&self, namespace: Option<&str>) -> bool {
        match (&self.namespace, namespace) {
            (Some(allowed), Some(namespace)) => allowed == namespace,
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_read_and_print_in_kebab_case() {
        let verb: WriteVerb = serde_json::from_str("\"patch-status\"").unwrap();
        assert_eq!(verb, WriteVerb::PatchStatus);
        assert_eq!(WriteVerb::RecordEvent.to_string(), "record-event");
        assert!(serde_json::from_str::<WriteVerb>("\"destroy\"").is_err());
    }

    #[test]
    fn read_grants_parse_and_print_back() {
        for text in ["v1/Secret", "apps/v1/Deployment", "apps/*", "core/*", "*"] {
            assert_eq!(ReadGrant::parse(text).unwrap().to_string(), text);
        }
        for bad in ["", "/*", "a/b/*", "v1/*/x", "apps/v1/*/x"] {
            assert!(ReadGrant::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn patterns_cover_their_group_and_sensitive_types_need_an_exact_grant() {
        let secrets = Gvk::new("", "v1", "Secret");
        let pods = Gvk::new("", "v1", "Pod");
        let deployments = Gvk::new("apps", "v1", "Deployment");
        let core = Grants::default().allow_reads(ReadGrant::Group(String::new()));
        assert!(core.may_read(&pods) && core.may_read(&secrets));
        assert!(!core.may_read(&deployments));
        let guarded = Grants {
            unreadable: BTreeSet::from([secrets.clone()]),
            ..Grants::default().allow_reads(ReadGrant::All)
        };
        assert!(guarded.may_read(&deployments));
        assert!(
            !guarded.may_read(&secrets),
            "no pattern opens a sensitive type"
        );
    }

    #[test]
    fn a_namespace_bounds_writes() {
        let grants = Grants {
            namespace: Some("team-a".into()),
            ..Grants::default()
        };
        assert!(grants.may_write_in(Some("team-a")));
        assert!(!grants.may_write_in(Some("kube-system")));
        assert!(grants.may_write_in(None));
        assert!(Grants::default().may_write_in(Some("kube-system")));
    }

    #[test]
    fn the_default_grants_nothing() {
        let pods = Gvk::new("", "v1", "Pod");
        let grants = Grants::default();
        assert!(grants.read.is_empty() && !grants.may_read(&pods));
        assert!(!grants.may_write(&pods, WriteVerb::Create));
        let grants = grants.allow_write(pods.clone(), WriteVerb::Create);
        assert!(grants.may_write(&pods, WriteVerb::Create));
        assert!(!grants.may_write(&pods, WriteVerb::Delete));
    }
}
