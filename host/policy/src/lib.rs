//! kubeplug's policy vocabulary: what a plugin may touch, as the host's configuration states
//! it. Resource types ([`Gvk`]), kinds of writes ([`WriteVerb`]), one plugin's [`Grants`],
//! and what a plugin may name ([`names`]).
//!
//! The lowest crate that needs them: the configuration file's parser and the Wasm runtime
//! both depend on it, so parsing a configuration compiles neither wasmtime nor kube.
//!
//! ```
//! use kubeplug_policy::{Grants, Gvk, WriteVerb};
//!
//! let deployments = Gvk::parse("apps/v1/Deployment").unwrap();
//! let grants = Grants::default().allow_write(deployments.clone(), WriteVerb::RecordEvent);
//! assert!(grants.may_write(&deployments, WriteVerb::RecordEvent));
//! assert!(!grants.may_write(&deployments, WriteVerb::Delete));
//! ```

mod grants;
mod gvk;
pub mod names;

pub use grants::{Grants, ReadGrant, ReadGrantParseError, WriteVerb};
pub use gvk::{Gvk, GvkParseError};
pub use names::NameError;
