//! [`KubeListerWatcher`]: the informer's [`ListerWatcher`] over a real API server.
//!
//! Requests are built by hand and sent with `kube::Client::send`; bodies are decoded by
//! [`crate::wire`], so objects stay JSON text (no `serde_json::Value`, no `DynamicObject`) and
//! `Retry-After` survives.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::{self, StreamExt};
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use kube::client::Body;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::selector::{FieldSelector, LabelSelector};
use kubeplug_informer::source::{
    ListPage, ListRequest, ListerWatcher, SourceError, Status, WatchEvent, WatchRequest,
    WatchStream,
};
use tracing::{debug, info};

use crate::config::KubeClient;
use crate::paths::collection_path;
use crate::wire::{self, LineSplitter, ListForm};

/// How a [`KubeListerWatcher`] behaves; the defaults suit a real cluster.
#[derive(Debug, Clone)]
pub struct KubeSourceOptions {
    /// Whether to offer streaming lists (`sendInitialEvents`) to the Reflector. With
    /// [`InitialListMode::Auto`](kubeplug_informer::reflector::InitialListMode::Auto), a
    /// server that refuses them (422, as before v1.27) makes the Reflector fall back to
    /// list-then-watch. `false` forces list-then-watch. Default `true`.
    pub streaming_list: bool,
    /// A list page that takes longer than this fails (a stalled server); default 60 s.
    pub list_timeout: Duration,
    /// A watch with no bytes for this long past its `timeoutSeconds` is ended; default 30 s.
    pub watch_idle_grace: Duration,
    /// The longest watch line accepted, and so the largest object (a list item too);
    /// default [`wire::MAX_LINE_BYTES`].
    pub max_line_bytes: usize,
    /// The largest list answer read; default [`MAX_LIST_BYTES`].
    pub max_list_bytes: usize,
}

/// The largest list answer read: 1 GiB. A page holds at most `limit` objects (500 by
/// default), each under etcd's 1.5 MiB value limit, so a real page stays under 750 MiB; a
/// larger answer comes from a server or proxy that ignores `limit`, and reading it whole
/// would hold gigabytes before a single object is decoded.
pub const MAX_LIST_BYTES: usize = 1 << 30;

/// The part of an error answer's body read to find its `Status`: 64 KiB. The API server's
/// `Status` is a few hundred bytes; a proxy's error page beyond that adds nothing but
/// memory, and the message quotes only its start anyway.
pub const MAX_STATUS_BYTES: usize = 64 << 10;

/// The `timeoutSeconds` of a watch whose [`WatchRequest`] names no timeout: 5 min,
/// client-go's shortest watch timeout. The lister draws none: the Reflector draws each
/// watch's timeout from `ReflectorConfig::watch_timeout` and names it, and the lister asks
/// the server for exactly that (in whole seconds, at least one).
pub const UNASKED_WATCH_TIMEOUT: Duration = Duration::from_secs(300);

impl Default for KubeSourceOptions {
    fn default() -> Self {
        Self {
            streaming_list: true,
            list_timeout: Duration::from_secs(60),
            watch_idle_grace: Duration::from_secs(30),
            max_line_bytes: wire::MAX_LINE_BYTES,
            max_list_bytes: MAX_LIST_BYTES,
        }
    }
}

/// Lists and watches one resource of a real API server, narrowed to a namespace and selectors.
///
/// Contract: as [`ListerWatcher`]. Lists are paginated with `limit`/`continue`; watches ask for
/// bookmarks and resume from the given resourceVersion; every non-2xx answer becomes
/// [`SourceError::Status`] with the server's `Status` (or one made from the HTTP code when the
/// body is not a `Status`) and its `Retry-After`; a watch line that cannot be decoded ends the
/// stream with [`SourceError::Decode`] (the Reflector re-watches from the last good version);
/// a connection lost in the middle of a line is [`SourceError::Transport`]. A list answer
/// over `max_list_bytes`, or holding an object over `max_line_bytes`, is
/// [`SourceError::Decode`] naming the bound; only the first [`MAX_STATUS_BYTES`] of an error
/// answer are read. Every error names the resource and the server.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use kubeplug_informer::resource::Resource;
/// use kubeplug_kube::config::{ConfigSource, KubeClient};
/// use kubeplug_kube::lister::{KubeListerWatcher, KubeSourceOptions};
///
/// let client = KubeClient::from_source(&ConfigSource::Infer).await?;
/// let pods = Resource::new("", "v1", "Pod", "pods", true);
/// let lw = KubeListerWatcher::new(client, pods, Some("default".into()), KubeSourceOptions::default());
/// # let _ = lw; Ok(()) }
/// ```
#[derive(Clone)]
pub struct KubeListerWatcher {
    client: KubeClient,
    resource: Resource,
    /// `/api/v1[/namespaces/{ns}]/{plural}` (or `/apis/{group}/{version}/…`).
    path: String,
    /// The selectors' text as sent; `None` for one that selects everything.
    label_selector: Option<String>,
    field_selector: Option<String>,
    options: KubeSourceOptions,
    /// Ask for `PartialObjectMetadata` ([`KubeListerWatcher::metadata_only`]).
    metadata_only: bool,
    /// A metadata-only list was answered with whole objects, and the log said so once.
    told_whole_objects: Arc<AtomicBool>,
}

/// The `Accept` of a metadata-only list: the `PartialObjectMetadataList` form, else whole
/// objects (client-go's metadata client asks the same way), from a server without the form.
const ACCEPT_METADATA_LIST: &str =
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
/// The `Accept` of a metadata-only watch (streaming lists included).
const ACCEPT_METADATA_OBJECTS: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

impl fmt::Debug for KubeListerWatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeListerWatcher")
            .field("path", &self.path)
            .field("label_selector", &self.label_selector)
            .field("field_selector", &self.field_selector)
            .field("metadata_only", &self.metadata_only)
            .field("server", &self.client.origin().address)
            .finish()
    }
}

impl KubeListerWatcher {
    /// A lister-watcher of every object of `resource` in `namespace` (all namespaces when
    /// `None`).
    pub fn new(
        client: KubeClient,
        resource: Resource,
        namespace: Option<String>,
        options: KubeSourceOptions,
    ) -> Self {
        Self {
            path: collection_path(&resource, namespace.as_deref()),
            client,
            resource,
            label_selector: None,
            field_selector: None,
            options,
            metadata_only: false,
            told_whole_objects: Arc::default(),
        }
    }

    /// Lists and watches only the objects `labels` and `fields` select, as the server
    /// decides: their canonical text is sent as `labelSelector` and `fieldSelector`.
    pub fn selecting(mut self, labels: &LabelSelector, fields: &FieldSelector) -> Self {
        self.label_selector = (!labels.is_empty()).then(|| labels.to_string());
        self.field_selector = (!fields.is_empty()).then(|| fields.to_string());
        self
    }

    /// Asks for objects as `meta.k8s.io/v1` `PartialObjectMetadata` (metadata with
    /// managedFields, no body), as client-go's metadata informers do; a server that does not
    /// serve that form for the type answers whole objects instead. Pair it with
    /// [`ObjectDecoder::metadata_only`](kubeplug_informer::object::ObjectDecoder::metadata_only),
    /// which takes either.
    pub fn metadata_only(mut self) -> Self {
        self.metadata_only = true;
        self
    }

    fn describe(&self) -> String {
        format!("{} at {}", self.path, self.client.origin().address)
    }

    fn query(&self) -> form_urlencoded::Serializer<'static, String> {
        let mut query = form_urlencoded::Serializer::new(String::new());
        if let Some(labels) = &self.label_selector {
            query.append_pair("labelSelector", labels);
        }
        if let Some(fields) = &self.field_selector {
            query.append_pair("fieldSelector", fields);
        }
        query
    }

    /// A GET of the collection with `query`, accepting `metadata_form` when metadata only,
    /// else plain JSON.
    fn request(
        &self,
        mut query: form_urlencoded::Serializer<'static, String>,
        metadata_form: &'static str,
    ) -> Request<Body> {
        let accept = if self.metadata_only {
            metadata_form
        } else {
            "application/json"
        };
        let query = query.finish();
        let uri = if query.is_empty() {
            self.path.clone()
        } else {
            format!("{}?{query}", self.path)
        };
        Request::get(uri)
            .header(http::header::ACCEPT, accept)
            .body(Body::empty())
            .expect("a path and an encoded query make a valid URI")
    }

    /// Sends `request`; a non-2xx answer becomes its `Status`.
    async fn send(&self, request: Request<Body>) -> Result<http::Response<Body>, SourceError> {
        let response = self
            .client
            .client()
            .send(request)
            .await
            .map_err(|e| SourceError::transport(self.describe()).with_source(e))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let code = response.status();
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(wire::parse_retry_after)
            .filter(|_| code == StatusCode::TOO_MANY_REQUESTS || code.is_server_error());
        let mut status = status_of(code.as_u16(), response.into_body()).await;
        status.message = format!("{} ({})", status.message, self.describe());
        Err(SourceError::Status {
            status,
            retry_after,
        })
    }

    async fn list_page(&self, request: ListRequest) -> Result<ListPage, SourceError> {
        let http_request = {
            let mut query = self.query();
            if let Some(limit) = request.limit.filter(|l| *l > 0) {
                query.append_pair("limit", &limit.to_string());
            }
            if let Some(token) = request.continue_token.as_deref().filter(|t| !t.is_empty()) {
                query.append_pair("continue", token);
            }
            if let Some(rv) = request
                .resource_version
                .as_deref()
                .filter(|rv| !rv.is_empty())
            {
                query.append_pair("resourceVersion", rv);
            }
            self.request(query, ACCEPT_METADATA_LIST)
        };
        let response = self.send(http_request).await?;
        let limit = self.options.max_list_bytes;
        let body = match read_at_most(&mut response.into_body(), limit).await {
            Ok(Read::Whole(bytes)) => bytes,
            Ok(Read::Cut(_)) => {
                return Err(SourceError::decode(format!(
                    "{}: the list answer is over {limit} bytes (max_list_bytes); ask for \
                     smaller pages or narrow the informer with a namespace or selector",
                    self.describe()
                )));
            }
            Err(e) => {
                return Err(SourceError::transport(format!(
                    "{}: list answer cut short",
                    self.describe()
                ))
                .with_source(e));
            }
        };
        let (page, form) = wire::decode_list(&self.resource, &body, self.metadata_only)
            .map_err(|e| SourceError::decode(self.describe()).with_source(e))?;
        if self.metadata_only
            && form == ListForm::Objects
            && !self.told_whole_objects.swap(true, Ordering::Relaxed)
        {
            info!(
                source = %self.describe(),
                "the server does not serve this type's metadata alone; taking whole objects \
                 and keeping their metadata"
            );
        }
        let max_object = self.options.max_line_bytes;
        if let Some(position) = page.items.iter().position(|i| i.len() > max_object) {
            return Err(SourceError::decode(format!(
                "{}: list item {position} is {} bytes, over the {max_object} bytes an object \
                 may have (max_line_bytes); a watch could not deliver it either",
                self.describe(),
                page.items[position].len()
            )));
        }
        Ok(page)
    }

    async fn open_watch(&self, request: WatchRequest) -> Result<WatchStream, SourceError> {
        let timeout = timeout_seconds(request.timeout);
        let http_request = {
            let mut query = self.query();
            query.append_pair("watch", "1");
            if !request.resource_version.is_empty() {
                query.append_pair("resourceVersion", &request.resource_version);
            }
            if request.bookmarks {
                query.append_pair("allowWatchBookmarks", "true");
            }
            if request.send_initial_events {
                query.append_pair("sendInitialEvents", "true");
                query.append_pair("resourceVersionMatch", "NotOlderThan");
            }
            query.append_pair("timeoutSeconds", &timeout.to_string());
            self.request(query, ACCEPT_METADATA_OBJECTS)
        };
        let response = self.send(http_request).await?;
        debug!(path = %self.path, rv = %request.resource_version, timeout, "watch opened");
        let idle = Duration::from_secs(timeout) + self.options.watch_idle_grace;
        Ok(watch_events(
            response.into_body(),
            self.describe(),
            idle,
            self.options.max_line_bytes,
        ))
    }
}

/// A body read up to a bound.
#[derive(Debug, PartialEq)]
pub(crate) enum Read {
    /// All of it, within the bound.
    Whole(Bytes),
    /// Its first `limit` bytes; more followed, unread.
    Cut(Bytes),
}

/// Reads `body` until its end or `limit` bytes, whichever comes first: the rest is never
/// buffered.
pub(crate) async fn read_at_most(body: &mut Body, limit: usize) -> Result<Read, kube::Error> {
    let mut bytes = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        let room = limit - bytes.len();
        if data.len() > room {
            bytes.extend_from_slice(&data[..room]);
            return Ok(Read::Cut(bytes.freeze()));
        }
        bytes.extend_from_slice(&data);
    }
    Ok(Read::Whole(bytes.freeze()))
}

/// The `Status` of an error answer with HTTP code `code`, from at most
/// [`MAX_STATUS_BYTES`] of its body.
async fn status_of(code: u16, mut body: Body) -> Status {
    match read_at_most(&mut body, MAX_STATUS_BYTES).await {
        Ok(Read::Whole(bytes)) => wire::decode_status(code, &bytes),
        // A `Status` cut short is not JSON: it reads as an unknown answer quoting its start.
        Ok(Read::Cut(start)) => {
            let mut status = wire::decode_status(code, &start);
            status.message = format!(
                "{} (only the first {MAX_STATUS_BYTES} bytes of the answer were read)",
                status.message
            );
            status
        }
        Err(_) => wire::decode_status(code, b""),
    }
}

/// What the watch decoder knows between chunks.
enum WatchState {
    /// Reading: complete lines waiting to be decoded, and the splitter holding the rest.
    Reading {
        body: Body,
        splitter: LineSplitter,
        lines: std::collections::VecDeque<Bytes>,
    },
    /// The stream ended (normally or after reporting an error).
    Done,
}

/// The events of a watch body: lines split across chunks are joined, each decoded as it comes.
/// The `timeoutSeconds` a watch asks for: what the request names, or
/// [`UNASKED_WATCH_TIMEOUT`].
fn timeout_seconds(requested: Option<Duration>) -> u64 {
    requested.unwrap_or(UNASKED_WATCH_TIMEOUT).as_secs().max(1)
}

fn watch_events(body: Body, what: String, idle: Duration, max_line: usize) -> WatchStream {
    let start = WatchState::Reading {
        body,
        splitter: LineSplitter::new(max_line),
        lines: Default::default(),
    };
    stream::unfold(start, move |state| {
        let what = what.clone();
        async move { step(state, &what, idle).await }
    })
    .boxed()
}

/// One event out of the watch body, or the end.
async fn step(
    state: WatchState,
    what: &str,
    idle: Duration,
) -> Option<(Result<WatchEvent, SourceError>, WatchState)> {
    let WatchState::Reading {
        mut body,
        mut splitter,
        mut lines,
    } = state
    else {
        return None;
    };
    loop {
        if let Some(line) = lines.pop_front() {
            let event = wire::decode_watch_line(&line)
                .map_err(|e| SourceError::decode(what).with_source(e));
            let next = match event {
                Ok(_) => WatchState::Reading {
                    body,
                    splitter,
                    lines,
                },
                Err(_) => WatchState::Done,
            };
            return Some((event, next));
        }
        let frame = match tokio::time::timeout(idle, body.frame()).await {
            Err(_) => {
                return Some((
                    Err(SourceError::transport(format!(
                        "{what}: no data for {idle:?}; the watch is stalled"
                    ))),
                    WatchState::Done,
                ));
            }
            Ok(frame) => frame,
        };
        match frame {
            None if splitter.pending() == 0 => return None,
            None => {
                let error = SourceError::transport(format!(
                    "{what}: the watch ended in the middle of an event ({} bytes without a \
                     newline)",
                    splitter.pending()
                ));
                return Some((Err(error), WatchState::Done));
            }
            Some(Err(e)) => {
                let error = SourceError::transport(format!("{what}: the watch connection broke"))
                    .with_source(e);
                return Some((Err(error), WatchState::Done));
            }
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                match splitter.push(data) {
                    Ok(new_lines) => lines.extend(new_lines),
                    Err(e) => {
                        return Some((
                            Err(SourceError::decode(what).with_source(e)),
                            WatchState::Done,
                        ));
                    }
                }
            }
        }
    }
}

impl ListerWatcher for KubeListerWatcher {
    fn list(&self, request: ListRequest) -> BoxFuture<'_, Result<ListPage, SourceError>> {
        Box::pin(async move {
            match tokio::time::timeout(self.options.list_timeout, self.list_page(request)).await {
                Ok(result) => result,
                Err(_) => Err(SourceError::transport(format!(
                    "{}: no list answer within {:?}",
                    self.describe(),
                    self.options.list_timeout
                ))),
            }
        })
    }

    fn watch(&self, request: WatchRequest) -> BoxFuture<'_, Result<WatchStream, SourceError>> {
        Box::pin(async move {
            match tokio::time::timeout(self.options.list_timeout, self.open_watch(request)).await {
                Ok(result) => result,
                Err(_) => Err(SourceError::transport(format!(
                    "{}: the watch was not answered within {:?}",
                    self.describe(),
                    self.options.list_timeout
                ))),
            }
        })
    }

    fn supports_streaming_list(&self) -> bool {
        self.options.streaming_list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_asks_for_the_timeout_its_request_names() {
        let asked = |secs| timeout_seconds(Some(Duration::from_secs_f64(secs)));
        assert_eq!(asked(450.0), 450, "the Reflector's draw, not the lister's");
        assert_eq!(asked(4.7), 4);
        assert_eq!(asked(0.2), 1, "at least a second: 0 would mean none");
        assert_eq!(timeout_seconds(None), 300);
    }

    #[tokio::test]
    async fn bodies_are_read_up_to_the_bound_and_no_further() {
        let mut small = Body::from(b"0123456789".to_vec());
        assert_eq!(
            read_at_most(&mut small, 10).await.unwrap(),
            Read::Whole(Bytes::from_static(b"0123456789"))
        );
        let mut large = Body::from(b"0123456789A".to_vec());
        assert_eq!(
            read_at_most(&mut large, 10).await.unwrap(),
            Read::Cut(Bytes::from_static(b"0123456789"))
        );
    }

    #[tokio::test]
    async fn an_error_answer_past_the_status_bound_is_cut_and_says_so() {
        let page = format!("<html>{}</html>", "gateway ".repeat(MAX_STATUS_BYTES));
        let status = status_of(502, Body::from(page.into_bytes())).await;
        assert_eq!((status.code, status.reason.as_str()), (502, "Unknown"));
        assert!(
            status.message.contains("<html>gateway")
                && status
                    .message
                    .contains(&format!("only the first {MAX_STATUS_BYTES} bytes")),
            "{}",
            status.message
        );
        let whole = br#"{"kind":"Status","code":409,"reason":"AlreadyExists","message":"taken"}"#;
        let status = status_of(409, Body::from(whole.to_vec())).await;
        assert_eq!(
            (status.reason.as_str(), status.message.as_str()),
            ("AlreadyExists", "taken")
        );
    }
}
