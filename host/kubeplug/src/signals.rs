//! Stop signals, as Kubernetes sends them: the first SIGTERM (or Ctrl-C) asks for a graceful
//! stop, in whatever phase the host is (connecting, loading plugins, syncing, running,
//! draining); a second one ends the process at once with status 1, for whoever does not want
//! to wait for the drain.

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// A token cancelled by the first SIGTERM or SIGINT; the second exits the process with
/// status 1. The handlers are installed before this returns, so no signal is missed once it
/// has.
pub(crate) fn stop_on_signals() -> CancellationToken {
    let stop = CancellationToken::new();
    let mut signals = Signals::install();
    let first = stop.clone();
    tokio::spawn(async move {
        let name = signals.next().await;
        info!("{name}: stopping; another SIGTERM or Ctrl-C stops at once");
        first.cancel();
        let name = signals.next().await;
        eprintln!("kubeplug: {name} again: stopped at once");
        std::process::exit(1);
    });
    stop
}

/// SIGTERM and SIGINT; either may be missing (a handler that could not be installed), and
/// then only the other stops the host.
struct Signals {
    terminate: Option<Signal>,
    interrupt: Option<Signal>,
}

impl Signals {
    fn install() -> Self {
        let install = |kind, name| {
            signal(kind)
                .inspect_err(|error| warn!(%error, "cannot listen for {name}"))
                .ok()
        };
        Self {
            terminate: install(SignalKind::terminate(), "SIGTERM"),
            interrupt: install(SignalKind::interrupt(), "SIGINT"),
        }
    }

    /// The name of the next signal received.
    async fn next(&mut self) -> &'static str {
        async fn on(signal: &mut Option<Signal>) {
            match signal {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = on(&mut self.terminate) => "SIGTERM",
            () = on(&mut self.interrupt) => "SIGINT",
        }
    }
}
