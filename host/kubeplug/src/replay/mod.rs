//! `kubeplug test PLUGIN.wasm --events FILE`: replays events into one plugin and reports
//! every call it made.
//!
//! The plugin runs as under `run --local`: the cache fixtures are an in-memory local cluster,
//! each event is written to that cluster, and the informers, listeners, drivers (batches in
//! events mode; key mapping, work queue and workers in reconcile mode) and the local writer
//! are the host's own, so the plugin's writes change what later events and reads see. Only
//! the clock is taken out, so that a report is the same on every run:
//! - events are replayed one at a time; the next is written once the plugin is idle (see
//!   [`Pipeline::busy`]);
//! - a failed call is reported once: no retries, no quarantine, and failed reconciles are
//!   requeued too late to come back during the replay (a `requeue-after` key comes back only
//!   if its delay runs out while later events are replayed);
//! - resyncs are left out;
//! - a plugin's write returns once every informer has it ([`ReadYourWrites`]), so that what
//!   it reads next does not depend on how fast the watch caught up.

mod events;
mod journal;
mod pipeline;
mod report;

use pipeline::{Informers, Pipeline, ReadYourWrites};

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use kubeplug_informer::factory::SharedInformerFactory;
use kubeplug_informer::object::ObjectKey;
use kubeplug_informer::reflector::ReflectorConfig;
use kubeplug_informer::source::Status;
use kubeplug_local::LocalCluster;
use kubeplug_runtime::{
    ClusterWriter, Description, Gvk, PluginLimits, PluginSpec, Runtime, RuntimeConfig,
};

pub(crate) use events::{Change, Format};
use journal::Journal;

use crate::cli::{OutputFormat, TestArgs};
use crate::config::Config;
use crate::plugins::{
    FactoryCache, InformerStarts, PluginSettings, Resolver, StartBudget, plugin_settings,
};
use crate::run::artifact_cache_dir;
use crate::writer::LocalWriter;
use events::InputEvent;
use report::{Configuration, EventInfo, Report, Step};

/// The log filter of stderr under `kubeplug test` unless `KUBEPLUG_LOG` says otherwise:
/// the plugin's own records are in the report (the runtime hands them to the [`Journal`]
/// whatever the filter), so stderr keeps the host's warnings. Load warnings are left out
/// too: a write grant missing from a configuration shows in the report as a `denied` write.
pub(crate) const DEFAULT_LOG_FILTER: &str = "warn,kubeplug_runtime::host::log=off,\
     kubeplug_runtime::state=off,kubeplug_runtime::plugin=error";

/// Replays `args.events` and prints the report; fails when the input is bad, the plugin
/// does not load or settle, or one of its calls failed.
pub(crate) async fn test(args: TestArgs) -> anyhow::Result<()> {
    let journal = Journal::default();
    let config = Config::load(args.config.as_deref())?;
    let events = events::read(&args.events)?;
    let configuration = configuration_used(&args, &config);
    let (cluster, scan) =
        LocalCluster::open_paths(args.cache.clone()).context("cannot read the cache fixtures")?;
    if !scan.errors.is_empty() {
        let errors: Vec<String> = scan.errors.iter().map(ToString::to_string).collect();
        bail!("the cache fixtures are invalid:\n  {}", errors.join("\n  "));
    }
    for event in &events {
        if cluster.resolve(event.api_version(), event.kind()).is_none() {
            bail!(
                "{}:{}: event {}: no resource serves {} {}; put its CustomResourceDefinition in a --cache file",
                args.events.display(),
                event.line,
                event.index,
                event.api_version(),
                event.kind()
            );
        }
    }

    let bytes = std::fs::read(&args.plugin)
        .with_context(|| format!("cannot read the plugin {}", args.plugin.display()))?;
    let PluginSettings {
        settings,
        grants,
        limits,
        ..
    } = plugin_settings(&config, &args.plugin, None)?;
    let settings = match args.settings.clone() {
        Some(json) => {
            serde_json::from_str::<serde_json::Value>(&json)
                .with_context(|| format!("--settings is not JSON: {json}"))?;
            json
        }
        None => settings,
    };
    let limits = PluginLimits {
        attempts: 1,
        max_consecutive_failures: u64::MAX,
        ..limits
    };

    let runtime = Runtime::new(RuntimeConfig {
        artifact_cache: artifact_cache_dir(),
        observer: Some(Arc::new(journal.clone())),
        ..RuntimeConfig::default()
    })
    .context("cannot start the WebAssembly engine")?;
    let factory = SharedInformerFactory::new(Arc::new(cluster.clone()), ReflectorConfig::default());
    let resolving = cluster.clone();
    let resolve: Resolver =
        Arc::new(move |gvk: &Gvk| resolving.resolve(&gvk.api_version(), &gvk.kind));
    // One version replayed: the starts of a first load.
    let starts = Arc::new(InformerStarts::new(StartBudget::default()));
    let cache = Arc::new(FactoryCache::new(factory.clone(), resolve, None, starts));
    let informers = Arc::new(Informers::new(cluster.clone(), factory.clone()));
    let writer: Arc<dyn ClusterWriter> = Arc::new(ReadYourWrites::new(
        LocalWriter::new(cluster.clone()),
        informers.clone(),
    ));
    // The grants `run` would give it: a read it is not granted fails the load here too.
    let spec = PluginSpec {
        path: args.plugin.clone(),
        bytes,
        settings,
        grants,
        limits,
        cache: cache.clone(),
        writer: writer.clone(),
    };
    let plugin = Arc::new(
        runtime
            .load(spec)
            .await
            .with_context(|| format!("configuration: {configuration}"))?,
    );

    let pipeline = Pipeline::start(&plugin, &informers, args.timeout).await?;
    let mut steps = Vec::new();
    let replayed = replay(
        &args,
        &events,
        &cluster,
        &pipeline,
        &journal,
        plugin.description(),
        &mut steps,
    )
    .await;
    pipeline.stop().await;
    factory.shutdown().await;
    let report = Report::new(&plugin, &args.plugin, configuration, steps);
    // The report is this command's output, also when the replay stopped early.
    #[allow(clippy::print_stdout)]
    {
        match args.output {
            OutputFormat::Text => print!("{}", report.to_text()),
            OutputFormat::Json => print!("{}", report.to_json()),
        }
    }
    replayed?;
    if report.failed {
        bail!(
            "plugin {} failed (see the report)",
            plugin.description().name
        );
    }
    Ok(())
}

/// The initial list, then each event in turn, each step waiting until the plugin is idle.
async fn replay(
    args: &TestArgs,
    events: &[InputEvent],
    cluster: &LocalCluster,
    pipeline: &Pipeline,
    journal: &Journal,
    description: &Description,
    steps: &mut Vec<Step>,
) -> anyhow::Result<()> {
    pipeline.settle(args.timeout).await.with_context(|| {
        format!(
            "the plugin did not finish with the initial list within {:?}",
            args.timeout
        )
    })?;
    steps.push(Step {
        event: None,
        calls: journal.take(),
    });
    for event in events {
        let place = format!(
            "{}:{}: event {}",
            args.events.display(),
            event.line,
            event.index
        );
        let info = write_event(cluster, event, &args.events, description)
            .with_context(|| place.clone())?;
        let settled = pipeline.settle(args.timeout).await;
        steps.push(Step {
            event: Some(info),
            calls: journal.take(),
        });
        settled.with_context(|| {
            format!(
                "{place}: the plugin did not finish within {:?}",
                args.timeout
            )
        })?;
    }
    Ok(())
}

/// Which configuration the replay used, as the report says it.
fn configuration_used(args: &TestArgs, config: &Config) -> Configuration {
    let stem = args
        .plugin
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_default();
    Configuration {
        file: args.config.as_ref().map(|file| file.display().to_string()),
        section: config
            .plugins
            .contains_key(&stem)
            .then(|| format!("[plugins.{stem}]")),
    }
}

/// Why an event could not be written to the local cluster.
#[derive(Debug, thiserror::Error)]
enum WriteEventError {
    /// No resource of the cluster serves the event's type.
    #[error("no resource serves {api_version} {kind}")]
    NoResource {
        /// The event object's `apiVersion`.
        api_version: String,
        /// Its `kind`.
        kind: String,
    },
    /// The object's `metadata` is not a mapping.
    #[error("metadata is not a mapping")]
    MetadataNotAMapping,
    /// The cluster refused the write with this `Status`.
    #[error("the cluster refused it: {0}")]
    Refused(Status),
    /// A DELETED event of an object the cluster does not hold.
    #[error("DELETED {resource} {key}, which does not exist")]
    DeletedMissing {
        /// The object's resource.
        resource: String,
        /// The object's key.
        key: ObjectKey,
    },
}

/// Writes one event to the cluster as an API client would: ADDED and MODIFIED create or
/// replace the object (the server assigns its resourceVersion), DELETED deletes it.
fn write_event(
    cluster: &LocalCluster,
    event: &InputEvent,
    file: &Path,
    description: &Description,
) -> Result<EventInfo, WriteEventError> {
    let resource = cluster
        .resolve(event.api_version(), event.kind())
        .ok_or_else(|| WriteEventError::NoResource {
            api_version: event.api_version().to_owned(),
            kind: event.kind().to_owned(),
        })?;
    let mut object = event.object.clone();
    let metadata = object["metadata"]
        .as_object_mut()
        .ok_or(WriteEventError::MetadataNotAMapping)?;
    // A recorded version belongs to another server: it would be a precondition here.
    metadata.remove("resourceVersion");
    let namespace = kubeplug_local::scope_namespace(&resource, metadata);
    let name = metadata["name"].as_str().unwrap_or_default().to_owned();
    let key = ObjectKey::new(namespace.as_deref(), &name);
    let server = cluster.server();
    let written = match event.change {
        Change::Added | Change::Modified => server
            .apply(&resource, &object.to_string())
            .map_err(WriteEventError::Refused)?,
        Change::Deleted => server.delete(&resource, &key).map_err(|status| {
            if status.code == 404 {
                WriteEventError::DeletedMissing {
                    resource: resource.to_string(),
                    key: key.clone(),
                }
            } else {
                WriteEventError::Refused(status)
            }
        })?,
    };
    let stored = std::str::from_utf8(&written.json).unwrap_or_default();
    Ok(EventInfo {
        index: event.index,
        source: format!("{}:{}", file.display(), event.line),
        change: event.change,
        resource: format!("{}/{}", event.api_version(), event.kind()),
        key: key.to_string(),
        projected: projected(description, event, stored),
    })
}

/// What the projections of the plugin's subscriptions to the event's type select in the
/// object as stored: the values its events carry (JSON values, for the report).
fn projected(
    description: &Description,
    event: &InputEvent,
    stored: &str,
) -> BTreeMap<String, Vec<serde_json::Value>> {
    let (group, version) = event
        .api_version()
        .split_once('/')
        .unwrap_or(("", event.api_version()));
    let resource = Gvk::new(group, version, event.kind());
    let mut projected = BTreeMap::new();
    let projections = description
        .subscriptions
        .iter()
        .filter(|s| s.resource == resource)
        .flat_map(|s| &s.projections);
    for projection in projections {
        let mut values = Vec::new();
        let walked = projection.path.for_each_raw(stored, |raw| {
            values.extend(serde_json::from_str::<serde_json::Value>(raw).ok());
        });
        if walked.is_err() {
            values.clear();
        }
        projected.insert(projection.name.clone(), values);
    }
    projected
}
