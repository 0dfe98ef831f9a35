//! `kubeplug`: Kubernetes event handlers as sandboxed WebAssembly plugins, on client-go style
//! shared informers. See `kubeplug --help`.

mod authoring;
mod check;
mod cli;
mod delivery_log;
mod election;
mod event;
mod http;
mod kube_writer;
mod local_api;
mod metrics;
mod plugins;
mod rbac;
mod record;
mod replay;
mod run;
mod sharding;
mod signals;
mod writer;

use std::process::ExitCode;

use kubeplug_config as config;

use clap::Parser;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// mimalloc rather than glibc's malloc: each delta allocates and frees a few small blocks
/// (its object, key, labels, the listener's notification, a plugin event's strings), and
/// the Wasm no-op pipeline ran 45-59 % faster on it, for about 15 % more peak RSS
/// (`benches/README.md`, "The allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let default_filter = match cli.command {
        cli::Command::Test(_) => replay::DEFAULT_LOG_FILTER,
        // Their output says what they did; the runtime's load lines would only repeat it.
        cli::Command::New(_) | cli::Command::Build(_) | cli::Command::Toolchains(_) => "warn",
        _ => DEFAULT_LOG_FILTER,
    };
    let (filter, refused) = log_filter(default_filter);
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(filter);
    tracing_subscriber::registry().with(stderr).init();
    if let Some(refused) = refused {
        tracing::warn!("{refused}; logging with {default_filter:?}");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("kubeplug: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        cli::Command::Run(args) => runtime.block_on(run::run(*args)),
        cli::Command::Check(args) => runtime.block_on(check::check(args)),
        cli::Command::Rbac(args) => runtime.block_on(rbac::rbac(args)),
        cli::Command::Test(args) => runtime.block_on(replay::test(args)),
        cli::Command::Record(args) => runtime.block_on(record::record(args)),
        cli::Command::New(args) => runtime.block_on(authoring::new(args)),
        cli::Command::Build(args) => runtime.block_on(authoring::build(args)),
        cli::Command::Toolchains(cli::ToolchainsCommand::Install(args)) => {
            runtime.block_on(authoring::install(args))
        }
    };
    // A compile still running on a blocking thread (a host stopped while loading a large
    // plugin) is not waited for: it serves nothing any more.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("kubeplug: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// The log filter of stderr unless [`LOG_VARIABLES`] say otherwise: `info`, without the kube
/// client's own line for each failed request (its trace layer logs them at `error`): kubeplug
/// logs each failed attempt itself, with what it was for and the back-off.
const DEFAULT_LOG_FILTER: &str = "info,kube_client::client::builder=off";

/// The variables that choose the log filter, the first one set winning: kubeplug's own, then
/// the one every Rust tool reads.
const LOG_VARIABLES: [&str; 2] = ["KUBEPLUG_LOG", "RUST_LOG"];

/// The stderr filter: the first of [`LOG_VARIABLES`] that is set (and not empty), else
/// `default`; and, when that variable does not parse, why (the default applies then).
fn log_filter(default: &str) -> (tracing_subscriber::EnvFilter, Option<String>) {
    use tracing_subscriber::EnvFilter;
    let chosen = LOG_VARIABLES.iter().find_map(|name| {
        let value = std::env::var(name).ok().filter(|value| !value.is_empty())?;
        Some((*name, value))
    });
    match chosen {
        None => (EnvFilter::new(default), None),
        Some((name, value)) => match EnvFilter::builder().parse(&value) {
            Ok(filter) => (filter, None),
            Err(error) => (
                EnvFilter::new(default),
                Some(format!("{name}={value:?} is not a log filter ({error})")),
            ),
        },
    }
}
