//! Without the `faults` feature (what `--local` builds) nothing is ever pending: every hook
//! the server calls answers "no fault".

use std::time::Duration;

use kubeplug_informer::resource::Resource;
use kubeplug_informer::source::{SourceError, WatchEvent};

use crate::server::Call;

/// Never set: nothing cuts a watch.
#[derive(Debug, Clone, Default)]
pub(crate) struct CutFlag;

impl CutFlag {
    pub(crate) fn is_cut(&self) -> bool {
        false
    }
}

/// No faults, ever.
#[derive(Default)]
pub(crate) struct PendingFaults;

impl PendingFaults {
    pub(crate) fn take_stall(&mut self, _call: Call) -> Option<Duration> {
        None
    }

    pub(crate) fn take_failure(&mut self, _call: Call) -> Result<(), SourceError> {
        Ok(())
    }

    pub(crate) fn take_garbage(&mut self, _resource: &Resource, _rv: u64) -> Vec<WatchEvent> {
        Vec::new()
    }

    pub(crate) fn take_watch_budget(&mut self) -> Option<usize> {
        None
    }
}
