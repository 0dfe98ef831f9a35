//! Informer and plugin series for `/metrics`, read from the running host at each scrape.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use kubeplug_informer::factory::SharedInformerFactory;
use kubeplug_informer::informer::SharedIndexInformer;
use kubeplug_local::{ScanCounts, ScanReason};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use kubeplug_runtime::status::{MetricValue, SeriesKey};

use crate::plugins::{PluginHost, PluginReport};

/// One metric family over a set of labelled items.
struct Family<T> {
    name: &'static str,
    help: &'static str,
    kind: Kind<T>,
}

enum Kind<T> {
    Gauge(fn(&T) -> i64),
    /// Exposed with `_total` appended.
    Counter(fn(&T) -> u64),
}

/// Encodes `families`, one series per item, labelled `label="<item name>"`.
fn encode<T>(
    encoder: &mut DescriptorEncoder,
    label: &str,
    items: &[(String, T)],
    families: &[Family<T>],
) -> Result<(), std::fmt::Error> {
    for family in families {
        let metric_type = match family.kind {
            Kind::Gauge(_) => MetricType::Gauge,
            Kind::Counter(_) => MetricType::Counter,
        };
        let mut encoder = encoder.encode_descriptor(family.name, family.help, None, metric_type)?;
        for (name, item) in items {
            let labels = [(label, name.as_str())];
            let series = encoder.encode_family(&labels)?;
            match family.kind {
                Kind::Gauge(value) => ConstGauge::new(value(item)).encode(series)?,
                Kind::Counter(value) => ConstCounter::new(value(item)).encode(series)?,
            }
        }
    }
    Ok(())
}

/// Per informer (label `informer`: resource, namespace, selectors and form):
/// `kubeplug_informer_objects`, `_synced`, `_metadata_only`, `_handlers`, `_lists_total`,
/// `_watches_total`, `_watch_events_total`, `_skipped_objects_total`, `_errors_total` and
/// `_panics_total`.
#[derive(Debug)]
pub(crate) struct InformerCollector {
    factory: SharedInformerFactory,
}

impl InformerCollector {
    pub(crate) fn new(factory: SharedInformerFactory) -> Self {
        Self { factory }
    }
}

/// A line per informer whose Reflector panicked and listed again, for `/healthz?verbose`:
/// host-written (the resource and a count; the panic's message is in the log).
pub(crate) fn informer_health(factory: &SharedInformerFactory) -> Vec<String> {
    factory
        .keys()
        .into_iter()
        .filter_map(|key| {
            let panics = factory.informer(&key)?.reflector_counts().panics;
            (panics > 0).then(|| {
                format!(
                    "informer {}: its reflector panicked {panics} times and listed again (see the log)",
                    key.resource
                )
            })
        })
        .collect()
}

impl Collector for InformerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let informers: Vec<(String, SharedIndexInformer)> = self
            .factory
            .keys()
            .into_iter()
            .filter_map(|key| Some((key.to_string(), self.factory.informer(&key)?)))
            .collect();
        let families: [Family<SharedIndexInformer>; 10] = [
            Family {
                name: "kubeplug_informer_objects",
                help: "Objects in the informer's cache.",
                kind: Kind::Gauge(|i| i.indexer().len() as i64),
            },
            Family {
                name: "kubeplug_informer_synced",
                help: "1 once the informer has synced.",
                kind: Kind::Gauge(|i| i64::from(i.has_synced())),
            },
            Family {
                name: "kubeplug_informer_metadata_only",
                help: "1 when the informer lists and watches objects' metadata alone: its users read nothing else.",
                kind: Kind::Gauge(|i| i64::from(i.is_metadata_only())),
            },
            Family {
                name: "kubeplug_informer_handlers",
                help: "Handlers registered on the informer.",
                kind: Kind::Gauge(|i| i.handler_count() as i64),
            },
            Family {
                name: "kubeplug_informer_lists",
                help: "Complete lists, initial and relists.",
                kind: Kind::Counter(|i| i.reflector_counts().lists),
            },
            Family {
                name: "kubeplug_informer_watches",
                help: "Watches opened.",
                kind: Kind::Counter(|i| i.reflector_counts().watches),
            },
            Family {
                name: "kubeplug_informer_watch_events",
                help: "Watch events received.",
                kind: Kind::Counter(|i| i.reflector_counts().events),
            },
            Family {
                name: "kubeplug_informer_skipped_objects",
                help: "Objects skipped because they could not be decoded.",
                kind: Kind::Counter(|i| i.reflector_counts().skipped_objects),
            },
            Family {
                name: "kubeplug_informer_errors",
                help: "List and watch failures.",
                kind: Kind::Counter(|i| i.reflector_counts().errors),
            },
            Family {
                name: "kubeplug_informer_panics",
                help: "Panics in the informer's Reflector, each followed by a fresh list.",
                kind: Kind::Counter(|i| i.reflector_counts().panics),
            },
        ];
        encode(&mut encoder, "informer", &informers, &families)
    }
}

/// Per plugin (label `plugin`; the file for one that failed to load, whose name may be another
/// file's):
/// `kubeplug_plugin_loaded` (1 when running), `kubeplug_plugin_quarantined`,
/// `kubeplug_plugin_events_total` and `kubeplug_plugin_failures_total` (over every version
/// of the file), `kubeplug_plugin_keys_refused_total`, `kubeplug_plugin_buffer_merged_total`,
/// `kubeplug_plugin_informer_starts_total` and `kubeplug_plugin_informer_starts_refused_total`;
/// `kubeplug_plugin_reloads_total{result}`; and the series plugins define.
#[derive(Debug)]
pub(crate) struct PluginCollector {
    host: Arc<PluginHost>,
}

impl PluginCollector {
    pub(crate) fn new(host: Arc<PluginHost>) -> Self {
        Self { host }
    }
}

impl Collector for PluginCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let reports: Vec<(String, PluginReport)> = self
            .host
            .reports()
            .into_iter()
            .map(|r| {
                let name = match (&r.name, r.state) {
                    (Some(name), state) if state != "failed" => name.clone(),
                    _ => r.file.display().to_string(),
                };
                (name, r)
            })
            .collect();
        let families: [Family<PluginReport>; 8] = [
            Family {
                name: "kubeplug_plugin_loaded",
                help: "1 when the plugin is loaded and running.",
                kind: Kind::Gauge(|r| i64::from(r.state == "running")),
            },
            Family {
                name: "kubeplug_plugin_quarantined",
                help: "1 while the plugin is quarantined.",
                kind: Kind::Gauge(|r| i64::from(r.state == "quarantined")),
            },
            Family {
                name: "kubeplug_plugin_events",
                help: "Events delivered to the plugin.",
                kind: Kind::Counter(|r| r.events_delivered),
            },
            Family {
                name: "kubeplug_plugin_failures",
                help: "Calls into the plugin that failed.",
                kind: Kind::Counter(|r| r.failures),
            },
            Family {
                name: "kubeplug_plugin_keys_refused",
                help: "Keys the plugin's map-event named that were dropped: past the first \
                       1,000 of one call, of a type it enqueues no keys of, or naming no \
                       possible object.",
                kind: Kind::Counter(|r| r.keys_refused),
            },
            Family {
                name: "kubeplug_plugin_buffer_merged",
                help: "Notifications merged into a key's waiting one because the plugin's \
                       buffer was over buffer_budget_mib.",
                kind: Kind::Counter(|r| r.buffer_merged),
            },
            Family {
                name: "kubeplug_plugin_informer_starts",
                help: "Informers started for the plugin's subscriptions and cache reads (not \
                       those it found running or lingering).",
                kind: Kind::Counter(|r| r.informer_starts),
            },
            Family {
                name: "kubeplug_plugin_informer_starts_refused",
                help: "Informer starts refused because the plugin had started too many too \
                       quickly.",
                kind: Kind::Counter(|r| r.informer_starts_refused),
            },
        ];
        encode(&mut encoder, "plugin", &reports, &families)?;
        let counts = self.host.reload_counts();
        let results = [
            ("success".to_owned(), counts.success.load(Ordering::Relaxed)),
            ("failure".to_owned(), counts.failure.load(Ordering::Relaxed)),
        ];
        let reloads = [Family {
            name: "kubeplug_plugin_reloads",
            help: "Loads of new or changed plugin files (the first load included), by result.",
            kind: Kind::Counter(|n: &u64| *n),
        }];
        encode(&mut encoder, "result", &results, &reloads)?;
        encode_plugin_series(&mut encoder, self.host.plugin_series())
    }
}

/// One series of a family: its labels, the plugin's first, and its value.
type LabelledValue = (Vec<(String, String)>, MetricValue);

/// A family of plugin-defined series as exposed: its type and its series, labels unique.
struct PluginFamily {
    counter: bool,
    series: Vec<LabelledValue>,
}

/// The name `name`'s family is exposed under: the encoder appends `_total` to a counter's
/// samples, so a counter's family is its name without it; a gauge's is its name.
fn family_name(name: &str, counter: bool) -> &str {
    match counter {
        true => name.strip_suffix("_total").unwrap_or(name),
        false => name,
    }
}

/// The series plugins defined, grouped into families that expose every sample name once, so
/// that no plugin can make the exposition one a Prometheus parser refuses. Each plugin keeps
/// its own names consistent (the runtime refuses a counter used as a gauge), but two names
/// can still meet in one family (`x` and `x_total` as counters, a counter `x_total` and a
/// gauge `x`, a gauge `x_total` beside a counter `x`), and other plugins' names too. The
/// first type a family is seen with wins (plugins in name order, then their series in name
/// order); a series of the other type, one whose labels the family already has, and a gauge
/// whose samples a counter's would repeat are left out.
fn plugin_families(
    plugins: Vec<(String, BTreeMap<SeriesKey, MetricValue>)>,
) -> BTreeMap<String, PluginFamily> {
    let mut families: BTreeMap<String, PluginFamily> = BTreeMap::new();
    for (plugin, series) in plugins {
        for ((name, labels), value) in series {
            let counter = matches!(value, MetricValue::Counter(_));
            let family = families
                .entry(family_name(&name, counter).to_owned())
                .or_insert(PluginFamily {
                    counter,
                    series: Vec::new(),
                });
            let mut labels = labels;
            labels.insert(0, ("plugin".to_owned(), plugin.clone()));
            if family.counter == counter && family.series.iter().all(|(l, _)| *l != labels) {
                family.series.push((labels, value));
            }
        }
    }
    let counter_samples: Vec<String> = families
        .iter()
        .filter(|(_, family)| family.counter)
        .map(|(name, _)| format!("{name}_total"))
        .collect();
    families.retain(|name, family| family.counter || !counter_samples.contains(name));
    families
}

/// The series plugins defined through `metrics`, each with a `plugin` label, in families
/// [`plugin_families`] keeps apart.
fn encode_plugin_series(
    encoder: &mut DescriptorEncoder,
    plugins: Vec<(String, BTreeMap<SeriesKey, MetricValue>)>,
) -> Result<(), std::fmt::Error> {
    for (name, family) in plugin_families(plugins) {
        let metric_type = match family.counter {
            true => MetricType::Counter,
            false => MetricType::Gauge,
        };
        let help = "Defined by the plugin named in the `plugin` label.";
        let mut encoded = encoder.encode_descriptor(&name, help, None, metric_type)?;
        for (labels, value) in &family.series {
            match *value {
                MetricValue::Counter(count) => {
                    ConstCounter::new(count).encode(encoded.encode_family(labels)?)?;
                }
                MetricValue::Gauge(level) => {
                    ConstGauge::new(level).encode(encoded.encode_family(labels)?)?;
                }
            }
        }
    }
    Ok(())
}

/// Scans of the watched directories, by `reason` (`start`, `event`, `retry`, `rescan`,
/// `requested`): `kubeplug_plugin_dir_scans_total` and, on the embedded local cluster,
/// `kubeplug_local_manifest_scans_total`. An idle host adds only `rescan`s.
#[derive(Debug)]
pub(crate) struct ScanCollector {
    plugin_dir: Arc<ScanCounts>,
    manifests: Option<Arc<ScanCounts>>,
}

impl ScanCollector {
    pub(crate) fn new(plugin_dir: Arc<ScanCounts>, manifests: Option<Arc<ScanCounts>>) -> Self {
        Self {
            plugin_dir,
            manifests,
        }
    }
}

impl Collector for ScanCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let by_reason = |counts: &ScanCounts| {
            ScanReason::ALL.map(|reason| (reason.as_str().to_owned(), counts.get(reason)))
        };
        let family = |name, help| Family {
            name,
            help,
            kind: Kind::Counter(|n: &u64| *n),
        };
        encode(
            &mut encoder,
            "reason",
            &by_reason(&self.plugin_dir),
            &[family(
                "kubeplug_plugin_dir_scans",
                "Scans of the plugins directory, by what caused them.",
            )],
        )?;
        if let Some(manifests) = &self.manifests {
            encode(
                &mut encoder,
                "reason",
                &by_reason(manifests),
                &[family(
                    "kubeplug_local_manifest_scans",
                    "Scans of the local cluster's manifests, by what caused them.",
                )],
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use prometheus_client::registry::Registry;

    use super::*;

    #[derive(Debug)]
    struct PluginSeries(Vec<(String, BTreeMap<SeriesKey, MetricValue>)>);

    impl Collector for PluginSeries {
        fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
            encode_plugin_series(&mut encoder, self.0.clone())
        }
    }

    fn exposition(plugins: Vec<(String, BTreeMap<SeriesKey, MetricValue>)>) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(PluginSeries(plugins)));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    fn series(entries: &[(&str, MetricValue)]) -> BTreeMap<SeriesKey, MetricValue> {
        entries
            .iter()
            .map(|&(name, value)| ((name.to_owned(), Vec::new()), value))
            .collect()
    }

    /// Names that meet in one family, within a plugin and across two, are exposed once each:
    /// every family declared once, every sample name in one family, every series once.
    #[test]
    fn names_that_meet_in_one_family_expose_each_sample_once() {
        use MetricValue::{Counter, Gauge};
        let text = exposition(vec![
            (
                "a".to_owned(),
                series(&[
                    ("clash_total", Counter(1)),
                    ("clash", Gauge(2.0)),
                    ("twice", Counter(3)),
                    ("twice_total", Counter(4)),
                    ("samples", Counter(5)),
                    ("samples_total", Gauge(6.0)),
                ]),
            ),
            (
                "b".to_owned(),
                series(&[("clash", Gauge(7.0)), ("clash_total", Counter(8))]),
            ),
        ]);
        let mut declared = BTreeSet::new();
        let mut samples = BTreeSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let family = rest.split(' ').next().unwrap();
                assert!(
                    declared.insert(family.to_owned()),
                    "{family} twice:\n{text}"
                );
            } else if !line.starts_with('#') {
                let series = line.rsplit_once(' ').unwrap().0;
                assert!(samples.insert(series.to_owned()), "{series} twice:\n{text}");
            }
        }
        assert_eq!(
            samples,
            BTreeSet::from([
                r#"clash{plugin="a"}"#.to_owned(),
                r#"clash{plugin="b"}"#.to_owned(),
                r#"samples_total{plugin="a"}"#.to_owned(),
                r#"twice_total{plugin="a"}"#.to_owned(),
            ]),
            "{text}"
        );
        let lines = text.lines().map(|l| Ok(l.to_owned()));
        prometheus_parse::Scrape::parse(lines).expect("the exposition parses");
    }
}
