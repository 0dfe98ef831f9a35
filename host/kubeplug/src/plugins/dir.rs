//! The plugins directory as a stream of complete files: which `*.wasm` files appeared,
//! changed content, or went away. The host loads what this module hands it, and nothing
//! else.
//!
//! A file counts as complete once its size, mtime and inode stayed the same for the settle
//! window, or at once when it arrived by rename (the atomic way to publish a file, and what
//! the kubelet does with a ConfigMap volume's `..data` symlink).

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use kubeplug_informer::backoff::Backoff;
use kubeplug_local::{ScanCounts, ScanReason, can_change_files};
use sha2::{Digest as _, Sha256};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// The largest plugin file read: 128 MiB. The largest plugins, Python ones with their
/// interpreter inside, are about 20 MB; a file several times that size is not a plugin, and
/// would be read whole into memory (and compiled) before anything could tell.
const MAX_PLUGIN_FILE_BYTES: u64 = 128 << 20;

/// The first retry of a file whose load failed on something outside it (a type not served
/// yet, a name another file holds); retries then double, with jitter, up to the rescan
/// period.
const FIRST_RETRY: Duration = Duration::from_secs(1);

/// How the directory is watched.
#[derive(Debug, Clone)]
pub(crate) struct DirConfig {
    /// A file written in place is loaded once unchanged for this long.
    pub(crate) settle: Duration,
    /// Rescan this often even without file-system events: notify misses events on some
    /// volumes (NFS, some FUSE mounts).
    pub(crate) rescan_every: Duration,
    /// Larger files are rejected unread; default [`MAX_PLUGIN_FILE_BYTES`].
    pub(crate) max_file_size: u64,
}

impl Default for DirConfig {
    fn default() -> Self {
        Self {
            settle: Duration::from_millis(200),
            rescan_every: Duration::from_secs(10),
            max_file_size: MAX_PLUGIN_FILE_BYTES,
        }
    }
}

/// SHA-256 of a plugin file.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct ContentHash(pub(crate) [u8; 32]);

impl ContentHash {
    pub(crate) fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }
}

impl std::fmt::Display for ContentHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl std::fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sha256:{self}")
    }
}

/// A complete plugin file's content.
#[derive(Debug)]
pub(crate) struct FileContent {
    pub(crate) path: PathBuf,
    pub(crate) bytes: Vec<u8>,
    pub(crate) hash: ContentHash,
}

/// What happened to one plugin file.
#[derive(Debug)]
pub(crate) enum Change {
    /// New, or its content changed: load it.
    Present(FileContent),
    /// It cannot be loaded as it is (a symlink leaving the directory, not a regular file,
    /// too large, unreadable). A version already serving keeps serving.
    Rejected { path: PathBuf, error: String },
    /// It is gone: unload it.
    Removed(PathBuf),
}

/// Why a plugin file cannot be used as it is.
#[derive(Debug, thiserror::Error)]
enum Rejection {
    /// Its own stat failed.
    #[error("cannot stat it")]
    Stat(#[source] std::io::Error),
    /// A symlink whose target is missing or unreachable.
    #[error("it is a symlink that does not resolve")]
    DanglingLink(#[source] std::io::Error),
    /// A symlink leaving the directory.
    #[error(
        "it is a symlink to {}, outside the plugins directory {}; only links that stay inside \
         it (as in a ConfigMap volume) are followed",
        target.display(),
        dir.display()
    )]
    LinkOutside { target: PathBuf, dir: PathBuf },
    /// The stat of its symlink's target failed.
    #[error("cannot stat {}", target.display())]
    TargetStat {
        target: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A directory, device, socket or pipe.
    #[error("it is not a regular file")]
    NotAFile,
    /// Larger than `DirConfig::max_file_size`.
    #[error("it is {len} bytes, more than the {max} allowed for a plugin file")]
    TooLarge { len: u64, max: u64 },
    /// Reading it failed.
    #[error("cannot read it")]
    Unreadable(#[source] std::io::Error),
}

/// What identifies one version of a file on disk without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    len: u64,
    mtime: Option<SystemTime>,
    dev: u64,
    ino: u64,
}

impl Stat {
    fn of(metadata: &std::fs::Metadata) -> Self {
        Self {
            len: metadata.len(),
            mtime: metadata.modified().ok(),
            dev: metadata.dev(),
            ino: metadata.ino(),
        }
    }
}

/// What the scanner knows of one file.
#[derive(Debug, Default)]
struct Tracked {
    /// Its stat at the last scan; `None` while it cannot be used.
    stat: Option<Stat>,
    /// When `stat` was first seen.
    since: Option<Instant>,
    /// It arrived by rename with this stat: complete without waiting.
    renamed: bool,
    /// The stat its content was last read at: unchanged stat, unchanged content.
    read_at: Option<Stat>,
    /// What was last handed out for it, so that unchanged content and repeated rejections
    /// are not handed out again.
    handed_out: Option<Outcome>,
    /// Its load failed on something outside the file: when to hand it out again.
    retry: Option<Retry>,
}

/// The retry schedule of one file's content.
#[derive(Debug)]
struct Retry {
    /// The content whose load failed; other content starts without a schedule.
    hash: ContentHash,
    backoff: Backoff,
    /// When to hand it out again; `None` once handed out, until it fails again.
    at: Option<Instant>,
}

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Content(ContentHash),
    Rejected(String),
}

/// File-system hints gathered between scans; the notify callback is their only writer
/// besides the scan that drains them. Bounded: one entry per path named in events.
#[derive(Debug, Default)]
pub(crate) struct Hints {
    /// Paths that arrived by rename.
    renamed: BTreeSet<PathBuf>,
    /// A hidden entry (the ConfigMap volume's `..data`) was renamed: every file behind it
    /// changed at once and is complete.
    swapped: bool,
}

impl Hints {
    fn record(&mut self, dir: &Path, event: &notify::Event) {
        use notify::EventKind;
        use notify::event::{ModifyKind, RenameMode};
        let renamed_in = matches!(
            event.kind,
            EventKind::Modify(ModifyKind::Name(RenameMode::To | RenameMode::Both))
        );
        if !renamed_in {
            return;
        }
        // With `Both`, the paths are [from, to].
        let Some(to) = event.paths.last() else { return };
        if to.parent() != Some(dir) {
            return;
        }
        if to
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        {
            self.swapped = true;
        } else {
            self.renamed.insert(to.clone());
        }
    }
}

/// The plugins directory's scanner. See the module docs for when a file is complete.
///
/// Contract: each [`scan`](Self::scan) returns a change for every file whose complete
/// content differs from what was last handed out for it (new or changed → `Present`), every
/// file that cannot be used (`Rejected`, once per distinct reason) and every file handed out
/// before that is gone (`Removed`). Hidden files, editor leftovers and names not ending in
/// `.wasm` are ignored.
#[derive(Debug)]
pub(crate) struct PluginDir {
    dir: PathBuf,
    /// `dir` with symlinks resolved: symlinked plugins must resolve inside it.
    canonical: PathBuf,
    config: DirConfig,
    tracked: BTreeMap<PathBuf, Tracked>,
    /// Written only by [`scan`](Self::scan).
    scans: Arc<ScanCounts>,
}

/// One scan's result.
#[derive(Debug)]
pub(crate) struct Scan {
    pub(crate) changes: Vec<Change>,
    /// When a file that is still settling should be looked at again.
    pub(crate) recheck_at: Option<Instant>,
}

/// A plugin file's name, or `None` for names the directory ignores.
fn is_plugin_name(name: &str) -> bool {
    name.ends_with(".wasm")
        && name.len() > ".wasm".len()
        && !name.starts_with('.')
        && !name.starts_with('#')
}

impl PluginDir {
    pub(crate) fn new(dir: &Path, config: DirConfig) -> std::io::Result<Self> {
        let canonical = dir.canonicalize()?;
        Ok(Self {
            dir: dir.to_owned(),
            canonical,
            config,
            tracked: BTreeMap::new(),
            scans: Arc::default(),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.dir
    }

    /// How many scans ran, by reason.
    pub(crate) fn scan_counts(&self) -> Arc<ScanCounts> {
        self.scans.clone()
    }

    /// Schedules the content last handed out for `paths` to be handed out again, though it
    /// did not change: for loads that failed on something outside the file (a type not
    /// served yet, a name another file holds). The first retry comes after [`FIRST_RETRY`],
    /// each further one of the same content after twice as long, with jitter, never later
    /// than the rescan period.
    pub(crate) fn retry(&mut self, paths: &[PathBuf], now: Instant) {
        let longest = self.config.rescan_every.max(FIRST_RETRY);
        for path in paths {
            let Some(tracked) = self.tracked.get_mut(path) else {
                continue;
            };
            let Some(Outcome::Content(hash)) = tracked.handed_out else {
                continue;
            };
            let retry = match &mut tracked.retry {
                Some(retry) if retry.hash == hash => retry,
                other => other.insert(Retry {
                    hash,
                    backoff: Backoff::new(FIRST_RETRY, longest).with_jitter(),
                    at: None,
                }),
            };
            retry.at = Some(now + retry.backoff.next_delay().min(longest));
        }
    }

    /// When the next retry is due, if any is scheduled.
    pub(crate) fn next_retry(&self) -> Option<Instant> {
        self.tracked
            .values()
            .filter_map(|tracked| tracked.retry.as_ref()?.at)
            .min()
    }

    /// [`scan`](Self::scan) on a thread for blocking work: a scan reads and hashes files of
    /// up to 128 MiB, which must not hold an async worker. `None` when the runtime is
    /// shutting down.
    pub(crate) async fn scan_blocking(
        mut self,
        reason: ScanReason,
        hints: Hints,
        now: Instant,
    ) -> Option<(Self, std::io::Result<Scan>)> {
        let scanning = tokio::task::spawn_blocking(move || {
            let scanned = self.scan(reason, hints, now);
            (self, scanned)
        });
        match scanning.await {
            Ok(done) => Some(done),
            Err(error) if error.is_cancelled() => None,
            Err(error) => std::panic::resume_unwind(error.into_panic()),
        }
    }

    /// Looks at every file now, counting the scan under `reason`; `hints` are consumed.
    pub(crate) fn scan(
        &mut self,
        reason: ScanReason,
        hints: Hints,
        now: Instant,
    ) -> std::io::Result<Scan> {
        self.scans.count(reason);
        let mut changes = Vec::new();
        let mut recheck_at: Option<Instant> = None;
        let mut seen = BTreeSet::new();
        let mut names: Vec<PathBuf> = std::fs::read_dir(&self.dir)?
            .filter_map(Result::ok)
            .filter(|entry| is_plugin_name(&entry.file_name().to_string_lossy()))
            .map(|entry| entry.path())
            .collect();
        names.sort();
        for path in names {
            seen.insert(path.clone());
            let stat = match self.resolve(&path) {
                Ok(Some(stat)) => stat,
                // Removed since the listing: the next scan reports it gone.
                Ok(None) => continue,
                Err(error) => {
                    let tracked = self.tracked.entry(path.clone()).or_default();
                    (tracked.stat, tracked.read_at) = (None, None);
                    reject(tracked, &path, &error, &mut changes);
                    continue;
                }
            };
            let renamed = hints.swapped || hints.renamed.contains(&path);
            let tracked = self.tracked.entry(path.clone()).or_default();
            if let Some(retry) = &mut tracked.retry
                && retry.at.is_some_and(|at| at <= now)
            {
                retry.at = None;
                (tracked.read_at, tracked.handed_out) = (None, None);
            }
            if tracked.stat != Some(stat) {
                (tracked.stat, tracked.since, tracked.renamed) = (Some(stat), Some(now), renamed);
            } else {
                tracked.renamed |= renamed;
            }
            if tracked.read_at == Some(stat) {
                continue;
            }
            let settled_at = tracked.since.unwrap_or(now) + self.config.settle;
            // Also complete: not written for the settle window before it was first seen
            // (files present at start, or found by the periodic rescan).
            let written_long_ago = stat
                .mtime
                .and_then(|m| SystemTime::now().duration_since(m).ok())
                .is_some_and(|age| age >= self.config.settle);
            if !tracked.renamed && !written_long_ago && settled_at > now {
                recheck_at = Some(recheck_at.map_or(settled_at, |t| t.min(settled_at)));
                continue;
            }
            match read_stable(&path, stat) {
                Ok(Some(bytes)) => {
                    tracked.read_at = Some(stat);
                    let hash = ContentHash::of(&bytes);
                    if tracked
                        .retry
                        .as_ref()
                        .is_some_and(|retry| retry.hash != hash)
                    {
                        tracked.retry = None;
                    }
                    let outcome = Some(Outcome::Content(hash));
                    if tracked.handed_out != outcome {
                        tracked.handed_out = outcome;
                        changes.push(Change::Present(FileContent { path, bytes, hash }));
                    }
                }
                Ok(None) => {
                    // Changed while being read: look again once it settles.
                    (tracked.since, tracked.renamed) = (Some(now), false);
                    let at = now + self.config.settle;
                    recheck_at = Some(recheck_at.map_or(at, |t| t.min(at)));
                }
                // Removed since the stat: the next scan reports it gone.
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => {
                    reject(tracked, &path, &Rejection::Unreadable(error), &mut changes);
                }
            }
        }
        let gone: Vec<PathBuf> = self
            .tracked
            .keys()
            .filter(|path| !seen.contains(*path))
            .cloned()
            .collect();
        for path in gone {
            if let Some(tracked) = self.tracked.remove(&path)
                && tracked.handed_out.is_some()
            {
                changes.push(Change::Removed(path));
            }
        }
        Ok(Scan {
            changes,
            recheck_at,
        })
    }

    /// The stat of the regular file `path` is or points to, `None` if `path` itself is gone,
    /// or why it cannot be used.
    fn resolve(&self, path: &Path) -> Result<Option<Stat>, Rejection> {
        let link = match std::fs::symlink_metadata(path) {
            Ok(link) => link,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(Rejection::Stat(error)),
        };
        let metadata = if link.file_type().is_symlink() {
            let target = path.canonicalize().map_err(Rejection::DanglingLink)?;
            if !target.starts_with(&self.canonical) {
                return Err(Rejection::LinkOutside {
                    target,
                    dir: self.canonical.clone(),
                });
            }
            std::fs::metadata(&target).map_err(|source| Rejection::TargetStat { target, source })?
        } else {
            link
        };
        if !metadata.file_type().is_file() {
            return Err(Rejection::NotAFile);
        }
        if metadata.len() > self.config.max_file_size {
            return Err(Rejection::TooLarge {
                len: metadata.len(),
                max: self.config.max_file_size,
            });
        }
        Ok(Some(Stat::of(&metadata)))
    }
}

/// Hands out a rejection of `path`, unless the same one was handed out last. As text with
/// its causes: the host reports it as `LoadFailure::Rejected`, whose cause is text, and
/// compares it with the last one handed out.
fn reject(tracked: &mut Tracked, path: &Path, rejection: &Rejection, changes: &mut Vec<Change>) {
    let error = kubeplug_kube::config::error_chain(rejection);
    let outcome = Some(Outcome::Rejected(error.clone()));
    if tracked.handed_out != outcome {
        tracked.handed_out = outcome;
        changes.push(Change::Rejected {
            path: path.to_owned(),
            error,
        });
    }
}

/// Reads `path` if it still has `stat` before and after: `None` when it moved meanwhile.
/// The open file is checked against `stat` before a byte is read, and no more than
/// `stat.len` bytes are read: a file swapped since [`PluginDir::resolve`] for a link to a
/// device or to a larger file is never read past what was checked.
fn read_stable(path: &Path, stat: Stat) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read as _;
    let file = std::fs::File::open(path)?;
    if Stat::of(&file.metadata()?) != stat {
        return Ok(None);
    }
    let mut bytes = Vec::with_capacity(stat.len as usize);
    file.take(stat.len + 1).read_to_end(&mut bytes)?;
    let after = Stat::of(&std::fs::metadata(path)?);
    Ok((after == stat && bytes.len() as u64 == stat.len).then_some(bytes))
}

/// Whether `event` can change what a scan of `dir` hands out, so that it is worth one: a
/// change ([`can_change_files`]) to a visible entry or to `dir` itself, a rename of a hidden
/// one (the `..data` swap of a ConfigMap volume), or an event naming nothing (the kernel's
/// queue overflowed). Scans read the directory and its files; the accesses that causes are
/// never a reason, so a scan cannot wake the next one.
fn wakes_scan(dir: &Path, event: &notify::Event) -> bool {
    use notify::EventKind;
    use notify::event::ModifyKind;
    if !can_change_files(&event.kind) {
        return false;
    }
    let renamed = matches!(event.kind, EventKind::Modify(ModifyKind::Name(_)));
    event.paths.is_empty()
        || event.paths.iter().any(|path| {
            path == dir
                || path
                    .file_name()
                    .is_none_or(|name| renamed || !name.to_string_lossy().starts_with('.'))
        })
}

/// What the watch loop does next.
enum State {
    /// Look at the directory now.
    Scan(ScanReason),
    /// Until a file-system event, or `until` (a settling file's re-check, or the periodic
    /// rescan), which is a scan for `reason`.
    Wait { until: Instant, reason: ScanReason },
}

/// Hands the scanner's changes to `apply` until `cancel` fires. `apply` returns the files
/// whose load is worth trying again unchanged, which are handed out again on their back-off
/// (see [`PluginDir::retry`]). The first scan runs at once; its changes are everything
/// present.
pub(crate) async fn watch<F, Fut>(mut dir: PluginDir, cancel: CancellationToken, mut apply: F)
where
    F: FnMut(Vec<Change>) -> Fut,
    Fut: std::future::Future<Output = Vec<PathBuf>>,
{
    // Hints coalesce in one bounded structure; `wake` holds at most one permit, so a burst of
    // events costs one scan.
    let hints = Arc::new(Mutex::new(Hints::default()));
    let wake = Arc::new(Notify::new());
    let watcher = {
        let (hints, wake, root) = (hints.clone(), wake.clone(), dir.path().to_owned());
        notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let wakes = match event {
                Ok(event) => {
                    hints
                        .lock()
                        .expect("hints lock poisoned")
                        .record(&root, &event);
                    wakes_scan(&root, &event)
                }
                // Events may have been lost: look at the directory.
                Err(error) => {
                    debug!(dir = %root.display(), %error, "plugins directory watcher");
                    true
                }
            };
            if wakes {
                wake.notify_one();
            }
        })
        .and_then(|mut watcher| {
            use notify::Watcher as _;
            watcher.watch(dir.path(), notify::RecursiveMode::NonRecursive)?;
            Ok(watcher)
        })
        .inspect_err(|error| {
            warn!(dir = %dir.path().display(), %error, "cannot watch the plugins directory; rescanning periodically only");
        })
        .ok()
    };
    let _watcher = watcher;

    let mut state = State::Scan(ScanReason::Start);
    loop {
        state = match state {
            State::Scan(reason) => {
                let taken = std::mem::take(&mut *hints.lock().expect("hints lock poisoned"));
                let now = Instant::now();
                let next_rescan = now + dir.config.rescan_every;
                let scanned;
                (dir, scanned) = match dir.scan_blocking(reason, taken, now).await {
                    Some(done) => done,
                    // The runtime is shutting down.
                    None => return,
                };
                let rescan = State::Wait {
                    until: next_rescan,
                    reason: ScanReason::Rescan,
                };
                match scanned {
                    Ok(scan) => {
                        if !scan.changes.is_empty() {
                            let retry = apply(scan.changes).await;
                            dir.retry(&retry, Instant::now());
                        }
                        let recheck = scan.recheck_at.into_iter().chain(dir.next_retry()).min();
                        match recheck {
                            Some(at) if at < next_rescan => State::Wait {
                                until: at,
                                reason: ScanReason::Retry,
                            },
                            _ => rescan,
                        }
                    }
                    Err(error) => {
                        warn!(dir = %dir.path().display(), %error, "cannot list the plugins directory");
                        rescan
                    }
                }
            }
            State::Wait { until, reason } => {
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => return,
                    () = wake.notified() => State::Scan(ScanReason::Event),
                    () = tokio::time::sleep_until(until) => State::Scan(reason),
                }
            }
        };
    }
}

#[cfg(test)]
mod tests;
