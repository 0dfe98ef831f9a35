//! What plugins read: the informers' caches, opened once per type at a version's load
//! through the runtime's [`CacheView`], and leased for the version's life.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use kubeplug_informer::factory::{
    FactoryError, Form, InformerKey, InformerLease, SharedInformerFactory,
};
use kubeplug_informer::informer::{CacheHandle, SharedIndexInformer};
use kubeplug_informer::resource::Resource;
use kubeplug_runtime::view::BoxFuture;
use kubeplug_runtime::{CacheView, Gvk, SubscriptionSpec, TypeRead};
use tracing::error;

use super::Resolver;
use super::starts::InformerStarts;

/// The caches one plugin version reads, each leased from the factory when the runtime opens
/// it, as [`CacheView`]'s rule says: a type read only through one subscription through that
/// subscription's informer (its selectors, its namespace and form, so it is the informer the
/// subscription is delivered from); any other within the host's namespace
/// (`--namespace`) when it has one, unselected, of whole objects when the plugin reads their
/// bodies and of metadata alone otherwise. The informers are the factory's, shared with
/// every other user of the same key; the leases go with the version, so that unloading it
/// stops the informers only it needed.
pub(crate) struct FactoryCache {
    factory: SharedInformerFactory,
    resolve: Resolver,
    /// The host's namespace: reads of namespaced types see only it, so that the host needs
    /// no more than the namespaced Role `kubeplug rbac --namespace` prints.
    namespace: Option<String>,
    /// The plugin's budget of informer starts, which its reads spend too.
    starts: Arc<InformerStarts>,
    // A std mutex: held for an insert or a copy, never across an `.await`.
    leases: Mutex<BTreeMap<Gvk, InformerLease>>,
    /// A cache its start budget did not let open, for the load to fail on.
    refusal: Mutex<Option<FactoryError>>,
}

/// Why a subscription's namespace is not one the host may watch.
pub(crate) enum Misplaced {
    /// A namespace on a cluster-scoped type.
    ClusterScoped(String),
    /// Another namespace than the host's.
    OutsideNamespace(String),
}

/// The informer key of subscription `wanted`, of the served type `served`, in `form`, on a
/// host that watches only `host_namespace` if set: the subscription's own namespace, else
/// the host's.
pub(crate) fn subscription_key(
    wanted: &SubscriptionSpec,
    served: Resource,
    form: Form,
    host_namespace: Option<&str>,
) -> Result<InformerKey, Misplaced> {
    let namespace = match (&wanted.namespace, served.namespaced) {
        (Some(namespace), false) => return Err(Misplaced::ClusterScoped(namespace.clone())),
        (_, false) => None,
        (Some(namespace), true) if host_namespace.is_some_and(|host| host != namespace) => {
            return Err(Misplaced::OutsideNamespace(namespace.clone()));
        }
        (namespace, true) => namespace
            .clone()
            .or_else(|| host_namespace.map(str::to_owned)),
    };
    Ok(InformerKey {
        resource: served,
        namespace,
        labels: wanted.labels.clone(),
        fields: wanted.fields.clone(),
        form,
    })
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
            starts,
            leases: Mutex::default(),
            refusal: Mutex::default(),
        }
    }

    fn leases(&self) -> MutexGuard<'_, BTreeMap<Gvk, InformerLease>> {
        self.leases
            .lock()
            .expect("cache leases poisoned by a panic")
    }

    /// The informers opened so far, with their types: the version waits for them to sync.
    pub(crate) fn informers(&self) -> Vec<(Gvk, SharedIndexInformer)> {
        self.leases()
            .iter()
            .map(|(resource, lease)| (resource.clone(), lease.informer().clone()))
            .collect()
    }

    /// Why a cache could not open for lack of start budget, if one could not: the version
    /// would read `not-found` where the type is served, so its load fails instead.
    pub(crate) fn take_refusal(&self) -> Option<FactoryError> {
        self.refusal
            .lock()
            .expect("cache refusal poisoned by a panic")
            .take()
    }

    /// The key of the informer that serves `read` of `served`; `None` for a subscription
    /// the load refuses anyway (a namespace it may not watch).
    fn key(&self, served: Resource, read: TypeRead<'_>) -> Option<InformerKey> {
        let form = match read.bodies {
            true => Form::Objects,
            false => Form::Metadata,
        };
        if let Some(subscription) = read.subscription {
            return subscription_key(subscription, served, form, self.namespace.as_deref()).ok();
        }
        let namespace = self.namespace.clone().filter(|_| served.namespaced);
        Some(InformerKey {
            namespace,
            form,
            ..InformerKey::all(served)
        })
    }
}

impl CacheView for FactoryCache {
    fn open<'a>(
        &'a self,
        resource: &'a Gvk,
        read: TypeRead<'a>,
    ) -> BoxFuture<'a, Option<CacheHandle>> {
        Box::pin(async move {
            // A type the cluster does not serve has no cache: reads of it answer
            // `not-found` for this version's life.
            let served = self.resolve.resolve(resource).await?;
            let key = self.key(served, read)?;
            match self.factory.lease_gated(key, &*self.starts) {
                Ok(lease) => {
                    let cache = lease.informer().cache_handle();
                    self.leases().insert(resource.clone(), lease);
                    Some(cache)
                }
                Err(refused @ FactoryError::StartRefused { .. }) => {
                    *self
                        .refusal
                        .lock()
                        .expect("cache refusal poisoned by a panic") = Some(refused);
                    None
                }
                Err(error) => {
                    error!(%resource, %error, "cannot start an informer for plugin reads");
                    None
                }
            }
        })
    }

    fn namespaced(&self, resource: &Gvk) -> Option<bool> {
        self.resolve
            .cached(resource)
            .map(|served| served.namespaced)
    }
}
