//! SharedInformerFactory: one informer per (resource, namespace, selectors), shared by every
//! handler that asks for it, started on the first subscription and stopped after the last.
//!
//! An informer whose users all read metadata alone lists and watches metadata alone, when
//! the provider can serve it ([`SourceProvider::metadata_lister_watcher`]): the first user
//! that needs bodies switches it to whole objects, and the last one's going switches it
//! back ([`SharedIndexInformer::switch_source`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tracing::{info, warn};

use crate::informer::{HandlerOptions, SharedIndexInformer};
use crate::listener::{ListenerId, ListenerReceiver};
use crate::object::{Object, ObjectDecoder};
use crate::reflector::{ReflectorConfig, WatchErrorHandler};
use crate::resource::Resource;
use crate::selector::{FieldSelector, LabelSelector};
use crate::source::ListerWatcher;

/// What identifies a shared informer: N handlers with the same key cost one watch.
///
/// Its selectors are parsed values, kept in canonical form (requirements sorted and
/// deduplicated), so `a=b,c=d` and `c=d, a=b` name one informer and nobody parses a
/// selector twice; an empty selector selects everything.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InformerKey {
    /// The resource watched.
    pub resource: Resource,
    /// Only this namespace; `None` for all namespaces (or a cluster-scoped resource).
    pub namespace: Option<String>,
    /// Only objects whose labels match.
    pub labels: LabelSelector,
    /// Only objects whose fields match.
    pub fields: FieldSelector,
}

impl InformerKey {
    /// Every object of `resource`.
    pub fn all(resource: Resource) -> Self {
        Self {
            resource,
            namespace: None,
            labels: LabelSelector::everything(),
            fields: FieldSelector::everything(),
        }
    }
}

impl fmt::Display for InformerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.resource)?;
        if let Some(ns) = &self.namespace {
            write!(f, " in {ns}")?;
        }
        if !self.labels.is_empty() {
            write!(f, " labels {:?}", self.labels.to_string())?;
        }
        if !self.fields.is_empty() {
            write!(f, " fields {:?}", self.fields.to_string())?;
        }
        Ok(())
    }
}

/// Why a subscription could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FactoryError {
    /// The source refuses a selector of the key: it does not parse there, or names a field
    /// the type does not select on. The asker's mistake: asking again gets the same answer.
    #[error("cannot watch {key}: {reason}")]
    SelectorRefused {
        /// What was asked for.
        key: String,
        /// Why the source refused it.
        reason: String,
    },
    /// The source could not serve this key (unknown resource, ...).
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

    /// The decoder for objects of `resource`.
    fn decoder(&self, resource: &Resource) -> ObjectDecoder {
        ObjectDecoder::new(resource.clone())
    }

    /// A source for `key` that sends each object's metadata alone (`PartialObjectMetadata`),
    /// for informers whose users read nothing else; `None` (the default) when the provider
    /// cannot serve that form, and such informers get whole objects.
    fn metadata_lister_watcher(
        &self,
        key: &InformerKey,
    ) -> Result<Option<Arc<dyn ListerWatcher>>, FactoryError> {
        let _ = key;
        Ok(None)
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
    /// Running informers and how many [`Subscription`]s and [`InformerLease`]s use each.
    /// Invariant: every count is at least one; an informer is removed and shut down, under
    /// this lock, when its count drops to zero.
    informers: Mutex<HashMap<InformerKey, Shared>>,
}

struct Shared {
    informer: SharedIndexInformer,
    users: usize,
    /// Users that need objects' bodies. Invariant: while nonzero the informer's source sends
    /// whole objects; while zero it sends metadata alone if the provider can.
    body_users: usize,
}

/// Whether a user of an informer needs objects' bodies (JSON, projections, path indexes) or
/// reads their metadata alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// The whole object.
    Bodies,
    /// Metadata alone: a metadata-only informer does.
    Metadata,
}

impl FactoryInner {
    fn informers(&self) -> MutexGuard<'_, HashMap<InformerKey, Shared>> {
        self.informers
            .lock()
            .expect("informer factory lock poisoned by a panic")
    }

    /// The informer for `key`, created and started if needed, with one more user; switched to
    /// whole objects if this user is the first that needs them.
    fn acquire(
        &self,
        key: &InformerKey,
        needs: Needs,
    ) -> Result<SharedIndexInformer, FactoryError> {
        let mut informers = self.informers();
        let bodies = usize::from(needs == Needs::Bodies);
        if let Some(shared) = informers.get_mut(key) {
            if bodies == 1 && shared.body_users == 0 && shared.informer.is_metadata_only() {
                let source = self.provider.lister_watcher(key)?;
                info!(informer = %key, "a user needs whole objects; listing them again");
                let decoder = self.provider.decoder(&key.resource);
                shared.informer.switch_source(source, decoder);
            }
            shared.users += 1;
            shared.body_users += bodies;
            return Ok(shared.informer.clone());
        }
        let metadata_source = match needs {
            Needs::Metadata => self.provider.metadata_lister_watcher(key)?,
            Needs::Bodies => None,
        };
        let decoder = self.provider.decoder(&key.resource);
        let (source, decoder) = match metadata_source {
            Some(source) => (source, decoder.metadata_only()),
            None => (self.provider.lister_watcher(key)?, decoder),
        };
        let informer = SharedIndexInformer::with_error_handler(
            source,
            decoder,
            self.config.clone(),
            self.on_error.clone(),
        );
        informer.start();
        informers.insert(
            key.clone(),
            Shared {
                informer: informer.clone(),
                users: 1,
                body_users: bodies,
            },
        );
        Ok(informer)
    }

    /// One user less; the last one stops the informer, and the last that needed bodies
    /// switches it to metadata alone when the provider can serve that.
    fn release(&self, key: &InformerKey, needs: Needs) {
        let mut informers = self.informers();
        let Some(shared) = informers.get_mut(key) else {
            return;
        };
        shared.users -= 1;
        if needs == Needs::Bodies {
            shared.body_users -= 1;
        }
        if shared.users == 0 {
            let shared = informers.remove(key).expect("present");
            shared.informer.shutdown();
            return;
        }
        if shared.body_users > 0 || shared.informer.is_metadata_only() {
            return;
        }
        match self.provider.metadata_lister_watcher(key) {
            Ok(Some(source)) => {
                info!(informer = %key, "no user needs whole objects; listing metadata alone");
                let decoder = self.provider.decoder(&key.resource).metadata_only();
                shared.informer.switch_source(source, decoder);
            }
            Ok(None) => {}
            // It served before: keep the whole objects rather than fail.
            Err(error) => warn!(informer = %key, %error, "cannot switch to metadata alone"),
        }
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
        let needs = match options.metadata_only {
            true => Needs::Metadata,
            false => Needs::Bodies,
        };
        let informer = self.inner.acquire(&key, needs)?;
        let receiver = informer.add_handler(options);
        Ok(Subscription {
            registration: Registration {
                listener: receiver.id(),
                informer,
                key,
                needs,
                factory: Arc::downgrade(&self.inner),
            },
            receiver,
        })
    }

    /// Keeps the informer for `key` running (creating it if needed) without a handler: for
    /// readers of its cache, who need what `needs` says. Must be called within a tokio
    /// runtime.
    pub fn lease(&self, key: InformerKey, needs: Needs) -> Result<InformerLease, FactoryError> {
        let informer = self.inner.acquire(&key, needs)?;
        Ok(InformerLease {
            informer,
            key,
            needs,
            factory: Arc::downgrade(&self.inner),
        })
    }

    /// The running informer for `key`, if any.
    pub fn informer(&self, key: &InformerKey) -> Option<SharedIndexInformer> {
        self.inner.informers().get(key).map(|s| s.informer.clone())
    }

    /// Keys of the running informers.
    pub fn keys(&self) -> Vec<InformerKey> {
        self.inner.informers().keys().cloned().collect()
    }

    /// Waits until every informer running now has synced.
    pub async fn wait_for_cache_sync(&self) {
        let informers: Vec<_> = self
            .inner
            .informers()
            .values()
            .map(|s| s.informer.clone())
            .collect();
        for informer in informers {
            informer.wait_for_sync().await;
        }
    }

    /// Stops every informer.
    pub async fn shutdown(&self) {
        let informers: Vec<_> = self
            .inner
            .informers()
            .drain()
            .map(|(_, s)| s.informer)
            .collect();
        for informer in informers {
            informer.stop().await;
        }
    }
}

/// A handler on a shared informer: its notifications (through `Deref` to the
/// [`ListenerReceiver`]) and its [`Registration`]. Dropping it unregisters the handler, and
/// stops the informer if nobody else uses it; [`into_parts`](Self::into_parts) hands the
/// receiver to whoever drives the handler and the registration to whoever owns it.
#[derive(Debug)]
pub struct Subscription {
    // Drops first: the handler is unregistered before its receiver goes.
    registration: Registration,
    receiver: ListenerReceiver,
}

impl Subscription {
    /// The shared informer.
    pub fn informer(&self) -> &SharedIndexInformer {
        self.registration.informer()
    }

    /// What this subscription watches.
    pub fn key(&self) -> &InformerKey {
        self.registration.key()
    }

    /// The registration and the receiver apart. The handler stays registered as long as the
    /// registration lives: keep it as long as the receiver is read.
    pub fn into_parts(self) -> (Registration, ListenerReceiver) {
        (self.registration, self.receiver)
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

/// A handler's registration on a shared informer, without its receiver (see
/// [`Subscription::into_parts`]). Dropping it unregisters the handler, and stops the informer
/// if nobody else uses it.
pub struct Registration {
    listener: ListenerId,
    informer: SharedIndexInformer,
    key: InformerKey,
    needs: Needs,
    factory: Weak<FactoryInner>,
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("key", &self.key)
            .field("listener", &self.listener)
            .finish()
    }
}

impl Registration {
    /// The shared informer.
    pub fn informer(&self) -> &SharedIndexInformer {
        &self.informer
    }

    /// What the handler watches.
    pub fn key(&self) -> &InformerKey {
        &self.key
    }

    /// Replays the cached objects `filter` picks to this handler; see
    /// [`SharedIndexInformer::replay`].
    pub fn replay(&self, filter: &dyn Fn(&Object) -> bool) -> usize {
        self.informer.replay(self.listener, filter)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.informer.remove_handler(self.listener);
        if let Some(factory) = self.factory.upgrade() {
            factory.release(&self.key, self.needs);
        }
    }
}

/// Keeps an informer running for readers of its cache; see [`SharedInformerFactory::lease`].
pub struct InformerLease {
    informer: SharedIndexInformer,
    key: InformerKey,
    needs: Needs,
    factory: Weak<FactoryInner>,
}

impl fmt::Debug for InformerLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("InformerLease").field(&self.key).finish()
    }
}

impl InformerLease {
    /// The shared informer.
    pub fn informer(&self) -> &SharedIndexInformer {
        &self.informer
    }

    /// What the informer watches.
    pub fn key(&self) -> &InformerKey {
        &self.key
    }
}

impl Drop for InformerLease {
    fn drop(&mut self) {
        if let Some(factory) = self.factory.upgrade() {
            factory.release(&self.key, self.needs);
        }
    }
}
