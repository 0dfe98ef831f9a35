//! Where objects come from: the [`ListerWatcher`] contract between the Reflector and an API.
//!
//! Implementations: [`crate::memory`] (an in-process server for tests and benchmarks), the
//! kube-backed one in the binary, and the local file-backed cluster. The Reflector sees only
//! this trait, so everything above it behaves the same on each.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::BoxStream;

/// A Kubernetes `Status` as an error: what the server said and why.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize)]
pub struct Status {
    /// HTTP-like status code, e.g. 410.
    #[serde(default)]
    pub code: u16,
    /// Machine-readable reason, e.g. `Expired`.
    #[serde(default)]
    pub reason: String,
    /// Human-readable message.
    #[serde(default)]
    pub message: String,
}

impl Status {
    /// A status from its parts.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }

    /// `410 Gone`: the requested resourceVersion has been compacted away; relist.
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// Whether this is `410 Gone` (reason `Expired` or `Gone`).
    pub fn is_gone(&self) -> bool {
        self.code == 410
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

/// Why a list or watch call failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// The server answered with an error `Status`.
    #[error("server said {status}")]
    Status {
        /// What the server said.
        status: Status,
        /// How long the server asked us to wait (`Retry-After`), if it did.
        retry_after: Option<Duration>,
    },
    /// The request never got an answer (connection refused, reset, TLS, timeout).
    #[error("transport: {what}")]
    Transport {
        /// The request and the step that failed (`GET /api/v1/pods: the watch connection
        /// broke`), without the cause's text.
        what: String,
        /// The underlying error (the HTTP client's, an I/O error), if there is one.
        #[source]
        source: Option<Cause>,
    },
    /// The answer could not be decoded (not JSON, cut short, unknown shape).
    #[error("undecodable response: {what}")]
    Decode {
        /// The request and what was wrong with its answer, without the cause's text.
        what: String,
        /// The decoder's error, if there is one.
        #[source]
        source: Option<Cause>,
    },
}

/// The underlying error of a [`SourceError`]: shared, so that the error stays `Clone` (the
/// informer keeps its last error and hands it to every caller that asks).
pub type Cause = std::sync::Arc<dyn std::error::Error + Send + Sync>;

impl SourceError {
    /// An error carrying a server `Status`.
    pub fn status(status: Status) -> Self {
        Self::Status {
            status,
            retry_after: None,
        }
    }

    /// A [`SourceError::Transport`] without an underlying error (a timeout, a stream cut
    /// between events); add one with [`SourceError::with_source`].
    pub fn transport(what: impl Into<String>) -> Self {
        Self::Transport {
            what: what.into(),
            source: None,
        }
    }

    /// A [`SourceError::Decode`] without an underlying error; add one with
    /// [`SourceError::with_source`].
    pub fn decode(what: impl Into<String>) -> Self {
        Self::Decode {
            what: what.into(),
            source: None,
        }
    }

    /// This error with `cause` as its source; a [`SourceError::Status`] is returned as it is
    /// (the server's `Status` is its whole cause).
    pub fn with_source(mut self, cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        match &mut self {
            Self::Transport { source, .. } | Self::Decode { source, .. } => {
                *source = Some(std::sync::Arc::new(cause));
            }
            Self::Status { .. } => {}
        }
        self
    }

    /// Whether the server said `410 Gone`.
    pub fn is_gone(&self) -> bool {
        matches!(self, Self::Status { status, .. } if status.is_gone())
    }

    /// The server's requested delay before retrying, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// One page of a list call.
#[derive(Debug, Clone, Default)]
pub struct ListRequest {
    /// Page size; `None` lists everything at once.
    pub limit: Option<u32>,
    /// The `continue` token of the previous page.
    pub continue_token: Option<String>,
    /// `None` (or empty) asks for a consistent read of the latest state.
    pub resource_version: Option<String>,
}

/// A page of objects, each as raw JSON. List items carry no `kind` or `apiVersion`.
#[derive(Debug, Clone, Default)]
pub struct ListPage {
    /// The objects, one JSON object each.
    pub items: Vec<Bytes>,
    /// The list's resourceVersion (the same on every page of one list).
    pub resource_version: String,
    /// Present when more pages follow.
    pub continue_token: Option<String>,
}

/// Parameters of a watch call.
#[derive(Debug, Clone, Default)]
pub struct WatchRequest {
    /// Resume after this resourceVersion.
    pub resource_version: String,
    /// Ask the server to end the watch after this long (`timeoutSeconds`).
    pub timeout: Option<Duration>,
    /// Ask for BOOKMARK events (`allowWatchBookmarks`).
    pub bookmarks: bool,
    /// Ask for the current state as ADDED events first, ended by a bookmark marked
    /// `k8s.io/initial-events-end` (`sendInitialEvents`).
    pub send_initial_events: bool,
}

/// One event of a watch stream.
#[derive(Debug, Clone)]
pub enum WatchEvent {
    /// ADDED, with the object's JSON.
    Added(Bytes),
    /// MODIFIED, with the object's JSON.
    Modified(Bytes),
    /// DELETED, with the object's last state.
    Deleted(Bytes),
    /// BOOKMARK: only a resourceVersion to resume from.
    Bookmark {
        /// Resume watching after this version.
        resource_version: String,
        /// Marks the end of the initial events of a streaming list.
        initial_events_end: bool,
    },
    /// ERROR: the watch ends; `410` means the resourceVersion is too old.
    Error(Status),
}

/// A stream of watch events; it ends when the server closes the watch.
pub type WatchStream = BoxStream<'static, Result<WatchEvent, SourceError>>;

/// Lists and watches one resource (already narrowed to a namespace and selectors).
///
/// Contract: a list returns the state at its `resource_version`; a watch from that version
/// returns every later change exactly once, in order, or ends with an error (`410` when the
/// version is too old). Watch streams end on their own (timeouts, connection loss); the
/// Reflector re-watches from the last version it saw.
pub trait ListerWatcher: Send + Sync + 'static {
    /// Lists one page.
    fn list(&self, request: ListRequest) -> BoxFuture<'_, Result<ListPage, SourceError>>;
    /// Opens a watch.
    fn watch(&self, request: WatchRequest) -> BoxFuture<'_, Result<WatchStream, SourceError>>;
    /// Whether `watch` honours `send_initial_events`. The Reflector then uses a streaming
    /// list instead of list-then-watch.
    fn supports_streaming_list(&self) -> bool {
        false
    }
}
