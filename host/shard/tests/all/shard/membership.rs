//! Liveness by observed change, and the Lease annotation.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kubeplug_shard::{
    MAX_ANNOTATION_BYTES, MemberLease, Membership, MembershipError, Served, read_plugins,
    write_plugins,
};

fn lease(name: &str, renewed: &str) -> MemberLease {
    MemberLease {
        name: format!("ring-{name}"),
        holder: Some(name.to_owned()),
        duration: Duration::from_secs(15),
        renewed: Some(renewed.to_owned()),
        plugins: Ok(BTreeMap::new()),
    }
}

fn names(membership: &Membership, now: Instant) -> Vec<String> {
    membership
        .live(now)
        .iter()
        .map(|lease| lease.member().unwrap().to_owned())
        .collect()
}

#[test]
fn a_lease_lives_while_it_is_seen_to_change_within_its_duration() {
    let start = Instant::now();
    let mut membership = Membership::new();
    membership.observe(lease("a", "t1"), start);
    membership.observe(lease("b", "t1"), start);
    // a renews; b's Lease is read again unchanged, which proves nothing.
    let later = start + Duration::from_secs(10);
    membership.observe(lease("a", "t2"), later);
    membership.observe(lease("b", "t1"), later);
    assert_eq!(
        names(&membership, start + Duration::from_secs(14)),
        ["a", "b"]
    );
    assert_eq!(names(&membership, start + Duration::from_secs(15)), ["a"]);
    assert_eq!(
        membership.next_expiry(start + Duration::from_secs(15)),
        Some(later + Duration::from_secs(15))
    );
    assert!(names(&membership, later + Duration::from_secs(15)).is_empty());
    let stale = |at: Instant| -> Vec<String> {
        membership
            .stale(at, Duration::from_secs(5))
            .iter()
            .map(|lease| lease.name.clone())
            .collect()
    };
    assert_eq!(stale(start + Duration::from_secs(19)), Vec::<String>::new());
    assert_eq!(stale(start + Duration::from_secs(20)), ["ring-b"]);
    assert_eq!(stale(later + Duration::from_secs(20)), ["ring-a", "ring-b"]);
}

#[test]
fn a_released_or_deleted_lease_is_no_member() {
    let now = Instant::now();
    let mut membership = Membership::new();
    membership.observe(lease("a", "t1"), now);
    membership.observe(lease("b", "t1"), now);
    membership.observe(
        MemberLease {
            holder: None,
            ..lease("a", "t2")
        },
        now,
    );
    assert_eq!(names(&membership, now), ["b"]);
    membership.remove("ring-b");
    assert!(names(&membership, now).is_empty());
    assert_eq!(membership.next_expiry(now), None);
}

#[test]
fn the_plugins_annotation_reads_back_and_refuses_what_it_cannot_trust() {
    let plugins = BTreeMap::from([(
        "audit".to_owned(),
        Served {
            content: "sha256:ab".into(),
            ring: Some("0".repeat(32)),
        },
    )]);
    let text = write_plugins(&plugins);
    assert_eq!(read_plugins("ring-a", &text).unwrap(), plugins);
    assert!(plugins["audit"].ring_version().is_some());
    let error = read_plugins("ring-a", "[1, 2]").unwrap_err();
    assert!(
        matches!(error, MembershipError::Malformed { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("ring-a"), "{error}");
    let long = format!(
        "{{\"a\":{{\"content\":\"{}\"}}}}",
        "x".repeat(MAX_ANNOTATION_BYTES)
    );
    assert!(matches!(
        read_plugins("ring-a", &long),
        Err(MembershipError::TooLong { .. })
    ));
    let many: BTreeMap<String, Served> = (0..=kubeplug_shard::MAX_PLUGINS)
        .map(|i| {
            (
                format!("p{i}"),
                Served {
                    content: "c".into(),
                    ring: None,
                },
            )
        })
        .collect();
    assert!(matches!(
        read_plugins("ring-a", &write_plugins(&many)),
        Err(MembershipError::TooManyPlugins { .. })
    ));
    let odd = Served {
        content: "c".into(),
        ring: Some("../../etc".into()),
    };
    assert_eq!(odd.ring_version(), None);
}
