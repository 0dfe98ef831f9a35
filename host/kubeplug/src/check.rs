//! `kubeplug check PLUGIN.wasm`: validates a plugin offline and says what it would do.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use kubeplug_informer::indexer::{Indexer, new_indexer};
use kubeplug_runtime::description::IndexSource;
use kubeplug_runtime::{
    CacheView, Delivery, Description, Gvk, KeyMapping, MetaFields, NoCluster, Plugin, PluginSpec,
    Runtime, RuntimeConfig,
};

use crate::cli::CheckArgs;
use crate::config::Config;
use crate::plugins::{name_mismatch, plugin_settings};

/// An empty cache for every type, so that a plugin's declared indexes can be registered
/// without a cluster.
struct EmptyCaches;

impl CacheView for EmptyCaches {
    fn indexer(&self, _resource: &Gvk) -> Option<Indexer> {
        Some(new_indexer().1)
    }
}

/// Loads the plugin as `run` would (compile, imports, init with its settings, describe,
/// validation) and prints its description; any failure is the error, naming file and stage.
pub(crate) async fn check(args: CheckArgs) -> anyhow::Result<()> {
    let config = Config::load(args.config.as_deref())?;
    let runtime = offline_runtime()?;
    let plugin = load_offline(&runtime, &args.plugin, &config).await?;
    // The description is this command's output.
    #[allow(clippy::print_stdout)]
    {
        print!("{}", render(plugin.description(), &args.plugin));
    }
    Ok(())
}

/// An engine for commands that load plugins without running them: no artefact cache, so
/// nothing is written on the user's machine.
pub(crate) fn offline_runtime() -> anyhow::Result<Runtime> {
    Runtime::new(RuntimeConfig {
        artifact_cache: None,
        ..RuntimeConfig::default()
    })
    .context("cannot start the WebAssembly engine")
}

/// Loads `path` with its configured settings against empty caches and no cluster.
pub(crate) async fn load_offline(
    runtime: &Runtime,
    path: &Path,
    config: &Config,
) -> anyhow::Result<Plugin> {
    let bytes = std::fs::read(path)
        .with_context(|| format!("cannot read the plugin {}", path.display()))?;
    let configured = plugin_settings(config, path).map_err(anyhow::Error::msg)?;
    let plugin = runtime
        .load(PluginSpec {
            path: path.to_owned(),
            bytes,
            settings: configured.settings,
            grants: configured.grants,
            limits: configured.limits,
            cache: Arc::new(EmptyCaches),
            writer: Arc::new(NoCluster),
        })
        .await?;
    // As `run` would refuse it.
    if let Some(cause) = name_mismatch(path, plugin.name()) {
        bail!("{}: name: {cause}", path.display());
    }
    Ok(plugin)
}

fn render(description: &Description, path: &Path) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} {} ({})",
        description.name,
        description.version,
        path.display()
    );
    let _ = match description.delivery {
        Delivery::Events => writeln!(out, "delivery: events"),
        Delivery::Reconcile { workers } => writeln!(out, "delivery: reconcile, {workers} workers"),
    };
    let _ = writeln!(out, "subscriptions:");
    for subscription in &description.subscriptions {
        let mut details = Vec::new();
        if let Some(namespace) = &subscription.namespace {
            details.push(format!("namespace {namespace}"));
        }
        if let Some(labels) = &subscription.label_selector {
            details.push(format!("labels {labels}"));
        }
        if let Some(fields) = &subscription.field_selector {
            details.push(format!("fields {fields}"));
        }
        if let Some(period) = subscription.resync_period {
            details.push(format!("resync every {period:?}"));
        }
        if subscription.meta_fields != MetaFields::ALL {
            details.push(meta_fields_text(subscription.meta_fields));
        }
        if subscription.wants_object_json {
            details.push("object JSON".into());
        }
        if subscription.wants_old_json {
            details.push("old object JSON".into());
        }
        if description.delivery != Delivery::Events {
            details.push(match &subscription.enqueue {
                KeyMapping::OwnKey => "enqueues its own key".into(),
                KeyMapping::Owner(owner) => format!("enqueues its {owner} owner"),
                KeyMapping::Computed => "enqueues the keys map-event returns".into(),
            });
        }
        let details = if details.is_empty() {
            String::new()
        } else {
            format!(" ({})", details.join(", "))
        };
        let _ = writeln!(out, "  {}{details}", subscription.resource);
    }
    for index in &description.indexes {
        let source = match &index.spec {
            IndexSource::Label(key) => format!("label {key}"),
            IndexSource::OwnerUid => "owner uid".into(),
            IndexSource::Path(path) => format!("path {}", path.as_str()),
        };
        let _ = writeln!(out, "index {} on {}: {source}", index.name, index.resource);
    }
    for read in &description.reads {
        let _ = writeln!(out, "reads {read}");
    }
    for (resource, verbs) in &description.writes {
        let verbs: Vec<String> = verbs.iter().map(ToString::to_string).collect();
        let _ = writeln!(out, "writes {resource}: {}", verbs.join(", "));
    }
    out
}

/// The metadata a subscription's events carry, when it asked for less than all of it.
fn meta_fields_text(fields: MetaFields) -> String {
    let parts: Vec<&str> = [
        (fields.uid, "uid"),
        (fields.labels, "labels"),
        (fields.owner_references, "owner references"),
        (fields.deletion_timestamp, "deletion timestamp"),
    ]
    .into_iter()
    .filter_map(|(wanted, part)| wanted.then_some(part))
    .collect();
    if parts.is_empty() {
        "metadata: key only".into()
    } else {
        format!("metadata: key, {}", parts.join(", "))
    }
}
