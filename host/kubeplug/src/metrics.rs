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

/// Per informer (label `informer`: resource, namespace and selectors):
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
                help: "1 while the informer lists and watches objects' metadata alone: none of its users needs their bodies.",
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
/// of the file); `kubeplug_plugin_reloads_total{result}`; and the series plugins define.
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
        let families: [Family<PluginReport>; 5] = [
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
                name: "kubeplug_plugin_buffer_merged",
                help: "Notifications merged into a key's waiting one because the plugin's \
                       buffer was over buffer_budget_mib.",
                kind: Kind::Counter(|r| r.buffer_merged),
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

/// The series plugins defined through `metrics`, each with a `plugin` label. A name is one
/// family across plugins; a plugin that uses a name another plugin uses as the other type
/// has those series left out (the runtime keeps each plugin's own names consistent).
fn encode_plugin_series(
    encoder: &mut DescriptorEncoder,
    plugins: Vec<(String, BTreeMap<SeriesKey, MetricValue>)>,
) -> Result<(), std::fmt::Error> {
    let mut families: BTreeMap<String, Vec<LabelledValue>> = BTreeMap::new();
    for (plugin, series) in plugins {
        for ((name, labels), value) in series {
            let mut labels = labels;
            labels.insert(0, ("plugin".to_owned(), plugin.clone()));
            families.entry(name).or_default().push((labels, value));
        }
    }
    for (name, series) in families {
        let counter = matches!(series[0].1, MetricValue::Counter(_));
        let (metric_type, family_name) = match counter {
            // The encoder appends `_total` to counters.
            true => (
                MetricType::Counter,
                name.strip_suffix("_total").unwrap_or(&name),
            ),
            false => (MetricType::Gauge, name.as_str()),
        };
        let help = "Defined by the plugin named in the `plugin` label.";
        let mut family = encoder.encode_descriptor(family_name, help, None, metric_type)?;
        for (labels, value) in &series {
            match *value {
                MetricValue::Counter(count) if counter => {
                    ConstCounter::new(count).encode(family.encode_family(labels)?)?;
                }
                MetricValue::Gauge(level) if !counter => {
                    ConstGauge::new(level).encode(family.encode_family(labels)?)?;
                }
                _ => {}
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
