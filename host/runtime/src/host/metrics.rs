//! `kubeplug:plugin/metrics`: plugin-defined counters and gauges.

use crate::bindings::kubeplug::plugin::metrics::Host;
use crate::bindings::wit::{Error, Label};
use crate::state::StoreState;

fn pairs(labels: Vec<Label>) -> Vec<(String, String)> {
    labels.into_iter().map(|l| (l.key, l.value)).collect()
}

impl Host for StoreState {
    fn counter_add(
        &mut self,
        name: String,
        labels: Vec<Label>,
        delta: u64,
    ) -> wasmtime::Result<Result<(), Error>> {
        Ok(self
            .host
            .metrics
            .counter_add(&name, pairs(labels), delta)
            .map_err(|e| Error::InvalidInput(e.to_string())))
    }

    fn gauge_set(
        &mut self,
        name: String,
        labels: Vec<Label>,
        value: f64,
    ) -> wasmtime::Result<Result<(), Error>> {
        Ok(self
            .host
            .metrics
            .gauge_set(&name, pairs(labels), value)
            .map_err(|e| Error::InvalidInput(e.to_string())))
    }
}
