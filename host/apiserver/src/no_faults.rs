//! Without the `faults` feature (what `kubeplug run` builds) nothing is ever pending and
//! nothing is logged: every hook the routes call answers "no fault".

use kubeplug_memory::Call;

/// No faults, ever.
#[derive(Debug)]
pub(crate) struct HttpFaults;

impl HttpFaults {
    pub(crate) fn new() -> Self {
        Self
    }

    pub(crate) fn record<B>(&self, _request: &http::Request<B>) {}

    pub(crate) fn take_raw(&self, _call: Call) -> Option<(u16, String)> {
        None
    }

    pub(crate) fn take_cut(&self) -> Option<usize> {
        None
    }
}
