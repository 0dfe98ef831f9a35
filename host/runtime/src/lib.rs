//! Runs kubeplug plugins: WebAssembly components behind the `kubeplug:plugin` WIT package
//! (`wit/` at the repository root), fed by informer listeners or a work queue, reading the
//! shared cache through host functions.
//!
//! Entry points: [`Runtime`] (the shared engine), [`Runtime::load`] → [`Plugin`], then
//! [`events::drive_events`] or [`reconcile::drive_reconcile`] to drive it under a
//! [`DriverControl`], which swaps versions (hot reload) and stops it. The cache and the
//! cluster are reached through [`CacheView`] and [`ClusterWriter`], which the binary
//! implements; this crate never imports kube. A [`CallObserver`] set in [`RuntimeConfig`]
//! is told, record by record, what every plugin did.
//!
//! Invariants:
//! - a plugin call never runs on, or blocks, an informer's task: drivers are their own tasks,
//!   and wasm execution yields to the executor at every epoch tick;
//! - a trap, deadline or memory refusal fails only that call; the instance is discarded and a
//!   fresh one made from the plugin's `InstancePre`;
//! - nothing is deserialized from anywhere but the runtime's own artefact cache.

mod bindings;
mod convert;
pub mod description;
pub mod driver;
pub mod engine;
pub mod events;
mod fault;
mod grants;
mod gvk;
mod host;
pub mod index;
pub mod interface;
mod mapped;
pub mod observer;
pub mod plugin;
pub mod reconcile;
mod state;
pub mod status;
pub mod view;

pub use description::{
    Delivery, Description, DescriptionBounds, KeyMapping, MetaFields, SubscriptionSpec,
};
pub use driver::{DriverControl, DriverError, KeyShare};
pub use engine::{Allocator, CompileSource, EngineError, Live, Runtime, RuntimeConfig};
#[cfg(feature = "testing")]
pub use host::{HostCallError, HostCalls};
pub use kubeplug_policy::{Grants, Gvk, ReadGrant, WriteVerb};
pub use observer::{CallObserver, CallRecord, Observed, ReconcileCall};
pub use plugin::{CallError, LoadError, Plugin, PluginInstance, PluginLimits, PluginSpec, Rate};
pub use status::{PluginMetrics, PluginStats, PluginStatus, RunState};
pub use view::{
    CacheView, ClusterWriter, IndexerMap, NoCluster, ObjectRef, TypeRead, Write, WriteError,
};
