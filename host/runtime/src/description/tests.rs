//! Tests of the description: its checks, their bounds and the fields their refusals name.

use kubeplug_informer::selector::{FieldSelector, LabelSelector};
use kubeplug_policy::names::is_dns_label;

use super::*;

#[test]
fn dns_labels() {
    assert!(is_dns_label("label-audit"));
    assert!(is_dns_label("a1"));
    assert!(!is_dns_label("Label"));
    assert!(!is_dns_label("-a"));
    assert!(!is_dns_label(""));
    assert!(!is_dns_label(&"a".repeat(64)));
}

fn pods() -> Gvk {
    Gvk::new("", "v1", "Pod")
}

fn subscription(resource: Gvk) -> RawSubscription {
    RawSubscription {
        spec: SubscriptionSpec {
            resource,
            namespace: None,
            labels: LabelSelector::everything(),
            fields: FieldSelector::everything(),
            resync_period: None,
            meta_fields: MetaFields::ALL,
            wants_object_json: false,
            wants_old_json: false,
            enqueue: KeyMapping::OwnKey,
            projections: Projections::default(),
        },
        label_selector: None,
        field_selector: None,
    }
}

fn projection(name: &str, path: &str) -> Projection {
    Projection {
        name: name.to_owned(),
        path: FieldPath::parse(path).unwrap(),
    }
}

#[test]
fn projections_keep_their_contract() {
    let with = |projections: Vec<Projection>| {
        let mut r = raw();
        r.subscriptions[0].spec.projections = projections.into();
        r
    };
    let fine = with(vec![
        projection("replicas", "spec.replicas"),
        projection("images_v1.x-y", "spec.containers[*].image"),
    ]);
    let checked = Description::check(fine, &DescriptionBounds::default()).unwrap();
    assert_eq!(checked.subscriptions[0].projections.len(), 2);
    let cases = [
        (
            vec![projection("", "a")],
            "subscriptions[0].projections[0].name: \"\" is not 1 to 63 bytes",
        ),
        (
            vec![projection(&"n".repeat(64), "a")],
            "subscriptions[0].projections[0].name: ",
        ),
        (
            vec![projection("a", "x"), projection("a", "y")],
            "subscriptions[0].projections[1].name: \"a\" is used twice",
        ),
        (
            vec![projection("a", &format!("x.{}", "y".repeat(511)))],
            "subscriptions[0].projections[0].path: 513 bytes; at most 512",
        ),
        (
            (0..=MAX_PROJECTIONS)
                .map(|i| projection(&format!("p{i}"), "a"))
                .collect(),
            "subscriptions[0].projections: 17 entries; at most 16 (max_projections)",
        ),
    ];
    for (projections, expected) in cases {
        let message = refusal(with(projections));
        assert!(message.starts_with(expected), "{message}");
    }
}

fn raw() -> RawDescription {
    RawDescription {
        name: "probe".to_owned(),
        version: "1".to_owned(),
        subscriptions: vec![subscription(pods())],
        delivery: Delivery::Reconcile { workers: 0 },
        indexes: Vec::new(),
        reads: Vec::new(),
        writes: vec![(pods(), vec![WriteVerb::Patch, WriteVerb::Patch])],
    }
}

fn index(name: &str, spec: RawIndexSpec) -> RawIndex {
    RawIndex {
        name: name.to_owned(),
        resource: pods(),
        spec,
    }
}

fn refusal(raw: RawDescription) -> String {
    Description::check(raw, &DescriptionBounds::default())
        .unwrap_err()
        .to_string()
}

#[test]
fn a_valid_description_is_normalised() {
    let mut raw = raw();
    raw.subscriptions[0].spec.namespace = Some(String::new());
    raw.subscriptions[0].label_selector = Some(String::new());
    // Fields beyond the key's two are the server's to accept: one node's Pods.
    raw.subscriptions[0].field_selector = Some(" spec.nodeName = node-1".to_owned());
    let checked = Description::check(raw, &DescriptionBounds::default()).unwrap();
    assert_eq!(
        checked.subscriptions[0].fields.to_string(),
        "spec.nodeName=node-1"
    );
    assert_eq!(checked.delivery, Delivery::Reconcile { workers: 1 });
    assert_eq!(checked.subscriptions[0].namespace, None);
    assert!(checked.subscriptions[0].labels.is_empty());
    assert_eq!(checked.writes[0].1, BTreeSet::from([WriteVerb::Patch]));
}

#[test]
fn lists_past_their_bounds_are_refused_naming_the_field_and_bound() {
    let mut many = raw();
    many.subscriptions = vec![subscription(pods()); MAX_SUBSCRIPTIONS + 1];
    assert_eq!(
        refusal(many),
        format!(
            "subscriptions: {} entries; at most {MAX_SUBSCRIPTIONS} (max_subscriptions)",
            MAX_SUBSCRIPTIONS + 1
        )
    );
    let mut many = raw();
    many.indexes = (0..=MAX_INDEXES)
        .map(|i| index(&format!("i{i}"), RawIndexSpec::OwnerUid))
        .collect();
    assert_eq!(
        refusal(many),
        format!(
            "indexes: {} entries; at most {MAX_INDEXES} (max_indexes)",
            MAX_INDEXES + 1
        )
    );
    let mut many = raw();
    many.reads = vec![Read::metadata(pods()); MAX_RESOURCES + 1];
    assert!(refusal(many).starts_with("reads: 65 entries; at most 64"));
    let mut many = raw();
    many.writes = vec![(pods(), Vec::new()); MAX_RESOURCES + 1];
    assert!(refusal(many).starts_with("writes: 65 entries; at most 64"));
    let mut fits = raw();
    fits.subscriptions = vec![subscription(pods()); MAX_SUBSCRIPTIONS];
    assert!(Description::check(fits, &DescriptionBounds::default()).is_ok());
}

/// Issue 19: `reconcile(4294967295)` asked for four billion workers; the bounds come
/// from the configuration, and a description past them is refused naming the key.
#[test]
fn the_configured_bounds_hold() {
    let mut greedy = raw();
    greedy.delivery = Delivery::Reconcile {
        workers: u32::MAX as usize,
    };
    assert_eq!(
        refusal(greedy),
        "delivery: 4294967295 reconcile workers; at most 16 (max_reconcile_workers)"
    );
    let tight = DescriptionBounds {
        subscriptions: 1,
        projections: 0,
        indexes: 0,
        reconcile_workers: 2,
    };
    let mut two = raw();
    two.subscriptions.push(subscription(pods()));
    let error = Description::check(two, &tight).unwrap_err().to_string();
    assert_eq!(
        error,
        "subscriptions: 2 entries; at most 1 (max_subscriptions)"
    );
    let mut three = raw();
    three.delivery = Delivery::Reconcile { workers: 3 };
    assert!(Description::check(three, &tight).is_err());
}

#[test]
fn a_version_is_short_and_plain() {
    for good in ["0.1.0", "v2", "1.0.0-rc.1+build.5", "2026_12_02"] {
        let mut r = raw();
        r.version = good.to_owned();
        assert!(
            Description::check(r, &DescriptionBounds::default()).is_ok(),
            "{good}"
        );
    }
    for bad in [
        String::new(),
        "a".repeat(MAX_VERSION + 1),
        "1.0\nINFO forged".into(),
        "1 0".into(),
    ] {
        let mut r = raw();
        r.version = bad.clone();
        assert!(refusal(r).starts_with("version: "), "{bad:?}");
    }
    // Quoted, and cut: a long version is not echoed whole.
    let mut r = raw();
    r.version = "é".repeat(MAX_TEXT);
    assert!(refusal(r).len() < 512);
}

#[test]
fn strings_past_the_bound_are_refused_naming_where_they_are() {
    let long = "a".repeat(MAX_TEXT + 1);
    let too_long = |field: &str| format!("{field}: {} bytes; at most {MAX_TEXT}", MAX_TEXT + 1);
    let mut r = raw();
    r.subscriptions.push(subscription(pods()));
    r.subscriptions[1].label_selector = Some(long.clone());
    assert_eq!(refusal(r), too_long("subscriptions[1].label-selector"));
    let mut r = raw();
    r.subscriptions[0].spec.enqueue = KeyMapping::Owner(Gvk::new("apps", "v1", &long));
    assert_eq!(refusal(r), too_long("subscriptions[0].enqueue.owner.kind"));
    let mut r = raw();
    r.reads = vec![
        Read::metadata(pods()),
        Read::metadata(Gvk::new(&long, "v1", "X")),
    ];
    assert_eq!(refusal(r), too_long("reads[1].resource-type.group"));
    let mut r = raw();
    r.indexes = vec![index("by-path", RawIndexSpec::Path(long.clone()))];
    assert_eq!(refusal(r), too_long("indexes[0].spec"));
    let mut r = raw();
    r.writes[0].0.version = long;
    assert_eq!(refusal(r), too_long("writes[0].resource-type.version"));
}

#[test]
fn other_refusals_name_the_field() {
    let mut r = raw();
    r.name = "Not A Label".to_owned();
    assert!(refusal(r).starts_with("name: "));
    let mut r = raw();
    r.subscriptions.clear();
    assert!(refusal(r).starts_with("subscriptions: "));
    let mut r = raw();
    r.subscriptions[0].field_selector = Some("metadata.name".to_owned());
    assert!(refusal(r).starts_with("subscriptions[0].field-selector (v1/Pod): "));
    let mut r = raw();
    r.subscriptions[0].field_selector = Some("spec..nodeName=n1".to_owned());
    assert!(refusal(r).starts_with("subscriptions[0].field-selector (v1/Pod): "));
    let mut r = raw();
    r.indexes = vec![
        index("a", RawIndexSpec::OwnerUid),
        index("a", RawIndexSpec::Label("app".to_owned())),
    ];
    assert!(refusal(r).starts_with("indexes[1]: name \"a\" is used twice"));
    let mut r = raw();
    r.indexes = vec![index("p", RawIndexSpec::Path("spec..x".to_owned()))];
    assert!(refusal(r).starts_with("indexes[0] (\"p\"): path"));
    let mut r = raw();
    r.indexes = vec![RawIndex {
        resource: Gvk::new("", "v1", "Secret"),
        ..index("s", RawIndexSpec::OwnerUid)
    }];
    assert!(refusal(r).starts_with("indexes[0] (\"s\"): on v1/Secret"));
}

/// Issue 19: a type or namespace a plugin describes reaches discovery URLs and request
/// paths; one that is not a valid name fails the load, and the message quotes at most
/// 256 bytes of it.
#[test]
fn types_and_namespaces_that_are_not_names_are_refused() {
    let mut r = raw();
    r.subscriptions[0].spec.resource = Gvk::new("", "v1/namespaces/kube-system/secrets", "Secret");
    let refused = refusal(r);
    assert!(
        refused.starts_with("subscriptions[0].resource-type: version \"v1/namespaces"),
        "{refused}"
    );
    let mut r = raw();
    r.subscriptions[0].spec.namespace = Some("kube system".to_owned());
    assert!(refusal(r).starts_with("subscriptions[0].namespace: namespace \"kube system\""));
    let mut r = raw();
    r.reads = vec![Read::metadata(Gvk::new("evil.example.com/..", "v1", "Pod"))];
    assert!(refusal(r).starts_with("reads[0].resource-type: group "));
    let mut r = raw();
    r.writes[0].0.kind = "Pod/status".to_owned();
    assert!(refusal(r).starts_with("writes[0].resource-type: kind "));
    let mut r = raw();
    r.name = "x".repeat(48 << 20);
    let refused = refusal(r);
    assert!(refused.len() < 512, "{} bytes", refused.len());
    assert!(refused.contains("(50331648 bytes in all)"), "{refused}");
}

/// Issue 41: a type is read through a subscription only when that subscription is the
/// plugin's one of the type and nothing else declares the type; bodies as `body_types`.
#[test]
fn a_type_is_read_through_its_one_subscription_alone() {
    let configmaps = Gvk::new("", "v1", "ConfigMap");
    let description = |subscriptions: Vec<SubscriptionSpec>, reads: Vec<Read>| Description {
        name: "probe".to_owned(),
        version: "1".to_owned(),
        subscriptions,
        delivery: Delivery::Events,
        indexes: Vec::new(),
        reads,
        writes: Vec::new(),
    };
    let pods_sub = subscription(pods()).spec;
    let through = |d: &Description, resource: &Gvk| d.type_read(resource).subscription.cloned();

    let only = description(vec![pods_sub.clone()], Vec::new());
    assert_eq!(through(&only, &pods()), Some(pods_sub.clone()));
    assert!(!only.type_read(&pods()).bodies, "metadata alone");

    let json = SubscriptionSpec {
        wants_object_json: true,
        ..pods_sub.clone()
    };
    assert!(
        description(vec![json], Vec::new())
            .type_read(&pods())
            .bodies
    );

    let twice = description(vec![pods_sub.clone(), pods_sub.clone()], Vec::new());
    assert_eq!(through(&twice, &pods()), None, "two subscriptions of it");

    let read_too = description(vec![pods_sub.clone()], vec![Read::metadata(pods())]);
    assert_eq!(through(&read_too, &pods()), None, "a declared read of it");

    let mut indexed = description(vec![pods_sub.clone()], Vec::new());
    indexed.indexes.push(IndexDecl {
        name: "by-node".to_owned(),
        resource: pods(),
        spec: IndexSource::OwnerUid,
    });
    assert_eq!(through(&indexed, &pods()), None, "an index on it");

    let owned = SubscriptionSpec {
        enqueue: KeyMapping::Owner(pods()),
        ..subscription(configmaps.clone()).spec
    };
    let owner = description(vec![pods_sub, owned], Vec::new());
    assert_eq!(through(&owner, &pods()), None, "an owner its keys map to");
    assert!(through(&owner, &configmaps).is_some());
}
