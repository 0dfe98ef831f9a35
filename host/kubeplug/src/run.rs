//! `kubeplug run`: the host.

use std::sync::Arc;

use anyhow::{Context as _, bail};
use kubeplug_informer::factory::SharedInformerFactory;
use kubeplug_informer::reflector::ReflectorConfig;
use kubeplug_local::LocalCluster;
use kubeplug_runtime::{Gvk, Runtime, RuntimeConfig};
use kubeplug_workqueue::WorkqueueMetrics;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::cli::RunArgs;
use crate::config::Config;
use crate::http::{HttpState, Readiness, serve};
use crate::metrics::{InformerCollector, PluginCollector};
use crate::plugins::{DirConfig, Hints, PluginDir, PluginHost, Resolver, watch};
use crate::writer::LocalWriter;

/// Default address of the HTTP server.
const DEFAULT_HTTP: &str = "127.0.0.1:8080";

/// Runs until SIGTERM or Ctrl-C.
pub(crate) async fn run(args: RunArgs) -> anyhow::Result<()> {
    let config = Config::load(args.config.as_deref())?;
    if !args.plugins.is_dir() {
        bail!(
            "the plugins directory {} does not exist or is not a directory",
            args.plugins.display()
        );
    }
    let local = &args.local;
    let http_address = match args.http.or(config.host.http) {
        Some(address) => address,
        None => DEFAULT_HTTP.parse().expect("a valid default address"),
    };

    let cancel = CancellationToken::new();
    let readiness = Readiness::default();
    // Every check is registered before the server starts, so that an early probe cannot
    // see a subset of them pass.
    for check in ["local-cluster", "plugins", "informers"] {
        readiness.set(check, false);
    }
    let (cluster, report) = LocalCluster::open(local)
        .with_context(|| format!("cannot serve {} as the local cluster", local.display()))?;
    for error in &report.errors {
        warn!(%error, "local cluster");
    }
    info!(dir = %local.display(), objects = report.applied, "local cluster loaded");
    let watching = cluster.watch(cancel.child_token());
    readiness.set("local-cluster", true);

    let factory = SharedInformerFactory::new(Arc::new(cluster.clone()), ReflectorConfig::default());
    let mut registry = Registry::default();
    registry.register_collector(Box::new(InformerCollector::new(factory.clone())));
    let queue_metrics = WorkqueueMetrics::register(&mut registry);

    let runtime = Runtime::new(RuntimeConfig {
        artifact_cache: Some(artifact_cache_dir()),
        ..RuntimeConfig::default()
    })
    .context("cannot start the WebAssembly engine")?;
    let resolving = cluster.clone();
    let resolve: Resolver =
        Arc::new(move |gvk: &Gvk| resolving.resolve(&gvk.api_version(), &gvk.kind));
    let namespace = args.namespace.clone().or(config.host.namespace.clone());
    let host = Arc::new(PluginHost::new(
        runtime,
        factory.clone(),
        resolve,
        Arc::new(LocalWriter::new(cluster)),
        queue_metrics,
        config,
        namespace,
    ));
    registry.register_collector(Box::new(PluginCollector::new(host.clone())));

    let reports = host.clone();
    let state = HttpState {
        readiness: readiness.clone(),
        registry: Arc::new(registry),
        plugins: Arc::new(move || serde_json::to_value(reports.reports()).unwrap_or_default()),
    };
    let bound = serve(http_address, state, cancel.clone()).await?;
    info!(address = %bound, "serving /healthz, /readyz, /metrics and /plugins");

    let mut dir = PluginDir::new(&args.plugins, DirConfig::default()).with_context(|| {
        format!(
            "cannot open the plugins directory {}",
            args.plugins.display()
        )
    })?;
    // Plugins present at start load before the host says it is ready, once every file
    // still being written has settled.
    loop {
        let scan = dir
            .scan(Hints::default(), tokio::time::Instant::now())
            .with_context(|| {
                format!(
                    "cannot list the plugins directory {}",
                    args.plugins.display()
                )
            })?;
        host.apply(scan.changes).await;
        match scan.recheck_at {
            Some(settled) => tokio::time::sleep_until(settled).await,
            None => break,
        }
    }
    let reloading = host.clone();
    let watching_plugins = tokio::spawn(watch(dir, cancel.child_token(), move |changes| {
        let host = reloading.clone();
        async move { host.apply(changes).await }
    }));
    readiness.set("plugins", true);
    factory.wait_for_cache_sync().await;
    readiness.set("informers", true);
    info!("ready");

    shutdown_signal().await;
    info!("shutting down");
    cancel.cancel();
    let _ = watching_plugins.await;
    host.stop().await;
    factory.shutdown().await;
    let _ = watching.await;
    Ok(())
}

/// Compiled plugins are cached in a directory only this user can read: `$XDG_CACHE_HOME`
/// or `~/.cache`, else the system temporary directory.
fn artifact_cache_dir() -> std::path::PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|home| std::path::PathBuf::from(home).join(".cache"))
        })
        .unwrap_or_else(std::env::temp_dir);
    base.join("kubeplug").join("artifacts")
}

async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                warn!(%error, "cannot listen for SIGTERM; stop with Ctrl-C");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}
