//! `run --delivery-log FILE`: every delivered call as a JSON line, from the runtime's typed
//! observer, so that deliveries can be audited across replicas without parsing the log
//! (whose plugin lines are rate-limited).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use kubeplug_runtime::{CallObserver, CallRecord, Observed};
use serde_json::json;

use crate::sharding::LeaseClock;

/// Calls' lines waiting for the writer. Bounded: past it, a call's lines are dropped,
/// counted, and the writer appends `{"dropped":N}` before its next lines, so a reader knows
/// the log is incomplete; a driver never waits for the disk.
const QUEUED_CALLS: usize = 4096;

/// Appends a line per key of every [`CallRecord::Delivered`]; other records are ignored.
///
/// Drivers only format their lines and hand them over; one thread, the file's only writer,
/// appends each call's lines in one `write`, so replicas sharing the file do not interleave
/// inside a call.
pub(crate) struct DeliveryLog {
    replica: String,
    /// A sharded replica's Lease: a call that ends after it lapsed (the replica froze in the
    /// call) is marked `"fenced"`, since its writes were refused from then on.
    lease: Option<LeaseClock>,
    /// To the writer thread; see [`QUEUED_CALLS`].
    lines: SyncSender<String>,
    /// Calls whose lines were dropped since the writer last said so.
    dropped: Arc<AtomicU64>,
}

impl DeliveryLog {
    /// Appends to `path` (created if missing) as `replica`, from a thread of its own that
    /// ends when the log is dropped.
    pub(crate) fn open(
        path: &Path,
        replica: &str,
        lease: Option<LeaseClock>,
    ) -> anyhow::Result<Self> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot open the delivery log {}", path.display()))?;
        let (lines, queued) = sync_channel(QUEUED_CALLS);
        let dropped = Arc::new(AtomicU64::new(0));
        let counted = dropped.clone();
        std::thread::Builder::new()
            .name("delivery-log".to_owned())
            .spawn(move || write_lines(file, &queued, &counted))
            .context("cannot start the delivery log's writer")?;
        Ok(Self {
            replica: replica.to_owned(),
            lease,
            lines,
            dropped,
        })
    }
}

/// How soon the writer says that calls were dropped when no call's lines follow them.
const DROPPED_AFTER: Duration = Duration::from_secs(1);

/// The writer: each call's lines in one `write`, after a `{"dropped":N}` line when calls
/// were dropped since the last (within [`DROPPED_AFTER`] when none follow). Ends once every
/// sender is gone and the queue is empty.
fn write_lines(mut file: impl Write, queued: &Receiver<String>, dropped: &AtomicU64) {
    loop {
        let (lines, done) = match queued.recv_timeout(DROPPED_AFTER) {
            Ok(lines) => (lines, false),
            Err(RecvTimeoutError::Timeout) => (String::new(), false),
            Err(RecvTimeoutError::Disconnected) => (String::new(), true),
        };
        let lost = dropped.swap(0, Ordering::Relaxed);
        let mut text = match lost {
            0 => String::new(),
            lost => format!("{}\n", json!({ "dropped": lost })),
        };
        text.push_str(&lines);
        if !text.is_empty()
            && let Err(error) = file.write_all(text.as_bytes())
        {
            tracing::warn!(%error, "cannot append to the delivery log");
        }
        if done {
            return;
        }
    }
}

fn micros(time: SystemTime) -> u128 {
    time.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros()
}

impl CallObserver for DeliveryLog {
    fn observe(&self, observed: Observed) {
        let CallRecord::Delivered {
            keys,
            started,
            ended,
            ok,
        } = observed.record
        else {
            return;
        };
        let fenced = self.lease.as_ref().is_some_and(|lease| !lease.valid());
        let mut lines = String::new();
        for (key, resource_version) in keys {
            let line = json!({
                "replica": self.replica,
                "plugin": &*observed.plugin,
                "key": key,
                "rv": resource_version,
                "start": micros(started),
                "end": micros(ended),
                "ok": ok,
                "fenced": fenced,
            });
            lines.push_str(&line.to_string());
            lines.push('\n');
        }
        match self.lines.try_send(lines) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            // The writer is gone only if it panicked; its panic was reported.
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn delivered(key: &str) -> Observed {
        Observed {
            plugin: Arc::from("p"),
            during: None,
            record: CallRecord::Delivered {
                keys: vec![(key.to_owned(), "7".to_owned())],
                started: UNIX_EPOCH,
                ended: UNIX_EPOCH,
                ok: true,
            },
        }
    }

    /// Issue 42: a driver never waits for the disk: past the queue's bound, a call's lines
    /// are dropped and counted, and the writer says so before the next lines.
    #[test]
    fn a_full_queue_drops_calls_and_the_writer_says_how_many() {
        let (lines, queued) = sync_channel(1);
        let log = DeliveryLog {
            replica: "r".to_owned(),
            lease: None,
            lines,
            dropped: Arc::new(AtomicU64::new(0)),
        };
        for key in ["ns/a", "ns/b", "ns/c"] {
            log.observe(delivered(key));
        }
        assert_eq!(log.dropped.load(Ordering::Relaxed), 2);
        let dropped = log.dropped.clone();
        drop(log);
        let mut file = Vec::new();
        write_lines(&mut file, &queued, &dropped);
        let text = String::from_utf8(file).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0], json!({"dropped": 2}));
        assert_eq!(lines[1]["key"], "ns/a");
        assert_eq!(lines[1]["replica"], "r");
    }
}
