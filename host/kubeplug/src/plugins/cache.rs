//! What plugins read: the informers' caches, one per resource type, through the runtime's
//! [`CacheView`].

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use kubeplug_informer::factory::{InformerKey, InformerLease, Needs, SharedInformerFactory};
use kubeplug_informer::indexer::Indexer;
use kubeplug_informer::informer::SharedIndexInformer;
use kubeplug_runtime::{CacheView, Gvk};
use tracing::error;

use super::Resolver;

/// The caches plugins read: one informer per resource type, within the host's namespace
/// (`--namespace`) when it has one, kept running by a lease while any plugin may read it.
/// Subscriptions without selectors, in the host's namespace, share these informers, so
/// such a plugin reads exactly what its events come from.
pub(crate) struct FactoryCache {
    factory: SharedInformerFactory,
    resolve: Resolver,
    /// The host's namespace: reads of namespaced types see only it, so that the host needs
    /// no more than the namespaced Role `kubeplug rbac --namespace` prints.
    namespace: Option<String>,
    // A std mutex: lookups are short and never span an `.await`.
    leases: Mutex<BTreeMap<Gvk, InformerLease>>,
}

impl FactoryCache {
    pub(crate) fn new(
        factory: SharedInformerFactory,
        resolve: Resolver,
        namespace: Option<String>,
    ) -> Self {
        Self {
            factory,
            resolve,
            namespace,
            leases: Mutex::default(),
        }
    }

    fn leases(&self) -> MutexGuard<'_, BTreeMap<Gvk, InformerLease>> {
        self.leases
            .lock()
            .expect("cache leases poisoned by a panic")
    }

    /// The informer that serves reads of `resource`, started if needed; `None` when the
    /// type is not known to be served (resolve it first) or its informer cannot start.
    pub(crate) fn informer(&self, resource: &Gvk) -> Option<SharedIndexInformer> {
        let mut leases = self.leases();
        if let Some(lease) = leases.get(resource) {
            return Some(lease.informer().clone());
        }
        let served = self.resolve.cached(resource)?;
        let namespace = if served.namespaced {
            self.namespace.clone()
        } else {
            None
        };
        let key = InformerKey {
            namespace,
            ..InformerKey::all(served)
        };
        // Whole objects: this informer serves every plugin's reads and path indexes of
        // the type, and which of them need bodies is not counted per informer.
        match self.factory.lease(key, Needs::Bodies) {
            Ok(lease) => {
                let informer = lease.informer().clone();
                leases.insert(resource.clone(), lease);
                Some(informer)
            }
            Err(error) => {
                error!(%resource, %error, "cannot start an informer for plugin reads");
                None
            }
        }
    }
}

impl CacheView for FactoryCache {
    fn namespaced(&self, resource: &Gvk) -> Option<bool> {
        self.resolve
            .cached(resource)
            .map(|served| served.namespaced)
    }

    fn indexer(&self, resource: &Gvk) -> Option<Indexer> {
        self.informer(resource)
            .map(|informer| informer.indexer().clone())
    }

    fn has_synced(&self, resource: &Gvk) -> bool {
        self.leases()
            .get(resource)
            .is_some_and(|lease| lease.informer().has_synced())
    }
}
