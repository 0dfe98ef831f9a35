//! What the server knows: tables of objects, the history of changes, open watches; and how
//! lists and watches are served from them.

use std::cmp::Ordering as KeyOrder;
use std::collections::{BTreeMap, VecDeque};
use std::iter::Peekable;
use std::ops::{Bound, Range};
use std::sync::Arc;

use bytes::Bytes;
use kubeplug_informer::object::ObjectKey;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::selector::{FieldSelector, LabelSelector, Labels};
use kubeplug_informer::source::{
    ListPage, ListRequest, SourceError, Status, WatchEvent, WatchRequest,
};
use kubeplug_json::push_json_string;
use tokio::sync::mpsc;

use crate::faults::PendingFaults;
use crate::feed::{Feed, Pending};
use crate::incoming::bad_request;
use crate::render::Render;
use crate::selectable::SelectableFields;
use crate::server::{Call, ServerConfig};

/// Everything the server knows. A `std` mutex guards it: every critical section is a short
/// piece of synchronous bookkeeping that never awaits, and writes stay plain functions.
pub(crate) struct State {
    pub(crate) config: ServerConfig,
    /// The last resourceVersion assigned.
    pub(crate) revision: u64,
    /// Changes with a version `<= compacted` are forgotten: watching or continuing a list from
    /// an older version answers 410. Always `<= revision`.
    pub(crate) compacted: u64,
    /// Every change with a version `> compacted`, oldest first, at most `config.history`.
    pub(crate) history: VecDeque<Change>,
    /// One per resource ever used, each resource once; indexes never change. (A handful of
    /// resources: a linear search beats hashing five strings.)
    pub(crate) tables: Vec<Table>,
    pub(crate) faults: PendingFaults,
    pub(crate) list_calls: u64,
    pub(crate) watch_calls: u64,
}

impl Default for State {
    fn default() -> Self {
        Self::new(ServerConfig::default())
    }
}

/// The objects and open watches of one resource.
pub(crate) struct Table {
    pub(crate) resource: Resource,
    /// `{"kind":…,"apiVersion":…` without the closing brace: what a watch event puts before
    /// the members of a stored object.
    pub(crate) watch_prefix: Arc<str>,
    pub(crate) objects: BTreeMap<ObjectKey, Arc<Stored>>,
    pub(crate) watchers: Vec<Watcher>,
}

/// One object as stored.
pub(crate) struct Stored {
    /// Compact JSON without `kind` and `apiVersion` (as a list item); `metadata` ends with the
    /// `uid` and `resourceVersion` members.
    pub(crate) json: Bytes,
    /// Where the digits of `metadata.resourceVersion` are in `json`.
    pub(crate) rv_digits: Range<usize>,
    /// The same version as a number.
    pub(crate) resource_version: u64,
    pub(crate) uid: Box<str>,
    pub(crate) labels: LabelSet,
}

/// `metadata.labels`, sorted by key, keys unique.
#[derive(Default)]
pub(crate) struct LabelSet(pub(crate) Box<[(Box<str>, Box<str>)]>);

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
pub(crate) struct Change {
    /// The version the write was assigned.
    pub(crate) rv: u64,
    /// Index of the resource's table.
    pub(crate) table: usize,
    pub(crate) key: ObjectKey,
    /// The state before; `None` for a create.
    pub(crate) prev: Option<Arc<Stored>>,
    /// The state after; `None` for a delete.
    pub(crate) next: Option<Arc<Stored>>,
}

/// An open watch, as the server sees it.
pub(crate) struct Watcher {
    pub(crate) filter: Arc<Filter>,
    /// Whether the client asked for BOOKMARK events.
    pub(crate) bookmarks: bool,
    /// Overflow policy: bounded by `config.watch_buffer`; a watcher whose buffer is full is
    /// dropped (its stream ends after the events already queued), so writers never wait.
    pub(crate) tx: mpsc::Sender<WatchEvent>,
    /// Set when the server cuts the connection: the stream ends at once, queued events unread.
    /// Only faults cut.
    #[cfg(feature = "faults")]
    pub(crate) cut: crate::faults::CutFlag,
}

/// What a lister-watcher is narrowed to. Empty selectors are stored as `None`.
#[derive(Debug)]
pub(crate) struct Filter {
    pub(crate) namespace: Option<String>,
    pub(crate) labels: Option<LabelSelector>,
    pub(crate) fields: Option<FieldSelector>,
    /// The fields the type selects on, and where they are read.
    pub(crate) selectable: SelectableFields,
}

impl Filter {
    /// Refuses a field selector naming a field the type lacks, as kube-apiserver does.
    pub(crate) fn check(&self) -> Result<(), SourceError> {
        match &self.fields {
            Some(fields) => self
                .selectable
                .check(fields)
                .map_err(|refused| SourceError::status(bad_request(refused.to_string()))),
            None => Ok(()),
        }
    }

    pub(crate) fn matches(&self, key: &ObjectKey, object: &Stored) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| key.namespace() == Some(ns))
            && self
                .labels
                .as_ref()
                .is_none_or(|l| l.matches(&object.labels))
            && self.fields.as_ref().is_none_or(|fields| {
                if fields.reads_key_only() {
                    return fields.matches(key, |_| None);
                }
                // Stored text is JSON, so UTF-8; a body field is read only when selected on.
                let json = std::str::from_utf8(&object.json).unwrap_or_default();
                self.selectable.matches(fields, key, json)
            })
    }
}

impl State {
    pub(crate) fn new(config: ServerConfig) -> Self {
        Self {
            config,
            revision: 1,
            compacted: 1,
            history: VecDeque::new(),
            tables: Vec::new(),
            faults: Default::default(),
            list_calls: 0,
            watch_calls: 0,
        }
    }

    /// The index of the table of `resource`, created on first use.
    pub(crate) fn table(&mut self, resource: &Resource) -> usize {
        if let Some(table) = self.tables.iter().position(|t| t.resource == *resource) {
            return table;
        }
        self.tables.push(Table::new(resource.clone()));
        self.tables.len() - 1
    }

    pub(crate) fn find(&self, resource: &Resource) -> Option<&Table> {
        self.tables.iter().find(|t| t.resource == *resource)
    }

    /// Publishes a write with version `rv` (the next one) that the caller already applied to
    /// the table's objects: tells the watchers, remembers it in the history.
    pub(crate) fn publish(
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

    pub(crate) fn list(
        &mut self,
        table: usize,
        filter: &Filter,
        request: &ListRequest,
    ) -> Result<ListPage, SourceError> {
        self.faults.take_failure(Call::List)?;
        filter.check()?;
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

    pub(crate) fn watch(
        &mut self,
        table: usize,
        filter: &Arc<Filter>,
        request: &WatchRequest,
    ) -> Result<Feed, SourceError> {
        self.faults.take_failure(Call::Watch)?;
        filter.check()?;
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
            cut: Default::default(),
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
        let garbage = self.faults.take_garbage(&t.resource, current);
        feed.pending.extend(garbage.into_iter().map(Pending::Ready));
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
            #[cfg(feature = "faults")]
            cut: feed.cut.clone(),
        });
        feed.live = Some(rx);
        feed.budget = self.faults.take_watch_budget();
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
