//! Checks for the host functions a plugin calls: every argument comes from the guest.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use kubeplug_informer::indexer::{Indexer, new_indexer};
use kubeplug_informer::object::ObjectDecoder;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::selector::LabelSelector;
use kubeplug_runtime::view::BoxFuture;
use kubeplug_runtime::{
    ClusterWriter, Grants, Gvk, HostCallError, HostCalls, IndexerMap, Write, WriteError, WriteVerb,
};

use crate::input::Input;

/// Strings a guest is likely to pass, valid and not; most arguments come from here.
const WORDS: &[&str] = &[
    "",
    "a",
    "b",
    "a/cm-1",
    "a/cm-2",
    "b/cm-3",
    "cm-4",
    "cm-1",
    "a/",
    "/cm-1",
    "a/b/c",
    "a//b",
    "namespace",
    "by-app",
    "app=web",
    "app in (web,db)",
    "!app",
    "app",
    "app=",
    "=web",
    "app==web,",
    "web",
    "{}",
    r#"{"metadata":{"name":"x"}}"#,
    "[1,",
];

/// The longest argument a host call takes.
const MAX_ARG: usize = 4096;

fn config_maps() -> Gvk {
    Gvk::new("", "v1", "ConfigMap")
}

/// The objects the plugin's cache holds: key → its `app` label.
const OBJECTS: [(&str, Option<&str>); 4] = [
    ("a/cm-1", Some("web")),
    ("a/cm-2", Some("db")),
    ("b/cm-3", Some("web")),
    ("c/cm-4", None),
];

/// The ConfigMap and Secret caches, built once per process.
fn caches() -> &'static IndexerMap {
    static CACHES: OnceLock<IndexerMap> = OnceLock::new();
    CACHES.get_or_init(|| {
        let cache = |kind: &str, plural: &str, objects: &[(&str, Option<&str>)]| -> Indexer {
            let decoder = ObjectDecoder::new(Resource::new("", "v1", kind, plural, true));
            let (mut writer, indexer) = new_indexer();
            for (key, app) in objects {
                let (namespace, name) = key.split_once('/').expect("namespaced keys");
                let labels = app.map(|app| serde_json::json!({"app": app}));
                let json = serde_json::json!({"metadata": {
                    "name": name, "namespace": namespace, "resourceVersion": "1",
                    "labels": labels.unwrap_or_default(),
                }});
                let object = decoder
                    .decode(json.to_string().as_bytes())
                    .expect("a valid object");
                writer.put(Arc::new(object));
            }
            indexer
        };
        IndexerMap(BTreeMap::from([
            (config_maps(), cache("ConfigMap", "configmaps", &OBJECTS)),
            (
                Gvk::new("", "v1", "Secret"),
                cache("Secret", "secrets", &[("a/token", Some("web"))]),
            ),
        ]))
    })
}

/// Records the writes that reach it.
#[derive(Default)]
struct Writes(Mutex<Vec<Write>>);

impl ClusterWriter for Writes {
    fn write<'a>(
        &'a self,
        _plugin: &'a str,
        write: Write,
    ) -> BoxFuture<'a, Result<String, WriteError>> {
        self.0.lock().expect("not poisoned").push(write);
        Box::pin(async { Ok(String::new()) })
    }
}

impl Input<'_> {
    /// ConfigMaps (subscribed), Secrets (cached, not granted), Pods (neither), or any type.
    fn resource(&mut self) -> Gvk {
        match self.byte() % 4 {
            0 | 1 => config_maps(),
            2 => Gvk::new("", "v1", "Secret"),
            _ => Gvk::new(&self.text(), &self.text(), &self.text()),
        }
    }
}

/// The reference: which objects are in `namespace` (none or empty: all) and match
/// `selector`, by key.
fn reference(namespace: Option<&str>, selector: Option<&LabelSelector>) -> Vec<String> {
    OBJECTS
        .iter()
        .filter(|(key, _)| {
            namespace
                .filter(|ns| !ns.is_empty())
                .is_none_or(|ns| key.split_once('/').map(|(n, _)| n) == Some(ns))
        })
        .filter(|(_, app)| {
            let labels: BTreeMap<String, String> = app
                .map(|app| BTreeMap::from([("app".to_owned(), app.to_owned())]))
                .unwrap_or_default();
            selector.is_none_or(|s| s.matches(&labels))
        })
        .map(|(key, _)| (*key).to_owned())
        .collect()
}

/// A DNS-1123 label (the Kubernetes API conventions): what a namespace must be.
fn dns_label(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 63
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !text.starts_with('-')
        && !text.ends_with('-')
}

/// Whether a refusal says `namespace` is not a DNS label.
fn names_namespace(error: &HostCallError) -> bool {
    error.kind == "invalid-input"
        && error.message.starts_with("namespace ")
        && error.message.contains("is not a DNS label")
}

/// Whether a refusal names the argument that is over the bound.
fn names_bound(error: &HostCallError, what: &str) -> bool {
    error.kind == "invalid-input"
        && error.message.starts_with(&format!("{what} is "))
        && error.message.ends_with(&format!("at most {MAX_ARG}"))
}

/// A sequence of calls to the `cache` and `cluster` host functions by a plugin granted to
/// read ConfigMaps and to create them: byte 0 of each call picks it, then its
/// arguments (resource types and strings mostly from lists of likely ones).
///
/// Properties: no call traps or panics; an argument over the bound is refused as
/// `invalid-input` naming it, and so is a namespace that is not a DNS label; a type neither
/// subscribed nor granted is refused as `not-permitted` naming the plugin (or as
/// `invalid-input` when its parts are not names), and each refusal is counted once; reads of
/// the subscribed type answer exactly what a reference filter over the cache's objects
/// answers, sorted by key; a bad key or selector is refused quoting it; a write reaches the
/// writer exactly when it is granted, its document is JSON, and its namespace is a DNS label
/// that the document does not contradict.
pub fn host_calls(data: &[u8]) {
    let writes = Arc::new(Writes::default());
    let grants = Grants::default()
        .allow_read(config_maps())
        .allow_write(config_maps(), WriteVerb::Create);
    let mut calls = HostCalls::new(
        "fuzz",
        [config_maps()],
        &grants,
        Arc::new(caches().clone()),
        writes.clone(),
    );
    let mut input = Input::new(data, WORDS, MAX_ARG);
    let mut refusals = 0;
    let mut accepted_writes = 0;
    while !input.is_empty() {
        let op = input.byte() % 6;
        let resource = input.resource();
        let readable = resource == config_maps();
        let outcome: Result<Vec<String>, HostCallError> = match op {
            0 => {
                let key = input.text();
                let answer = calls.get(&resource, &key);
                if key.len() > MAX_ARG {
                    assert!(
                        names_bound(answer.as_ref().unwrap_err(), "key"),
                        "{answer:?}"
                    );
                } else if let Ok(found) = &answer {
                    let expected = OBJECTS.iter().any(|(k, _)| *k == key);
                    assert_eq!(found.as_deref(), expected.then_some(key.as_str()));
                }
                answer.map(|found| found.into_iter().collect())
            }
            1 => {
                let namespace = input.optional_text();
                let selector = input.optional_text();
                let answer = calls.list(&resource, namespace.as_deref(), selector.as_deref());
                let parsed = selector.as_deref().map(LabelSelector::parse);
                match (&answer, &parsed) {
                    (Err(e), _) if selector.as_ref().is_some_and(|s| s.len() > MAX_ARG) => {
                        assert!(names_bound(e, "label selector"), "{e:?}");
                    }
                    (Err(e), Some(Err(_))) => assert!(
                        e.kind == "invalid-input"
                            && e.message.contains(&format!(
                                "{:?}",
                                selector.as_deref().unwrap_or_default()
                            )),
                        "{e:?}"
                    ),
                    (Err(e), _) if namespace.as_ref().is_some_and(|n| n.len() > MAX_ARG) => {
                        assert!(names_bound(e, "namespace"), "{e:?}");
                    }
                    (Err(e), _)
                        if namespace
                            .as_deref()
                            .is_some_and(|n| !n.is_empty() && !dns_label(n)) =>
                    {
                        assert!(names_namespace(e), "{e:?}");
                    }
                    (Ok(keys), Some(Ok(selector))) => {
                        assert_eq!(keys, &reference(namespace.as_deref(), Some(selector)));
                    }
                    (Ok(keys), None) => assert_eq!(keys, &reference(namespace.as_deref(), None)),
                    _ => {}
                }
                answer
            }
            2 => {
                let namespace = input.optional_text();
                let answer = calls.keys(&resource, namespace.as_deref());
                if let Ok(keys) = &answer {
                    assert_eq!(keys, &reference(namespace.as_deref(), None));
                }
                answer
            }
            3 => {
                let index = input.text();
                let value = input.text();
                let answer = calls.by_index(&resource, &index, &value);
                match &answer {
                    Ok(keys) => {
                        assert_eq!(index, "namespace", "only the built-in index exists");
                        let expected: Vec<String> = reference(Some(&value), None)
                            .into_iter()
                            .filter(|_| !value.is_empty())
                            .collect();
                        assert_eq!(keys, &expected);
                    }
                    Err(e) if readable && value.len() <= MAX_ARG && index.len() <= MAX_ARG => {
                        assert_eq!(e.kind, "not-found", "{e:?}");
                        assert!(e.message.contains(&format!("{index:?}")), "{e:?}");
                    }
                    Err(_) => {}
                }
                answer
            }
            4 => {
                let index = input.text();
                let answer = calls.index_values(&resource, &index);
                if let Ok(values) = &answer {
                    assert_eq!(values, &["a", "b", "c"], "the namespaces, sorted");
                }
                answer
            }
            _ => {
                let namespace = input.optional_text();
                let json = input.text();
                let before = writes.0.lock().expect("not poisoned").len();
                let answer = calls.create(&resource, namespace.as_deref(), &json);
                let reached = writes.0.lock().expect("not poisoned").len() - before;
                let document = serde_json::from_str::<serde_json::Value>(&json).ok();
                let given = namespace.as_deref().filter(|n| !n.is_empty());
                let named = given.is_none_or(dns_label);
                // A manifest may not name another namespace than the one given.
                let elsewhere = document.as_ref().is_some_and(|d| {
                    let inside = d["metadata"]["namespace"]
                        .as_str()
                        .filter(|n| !n.is_empty());
                    given
                        .zip(inside)
                        .is_some_and(|(given, inside)| given != inside)
                });
                assert_eq!(
                    reached == 1,
                    readable && document.is_some() && named && !elsewhere,
                    "{resource} {json:?}: {answer:?}"
                );
                accepted_writes += reached;
                answer.map(|_| Vec::new())
            }
        };
        match outcome {
            Ok(keys) => {
                assert!(readable, "{resource} answered {keys:?}");
                assert!(keys.is_sorted(), "{keys:?}");
            }
            Err(e) if e.kind == "not-permitted" => {
                assert!(!readable, "{e:?}");
                assert!(e.message.contains("plugin fuzz "), "{e:?}");
                refusals += 1;
            }
            Err(e) => assert!(
                ["invalid-input", "not-found"].contains(&e.kind),
                "{resource}: {e:?}"
            ),
        }
        assert_eq!(calls.denied(), refusals, "each refusal counted once");
    }
    assert_eq!(
        writes.0.lock().expect("not poisoned").len(),
        accepted_writes
    );
}
