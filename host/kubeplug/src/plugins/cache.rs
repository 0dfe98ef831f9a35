//! What plugins read: the informers' caches, one per resource type, through the runtime's
//! [`CacheView`].

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use kubeplug_informer::factory::{InformerKey, InformerLease, SharedInformerFactory};
use kubeplug_informer::indexer::Indexer;
use kubeplug_runtime::{CacheView, Gvk};
use tracing::error;

use super::Resolver;

/// The caches plugins read: one informer per resource type, kept running by a lease while
/// any plugin may read it. Subscriptions without a namespace or selectors share these
/// informers, so such a plugin reads exactly what its events come from.
pub(crate) struct FactoryCache {
    factory: SharedInformerFactory,
    resolve: Resolver,
    // A std mutex: lookups are short and never span an `.await`.
    leases: Mutex<BTreeMap<Gvk, InformerLease>>,
}

impl FactoryCache {
    pub(crate) fn new(factory: SharedInformerFactory, resolve: Resolver) -> Self {
        Self {
            factory,
            resolve,
            leases: Mutex::default(),
        }
    }

    fn leases(&self) -> MutexGuard<'_, BTreeMap<Gvk, InformerLease>> {
        self.leases
            .lock()
            .expect("cache leases poisoned by a panic")
    }
}

impl CacheView for FactoryCache {
    fn namespaced(&self, resource: &Gvk) -> Option<bool> {
        self.resolve
            .cached(resource)
            .map(|served| served.namespaced)
    }

    fn indexer(&self, resource: &Gvk) -> Option<Indexer> {
        let mut leases = self.leases();
        if let Some(lease) = leases.get(resource) {
            return Some(lease.informer().indexer().clone());
        }
        let served = self.resolve.cached(resource)?;
        match self.factory.lease(InformerKey::all(served)) {
            Ok(lease) => {
                let indexer = lease.informer().indexer().clone();
                leases.insert(resource.clone(), lease);
                Some(indexer)
            }
            Err(error) => {
                error!(%resource, %error, "cannot start an informer for plugin reads");
                None
            }
        }
    }
}
