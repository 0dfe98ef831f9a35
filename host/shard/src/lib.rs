//! Sharding plugin deliveries over replicas by key, without a central sharder.
//!
//! Every replica runs the same informers and caches everything; what is divided is delivery.
//! Each replica holds a `coordination.k8s.io/v1` Lease of its own, labelled [`RING_LABEL`],
//! listing in [`PLUGINS_ANNOTATION`] the plugins it serves (name, content hash) and, per
//! plugin, the ring version it has switched to. Every replica observes the ring's Leases
//! ([`Membership`]: alive while observed to change within their duration) and derives from the
//! live ones, per plugin, the same consistent-hash [`Ring`] ([`target`]). A [`PluginShard`]
//! moves one plugin's keys between rings without ever letting two replicas deliver a key at
//! once: it narrows to the new ring before reporting it, and widens only when every live
//! member has reported it.
//!
//! The crate is the protocol's logic alone: no clock but the [`Instant`](std::time::Instant)s
//! it is given, no I/O, no Kubernetes client, so that it can be tested exhaustively; the
//! binary renews the Lease, watches the others and hands assignments to the plugin drivers.
//!
//! ```
//! use kubeplug_shard::{MemberLease, PluginShard, Served, Step, write_plugins, read_plugins};
//! use std::collections::BTreeMap;
//! use std::time::Duration;
//!
//! let lease = |name: &str, ring: Option<String>| MemberLease {
//!     name: name.into(),
//!     holder: Some(name.into()),
//!     duration: Duration::from_secs(15),
//!     renewed: None,
//!     plugins: read_plugins(name, &write_plugins(&BTreeMap::from([(
//!         "audit".to_owned(),
//!         Served { content: "sha256:ab".into(), ring },
//!     )]))),
//! };
//! let mut shard = PluginShard::new("a", "audit");
//! let Step::Narrow { report, .. } = shard.step(&[&lease("a", None), &lease("b", None)]) else {
//!     unreachable!()
//! };
//! shard.reported(report.clone());
//! // b has not switched yet: a waits.
//! let (a, b) = (lease("a", Some(report.to_string())), lease("b", None));
//! assert!(matches!(shard.step(&[&a, &b]), Step::Idle));
//! let b = lease("b", Some(report.to_string()));
//! let Step::Widen { assignment, .. } = shard.step(&[&a, &b]) else { unreachable!() };
//! assert_eq!(assignment.ring().unwrap().members(), ["a", "b"]);
//! ```

mod handover;
mod membership;
mod ring;

pub use handover::{Assignment, MAX_NARROWINGS, PluginShard, Step, target};
pub use membership::{
    MAX_ANNOTATION_BYTES, MAX_PLUGINS, MemberLease, Membership, MembershipError,
    PLUGINS_ANNOTATION, RING_LABEL, Served, read_plugins, write_plugins,
};
pub use ring::{Ring, RingVersion, VIRTUAL_NODES};
