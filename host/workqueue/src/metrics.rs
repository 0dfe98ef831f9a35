//! Prometheus metrics with the names client-go and controller-runtime expose, so that
//! existing dashboards and alerts work unchanged.
//!
//! One [`WorkqueueMetrics`] registers one family per metric; every metered queue is one series
//! in each family, told apart by its `name` label.
//!
//! Update strategy: the two counters and the two histograms are updated by the queue
//! operations themselves (`add`, `get`, `done`, `add_after`), with relaxed atomics outside the
//! queue's lock. The three gauges (`depth`, `unfinished_work_seconds`,
//! `longest_running_processor_seconds`) are computed **on scrape** from the queue's state by a
//! [`Collector`]: exact at every scrape, nothing to update on the hot path, and no ticking
//! task per queue (client-go instead recomputes the in-flight gauges every 500 ms).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Registry, Unit};
use tokio::time::Instant;

use crate::Error;

/// The `name` label of every workqueue series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct QueueLabels {
    name: String,
}

/// Upper bounds of client-go's duration buckets, `ExponentialBuckets(10e-9, 10, 10)`: 10 ns
/// to 10 s. (Written as exact decimals; Go's repeated multiplication gives the same numbers
/// to the last bit or two, e.g. `9.999999999999999e-06` for `1e-05`.)
const DURATION_BOUNDS: [f64; 10] = [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];

/// A histogram of durations over [`DURATION_BOUNDS`], updated with atomics only.
///
/// `prometheus-client`'s `Histogram` takes a mutex per observation: a second contended lock
/// on every `get` and `done` (see the throughput bench). Here an observation is three relaxed
/// atomic additions; a scrape may see them half-applied, as with any lock-free client.
#[derive(Clone, Debug, Default)]
struct DurationHistogram {
    cells: Arc<HistogramCells>,
}

#[derive(Debug, Default)]
struct HistogramCells {
    /// Observations per bucket, not cumulative: `buckets[i]` counts durations in
    /// `(bound[i-1], bound[i]]`; the last one is `+Inf`.
    buckets: [AtomicU64; DURATION_BOUNDS.len() + 1],
    /// Sum of all observations, in nanoseconds: exact, and one `fetch_add`.
    sum_nanos: AtomicU64,
}

impl DurationHistogram {
    fn observe(&self, duration: Duration) {
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        // The bounds are 10^(i+1) ns exactly.
        let mut bucket = 0;
        let mut bound = 10u64;
        while bucket < DURATION_BOUNDS.len() && nanos > bound {
            bucket += 1;
            bound *= 10;
        }
        let cells = &*self.cells;
        cells.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        cells.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }
}

impl TypedMetric for DurationHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for DurationHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), fmt::Error> {
        let cells = &*self.cells;
        let buckets: Vec<(f64, u64)> = DURATION_BOUNDS
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(cells.buckets.iter().map(|n| n.load(Ordering::Relaxed)))
            .collect();
        // The count is the buckets' total, so that `+Inf` and `_count` always agree.
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = cells.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// The metric families of all queues, registered once in a Prometheus [`Registry`].
///
/// # Contract
///
/// - [`register`](Self::register) adds to the registry, once, the families
///   `workqueue_depth`, `workqueue_adds_total`, `workqueue_queue_duration_seconds`,
///   `workqueue_work_duration_seconds`, `workqueue_unfinished_work_seconds`,
///   `workqueue_longest_running_processor_seconds` and `workqueue_retries_total`: the names
///   client-go and controller-runtime use. Pass a registry without a prefix to keep them.
/// - Each queue built with [`QueueBuilder::metrics`](crate::QueueBuilder::metrics) is one
///   series per family, labelled `name="<queue name>"`. Names are unique among live queues;
///   a dropped queue's series are removed and its name can be used again.
/// - Clones share the same families: build it once and hand clones to every queue.
/// - The metrics mean what they mean in client-go: depth counts the items added and not yet
///   handed out (including those re-added while processing); adds counts adds that were not
///   deduplicated; retries counts every `add_after` (so every `add_rate_limited`); the
///   durations are in seconds; the three gauges are computed at scrape time.
///
/// ```
/// use kubeplug_workqueue::{Queue, WorkqueueMetrics};
/// use prometheus_client::{encoding::text::encode, registry::Registry};
///
/// let mut registry = Registry::default();
/// let metrics = WorkqueueMetrics::register(&mut registry);
/// let queue: Queue<String> = Queue::builder("pods").metrics(&metrics)?.build();
/// queue.add("default/web".to_string());
///
/// let mut text = String::new();
/// encode(&mut text, &registry).unwrap();
/// assert!(text.contains(r#"workqueue_depth{name="pods"} 1"#));
/// # Ok::<(), kubeplug_workqueue::Error>(())
/// ```
#[derive(Clone)]
pub struct WorkqueueMetrics {
    families: Arc<Families>,
}

struct Families {
    adds: Family<QueueLabels, Counter>,
    queue_duration: Family<QueueLabels, DurationHistogram>,
    work_duration: Family<QueueLabels, DurationHistogram>,
    retries: Family<QueueLabels, Counter>,
    /// The live metered queues by name, for the uniqueness check and the scrape-time gauges.
    /// A name is present from `reserve` until its `QueueMetrics` is dropped; the weak handle
    /// is `None` until the queue is built.
    queues: Mutex<HashMap<String, Option<Weak<dyn ScrapeGauges>>>>,
}

impl Families {
    fn queues(&self) -> MutexGuard<'_, HashMap<String, Option<Weak<dyn ScrapeGauges>>>> {
        // Nothing panics under this lock; recover rather than fail every scrape.
        self.queues.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for WorkqueueMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<String> = self.families.queues().keys().cloned().collect();
        names.sort();
        f.debug_struct("WorkqueueMetrics")
            .field("queues", &names)
            .finish()
    }
}

impl WorkqueueMetrics {
    /// Registers the workqueue metric families in `registry` and returns the handle that
    /// queues report to. Call it once per registry: a second call would register every
    /// family twice.
    pub fn register(registry: &mut Registry) -> Self {
        let families = Arc::new(Families {
            adds: Family::default(),
            queue_duration: Family::default(),
            work_duration: Family::default(),
            retries: Family::default(),
            queues: Mutex::new(HashMap::new()),
        });
        // prometheus-client appends `_total` to counters and the unit to the name.
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            families.adds.clone(),
        );
        registry.register_with_unit(
            "workqueue_queue_duration",
            "How long in seconds an item stays in workqueue before being requested",
            Unit::Seconds,
            families.queue_duration.clone(),
        );
        registry.register_with_unit(
            "workqueue_work_duration",
            "How long in seconds processing an item from workqueue takes",
            Unit::Seconds,
            families.work_duration.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            families.retries.clone(),
        );
        registry.register_collector(Box::new(GaugeCollector {
            families: Arc::clone(&families),
        }));
        WorkqueueMetrics { families }
    }

    /// Takes `name` for one queue and creates its series.
    pub(crate) fn reserve(&self, name: &str) -> Result<QueueMetrics, Error> {
        if name.is_empty() {
            return Err(Error::EmptyQueueName);
        }
        {
            let mut queues = self.families.queues();
            if queues.contains_key(name) {
                return Err(Error::DuplicateQueueName {
                    name: name.to_string(),
                });
            }
            queues.insert(name.to_string(), None);
        }
        let families = &self.families;
        let labels = QueueLabels {
            name: name.to_string(),
        };
        Ok(QueueMetrics {
            adds: families.adds.get_or_create_owned(&labels),
            queue_duration: families.queue_duration.get_or_create_owned(&labels),
            work_duration: families.work_duration.get_or_create_owned(&labels),
            retries: families.retries.get_or_create_owned(&labels),
            families: Arc::clone(families),
            labels,
        })
    }
}

/// The series of one queue. Owned by the queue: dropping it frees the name and removes the
/// series. Updates are lock-free atomics.
pub(crate) struct QueueMetrics {
    families: Arc<Families>,
    labels: QueueLabels,
    adds: Counter,
    queue_duration: DurationHistogram,
    work_duration: DurationHistogram,
    retries: Counter,
}

impl QueueMetrics {
    /// Lets the scrape-time collector read the queue's in-flight items.
    pub(crate) fn attach(&self, queue: Weak<dyn ScrapeGauges>) {
        if let Some(slot) = self.families.queues().get_mut(&self.labels.name) {
            *slot = Some(queue);
        }
    }

    /// An item was added (not deduplicated).
    pub(crate) fn added(&self) {
        self.adds.inc();
    }

    /// An item was handed out after waiting `waited` since it was added.
    pub(crate) fn taken(&self, waited: Duration) {
        self.queue_duration.observe(waited);
    }

    /// An item was done after `worked` of processing.
    pub(crate) fn finished(&self, worked: Duration) {
        self.work_duration.observe(worked);
    }

    /// An `add_after` call.
    pub(crate) fn retried(&self) {
        self.retries.inc();
    }
}

impl Drop for QueueMetrics {
    fn drop(&mut self) {
        let families = &self.families;
        families.queues().remove(&self.labels.name);
        families.adds.remove(&self.labels);
        families.queue_duration.remove(&self.labels);
        families.work_duration.remove(&self.labels);
        families.retries.remove(&self.labels);
    }
}

/// A queue's gauges at one instant.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct GaugeValues {
    /// Items added and not yet handed out (client-go's depth: waiting, or re-added while
    /// processing).
    pub(crate) depth: usize,
    /// Sum over items being processed of how long each has been processing.
    pub(crate) unfinished_seconds: f64,
    /// The longest of those.
    pub(crate) longest_running_seconds: f64,
}

/// A queue seen by the scrape-time collector, without its item type.
pub(crate) trait ScrapeGauges: Send + Sync {
    /// The gauge values at `now`.
    fn gauges(&self, now: Instant) -> GaugeValues;
}

/// Computes the three gauges of every live queue at scrape time.
struct GaugeCollector {
    families: Arc<Families>,
}

impl fmt::Debug for GaugeCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GaugeCollector").finish_non_exhaustive()
    }
}

impl Collector for GaugeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        // Upgrade under the lock, compute after it: dropping the last handle of a queue
        // here runs its `QueueMetrics::drop`, which takes the lock again.
        let queues: Vec<(QueueLabels, Arc<dyn ScrapeGauges>)> = self
            .families
            .queues()
            .iter()
            .filter_map(|(name, queue)| {
                let queue = queue.as_ref()?.upgrade()?;
                Some((QueueLabels { name: name.clone() }, queue))
            })
            .collect();
        let now = Instant::now();
        let mut stats: Vec<(QueueLabels, GaugeValues)> = queues
            .iter()
            .map(|(labels, queue)| (labels.clone(), queue.gauges(now)))
            .collect();
        drop(queues);
        stats.sort_by(|a, b| a.0.cmp(&b.0));

        encode_gauge(
            &mut encoder,
            "workqueue_depth",
            "Current depth of workqueue.",
            None,
            stats.iter().map(|(l, s)| (l, s.depth as f64)),
        )?;
        encode_gauge(
            &mut encoder,
            "workqueue_unfinished_work",
            "How many seconds of work has been done that is in progress and hasn't been \
             observed by work_duration. Large values indicate stuck threads.",
            Some(&Unit::Seconds),
            stats.iter().map(|(l, s)| (l, s.unfinished_seconds)),
        )?;
        encode_gauge(
            &mut encoder,
            "workqueue_longest_running_processor",
            "How many seconds has the longest running processor for workqueue been running.",
            Some(&Unit::Seconds),
            stats.iter().map(|(l, s)| (l, s.longest_running_seconds)),
        )?;
        Ok(())
    }
}

/// Encodes one gauge family with one sample per queue; the unit is appended to the name.
fn encode_gauge<'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    samples: impl Iterator<Item = (&'a QueueLabels, f64)>,
) -> Result<(), fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, unit, MetricType::Gauge)?;
    for (labels, seconds) in samples {
        ConstGauge::new(seconds).encode(metric.encode_family(labels)?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::FutureExt;
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;

    use super::DurationHistogram;
    use crate::{Error, Queue, WorkqueueMetrics};

    fn scrape(registry: &Registry) -> String {
        let mut text = String::new();
        encode(&mut text, registry).unwrap();
        text
    }

    /// The value of the sample `series` (name and labels exactly as exposed).
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|line| {
            let value = line.strip_prefix(series)?.strip_prefix(' ')?;
            Some(value.parse().expect("a number"))
        })
    }

    fn get_now(queue: &Queue<&'static str>) -> &'static str {
        queue.get().now_or_never().flatten().expect("an item")
    }

    #[tokio::test(start_paused = true)]
    async fn exposes_the_client_go_names_with_a_name_label() {
        let mut registry = Registry::default();
        let metrics = WorkqueueMetrics::register(&mut registry);
        let queue = Queue::builder("pods").metrics(&metrics).unwrap().build();
        queue.add("a");
        let item = get_now(&queue);
        queue.done(&item);

        let text = scrape(&registry);
        for name in [
            "workqueue_depth",
            "workqueue_adds_total",
            "workqueue_unfinished_work_seconds",
            "workqueue_longest_running_processor_seconds",
            "workqueue_retries_total",
        ] {
            let series = format!("{name}{{name=\"pods\"}}");
            assert!(
                sample(&text, &series).is_some(),
                "{series} missing from:\n{text}"
            );
        }
        for name in [
            "workqueue_queue_duration_seconds",
            "workqueue_work_duration_seconds",
        ] {
            for suffix in ["_count", "_sum"] {
                let series = format!("{name}{suffix}{{name=\"pods\"}}");
                assert!(sample(&text, &series).is_some(), "{series} missing");
            }
            let buckets = text
                .lines()
                .filter(|l| l.starts_with(&format!("{name}_bucket{{")))
                .filter(|l| l.contains(r#"name="pods""#) && l.contains("le="))
                .count();
            assert_eq!(buckets, 11, "10 client-go buckets and +Inf for {name}");
        }
        assert!(text.contains("# TYPE workqueue_adds counter"));
        assert!(text.contains("# TYPE workqueue_depth gauge"));
    }

    #[tokio::test(start_paused = true)]
    async fn depth_adds_and_durations_move_with_the_queue() {
        let mut registry = Registry::default();
        let metrics = WorkqueueMetrics::register(&mut registry);
        let queue = Queue::builder("q").metrics(&metrics).unwrap().build();
        queue.add("a");
        queue.add("b");
        queue.add("a"); // deduplicated: not an add
        let text = scrape(&registry);
        assert_eq!(sample(&text, r#"workqueue_depth{name="q"}"#), Some(2.0));
        assert_eq!(
            sample(&text, r#"workqueue_adds_total{name="q"}"#),
            Some(2.0)
        );

        tokio::time::advance(Duration::from_secs(2)).await;
        let a = get_now(&queue);
        tokio::time::advance(Duration::from_secs(3)).await;
        queue.done(&a);
        let text = scrape(&registry);
        assert_eq!(sample(&text, r#"workqueue_depth{name="q"}"#), Some(1.0));
        assert_eq!(
            sample(&text, r#"workqueue_queue_duration_seconds_sum{name="q"}"#),
            Some(2.0)
        );
        assert_eq!(
            sample(&text, r#"workqueue_work_duration_seconds_sum{name="q"}"#),
            Some(3.0)
        );
        assert_eq!(
            sample(&text, r#"workqueue_work_duration_seconds_count{name="q"}"#),
            Some(1.0)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn retries_count_rate_limited_and_delayed_adds() {
        let mut registry = Registry::default();
        let metrics = WorkqueueMetrics::register(&mut registry);
        let queue = Queue::builder("q").metrics(&metrics).unwrap().build();
        queue.add_rate_limited("a");
        queue.add_rate_limited("a");
        queue.add_after("b", Duration::from_secs(1));
        let text = scrape(&registry);
        assert_eq!(
            sample(&text, r#"workqueue_retries_total{name="q"}"#),
            Some(3.0)
        );
        assert_eq!(sample(&text, r#"workqueue_depth{name="q"}"#), Some(0.0));
        tokio::time::sleep(Duration::from_secs(2)).await;
        let text = scrape(&registry);
        assert_eq!(sample(&text, r#"workqueue_depth{name="q"}"#), Some(2.0));
    }

    #[tokio::test(start_paused = true)]
    async fn unfinished_work_and_longest_running_follow_in_flight_items() {
        let mut registry = Registry::default();
        let metrics = WorkqueueMetrics::register(&mut registry);
        let queue = Queue::builder("q").metrics(&metrics).unwrap().build();
        let unfinished = r#"workqueue_unfinished_work_seconds{name="q"}"#;
        let longest = r#"workqueue_longest_running_processor_seconds{name="q"}"#;
        queue.add("a");
        queue.add("b");
        let a = get_now(&queue);
        tokio::time::advance(Duration::from_secs(4)).await;
        let b = get_now(&queue);
        tokio::time::advance(Duration::from_secs(1)).await;

        let text = scrape(&registry);
        assert_eq!(sample(&text, unfinished), Some(5.0 + 1.0));
        assert_eq!(sample(&text, longest), Some(5.0));

        queue.done(&a);
        let text = scrape(&registry);
        assert_eq!(sample(&text, unfinished), Some(1.0));
        assert_eq!(sample(&text, longest), Some(1.0));

        queue.done(&b);
        let text = scrape(&registry);
        assert_eq!(sample(&text, unfinished), Some(0.0));
        assert_eq!(sample(&text, longest), Some(0.0));
    }

    #[tokio::test(start_paused = true)]
    async fn names_are_unique_among_live_queues_and_freed_on_drop() {
        let mut registry = Registry::default();
        let metrics = WorkqueueMetrics::register(&mut registry);
        let first: Queue<u8> = Queue::builder("q").metrics(&metrics).unwrap().build();
        let second = Queue::<u8>::builder("q").metrics(&metrics);
        assert_eq!(
            second.unwrap_err(),
            Error::DuplicateQueueName {
                name: "q".to_string()
            }
        );
        assert_eq!(
            Queue::<u8>::builder("").metrics(&metrics).unwrap_err(),
            Error::EmptyQueueName
        );
        let other: Queue<u8> = Queue::builder("other").metrics(&metrics).unwrap().build();
        other.add(1);

        let clone = first.clone();
        drop(first);
        assert!(
            Queue::<u8>::builder("q").metrics(&metrics).is_err(),
            "a clone still holds the name"
        );
        drop(clone);
        assert!(!scrape(&registry).contains(r#"name="q""#), "series removed");
        let _again: Queue<u8> = Queue::builder("q").metrics(&metrics).unwrap().build();
        assert!(scrape(&registry).contains(r#"workqueue_depth{name="other"} 1"#));
    }

    #[test]
    fn duration_histogram_uses_client_go_buckets_inclusive_and_cumulative() {
        let histogram = DurationHistogram::default();
        for nanos in [10, 11, 100, 1_000_000_000, 10_000_000_000, 10_000_000_001] {
            histogram.observe(Duration::from_nanos(nanos));
        }
        let mut registry = Registry::default();
        registry.register("h", "test", histogram);
        let text = scrape(&registry);
        let buckets: Vec<(f64, f64)> = text
            .lines()
            .filter_map(|line| {
                let rest = line.strip_prefix("h_bucket{le=\"")?;
                let (le, count) = rest.split_once("\"} ")?;
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap()
                };
                Some((le, count.parse().unwrap()))
            })
            .collect();
        let expected = [
            (1e-8, 1.0), // 10 ns: bounds are inclusive
            (1e-7, 3.0), // 11 ns, 100 ns
            (1e-6, 3.0),
            (1e-5, 3.0),
            (1e-4, 3.0),
            (1e-3, 3.0),
            (1e-2, 3.0),
            (1e-1, 3.0),
            (1.0, 4.0),  // 1 s
            (10.0, 5.0), // 10 s
            (f64::INFINITY, 6.0),
        ];
        assert_eq!(buckets, expected, "in:\n{text}");
        assert_eq!(sample(&text, "h_count"), Some(6.0));
        assert_eq!(sample(&text, "h_sum"), Some(21.000000122));
    }

    #[tokio::test(start_paused = true)]
    async fn a_queue_without_metrics_works_and_reports_nothing() {
        let mut registry = Registry::default();
        let _metrics = WorkqueueMetrics::register(&mut registry);
        let queue = Queue::new();
        queue.add("a");
        let item = get_now(&queue);
        queue.done(&item);
        assert!(!scrape(&registry).contains("name="));
    }
}
