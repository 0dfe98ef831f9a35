//! What plugins read: the informers' caches, one per resource type, through the runtime's
//! [`CacheView`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use kubeplug_informer::factory::{
    FactoryError, Form, InformerKey, InformerLease, SharedInformerFactory,
};
use kubeplug_informer::indexer::Indexer;
use kubeplug_informer::informer::SharedIndexInformer;
use kubeplug_runtime::{CacheView, Gvk};
use tracing::error;

use super::Resolver;
use super::starts::InformerStarts;

/// The caches plugins read: one informer per resource type, within the host's namespace
/// (`--namespace`) when it has one, kept running by a lease while any plugin may read it.
/// Subscriptions without selectors, in the host's namespace, share these informers, so
/// such a plugin reads exactly what its events come from.
///
/// Each plugin version has its own, so that its leases say what it needs: whole objects
/// of the types whose bodies it reads, metadata alone of the rest. The informers are the
/// factory's, shared with every other plugin that reads the same form.
pub(crate) struct FactoryCache {
    factory: SharedInformerFactory,
    resolve: Resolver,
    /// The host's namespace: reads of namespaced types see only it, so that the host needs
    /// no more than the namespaced Role `kubeplug rbac --namespace` prints.
    namespace: Option<String>,
    /// The types whose bodies the plugin reads, once the runtime has said; until then,
    /// every lease is for whole objects.
    bodies: OnceLock<BTreeSet<Gvk>>,
    // A std mutex: lookups are short and never span an `.await`.
    leases: Mutex<BTreeMap<Gvk, InformerLease>>,
    /// The plugin's budget of informer starts, which its reads spend too.
    starts: Arc<InformerStarts>,
}

impl FactoryCache {
    pub(crate) fn new(
        factory: SharedInformerFactory,
        resolve: Resolver,
        namespace: Option<String>,
        starts: Arc<InformerStarts>,
    ) -> Self {
        Self {
            factory,
            resolve,
            namespace,
            bodies: OnceLock::new(),
            leases: Mutex::default(),
            starts,
        }
    }

    fn leases(&self) -> MutexGuard<'_, BTreeMap<Gvk, InformerLease>> {
        self.leases
            .lock()
            .expect("cache leases poisoned by a panic")
    }

    fn reads_bodies(&self, resource: &Gvk) -> bool {
        self.bodies
            .get()
            .is_none_or(|bodies| bodies.contains(resource))
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
        let form = match self.reads_bodies(resource) {
            true => Form::Objects,
            false => Form::Metadata,
        };
        let key = InformerKey {
            namespace,
            form,
            ..InformerKey::all(served)
        };
        match self.factory.lease_gated(key, &*self.starts) {
            Ok(lease) => {
                let informer = lease.informer().clone();
                leases.insert(resource.clone(), lease);
                Some(informer)
            }
            // Counted in the plugin's refused starts; a log line per read would let the
            // plugin flood the log.
            Err(FactoryError::StartRefused { .. }) => None,
            Err(error) => {
                error!(%resource, %error, "cannot start an informer for plugin reads");
                None
            }
        }
    }
}

impl CacheView for FactoryCache {
    fn reads_bodies_of(&self, types: &BTreeSet<Gvk>) {
        if self.bodies.set(types.clone()).is_err() {
            error!(
                "the runtime declared a plugin's body types twice; the first declaration stands"
            );
        }
    }

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
