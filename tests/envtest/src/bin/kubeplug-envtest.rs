//! Runs the shared control plane until stdin closes: for trying things by hand
//! (`KUBECONFIG=… kubectl …`) and for the harness's own test that a process which dies or exits
//! without dropping its control plane leaves no server behind.
//!
//! Prints `etcd-pid N`, `apiserver-pid N`, `work-dir PATH`, `kubeconfig PATH`, then `ready`,
//! one per line on stdout.

use std::io::{Read, Write};
use std::process::ExitCode;

use kubeplug_envtest::Envtest;

fn main() -> ExitCode {
    // Without assets: the skip line (what is missing, how to provide it), or a panic with CI set.
    let Some(env) = Envtest::shared() else {
        return ExitCode::from(2);
    };
    let mut stdout = std::io::stdout().lock();
    let printed = writeln!(
        stdout,
        "etcd-pid {}\napiserver-pid {}\nwork-dir {}\nkubeconfig {}\nready",
        env.etcd_pid(),
        env.apiserver_pid(),
        env.work_dir().display(),
        env.kubeconfig().display(),
    )
    .and_then(|()| stdout.flush());
    if printed.is_err() {
        return ExitCode::FAILURE;
    }
    // Returning leaves the shared instance undropped, as at the end of a test binary: its
    // wrapper shells stop the servers and remove the directory.
    let _ = std::io::stdin().lock().read_to_end(&mut Vec::new());
    ExitCode::SUCCESS
}
