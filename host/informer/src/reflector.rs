//! The Reflector: ListAndWatch one resource into a DeltaFIFO.
//!
//! Written as a state machine (`State` plus `Reflector::step`): each state says what we
//! know and what we wait for. List (page by page) into `Replace`, watch from the list's
//! resourceVersion, re-watch from the last version seen when a watch ends, relist on `410
//! Gone`, and back off exponentially with jitter on other errors.

use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{FutureExt as _, StreamExt};
use indexmap::IndexMap;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info_span, warn};

use crate::backoff::Backoff;
use crate::fifo::DeltaFifo;
use crate::object::{DecodeError, Object, ObjectDecoder, ObjectKey};
use crate::source::{
    ListRequest, ListerWatcher, SourceError, Status, WatchEvent, WatchRequest, WatchStream,
};

/// How the Reflector gets the initial state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InitialListMode {
    /// A streaming list when the source supports it, falling back as client-go does: after a
    /// refusal by the server (`400`/`422` on opening, or an `ERROR` event before the
    /// end-of-initial-events bookmark, as kube-apiserver v1.32 sends on an etcd without
    /// `RequestWatchProgress`) list-then-watch from then on; after any other failure (the
    /// connection, a `5xx` on opening, a stream ending early) list-then-watch for that attempt.
    #[default]
    Auto,
    /// Always a paginated list, then a watch.
    ListThenWatch,
    /// Always a streaming list (`sendInitialEvents`); a refusal is an error, retried.
    StreamingList,
}

/// Tuning of a Reflector. The defaults are client-go's.
#[derive(Debug, Clone)]
pub struct ReflectorConfig {
    /// Page size of the initial list.
    pub page_size: Option<u32>,
    /// Server-side watch timeouts are drawn from this range, so that watches of many
    /// informers do not all restart at once: each watch names its draw
    /// ([`WatchRequest::timeout`]), which a source asks its server for (the kube source as
    /// `timeoutSeconds`; it draws none of its own). client-go's: 5 to 10 min.
    pub watch_timeout: Range<Duration>,
    /// First back-off delay after an error.
    pub backoff_initial: Duration,
    /// Longest back-off delay.
    pub backoff_max: Duration,
    /// After this long without an error, the back-off starts again from `backoff_initial`.
    pub backoff_reset_after: Duration,
    /// How the initial state is fetched.
    pub initial_list: InitialListMode,
}

impl Default for ReflectorConfig {
    fn default() -> Self {
        Self {
            page_size: Some(500),
            watch_timeout: Duration::from_secs(300)..Duration::from_secs(600),
            backoff_initial: Duration::from_millis(800),
            backoff_max: Duration::from_secs(30),
            backoff_reset_after: Duration::from_secs(120),
            initial_list: InitialListMode::Auto,
        }
    }
}

/// What went wrong while listing or watching; handed to the watch-error hook.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ReflectorError {
    /// A list call failed.
    #[error("listing {resource} failed: {source}")]
    ListFailed {
        /// The resource.
        resource: String,
        /// Why.
        #[source]
        source: SourceError,
    },
    /// A watch could not be opened, or broke.
    #[error("watching {resource} failed: {source}")]
    WatchFailed {
        /// The resource.
        resource: String,
        /// Why.
        #[source]
        source: SourceError,
    },
    /// The server ended a watch with an ERROR event.
    #[error("watch of {resource} ended by the server: {status}")]
    WatchEnded {
        /// The resource.
        resource: String,
        /// What the server said.
        status: Status,
    },
    /// An object in a list or watch could not be decoded; it was skipped.
    #[error("skipped an object of {resource}: {source}")]
    ObjectSkipped {
        /// The resource.
        resource: String,
        /// Why.
        #[source]
        source: DecodeError,
    },
}

/// Called for every error the Reflector meets; it keeps going regardless.
pub type WatchErrorHandler = Arc<dyn Fn(&ReflectorError) + Send + Sync>;

/// Counters of one Reflector, shared with whoever reads them; the Reflector is the only
/// writer. Read them with [`counts`](Self::counts).
#[derive(Debug, Default)]
pub struct ReflectorStats {
    lists: AtomicU64,
    watches: AtomicU64,
    events: AtomicU64,
    skipped_objects: AtomicU64,
    errors: AtomicU64,
    panics: AtomicU64,
    /// The resourceVersion of the last list or watch event (bookmarks included) whose
    /// changes are in the DeltaFIFO; empty before the first list.
    last_sync_resource_version: Mutex<String>,
    /// The last failure to list or watch since the last complete list.
    last_error: Mutex<Option<ReflectorError>>,
}

/// A Reflector's counters at one moment. Each only grows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReflectorCounts {
    /// Complete lists (initial and relists).
    pub lists: u64,
    /// Watches opened.
    pub watches: u64,
    /// Watch events received (bookmarks included).
    pub events: u64,
    /// Objects skipped because they could not be decoded.
    pub skipped_objects: u64,
    /// List and watch failures.
    pub errors: u64,
    /// Panics inside the Reflector (a bug, or a source that panicked), each followed by a
    /// fresh list after a back-off.
    pub panics: u64,
}

impl ReflectorStats {
    /// The counters now. Each is read on its own: a snapshot taken while the Reflector runs
    /// may hold a list without the watch that followed it.
    pub fn counts(&self) -> ReflectorCounts {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ReflectorCounts {
            lists: read(&self.lists),
            watches: read(&self.watches),
            events: read(&self.events),
            skipped_objects: read(&self.skipped_objects),
            errors: read(&self.errors),
            panics: read(&self.panics),
        }
    }

    /// client-go's `LastSyncResourceVersion`: every change up to this version has been
    /// handed to the DeltaFIFO. Empty before the first list.
    pub fn last_sync_resource_version(&self) -> String {
        self.last_sync().clone()
    }

    fn set_last_sync_resource_version(&self, resource_version: &str) {
        resource_version.clone_into(&mut self.last_sync());
    }

    /// The last failure to list or watch since the last complete list: why an informer
    /// that has not synced has not. Skipped objects do not count; `None` after a list.
    pub fn last_error(&self) -> Option<ReflectorError> {
        self.last_error_slot().clone()
    }

    fn set_last_error(&self, error: Option<ReflectorError>) {
        *self.last_error_slot() = error;
    }

    fn last_error_slot(&self) -> std::sync::MutexGuard<'_, Option<ReflectorError>> {
        // A plain assignment cannot leave the value half-written.
        self.last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A complete list: counted, and the failures before it are history.
    fn listed(&self) {
        self.lists.fetch_add(1, Ordering::Relaxed);
        self.set_last_error(None);
    }

    fn last_sync(&self) -> std::sync::MutexGuard<'_, String> {
        // A plain assignment cannot leave the string half-written.
        self.last_sync_resource_version
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The state a streaming list has sent so far: one object per key, as client-go's watch
/// list keeps it in a temporary store, so that an object modified before the
/// end-of-initial-events bookmark is listed once and one deleted before it not at all.
#[derive(Default)]
struct InitialEvents(IndexMap<ObjectKey, Arc<Object>>);

impl InitialEvents {
    fn put(&mut self, object: Arc<Object>) {
        self.0.insert(object.key().clone(), object);
    }

    fn remove(&mut self, object: &Object) {
        // Order within an initial list carries no meaning; swapping keeps this O(1).
        self.0.swap_remove(object.key());
    }

    fn into_items(self) -> Vec<Arc<Object>> {
        self.0.into_values().collect()
    }
}

/// What the Reflector knows and waits for.
enum State {
    /// Nothing usable: list from scratch with a consistent read (streamed, when the mode and
    /// the server allow).
    List,
    /// The same, with a paginated list whatever the mode: a streaming list just failed.
    PagedList,
    /// In the middle of a paginated list.
    ListPage {
        /// Token for the next page.
        continue_token: String,
        /// Objects of the pages so far.
        items: Vec<Arc<Object>>,
    },
    /// Open a watch; with `initial` set, as a streaming list.
    Watch {
        resource_version: String,
        streaming_list: bool,
    },
    /// A watch is open.
    Watching {
        stream: WatchStream,
        /// Last version seen: a re-watch resumes after it.
        resource_version: String,
        /// Streaming list: the state so far, from the events before the
        /// end-of-initial-events bookmark.
        initial: Option<InitialEvents>,
        opened: Instant,
        saw_event: bool,
    },
    /// Waiting before trying `then`.
    Backoff { until: Instant, then: Box<State> },
}

/// ListAndWatch for one resource into a [`DeltaFifo`]. See the module docs.
pub struct Reflector {
    source: Arc<dyn ListerWatcher>,
    decoder: ObjectDecoder,
    fifo: Arc<DeltaFifo>,
    config: ReflectorConfig,
    on_error: Option<WatchErrorHandler>,
    stats: Arc<ReflectorStats>,
    backoff: Backoff,
    /// The source refused a streaming list once; use list-then-watch from now on.
    streaming_refused: bool,
}

impl Reflector {
    /// A Reflector feeding `fifo` from `source`.
    pub fn new(
        source: Arc<dyn ListerWatcher>,
        decoder: ObjectDecoder,
        fifo: Arc<DeltaFifo>,
        config: ReflectorConfig,
    ) -> Self {
        let backoff = Backoff::new(config.backoff_initial, config.backoff_max)
            .with_jitter()
            .reset_after(config.backoff_reset_after);
        Self {
            source,
            decoder,
            fifo,
            config,
            on_error: None,
            stats: Arc::default(),
            backoff,
            streaming_refused: false,
        }
    }

    /// Calls `handler` for every error met.
    pub fn with_error_handler(mut self, handler: WatchErrorHandler) -> Self {
        self.on_error = Some(handler);
        self
    }

    /// The counters, shared.
    pub fn stats(&self) -> Arc<ReflectorStats> {
        self.stats.clone()
    }

    /// Lists and watches until `cancel` fires.
    pub async fn run(mut self, cancel: CancellationToken) {
        let span = info_span!("reflector", resource = %self.decoder.resource());
        async move {
            // The wait lives across steps: a step per watch event must not register and drop
            // a waiter each time.
            let cancelled = cancel.cancelled();
            tokio::pin!(cancelled);
            let mut state = State::List;
            loop {
                // A panic in a step (a bug, or a source that panicked) must not end the
                // informer's only Reflector silently: it is counted, logged, and followed by
                // a fresh list after a back-off, the way a failed list is.
                let step = AssertUnwindSafe(self.step(state)).catch_unwind();
                tokio::select! {
                    biased;
                    () = &mut cancelled => return,
                    next = step => state = match next {
                        Ok(next) => next,
                        Err(payload) => self.after_panic(payload.as_ref()),
                    },
                }
            }
        }
        .instrument(span)
        .await
    }

    fn resource(&self) -> String {
        self.decoder.resource().to_string()
    }

    /// Counts and logs a panic of a step; a fresh list follows a back-off.
    fn after_panic(&mut self, payload: &(dyn std::any::Any + Send)) -> State {
        self.stats.panics.fetch_add(1, Ordering::Relaxed);
        let message = crate::panic_message(payload);
        let delay = self.next_delay(None);
        tracing::error!(resource = %self.resource(), %message, retry_in = ?delay, "the reflector panicked; it lists again");
        State::Backoff {
            until: Instant::now() + delay,
            then: Box::new(State::List),
        }
    }

    /// Logs `error` (with the back-off before the next attempt, when there is one: one line
    /// per failed attempt) and hands it to the error handler.
    fn report(&self, error: ReflectorError, retry_in: Option<Duration>) {
        // As an error value, so that the log shows its sources (the HTTP client's error).
        let logged = &error as &(dyn std::error::Error + 'static);
        match retry_in {
            Some(delay) => warn!(error = logged, retry_in = ?delay, "reflector"),
            None => warn!(error = logged, "reflector"),
        }
        if !matches!(error, ReflectorError::ObjectSkipped { .. }) {
            self.stats.set_last_error(Some(error.clone()));
        }
        if let Some(handler) = &self.on_error {
            handler(&error);
        }
    }

    fn use_streaming_list(&self) -> bool {
        match self.config.initial_list {
            InitialListMode::Auto => {
                self.source.supports_streaming_list() && !self.streaming_refused
            }
            InitialListMode::ListThenWatch => false,
            InitialListMode::StreamingList => true,
        }
    }

    /// One transition.
    async fn step(&mut self, state: State) -> State {
        match state {
            State::List if self.use_streaming_list() => State::Watch {
                resource_version: String::new(),
                streaming_list: true,
            },
            State::List | State::PagedList => self.list_page(None, Vec::new()).await,
            State::ListPage {
                continue_token,
                items,
            } => self.list_page(Some(continue_token), items).await,
            State::Watch {
                resource_version,
                streaming_list,
            } => self.open_watch(resource_version, streaming_list).await,
            State::Watching {
                stream,
                resource_version,
                initial,
                opened,
                saw_event,
            } => {
                self.next_event(stream, resource_version, initial, opened, saw_event)
                    .await
            }
            State::Backoff { until, then } => {
                tokio::time::sleep_until(until).await;
                *then
            }
        }
    }

    async fn list_page(
        &mut self,
        continue_token: Option<String>,
        mut items: Vec<Arc<Object>>,
    ) -> State {
        let continuing = continue_token.is_some();
        let request = ListRequest {
            limit: self.config.page_size,
            continue_token,
            resource_version: None,
        };
        match self.source.list(request).await {
            Ok(page) => {
                items.reserve(page.items.len());
                for raw in &page.items {
                    if let Some(object) = self.decode(raw) {
                        items.push(object);
                    }
                }
                match page.continue_token.filter(|t| !t.is_empty()) {
                    Some(continue_token) => State::ListPage {
                        continue_token,
                        items,
                    },
                    None => {
                        debug!(objects = items.len(), rv = %page.resource_version, "listed");
                        self.stats.listed();
                        self.fifo.replace(items);
                        self.stats
                            .set_last_sync_resource_version(&page.resource_version);
                        State::Watch {
                            resource_version: page.resource_version,
                            streaming_list: false,
                        }
                    }
                }
            }
            // An expired continue token: the list must start over.
            Err(error) if error.is_gone() && continuing => {
                self.fail(ReflectorError::ListFailed {
                    resource: self.resource(),
                    source: error,
                });
                State::List
            }
            Err(error) => {
                let retry_after = error.retry_after();
                let error = ReflectorError::ListFailed {
                    resource: self.resource(),
                    source: error,
                };
                self.fail_and_back_off(error, State::List, retry_after)
            }
        }
    }

    async fn open_watch(&mut self, resource_version: String, streaming_list: bool) -> State {
        let timeout = random_duration(&self.config.watch_timeout);
        let request = WatchRequest {
            resource_version: resource_version.clone(),
            timeout: Some(timeout),
            bookmarks: true,
            send_initial_events: streaming_list,
        };
        match self.source.watch(request).await {
            Ok(stream) => {
                self.stats.watches.fetch_add(1, Ordering::Relaxed);
                debug!(rv = %resource_version, streaming_list, "watching");
                State::Watching {
                    stream,
                    resource_version,
                    initial: streaming_list.then(InitialEvents::default),
                    opened: Instant::now(),
                    saw_event: false,
                }
            }
            Err(error) if error.is_gone() => {
                self.fail(ReflectorError::WatchFailed {
                    resource: self.resource(),
                    source: error,
                });
                State::List
            }
            // A server without streaming lists refuses them (422, or 400 on older ones).
            Err(SourceError::Status { status, .. })
                if streaming_list
                    && self.config.initial_list == InitialListMode::Auto
                    && matches!(status.code, 400 | 422) =>
            {
                debug!(%status, "streaming list refused; falling back to list-then-watch");
                self.streaming_refused = true;
                State::List
            }
            Err(error) => {
                let retry_after = error.retry_after();
                let error = ReflectorError::WatchFailed {
                    resource: self.resource(),
                    source: error,
                };
                let then = if streaming_list {
                    self.relist_after_streaming_failure()
                } else {
                    State::Watch {
                        resource_version,
                        streaming_list,
                    }
                };
                self.fail_and_back_off(error, then, retry_after)
            }
        }
    }

    /// Where to go after a streaming list failed for another reason than a refusal: in
    /// [`InitialListMode::Auto`], one paginated list (the next relist streams again).
    fn relist_after_streaming_failure(&self) -> State {
        match self.config.initial_list {
            InitialListMode::Auto => State::PagedList,
            InitialListMode::ListThenWatch | InitialListMode::StreamingList => State::List,
        }
    }

    async fn next_event(
        &mut self,
        mut stream: WatchStream,
        mut resource_version: String,
        mut initial: Option<InitialEvents>,
        opened: Instant,
        saw_event: bool,
    ) -> State {
        let event = match stream.next().await {
            Some(Ok(event)) => event,
            Some(Err(error)) => {
                let gone = error.is_gone();
                let retry_after = error.retry_after();
                let error = ReflectorError::WatchFailed {
                    resource: self.resource(),
                    source: error,
                };
                return self.after_broken_watch(
                    error,
                    resource_version,
                    initial.is_some(),
                    gone,
                    retry_after,
                );
            }
            None => {
                // A watch that ended normally resumes at once, unless the server closes every
                // watch straight away: that would spin.
                let quick = !saw_event && opened.elapsed() < Duration::from_secs(1);
                let then = match initial {
                    Some(_) => self.relist_after_streaming_failure(),
                    None => State::Watch {
                        resource_version,
                        streaming_list: false,
                    },
                };
                return if quick { self.backoff_then(then) } else { then };
            }
        };
        self.stats.events.fetch_add(1, Ordering::Relaxed);
        match event {
            WatchEvent::Added(raw) | WatchEvent::Modified(raw) if initial.is_some() => {
                if let Some(object) = self.decode(&raw) {
                    object.write_resource_version(&mut resource_version);
                    initial.as_mut().expect("streaming list").put(object);
                }
            }
            WatchEvent::Deleted(raw) if initial.is_some() => {
                if let Some(object) = self.decode(&raw) {
                    object.write_resource_version(&mut resource_version);
                    initial.as_mut().expect("streaming list").remove(&object);
                }
            }
            WatchEvent::Added(raw) => {
                if let Some(object) = self.decode(&raw) {
                    object.write_resource_version(&mut resource_version);
                    self.fifo.add(object);
                }
            }
            WatchEvent::Modified(raw) => {
                if let Some(object) = self.decode(&raw) {
                    object.write_resource_version(&mut resource_version);
                    self.fifo.update(object);
                }
            }
            WatchEvent::Deleted(raw) => {
                if let Some(object) = self.decode(&raw) {
                    object.write_resource_version(&mut resource_version);
                    self.fifo.delete(object);
                }
            }
            WatchEvent::Bookmark {
                resource_version: bookmark,
                initial_events_end,
            } => {
                if !bookmark.is_empty() {
                    resource_version = bookmark;
                }
                if initial_events_end
                    && let Some(items) = initial.take().map(InitialEvents::into_items)
                {
                    debug!(objects = items.len(), rv = %resource_version, "streamed initial list");
                    self.stats.listed();
                    self.fifo.replace(items);
                }
            }
            WatchEvent::Error(status) => {
                let gone = status.is_gone();
                let error = ReflectorError::WatchEnded {
                    resource: self.resource(),
                    status,
                };
                // The server accepted the streaming list, then refused it in the stream.
                if initial.is_some() && self.config.initial_list == InitialListMode::Auto {
                    self.fail(error);
                    debug!("streaming list failed in the stream; falling back to list-then-watch");
                    self.streaming_refused = true;
                    return State::List;
                }
                return self.after_broken_watch(
                    error,
                    resource_version,
                    initial.is_some(),
                    gone,
                    None,
                );
            }
        }
        if initial.is_none() {
            self.stats.set_last_sync_resource_version(&resource_version);
        }
        State::Watching {
            stream,
            resource_version,
            initial,
            opened,
            saw_event: true,
        }
    }

    /// After `error` broke a watch: relist at once on `410 Gone`, else back off, then
    /// re-watch from `resource_version` (or relist, for a streaming list).
    fn after_broken_watch(
        &mut self,
        error: ReflectorError,
        resource_version: String,
        streaming_list: bool,
        gone: bool,
        retry_after: Option<Duration>,
    ) -> State {
        if gone {
            self.fail(error);
            return State::List;
        }
        let then = if streaming_list {
            self.relist_after_streaming_failure()
        } else {
            State::Watch {
                resource_version,
                streaming_list: false,
            }
        };
        self.fail_and_back_off(error, then, retry_after)
    }

    /// Counts and reports a failure after which `then` follows at once.
    fn fail(&mut self, error: ReflectorError) {
        self.stats.errors.fetch_add(1, Ordering::Relaxed);
        self.report(error, None);
    }

    /// Counts and reports a failure, in one line with the back-off before `then`.
    fn fail_and_back_off(
        &mut self,
        error: ReflectorError,
        then: State,
        retry_after: Option<Duration>,
    ) -> State {
        self.stats.errors.fetch_add(1, Ordering::Relaxed);
        let delay = self.next_delay(retry_after);
        self.report(error, Some(delay));
        State::Backoff {
            until: Instant::now() + delay,
            then: Box::new(then),
        }
    }

    /// Backs off before `then` without a failure to report (a watch the server closed at
    /// once).
    fn backoff_then(&mut self, then: State) -> State {
        let delay = self.next_delay(None);
        debug!(?delay, "backing off");
        State::Backoff {
            until: Instant::now() + delay,
            then: Box::new(then),
        }
    }

    /// The next back-off, at least what the server asked for.
    fn next_delay(&mut self, retry_after: Option<Duration>) -> Duration {
        self.backoff
            .next_delay()
            .max(retry_after.unwrap_or_default())
    }

    fn decode(&self, raw: &[u8]) -> Option<Arc<Object>> {
        match self.decoder.decode(raw) {
            Ok(object) => Some(Arc::new(object)),
            Err(source) => {
                self.stats.skipped_objects.fetch_add(1, Ordering::Relaxed);
                self.report(
                    ReflectorError::ObjectSkipped {
                        resource: self.resource(),
                        source,
                    },
                    None,
                );
                None
            }
        }
    }
}

fn random_duration(range: &Range<Duration>) -> Duration {
    if range.is_empty() {
        return range.start;
    }
    let nanos = rand::random_range(range.start.as_nanos() as u64..range.end.as_nanos() as u64);
    Duration::from_nanos(nanos)
}
