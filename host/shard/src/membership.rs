//! Who is in the ring: the members' Leases, and which of them are alive.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::ring::RingVersion;

/// The Lease annotation that lists what a member serves: a JSON object from plugin name to
/// [`Served`]. The `v1` is the format's version: a release that changes it uses a new key.
pub const PLUGINS_ANNOTATION: &str = "shard.kubeplug.io/v1-plugins";

/// The label every member Lease of one ring carries, with the ring's name as its value.
pub const RING_LABEL: &str = "shard.kubeplug.io/ring";

/// The most plugins one member may list.
pub const MAX_PLUGINS: usize = 1024;

/// The longest annotation read; a longer one is refused unparsed.
pub const MAX_ANNOTATION_BYTES: usize = 128 * 1024;

/// What a member runs of one plugin, as its Lease says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Served {
    /// The content hash of the plugin version it runs.
    pub content: String,
    /// The ring version it has switched to: it delivers no key it does not own in this
    /// ring. `None` until its first switch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring: Option<String>,
}

impl Served {
    /// The ring version, if it is one (anything else counts as none).
    pub fn ring_version(&self) -> Option<RingVersion> {
        self.ring.as_deref().and_then(RingVersion::parse)
    }
}

/// Why a member's Lease could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MembershipError {
    /// The annotation is longer than [`MAX_ANNOTATION_BYTES`].
    #[error(
        "the Lease {lease}'s annotation {PLUGINS_ANNOTATION} is {bytes} bytes, more than {MAX_ANNOTATION_BYTES}"
    )]
    TooLong {
        /// The Lease's name.
        lease: String,
        /// Its length.
        bytes: usize,
    },
    /// The annotation is not the JSON this crate writes.
    #[error(
        "the Lease {lease}'s annotation {PLUGINS_ANNOTATION} is not a map of plugins: {reason}"
    )]
    Malformed {
        /// The Lease's name.
        lease: String,
        /// serde's message, cut.
        reason: String,
    },
    /// The annotation lists more than [`MAX_PLUGINS`] plugins.
    #[error("the Lease {lease} lists {count} plugins, more than {MAX_PLUGINS}")]
    TooManyPlugins {
        /// The Lease's name.
        lease: String,
        /// How many it lists.
        count: usize,
    },
}

/// The plugins a member lists, written as [`PLUGINS_ANNOTATION`]'s value.
pub fn write_plugins(plugins: &BTreeMap<String, Served>) -> String {
    serde_json::to_string(plugins).expect("a map of strings serializes")
}

/// [`PLUGINS_ANNOTATION`]'s value read back. `lease` names the Lease in errors.
pub fn read_plugins(lease: &str, text: &str) -> Result<BTreeMap<String, Served>, MembershipError> {
    if text.len() > MAX_ANNOTATION_BYTES {
        return Err(MembershipError::TooLong {
            lease: lease.to_owned(),
            bytes: text.len(),
        });
    }
    let plugins: BTreeMap<String, Served> =
        serde_json::from_str(text).map_err(|error| MembershipError::Malformed {
            lease: lease.to_owned(),
            reason: cut(&error.to_string()),
        })?;
    if plugins.len() > MAX_PLUGINS {
        return Err(MembershipError::TooManyPlugins {
            lease: lease.to_owned(),
            count: plugins.len(),
        });
    }
    Ok(plugins)
}

fn cut(text: &str) -> String {
    const LIMIT: usize = 200;
    match text.char_indices().nth(LIMIT) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// One member Lease as the ring reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberLease {
    /// The Lease's name.
    pub name: String,
    /// `holderIdentity`: the replica. `None` once released.
    pub holder: Option<String>,
    /// `leaseDurationSeconds`.
    pub duration: Duration,
    /// `renewTime` as written. Compared, never read as a time: liveness is judged by when a
    /// change was observed, on the observer's clock.
    pub renewed: Option<String>,
    /// What it serves, or why that could not be read. A live member whose list cannot be
    /// read might deliver any plugin, so it holds every handover until it expires.
    pub plugins: Result<BTreeMap<String, Served>, MembershipError>,
}

impl MemberLease {
    /// The holder, if the Lease is held.
    pub fn member(&self) -> Option<&str> {
        self.holder.as_deref().filter(|holder| !holder.is_empty())
    }
}

/// The member Leases of one ring as this replica has observed them, and since when each has
/// not changed. A Lease is alive while it changed less than its duration ago, on this
/// replica's clock (client-go's rule: clocks of different machines are never compared), and
/// held.
#[derive(Debug, Default)]
pub struct Membership {
    leases: BTreeMap<String, (MemberLease, Instant)>,
}

impl Membership {
    /// An empty view.
    pub fn new() -> Self {
        Self::default()
    }

    /// A Lease as read or watched at `now`: its change time moves only if it differs from the
    /// one observed before.
    pub fn observe(&mut self, lease: MemberLease, now: Instant) {
        match self.leases.get_mut(&lease.name) {
            Some((seen, _)) if *seen == lease => {}
            Some(entry) => *entry = (lease, now),
            None => {
                self.leases.insert(lease.name.clone(), (lease, now));
            }
        }
    }

    /// A Lease that was deleted.
    pub fn remove(&mut self, name: &str) {
        self.leases.remove(name);
    }

    /// The held Leases observed to change less than their duration before `now`.
    pub fn live(&self, now: Instant) -> Vec<&MemberLease> {
        self.leases
            .values()
            .filter(|(lease, changed)| {
                lease.member().is_some() && now.saturating_duration_since(*changed) < lease.duration
            })
            .map(|(lease, _)| lease)
            .collect()
    }

    /// The Leases that have not changed for `grace` past their duration (a released one
    /// counts from when it was released): members long dead, whose Leases may be deleted so
    /// that a replica joining later does not wait a lease duration for them to expire in its
    /// own eyes.
    pub fn stale(&self, now: Instant, grace: Duration) -> Vec<&MemberLease> {
        self.leases
            .values()
            .filter(|(lease, changed)| {
                now.saturating_duration_since(*changed) >= lease.duration + grace
            })
            .map(|(lease, _)| lease)
            .collect()
    }

    /// When the next live Lease expires unless it changes first: the moment to look again.
    pub fn next_expiry(&self, now: Instant) -> Option<Instant> {
        self.leases
            .values()
            .filter(|(lease, _)| lease.member().is_some())
            .map(|(lease, changed)| *changed + lease.duration)
            .filter(|expiry| *expiry > now)
            .min()
    }
}
