//! `kubeplug check PLUGIN.wasm`: validates a plugin offline and says what it would do.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use kubeplug_informer::indexer::new_indexer;
use kubeplug_informer::informer::CacheHandle;
use kubeplug_runtime::description::IndexSource;
use kubeplug_runtime::view::BoxFuture;
use kubeplug_runtime::{
    CacheView, Delivery, Description, Gvk, KeyMapping, MetaFields, NoCluster, Plugin, PluginSpec,
    Runtime, RuntimeConfig, TypeRead,
};

use crate::cli::CheckArgs;
use crate::config::Config;
use crate::plugins::{PluginSettings, name_mismatch, plugin_settings};

/// An empty cache for every type, so that a plugin's declared indexes can be registered
/// without a cluster.
struct EmptyCaches;

impl CacheView for EmptyCaches {
    fn open<'a>(
        &'a self,
        _resource: &'a Gvk,
        _read: TypeRead<'a>,
    ) -> BoxFuture<'a, Option<CacheHandle>> {
        let empty = CacheHandle::complete(new_indexer().1);
        Box::pin(std::future::ready(Some(empty)))
    }
}

/// Loads the plugin as `run` would (compile, imports, init with its settings, describe,
/// validation within its limits) and prints its description, then each read and write it
/// declares as granted or refused by the configuration. Any failure to load is the error,
/// naming file and stage; so is a refused read (the plugin would not load under `run`).
/// Without `--config` nothing is granted, and that is only reported.
pub(crate) async fn check(args: CheckArgs) -> anyhow::Result<()> {
    let config = Config::load(args.config.as_deref())?;
    let runtime = offline_runtime()?;
    let (spec, configured) = offline_spec(&args.plugin, &config, None)?;
    let description = runtime.inspect(spec).await?;
    if let Some(cause) = name_mismatch(&args.plugin, &description.name) {
        bail!("{}: name: {cause}", args.plugin.display());
    }
    let grants = args.config.as_ref().map(|_| &configured.grants);
    let (report, refused) = grant_report(&description, grants);
    // The description and the report are this command's output.
    #[allow(clippy::print_stdout)]
    {
        print!("{}{report}", render(&description, &args.plugin));
    }
    if !refused.is_empty() {
        bail!(
            "{}: grants: the configuration grants {} none of: {}; it would not load",
            args.plugin.display(),
            description.name,
            refused.join(", ")
        );
    }
    Ok(())
}

/// Each read and write `description` declares, granted or refused by `grants` (`None`: no
/// configuration was given); and the reads refused.
fn grant_report(
    description: &Description,
    grants: Option<&kubeplug_runtime::Grants>,
) -> (String, Vec<String>) {
    let mut out = String::from("grants:\n");
    let mut refused = Vec::new();
    let verdict = |allowed: bool| match grants {
        None => "not granted (no configuration given)",
        Some(_) if allowed => "granted",
        Some(_) => "refused",
    };
    for read in description.read_types() {
        let allowed = grants.is_some_and(|g| g.may_read(&read));
        if grants.is_some() && !allowed {
            refused.push(read.to_string());
        }
        let _ = writeln!(out, "  read {read}: {}", verdict(allowed));
    }
    for (resource, verbs) in &description.writes {
        for verb in verbs {
            let allowed = grants.is_some_and(|g| g.may_write(resource, *verb));
            let _ = writeln!(out, "  {verb} {resource}: {}", verdict(allowed));
        }
    }
    (out, refused)
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

/// The load request for `path` with its configured settings (writes bounded to
/// `namespace`), against empty caches and no cluster, and those settings.
pub(crate) fn offline_spec(
    path: &Path,
    config: &Config,
    namespace: Option<&str>,
) -> anyhow::Result<(PluginSpec, PluginSettings)> {
    let bytes = std::fs::read(path)
        .with_context(|| format!("cannot read the plugin {}", path.display()))?;
    let configured = plugin_settings(config, path, namespace)?;
    let spec = PluginSpec {
        path: path.to_owned(),
        bytes,
        settings: configured.settings.clone(),
        grants: configured.grants.clone(),
        limits: configured.limits.clone(),
        cache: Arc::new(EmptyCaches),
        writer: Arc::new(NoCluster),
    };
    Ok((spec, configured))
}

/// Loads `path` with its configured settings and grants against empty caches and no
/// cluster, as `run` would load it.
pub(crate) async fn load_offline(
    runtime: &Runtime,
    path: &Path,
    config: &Config,
    namespace: Option<&str>,
) -> anyhow::Result<(Plugin, PluginSettings)> {
    let (spec, configured) = offline_spec(path, config, namespace)?;
    let plugin = runtime.load(spec).await?;
    // As `run` would refuse it.
    if let Some(cause) = name_mismatch(path, plugin.name()) {
        bail!("{}: name: {cause}", path.display());
    }
    Ok((plugin, configured))
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
        if !subscription.labels.is_empty() {
            details.push(format!("labels {}", subscription.labels));
        }
        if !subscription.fields.is_empty() {
            details.push(format!("fields {}", subscription.fields));
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
        for projection in &subscription.projections {
            let _ = writeln!(
                out,
                "    projects {}: {}",
                projection.name,
                projection.path.as_str()
            );
        }
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
        let bodies = if read.wants_object_json {
            " (JSON)"
        } else {
            ""
        };
        let _ = writeln!(out, "reads {}{bodies}", read.resource);
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
