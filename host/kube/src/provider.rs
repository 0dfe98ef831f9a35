//! [`KubeSourceProvider`]: the informer factory's [`SourceProvider`] for a real cluster.

use std::sync::Arc;

use kubeplug_informer::factory::{FactoryError, InformerKey, SourceProvider};
use kubeplug_informer::source::ListerWatcher;

use crate::config::KubeClient;
use crate::discovery::Discovery;
use crate::lister::{KubeListerWatcher, KubeSourceOptions};

/// Builds a [`KubeListerWatcher`] for each informer key. The key's resource is already
/// resolved (see [`Discovery`], reachable through [`discovery`](Self::discovery)).
///
/// A key's selectors were parsed when the key was made; the server may still refuse one
/// (a field its type does not select on), which the Reflector reports as the list's error.
#[derive(Debug, Clone)]
pub struct KubeSourceProvider {
    client: KubeClient,
    discovery: Discovery,
    options: KubeSourceOptions,
}

impl KubeSourceProvider {
    /// A provider over `client`.
    pub fn new(client: KubeClient, options: KubeSourceOptions) -> Self {
        Self {
            discovery: Discovery::new(client.clone()),
            client,
            options,
        }
    }

    /// The discovery cache shared by this provider.
    pub fn discovery(&self) -> &Discovery {
        &self.discovery
    }

    /// The client.
    pub fn client(&self) -> &KubeClient {
        &self.client
    }
}

impl KubeSourceProvider {
    /// The source for `key`.
    fn source(&self, key: &InformerKey) -> KubeListerWatcher {
        KubeListerWatcher::new(
            self.client.clone(),
            key.resource.clone(),
            key.namespace.clone(),
            self.options.clone(),
        )
        .selecting(&key.labels, &key.fields)
    }
}

impl SourceProvider for KubeSourceProvider {
    fn lister_watcher(&self, key: &InformerKey) -> Result<Arc<dyn ListerWatcher>, FactoryError> {
        Ok(Arc::new(self.source(key)))
    }

    /// Every type: a server that does not serve the metadata form for one answers whole
    /// objects, and the metadata-only decoder keeps their metadata alone.
    fn metadata_lister_watcher(
        &self,
        key: &InformerKey,
    ) -> Result<Option<Arc<dyn ListerWatcher>>, FactoryError> {
        Ok(Some(Arc::new(self.source(key).metadata_only())))
    }
}
