//! The command line: every flag has an environment variable, as is usual in a cluster.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Kubernetes event handlers as sandboxed WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(name = "kubeplug", version, about, long_about = None)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the host: informers, plugins from a directory, HTTP probes and metrics.
    Run(RunArgs),
    /// Validate a plugin offline: compile it, call `describe()`, and print what it subscribes
    /// to, its delivery mode, and the reads and writes it asks for.
    Check(CheckArgs),
    /// Print the RBAC rules (a ClusterRole or Role and its binding, as YAML) that the plugins
    /// of a directory need: list and watch of what they subscribe to and the reads their
    /// grants allow, and the writes both they ask for and their grants allow.
    Rbac(RbacArgs),
}

/// Flags of `kubeplug check`.
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The compiled plugin (a WebAssembly component).
    #[arg(value_name = "PLUGIN.wasm")]
    pub(crate) plugin: PathBuf,

    /// Configuration file whose `[plugins.NAME]` settings and grants to use, as `run` would.
    #[arg(long, env = "KUBEPLUG_CONFIG", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
}

/// Flags of `kubeplug rbac`.
#[derive(Debug, Args)]
pub(crate) struct RbacArgs {
    /// Directory of compiled plugins (`*.wasm`), as given to `run`.
    #[arg(long, env = "KUBEPLUG_PLUGINS", value_name = "DIR")]
    pub(crate) plugins: PathBuf,

    /// Configuration file with the plugins' settings and grants, as given to `run`.
    #[arg(long, env = "KUBEPLUG_CONFIG", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,

    /// The namespace the host is limited to: namespaced rules go to a Role there, and only
    /// cluster-scoped ones to a ClusterRole.
    #[arg(long, env = "KUBEPLUG_NAMESPACE", value_name = "NS")]
    pub(crate) namespace: Option<String>,

    /// Manifests (a directory of YAML) whose CustomResourceDefinitions name the custom kinds
    /// plugins use.
    #[arg(long, value_name = "DIR")]
    pub(crate) crds: Option<PathBuf>,

    /// Name of the roles and bindings.
    #[arg(long, default_value = "kubeplug")]
    pub(crate) name: String,

    /// The host's ServiceAccount.
    #[arg(long, default_value = "kubeplug")]
    pub(crate) service_account: String,

    /// The namespace of the host's ServiceAccount.
    #[arg(long, default_value = "kubeplug")]
    pub(crate) service_account_namespace: String,
}

/// Flags of `kubeplug run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Directory of compiled plugins (`*.wasm`), watched for changes.
    #[arg(long, env = "KUBEPLUG_PLUGINS", value_name = "DIR")]
    pub(crate) plugins: PathBuf,

    /// Directory of YAML manifests served as the cluster (the embedded local cluster),
    /// instead of a real cluster.
    #[arg(
        long,
        env = "KUBEPLUG_LOCAL",
        value_name = "DIR",
        conflicts_with_all = ["kubeconfig", "context"]
    )]
    pub(crate) local: Option<PathBuf>,

    /// Kubeconfig file of the cluster to run against [default: in a pod, the service
    /// account, unless $KUBECONFIG is set; else $KUBECONFIG, else ~/.kube/config].
    #[arg(long, env = "KUBEPLUG_KUBECONFIG", value_name = "FILE")]
    pub(crate) kubeconfig: Option<PathBuf>,

    /// Context of the kubeconfig to use [default: its current-context].
    #[arg(long, env = "KUBEPLUG_CONTEXT", value_name = "NAME")]
    pub(crate) context: Option<String>,

    /// Watch only this namespace (all namespaces by default).
    #[arg(long, env = "KUBEPLUG_NAMESPACE", value_name = "NS")]
    pub(crate) namespace: Option<String>,

    /// Address of the HTTP server for /healthz, /readyz, /metrics and /plugins
    /// [default: the config file's `host.http`, else 127.0.0.1:8080].
    #[arg(long, env = "KUBEPLUG_HTTP", value_name = "ADDR")]
    pub(crate) http: Option<SocketAddr>,

    /// Configuration file (TOML): grants, limits and per-plugin settings. Flags override it.
    #[arg(long, env = "KUBEPLUG_CONFIG", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
}
