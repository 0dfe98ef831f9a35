//! The keys a plugin's `map-event` names, checked before they reach its work queue: the
//! plugin is not trusted, and a key becomes a reconcile call, a cache read's key, a log
//! field and a line of the delivery log.

use std::time::Duration;

use kubeplug_policy::names::{NameError, check_name, check_namespace, quoted};
use tokio::time::Instant;

use crate::description::{Description, KeyMapping};
use crate::gvk::Gvk;
use crate::view::ObjectRef;

/// Most keys one `map-event` call may name; the rest are dropped and counted. A change
/// concerns a handful of objects (a ConfigMap the Deployments that mount it); 100,000 keys
/// from one call made 4.2 million reconciles in 25 s.
pub const MAX_MAPPED_KEYS: usize = 1000;

/// Longest object name a key may carry: Kubernetes' longest (a DNS subdomain).
const MAX_NAME: usize = 253;

/// How often, at most, a feeder logs the keys it dropped (with how many since its last).
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Why a key that `map-event` named is dropped. Host-written: plugin text in it is quoted.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KeyRefused {
    /// Its type is none of those the plugin enqueues keys of.
    #[error(
        "its type {} is none the plugin subscribes to or maps owners to",
        quoted(&.0.to_string())
    )]
    TypeNotEnqueued(Gvk),
    /// Its name is longer than a Kubernetes name may be.
    #[error("its name is {0} bytes; at most {MAX_NAME}")]
    NameTooLong(usize),
    /// Its name is not one safe path segment.
    #[error(transparent)]
    InvalidName(NameError),
    /// Its namespace is not a DNS label.
    #[error(transparent)]
    InvalidNamespace(NameError),
    /// Its type is namespaced and it names no namespace.
    #[error("{0} is namespaced; it has none")]
    NamespaceMissing(Gvk),
    /// Its type is cluster-scoped and it names a namespace.
    #[error("{resource} is cluster-scoped; it names namespace {}", quoted(.namespace))]
    NamespaceNotAllowed {
        /// The type.
        resource: Gvk,
        /// The namespace it named.
        namespace: String,
    },
}

/// `key` as the plugin may reconcile it, or why not. A key's type must be one the plugin
/// enqueues keys of (a subscription's, or an owner type it maps to; group and kind compared,
/// the declared version kept), its name one safe path segment of at most 253 bytes, and its
/// namespace a DNS label, present exactly when the type is namespaced (as far as the cluster
/// says). `namespaced` answers for a type.
pub(crate) fn check_key(
    description: &Description,
    namespaced: impl Fn(&Gvk) -> Option<bool>,
    key: ObjectRef,
) -> Result<ObjectRef, KeyRefused> {
    let Some(resource) = enqueued_types(description)
        .find(|t| t.group == key.resource.group && t.kind == key.resource.kind)
    else {
        return Err(KeyRefused::TypeNotEnqueued(key.resource));
    };
    if key.name.len() > MAX_NAME {
        return Err(KeyRefused::NameTooLong(key.name.len()));
    }
    check_name(&key.name).map_err(KeyRefused::InvalidName)?;
    if let Some(namespace) = &key.namespace {
        check_namespace(namespace).map_err(KeyRefused::InvalidNamespace)?;
    }
    match (namespaced(resource), key.namespace) {
        (Some(true), None) => Err(KeyRefused::NamespaceMissing(resource.clone())),
        (Some(false), Some(namespace)) => Err(KeyRefused::NamespaceNotAllowed {
            resource: resource.clone(),
            namespace,
        }),
        (_, namespace) => Ok(ObjectRef {
            resource: resource.clone(),
            namespace,
            name: key.name,
        }),
    }
}

fn enqueued_types(description: &Description) -> impl Iterator<Item = &Gvk> {
    description.subscriptions.iter().flat_map(|s| {
        let owner = match &s.enqueue {
            KeyMapping::Owner(owner) => Some(owner),
            KeyMapping::OwnKey | KeyMapping::Computed => None,
        };
        std::iter::once(&s.resource).chain(owner)
    })
}

/// What one feeder dropped, for one log line every [`LOG_EVERY`] at most: a plugin that
/// names bad keys on every event must not flood the host's log.
#[derive(Debug, Default)]
pub(crate) struct DroppedKeys {
    /// Dropped since the last line.
    since_logged: u64,
    /// When the last line was written.
    logged_at: Option<Instant>,
}

impl DroppedKeys {
    /// Counts `n` dropped keys, the last for `why`; logs them if a line is due.
    pub(crate) fn dropped(&mut self, plugin: &str, n: u64, why: &str) {
        self.since_logged += n;
        let now = Instant::now();
        if self.logged_at.is_some_and(|at| now < at + LOG_EVERY) {
            return;
        }
        tracing::warn!(
            plugin,
            dropped = self.since_logged,
            last_reason = why,
            "map-event named keys the plugin may not reconcile; they are dropped"
        );
        self.since_logged = 0;
        self.logged_at = Some(now);
    }
}
