//! kubeplug's connection to a real Kubernetes API server, through the `kube` crate.
//!
//! - [`config`]: client configuration in kube's order (kubeconfig, then in-cluster), with
//!   errors that name the file, context and address.
//! - [`lister`]: [`KubeListerWatcher`](lister::KubeListerWatcher), the informer's
//!   `ListerWatcher` for any resource: paginated lists, bookmarked watches, streaming lists,
//!   `Status` errors with `Retry-After`.
//! - [`wire`]: the JSON wire format, decoded without building object trees.
//! - [`discovery`]: kind → plural and scope, cached and refreshed on a miss.
//! - [`provider`]: the informer factory's `SourceProvider`.
//! - [`paths`]: request paths, every segment percent-encoded.
//!
//! Requests are built by hand and sent with `kube::Client::send`: kube's `Api<DynamicObject>`
//! and `watcher` build `serde_json::Value` trees, and its error type drops `Retry-After`.
//!
//! Feature `client` (default) is everything but [`wire`]; without it the crate is the wire
//! decoders alone, for the fuzz build.

#[cfg(feature = "client")]
pub mod config;
#[cfg(feature = "client")]
pub mod discovery;
#[cfg(feature = "client")]
pub mod lister;
#[cfg(feature = "client")]
pub mod paths;
#[cfg(feature = "client")]
pub mod provider;
pub mod wire;
