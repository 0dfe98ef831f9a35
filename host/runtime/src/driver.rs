//! Which version of a plugin the drivers call, and how the host swaps it (hot reload) or stops
//! it without touching the listeners the drivers read.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use kubeplug_informer::listener::ListenerReceiver;
use tokio::sync::watch;

use crate::description::Delivery;
use crate::fault::Breaker;
use crate::plugin::{Plugin, PluginInstance};

/// Why a driver could not start, or a plugin could not be swapped in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriverError {
    /// The plugin described another delivery mode.
    #[error("plugin {plugin} uses {actual:?} delivery, not {expected}")]
    WrongMode {
        /// The plugin.
        plugin: String,
        /// What the driver is for.
        expected: &'static str,
        /// What the plugin asked for.
        actual: Delivery,
    },
    /// One receiver per subscription is needed, in the order of the description.
    #[error(
        "plugin {plugin} has {subscriptions} subscriptions but {receivers} receivers were given"
    )]
    ReceiverCount {
        /// The plugin.
        plugin: String,
        /// Its subscriptions.
        subscriptions: usize,
        /// Receivers given.
        receivers: usize,
    },
    /// The new version subscribes or delivers differently, so it cannot inherit the old
    /// version's listeners: it needs registrations of its own.
    #[error(
        "plugin {plugin}: the new version changes its {what}, so it cannot take over the running listeners"
    )]
    Incompatible {
        /// The plugin.
        plugin: String,
        /// `subscriptions` or `delivery`.
        what: &'static str,
    },
    /// The control was stopped before the driver started.
    #[error("the plugin's deliveries were stopped before its driver started")]
    Stopped,
}

/// Both drivers take one receiver per subscription, in the description's order.
pub(crate) fn check_receivers(
    plugin: &Plugin,
    receivers: &[ListenerReceiver],
) -> Result<(), DriverError> {
    let subscriptions = plugin.description().subscriptions.len();
    if receivers.len() != subscriptions {
        return Err(DriverError::ReceiverCount {
            plugin: plugin.name().to_owned(),
            subscriptions,
            receivers: receivers.len(),
        });
    }
    Ok(())
}

/// The keys this replica delivers when replicas share a plugin's work (`kubeplug run
/// --sharding`): a notification or a work-queue key outside the share is dropped, not
/// delivered. [`all`](Self::all) when the replica does all the work.
#[derive(Clone)]
pub struct KeyShare(Option<Arc<OwnsKey>>);

/// Whether a key is in a [`KeyShare`].
type OwnsKey = dyn Fn(&str) -> bool + Send + Sync;

impl KeyShare {
    /// Every key.
    pub fn all() -> Self {
        Self(None)
    }

    /// The keys `owns` says yes to (`namespace/name`, or `name` for cluster-scoped objects).
    pub fn only(owns: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        Self(Some(Arc::new(owns)))
    }

    /// Whether `key` is delivered.
    pub fn owns(&self, key: &str) -> bool {
        self.0.as_ref().is_none_or(|owns| owns(key))
    }

    /// Whether every key is delivered: drivers then skip the checks.
    pub(crate) fn is_all(&self) -> bool {
        self.0.is_none()
    }

    /// Whether the work-queue key `target` is delivered; its text is built only when a
    /// share is in force.
    pub(crate) fn owns_target(&self, target: &crate::ObjectRef) -> bool {
        self.0.as_ref().is_none_or(|owns| owns(&target.key()))
    }
}

impl fmt::Debug for KeyShare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            None => "KeyShare::all",
            Some(_) => "KeyShare::only",
        })
    }
}

/// The share the drivers deliver, numbered, and the calls in flight under each number.
/// One writer ([`DriverControl::share`]); drivers read it at the start of each call.
#[derive(Debug)]
struct Shares {
    current: Mutex<(u64, KeyShare)>,
    in_flight: Mutex<BTreeMap<u64, usize>>,
    /// The oldest share number a call in flight started under; `u64::MAX` when none is.
    oldest: watch::Sender<u64>,
}

impl Default for Shares {
    fn default() -> Self {
        Self {
            current: Mutex::new((0, KeyShare::all())),
            in_flight: Mutex::default(),
            oldest: watch::Sender::new(u64::MAX),
        }
    }
}

impl Shares {
    fn in_flight(&self) -> MutexGuard<'_, BTreeMap<u64, usize>> {
        self.in_flight.lock().expect("share lock poisoned")
    }

    fn publish_oldest(&self, in_flight: &BTreeMap<u64, usize>) {
        let oldest = in_flight.keys().next().copied().unwrap_or(u64::MAX);
        self.oldest
            .send_if_modified(|current| std::mem::replace(current, oldest) != oldest);
    }
}

/// A call in flight under a share; dropping it ends the call. Counts nothing under a
/// control that does not share keys.
pub(crate) struct ShareCall {
    shares: Option<Arc<Shares>>,
    generation: u64,
}

impl Drop for ShareCall {
    fn drop(&mut self) {
        let Some(shares) = &self.shares else {
            return;
        };
        let mut in_flight = shares.in_flight();
        if let Some(count) = in_flight.get_mut(&self.generation) {
            *count -= 1;
            if *count == 0 {
                in_flight.remove(&self.generation);
            }
        }
        shares.publish_oldest(&in_flight);
    }
}

/// The host's handle on the plugin version its drivers call. It is the only writer of that
/// choice; drivers follow it.
///
/// Contract:
/// - [`replace`](Self::replace) accepts only a version with the same subscriptions and
///   delivery, so the listeners, keys and queue stay meaningful. The next events batch, or
///   the next key a worker takes, goes to the new version; a call in flight finishes on the
///   old one, which is dropped with its instances once no call uses it. Nothing buffered is
///   lost or delivered twice;
/// - [`stop`](Self::stop) ends the drivers after their calls in flight; buffered
///   notifications and queued keys are not delivered;
/// - dropping the control leaves the drivers on the current version until their receivers
///   close;
/// - on a control made [`sharing`](Self::sharing), [`share`](Self::share) narrows or widens
///   the keys delivered from the next call on, and [`settled`](Self::settled) says when no
///   call started under an earlier share is still in flight; a control made with
///   [`new`](Self::new) delivers every key and its drivers touch no share state at all.
#[derive(Debug)]
pub struct DriverControl {
    target: watch::Sender<Option<Arc<Plugin>>>,
    /// `None` when the control does not share keys: a host without sharding pays for no
    /// lock or channel per call.
    shares: Option<Arc<Shares>>,
}

impl DriverControl {
    /// Drivers started from this control call `plugin`, with every key, for good.
    pub fn new(plugin: Arc<Plugin>) -> Self {
        let (target, _) = watch::channel(Some(plugin));
        Self {
            target,
            shares: None,
        }
    }

    /// Drivers started from this control call `plugin` with `share`'s keys, which
    /// [`share`](Self::share) changes.
    pub fn sharing(plugin: Arc<Plugin>, share: KeyShare) -> Self {
        let (target, _) = watch::channel(Some(plugin));
        let shares = Shares {
            current: Mutex::new((0, share)),
            ..Shares::default()
        };
        Self {
            target,
            shares: Some(Arc::new(shares)),
        }
    }

    /// Delivers only `share`'s keys from the next call on; returns the share's number, for
    /// [`settled`](Self::settled).
    ///
    /// # Panics
    ///
    /// On a control made with [`new`](Self::new): a host that shares keys makes its controls
    /// [`sharing`](Self::sharing).
    pub fn share(&self, share: KeyShare) -> u64 {
        let shares = self
            .shares
            .as_ref()
            .expect("share() on a DriverControl made without sharing");
        let mut current = shares.current.lock().expect("share lock poisoned");
        current.0 += 1;
        current.1 = share;
        current.0
    }

    /// Resolves once no call that started before share `number` is in flight: from then on
    /// only that share's keys (or a later one's) are delivered. The future does not borrow
    /// the control, so that it can be awaited after the control is dropped (drivers stopped
    /// with it end their calls all the same).
    pub fn settled(&self, number: u64) -> impl Future<Output = ()> + Send + use<> {
        let shares = self.shares.clone();
        async move {
            // Without sharing there is only one share: settled from the start.
            let Some(shares) = shares else {
                return;
            };
            let mut oldest = shares.oldest.subscribe();
            // The sender lives in `shares`, held here, so the channel cannot close.
            let _ = oldest.wait_for(|oldest| *oldest >= number).await;
        }
    }

    /// The version deliveries go to; `None` once stopped.
    pub fn current(&self) -> Option<Arc<Plugin>> {
        self.target.borrow().clone()
    }

    /// Swaps `next` in at the next notification boundary and returns the version it
    /// replaces (`None` if the drivers were stopped, in which case `next` is not installed).
    pub fn replace(&self, next: Arc<Plugin>) -> Result<Option<Arc<Plugin>>, DriverError> {
        let Some(current) = self.current() else {
            return Ok(None);
        };
        let (old, new) = (current.description(), next.description());
        let changed = if old.subscriptions != new.subscriptions {
            Some("subscriptions")
        } else if old.delivery != new.delivery {
            Some("delivery")
        } else {
            None
        };
        if let Some(what) = changed {
            return Err(DriverError::Incompatible {
                plugin: next.name().to_owned(),
                what,
            });
        }
        Ok(self.target.send_replace(Some(next)))
    }

    /// Stops delivering; see the type's contract.
    pub fn stop(&self) {
        self.target.send_replace(None);
    }

    /// Awaits `drivers` (the tasks of the drivers this control drives, joined) until
    /// `deadline`; past it, calls `at_deadline` (to say what is left), stops the control and
    /// awaits them. A driver ends at its next step once stopped, and a quarantine pause or a
    /// retry's back-off is such a step, so a drain never waits one out past its deadline.
    pub async fn drain_by<F: Future>(
        &self,
        drivers: F,
        deadline: tokio::time::Instant,
        at_deadline: impl FnOnce(),
    ) {
        tokio::pin!(drivers);
        if tokio::time::timeout_at(deadline, drivers.as_mut())
            .await
            .is_err()
        {
            at_deadline();
            self.stop();
            drivers.await;
        }
    }

    pub(crate) fn follow(&self) -> Follower {
        Follower {
            target: self.target.subscribe(),
            watching: true,
            shares: self.shares.clone(),
        }
    }
}

/// A driver's view of its [`DriverControl`].
pub(crate) struct Follower {
    target: watch::Receiver<Option<Arc<Plugin>>>,
    /// False once the control is gone: the target can no longer change.
    watching: bool,
    /// The control's; `None` when it does not share keys.
    shares: Option<Arc<Shares>>,
}

impl Follower {
    /// The share delivered now, to filter with outside a call.
    pub(crate) fn share(&self) -> KeyShare {
        match &self.shares {
            None => KeyShare::all(),
            Some(shares) => shares
                .current
                .lock()
                .expect("share lock poisoned")
                .1
                .clone(),
        }
    }

    /// The share to deliver now, and the call that delivers under it: hold it until the call
    /// ends.
    pub(crate) fn begin(&self) -> (KeyShare, ShareCall) {
        let Some(shares) = &self.shares else {
            let call = ShareCall {
                shares: None,
                generation: 0,
            };
            return (KeyShare::all(), call);
        };
        // Counted in flight under the lock of `current`, so that a share published after
        // this read waits for this call in `settled`. Lock order: `current`, `in_flight`.
        let current = shares.current.lock().expect("share lock poisoned");
        let (generation, share) = current.clone();
        let mut in_flight = shares.in_flight();
        *in_flight.entry(generation).or_default() += 1;
        shares.publish_oldest(&in_flight);
        drop(in_flight);
        drop(current);
        let call = ShareCall {
            shares: Some(shares.clone()),
            generation,
        };
        (share, call)
    }

    /// The version to call now, marked seen; `None` once stopped.
    pub(crate) fn current(&mut self) -> Option<Arc<Plugin>> {
        self.target.borrow_and_update().clone()
    }

    /// The version to call now, without marking it seen (for concurrent workers).
    pub(crate) fn peek(&self) -> Option<Arc<Plugin>> {
        self.target.borrow().clone()
    }

    /// Resolves once the control is stopped (at once if it is); never if it is dropped
    /// without stopping. The future owns what it watches, so a worker can hold it across
    /// a call.
    pub(crate) fn stopped(&self) -> impl Future<Output = ()> + Send + use<> {
        let mut target = self.target.clone();
        async move {
            if target.wait_for(Option::is_none).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Resolves when the target changes after the last [`current`](Self::current): a new
    /// version or a stop. Never resolves once the control is dropped.
    pub(crate) async fn changed(&mut self) {
        if self.watching && self.target.changed().await.is_ok() {
            return;
        }
        self.watching = false;
        std::future::pending::<()>().await;
    }
}

/// One version of a plugin as a driver runs it: its failure breaker and its warm instances.
/// Instances never outlive the version they were made from.
pub(crate) struct Version {
    pub(crate) plugin: Arc<Plugin>,
    pub(crate) breaker: Breaker,
    pool: Mutex<Vec<PluginInstance>>,
}

impl Version {
    pub(crate) fn new(plugin: Arc<Plugin>) -> Self {
        Self {
            breaker: Breaker::new(plugin.stats().clone(), plugin.limits().clone()),
            plugin,
            pool: Mutex::default(),
        }
    }

    fn pool(&self) -> MutexGuard<'_, Vec<PluginInstance>> {
        self.pool.lock().expect("instance pool lock poisoned")
    }

    /// A warm instance, or a fresh one.
    pub(crate) async fn take_instance(&self) -> Result<PluginInstance, crate::CallError> {
        let warm = self.pool().pop();
        match warm {
            Some(instance) => Ok(instance),
            None => self.plugin.instantiate().await,
        }
    }

    /// Returns an instance whose last call succeeded. One that failed is dropped instead: a
    /// trapped instance may be in any state.
    pub(crate) fn put_instance(&self, instance: PluginInstance) {
        self.pool().push(instance);
    }
}

/// The version concurrent workers share, re-made when the control names another plugin.
#[derive(Default)]
pub(crate) struct SharedVersion(Mutex<Option<Arc<Version>>>);

impl SharedVersion {
    pub(crate) fn of(&self, plugin: Arc<Plugin>) -> Arc<Version> {
        let mut slot = self.0.lock().expect("version lock poisoned");
        match &*slot {
            Some(version) if Arc::ptr_eq(&version.plugin, &plugin) => version.clone(),
            _ => {
                let version = Arc::new(Version::new(plugin));
                *slot = Some(version.clone());
                version
            }
        }
    }
}
