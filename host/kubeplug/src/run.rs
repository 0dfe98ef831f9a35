//! `kubeplug run`: the host.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use kubeplug_informer::backoff::Backoff;
use kubeplug_informer::factory::{SharedInformerFactory, SourceProvider};
use kubeplug_informer::reflector::ReflectorConfig;
use kubeplug_informer::resource::Resource;
use kubeplug_kube::config::{ConfigSource, InCluster, KubeClient, default_kubeconfig_path};
use kubeplug_kube::discovery::Discovery;
use kubeplug_kube::lister::KubeSourceOptions;
use kubeplug_kube::provider::KubeSourceProvider;
use kubeplug_local::{LocalCluster, ScanCounts, ScanReason};
use kubeplug_runtime::view::BoxFuture;
use kubeplug_runtime::{CallObserver, ClusterWriter, Gvk, Runtime, RuntimeConfig};
use kubeplug_workqueue::WorkqueueMetrics;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::cli::RunArgs;
use crate::config::Config;
use crate::delivery_log::DeliveryLog;
use crate::election::{elect, election_config};
use crate::http::{CertificateSource, HttpState, KubeReviews, Readiness, Serving, serve};
use crate::kube_writer::{KubeWriter, reporting_instance};
use crate::local_api;
use crate::metrics::{InformerCollector, PluginCollector, ScanCollector, informer_health};
use crate::plugins::{DirConfig, Hints, PluginDir, PluginHost, Resolve, Resolver, watch};
use crate::sharding;
use crate::sharding::{
    FencedWriter, LeaseClock, SHARDING_CHECK, ShardMetrics, ShardStatus, ShardingSetup,
};
use crate::signals::stop_on_signals;
use crate::writer::LocalWriter;

/// Default address of the HTTP server.
const DEFAULT_HTTP: &str = "127.0.0.1:8080";

/// How long an informer no plugin uses keeps running before it stops: a hot swap, or a swap
/// back, within it finds its informers warm instead of costing a LIST and a WATCH each;
/// past it, the memory of a cache nobody reads is given back.
const INFORMER_LINGER: Duration = Duration::from_secs(30);

/// Runs until SIGTERM or Ctrl-C, which stop it gracefully in any phase (a second one at
/// once, see [`stop_on_signals`]).
pub(crate) async fn run(args: RunArgs) -> anyhow::Result<()> {
    let stop = stop_on_signals();
    let config = Config::load(args.config.as_deref())?;
    // Sharding renews each replica's Lease with the election's durations, and a call in
    // flight when a replica lapses must end within the same margin.
    let durations = match args.election.leader_elect || args.sharding.sharding {
        true => Some(election_config(&args.election, &config)?),
        false => None,
    };
    if !args.plugins.is_dir() {
        bail!(
            "the plugins directory {} does not exist or is not a directory",
            args.plugins.display()
        );
    }
    let dir = PluginDir::new(&args.plugins, DirConfig::default()).with_context(|| {
        format!(
            "cannot open the plugins directory {}",
            args.plugins.display()
        )
    })?;
    let http_address = match args.http.or(config.host.http) {
        Some(address) => address,
        None => DEFAULT_HTTP.parse().expect("a valid default address"),
    };

    let cancel = CancellationToken::new();
    let readiness = Readiness::default();
    let cluster_check = match args.cluster.local {
        Some(_) => LOCAL_CHECK,
        None => KUBE_CHECK,
    };
    // Every check is registered before the server starts, so that an early probe cannot
    // see a subset of them pass.
    for check in [cluster_check, PLUGINS_CHECK] {
        readiness.set(check, false);
    }
    if args.sharding.sharding {
        readiness.set(SHARDING_CHECK, false);
    }
    let mut local_api = None;
    let cluster = match &args.cluster.local {
        Some(dir) => {
            let cluster = open_local(dir, &cancel)?;
            if let (Some(address), Backend::Local { cluster, .. }) =
                (args.serve_api, &cluster.backend)
            {
                let served = local_api::serve(cluster, address, args.kubeconfig_out.clone());
                local_api = Some(served.await?);
            }
            readiness.set(LOCAL_CHECK, true);
            cluster
        }
        None => {
            open_kube(
                args.cluster.kubeconfig.clone(),
                args.cluster.context.clone(),
            )
            .await?
        }
    };

    let serving = serving(&args, &config, &cluster.backend)?;
    let factory = SharedInformerFactory::new(cluster.provider, ReflectorConfig::default())
        .with_linger(INFORMER_LINGER);
    let mut registry = Registry::default();
    let sharded = args.sharding.sharding;
    let (election, shard_durations) = match (durations, sharded) {
        (Some(durations), true) => (None, Some(durations)),
        (durations, _) => (durations.map(|durations| (args.election, durations)), None),
    };
    let lease_clock = LeaseClock::new();
    let shard_metrics = sharded.then(|| ShardMetrics::register(&mut registry));
    // controller-runtime's name, so that existing dashboards and alerts apply.
    let leader_family = Family::<Vec<(String, String)>, Gauge>::default();
    let mut leader_status = Gauge::default();
    if let Some((election, _)) = &election {
        let labels = vec![("name".to_owned(), election.leader_elect_id.clone())];
        leader_status = leader_family.get_or_create(&labels).clone();
        registry.register(
            "leader_election_master_status",
            "1 while this replica leads and delivers to plugins, else 0.",
            leader_family,
        );
    }
    registry.register_collector(Box::new(InformerCollector::new(factory.clone())));
    let manifest_scans = match &cluster.backend {
        Backend::Local { scans, .. } => Some(scans.clone()),
        Backend::Kube { .. } => None,
    };
    registry.register_collector(Box::new(ScanCollector::new(
        dir.scan_counts(),
        manifest_scans,
    )));
    let queue_metrics = WorkqueueMetrics::register(&mut registry);

    let replica = args
        .sharding
        .sharding_identity
        .clone()
        .unwrap_or_else(reporting_instance);
    let observer = match &args.delivery_log {
        Some(path) => {
            let lease = sharded.then(|| lease_clock.clone());
            Some(Arc::new(DeliveryLog::open(path, &replica, lease)?) as Arc<dyn CallObserver>)
        }
        None => None,
    };
    let runtime = Runtime::new(RuntimeConfig {
        artifact_cache: artifact_cache_dir(),
        observer,
        ..RuntimeConfig::default()
    })
    .context("cannot start the WebAssembly engine")?;
    let namespace = args.namespace.clone().or(config.host.namespace.clone());
    let writer = match sharded {
        true => Arc::new(FencedWriter::new(cluster.writer, lease_clock.clone())),
        false => cluster.writer,
    };
    let mut host = PluginHost::new(
        runtime,
        factory.clone(),
        cluster.resolve,
        writer,
        queue_metrics,
        config,
        namespace,
    )
    .replaying_on_swap(args.replay_on_swap);
    if sharded {
        host = host.sharded();
    }
    let host = Arc::new(host);
    registry.register_collector(Box::new(PluginCollector::new(host.clone())));

    let reports = host.clone();
    let shard_status = ShardStatus::default();
    let shards = sharded.then(|| shard_status.clone());
    let state = HttpState {
        readiness: readiness.clone(),
        registry: Arc::new(registry),
        plugins: Arc::new(move || plugins_json(&reports, shards.as_ref())),
        health_notes: {
            let factory = factory.clone();
            Arc::new(move || informer_health(&factory))
        },
    };
    let scheme = match serving {
        Serving::Plain => "http",
        Serving::Secure { .. } => "https",
    };
    let bound = serve(http_address, serving, state, cancel.clone()).await?;
    info!(address = %bound, scheme, "serving /healthz, /readyz, /metrics and /plugins");

    if let Backend::Kube { client, discovery } = &cluster.backend {
        tokio::select! {
            () = connect(client, discovery, &readiness) => {}
            () = stop.cancelled() => {
                info!("stopped before the cluster was reached");
                cancel.cancel();
                return Ok(());
            }
        }
    }

    // Plugins load, and informers warm up, but nothing is delivered before the Lease. The
    // election does not wait for plugins: one that cannot sync must not keep every replica
    // from leading.
    let election_started = match (&cluster.backend, election) {
        (Backend::Kube { client, .. }, Some((election, durations))) => {
            host.follow().await;
            Some(elect(
                client,
                election,
                durations,
                host.clone(),
                leader_status,
            ))
        }
        _ => None,
    };
    // A sharded replica delivers only the keys its ring gives it; until its Lease is written
    // and a handover done, none.
    let sharding = match (&cluster.backend, shard_durations, shard_metrics) {
        (Backend::Kube { client, .. }, Some(durations), Some(metrics)) => {
            let setup = ShardingSetup::new(&args.sharding, durations, client)?;
            Some(sharding::join(
                client,
                &factory,
                host.clone(),
                setup,
                lease_clock,
                metrics,
                (shard_status, readiness.clone()),
            )?)
        }
        _ => None,
    };
    // Plugins present at start load, once every file still being written has settled; each
    // starts as soon as the informers it reads have synced. A stop signal ends the wait, and
    // the host stops with what it has.
    let watch_cancel = cancel.child_token();
    let mut watching_plugins = None;
    let loaded = tokio::select! {
        biased;
        () = stop.cancelled() => None,
        loaded = load_present(dir, &host) => loaded?,
    };
    if let Some(dir) = loaded {
        let reloading = host.clone();
        watching_plugins = Some(tokio::spawn(watch(
            dir,
            watch_cancel.clone(),
            move |changes| {
                let host = reloading.clone();
                async move { host.apply(changes).await }
            },
        )));
        tokio::select! {
            () = follow_readiness(&host, &readiness) => {}
            () = stop.cancelled() => {}
        }
    }

    info!("shutting down");
    watch_cancel.cancel();
    if let Some(watching) = watching_plugins {
        let _ = watching.await;
    }
    // No new notifications; what is queued is worked off while this replica still leads.
    factory.shutdown().await;
    host.drain(tokio::time::Instant::now() + args.shutdown_timeout)
        .await;
    if let Some(election) = election_started {
        election.resign().await;
    }
    if let Some(sharding) = sharding {
        sharding.leave().await;
    }
    cancel.cancel();
    drop(local_api);
    if let Backend::Local { watching, .. } = cluster.backend {
        let _ = watching.await;
    }
    info!("stopped");
    Ok(())
}

/// `/plugins`: every plugin file's report, with its share of the keys when the replica is
/// sharded (`shard`: the ring, its members, this replica's keys).
fn plugins_json(host: &PluginHost, shards: Option<&ShardStatus>) -> serde_json::Value {
    let mut reports = serde_json::to_value(host.reports()).unwrap_or_default();
    let Some(shards) = shards else {
        return reports;
    };
    let shards = shards.lock().expect("shard status poisoned").clone();
    for report in reports.as_array_mut().into_iter().flatten() {
        let share = report["name"]
            .as_str()
            .and_then(|name| shards.plugins.get(name));
        if let (Some(share), Some(object)) = (share, report.as_object_mut()) {
            let shard = serde_json::json!({
                "ring": shards.ring,
                "identity": shards.identity,
                "lease_valid": shards.lease_valid,
                "members": shards.members,
                "ring_version": share.ring_version,
                "ring_members": share.ring_members,
                "keys_owned": share.keys_owned,
                "handing_over": share.handing_over,
            });
            object.insert("shard".to_owned(), shard);
        }
    }
    reports
}

/// The readiness check of the plugins; see [`crate::plugins::StartReadiness`].
const PLUGINS_CHECK: &str = "plugins";

/// Keeps the plugins' readiness check up to date with their states, judged against the
/// files present now, at start. Runs until cancelled.
async fn follow_readiness(host: &PluginHost, readiness: &Readiness) {
    let mut changes = host.subscribe_changes();
    let at_start = host.plugin_ids();
    let mut was_ready = false;
    loop {
        changes.borrow_and_update();
        match host.start_readiness(&at_start).verdict(at_start.len()) {
            Ok(notes) => {
                if !was_ready {
                    info!(failed = notes.len(), "ready");
                }
                was_ready = true;
                readiness.ready_with_notes(PLUGINS_CHECK, notes);
            }
            Err(reason) => {
                if was_ready {
                    warn!(%reason, "no longer ready");
                }
                was_ready = false;
                readiness.fail(PLUGINS_CHECK, reason);
            }
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// The readiness check of the embedded local cluster: its directory was loaded.
const LOCAL_CHECK: &str = "local-cluster";
/// The readiness check of a real cluster: its API server answered `/version`.
const KUBE_CHECK: &str = "cluster";
/// The longest wait between two attempts to reach the API server at start.
const MAX_CONNECT_BACKOFF: Duration = Duration::from_secs(30);

/// What the host runs on, chosen by `--local`: where informers list and watch, how plugin
/// types become served resources, and where plugin writes go. All three talk to the same
/// cluster.
pub(crate) struct Cluster {
    pub(crate) provider: Arc<dyn SourceProvider>,
    pub(crate) resolve: Resolver,
    pub(crate) writer: Arc<dyn ClusterWriter>,
    pub(crate) backend: Backend,
}

/// What the run loop still needs of the cluster besides the three above.
pub(crate) enum Backend {
    /// The embedded local cluster: the task following its directory (ends on cancel), its
    /// scans, and the cluster itself.
    Local {
        watching: JoinHandle<()>,
        scans: Arc<ScanCounts>,
        cluster: LocalCluster,
    },
    /// A real cluster: the client to check it with, the discovery cache to fill.
    Kube {
        // Boxed: a kube client is some hundred bytes, the other variant eight.
        client: Box<KubeClient>,
        discovery: Discovery,
    },
}

/// How the endpoints are served: securely by default against a cluster, as
/// controller-runtime's `--metrics-secure`, and in plain HTTP on the local cluster, which has
/// no API server to review callers.
fn serving(args: &RunArgs, config: &Config, backend: &Backend) -> anyhow::Result<Serving> {
    let secure = args
        .metrics_secure
        .or(config.host.metrics_secure)
        .unwrap_or(matches!(backend, Backend::Kube { .. }));
    let cert_dir = args
        .metrics_cert_dir
        .clone()
        .or_else(|| config.host.metrics_cert_dir.clone());
    match backend {
        _ if !secure => {
            if let Some(dir) = cert_dir {
                warn!(dir = %dir.display(), "a certificate directory is given but the endpoints are served in plain HTTP (metrics_secure is false)");
            }
            Ok(Serving::Plain)
        }
        Backend::Local { .. } => bail!(
            "--metrics-secure needs an API server to authenticate and authorise callers; \
             the local cluster has none"
        ),
        Backend::Kube { client, .. } => Ok(Serving::Secure {
            certificate: cert_dir.map_or(CertificateSource::SelfSigned, CertificateSource::Dir),
            reviews: Arc::new(KubeReviews(client.client().clone())),
        }),
    }
}

/// Serves `dir` as the cluster and follows its changes until `cancel`.
pub(crate) fn open_local(dir: &Path, cancel: &CancellationToken) -> anyhow::Result<Cluster> {
    let (cluster, report) = LocalCluster::open(dir)
        .with_context(|| format!("cannot serve {} as the local cluster", dir.display()))?;
    for error in &report.errors {
        warn!(%error, "local cluster");
    }
    info!(dir = %dir.display(), objects = report.applied, "local cluster loaded");
    let watching = cluster.watch(cancel.child_token());
    let resolving = cluster.clone();
    let scans = cluster.scan_counts();
    Ok(Cluster {
        provider: Arc::new(cluster.clone()),
        resolve: Arc::new(move |gvk: &Gvk| resolving.resolve(&gvk.api_version(), &gvk.kind)),
        writer: Arc::new(LocalWriter::new(cluster.clone())),
        backend: Backend::Local {
            watching,
            scans,
            cluster,
        },
    })
}

/// A client for the cluster that the flags and the environment name. Reads files only: the
/// server is contacted later, by [`connect`], so that `/readyz` can say why it is not ready.
pub(crate) async fn open_kube(
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
) -> anyhow::Result<Cluster> {
    let source = config_source(
        kubeconfig,
        context,
        std::env::var_os("KUBERNETES_SERVICE_HOST").is_some(),
        std::env::var_os("KUBECONFIG").is_some(),
    );
    let client = KubeClient::from_source(&source)
        .await
        .context("cannot configure a client for the Kubernetes cluster (or run on the embedded local cluster with --local DIR)")?;
    info!(origin = %client.origin(), "using the Kubernetes cluster");
    let provider = KubeSourceProvider::new(client.clone(), KubeSourceOptions::default());
    let discovery = provider.discovery().clone();
    let instance = reporting_instance();
    Ok(Cluster {
        provider: Arc::new(provider),
        resolve: Arc::new(DiscoveryResolver(discovery.clone())),
        writer: Arc::new(KubeWriter::new(client.clone(), discovery.clone(), instance)),
        backend: Backend::Kube {
            client: Box::new(client),
            discovery,
        },
    })
}

/// controller-runtime's order: `--kubeconfig` (with `--context`); else, with `--context` or
/// `$KUBECONFIG`, the default kubeconfig; else in a pod the service account; else kube's
/// inference (`~/.kube/config`, then in-cluster), whose error names both attempts.
fn config_source(
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
    in_pod: bool,
    kubeconfig_env: bool,
) -> ConfigSource {
    let explicit = kubeconfig.or_else(|| {
        (context.is_some() || kubeconfig_env)
            .then(default_kubeconfig_path)
            .flatten()
    });
    match explicit {
        Some(path) => ConfigSource::Kubeconfig { path, context },
        None if in_pod => ConfigSource::InCluster(InCluster::from_env()),
        None => ConfigSource::Infer,
    }
}

/// Waits until the API server answers, then fills the discovery cache. Until then the
/// cluster check fails with the error, which names the configuration and the server;
/// attempts back off from 1 s to [`MAX_CONNECT_BACKOFF`].
async fn connect(client: &KubeClient, discovery: &Discovery, readiness: &Readiness) {
    let mut backoff = Backoff::new(Duration::from_secs(1), MAX_CONNECT_BACKOFF);
    while let Err(error) = client.check().await {
        let delay = backoff.next_delay();
        warn!(%error, "cannot reach the cluster; retrying in {delay:?}");
        readiness.fail(KUBE_CHECK, error.to_string());
        tokio::time::sleep(delay).await;
    }
    // Plugins' synchronous cache reads resolve types from this cache (see `Resolve`).
    match discovery.warm().await {
        Ok(group_versions) => info!(group_versions, "discovery cached"),
        Err(error) => warn!(%error, "cannot list the served APIs; types resolve one by one"),
    }
    readiness.set(KUBE_CHECK, true);
    info!(origin = %client.origin(), "cluster reached");
}

/// Discovery as the plugins' resolver. A version's caches open through `resolve`, at its
/// load, so that a type first served after start is readable by the versions loaded since;
/// `cached` knows what [`Discovery::warm`] fetched at start and what any `resolve` fetched
/// since.
struct DiscoveryResolver(Discovery);

impl Resolve for DiscoveryResolver {
    fn resolve<'a>(&'a self, gvk: &'a Gvk) -> BoxFuture<'a, Option<Resource>> {
        Box::pin(async move {
            self.0
                .resolve(&gvk.group, &gvk.version, &gvk.kind)
                .await
                .inspect_err(|error| warn!(%error, "cannot resolve {gvk}"))
                .ok()
        })
    }

    fn cached(&self, gvk: &Gvk) -> Option<Resource> {
        self.0.cached(&gvk.group, &gvk.version, &gvk.kind)
    }
}

/// Compiled plugins are cached in a directory only this user can read: `$XDG_CACHE_HOME`
/// or `~/.cache`. Without either, nothing is cached: a shared directory such as `/tmp` could
/// be prepared by another user, and cached artefacts are loaded as native code.
pub(crate) fn artifact_cache_dir() -> Option<std::path::PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|dir| !dir.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|home| !home.is_empty())
                .map(|home| std::path::PathBuf::from(home).join(".cache"))
        });
    if base.is_none() {
        warn!("neither XDG_CACHE_HOME nor HOME is set: compiled plugins are not cached");
    }
    base.map(|base| base.join("kubeplug").join("artifacts"))
}

/// Loads the plugins present in `dir` at start, waiting for files still being written to
/// settle; its scans run off the async workers. Hands `dir` back for the watch to follow, or
/// `None` when the runtime shuts down meanwhile.
async fn load_present(
    mut dir: PluginDir,
    host: &Arc<PluginHost>,
) -> anyhow::Result<Option<PluginDir>> {
    let mut reason = ScanReason::Start;
    loop {
        let now = tokio::time::Instant::now();
        let Some((scanned_dir, scanned)) = dir.scan_blocking(reason, Hints::default(), now).await
        else {
            return Ok(None);
        };
        dir = scanned_dir;
        let scan = scanned.with_context(|| {
            format!("cannot list the plugins directory {}", dir.path().display())
        })?;
        let retry = host.apply(scan.changes).await;
        dir.retry(&retry, tokio::time::Instant::now());
        match scan.recheck_at {
            Some(settled) => tokio::time::sleep_until(settled).await,
            None => return Ok(Some(dir)),
        }
        reason = ScanReason::Retry;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubeconfig_flag_wins_then_the_pod_then_inference() {
        let flag = config_source(Some("/k".into()), Some("c".into()), true, true);
        assert!(
            matches!(&flag, ConfigSource::Kubeconfig { path, context: Some(c) } if path == Path::new("/k") && c == "c"),
            "{flag:?}"
        );
        assert!(matches!(
            config_source(None, None, true, false),
            ConfigSource::InCluster(_)
        ));
        assert!(matches!(
            config_source(None, None, false, false),
            ConfigSource::Infer
        ));
        // `--context` names a kubeconfig context, so even in a pod it means the kubeconfig
        // (wherever $KUBECONFIG or the home directory puts it).
        let in_pod_with_context = config_source(None, Some("c".into()), true, false);
        assert!(
            !matches!(in_pod_with_context, ConfigSource::InCluster(_)),
            "{in_pod_with_context:?}"
        );
    }
}
