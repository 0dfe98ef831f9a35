//! `kubeplug`: Kubernetes event handlers as sandboxed WebAssembly plugins, on client-go style
//! shared informers. See `kubeplug --help`.

mod check;
mod cli;
mod config;
mod http;
mod kube_writer;
mod metrics;
mod plugins;
mod rbac;
mod run;
mod writer;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("KUBEPLUG_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
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
        cli::Command::Run(args) => runtime.block_on(run::run(args)),
        cli::Command::Check(args) => runtime.block_on(check::check(args)),
        cli::Command::Rbac(args) => runtime.block_on(rbac::rbac(args)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("kubeplug: {error:#}");
            ExitCode::FAILURE
        }
    }
}
