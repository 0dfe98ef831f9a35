//! Exponential back-off, as apimachinery's `wait.Backoff` and `ExponentialBackoffManager`:
//! the one retry schedule of the Reflector, the binary's connection to the cluster and the
//! runtime's retries and quarantines.
//!
//! Written here rather than taken from a crate: the schedules we need (reset after a quiet
//! period, jitter as client-go's factor 1.0, paused tokio time in tests) are a few lines,
//! and the retry crates model a retry loop around a future, not a schedule a state machine
//! asks for a delay.

use std::time::Duration;

use tokio::time::Instant;

/// Delays that start at `initial` and double up to `max`.
///
/// Optionally with jitter (each delay grows by a random amount up to itself, as client-go's
/// jitter factor 1.0, so clients that failed together do not retry together) and a reset to
/// `initial` after a quiet period without failures. Times are tokio's, so paused test clocks
/// apply.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    jitter: bool,
    reset_after: Option<Duration>,
    current: Duration,
    last_failure: Option<Instant>,
}

impl Backoff {
    /// `initial`, then twice as long each time, never more than `max` (before jitter).
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max: max.max(initial),
            jitter: false,
            reset_after: None,
            current: initial,
            last_failure: None,
        }
    }

    /// Adds up to the delay again at random to each delay.
    pub fn with_jitter(mut self) -> Self {
        self.jitter = true;
        self
    }

    /// Starts again from `initial` when the last failure is at least `quiet` ago.
    pub fn reset_after(mut self, quiet: Duration) -> Self {
        self.reset_after = Some(quiet);
        self
    }

    /// The delay to wait after a failure now, and the schedule moved on.
    pub fn next_delay(&mut self) -> Duration {
        let now = Instant::now();
        let quiet = self.last_failure.map(|last| now.duration_since(last));
        if quiet
            .zip(self.reset_after)
            .is_some_and(|(quiet, reset)| quiet >= reset)
        {
            self.current = self.initial;
        }
        self.last_failure = Some(now);
        let base = self.current;
        self.current = self.current.saturating_mul(2).min(self.max);
        if self.jitter {
            base + random_below(base)
        } else {
            base
        }
    }

    /// Starts again from `initial`, as after a success.
    pub fn reset(&mut self) {
        self.current = self.initial;
        self.last_failure = None;
    }
}

/// A random duration in `[0, bound)`; zero for a zero bound.
fn random_below(bound: Duration) -> Duration {
    let nanos = u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX);
    if nanos == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(rand::random_range(0..nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn doubles_to_the_cap_with_jitter_and_resets_after_a_quiet_period() {
        let mut backoff = Backoff::new(Duration::from_millis(800), Duration::from_secs(30))
            .with_jitter()
            .reset_after(Duration::from_secs(120));
        let delays: Vec<_> = (0..8).map(|_| backoff.next_delay()).collect();
        for (delay, base_ms) in delays
            .iter()
            .zip([800u64, 1600, 3200, 6400, 12800, 25600, 30000, 30000])
        {
            let base = Duration::from_millis(base_ms);
            assert!(
                *delay >= base && *delay < base * 2,
                "{delay:?} vs base {base:?}"
            );
        }
        tokio::time::advance(Duration::from_secs(119)).await;
        assert!(
            backoff.next_delay() >= Duration::from_secs(30),
            "not quiet long enough"
        );
        tokio::time::advance(Duration::from_secs(120)).await;
        assert!(backoff.next_delay() < Duration::from_millis(1600));
    }

    #[tokio::test(start_paused = true)]
    async fn without_jitter_the_schedule_is_exact_and_reset_restarts_it() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(5));
        let delays: Vec<_> = (0..5).map(|_| backoff.next_delay().as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 5, 5]);
        backoff.reset();
        assert_eq!(backoff.next_delay(), Duration::from_secs(1));
        let mut unbounded = Backoff::new(Duration::from_secs(1), Duration::MAX);
        for _ in 0..100 {
            unbounded.next_delay();
        }
        assert_eq!(
            unbounded.next_delay(),
            Duration::MAX,
            "saturates, never overflows"
        );
    }
}
