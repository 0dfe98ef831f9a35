//! One plugin's lifecycle: which version serves and whether it delivers, which one is on its
//! way, and why the last one tried does not serve, changed only by [`Lifecycle::step`].
//!
//! The lifecycle is generic over the serving version (`S`) and its deliveries (`D`) so that
//! its transitions are tested without loading plugins; the host's are
//! [`Serving`](super::Serving) and [`Delivering`](super::Delivering).

use std::fmt;

use kubeplug_runtime::RunState;
use tokio_util::sync::CancellationToken;

use super::ContentHash;

/// Why the last version tried does not serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Failure {
    /// The whole failure with its sources, as `/plugins` and the log show it.
    pub(super) message: String,
    /// The failure in the host's words only, for `/readyz`, which answers anyone.
    pub(super) summary: String,
}

/// A version on its way to serving.
#[derive(Debug)]
pub(super) enum Candidate {
    /// Going through the load stages. `retry`: its content is the one tried last (a load that
    /// failed for a reason outside the file, tried again), so that `/plugins` keeps showing
    /// that failure instead of flapping between `failed` and `loading`.
    Loading { retry: bool },
    /// Loaded, waiting for the informers it reads to sync; cancelling `cancel` ends the wait.
    Syncing { cancel: CancellationToken },
}

impl Candidate {
    /// Ends a candidate's wait for informers, if it waits: a newer version, a failure or
    /// the identity's withdrawal supersedes it.
    fn supersede(candidate: Option<Self>) {
        if let Some(Candidate::Syncing { cancel }) = candidate {
            cancel.cancel();
        }
    }
}

/// The version that serves: itself, its deliveries while this replica leads (`None`: it
/// stands by), and the state its driver last reported.
struct Served<S, D> {
    version: S,
    delivering: Option<D>,
    health: RunState,
}

/// Where a plugin identity is. Every state that has no serving version has a candidate or
/// a failure, and a candidate is loading or syncing, never both.
enum Phase<S, D> {
    /// No version serves; `candidate` is on its way. `failure`: an earlier version's, or
    /// the candidate's informers missing their sync deadline (it still waits).
    Starting {
        candidate: Candidate,
        failure: Option<Failure>,
    },
    /// No version serves, nor is one on its way: the last one tried failed.
    Failed { failure: Failure },
    /// `served` serves; `candidate`, if any, is a newer version on its way; `failure`, the
    /// last newer version's, which left `served` in place.
    Serving {
        served: Served<S, D>,
        candidate: Option<Candidate>,
        failure: Option<Failure>,
    },
}

/// What happened to a plugin identity.
pub(super) enum Event<S, D> {
    /// A source proposes this content for it.
    Proposed(ContentHash),
    /// The candidate described itself with this name.
    Described(String),
    /// The candidate loaded and waits for its informers.
    Syncing(CancellationToken),
    /// Something is stuck but nothing ends: the candidate's informers missed its sync
    /// deadline (it still waits), or the serving version could not start delivering (it
    /// stays loaded).
    Stalled(Failure),
    /// The candidate (or, with no candidate, the source's proposal) failed; a serving
    /// version keeps serving.
    Failed(Failure),
    /// The candidate serves now with deliveries of its own, which start standing by.
    Installed(S),
    /// The candidate took the serving version's place in its running deliveries.
    Swapped(S),
    /// The serving version delivers through these from now on (this replica leads).
    Deliver(D),
    /// The serving version stops delivering and stays loaded (this replica follows).
    Standby,
    /// The serving version's driver reports its state: quarantined, running again, stopped.
    /// The caller sends only the serving version's reports: an older version's are stale.
    Health(RunState),
    /// Its source withdrew it.
    Withdrawn,
}

/// One plugin identity's state. Contract: changed only by [`step`](Self::step); a serving
/// version is replaced whole, never changed in place.
pub(super) struct Lifecycle<S, D> {
    phase: Phase<S, D>,
    /// The content last proposed.
    tried: Option<ContentHash>,
    /// The name its last candidate described itself with, so that `/plugins` names a
    /// plugin that never served.
    described_as: Option<String>,
}

/// What a step ended, for the caller to stop.
#[must_use = "a version or a delivery that ended must be stopped"]
pub(super) struct Ended<S, D> {
    /// A version that no longer serves: stop it once its calls in flight finish.
    pub(super) retired: Option<S>,
    /// Deliveries that no longer deliver: stop them after their calls in flight.
    pub(super) stopped: Option<D>,
}

impl<S, D> Ended<S, D> {
    fn nothing() -> Self {
        Self {
            retired: None,
            stopped: None,
        }
    }

    fn retired(version: S) -> Self {
        Self {
            retired: Some(version),
            stopped: None,
        }
    }

    fn stopped(delivering: Option<D>) -> Self {
        Self {
            retired: None,
            stopped: delivering,
        }
    }

    fn served(served: Option<Served<S, D>>) -> Self {
        match served {
            Some(served) => Self {
                retired: Some(served.version),
                stopped: served.delivering,
            },
            None => Self::nothing(),
        }
    }
}

/// The outcome of a step: the next state (`None`: the identity is gone) and what the
/// caller must carry out.
pub(super) struct Step<S, D> {
    pub(super) next: Option<Lifecycle<S, D>>,
    pub(super) ended: Ended<S, D>,
}

impl<S, D> fmt::Debug for Lifecycle<S, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lifecycle")
            .field("state", &self.state_name())
            .field("described_as", &self.described_as)
            .finish_non_exhaustive()
    }
}

impl<S, D> Lifecycle<S, D> {
    /// The transition function: `current` (`None` for an identity not seen yet) after
    /// `event`. A superseded candidate's wait is cancelled here.
    pub(super) fn step(current: Option<Self>, event: Event<S, D>) -> Step<S, D> {
        let Some(mut lifecycle) = current else {
            return Self::first(event);
        };
        let mut ended = Ended::nothing();
        lifecycle.phase = match (lifecycle.phase, event) {
            (phase, Event::Described(name)) => {
                lifecycle.described_as = Some(name);
                phase
            }
            (phase, Event::Withdrawn) => {
                let (served, candidate) = phase.into_parts();
                Candidate::supersede(candidate);
                return Step {
                    next: None,
                    ended: Ended::served(served),
                };
            }
            (phase, Event::Proposed(hash)) => {
                let retry = lifecycle.tried.replace(hash) == Some(hash);
                phase.with_candidate(Candidate::Loading { retry })
            }
            (phase, Event::Syncing(cancel)) => phase.with_candidate(Candidate::Syncing { cancel }),
            (Phase::Starting { candidate, .. }, Event::Stalled(failure)) => Phase::Starting {
                candidate,
                failure: Some(failure),
            },
            (
                Phase::Serving {
                    served, candidate, ..
                },
                Event::Stalled(failure),
            ) => Phase::Serving {
                served,
                candidate,
                failure: Some(failure),
            },
            // Nothing serves or waits: its own failure says more.
            (phase @ Phase::Failed { .. }, Event::Stalled(_)) => phase,
            (phase, Event::Failed(failure)) => {
                let (served, candidate) = phase.into_parts();
                Candidate::supersede(candidate);
                match served {
                    Some(served) => Phase::Serving {
                        served,
                        candidate: None,
                        failure: Some(failure),
                    },
                    None => Phase::Failed { failure },
                }
            }
            (phase, Event::Installed(version)) => {
                let (old, candidate) = phase.into_parts();
                Candidate::supersede(candidate);
                ended = Ended::served(old);
                Phase::Serving {
                    served: Served {
                        version,
                        delivering: None,
                        health: RunState::Running,
                    },
                    candidate: None,
                    failure: None,
                }
            }
            // A new version starts afresh: the old one's quarantine was its own.
            (
                Phase::Serving {
                    served, candidate, ..
                },
                Event::Swapped(version),
            ) => {
                Candidate::supersede(candidate);
                ended = Ended::retired(served.version);
                Phase::Serving {
                    served: Served {
                        version,
                        delivering: served.delivering,
                        health: RunState::Running,
                    },
                    candidate: None,
                    failure: None,
                }
            }
            // Nothing serves in place of which a candidate could swap: it must not run.
            (phase, Event::Swapped(version)) => {
                ended = Ended::retired(version);
                phase
            }
            (
                Phase::Serving {
                    served,
                    candidate,
                    failure,
                },
                Event::Deliver(delivering),
            ) => {
                ended = Ended::stopped(served.delivering);
                Phase::Serving {
                    served: Served {
                        delivering: Some(delivering),
                        ..served
                    },
                    candidate,
                    failure,
                }
            }
            // Nothing serves that it could deliver to.
            (phase, Event::Deliver(delivering)) => {
                ended = Ended::stopped(Some(delivering));
                phase
            }
            (
                Phase::Serving {
                    served,
                    candidate,
                    failure,
                },
                Event::Standby,
            ) => {
                ended = Ended::stopped(served.delivering);
                Phase::Serving {
                    served: Served {
                        delivering: None,
                        ..served
                    },
                    candidate,
                    failure,
                }
            }
            (phase @ (Phase::Starting { .. } | Phase::Failed { .. }), Event::Standby) => phase,
            // A candidate on its way or a failure shown stays: the report is about the
            // version serving meanwhile.
            (
                Phase::Serving {
                    served,
                    candidate,
                    failure,
                },
                Event::Health(health),
            ) => Phase::Serving {
                served: Served { health, ..served },
                candidate,
                failure,
            },
            // Nothing serves whose state this could be.
            (phase @ (Phase::Starting { .. } | Phase::Failed { .. }), Event::Health(_)) => phase,
        };
        Step {
            next: Some(lifecycle),
            ended,
        }
    }

    /// An identity's first event.
    fn first(event: Event<S, D>) -> Step<S, D> {
        let fresh = |phase| Lifecycle {
            phase,
            tried: None,
            described_as: None,
        };
        let mut ended = Ended::nothing();
        let next = match event {
            Event::Proposed(hash) => Some(Lifecycle {
                tried: Some(hash),
                ..fresh(Phase::Starting {
                    candidate: Candidate::Loading { retry: false },
                    failure: None,
                })
            }),
            Event::Failed(failure) => Some(fresh(Phase::Failed { failure })),
            // Of an identity withdrawn meanwhile: nothing to record or wait for, and a
            // version or deliveries that must not run.
            Event::Installed(version) | Event::Swapped(version) => {
                ended = Ended::retired(version);
                None
            }
            Event::Deliver(delivering) => {
                ended = Ended::stopped(Some(delivering));
                None
            }
            Event::Syncing(cancel) => {
                cancel.cancel();
                None
            }
            Event::Described(_)
            | Event::Stalled(_)
            | Event::Standby
            | Event::Withdrawn
            | Event::Health(_) => None,
        };
        Step { next, ended }
    }

    /// The version serving, if any.
    pub(super) fn serving(&self) -> Option<&S> {
        self.served().map(|served| &served.version)
    }

    /// The serving version's deliveries, if it delivers.
    pub(super) fn delivering(&self) -> Option<&D> {
        self.served()?.delivering.as_ref()
    }

    fn served(&self) -> Option<&Served<S, D>> {
        match &self.phase {
            Phase::Serving { served, .. } => Some(served),
            Phase::Starting { .. } | Phase::Failed { .. } => None,
        }
    }

    /// The error `/plugins` shows: the serving version's quarantine's, else the failure's.
    pub(super) fn last_error(&self) -> Option<&str> {
        match self.served().map(|served| &served.health) {
            Some(RunState::Quarantined { last_error, .. }) => Some(last_error),
            _ => self.failure().map(|failure| failure.message.as_str()),
        }
    }

    /// The failure `/plugins` shows.
    pub(super) fn failure(&self) -> Option<&Failure> {
        match &self.phase {
            Phase::Starting { failure, .. } | Phase::Serving { failure, .. } => failure.as_ref(),
            Phase::Failed { failure } => Some(failure),
        }
    }

    /// The name its last candidate described itself with.
    pub(super) fn described_as(&self) -> Option<&str> {
        self.described_as.as_deref()
    }

    /// Whether no version serves and the last one failed, and no new content is loading:
    /// what `/readyz` counts as failed (a retry of the same content, or a candidate still
    /// waiting past its deadline, does not hide the failure).
    pub(super) fn has_failed(&self) -> bool {
        match &self.phase {
            Phase::Failed { .. } => true,
            Phase::Starting {
                candidate,
                failure: Some(_),
            } => !matches!(candidate, Candidate::Loading { retry: false }),
            Phase::Starting { failure: None, .. } | Phase::Serving { .. } => false,
        }
    }

    /// The state `/plugins` names. When no candidate or failure says more, a serving
    /// version's: `standby` when it does not deliver, else `running`, `quarantined` or
    /// `stopped` as its driver last reported.
    pub(super) fn state_name(&self) -> &'static str {
        let (candidate, failure) = match &self.phase {
            Phase::Failed { .. } => return "failed",
            Phase::Starting { candidate, failure } => (Some(candidate), failure.is_some()),
            Phase::Serving {
                candidate, failure, ..
            } => (candidate.as_ref(), failure.is_some()),
        };
        match (candidate, failure) {
            (Some(Candidate::Loading { retry: false }), _) => "loading",
            (Some(Candidate::Loading { retry: true }), false) => "loading",
            (Some(Candidate::Syncing { .. }), false) => "syncing",
            _ => match self.served() {
                Some(Served {
                    delivering: None, ..
                }) => "standby",
                Some(Served { health, .. }) => match health {
                    RunState::Running => "running",
                    RunState::Quarantined { .. } => "quarantined",
                    RunState::Stopped => "stopped",
                },
                None => "failed",
            },
        }
    }
}

impl<S, D> Phase<S, D> {
    /// The serving version (with its deliveries and state) and the candidate apart.
    fn into_parts(self) -> (Option<Served<S, D>>, Option<Candidate>) {
        match self {
            Phase::Starting { candidate, .. } => (None, Some(candidate)),
            Phase::Failed { .. } => (None, None),
            Phase::Serving {
                served, candidate, ..
            } => (Some(served), candidate),
        }
    }

    /// The same phase with `candidate` on its way, superseding the one before; a failure
    /// stays shown until a version serves.
    fn with_candidate(self, candidate: Candidate) -> Self {
        match self {
            Phase::Starting {
                candidate: older,
                failure,
            } => {
                Candidate::supersede(Some(older));
                Phase::Starting { candidate, failure }
            }
            Phase::Failed { failure } => Phase::Starting {
                candidate,
                failure: Some(failure),
            },
            Phase::Serving {
                served,
                candidate: older,
                failure,
            } => {
                Candidate::supersede(older);
                Phase::Serving {
                    served,
                    candidate: Some(candidate),
                    failure,
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "lifecycle/tests.rs"]
mod tests;
