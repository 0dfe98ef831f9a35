//! Checks for what the API server (or a proxy in front of it) sends: watch streams, list pages,
//! `Status` bodies, and the objects inside them.

use bytes::Bytes;
use kubeplug_informer::object::{DecodeError, Object, ObjectDecoder, ObjectKey};
use kubeplug_informer::resource::Resource;
use kubeplug_informer::source::WatchEvent;
use kubeplug_json::ObjectScanner;
use kubeplug_kube::wire::{
    self, INITIAL_EVENTS_END, LineSplitter, ListForm, WireError, decode_list, decode_status,
    decode_watch_line,
};
use serde_json::{Map, Value};

/// The line bound the splitter is checked against: small, so that the fuzzer reaches it.
const SMALL_LINE_LIMIT: usize = 64;

fn configmaps() -> Resource {
    Resource::new("", "v1", "ConfigMap", "configmaps", true)
}

/// A watch body: byte 0 chooses the chunk size the body arrives in, the rest is the body.
///
/// Properties: the lines do not depend on where the chunks end; they are exactly the
/// non-blank newline-terminated segments of the body; no line passes the splitter's bound,
/// and a longer one is an error; every line decodes to an event the reference (serde_json's
/// tree) agrees with (but for the envelope `decode_watch_line` says it misreads), or to an
/// error that quotes the line; every object an event carries passes [`object`].
pub fn watch_stream(data: &[u8]) {
    let Some((&chunk_seed, body)) = data.split_first() else {
        return;
    };
    let body = Bytes::copy_from_slice(body);
    let mut segments: Vec<&[u8]> = body.split(|&b| b == b'\n').collect();
    let unfinished = segments.pop().unwrap_or_default();
    let expected: Vec<&[u8]> = segments
        .into_iter()
        .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
        .collect();

    let mut whole = LineSplitter::default();
    let lines = whole
        .push(body.clone())
        .expect("the fuzz input is under 16 MiB");
    assert_eq!(lines, expected, "lines of the whole body");
    assert_eq!(
        whole.pending(),
        unfinished.len(),
        "bytes after the last newline"
    );

    let chunk = usize::from(chunk_seed % 64) + 1;
    let mut chunked = LineSplitter::default();
    let mut chunked_lines = Vec::new();
    for piece in body.chunks(chunk) {
        chunked_lines.extend(chunked.push(Bytes::copy_from_slice(piece)).unwrap());
    }
    assert_eq!(chunked_lines, lines, "lines in chunks of {chunk} bytes");

    check_line_bound(&body, chunk);

    for line in &lines {
        check_watch_line(line);
    }
}

/// A splitter bounded at [`SMALL_LINE_LIMIT`] returns no longer line, and fails exactly when
/// a line (or the unfinished tail) is longer, however the body is chunked.
fn check_line_bound(body: &Bytes, chunk: usize) {
    let too_long = body
        .split(|&b| b == b'\n')
        .any(|segment| segment.len() > SMALL_LINE_LIMIT);
    for step in [body.len().max(1), chunk] {
        let mut splitter = LineSplitter::new(SMALL_LINE_LIMIT);
        let mut failed = false;
        for piece in body.chunks(step) {
            match splitter.push(Bytes::copy_from_slice(piece)) {
                Ok(lines) => {
                    for line in lines {
                        assert!(
                            line.len() <= SMALL_LINE_LIMIT,
                            "a {}-byte line passed a splitter bounded at {SMALL_LINE_LIMIT} \
                             (chunks of {step})",
                            line.len()
                        );
                    }
                }
                Err(WireError::LineTooLong { limit }) => {
                    assert_eq!(limit, SMALL_LINE_LIMIT);
                    failed = true;
                    break;
                }
                Err(other) => panic!("the splitter failed with {other}"),
            }
        }
        assert_eq!(
            failed, too_long,
            "a line over {SMALL_LINE_LIMIT} bytes is an error (chunks of {step})"
        );
    }
}

/// The reference view of a line or body: serde_json's tree. `None` for bytes serde_json's
/// `Value` refuses although the decoders take them: a lone surrogate escape (`"\ud800"`) or
/// bytes that are not UTF-8 inside a value the decoders pass on as text without reading it.
fn reference_tree(bytes: &[u8]) -> Option<Value> {
    serde_json::from_slice(bytes).ok()
}

fn check_watch_line(line: &Bytes) {
    let reference = reference_tree(line);
    match decode_watch_line(line) {
        Ok(event) => {
            let reference = reference.unwrap_or_else(|| serde_json::json!({}));
            let kind = reference["type"].as_str().unwrap_or_default();
            let object = &reference["object"];
            match event {
                WatchEvent::Added(bytes)
                | WatchEvent::Modified(bytes)
                | WatchEvent::Deleted(bytes) => {
                    if !kind.is_empty() {
                        assert!(matches!(kind, "ADDED" | "MODIFIED" | "DELETED"), "{kind}");
                        match serde_json::from_slice::<Value>(&bytes) {
                            Ok(taken) => assert_eq!(&taken, object),
                            // The one envelope the wire misreads (see `decode_watch_line`).
                            Err(_) => assert!(
                                member_after_object(line),
                                "the object {bytes:?} of a valid line is not JSON"
                            ),
                        }
                    }
                    assert!(
                        line.as_ptr_range().contains(&bytes.as_ptr()),
                        "the object is a slice of the line"
                    );
                    check_object(&bytes);
                }
                WatchEvent::Bookmark {
                    resource_version,
                    initial_events_end,
                } => {
                    assert!(!resource_version.is_empty());
                    if kind.is_empty() {
                        return;
                    }
                    assert_eq!(kind, "BOOKMARK");
                    let metadata = &object["metadata"];
                    assert_eq!(
                        metadata["resourceVersion"].as_str(),
                        Some(&*resource_version)
                    );
                    let marked = metadata["annotations"][INITIAL_EVENTS_END] == "true";
                    assert_eq!(initial_events_end, marked);
                }
                WatchEvent::Error(status) => {
                    if kind.is_empty() {
                        return;
                    }
                    assert_eq!(kind, "ERROR");
                    assert_eq!(object["kind"], "Status");
                    assert_eq!(object["code"].as_u64(), Some(u64::from(status.code)));
                }
            }
        }
        Err(error) => {
            let message = error.to_string();
            match &error {
                WireError::UnknownEventType(kind) => {
                    assert!(message.contains(&format!("{kind:?}")), "{message}");
                }
                WireError::BadEnvelope { .. }
                | WireError::BadBookmark(_)
                | WireError::BadErrorObject(_) => {
                    assert!(message.contains(&wire::snippet(line)), "{message}");
                }
                other => panic!("a watch line failed with {other}"),
            }
        }
    }
}

/// Whether the envelope `line` has a member after its `object` (a JSON line).
fn member_after_object(line: &[u8]) -> bool {
    let text = std::str::from_utf8(line).expect("a JSON line");
    let mut members = ObjectScanner::new(text).expect("a JSON line");
    let mut seen_object = false;
    while let Some(key) = members.next_key().expect("a JSON line") {
        if seen_object {
            return true;
        }
        seen_object = key == "object";
        members.skip_value().expect("a JSON line");
    }
    false
}

/// A list body for ConfigMaps, taken as a plain request and as a metadata-only one takes it.
///
/// Properties: a decoded page has a resourceVersion and a non-empty continue token if any,
/// as many items as the reference sees, each a slice of the body that passes [`object`]; a
/// refused body gets an error that names the expected `ConfigMapList`; only a metadata-only
/// request takes a `PartialObjectMetadataList`.
pub fn list_page(data: &[u8]) {
    let body = Bytes::copy_from_slice(data);
    check_list_page(&body, false);
    check_list_page(&body, true);
}

fn check_list_page(body: &Bytes, metadata_form: bool) {
    let body = body.clone();
    match decode_list(&configmaps(), &body, metadata_form) {
        Ok((page, form)) => {
            assert!(!page.resource_version.is_empty());
            assert!(page.continue_token.as_ref().is_none_or(|t| !t.is_empty()));
            if let Some(reference) = reference_tree(&body) {
                let kind = reference["kind"].as_str();
                let metadata = metadata_form && kind == Some("PartialObjectMetadataList");
                assert!(kind == Some("ConfigMapList") || metadata, "{kind:?}");
                assert_eq!(metadata, form == ListForm::Metadata);
                let count = reference["items"].as_array().map_or(0, Vec::len);
                assert_eq!(page.items.len(), count, "items");
            }
            for item in &page.items {
                assert!(body.as_ptr_range().contains(&item.as_ptr()));
                check_object(item);
            }
        }
        Err(error) => {
            assert!(
                matches!(error, WireError::BadList { .. }),
                "a list failed with {error}"
            );
            assert!(error.to_string().contains("ConfigMapList"), "{error}");
        }
    }
}

/// An error answer: bytes 0 and 1 are the HTTP code, the rest the body.
///
/// Properties: the code is never lost (a `Status` body's own non-zero code, else the HTTP
/// one); a body that is not a `Status` gives reason `Unknown` and a message of bounded length
/// quoting its start.
pub fn status(data: &[u8]) {
    let Some((code, body)) = data.split_first_chunk::<2>() else {
        return;
    };
    let http_code = u16::from_be_bytes(*code);
    let status = decode_status(http_code, body);
    // serde_json skips the strings of fields it ignores without checking their UTF-8; the
    // reference reads the body with such bytes replaced, which changes no structure.
    let reference: Option<Map<String, Value>> =
        serde_json::from_str(&String::from_utf8_lossy(body)).ok();
    let is_status = reference
        .as_ref()
        .is_some_and(|r| r.get("kind").is_some_and(|k| k == "Status"));
    let fell_back = status.reason == "Unknown"
        && status.message.starts_with("answer is not a Status: ")
        && status.code == http_code;
    if fell_back {
        assert!(status.message.contains(&wire::snippet(body)));
        assert!(status.message.len() <= 200 + 4 * 160, "message is bounded");
    } else {
        assert!(is_status, "only a Status body is decoded as one");
        let reference = reference.expect("a Status body is JSON");
        let own = reference
            .get("code")
            .and_then(Value::as_u64)
            .filter(|&c| c != 0);
        assert_eq!(
            u64::from(status.code),
            own.unwrap_or(u64::from(http_code)),
            "the code"
        );
        assert_eq!(
            reference
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or(""),
            status.message
        );
    }
}

/// One object as the API server sends it (a list item or a watch event's object).
///
/// Properties: a decoded object decodes again to itself from its cached text; when the input
/// is valid JSON, the key, resourceVersion, uid, labels, owner references and deletion
/// timestamp agree with serde_json's tree, and the cached text is the input without
/// `metadata.managedFields` and with `apiVersion`/`kind` filled in. A refused object gets an
/// error that names the field, and "not JSON" only for bytes that are not a JSON object.
pub fn object(data: &[u8]) {
    check_object(data);
}

fn check_object(json: &[u8]) {
    let decoder = ObjectDecoder::new(configmaps());
    let reference = reference_tree(json);
    let decoded = decoder.decode(json);
    if metadata_members(json) > 1 {
        // serde_json keeps the last; the decoder refuses the ambiguity (or fails on an
        // earlier member), so the reference says nothing here.
        assert!(decoded.is_err(), "two metadata members accepted");
        return;
    }
    match decoded {
        Ok(object) => {
            let again = decoder.decode(object.json().as_bytes());
            assert_eq!(
                again.as_ref(),
                Ok(&object),
                "decoding the cached text {:?} again",
                object.json()
            );
            if let Some(reference) = reference {
                agrees_with_reference(&object, &reference);
            }
        }
        Err(error) => names_the_problem(&error, reference.as_ref()),
    }
}

/// How many top-level `metadata` keys come before the first syntax error (0 if the text is
/// not a JSON object).
fn metadata_members(json: &[u8]) -> usize {
    let Ok(text) = std::str::from_utf8(json) else {
        return 0;
    };
    let Ok(mut members) = ObjectScanner::new(text) else {
        return 0;
    };
    let mut count = 0;
    // Counted at the key, as the decoder refuses a second one before reading its value.
    while let Ok(Some(key)) = members.next_key() {
        count += usize::from(key == "metadata");
        if members.skip_value().is_err() {
            break;
        }
    }
    count
}

fn agrees_with_reference(object: &Object, input: &Value) {
    let metadata = &input["metadata"];
    let name = metadata["name"]
        .as_str()
        .expect("a decoded name is a string");
    let namespace = metadata["namespace"].as_str().filter(|ns| !ns.is_empty());
    assert_eq!(object.name(), name, "name");
    assert_eq!(object.namespace(), namespace, "namespace");
    assert_eq!(object.key(), &ObjectKey::new(namespace, name), "key");
    // Opaque since issue 20: the exact text is kept; the number is the text's when it is a
    // canonical decimal, else 0.
    let version = metadata["resourceVersion"]
        .as_str()
        .expect("a decoded resourceVersion is a string");
    assert_eq!(object.resource_version_text(), version, "resourceVersion");
    let number = version
        .parse::<u64>()
        .ok()
        .filter(|n| n.to_string() == version)
        .unwrap_or(0);
    assert_eq!(
        object.resource_version(),
        number,
        "resourceVersion as a number"
    );
    assert_eq!(object.uid(), metadata["uid"].as_str(), "uid");
    if let Some(generation) = metadata["generation"].as_i64() {
        assert_eq!(object.generation(), Some(generation), "generation");
    }
    assert_eq!(
        object.deletion_timestamp(),
        metadata["deletionTimestamp"].as_str(),
        "deletionTimestamp"
    );
    let labels: Vec<(&str, &str)> = metadata["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.as_str().expect("a decoded label is a string")))
        .collect();
    assert_eq!(object.labels().collect::<Vec<_>>(), labels, "labels");
    for (key, value) in &labels {
        assert_eq!(object.label(key), Some(*value), "label {key:?}");
    }
    let owners: Vec<&str> = metadata["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|owner| owner["uid"].as_str().expect("a decoded owner has a uid"))
        .collect();
    let decoded_owners: Vec<&str> = object.owner_references().iter().map(|o| o.uid()).collect();
    assert_eq!(decoded_owners, owners, "ownerReferences");

    let mut expected = input.clone();
    let top = expected
        .as_object_mut()
        .expect("a decoded input is an object");
    if let Some(Value::Object(metadata)) = top.get_mut("metadata") {
        metadata.remove("managedFields");
    }
    top.entry("apiVersion").or_insert_with(|| "v1".into());
    top.entry("kind").or_insert_with(|| "ConfigMap".into());
    let cached: Value = serde_json::from_str(object.json()).expect("the cached text is JSON");
    assert_eq!(cached, expected, "the cached text");
}

fn names_the_problem(error: &DecodeError, reference: Option<&Value>) {
    let message = error.to_string();
    let metadata = reference.map(|r| &r["metadata"]);
    match error {
        DecodeError::NotJson(_) => assert!(
            !reference.is_some_and(Value::is_object),
            "valid JSON refused as not JSON: {message}"
        ),
        DecodeError::MissingMetadata => {
            assert!(message.contains("metadata"), "{message}");
            assert!(metadata.is_none_or(|m| !m.is_object()), "{message}");
        }
        DecodeError::DuplicateMetadata => {
            panic!("two metadata members, but the check counted fewer: {message}")
        }
        DecodeError::MissingName => {
            assert!(message.contains("metadata.name"), "{message}");
            assert!(
                metadata.is_none_or(|m| m["name"].is_null() || m["name"] == ""),
                "{message}"
            );
        }
        DecodeError::BadTypeField { field, .. } => {
            assert!(message.contains(field), "{message}");
            if let Some(reference) = reference {
                assert!(!reference[*field].is_string(), "{message}");
            }
        }
        DecodeError::WrongKind { expected, .. } => {
            assert_eq!(expected, "v1/ConfigMap");
            assert!(message.contains(expected), "{message}");
        }
        DecodeError::BadResourceVersion { .. } => {
            assert!(message.contains("resourceVersion"), "{message}");
        }
        DecodeError::BadField { field, .. } => {
            assert!(message.contains(&format!("metadata.{field}")), "{message}");
            if let Some(metadata) = metadata.filter(|m| m.is_object()) {
                assert!(
                    !metadata[*field].is_null(),
                    "the error names metadata.{field}, which the object does not have: {message}"
                );
            }
        }
        DecodeError::BadOwnerReferences { .. } | DecodeError::BadOwnerReference { .. } => {
            assert!(message.contains("metadata.ownerReferences"), "{message}");
            if let Some(metadata) = metadata.filter(|m| m.is_object()) {
                assert!(
                    !metadata["ownerReferences"].is_null(),
                    "the error names metadata.ownerReferences, which the object does not have: \
                     {message}"
                );
            }
        }
        // A variant added later fails here until its property is written above.
        other => panic!("a decode error this check does not know: {other}"),
    }
}

/// Objects captured from a real API server (`shared/fixtures/kube-apiserver/v1.32.0-rc.0`):
/// a list item without `kind`, and a full object with managed fields.
const FIXTURE_OBJECTS: [&str; 2] = [
    r#"{"metadata":{"name":"cm-1","namespace":"wire2","uid":"a3e5cf4f-7f2e-4e8b-8a67-0f1c0f6f4a11","resourceVersion":"215","creationTimestamp":"2026-11-29T08:34:14Z","labels":{"team":"a"},"managedFields":[{"manager":"kubectl-create","operation":"Update","apiVersion":"v1","time":"2026-11-29T08:34:14Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:k":{}}}}]},"data":{"k":"v1"}}"#,
    r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"applied","namespace":"wire2","uid":"0646d769-b68f-4e7f-b69a-3948b105a6f2","resourceVersion":"221","creationTimestamp":"2026-11-29T08:34:24Z","labels":{"owner":"kubeplug"},"managedFields":[{"manager":"kubeplug/example","operation":"Apply","apiVersion":"v1","time":"2026-11-29T08:34:24Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{"f:a":{}},"f:metadata":{"f:labels":{"f:owner":{}}}}}]},"data":{"a":"1"}}"#,
];

/// The fields an edit can touch: metadata's (those the decoder reads, and one it copies),
/// then the top level's.
const METADATA_FIELDS: [&str; 10] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "labels",
    "ownerReferences",
    "deletionTimestamp",
    "managedFields",
    "annotations",
];
const TOP_FIELDS: [&str; 4] = ["kind", "apiVersion", "metadata", "data"];

/// Structure-aware objects: valid JSON built by editing a captured object, so that the
/// fuzzer spends its time on metadata semantics rather than on JSON syntax. Byte 0 picks the
/// fixture; then each edit is `[field, shape, length, payload…]`. The properties are those of
/// [`object`].
pub fn object_edit(data: &[u8]) {
    let Some((&pick, mut edits)) = data.split_first() else {
        return;
    };
    let fixture = FIXTURE_OBJECTS[usize::from(pick) % FIXTURE_OBJECTS.len()];
    let mut value: Value = serde_json::from_str(fixture).expect("fixtures are JSON");
    while let [field, shape, length, rest @ ..] = edits {
        let (payload, next) = rest.split_at(usize::from(*length).min(rest.len()));
        edits = next;
        let fields = METADATA_FIELDS.len() + TOP_FIELDS.len();
        let index = usize::from(*field) % fields;
        let (target, name) = match METADATA_FIELDS.get(index) {
            Some(name) => (&mut value["metadata"], *name),
            None => (&mut value, TOP_FIELDS[index - METADATA_FIELDS.len()]),
        };
        let Some(target) = target.as_object_mut() else {
            continue;
        };
        match shaped(*shape, payload) {
            Some(new) => target.insert(name.to_owned(), new),
            None => target.remove(name),
        };
    }
    check_object(&serde_json::to_vec(&value).expect("a Value serializes"));
}

/// A JSON value of the shape byte `shape` names, made from `payload`; `None` removes the field.
fn shaped(shape: u8, payload: &[u8]) -> Option<Value> {
    let text = || String::from_utf8_lossy(payload).into_owned();
    let pairs = || {
        payload
            .split(|&b| b == 0)
            .map(|part| String::from_utf8_lossy(part).into_owned())
            .collect::<Vec<_>>()
    };
    Some(match shape % 9 {
        0 => return None,
        1 => Value::Null,
        2 => Value::String(text()),
        3 => {
            let mut bytes = [0; 8];
            let n = payload.len().min(8);
            bytes[..n].copy_from_slice(&payload[..n]);
            Value::from(i64::from_le_bytes(bytes))
        }
        4 => Value::String(
            u64::from_le_bytes(payload.first_chunk().copied().unwrap_or_default()).to_string(),
        ),
        5 => Value::Bool(payload.first().is_some_and(|b| b % 2 == 1)),
        // A map of strings, as labels and annotations are.
        6 => {
            let parts = pairs();
            let map = parts
                .chunks(2)
                .map(|kv| {
                    (
                        kv[0].clone(),
                        Value::from(kv.get(1).cloned().unwrap_or_default()),
                    )
                })
                .collect();
            Value::Object(map)
        }
        // An array of owner references, some fields missing.
        7 => Value::Array(
            pairs()
                .into_iter()
                .enumerate()
                .map(|(i, name)| {
                    let mut owner = serde_json::json!({
                        "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name,
                        "uid": format!("uid-{i}"), "controller": i == 0,
                    });
                    if name.len() % 5 == 4 {
                        owner.as_object_mut().unwrap().remove("uid");
                    }
                    owner
                })
                .collect(),
        ),
        _ => Value::Array(pairs().into_iter().map(Value::from).collect()),
    })
}
