//! `run --delivery-log FILE`: every delivered call as a JSON line, from the runtime's typed
//! observer, so that deliveries can be audited across replicas without parsing the log
//! (whose plugin lines are rate-limited).

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use kubeplug_runtime::{CallObserver, CallRecord, Observed};
use serde_json::json;

use crate::sharding::LeaseClock;

/// Appends a line per key of every [`CallRecord::Delivered`]; other records are ignored.
pub(crate) struct DeliveryLog {
    replica: String,
    /// A sharded replica's Lease: a call that ends after it lapsed (the replica froze in the
    /// call) is marked `"fenced"`, since its writes were refused from then on.
    lease: Option<LeaseClock>,
    /// Opened for appending: each line is one `write`, so replicas sharing the file do not
    /// interleave inside a line.
    file: Mutex<File>,
}

impl DeliveryLog {
    /// Appends to `path` (created if missing) as `replica`.
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
        Ok(Self {
            replica: replica.to_owned(),
            lease,
            file: Mutex::new(file),
        })
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
        let mut file = self.file.lock().expect("delivery log poisoned by a panic");
        if let Err(error) = file.write_all(lines.as_bytes()) {
            tracing::warn!(%error, "cannot append to the delivery log");
        }
    }
}
