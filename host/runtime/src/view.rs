//! What the runtime needs from the rest of the host, as traits: the shared cache and the
//! cluster. The binary implements them over the informers and kube; tests over fakes.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use kubeplug_informer::indexer::Indexer;
use kubeplug_informer::informer::CacheHandle;
use kubeplug_policy::WriteVerb;

use crate::description::SubscriptionSpec;
use crate::gvk::Gvk;

/// What a plugin version reads of one type, as its description says, for
/// [`CacheView::open`].
#[derive(Debug, Clone, Copy)]
pub struct TypeRead<'a> {
    /// It reads the objects' bodies ([`Description::body_types`]: JSON, projections, `path`
    /// indexes); otherwise metadata alone, which a view may serve from a cache of metadata.
    ///
    /// [`Description::body_types`]: crate::description::Description::body_types
    pub bodies: bool,
    /// The type is read only through this subscription: it is the plugin's one subscription
    /// of the type, and the plugin declares no read and no index of it.
    pub subscription: Option<&'a SubscriptionSpec>,
}

/// The informer caches a plugin version may read.
///
/// Contract, one rule: a type the plugin reads only through one subscription
/// ([`TypeRead::subscription`]) is read through that subscription's informer, so that a
/// selected subscription reads only what it selects (controller-runtime's per-object cache
/// selectors); a type it also declares a read or an index of, or subscribes to more than
/// once, is read through the type's unselected informer (within the host's namespace).
/// The runtime opens each type the plugin may read once, at load, after `describe` and its
/// grants were checked, and keeps the handles for the version's life; `open` answers
/// `None` when no informer serves the type, and reads of it answer `not-found`. The runtime
/// adds the plugin's declared indexes to the opened caches. A handle's
/// [`has_synced`](CacheHandle::has_synced) says whether the cache holds the first complete
/// list: before, a read answers `unavailable`, never an empty result.
pub trait CacheView: Send + Sync + 'static {
    /// The cache of `resource` as this plugin version reads it (`read`).
    fn open<'a>(
        &'a self,
        resource: &'a Gvk,
        read: TypeRead<'a>,
    ) -> BoxFuture<'a, Option<CacheHandle>>;

    /// Whether objects of `resource` live in namespaces; `None` when unknown, and then
    /// callers assume they do (most types are namespaced).
    fn namespaced(&self, _resource: &Gvk) -> Option<bool> {
        None
    }
}

/// A fixed map from resource type to cache, complete from the start: enough for tests,
/// tools and a binary whose informers are known before the plugin loads. It serves every
/// read of a type from its one cache, whatever the plugin's selectors.
#[derive(Debug, Clone, Default)]
pub struct IndexerMap(pub BTreeMap<Gvk, Indexer>);

impl CacheView for IndexerMap {
    fn open<'a>(
        &'a self,
        resource: &'a Gvk,
        _read: TypeRead<'a>,
    ) -> BoxFuture<'a, Option<CacheHandle>> {
        let handle = self.0.get(resource).cloned().map(CacheHandle::complete);
        Box::pin(std::future::ready(handle))
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
