//! Objects as clients send them: checked, and rendered for storage without a tree.

use std::fmt::Write as _;

use bytes::Bytes;
use kubeplug_informer::object::ObjectKey;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::source::Status;
use kubeplug_json::{ObjectScanner, ScanError, push_json_string};

use crate::state::{LabelSet, Stored};

/// An object as a client sent it, rendered for storage except for the members the server
/// assigns, which [`Incoming::store`] splices in.
pub(crate) struct Incoming {
    pub(crate) key: ObjectKey,
    pub(crate) labels: LabelSet,
    /// `metadata.uid` as sent.
    pub(crate) uid: Option<Box<str>>,
    /// `metadata.resourceVersion` as sent: an update's precondition.
    pub(crate) resource_version: Option<String>,
    /// Compact JSON without `kind`, `apiVersion`, `metadata.uid` and
    /// `metadata.resourceVersion`.
    pub(crate) text: String,
    /// Where the server's members go: the closing brace of `metadata`.
    pub(crate) insert_at: usize,
    /// Whether `metadata` has members before `insert_at`.
    pub(crate) metadata_has_members: bool,
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
    pub(crate) fn parse(resource: &Resource, json: &str) -> Result<Self, Status> {
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
    pub(crate) fn store(self, uid: &str, rv: u64) -> Stored {
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

pub(crate) fn bad_request(message: String) -> Status {
    Status::new(400, "BadRequest", message)
}

pub(crate) fn invalid(message: String) -> Status {
    Status::new(422, "Invalid", message)
}

pub(crate) fn not_found(resource: &Resource, key: &ObjectKey) -> Status {
    Status::new(
        404,
        "NotFound",
        format!("{} {:?} not found", resource.plural, key.as_str()),
    )
}

pub(crate) fn already_exists(resource: &Resource, key: &ObjectKey) -> Status {
    Status::new(
        409,
        "AlreadyExists",
        format!("{} {:?} already exists", resource.plural, key.as_str()),
    )
}

pub(crate) fn conflict(resource: &Resource, key: &ObjectKey) -> Status {
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
