//! [`KubeSourceProvider`]: the informer factory's [`SourceProvider`] for a real cluster.

use std::sync::Arc;

use kubeplug_informer::factory::{FactoryError, InformerKey, SourceProvider};
use kubeplug_informer::selector::{FieldSelector, LabelSelector};
use kubeplug_informer::source::ListerWatcher;

use crate::config::KubeClient;
use crate::discovery::Discovery;
use crate::lister::{KubeListerWatcher, KubeSourceOptions};

/// Builds a [`KubeListerWatcher`] for each informer key. The key's resource is already
/// resolved (see [`Discovery`], reachable through [`discovery`](Self::discovery)).
///
/// Contract: selectors are checked here with the informer's parsers, so that a malformed one
/// fails the subscription that asked for it (and only that one) instead of a list call later.
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
    /// The source for `key`, its selectors checked.
    fn source(&self, key: &InformerKey) -> Result<KubeListerWatcher, FactoryError> {
        let refused = |reason: String| FactoryError::SelectorRefused {
            key: key.to_string(),
            reason,
        };
        if let Some(labels) = &key.label_selector {
            LabelSelector::parse(labels)
                .map_err(|e| refused(format!("label selector {labels:?}: {e}")))?;
        }
        if let Some(fields) = &key.field_selector {
            FieldSelector::parse(fields)
                .map_err(|e| refused(format!("field selector {fields:?}: {e}")))?;
        }
        Ok(KubeListerWatcher::new(
            self.client.clone(),
            key.resource.clone(),
            key.namespace.clone(),
            key.label_selector.clone(),
            key.field_selector.clone(),
            self.options.clone(),
        ))
    }
}

impl SourceProvider for KubeSourceProvider {
    fn lister_watcher(&self, key: &InformerKey) -> Result<Arc<dyn ListerWatcher>, FactoryError> {
        Ok(Arc::new(self.source(key)?))
    }

    /// Every type: a server that does not serve the metadata form for one answers whole
    /// objects, and the metadata-only decoder keeps their metadata alone.
    fn metadata_lister_watcher(
        &self,
        key: &InformerKey,
    ) -> Result<Option<Arc<dyn ListerWatcher>>, FactoryError> {
        Ok(Some(Arc::new(self.source(key)?.metadata_only())))
    }
}
