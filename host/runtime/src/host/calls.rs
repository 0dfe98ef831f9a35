//! [`HostCalls`]: the host functions called without a guest, for the fuzz checks and tests
//! (feature `testing`; the binary never builds it).

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::Grants;
use crate::PluginLimits;
use crate::bindings::kubeplug::plugin::{cache as cache_wit, cluster as cluster_wit};
use crate::bindings::wit;
use crate::grants::Policy;
use crate::gvk::Gvk;
use crate::state::{HostContext, StoreState};
use crate::view::{CacheView, ClusterWriter, ObjectRef, TypeRead};

/// The `cache` and `cluster` host functions, called as a guest calls them but without one:
/// for the fuzz checks and tests of their argument handling. Every call goes through the
/// same code as a guest's (grants, bounds, errors, counters); answers are reduced to what a
/// check compares, object keys in the order given.
///
/// Contract: a call that would trap the guest (a host bug, never an argument) panics.
///
/// ```
/// use std::sync::Arc;
/// use kubeplug_runtime::{Grants, Gvk, HostCalls, IndexerMap, NoCluster};
///
/// let pods = Gvk::new("", "v1", "Pod");
/// let mut calls = HostCalls::new("probe", [pods.clone()], &Grants::default().allow_read(pods),
///     Arc::new(IndexerMap::default()), Arc::new(NoCluster));
/// let refused = calls.get(&Gvk::new("", "v1", "Secret"), "ns/a").unwrap_err();
/// assert_eq!(refused.kind, "not-permitted");
/// assert_eq!(calls.denied(), 1);
/// ```
pub struct HostCalls {
    state: StoreState,
    /// Runs the asynchronous calls as the host's runtime does (with its timer: a write is
    /// bounded by the call's deadline).
    runtime: tokio::runtime::Runtime,
}

/// An ordinary error answer of a host call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCallError {
    /// The WIT `error` case: `not-found`, `not-permitted`, `invalid-input`, `conflict` or
    /// `unavailable`.
    pub kind: &'static str,
    /// Its message.
    pub message: String,
}

impl From<wit::Error> for HostCallError {
    fn from(error: wit::Error) -> Self {
        let (kind, message) = match error {
            wit::Error::NotFound(m) => ("not-found", m),
            wit::Error::NotPermitted(m) => ("not-permitted", m),
            wit::Error::InvalidInput(m) => ("invalid-input", m),
            wit::Error::Conflict(m) => ("conflict", m),
            wit::Error::Unavailable(m) => ("unavailable", m),
        };
        Self { kind, message }
    }
}

/// The answer of a call, mapped by `f`; panics on a trap.
fn answer<T, U>(
    result: wasmtime::Result<Result<T, wit::Error>>,
    f: impl FnOnce(T) -> U,
) -> Result<U, HostCallError> {
    match result {
        Ok(answer) => answer.map(f).map_err(HostCallError::from),
        Err(trap) => panic!("a host call trapped: {trap:#}"),
    }
}

fn keys_of(objects: Vec<wit::CachedObject>) -> Vec<String> {
    objects.iter().map(|o| key_of(&o.meta)).collect()
}

fn key_of(meta: &wit::ObjectMeta) -> String {
    match &meta.namespace {
        Some(ns) => format!("{ns}/{}", meta.name),
        None => meta.name.clone(),
    }
}

impl HostCalls {
    /// Calls on behalf of plugin `plugin`, which declares it reads `reads` whole, allowed `grants`,
    /// reading `cache` (no declared indexes: only `namespace`) and writing to `writer`.
    pub fn new(
        plugin: &str,
        reads: impl IntoIterator<Item = Gvk>,
        grants: &Grants,
        cache: Arc<dyn CacheView>,
        writer: Arc<dyn ClusterWriter>,
    ) -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a current-thread runtime builds");
        let reads: BTreeSet<Gvk> = reads.into_iter().collect();
        // Opened as the runtime opens a loaded plugin's, each type read whole.
        let whole = TypeRead {
            bodies: true,
            subscription: None,
        };
        let caches = reads
            .iter()
            .filter_map(|resource| {
                let cache = runtime.block_on(cache.open(resource, whole))?;
                Some((resource.clone(), cache))
            })
            .collect();
        let host = HostContext {
            caches,
            ..HostContext::new(
                plugin.into(),
                Policy::reading_whole(grants, reads),
                cache,
                writer,
                &PluginLimits::default(),
            )
        };
        Self {
            state: StoreState::new(Arc::new(host), &PluginLimits::default()),
            runtime,
        }
    }

    /// Starts a call's clock, as the runtime does for each call into a plugin: its writes
    /// wait at most the default call deadline for the cluster.
    fn arm(&mut self) {
        self.state.deadline = std::time::Instant::now() + PluginLimits::default().call_deadline;
    }

    /// Calls refused by the grants so far.
    pub fn denied(&self) -> u64 {
        self.state.host.stats.snapshot().denied
    }

    /// `cache.get`: the key of the object found.
    pub fn get(&mut self, resource: &Gvk, key: &str) -> Result<Option<String>, HostCallError> {
        let result = cache_wit::Host::get(&mut self.state, resource.into(), key.to_owned());
        answer(result, |o| o.map(|o| key_of(&o.meta)))
    }

    /// `cache.list`: the keys of the objects listed.
    pub fn list(
        &mut self,
        resource: &Gvk,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, HostCallError> {
        let result = cache_wit::Host::list(
            &mut self.state,
            resource.into(),
            namespace.map(str::to_owned),
            label_selector.map(str::to_owned),
        );
        answer(result, keys_of)
    }

    /// `cache.keys`.
    pub fn keys(
        &mut self,
        resource: &Gvk,
        namespace: Option<&str>,
    ) -> Result<Vec<String>, HostCallError> {
        let result = cache_wit::Host::keys(
            &mut self.state,
            resource.into(),
            namespace.map(str::to_owned),
        );
        answer(result, |keys| keys)
    }

    /// `cache.by-index`: the keys of the objects found.
    pub fn by_index(
        &mut self,
        resource: &Gvk,
        index: &str,
        value: &str,
    ) -> Result<Vec<String>, HostCallError> {
        let result = cache_wit::Host::by_index(
            &mut self.state,
            resource.into(),
            index.to_owned(),
            value.to_owned(),
        );
        answer(result, keys_of)
    }

    /// `cache.index-values`.
    pub fn index_values(
        &mut self,
        resource: &Gvk,
        index: &str,
    ) -> Result<Vec<String>, HostCallError> {
        let result =
            cache_wit::Host::index_values(&mut self.state, resource.into(), index.to_owned());
        answer(result, |values| values)
    }

    /// `cluster.create`: what the writer returned.
    pub fn create(
        &mut self,
        resource: &Gvk,
        namespace: Option<&str>,
        json: &str,
    ) -> Result<String, HostCallError> {
        self.arm();
        let call = cluster_wit::Host::create(
            &mut self.state,
            resource.into(),
            namespace.map(str::to_owned),
            json.to_owned(),
        );
        answer(self.runtime.block_on(call), |stored| stored)
    }

    /// `cluster.delete`.
    pub fn delete(&mut self, target: &ObjectRef) -> Result<(), HostCallError> {
        let target = wit::ObjectRef {
            resource_type: (&target.resource).into(),
            namespace: target.namespace.clone(),
            name: target.name.clone(),
        };
        self.arm();
        let call = cluster_wit::Host::delete(&mut self.state, target);
        answer(self.runtime.block_on(call), |()| ())
    }
}
