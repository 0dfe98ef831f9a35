//! The events file: what `kubeplug test` replays and `kubeplug record` writes.
//!
//! A stream of documents, each a Kubernetes watch event:
//!
//! ```yaml
//! type: MODIFIED          # ADDED, MODIFIED or DELETED; BOOKMARKs are skipped
//! object:
//!   apiVersion: apps/v1
//!   kind: Deployment
//!   metadata: {name: web, namespace: team-a}
//! ```
//!
//! as YAML documents separated by `---`, or as JSON values one after the other (JSON lines,
//! or the pretty-printed output of `kubectl get -w -o json --output-watch-events`). A bare
//! object (no `type`/`object` envelope, as `kubectl get -w -o json` prints) counts as
//! `MODIFIED`. The format is taken from the extension (`.json`, `.jsonl`, `.ndjson` or
//! `.yaml`, `.yml`), otherwise from the first character.

use std::fmt;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Largest events file read: a replay holds every event in memory, several times its text.
const MAX_FILE: u64 = 64 << 20;

/// Deepest nesting of flow collections (`[`, `{`) in a YAML document: serde's own limit,
/// checked on the text first, as the YAML parser took 28 s to reach it on 100,000 levels.
const MAX_DEPTH: usize = 128;

/// Why an events file cannot be replayed. Each message names the file, and the event with
/// its line.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EventsError {
    /// The file cannot be read.
    #[error("cannot read the events file {path}", path = path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than a replay reads.
    #[error(
        "the events file {path} is {size} bytes; at most {MAX_FILE} are replayed",
        path = path.display()
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size, or how much was read before the bound.
        size: u64,
    },
    /// A document is not valid YAML or JSON, or not an event.
    #[error("{path}:{line}: event {index}", path = path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The event's position among the file's documents, from 1.
        index: usize,
        /// The line of the problem (or of the document's start), from 1.
        line: usize,
        /// What is wrong.
        #[source]
        reason: DocumentError,
    },
}

/// What is wrong with one document: the reason of [`EventsError::Invalid`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum DocumentError {
    /// Not YAML.
    #[error(transparent)]
    Yaml(#[from] serde_yaml_ng::Error),
    /// Not JSON.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// Flow collections nest deeper than [`MAX_DEPTH`].
    #[error("nests deeper than {MAX_DEPTH} levels")]
    TooDeep,
    /// Not a mapping.
    #[error("not a mapping; write {{type: ADDED, object: {{...}}}}")]
    NotAMapping,
    /// An ERROR event, as a watch ends with.
    #[error("an ERROR event: {message}")]
    ErrorEvent {
        /// Its `message`, or `(no message)`.
        message: String,
    },
    /// A `type` none of a watch event's.
    #[error("type {0:?} is not ADDED, MODIFIED, DELETED or BOOKMARK")]
    UnknownType(String),
    /// Neither an envelope nor a bare object.
    #[error("neither a watch event ({{type, object}}) nor an object (apiVersion, kind)")]
    NeitherEventNorObject,
    /// The object lacks `apiVersion`, `kind` or `metadata.name`.
    #[error("the object has no {0}")]
    MissingField(&'static str),
}

/// What happened to the object, as a watch event says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub(crate) enum Change {
    Added,
    Modified,
    Deleted,
}

impl Change {
    fn parse(text: &str) -> Option<Self> {
        match text {
            "ADDED" => Some(Self::Added),
            "MODIFIED" => Some(Self::Modified),
            "DELETED" => Some(Self::Deleted),
            _ => None,
        }
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        })
    }
}

/// One event of the file.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct InputEvent {
    /// Its position among the file's events, from 1.
    pub(crate) index: usize,
    /// The line its document starts on, from 1.
    pub(crate) line: usize,
    pub(crate) change: Change,
    /// The object, with `apiVersion`, `kind` and `metadata.name`.
    pub(crate) object: Value,
}

impl InputEvent {
    pub(crate) fn api_version(&self) -> &str {
        self.object["apiVersion"].as_str().unwrap_or_default()
    }

    pub(crate) fn kind(&self) -> &str {
        self.object["kind"].as_str().unwrap_or_default()
    }
}

/// How the documents of a file are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// YAML documents separated by `---`.
    Yaml,
    /// JSON values one after the other (one per line when `record` writes them).
    Json,
}

impl Format {
    /// The format `record` writes to `path`: JSON for `.json`, `.jsonl` and `.ndjson`.
    pub(crate) fn for_path(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some("json" | "jsonl" | "ndjson") => Self::Json,
            _ => Self::Yaml,
        }
    }

    /// The format of an existing file: by its extension, else JSON if it starts with `{`.
    fn detect(path: &Path, text: &str) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some("json" | "jsonl" | "ndjson") => Self::Json,
            Some("yaml" | "yml") => Self::Yaml,
            _ if text.trim_start().starts_with('{') => Self::Json,
            _ => Self::Yaml,
        }
    }

    /// One event as this format writes it, newline included. `object` is the object's JSON.
    pub(crate) fn render(self, change: Change, object: &str) -> Result<String, serde_json::Error> {
        match self {
            Self::Json => Ok(format!(r#"{{"type":"{change}","object":{object}}}"#) + "\n"),
            Self::Yaml => {
                let event = serde_json::json!({
                    "type": change.to_string(),
                    "object": serde_json::from_str::<Value>(object)?,
                });
                let yaml = serde_yaml_ng::to_string(&event)
                    .expect("a JSON value always serializes as YAML");
                Ok(format!("---\n{yaml}"))
            }
        }
    }
}

/// Reads and checks every event of `path`, refusing a file over [`MAX_FILE`] before reading
/// it (and one that grows past it while read).
pub(crate) fn read(path: &Path) -> Result<Vec<InputEvent>, EventsError> {
    let unreadable = |source| EventsError::Unreadable {
        path: path.to_owned(),
        source,
    };
    let too_large = |size| EventsError::TooLarge {
        path: path.to_owned(),
        size,
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let size = file.metadata().map_err(unreadable)?.len();
    if size > MAX_FILE {
        return Err(too_large(size));
    }
    let mut text = String::new();
    file.take(MAX_FILE + 1)
        .read_to_string(&mut text)
        .map_err(unreadable)?;
    if text.len() as u64 > MAX_FILE {
        return Err(too_large(text.len() as u64));
    }
    parse(path, &text)
}

/// The events of `text`, the content of `path` (named in errors).
pub(crate) fn parse(path: &Path, text: &str) -> Result<Vec<InputEvent>, EventsError> {
    let documents = match Format::detect(path, text) {
        Format::Yaml => yaml_documents(text),
        Format::Json => json_documents(text),
    };
    let mut events = Vec::new();
    for (position, document) in documents.into_iter().enumerate() {
        let index = position + 1;
        let invalid = |line: usize, reason: DocumentError| EventsError::Invalid {
            path: path.to_owned(),
            index,
            line,
            reason,
        };
        let Document { line, value } = document;
        let value = value.map_err(|(line, reason)| invalid(line, reason))?;
        if let Some((change, object)) = to_event(value).map_err(|reason| invalid(line, reason))? {
            events.push(InputEvent {
                index,
                line,
                change,
                object,
            });
        }
    }
    Ok(events)
}

/// One document of the file, parsed or not.
struct Document {
    /// The line its content starts on.
    line: usize,
    /// The value, or the line of the error and the error.
    value: Result<Value, (usize, DocumentError)>,
}

/// Splits at `---` lines so that every document knows its line; empty documents are left out.
fn yaml_documents(text: &str) -> Vec<Document> {
    let mut chunks: Vec<(usize, String)> = vec![(1, String::new())];
    for (number, line) in text.lines().enumerate() {
        let rest = line
            .strip_prefix("---")
            .filter(|rest| rest.is_empty() || rest.starts_with(' ') || rest.starts_with('\t'));
        match rest {
            Some(rest) => chunks.push((number + 1, format!("{rest}\n"))),
            None => {
                let chunk = &mut chunks.last_mut().expect("starts with one chunk").1;
                chunk.push_str(line);
                chunk.push('\n');
            }
        }
    }
    chunks
        .into_iter()
        .filter_map(|(first_line, chunk)| {
            // The document starts at its first line of content.
            let skipped = chunk
                .lines()
                .take_while(|l| {
                    let l = l.trim();
                    l.is_empty() || l.starts_with('#') || l == "---"
                })
                .count();
            let line = first_line + skipped;
            if let Some(deep) = flow_depth_exceeds(&chunk, MAX_DEPTH) {
                return Some(Document {
                    line,
                    value: Err((first_line + deep - 1, DocumentError::TooDeep)),
                });
            }
            let value = serde_yaml_ng::from_str::<Value>(&chunk).map_err(|error| {
                let at = error
                    .location()
                    .map_or(line, |location| first_line + location.line() - 1);
                (at, error.into())
            });
            match value {
                Ok(Value::Null) => None,
                value => Some(Document { line, value }),
            }
        })
        .collect()
}

/// The line (from 1) on which `text`'s flow collections (`[`, `{`) nest deeper than `max`,
/// outside quoted scalars and comments. Written here, not taken from the YAML parser, which
/// is what is slow on such input; a scalar this misreads only makes it miss, and the
/// parser's own limit still holds then.
fn flow_depth_exceeds(text: &str, max: usize) -> Option<usize> {
    let (mut depth, mut line) = (0usize, 1usize);
    let mut previous = '\n';
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        // A quote or `#` opens a scalar or a comment only where a token may start.
        let at_token = matches!(previous, ' ' | '\t' | '\n' | '[' | '{' | ',' | ':');
        match c {
            '\n' => line += 1,
            '[' | '{' => {
                depth += 1;
                if depth > max {
                    return Some(line);
                }
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            '"' if at_token => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    match c {
                        '\n' => line += 1,
                        '"' if !escaped => break,
                        _ => {}
                    }
                    escaped = c == '\\' && !escaped;
                }
            }
            // `''` inside is an escaped quote: the scan closes and reopens, which is the same.
            '\'' if at_token => {
                for c in chars.by_ref() {
                    match c {
                        '\n' => line += 1,
                        '\'' => break,
                        _ => {}
                    }
                }
            }
            '#' if at_token => {
                if chars.by_ref().any(|c| c == '\n') {
                    line += 1;
                }
                previous = '\n';
                continue;
            }
            _ => {}
        }
        previous = c;
    }
    None
}

/// JSON values one after the other; after a syntax error nothing more can be read.
fn json_documents(text: &str) -> Vec<Document> {
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    let mut documents = Vec::new();
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    loop {
        let offset = stream.byte_offset();
        let start = offset + (text[offset..].len() - text[offset..].trim_start().len());
        match stream.next() {
            None => break,
            Some(Ok(value)) => documents.push(Document {
                line: line_of(start),
                value: Ok(value),
            }),
            Some(Err(error)) => {
                documents.push(Document {
                    line: line_of(start),
                    value: Err((error.line(), error.into())),
                });
                break;
            }
        }
    }
    documents
}

/// The change and object a document describes; `None` for a bookmark.
fn to_event(document: Value) -> Result<Option<(Change, Value)>, DocumentError> {
    let Value::Object(mut fields) = document else {
        return Err(DocumentError::NotAMapping);
    };
    let (change, object) = match fields.remove("object") {
        Some(object) => {
            let kind = fields.get("type").and_then(Value::as_str).unwrap_or("");
            match (Change::parse(kind), kind) {
                (Some(change), _) => (change, object),
                (None, "BOOKMARK") => return Ok(None),
                (None, "ERROR") => {
                    let message = object["message"].as_str().unwrap_or("(no message)");
                    return Err(DocumentError::ErrorEvent {
                        message: message.to_owned(),
                    });
                }
                (None, _) => return Err(DocumentError::UnknownType(kind.to_owned())),
            }
        }
        None if fields.contains_key("kind") => (Change::Modified, Value::Object(fields)),
        None => return Err(DocumentError::NeitherEventNorObject),
    };
    for (field, value) in [
        ("apiVersion", &object["apiVersion"]),
        ("kind", &object["kind"]),
        ("metadata.name", &object["metadata"]["name"]),
    ] {
        if value.as_str().is_none_or(str::is_empty) {
            return Err(DocumentError::MissingField(field));
        }
    }
    Ok(Some((change, object)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEPLOYMENT: &str =
        r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"a"}}"#;

    #[test]
    fn yaml_documents_know_their_lines() {
        let text = "# replayed in order\n---\ntype: ADDED\nobject:\n  apiVersion: v1\n  kind: Pod\n  metadata: {name: p}\n---\n\n---\ntype: BOOKMARK\nobject: {}\n--- \ntype: DELETED\nobject: {apiVersion: v1, kind: Pod, metadata: {name: p}}\n";
        let events = parse(Path::new("e.yaml"), text).unwrap();
        let summary: Vec<_> = events
            .iter()
            .map(|e| (e.index, e.line, e.change, e.kind()))
            .collect();
        assert_eq!(
            summary,
            [
                (1, 3, Change::Added, "Pod"),
                (3, 14, Change::Deleted, "Pod")
            ]
        );
    }

    #[test]
    fn json_lines_and_pretty_json_both_read() {
        let lines = format!(
            "{{\"type\":\"ADDED\",\"object\":{DEPLOYMENT}}}\n\n{{\"type\":\"DELETED\",\"object\":{DEPLOYMENT}}}\n"
        );
        let events = parse(Path::new("e.jsonl"), &lines).unwrap();
        assert_eq!(
            events
                .iter()
                .map(|e| (e.line, e.change))
                .collect::<Vec<_>>(),
            [(1, Change::Added), (3, Change::Deleted)]
        );
        let pretty = serde_json::to_string_pretty(&serde_json::json!({
            "type": "MODIFIED", "object": serde_json::from_str::<Value>(DEPLOYMENT).unwrap(),
        }))
        .unwrap();
        let bare = format!("{pretty}\n{DEPLOYMENT}\n");
        let events = parse(Path::new("watch.out"), &bare).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[1].change, Change::Modified, "a bare object");
        assert_eq!(events[1].line, pretty.lines().count() + 1);
    }

    #[test]
    fn errors_name_the_file_the_event_and_the_line() {
        let cases = [
            (
                "e.yaml",
                "type: ADDED\nobject: {apiVersion: v1, kind: Pod, metadata: {name: a}}\n---\ntype: ADDED\nobject: [\n",
                "e.yaml:",
                "event 2",
            ),
            (
                "e.yaml",
                "type: ADDED\nobject: {apiVersion: v1, kind: Pod, metadata: {}}\n",
                "e.yaml:1: event 1",
                "metadata.name",
            ),
            (
                "e.yaml",
                "type: CHANGED\nobject: {apiVersion: v1, kind: Pod, metadata: {name: a}}\n",
                "e.yaml:1: event 1",
                "CHANGED",
            ),
            (
                "e.jsonl",
                "{\"type\":\"ADDED\",\"object\":{}}\n",
                "e.jsonl:1: event 1",
                "apiVersion",
            ),
            (
                "e.jsonl",
                &format!("{{\"type\":\"ADDED\",\"object\":{DEPLOYMENT}}}\n{{\"type\": oops}}\n"),
                "e.jsonl:2: event 2",
                "expected value",
            ),
            ("e.yaml", "- a list\n", "event 1", "not a mapping"),
        ];
        for (file, text, place, cause) in cases {
            let error = format!(
                "{:#}",
                anyhow::Error::new(parse(Path::new(file), text).unwrap_err())
            );
            assert!(
                error.contains(place) && error.contains(cause),
                "{text:?}: {error}"
            );
        }
    }

    #[test]
    fn what_record_writes_reads_back() {
        for (file, format) in [("out.yaml", Format::Yaml), ("out.jsonl", Format::Json)] {
            assert_eq!(Format::for_path(Path::new(file)), format);
            let text = format.render(Change::Added, DEPLOYMENT).unwrap()
                + &format.render(Change::Deleted, DEPLOYMENT).unwrap();
            let events = parse(Path::new(file), &text).unwrap();
            assert_eq!(events.len(), 2, "{text}");
            assert_eq!(
                events[0].object,
                serde_json::from_str::<Value>(DEPLOYMENT).unwrap()
            );
            assert_eq!(events[1].change, Change::Deleted);
        }
    }

    /// Issue 44: 100,000 levels of nesting are refused by a scan of the text, naming the
    /// line; the YAML parser took 28 s to reach its own limit on them.
    #[test]
    fn deep_nesting_is_refused_naming_the_line() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let yaml = format!("type: ADDED\nobject:\n  spec: {deep}\n");
        let error = parse(Path::new("e.yaml"), &yaml).unwrap_err();
        assert!(
            matches!(
                error,
                EventsError::Invalid {
                    line: 3,
                    reason: DocumentError::TooDeep,
                    ..
                }
            ),
            "{error:?}"
        );
        assert_eq!(
            format!("{:#}", anyhow::Error::new(error)),
            "e.yaml:3: event 1: nests deeper than 128 levels"
        );
        let json = format!("{{\"type\":\"ADDED\",\"object\":{deep}}}");
        let error = parse(Path::new("e.json"), &json).unwrap_err();
        let error = format!("{:#}", anyhow::Error::new(error));
        assert!(error.contains("recursion limit exceeded"), "{error}");
    }

    /// Brackets in quoted scalars and comments are text, not nesting.
    #[test]
    fn brackets_in_scalars_and_comments_do_not_nest() {
        let many = "[".repeat(200);
        let yaml = format!(
            "# {many}\ntype: ADDED\nobject:\n  apiVersion: v1\n  kind: ConfigMap\n  \
             metadata: {{name: c, annotations: {{a: \"{many}\", b: '{many}', c: 'it''s {{'}}}}\n  \
             data: {{x: \"\\\" {many}\"}}\n"
        );
        let events = parse(Path::new("e.yaml"), &yaml).unwrap();
        assert_eq!(events.len(), 1);
    }

    /// Issue 44: a file over the bound is refused before it is read (a 184 MB file took the
    /// replay to 1 GB).
    #[test]
    fn a_file_over_the_bound_is_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge.yaml");
        let file = std::fs::File::create(&path).unwrap();
        // Sparse: nothing is written, and nothing must be read.
        file.set_len(MAX_FILE + 1).unwrap();
        let error = read(&path).unwrap_err();
        assert!(
            matches!(error, EventsError::TooLarge { size, .. } if size == MAX_FILE + 1),
            "{error}"
        );
        assert!(error.to_string().contains("huge.yaml"), "{error}");
    }
}
