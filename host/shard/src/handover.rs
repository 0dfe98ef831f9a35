//! One plugin's share of the keys on one replica, and how it changes hands.
//!
//! The invariant: **no key is delivered by two replicas at once, and every key's latest state
//! reaches its owner.** ARCHITECTURE.md ("Sharding") writes the protocol out with its failure
//! cases; in short, a replica narrows what it delivers to the new ring before it reports that
//! ring in its Lease, and widens to the new ring's keys only once every live member serving the
//! plugin has reported it.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::membership::MemberLease;
use crate::ring::{Ring, RingVersion};

/// How many rings a replica may narrow to without one handover completing. Past it the
/// replica drops every key of the plugin (always safe) and starts over from the next ring:
/// the rings to intersect stay few, and a member set that never settles costs deliveries,
/// never overlap.
pub const MAX_NARROWINGS: usize = 8;

/// The keys one replica may deliver for one plugin: those it owns in every ring of the list.
/// An empty list owns nothing. Cheap to clone; drivers check it at every notification.
#[derive(Debug, Clone)]
pub struct Assignment {
    member: Arc<str>,
    rings: Vec<Arc<Ring>>,
}

impl Assignment {
    /// The assignment that owns no key.
    pub fn nothing(member: &str) -> Self {
        Self {
            member: member.into(),
            rings: Vec::new(),
        }
    }

    /// Whether this replica may deliver `key`.
    pub fn owns(&self, key: &str) -> bool {
        !self.rings.is_empty()
            && self
                .rings
                .iter()
                .all(|ring| ring.owned_by(key, &self.member))
    }

    /// The ring whose keys this replica delivers once the handover is done; `None` while it
    /// owns nothing.
    pub fn ring(&self) -> Option<&Ring> {
        self.rings.last().map(Arc::as_ref)
    }
}

/// What the replica must do next for one plugin, as [`PluginShard::step`] says.
#[derive(Debug, Clone)]
pub enum Step {
    /// Nothing: the replica delivers what it should, or waits for other members.
    Idle,
    /// Deliver only `assignment`'s keys. Once no call of a key outside it is in flight, write
    /// `report` as the plugin's ring version in this replica's Lease and, when that write
    /// succeeded, call [`PluginShard::reported`]. Never report before the calls ended: the
    /// report is what lets other replicas start the keys this one gave up.
    Narrow {
        /// What to deliver from now on.
        assignment: Assignment,
        /// The ring version to report.
        report: RingVersion,
    },
    /// Every member has switched: deliver `assignment`'s keys, and replay those that
    /// `previous` did not own from the cache (in-initial-list adds, or enqueued).
    Widen {
        /// What to deliver from now on.
        assignment: Assignment,
        /// What was delivered until now.
        previous: Assignment,
    },
}

/// One plugin on one replica: the ring it delivers, the rings it has narrowed to since, and
/// the version its Lease reports.
#[derive(Debug)]
pub struct PluginShard {
    member: Arc<str>,
    plugin: String,
    /// The ring of the last completed handover; `None` before the first.
    steady: Option<Arc<Ring>>,
    /// Rings narrowed to since, oldest first; at most [`MAX_NARROWINGS`].
    narrowed: Vec<Arc<Ring>>,
    /// The version this replica's Lease holds.
    reported: Option<RingVersion>,
}

impl PluginShard {
    /// `plugin` on the replica `member`, delivering nothing yet.
    pub fn new(member: &str, plugin: &str) -> Self {
        Self {
            member: member.into(),
            plugin: plugin.to_owned(),
            steady: None,
            narrowed: Vec::new(),
            reported: None,
        }
    }

    /// What may be delivered now.
    pub fn assignment(&self) -> Assignment {
        match &self.steady {
            None => Assignment::nothing(&self.member),
            Some(steady) => Assignment {
                member: self.member.clone(),
                rings: std::iter::once(steady)
                    .chain(&self.narrowed)
                    .cloned()
                    .collect(),
            },
        }
    }

    /// Whether a handover is in progress: rings narrowed to since the last one completed.
    pub fn handing_over(&self) -> bool {
        !self.narrowed.is_empty()
    }

    /// The next step, from the live member Leases (this replica's own among them once it is
    /// observed).
    pub fn step(&mut self, live: &[&MemberLease]) -> Step {
        let target = target(&self.plugin, live);
        let latest = self.narrowed.last().or(self.steady.as_ref());
        if latest.is_none_or(|ring| ring.version() != target.version()) {
            if self.narrowed.len() == MAX_NARROWINGS {
                self.steady = None;
                self.narrowed.clear();
            }
            self.narrowed.push(Arc::new(target));
            return self.narrow();
        }
        if self.reported.as_ref() != Some(target.version()) {
            return self.narrow();
        }
        if self.narrowed.is_empty() || !self.everyone_reported(target.version(), live) {
            return Step::Idle;
        }
        let previous = self.assignment();
        self.steady = self.narrowed.pop();
        self.narrowed.clear();
        Step::Widen {
            assignment: self.assignment(),
            previous,
        }
    }

    /// The Lease now holds `version`, as [`Step::Narrow`] asked.
    pub fn reported(&mut self, version: RingVersion) {
        self.reported = Some(version);
    }

    /// This replica's own Lease expired (it could not renew in time, or it was frozen): it
    /// delivers nothing from now on and rejoins as a new member. Returns the empty
    /// assignment, to publish at once.
    pub fn drop_all(&mut self) -> Assignment {
        self.steady = None;
        self.narrowed.clear();
        self.reported = None;
        self.assignment()
    }

    fn narrow(&self) -> Step {
        Step::Narrow {
            assignment: self.assignment(),
            report: self
                .narrowed
                .last()
                .expect("narrow follows a push")
                .version()
                .clone(),
        }
    }

    /// Whether every other live member that lists the plugin reports `version`; a live member
    /// whose list cannot be read might be delivering it, and so holds the handover.
    fn everyone_reported(&self, version: &RingVersion, live: &[&MemberLease]) -> bool {
        live.iter()
            .filter(|lease| lease.member() != Some(&*self.member))
            .all(|lease| match &lease.plugins {
                Err(_) => false,
                Ok(plugins) => plugins
                    .get(&self.plugin)
                    .is_none_or(|served| served.ring_version().as_ref() == Some(version)),
            })
    }
}

/// The ring the live members ask for `plugin`: over the members that serve its current
/// content, the content most of them run (the greatest hash on a tie, so every replica picks
/// the same). Members that run another content own none of its keys.
pub fn target(plugin: &str, live: &[&MemberLease]) -> Ring {
    let mut by_content: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for lease in live {
        let (Some(member), Ok(plugins)) = (lease.member(), &lease.plugins) else {
            continue;
        };
        if let Some(served) = plugins.get(plugin) {
            by_content.entry(&served.content).or_default().push(member);
        }
    }
    let current = by_content
        .iter()
        .max_by(|a, b| a.1.len().cmp(&b.1.len()).then(a.0.cmp(b.0)));
    match current {
        Some((content, members)) => Ring::new(content, members.iter().copied()),
        None => Ring::new("", std::iter::empty::<&str>()),
    }
}
