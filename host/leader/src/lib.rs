//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's `leaderelection`.
//!
//! Every replica runs a [`LeaderElector`]. A candidate tries to take the Lease every retry
//! period; the holder renews it every retry period and gives up leadership as soon as it has
//! not managed to renew for the renew deadline. A Lease whose holder has not renewed it for
//! the lease duration, as observed on this replica's own clock, may be taken over. The
//! defaults are controller-runtime's: lease 15 s, renew deadline 10 s, retry 2 s.
//!
//! Every Lease request is bounded, as client-go bounds it with its context: a leader's by
//! what is left of its renew deadline, a candidate's by the renew deadline. So a leader
//! whose connection stalls stops leading at its renew deadline, at the latest, and another
//! replica takes over no sooner than the lease duration after the last renewal it saw: the
//! old leader has the difference, the **margin** (5 s by default), to finish what it was
//! doing. [`ElectionConfig::margin`] says it.
//!
//! ```no_run
//! # async fn demo(client: kube::Client) {
//! use kubeplug_leader::{ElectionConfig, KubeLeases, LeaderElector};
//!
//! let leases = KubeLeases::new(client, "kubeplug-system", "kubeplug");
//! let elector = LeaderElector::new(std::sync::Arc::new(leases), "pod-a", ElectionConfig::default());
//! let cancel = tokio_util::sync::CancellationToken::new();
//! let (mut leading, task) = elector.run(cancel.clone());
//! while leading.changed().await.is_ok() {
//!     println!("leading: {}", *leading.borrow());
//! }
//! # let _ = task.await;
//! # }
//! ```

mod kube_leases;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use kube_leases::KubeLeases;

/// The durations of an election.
#[derive(Debug, Clone)]
pub struct ElectionConfig {
    /// How long a Lease holds after its last renewal.
    pub lease_duration: Duration,
    /// The leader gives up if it could not renew for this long. Shorter than the lease.
    pub renew_deadline: Duration,
    /// How often candidates try and the leader renews.
    pub retry_period: Duration,
}

impl ElectionConfig {
    /// How long, at least, between the moment a leader whose renewals fail stops leading
    /// and the moment another replica may take over: lease duration − renew deadline. Work
    /// a leader has in flight when it stops must end within it.
    pub fn margin(&self) -> Duration {
        self.lease_duration.saturating_sub(self.renew_deadline)
    }
}

impl Default for ElectionConfig {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// The fields of a Lease that the election reads and writes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseRecord {
    /// Who holds the Lease; empty or `None` when released.
    pub holder: Option<String>,
    /// `leaseDurationSeconds`.
    pub lease_duration_seconds: i32,
    /// When the current holder took it.
    pub acquire_time: Option<Timestamp>,
    /// When the current holder last renewed it.
    pub renew_time: Option<Timestamp>,
    /// How many times it changed hands.
    pub transitions: i32,
    /// The version read; an update is refused with [`LeaseError::Conflict`] unless it is
    /// still current.
    pub resource_version: Option<String>,
}

/// Why reading or writing the Lease failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Someone else wrote the Lease first (HTTP 409): re-read and try again later.
    #[error("the Lease {lease} changed meanwhile")]
    Conflict {
        /// `namespace/name` of the Lease.
        lease: String,
    },
    /// The API call failed.
    #[error("cannot {verb} the Lease {lease}: {reason}")]
    Api {
        /// `get`, `create` or `update`.
        verb: &'static str,
        /// `namespace/name` of the Lease.
        lease: String,
        /// What went wrong.
        reason: String,
    },
}

/// Where the Lease lives: the Kubernetes API ([`KubeLeases`]) or, in tests, memory.
pub trait LeaseStore: Send + Sync + 'static {
    /// The Lease, or `None` if it does not exist.
    fn get(&self) -> BoxFuture<'_, Result<Option<LeaseRecord>, LeaseError>>;
    /// Creates the Lease; [`LeaseError::Conflict`] if it exists.
    fn create(&self, record: LeaseRecord) -> BoxFuture<'_, Result<LeaseRecord, LeaseError>>;
    /// Replaces the Lease if `record.resource_version` is current, else
    /// [`LeaseError::Conflict`].
    fn update(&self, record: LeaseRecord) -> BoxFuture<'_, Result<LeaseRecord, LeaseError>>;
}

/// What this replica knows and waits for.
enum State {
    /// Not leading: try to take the Lease every retry period.
    Candidate,
    /// Leading since the last successful renewal at `renewed`.
    Leading { renewed: Instant },
}

impl State {
    /// How long to wait before the next step: a retry period, but a leader's renew deadline
    /// is kept to the moment, as client-go's renew loop keeps it with its context.
    fn pause(&self, config: &ElectionConfig) -> Duration {
        match self {
            State::Candidate => config.retry_period,
            State::Leading { renewed } => config
                .retry_period
                .min((*renewed + config.renew_deadline).saturating_duration_since(Instant::now())),
        }
    }
}

/// One replica's side of the election. See the crate docs for the protocol.
pub struct LeaderElector {
    store: Arc<dyn LeaseStore>,
    identity: String,
    config: ElectionConfig,
    /// The record last read, and when (on our clock) it last changed.
    observed: Option<(LeaseRecord, Instant)>,
}

impl fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderElector")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl LeaderElector {
    /// An elector for `identity` (unique per replica, e.g. the Pod name).
    pub fn new(
        store: Arc<dyn LeaseStore>,
        identity: impl Into<String>,
        config: ElectionConfig,
    ) -> Self {
        Self {
            store,
            identity: identity.into(),
            config,
            observed: None,
        }
    }

    /// Runs the election until `cancel` fires, then releases the Lease if held. The receiver
    /// says whether this replica leads; it starts `false`.
    pub fn run(
        mut self,
        cancel: CancellationToken,
    ) -> (watch::Receiver<bool>, tokio::task::JoinHandle<()>) {
        let (leading, receiver) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut state = State::Candidate;
            loop {
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => break,
                    next = self.step(state) => state = next,
                }
                let is_leader = matches!(state, State::Leading { .. });
                leading.send_if_modified(|was| std::mem::replace(was, is_leader) != is_leader);
                let pause = state.pause(&self.config);
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => break,
                    () = tokio::time::sleep(pause) => {}
                }
            }
            if *leading.borrow() {
                leading.send_replace(false);
                self.release().await;
            }
        });
        (receiver, task)
    }

    /// One attempt to take or renew the Lease, bounded in time (see the crate docs).
    async fn step(&mut self, state: State) -> State {
        match state {
            State::Candidate => match self
                .bounded(Instant::now() + self.config.renew_deadline)
                .await
            {
                true => {
                    info!(identity = %self.identity, "became the leader");
                    State::Leading {
                        renewed: Instant::now(),
                    }
                }
                false => State::Candidate,
            },
            State::Leading { renewed } => {
                let deadline = renewed + self.config.renew_deadline;
                if Instant::now() < deadline && self.bounded(deadline).await {
                    State::Leading {
                        renewed: Instant::now(),
                    }
                } else if Instant::now() >= deadline {
                    warn!(identity = %self.identity, "could not renew the Lease in time; no longer the leader");
                    State::Candidate
                } else {
                    State::Leading { renewed }
                }
            }
        }
    }

    /// [`try_acquire_or_renew`](Self::try_acquire_or_renew), given up at `deadline`: false
    /// then, as for a failed request.
    async fn bounded(&mut self, deadline: Instant) -> bool {
        match tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await {
            Ok(done) => done,
            Err(_) => {
                warn!(identity = %self.identity, "a Lease request did not finish in time; it is given up");
                false
            }
        }
    }

    /// client-go's `tryAcquireOrRenew`.
    async fn try_acquire_or_renew(&mut self) -> bool {
        let now = Timestamp::now();
        let duration = i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let current = match self.store.get().await {
            Ok(current) => current,
            Err(error) => {
                warn!(%error, "leader election");
                return false;
            }
        };
        let Some(current) = current else {
            let record = LeaseRecord {
                holder: Some(self.identity.clone()),
                lease_duration_seconds: duration,
                acquire_time: Some(now),
                renew_time: Some(now),
                transitions: 0,
                resource_version: None,
            };
            let store = self.store.clone();
            return self.write(store.create(record)).await;
        };
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|(seen, _)| !same_holding(seen, &current));
        if changed {
            self.observed = Some((current.clone(), Instant::now()));
        }
        let observed_at = self
            .observed
            .as_ref()
            .map(|(_, at)| *at)
            .expect("set above");
        let holder = current.holder.as_deref().filter(|h| !h.is_empty());
        let held_by_us = holder == Some(self.identity.as_str());
        let lease =
            Duration::from_secs(u64::try_from(current.lease_duration_seconds.max(0)).unwrap_or(0));
        if holder.is_some() && !held_by_us && observed_at.elapsed() < lease {
            return false;
        }
        let record = LeaseRecord {
            holder: Some(self.identity.clone()),
            lease_duration_seconds: duration,
            acquire_time: if held_by_us {
                current.acquire_time
            } else {
                Some(now)
            },
            renew_time: Some(now),
            transitions: if held_by_us {
                current.transitions
            } else {
                current.transitions + 1
            },
            resource_version: current.resource_version.clone(),
        };
        let store = self.store.clone();
        self.write(store.update(record)).await
    }

    async fn write(&mut self, write: BoxFuture<'_, Result<LeaseRecord, LeaseError>>) -> bool {
        match write.await {
            Ok(written) => {
                self.observed = Some((written, Instant::now()));
                true
            }
            Err(LeaseError::Conflict { .. }) => false,
            Err(error) => {
                warn!(%error, "leader election");
                false
            }
        }
    }

    /// Gives the Lease up so that another replica can take it without waiting it out. A
    /// conflict means the Lease changed since it was last read; most often by this replica,
    /// a renewal the shutdown interrupted after the server applied it. So the release reads
    /// it again and tries once more while this replica still holds it.
    async fn release(&mut self) {
        const ATTEMPTS: usize = 2;
        let Some((mut record, _)) = self.observed.clone() else {
            return;
        };
        for attempt in 1..=ATTEMPTS {
            if record.holder.as_deref() != Some(self.identity.as_str()) {
                return;
            }
            let now = Timestamp::now();
            let released = LeaseRecord {
                holder: None,
                lease_duration_seconds: 1,
                acquire_time: Some(now),
                renew_time: Some(now),
                ..record
            };
            let error = match self.store.update(released).await {
                Ok(_) => {
                    info!(identity = %self.identity, "released the Lease");
                    return;
                }
                Err(error) => error,
            };
            let reread = match error {
                LeaseError::Conflict { .. } if attempt < ATTEMPTS => self.store.get().await,
                error => {
                    warn!(%error, "could not release the Lease; it expires on its own");
                    return;
                }
            };
            match reread {
                Ok(Some(current)) => record = current,
                Ok(None) => return,
                Err(error) => {
                    warn!(%error, "could not release the Lease; it expires on its own");
                    return;
                }
            }
        }
    }
}

/// Whether two reads show the same holding (client-go compares the whole record).
fn same_holding(a: &LeaseRecord, b: &LeaseRecord) -> bool {
    a.holder == b.holder
        && a.renew_time == b.renew_time
        && a.acquire_time == b.acquire_time
        && a.transitions == b.transitions
}

#[cfg(test)]
mod tests;
