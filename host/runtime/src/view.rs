//! What the runtime needs from the rest of the host, as traits: the shared cache and the
//! cluster. The binary implements them over the informers and kube; tests over fakes.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;

use kubeplug_informer::indexer::Indexer;
use kubeplug_policy::WriteVerb;

use crate::gvk::Gvk;

/// Read access to the informer caches a plugin may see.
///
/// Contract: `indexer(r)` returns the cache holding `r` as this plugin sees it (the
/// informer of its subscription to `r`, or of its granted read), or `None` when no informer
/// serves `r`. The runtime checks grants before asking, and adds the plugin's declared
/// indexes to the returned indexer at load. `has_synced(r)` says whether that cache holds
/// the first complete list: before, a read answers `unavailable`, never an empty result.
/// `reads_bodies_of` comes first, once, before any other call.
pub trait CacheView: Send + Sync + 'static {
    /// Told once at load, after `describe` and before any other call: the types whose
    /// bodies the plugin reads ([`Description::body_types`]: JSON, projections, `path`
    /// indexes). Of every other type it reads metadata alone, which a view may then serve
    /// from a cache of metadata only. Views whose caches are fixed keep the default.
    ///
    /// [`Description::body_types`]: crate::description::Description::body_types
    fn reads_bodies_of(&self, _types: &BTreeSet<Gvk>) {}

    /// The cache for `resource`.
    fn indexer(&self, resource: &Gvk) -> Option<Indexer>;

    /// Whether the cache for `resource` has synced; caches that are always complete (fixed
    /// maps, tests) keep the default.
    fn has_synced(&self, _resource: &Gvk) -> bool {
        true
    }

    /// Whether objects of `resource` live in namespaces; `None` when unknown, and then
    /// callers assume they do (most types are namespaced).
    fn namespaced(&self, _resource: &Gvk) -> Option<bool> {
        None
    }
}

/// A fixed map from resource type to cache: enough for tests, tools and a binary whose
/// informers are known before the plugin loads.
#[derive(Debug, Clone, Default)]
pub struct IndexerMap(pub BTreeMap<Gvk, Indexer>);

impl CacheView for IndexerMap {
    fn indexer(&self, resource: &Gvk) -> Option<Indexer> {
        self.0.get(resource).cloned()
    }
}

/// A reference to one object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    /// Its resource type.
    pub resource: Gvk,
    /// Its namespace; `None` when cluster-scoped.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

impl ObjectRef {
    /// `namespace/name`, or `name`.
    pub fn key(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        }
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.resource, self.key())
    }
}

/// How a patch document is interpreted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// JSON merge patch.
    Merge,
    /// JSON patch.
    Json,
}

/// What a patch changes: the object, or its `status` subresource, the only subresource a
/// plugin may patch. Decided once, where the plugin's call is checked, so that no writer
/// matches the subresource's name again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchedPart {
    /// The object (`patch`).
    Object,
    /// Its `status` subresource (`patch-status`).
    Status,
}

impl PatchedPart {
    /// The subresource in the request path, if any.
    pub fn subresource(self) -> Option<&'static str> {
        match self {
            Self::Object => None,
            Self::Status => Some("status"),
        }
    }

    /// The verb a grant names for it.
    pub fn verb(self) -> WriteVerb {
        match self {
            Self::Object => WriteVerb::Patch,
            Self::Status => WriteVerb::PatchStatus,
        }
    }
}

/// A Kubernetes Event's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventSeverity {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

/// One write a plugin asked for, already allowed by its grants.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Server-side apply with `field_manager`.
    Apply {
        /// The object.
        target: ObjectRef,
        /// The manifest.
        json: String,
        /// Take over conflicting fields.
        force: bool,
        /// `kubeplug/<plugin>`.
        field_manager: String,
    },
    /// A patch, of the object or of its status.
    Patch {
        /// The object.
        target: ObjectRef,
        /// Merge or JSON patch.
        patch_type: PatchType,
        /// The patch document.
        patch: String,
        /// The object, or its `status` subresource.
        part: PatchedPart,
    },
    /// A creation.
    Create {
        /// Its type.
        resource: Gvk,
        /// Its namespace.
        namespace: Option<String>,
        /// The manifest.
        json: String,
    },
    /// A deletion.
    Delete {
        /// The object.
        target: ObjectRef,
    },
    /// A Kubernetes Event about `regarding`.
    RecordEvent {
        /// The object concerned.
        regarding: ObjectRef,
        /// Its uid, from the plugin's cache when the plugin reads its type and the object
        /// is cached: `kubectl describe` finds an object's Events by uid.
        regarding_uid: Option<String>,
        /// Normal or Warning.
        severity: EventSeverity,
        /// CamelCase reason.
        reason: String,
        /// For humans.
        message: String,
        /// `kubeplug/<plugin>`.
        reporting_controller: String,
    },
}

/// Why a write failed; mapped to the WIT `error` the plugin sees.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// The object or type does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The server refused the request as malformed.
    #[error("invalid: {0}")]
    Invalid(String),
    /// 409.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The server refused (RBAC) or is unreachable.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// A boxed future, as trait objects need.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where plugin writes go: the API server, the local cluster, or a test's recorder.
///
/// Contract: `write` is called only for writes the plugin's grants allow; it returns the
/// object as stored (JSON), or `""` for deletions and events.
pub trait ClusterWriter: Send + Sync + 'static {
    /// Performs `write` for `plugin`.
    fn write<'a>(
        &'a self,
        plugin: &'a str,
        write: Write,
    ) -> BoxFuture<'a, Result<String, WriteError>>;
}

/// A writer for hosts without a cluster: every write is `unavailable`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCluster;

impl ClusterWriter for NoCluster {
    fn write<'a>(
        &'a self,
        _plugin: &'a str,
        write: Write,
    ) -> BoxFuture<'a, Result<String, WriteError>> {
        Box::pin(async move {
            Err(WriteError::Unavailable(format!(
                "this host has no cluster to write to ({write:?})"
            )))
        })
    }
}
