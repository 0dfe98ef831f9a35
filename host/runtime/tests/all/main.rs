//! Integration tests of the plugin runtime against real guest components, built from
//! `plugins/` by the same code as `cargo xtask build-plugins`, and real informers over the
//! in-memory API server.

mod artifacts;
mod events;
mod examples;
mod fixtures;
mod grants;
mod hostile;
mod limits;
mod observer;
mod polyglot;
mod projections;
mod reconcile;
mod reconcile_hostile;
mod sandbox;
mod settings;
