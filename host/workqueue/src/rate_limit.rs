//! Layer 3, the rate-limited queue: client-go's `RateLimitingInterface` (`AddRateLimited`,
//! `Forget`, `NumRequeues`) and its rate limiters.
//!
//! The queue asks its [`RateLimiter`] how long an item should wait, then hands the item to the
//! delaying layer ([`Queue::add_after`]). Limiters read `tokio::time::Instant`, so paused time
//! drives them in tests.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::Queue;

/// Decides how long an item waits before it is retried.
///
/// # Contract
///
/// - [`when`](Self::when) is called once per retry of `item` and returns its delay; per-item
///   limiters count it as one more failure.
/// - [`forget`](Self::forget) says the item succeeded: per-item limiters reset its failure
///   count (a shared token bucket has nothing to reset).
/// - [`num_requeues`](Self::num_requeues) is how many times `when` was called for the item
///   since it was last forgotten (0 for limiters that do not track items).
///
/// Implementations are shared by every worker of a queue, hence `&self` and `Send + Sync`.
pub trait RateLimiter<T>: Send + Sync {
    /// The delay before `item` should be retried; records one more failure of it.
    fn when(&self, item: &T) -> Duration;
    /// Stops tracking `item`: its next failure starts from the first back-off step.
    fn forget(&self, item: &T);
    /// How many times `item` has been retried since it was last forgotten.
    fn num_requeues(&self, item: &T) -> u32;
}

impl<T, L: RateLimiter<T> + ?Sized> RateLimiter<T> for Box<L> {
    fn when(&self, item: &T) -> Duration {
        (**self).when(item)
    }
    fn forget(&self, item: &T) {
        (**self).forget(item);
    }
    fn num_requeues(&self, item: &T) -> u32 {
        (**self).num_requeues(item)
    }
}

/// Lets a caller keep a handle on the limiter it gives to a queue.
impl<T, L: RateLimiter<T> + ?Sized> RateLimiter<T> for Arc<L> {
    fn when(&self, item: &T) -> Duration {
        (**self).when(item)
    }
    fn forget(&self, item: &T) {
        (**self).forget(item);
    }
    fn num_requeues(&self, item: &T) -> u32 {
        (**self).num_requeues(item)
    }
}

/// Locks a limiter's state. Its critical sections cannot panic except in the item's own
/// `Hash`/`Eq`, after which the counts are still usable.
fn lock<S>(mutex: &Mutex<S>) -> MutexGuard<'_, S> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Per-item exponential back-off: `base * 2^failures`, capped at `max`.
///
/// With the defaults (5 ms, 1000 s) an item waits 5 ms, 10 ms, 20 ms, … and from its 19th
/// consecutive failure on, 1000 s. [`forget`](RateLimiter::forget) resets the item to 5 ms.
/// This is client-go's `ItemExponentialFailureRateLimiter`.
///
/// ```
/// use kubeplug_workqueue::{ItemExponential, RateLimiter};
/// use std::time::Duration;
///
/// let limiter = ItemExponential::default();
/// assert_eq!(limiter.when(&"a"), Duration::from_millis(5));
/// assert_eq!(limiter.when(&"a"), Duration::from_millis(10));
/// assert_eq!(limiter.when(&"b"), Duration::from_millis(5));
/// limiter.forget(&"a");
/// assert_eq!(limiter.when(&"a"), Duration::from_millis(5));
/// ```
pub struct ItemExponential<T> {
    base: Duration,
    max: Duration,
    /// Consecutive failures per item; an item absent here has none.
    failures: Mutex<HashMap<T, u32>>,
}

impl<T> ItemExponential<T> {
    /// A limiter starting at `base` and doubling up to `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        ItemExponential {
            base,
            max,
            failures: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> Default for ItemExponential<T> {
    /// 5 ms doubling up to 1000 s, as client-go's default controller limiter.
    fn default() -> Self {
        Self::new(Duration::from_millis(5), Duration::from_secs(1000))
    }
}

impl<T> fmt::Debug for ItemExponential<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ItemExponential")
            .field("base", &self.base)
            .field("max", &self.max)
            .field("tracked_items", &lock(&self.failures).len())
            .finish()
    }
}

impl<T: Hash + Eq + Clone + Send> RateLimiter<T> for ItemExponential<T> {
    fn when(&self, item: &T) -> Duration {
        let exponent = {
            let mut failures = lock(&self.failures);
            match failures.get_mut(item) {
                Some(count) => {
                    let exponent = *count;
                    *count = count.saturating_add(1);
                    exponent
                }
                None => {
                    failures.insert(item.clone(), 1);
                    0
                }
            }
        };
        2u32.checked_pow(exponent)
            .and_then(|factor| self.base.checked_mul(factor))
            .map_or(self.max, |delay| delay.min(self.max))
    }

    fn forget(&self, item: &T) {
        lock(&self.failures).remove(item);
    }

    fn num_requeues(&self, item: &T) -> u32 {
        lock(&self.failures).get(item).copied().unwrap_or(0)
    }
}

/// One token bucket: `burst` tokens at once, then `qps` per second; full at the start.
///
/// As a [`RateLimiter`] it is shared by all items, reserve-style, like
/// `golang.org/x/time/rate`'s `Reserve().Delay()` that client-go's `BucketRateLimiter` uses:
/// every call takes a token, possibly one not yet refilled, and returns how long until that
/// token exists. So with the defaults (10 qps, burst 100), 100 retries in a burst wait
/// nothing, the 101st waits 100 ms, the 102nd 200 ms, and so on. It tracks no item: `forget`
/// does nothing and `num_requeues` is 0.
///
/// Outside a queue, it paces anything on tokio's clock at a time the caller gives:
/// [`try_take`](Self::try_take) takes a token only if one is there (drop what is over the
/// rate), [`reserve`](Self::reserve) queues for one up to a longest wait (delay what is
/// over it). The Wasm runtime paces a plugin's log records, cluster writes and reconciles so.
///
/// The bucket is kept as a time (the "generic cell rate" form of a token bucket) rather than
/// a fractional token count, so delays are exact multiples of `1/qps`, with no float drift.
///
/// ```
/// use std::time::Duration;
///
/// use kubeplug_workqueue::TokenBucket;
/// use tokio::time::Instant;
///
/// let bucket = TokenBucket::new(20.0, 2);
/// let now = Instant::now();
/// let longest = Duration::from_secs(1);
/// assert_eq!(bucket.reserve(now, longest), Some(Duration::ZERO));
/// assert!(bucket.try_take(now));
/// // The burst is spent: the next token is one interval (50 ms) away.
/// assert!(!bucket.try_take(now));
/// assert_eq!(bucket.reserve(now, longest), Some(Duration::from_millis(50)));
/// ```
pub struct TokenBucket {
    /// Time to refill one token: `1 / qps`.
    interval: Duration,
    /// Time to refill a whole bucket: `burst / qps`.
    burst_span: Duration,
    bucket: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    /// Time origin of `refilled_at`: the first call.
    epoch: Option<Instant>,
    /// When (after `epoch`) every token taken so far will have been refilled. The bucket
    /// holds `burst - (refilled_at - now) / interval` tokens at `now`: full once `now` has
    /// passed it, negative when calls reserved tokens not yet refilled.
    refilled_at: Duration,
}

impl TokenBucket {
    /// A bucket refilled at `qps` tokens per second, holding at most `burst` tokens, full at
    /// the start.
    ///
    /// # Panics
    ///
    /// If `qps` is not a positive finite number (or so small that `1 / qps` seconds does not
    /// fit a `Duration`), or `burst` is 0 (no retry could ever pass).
    pub fn new(qps: f64, burst: u32) -> Self {
        assert!(
            qps.is_finite() && qps > 0.0,
            "TokenBucket qps must be positive and finite, got {qps}"
        );
        assert!(burst > 0, "TokenBucket burst must be at least 1");
        let interval = Duration::from_secs_f64(1.0 / qps);
        TokenBucket {
            interval,
            burst_span: interval.saturating_mul(burst),
            bucket: Mutex::new(Bucket {
                epoch: None,
                refilled_at: Duration::ZERO,
            }),
        }
    }
}

impl Default for TokenBucket {
    /// 10 qps with a burst of 100, as client-go's default controller limiter.
    fn default() -> Self {
        Self::new(10.0, 100)
    }
}

impl fmt::Debug for TokenBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBucket")
            .field("interval", &self.interval)
            .field("burst_span", &self.burst_span)
            .field("bucket", &*lock(&self.bucket))
            .finish()
    }
}

impl TokenBucket {
    /// Takes a token if one is there at `now`: `true` if taken, `false` and nothing taken
    /// or reserved otherwise.
    pub fn try_take(&self, now: Instant) -> bool {
        self.reserve(now, Duration::ZERO).is_some()
    }

    /// Reserves the next token: how long from `now` until it exists, if that is at most
    /// `longest`; `None` and nothing reserved otherwise. Reservations queue: each waits for
    /// those before it.
    pub fn reserve(&self, now: Instant, longest: Duration) -> Option<Duration> {
        let mut bucket = lock(&self.bucket);
        let epoch = *bucket.epoch.get_or_insert(now);
        let now = now.saturating_duration_since(epoch);
        // A bucket that refilled long ago is full, not fuller: start from `now` at the latest.
        let refilled_at = bucket.refilled_at.max(now).saturating_add(self.interval);
        // The token taken exists once the bucket is back to `burst - 1` tokens, or is there.
        let wait = refilled_at
            .saturating_sub(now)
            .saturating_sub(self.burst_span);
        (wait <= longest).then(|| {
            bucket.refilled_at = refilled_at;
            wait
        })
    }
}

impl<T> RateLimiter<T> for TokenBucket {
    fn when(&self, _item: &T) -> Duration {
        self.reserve(Instant::now(), Duration::MAX)
            .expect("no wait is longer than Duration::MAX")
    }

    fn forget(&self, _item: &T) {}

    fn num_requeues(&self, _item: &T) -> u32 {
        0
    }
}

/// The longest delay of several limiters; every limiter sees every call.
///
/// `num_requeues` is the largest of theirs. This is client-go's `MaxOfRateLimiter`.
///
/// ```
/// use kubeplug_workqueue::{FastSlow, ItemExponential, MaxOf, RateLimiter};
/// use std::time::Duration;
///
/// let limiter = MaxOf::new()
///     .with(ItemExponential::new(Duration::from_millis(1), Duration::from_secs(1)))
///     .with(FastSlow::new(Duration::from_millis(3), Duration::from_secs(1), 2));
/// assert_eq!(limiter.when(&"a"), Duration::from_millis(3)); // max(1 ms, 3 ms)
/// ```
pub struct MaxOf<T> {
    limiters: Vec<Box<dyn RateLimiter<T>>>,
}

impl<T> MaxOf<T> {
    /// A limiter with no parts yet (it delays nothing); add them with [`with`](Self::with).
    pub fn new() -> Self {
        MaxOf {
            limiters: Vec::new(),
        }
    }

    /// Adds one more limiter.
    pub fn with(mut self, limiter: impl RateLimiter<T> + 'static) -> Self {
        self.limiters.push(Box::new(limiter));
        self
    }
}

impl<T> Default for MaxOf<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for MaxOf<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaxOf")
            .field("limiters", &self.limiters.len())
            .finish()
    }
}

impl<T> RateLimiter<T> for MaxOf<T> {
    fn when(&self, item: &T) -> Duration {
        self.limiters
            .iter()
            .map(|limiter| limiter.when(item))
            .max()
            .unwrap_or(Duration::ZERO)
    }

    fn forget(&self, item: &T) {
        for limiter in &self.limiters {
            limiter.forget(item);
        }
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.limiters
            .iter()
            .map(|limiter| limiter.num_requeues(item))
            .max()
            .unwrap_or(0)
    }
}

/// `fast` for an item's first `max_fast_attempts` retries, `slow` after that, until forgotten.
///
/// This is client-go's `ItemFastSlowRateLimiter`: retry quickly a few times, then back off.
pub struct FastSlow<T> {
    fast: Duration,
    slow: Duration,
    max_fast_attempts: u32,
    /// Retries per item since it was last forgotten; an item absent here has none.
    attempts: Mutex<HashMap<T, u32>>,
}

impl<T> FastSlow<T> {
    /// A limiter giving `fast` for the first `max_fast_attempts` retries of an item, `slow`
    /// afterwards.
    pub fn new(fast: Duration, slow: Duration, max_fast_attempts: u32) -> Self {
        FastSlow {
            fast,
            slow,
            max_fast_attempts,
            attempts: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> fmt::Debug for FastSlow<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FastSlow")
            .field("fast", &self.fast)
            .field("slow", &self.slow)
            .field("max_fast_attempts", &self.max_fast_attempts)
            .field("tracked_items", &lock(&self.attempts).len())
            .finish()
    }
}

impl<T: Hash + Eq + Clone + Send> RateLimiter<T> for FastSlow<T> {
    fn when(&self, item: &T) -> Duration {
        let attempts = {
            let mut attempts = lock(&self.attempts);
            let count = match attempts.get_mut(item) {
                Some(count) => count,
                None => attempts.entry(item.clone()).or_insert(0),
            };
            *count = count.saturating_add(1);
            *count
        };
        if attempts <= self.max_fast_attempts {
            self.fast
        } else {
            self.slow
        }
    }

    fn forget(&self, item: &T) {
        lock(&self.attempts).remove(item);
    }

    fn num_requeues(&self, item: &T) -> u32 {
        lock(&self.attempts).get(item).copied().unwrap_or(0)
    }
}

/// client-go's `DefaultControllerRateLimiter`: the larger of a per-item exponential back-off
/// (5 ms doubling up to 1000 s) and an overall token bucket (10 qps, burst 100).
///
/// One failing item backs off exponentially; many failing items together are also held to
/// 10 retries per second once the burst is spent.
pub fn default_controller_rate_limiter<T: Hash + Eq + Clone + Send + 'static>() -> MaxOf<T> {
    MaxOf::new()
        .with(ItemExponential::default())
        .with(TokenBucket::default())
}

impl<T: Hash + Eq + Clone + Send + 'static> Queue<T> {
    /// Adds `item` after the delay the queue's rate limiter gives it
    /// ([`RateLimiter::when`]), which also counts it as one more failure.
    ///
    /// # Panics
    ///
    /// As [`add_after`](Self::add_after): outside a Tokio runtime, when the delay is positive.
    pub fn add_rate_limited(&self, item: T) {
        let delay = self.shared.limiter.when(&item);
        self.add_after(item, delay);
    }

    /// Tells the rate limiter that `item` succeeded: its back-off starts over. Does not
    /// remove the item from the queue or cancel an [`add_after`](Self::add_after).
    pub fn forget(&self, item: &T) {
        self.shared.limiter.forget(item);
    }

    /// How many times `item` went through [`add_rate_limited`](Self::add_rate_limited)
    /// since it was last [`forget`](Self::forget)-ed.
    pub fn num_requeues(&self, item: &T) -> u32 {
        self.shared.limiter.num_requeues(item)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::{Instant, advance};

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn exponential_doubles_from_base_caps_at_max_and_resets_on_forget() {
        let limiter = ItemExponential::new(MS, 10 * MS);
        let delays: Vec<_> = (0..6).map(|_| limiter.when(&"a")).collect();
        assert_eq!(delays, [MS, 2 * MS, 4 * MS, 8 * MS, 10 * MS, 10 * MS]);
        assert_eq!(limiter.num_requeues(&"a"), 6);
        assert_eq!(limiter.when(&"b"), MS, "items back off independently");

        limiter.forget(&"a");
        assert_eq!(limiter.num_requeues(&"a"), 0);
        assert_eq!(limiter.when(&"a"), MS);
    }

    #[test]
    fn exponential_defaults_are_5ms_doubling_to_1000s_without_overflow() {
        let limiter = ItemExponential::default();
        let delays: Vec<_> = (0..4).map(|_| limiter.when(&1)).collect();
        assert_eq!(delays, [5 * MS, 10 * MS, 20 * MS, 40 * MS]);
        for _ in 4..100 {
            limiter.when(&1);
        }
        assert_eq!(limiter.when(&1), Duration::from_secs(1000));
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_allows_a_burst_then_a_steady_rate() {
        let bucket = TokenBucket::new(10.0, 100);
        for i in 0..100 {
            assert_eq!(
                bucket.when(&i),
                Duration::ZERO,
                "call {i} is within the burst"
            );
        }
        // Reserve-style: each further call queues behind the previous one, 100 ms apart.
        assert_eq!(bucket.when(&100), 100 * MS);
        assert_eq!(bucket.when(&101), 200 * MS);
        assert_eq!(bucket.when(&102), 300 * MS);
        // After 300 ms the reserved tokens exist; from then on 10 per second pass.
        advance(300 * MS).await;
        for _ in 0..5 {
            advance(100 * MS).await;
            assert_eq!(bucket.when(&0), Duration::ZERO);
        }
        assert_eq!(bucket.when(&0), 100 * MS, "faster than 10/s must wait");
        // A long pause refills the bucket only up to the burst.
        advance(Duration::from_secs(3600)).await;
        let immediate = (0..1000)
            .take_while(|_| bucket.when(&0) == Duration::ZERO)
            .count();
        assert_eq!(immediate, 100);
    }

    #[test]
    fn bucket_reserves_up_to_the_longest_wait_and_takes_only_what_is_there() {
        let start = Instant::now();
        let bucket = TokenBucket::new(20.0, 30);
        let longest = Duration::from_secs(30);
        for _ in 0..30 {
            assert_eq!(bucket.reserve(start, longest), Some(Duration::ZERO));
        }
        // The 31st waits one token's time, the 32nd two.
        assert_eq!(bucket.reserve(start, longest), Some(50 * MS));
        assert_eq!(bucket.reserve(start, longest), Some(100 * MS));
        // Nothing is reserved past the longest wait, nor taken when nothing is there.
        assert_eq!(bucket.reserve(start, 120 * MS), None);
        assert!(!bucket.try_take(start));
        assert_eq!(bucket.reserve(start, longest), Some(150 * MS));
        // A second later, 20 more tokens: the queue of 3 is paid, 17 are free.
        let later = start + Duration::from_secs(1);
        let free = (0..40).filter(|_| bucket.try_take(later)).count();
        assert_eq!(free, 17);
    }

    #[test]
    fn bucket_tracks_no_item() {
        let bucket = TokenBucket::default();
        RateLimiter::<u8>::when(&bucket, &1);
        assert_eq!(RateLimiter::<u8>::num_requeues(&bucket, &1), 0);
    }

    #[test]
    fn max_of_picks_the_larger_delay_and_requeue_count() {
        let limiter = MaxOf::new()
            .with(ItemExponential::new(MS, Duration::from_secs(1)))
            .with(FastSlow::new(3 * MS, 100 * MS, 1));
        // exponential 1, 2, 4 ms; fast-slow 3, 100, 100 ms.
        let delays: Vec<_> = (0..3).map(|_| limiter.when(&"a")).collect();
        assert_eq!(delays, [3 * MS, 100 * MS, 100 * MS]);
        assert_eq!(limiter.num_requeues(&"a"), 3);
        limiter.forget(&"a");
        assert_eq!(limiter.when(&"a"), 3 * MS, "forget reaches every part");
        assert_eq!(MaxOf::<u8>::new().when(&1), Duration::ZERO);
    }

    #[test]
    fn fast_slow_is_fast_for_n_attempts_then_slow_until_forgotten() {
        let limiter = FastSlow::new(MS, Duration::from_secs(10), 3);
        let delays: Vec<_> = (0..5).map(|_| limiter.when(&"a")).collect();
        let slow = Duration::from_secs(10);
        assert_eq!(delays, [MS, MS, MS, slow, slow]);
        assert_eq!(limiter.when(&"b"), MS);
        assert_eq!(limiter.num_requeues(&"a"), 5);
        limiter.forget(&"a");
        assert_eq!(limiter.when(&"a"), MS);
    }

    #[tokio::test(start_paused = true)]
    async fn default_controller_limiter_is_exponential_until_the_burst_is_spent() {
        let limiter = default_controller_rate_limiter::<String>();
        let a = "a".to_string();
        assert_eq!(limiter.when(&a), 5 * MS);
        assert_eq!(limiter.when(&a), 10 * MS);
        for i in 0..98 {
            assert_eq!(limiter.when(&i.to_string()), 5 * MS);
        }
        // Burst of 100 spent: a fresh item now waits for the bucket (100 ms), not 5 ms.
        assert_eq!(limiter.when(&"fresh".to_string()), 100 * MS);
        assert_eq!(limiter.num_requeues(&a), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn queue_add_rate_limited_backs_off_and_forget_resets() {
        let queue: Queue<&str> = Queue::builder("backoff")
            .rate_limiter(ItemExponential::new(10 * MS, Duration::from_secs(1)))
            .build();
        let start = Instant::now();
        let mut arrivals = Vec::new();
        for _ in 0..3 {
            queue.add_rate_limited("a");
            let item = queue.get().await.unwrap();
            arrivals.push(start.elapsed());
            queue.done(&item);
        }
        // 10 ms, then 20 ms more, then 40 ms more.
        assert_eq!(arrivals, [10 * MS, 30 * MS, 70 * MS]);
        assert_eq!(queue.num_requeues(&"a"), 3);
        queue.forget(&"a");
        assert_eq!(queue.num_requeues(&"a"), 0);
        queue.add_rate_limited("a");
        queue.get().await.unwrap();
        assert_eq!(
            start.elapsed(),
            80 * MS,
            "back to the base delay after forget"
        );
    }
}
