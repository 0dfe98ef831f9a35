//! No etcd or kube-apiserver outlives the process that started it, however that process ends.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kubeplug_envtest::{Assets, Envtest, Options};

/// What the process hosting a control plane printed about it.
struct Hosted {
    child: Child,
    pids: [(u32, &'static str); 2],
    work_dir: PathBuf,
}

/// Runs the crate's binary, which starts the shared control plane in its own process and says
/// where it is.
fn host_a_control_plane() -> Hosted {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubeplug-envtest"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the kubeplug-envtest binary starts");
    let stdout = child.stdout.take().expect("a piped stdout");
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut facts = HashMap::new();
    loop {
        let wait = deadline.saturating_duration_since(Instant::now());
        match received.recv_timeout(wait) {
            Ok(line) if line == "ready" => break,
            Ok(line) => {
                let (key, value) = line.split_once(' ').expect("`key value` lines");
                facts.insert(key.to_owned(), value.to_owned());
            }
            Err(error) => {
                let _ = child.kill();
                panic!("the binary did not report a ready control plane: {error}");
            }
        }
    }
    let pid = |key: &str| facts[key].parse::<u32>().expect("a pid");
    Hosted {
        pids: [
            (pid("etcd-pid"), "etcd"),
            (pid("apiserver-pid"), "kube-apiserver"),
        ],
        work_dir: PathBuf::from(&facts["work-dir"]),
        child,
    }
}

/// Whether `pid` is a live (not zombie) process running `binary`: a pid reused by another
/// program does not count.
fn alive(pid: u32, binary: &str) -> bool {
    let running = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    });
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    running && String::from_utf8_lossy(&cmdline).contains(binary)
}

/// Waits (at most the wrappers' 5 s grace plus a margin) until the servers and the directory
/// are gone; returns how long that took.
fn assert_all_gone(pids: &[(u32, &str)], work_dir: &Path) -> Duration {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(15);
    loop {
        let left: Vec<_> = pids
            .iter()
            .filter(|(pid, binary)| alive(*pid, binary))
            .collect();
        if left.is_empty() && !work_dir.exists() {
            return started.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "still there after {:?}: {left:?}, directory {} exists: {}",
            started.elapsed(),
            work_dir.display(),
            work_dir.exists()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_sigkilled_process_takes_its_servers_with_it() {
    if Assets::discover_or_skip().is_none() {
        return;
    }
    let mut hosted = host_a_control_plane();
    for (pid, binary) in hosted.pids {
        assert!(alive(pid, binary), "{binary} ({pid}) runs before the kill");
    }
    hosted.child.kill().expect("SIGKILL");
    let _ = hosted.child.wait();
    let took = assert_all_gone(&hosted.pids, &hosted.work_dir);
    eprintln!("gone {took:?} after SIGKILL");
}

#[test]
fn a_process_that_exits_without_dropping_the_shared_instance_takes_its_servers_with_it() {
    if Assets::discover_or_skip().is_none() {
        return;
    }
    let mut hosted = host_a_control_plane();
    // The binary returns from main when its stdin closes; statics are never dropped.
    drop(hosted.child.stdin.take());
    let status = hosted.child.wait().expect("the binary exits");
    assert!(status.success(), "{status}");
    let took = assert_all_gone(&hosted.pids, &hosted.work_dir);
    eprintln!("gone {took:?} after exit");
}

#[test]
fn a_control_plane_dropped_by_a_panicking_test_stops_and_cleans_up() {
    let Some(env) = Envtest::start_or_skip(&Options::default()) else {
        return;
    };
    let pids = [
        (env.etcd_pid(), "etcd"),
        (env.apiserver_pid(), "kube-apiserver"),
    ];
    let work_dir = env.work_dir().to_owned();
    let started = Instant::now();
    // Nothing of the control plane is looked at after the panic but its pids and path.
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _env = env;
        panic!("a failing test");
    }));
    assert!(panicked.is_err());
    // Unwinding dropped it: the servers are stopped by then, the directory is going.
    for (pid, binary) in pids {
        assert!(!alive(pid, binary), "{binary} ({pid}) survived the drop");
    }
    let took = assert_all_gone(&pids, &work_dir);
    eprintln!(
        "stopped in {:?} ({took:?} for the directory)",
        started.elapsed()
    );
}
