//! The properties kubeplug's parsers of outside bytes must hold, one check per fuzz target.
//!
//! Each check takes the raw fuzz input, feeds it to one parser and panics (with a message
//! saying which property broke) if the outcome is wrong: not only a panic in the parser, but a
//! decoded object whose key disagrees with its metadata, a selector whose canonical text means
//! something else, an error that does not name what was wrong, a manifest document that
//! vanished without an error, a configuration or a plugin description accepted against its
//! rules. The cargo-fuzz targets in `fuzz/` call these functions, and this
//! crate's `replay` test runs them over every file of `fuzz/corpus/<target>/` and
//! `fuzz/regressions/<target>/` on the stable toolchain, so CI checks exactly what the fuzzer
//! checks.

mod config;
mod description;
mod host_calls;
mod input;
mod manifest;
mod selectors;
mod wire;

pub use config::config_file;
pub use description::plugin_description;
pub use host_calls::host_calls;
pub use manifest::local_manifest;
pub use selectors::{field_selector, label_selector};
pub use wire::{list_page, object, object_edit, status, watch_stream};

/// A check: panics if the input breaks a property.
pub type Check = fn(&[u8]);

/// Every target: its name (the fuzz target, and the corpus and regressions directory) and
/// its check.
pub const TARGETS: &[(&str, Check)] = &[
    ("watch_stream", watch_stream),
    ("object", object),
    ("object_edit", object_edit),
    ("list_page", list_page),
    ("status", status),
    ("label_selector", label_selector),
    ("field_selector", field_selector),
    ("local_manifest", local_manifest),
    ("config_file", config_file),
    ("plugin_description", plugin_description),
    ("host_calls", host_calls),
];
