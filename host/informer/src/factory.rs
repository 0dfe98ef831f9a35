//! SharedInformerFactory: one informer per (resource, namespace, selectors, form), shared by
//! every handler that asks for it, started on the first subscription and stopped after the
//! last.
//!
//! The form is part of the key, as controller-runtime keeps metadata informers apart from
//! whole-object ones: readers of metadata alone share an informer that lists and watches
//! `PartialObjectMetadata` when the provider can serve it
//! ([`SourceProvider::metadata_lister_watcher`]), and whole-object readers share another. A
//! type read both ways at once costs two watches, and no informer ever changes its form, so
//! one user's needs never relist another's cache.
//!
//! Informer churn is bounded twice over. An informer nobody uses any more lingers for a
//! while ([`SharedInformerFactory::with_linger`]) before it stops, so that a user that comes
//! back (a hot-swapped version, or one swapped back) finds it warm instead of costing a new
//! LIST and WATCH. And a caller may pass a [`StartGate`], asked under the factory's lock
//! before each informer it would start (never for one running or lingering), to bound and
//! count the starts it causes.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

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
    /// What its cache holds of each object.
    pub form: Form,
}

/// What an informer's cache holds of each object: part of its key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Form {
    /// The whole object: its JSON, projections and path indexes.
    #[default]
    Objects,
    /// Its metadata alone (`PartialObjectMetadata`), for users that read nothing else; a
    /// provider that cannot serve this form serves whole objects under
    /// [`Form::Objects`]'s key instead.
    Metadata,
}

impl InformerKey {
    /// Every object of `resource`, whole.
    pub fn all(resource: Resource) -> Self {
        Self {
            resource,
            namespace: None,
            labels: LabelSelector::everything(),
            fields: FieldSelector::everything(),
            form: Form::Objects,
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
        if self.form == Form::Metadata {
            write!(f, " metadata")?;
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
    /// The caller's [`StartGate`] refused to start a new informer for this key.
    #[error("cannot watch {key}: no new informer may start for this caller now")]
    StartRefused {
        /// What was asked for.
        key: String,
    },
}

/// Asked, under the factory's lock, before an informer is started for a caller: only when
/// no informer for the key runs or lingers, and after its source was built, so that
/// `true` means the informer starts. A gate counts and bounds the starts one caller causes
/// (a token bucket per plugin, in the binary); it must not block.
pub trait StartGate: Send + Sync {
    /// Whether an informer for `key` may start now.
    fn admit(&self, key: &InformerKey) -> bool;
}

/// The gate of callers whose starts are not bounded.
struct Unbounded;

impl StartGate for Unbounded {
    fn admit(&self, _key: &InformerKey) -> bool {
        true
    }
}

/// Builds the [`ListerWatcher`] (and decoder) behind an informer key.
pub trait SourceProvider: Send + Sync + 'static {
    /// The list/watch source for `key`, already narrowed to its namespace and selectors.
    fn lister_watcher(&self, key: &InformerKey) -> Result<Arc<dyn ListerWatcher>, FactoryError>;

    /// The decoder for objects of `resource`.
    fn decoder(&self, resource: &Resource) -> ObjectDecoder {
        ObjectDecoder::new(resource.clone())
    }

    /// A source for `key` (of [`Form::Metadata`]) that sends each object's metadata alone
    /// (`PartialObjectMetadata`); `None` (the default) when the provider cannot serve that
    /// form, and its users share the informer of whole objects.
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
    /// How long an informer nobody uses keeps running; zero: it stops at once.
    linger: Duration,
    /// Running informers and how many [`Subscription`]s and [`InformerLease`]s use each.
    /// Invariant: an informer whose count is zero lingers: it is removed and shut down,
    /// under this lock, when its linger ends with the count still zero.
    informers: Mutex<HashMap<InformerKey, Shared>>,
}

struct Shared {
    informer: SharedIndexInformer,
    users: usize,
    /// Bumped each time the count drops to zero: a linger ends the informer only if no
    /// user came and went since it began.
    idle_since: u64,
}

impl FactoryInner {
    fn informers(&self) -> MutexGuard<'_, HashMap<InformerKey, Shared>> {
        self.informers
            .lock()
            .expect("informer factory lock poisoned by a panic")
    }

    /// The informer for `key`, created and started if `gate` admits it, with one more user,
    /// and the key it is shared under: of [`Form::Objects`] when the provider serves no
    /// metadata.
    fn acquire(
        &self,
        mut key: InformerKey,
        gate: &dyn StartGate,
    ) -> Result<(InformerKey, SharedIndexInformer), FactoryError> {
        let mut informers = self.informers();
        if let Some(shared) = informers.get_mut(&key) {
            shared.users += 1;
            return Ok((key, shared.informer.clone()));
        }
        let decoder = self.provider.decoder(&key.resource);
        let (source, decoder) = match key.form {
            Form::Metadata => match self.provider.metadata_lister_watcher(&key)? {
                Some(source) => (source, decoder.metadata_only()),
                None => {
                    key.form = Form::Objects;
                    drop(informers);
                    return self.acquire(key, gate);
                }
            },
            Form::Objects => (self.provider.lister_watcher(&key)?, decoder),
        };
        if !gate.admit(&key) {
            return Err(FactoryError::StartRefused {
                key: key.to_string(),
            });
        }
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
                idle_since: 0,
            },
        );
        Ok((key, informer))
    }

    /// One user less; after the last, the informer lingers, then stops unless a user came
    /// back. Without a tokio runtime to wait on, it stops at once.
    fn release(self: &Arc<Self>, key: &InformerKey) {
        let mut informers = self.informers();
        let Some(shared) = informers.get_mut(key) else {
            return;
        };
        shared.users -= 1;
        if shared.users > 0 {
            return;
        }
        let runtime = tokio::runtime::Handle::try_current();
        let (false, Ok(runtime)) = (self.linger.is_zero(), runtime) else {
            let shared = informers.remove(key).expect("present");
            shared.informer.shutdown();
            return;
        };
        shared.idle_since += 1;
        let idle_since = shared.idle_since;
        let factory = Arc::downgrade(self);
        let key = key.clone();
        let linger = self.linger;
        runtime.spawn(async move {
            tokio::time::sleep(linger).await;
            if let Some(factory) = factory.upgrade() {
                factory.end_linger(&key, idle_since);
            }
        });
    }

    /// Stops the informer for `key` if nobody used it since it went idle at `idle_since`.
    fn end_linger(&self, key: &InformerKey, idle_since: u64) {
        let mut informers = self.informers();
        let idle = informers
            .get(key)
            .is_some_and(|shared| shared.users == 0 && shared.idle_since == idle_since);
        if idle {
            let shared = informers.remove(key).expect("present");
            shared.informer.shutdown();
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
                linger: Duration::ZERO,
                informers: Mutex::default(),
            }),
        }
    }

    /// Keeps an informer nobody uses running for `linger` before it stops (by default it
    /// stops at once), so that a user that comes back meanwhile finds it warm. Call before
    /// the first subscription.
    ///
    /// # Panics
    ///
    /// If the factory has been cloned: the setting belongs to every clone.
    pub fn with_linger(mut self, linger: Duration) -> Self {
        Arc::get_mut(&mut self.inner)
            .expect("with_linger before the factory is cloned")
            .linger = linger;
        self
    }

    /// Registers a handler on the informer for `key`, creating and starting it if needed.
    /// Must be called within a tokio runtime.
    pub fn subscribe(
        &self,
        key: InformerKey,
        options: HandlerOptions,
    ) -> Result<Subscription, FactoryError> {
        self.subscribe_gated(key, options, &Unbounded)
    }

    /// [`subscribe`](Self::subscribe), starting a new informer only if `gate` admits it
    /// ([`FactoryError::StartRefused`] otherwise).
    pub fn subscribe_gated(
        &self,
        key: InformerKey,
        options: HandlerOptions,
        gate: &dyn StartGate,
    ) -> Result<Subscription, FactoryError> {
        let (key, informer) = self.inner.acquire(key, gate)?;
        let receiver = informer.add_handler(options);
        Ok(Subscription {
            registration: Registration {
                listener: receiver.id(),
                informer,
                key,
                factory: Arc::downgrade(&self.inner),
            },
            receiver,
        })
    }

    /// Keeps the informer for `key` running (creating it if needed) without a handler: for
    /// readers of its cache. Must be called within a tokio runtime.
    pub fn lease(&self, key: InformerKey) -> Result<InformerLease, FactoryError> {
        self.lease_gated(key, &Unbounded)
    }

    /// [`lease`](Self::lease), starting a new informer only if `gate` admits it
    /// ([`FactoryError::StartRefused`] otherwise).
    pub fn lease_gated(
        &self,
        key: InformerKey,
        gate: &dyn StartGate,
    ) -> Result<InformerLease, FactoryError> {
        let (key, informer) = self.inner.acquire(key, gate)?;
        Ok(InformerLease {
            informer,
            key,
            factory: Arc::downgrade(&self.inner),
        })
    }

    /// The running informer for `key`, if any.
    pub fn informer(&self, key: &InformerKey) -> Option<SharedIndexInformer> {
        self.inner.informers().get(key).map(|s| s.informer.clone())
    }

    /// Keys of the running informers, lingering ones too.
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

    /// What this subscription watches: the key asked for, of [`Form::Objects`] when the
    /// provider serves no metadata.
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
            factory.release(&self.key);
        }
    }
}

/// Keeps an informer running for readers of its cache; see [`SharedInformerFactory::lease`].
pub struct InformerLease {
    informer: SharedIndexInformer,
    key: InformerKey,
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
            factory.release(&self.key);
        }
    }
}
