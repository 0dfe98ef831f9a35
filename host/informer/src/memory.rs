//! An in-memory Kubernetes-like API server for tests and benchmarks, with fault injection.
//!
//! [`MemoryServer`] holds objects of any number of [`Resource`]s as JSON text, assigns one
//! global, increasing resourceVersion to every write (like etcd's revision), and keeps a
//! bounded history of changes so that watches and continued lists can be served from an older
//! version, and versions older than the history are `410 Gone`. [`MemoryListerWatcher`] is its
//! [`ListerWatcher`]: what the Reflector sees instead of a real API server. [`Fault`]s script
//! the failures a real server and network produce.
//!
//! Objects are never parsed into a tree: a write walks the top level and `metadata` with
//! [`ObjectScanner`], copies the rest as text, and splices in `metadata.uid` and
//! `metadata.resourceVersion`.

use std::cell::OnceCell;
use std::cmp::Ordering as KeyOrder;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, VecDeque};
use std::fmt::{self, Write as _};
use std::iter::Peekable;
use std::ops::{Bound, Range};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::time::Sleep;

use crate::json::{ObjectScanner, ScanError, push_json_string};
use crate::object::ObjectKey;
use crate::resource::Resource;
use crate::selector::{FieldSelector, LabelSelector, Labels};
use crate::source::{
    ListPage, ListRequest, ListerWatcher, SourceError, Status, WatchEvent, WatchRequest,
    WatchStream,
};

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

/// Which kind of call a [`Fault`] applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// [`ListerWatcher::list`].
    List,
    /// [`ListerWatcher::watch`].
    Watch,
}

/// A malformed `ADDED` event, as a broken server or proxy might send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Garbage {
    /// Bytes that are not JSON at all.
    NotJson,
    /// A valid object cut in half.
    Truncated,
    /// A well-formed object whose `kind` is not the watched resource's (`Not<Kind>`).
    WrongKind,
    /// A well-formed object of the right kind without `metadata.name`.
    MissingName,
}

/// A failure to inject with [`MemoryServer::inject`].
///
/// Faults that say "now" act when injected; the others wait for the calls they name.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Now: every open watch ends as if its connection dropped. Events queued but not yet read
    /// are lost, and the streams end without an error event.
    EndWatches,
    /// The next watch that opens ends (connection drop) after delivering this many events.
    EndNextWatchAfter(usize),
    /// The next `times` calls of `call` fail with `status` (and `Retry-After: retry_after`).
    /// Replaces a pending failure of the same call.
    Fail {
        /// Which calls fail.
        call: Call,
        /// How many of them.
        times: usize,
        /// What the server answers, e.g. `500 InternalError` or `429 TooManyRequests`.
        status: Status,
        /// The `Retry-After` the server asks for.
        retry_after: Option<Duration>,
    },
    /// The next call of `call` waits `delay` (tokio time) before it is answered. Replaces a
    /// pending stall of the same call.
    Stall {
        /// Which call waits.
        call: Call,
        /// How long.
        delay: Duration,
    },
    /// The next watch that opens delivers this garbage `ADDED` event first, then behaves
    /// normally. Several pending garbage events all go to that watch, in injection order.
    /// (To hit a running informer, follow with [`Fault::EndWatches`] so that it re-watches.)
    Garbage(Garbage),
    /// Now: drop all retained history, as etcd compaction does. A watch or `continue` token
    /// from a version older than the current one answers `410 Gone`.
    Compact,
    /// Now: the server restarts. All watches end as with [`Fault::EndWatches`]; the history is
    /// kept or dropped (as with [`Fault::Compact`]); objects and versions survive, and later
    /// versions keep increasing.
    Restart {
        /// Keep the history (a watch cache warmed from etcd) or not (a cold cache).
        keep_history: bool,
    },
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
/// use kubeplug_informer::memory::MemoryServer;
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

/// Everything the server knows. A `std` mutex guards it: every critical section is a short
/// piece of synchronous bookkeeping that never awaits, and writes stay plain functions.
struct State {
    config: ServerConfig,
    /// The last resourceVersion assigned.
    revision: u64,
    /// Changes with a version `<= compacted` are forgotten: watching or continuing a list from
    /// an older version answers 410. Always `<= revision`.
    compacted: u64,
    /// Every change with a version `> compacted`, oldest first, at most `config.history`.
    history: VecDeque<Change>,
    /// One per resource ever used, each resource once; indexes never change. (A handful of
    /// resources: a linear search beats hashing five strings.)
    tables: Vec<Table>,
    faults: PendingFaults,
    list_calls: u64,
    watch_calls: u64,
}

impl Default for State {
    fn default() -> Self {
        Self::new(ServerConfig::default())
    }
}

/// The objects and open watches of one resource.
struct Table {
    resource: Resource,
    /// `{"kind":…,"apiVersion":…` without the closing brace: what a watch event puts before
    /// the members of a stored object.
    watch_prefix: Arc<str>,
    objects: BTreeMap<ObjectKey, Arc<Stored>>,
    watchers: Vec<Watcher>,
}

/// One object as stored.
struct Stored {
    /// Compact JSON without `kind` and `apiVersion` (as a list item); `metadata` ends with the
    /// `uid` and `resourceVersion` members.
    json: Bytes,
    /// Where the digits of `metadata.resourceVersion` are in `json`.
    rv_digits: Range<usize>,
    /// The same version as a number.
    resource_version: u64,
    uid: Box<str>,
    labels: LabelSet,
}

/// `metadata.labels`, sorted by key, keys unique.
#[derive(Default)]
struct LabelSet(Box<[(Box<str>, Box<str>)]>);

impl Labels for LabelSet {
    fn label(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.0[i].1)
    }
}

/// One write, as the history keeps it.
#[derive(Clone)]
struct Change {
    /// The version the write was assigned.
    rv: u64,
    /// Index of the resource's table.
    table: usize,
    key: ObjectKey,
    /// The state before; `None` for a create.
    prev: Option<Arc<Stored>>,
    /// The state after; `None` for a delete.
    next: Option<Arc<Stored>>,
}

/// An open watch, as the server sees it.
struct Watcher {
    filter: Arc<Filter>,
    /// Whether the client asked for BOOKMARK events.
    bookmarks: bool,
    /// Overflow policy: bounded by `config.watch_buffer`; a watcher whose buffer is full is
    /// dropped (its stream ends after the events already queued), so writers never wait.
    tx: mpsc::Sender<WatchEvent>,
    /// Set when the server cuts the connection: the stream ends at once, queued events unread.
    cut: Arc<AtomicBool>,
}

/// What a lister-watcher is narrowed to. Empty selectors are stored as `None`.
#[derive(Debug)]
struct Filter {
    namespace: Option<String>,
    labels: Option<LabelSelector>,
    fields: Option<FieldSelector>,
}

impl Filter {
    fn matches(&self, key: &ObjectKey, object: &Stored) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| key.namespace() == Some(ns))
            && self.fields.as_ref().is_none_or(|f| f.matches_key(key))
            && self
                .labels
                .as_ref()
                .is_none_or(|l| l.matches(&object.labels))
    }
}

/// Faults waiting for the calls they apply to.
#[derive(Default)]
struct PendingFaults {
    fail_lists: Option<Failure>,
    fail_watches: Option<Failure>,
    stall_list: Option<Duration>,
    stall_watch: Option<Duration>,
    garbage: Vec<Garbage>,
    cut_next_watch_after: Option<usize>,
}

/// A pending [`Fault::Fail`]. `remaining` is at least 1.
struct Failure {
    remaining: usize,
    status: Status,
    retry_after: Option<Duration>,
}

impl PendingFaults {
    fn failure(&mut self, call: Call) -> &mut Option<Failure> {
        match call {
            Call::List => &mut self.fail_lists,
            Call::Watch => &mut self.fail_watches,
        }
    }

    fn stall(&mut self, call: Call) -> &mut Option<Duration> {
        match call {
            Call::List => &mut self.stall_list,
            Call::Watch => &mut self.stall_watch,
        }
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

    fn lock(&self) -> MutexGuard<'_, State> {
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

    /// Injects a fault; see each [`Fault`] variant for what it does and when.
    pub fn inject(&self, fault: Fault) {
        let mut state = self.lock();
        match fault {
            Fault::EndWatches => state.end_watches(),
            Fault::EndNextWatchAfter(events) => state.faults.cut_next_watch_after = Some(events),
            Fault::Fail {
                call,
                times,
                status,
                retry_after,
            } => {
                *state.faults.failure(call) = (times > 0).then_some(Failure {
                    remaining: times,
                    status,
                    retry_after,
                });
            }
            Fault::Stall { call, delay } => *state.faults.stall(call) = Some(delay),
            Fault::Garbage(garbage) => state.faults.garbage.push(garbage),
            Fault::Compact => state.compact(),
            Fault::Restart { keep_history } => {
                state.end_watches();
                if !keep_history {
                    state.compact();
                }
            }
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
        MemoryListerWatcher {
            server: self.clone(),
            table,
            resource,
            filter: Arc::new(Filter {
                namespace: namespace.filter(|ns| !ns.is_empty()),
                labels: label_selector.filter(|s| !s.is_empty()),
                fields: field_selector.filter(|s| !s.is_empty()),
            }),
        }
    }

    /// Counts a call and takes its pending stall.
    fn begin(&self, call: Call) -> Option<Duration> {
        let mut state = self.lock();
        match call {
            Call::List => state.list_calls += 1,
            Call::Watch => state.watch_calls += 1,
        }
        state.faults.stall(call).take()
    }
}

#[derive(Debug, Clone, Copy)]
enum WriteMode {
    Create,
    Update,
    Apply,
}

impl State {
    fn new(config: ServerConfig) -> Self {
        Self {
            config,
            revision: 1,
            compacted: 1,
            history: VecDeque::new(),
            tables: Vec::new(),
            faults: PendingFaults::default(),
            list_calls: 0,
            watch_calls: 0,
        }
    }

    /// The index of the table of `resource`, created on first use.
    fn table(&mut self, resource: &Resource) -> usize {
        if let Some(table) = self.tables.iter().position(|t| t.resource == *resource) {
            return table;
        }
        self.tables.push(Table::new(resource.clone()));
        self.tables.len() - 1
    }

    fn find(&self, resource: &Resource) -> Option<&Table> {
        self.tables.iter().find(|t| t.resource == *resource)
    }

    /// Publishes a write with version `rv` (the next one) that the caller already applied to
    /// the table's objects: tells the watchers, remembers it in the history.
    fn publish(
        &mut self,
        rv: u64,
        table: usize,
        key: ObjectKey,
        prev: Option<Arc<Stored>>,
        next: Option<Arc<Stored>>,
    ) {
        debug_assert_eq!(rv, self.revision + 1);
        self.revision = rv;
        let t = &mut self.tables[table];
        let change = Change {
            rv,
            table,
            key,
            prev,
            next,
        };
        if !t.watchers.is_empty() {
            let render = Render::new(&change, &t.watch_prefix);
            t.watchers.retain(|w| match render.event_for(&w.filter) {
                Some(event) => w.tx.try_send(event).is_ok(),
                None => !w.tx.is_closed(),
            });
        }
        if self.config.history == 0 {
            self.compacted = rv;
            return;
        }
        if self.history.len() == self.config.history
            && let Some(oldest) = self.history.pop_front()
        {
            self.compacted = oldest.rv;
        }
        self.history.push_back(change);
    }

    fn compact(&mut self) {
        self.history.clear();
        self.compacted = self.revision;
    }

    fn end_watches(&mut self) {
        for table in &mut self.tables {
            for watcher in table.watchers.drain(..) {
                // Dropping the sender wakes a stream waiting for events; the flag makes it
                // end without reading the ones already queued.
                watcher.cut.store(true, Ordering::Release);
            }
        }
    }

    /// Fails the call if a [`Fault::Fail`] is pending for it.
    fn take_failure(&mut self, call: Call) -> Result<(), SourceError> {
        let slot = self.faults.failure(call);
        let Some(failure) = slot else {
            return Ok(());
        };
        let error = SourceError::Status {
            status: failure.status.clone(),
            retry_after: failure.retry_after,
        };
        failure.remaining -= 1;
        if failure.remaining == 0 {
            *slot = None;
        }
        Err(error)
    }

    fn list(
        &mut self,
        table: usize,
        filter: &Filter,
        request: &ListRequest,
    ) -> Result<ListPage, SourceError> {
        self.take_failure(Call::List)?;
        let current = self.revision;
        if let Some(text) = request.resource_version.as_deref() {
            // "Not older than": any version up to the current one is served the current state.
            parse_version(text, current)?;
        }
        let (at, after) = match request.continue_token.as_deref().filter(|t| !t.is_empty()) {
            None => (current, None),
            Some(token) => {
                let (at, after) = token
                    .split_once(':')
                    .and_then(|(rv, key)| Some((rv.parse::<u64>().ok()?, key)))
                    .filter(|(rv, _)| *rv <= current)
                    .ok_or_else(|| {
                        SourceError::status(bad_request(format!(
                            "invalid continue token {token:?}"
                        )))
                    })?;
                if at < self.compacted {
                    return Err(SourceError::status(Status::gone(
                        "The provided continue parameter is too old to display a consistent \
                         list result. You can start a new list without the continue parameter.",
                    )));
                }
                (at, Some(after))
            }
        };
        let limit = match request.limit {
            Some(limit) if limit > 0 => usize::try_from(limit).unwrap_or(usize::MAX),
            _ => usize::MAX,
        };
        let (items, last) = self.page(table, filter, at, after, limit);
        Ok(ListPage {
            items,
            resource_version: at.to_string(),
            continue_token: last.map(|key| format!("{at}:{key}")),
        })
    }

    /// Up to `limit` objects of `table` matching `filter` as they were at version `at`, with
    /// keys after `after`, in key order; and the last key when more matching objects follow.
    fn page(
        &self,
        table: usize,
        filter: &Filter,
        at: u64,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<Bytes>, Option<ObjectKey>) {
        let namespace_prefix = filter.namespace.as_ref().map(|ns| format!("{ns}/"));
        let lower = match (after, namespace_prefix.as_deref()) {
            (Some(after), Some(prefix)) if after < prefix => Bound::Included(prefix),
            (Some(after), _) => Bound::Excluded(after),
            (None, Some(prefix)) => Bound::Included(prefix),
            (None, None) => Bound::Unbounded,
        };
        let in_range = |key: &str| match lower {
            Bound::Included(bound) => key >= bound,
            Bound::Excluded(bound) => key > bound,
            Bound::Unbounded => true,
        };
        // Keys written since `at` take their state from before the oldest such write.
        let mut past: BTreeMap<&ObjectKey, Option<&Arc<Stored>>> = BTreeMap::new();
        let since = self.history.partition_point(|c| c.rv <= at);
        for change in self.history.range(since..) {
            if change.table == table && in_range(change.key.as_str()) {
                past.entry(&change.key).or_insert(change.prev.as_ref());
            }
        }
        let live = self.tables[table]
            .objects
            .range::<str, _>((lower, Bound::Unbounded))
            .map(|(key, object)| (key, Some(object)));
        let mut items = Vec::new();
        let mut last = None;
        for (key, object) in merge_by_key(live.peekable(), past.into_iter().peekable()) {
            if let Some(prefix) = &namespace_prefix
                && !key.as_str().starts_with(prefix.as_str())
            {
                break;
            }
            let Some(object) = object.filter(|o| filter.matches(key, o)) else {
                continue;
            };
            if items.len() == limit {
                return (items, last);
            }
            items.push(object.json.clone());
            last = Some(key.clone());
        }
        (items, None)
    }

    fn watch(
        &mut self,
        table: usize,
        filter: &Arc<Filter>,
        request: &WatchRequest,
    ) -> Result<Feed, SourceError> {
        self.take_failure(Call::Watch)?;
        if request.send_initial_events && !self.config.streaming_list {
            return Err(SourceError::status(Status::new(
                422,
                "Invalid",
                "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: \
                 resourceVersionMatch is forbidden for watch (this server has no streaming lists)",
            )));
        }
        let current = self.revision;
        let from = parse_version(&request.resource_version, current)?;
        let t = &mut self.tables[table];
        let mut feed = Feed {
            pending: VecDeque::new(),
            filter: filter.clone(),
            watch_prefix: t.watch_prefix.clone(),
            live: None,
            cut: Arc::default(),
            deadline: request
                .timeout
                .map(|timeout| Box::pin(tokio::time::sleep(timeout))),
            budget: None,
        };
        // `sendInitialEvents` serves the current state whatever the version ("not older than").
        let from = from.filter(|_| !request.send_initial_events);
        if let Some(from) = from
            && from < self.compacted
        {
            let message = format!("too old resource version: {from} ({})", self.compacted);
            feed.pending
                .push_back(Pending::Ready(WatchEvent::Error(Status::gone(message))));
            return Ok(feed);
        }
        for garbage in self.faults.garbage.drain(..) {
            let bytes = garbage_event(garbage, &t.resource, current);
            feed.pending
                .push_back(Pending::Ready(WatchEvent::Added(bytes)));
        }
        match from {
            Some(from) => {
                let since = self.history.partition_point(|c| c.rv <= from);
                let replay = self.history.range(since..).filter(|c| c.table == table);
                feed.pending.extend(replay.cloned().map(Pending::Replay));
            }
            None => {
                let current_state = t.objects.iter().filter(|(key, o)| filter.matches(key, o));
                feed.pending
                    .extend(current_state.map(|(_, o)| Pending::Current(o.clone())));
                if request.send_initial_events && request.bookmarks {
                    feed.pending.push_back(Pending::Ready(WatchEvent::Bookmark {
                        resource_version: current.to_string(),
                        initial_events_end: true,
                    }));
                }
            }
        }
        let (tx, rx) = mpsc::channel(self.config.watch_buffer.max(1));
        t.watchers.push(Watcher {
            filter: filter.clone(),
            bookmarks: request.bookmarks,
            tx,
            cut: feed.cut.clone(),
        });
        feed.live = Some(rx);
        feed.budget = self.faults.cut_next_watch_after.take();
        Ok(feed)
    }
}

/// Parses a request's resourceVersion: `None` for "" and "0" (any/most recent), `400` if it
/// is not a number, and `504 Timeout` if it is in the future, as a real server answers after
/// waiting for it in vain.
fn parse_version(text: &str, current: u64) -> Result<Option<u64>, SourceError> {
    if text.is_empty() || text == "0" {
        return Ok(None);
    }
    let rv: u64 = text.parse().map_err(|_| {
        SourceError::status(bad_request(format!("invalid resourceVersion {text:?}")))
    })?;
    if rv > current {
        return Err(SourceError::status(Status::new(
            504,
            "Timeout",
            format!("Too large resource version: {rv}, current: {current}"),
        )));
    }
    Ok(Some(rv))
}

/// Merges live objects with the past states of changed keys; a past state wins on equal keys.
fn merge_by_key<'a, V>(
    mut live: Peekable<impl Iterator<Item = (&'a ObjectKey, V)>>,
    mut past: Peekable<impl Iterator<Item = (&'a ObjectKey, V)>>,
) -> impl Iterator<Item = (&'a ObjectKey, V)> {
    std::iter::from_fn(move || {
        let order = match (live.peek(), past.peek()) {
            (Some((l, _)), Some((p, _))) => l.cmp(p),
            (Some(_), None) => KeyOrder::Less,
            (None, _) => KeyOrder::Greater,
        };
        match order {
            KeyOrder::Less => live.next(),
            KeyOrder::Equal => {
                live.next();
                past.next()
            }
            KeyOrder::Greater => past.next(),
        }
    })
}

impl Table {
    fn new(resource: Resource) -> Self {
        let mut prefix = String::from("{\"kind\":");
        push_json_string(&mut prefix, &resource.kind);
        prefix.push_str(",\"apiVersion\":");
        push_json_string(&mut prefix, &resource.api_version());
        Self {
            resource,
            watch_prefix: prefix.into(),
            objects: BTreeMap::new(),
            watchers: Vec::new(),
        }
    }
}

/// Renders one change as the watch event a given filter sees, each form at most once.
struct Render<'a> {
    change: &'a Change,
    watch_prefix: &'a str,
    /// `change.next` as a watch event object.
    next: OnceCell<Bytes>,
    /// `change.prev` with the change's version: the object of a DELETED event.
    gone: OnceCell<Bytes>,
}

impl<'a> Render<'a> {
    fn new(change: &'a Change, watch_prefix: &'a str) -> Self {
        Self {
            change,
            watch_prefix,
            next: OnceCell::new(),
            gone: OnceCell::new(),
        }
    }

    /// Like the API server's watch cache: an object that starts matching is ADDED, one that
    /// stops matching is DELETED (its previous state with the new version).
    fn event_for(&self, filter: &Filter) -> Option<WatchEvent> {
        let change = self.change;
        let prev = change
            .prev
            .as_deref()
            .filter(|o| filter.matches(&change.key, o));
        let next = change
            .next
            .as_deref()
            .filter(|o| filter.matches(&change.key, o));
        match (prev, next) {
            (was, Some(next)) => {
                let json = self
                    .next
                    .get_or_init(|| render(next, self.watch_prefix, None))
                    .clone();
                Some(match was {
                    Some(_) => WatchEvent::Modified(json),
                    None => WatchEvent::Added(json),
                })
            }
            (Some(prev), None) => {
                let json = self
                    .gone
                    .get_or_init(|| render(prev, self.watch_prefix, Some(change.rv)))
                    .clone();
                Some(WatchEvent::Deleted(json))
            }
            (None, None) => None,
        }
    }
}

/// A stored object as JSON: as stored when `watch_prefix` is empty, else with `kind` and
/// `apiVersion` first (a watch event object); with its resourceVersion replaced by `rv`.
fn render(object: &Stored, watch_prefix: &str, rv: Option<u64>) -> Bytes {
    let json = &object.json[..];
    let mut out = Vec::with_capacity(watch_prefix.len() + json.len() + 8);
    let body = if watch_prefix.is_empty() {
        0
    } else {
        out.extend_from_slice(watch_prefix.as_bytes());
        out.push(b',');
        1
    };
    match rv {
        None => out.extend_from_slice(&json[body..]),
        Some(rv) => {
            out.extend_from_slice(&json[body..object.rv_digits.start]);
            out.extend_from_slice(rv.to_string().as_bytes());
            out.extend_from_slice(&json[object.rv_digits.end..]);
        }
    }
    Bytes::from(out)
}

/// The bytes of a [`Garbage`] event for `resource` at version `rv`.
fn garbage_event(garbage: Garbage, resource: &Resource, rv: u64) -> Bytes {
    let object = |kind: &str, name: Option<&str>| {
        let mut out = String::from("{\"kind\":");
        push_json_string(&mut out, kind);
        out.push_str(",\"apiVersion\":");
        push_json_string(&mut out, &resource.api_version());
        out.push_str(",\"metadata\":{");
        if let Some(name) = name {
            out.push_str("\"name\":");
            push_json_string(&mut out, name);
            out.push(',');
        }
        if resource.namespaced {
            out.push_str("\"namespace\":\"garbage\",");
        }
        write!(out, "\"resourceVersion\":\"{rv}\"}}}}").expect("writing to a String");
        out
    };
    match garbage {
        Garbage::NotJson => Bytes::from_static(b"<html>502 Bad Gateway</html>"),
        Garbage::Truncated => {
            let whole = object(&resource.kind, Some("garbage"));
            Bytes::copy_from_slice(&whole.as_bytes()[..whole.len() / 2])
        }
        Garbage::WrongKind => {
            Bytes::from(object(&format!("Not{}", resource.kind), Some("garbage")))
        }
        Garbage::MissingName => Bytes::from(object(&resource.kind, None)),
    }
}

/// A watch stream: events decided when it opened, then live ones.
struct Feed {
    /// Delivered before anything from `live`: a 410, garbage, the initial state or the
    /// history replay. Rendered lazily, outside the server's lock.
    pending: VecDeque<Pending>,
    filter: Arc<Filter>,
    watch_prefix: Arc<str>,
    /// Live events; `None` for a stream that only delivers `pending` (a 410) or has ended.
    live: Option<mpsc::Receiver<WatchEvent>>,
    /// Set by the server to cut the connection.
    cut: Arc<AtomicBool>,
    /// The watch's `timeout`.
    deadline: Option<Pin<Box<Sleep>>>,
    /// Events left before a [`Fault::EndNextWatchAfter`] cuts this stream.
    budget: Option<usize>,
}

enum Pending {
    Ready(WatchEvent),
    /// An object of the initial state, as ADDED.
    Current(Arc<Stored>),
    /// A change from the history, as this watch's filter sees it.
    Replay(Change),
}

impl Feed {
    fn end(&mut self) -> Poll<Option<Result<WatchEvent, SourceError>>> {
        self.pending.clear();
        self.live = None;
        self.deadline = None;
        Poll::Ready(None)
    }

    fn deliver(&mut self, event: WatchEvent) -> Poll<Option<Result<WatchEvent, SourceError>>> {
        if let Some(budget) = &mut self.budget {
            *budget -= 1;
        }
        Poll::Ready(Some(Ok(event)))
    }
}

impl Stream for Feed {
    type Item = Result<WatchEvent, SourceError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let timed_out = this
            .deadline
            .as_mut()
            .is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready());
        if timed_out || this.budget == Some(0) || this.cut.load(Ordering::Acquire) {
            return this.end();
        }
        while let Some(pending) = this.pending.pop_front() {
            let event = match pending {
                Pending::Ready(event) => Some(event),
                Pending::Current(object) => {
                    Some(WatchEvent::Added(render(&object, &this.watch_prefix, None)))
                }
                Pending::Replay(change) => {
                    Render::new(&change, &this.watch_prefix).event_for(&this.filter)
                }
            };
            if let Some(event) = event {
                return this.deliver(event);
            }
        }
        let Some(live) = &mut this.live else {
            return this.end();
        };
        match live.poll_recv(cx) {
            Poll::Ready(Some(event)) => this.deliver(event),
            Poll::Ready(None) => this.end(),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A [`ListerWatcher`] over one resource of a [`MemoryServer`], narrowed to a namespace and
/// selectors.
///
/// Contract: as [`ListerWatcher`], with the server's semantics: lists are consistent snapshots
/// paged by an opaque `continue` token (`410` once its version leaves the history); a list's
/// `resource_version` means "not older than" and the current state is served; a watch from
/// `""` or `"0"` starts with the current state as ADDED events; a watch from an older version
/// than the history yields one `ERROR 410` event and ends; selector transitions are ADDED and
/// DELETED events; `timeout` ends the stream (tokio time); `bookmarks` makes the stream carry
/// [`MemoryServer::bookmark`]s; `send_initial_events` is honoured when the server's
/// [`ServerConfig::streaming_list`] is set and refused with `422` otherwise. Injected faults
/// apply to every lister-watcher of the server.
#[derive(Clone)]
pub struct MemoryListerWatcher {
    server: MemoryServer,
    /// Index of `resource`'s table in the server.
    table: usize,
    resource: Resource,
    filter: Arc<Filter>,
}

impl fmt::Debug for MemoryListerWatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryListerWatcher")
            .field("resource", &self.resource)
            .field("filter", &self.filter)
            .finish_non_exhaustive()
    }
}

impl ListerWatcher for MemoryListerWatcher {
    fn list(&self, request: ListRequest) -> BoxFuture<'_, Result<ListPage, SourceError>> {
        Box::pin(async move {
            if let Some(delay) = self.server.begin(Call::List) {
                tokio::time::sleep(delay).await;
            }
            self.server.lock().list(self.table, &self.filter, &request)
        })
    }

    fn watch(&self, request: WatchRequest) -> BoxFuture<'_, Result<WatchStream, SourceError>> {
        Box::pin(async move {
            if let Some(delay) = self.server.begin(Call::Watch) {
                tokio::time::sleep(delay).await;
            }
            let feed = self
                .server
                .lock()
                .watch(self.table, &self.filter, &request)?;
            Ok(feed.boxed())
        })
    }

    fn supports_streaming_list(&self) -> bool {
        self.server.lock().config.streaming_list
    }
}

/// An object as a client sent it, rendered for storage except for the members the server
/// assigns, which [`Incoming::store`] splices in.
struct Incoming {
    key: ObjectKey,
    labels: LabelSet,
    /// `metadata.uid` as sent.
    uid: Option<Box<str>>,
    /// `metadata.resourceVersion` as sent: an update's precondition.
    resource_version: Option<String>,
    /// Compact JSON without `kind`, `apiVersion`, `metadata.uid` and
    /// `metadata.resourceVersion`.
    text: String,
    /// Where the server's members go: the closing brace of `metadata`.
    insert_at: usize,
    /// Whether `metadata` has members before `insert_at`.
    metadata_has_members: bool,
}

/// The `metadata` members a write reads.
#[derive(Default)]
struct Metadata {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: LabelSet,
}

impl Incoming {
    fn parse(resource: &Resource, json: &str) -> Result<Self, Status> {
        let not_json =
            |e: ScanError| bad_request(format!("{resource}: the object is not valid JSON: {e}"));
        let mut text = String::with_capacity(json.len() + 16);
        text.push('{');
        let mut metadata = None;
        let mut insert_at = 0;
        let mut metadata_has_members = false;
        let mut top = ObjectScanner::new(json).map_err(not_json)?;
        while let Some(field) = top.next_key().map_err(not_json)? {
            match &*field {
                "metadata" => {
                    if metadata.is_some() {
                        return Err(bad_request(format!("{resource}: metadata appears twice")));
                    }
                    text.push_str("\"metadata\":{");
                    let mut members = top.enter_object().map_err(not_json)?;
                    let mut meta = Metadata::default();
                    while let Some((name, range)) = members.next_member().map_err(not_json)? {
                        let raw = &json[range];
                        let slot = match &*name {
                            "uid" => {
                                meta.uid = string_member(resource, "metadata.uid", raw)?;
                                continue;
                            }
                            "resourceVersion" => {
                                meta.resource_version =
                                    string_member(resource, "metadata.resourceVersion", raw)?;
                                continue;
                            }
                            "labels" => {
                                meta.labels = parse_labels(resource, raw)?;
                                None
                            }
                            "name" => Some((&mut meta.name, "metadata.name")),
                            "namespace" => Some((&mut meta.namespace, "metadata.namespace")),
                            _ => None,
                        };
                        if let Some((slot, field)) = slot {
                            *slot = string_member(resource, field, raw)?;
                        }
                        push_json_string(&mut text, &name);
                        text.push(':');
                        text.push_str(raw);
                        text.push(',');
                        metadata_has_members = true;
                    }
                    top.leave_object(members);
                    if metadata_has_members {
                        text.pop();
                    }
                    insert_at = text.len();
                    text.push_str("},");
                    metadata = Some(meta);
                }
                "kind" | "apiVersion" => {
                    let raw = &json[top.skip_value().map_err(not_json)?];
                    let expected = if field == "kind" {
                        resource.kind.clone()
                    } else {
                        resource.api_version()
                    };
                    if let Some(found) = string_member(resource, &field, raw)?
                        && found != expected
                    {
                        return Err(bad_request(format!(
                            "{resource}: the object's {field} is {found:?}, expected {expected:?}"
                        )));
                    }
                }
                _ => {
                    let raw = &json[top.skip_value().map_err(not_json)?];
                    push_json_string(&mut text, &field);
                    text.push(':');
                    text.push_str(raw);
                    text.push(',');
                }
            }
        }
        text.pop();
        text.push('}');
        let meta = metadata.unwrap_or_default();
        let key = object_key(resource, meta.name.as_deref(), meta.namespace.as_deref())?;
        Ok(Self {
            key,
            labels: meta.labels,
            uid: meta.uid.map(Into::into),
            resource_version: meta.resource_version.filter(|rv| !rv.is_empty()),
            text,
            insert_at,
            metadata_has_members,
        })
    }

    /// The stored object, with `uid` and version `rv`.
    fn store(self, uid: &str, rv: u64) -> Stored {
        let mut out = String::with_capacity(self.text.len() + uid.len() + 48);
        out.push_str(&self.text[..self.insert_at]);
        if self.metadata_has_members {
            out.push(',');
        }
        out.push_str("\"uid\":");
        push_json_string(&mut out, uid);
        out.push_str(",\"resourceVersion\":\"");
        let start = out.len();
        write!(out, "{rv}").expect("writing to a String");
        let rv_digits = start..out.len();
        out.push('"');
        out.push_str(&self.text[self.insert_at..]);
        Stored {
            json: Bytes::from(out),
            rv_digits,
            resource_version: rv,
            uid: uid.into(),
            labels: self.labels,
        }
    }
}

/// The key of an object, checking name and namespace against the resource's scope.
fn object_key(
    resource: &Resource,
    name: Option<&str>,
    namespace: Option<&str>,
) -> Result<ObjectKey, Status> {
    let name = name
        .filter(|n| !n.is_empty())
        .ok_or_else(|| invalid(format!("{resource}: metadata.name: Required value")))?;
    let namespace = namespace.filter(|ns| !ns.is_empty());
    if name.contains('/') || namespace.is_some_and(|ns| ns.contains('/')) {
        return Err(invalid(format!(
            "{resource} {name:?}: metadata.name and metadata.namespace may not contain '/'"
        )));
    }
    match (resource.namespaced, namespace) {
        (true, None) => Err(invalid(format!(
            "{resource} {name:?}: metadata.namespace: Required value"
        ))),
        (false, Some(ns)) => Err(invalid(format!(
            "{resource} {name:?}: metadata.namespace: Forbidden: {ns:?} given for a \
             cluster-scoped resource"
        ))),
        (_, namespace) => Ok(ObjectKey::new(namespace, name)),
    }
}

/// The value of a JSON string member; `None` for `null`; `400` for anything else.
fn string_member(resource: &Resource, field: &str, raw: &str) -> Result<Option<String>, Status> {
    if raw == "null" {
        return Ok(None);
    }
    if let Some(inner) = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"'))
        && !inner.bytes().any(|b| b == b'\\' || b == b'"' || b < 0x20)
    {
        return Ok(Some(inner.to_owned()));
    }
    serde_json::from_str(raw)
        .map(Some)
        .map_err(|_| bad_request(format!("{resource}: {field} must be a string, not {raw}")))
}

fn parse_labels(resource: &Resource, raw: &str) -> Result<LabelSet, Status> {
    if raw == "null" {
        return Ok(LabelSet::default());
    }
    let malformed = |what: String| bad_request(format!("{resource}: metadata.labels: {what}"));
    let mut labels = Vec::new();
    let mut members = ObjectScanner::new(raw).map_err(|e| malformed(e.to_string()))?;
    while let Some((key, range)) = members
        .next_member()
        .map_err(|e| malformed(e.to_string()))?
    {
        let value = string_member(resource, "metadata.labels", &raw[range])?
            .ok_or_else(|| malformed(format!("label {key:?} is null")))?;
        labels.push((Box::<str>::from(&*key), value.into_boxed_str()));
    }
    labels.sort_by(|a, b| a.0.cmp(&b.0));
    labels.dedup_by(|later, earlier| later.0 == earlier.0);
    Ok(LabelSet(labels.into_boxed_slice()))
}

fn bad_request(message: String) -> Status {
    Status::new(400, "BadRequest", message)
}

fn invalid(message: String) -> Status {
    Status::new(422, "Invalid", message)
}

fn not_found(resource: &Resource, key: &ObjectKey) -> Status {
    Status::new(
        404,
        "NotFound",
        format!("{} {:?} not found", resource.plural, key.as_str()),
    )
}

fn already_exists(resource: &Resource, key: &ObjectKey) -> Status {
    Status::new(
        409,
        "AlreadyExists",
        format!("{} {:?} already exists", resource.plural, key.as_str()),
    )
}

fn conflict(resource: &Resource, key: &ObjectKey) -> Status {
    Status::new(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on {} {:?}: the object has been modified; please \
             apply your changes to the latest version and try again",
            resource.plural,
            key.as_str()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::{DecodeError, ObjectDecoder};
    use futures::FutureExt;
    use futures::executor::block_on;
    use proptest::prelude::*;
    use serde_json::Value;
    use tokio::time::Instant;

    fn pods() -> Resource {
        Resource::new("", "v1", "Pod", "pods", true)
    }

    fn pod(namespace: &str, name: &str, team: &str, data: &str) -> String {
        serde_json::json!({
            "metadata": {"name": name, "namespace": namespace, "labels": {"team": team}},
            "spec": {"data": data},
        })
        .to_string()
    }

    fn lister(
        server: &MemoryServer,
        namespace: Option<&str>,
        labels: Option<&str>,
        fields: Option<&str>,
    ) -> MemoryListerWatcher {
        server.lister_watcher(
            pods(),
            namespace.map(str::to_owned),
            labels.map(|s| LabelSelector::parse(s).unwrap()),
            fields.map(|s| FieldSelector::parse(s).unwrap()),
        )
    }

    fn json(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).unwrap()
    }

    fn key_of(value: &Value) -> String {
        let metadata = &value["metadata"];
        let name = metadata["name"].as_str().unwrap_or("?");
        ObjectKey::new(metadata["namespace"].as_str(), name).to_string()
    }

    /// An event as `TYPE key resourceVersion`.
    fn describe(event: &WatchEvent) -> String {
        let object = |kind: &str, bytes: &Bytes| match serde_json::from_slice::<Value>(bytes) {
            Ok(value) => {
                let rv = value["metadata"]["resourceVersion"].as_str().unwrap_or("?");
                format!("{kind} {} {rv}", key_of(&value))
            }
            Err(_) => format!("{kind} <not json>"),
        };
        match event {
            WatchEvent::Added(bytes) => object("ADDED", bytes),
            WatchEvent::Modified(bytes) => object("MODIFIED", bytes),
            WatchEvent::Deleted(bytes) => object("DELETED", bytes),
            WatchEvent::Bookmark {
                resource_version,
                initial_events_end,
            } => {
                let end = if *initial_events_end { " end" } else { "" };
                format!("BOOKMARK {resource_version}{end}")
            }
            WatchEvent::Error(status) => format!("ERROR {}", status.code),
        }
    }

    /// Every event available without waiting; `END` when the stream ended.
    fn drain(stream: &mut WatchStream) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            match stream.next().now_or_never() {
                Some(Some(Ok(event))) => out.push(describe(&event)),
                Some(Some(Err(error))) => out.push(format!("ERR {error}")),
                Some(None) => {
                    out.push("END".to_owned());
                    return out;
                }
                None => return out,
            }
        }
    }

    fn watch_from(lw: &MemoryListerWatcher, rv: u64) -> WatchStream {
        let request = WatchRequest {
            resource_version: rv.to_string(),
            ..WatchRequest::default()
        };
        block_on(lw.watch(request)).unwrap()
    }

    fn list_pages(lw: &MemoryListerWatcher, limit: u32) -> Vec<ListPage> {
        let mut pages = Vec::new();
        let mut continue_token = None;
        loop {
            let request = ListRequest {
                limit: Some(limit),
                continue_token: continue_token.take(),
                resource_version: None,
            };
            let page = block_on(lw.list(request)).unwrap();
            continue_token = page.continue_token.clone();
            pages.push(page);
            if continue_token.is_none() {
                return pages;
            }
        }
    }

    fn status_code(result: Result<Written, Status>) -> (u16, String) {
        let status = result.unwrap_err();
        (status.code, status.reason)
    }

    #[test]
    fn writes_assign_versions_and_uids_and_store_list_items() {
        let server = MemoryServer::new();
        let pods = pods();
        assert_eq!(server.current_resource_version(), 1);
        let created = server
            .create(
                &pods,
                r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"n","resourceVersion":"999","labels":{"x":"1"}},"spec":{"k":[1, 2]}}"#,
            )
            .unwrap();
        assert_eq!(created.resource_version, 2);
        assert_eq!(created.key.as_str(), "n/a");
        let value = json(&created.json);
        assert_eq!(value["metadata"]["resourceVersion"], "2");
        assert_eq!(value["spec"]["k"], serde_json::json!([1, 2]));
        assert_eq!(value["metadata"]["labels"]["x"], "1");
        assert!(value.get("kind").is_none() && value.get("apiVersion").is_none());
        let uid = value["metadata"]["uid"].as_str().unwrap().to_owned();
        assert!(!uid.is_empty());

        let again = server.create(&pods, &pod("n", "a", "t", "d"));
        assert_eq!(status_code(again), (409, "AlreadyExists".into()));
        let updated = server
            .update(
                &pods,
                r#"{"metadata":{"name":"a","namespace":"n","resourceVersion":"2"},"spec":{}}"#,
            )
            .unwrap();
        assert_eq!(updated.resource_version, 3);
        assert_eq!(json(&updated.json)["metadata"]["uid"], uid.as_str());
        let stale = server.update(
            &pods,
            r#"{"metadata":{"name":"a","namespace":"n","resourceVersion":"2"}}"#,
        );
        assert_eq!(status_code(stale), (409, "Conflict".into()));
        let missing = server.update(&pods, &pod("n", "nope", "t", "d"));
        assert_eq!(status_code(missing), (404, "NotFound".into()));
        let applied = server
            .apply(
                &pods,
                r#"{"metadata":{"name":"a","namespace":"n","resourceVersion":"2"}}"#,
            )
            .unwrap();
        assert_eq!(
            applied.resource_version, 4,
            "apply ignores the stale version"
        );
        assert_eq!(json(&applied.json)["metadata"]["uid"], uid.as_str());
        let own_uid = server
            .apply(
                &pods,
                r#"{"metadata":{"name":"b","namespace":"n","uid":"my-uid"}}"#,
            )
            .unwrap();
        assert_eq!(json(&own_uid.json)["metadata"]["uid"], "my-uid");

        let deleted = server.delete(&pods, &"n/a".into()).unwrap();
        assert_eq!(deleted.resource_version, 6);
        assert_eq!(json(&deleted.json)["metadata"]["resourceVersion"], "6");
        assert_eq!(server.get(&pods, &"n/a".into()), None);
        let gone = server.delete(&pods, &"n/a".into());
        assert_eq!(status_code(gone), (404, "NotFound".into()));
        assert_eq!(server.current_resource_version(), 6);
        assert_eq!(
            server
                .snapshot(&pods)
                .keys()
                .map(ObjectKey::as_str)
                .collect::<Vec<_>>(),
            ["n/b"]
        );
    }

    #[test]
    fn bad_writes_are_refused_with_the_servers_codes() {
        let server = MemoryServer::new();
        let pods = pods();
        let nodes = Resource::new("", "v1", "Node", "nodes", false);
        for (resource, text, code) in [
            (&pods, "not json", 400),
            (
                &pods,
                r#"{"metadata":{"name":"a","namespace":"n"},"x":[}"#,
                400,
            ),
            (
                &pods,
                r#"{"kind":"Node","metadata":{"name":"a","namespace":"n"}}"#,
                400,
            ),
            (
                &pods,
                r#"{"apiVersion":"v2","metadata":{"name":"a","namespace":"n"}}"#,
                400,
            ),
            (
                &pods,
                r#"{"metadata":{"name":"a","namespace":"n","labels":{"x":1}}}"#,
                400,
            ),
            (&pods, r#"{"metadata":{"name":7,"namespace":"n"}}"#, 400),
            (&pods, r#"{"spec":{}}"#, 422),
            (&pods, r#"{"metadata":{"name":"","namespace":"n"}}"#, 422),
            (&pods, r#"{"metadata":{"name":"a"}}"#, 422),
            (&pods, r#"{"metadata":{"name":"a/b","namespace":"n"}}"#, 422),
            (&nodes, r#"{"metadata":{"name":"a","namespace":"n"}}"#, 422),
        ] {
            let status = server.create(resource, text).unwrap_err();
            assert_eq!(status.code, code, "{text}: {status}");
            assert!(status.message.contains(&resource.to_string()), "{status}");
        }
        assert_eq!(server.current_resource_version(), 1, "nothing was written");
        let node = server
            .create(&nodes, r#"{"metadata":{"name":"n1"}}"#)
            .unwrap();
        assert_eq!(node.key.as_str(), "n1");
    }

    #[test]
    fn escapes_and_white_space_survive_the_rewrite() {
        let server = MemoryServer::new();
        let text = r#" { "metadata" : { "name" : "a", "namespace":"n",
            "annotations": {"q\"uote": "v\\n"} } , "data": {"k\u00e9": "\u2603", "n": [ 1 , 2 ]} } "#;
        let written = server
            .create(
                &Resource::new("", "v1", "ConfigMap", "configmaps", true),
                text,
            )
            .unwrap();
        let value = json(&written.json);
        assert_eq!(value["metadata"]["annotations"]["q\"uote"], "v\\n");
        assert_eq!(value["data"]["ké"], "☃");
        assert_eq!(value["data"]["n"], serde_json::json!([1, 2]));
    }

    #[test]
    fn pages_share_one_version_and_add_up_to_the_full_list() {
        let server = MemoryServer::new();
        let pods = pods();
        for i in 0..10 {
            server
                .create(&pods, &pod("a", &format!("p{i}"), "t", "v0"))
                .unwrap();
        }
        for name in ["x", "y"] {
            server.create(&pods, &pod("b", name, "t", "v0")).unwrap();
        }
        let all = lister(&server, None, None, None);
        let full = block_on(all.list(ListRequest::default())).unwrap();
        assert_eq!(full.items.len(), 12);
        assert_eq!(full.continue_token, None);

        let first = block_on(all.list(ListRequest {
            limit: Some(3),
            ..ListRequest::default()
        }))
        .unwrap();
        // Writes after the first page, before and after the keys it returned.
        server.update(&pods, &pod("a", "p5", "t", "v1")).unwrap();
        server.delete(&pods, &"a/p7".into()).unwrap();
        server.create(&pods, &pod("a", "p55", "t", "v1")).unwrap();
        server.update(&pods, &pod("a", "p0", "t", "v1")).unwrap();
        server.delete(&pods, &"b/x".into()).unwrap();
        let mut pages = vec![first];
        while let Some(token) = pages.last().unwrap().continue_token.clone() {
            let page = block_on(all.list(ListRequest {
                limit: Some(3),
                continue_token: Some(token),
                resource_version: None,
            }))
            .unwrap();
            pages.push(page);
        }
        assert_eq!(pages.len(), 4);
        assert!(
            pages
                .iter()
                .all(|p| p.resource_version == full.resource_version)
        );
        let paged: Vec<Bytes> = pages.iter().flat_map(|p| p.items.clone()).collect();
        assert_eq!(
            paged, full.items,
            "pages show the state at the list's version"
        );

        let fresh = block_on(all.list(ListRequest::default())).unwrap();
        let keys: Vec<String> = fresh.items.iter().map(|i| key_of(&json(i))).collect();
        assert!(keys.contains(&"a/p55".to_owned()) && !keys.contains(&"a/p7".to_owned()));
        assert_eq!(
            fresh.resource_version,
            server.current_resource_version().to_string()
        );

        // A namespace and a selector narrow the pages too.
        server.apply(&pods, &pod("a", "p1", "other", "v1")).unwrap();
        let narrowed = lister(&server, Some("a"), Some("team=t"), None);
        let pages = list_pages(&narrowed, 2);
        let keys: Vec<String> = pages
            .iter()
            .flat_map(|p| p.items.iter().map(|i| key_of(&json(i))))
            .collect();
        assert_eq!(
            keys,
            [
                "a/p0", "a/p2", "a/p3", "a/p4", "a/p5", "a/p55", "a/p6", "a/p8", "a/p9"
            ]
        );
        assert_eq!(pages.len(), 5, "no empty last page");
    }

    #[test]
    fn a_watch_from_a_lists_version_sees_exactly_the_later_changes() {
        let server = MemoryServer::new();
        let pods = pods();
        server.create(&pods, &pod("n", "a", "t", "0")).unwrap();
        server.create(&pods, &pod("n", "b", "t", "0")).unwrap();
        let lw = lister(&server, None, None, None);
        let list = block_on(lw.list(ListRequest::default())).unwrap();
        assert_eq!(list.resource_version, "3");
        server.create(&pods, &pod("n", "c", "t", "0")).unwrap();
        server.update(&pods, &pod("n", "a", "t", "1")).unwrap();
        server.delete(&pods, &"n/b".into()).unwrap();

        let mut watch = watch_from(&lw, 3);
        assert_eq!(
            drain(&mut watch),
            ["ADDED n/c 4", "MODIFIED n/a 5", "DELETED n/b 6"]
        );
        server.update(&pods, &pod("n", "c", "t", "1")).unwrap();
        assert_eq!(drain(&mut watch), ["MODIFIED n/c 7"]);
        assert_eq!(drain(&mut watch), Vec::<String>::new());

        let mut later = watch_from(&lw, 5);
        assert_eq!(drain(&mut later), ["DELETED n/b 6", "MODIFIED n/c 7"]);
        let mut now = watch_from(&lw, 7);
        assert_eq!(drain(&mut now), Vec::<String>::new());
        assert_eq!(server.open_watches(), 3);
        drop((watch, later));
        assert_eq!(server.open_watches(), 1);

        let other = Resource::new("apps", "v1", "Deployment", "deployments", true);
        server
            .create(&other, r#"{"metadata":{"name":"d","namespace":"n"}}"#)
            .unwrap();
        assert_eq!(
            drain(&mut now),
            Vec::<String>::new(),
            "other resources are not seen"
        );
        let event = block_on(lw.watch(WatchRequest {
            resource_version: "7".into(),
            ..WatchRequest::default()
        }))
        .unwrap()
        .next()
        .now_or_never();
        assert!(
            event.is_none(),
            "the Deployment's version is not a Pod event"
        );
    }

    #[test]
    fn versions_older_than_the_history_are_gone() {
        let server = MemoryServer::with_config(ServerConfig {
            history: 3,
            ..ServerConfig::default()
        });
        let pods = pods();
        for i in 0..5 {
            server
                .create(&pods, &pod("n", &format!("p{i}"), "t", ""))
                .unwrap();
        }
        // Versions 2..=6 were written; the history keeps 4, 5 and 6.
        let lw = lister(&server, None, None, None);
        assert_eq!(
            drain(&mut watch_from(&lw, 3)),
            ["ADDED n/p2 4", "ADDED n/p3 5", "ADDED n/p4 6"]
        );
        assert_eq!(drain(&mut watch_from(&lw, 2)), ["ERROR 410", "END"]);

        let first = block_on(lw.list(ListRequest {
            limit: Some(2),
            ..ListRequest::default()
        }))
        .unwrap();
        let token = first.continue_token.clone().unwrap();
        // Compaction at the list's own version would leave it consistent; move on first.
        server.create(&pods, &pod("n", "p5", "t", "")).unwrap();
        server.inject(Fault::Compact);
        let error = block_on(lw.list(ListRequest {
            limit: Some(2),
            continue_token: Some(token),
            resource_version: None,
        }))
        .unwrap_err();
        assert!(error.is_gone(), "{error}");
        assert_eq!(drain(&mut watch_from(&lw, 6)), ["ERROR 410", "END"]);
        assert_eq!(drain(&mut watch_from(&lw, 7)), Vec::<String>::new());

        // Writes to another resource push a version out of the shared history too.
        let other = Resource::new("", "v1", "ConfigMap", "configmaps", true);
        let mut watch = watch_from(&lw, 7);
        for i in 0..4 {
            server
                .create(
                    &other,
                    &format!(r#"{{"metadata":{{"name":"c{i}","namespace":"n"}}}}"#),
                )
                .unwrap();
        }
        assert_eq!(
            drain(&mut watch),
            Vec::<String>::new(),
            "an open watch is not affected"
        );
        assert_eq!(drain(&mut watch_from(&lw, 7)), ["ERROR 410", "END"]);
    }

    #[test]
    fn requests_for_future_or_malformed_versions_fail() {
        let server = MemoryServer::new();
        let lw = lister(&server, None, None, None);
        let watch = |rv: &str| {
            block_on(lw.watch(WatchRequest {
                resource_version: rv.to_owned(),
                ..WatchRequest::default()
            }))
        };
        let code = |r: Result<WatchStream, SourceError>| match r {
            Err(SourceError::Status { status, .. }) => status.code,
            other => panic!("expected an error, got {:?}", other.is_ok()),
        };
        assert_eq!(code(watch("9")), 504);
        assert_eq!(code(watch("x")), 400);
        let list = block_on(lw.list(ListRequest {
            continue_token: Some("garbage".into()),
            ..ListRequest::default()
        }));
        assert!(matches!(list, Err(SourceError::Status { status, .. }) if status.code == 400));
    }

    #[test]
    fn selector_transitions_are_added_and_deleted() {
        let server = MemoryServer::new();
        let pods = pods();
        let start = server.current_resource_version();
        let team_a = lister(&server, Some("n"), Some("team=a"), None);
        let mut watch = watch_from(&team_a, start);
        let named_x = lister(&server, None, None, Some("metadata.name=x"));
        let mut x_watch = watch_from(&named_x, start);

        server.create(&pods, &pod("n", "x", "b", "0")).unwrap(); // 2: not team a
        server.update(&pods, &pod("n", "x", "a", "0")).unwrap(); // 3: joins
        server.update(&pods, &pod("n", "x", "a", "1")).unwrap(); // 4: changes
        server.update(&pods, &pod("n", "x", "b", "1")).unwrap(); // 5: leaves
        server.delete(&pods, &"n/x".into()).unwrap(); // 6: not team a any more
        server.create(&pods, &pod("m", "y", "a", "0")).unwrap(); // 7: other namespace
        server.create(&pods, &pod("n", "z", "a", "0")).unwrap(); // 8
        server.delete(&pods, &"n/z".into()).unwrap(); // 9
        let expected = [
            "ADDED n/x 3",
            "MODIFIED n/x 4",
            "DELETED n/x 5",
            "ADDED n/z 8",
            "DELETED n/z 9",
        ];
        assert_eq!(drain(&mut watch), expected);
        assert_eq!(
            drain(&mut watch_from(&team_a, start)),
            expected,
            "a replay from the history applies the same rules"
        );
        assert_eq!(
            drain(&mut x_watch),
            [
                "ADDED n/x 2",
                "MODIFIED n/x 3",
                "MODIFIED n/x 4",
                "MODIFIED n/x 5",
                "DELETED n/x 6"
            ]
        );

        // The DELETED of an object leaving the selector is its last matching state.
        let mut watch = watch_from(&team_a, 4);
        let Some(Some(Ok(WatchEvent::Deleted(bytes)))) = watch.next().now_or_never() else {
            panic!("expected DELETED");
        };
        let value = json(&bytes);
        assert_eq!(value["metadata"]["labels"]["team"], "a");
        assert_eq!(value["metadata"]["resourceVersion"], "5");
        assert_eq!(value["kind"], "Pod");
    }

    #[test]
    fn end_watches_drops_connections_and_unread_events() {
        let server = MemoryServer::new();
        let pods = pods();
        let lw = lister(&server, None, None, None);
        let mut watch = watch_from(&lw, 1);
        server.create(&pods, &pod("n", "a", "t", "")).unwrap();
        server.create(&pods, &pod("n", "b", "t", "")).unwrap();
        assert_eq!(server.open_watches(), 1);
        server.inject(Fault::EndWatches);
        assert_eq!(server.open_watches(), 0);
        assert_eq!(
            drain(&mut watch),
            ["END"],
            "queued events are lost with the connection"
        );
        assert_eq!(
            drain(&mut watch_from(&lw, 1)),
            ["ADDED n/a 2", "ADDED n/b 3"]
        );
    }

    #[tokio::test]
    async fn end_watches_wakes_a_waiting_stream() {
        let server = MemoryServer::new();
        let lw = lister(&server, None, None, None);
        let mut watch = lw
            .watch(WatchRequest {
                resource_version: "1".into(),
                ..WatchRequest::default()
            })
            .await
            .unwrap();
        let waiting = tokio::spawn(async move { watch.next().await.is_none() });
        tokio::task::yield_now().await;
        server.inject(Fault::EndWatches);
        assert!(waiting.await.unwrap(), "the stream ended");
    }

    #[test]
    fn end_next_watch_after_cuts_one_stream_mid_way() {
        let server = MemoryServer::new();
        let pods = pods();
        for name in ["a", "b", "c"] {
            server.create(&pods, &pod("n", name, "t", "")).unwrap();
        }
        let lw = lister(&server, None, None, None);
        server.inject(Fault::EndNextWatchAfter(2));
        assert_eq!(
            drain(&mut watch_from(&lw, 1)),
            ["ADDED n/a 2", "ADDED n/b 3", "END"]
        );
        let mut next = watch_from(&lw, 3);
        assert_eq!(drain(&mut next), ["ADDED n/c 4"]);
        server.create(&pods, &pod("n", "d", "t", "")).unwrap();
        assert_eq!(drain(&mut next), ["ADDED n/d 5"], "only one watch is cut");
    }

    #[test]
    fn calls_fail_as_scripted_and_are_counted() {
        let server = MemoryServer::new();
        let lw = lister(&server, None, None, None);
        server.inject(Fault::Fail {
            call: Call::List,
            times: 2,
            status: Status::new(500, "InternalError", "etcd is down"),
            retry_after: None,
        });
        server.inject(Fault::Fail {
            call: Call::Watch,
            times: 1,
            status: Status::new(429, "TooManyRequests", "slow down"),
            retry_after: Some(Duration::from_secs(3)),
        });
        for _ in 0..2 {
            let error = block_on(lw.list(ListRequest::default())).unwrap_err();
            assert_eq!(error.retry_after(), None);
            assert!(
                matches!(&error, SourceError::Status { status, .. } if status.code == 500),
                "{error}"
            );
        }
        block_on(lw.list(ListRequest::default())).unwrap();
        let request = WatchRequest {
            resource_version: "1".into(),
            ..WatchRequest::default()
        };
        let Err(error) = block_on(lw.watch(request.clone())) else {
            panic!("the watch should fail");
        };
        assert_eq!(error.retry_after(), Some(Duration::from_secs(3)));
        let _watch = block_on(lw.watch(request)).unwrap();
        assert_eq!((server.list_calls(), server.watch_calls()), (3, 2));
    }

    #[test]
    fn garbage_events_come_first_on_the_next_watch() {
        let server = MemoryServer::new();
        let pods = pods();
        server.create(&pods, &pod("n", "a", "t", "")).unwrap();
        for garbage in [
            Garbage::NotJson,
            Garbage::Truncated,
            Garbage::WrongKind,
            Garbage::MissingName,
        ] {
            server.inject(Fault::Garbage(garbage));
        }
        let lw = lister(&server, None, None, None);
        let decoder = ObjectDecoder::new(pods.clone());
        let mut watch = watch_from(&lw, 1);
        let mut decoded = Vec::new();
        while let Some(Some(Ok(WatchEvent::Added(bytes)))) = watch.next().now_or_never() {
            decoded.push(decoder.decode(&bytes));
        }
        assert_eq!(decoded.len(), 5);
        assert!(matches!(decoded[0], Err(DecodeError::NotJson(_))));
        assert!(matches!(decoded[1], Err(DecodeError::NotJson(_))));
        let Err(DecodeError::WrongKind { found, .. }) = &decoded[2] else {
            panic!("expected the wrong kind, got {:?}", decoded[2]);
        };
        assert_eq!(found, "v1/NotPod");
        assert_eq!(decoded[3], Err(DecodeError::MissingName));
        assert_eq!(decoded[4].as_ref().unwrap().key().as_str(), "n/a");
        assert_eq!(
            drain(&mut watch_from(&lw, 1)),
            ["ADDED n/a 2"],
            "garbage is sent once"
        );
    }

    #[test]
    fn restart_ends_watches_and_keeps_or_drops_the_history() {
        let server = MemoryServer::new();
        let pods = pods();
        let lw = lister(&server, None, None, None);
        server.create(&pods, &pod("n", "a", "t", "")).unwrap();
        let mut watch = watch_from(&lw, 1);
        server.inject(Fault::Restart { keep_history: true });
        assert_eq!(drain(&mut watch), ["END"]);
        assert_eq!(drain(&mut watch_from(&lw, 1)), ["ADDED n/a 2"]);

        let mut watch = watch_from(&lw, 2);
        server.inject(Fault::Restart {
            keep_history: false,
        });
        assert_eq!(drain(&mut watch), ["END"]);
        assert_eq!(drain(&mut watch_from(&lw, 1)), ["ERROR 410", "END"]);
        let written = server.create(&pods, &pod("n", "b", "t", "")).unwrap();
        assert_eq!(
            written.resource_version, 3,
            "versions continue after a restart"
        );
        assert_eq!(server.snapshot(&pods).len(), 2, "objects survive a restart");
    }

    #[tokio::test(start_paused = true)]
    async fn stalls_delay_the_answer_in_tokio_time() {
        let server = MemoryServer::new();
        let lw = lister(&server, None, None, None);
        server.inject(Fault::Stall {
            call: Call::List,
            delay: Duration::from_secs(5),
        });
        server.inject(Fault::Stall {
            call: Call::Watch,
            delay: Duration::from_secs(7),
        });
        let start = Instant::now();
        lw.list(ListRequest::default()).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        lw.list(ListRequest::default()).await.unwrap();
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(5),
            "one stall per fault"
        );

        // A write during the stall is part of what the stalled watch answers.
        let writer = server.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            writer.create(&pods(), &pod("n", "a", "t", "")).unwrap();
        });
        let mut watch = lw
            .watch(WatchRequest {
                resource_version: "1".into(),
                ..WatchRequest::default()
            })
            .await
            .unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(12));
        assert_eq!(drain(&mut watch), ["ADDED n/a 2"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_ends_at_its_timeout() {
        let server = MemoryServer::new();
        let lw = lister(&server, None, None, None);
        let start = Instant::now();
        let mut watch = lw
            .watch(WatchRequest {
                resource_version: "1".into(),
                timeout: Some(Duration::from_secs(30)),
                ..WatchRequest::default()
            })
            .await
            .unwrap();
        let writer = server.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(10)).await;
            writer.create(&pods(), &pod("n", "a", "t", "")).unwrap();
        });
        let event = watch.next().await.unwrap().unwrap();
        assert_eq!(describe(&event), "ADDED n/a 2");
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        assert!(watch.next().await.is_none());
        assert_eq!(start.elapsed(), Duration::from_secs(30));
        assert_eq!(server.open_watches(), 0);
    }

    #[test]
    fn a_watcher_that_falls_behind_is_dropped_not_waited_for() {
        let server = MemoryServer::with_config(ServerConfig {
            watch_buffer: 2,
            ..ServerConfig::default()
        });
        let pods = pods();
        let lw = lister(&server, None, None, None);
        let mut watch = watch_from(&lw, 1);
        for name in ["a", "b", "c", "d", "e"] {
            server.create(&pods, &pod("n", name, "t", "")).unwrap();
        }
        assert_eq!(server.open_watches(), 0);
        assert_eq!(drain(&mut watch), ["ADDED n/a 2", "ADDED n/b 3", "END"]);
        assert_eq!(
            drain(&mut watch_from(&lw, 3)),
            ["ADDED n/c 4", "ADDED n/d 5", "ADDED n/e 6"]
        );
    }

    #[test]
    fn bookmarks_go_only_to_watches_that_asked() {
        let server = MemoryServer::new();
        let lw = lister(&server, None, None, None);
        let mut plain = watch_from(&lw, 1);
        let mut with_bookmarks = block_on(lw.watch(WatchRequest {
            resource_version: "1".into(),
            bookmarks: true,
            ..WatchRequest::default()
        }))
        .unwrap();
        server
            .create(
                &Resource::new("", "v1", "Secret", "secrets", true),
                r#"{"metadata":{"name":"s","namespace":"n"}}"#,
            )
            .unwrap();
        server.bookmark();
        assert_eq!(drain(&mut with_bookmarks), ["BOOKMARK 2"]);
        assert_eq!(drain(&mut plain), Vec::<String>::new());
    }

    #[test]
    fn streaming_lists_send_the_state_then_an_end_bookmark() {
        let pods = pods();
        let request = |bookmarks| WatchRequest {
            resource_version: String::new(),
            send_initial_events: true,
            bookmarks,
            ..WatchRequest::default()
        };
        let old = MemoryServer::new();
        let lw = lister(&old, None, None, None);
        assert!(!lw.supports_streaming_list());
        let Err(SourceError::Status { status, .. }) = block_on(lw.watch(request(true))) else {
            panic!("a v1.23 server refuses streaming lists");
        };
        assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));

        let server = MemoryServer::with_config(ServerConfig {
            streaming_list: true,
            ..ServerConfig::default()
        });
        for name in ["b", "a", "c"] {
            server.create(&pods, &pod("n", name, "t", "")).unwrap();
        }
        server.create(&pods, &pod("n", "d", "other", "")).unwrap();
        let lw = lister(&server, None, Some("team=t"), None);
        assert!(lw.supports_streaming_list());
        let mut watch = block_on(lw.watch(request(true))).unwrap();
        assert_eq!(
            drain(&mut watch),
            [
                "ADDED n/a 3",
                "ADDED n/b 2",
                "ADDED n/c 4",
                "BOOKMARK 5 end"
            ]
        );
        server.update(&pods, &pod("n", "a", "t", "1")).unwrap();
        assert_eq!(drain(&mut watch), ["MODIFIED n/a 6"]);
        let mut without = block_on(lw.watch(request(false))).unwrap();
        assert_eq!(
            drain(&mut without),
            ["ADDED n/a 6", "ADDED n/b 2", "ADDED n/c 4"],
            "no end marker without bookmarks, as on a real server"
        );
        let mut legacy = watch_from(&lw, 0);
        assert_eq!(
            drain(&mut legacy).len(),
            3,
            "a watch from 0 starts with the state"
        );
    }

    #[test]
    fn the_decoder_reads_what_the_server_emits() {
        let server = MemoryServer::new();
        let pods = pods();
        let decoder = ObjectDecoder::new(pods.clone());
        let first = server.create(&pods, &pod("n", "a", "t", "0")).unwrap();
        let lw = lister(&server, None, Some("team=t"), None);
        let list = block_on(lw.list(ListRequest::default())).unwrap();
        let item = decoder.decode(&list.items[0]).unwrap();
        assert_eq!(item.resource_version(), first.resource_version);
        assert_eq!(item.label("team"), Some("t"));
        assert_eq!(item.uid(), json(&first.json)["metadata"]["uid"].as_str());

        let mut watch = watch_from(&lw, first.resource_version);
        let added = server.create(&pods, &pod("n", "b", "t", "0")).unwrap();
        let modified = server.update(&pods, &pod("n", "b", "t", "1")).unwrap();
        let left = server.update(&pods, &pod("n", "b", "u", "1")).unwrap();
        let deleted = server.delete(&pods, &"n/a".into()).unwrap();
        let mut versions = Vec::new();
        while let Some(Some(Ok(event))) = watch.next().now_or_never() {
            let (WatchEvent::Added(bytes)
            | WatchEvent::Modified(bytes)
            | WatchEvent::Deleted(bytes)) = &event
            else {
                panic!("unexpected {event:?}");
            };
            assert!(bytes.starts_with(br#"{"kind":"Pod","apiVersion":"v1","#));
            versions.push(decoder.decode(bytes).unwrap().resource_version());
        }
        assert_eq!(
            versions,
            [
                added.resource_version,
                modified.resource_version,
                left.resource_version,
                deleted.resource_version
            ]
        );
    }

    /// A write in the property test: key index, team label, or a delete.
    #[derive(Debug, Clone)]
    enum Op {
        Apply(usize, bool, u8),
        Delete(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0..6usize, any::<bool>(), any::<u8>()).prop_map(|(k, a, d)| Op::Apply(k, a, d)),
            1 => (0..6usize).prop_map(Op::Delete),
        ]
    }

    fn run(server: &MemoryServer, ops: &[Op]) {
        for op in ops {
            match op {
                Op::Apply(k, team_a, data) => {
                    let team = if *team_a { "a" } else { "b" };
                    let text = pod(["n", "m"][k % 2], &format!("p{k}"), team, &data.to_string());
                    server.apply(&pods(), &text).unwrap();
                }
                Op::Delete(k) => {
                    // Deleting a missing object is a 404 and changes nothing.
                    let _ = server.delete(
                        &pods(),
                        &ObjectKey::new(Some(["n", "m"][k % 2]), &format!("p{k}")),
                    );
                }
            }
        }
    }

    /// Checks one case of `list_then_watch_reproduces_the_state`.
    fn list_then_watch(
        [before, during, after]: [&[Op]; 3],
        limit: u32,
        selector: Option<&str>,
        namespace: Option<&str>,
    ) -> Result<(), TestCaseError> {
        let server = MemoryServer::new();
        let lw = lister(&server, namespace, selector, None);
        run(&server, before);
        let mut request = ListRequest {
            limit: Some(limit),
            ..ListRequest::default()
        };
        let mut list_rv = None;
        let mut cache = BTreeMap::new();
        loop {
            let page = block_on(lw.list(request.clone())).unwrap();
            let list_rv = list_rv.get_or_insert_with(|| page.resource_version.clone());
            prop_assert_eq!(&page.resource_version, list_rv);
            for item in &page.items {
                let value = json(item);
                cache.insert(key_of(&value), value["metadata"]["resourceVersion"].clone());
            }
            if request.continue_token.is_none() {
                run(&server, during);
            }
            request.continue_token = page.continue_token;
            if request.continue_token.is_none() {
                break;
            }
        }
        run(&server, after);
        let mut last_rv: u64 = list_rv.unwrap().parse().unwrap();
        let mut watch = watch_from(&lw, last_rv);
        while let Some(Some(Ok(event))) = watch.next().now_or_never() {
            let (WatchEvent::Added(bytes)
            | WatchEvent::Modified(bytes)
            | WatchEvent::Deleted(bytes)) = &event
            else {
                panic!("unexpected {event:?}");
            };
            let value = json(bytes);
            let rv = value["metadata"]["resourceVersion"].clone();
            let rv_number: u64 = rv.as_str().unwrap().parse().unwrap();
            prop_assert!(rv_number > last_rv, "versions increase");
            last_rv = rv_number;
            let key = key_of(&value);
            match event {
                WatchEvent::Added(_) => prop_assert!(cache.insert(key, rv).is_none()),
                WatchEvent::Modified(_) => prop_assert!(cache.insert(key, rv).is_some()),
                _ => prop_assert!(cache.remove(&key).is_some()),
            }
        }
        let decoder = ObjectDecoder::new(pods());
        let selector = selector.map(|s| LabelSelector::parse(s).unwrap());
        let expected: BTreeMap<String, Value> = server
            .snapshot(&pods())
            .values()
            .map(|bytes| decoder.decode(bytes).unwrap())
            .filter(|o| namespace.is_none_or(|ns| o.namespace() == Some(ns)))
            .filter(|o| selector.as_ref().is_none_or(|s| s.matches(o)))
            .map(|o| {
                (
                    o.key().to_string(),
                    Value::from(o.resource_version().to_string()),
                )
            })
            .collect();
        prop_assert_eq!(cache, expected);
        Ok(())
    }

    proptest! {
        /// A paged list interleaved with writes, then a watch from its version, reproduce
        /// exactly the server's final state as a filtered informer would see it.
        #[test]
        fn list_then_watch_reproduces_the_state(
            before in prop::collection::vec(op(), 0..20),
            during in prop::collection::vec(op(), 0..10),
            after in prop::collection::vec(op(), 0..20),
            limit in 1u32..4,
            selector in prop::sample::select(vec![None, Some("team=a"), Some("team!=a")]),
            namespace in prop::sample::select(vec![None, Some("n")]),
        ) {
            list_then_watch([&before, &during, &after], limit, selector, namespace)?;
        }
    }
}
