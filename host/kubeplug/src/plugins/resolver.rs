//! How plugin resource types become served resources: discovery on a real cluster, the kind
//! registry on the local one.

use std::sync::Arc;

use kubeplug_informer::resource::Resource;
use kubeplug_runtime::Gvk;
use kubeplug_runtime::view::BoxFuture;

/// Maps a plugin's resource types to served resources (discovery, or the local registry).
pub(crate) type Resolver = Arc<dyn Resolve>;

/// How a [`Resolver`] answers. Contract: [`resolve`](Self::resolve) may ask the cluster
/// (discovery); [`cached`](Self::cached) answers at once from what is already known, for
/// [`FactoryCache`](super::FactoryCache)'s `namespaced`, which a plugin's synchronous host
/// call reaches. A synchronous map (the local registry) is both, through the blanket
/// implementation for closures.
pub(crate) trait Resolve: Send + Sync {
    /// The served resource of `gvk`, asking the cluster if needed.
    fn resolve<'a>(&'a self, gvk: &'a Gvk) -> BoxFuture<'a, Option<Resource>>;
    /// The served resource of `gvk` if already known.
    fn cached(&self, gvk: &Gvk) -> Option<Resource>;
}

impl<F: Fn(&Gvk) -> Option<Resource> + Send + Sync> Resolve for F {
    fn resolve<'a>(&'a self, gvk: &'a Gvk) -> BoxFuture<'a, Option<Resource>> {
        Box::pin(std::future::ready(self(gvk)))
    }

    fn cached(&self, gvk: &Gvk) -> Option<Resource> {
        self(gvk)
    }
}
