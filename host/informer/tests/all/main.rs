//! Integration tests of the informer machinery against the in-memory server
//! (`kubeplug-memory`), through the crate's public API only. One binary (`tests/all`).

mod factory;
mod informer;
mod logging;
mod streaming;
