//! Token buckets: how the runtime paces what a plugin may do often (log records, cluster
//! writes). Written here, not taken from a crate: the two uses need a bucket that can be
//! asked how long to wait (writes) or only whether now (logs), on tokio's clock so that
//! tests can pause it, and that is a few lines.

use std::time::Duration;

use tokio::time::Instant;

/// `rate` tokens a second, at most `burst` held; starts full.
///
/// Invariant: `tokens` is at most `burst`; it may be negative, by what has been reserved
/// ahead of time ([`reserve`](Self::reserve)).
#[derive(Debug)]
pub(crate) struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    pub(crate) fn new(rate: f64, burst: f64, now: Instant) -> Self {
        Self {
            rate,
            burst,
            tokens: burst,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.last = self.last.max(now);
    }

    /// Takes a token if one is there now.
    pub(crate) fn try_take(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Reserves the next token: how long from `now` until it may be used, if that is at
    /// most `longest`; `None` and nothing reserved otherwise. Reservations queue: each
    /// waits for those before it.
    pub(crate) fn reserve(&mut self, now: Instant, longest: Duration) -> Option<Duration> {
        self.refill(now);
        let after = self.tokens - 1.0;
        let wait = if after >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-after / self.rate)
        };
        if wait > longest {
            return None;
        }
        self.tokens = after;
        Some(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(20.0, 30.0, start);
        let longest = Duration::from_secs(30);
        for _ in 0..30 {
            assert_eq!(bucket.reserve(start, longest), Some(Duration::ZERO));
        }
        // The 31st waits one token's time, the 32nd two.
        assert_eq!(
            bucket.reserve(start, longest),
            Some(Duration::from_millis(50))
        );
        assert_eq!(
            bucket.reserve(start, longest),
            Some(Duration::from_millis(100))
        );
        // Nothing is reserved past the longest wait.
        assert_eq!(bucket.reserve(start, Duration::from_millis(120)), None);
        assert_eq!(
            bucket.reserve(start, longest),
            Some(Duration::from_millis(150))
        );
        // A second later, 20 more tokens: the queue of 3 is paid, 17 are free.
        let later = start + Duration::from_secs(1);
        assert!(bucket.try_take(later));
        let free = (0..40).filter(|_| bucket.try_take(later)).count();
        assert_eq!(free, 16);
    }
}
