//! Following the manifest files: which file-system events can change what a scan loads, the
//! scans counted by reason (both shared with the binary's plugins directory watcher), and the
//! loop that rescans on events and periodically.
//!
//! A scan reads every manifest, and reading a file makes the kernel report an access to it.
//! A watcher that rescanned on every event would therefore wake itself forever; only events
//! that can change a file's content, presence or readability lead to a scan.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use notify::EventKind;
use notify::event::{AccessKind, AccessMode, MetadataKind, ModifyKind};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::LocalCluster;

/// How often the directory is rescanned even without file-system events, as a safety net for
/// volumes where notifications go missing.
pub(crate) const RESCAN_EVERY: Duration = Duration::from_secs(30);

/// How long to wait after a file-system event for the burst of writes to settle; also how
/// long ago a file must have been written for a scan to take it as whole.
const DEBOUNCE: Duration = Duration::from_millis(150);

/// Whether an event of `kind` can change what a scan of the files would find: a file created,
/// removed, renamed, written (or closed after writing), or its attributes changed (mode,
/// owner, mtime). Reads, opens and closes without writing never can, and kinds the platform
/// does not classify are taken as changes. The host's directory watchers share this rule.
pub fn can_change_files(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        EventKind::Modify(ModifyKind::Metadata(MetadataKind::AccessTime)) => false,
        EventKind::Create(_)
        | EventKind::Remove(_)
        | EventKind::Modify(_)
        | EventKind::Any
        | EventKind::Other => true,
    }
}

/// Why a watched directory was scanned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScanReason {
    /// The first scans: opening the cluster, and the first scan of [`LocalCluster::watch`]
    /// (it catches what changed between the two).
    Start,
    /// A file-system event that can change the files, or an error of the watcher.
    Event,
    /// A file still being written is looked at again once it may have settled; in the
    /// plugins directory also a file whose load failed on something outside it, handed out
    /// again on its back-off.
    Retry,
    /// The periodic rescan, a safety net for volumes that lose events.
    Rescan,
    /// A caller of [`LocalCluster::rescan`] asked.
    Requested,
}

impl ScanReason {
    /// Every reason, in a fixed order.
    pub const ALL: [Self; 5] = [
        Self::Start,
        Self::Event,
        Self::Retry,
        Self::Rescan,
        Self::Requested,
    ];

    /// The reason's name, as a metric label: `start`, `event`, `retry`, `rescan`,
    /// `requested`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Event => "event",
            Self::Retry => "retry",
            Self::Rescan => "rescan",
            Self::Requested => "requested",
        }
    }
}

/// How many scans of one directory ran, by reason. Written only by the scanner that owns it
/// ([`LocalCluster::rescan`] here); read by metrics and tests.
#[derive(Debug, Default)]
pub struct ScanCounts([AtomicU64; ScanReason::ALL.len()]);

impl ScanCounts {
    /// The scans for `reason` so far.
    pub fn get(&self, reason: ScanReason) -> u64 {
        self.0[reason as usize].load(Ordering::Relaxed)
    }

    /// Counts one scan; only the scanner that owns these counts calls it.
    pub fn count(&self, reason: ScanReason) {
        self.0[reason as usize].fetch_add(1, Ordering::Relaxed);
    }
}

/// What the watch loop does next.
enum State {
    /// Scan now, for this reason.
    Scan(ScanReason),
    /// Wait for a file-system event, the periodic rescan at `rescan_at`, or a look at files
    /// still being written at `retry_at`.
    Wait {
        rescan_at: Instant,
        retry_at: Option<Instant>,
    },
}

impl LocalCluster {
    /// Watches the manifests until `cancel` fires: file-system events that can change them
    /// ([`can_change_files`], debounced) and a periodic rescan both lead to
    /// [`rescan`](Self::rescan), and one runs at once to catch changes made since
    /// [`open`](Self::open). The file-system watch is in place when this returns. Errors are
    /// logged.
    pub fn watch(&self, cancel: CancellationToken) -> tokio::task::JoinHandle<()> {
        // Capacity one and `try_send`: an event while a scan is pending adds nothing
        // (coalescing).
        let (tx, mut rx) = mpsc::channel::<()>(1);
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let wake = match event {
                Ok(event) => can_change_files(&event.kind),
                // Events may have been lost: look at the files.
                Err(error) => {
                    debug!(%error, "manifest watcher");
                    true
                }
            };
            if wake {
                let _ = tx.try_send(());
            }
        })
        .and_then(|mut watcher| {
            use notify::Watcher as _;
            for root in self.roots() {
                watcher.watch(root, notify::RecursiveMode::Recursive)?;
            }
            Ok(watcher)
        })
        .inspect_err(|error| {
            warn!(roots = ?self.roots(), %error, "cannot watch the manifests; rescanning every {RESCAN_EVERY:?} only");
        })
        .ok();
        let cluster = self.clone();
        tokio::spawn(async move {
            let _watcher = watcher;
            let mut state = State::Scan(ScanReason::Start);
            loop {
                state = match state {
                    State::Scan(reason) => {
                        let scanning = cluster.clone();
                        let scanned =
                            tokio::task::spawn_blocking(move || scanning.scan(reason, DEBOUNCE));
                        let retry_at = match scanned.await {
                            Ok(report) => {
                                for error in &report.errors {
                                    warn!(%error, "local cluster");
                                }
                                report.recheck_after.map(|wait| Instant::now() + wait)
                            }
                            Err(error) => {
                                warn!(%error, "local cluster rescan panicked");
                                None
                            }
                        };
                        State::Wait {
                            rescan_at: Instant::now() + RESCAN_EVERY,
                            retry_at,
                        }
                    }
                    State::Wait {
                        rescan_at,
                        retry_at,
                    } => tokio::select! {
                        biased;
                        () = cancel.cancelled() => return,
                        Some(()) = rx.recv() => {
                            tokio::select! {
                                biased;
                                () = cancel.cancelled() => return,
                                () = tokio::time::sleep(DEBOUNCE) => {}
                            }
                            // What arrived while debouncing is covered by this scan.
                            let _ = rx.try_recv();
                            State::Scan(ScanReason::Event)
                        }
                        () = tokio::time::sleep_until(retry_at.unwrap_or(rescan_at)), if retry_at.is_some() => {
                            State::Scan(ScanReason::Retry)
                        }
                        () = tokio::time::sleep_until(rescan_at) => State::Scan(ScanReason::Rescan),
                    },
                };
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kubeplug_informer::factory::{InformerKey, SharedInformerFactory, Subscription};
    use kubeplug_informer::informer::HandlerOptions;
    use kubeplug_informer::listener::Notification;
    use kubeplug_informer::reflector::ReflectorConfig;
    use notify::event::{CreateKind, DataChange, RemoveKind, RenameMode};

    use super::*;
    use crate::cluster::tests::{deployments, write};

    /// Waits (real time, bounded) for the next notification and describes it.
    async fn next_change(subscription: &mut Subscription) -> (String, String) {
        let batch = tokio::time::timeout(Duration::from_secs(20), subscription.recv_batch(1))
            .await
            .expect("a change within 20 s")
            .expect("subscribed");
        let kind = match &batch[0] {
            Notification::Add { .. } => "add",
            Notification::Update { .. } => "update",
            Notification::Delete { .. } => "delete",
        };
        (kind.to_owned(), batch[0].key().to_string())
    }

    /// Scans that files, not the clock, caused.
    fn caused_by_files(cluster: &LocalCluster) -> u64 {
        cluster.scan_counts().get(ScanReason::Event)
    }

    #[test]
    fn reads_and_opens_cannot_change_files_and_writes_renames_and_removals_can() {
        let quiet = [
            EventKind::Access(AccessKind::Read),
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            EventKind::Access(AccessKind::Any),
            EventKind::Modify(ModifyKind::Metadata(MetadataKind::AccessTime)),
        ];
        for kind in quiet {
            assert!(!can_change_files(&kind), "{kind:?}");
        }
        let changes = [
            EventKind::Create(CreateKind::File),
            EventKind::Remove(RemoveKind::Folder),
            EventKind::Modify(ModifyKind::Name(RenameMode::Both)),
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Modify(ModifyKind::Metadata(MetadataKind::Permissions)),
            EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any)),
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Other,
            EventKind::Any,
        ];
        for kind in changes {
            assert!(can_change_files(&kind), "{kind:?}");
        }
    }

    /// The regression of the idle host that burnt a core: every scan reads the manifests,
    /// which the kernel reports as accesses; those must not lead to another scan.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_directory_is_scanned_once_at_start_and_then_only_periodically() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "web.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n",
        );
        std::fs::create_dir(dir.path().join("more")).unwrap();
        write(
            &dir.path().join("more"),
            "api.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\n",
        );
        let (cluster, _) = LocalCluster::open(dir.path()).unwrap();
        let cancel = CancellationToken::new();
        let watching = cluster.watch(cancel.clone());
        let started = std::time::Instant::now();
        // Several debounce windows: a self-waking watcher scans a few times a second.
        tokio::time::sleep(DEBOUNCE * 10).await;
        let counts = cluster.scan_counts();
        assert_eq!(
            counts.get(ScanReason::Start),
            2,
            "open and the watch's first"
        );
        assert_eq!(caused_by_files(&cluster), 0, "nothing changed a file");
        let periods = started.elapsed().as_secs_f64() / RESCAN_EVERY.as_secs_f64();
        assert!(counts.get(ScanReason::Rescan) as f64 <= periods.ceil());
        cancel.cancel();
        watching.await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn file_changes_reach_an_informer_as_add_update_delete_in_a_few_scans_each() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "web.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n",
        );
        let (cluster, _) = LocalCluster::open(dir.path()).unwrap();
        let cancel = CancellationToken::new();
        let watching = cluster.watch(cancel.clone());
        let factory =
            SharedInformerFactory::new(Arc::new(cluster.clone()), ReflectorConfig::default());
        let mut deployments = factory
            .subscribe(InformerKey::all(deployments()), HandlerOptions::default())
            .unwrap();
        assert_eq!(
            next_change(&mut deployments).await,
            ("add".into(), "default/web".into())
        );

        // Each step: the change arrives, then the watcher settles (no scan of its own making
        // follows); a write is one burst of events, so one or two scans.
        let mut scans = caused_by_files(&cluster);
        let mut settle_and_count = async || {
            tokio::time::sleep(DEBOUNCE * 4).await;
            let now = caused_by_files(&cluster);
            let step = now - scans;
            scans = now;
            step
        };
        write(
            dir.path(),
            "web.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n",
        );
        assert_eq!(
            next_change(&mut deployments).await,
            ("update".into(), "default/web".into())
        );
        let rewrite = settle_and_count().await;
        assert!((1..=2).contains(&rewrite), "a rewrite took {rewrite} scans");

        write(
            dir.path(),
            "api.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\n",
        );
        assert_eq!(
            next_change(&mut deployments).await,
            ("add".into(), "default/api".into())
        );
        let create = settle_and_count().await;
        assert!((1..=2).contains(&create), "a new file took {create} scans");

        std::fs::remove_file(dir.path().join("web.yaml")).unwrap();
        assert_eq!(
            next_change(&mut deployments).await,
            ("delete".into(), "default/web".into())
        );
        let removal = settle_and_count().await;
        assert!((1..=2).contains(&removal), "a removal took {removal} scans");

        cancel.cancel();
        watching.await.unwrap();
        drop(deployments);
        factory.shutdown().await;
    }
}
