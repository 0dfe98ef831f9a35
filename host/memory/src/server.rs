//! The server's handle: writes, reads, counters, and the lister-watchers it hands out.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use kubeplug_informer::object::ObjectKey;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::selector::{FieldSelector, LabelSelector};
use kubeplug_informer::source::{Status, WatchEvent};

use crate::feed::MemoryListerWatcher;
use crate::incoming::{Incoming, already_exists, conflict, not_found};
use crate::render::render;
use crate::selectable::SelectableFields;
use crate::state::{Filter, State};

/// Settings of a [`MemoryServer`].
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// How many changes (of all resources together) the server keeps for watches and continued
    /// lists. A watch or a `continue` token from before the oldest kept change answers `410
    /// Gone`. Default 10,000.
    pub history: usize,
    /// How many events a watch may have queued and unread before the server drops it (the
    /// stream ends after the queued events; the Reflector re-watches). At least 1. Default
    /// 10,000.
    pub watch_buffer: usize,
    /// Whether watches honour `sendInitialEvents` (streaming lists, v1.27+). When `false`, a
    /// watch asking for them is refused with `422 Invalid`, like v1.23. Default `false`, so the
    /// Reflector takes the classic list-then-watch path unless a test asks otherwise.
    pub streaming_list: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            history: 10_000,
            watch_buffer: 10_000,
            streaming_list: false,
        }
    }
}

/// A kind of call: what the server counts, and what a fault can apply to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// [`ListerWatcher::list`](kubeplug_informer::source::ListerWatcher::list).
    List,
    /// [`ListerWatcher::watch`](kubeplug_informer::source::ListerWatcher::watch).
    Watch,
}

/// The result of a write: the object's key, its new resourceVersion, and its stored JSON
/// (without `kind`/`apiVersion`, like a list item). For a delete, the last state with the
/// deletion's version.
#[derive(Debug, Clone)]
pub struct Written {
    /// The object's key.
    pub key: ObjectKey,
    /// The version the write was assigned.
    pub resource_version: u64,
    /// The object as stored.
    pub json: Bytes,
}

/// An in-memory API server: objects, versions, history, watches and scripted faults.
///
/// Contract: every write gets the next value of one global resourceVersion counter (starting
/// after 1, like etcd) and rewrites `metadata.resourceVersion` in the stored JSON; creates
/// assign `metadata.uid` when absent and updates keep it. A list is a consistent snapshot at
/// one version, across all its pages; a watch from version `v` delivers every later change of
/// its resource that concerns its filter exactly once, in order, as long as `v` is not older
/// than the retained history, and `410 Gone` otherwise. Writes never wait for watchers. The
/// handle is cheap to clone; all clones share one server.
///
/// ```
/// use futures::StreamExt;
/// use kubeplug_memory::MemoryServer;
/// use kubeplug_informer::resource::Resource;
/// use kubeplug_informer::source::{ListRequest, ListerWatcher, WatchEvent, WatchRequest};
///
/// # futures::executor::block_on(async {
/// let server = MemoryServer::new();
/// let pods = Resource::new("", "v1", "Pod", "pods", true);
/// server.create(&pods, r#"{"metadata":{"name":"a","namespace":"ns"}}"#).unwrap();
/// let lw = server.lister_watcher(pods.clone(), None, None, None);
/// let page = lw.list(ListRequest::default()).await.unwrap();
/// assert_eq!(page.items.len(), 1);
/// let mut watch = lw
///     .watch(WatchRequest { resource_version: page.resource_version, ..Default::default() })
///     .await
///     .unwrap();
/// server.delete(&pods, &"ns/a".into()).unwrap();
/// assert!(matches!(watch.next().await, Some(Ok(WatchEvent::Deleted(_)))));
/// # });
/// ```
#[derive(Clone, Default)]
pub struct MemoryServer {
    inner: Arc<Mutex<State>>,
}

impl fmt::Debug for MemoryServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("MemoryServer")
            .field("resource_version", &state.revision)
            .field("resources", &state.tables.len())
            .finish_non_exhaustive()
    }
}

impl MemoryServer {
    /// An empty server with the default [`ServerConfig`].
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty server with `config`.
    pub fn with_config(config: ServerConfig) -> Self {
        Self {
            inner: Arc::new(Mutex::new(State::new(config))),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // No critical section leaves the state half-updated, so a poisoned lock is still sound.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Creates an object; `409 AlreadyExists` if its key is taken.
    pub fn create(&self, resource: &Resource, json: &str) -> Result<Written, Status> {
        self.write(resource, json, WriteMode::Create)
    }

    /// Replaces an object; `404 NotFound` if absent. A `metadata.resourceVersion` in `json` is
    /// a precondition, as on a real server: `409 Conflict` unless it is the current version.
    pub fn update(&self, resource: &Resource, json: &str) -> Result<Written, Status> {
        self.write(resource, json, WriteMode::Update)
    }

    /// Creates or replaces an object, ignoring any `metadata.resourceVersion` in `json`.
    pub fn apply(&self, resource: &Resource, json: &str) -> Result<Written, Status> {
        self.write(resource, json, WriteMode::Apply)
    }

    /// Deletes an object; `404 NotFound` if absent. Watchers get its last state with the
    /// deletion's version.
    pub fn delete(&self, resource: &Resource, key: &ObjectKey) -> Result<Written, Status> {
        let mut state = self.lock();
        let table = state.table(resource);
        let prev = state.tables[table]
            .objects
            .remove(key)
            .ok_or_else(|| not_found(resource, key))?;
        let rv = state.revision + 1;
        let json = render(&prev, "", Some(rv));
        state.publish(rv, table, key.clone(), Some(prev), None);
        Ok(Written {
            key: key.clone(),
            resource_version: rv,
            json,
        })
    }

    fn write(&self, resource: &Resource, json: &str, mode: WriteMode) -> Result<Written, Status> {
        // Parsing and copying the text happen before taking the lock.
        let incoming = Incoming::parse(resource, json)?;
        let mut state = self.lock();
        let table = state.table(resource);
        let key = incoming.key.clone();
        let rv = state.revision + 1;
        // One walk of the map: check, store, and keep the previous state.
        let (prev, stored) = match state.tables[table].objects.entry(key.clone()) {
            Entry::Occupied(mut entry) => {
                let old = entry.get();
                match mode {
                    WriteMode::Create => return Err(already_exists(resource, &key)),
                    WriteMode::Update
                        if incoming
                            .resource_version
                            .as_ref()
                            .is_some_and(|rv| rv.parse() != Ok(old.resource_version)) =>
                    {
                        return Err(conflict(resource, &key));
                    }
                    WriteMode::Update | WriteMode::Apply => {}
                }
                let uid = old.uid.clone();
                let stored = Arc::new(incoming.store(&uid, rv));
                (Some(entry.insert(stored.clone())), stored)
            }
            Entry::Vacant(entry) => {
                if let WriteMode::Update = mode {
                    return Err(not_found(resource, &key));
                }
                let uid: Box<str> = match &incoming.uid {
                    Some(uid) => uid.clone(),
                    None => format!("00000000-0000-4000-8000-{rv:012x}").into(),
                };
                let stored = Arc::new(incoming.store(&uid, rv));
                entry.insert(stored.clone());
                (None, stored)
            }
        };
        let json = stored.json.clone();
        state.publish(rv, table, key.clone(), prev, Some(stored));
        Ok(Written {
            key,
            resource_version: rv,
            json,
        })
    }

    /// The current state of `resource`: each object's JSON as a list item (no `kind`).
    pub fn snapshot(&self, resource: &Resource) -> BTreeMap<ObjectKey, Bytes> {
        let state = self.lock();
        state
            .find(resource)
            .map(|table| {
                table
                    .objects
                    .iter()
                    .map(|(key, object)| (key.clone(), object.json.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// One object's current JSON as a list item, if it exists.
    pub fn get(&self, resource: &Resource, key: &ObjectKey) -> Option<Bytes> {
        let state = self.lock();
        let object = state.find(resource)?.objects.get(key)?;
        Some(object.json.clone())
    }

    /// The last resourceVersion assigned (1 before the first write).
    pub fn current_resource_version(&self) -> u64 {
        self.lock().revision
    }

    /// Sends a BOOKMARK with the current resourceVersion to every open watch that asked for
    /// bookmarks.
    pub fn bookmark(&self) {
        let mut state = self.lock();
        let rv = state.revision.to_string();
        for table in &mut state.tables {
            table.watchers.retain(|w| {
                if !w.bookmarks {
                    return !w.tx.is_closed();
                }
                let bookmark = WatchEvent::Bookmark {
                    resource_version: rv.clone(),
                    initial_events_end: false,
                };
                w.tx.try_send(bookmark).is_ok()
            });
        }
    }

    /// How many list calls were made (failed ones included).
    pub fn list_calls(&self) -> u64 {
        self.lock().list_calls
    }

    /// How many watch calls were made (failed ones included).
    pub fn watch_calls(&self) -> u64 {
        self.lock().watch_calls
    }

    /// How many watches are open: opened, not ended, and whose stream was not dropped.
    pub fn open_watches(&self) -> usize {
        let mut state = self.lock();
        state
            .tables
            .iter_mut()
            .map(|table| {
                table.watchers.retain(|w| !w.tx.is_closed());
                table.watchers.len()
            })
            .sum()
    }

    /// A [`ListerWatcher`] for `resource`, narrowed to `namespace` (all when `None` or empty)
    /// and the selectors.
    pub fn lister_watcher(
        &self,
        resource: Resource,
        namespace: Option<String>,
        label_selector: Option<LabelSelector>,
        field_selector: Option<FieldSelector>,
    ) -> MemoryListerWatcher {
        let table = self.lock().table(&resource);
        let selectable = SelectableFields::of(&resource);
        MemoryListerWatcher {
            server: self.clone(),
            table,
            resource,
            filter: Arc::new(Filter {
                namespace: namespace.filter(|ns| !ns.is_empty()),
                labels: label_selector.filter(|s| !s.is_empty()),
                fields: field_selector.filter(|s| !s.is_empty()),
                selectable,
            }),
            metadata_only: false,
        }
    }

    /// Counts a call and takes its pending stall.
    pub(crate) fn begin(&self, call: Call) -> Option<Duration> {
        let mut state = self.lock();
        match call {
            Call::List => state.list_calls += 1,
            Call::Watch => state.watch_calls += 1,
        }
        state.faults.take_stall(call)
    }
}

#[derive(Debug, Clone, Copy)]
enum WriteMode {
    Create,
    Update,
    Apply,
}
