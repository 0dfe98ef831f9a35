//! The consistent-hash ring: which member owns a key.

use std::fmt;
use std::sync::Arc;

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed, xxh3_128};

/// How many points each member puts on the ring. With 3 members the largest share of the
/// ring is within 4 % of even for the names the tests use; more points cost only memory
/// (16 bytes each) and one more step of a binary search per doubling.
pub const VIRTUAL_NODES: u32 = 1024;

/// A ring's version: a hash of the plugin content and the sorted member names it was built
/// from, so every replica that sees the same members derives the same version, and no
/// counter has to be agreed on. 32 hexadecimal digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RingVersion(Arc<str>);

impl RingVersion {
    /// The version as written in a member's Lease.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A version read from a Lease, checked to be one this crate could have written.
    pub fn parse(text: &str) -> Option<Self> {
        (text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| Self(text.to_ascii_lowercase().into()))
    }
}

impl fmt::Display for RingVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A consistent-hash ring with [`VIRTUAL_NODES`] points per member. A key belongs to the
/// member of the first point at or after the key's hash, wrapping round. Adding or removing
/// one of N members moves only the keys of the arcs it gains or gives up, about 1/N of them.
///
/// The hashes are xxh3 (a frozen algorithm), so replicas of different builds agree.
#[derive(Clone, PartialEq, Eq)]
pub struct Ring {
    version: RingVersion,
    /// Sorted, without duplicates.
    members: Vec<String>,
    /// `(position, index into members)`, sorted by position.
    points: Vec<(u64, u32)>,
}

impl fmt::Debug for Ring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ring")
            .field("version", &self.version.as_str())
            .field("members", &self.members)
            .finish_non_exhaustive()
    }
}

impl Ring {
    /// The ring of `members` (duplicates ignored) for one plugin `content` hash; the content
    /// is part of the version, so two rings over the same replicas but different code never
    /// share one.
    pub fn new<I, S>(content: &str, members: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut members: Vec<String> = members.into_iter().map(Into::into).collect();
        members.sort_unstable();
        members.dedup();
        let mut points = Vec::with_capacity(members.len() * VIRTUAL_NODES as usize);
        for (index, member) in members.iter().enumerate() {
            let index = u32::try_from(index).expect("fewer than 2^32 members");
            points.extend(
                (0..VIRTUAL_NODES)
                    .map(|point| (xxh3_64_with_seed(member.as_bytes(), point.into()), index)),
            );
        }
        points.sort_unstable();
        let mut named = Vec::with_capacity(
            content.len() + members.iter().map(|m| m.len() + 1).sum::<usize>() + 1,
        );
        // NUL separates the parts: it is in no Kubernetes name and no content hash.
        named.extend_from_slice(content.as_bytes());
        for member in &members {
            named.push(0);
            named.extend_from_slice(member.as_bytes());
        }
        let version = RingVersion(format!("{:032x}", xxh3_128(&named)).into());
        Self {
            version,
            members,
            points,
        }
    }

    /// The ring's version.
    pub fn version(&self) -> &RingVersion {
        &self.version
    }

    /// The members, sorted.
    pub fn members(&self) -> &[String] {
        &self.members
    }

    /// The member that owns `key`; `None` on a ring without members.
    pub fn owner(&self, key: &str) -> Option<&str> {
        let position = xxh3_64(key.as_bytes());
        let at = self.points.partition_point(|&(point, _)| point < position);
        let (_, member) = self.points.get(at).or_else(|| self.points.first())?;
        Some(&self.members[*member as usize])
    }

    /// Whether `member` owns `key`.
    pub fn owned_by(&self, key: &str, member: &str) -> bool {
        self.owner(key) == Some(member)
    }
}
