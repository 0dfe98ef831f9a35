//! One module per WIT interface the host provides.

mod cache;
mod cluster;
mod log;
mod metrics;

use crate::bindings::wit;
use crate::state::StoreState;

/// Longest string argument a host function accepts (keys, names, selectors).
const MAX_ARG: usize = 4096;

impl wit::Host for StoreState {}

/// `invalid-input` when `value` is longer than [`MAX_ARG`].
fn check_len(what: &str, value: &str) -> Result<(), wit::Error> {
    if value.len() > MAX_ARG {
        return Err(wit::Error::InvalidInput(format!(
            "{what} is {} bytes; at most {MAX_ARG}",
            value.len()
        )));
    }
    Ok(())
}
