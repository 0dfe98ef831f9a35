//! A loaded plugin's counters, state and plugin-defined metrics.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kubeplug_policy::names::quoted;

/// What a plugin is doing now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum RunState {
    /// Receiving deliveries.
    #[default]
    Running,
    /// Paused after too many consecutive failures; its buffers keep only the latest state
    /// per key. It is retried after `retry_in`.
    Quarantined {
        /// The back-off before the next attempt.
        retry_in: Duration,
        /// The failure that caused it.
        last_error: String,
    },
    /// Its driver stopped (the subscriptions closed).
    Stopped,
}

/// Counters of one plugin, updated by its driver and its host calls.
#[derive(Debug, Default)]
pub struct PluginStats {
    pub(crate) events_delivered: AtomicU64,
    pub(crate) calls_failed: AtomicU64,
    pub(crate) batches_skipped: AtomicU64,
    pub(crate) instances_created: AtomicU64,
    pub(crate) denied: AtomicU64,
    pub(crate) reconciles: AtomicU64,
    pub(crate) keys_refused: AtomicU64,
    pub(crate) quarantines: AtomicU64,
    pub(crate) consecutive_failures: AtomicU64,
    pub(crate) call_nanos: AtomicU64,
    /// Written by its driver (through [`set_state`](Self::set_state)) only; whoever follows
    /// it subscribes ([`watch_state`](Self::watch_state)). A watch channel holds the latest
    /// value alone: a follower that lags sees the state now, not every one between.
    pub(crate) state: tokio::sync::watch::Sender<RunState>,
    pub(crate) last_error: Mutex<Option<String>>,
}

/// A snapshot of a plugin's status, for HTTP and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginStatus {
    /// Its state.
    pub state: RunState,
    /// Events handed to it in calls that succeeded; in reconcile mode, notifications turned
    /// into keys (by its key mapping, `map-event` included).
    pub events_delivered: u64,
    /// Calls that trapped, ran out of time or memory, or returned an error.
    pub calls_failed: u64,
    /// Events-mode batches given up after their retries.
    pub batches_skipped: u64,
    /// Instances created (the first, and one after every fault).
    pub instances_created: u64,
    /// Host calls refused by its grants.
    pub denied: u64,
    /// Reconcile calls made.
    pub reconciles: u64,
    /// Keys its `map-event` named that were dropped: past the first
    /// [`MAX_MAPPED_KEYS`](crate::reconcile::MAX_MAPPED_KEYS) of one call, of a type it enqueues
    /// no keys of, or with a name or namespace no object can have.
    pub keys_refused: u64,
    /// Times it was quarantined.
    pub quarantines: u64,
    /// Wall-clock time spent inside calls into the plugin (lowering the arguments, running
    /// it, lifting the result), in nanoseconds.
    pub call_nanos: u64,
    /// The last failure, if any.
    pub last_error: Option<String>,
}

/// Longest error text kept from a plugin (its own messages and trap descriptions).
pub(crate) const MAX_ERROR: usize = 4096;

/// `text` cut to [`MAX_ERROR`] bytes at a char boundary, marked when cut.
pub(crate) fn bounded(text: &str) -> String {
    if text.len() <= MAX_ERROR {
        return text.to_owned();
    }
    let mut end = MAX_ERROR;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().expect("plugin status lock poisoned by a panic")
}

impl PluginStats {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Sets its state, waking whoever follows it only when it changes.
    pub(crate) fn set_state(&self, state: RunState) {
        self.state.send_if_modified(|current| {
            let changed = *current != state;
            *current = state;
            changed
        });
    }

    /// Its state now and at every change from now on (quarantined, running again,
    /// stopped), for a host that acts on them as they happen.
    pub fn watch_state(&self) -> tokio::sync::watch::Receiver<RunState> {
        self.state.subscribe()
    }

    pub(crate) fn record_failure(&self, error: &str) -> u64 {
        self.calls_failed.fetch_add(1, Ordering::Relaxed);
        *lock(&self.last_error) = Some(error.to_owned());
        self.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn record_success(&self) {
        self.consecutive_failures.store(0, Ordering::Relaxed);
    }

    /// The current status.
    pub fn snapshot(&self) -> PluginStatus {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PluginStatus {
            state: self.state.borrow().clone(),
            events_delivered: get(&self.events_delivered),
            calls_failed: get(&self.calls_failed),
            batches_skipped: get(&self.batches_skipped),
            instances_created: get(&self.instances_created),
            denied: get(&self.denied),
            reconciles: get(&self.reconciles),
            keys_refused: get(&self.keys_refused),
            quarantines: get(&self.quarantines),
            call_nanos: get(&self.call_nanos),
            last_error: lock(&self.last_error).clone(),
        }
    }
}

/// The most series one plugin may define.
pub const MAX_SERIES: usize = 64;

/// The longest value of a label of a plugin-defined series.
pub const MAX_LABEL_VALUE: usize = 1024;

/// A plugin-defined series: metric name plus sorted labels.
pub type SeriesKey = (String, Vec<(String, String)>);

/// The value of a plugin-defined series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MetricValue {
    /// A counter.
    Counter(u64),
    /// A gauge.
    Gauge(f64),
}

/// Plugin-defined counters and gauges; the binary exports them with a `plugin` label.
///
/// Contract: at most [`MAX_SERIES`] series; a name is a counter or a gauge, never both.
#[derive(Debug, Default)]
pub struct PluginMetrics {
    series: Mutex<BTreeMap<SeriesKey, MetricValue>>,
}

/// Why a metric update was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetricError {
    /// Bad name or label name.
    #[error(
        "{} is not a valid Prometheus name ([a-zA-Z_:][a-zA-Z0-9_:]*, at most 128 bytes)",
        quoted(.0)
    )]
    InvalidName(String),
    /// A label value longer than [`MAX_LABEL_VALUE`].
    #[error("the value of label {} is {length} bytes; at most {MAX_LABEL_VALUE}", quoted(.label))]
    LabelValueTooLong {
        /// The label.
        label: String,
        /// Its value's length.
        length: usize,
    },
    /// Too many series.
    #[error(
        "the plugin already has {MAX_SERIES} series; {} would be one more",
        quoted(.0)
    )]
    TooManySeries(String),
    /// Counter used as gauge or the reverse.
    #[error("{} is already a metric of the other type", quoted(.0))]
    TypeMismatch(String),
    /// A label name Prometheus refuses or reserves.
    #[error(
        "{} is not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*, at most 128 bytes, not \
         starting with `__`, which Prometheus reserves)",
        quoted(.0)
    )]
    InvalidLabelName(String),
    /// A label named twice in one series: Prometheus refuses the whole scrape for it.
    #[error("the label {} is named twice", quoted(.0))]
    DuplicateLabel(String),
    /// A name the host's own series use.
    #[error(
        "{} is reserved for the host: metric names may not start with {RESERVED_PREFIXES:?}, and the label `plugin` is set by the host",
        quoted(.0)
    )]
    Reserved(String),
}

/// Prefixes of the host's own series (kubeplug, client-go's workqueue, controller-runtime's
/// leader election, the process collector), which a plugin's series must not collide with.
pub const RESERVED_PREFIXES: [&str; 4] =
    ["kubeplug_", "workqueue_", "leader_election_", "process_"];

/// A Prometheus label name: no colons, unlike metric names, and no `__` prefix, which
/// Prometheus keeps for its own labels (`__name__` would rename the series).
fn valid_label_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= 128
        && !name.starts_with("__")
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= 128
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b == b':')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
}

impl PluginMetrics {
    fn update(
        &self,
        name: &str,
        labels: Vec<(String, String)>,
        f: impl FnOnce(Option<MetricValue>) -> Result<MetricValue, MetricError>,
    ) -> Result<(), MetricError> {
        if !valid_name(name) {
            return Err(MetricError::InvalidName(name.to_owned()));
        }
        if RESERVED_PREFIXES
            .iter()
            .any(|prefix| name.starts_with(prefix))
        {
            return Err(MetricError::Reserved(name.to_owned()));
        }
        if let Some((reserved, _)) = labels.iter().find(|(k, _)| k == "plugin") {
            return Err(MetricError::Reserved(reserved.clone()));
        }
        if let Some((bad, _)) = labels.iter().find(|(k, _)| !valid_label_name(k)) {
            return Err(MetricError::InvalidLabelName(bad.clone()));
        }
        if let Some((label, value)) = labels.iter().find(|(_, v)| v.len() > MAX_LABEL_VALUE) {
            return Err(MetricError::LabelValueTooLong {
                label: label.clone(),
                length: value.len(),
            });
        }
        let mut labels = labels;
        labels.sort();
        if let Some(pair) = labels.windows(2).find(|pair| pair[0].0 == pair[1].0) {
            return Err(MetricError::DuplicateLabel(pair[0].0.clone()));
        }
        let mut series = lock(&self.series);
        let key = (name.to_owned(), labels);
        let old = series.get(&key).copied();
        if old.is_none() && series.len() >= MAX_SERIES {
            return Err(MetricError::TooManySeries(name.to_owned()));
        }
        let new = f(old)?;
        series.insert(key, new);
        Ok(())
    }

    /// Adds `delta` to a counter.
    pub fn counter_add(
        &self,
        name: &str,
        labels: Vec<(String, String)>,
        delta: u64,
    ) -> Result<(), MetricError> {
        self.update(name, labels, |old| match old {
            None => Ok(MetricValue::Counter(delta)),
            Some(MetricValue::Counter(v)) => Ok(MetricValue::Counter(v.saturating_add(delta))),
            Some(MetricValue::Gauge(_)) => Err(MetricError::TypeMismatch(name.to_owned())),
        })
    }

    /// Sets a gauge.
    pub fn gauge_set(
        &self,
        name: &str,
        labels: Vec<(String, String)>,
        value: f64,
    ) -> Result<(), MetricError> {
        self.update(name, labels, |old| match old {
            None | Some(MetricValue::Gauge(_)) => Ok(MetricValue::Gauge(value)),
            Some(MetricValue::Counter(_)) => Err(MetricError::TypeMismatch(name.to_owned())),
        })
    }

    /// Every series and its value.
    pub fn snapshot(&self) -> BTreeMap<SeriesKey, MetricValue> {
        lock(&self.series).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host steps a plugin's lifecycle on each change of its state: it is woken when the
    /// state changes, not when the driver sets the state it already had.
    #[test]
    fn a_state_follower_is_woken_by_changes_alone() {
        let stats = PluginStats::default();
        let mut states = stats.watch_state();
        assert_eq!(*states.borrow_and_update(), RunState::Running);
        stats.set_state(RunState::Running);
        assert!(!states.has_changed().unwrap(), "running again is no change");
        let quarantined = RunState::Quarantined {
            retry_in: Duration::from_secs(1),
            last_error: "trap".to_owned(),
        };
        stats.set_state(quarantined.clone());
        assert!(states.has_changed().unwrap());
        assert_eq!(*states.borrow_and_update(), quarantined);
        assert_eq!(stats.snapshot().state, quarantined);
    }

    #[test]
    fn metrics_validate_names_types_and_cardinality() {
        let m = PluginMetrics::default();
        m.counter_add("seen_total", vec![("ns".into(), "a".into())], 2)
            .unwrap();
        m.counter_add("seen_total", vec![("ns".into(), "a".into())], 3)
            .unwrap();
        assert_eq!(
            m.snapshot()[&(
                "seen_total".to_owned(),
                vec![("ns".to_owned(), "a".to_owned())]
            )],
            MetricValue::Counter(5)
        );
        assert!(matches!(
            m.gauge_set("seen_total", vec![("ns".into(), "a".into())], 1.0),
            Err(MetricError::TypeMismatch(_))
        ));
        assert!(matches!(
            m.counter_add("9bad", vec![], 1),
            Err(MetricError::InvalidName(_))
        ));
        assert!(matches!(
            m.gauge_set("workqueue_depth", vec![], 1.0),
            Err(MetricError::Reserved(_))
        ));
        assert!(matches!(
            m.gauge_set("ok", vec![("plugin".into(), "other".into())], 1.0),
            Err(MetricError::Reserved(_))
        ));
        for i in 1..MAX_SERIES {
            m.gauge_set("g", vec![("i".into(), i.to_string())], 1.0)
                .unwrap();
        }
        assert!(matches!(
            m.gauge_set("g", vec![("i".into(), "x".into())], 1.0),
            Err(MetricError::TooManySeries(_))
        ));
    }

    /// Label names that would make Prometheus refuse the whole exposition, or rename a
    /// series, are refused (issue 44).
    #[test]
    fn label_names_prometheus_refuses_are_refused() {
        let m = PluginMetrics::default();
        for name in ["__name__", "__meta", "a:b", "9a", "a-b", ""] {
            assert_eq!(
                m.counter_add("c_total", vec![(name.into(), "v".into())], 1),
                Err(MetricError::InvalidLabelName(name.to_owned())),
                "{name:?}"
            );
        }
        assert_eq!(
            m.gauge_set(
                "g",
                vec![
                    ("b".into(), "1".into()),
                    ("a".into(), "1".into()),
                    ("b".into(), "2".into())
                ],
                1.0
            ),
            Err(MetricError::DuplicateLabel("b".to_owned()))
        );
        m.gauge_set("g", vec![("_private".into(), "1".into())], 1.0)
            .unwrap();
        assert_eq!(m.snapshot().len(), 1);
    }

    /// Regression (issue 19): a 1 MiB label value was refused as an invalid label *name*.
    /// The error names the label and the length, and quotes no more than 256 bytes.
    #[test]
    fn a_long_label_value_is_refused_for_its_length() {
        let m = PluginMetrics::default();
        let error = m
            .gauge_set("g", vec![("app".into(), "v".repeat(1 << 20))], 1.0)
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "the value of label \"app\" is 1048576 bytes; at most 1024"
        );
        let error = m
            .counter_add(&format!("bad name\n{}", "x".repeat(1 << 20)), vec![], 1)
            .unwrap_err();
        let text = error.to_string();
        assert!(text.len() < 512 && text.contains("\\n"), "{}", text.len());
    }
}
