//! How many informers each plugin may start: the factory asks a plugin's [`InformerStarts`]
//! before each informer its versions would start (never for one that runs or lingers), so
//! that a plugin whose every new version asks for other informers (selectors, forms, types)
//! costs the cluster a bounded number of new LISTs and WATCHes, however fast it is swapped.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kubeplug_informer::factory::{InformerKey, StartGate};
use kubeplug_workqueue::TokenBucket;
use tokio::time::Instant;

/// How many informers a plugin may start at once, and how soon it may start one more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StartBudget {
    /// Starts at once.
    pub(crate) burst: u32,
    /// Then one more each this long.
    pub(crate) refill: Duration,
}

impl Default for StartBudget {
    /// 128 at once: more than the largest first load the default bounds allow (32
    /// subscriptions, and a type per read and index). Then one each 3 s: a plugin whose
    /// versions keep their needs starts nothing when swapped; one whose every version asks
    /// for new informers starts at most 20 a minute.
    fn default() -> Self {
        Self {
            burst: 128,
            refill: Duration::from_secs(3),
        }
    }
}

impl fmt::Display for StartBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a plugin may start {} informers at once and one more each {:?}",
            self.burst, self.refill
        )
    }
}

/// One plugin's budget of informer starts, and its counts; kept with its plugin identity
/// across versions.
#[derive(Debug)]
pub(crate) struct InformerStarts {
    bucket: TokenBucket,
    started: AtomicU64,
    refused: AtomicU64,
}

impl InformerStarts {
    pub(crate) fn new(budget: StartBudget) -> Self {
        Self {
            bucket: TokenBucket::new(1.0 / budget.refill.as_secs_f64(), budget.burst),
            started: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Informers started for the plugin.
    pub(crate) fn started(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }

    /// Informer starts refused: its budget was spent.
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

impl StartGate for InformerStarts {
    fn admit(&self, _key: &InformerKey) -> bool {
        let admitted = self.bucket.try_take(Instant::now());
        let count = match admitted {
            true => &self.started,
            false => &self.refused,
        };
        count.fetch_add(1, Ordering::Relaxed);
        admitted
    }
}
