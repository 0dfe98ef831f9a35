//! The circuit breaker shared by both delivery modes: counts consecutive failures and
//! quarantines the plugin with exponential back-off.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kubeplug_informer::backoff::Backoff;
use tokio::time::Instant;

use crate::plugin::PluginLimits;
use crate::status::{PluginStats, RunState};

/// Failure bookkeeping of one plugin.
///
/// Contract: after `max_consecutive_failures` failed calls in a row, `failure` returns the
/// pause to take (first `quarantine_backoff`, doubling up to `quarantine_backoff_max`) and
/// the status says `Quarantined`; the next `success` returns `true` once, resets the back-off
/// and the status says `Running`.
pub(crate) struct Breaker {
    stats: Arc<PluginStats>,
    limits: PluginLimits,
    inner: Mutex<BreakerState>,
}

struct BreakerState {
    /// The quarantines' lengths.
    backoff: Backoff,
    /// Paused until then; `None` when not quarantined.
    paused_until: Option<Instant>,
    /// Quarantined since the last success.
    quarantined: bool,
}

impl Breaker {
    pub(crate) fn new(stats: Arc<PluginStats>, limits: PluginLimits) -> Self {
        stats.set_state(RunState::Running);
        Self {
            inner: Mutex::new(BreakerState {
                backoff: Backoff::new(limits.quarantine_backoff, limits.quarantine_backoff_max),
                paused_until: None,
                quarantined: false,
            }),
            stats,
            limits,
        }
    }

    fn lock(&self) -> MutexGuard<'_, BreakerState> {
        self.inner.lock().expect("breaker lock poisoned by a panic")
    }

    /// A call succeeded. True if that ends a quarantine.
    pub(crate) fn success(&self) -> bool {
        self.stats.record_success();
        let mut state = self.lock();
        state.backoff.reset();
        state.paused_until = None;
        let was = std::mem::take(&mut state.quarantined);
        if was {
            self.stats.set_state(RunState::Running);
        }
        was
    }

    /// A call failed with `error`. `Some(pause)` when this starts (or extends) a quarantine.
    pub(crate) fn failure(&self, error: &str) -> Option<Duration> {
        let consecutive = self.stats.record_failure(error);
        if consecutive < self.limits.max_consecutive_failures {
            return None;
        }
        let mut state = self.lock();
        let pause = state.backoff.next_delay();
        state.paused_until = Some(Instant::now() + pause);
        state.quarantined = true;
        drop(state);
        PluginStats::add(&self.stats.quarantines, 1);
        self.stats.set_state(RunState::Quarantined {
            retry_in: pause,
            last_error: error.to_owned(),
        });
        Some(pause)
    }

    /// Waits until any quarantine pause is over.
    pub(crate) async fn wait(&self) {
        loop {
            let until = self.lock().paused_until;
            match until {
                Some(t) if t > Instant::now() => tokio::time::sleep_until(t).await,
                _ => return,
            }
        }
    }

    /// Consecutive failures now.
    #[cfg(test)]
    pub(crate) fn consecutive(&self) -> u64 {
        self.stats
            .consecutive_failures
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn quarantine_after_k_failures_with_doubling_backoff() {
        let stats = Arc::new(PluginStats::default());
        let limits = PluginLimits {
            max_consecutive_failures: 3,
            quarantine_backoff: Duration::from_secs(1),
            quarantine_backoff_max: Duration::from_secs(3),
            ..PluginLimits::default()
        };
        let breaker = Breaker::new(stats.clone(), limits);
        assert_eq!(breaker.failure("a"), None);
        assert_eq!(breaker.failure("b"), None);
        assert_eq!(breaker.failure("c"), Some(Duration::from_secs(1)));
        assert!(matches!(
            stats.snapshot().state,
            RunState::Quarantined { .. }
        ));
        let before = Instant::now();
        breaker.wait().await;
        assert!(Instant::now() - before >= Duration::from_secs(1));
        assert_eq!(breaker.failure("d"), Some(Duration::from_secs(2)));
        assert_eq!(breaker.failure("e"), Some(Duration::from_secs(3)), "capped");
        assert_eq!(breaker.consecutive(), 5);
        assert!(breaker.success());
        assert!(!breaker.success());
        assert_eq!(stats.snapshot().state, RunState::Running);
        assert_eq!(stats.snapshot().quarantines, 3);
    }
}
