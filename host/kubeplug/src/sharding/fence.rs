//! Fencing a sharded replica by its own Lease: what it delivers and writes counts only while
//! the Lease is valid on its own clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kubeplug_runtime::view::BoxFuture;
use kubeplug_runtime::{ClusterWriter, Write, WriteError};
use tokio::time::Instant;

/// Until when this replica's Lease is valid: its last successful renewal (the moment the
/// request was sent) plus the renew deadline. Others count the Lease dead only a lease
/// duration after they saw that renewal, so the difference is the margin for a call in
/// flight. One writer (the coordinator); drivers and the writer read it on every call.
#[derive(Debug, Clone)]
pub(crate) struct LeaseClock {
    base: Instant,
    /// Nanoseconds after `base`; 0 until the first renewal.
    valid_until: Arc<AtomicU64>,
}

impl LeaseClock {
    /// A clock that is not valid until [`renewed`](Self::renewed).
    pub(crate) fn new() -> Self {
        Self {
            base: Instant::now(),
            valid_until: Arc::default(),
        }
    }

    /// A renewal sent at `sent` succeeded.
    pub(crate) fn renewed(&self, sent: Instant, renew_deadline: Duration) {
        let until = (sent + renew_deadline).saturating_duration_since(self.base);
        let nanos = u64::try_from(until.as_nanos()).unwrap_or(u64::MAX);
        self.valid_until.fetch_max(nanos, Ordering::AcqRel);
    }

    /// Ends validity now: the Lease is given up.
    pub(crate) fn expire(&self) {
        self.valid_until.store(0, Ordering::Release);
    }

    /// When validity ends.
    pub(crate) fn until(&self) -> Instant {
        self.base + Duration::from_nanos(self.valid_until.load(Ordering::Acquire))
    }

    /// Whether the Lease is valid at `now`.
    pub(crate) fn valid_at(&self, now: Instant) -> bool {
        now < self.until()
    }

    /// Whether the Lease is valid now.
    pub(crate) fn valid(&self) -> bool {
        self.valid_at(Instant::now())
    }
}

/// A writer that refuses every write while the replica's Lease is not valid: a call that
/// was in flight when the replica froze past its Lease writes nothing once it resumes, as a
/// follower's plugins write nothing.
pub(crate) struct FencedWriter {
    inner: Arc<dyn ClusterWriter>,
    clock: LeaseClock,
}

impl FencedWriter {
    pub(crate) fn new(inner: Arc<dyn ClusterWriter>, clock: LeaseClock) -> Self {
        Self { inner, clock }
    }
}

impl ClusterWriter for FencedWriter {
    fn write<'a>(
        &'a self,
        plugin: &'a str,
        write: Write,
    ) -> BoxFuture<'a, Result<String, WriteError>> {
        if !self.clock.valid() {
            return Box::pin(async {
                Err(WriteError::Unavailable(
                    "this replica's shard Lease is not valid: it may no longer own the key, so the write is refused"
                        .to_owned(),
                ))
            });
        }
        self.inner.write(plugin, write)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_lease_is_valid_for_the_renew_deadline_after_the_request_was_sent() {
        let clock = LeaseClock::new();
        assert!(!clock.valid());
        let sent = Instant::now();
        tokio::time::advance(Duration::from_secs(1)).await;
        clock.renewed(sent, Duration::from_secs(10));
        tokio::time::advance(Duration::from_millis(8_999)).await;
        assert!(clock.valid());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(
            !clock.valid(),
            "valid until the request time plus the deadline"
        );
        // An older renewal that answers late never shortens a newer one.
        clock.renewed(Instant::now(), Duration::from_secs(10));
        clock.renewed(sent, Duration::from_secs(10));
        assert!(clock.valid());
        clock.expire();
        assert!(!clock.valid());
    }
}
