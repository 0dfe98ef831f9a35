//! The scanner on real directories, and the watcher over it.

use std::os::unix::fs::symlink;

use super::*;

const SETTLE: Duration = Duration::from_millis(100);

fn scanner(dir: &Path) -> PluginDir {
    PluginDir::new(
        dir,
        DirConfig {
            settle: SETTLE,
            rescan_every: Duration::from_secs(60),
            max_file_size: 1024,
        },
    )
    .unwrap()
}

/// Writes `bytes` to `path` and dates it `age` back, as if written then.
fn write_aged(path: &Path, bytes: &[u8], age: Duration) {
    std::fs::write(path, bytes).unwrap();
    let file = std::fs::File::options().write(true).open(path).unwrap();
    file.set_modified(SystemTime::now() - age).unwrap();
}

fn names(changes: &[Change]) -> Vec<String> {
    changes
        .iter()
        .map(|change| {
            let (kind, path) = match change {
                Change::Present(content) => ("present", &content.path),
                Change::Rejected { path, .. } => ("rejected", path),
                Change::Removed(path) => ("removed", path),
            };
            format!("{kind} {}", path.file_name().unwrap().to_string_lossy())
        })
        .collect()
}

fn renamed(path: &Path) -> Hints {
    let mut hints = Hints::default();
    hints.renamed.insert(path.to_owned());
    hints
}

#[test]
fn only_plugin_files_count_and_old_files_are_complete_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let old = Duration::from_secs(5);
    for name in [
        "a.wasm",
        ".hidden.wasm",
        "notes.txt",
        "b.wasm~",
        "#c.wasm#",
        ".wasm",
    ] {
        write_aged(&dir.path().join(name), b"\0asm", old);
    }
    std::fs::create_dir(dir.path().join("d.wasm")).unwrap();
    let mut plugins = scanner(dir.path());
    let scan = plugins
        .scan(ScanReason::Requested, Hints::default(), Instant::now())
        .unwrap();
    assert_eq!(names(&scan.changes), ["present a.wasm", "rejected d.wasm"]);
    let Change::Rejected { error, .. } = &scan.changes[1] else {
        unreachable!()
    };
    assert_eq!(error, "it is not a regular file");
    let again = plugins
        .scan(ScanReason::Requested, Hints::default(), Instant::now())
        .unwrap();
    assert!(
        again.changes.is_empty(),
        "nothing is handed out twice: {:?}",
        names(&again.changes)
    );
}

#[test]
fn a_file_written_in_place_waits_for_the_settle_window() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.wasm");
    let mut plugins = scanner(dir.path());
    let start = Instant::now();
    std::fs::write(&path, b"half").unwrap();
    let scan = plugins
        .scan(ScanReason::Requested, Hints::default(), start)
        .unwrap();
    assert!(scan.changes.is_empty());
    assert_eq!(scan.recheck_at, Some(start + SETTLE));
    // More bytes arrive before the window ends: the window starts again.
    std::fs::write(&path, b"half and the rest").unwrap();
    let later = start + SETTLE / 2;
    assert!(
        plugins
            .scan(ScanReason::Requested, Hints::default(), later)
            .unwrap()
            .changes
            .is_empty()
    );
    let scan = plugins
        .scan(ScanReason::Requested, Hints::default(), later + SETTLE)
        .unwrap();
    match &scan.changes[..] {
        [Change::Present(content)] => assert_eq!(content.bytes, b"half and the rest"),
        other => panic!("expected the complete file, got {:?}", names(other)),
    }
}

#[test]
fn a_renamed_file_is_complete_at_once_and_unchanged_content_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.wasm");
    let mut plugins = scanner(dir.path());
    let tmp = dir.path().join(".p.wasm.tmp");
    std::fs::write(&tmp, b"v1").unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    let scan = plugins
        .scan(ScanReason::Requested, renamed(&path), Instant::now())
        .unwrap();
    assert_eq!(names(&scan.changes), ["present p.wasm"]);
    // The same bytes again (a new inode): read, hashed, not handed out.
    std::fs::write(&tmp, b"v1").unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    assert!(
        plugins
            .scan(ScanReason::Requested, renamed(&path), Instant::now())
            .unwrap()
            .changes
            .is_empty()
    );
    std::fs::remove_file(&path).unwrap();
    let scan = plugins
        .scan(ScanReason::Requested, Hints::default(), Instant::now())
        .unwrap();
    assert_eq!(names(&scan.changes), ["removed p.wasm"]);
}

#[test]
fn symlinks_are_followed_only_inside_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret");
    std::fs::write(&secret, b"not yours").unwrap();
    let old = Duration::from_secs(5);
    write_aged(&dir.path().join("real.bin"), b"\0asm", old);
    symlink("real.bin", dir.path().join("inside.wasm")).unwrap();
    symlink(&secret, dir.path().join("outside.wasm")).unwrap();
    symlink("/dev/null", dir.path().join("device.wasm")).unwrap();
    symlink("missing", dir.path().join("dangling.wasm")).unwrap();
    write_aged(&dir.path().join("huge.wasm"), &[0; 2048], old);
    let scan = scanner(dir.path())
        .scan(ScanReason::Requested, Hints::default(), Instant::now())
        .unwrap();
    let mut found: Vec<(String, String)> = scan
        .changes
        .iter()
        .map(|change| match change {
            Change::Present(content) => (
                content.path.file_name().unwrap().to_string_lossy().into(),
                "present".into(),
            ),
            Change::Rejected { path, error } => (
                path.file_name().unwrap().to_string_lossy().into(),
                error.clone(),
            ),
            Change::Removed(_) => unreachable!(),
        })
        .collect();
    found.sort();
    assert_eq!(found[0].0, "dangling.wasm");
    assert!(found[0].1.contains("does not resolve"), "{}", found[0].1);
    assert_eq!(found[1].0, "device.wasm");
    assert!(
        found[1].1.contains("outside the plugins directory"),
        "{}",
        found[1].1
    );
    assert_eq!(found[2].0, "huge.wasm");
    assert!(
        found[2].1.contains("2048 bytes, more than the 1024"),
        "{}",
        found[2].1
    );
    assert_eq!(found[3], ("inside.wasm".into(), "present".into()));
    assert_eq!(found[4].0, "outside.wasm");
    assert!(found[4].1.contains("symlink to"), "{}", found[4].1);
    assert!(found[4].1.contains("outside the plugins directory"));
}

/// A plugin file replaced by a link leaving the directory (to `/etc/shadow`), by a link
/// to a device, or by a link to a socket inside it is rejected each time, never removed
/// (so the version serving stays) and never read; a regular file again is loaded again.
#[test]
fn a_plugin_swapped_for_a_link_to_a_secret_or_a_device_is_rejected_not_removed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.wasm");
    let old = Duration::from_secs(5);
    write_aged(&path, b"\0asm v1", old);
    let mut plugins = scanner(dir.path());
    let scan = plugins
        .scan(ScanReason::Requested, Hints::default(), Instant::now())
        .unwrap();
    assert_eq!(names(&scan.changes), ["present p.wasm"]);
    let _socket = std::os::unix::net::UnixListener::bind(dir.path().join("sock")).unwrap();
    for (target, expected) in [
        (
            "/etc/shadow",
            "symlink to /etc/shadow, outside the plugins directory",
        ),
        (
            "/dev/zero",
            "symlink to /dev/zero, outside the plugins directory",
        ),
        ("sock", "not a regular file"),
    ] {
        let swap = dir.path().join(".swap");
        symlink(target, &swap).unwrap();
        std::fs::rename(&swap, &path).unwrap();
        let scan = plugins
            .scan(ScanReason::Requested, renamed(&path), Instant::now())
            .unwrap();
        match &scan.changes[..] {
            [
                Change::Rejected {
                    path: rejected,
                    error,
                },
            ] => {
                assert_eq!(rejected, &path);
                assert!(error.contains(expected), "{target}: {error}");
            }
            other => panic!("{target}: expected a rejection, got {:?}", names(other)),
        }
    }
    write_aged(&dir.path().join(".swap"), b"\0asm v1", old);
    std::fs::rename(dir.path().join(".swap"), &path).unwrap();
    let scan = plugins
        .scan(ScanReason::Requested, renamed(&path), Instant::now())
        .unwrap();
    assert_eq!(names(&scan.changes), ["present p.wasm"]);
}

/// The race `resolve` cannot see: the file is swapped for a link to an endless device
/// after it was checked. The read notices before reading anything.
#[test]
fn a_file_swapped_after_its_check_is_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.wasm");
    std::fs::write(&path, b"\0asm v1").unwrap();
    let checked = Stat::of(&std::fs::metadata(&path).unwrap());
    std::fs::remove_file(&path).unwrap();
    symlink("/dev/zero", &path).unwrap();
    assert_eq!(read_stable(&path, checked).unwrap(), None);
}

#[test]
fn a_file_over_the_default_size_cap_is_rejected_unread_naming_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let cap = DirConfig::default().max_file_size;
    // Sparse: over the cap without writing it.
    let huge = std::fs::File::create(dir.path().join("huge.wasm")).unwrap();
    huge.set_len(cap + 1).unwrap();
    huge.set_modified(SystemTime::now() - Duration::from_secs(5))
        .unwrap();
    let mut plugins = PluginDir::new(dir.path(), DirConfig::default()).unwrap();
    let scan = plugins
        .scan(ScanReason::Requested, Hints::default(), Instant::now())
        .unwrap();
    match &scan.changes[..] {
        [Change::Rejected { path, error }] => {
            assert_eq!(path, &dir.path().join("huge.wasm"));
            assert_eq!(
                error,
                &format!(
                    "it is {} bytes, more than the {cap} allowed for a plugin file",
                    cap + 1
                )
            );
        }
        other => panic!("expected a rejection, got {:?}", names(other)),
    }
}

/// Lays `root` out as the kubelet's atomic writer does for a ConfigMap volume: the files in
/// the directory `..v1`, `..data` linking to it, each visible file linking through `..data`.
fn configmap_volume(root: &Path, files: &[(&str, &[u8])]) {
    volume_version(root, "..v1", files);
    symlink("..v1", root.join("..data")).unwrap();
    for (file, _) in files {
        symlink(format!("..data/{file}"), root.join(file)).unwrap();
    }
}

/// The kubelet's update of [`configmap_volume`]: the files in a new directory, a new `..data`
/// link renamed over the old one, the old directory removed.
fn update_configmap_volume(root: &Path, files: &[(&str, &[u8])]) {
    volume_version(root, "..v2", files);
    symlink("..v2", root.join("..data_tmp")).unwrap();
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    std::fs::remove_dir_all(root.join("..v1")).unwrap();
}

fn volume_version(root: &Path, name: &str, files: &[(&str, &[u8])]) {
    std::fs::create_dir(root.join(name)).unwrap();
    for (file, bytes) in files {
        std::fs::write(root.join(name).join(file), bytes).unwrap();
    }
}

/// The kubelet's atomic writer: files live in a timestamped directory, `..data` links to
/// it, and each visible file links through `..data`. An update writes a new directory and
/// renames a new `..data` link over the old one.
#[test]
fn a_configmap_volume_swap_hands_out_exactly_the_changed_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    configmap_volume(root, &[("a.wasm", b"a1"), ("b.wasm", b"b1")]);
    let mut plugins = scanner(root);
    let swapped = || Hints {
        swapped: true,
        ..Hints::default()
    };
    let scan = plugins
        .scan(ScanReason::Requested, swapped(), Instant::now())
        .unwrap();
    assert_eq!(names(&scan.changes), ["present a.wasm", "present b.wasm"]);

    update_configmap_volume(root, &[("a.wasm", b"a1"), ("b.wasm", b"b2")]);
    let scan = plugins
        .scan(ScanReason::Requested, swapped(), Instant::now())
        .unwrap();
    match &scan.changes[..] {
        [Change::Present(content)] => {
            assert_eq!(content.path, root.join("b.wasm"));
            assert_eq!(content.bytes, b"b2");
        }
        other => panic!("expected only b.wasm, got {:?}", names(other)),
    }
}

/// The scan's changes at `now`, by name.
fn scan_at(plugins: &mut PluginDir, now: Instant) -> Vec<String> {
    names(
        &plugins
            .scan(ScanReason::Rescan, Hints::default(), now)
            .unwrap()
            .changes,
    )
}

/// The regression of the retry storm (issue 18): a file whose load fails on something
/// outside it is handed out again after 1 s, then after twice as long each time (with up to
/// as much again of jitter), never later than the rescan period; new content starts over.
#[test]
fn a_file_that_failed_for_an_outside_cause_is_retried_on_a_back_off() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.wasm");
    write_aged(&path, b"\0asm-1", Duration::from_secs(5));
    let mut plugins = PluginDir::new(
        dir.path(),
        DirConfig {
            settle: SETTLE,
            rescan_every: Duration::from_secs(10),
            max_file_size: 1024,
        },
    )
    .unwrap();
    let second = Duration::from_secs(1);
    let mut now = Instant::now();
    assert_eq!(scan_at(&mut plugins, now), ["present a.wasm"]);
    assert_eq!(plugins.next_retry(), None);
    let mut delays = Vec::new();
    for _ in 0..6 {
        plugins.retry(std::slice::from_ref(&path), now);
        let due = plugins.next_retry().expect("a retry is scheduled");
        delays.push(due - now);
        // Not before it is due, however often the directory is scanned.
        assert!(scan_at(&mut plugins, due - Duration::from_millis(1)).is_empty());
        assert_eq!(scan_at(&mut plugins, due), ["present a.wasm"]);
        assert_eq!(plugins.next_retry(), None, "handed out: nothing scheduled");
        now = due;
    }
    let floors = [1, 2, 4, 8, 10, 10].map(|s| s * second);
    for (delay, floor) in delays.iter().zip(floors) {
        assert!(
            (floor..=(floor * 2).min(10 * second)).contains(delay),
            "delays {delays:?}"
        );
    }
    // Loaded at last: nothing more is handed out.
    assert!(scan_at(&mut plugins, now + 60 * second).is_empty());

    // New content starts without a schedule; a failure of it waits the first delay again.
    write_aged(&path, b"\0asm-2", Duration::from_secs(5));
    now += 61 * second;
    assert_eq!(scan_at(&mut plugins, now), ["present a.wasm"]);
    plugins.retry(std::slice::from_ref(&path), now);
    let delay = plugins.next_retry().unwrap() - now;
    assert!((second..=2 * second).contains(&delay), "{delay:?}");
}

/// A running [`watch`] over `dir`: what it hands out, and its scan counts.
struct Watching {
    handed_out: tokio::sync::mpsc::UnboundedReceiver<Vec<String>>,
    scans: Arc<ScanCounts>,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Watching {
    fn start(dir: &Path, rescan_every: Duration) -> Self {
        let plugins = PluginDir::new(
            dir,
            DirConfig {
                settle: SETTLE,
                rescan_every,
                max_file_size: 1024,
            },
        )
        .unwrap();
        let scans = plugins.scan_counts();
        let (sender, handed_out) = tokio::sync::mpsc::unbounded_channel();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(watch(plugins, cancel.clone(), move |changes| {
            let _ = sender.send(names(&changes));
            async { Vec::new() }
        }));
        Self {
            handed_out,
            scans,
            cancel,
            task,
        }
    }

    /// The next changes handed out (bounded wait).
    async fn next(&mut self) -> Vec<String> {
        tokio::time::timeout(Duration::from_secs(20), self.handed_out.recv())
            .await
            .expect("changes within 20 s")
            .expect("the watcher runs")
    }

    /// Scans caused by the file system rather than the clock: events, and re-checks of
    /// files they showed being written.
    fn caused_by_files(&self) -> u64 {
        self.scans.get(ScanReason::Event) + self.scans.get(ScanReason::Retry)
    }

    /// Waits for stray events to arrive, then returns the scans caused by files since
    /// `before`; nothing more may have been handed out.
    async fn settle_since(&mut self, before: u64) -> u64 {
        tokio::time::sleep(SETTLE * 4).await;
        assert!(
            self.handed_out.try_recv().is_err(),
            "nothing more is handed out"
        );
        self.caused_by_files() - before
    }

    async fn stop(self) {
        self.cancel.cancel();
        self.task.await.unwrap();
    }
}

/// The regression of the idle host that burnt a core: a scan lists the directory (and
/// reads new files), which the kernel reports as accesses; those never lead to a scan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_directory_is_scanned_at_start_and_then_only_periodically() {
    let dir = tempfile::tempdir().unwrap();
    write_aged(&dir.path().join("a.wasm"), b"\0asm", Duration::from_secs(5));
    write_aged(
        &dir.path().join("real.bin"),
        b"\0asm",
        Duration::from_secs(5),
    );
    symlink("real.bin", dir.path().join("linked.wasm")).unwrap();
    let rescan_every = SETTLE * 2;
    let started = std::time::Instant::now();
    let mut watching = Watching::start(dir.path(), rescan_every);
    assert_eq!(
        watching.next().await,
        ["present a.wasm", "present linked.wasm"]
    );
    // Many rescan periods: a watcher that wakes itself scans all the time in between.
    tokio::time::sleep(rescan_every * 8).await;
    let periods = started.elapsed().as_secs_f64() / rescan_every.as_secs_f64();
    let scans = &watching.scans;
    assert_eq!(scans.get(ScanReason::Start), 1);
    assert_eq!(watching.caused_by_files(), 0, "no file changed");
    let rescans = scans.get(ScanReason::Rescan);
    assert!(
        (1..=periods.floor() as u64).contains(&rescans),
        "{rescans} rescans in {periods:.1} periods"
    );
    assert!(watching.handed_out.try_recv().is_err(), "nothing changed");
    watching.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_change_to_a_plugin_file_costs_a_few_scans() {
    let dir = tempfile::tempdir().unwrap();
    let mut watching = Watching::start(dir.path(), Duration::from_secs(3600));
    let mut before = watching.caused_by_files();
    // A few scans per change: a burst of events is one or two, a file written in place
    // one more when it has settled.
    let mut check = async |watching: &mut Watching, what: &str| {
        let scans = watching.settle_since(before).await;
        assert!((1..=4).contains(&scans), "{what}: {scans} scans");
        before = watching.caused_by_files();
    };

    std::fs::write(dir.path().join(".p.wasm.tmp"), b"v1").unwrap();
    std::fs::rename(dir.path().join(".p.wasm.tmp"), dir.path().join("p.wasm")).unwrap();
    assert_eq!(watching.next().await, ["present p.wasm"]);
    check(&mut watching, "renamed in").await;

    std::fs::write(dir.path().join("q.wasm"), b"v1").unwrap();
    assert_eq!(watching.next().await, ["present q.wasm"]);
    check(&mut watching, "written in place").await;

    std::fs::write(dir.path().join("q.wasm"), b"v2").unwrap();
    assert_eq!(watching.next().await, ["present q.wasm"]);
    check(&mut watching, "rewritten").await;

    std::fs::remove_file(dir.path().join("p.wasm")).unwrap();
    assert_eq!(watching.next().await, ["removed p.wasm"]);
    check(&mut watching, "removed").await;

    // A hidden file being written is no plugin yet: no scan at all.
    std::fs::write(dir.path().join(".r.wasm.tmp"), b"half").unwrap();
    assert_eq!(watching.settle_since(before).await, 0);
    watching.stop().await;
}

/// The kubelet's `..data` swap through the watcher: exactly the changed plugin is handed
/// out, in a few scans.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_volume_swap_is_seen_by_the_watcher() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    configmap_volume(root, &[("a.wasm", b"a1"), ("b.wasm", b"b1")]);
    let mut watching = Watching::start(root, Duration::from_secs(3600));
    let mut first = watching.next().await;
    // Files written just now settle first; either way both arrive once.
    while first.len() < 2 {
        first.extend(watching.next().await);
    }
    first.sort();
    assert_eq!(first, ["present a.wasm", "present b.wasm"]);
    let before = watching.caused_by_files();

    update_configmap_volume(root, &[("a.wasm", b"a1"), ("b.wasm", b"b2")]);
    assert_eq!(watching.next().await, ["present b.wasm"]);
    let scans = watching.settle_since(before).await;
    assert!((1..=4).contains(&scans), "the swap took {scans} scans");
    watching.stop().await;
}

#[test]
fn only_changes_to_visible_entries_and_renames_of_hidden_ones_wake_a_scan() {
    use notify::EventKind;
    use notify::event::{AccessKind, AccessMode, CreateKind, DataChange, ModifyKind};
    let dir = Path::new("/plugins");
    let event = |kind, paths: &[&str]| {
        let mut event = notify::Event::new(kind);
        event.paths = paths.iter().map(PathBuf::from).collect();
        event
    };
    let data = EventKind::Modify(ModifyKind::Data(DataChange::Any));
    let rename = EventKind::Modify(ModifyKind::Name(notify::event::RenameMode::To));
    let read = EventKind::Access(AccessKind::Close(AccessMode::Read));
    for (kind, paths, wakes) in [
        (data, &["/plugins/a.wasm"][..], true),
        (data, &["/plugins/real.bin"], true),
        (
            EventKind::Create(CreateKind::File),
            &["/plugins/a.wasm"],
            true,
        ),
        (read, &["/plugins/a.wasm"], false),
        (read, &["/plugins"], false),
        (data, &["/plugins/.a.wasm.tmp"], false),
        (rename, &["/plugins/..data"], true),
        (
            EventKind::Remove(notify::event::RemoveKind::Any),
            &["/plugins"],
            true,
        ),
        (EventKind::Other, &[], true),
    ] {
        assert_eq!(
            wakes_scan(dir, &event(kind, paths)),
            wakes,
            "{kind:?} {paths:?}"
        );
    }
}

#[test]
fn rename_events_become_hints() {
    use notify::event::{ModifyKind, RenameMode};
    let dir = Path::new("/plugins");
    let event = |mode, paths: &[&str]| {
        let mut event = notify::Event::new(notify::EventKind::Modify(ModifyKind::Name(mode)));
        event.paths = paths.iter().map(PathBuf::from).collect();
        event
    };
    let mut hints = Hints::default();
    hints.record(dir, &event(RenameMode::To, &["/plugins/a.wasm"]));
    hints.record(dir, &event(RenameMode::From, &["/plugins/gone.wasm"]));
    hints.record(
        dir,
        &event(RenameMode::Both, &["/elsewhere/x", "/plugins/b.wasm"]),
    );
    hints.record(dir, &event(RenameMode::To, &["/plugins/sub/c.wasm"]));
    assert!(!hints.swapped);
    assert_eq!(
        hints.renamed.iter().collect::<Vec<_>>(),
        [Path::new("/plugins/a.wasm"), Path::new("/plugins/b.wasm")]
    );
    hints.record(dir, &event(RenameMode::To, &["/plugins/..data"]));
    assert!(hints.swapped);
}

/// The watcher hands a file whose load keeps failing on an outside cause out again on its
/// back-off, not at every scan (the retry storm of issue 18 handed it out hundreds of times a
/// second), and without waiting for the periodic rescan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watcher_retries_a_failing_file_on_its_back_off() {
    let dir = tempfile::tempdir().unwrap();
    write_aged(&dir.path().join("a.wasm"), b"\0asm", Duration::from_secs(5));
    let plugins = PluginDir::new(
        dir.path(),
        DirConfig {
            settle: SETTLE,
            rescan_every: Duration::from_secs(60),
            max_file_size: 1024,
        },
    )
    .unwrap();
    let (sender, mut handed_out) = tokio::sync::mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(watch(plugins, cancel.clone(), move |changes| {
        let failed: Vec<PathBuf> = changes
            .iter()
            .filter_map(|change| match change {
                Change::Present(content) => Some(content.path.clone()),
                _ => None,
            })
            .collect();
        let _ = sender.send((Instant::now(), names(&changes)));
        async move { failed }
    }));
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(20), handed_out.recv())
            .await
            .expect("handed out within 20 s")
            .expect("the watcher runs")
    };
    let (first, changes) = next().await;
    assert_eq!(changes, ["present a.wasm"]);
    let (second, changes) = next().await;
    assert_eq!(changes, ["present a.wasm"]);
    let (third, _) = next().await;
    assert!(
        second - first >= Duration::from_secs(1),
        "{:?}",
        second - first
    );
    assert!(
        third - second >= Duration::from_secs(2),
        "{:?}",
        third - second
    );
    cancel.cancel();
    task.await.unwrap();
}
