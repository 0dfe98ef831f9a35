//! The cached object: its JSON text plus the metadata the machinery needs, parsed once.
//!
//! A full `serde_json::Value` tree costs several times the JSON size and parses at a fraction
//! of the speed. [`ObjectDecoder`] instead walks the top level of the object with a structural
//! scanner (see [`crate::json`]), parses only `metadata` strictly, drops
//! `metadata.managedFields` and fills in `apiVersion`/`kind` (list items carry neither), and
//! writes the result out as one compact string. Everything else stays text.

use std::borrow::{Borrow, Cow};
use std::fmt;
use std::sync::Arc;

use kubeplug_json::path::FieldPath;
use kubeplug_json::{ArrayScanner, ObjectScanner, ScanError, push_json_string, string_value, utf8};
use smallvec::SmallVec;

use crate::resource::Resource;
use crate::selected::{SelectedCell, Selection};

/// Why a piece of JSON could not become an [`Object`].
///
/// The informer logs and counts these with the resource and (when known) the key, skips the
/// object, and carries on.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The bytes are not a JSON object.
    #[error("not a JSON object: {0}")]
    NotJson(String),
    /// The object has no `metadata`, or it is not a JSON object.
    #[error("object has no metadata object")]
    MissingMetadata,
    /// The object has more than one `metadata` member: which one counts is ambiguous (JSON
    /// readers differ), so it is refused.
    #[error("object has more than one metadata member")]
    DuplicateMetadata,
    /// `metadata.name` is missing or empty.
    #[error("object has no metadata.name")]
    MissingName,
    /// The object's `kind` or `apiVersion` is not the watched resource's.
    #[error("object {key} is a {found}, expected {expected}")]
    WrongKind {
        /// The object's key.
        key: String,
        /// `apiVersion/kind` the informer watches.
        expected: String,
        /// `apiVersion/kind` the object carries.
        found: String,
    },
    /// The object's `kind` or `apiVersion` is not a string.
    #[error("object's {field} is not a string: {found}")]
    BadTypeField {
        /// `kind` or `apiVersion`.
        field: &'static str,
        /// The start of the value found instead.
        found: String,
    },
    /// `metadata.resourceVersion` is missing or empty.
    #[error("object {key} has no resourceVersion (found {value:?})")]
    BadResourceVersion {
        /// The object's key.
        key: String,
        /// The offending value, as text.
        value: String,
    },
    /// A metadata field has the wrong type.
    #[error("object {key}: metadata.{field} is malformed: {reason}")]
    BadField {
        /// The object's key, or its name when the key is not known yet.
        key: String,
        /// The field, e.g. `labels`.
        field: &'static str,
        /// What was wrong.
        reason: String,
    },
    /// `metadata.ownerReferences` is not an array of JSON objects.
    #[error("object {key}: metadata.ownerReferences is malformed")]
    BadOwnerReferences {
        /// The object's key.
        key: String,
        /// What the scanner found, at a byte offset into `ownerReferences`.
        #[source]
        source: ScanError,
    },
    /// An owner reference lacks a field, or has one of the wrong type.
    #[error("object {key}: metadata.ownerReferences[{index}].{field} {reason}")]
    BadOwnerReference {
        /// The object's key.
        key: String,
        /// The reference's position in the array, from 0.
        index: usize,
        /// `apiVersion`, `kind`, `name`, `uid` or `controller`.
        field: &'static str,
        /// `is missing`, `is not a string` or `is not a boolean`.
        reason: &'static str,
    },
}

/// The cache key of an object: `namespace/name`, or `name` for cluster-scoped objects.
///
/// Cheap to clone (one reference count); the FIFO, the Indexer and every index share one
/// allocation per key.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey(Arc<str>);

impl ObjectKey {
    /// The key of `name` in `namespace` (`None` or empty for cluster-scoped objects).
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        /// Keys up to this long (the longest namespace, 63 bytes, a '/' and the longest
        /// name, 253) are joined on the stack, so that a key costs one allocation, the
        /// `Arc`'s; longer ones come only from servers that break those limits.
        const JOINED_ON_STACK: usize = 317;
        let Some(ns) = namespace.filter(|ns| !ns.is_empty()) else {
            return Self(name.into());
        };
        let len = ns.len() + 1 + name.len();
        if len > JOINED_ON_STACK {
            return Self(format!("{ns}/{name}").into());
        }
        let mut joined = [0u8; JOINED_ON_STACK];
        joined[..ns.len()].copy_from_slice(ns.as_bytes());
        joined[ns.len()] = b'/';
        joined[ns.len() + 1..len].copy_from_slice(name.as_bytes());
        let key = std::str::from_utf8(&joined[..len]).expect("two strs joined by '/'");
        Self(key.into())
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The namespace part, if the key has one.
    pub fn namespace(&self) -> Option<&str> {
        self.0.split_once('/').map(|(ns, _)| ns)
    }

    /// The name part.
    pub fn name(&self) -> &str {
        self.0.split_once('/').map_or(&self.0, |(_, name)| name)
    }
}

impl From<&str> for ObjectKey {
    fn from(key: &str) -> Self {
        Self(key.into())
    }
}

impl Borrow<str> for ObjectKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// `metadata.labels`, sorted by key, keys unique: all keys and values in one string, so that
/// an object's labels cost two allocations however many there are.
#[derive(Clone, PartialEq, Eq, Default)]
struct Labels {
    /// key₀ value₀ key₁ value₁ …, concatenated.
    text: Box<str>,
    /// For label i: where its key ends and where its value ends in `text`. The key starts
    /// where the previous value ends.
    ends: Box<[(u32, u32)]>,
}

impl Labels {
    fn get(&self, i: usize) -> (&str, &str) {
        let start = if i == 0 {
            0
        } else {
            self.ends[i - 1].1 as usize
        };
        let (key_end, value_end) = self.ends[i];
        (
            &self.text[start..key_end as usize],
            &self.text[key_end as usize..value_end as usize],
        )
    }

    fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> {
        (0..self.ends.len()).map(|i| self.get(i))
    }

    fn find(&self, key: &str) -> Option<&str> {
        let (mut low, mut high) = (0, self.ends.len());
        while low < high {
            let mid = (low + high) / 2;
            let (k, v) = self.get(mid);
            match k.cmp(key) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => return Some(v),
            }
        }
        None
    }
}

/// One entry of `metadata.ownerReferences`: its four strings share one allocation.
#[derive(Clone, PartialEq, Eq)]
pub struct OwnerReference {
    /// `apiVersion`, `kind`, `name` and `uid`, one after another.
    text: Box<str>,
    /// Where `kind`, `name` and `uid` start in `text`.
    starts: [usize; 3],
    controller: bool,
}

impl OwnerReference {
    /// An owner reference with these fields.
    pub fn new(api_version: &str, kind: &str, name: &str, uid: &str, controller: bool) -> Self {
        let mut text =
            String::with_capacity(api_version.len() + kind.len() + name.len() + uid.len());
        let mut starts = [0; 3];
        text.push_str(api_version);
        for (field, start) in [kind, name, uid].into_iter().zip(&mut starts) {
            *start = text.len();
            text.push_str(field);
        }
        Self {
            text: text.into_boxed_str(),
            starts,
            controller,
        }
    }

    /// The owner's `apiVersion`.
    pub fn api_version(&self) -> &str {
        &self.text[..self.starts[0]]
    }

    /// The owner's `kind`.
    pub fn kind(&self) -> &str {
        &self.text[self.starts[0]..self.starts[1]]
    }

    /// The owner's name (same namespace as the dependent).
    pub fn name(&self) -> &str {
        &self.text[self.starts[1]..self.starts[2]]
    }

    /// The owner's uid.
    pub fn uid(&self) -> &str {
        &self.text[self.starts[2]..]
    }

    /// Whether this owner is the managing controller.
    pub fn controller(&self) -> bool {
        self.controller
    }
}

impl fmt::Debug for OwnerReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnerReference")
            .field("api_version", &self.api_version())
            .field("kind", &self.kind())
            .field("name", &self.name())
            .field("uid", &self.uid())
            .field("controller", &self.controller)
            .finish()
    }
}

/// `metadata.resourceVersion`: a number without an allocation for kube-apiserver's etcd
/// revisions, the text otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ResourceVersion {
    Number(u64),
    Opaque(Box<str>),
}

/// A Kubernetes object as the cache holds it.
///
/// Contract: `json()` is a compact JSON object that carries `apiVersion` and `kind`, and, when
/// decoded with the default settings, no `metadata.managedFields`. The metadata accessors agree
/// with the text. Objects are immutable and shared as `Arc<Object>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Object {
    key: ObjectKey,
    json: Box<str>,
    uid: Option<Box<str>>,
    resource_version: ResourceVersion,
    generation: Option<i64>,
    /// Sorted by label key, keys unique.
    labels: Labels,
    owner_references: Box<[OwnerReference]>,
    deletion_timestamp: Option<Box<str>>,
    /// Projection values, kept by the Indexer that stores the object.
    selected: SelectedCell,
}

impl fmt::Debug for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Object")
            .field("key", &self.key)
            .field("resource_version", &self.resource_version)
            .finish_non_exhaustive()
    }
}

impl Object {
    /// The cache key.
    pub fn key(&self) -> &ObjectKey {
        &self.key
    }
    /// `metadata.namespace`, `None` for cluster-scoped objects.
    pub fn namespace(&self) -> Option<&str> {
        self.key.namespace()
    }
    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.key.name()
    }
    /// `metadata.uid`, if the object has one (objects built by hand in tests may not).
    pub fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }
    /// `metadata.resourceVersion` as a number: kube-apiserver's are etcd revisions. An
    /// aggregated API server's may be any text; those objects are cached alike, and this is
    /// 0 for them (the exact text is [`resource_version_text`](Self::resource_version_text)).
    pub fn resource_version(&self) -> u64 {
        match &self.resource_version {
            ResourceVersion::Number(number) => *number,
            ResourceVersion::Opaque(_) => 0,
        }
    }

    /// `metadata.resourceVersion` exactly as the server wrote it. Opaque: compare it for
    /// equality only ([`same_version`](Self::same_version)), never for order.
    pub fn resource_version_text(&self) -> std::borrow::Cow<'_, str> {
        match &self.resource_version {
            ResourceVersion::Number(number) => number.to_string().into(),
            ResourceVersion::Opaque(text) => std::borrow::Cow::Borrowed(text),
        }
    }

    /// Puts [`resource_version_text`](Self::resource_version_text) in `out`, replacing
    /// what it held: a watch remembers every event's version in one buffer.
    pub fn write_resource_version(&self, out: &mut String) {
        out.clear();
        match &self.resource_version {
            ResourceVersion::Number(number) => {
                use fmt::Write as _;
                write!(out, "{number}").expect("writing to a String cannot fail");
            }
            ResourceVersion::Opaque(text) => out.push_str(text),
        }
    }

    /// Whether `self` and `other` carry the same resourceVersion: the same state, as
    /// client-go decides that an update is a resync.
    pub fn same_version(&self, other: &Object) -> bool {
        self.resource_version == other.resource_version
    }
    /// `metadata.generation`.
    pub fn generation(&self) -> Option<i64> {
        self.generation
    }
    /// `metadata.labels`, sorted by key.
    pub fn labels(&self) -> impl ExactSizeIterator<Item = (&str, &str)> {
        self.labels.iter()
    }
    /// The value of one label.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.find(key)
    }
    /// `metadata.ownerReferences`.
    pub fn owner_references(&self) -> &[OwnerReference] {
        &self.owner_references
    }
    /// `metadata.deletionTimestamp`, as the RFC 3339 text the server sent.
    pub fn deletion_timestamp(&self) -> Option<&str> {
        self.deletion_timestamp.as_deref()
    }
    /// The whole object as JSON text.
    pub fn json(&self) -> &str {
        &self.json
    }

    /// What `path` selects in [`json`](Self::json), if the Indexer that stored this object
    /// selected it then: it does for the projection paths registered with
    /// [`Indexer::add_projection`](crate::indexer::Indexer::add_projection) before the
    /// object was stored. `None`: the caller evaluates the path itself.
    pub fn selected(&self, path: &FieldPath) -> Option<Selection<'_>> {
        self.selected.get(&self.json, path)
    }

    pub(crate) fn selected_cell(&self) -> &SelectedCell {
        &self.selected
    }
}

/// Turns JSON from the API server into [`Object`]s for one resource.
///
/// It always drops `metadata.managedFields` (client-go's usual transform) and fills in
/// `apiVersion` and `kind`. There is no general transform: an [`Object`] is built only here,
/// so that its metadata always agrees with its text.
#[derive(Clone)]
pub struct ObjectDecoder {
    resource: Resource,
    /// `resource`'s `apiVersion`, which every object is checked against: built once.
    api_version: Box<str>,
    metadata_only: bool,
}

/// The `apiVersion` and `kind` of what the API server sends for
/// `Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`.
pub const PARTIAL_OBJECT_METADATA: (&str, &str) = ("meta.k8s.io/v1", "PartialObjectMetadata");

impl fmt::Debug for ObjectDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectDecoder")
            .field("resource", &self.resource)
            .field("metadata_only", &self.metadata_only)
            .finish()
    }
}

impl ObjectDecoder {
    /// A decoder for `resource` that drops `metadata.managedFields`.
    pub fn new(resource: Resource) -> Self {
        Self {
            api_version: resource.api_version().into(),
            resource,
            metadata_only: false,
        }
    }

    /// Decode metadata only: items may be `PartialObjectMetadata`
    /// ([`PARTIAL_OBJECT_METADATA`], what the API server sends when asked for that form),
    /// whose `apiVersion` and `kind` become the resource's, and every member but those and
    /// `metadata` is dropped, so that the cache holds metadata whatever the server sent (one
    /// that ignores the form sends whole objects of the resource's own kind).
    pub fn metadata_only(mut self) -> Self {
        self.metadata_only = true;
        self
    }

    /// Whether [`metadata_only`](Self::metadata_only) was asked for.
    pub fn is_metadata_only(&self) -> bool {
        self.metadata_only
    }

    /// The resource this decoder expects.
    pub fn resource(&self) -> &Resource {
        &self.resource
    }

    /// Decodes one object.
    pub fn decode(&self, json: &[u8]) -> Result<Object, DecodeError> {
        self.decode_str(utf8(json).map_err(|e| DecodeError::NotJson(e.to_string()))?)
    }

    fn decode_str(&self, text: &str) -> Result<Object, DecodeError> {
        let mut out = String::with_capacity(text.len() + 64);
        let mut kind = None;
        let mut api_version = None;
        let mut meta = None;
        out.push('{');
        let mut members = ObjectScanner::new(text).map_err(not_json)?;
        while let Some(field) = members.next_key().map_err(not_json)? {
            if field == "metadata" {
                if meta.is_some() {
                    return Err(DecodeError::DuplicateMetadata);
                }
                write_key(&mut out, "metadata");
                if !text[members.position()..].starts_with('{') {
                    return Err(DecodeError::MissingMetadata);
                }
                let mut metadata = members.enter_object().map_err(not_json)?;
                meta = Some(self.decode_metadata(text, &mut metadata, &mut out)?);
                members.leave_object(metadata);
                out.push(',');
                continue;
            }
            let raw = &text[members.skip_value().map_err(not_json)?];
            match &*field {
                "kind" => {
                    kind = Some(string_value(raw).ok_or_else(|| bad_type_field("kind", raw))?)
                }
                "apiVersion" => {
                    api_version =
                        Some(string_value(raw).ok_or_else(|| bad_type_field("apiVersion", raw))?)
                }
                _ => {}
            }
            if self.metadata_only {
                // `apiVersion` and `kind` are written as the resource's after the loop.
                continue;
            }
            write_scanned_key(&mut out, &field);
            out.push_str(raw);
            out.push(',');
        }
        let mut object = meta.ok_or(DecodeError::MissingMetadata)?;
        let partial = self.metadata_only
            && api_version.as_deref() == Some(PARTIAL_OBJECT_METADATA.0)
            && kind.as_deref() == Some(PARTIAL_OBJECT_METADATA.1);
        if !partial {
            self.check_kind(&object.key, api_version.as_deref(), kind.as_deref())?;
        }
        // Metadata only: the type members were skipped; write the resource's.
        let written = !self.metadata_only;
        if !(written && api_version.is_some()) {
            write_key(&mut out, "apiVersion");
            push_json_string(&mut out, &self.api_version);
            out.push(',');
        }
        if !(written && kind.is_some()) {
            write_key(&mut out, "kind");
            push_json_string(&mut out, &self.resource.kind);
            out.push(',');
        }
        out.pop();
        out.push('}');
        object.json = out.into_boxed_str();
        Ok(object)
    }

    /// Checks `apiVersion`/`kind`, where present, against the resource.
    fn check_kind(
        &self,
        key: &ObjectKey,
        api_version: Option<&str>,
        kind: Option<&str>,
    ) -> Result<(), DecodeError> {
        let expected_api = &*self.api_version;
        let expected_kind = &self.resource.kind;
        if api_version.is_some_and(|a| a != expected_api)
            || kind.is_some_and(|k| k != expected_kind)
        {
            return Err(DecodeError::WrongKind {
                key: key.to_string(),
                expected: format!("{expected_api}/{expected_kind}"),
                found: format!("{}/{}", api_version.unwrap_or("?"), kind.unwrap_or("?")),
            });
        }
        Ok(())
    }

    /// Parses `metadata`, appending it without `managedFields` to `out`.
    fn decode_metadata<'a>(
        &self,
        text: &'a str,
        members: &mut ObjectScanner<'a>,
        out: &mut String,
    ) -> Result<Object, DecodeError> {
        let mut fields = MetaFields::default();
        out.push('{');
        let mut wrote_any = false;
        while let Some((field, range)) = members.next_member().map_err(not_json)? {
            if field == "managedFields" {
                continue;
            }
            let value = &text[range];
            write_scanned_key(out, &field);
            out.push_str(value);
            out.push(',');
            wrote_any = true;
            let slot = match &*field {
                "name" => &mut fields.name,
                "namespace" => &mut fields.namespace,
                "uid" => &mut fields.uid,
                "resourceVersion" => &mut fields.resource_version,
                "generation" => &mut fields.generation,
                "labels" => &mut fields.labels,
                "ownerReferences" => &mut fields.owner_references,
                "deletionTimestamp" => &mut fields.deletion_timestamp,
                _ => continue,
            };
            *slot = Some(value).filter(|v| *v != "null");
        }
        if wrote_any {
            out.pop();
        }
        out.push('}');
        fields.decode()
    }
}

/// Raw text of the metadata fields the machinery reads; `None` when absent or null.
#[derive(Default)]
struct MetaFields<'a> {
    name: Option<&'a str>,
    namespace: Option<&'a str>,
    uid: Option<&'a str>,
    resource_version: Option<&'a str>,
    generation: Option<&'a str>,
    labels: Option<&'a str>,
    owner_references: Option<&'a str>,
    deletion_timestamp: Option<&'a str>,
}

impl MetaFields<'_> {
    fn decode(self) -> Result<Object, DecodeError> {
        let name = match self.name {
            Some(raw) => string_value(raw).ok_or_else(|| not_a_string("name"))?,
            None => return Err(DecodeError::MissingName),
        };
        if name.is_empty() {
            return Err(DecodeError::MissingName);
        }
        let namespace = self
            .namespace
            .map(|raw| string_value(raw).ok_or_else(|| not_a_string("namespace")))
            .transpose()?;
        // The key joins namespace and name with '/', so a '/' in either would make two objects
        // share a key (and one of them vanish from the cache). The API server allows neither.
        for (field, value) in [("name", Some(&name)), ("namespace", namespace.as_ref())] {
            if value.is_some_and(|v| v.contains('/')) {
                return Err(DecodeError::BadField {
                    key: name.to_string(),
                    field,
                    reason: "contains '/', which Kubernetes names never do".to_owned(),
                });
            }
        }
        let key = ObjectKey::new(namespace.as_deref(), &name);
        let bad_field = |field: &'static str, reason: &str| DecodeError::BadField {
            key: key.to_string(),
            field,
            reason: reason.to_owned(),
        };
        let string = |raw: Option<&str>, field| {
            raw.map(|raw| {
                string_value(raw)
                    .map(Box::<str>::from)
                    .ok_or_else(|| bad_field(field, "not a string"))
            })
            .transpose()
        };
        let rv_text = string(self.resource_version, "resourceVersion")?.unwrap_or_default();
        if rv_text.is_empty() {
            return Err(DecodeError::BadResourceVersion {
                key: key.to_string(),
                value: String::new(),
            });
        }
        // Only the canonical form is a number, so that the text reads back as written:
        // not "007", nor "+7", which `parse` accepts.
        let canonical =
            !rv_text.starts_with('+') && (*rv_text == *"0" || !rv_text.starts_with('0'));
        let resource_version = match rv_text.parse::<u64>() {
            Ok(number) if canonical => ResourceVersion::Number(number),
            _ => ResourceVersion::Opaque(rv_text),
        };
        let generation = self
            .generation
            .map(|raw| raw.parse::<i64>())
            .transpose()
            .map_err(|_| bad_field("generation", "not an integer"))?;
        let labels = match self.labels {
            Some(raw) => decode_labels(raw).map_err(|reason| bad_field("labels", reason))?,
            None => Labels::default(),
        };
        let owner_references = match self.owner_references {
            Some(raw) => decode_owner_references(&key, raw)?,
            None => Box::default(),
        };
        Ok(Object {
            json: Box::default(),
            uid: string(self.uid, "uid")?,
            deletion_timestamp: string(self.deletion_timestamp, "deletionTimestamp")?,
            selected: SelectedCell::default(),
            key,
            resource_version,
            generation,
            labels,
            owner_references,
        })
    }
}

fn not_json(e: ScanError) -> DecodeError {
    DecodeError::NotJson(e.to_string())
}

fn bad_type_field(field: &'static str, raw: &str) -> DecodeError {
    const MAX: usize = 64;
    let end = (0..=raw.len().min(MAX))
        .rev()
        .find(|&i| raw.is_char_boundary(i))
        .unwrap_or(0);
    DecodeError::BadTypeField {
        field,
        found: raw[..end].to_owned(),
    }
}

fn not_a_string(field: &'static str) -> DecodeError {
    DecodeError::BadField {
        key: "?".into(),
        field,
        reason: "not a string".into(),
    }
}

/// `metadata.ownerReferences` (`raw`) of the object `key`.
fn decode_owner_references<'a>(
    key: &ObjectKey,
    raw: &'a str,
) -> Result<Box<[OwnerReference]>, DecodeError> {
    const STRINGS: [&str; 4] = ["apiVersion", "kind", "name", "uid"];
    let malformed = |source| DecodeError::BadOwnerReferences {
        key: key.to_string(),
        source,
    };
    let mut owners = Vec::new();
    let mut elements = ArrayScanner::new(raw).map_err(malformed)?;
    while let Some(range) = elements.next_element().map_err(malformed)? {
        let index = owners.len();
        let bad = |field, reason| DecodeError::BadOwnerReference {
            key: key.to_string(),
            index,
            field,
            reason,
        };
        // The element's own offsets, made offsets into `raw`.
        let start = range.start;
        let malformed = |e: ScanError| {
            malformed(ScanError {
                at: start + e.at,
                ..e
            })
        };
        let element = &raw[range];
        let mut fields: [Option<Cow<'_, str>>; 4] = Default::default();
        let mut controller = false;
        let mut members = ObjectScanner::new(element).map_err(malformed)?;
        while let Some((field, range)) = members.next_member().map_err(malformed)? {
            let value = &element[range];
            if field == "controller" {
                controller = match value {
                    "true" => true,
                    "false" | "null" => false,
                    _ => return Err(bad("controller", "is not a boolean")),
                };
                continue;
            }
            let Some(slot) = STRINGS.iter().position(|name| *name == field) else {
                continue;
            };
            fields[slot] =
                Some(string_value(value).ok_or_else(|| bad(STRINGS[slot], "is not a string"))?);
        }
        let [api_version, kind, name, uid] = fields;
        let required = |value: Option<Cow<'a, str>>, slot: usize| {
            value.ok_or_else(|| bad(STRINGS[slot], "is missing"))
        };
        owners.push(OwnerReference::new(
            &required(api_version, 0)?,
            &required(kind, 1)?,
            &required(name, 2)?,
            &required(uid, 3)?,
            controller,
        ));
    }
    Ok(owners.into_boxed_slice())
}

fn decode_labels(raw: &str) -> Result<Labels, &'static str> {
    // Sorted on the stack: most objects have a handful of labels.
    let mut pairs: SmallVec<[(Cow<'_, str>, Cow<'_, str>); 8]> = SmallVec::new();
    let mut members = ObjectScanner::new(raw).map_err(|e| e.what)?;
    while let Some((key, range)) = members.next_member().map_err(|e| e.what)? {
        let value = string_value(&raw[range]).ok_or("a label value is not a string")?;
        pairs.push((key, value));
    }
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    // JSON keeps the last of duplicate keys; so does Kubernetes.
    pairs.reverse();
    pairs.dedup_by(|later_in_vec, kept| later_in_vec.0 == kept.0);
    pairs.reverse();
    let mut text = String::with_capacity(pairs.iter().map(|(k, v)| k.len() + v.len()).sum());
    let mut ends = Vec::with_capacity(pairs.len());
    for (key, value) in &pairs {
        text.push_str(key);
        let key_end = text.len();
        text.push_str(value);
        let bound = |n: usize| u32::try_from(n).map_err(|_| "labels longer than 4 GiB");
        ends.push((bound(key_end)?, bound(text.len())?));
    }
    Ok(Labels {
        text: text.into_boxed_str(),
        ends: ends.into_boxed_slice(),
    })
}

fn write_key(out: &mut String, key: &str) {
    push_json_string(out, key);
    out.push(':');
}

/// Like [`write_key`] for a key the scanner read: one it borrowed had no escapes and no
/// control characters, so it is valid JSON between quotes as it is.
#[expect(
    clippy::ptr_arg,
    reason = "the variant says whether the key had escapes"
)]
fn write_scanned_key(out: &mut String, key: &Cow<'_, str>) {
    match key {
        Cow::Borrowed(key) => {
            out.push('"');
            out.push_str(key);
            out.push_str("\":");
        }
        Cow::Owned(key) => write_key(out, key),
    }
}

#[cfg(test)]
mod tests;
