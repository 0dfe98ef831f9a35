//! Watch streams and the [`ListerWatcher`] of one resource.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use kubeplug_informer::resource::Resource;
use kubeplug_informer::source::{
    ListPage, ListRequest, ListerWatcher, SourceError, WatchEvent, WatchRequest, WatchStream,
};
use tokio::sync::mpsc;
use tokio::time::Sleep;

use crate::faults::CutFlag;
use crate::form::partial_object_metadata;
use crate::render::{Render, render};
use crate::selectable::SelectableFields;
use crate::server::{Call, MemoryServer};
use crate::state::{Change, Filter, Stored};

/// A watch stream: events decided when it opened, then live ones.
pub(crate) struct Feed {
    /// Delivered before anything from `live`: a 410, garbage, the initial state or the
    /// history replay. Rendered lazily, outside the server's lock.
    pub(crate) pending: VecDeque<Pending>,
    pub(crate) filter: Arc<Filter>,
    pub(crate) watch_prefix: Arc<str>,
    /// Live events; `None` for a stream that only delivers `pending` (a 410) or has ended.
    pub(crate) live: Option<mpsc::Receiver<WatchEvent>>,
    /// Set by the server to cut the connection.
    pub(crate) cut: CutFlag,
    /// The watch's `timeout`.
    pub(crate) deadline: Option<Pin<Box<Sleep>>>,
    /// Events left before a [`Fault::EndNextWatchAfter`] cuts this stream.
    pub(crate) budget: Option<usize>,
}

pub(crate) enum Pending {
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
        if timed_out || this.budget == Some(0) || this.cut.is_cut() {
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
    pub(crate) server: MemoryServer,
    /// Index of `resource`'s table in the server.
    pub(crate) table: usize,
    pub(crate) resource: Resource,
    pub(crate) filter: Arc<Filter>,
    /// Answer objects as `PartialObjectMetadata`.
    pub(crate) metadata_only: bool,
}

impl MemoryListerWatcher {
    /// Answers lists and watches in the metadata form ([`crate::form`]), as kube-apiserver
    /// does for a metadata informer: each object's `metadata` alone, as a
    /// `meta.k8s.io/v1` `PartialObjectMetadata`.
    pub fn metadata_only(mut self) -> Self {
        self.metadata_only = true;
        self
    }

    /// Reads field selectors as `selectable` says rather than as the stored type's fields:
    /// for a view of the objects as another type (core Events of `events.k8s.io` ones).
    pub fn selecting_fields_as(mut self, selectable: SelectableFields) -> Self {
        let filter = Filter {
            namespace: self.filter.namespace.clone(),
            labels: self.filter.labels.clone(),
            fields: self.filter.fields.clone(),
            selectable,
        };
        self.filter = Arc::new(filter);
        self
    }

    fn form(&self, event: WatchEvent) -> WatchEvent {
        if !self.metadata_only {
            return event;
        }
        match event {
            WatchEvent::Added(object) => WatchEvent::Added(partial_object_metadata(object)),
            WatchEvent::Modified(object) => WatchEvent::Modified(partial_object_metadata(object)),
            WatchEvent::Deleted(object) => WatchEvent::Deleted(partial_object_metadata(object)),
            other => other,
        }
    }
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
            let mut page = self
                .server
                .lock()
                .list(self.table, &self.filter, &request)?;
            if self.metadata_only {
                page.items = page
                    .items
                    .into_iter()
                    .map(partial_object_metadata)
                    .collect();
            }
            Ok(page)
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
            let this = self.clone();
            Ok(feed
                .map(move |event| event.map(|event| this.form(event)))
                .boxed())
        })
    }

    fn supports_streaming_list(&self) -> bool {
        self.server.lock().config.streaming_list
    }
}
