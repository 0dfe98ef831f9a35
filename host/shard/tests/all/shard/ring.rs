//! Rings: agreement, even shares, and few keys moved.

use std::collections::BTreeMap;

use kubeplug_shard::{Ring, RingVersion};
use proptest::prelude::*;

fn keys(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("default/config-{i}")).collect()
}

fn shares(ring: &Ring, keys: &[String]) -> BTreeMap<String, usize> {
    let mut shares = BTreeMap::new();
    for key in keys {
        *shares
            .entry(ring.owner(key).unwrap().to_owned())
            .or_default() += 1;
    }
    shares
}

#[test]
fn every_replica_derives_the_same_version_from_the_same_members() {
    let a = Ring::new("sha256:1", ["b", "a", "c"]);
    let b = Ring::new("sha256:1", ["c", "a", "b", "a"]);
    assert_eq!(a.version(), b.version());
    assert_eq!(a.members(), ["a", "b", "c"]);
    assert_ne!(
        a.version(),
        Ring::new("sha256:2", ["a", "b", "c"]).version()
    );
    assert_ne!(a.version(), Ring::new("sha256:1", ["a", "b"]).version());
    // The separator keeps parts apart: "ab" + "c" is not "a" + "bc".
    assert_ne!(
        Ring::new("", ["ab", "c"]).version(),
        Ring::new("", ["a", "bc"]).version()
    );
    assert_eq!(
        RingVersion::parse(a.version().as_str()).as_ref(),
        Some(a.version())
    );
    assert_eq!(RingVersion::parse("not a version"), None);
}

#[test]
fn a_ring_without_members_owns_nothing() {
    let ring = Ring::new("sha256:1", Vec::<String>::new());
    assert_eq!(ring.owner("default/a"), None);
    assert!(!ring.owned_by("default/a", ""));
}

/// The steady state: three replicas with fixed names share 1,000 keys within ±15 %
/// of even. Checked on every three-member set the tests name replicas with.
#[test]
fn three_fixed_replicas_share_a_thousand_keys_within_fifteen_percent() {
    let keys = keys(1000);
    let sets: Vec<[String; 3]> = (0..20)
        .map(|set| std::array::from_fn(|i| format!("kubeplug-{set}-{i}")))
        .chain([
            ["replica-0", "replica-1", "replica-2"].map(String::from),
            ["kubeplug-0", "kubeplug-1", "kubeplug-2"].map(String::from),
            ["a", "b", "c"].map(String::from),
        ])
        .collect();
    for members in sets {
        let shares = shares(&Ring::new("sha256:1", members.clone()), &keys);
        for member in &members {
            let share = shares.get(member).copied().unwrap_or(0) as f64 / 1000.0;
            assert!(
                (share - 1.0 / 3.0).abs() <= 0.15 / 3.0,
                "{member} owns {share:.3} of the keys of {members:?}"
            );
        }
    }
}

#[test]
fn adding_a_member_moves_about_a_quarter_of_the_keys_to_it_alone() {
    let keys = keys(10_000);
    let three = Ring::new("c", ["r0", "r1", "r2"]);
    let four = Ring::new("c", ["r0", "r1", "r2", "r3"]);
    let moved: Vec<&String> = keys
        .iter()
        .filter(|key| three.owner(key) != four.owner(key))
        .collect();
    assert!(moved.iter().all(|key| four.owner(key) == Some("r3")));
    let fraction = moved.len() as f64 / keys.len() as f64;
    assert!((0.20..=0.30).contains(&fraction), "moved {fraction}");
}

#[test]
fn removing_a_member_moves_only_its_keys() {
    let keys = keys(10_000);
    let three = Ring::new("c", ["r0", "r1", "r2"]);
    let two = Ring::new("c", ["r0", "r2"]);
    for key in &keys {
        if three.owner(key) != Some("r1") {
            assert_eq!(three.owner(key), two.owner(key), "{key}");
        }
    }
}

proptest! {
    #[test]
    fn the_owner_is_a_member_and_does_not_depend_on_order(
        members in prop::collection::btree_set("[a-z0-9-]{1,20}", 1..8),
        key in "[a-z0-9/.-]{0,60}",
    ) {
        let members: Vec<String> = members.into_iter().collect();
        let forward = Ring::new("x", members.clone());
        let backward = Ring::new("x", members.iter().rev().cloned());
        let owner = forward.owner(&key).unwrap();
        prop_assert!(members.iter().any(|m| m == owner));
        prop_assert_eq!(Some(owner), backward.owner(&key));
    }
}
