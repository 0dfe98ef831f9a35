//! kubeplug's informer machinery: client-go's `tools/cache`, as async Rust.
//!
//! ```text
//! ListerWatcher ──list/watch──▶ Reflector ──▶ DeltaFifo ──pop──▶ HandleDeltas ─┬─▶ Indexer
//!                                                                             └─▶ Listener × N ─▶ handler
//! ```
//!
//! - [`source`]: the [`ListerWatcher`](source::ListerWatcher) contract; the
//!   `kubeplug-memory` crate is an in-process implementation, with fault injection.
//! - [`object`]: the cached [`Object`](object::Object), JSON text plus parsed metadata, and its
//!   decoder; [`json`] is the structural scanner behind it.
//! - [`reflector`]: ListAndWatch as a state machine.
//! - [`fifo`]: the DeltaFIFO.
//! - [`indexer`]: the cache and its indexes.
//! - [`listener`]: one buffer per handler.
//! - [`informer`]: the SharedIndexInformer that wires the above.
//! - [`factory`]: shares informers between handlers.
//! - [`selector`]: label and field selectors.
//!
//! This crate knows nothing of WebAssembly: handlers are whatever reads a
//! [`ListenerReceiver`](listener::ListenerReceiver).

pub mod factory;
pub mod fifo;
pub mod indexer;
pub mod informer;
pub mod json;
pub mod listener;
pub mod object;
pub mod reflector;
pub mod resource;
pub mod selector;
pub mod source;
