//! Tests of the cached object: decoding, what it keeps of the JSON text and its metadata.

use super::*;

fn pods() -> ObjectDecoder {
    ObjectDecoder::new(Resource::new("", "v1", "Pod", "pods", true))
}
fn configmaps() -> ObjectDecoder {
    ObjectDecoder::new(Resource::new("", "v1", "ConfigMap", "configmaps", true))
}

/// Issue 24: what a metadata-only informer is sent, as kube-apiserver v1.32 sends an item
/// of a `PartialObjectMetadataList` (managedFields included), becomes a ConfigMap again.
#[test]
fn metadata_only_items_become_the_resource_with_metadata_alone() {
    let decoder = configmaps().metadata_only();
    assert!(decoder.is_metadata_only());
    let partial = r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"c","namespace":"n","uid":"u","resourceVersion":"7","labels":{"a":"b"},"managedFields":[{"manager":"kubectl"}]}}"#;
    let object = decoder.decode(partial.as_bytes()).unwrap();
    let value: serde_json::Value = serde_json::from_str(object.json()).unwrap();
    assert_eq!(
        value,
        serde_json::json!({"metadata": {"name": "c", "namespace": "n", "uid": "u",
            "resourceVersion": "7", "labels": {"a": "b"}},
            "apiVersion": "v1", "kind": "ConfigMap"})
    );
    assert_eq!(
        (object.key().as_str(), object.resource_version()),
        ("n/c", 7)
    );
    // A server that ignores the form sends the whole object: its body is dropped.
    let whole = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c","namespace":"n","resourceVersion":"8"},"data":{"k":"v"}}"#;
    let object = decoder.decode(whole.as_bytes()).unwrap();
    assert!(!object.json().contains(r#""data""#), "{}", object.json());
    assert!(object.json().contains(r#""kind":"ConfigMap""#));
    // Another kind, or a partial object outside metadata mode, is still refused.
    let secret = whole.replace("ConfigMap", "Secret");
    assert!(matches!(
        decoder.decode(secret.as_bytes()),
        Err(DecodeError::WrongKind { .. })
    ));
    assert!(matches!(
        configmaps().decode(partial.as_bytes()),
        Err(DecodeError::WrongKind { .. })
    ));
    // Nor is a partial object of another version.
    let old = partial.replace("meta.k8s.io/v1", "meta.k8s.io/v1beta1");
    assert!(matches!(
        decoder.decode(old.as_bytes()),
        Err(DecodeError::WrongKind { .. })
    ));
}

#[test]
fn list_item_gets_kind_and_loses_managed_fields() {
    let item = br#"{"metadata":{"name":"cm-1","namespace":"wire2","uid":"u1","resourceVersion":"215","labels":{"team":"a","app":"x"},"managedFields":[{"manager":"kubectl"}]},"data":{"k":"v1"}}"#;
    let obj = configmaps().decode(item).unwrap();
    assert_eq!(obj.key().as_str(), "wire2/cm-1");
    assert_eq!(obj.namespace(), Some("wire2"));
    assert_eq!(obj.name(), "cm-1");
    assert_eq!(obj.uid(), Some("u1"));
    assert_eq!(obj.resource_version(), 215);
    assert_eq!(obj.resource_version_text(), "215");
    let mut written = String::from("x1");
    obj.write_resource_version(&mut written);
    assert_eq!(written, "215");
    assert_eq!(obj.label("team"), Some("a"));
    assert_eq!(
        obj.labels().collect::<Vec<_>>(),
        [("app", "x"), ("team", "a")]
    );
    let value: serde_json::Value = serde_json::from_str(obj.json()).unwrap();
    assert_eq!(value["kind"], "ConfigMap");
    assert_eq!(value["apiVersion"], "v1");
    assert_eq!(value["data"]["k"], "v1");
    assert!(value["metadata"].get("managedFields").is_none());
    assert_eq!(value["metadata"]["labels"]["team"], "a");
}

#[test]
fn labels_are_sorted_and_the_last_duplicate_wins() {
    let item = br#"{"metadata":{"name":"a","resourceVersion":"1","labels":{"z":"1","a":"x","m":"","a":"y"}}}"#;
    let obj = configmaps().decode(item).unwrap();
    assert_eq!(
        obj.labels().collect::<Vec<_>>(),
        [("a", "y"), ("m", ""), ("z", "1")]
    );
    assert_eq!(
        (obj.label("a"), obj.label("m"), obj.label("q")),
        (Some("y"), Some(""), None)
    );
    let bare = configmaps()
        .decode(br#"{"metadata":{"name":"b","resourceVersion":"1"}}"#)
        .unwrap();
    assert_eq!((bare.labels().len(), bare.label("a")), (0, None));
}

#[test]
fn owner_references_generation_and_deletion() {
    let item = br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"n","resourceVersion":"7","generation":3,"deletionTimestamp":"2026-01-01T00:00:00Z","ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"r1","controller":true}]}}"#;
    let obj = pods().decode(item).unwrap();
    assert_eq!(obj.generation(), Some(3));
    assert_eq!(obj.deletion_timestamp(), Some("2026-01-01T00:00:00Z"));
    let owner = &obj.owner_references()[0];
    assert_eq!(
        (owner.api_version(), owner.kind(), owner.name(), owner.uid()),
        ("apps/v1", "ReplicaSet", "rs", "r1")
    );
    assert!(owner.controller());
    assert_eq!(obj.json().matches("\"kind\"").count(), 2);
}

#[test]
fn a_malformed_owner_reference_is_named_with_its_field() {
    let owned = |owners: &str| {
        let item = format!(
            r#"{{"metadata":{{"name":"p","namespace":"n","resourceVersion":"7","ownerReferences":{owners}}}}}"#
        );
        pods().decode(item.as_bytes()).unwrap_err()
    };
    let whole = r#""apiVersion":"v1","kind":"Node","name":"a","uid":"u""#;
    assert_eq!(
        owned(&format!(r#"[{{{whole}}},{{{whole},"controller":"yes"}}]"#)),
        DecodeError::BadOwnerReference {
            key: "n/p".into(),
            index: 1,
            field: "controller",
            reason: "is not a boolean"
        }
    );
    let error = owned(r#"[{"apiVersion":"v1","kind":"Node","name":7}]"#);
    assert_eq!(
        error.to_string(),
        "object n/p: metadata.ownerReferences[0].name is not a string"
    );
    let error = owned(r#"[{"apiVersion":"v1","kind":"Node","name":"a"}]"#);
    assert_eq!(
        error.to_string(),
        "object n/p: metadata.ownerReferences[0].uid is missing"
    );
    // A scan error's offset is into the array, in its elements too.
    let error = owned(&format!(r#"[{{{whole}}},  7]"#));
    assert!(
        matches!(&error, DecodeError::BadOwnerReferences { source, .. } if source.at == whole.len() + 6),
        "{error:?}"
    );
}

#[test]
fn bad_input_names_the_problem() {
    let d = pods();
    assert!(matches!(
        d.decode(b"not json"),
        Err(DecodeError::NotJson(_))
    ));
    assert!(matches!(d.decode(b"[1,2]"), Err(DecodeError::NotJson(_))));
    // The SIMD validator checks 64-byte blocks and then the tail: bad bytes in both.
    let prefix = br#"{"metadata":{"name":"a","resourceVersion":"1"},"data":{"k":"caf"#;
    for filler in [0, 10, 100] {
        let mut latin1 = prefix.to_vec();
        latin1.extend(std::iter::repeat_n(b'x', filler));
        latin1.push(0xe9);
        latin1.extend_from_slice(br#""}}"#);
        let at = prefix.len() + filler;
        assert_eq!(
            d.decode(&latin1),
            Err(DecodeError::NotJson(format!(
                "invalid utf-8 sequence of 1 bytes from index {at}"
            ))),
        );
    }
    assert!(matches!(
        d.decode(br#"{"metadata":{"name":"a","resourceVersion":"1"},"spec":[1,2"#),
        Err(DecodeError::NotJson(_))
    ));
    assert_eq!(
        d.decode(br#"{"metadata":{"name":"a","resourceVersion":"1"},"metadata":{}}"#),
        Err(DecodeError::DuplicateMetadata)
    );
    for no_metadata in [
        br#"{"spec":{}}"#.as_slice(),
        br#"{"metadata":null}"#,
        br#"{"metadata":[]}"#,
    ] {
        assert_eq!(d.decode(no_metadata), Err(DecodeError::MissingMetadata));
    }
    assert_eq!(
        d.decode(br#"{"metadata":{"resourceVersion":"1"}}"#),
        Err(DecodeError::MissingName)
    );
    assert_eq!(
        d.decode(br#"{"metadata":{"name":"a","namespace":"n","resourceVersion":""}}"#),
        Err(DecodeError::BadResourceVersion {
            key: "n/a".into(),
            value: String::new()
        })
    );
    assert_eq!(
        d.decode(br#"{"kind":5,"metadata":{"name":"a","resourceVersion":"1"}}"#),
        Err(DecodeError::BadTypeField {
            field: "kind",
            found: "5".into()
        })
    );
    for slashed in [
        br#"{"metadata":{"name":"a/b","resourceVersion":"1"}}"#.as_slice(),
        br#"{"metadata":{"name":"b","namespace":"a/","resourceVersion":"1"}}"#,
    ] {
        let error = d.decode(slashed).unwrap_err();
        assert!(error.to_string().contains("'/'"), "{error}");
    }
    let wrong = d.decode(br#"{"kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"1"}}"#);
    assert!(
        matches!(&wrong, Err(DecodeError::WrongKind { found, .. }) if found == "?/ConfigMap"),
        "{wrong:?}"
    );
    let labels = d.decode(br#"{"metadata":{"name":"a","resourceVersion":"1","labels":{"x":1}}}"#);
    assert!(matches!(
        labels,
        Err(DecodeError::BadField {
            field: "labels",
            ..
        })
    ));
}

#[test]
fn escaped_keys_and_values_survive() {
    let item = br#"{"metadata":{"name":"a","resourceVersion":"1","annotations":{"q\"uote":"v\\n"}},"data":{"k\u00e9":"\u2603"}}"#;
    let obj = configmaps().decode(item).unwrap();
    let value: serde_json::Value = serde_json::from_str(obj.json()).unwrap();
    assert_eq!(value["metadata"]["annotations"]["q\"uote"], "v\\n");
    assert_eq!(value["data"]["ké"], "☃");
}

#[test]
fn keys_join_namespace_and_name_whatever_their_length() {
    for (ns, name) in [
        ("a", "b".to_owned()),
        ("n".repeat(63).as_str(), "x".repeat(253)),
        ("é", "y".repeat(400)),
    ] {
        let key = ObjectKey::new(Some(ns), &name);
        assert_eq!(key.as_str(), format!("{ns}/{name}"));
        assert_eq!((key.namespace(), key.name()), (Some(ns), name.as_str()));
    }
    assert_eq!(ObjectKey::new(Some(""), "c").as_str(), "c");
    assert_eq!(ObjectKey::new(None, "c").namespace(), None);
}

/// Issue 20: a resourceVersion is opaque (aggregated API servers write any text): such
/// objects are cached with their exact text, never skipped. Regression: they were
/// refused as `BadResourceVersion`.
#[test]
fn a_resource_version_that_is_not_a_number_is_kept_as_text() {
    let d = pods();
    let mut written = String::from("a longer text the next version replaces");
    for text in [
        "x1",
        "007",
        "18446744073709551616",
        "2026-12-02T07:40:00Z/3",
    ] {
        let json = format!(r#"{{"metadata":{{"name":"a","resourceVersion":"{text}"}}}}"#);
        let object = d.decode(json.as_bytes()).unwrap();
        assert_eq!(object.resource_version_text(), text);
        object.write_resource_version(&mut written);
        assert_eq!(written, text);
        assert_eq!(object.resource_version(), 0, "{text}");
    }
    let a = d
        .decode(br#"{"metadata":{"name":"a","resourceVersion":"x1"}}"#)
        .unwrap();
    let b = d
        .decode(br#"{"metadata":{"name":"a","resourceVersion":"x2"}}"#)
        .unwrap();
    assert!(a.same_version(&a.clone()) && !a.same_version(&b));
}
