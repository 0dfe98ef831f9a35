//! SharedInformerFactory: one informer per (resource, namespace, selectors), shared by every
//! handler that asks for it, started on the first subscription and stopped after the last.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::informer::{HandlerOptions, SharedIndexInformer};
use crate::listener::ListenerReceiver;
use crate::object::ObjectDecoder;
use crate::reflector::{ReflectorConfig, WatchErrorHandler};
use crate::resource::Resource;
use crate::source::ListerWatcher;

/// What identifies a shared informer: N handlers with the same key cost one watch.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InformerKey {
    /// The resource watched.
    pub resource: Resource,
    /// Only this namespace; `None` for all namespaces (or a cluster-scoped resource).
    pub namespace: Option<String>,
    /// A label selector in Kubernetes syntax.
    pub label_selector: Option<String>,
    /// A field selector in Kubernetes syntax.
    pub field_selector: Option<String>,
}

impl InformerKey {
    /// Every object of `resource`.
    pub fn all(resource: Resource) -> Self {
        Self {
            resource,
            namespace: None,
            label_selector: None,
            field_selector: None,
        }
    }
}

impl fmt::Display for InformerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.resource)?;
        if let Some(ns) = &self.namespace {
            write!(f, " in {ns}")?;
        }
        if let Some(labels) = &self.label_selector {
            write!(f, " labels {labels:?}")?;
        }
        if let Some(fields) = &self.field_selector {
            write!(f, " fields {fields:?}")?;
        }
        Ok(())
    }
}

/// Why a subscription could not be made.
#[derive(Debug, thiserror::Error)]
pub enum FactoryError {
    /// The source could not serve this key (unknown resource, bad selector, ...).
    #[error("cannot watch {key}: {reason}")]
    SourceUnavailable {
        /// What was asked for.
        key: String,
        /// Why not.
        reason: String,
    },
}

/// Builds the [`ListerWatcher`] (and decoder) behind an informer key.
pub trait SourceProvider: Send + Sync + 'static {
    /// The list/watch source for `key`, already narrowed to its namespace and selectors.
    fn lister_watcher(&self, key: &InformerKey) -> Result<Arc<dyn ListerWatcher>, FactoryError>;

    /// The decoder for objects of `resource`; by default drops managedFields.
    fn decoder(&self, resource: &Resource) -> ObjectDecoder {
        ObjectDecoder::new(resource.clone())
    }
}

/// Creates, shares and stops informers. Cheap to clone.
#[derive(Clone)]
pub struct SharedInformerFactory {
    inner: Arc<FactoryInner>,
}

struct FactoryInner {
    provider: Arc<dyn SourceProvider>,
    config: ReflectorConfig,
    on_error: Option<WatchErrorHandler>,
    /// Running informers. Invariant: every informer here has at least one handler, except
    /// between its creation and the first `add_handler`, both under this lock.
    informers: Mutex<HashMap<InformerKey, SharedIndexInformer>>,
}

impl FactoryInner {
    fn informers(&self) -> MutexGuard<'_, HashMap<InformerKey, SharedIndexInformer>> {
        self.informers
            .lock()
            .expect("informer factory lock poisoned by a panic")
    }
}

impl fmt::Debug for SharedInformerFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedInformerFactory")
            .field("informers", &self.inner.informers().len())
            .finish()
    }
}

impl SharedInformerFactory {
    /// A factory whose informers get their sources from `provider`.
    pub fn new(provider: Arc<dyn SourceProvider>, config: ReflectorConfig) -> Self {
        Self::with_error_handler(provider, config, None)
    }

    /// Like [`new`](Self::new), with a hook that sees every informer's errors.
    pub fn with_error_handler(
        provider: Arc<dyn SourceProvider>,
        config: ReflectorConfig,
        on_error: Option<WatchErrorHandler>,
    ) -> Self {
        Self {
            inner: Arc::new(FactoryInner {
                provider,
                config,
                on_error,
                informers: Mutex::default(),
            }),
        }
    }

    /// Registers a handler on the informer for `key`, creating and starting it if needed.
    /// Must be called within a tokio runtime.
    pub fn subscribe(
        &self,
        key: InformerKey,
        options: HandlerOptions,
    ) -> Result<Subscription, FactoryError> {
        let mut informers = self.inner.informers();
        let informer = match informers.get(&key) {
            Some(informer) => informer.clone(),
            None => {
                let source = self.inner.provider.lister_watcher(&key)?;
                let decoder = self.inner.provider.decoder(&key.resource);
                let informer = SharedIndexInformer::with_error_handler(
                    source,
                    decoder,
                    self.inner.config.clone(),
                    self.inner.on_error.clone(),
                );
                informer.start();
                informers.insert(key.clone(), informer.clone());
                informer
            }
        };
        let receiver = informer.add_handler(options);
        Ok(Subscription {
            receiver,
            informer,
            key,
            factory: Arc::downgrade(&self.inner),
        })
    }

    /// The running informer for `key`, if any.
    pub fn informer(&self, key: &InformerKey) -> Option<SharedIndexInformer> {
        self.inner.informers().get(key).cloned()
    }

    /// Keys of the running informers.
    pub fn keys(&self) -> Vec<InformerKey> {
        self.inner.informers().keys().cloned().collect()
    }

    /// Waits until every informer running now has synced.
    pub async fn wait_for_cache_sync(&self) {
        let informers: Vec<_> = self.inner.informers().values().cloned().collect();
        for informer in informers {
            informer.wait_for_sync().await;
        }
    }

    /// Stops every informer.
    pub async fn shutdown(&self) {
        let informers: Vec<_> = self.inner.informers().drain().map(|(_, i)| i).collect();
        for informer in informers {
            informer.stop().await;
        }
    }
}

/// A handler's registration on a shared informer: its notifications (through `Deref` to the
/// [`ListenerReceiver`]) and the informer's cache. Dropping it unregisters the handler, and
/// stops the informer if it was the last.
pub struct Subscription {
    receiver: ListenerReceiver,
    informer: SharedIndexInformer,
    key: InformerKey,
    factory: Weak<FactoryInner>,
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription")
            .field("key", &self.key)
            .field("receiver", &self.receiver)
            .finish()
    }
}

impl Subscription {
    /// The shared informer.
    pub fn informer(&self) -> &SharedIndexInformer {
        &self.informer
    }

    /// What this subscription watches.
    pub fn key(&self) -> &InformerKey {
        &self.key
    }
}

impl std::ops::Deref for Subscription {
    type Target = ListenerReceiver;
    fn deref(&self) -> &ListenerReceiver {
        &self.receiver
    }
}

impl std::ops::DerefMut for Subscription {
    fn deref_mut(&mut self) -> &mut ListenerReceiver {
        &mut self.receiver
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let Some(factory) = self.factory.upgrade() else {
            self.informer.remove_handler(self.receiver.id());
            return;
        };
        let mut informers = factory.informers();
        self.informer.remove_handler(self.receiver.id());
        if self.informer.handler_count() == 0 {
            informers.remove(&self.key);
            self.informer.shutdown();
        }
    }
}
