//! The Indexer: the informer's local cache, keyed by `namespace/name`, with named indexes.
//!
//! One [`IndexerWriter`] (owned by the informer's delta processor) changes the objects; any
//! number of [`Indexer`] handles read them and get `Arc<Object>`s. Indexes can be added and
//! removed while the informer runs: a new index is built over the current contents, and an
//! index is shared, reference-counted by its name, between everyone who asked for it.

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};

use crate::object::{Object, ObjectKey};

/// Name of the index built into every Indexer: objects by namespace.
pub const NAMESPACE_INDEX: &str = "namespace";

/// Maps an object to the index values it is filed under (zero or more).
///
/// Contract: it runs while the Indexer is locked for writing (and, in an informer, while
/// the DeltaFIFO is locked), so it must not read the cache or wait; it should be a pure
/// function of the object. One that panics does not poison the Indexer: its index is
/// emptied and marked failed ([`IndexerError::IndexFailed`] for every read of it, and an
/// error logged), and everything else keeps working.
pub type IndexFn = Arc<dyn Fn(&Object) -> Vec<String> + Send + Sync>;

/// What an index is built from. Two requests with the same [`IndexSpec::name`] share one index.
#[derive(Clone)]
pub enum IndexSpec {
    /// By `metadata.namespace` (cluster-scoped objects are not indexed).
    Namespace,
    /// By the value of one label; objects without the label are not indexed.
    Label(String),
    /// By the uid of each owner reference.
    OwnerUid,
    /// By a function of the caller's; `name` identifies it for sharing.
    Custom {
        /// Unique name of the function.
        name: String,
        /// The function.
        func: IndexFn,
    },
}

impl fmt::Debug for IndexSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl IndexSpec {
    /// The index's name: `namespace`, `label:<key>`, `owner-uid`, or the custom name.
    pub fn name(&self) -> String {
        match self {
            Self::Namespace => NAMESPACE_INDEX.to_owned(),
            Self::Label(key) => format!("label:{key}"),
            Self::OwnerUid => "owner-uid".to_owned(),
            Self::Custom { name, .. } => name.clone(),
        }
    }

    fn values(&self, object: &Object) -> Vec<String> {
        match self {
            Self::Namespace => object.namespace().map(str::to_owned).into_iter().collect(),
            Self::Label(key) => object.label(key).map(str::to_owned).into_iter().collect(),
            Self::OwnerUid => object
                .owner_references()
                .iter()
                .map(|o| o.uid.to_string())
                .collect(),
            Self::Custom { func, .. } => func(object),
        }
    }

    /// [`values`](Self::values), or why the index function panicked.
    fn values_caught(&self, object: &Object) -> Result<Vec<String>, String> {
        match self {
            Self::Custom { .. } => {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.values(object)))
                    .map_err(|payload| crate::panic_message(payload.as_ref()))
            }
            _ => Ok(self.values(object)),
        }
    }
}

/// Reading from an index that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IndexerError {
    /// No index of that name is registered.
    #[error("no index named {0:?}")]
    UnknownIndex(String),
    /// The index's function panicked; the index holds nothing from then on.
    #[error("the index {index:?} failed: its function panicked on {key}: {message}")]
    IndexFailed {
        /// The index.
        index: String,
        /// The object it panicked on.
        key: String,
        /// The panic's message.
        message: String,
    },
}

struct Index {
    spec: IndexSpec,
    /// How many [`IndexHandle`]s keep this index alive (the namespace index: one, forever).
    refs: usize,
    /// Index value → keys of the objects filed under it. Invariant: unless `failed`, a key
    /// is under value `v` if and only if the stored object for that key yields `v`; no set
    /// is empty. A failed index is empty.
    values: HashMap<String, HashSet<ObjectKey>>,
    /// Set when the index function panicked: what every read of the index answers.
    failed: Option<IndexerError>,
}

impl Index {
    fn new(spec: IndexSpec, refs: usize) -> Self {
        Self {
            spec,
            refs,
            values: HashMap::new(),
            failed: None,
        }
    }

    /// The values `object` is filed under; `None` once the index has failed (now, if its
    /// function panics on `object`).
    fn values_of(&mut self, key: &ObjectKey, object: &Object) -> Option<Vec<String>> {
        if self.failed.is_some() {
            return None;
        }
        match self.spec.values_caught(object) {
            Ok(values) => Some(values),
            Err(message) => {
                let failed = IndexerError::IndexFailed {
                    index: self.spec.name(),
                    key: key.to_string(),
                    message,
                };
                tracing::error!(error = %failed, "index dropped");
                self.failed = Some(failed);
                self.values.clear();
                None
            }
        }
    }

    fn insert(&mut self, key: &ObjectKey, object: &Object) {
        for value in self.values_of(key, object).unwrap_or_default() {
            self.values.entry(value).or_default().insert(key.clone());
        }
    }

    fn remove(&mut self, key: &ObjectKey, object: &Object) {
        for value in self.values_of(key, object).unwrap_or_default() {
            if let Some(keys) = self.values.get_mut(&value) {
                keys.remove(key);
                if keys.is_empty() {
                    self.values.remove(&value);
                }
            }
        }
    }
}

#[derive(Default)]
struct State {
    items: HashMap<ObjectKey, Arc<Object>>,
    indexes: HashMap<String, Index>,
}

impl State {
    fn put(&mut self, object: Arc<Object>) {
        let key = object.key().clone();
        let old = self.items.insert(key.clone(), object.clone());
        for index in self.indexes.values_mut() {
            if let Some(old) = &old {
                index.remove(&key, old);
            }
            index.insert(&key, &object);
        }
    }
}

/// A cheap, cloneable read handle on the cache.
///
/// Contract: every read sees a state the writer produced (no torn updates), and objects are
/// returned as shared `Arc`s, never copied.
#[derive(Clone)]
pub struct Indexer {
    state: Arc<RwLock<State>>,
}

impl fmt::Debug for Indexer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Indexer").field("len", &self.len()).finish()
    }
}

/// The one writer of an Indexer. Not `Clone`: the informer's delta processor owns it.
pub struct IndexerWriter {
    state: Arc<RwLock<State>>,
}

impl fmt::Debug for IndexerWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IndexerWriter")
    }
}

/// Keeps an index alive; dropping the last handle for an index removes it.
pub struct IndexHandle {
    state: Weak<RwLock<State>>,
    name: String,
}

impl fmt::Debug for IndexHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("IndexHandle").field(&self.name).finish()
    }
}

impl IndexHandle {
    /// The index's name, for [`Indexer::by_index`].
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for IndexHandle {
    fn drop(&mut self) {
        let Some(state) = self.state.upgrade() else {
            return;
        };
        let mut state = write(&state);
        if let Some(index) = state.indexes.get_mut(&self.name) {
            index.refs -= 1;
            if index.refs == 0 {
                state.indexes.remove(&self.name);
            }
        }
    }
}

// The locks below are std's: critical sections are short and never span an `.await`. Index
// functions, the only code of others that runs under them, are caught when they panic, so
// a poisoned lock means a bug of this module's own; readers then fail loudly.
fn read(state: &RwLock<State>) -> RwLockReadGuard<'_, State> {
    state
        .read()
        .expect("indexer lock poisoned by a panicking index function")
}

fn write(state: &RwLock<State>) -> RwLockWriteGuard<'_, State> {
    state
        .write()
        .expect("indexer lock poisoned by a panicking index function")
}

/// Creates an empty cache with the namespace index: the writer and a first read handle.
pub fn new_indexer() -> (IndexerWriter, Indexer) {
    let mut state = State::default();
    state.indexes.insert(
        NAMESPACE_INDEX.to_owned(),
        Index::new(IndexSpec::Namespace, 1),
    );
    let state = Arc::new(RwLock::new(state));
    (
        IndexerWriter {
            state: state.clone(),
        },
        Indexer { state },
    )
}

impl IndexerWriter {
    /// Adds or replaces the object under its key; returns the previous one.
    pub fn put(&mut self, object: Arc<Object>) -> Option<Arc<Object>> {
        let mut state = write(&self.state);
        let old = state.items.get(object.key()).cloned();
        state.put(object);
        old
    }

    /// Removes the object with this key (an [`ObjectKey`] or its text); returns it.
    pub fn delete<K>(&mut self, key: &K) -> Option<Arc<Object>>
    where
        K: Hash + Eq + ?Sized,
        ObjectKey: Borrow<K>,
    {
        let mut state = write(&self.state);
        let old = state.items.remove(key)?;
        for index in state.indexes.values_mut() {
            index.remove(old.key(), &old);
        }
        Some(old)
    }

    /// Replaces the whole contents.
    pub fn replace(&mut self, objects: impl IntoIterator<Item = Arc<Object>>) {
        let mut state = write(&self.state);
        state.items.clear();
        for index in state.indexes.values_mut() {
            index.values.clear();
        }
        for object in objects {
            state.put(object);
        }
    }

    /// A read handle on the same cache.
    pub fn reader(&self) -> Indexer {
        Indexer {
            state: self.state.clone(),
        }
    }
}

impl Indexer {
    /// The object with this key (an [`ObjectKey`] or its text).
    pub fn get<K>(&self, key: &K) -> Option<Arc<Object>>
    where
        K: Hash + Eq + ?Sized,
        ObjectKey: Borrow<K>,
    {
        read(&self.state).items.get(key).cloned()
    }

    /// Whether an object with this key (an [`ObjectKey`] or its text) is cached.
    pub fn contains<K>(&self, key: &K) -> bool
    where
        K: Hash + Eq + ?Sized,
        ObjectKey: Borrow<K>,
    {
        read(&self.state).items.contains_key(key)
    }

    /// Number of cached objects.
    pub fn len(&self) -> usize {
        read(&self.state).items.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every cached object, in no particular order.
    pub fn list(&self) -> Vec<Arc<Object>> {
        read(&self.state).items.values().cloned().collect()
    }

    /// Every key, in no particular order.
    pub fn list_keys(&self) -> Vec<ObjectKey> {
        read(&self.state).items.keys().cloned().collect()
    }

    /// The objects filed under `value` in the index `index`.
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<Object>>, IndexerError> {
        let state = read(&self.state);
        let keys = Self::keys_in(&state, index, value)?;
        Ok(keys
            .flat_map(|keys| keys.iter().filter_map(|k| state.items.get(k).cloned()))
            .collect())
    }

    /// The keys filed under `value` in the index `index`.
    pub fn index_keys(&self, index: &str, value: &str) -> Result<Vec<ObjectKey>, IndexerError> {
        let state = read(&self.state);
        let keys = Self::keys_in(&state, index, value)?;
        Ok(keys.flat_map(|keys| keys.iter().cloned()).collect())
    }

    /// Every value of the index `index` that has at least one object.
    pub fn index_values(&self, index: &str) -> Result<Vec<String>, IndexerError> {
        let state = read(&self.state);
        let index = Self::index(&state, index)?;
        Ok(index.values.keys().cloned().collect())
    }

    fn keys_in<'s>(
        state: &'s State,
        index: &str,
        value: &str,
    ) -> Result<impl Iterator<Item = &'s HashSet<ObjectKey>>, IndexerError> {
        let index = Self::index(state, index)?;
        Ok(index.values.get(value).into_iter())
    }

    /// The index named `name`, unless it is unknown or failed.
    fn index<'s>(state: &'s State, name: &str) -> Result<&'s Index, IndexerError> {
        let index = state
            .indexes
            .get(name)
            .ok_or_else(|| IndexerError::UnknownIndex(name.to_owned()))?;
        match &index.failed {
            Some(failed) => Err(failed.clone()),
            None => Ok(index),
        }
    }

    /// Names of the registered indexes.
    pub fn index_names(&self) -> Vec<String> {
        read(&self.state).indexes.keys().cloned().collect()
    }

    /// Registers an index (or takes another reference on an existing one of the same name)
    /// and builds it over the current contents. The index lives while a handle does.
    pub fn add_index(&self, spec: IndexSpec) -> IndexHandle {
        let name = spec.name();
        let mut state = write(&self.state);
        let State { items, indexes } = &mut *state;
        indexes
            .entry(name.clone())
            .and_modify(|index| index.refs += 1)
            .or_insert_with(|| {
                let mut index = Index::new(spec, 1);
                for (key, object) in items.iter() {
                    index.insert(key, object);
                }
                index
            });
        IndexHandle {
            state: Arc::downgrade(&self.state),
            name,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::ObjectDecoder;
    use crate::resource::Resource;

    fn pod(
        ns: &str,
        name: &str,
        rv: u64,
        labels: &[(&str, &str)],
        owner: Option<&str>,
    ) -> Arc<Object> {
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
}
