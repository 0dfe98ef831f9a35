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
//!   decoder (on the structural scanner of the `kubeplug-json` crate).
//! - [`reflector`]: ListAndWatch as a state machine.
//! - [`fifo`]: the DeltaFIFO.
//! - [`indexer`]: the cache and its indexes.
//! - [`selected`]: field-path values selected when an object is stored, kept with it.
//! - [`listener`]: one buffer per handler.
//! - [`informer`]: the SharedIndexInformer that wires the above.
//! - [`factory`]: shares informers between handlers.
//! - [`backoff`]: the exponential back-off of the Reflector, also used by the host.
//! - [`selector`]: label and field selectors.
//!
//! This crate knows nothing of WebAssembly: handlers are whatever reads a
//! [`ListenerReceiver`](listener::ListenerReceiver).
//!
//! # Example
//!
//! One informer on the in-memory server of `kubeplug-memory`, one handler, and a clean
//! shutdown; any [`ListerWatcher`](source::ListerWatcher) takes the server's place.
//!
//! ```
//! use std::sync::Arc;
//!
//! use futures::StreamExt;
//! use kubeplug_informer::informer::{HandlerOptions, SharedIndexInformer};
//! use kubeplug_informer::object::ObjectDecoder;
//! use kubeplug_informer::reflector::ReflectorConfig;
//! use kubeplug_informer::resource::Resource;
//! use kubeplug_memory::MemoryServer;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let pods = Resource::new("", "v1", "Pod", "pods", true);
//! let server = MemoryServer::new();
//! server
//!     .create(&pods, r#"{"metadata":{"name":"web","namespace":"shop"}}"#)
//!     .unwrap();
//!
//! let informer = SharedIndexInformer::new(
//!     Arc::new(server.lister_watcher(pods.clone(), None, None, None)),
//!     ObjectDecoder::new(pods),
//!     ReflectorConfig::default(),
//! );
//! let mut handler = informer.add_handler(HandlerOptions::default());
//! informer.start();
//! informer.wait_for_sync().await;
//! assert!(informer.indexer().get("shop/web").is_some());
//!
//! let batch = handler.next().await.expect("the initial list");
//! assert_eq!(batch[0].key().as_str(), "shop/web");
//! // Dropping a batch marks it handled: that is what turns `handler.has_synced()` true.
//! drop(batch);
//! assert!(handler.has_synced());
//!
//! // Shutdown: cancel the Reflector, close the DeltaFIFO and every handler's buffer, and
//! // wait for the informer's tasks. The handler's stream then ends.
//! informer.stop().await;
//! assert!(handler.next().await.is_none());
//! # }
//! ```

pub mod backoff;
pub mod factory;
pub mod fifo;
pub mod indexer;
pub mod informer;
pub mod listener;
pub mod object;
pub mod reflector;
pub mod resource;
pub mod selected;
pub mod selector;
pub mod source;

/// A map keyed by what the API server sends (object keys, index values): foldhash, several
/// times faster than the standard SipHash on short keys (SipHash was 2 % of the pipeline),
/// and seeded at random like it, so that names crafted to collide cannot be precomputed.
pub(crate) type KeyMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// The set of [`KeyMap`].
pub(crate) type KeySet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// The message of a caught panic: its `&str` or `String` payload, else a placeholder.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}
