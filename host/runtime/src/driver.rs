//! Which version of a plugin the drivers call, and how the host swaps it (hot reload) or stops
//! it without touching the listeners the drivers read.

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
///   close.
#[derive(Debug)]
pub struct DriverControl {
    target: watch::Sender<Option<Arc<Plugin>>>,
}

impl DriverControl {
    /// Drivers started from this control call `plugin`.
    pub fn new(plugin: Arc<Plugin>) -> Self {
        let (target, _) = watch::channel(Some(plugin));
        Self { target }
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

    pub(crate) fn follow(&self) -> Follower {
        Follower {
            target: self.target.subscribe(),
            watching: true,
        }
    }
}

/// A driver's view of its [`DriverControl`].
pub(crate) struct Follower {
    target: watch::Receiver<Option<Arc<Plugin>>>,
    /// False once the control is gone: the target can no longer change.
    watching: bool,
}

impl Follower {
    /// The version to call now, marked seen; `None` once stopped.
    pub(crate) fn current(&mut self) -> Option<Arc<Plugin>> {
        self.target.borrow_and_update().clone()
    }

    /// The version to call now, without marking it seen (for concurrent workers).
    pub(crate) fn peek(&self) -> Option<Arc<Plugin>> {
        self.target.borrow().clone()
    }

    /// Resolves once the control is stopped (at once if it is); never if it is dropped
    /// without stopping.
    pub(crate) async fn stopped(&self) {
        let mut target = self.target.clone();
        if target.wait_for(Option::is_none).await.is_err() {
            std::future::pending::<()>().await;
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
