//! A server run through a wrapper shell that ends it when the harness goes away.
//!
//! The workspace forbids `unsafe`, so there is no `prctl(PR_SET_PDEATHSIG)` to tie a server's
//! life to the test process. Instead every server is started by `/bin/sh` (the wrapper) whose
//! stdin is a pipe held by the harness and nobody else (std opens pipes close-on-exec, so no
//! other child inherits it). The kernel closes that pipe however the harness ends — drop,
//! panic, `exit` with statics never dropped, SIGKILL — and the wrapper answers end-of-file
//! with SIGTERM to the server, then SIGKILL after [`GRACE`].

use std::ffi::OsString;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::EnvtestError;

/// How long a server has between SIGTERM and SIGKILL. kube-apiserver's graceful shutdown takes
/// about a second here; etcd's less.
pub(crate) const GRACE: Duration = Duration::from_secs(5);

/// How long [`Supervised::stop`] waits for the wrapper beyond [`GRACE`].
const STOP_MARGIN: Duration = Duration::from_secs(3);

/// The wrapper. `$0` is its name in `ps`; `$1` the grace period in tenths of a second; `$2` a
/// directory to remove once the server has stopped on end-of-file (empty: none); the rest is
/// the server's command line. It prints the server's pid as its only line on stdout, sends
/// everything else (the server's stdout too) to its stderr, and exits with the server's status.
///
/// The watcher subshell reads stdin with the `read` builtin (no `cat` to leave behind) through
/// fd 3, because an asynchronous list's stdin is otherwise `/dev/null`. When the server exits
/// on its own, the main shell kills the watcher, so it can never signal a reused pid; once the
/// watcher has seen end-of-file it ignores that kill, so the stop and the removal complete.
const WRAPPER: &str = r#"
grace=$1
remove=$2
shift 2
exec 3<&0
"$@" </dev/null 3<&- >&2 &
server=$!
echo "$server"
exec >&2
{
    while read -r _; do :; done
    trap '' TERM
    kill -TERM "$server" 2>/dev/null
    waited=0
    while kill -0 "$server" 2>/dev/null; do
        if [ "$waited" -ge "$grace" ]; then
            kill -KILL "$server" 2>/dev/null
            break
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    if [ -n "$remove" ]; then rm -rf -- "$remove"; fi
} <&3 &
watcher=$!
exec 3<&-
wait "$server"
status=$?
kill "$watcher" 2>/dev/null
exit "$status"
"#;

/// One running server and its wrapper.
///
/// Contract: dropping it (or [`stop`](Self::stop)) closes the wrapper's stdin and waits, at
/// most [`GRACE`] plus a margin, for the server to end. The wrapper is never killed directly:
/// that would orphan the server.
#[derive(Debug)]
pub(crate) struct Supervised {
    /// `etcd` or `kube-apiserver`, for messages.
    binary: &'static str,
    /// The server's own pid, as the wrapper printed it.
    pid: u32,
    wrapper: Child,
    /// The write end of the wrapper's stdin; `None` once closed. Nothing is ever written.
    lifeline: Option<ChildStdin>,
    /// The file that receives the server's stdout and stderr (appended to).
    log: PathBuf,
}

impl Supervised {
    /// Starts `path args…` through the wrapper, appending its output to `log`. With
    /// `remove_on_stop`, the wrapper deletes that directory after the server stopped because
    /// the harness went away or stopped it.
    pub(crate) fn spawn(
        binary: &'static str,
        path: &Path,
        args: &[OsString],
        log: &Path,
        remove_on_stop: Option<&Path>,
    ) -> Result<Supervised, EnvtestError> {
        let spawn_failed = |cause: String| EnvtestError::SpawnFailed {
            binary,
            path: path.to_owned(),
            cause,
        };
        let log_file = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|source| EnvtestError::WriteFailed {
                path: log.to_owned(),
                source,
            })?;
        let grace_tenths = GRACE.as_millis() / 100;
        let mut wrapper = Command::new("/bin/sh")
            .arg("-c")
            .arg(WRAPPER)
            .arg(format!("kubeplug-envtest-{binary}"))
            .arg(grace_tenths.to_string())
            .arg(remove_on_stop.map(Path::as_os_str).unwrap_or_default())
            .arg(path)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .map_err(|e| spawn_failed(e.to_string()))?;
        let lifeline = wrapper.stdin.take();
        let mut line = String::new();
        let read = wrapper
            .stdout
            .take()
            .map(|stdout| BufReader::new(stdout).read_line(&mut line));
        let pid = match (read, line.trim().parse::<u32>()) {
            (Some(Ok(_)), Ok(pid)) => pid,
            (read, _) => {
                // Without a pid the wrapper is of no use; closing its stdin ends whatever it
                // started, and it exits by itself.
                drop(lifeline);
                let _ = wrapper.wait();
                return Err(spawn_failed(format!(
                    "the wrapper printed {line:?} instead of a pid ({read:?})"
                )));
            }
        };
        Ok(Supervised {
            binary,
            pid,
            wrapper,
            lifeline,
            log: log.to_owned(),
        })
    }

    /// The server's pid.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// How the server ended, if it has.
    pub(crate) fn exit_status(&mut self) -> Option<ExitStatus> {
        self.wrapper.try_wait().ok().flatten()
    }

    /// An [`EnvtestError::ExitedEarly`] if the server has exited.
    pub(crate) fn check_running(&mut self) -> Result<(), EnvtestError> {
        match self.exit_status() {
            None => Ok(()),
            Some(status) => Err(EnvtestError::ExitedEarly {
                binary: self.binary,
                status,
                log: self.log.clone(),
                log_tail: log_tail(&self.log),
            }),
        }
    }

    /// Closes the wrapper's stdin and waits for the server to end (SIGTERM, then SIGKILL after
    /// [`GRACE`]).
    pub(crate) fn stop(&mut self) -> Result<(), EnvtestError> {
        drop(self.lifeline.take());
        let waited = GRACE + STOP_MARGIN;
        let deadline = Instant::now() + waited;
        while Instant::now() < deadline {
            if self.exit_status().is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(EnvtestError::StopFailed {
            binary: self.binary,
            pid: self.pid,
            waited,
        })
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        if self.lifeline.is_some()
            && let Err(error) = self.stop()
        {
            // Drop cannot fail; say so where a test run shows it.
            use std::io::Write;
            let _ = writeln!(std::io::stderr().lock(), "kubeplug-envtest: {error}");
        }
    }
}

/// The last lines (at most 4 KiB) of a log file, for error messages.
pub(crate) fn log_tail(path: &Path) -> String {
    const TAIL: u64 = 4096;
    let mut bytes = Vec::new();
    let read = File::open(path).and_then(|mut file| {
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(TAIL)))?;
        file.read_to_end(&mut bytes)
    });
    match read {
        Ok(_) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            // The first line is likely cut in the middle when the file is longer than TAIL.
            let skip = usize::from(bytes.len() as u64 == TAIL && lines.len() > 1);
            lines[skip..].join("\n")
        }
        Err(error) => format!("(cannot read {}: {error})", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spawn_sleep(dir: &Path, remove: Option<&Path>) -> Supervised {
        Supervised::spawn(
            "sleep",
            Path::new("/bin/sleep"),
            &["300".into()],
            &dir.join("sleep.log"),
            remove,
        )
        .unwrap()
    }

    fn alive(pid: u32) -> bool {
        // A zombie still has a /proc entry; its state (the field after the name) is `Z`.
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
        })
    }

    #[test]
    fn closing_the_lifeline_ends_the_server_and_removes_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let doomed = dir.path().join("doomed");
        std::fs::create_dir(&doomed).unwrap();
        let mut server = spawn_sleep(dir.path(), Some(&doomed));
        let pid = server.pid();
        assert!(alive(pid));
        server.check_running().unwrap();
        server.stop().unwrap();
        assert!(!alive(pid));
        // The watcher removes the directory right after the server has gone.
        let deadline = Instant::now() + Duration::from_secs(5);
        while doomed.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!doomed.exists());
    }

    #[test]
    fn a_server_that_ignores_sigterm_is_killed_after_the_grace_period() {
        let dir = tempfile::tempdir().unwrap();
        let mut server = Supervised::spawn(
            "stubborn",
            Path::new("/bin/sh"),
            &[
                "-c".into(),
                "trap '' TERM; echo started; while :; do sleep 1; done".into(),
            ],
            &dir.path().join("stubborn.log"),
            None,
        )
        .unwrap();
        let pid = server.pid();
        let started = Instant::now();
        while !log_tail(&server.log).contains("started") {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "the server never started"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server.stop().unwrap();
        assert!(
            started.elapsed() >= GRACE,
            "stopped after {:?}",
            started.elapsed()
        );
        assert!(!alive(pid));
    }

    #[test]
    fn a_server_that_exits_by_itself_reports_its_status_and_log() {
        let dir = tempfile::tempdir().unwrap();
        let keep = dir.path().join("keep");
        std::fs::create_dir(&keep).unwrap();
        let mut server = Supervised::spawn(
            "failing",
            Path::new("/bin/sh"),
            &[
                "-c".into(),
                "echo 'bind: address already in use' >&2; exit 3".into(),
            ],
            &dir.path().join("failing.log"),
            Some(&keep),
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while server.exit_status().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        match server.check_running() {
            Err(EnvtestError::ExitedEarly {
                status, log_tail, ..
            }) => {
                assert_eq!(status.code(), Some(3));
                assert_eq!(log_tail, "bind: address already in use");
            }
            other => panic!("expected ExitedEarly, got {other:?}"),
        }
        drop(server);
        // Only a stop on end-of-file removes the directory: a crash keeps it for its logs.
        assert!(keep.exists());
    }

    #[test]
    fn a_missing_binary_is_an_early_exit_with_the_shells_message() {
        let dir = tempfile::tempdir().unwrap();
        let mut server = Supervised::spawn(
            "missing",
            Path::new("/nonexistent/server"),
            &[],
            &dir.path().join("missing.log"),
            None,
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while server.exit_status().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let error = server.check_running().unwrap_err().to_string();
        assert!(error.contains("/nonexistent/server"), "{error}");
    }
}
