//! Watches of a resource: the streamed response body, events as lines batched into chunks,
//! which the server can cut (the `faults` feature) or drop with every other watch.

use std::io;

use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use http::{Response, StatusCode, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::source::{
    ListerWatcher, SourceError, WatchEvent, WatchRequest, WatchStream,
};
use kubeplug_memory::Call;
use serde_json::json;

use super::{Body, Ctx, is_true, source_error, take_raw};
use crate::events::View;
use crate::form::Form;
use crate::table::{self, TableOf};

impl Ctx<'_> {
    pub(super) async fn watch(&self) -> Response<Body> {
        if let Some(raw) = take_raw(self.shared, Call::Watch) {
            return raw;
        }
        let lister = match self.lister() {
            Ok(lister) => lister,
            Err(response) => return response,
        };
        let request = WatchRequest {
            resource_version: self
                .query
                .get("resourceVersion")
                .cloned()
                .unwrap_or_default(),
            timeout: self
                .query
                .get("timeoutSeconds")
                .and_then(|t| t.parse().ok())
                .map(std::time::Duration::from_secs),
            bookmarks: is_true(self.query.get("allowWatchBookmarks")),
            send_initial_events: is_true(self.query.get("sendInitialEvents")),
        };
        let mut drops = self.shared.drops.subscribe();
        drops.mark_unchanged();
        let feed = match lister.watch(request).await {
            Ok(feed) => feed,
            Err(e) => return source_error(e),
        };
        let cut = self.shared.faults.take_cut();
        let body = WatchBody {
            feed,
            drops,
            cut,
            resource: self.resource.clone(),
            view: self.view,
            form: self.form,
            table: self.table,
            columns_sent: false,
            done: false,
        };
        let stream = futures::stream::unfold(body, WatchBody::next_chunk);
        Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CACHE_CONTROL, "no-cache, private")
            .body(BodyExt::boxed_unsync(StreamBody::new(stream)))
            .expect("a valid response")
    }
}

/// A watch response body: events as lines, batched into chunks of what is ready.
struct WatchBody {
    feed: WatchStream,
    /// Changes when the server drops every watch connection.
    drops: tokio::sync::watch::Receiver<u64>,
    /// Whole events left before this watch is cut in the middle of a line.
    cut: Option<usize>,
    resource: Resource,
    view: View,
    form: Form,
    /// Events answered as one-row tables, the first with the column definitions.
    table: Option<TableOf>,
    columns_sent: bool,
    done: bool,
}

fn aborted() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "the API server closed the watch",
    )
}

impl WatchBody {
    /// An event's object (whole JSON, with `kind` and `apiVersion`) as the watch answers it.
    fn shown(&mut self, object: Bytes) -> Bytes {
        let object = self.view.show(object);
        let Some(table) = self.table else {
            return self.form.object(object);
        };
        let metadata = json!({"resourceVersion": table::resource_version(&object)});
        let columns = !std::mem::replace(&mut self.columns_sent, true);
        table.table(metadata, columns, [&object])
    }

    fn line(&mut self, event: WatchEvent) -> Vec<u8> {
        let (kind, object): (&str, Bytes) = match event {
            WatchEvent::Added(object) => ("ADDED", self.shown(object)),
            WatchEvent::Modified(object) => ("MODIFIED", self.shown(object)),
            WatchEvent::Deleted(object) => ("DELETED", self.shown(object)),
            WatchEvent::Bookmark {
                resource_version,
                initial_events_end,
            } => {
                let mut metadata =
                    json!({"resourceVersion": resource_version, "creationTimestamp": null});
                if initial_events_end {
                    metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
                }
                let api_version = self.resource.api_version();
                let (kind, api_version) =
                    self.form.bookmark_kind(&self.resource.kind, &api_version);
                let object = json!({"kind": kind, "apiVersion": api_version, "metadata": metadata});
                ("BOOKMARK", Bytes::from(object.to_string()))
            }
            WatchEvent::Error(status) => {
                let object = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": status.message, "reason": status.reason, "code": status.code});
                ("ERROR", Bytes::from(object.to_string()))
            }
        };
        let mut line = Vec::with_capacity(object.len() + 32);
        line.extend_from_slice(b"{\"type\":\"");
        line.extend_from_slice(kind.as_bytes());
        line.extend_from_slice(b"\",\"object\":");
        line.extend_from_slice(&object);
        line.extend_from_slice(b"}\n");
        line
    }

    /// The next chunk: every event ready now (at least one), or the end.
    async fn next_chunk(mut self) -> Option<(Result<Frame<Bytes>, io::Error>, Self)> {
        if self.done {
            return None;
        }
        let first = tokio::select! {
            biased;
            _ = self.drops.changed() => {
                self.done = true;
                return Some((Err(aborted()), self));
            }
            event = self.feed.next() => event,
        };
        let mut chunk = Vec::new();
        let mut next = first;
        loop {
            match next {
                Some(Ok(event)) => {
                    let line = self.line(event);
                    if self.cut == Some(0) {
                        chunk.extend_from_slice(&line[..line.len() / 2]);
                        self.done = true;
                        // The half line goes out; the connection is aborted on the next poll.
                        return Some((Ok(Frame::data(Bytes::from(chunk))), self.into_abort()));
                    }
                    if let Some(left) = &mut self.cut {
                        *left -= 1;
                    }
                    chunk.extend_from_slice(&line);
                }
                Some(Err(e)) => {
                    self.done = true;
                    if chunk.is_empty() {
                        return Some((Err(io::Error::other(e.to_string())), self));
                    }
                    break;
                }
                None => {
                    self.done = true;
                    if chunk.is_empty() {
                        return None;
                    }
                    break;
                }
            }
            if chunk.len() > 256 * 1024 {
                break;
            }
            match self.feed.next().now_or_never() {
                Some(event) => next = event,
                None => break,
            }
        }
        Some((Ok(Frame::data(Bytes::from(chunk))), self))
    }

    /// A body that aborts the connection on its next poll.
    fn into_abort(mut self) -> Self {
        // Give the connection time to flush the half line before it is aborted.
        self.feed = futures::stream::once(async {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            Err(SourceError::transport("cut"))
        })
        .boxed();
        self.done = false;
        self.cut = None;
        self
    }
}
