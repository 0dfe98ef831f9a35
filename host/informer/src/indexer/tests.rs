//! Tests of the Indexer: the cache's writes and reads, and its named indexes.

use super::*;
use crate::object::ObjectDecoder;
use crate::resource::Resource;

fn pod(ns: &str, name: &str, rv: u64, labels: &[(&str, &str)], owner: Option<&str>) -> Arc<Object> {
    let labels: serde_json::Map<_, _> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
        .collect();
    let owners: Vec<_> = owner
        .map(|uid| serde_json::json!({"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":uid}))
        .into_iter()
        .collect();
    let json = serde_json::json!({
        "metadata": {"name": name, "namespace": ns, "resourceVersion": rv.to_string(),
                     "labels": labels, "ownerReferences": owners}
    });
    let decoder = ObjectDecoder::new(Resource::new("", "v1", "Pod", "pods", true));
    Arc::new(decoder.decode(json.to_string().as_bytes()).unwrap())
}

fn sorted(mut keys: Vec<ObjectKey>) -> Vec<String> {
    keys.sort();
    keys.into_iter().map(|k| k.to_string()).collect()
}

#[test]
fn custom_index_follows_add_update_delete_replace() {
    let (mut writer, reader) = new_indexer();
    let app = reader.add_index(IndexSpec::Label("app".into()));
    writer.put(pod("a", "p1", 1, &[("app", "web")], None));
    writer.put(pod("b", "p2", 2, &[("app", "web")], None));
    writer.put(pod("a", "p3", 3, &[("app", "db")], None));
    assert_eq!(
        sorted(reader.index_keys(app.name(), "web").unwrap()),
        ["a/p1", "b/p2"]
    );

    // An update moves the object between index values.
    writer.put(pod("a", "p1", 4, &[("app", "db")], None));
    assert_eq!(
        sorted(reader.index_keys(app.name(), "web").unwrap()),
        ["b/p2"]
    );
    assert_eq!(
        sorted(reader.index_keys(app.name(), "db").unwrap()),
        ["a/p1", "a/p3"]
    );

    // Losing the label takes it out of the index; an emptied value disappears.
    writer.put(pod("b", "p2", 5, &[], None));
    assert!(reader.index_keys(app.name(), "web").unwrap().is_empty());
    let mut values = reader.index_values(app.name()).unwrap();
    values.sort();
    assert_eq!(values, ["db"]);

    writer.delete("a/p3");
    assert_eq!(
        sorted(reader.index_keys(app.name(), "db").unwrap()),
        ["a/p1"]
    );
    assert_eq!(
        sorted(reader.index_keys(NAMESPACE_INDEX, "a").unwrap()),
        ["a/p1"]
    );

    writer.replace([pod("c", "p9", 6, &[("app", "web")], None)]);
    assert!(reader.index_keys(app.name(), "db").unwrap().is_empty());
    assert_eq!(
        sorted(reader.index_keys(app.name(), "web").unwrap()),
        ["c/p9"]
    );
    assert_eq!(
        reader.by_index(NAMESPACE_INDEX, "c").unwrap()[0].name(),
        "p9"
    );
    assert_eq!(reader.len(), 1);
}

/// Updates that keep the values are skipped without computing them; those that change
/// them move the key.
#[test]
fn owner_index_follows_an_owner_change_and_ignores_other_updates() {
    let (mut writer, reader) = new_indexer();
    let owners = reader.add_index(IndexSpec::OwnerUid);
    writer.put(pod("a", "p1", 1, &[], Some("uid-1")));
    writer.put(pod("a", "p1", 2, &[("app", "web")], Some("uid-1")));
    assert_eq!(
        sorted(reader.index_keys(owners.name(), "uid-1").unwrap()),
        ["a/p1"]
    );
    writer.put(pod("a", "p1", 3, &[], Some("uid-2")));
    assert!(
        reader
            .index_keys(owners.name(), "uid-1")
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        sorted(reader.index_keys(owners.name(), "uid-2").unwrap()),
        ["a/p1"]
    );
    writer.put(pod("a", "p1", 4, &[], None));
    assert!(reader.index_values(owners.name()).unwrap().is_empty());
    assert_eq!(
        sorted(reader.index_keys(NAMESPACE_INDEX, "a").unwrap()),
        ["a/p1"]
    );
}

#[test]
fn late_index_is_built_over_current_contents_and_shared() {
    let (mut writer, reader) = new_indexer();
    writer.put(pod("a", "p1", 1, &[], Some("u1")));
    writer.put(pod("a", "p2", 2, &[], Some("u1")));
    writer.put(pod("a", "p3", 3, &[], Some("u2")));
    let first = reader.add_index(IndexSpec::OwnerUid);
    let second = reader.add_index(IndexSpec::OwnerUid);
    assert_eq!(
        sorted(reader.index_keys("owner-uid", "u1").unwrap()),
        ["a/p1", "a/p2"]
    );
    drop(first);
    assert!(
        reader.index_keys("owner-uid", "u2").is_ok(),
        "still referenced"
    );
    drop(second);
    assert_eq!(
        reader.index_keys("owner-uid", "u2"),
        Err(IndexerError::UnknownIndex("owner-uid".into()))
    );
    assert_eq!(reader.index_names(), [NAMESPACE_INDEX]);
}

#[test]
fn custom_function_index() {
    let (mut writer, reader) = new_indexer();
    let by_first_letter = reader.add_index(IndexSpec::Custom {
        name: "first-letter".into(),
        func: Arc::new(|o: &Object| vec![o.name()[..1].to_owned()]),
    });
    writer.put(pod("a", "xy", 1, &[], None));
    writer.put(pod("a", "xz", 1, &[], None));
    assert_eq!(
        reader.by_index(by_first_letter.name(), "x").unwrap().len(),
        2
    );
    assert!(reader.by_index("nope", "x").is_err());
}

fn with_spec(ns: &str, name: &str, rv: u64, spec: &str) -> Arc<Object> {
    let json = format!(
        r#"{{"metadata":{{"name":"{name}","namespace":"{ns}","resourceVersion":"{rv}"}},"spec":{spec}}}"#
    );
    let decoder = ObjectDecoder::new(Resource::new("", "v1", "Pod", "pods", true));
    Arc::new(decoder.decode(json.as_bytes()).unwrap())
}

fn path_index(reader: &Indexer, path: &str) -> IndexHandle {
    reader.add_index(IndexSpec::Path(FieldPath::parse(path).unwrap()))
}

fn values(reader: &Indexer, index: &IndexHandle) -> Vec<String> {
    let mut values = reader.index_values(index.name()).unwrap();
    values.sort();
    values
}

#[test]
fn path_indexes_file_strings_numbers_and_bools_and_follow_changes() {
    let (mut writer, reader) = new_indexer();
    let volumes = path_index(&reader, "spec.volumes[*].configMap.name");
    let scalars = path_index(&reader, "spec.m[*][*]");
    assert_eq!(volumes.name(), "path:spec.volumes[*].configMap.name");
    writer.put(with_spec(
        "a",
        "p",
        1,
        r#"{"volumes":[{"configMap":{"name":"b"}},{"secret":{}},{"configMap":{"name":"a"}},{"configMap":{"name":"a"}}],
                "m":[[1,true],["x",null,{}],[2.50,"a\"b"]]}"#,
    ));
    assert_eq!(values(&reader, &volumes), ["a", "b"]);
    assert_eq!(
        values(&reader, &scalars),
        ["1", "2.50", "a\"b", "true", "x"]
    );
    // An update moves the key; one with the same values leaves the index alone.
    writer.put(with_spec(
        "a",
        "p",
        2,
        r#"{"volumes":[{"configMap":{"name":"c"}}]}"#,
    ));
    assert_eq!(values(&reader, &volumes), ["c"]);
    assert!(values(&reader, &scalars).is_empty());
    writer.put(with_spec(
        "a",
        "q",
        3,
        r#"{"volumes":[{"configMap":{"name":"c"}}]}"#,
    ));
    writer.put(with_spec(
        "a",
        "q",
        4,
        r#"{"volumes":[{"configMap":{"name":"c"}}]}"#,
    ));
    assert_eq!(
        sorted(reader.index_keys(volumes.name(), "c").unwrap()),
        ["a/p", "a/q"]
    );
    writer.delete("a/p");
    assert_eq!(
        sorted(reader.index_keys(volumes.name(), "c").unwrap()),
        ["a/q"]
    );
    writer.replace([with_spec(
        "a",
        "r",
        5,
        r#"{"volumes":[{"configMap":{"name":"d"}}]}"#,
    )]);
    assert_eq!(values(&reader, &volumes), ["d"]);
    assert_eq!(
        sorted(reader.index_keys(volumes.name(), "d").unwrap()),
        ["a/r"]
    );
}

#[test]
fn malformed_json_on_a_path_files_nothing_for_that_path_only() {
    let (mut writer, reader) = new_indexer();
    let broken = path_index(&reader, "spec.m[*]");
    let fine = path_index(&reader, "spec.n");
    writer.put(with_spec("a", "p", 1, r#"{"m":["a",tru],"n":"ok"}"#));
    writer.put(with_spec("a", "q", 1, r#"{"m":["a",,"b"],"n":"ok"}"#));
    assert!(values(&reader, &broken).is_empty());
    assert_eq!(
        sorted(reader.index_keys(fine.name(), "ok").unwrap()),
        ["a/p", "a/q"]
    );
}

#[test]
fn path_indexes_added_late_or_dropped_keep_the_others_right() {
    let (mut writer, reader) = new_indexer();
    writer.put(with_spec("a", "p", 1, r#"{"x":"1","y":"2"}"#));
    let x = path_index(&reader, "spec.x");
    let y = path_index(&reader, "spec.y");
    assert_eq!(values(&reader, &x), ["1"]);
    assert_eq!(values(&reader, &y), ["2"]);
    drop(x);
    writer.put(with_spec("a", "p", 2, r#"{"x":"3","y":"4"}"#));
    assert_eq!(values(&reader, &y), ["4"]);
    assert!(reader.index_values("path:spec.x").is_err());
    let x = path_index(&reader, "spec.x");
    writer.put(with_spec("a", "p", 3, r#"{"x":"5","y":"6"}"#));
    assert_eq!(
        (values(&reader, &x), values(&reader, &y)),
        (vec!["5".into()], vec!["6".into()])
    );
}

fn kept(object: &Object, path: &str) -> Option<Vec<String>> {
    match object.selected(&FieldPath::parse(path).unwrap())? {
        crate::selected::Selection::Values(values) => Some(values.map(str::to_owned).collect()),
        crate::selected::Selection::Malformed => Some(vec!["malformed".into()]),
    }
}

#[test]
fn projection_values_are_kept_with_objects_stored_while_registered() {
    let (mut writer, reader) = new_indexer();
    let before = with_spec("a", "before", 1, r#"{"x":"1"}"#);
    writer.put(before.clone());
    let path = FieldPath::parse("spec.x").unwrap();
    let first = reader.add_projection(&path);
    let second = reader.add_projection(&path);
    let indexed = path_index(&reader, "spec.y[*]");
    let object = with_spec("a", "p", 2, r#"{"x":"2","y":[3,"z"],"w":{"x":0}}"#);
    writer.put(object.clone());
    assert_eq!(kept(&object, "spec.x"), Some(vec![r#""2""#.to_owned()]));
    assert_eq!(
        kept(&before, "spec.x"),
        None,
        "stored before the registration"
    );
    assert_eq!(
        kept(&object, "spec.y[*]"),
        None,
        "an index path is not a projection"
    );
    assert_eq!(values(&reader, &indexed), ["3", "z"]);
    let broken = with_spec("a", "q", 3, r#"{"x" 1}"#);
    writer.put(broken.clone());
    assert_eq!(kept(&broken, "spec.x"), Some(vec!["malformed".to_owned()]));
    // The registration lives while a handle does.
    drop(first);
    let later = with_spec("a", "r", 4, r#"{"x":"4"}"#);
    writer.put(later.clone());
    assert!(kept(&later, "spec.x").is_some());
    drop(second);
    let last = with_spec("a", "s", 5, r#"{"x":"5"}"#);
    writer.put(last.clone());
    assert_eq!(kept(&last, "spec.x"), None);
    assert_eq!(
        kept(&object, "spec.x").unwrap(),
        [r#""2""#],
        "kept values stay"
    );
}

/// An update whose `spec` is the same text (a status update) moves the old values to
/// the new text instead of walking it: the values must be those a walk finds, whatever
/// the metadata before it grew or shrank to.
#[test]
fn values_of_an_unchanged_member_are_moved_not_walked_again() {
    let (mut writer, reader) = new_indexer();
    let paths = ["spec.x", "spec.z[*]", "status.s"];
    let _projections: Vec<_> = paths
        .iter()
        .map(|p| reader.add_projection(&FieldPath::parse(p).unwrap()))
        .collect();
    let index = path_index(&reader, "spec.y[*]");
    let versions = [
        (9, r#"{"x":"a","y":[1],"z":[{"k":1},2]}"#, ["1"].as_slice()),
        (10, r#"{"x":"a","y":[1],"z":[{"k":1},2]}"#, ["1"].as_slice()),
        (100, r#"{"x":"b","y":[2,3]}"#, ["2", "3"].as_slice()),
        (1000, r#"{"x" 1,"y":[4]}"#, [].as_slice()),
        (10000, r#"{"x" 1,"y":[4]}"#, [].as_slice()),
        (7, r#"{"x":"c","y":[5]}"#, ["5"].as_slice()),
        (123456, r#"{"x":"c","y":[5]}"#, ["5"].as_slice()),
    ];
    for (rv, spec, indexed) in versions {
        let object = with_spec("a", "p", rv, spec);
        writer.put(object.clone());
        for path in paths {
            let mut walked = Vec::new();
            let alone = FieldPath::parse(path)
                .unwrap()
                .for_each_raw(object.json(), |raw| walked.push(raw.to_owned()));
            let want = if alone.is_ok() {
                walked
            } else {
                vec!["malformed".to_owned()]
            };
            assert_eq!(kept(&object, path), Some(want), "{path} at {rv}");
        }
        assert_eq!(values(&reader, &index), indexed, "at {rv}");
    }
}

/// A plugin's projection can select every element of a long array: what an object keeps
/// is bounded by its JSON's size, and a path over the bound is left to its readers.
#[test]
fn kept_projection_values_are_bounded_by_the_object_size() {
    let (mut writer, reader) = new_indexer();
    let _long = reader.add_projection(&FieldPath::parse("spec.n[*]").unwrap());
    let _short = reader.add_projection(&FieldPath::parse("spec.s[*]").unwrap());
    let numbers = vec!["1"; 10_000].join(",");
    let object = with_spec("a", "p", 1, &format!(r#"{{"s":[1,2],"n":[{numbers}]}}"#));
    writer.put(object.clone());
    assert_eq!(kept(&object, "spec.n[*]"), None);
    assert_eq!(kept(&object, "spec.s[*]").unwrap(), ["1", "2"]);
    // A path index over the long array walks the old object again instead.
    let long = path_index(&reader, "spec.n[*]");
    let numbers = (0..10_000)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    writer.put(with_spec("a", "p", 2, &format!(r#"{{"n":[{numbers}]}}"#)));
    writer.put(with_spec("a", "p", 3, r#"{"n":[7]}"#));
    assert_eq!(values(&reader, &long), ["7"]);
    writer.put(with_spec("a", "p", 4, &format!(r#"{{"n":[{numbers}]}}"#)));
    assert_eq!(values(&reader, &long).len(), 10_000);
    writer.delete("a/p");
    assert!(values(&reader, &long).is_empty());
}

/// Issue 20: a custom index function that panics does not poison the Indexer: its own
/// index fails (and says why), everything else keeps working. Regression: the panic
/// poisoned the lock, and every later read and write of the cache panicked.
#[test]
fn a_panicking_index_function_fails_its_index_only() {
    let (mut writer, reader) = new_indexer();
    let app = reader.add_index(IndexSpec::Label("app".into()));
    let fragile = reader.add_index(IndexSpec::Custom {
        name: "fragile".into(),
        func: Arc::new(|object: &Object| {
            assert!(object.name() != "bad", "cannot index {}", object.name());
            vec![object.name().to_owned()]
        }),
    });
    writer.put(pod("a", "good", 1, &[("app", "web")], None));
    assert_eq!(
        sorted(reader.index_keys(fragile.name(), "good").unwrap()),
        ["a/good"]
    );

    writer.put(pod("a", "bad", 2, &[("app", "web")], None));
    let failed = reader.index_keys(fragile.name(), "good").unwrap_err();
    assert_eq!(
        failed.to_string(),
        "the index \"fragile\" failed: its function panicked on a/bad: cannot index bad"
    );
    assert!(reader.index_values(fragile.name()).is_err());
    // The rest of the cache, and its writer, are unharmed.
    writer.put(pod("b", "later", 3, &[("app", "web")], None));
    writer.delete("a/good");
    assert_eq!(reader.len(), 2);
    assert_eq!(
        sorted(reader.index_keys(app.name(), "web").unwrap()),
        ["a/bad", "b/later"]
    );
}

/// Issue 41: an index is built off the cache's lock. Its function is gated over 1,000
/// objects; while the gate is closed the writer (the delta processor) still puts, updates
/// and deletes, and the index, once swapped in, files every object as it is then. Before,
/// the build held the write lock and the writer waited for every call of the function.
#[test]
fn an_index_is_built_without_holding_up_the_writer() {
    use std::sync::{Condvar, Mutex, mpsc};
    use std::time::Duration;

    let (mut writer, reader) = new_indexer();
    for i in 0..1000 {
        writer.put(pod("a", &format!("p{i}"), 1, &[("app", "web")], None));
    }
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let open = |gate: &(Mutex<bool>, Condvar)| {
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
    };
    let func_gate = gate.clone();
    let func: IndexFn = Arc::new(move |o: &Object| {
        let (lock, opened) = &*func_gate;
        let _open = opened
            .wait_while(lock.lock().unwrap(), |open| !*open)
            .unwrap();
        o.label("app").map(str::to_owned).into_iter().collect()
    });
    let building = {
        let reader = reader.clone();
        std::thread::spawn(move || {
            reader.add_index(IndexSpec::Custom {
                name: "app-gated".into(),
                func,
            })
        })
    };
    // The writer's changes while the gate is closed, on a thread of their own so that a
    // writer held up fails the test instead of hanging it.
    let (done, written) = mpsc::channel();
    let writing = std::thread::spawn(move || {
        writer.put(pod("a", "p0", 2, &[("app", "db")], None));
        writer.delete("a/p1");
        writer.put(pod("a", "new", 1, &[("app", "web")], None));
        done.send(()).unwrap();
        writer
    });
    let held_up = written.recv_timeout(Duration::from_secs(30)).is_err();
    open(&gate);
    let _writer = writing.join().unwrap();
    let index = building.join().unwrap();
    assert!(!held_up, "the writer waited for the index to be built");
    let web = reader.index_keys(index.name(), "web").unwrap();
    assert_eq!(web.len(), 999, "p1 deleted, p0 moved to db, new added");
    assert!(web.iter().any(|k| k.to_string() == "a/new"));
    assert_eq!(
        sorted(reader.index_keys(index.name(), "db").unwrap()),
        ["a/p0"]
    );
}
