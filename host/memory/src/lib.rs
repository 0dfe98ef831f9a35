//! An in-memory Kubernetes-like API server: the engine of the embedded local cluster
//! (`kubeplug run --local`), the fake API server and the tests and benchmarks.
//!
//! [`MemoryServer`] holds objects of any number of resources as JSON text, assigns one
//! global, increasing resourceVersion to every write (like etcd's revision), and keeps a
//! bounded history of changes so that watches and continued lists can be served from an older
//! version, and versions older than the history are `410 Gone`. [`MemoryListerWatcher`] is its
//! [`ListerWatcher`](kubeplug_informer::source::ListerWatcher): what the Reflector sees
//! instead of a real API server.
//!
//! With the `faults` feature (on by default; the local cluster turns it off), `Fault`s script
//! the failures a real server and network produce: failed and stalled calls, dropped and cut
//! watches, garbage events, compaction, restarts.
//!
//! Objects are never parsed into a tree: a write walks the top level and `metadata` with the
//! informer's structural scanner, copies the rest as text, and splices in `metadata.uid` and
//! `metadata.resourceVersion`.

#[cfg(feature = "faults")]
mod faults;
#[cfg(not(feature = "faults"))]
#[path = "no_faults.rs"]
mod faults;
mod feed;
pub mod form;
mod incoming;
mod render;
mod selectable;
mod server;
mod state;
pub mod status;
mod timestamp;

#[cfg(feature = "faults")]
pub use faults::{Fault, Garbage};
pub use feed::MemoryListerWatcher;
pub use selectable::{SelectableFields, UnselectableField};
pub use server::{Call, MemoryServer, ServerConfig, Written};
pub use timestamp::creation_timestamp;
