//! The command line: every flag has an environment variable, as is usual in a cluster.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Kubernetes event handlers as sandboxed WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(
    name = "kubeplug",
    version,
    about,
    long_about = None,
    after_help = "Logging: KUBEPLUG_LOG, else RUST_LOG, sets the filter of what goes to stderr \
                  (tracing's syntax: `debug`, `info,kubeplug_runtime=debug`); default `info` without the \
                  kube client's own copy of each failed request."
)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the host: informers, plugins from a directory, HTTP probes and metrics.
    Run(Box<RunArgs>),
    /// Validate a plugin offline: compile it, call `describe()`, and print what it subscribes
    /// to, its delivery mode, and the reads and writes it asks for.
    Check(CheckArgs),
    /// Print the RBAC rules (a ClusterRole or Role and its binding, as YAML) that the plugins
    /// of a directory need: list and watch of what they subscribe to and the reads their
    /// grants allow, and the writes both they ask for and their grants allow.
    Rbac(RbacArgs),
    /// Replay a stream of events into one plugin on an in-memory cluster and print every
    /// call it made (logs, cluster writes, reconcile results, failures) and its metrics.
    /// Exits non-zero if a call failed, so that plugin authors can run it in CI.
    Test(TestArgs),
    /// Write the live events of chosen resources to a file that `kubeplug test` replays.
    Record(RecordArgs),
    /// Write a new plugin project: a handler, the build manifest of its language, the WIT
    /// it builds against, a README with the commands to build, check and test it, sample
    /// events for `kubeplug test`, and the configuration section granting what it reads.
    New(NewArgs),
    /// Build the plugin project in a directory into `DIR/<name>.wasm` with its language's
    /// own toolchain, and check that the component describes itself under the project's
    /// name.
    Build(BuildArgs),
    /// The guest languages' toolchains.
    #[command(subcommand)]
    Toolchains(ToolchainsCommand),
}

/// Flags of `kubeplug new`.
#[derive(Debug, Args)]
pub(crate) struct NewArgs {
    /// The plugin's name: a DNS label (lowercase letters, digits and `-`).
    #[arg(value_name = "NAME")]
    pub(crate) name: String,

    /// The language of the handler.
    #[arg(long, value_enum)]
    pub(crate) lang: NewLanguage,

    /// `events`: every change, in order; `reconcile`: keys through a work queue.
    #[arg(long, value_enum, default_value_t = NewMode::Events)]
    pub(crate) mode: NewMode,

    /// Where to write the project [default: ./NAME].
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,

    /// Write into a directory that is not empty (files of the same name are replaced).
    #[arg(long)]
    pub(crate) force: bool,
}

/// The languages `kubeplug new` has templates for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum NewLanguage {
    Rust,
    Javascript,
    Python,
    C,
}

/// A plugin's delivery mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum NewMode {
    Events,
    Reconcile,
}

/// Flags of `kubeplug build`.
#[derive(Debug, Args)]
pub(crate) struct BuildArgs {
    /// The project: a directory holding Cargo.toml (Rust), plugin.toml (C), package.json
    /// (JavaScript) or pyproject.toml (Python).
    #[arg(value_name = "DIR", default_value = ".")]
    pub(crate) dir: PathBuf,

    /// Where `kubeplug toolchains install` put the JavaScript, Python and zig tools
    /// [default: $XDG_DATA_HOME/kubeplug/toolchains].
    #[arg(long, env = "KUBEPLUG_TOOLCHAINS", value_name = "DIR")]
    pub(crate) toolchains: Option<PathBuf>,
}

/// `kubeplug toolchains ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum ToolchainsCommand {
    /// Install what building plugins in LANG needs (every language when none is given):
    /// the Rust target with rustup, for C clang-19 and wasi-libc from Debian's packages as
    /// root or else zig from PyPI, componentize-qjs from npm and componentize-py from PyPI,
    /// at pinned versions. What is already there is left alone.
    Install(ToolchainsInstallArgs),
}

/// Flags of `kubeplug toolchains install`.
#[derive(Debug, Args)]
pub(crate) struct ToolchainsInstallArgs {
    /// `rust`, `c`, `javascript` (`js`) or `python` (`py`).
    #[arg(value_name = "LANG")]
    pub(crate) languages: Vec<String>,

    /// Where to put the JavaScript, Python and zig tools [default:
    /// $XDG_DATA_HOME/kubeplug/toolchains].
    #[arg(long, env = "KUBEPLUG_TOOLCHAINS", value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,

    /// The C compiler to install: `clang` (Debian's packages, needs root) or `zig` (PyPI,
    /// under --dir; builds use it whenever it is there) [default: clang as root, else zig].
    #[arg(long, value_name = "COMPILER")]
    pub(crate) c_compiler: Option<CCompilerArg>,
}

/// The C compilers `kubeplug toolchains install c` can install.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum CCompilerArg {
    Clang,
    Zig,
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

    /// Also print what `run --leader-elect` needs: a Role and RoleBinding, in the
    /// ServiceAccount's namespace, to get, create and update Leases.
    #[arg(long, env = "KUBEPLUG_LEADER_ELECT")]
    pub(crate) leader_elect: bool,

    /// Also print what `run --sharding` needs: a Role and RoleBinding, in the
    /// ServiceAccount's namespace, to watch the ring's Leases and write and delete its own.
    #[arg(long, env = "KUBEPLUG_SHARDING")]
    pub(crate) sharding: bool,

    /// Print what `run`'s secure endpoints need (its default against a cluster): the
    /// host's `create` on TokenReviews and SubjectAccessReviews, and a `NAME-metrics-reader`
    /// ClusterRole to bind to whoever scrapes `/metrics` and `/plugins`.
    #[arg(
        long,
        env = "KUBEPLUG_METRICS_SECURE",
        value_name = "BOOL",
        default_value_t = true,
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub(crate) metrics_secure: bool,
}

/// Flags of `kubeplug run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Directory of compiled plugins (`*.wasm`), watched for changes.
    #[arg(long, env = "KUBEPLUG_PLUGINS", value_name = "DIR")]
    pub(crate) plugins: PathBuf,

    /// On a hot reload, hand the new version every cached object again (as initial-list
    /// adds) even when its subscriptions did not change, so that an edited plugin shows its
    /// effect at once: for development. By default such a version takes over the running
    /// listeners and sees only later changes.
    #[arg(long, env = "KUBEPLUG_REPLAY_ON_SWAP")]
    pub(crate) replay_on_swap: bool,

    /// Append one JSON line per delivered call (`handle-events` or `reconcile`) to FILE:
    /// replica, plugin, key, resourceVersion, start and end in microseconds since the Unix
    /// epoch, and whether it succeeded. Replicas on one machine may share the file: to audit
    /// which replica handled what, and when.
    #[arg(long, env = "KUBEPLUG_DELIVERY_LOG", value_name = "FILE")]
    pub(crate) delivery_log: Option<PathBuf>,

    /// Which cluster.
    #[command(flatten)]
    pub(crate) cluster: ClusterArgs,

    /// Watch only this namespace (all namespaces by default).
    #[arg(long, env = "KUBEPLUG_NAMESPACE", value_name = "NS")]
    pub(crate) namespace: Option<String>,

    /// Address of the HTTP server for /healthz, /readyz, /metrics and /plugins
    /// [default: the config file's `host.http`, else 127.0.0.1:8080].
    #[arg(long, env = "KUBEPLUG_HTTP", value_name = "ADDR")]
    pub(crate) http: Option<SocketAddr>,

    /// With --local: serve the local cluster over the Kubernetes HTTP API on this loopback
    /// address (e.g. 127.0.0.1:8081), for kubectl. Requests must carry the token of the
    /// kubeconfig it writes.
    #[arg(
        long,
        env = "KUBEPLUG_SERVE_API",
        value_name = "ADDR",
        requires = "local"
    )]
    pub(crate) serve_api: Option<SocketAddr>,

    /// Where --serve-api writes its kubeconfig, readable by its owner only [default:
    /// $XDG_STATE_HOME/kubeplug/local.kubeconfig].
    #[arg(
        long,
        env = "KUBEPLUG_KUBECONFIG_OUT",
        value_name = "FILE",
        requires = "serve_api"
    )]
    pub(crate) kubeconfig_out: Option<PathBuf>,

    /// Configuration file (TOML): grants, limits and per-plugin settings. Flags override it.
    #[arg(long, env = "KUBEPLUG_CONFIG", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,

    /// Serve over HTTPS, with /metrics and /plugins only for callers the API server
    /// authenticates (TokenReview) and allows to `get` the path (SubjectAccessReview);
    /// /healthz and /readyz stay open [default: the config file's `host.metrics_secure`,
    /// else true against a cluster and false with --local].
    #[arg(
        long,
        env = "KUBEPLUG_METRICS_SECURE",
        value_name = "BOOL",
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub(crate) metrics_secure: Option<bool>,

    /// Directory holding `tls.crt` and `tls.key` for HTTPS, reloaded when they change
    /// [default: the config file's `host.metrics_cert_dir`, else a self-signed certificate
    /// made at start].
    #[arg(long, env = "KUBEPLUG_METRICS_CERT_DIR", value_name = "DIR")]
    pub(crate) metrics_cert_dir: Option<PathBuf>,

    /// How long a graceful shutdown (SIGTERM) may work off queued reconcile keys before it
    /// drops them; calls in flight always finish. Keep it below the pod's
    /// terminationGracePeriodSeconds.
    #[arg(long, env = "KUBEPLUG_SHUTDOWN_TIMEOUT", value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub(crate) shutdown_timeout: Duration,

    /// Leader election.
    #[command(flatten)]
    pub(crate) election: ElectionArgs,

    /// Sharding.
    #[command(flatten)]
    pub(crate) sharding: ShardingArgs,
}

/// The cluster `run` and `record` talk to.
#[derive(Debug, Args)]
pub(crate) struct ClusterArgs {
    /// Directory of YAML manifests served as the cluster (the embedded local cluster),
    /// instead of a real cluster.
    #[arg(
        long,
        env = "KUBEPLUG_LOCAL",
        value_name = "DIR",
        conflicts_with_all = ["kubeconfig", "context"]
    )]
    pub(crate) local: Option<PathBuf>,

    /// Kubeconfig file of the cluster [default: in a pod, the service account, unless
    /// $KUBECONFIG is set; else $KUBECONFIG, else ~/.kube/config].
    #[arg(long, env = "KUBEPLUG_KUBECONFIG", value_name = "FILE")]
    pub(crate) kubeconfig: Option<PathBuf>,

    /// Context of the kubeconfig to use [default: its current-context].
    #[arg(long, env = "KUBEPLUG_CONTEXT", value_name = "NAME")]
    pub(crate) context: Option<String>,
}

/// Leader election flags of `kubeplug run`.
#[derive(Debug, Args)]
pub(crate) struct ElectionArgs {
    /// Deliver to plugins only while holding a coordination.k8s.io/v1 Lease, so that
    /// several replicas can run: all keep their caches warm, one delivers.
    #[arg(long, env = "KUBEPLUG_LEADER_ELECT", conflicts_with = "local")]
    pub(crate) leader_elect: bool,

    /// Namespace of the Lease [default: the pod's namespace in a cluster, else the
    /// kubeconfig context's, else `default`].
    #[arg(long, env = "KUBEPLUG_LEADER_ELECT_NAMESPACE", value_name = "NS")]
    pub(crate) leader_elect_namespace: Option<String>,

    /// Name of the Lease; replicas that share it elect one leader.
    #[arg(
        long,
        env = "KUBEPLUG_LEADER_ELECT_ID",
        value_name = "NAME",
        default_value = "kubeplug"
    )]
    pub(crate) leader_elect_id: String,

    /// This replica's identity in the Lease; unique per replica [default: the host name
    /// (the pod name in a cluster) and a random suffix].
    #[arg(long, env = "KUBEPLUG_LEADER_ELECT_IDENTITY", value_name = "ID")]
    pub(crate) leader_elect_identity: Option<String>,

    /// How long a Lease holds after its last renewal; others wait this long before taking
    /// it over from a leader that stopped renewing.
    #[arg(long, env = "KUBEPLUG_LEADER_ELECT_LEASE_DURATION", value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    pub(crate) leader_elect_lease_duration: Duration,

    /// The leader stops delivering if it could not renew the Lease for this long. Shorter
    /// than the lease duration.
    #[arg(long, env = "KUBEPLUG_LEADER_ELECT_RENEW_DEADLINE", value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub(crate) leader_elect_renew_deadline: Duration,

    /// How often candidates try to take the Lease and the leader renews it.
    #[arg(long, env = "KUBEPLUG_LEADER_ELECT_RETRY_PERIOD", value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub(crate) leader_elect_retry_period: Duration,
}

/// Sharding: replicas that share the plugins' work by key (ARCHITECTURE.md, "Sharding").
/// Each replica's Lease is renewed with the `--leader-elect-*` durations.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ShardingArgs {
    /// Share every plugin's keys with the other replicas of the ring: each replica holds a
    /// coordination.k8s.io/v1 Lease of its own, and delivers the keys a consistent-hash ring
    /// over the live replicas gives it.
    #[arg(
        long,
        env = "KUBEPLUG_SHARDING",
        conflicts_with_all = ["local", "leader_elect"]
    )]
    pub(crate) sharding: bool,

    /// The ring's name: replicas with the same one share the work. It labels their Leases
    /// and starts their names.
    #[arg(
        long,
        env = "KUBEPLUG_SHARDING_ID",
        value_name = "NAME",
        default_value = "kubeplug"
    )]
    pub(crate) sharding_id: String,

    /// Namespace of the Leases [default: the pod's namespace in a cluster, else the
    /// kubeconfig context's, else `default`].
    #[arg(long, env = "KUBEPLUG_SHARDING_NAMESPACE", value_name = "NS")]
    pub(crate) sharding_namespace: Option<String>,

    /// This replica's name in the ring; unique per replica [default: the host name, the pod
    /// name in a cluster]. Its Lease is `<ring>-<name>`.
    #[arg(long, env = "KUBEPLUG_SHARDING_IDENTITY", value_name = "NAME")]
    pub(crate) sharding_identity: Option<String>,
}

/// A duration as `1.5s`, `500ms`, `2m` or `1h`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("{text:?} has no unit; write for example 15s, 500ms or 2m"))?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} does not start with a number"))?;
    let seconds = match unit {
        "ms" => number / 1e3,
        "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        _ => return Err(format!("{unit:?} is not a unit of time; use ms, s, m or h")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_number_and_a_unit() {
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("15").unwrap_err().contains("no unit"));
        assert!(parse_duration("15d").unwrap_err().contains("not a unit"));
        assert!(parse_duration("s").unwrap_err().contains("number"));
    }
}

/// Flags of `kubeplug test`.
#[derive(Debug, Args)]
pub(crate) struct TestArgs {
    /// The compiled plugin (a WebAssembly component).
    #[arg(value_name = "PLUGIN.wasm")]
    pub(crate) plugin: PathBuf,

    /// The events to replay, in order: YAML documents or JSON values, each a watch event
    /// `{type: ADDED|MODIFIED|DELETED, object: {...}}`, as `kubeplug record` writes them.
    #[arg(long, value_name = "FILE")]
    pub(crate) events: PathBuf,

    /// Manifests (a YAML file, or a directory of them) that make up the cluster before the
    /// first event: the plugin gets them as its initial list and reads them from its cache.
    /// Repeatable.
    #[arg(long, value_name = "FILE_OR_DIR")]
    pub(crate) cache: Vec<PathBuf>,

    /// Configuration file whose `[plugins.NAME]` settings, grants and limits to use, with its
    /// `[defaults]`, as `run` would. Without one, the defaults, which grant nothing.
    #[arg(long, env = "KUBEPLUG_CONFIG", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,

    /// The plugin's settings document (JSON), instead of the configuration's.
    #[arg(long, value_name = "JSON")]
    pub(crate) settings: Option<String>,

    /// How to print the calls.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub(crate) output: OutputFormat,

    /// How long the plugin may take to finish with one event (e.g. `500ms`, `30s`, `2m`).
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) timeout: Duration,
}

/// How `kubeplug test` prints its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OutputFormat {
    /// Readable text.
    Text,
    /// One JSON document (see docs/testing-plugins.md for its schema).
    Json,
}

/// Flags of `kubeplug record`.
#[derive(Debug, Args)]
pub(crate) struct RecordArgs {
    /// A resource type to record, as `GROUP/VERSION/KIND` (`apps/v1/Deployment`), or
    /// `VERSION/KIND` for the core group (`v1/Pod`). Repeatable.
    #[arg(long = "resource", value_name = "TYPE", required = true)]
    pub(crate) resources: Vec<String>,

    /// Record only this namespace (all namespaces by default).
    #[arg(long, env = "KUBEPLUG_NAMESPACE", value_name = "NS")]
    pub(crate) namespace: Option<String>,

    /// Which cluster; edits of a local one are recorded as they happen.
    #[command(flatten)]
    pub(crate) cluster: ClusterArgs,

    /// The file to write (replaced): JSON lines if it ends in `.json`, `.jsonl` or
    /// `.ndjson`, YAML documents otherwise.
    #[arg(long, value_name = "FILE")]
    pub(crate) out: PathBuf,

    /// Stop after this many events (the initial list included).
    #[arg(long, value_name = "N")]
    pub(crate) count: Option<u64>,

    /// Stop after this long (e.g. `30s`, `5m`) [default: until Ctrl-C or SIGTERM].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) duration: Option<Duration>,
}
