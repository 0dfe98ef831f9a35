use super::*;
use crate::object::ObjectKey;
use proptest::prelude::*;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn selects(selector: &str, pairs: &[(&str, &str)]) -> bool {
    LabelSelector::parse(selector)
        .unwrap_or_else(|e| panic!("{e}"))
        .matches(&labels(pairs))
}

#[test]
fn every_operator_matches_as_on_the_server() {
    let web = [("app", "web"), ("tier", "front"), ("replicas", "3")];
    assert!(selects("", &web));
    assert!(selects("app=web", &web));
    assert!(selects("app==web", &web));
    assert!(!selects("app=api", &web));
    assert!(selects("app!=api", &web));
    assert!(selects("missing!=x", &web), "!= matches a missing label");
    assert!(selects("app in (api,web)", &web));
    assert!(!selects("missing in (x)", &web));
    assert!(selects("app notin (api)", &web));
    assert!(
        selects("missing notin (x)", &web),
        "notin matches a missing label"
    );
    assert!(!selects("app notin (web)", &web));
    assert!(selects("app", &web));
    assert!(!selects("missing", &web));
    assert!(selects("!missing", &web));
    assert!(!selects("!app", &web));
    assert!(selects("replicas>2", &web));
    assert!(!selects("replicas>3", &web));
    assert!(selects("replicas<4", &web));
    assert!(
        !selects("app>1", &web),
        "> never matches a non-integer value"
    );
    assert!(!selects("missing<1", &web));
    assert!(selects("app=web,tier=front", &web));
    assert!(!selects("app=web,tier=back", &web));
    assert!(selects("empty=", &[("empty", "")]));
    assert!(!selects("empty=", &[]));
    assert!(selects("empty in ()", &[("empty", "")]));
}

#[test]
fn white_space_and_canonical_text() {
    let cases = [
        ("  ", ""),
        ("a = b", "a=b"),
        ("a == b", "a=b"),
        ("a!=b", "a!=b"),
        ("b, a", "a,b"),
        ("z in ( y , x ), !w", "!w,z in (x,y)"),
        ("a notin (x,)", "a notin (,x)"),
        ("a in ()", "a in ()"),
        ("x.io/a>07", "x.io/a>7"),
        ("a<1", "a<1"),
        ("a=", "a="),
        ("a=b,a=b", "a=b"),
        ("in=notin", "in=notin"),
        ("a in (in,notin)", "a in (in,notin)"),
        ("\ta\n", "a"),
    ];
    for (text, canonical) in cases {
        let selector = LabelSelector::parse(text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(selector.to_string(), canonical, "{text:?}");
        assert_eq!(LabelSelector::parse(canonical).unwrap(), selector);
    }
    assert!(LabelSelector::parse("").unwrap().is_empty());
    assert_eq!(
        "a=b".parse::<LabelSelector>().unwrap(),
        LabelSelector::parse("a==b").unwrap()
    );
}

#[test]
fn syntax_errors_name_the_selector_and_the_token() {
    let err = LabelSelector::parse("team===a").unwrap_err();
    assert_eq!(
        err.to_string(),
        "label selector \"team===a\": at byte 6: found '=', expected a label value"
    );
    for (text, at, found) in [
        ("a=b,", 4, "end of string"),
        (",a", 0, "','"),
        ("a b", 2, "'b'"),
        ("!a=b", 2, "'='"),
        ("a in x", 5, "'x'"),
        ("a in (x", 7, "end of string"),
        ("a in (x y)", 8, "'y'"),
        ("a in (=)", 6, "'='"),
        ("a=b c", 4, "'c'"),
        ("a>", 2, "end of string"),
        ("!", 1, "end of string"),
        ("(a)", 0, "'('"),
        ("a ! = b", 2, "'!'"),
    ] {
        match LabelSelector::parse(text) {
            Err(SelectorError::Syntax {
                selector,
                at: got_at,
                found: got,
                ..
            }) => {
                assert_eq!(selector, text);
                assert_eq!((got_at, got.as_str()), (at, found), "{text:?}");
            }
            other => panic!("{text:?} gave {other:?}"),
        }
    }
}

#[test]
fn keys_and_values_are_validated() {
    for key in [
        "-a",
        "a-",
        "a/b/c",
        "/a",
        "A.io/a",
        "a..b/c",
        "x/",
        "a b",
        "ké",
        &"a".repeat(64),
        &format!("{}/a", "a".repeat(254)),
    ] {
        let text = format!("{key}=x");
        match LabelSelector::parse(&text) {
            Err(SelectorError::InvalidKey { key: got, .. }) => assert_eq!(got, key),
            Err(SelectorError::Syntax { .. }) if key.contains(' ') => {}
            other => panic!("{text:?} gave {other:?}"),
        }
    }
    for key in [
        "a",
        "A_b.c-D9",
        "example.com/a",
        "k8s.io/x",
        &"a".repeat(63),
        &format!("{}/{}", "a".repeat(253), "b".repeat(63)),
    ] {
        LabelSelector::parse(key).unwrap_or_else(|e| panic!("{e}"));
    }
    for value in ["-x", "x-", "a/b", "ä", &"v".repeat(64)] {
        let text = format!("k={value}");
        let err = LabelSelector::parse(&text).unwrap_err();
        let SelectorError::InvalidValue { value: v, key, .. } = &err else {
            panic!("{text:?} gave {err:?}");
        };
        assert_eq!((v.as_str(), key.as_str()), (value, "k"));
    }
    let err = LabelSelector::parse("k>x").unwrap_err();
    assert!(err.to_string().contains("need an integer"), "{err}");
    let err = LabelSelector::parse("k in (a, -b)").unwrap_err();
    assert!(err.to_string().contains("\"-b\""), "{err}");
    assert!(err.to_string().contains("\"k in (a, -b)\""), "{err}");
}

#[test]
fn field_selectors() {
    let prod_web = ObjectKey::new(Some("prod"), "web");
    let node = ObjectKey::new(None, "node-1");
    let sel = |text: &str| FieldSelector::parse(text).unwrap_or_else(|e| panic!("{e}"));
    let on_key = |selector: FieldSelector, key: &ObjectKey| {
        selector.matches(key, |field| panic!("{field} read from a body"))
    };
    assert!(on_key(sel(""), &prod_web));
    assert!(on_key(sel("metadata.name=web"), &prod_web));
    assert!(on_key(sel("metadata.name==web"), &prod_web));
    assert!(!on_key(sel("metadata.name!=web"), &prod_web));
    assert!(on_key(
        sel("metadata.namespace=prod,metadata.name=web"),
        &prod_web
    ));
    assert!(!on_key(
        sel("metadata.namespace=prod,metadata.name=api"),
        &prod_web
    ));
    assert!(on_key(sel("metadata.namespace="), &node));
    assert!(!on_key(sel("metadata.namespace="), &prod_web));
    assert!(on_key(sel(" metadata.name = node-1 "), &node));
    assert_eq!(
        sel("metadata.name=a\\,b").to_string(),
        "metadata.name=a\\,b"
    );
    assert!(on_key(
        sel("metadata.name=a\\=b"),
        &ObjectKey::new(None, "a=b")
    ));

    // Other fields come from the body; an absent one reads as "".
    let pod = |field: &str| match field {
        "spec.nodeName" => Some("n1".to_owned()),
        "status.phase" => Some("Running".to_owned()),
        _ => None,
    };
    let on_node = sel("metadata.name=web,spec.nodeName=n1");
    assert!(!on_node.reads_key_only());
    assert!(sel("metadata.name=web").reads_key_only());
    assert!(on_node.matches(&prod_web, pod));
    assert!(!on_node.matches(&prod_web, |_| None));
    assert!(sel("status.phase!=Pending,spec.schedulerName=").matches(&prod_web, pod));
    assert!(!sel("spec.nodeName!=n1").matches(&prod_web, pod));
    assert_eq!(
        on_node.fields().into_iter().collect::<Vec<_>>(),
        ["metadata.name", "spec.nodeName"]
    );
    assert_eq!(
        sel("zeta=1,alpha.beta=2,metadata.namespace=x").to_string(),
        "metadata.namespace=x,alpha.beta=2,zeta=1"
    );

    for bad in [
        "metadata.name",
        "metadata.name=a=b",
        "metadata.name=a\\x",
        "spec..nodeName=n1",
        ".spec=1",
        "spec.node name=n1",
        "=x",
    ] {
        let err = FieldSelector::parse(bad).unwrap_err();
        assert!(
            matches!(&err, SelectorError::FieldSyntax { selector, .. } if selector == bad),
            "{bad:?} gave {err:?}"
        );
    }
}

/// A requirement as plain data, with its own obviously correct evaluation.
#[derive(Debug, Clone)]
enum Spec {
    Exists(String),
    Absent(String),
    Eq(String, String, bool),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Gt(String, u8),
    Lt(String, u8),
}

impl Spec {
    fn holds(&self, labels: &BTreeMap<String, String>) -> bool {
        let get = |k: &String| labels.get(k).map(String::as_str);
        let int = |k: &String| get(k).and_then(|v| v.parse::<i64>().ok());
        match self {
            Spec::Exists(k) => labels.contains_key(k),
            Spec::Absent(k) => !labels.contains_key(k),
            Spec::Eq(k, v, _) => get(k) == Some(v.as_str()),
            Spec::Ne(k, v) => get(k) != Some(v.as_str()),
            Spec::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Spec::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            Spec::Gt(k, n) => int(k).is_some_and(|x| x > i64::from(*n)),
            Spec::Lt(k, n) => int(k).is_some_and(|x| x < i64::from(*n)),
        }
    }

    /// The requirement as text, with `sp` around the tokens.
    fn text(&self, sp: &str) -> String {
        let list = |vs: &Vec<String>| {
            if vs.is_empty() {
                String::new()
            } else {
                vs.join(&format!("{sp},{sp}"))
            }
        };
        match self {
            Spec::Exists(k) => format!("{sp}{k}{sp}"),
            Spec::Absent(k) => format!("{sp}!{sp}{k}{sp}"),
            Spec::Eq(k, v, double) => {
                let op = if *double { "==" } else { "=" };
                format!("{sp}{k}{sp}{op}{sp}{v}{sp}")
            }
            Spec::Ne(k, v) => format!("{sp}{k}{sp}!={sp}{v}{sp}"),
            Spec::In(k, vs) => format!("{k} in{sp}({sp}{}{sp})", list(vs)),
            Spec::NotIn(k, vs) => format!("{k} notin{sp}({sp}{}{sp})", list(vs)),
            Spec::Gt(k, n) => format!("{k}{sp}>{sp}{n}"),
            Spec::Lt(k, n) => format!("{k}{sp}<{sp}{n}"),
        }
    }
}

const KEYS: [&str; 4] = ["app", "example.com/tier", "n", "in"];
const VALUES: [&str; 5] = ["", "a", "b", "1", "10"];

fn key() -> impl Strategy<Value = String> {
    prop::sample::select(&KEYS[..]).prop_map(str::to_owned)
}
fn value() -> impl Strategy<Value = String> {
    prop::sample::select(&VALUES[..]).prop_map(str::to_owned)
}
fn nonempty_value() -> impl Strategy<Value = String> {
    prop::sample::select(&VALUES[1..]).prop_map(str::to_owned)
}

fn spec() -> impl Strategy<Value = Spec> {
    let set = || prop::collection::vec(nonempty_value(), 1..4);
    prop_oneof![
        key().prop_map(Spec::Exists),
        key().prop_map(Spec::Absent),
        (key(), value(), any::<bool>()).prop_map(|(k, v, d)| Spec::Eq(k, v, d)),
        (key(), value()).prop_map(|(k, v)| Spec::Ne(k, v)),
        (key(), set()).prop_map(|(k, vs)| Spec::In(k, vs)),
        (key(), set()).prop_map(|(k, vs)| Spec::NotIn(k, vs)),
        (key(), 0u8..12).prop_map(|(k, n)| Spec::Gt(k, n)),
        (key(), 0u8..12).prop_map(|(k, n)| Spec::Lt(k, n)),
    ]
}

fn label_map() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(key(), value(), 0..4)
}

fn term() -> impl Strategy<Value = (bool, bool, String)> {
    let value = prop::sample::select(&["", "a", "web-1", "a,b", "x=y", "back\\slash"][..]);
    (any::<bool>(), any::<bool>(), value.prop_map(str::to_owned))
}

/// Checks one case of `label_selectors_agree_with_the_reference`.
fn label_selector_case(
    specs: &[Spec],
    spaced: bool,
    maps: &[BTreeMap<String, String>],
) -> Result<(), TestCaseError> {
    let sp = if spaced { " " } else { "" };
    let text = specs
        .iter()
        .map(|s| s.text(sp))
        .collect::<Vec<_>>()
        .join(",");
    let selector = LabelSelector::parse(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let reparsed = LabelSelector::parse(&selector.to_string())
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&reparsed, &selector);
    prop_assert_eq!(reparsed.to_string(), selector.to_string());
    for labels in maps {
        let expected = specs.iter().all(|s| s.holds(labels));
        prop_assert_eq!(
            selector.matches(labels),
            expected,
            "{} on {:?}",
            text,
            labels
        );
    }
    Ok(())
}

/// Checks one case of `field_selectors_round_trip`.
fn field_selector_case(terms: &[(bool, bool, String)]) -> Result<(), TestCaseError> {
    let text = terms
        .iter()
        .map(|(namespace, negated, value)| {
            let field = if *namespace {
                "metadata.namespace"
            } else {
                "metadata.name"
            };
            let op = if *negated { "!=" } else { "==" };
            let escaped = value
                .replace('\\', "\\\\")
                .replace(',', "\\,")
                .replace('=', "\\=");
            format!("{field}{op}{escaped}")
        })
        .collect::<Vec<_>>()
        .join(",");
    let selector = FieldSelector::parse(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(
        FieldSelector::parse(&selector.to_string()).unwrap(),
        selector.clone()
    );
    let keys = [
        (Some("a"), "web-1"),
        (None, "a,b"),
        (Some("x=y"), "back\\slash"),
    ];
    for (namespace, name) in keys {
        let key = ObjectKey::new(namespace, name);
        let expected = terms.iter().all(|(on_namespace, negated, value)| {
            let actual = if *on_namespace {
                namespace.unwrap_or("")
            } else {
                name
            };
            (actual == value) != *negated
        });
        prop_assert_eq!(
            selector.matches(&key, |_| None),
            expected,
            "{} on {}",
            text,
            key
        );
    }
    Ok(())
}

proptest! {
    #[test]
    fn label_selectors_agree_with_the_reference(
        specs in prop::collection::vec(spec(), 0..5),
        spaced in any::<bool>(),
        maps in prop::collection::vec(label_map(), 1..8),
    ) {
        label_selector_case(&specs, spaced, &maps)?;
    }

    #[test]
    fn field_selectors_round_trip(terms in prop::collection::vec(term(), 0..4)) {
        field_selector_case(&terms)?;
    }
}

/// A plugin chooses its selectors: a refused one of kilobytes is quoted in part, with its
/// length, in the message that refuses it, as is the offending token.
#[test]
fn a_long_refused_selector_is_quoted_in_part() {
    let long = "a".repeat(4000);
    for err in [
        LabelSelector::parse(&format!("app in ({long}")).unwrap_err(),
        LabelSelector::parse(&format!("app={long}")).unwrap_err(),
        LabelSelector::parse(&format!("{long} {long}")).unwrap_err(),
        FieldSelector::parse(&format!("metadata.name={long}\\x")).unwrap_err(),
    ] {
        let message = err.to_string();
        assert!(message.len() < 1200, "{} bytes: {message}", message.len());
        assert!(message.contains("bytes in all)"), "{message}");
    }
}
