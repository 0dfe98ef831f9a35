//! The API server's JSON wire format, decoded without building a tree of any object.
//!
//! - [`LineSplitter`]: a watch body arrives in chunks that need not end on a line; it buffers
//!   until a newline and bounds the length of one line ([`MAX_LINE_BYTES`]).
//! - [`decode_watch_line`]: one `{"type":…,"object":…}` line into a [`WatchEvent`]; the object
//!   is handed on as a slice of the line's bytes, never parsed here.
//! - [`decode_list`]: a `…List` body into a [`ListPage`] whose items are slices of the body.
//! - [`decode_status`]: an error answer into a [`Status`], whatever its body.
//!
//! Envelopes and list bodies are walked with the informer's structural scanner
//! ([`kubeplug_json`]), not parsed by serde_json: its strict check of every byte of each
//! object, before the decoder scanned them again, cost more than decoding (the `wire` bench);
//! finding the object's end is a structural skip, and a watch event's object, the envelope's
//! last member as every API server writes it, is not scanned here at all (see
//! [`decode_watch_line`]): the decoder's one scan checks it. So the objects are checked as the
//! decoder checks them: their members strictly, their metadata strictly, and the insides of
//! `spec`, `status` and the like only for structure (strings end, brackets balance). Those
//! are the API server's to validate and reach plugins as it sent them; a plugin that parses
//! them gets its parser's error, and paths through them select nothing.

use std::borrow::Cow;
use std::ops::Range;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use kubeplug_informer::resource::Resource;
use kubeplug_informer::source::{ListPage, Status, WatchEvent};
use kubeplug_json::{ObjectScanner, ScanError, string_value, utf8};
use serde::Deserialize;

/// The longest watch line accepted: 16 MiB. etcd refuses values over 1.5 MiB by default and
/// the API server's own request limit is 3 MiB, so a longer line is a broken stream, not an
/// object.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Why a piece of the wire format could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// A watch line grew past the bound without a newline.
    #[error("a watch line is longer than {limit} bytes without a newline; the stream is broken")]
    LineTooLong {
        /// The bound, [`MAX_LINE_BYTES`] by default.
        limit: usize,
    },
    /// A watch line is not a `{"type":…,"object":…}` envelope.
    #[error("watch line is not an event envelope: {snippet}")]
    BadEnvelope {
        /// What was wrong.
        #[source]
        reason: Malformed,
        /// The start of the line.
        snippet: String,
    },
    /// The event type is none of ADDED, MODIFIED, DELETED, BOOKMARK, ERROR.
    #[error("unknown watch event type {0:?}")]
    UnknownEventType(String),
    /// A BOOKMARK whose object has no `metadata.resourceVersion`.
    #[error("bookmark without metadata.resourceVersion: {0}")]
    BadBookmark(String),
    /// An ERROR event whose object is not a `Status`.
    #[error("watch ERROR event whose object is not a Status: {0}")]
    BadErrorObject(String),
    /// A list answer that is not a `<Kind>List` with `metadata` and `items`.
    #[error("list answer is not a {expected}: {snippet}")]
    BadList {
        /// `<Kind>List`.
        expected: String,
        /// What was wrong.
        #[source]
        reason: Malformed,
        /// The start of the body.
        snippet: String,
    },
}

/// What is wrong with a watch line's envelope or a list body: the reason of
/// [`WireError::BadEnvelope`] and [`WireError::BadList`].
#[derive(Debug, thiserror::Error)]
pub enum Malformed {
    /// Not UTF-8.
    #[error(transparent)]
    NotUtf8(#[from] std::str::Utf8Error),
    /// Not a JSON object, or one cut short.
    #[error(transparent)]
    NotJson(#[from] ScanError),
    /// A member appears twice: readers disagree on which one counts.
    #[error("duplicate field `{0}`")]
    DuplicateField(&'static str),
    /// A member is missing.
    #[error("missing field `{0}`")]
    MissingField(&'static str),
    /// A member that must be a string is not one.
    #[error("{0} is not a string")]
    NotAString(&'static str),
    /// `items` is neither an array nor `null`.
    #[error("items: expected '[' or null")]
    ItemsNotAnArray,
    /// `items` does not scan.
    #[error("items")]
    BadItems(#[source] ScanError),
    /// The list is of another kind.
    #[error("its kind is {0:?}")]
    WrongKind(String),
    /// The list has no `kind`.
    #[error("it has no kind")]
    NoKind,
    /// `metadata` is not a list's metadata.
    #[error("metadata")]
    BadMetadata(#[source] serde_json::Error),
    /// `metadata.resourceVersion` is missing or empty.
    #[error("it has no metadata.resourceVersion")]
    NoResourceVersion,
}

/// The first bytes of `bytes` as text, for error messages.
pub fn snippet(bytes: &[u8]) -> String {
    const MAX: usize = 160;
    let end = bytes.len().min(MAX);
    let mut text = String::from_utf8_lossy(&bytes[..end]).into_owned();
    if bytes.len() > MAX {
        text.push('…');
    }
    text
}

/// Splits a chunked body into lines.
///
/// Contract: [`push`](Self::push) returns every complete line (without its `\n`, and with empty
/// lines dropped) in order; the bytes after the last newline wait for the next chunk. A line
/// longer than the bound is an error, after which the splitter must not be used again.
#[derive(Debug)]
pub struct LineSplitter {
    /// Bytes after the last newline seen. Invariant: contains no `\n`, at most `limit` bytes.
    partial: BytesMut,
    limit: usize,
}

impl Default for LineSplitter {
    fn default() -> Self {
        Self::new(MAX_LINE_BYTES)
    }
}

impl LineSplitter {
    /// A splitter that refuses lines over `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            partial: BytesMut::new(),
            limit,
        }
    }

    /// Feeds one chunk; returns the lines it completed.
    pub fn push(&mut self, mut chunk: Bytes) -> Result<Vec<Bytes>, WireError> {
        let mut lines = Vec::new();
        // A watch line is a whole object, kilobytes long: find its end with SIMD.
        while let Some(newline) = memchr::memchr(b'\n', &chunk) {
            let head = chunk.split_to(newline);
            chunk.advance(1);
            self.check(head.len())?;
            let line = if self.partial.is_empty() {
                // The common case: a whole line inside one chunk, taken without copying.
                head
            } else {
                self.partial.extend_from_slice(&head);
                self.partial.split().freeze()
            };
            if !line.iter().all(u8::is_ascii_whitespace) {
                lines.push(line);
            }
        }
        self.check(chunk.len())?;
        self.partial.extend_from_slice(&chunk);
        Ok(lines)
    }

    fn check(&self, more: usize) -> Result<(), WireError> {
        if self.partial.len() + more > self.limit {
            return Err(WireError::LineTooLong { limit: self.limit });
        }
        Ok(())
    }

    /// Bytes of an unfinished line (non-zero when a stream ends in the middle of an event).
    pub fn pending(&self) -> usize {
        self.partial.len()
    }
}

#[derive(Deserialize)]
struct BookmarkObject {
    metadata: BookmarkMeta,
}

#[derive(Deserialize)]
struct BookmarkMeta {
    #[serde(rename = "resourceVersion", default)]
    resource_version: Option<String>,
    #[serde(default)]
    annotations: Option<std::collections::BTreeMap<String, String>>,
}

/// The annotation that marks the bookmark ending a streaming list's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// A `Status` as the server writes it; every field optional so that odd ones still decode.
#[derive(Deserialize)]
struct StatusBody {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    code: Option<u16>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

/// The value of the JSON string `raw`, the member `field`.
fn json_string<'a>(raw: &'a str, field: &'static str) -> Result<Cow<'a, str>, Malformed> {
    string_value(raw).ok_or(Malformed::NotAString(field))
}

/// The members of the object `text` that `wanted` names, as byte ranges of their values;
/// every other member is skipped. A wanted member that appears twice is refused, as
/// readers disagree on which one counts.
fn members<const N: usize>(
    text: &str,
    wanted: [&'static str; N],
) -> Result<[Option<Range<usize>>; N], Malformed> {
    let mut found = [const { None }; N];
    walk_members(text, wanted, |slot, scanner| {
        found[slot] = Some(scanner.skip_value()?);
        Ok(())
    })?;
    Ok(found)
}

/// Walks the members of the object `text`, handing each one `wanted` names to `visit`, by
/// its index in `wanted`, with the scanner on its value; `visit` moves past the value, so
/// that it can enter one rather than skip it and scan it again. Every other member is
/// skipped; a wanted member that appears twice is refused, as readers disagree on which one
/// counts.
fn walk_members<const N: usize>(
    text: &str,
    wanted: [&'static str; N],
    mut visit: impl FnMut(usize, &mut ObjectScanner<'_>) -> Result<(), Malformed>,
) -> Result<(), Malformed> {
    let mut seen = [false; N];
    let mut scanner = ObjectScanner::new(text)?;
    while let Some(key) = scanner.next_key()? {
        match wanted.iter().position(|name| *name == key) {
            Some(slot) if seen[slot] => return Err(Malformed::DuplicateField(wanted[slot])),
            Some(slot) => {
                seen[slot] = true;
                visit(slot, &mut scanner)?;
            }
            None => {
                scanner.skip_value()?;
            }
        }
    }
    Ok(())
}

/// The elements of the `items` array under `scanner`'s cursor, as slices of `body` (whose
/// text `text` is), each found by one structural skip; `null` is no items.
fn list_items(
    scanner: &mut ObjectScanner<'_>,
    body: &Bytes,
    text: &str,
) -> Result<Vec<Bytes>, Malformed> {
    if !text[scanner.position()..].starts_with('[') {
        let value = scanner.skip_value().map_err(Malformed::BadItems)?;
        return match &text[value] {
            "null" => Ok(Vec::new()),
            _ => Err(Malformed::ItemsNotAnArray),
        };
    }
    let mut elements = scanner.enter_array().map_err(Malformed::BadItems)?;
    let mut items = Vec::new();
    while let Some(item) = elements.next_element().map_err(Malformed::BadItems)? {
        items.push(body.slice_ref(text[item].as_bytes()));
    }
    scanner.leave_array(elements);
    Ok(items)
}

/// Decodes one watch line. The object of ADDED, MODIFIED and DELETED events is a slice of
/// `line` (no copy, no tree).
///
/// When the line reads `{"type":…,"object":{…}}`, as every API server writes it, the object
/// is taken to run from `"object":` to the envelope's closing brace without being scanned:
/// scanning it here and again in the decoder made each byte of a watched object cost twice
/// (the `wire` bench). Only the envelope's head is read here, its UTF-8 included; the
/// decoder then checks the object whole, its UTF-8 and its end included, and an object
/// broken past its metadata is one [`ObjectDecoder`] refuses (the Reflector skips and counts
/// it) rather than an envelope this refuses. The one envelope this misreads is not watch
/// output: a member after `object` whose value is an object or array makes the object run
/// on into it, and the decoder refuses the event's object for its trailing bytes. Any other
/// envelope is walked member by member.
///
/// [`ObjectDecoder`]: kubeplug_informer::object::ObjectDecoder
pub fn decode_watch_line(line: &Bytes) -> Result<WatchEvent, WireError> {
    if let Some(event) = object_last(line) {
        return Ok(event);
    }
    let text = utf8(line).map_err(|e| bad_envelope(line)(e.into()))?;
    decode_envelope(line, text)
}

/// How long an envelope's head (`{"type":"MODIFIED","object":`) may be for [`object_last`]
/// to read it; a longer one is walked member by member.
const ENVELOPE_HEAD_BYTES: usize = 128;

/// The ADDED, MODIFIED or DELETED event of an envelope that starts with `type` and then
/// `object`, the object running to the envelope's closing brace; `None` for any other shape
/// or type, left to [`decode_envelope`]. Only the head is checked for UTF-8: the object is
/// the decoder's to check, and what follows it is JSON white space and a brace.
fn object_last(line: &Bytes) -> Option<WatchEvent> {
    let head = &line[..line.len().min(ENVELOPE_HEAD_BYTES)];
    let head = match std::str::from_utf8(head) {
        Ok(head) => head,
        Err(error) => std::str::from_utf8(&head[..error.valid_up_to()]).ok()?,
    };
    let mut scanner = ObjectScanner::new(head).ok()?;
    if scanner.next_key().ok()?? != "type" {
        return None;
    }
    let kind = scanner.skip_value().ok()?;
    let event = match &*string_value(&head[kind])? {
        "ADDED" => WatchEvent::Added,
        "MODIFIED" => WatchEvent::Modified,
        "DELETED" => WatchEvent::Deleted,
        _ => return None,
    };
    if scanner.next_key().ok()?? != "object" {
        return None;
    }
    let start = scanner.position();
    let object = trim_json_white_space(trim_json_white_space(&line[start..]).strip_suffix(b"}")?);
    object
        .ends_with(b"}")
        .then(|| event(line.slice(start..start + object.len())))
}

/// `bytes` without the JSON white space at its end.
fn trim_json_white_space(bytes: &[u8]) -> &[u8] {
    let end = bytes
        .iter()
        .rposition(|byte| !matches!(byte, b' ' | b'\t' | b'\n' | b'\r'))
        .map_or(0, |last| last + 1);
    &bytes[..end]
}

/// The error for a watch line that is not an envelope, for `reason`.
fn bad_envelope(line: &[u8]) -> impl Fn(Malformed) -> WireError + Copy + '_ {
    |reason| WireError::BadEnvelope {
        reason,
        snippet: snippet(line),
    }
}

/// [`decode_watch_line`] for any envelope: every member walked, the object's end found by a
/// structural skip.
fn decode_envelope(line: &Bytes, text: &str) -> Result<WatchEvent, WireError> {
    let bad = bad_envelope(line);
    let [kind, object] = members(text, ["type", "object"]).map_err(bad)?;
    let kind = json_string(
        &text[kind.ok_or_else(|| bad(Malformed::MissingField("type")))?],
        "type",
    )
    .map_err(bad)?;
    let object = &text[object.ok_or_else(|| bad(Malformed::MissingField("object")))?];
    let object_bytes = || line.slice_ref(object.as_bytes());
    match &*kind {
        "ADDED" => Ok(WatchEvent::Added(object_bytes())),
        "MODIFIED" => Ok(WatchEvent::Modified(object_bytes())),
        "DELETED" => Ok(WatchEvent::Deleted(object_bytes())),
        "BOOKMARK" => {
            let bookmark: BookmarkObject = serde_json::from_str(object)
                .map_err(|e| WireError::BadBookmark(format!("{e}: {}", snippet(line))))?;
            let resource_version = bookmark
                .metadata
                .resource_version
                .filter(|rv| !rv.is_empty())
                .ok_or_else(|| WireError::BadBookmark(snippet(line)))?;
            let initial_events_end = bookmark
                .metadata
                .annotations
                .is_some_and(|a| a.get(INITIAL_EVENTS_END).is_some_and(|v| v == "true"));
            Ok(WatchEvent::Bookmark {
                resource_version,
                initial_events_end,
            })
        }
        "ERROR" => {
            let status: StatusBody = serde_json::from_str(object)
                .map_err(|e| WireError::BadErrorObject(format!("{e}: {}", snippet(line))))?;
            match (status.kind.as_deref(), status.code) {
                (Some("Status"), Some(code)) => Ok(WatchEvent::Error(Status {
                    code,
                    reason: status.reason.unwrap_or_default(),
                    message: status.message.unwrap_or_default(),
                })),
                _ => Err(WireError::BadErrorObject(snippet(line))),
            }
        }
        other => Err(WireError::UnknownEventType(other.to_owned())),
    }
}

#[derive(Deserialize)]
struct ListMeta {
    #[serde(rename = "resourceVersion", default)]
    resource_version: Option<String>,
    #[serde(rename = "continue", default)]
    continue_token: Option<String>,
}

/// The kind of a list in the metadata form (`meta.k8s.io/v1`).
const METADATA_LIST_KIND: &str = "PartialObjectMetadataList";

/// Which form a list answer came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListForm {
    /// `<Kind>List`: whole objects.
    Objects,
    /// `PartialObjectMetadataList`: metadata alone.
    Metadata,
}

/// Decodes a list answer for `resource`: checks it is a `<Kind>List` (or, with
/// `metadata_form`, a `PartialObjectMetadataList`, which a metadata-only request may get),
/// and returns its items as slices of `body`, and the form it came in.
pub fn decode_list(
    resource: &Resource,
    body: &Bytes,
    metadata_form: bool,
) -> Result<(ListPage, ListForm), WireError> {
    let expected = format!("{}List", resource.kind);
    let bad = |reason| WireError::BadList {
        expected: expected.clone(),
        reason,
        snippet: snippet(body),
    };
    let text = utf8(body).map_err(|e| bad(e.into()))?;
    // `items` is entered in place: skipping it to find its range and then walking its
    // elements would scan every item once more before the decoder's own scan.
    let (mut kind, mut metadata, mut items) = (None, None, Vec::new());
    walk_members(text, ["kind", "metadata", "items"], |slot, scanner| {
        match slot {
            0 => kind = Some(scanner.skip_value()?),
            1 => metadata = Some(scanner.skip_value()?),
            _ => items = list_items(scanner, body, text)?,
        }
        Ok(())
    })
    .map_err(bad)?;
    let kind = kind
        .map(|range| json_string(&text[range], "kind"))
        .transpose()
        .map_err(bad)?;
    let form = match kind.as_deref() {
        Some(kind) if kind == expected => ListForm::Objects,
        Some(METADATA_LIST_KIND) if metadata_form => ListForm::Metadata,
        Some(kind) => return Err(bad(Malformed::WrongKind(kind.to_owned()))),
        None => return Err(bad(Malformed::NoKind)),
    };
    let metadata = metadata.ok_or_else(|| bad(Malformed::MissingField("metadata")))?;
    let metadata: ListMeta =
        serde_json::from_str(&text[metadata]).map_err(|e| bad(Malformed::BadMetadata(e)))?;
    let resource_version = metadata
        .resource_version
        .filter(|rv| !rv.is_empty())
        .ok_or_else(|| bad(Malformed::NoResourceVersion))?;
    let page = ListPage {
        items,
        resource_version,
        continue_token: metadata.continue_token.filter(|t| !t.is_empty()),
    };
    Ok((page, form))
}

/// The `Status` of an error answer with HTTP code `code`. A body that is not a `Status` (an
/// HTML page from a proxy, an unknown shape) still gives a `Status` with the HTTP code, the
/// reason `Unknown` and the start of the body as message, so that 410, 422 and 429 keep their
/// meaning.
pub fn decode_status(code: u16, body: &[u8]) -> Status {
    match serde_json::from_slice::<StatusBody>(body) {
        Ok(status) if status.kind.as_deref() == Some("Status") => Status {
            code: status.code.filter(|c| *c != 0).unwrap_or(code),
            reason: status.reason.unwrap_or_default(),
            message: status.message.unwrap_or_default(),
        },
        _ => Status {
            code,
            reason: "Unknown".to_owned(),
            message: format!("answer is not a Status: {}", snippet(body)),
        },
    }
}

/// The delay of a `Retry-After` header: whole seconds (the form the API server sends). An
/// HTTP date is not honoured.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use kubeplug_informer::object::ObjectDecoder;

    use super::*;

    /// A captured response: (status code, headers, body).
    pub(crate) fn fixture(path: &str) -> (u16, Vec<(String, String)>, Bytes) {
        let full = format!(
            "{}/../../../shared/fixtures/kube-apiserver/{path}",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"));
        let text = text.split_once('\n').expect("request line").1;
        let (head, body) = text
            .split_once("\r\n\r\n")
            .or_else(|| text.split_once("\n\n"))
            .unwrap();
        let mut lines = head.lines();
        let code = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers = lines
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        (code, headers, Bytes::from(body.to_owned()))
    }

    /// `error` and its sources, joined by `: ` as the reflector's log shows them.
    fn chain(error: &dyn std::error::Error) -> String {
        std::iter::successors(Some(error), |e| e.source())
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(": ")
    }

    fn configmaps() -> Resource {
        Resource::new("", "v1", "ConfigMap", "configmaps", true)
    }

    #[test]
    fn decodes_captured_list_pages() {
        let (code, _, body) = fixture("v1.32.0-rc.0/list-page1.http");
        assert_eq!(code, 200);
        let (page, form) = decode_list(&configmaps(), &body, false).unwrap();
        assert_eq!(form, ListForm::Objects);
        assert_eq!(page.items.len(), 2);
        assert_eq!(page.resource_version, "216");
        assert!(page.continue_token.is_some());
        assert!(page.items[0].starts_with(b"{\"metadata\":{\"name\":\"cm-1\""));
        // Items are slices of the body, not copies.
        let range = body.as_ptr_range();
        assert!(page.items.iter().all(|item| range.contains(&item.as_ptr())));
        let (_, _, body) = fixture("v1.23.16/list-page1.http");
        let (page, form) = decode_list(&configmaps(), &body, false).unwrap();
        assert_eq!(form, ListForm::Objects);
        assert_eq!((page.items.len(), page.continue_token), (1, None));
        let pods = Resource::new("", "v1", "Pod", "pods", true);
        let error = decode_list(&pods, &body, false).unwrap_err();
        assert!(error.to_string().contains("PodList"), "{error}");
    }

    /// Issue 24: a metadata-only list is answered as a `PartialObjectMetadataList`, which
    /// only a request that asked for it takes.
    #[test]
    fn a_metadata_list_is_taken_when_asked_for() {
        let body = Bytes::from_static(
            br#"{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"7"},"items":[{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a"}}]}"#,
        );
        let (page, form) = decode_list(&configmaps(), &body, true).unwrap();
        assert_eq!(form, ListForm::Metadata);
        assert_eq!((page.items.len(), page.resource_version.as_str()), (1, "7"));
        let error = decode_list(&configmaps(), &body, false).unwrap_err();
        assert!(
            error.to_string().contains("PartialObjectMetadataList"),
            "{error}"
        );
    }

    #[test]
    fn decodes_captured_watch_streams_split_anywhere() {
        let (_, _, body) = fixture("v1.32.0-rc.0/watch-from-rv.http");
        let whole: Vec<String> = {
            let mut s = LineSplitter::default();
            let lines = s.push(body.clone()).unwrap();
            lines
                .iter()
                .map(|l| format!("{:?}", decode_watch_line(l).unwrap()))
                .collect()
        };
        assert_eq!(whole.len(), 5);
        let line = LineSplitter::default()
            .push(body.clone())
            .unwrap()
            .remove(0);
        match decode_watch_line(&line).unwrap() {
            // The object is a slice of the line, not a copy.
            WatchEvent::Added(object) => assert!(line.as_ptr_range().contains(&object.as_ptr())),
            other => panic!("{other:?}"),
        }
        assert!(whole[0].starts_with("Added"));
        assert!(whole[1].starts_with("Modified"));
        assert!(whole[2].starts_with("Deleted"));
        assert!(whole[3].contains("219"), "{}", whole[3]);
        for step in [1, 7, 100, 333] {
            let mut s = LineSplitter::default();
            let mut got = Vec::new();
            for chunk in body.chunks(step) {
                for line in s.push(Bytes::copy_from_slice(chunk)).unwrap() {
                    got.push(format!("{:?}", decode_watch_line(&line).unwrap()));
                }
            }
            assert_eq!(got, whole, "chunks of {step}");
            assert_eq!(s.pending(), 0);
        }
    }

    #[test]
    fn streaming_list_ends_with_the_annotated_bookmark() {
        let (_, _, body) = fixture("v1.32.0-rc.0/watch-streaming-list.http");
        let lines = LineSplitter::default().push(body).unwrap();
        let events: Vec<_> = lines
            .iter()
            .map(|l| decode_watch_line(l).unwrap())
            .collect();
        assert!(matches!(
            events.last(),
            Some(WatchEvent::Bookmark { resource_version, initial_events_end: true }) if resource_version == "219"
        ));
        assert!(
            events[..events.len() - 1]
                .iter()
                .all(|e| matches!(e, WatchEvent::Added(_)))
        );
        let (_, _, body) = fixture("v1.32.0-rc.0/watch-streaming-list-without-bookmarks.http");
        let lines = LineSplitter::default().push(body).unwrap();
        assert!(
            lines
                .iter()
                .all(|l| matches!(decode_watch_line(l), Ok(WatchEvent::Added(_))))
        );
    }

    #[test]
    fn decodes_captured_status_bodies() {
        for (path, code, reason) in [
            ("v1.32.0-rc.0/get-404.http", 404, "NotFound"),
            ("v1.32.0-rc.0/create-409.http", 409, "AlreadyExists"),
            ("v1.32.0-rc.0/create-422.http", 422, "Invalid"),
            (
                "v1.32.0-rc.0/list-bad-labelselector.http",
                400,
                "BadRequest",
            ),
            ("v1.32.0-rc.0/list-exact-old-rv-410.http", 410, "Expired"),
            (
                "v1.32.0-rc.0/list-expired-continue-410.http",
                410,
                "Expired",
            ),
            ("v1.23.16/watch-streaming-list-refused.http", 422, "Invalid"),
        ] {
            let (http_code, _, body) = fixture(path);
            let status = decode_status(http_code, &body);
            assert_eq!(
                (status.code, status.reason.as_str()),
                (code, reason),
                "{path}"
            );
            assert!(!status.message.is_empty());
        }
        let status = decode_status(502, b"<html>bad gateway</html>");
        assert_eq!((status.code, status.reason.as_str()), (502, "Unknown"));
        assert!(status.message.contains("bad gateway"));
        let status = decode_status(500, br#"{"kind":"Weird","code":7}"#);
        assert_eq!(status.code, 500);
    }

    #[test]
    fn watch_error_lines_and_garbage() {
        let line = Bytes::from_static(
            br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}"#,
        );
        assert!(matches!(decode_watch_line(&line), Ok(WatchEvent::Error(s)) if s.code == 410));
        let unknown = Bytes::from_static(br#"{"type":"ERROR","object":{"kind":"Other"}}"#);
        assert!(matches!(
            decode_watch_line(&unknown),
            Err(WireError::BadErrorObject(_))
        ));
        let html = Bytes::from_static(b"<html>");
        assert!(matches!(
            decode_watch_line(&html),
            Err(WireError::BadEnvelope { .. })
        ));
        let odd = Bytes::from_static(br#"{"type":"SURPRISE","object":{}}"#);
        assert!(matches!(
            decode_watch_line(&odd),
            Err(WireError::UnknownEventType(_))
        ));
    }

    /// The envelope's and list's own members are checked strictly; an object's `spec` only
    /// for structure (see the module docs): it reaches plugins as the server sent it.
    #[test]
    fn envelopes_are_strict_and_objects_are_passed_on_as_sent() {
        let loose = Bytes::from_static(
            br#"{"type":"ADDED","object":{"metadata":{"name":"a"},"spec":{"n":[1 2]}}}"#,
        );
        let Ok(WatchEvent::Added(object)) = decode_watch_line(&loose) else {
            panic!("{:?}", decode_watch_line(&loose));
        };
        assert_eq!(
            &object[..],
            br#"{"metadata":{"name":"a"},"spec":{"n":[1 2]}}"#
        );
        for (line, reason) in [
            (
                &br#"{"type":"ADDED","type":"DELETED","object":{}}"#[..],
                "duplicate field `type`",
            ),
            (br#"{"object":{}}"#, "missing field `type`"),
            (br#"{"type":"ADDED"}"#, "missing field `object`"),
            (br#"{"type":7,"object":{}}"#, "type is not a string"),
            (br#"{"type":"ADDED","object":{}} x"#, "trailing bytes"),
            (br#"{"type":"ADDED","object":{"a":"}"#, "unterminated"),
            (b"{\"type\":\"ADDED\",\"object\":\"\xff\"}", "invalid utf-8"),
        ] {
            let error = decode_watch_line(&Bytes::copy_from_slice(line)).unwrap_err();
            assert!(
                matches!(&error, WireError::BadEnvelope { reason: r, .. }
                    if chain(r).contains(reason)),
                "{}",
                chain(&error)
            );
        }

        let list =
            |body: &'static [u8]| decode_list(&configmaps(), &Bytes::from_static(body), false);
        let (page, _) =
            list(br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"5"},"items":null}"#)
                .unwrap();
        assert!(page.items.is_empty());
        let (page, _) = list(
            br#"{"kind":"ConfigMapList","items":[{"a":[1 2]}, {}],"metadata":{"resourceVersion":"5","continue":"c"}}"#,
        )
        .unwrap();
        assert_eq!(page.items, [&br#"{"a":[1 2]}"#[..], b"{}"]);
        assert_eq!(page.continue_token.as_deref(), Some("c"));
        for (body, reason) in [
            (&br#"{"kind":"ConfigMapList","kind":"ConfigMapList","metadata":{"resourceVersion":"5"}}"#[..], "duplicate field `kind`"),
            (br#"{"kind":"ConfigMapList"}"#, "missing field `metadata`"),
            (br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":5}}"#, "metadata: invalid type"),
            (br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"5"},"items":{}}"#, "items: expected '['"),
        ] {
            let error = list(body).unwrap_err();
            assert!(
                matches!(&error, WireError::BadList { reason: r, .. } if chain(r).contains(reason)),
                "{}",
                chain(&error)
            );
        }
    }

    /// An object last in its envelope is the decoder's alone to scan: one broken past its
    /// metadata passes the envelope and is refused by the decoder; any other shape of
    /// envelope is walked member by member and yields the object exactly.
    #[test]
    fn an_object_last_in_its_envelope_is_checked_by_the_decoder_alone() {
        let decoder = ObjectDecoder::new(configmaps());
        let object_of = |line: &'static [u8]| match decode_watch_line(&Bytes::from_static(line)) {
            Ok(WatchEvent::Added(object) | WatchEvent::Modified(object)) => object,
            other => panic!("{other:?}"),
        };
        for (line, problem) in [
            (
                &br#"{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"1"},"spec":{"n":1}}}}"#[..],
                "trailing bytes after the object",
            ),
            (
                br#"{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"1"},"data":{"n":"x}}} "#,
                "unterminated string",
            ),
            // The line's UTF-8 past the envelope's head is the decoder's to check.
            (
                b"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"1\"},\"data\":{\"k\":\"\xff\"}}}",
                "invalid utf-8",
            ),
            // Not watch output: the object runs on into the member after it.
            (
                br#"{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"1"}},"extra":{}}"#,
                "trailing bytes after the object",
            ),
        ] {
            let error = decoder.decode(&object_of(line)).unwrap_err();
            assert!(error.to_string().contains(problem), "{error}");
        }
        for line in [
            &b"{ \"type\" : \"ADDED\" , \"object\" : {\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"1\"}} }\r"[..],
            br#"{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"1"}},"extra":1}"#,
            br#"{"object":{"metadata":{"name":"a","resourceVersion":"1"}},"type":"ADDED"}"#,
        ] {
            let object = object_of(line);
            assert_eq!(&object[..], br#"{"metadata":{"name":"a","resourceVersion":"1"}}"#);
            assert_eq!(decoder.decode(&object).unwrap().name(), "a");
        }
    }

    #[test]
    fn a_line_past_the_bound_is_an_error() {
        let mut s = LineSplitter::new(10);
        assert_eq!(s.push(Bytes::from_static(b"12345")).unwrap().len(), 0);
        assert!(matches!(
            s.push(Bytes::from_static(b"678901")),
            Err(WireError::LineTooLong { limit: 10 })
        ));
        // A long line that arrives whole inside one chunk is bounded too.
        let mut s = LineSplitter::new(10);
        assert!(matches!(
            s.push(Bytes::from_static(b"12345678901\n")),
            Err(WireError::LineTooLong { limit: 10 })
        ));
        let mut s = LineSplitter::new(10);
        let lines = s.push(Bytes::from_static(b"abc\n\ndef\ngh")).unwrap();
        assert_eq!(
            lines,
            vec![Bytes::from_static(b"abc"), Bytes::from_static(b"def")]
        );
        assert_eq!(s.pending(), 2);
    }

    #[test]
    fn retry_after_in_seconds() {
        assert_eq!(parse_retry_after(" 3 "), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }
}
