//! One module per WIT interface the host provides.

mod cache;
#[cfg(feature = "testing")]
mod calls;
mod cluster;
mod log;
mod metrics;

use crate::bindings::wit;
use crate::gvk::Gvk;
use crate::state::StoreState;

#[cfg(feature = "testing")]
pub use calls::{HostCallError, HostCalls};

/// Longest string argument a host function accepts (keys, names, selectors): 4096 bytes,
/// over ten times the longest valid one (a `namespace/name` key is at most 63 + 1 + 253).
const MAX_ARG: usize = 4096;

/// The largest answer a cache call lowers into a guest: 16 MiB of object JSON, keys or
/// index values. A quarter of the default 64 MiB instance memory, which leaves the guest
/// room to parse what it gets; a larger answer would fail the guest's allocation anyway,
/// after the host had copied all of it. Checked before anything is copied.
const MAX_ANSWER: usize = 16 << 20;

impl wit::Host for StoreState {}

/// `invalid-input` naming `call` and the bound when `sizes` add up to more than
/// [`MAX_ANSWER`].
fn check_answer(call: &str, sizes: impl IntoIterator<Item = usize>) -> Result<(), wit::Error> {
    let total: usize = sizes.into_iter().sum();
    if total > MAX_ANSWER {
        return Err(wit::Error::InvalidInput(format!(
            "{call}: the answer would be {total} bytes, over the {MAX_ANSWER} a cache call may \
             return; narrow it with a namespace, a label selector or an index"
        )));
    }
    Ok(())
}

/// `resource` as a [`Gvk`], or `invalid-input` when a part of it is not a valid name: a
/// type reaches discovery URLs and request paths.
fn checked_gvk(resource: wit::Gvk) -> Result<Gvk, wit::Error> {
    let resource = Gvk::from(resource);
    resource.check().map_err(invalid_name)?;
    Ok(resource)
}

/// `invalid-input` unless `namespace` is a DNS label.
fn check_namespace(namespace: &str) -> Result<(), wit::Error> {
    kubeplug_policy::names::check_namespace(namespace).map_err(invalid_name)
}

/// `invalid-input` unless `name` is a safe path segment.
fn check_name(name: &str) -> Result<(), wit::Error> {
    kubeplug_policy::names::check_name(name).map_err(invalid_name)
}

fn invalid_name(error: kubeplug_policy::NameError) -> wit::Error {
    wit::Error::InvalidInput(error.to_string())
}

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
