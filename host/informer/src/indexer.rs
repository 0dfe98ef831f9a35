//! The Indexer: the informer's local cache, keyed by `namespace/name`, with named indexes.
//!
//! One [`IndexerWriter`] (owned by the informer's delta processor) changes the objects; any
//! number of [`Indexer`] handles read them and get `Arc<Object>`s. Indexes can be added and
//! removed while the informer runs: a new index is built over the current contents, and an
//! index is shared, reference-counted by its name, between everyone who asked for it.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};

use kubeplug_json::path::FieldPath;

use crate::object::{Object, ObjectKey};
use crate::selected::SelectedPaths;
use crate::{KeyMap, KeySet};

mod path;

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
    /// By the values a field path selects in the object's JSON: each string, number (its
    /// text as sent) and bool; objects, arrays, nulls and missing fields add nothing, and
    /// an object whose JSON is malformed along the path is filed under no value. All of an
    /// Indexer's path indexes are evaluated in one walk of each object, and an update
    /// compares the new values with those kept for the key instead of walking the old
    /// object again.
    Path(FieldPath),
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
    /// The index's name: `namespace`, `label:<key>`, `owner-uid`, `path:<path>`, or the
    /// custom name.
    pub fn name(&self) -> String {
        match self {
            Self::Namespace => NAMESPACE_INDEX.to_owned(),
            Self::Label(key) => format!("label:{key}"),
            Self::OwnerUid => "owner-uid".to_owned(),
            Self::Path(path) => format!("path:{path}"),
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
                .map(|o| o.uid().to_owned())
                .collect(),
            Self::Path(path) => path::values_of(path, object),
            Self::Custom { func, .. } => func(object),
        }
    }

    /// Whether two versions of one object (the same key) are filed under the same values,
    /// when that can be told without computing them: most updates leave the namespace,
    /// labels and owners alone, and computing the values allocates. `false` means "compute
    /// them"; for `path` indexes the Indexer compares kept values instead.
    fn files_alike(&self, old: &Object, new: &Object) -> bool {
        match self {
            // The key holds the namespace.
            Self::Namespace => true,
            Self::Label(key) => old.label(key) == new.label(key),
            Self::OwnerUid => {
                let (old, new) = (old.owner_references(), new.owner_references());
                old.len() == new.len() && old.iter().zip(new).all(|(a, b)| a.uid() == b.uid())
            }
            Self::Path(_) | Self::Custom { .. } => false,
        }
    }

    /// [`values`](Self::values) of the object `key`, or [`IndexerError::IndexFailed`] when
    /// the index function panics on it.
    fn values_caught(&self, key: &ObjectKey, object: &Object) -> Result<Vec<String>, IndexerError> {
        match self {
            Self::Custom { .. } => {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.values(object)))
                    .map_err(|payload| IndexerError::IndexFailed {
                        index: self.name(),
                        key: key.to_string(),
                        message: crate::panic_message(payload.as_ref()),
                    })
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
    values: KeyMap<String, KeySet<ObjectKey>>,
    /// Set when the index function panicked: what every read of the index answers.
    failed: Option<IndexerError>,
}

impl Index {
    fn new(spec: IndexSpec, refs: usize) -> Self {
        Self {
            spec,
            refs,
            values: KeyMap::default(),
            failed: None,
        }
    }

    fn is_path(&self) -> bool {
        matches!(self.spec, IndexSpec::Path(_))
    }

    fn file(&mut self, key: &ObjectKey, values: Vec<String>) {
        for value in values {
            self.values.entry(value).or_default().insert(key.clone());
        }
    }

    fn unfile(&mut self, key: &ObjectKey, values: &[String]) {
        for value in values {
            if let Some(keys) = self.values.get_mut(value) {
                keys.remove(key);
                if keys.is_empty() {
                    self.values.remove(value);
                }
            }
        }
    }

    /// The values `object` is filed under; `None` once the index has failed (now, if its
    /// function panics on `object`).
    fn values_of(&mut self, key: &ObjectKey, object: &Object) -> Option<Vec<String>> {
        if self.failed.is_some() {
            return None;
        }
        match self.spec.values_caught(key, object) {
            Ok(values) => Some(values),
            Err(failed) => {
                tracing::error!(error = %failed, "index dropped");
                self.failed = Some(failed);
                self.values.clear();
                None
            }
        }
    }

    fn insert(&mut self, key: &ObjectKey, object: &Object) {
        let values = self.values_of(key, object).unwrap_or_default();
        self.file(key, values);
    }

    fn remove(&mut self, key: &ObjectKey, object: &Object) {
        let values = self.values_of(key, object).unwrap_or_default();
        self.unfile(key, &values);
    }
}

struct State {
    items: KeyMap<ObjectKey, Arc<Object>>,
    indexes: HashMap<String, Index>,
    /// Registered projection paths by their text, with how many handles keep each.
    projections: HashMap<String, (FieldPath, usize)>,
    /// The paths of the `path` indexes among `indexes` and the `projections`, walked
    /// together in each object stored; rebuilt when one comes or goes.
    paths: Arc<SelectedPaths>,
}

impl State {
    fn put(&mut self, object: Arc<Object>) {
        let key = object.key().clone();
        let old = self.items.insert(key.clone(), object.clone());
        for index in self.indexes.values_mut().filter(|index| !index.is_path()) {
            if let Some(old) = &old {
                if index.spec.files_alike(old, &object) {
                    continue;
                }
                index.remove(&key, old);
            }
            index.insert(&key, &object);
        }
        if self.paths.is_empty() {
            return;
        }
        let (selected, roots) = self.paths.select(object.json(), old.as_deref());
        object
            .selected_cell()
            .keep(&self.paths, object.json(), &selected, roots);
        for (number, (name, walked)) in self.paths.index_names().iter().zip(&selected).enumerate() {
            // The old object's values as it kept them (an update that leaves them alone, the
            // usual case, costs a comparison of their text), or `None` to walk it again.
            let old = old.as_deref().map(|old| {
                (
                    old,
                    old.selected_cell().kept(old.json(), &self.paths, number),
                )
            });
            if let Some((_, Some(kept))) = &old
                && kept.is(walked)
            {
                continue;
            }
            let Some(index) = self.indexes.get_mut(name) else {
                continue;
            };
            match old {
                Some((_, Some(kept))) => {
                    index.unfile(&key, &path::index_values(kept.into_values().as_deref()));
                }
                Some((old, None)) => index.remove(&key, old),
                None => {}
            }
            index.file(&key, path::index_values(walked.as_deref().ok()));
        }
    }

    fn delete(&mut self, old: &Object) {
        for (number, name) in self.paths.index_names().iter().enumerate() {
            let Some(index) = self.indexes.get_mut(name) else {
                continue;
            };
            match old.selected_cell().kept(old.json(), &self.paths, number) {
                Some(kept) => {
                    index.unfile(
                        old.key(),
                        &path::index_values(kept.into_values().as_deref()),
                    );
                }
                None => index.remove(old.key(), old),
            }
        }
        for index in self.indexes.values_mut().filter(|index| !index.is_path()) {
            index.remove(old.key(), old);
        }
    }

    /// Rebuilds [`paths`](Self::paths) after a `path` index or a projection came or went.
    fn collect_paths(&mut self) {
        let indexes = self
            .indexes
            .iter()
            .filter_map(|(name, index)| match &index.spec {
                IndexSpec::Path(path) => Some((name.as_str(), path)),
                _ => None,
            });
        let projections = self.projections.values().map(|(path, _)| path);
        self.paths = Arc::new(SelectedPaths::new(indexes, projections));
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
                let removed = state.indexes.remove(&self.name);
                if removed.is_some_and(|index| index.is_path()) {
                    state.collect_paths();
                }
            }
        }
    }
}

/// Keeps a projection path registered; dropping the last handle for a path unregisters it.
pub struct ProjectionHandle {
    state: Weak<RwLock<State>>,
    path: String,
}

impl fmt::Debug for ProjectionHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ProjectionHandle").field(&self.path).finish()
    }
}

impl Drop for ProjectionHandle {
    fn drop(&mut self) {
        let Some(state) = self.state.upgrade() else {
            return;
        };
        let mut state = write(&state);
        if let Some((_, refs)) = state.projections.get_mut(&self.path) {
            *refs -= 1;
            if *refs == 0 {
                state.projections.remove(&self.path);
                state.collect_paths();
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
    let mut state = State {
        items: KeyMap::default(),
        indexes: HashMap::new(),
        projections: HashMap::new(),
        paths: Arc::default(),
    };
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
        state.delete(&old);
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
    ) -> Result<impl Iterator<Item = &'s KeySet<ObjectKey>>, IndexerError> {
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
    ///
    /// The build runs off the cache's lock, over a snapshot of its objects (shared `Arc`s),
    /// so that the writer, the informer's delta processor, never waits for an index function
    /// over the whole cache; under the write lock, the index is only caught up with the
    /// objects the writer changed meanwhile (found by pointer) and swapped in.
    pub fn add_index(&self, spec: IndexSpec) -> IndexHandle {
        let name = spec.name();
        let handle = IndexHandle {
            state: Arc::downgrade(&self.state),
            name: name.clone(),
        };
        if let Some(index) = write(&self.state).indexes.get_mut(&name) {
            index.refs += 1;
            return handle;
        }
        let snapshot: KeyMap<ObjectKey, Arc<Object>> = read(&self.state).items.clone();
        let mut built = Index::new(spec, 1);
        for (key, object) in &snapshot {
            built.insert(key, object);
        }
        let mut state = write(&self.state);
        let State { items, indexes, .. } = &mut *state;
        if let Some(index) = indexes.get_mut(&name) {
            // Another caller added it meanwhile: share theirs.
            index.refs += 1;
            return handle;
        }
        for (key, then) in &snapshot {
            match items.get(key) {
                Some(now) if Arc::ptr_eq(now, then) => {}
                Some(now) => {
                    built.remove(key, then);
                    built.insert(key, now);
                }
                None => built.remove(key, then),
            }
        }
        for (key, now) in items.iter() {
            if !snapshot.contains_key(key) {
                built.insert(key, now);
            }
        }
        let is_path = built.is_path();
        indexes.insert(name, built);
        if is_path {
            state.collect_paths();
        }
        handle
    }

    /// Registers a projection path (or takes another reference on it): from now on, the
    /// values it selects in each object stored are kept with the object
    /// ([`Object::selected`]), in the same walk as the `path` indexes'. Objects stored
    /// before keep none for it. The registration lives while a handle does. It walks no
    /// object: the write lock is held only to record the path.
    pub fn add_projection(&self, path: &FieldPath) -> ProjectionHandle {
        let mut state = write(&self.state);
        let (_, refs) = state
            .projections
            .entry(path.as_str().to_owned())
            .or_insert_with(|| (path.clone(), 0));
        *refs += 1;
        if *refs == 1 {
            state.collect_paths();
        }
        ProjectionHandle {
            state: Arc::downgrade(&self.state),
            path: path.as_str().to_owned(),
        }
    }
}

#[cfg(test)]
mod tests;
