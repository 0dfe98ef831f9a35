//! kubeplug's embedded default cluster: a directory of YAML manifests served as a Kubernetes
//! API through the same [`ListerWatcher`](kubeplug_informer::source::ListerWatcher) contract as
//! a real API server, so everything above it behaves the same.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use kubeplug_local::LocalCluster;
//!
//! let (cluster, report) = LocalCluster::open("examples/cluster")?;
//! for error in &report.errors {
//!     eprintln!("{error}");
//! }
//! let watching = cluster.watch(tokio_util::sync::CancellationToken::new());
//! # drop(watching);
//! # Ok(())
//! # }
//! ```

mod cluster;
mod kinds;
mod watch;

pub use cluster::{LocalCluster, LocalError, MAX_MANIFEST_BYTES, ScanReport, scope_namespace};
pub use kinds::{Aliases, KindRegistry};
pub use watch::{ScanCounts, ScanReason, can_change_files};
