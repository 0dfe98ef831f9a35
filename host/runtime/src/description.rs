//! What a plugin says about itself (`describe()`), checked and in host types.

use std::collections::BTreeSet;
use std::time::Duration;

use kubeplug_informer::selector::{FieldSelector, LabelSelector};
use kubeplug_json::path::{FieldPath, PathError, PathSet};
use kubeplug_policy::names::{check_namespace, is_dns_label, quoted};
use kubeplug_policy::{NameError, WriteVerb};

use crate::bindings::{guest, wit};
use crate::gvk::Gvk;

/// A plugin's self-description, validated.
///
/// Contract: `name` is a DNS label (lowercase letters, digits, `-`, at most 63 bytes);
/// there is at least one subscription and at most [`MAX_SUBSCRIPTIONS`]; at most
/// [`MAX_INDEXES`] indexes and [`MAX_RESOURCES`] reads and writes; no string is over
/// [`MAX_TEXT`] bytes; every selector parses; every index names a resource the plugin
/// subscribes to or reads, and its path parses; index names are unique and none is
/// `namespace`; each subscription's projections keep the contract of [`Projection`]; a
/// reconcile plugin has at least one worker.
#[derive(Debug, Clone, PartialEq)]
pub struct Description {
    /// The plugin's name.
    pub name: String,
    /// Its version text.
    pub version: String,
    /// What it watches, in the order events refer to them.
    pub subscriptions: Vec<SubscriptionSpec>,
    /// How it is driven.
    pub delivery: Delivery,
    /// Custom indexes the host evaluates for it.
    pub indexes: Vec<IndexDecl>,
    /// What it reads beyond its subscriptions, and the types whose bodies it reads.
    pub reads: Vec<Read>,
    /// Writes it asks for.
    pub writes: Vec<(Gvk, BTreeSet<WriteVerb>)>,
}

/// A declared read: a resource type the plugin reads through the cache, and whether it reads
/// the objects' bodies (their JSON, or values through projections) or metadata only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// The resource type.
    pub resource: Gvk,
    /// Whether its cache reads carry the objects' JSON and may project.
    pub wants_object_json: bool,
}

impl Read {
    /// A read of `resource`'s metadata only.
    pub fn metadata(resource: Gvk) -> Self {
        Self {
            resource,
            wants_object_json: false,
        }
    }

    /// A read of `resource`'s objects whole.
    pub fn bodies(resource: Gvk) -> Self {
        Self {
            resource,
            wants_object_json: true,
        }
    }
}

/// One watched resource type.
#[derive(Debug, Clone, PartialEq)]
pub struct SubscriptionSpec {
    /// The resource type.
    pub resource: Gvk,
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Label selector text (validated).
    pub label_selector: Option<String>,
    /// Field selector text (validated).
    pub field_selector: Option<String>,
    /// Resync period.
    pub resync_period: Option<Duration>,
    /// The parts of the metadata each event carries besides the key and versions.
    pub meta_fields: MetaFields,
    /// Send object JSON with each event.
    pub wants_object_json: bool,
    /// Send the old object's JSON with updates.
    pub wants_old_json: bool,
    /// Reconcile mode: which key an event enqueues.
    pub enqueue: KeyMapping,
    /// Field paths each event carries the values of, in the order events list them.
    pub projections: Projections,
}

impl SubscriptionSpec {
    /// Whether the plugin reads nothing of this subscription's objects but their metadata:
    /// no JSON, old or new, and no projections. Its informer may then list and watch
    /// metadata alone.
    pub fn reads_metadata_only(&self) -> bool {
        !self.wants_object_json && !self.wants_old_json && self.projections.is_empty()
    }
}

/// A named field path whose values a subscription's events carry (`event.projected`).
///
/// Contract (checked by [`Description::check`]): the name is 1 to [`MAX_PROJECTION_NAME`]
/// bytes of ASCII letters, digits, `_`, `-` and `.`, unique within its subscription; the
/// path is at most [`MAX_PROJECTION_PATH`] bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Projection {
    /// The name the plugin reads the values by.
    pub name: String,
    /// The path.
    pub path: FieldPath,
}

impl Projection {
    /// A projection as a plugin sent it, checked against the contract and parsed: the path's
    /// length is checked before it is parsed. The error names the field (`name` or `path`)
    /// and says why.
    pub fn parse(name: String, path: &str) -> Result<Self, (&'static str, String)> {
        if !is_projection_name(&name) {
            return Err(("name", invalid_projection_name(&name)));
        }
        if path.len() > MAX_PROJECTION_PATH {
            return Err((
                "path",
                format!("{} bytes; at most {MAX_PROJECTION_PATH}", path.len()),
            ));
        }
        let path = FieldPath::parse(path).map_err(|e| ("path", e.to_string()))?;
        Ok(Self { name, path })
    }
}

/// A list of [`Projection`]s with their paths as one [`PathSet`]: what an event or a cache
/// read evaluates, in one walk of the object for all of them.
#[derive(Debug, Clone, Default)]
pub struct Projections {
    list: Vec<Projection>,
    paths: PathSet,
}

/// Why a list of projections a plugin sent is refused; the caller says where the list was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProjectionListError {
    /// More entries than the bound (`max_projections`).
    TooMany {
        /// The entries sent.
        count: usize,
    },
    /// One entry breaks [`Projection`]'s contract.
    Invalid {
        /// The entry's position, from 0.
        projection: usize,
        /// `name` or `path`.
        field: &'static str,
        /// Why.
        reason: String,
    },
}

impl Projections {
    /// A plugin's projections, checked against [`Projection`]'s contract: at most `bound`
    /// (counted before anything is parsed), each by [`Projection::parse`], names unique.
    pub(crate) fn parse_list(
        sent: Vec<wit::Projection>,
        bound: usize,
    ) -> Result<Self, ProjectionListError> {
        if sent.len() > bound {
            return Err(ProjectionListError::TooMany { count: sent.len() });
        }
        let mut list: Vec<Projection> = Vec::with_capacity(sent.len());
        for (projection, p) in sent.into_iter().enumerate() {
            let invalid = |field, reason| ProjectionListError::Invalid {
                projection,
                field,
                reason,
            };
            let parsed = Projection::parse(p.name, &p.path)
                .map_err(|(field, reason)| invalid(field, reason))?;
            if list.iter().any(|earlier| earlier.name == parsed.name) {
                return Err(invalid(
                    "name",
                    format!("{} is used twice", quoted(&parsed.name)),
                ));
            }
            list.push(parsed);
        }
        Ok(list.into())
    }

    /// The paths, numbered as the projections are.
    pub fn paths(&self) -> &PathSet {
        &self.paths
    }
}

impl From<Vec<Projection>> for Projections {
    fn from(list: Vec<Projection>) -> Self {
        let paths = PathSet::new(list.iter().map(|p| p.path.clone()));
        Self { list, paths }
    }
}

impl std::ops::Deref for Projections {
    type Target = [Projection];

    fn deref(&self) -> &[Projection] {
        &self.list
    }
}

impl<'p> IntoIterator for &'p Projections {
    type Item = &'p Projection;
    type IntoIter = std::slice::Iter<'p, Projection>;

    fn into_iter(self) -> Self::IntoIter {
        self.list.iter()
    }
}

impl PartialEq for Projections {
    fn eq(&self, other: &Self) -> bool {
        self.list == other.list
    }
}

fn invalid_projection_name(name: &str) -> String {
    format!(
        "{} is not 1 to {MAX_PROJECTION_NAME} bytes of letters, digits, '_', '-' and '.'",
        quoted(name)
    )
}

/// The most projections a subscription may declare by default (`max_projections`): 16.
/// Each is evaluated once for every object the subscription's informer stores, and its
/// values kept with the object.
pub const MAX_PROJECTIONS: usize = 16;

/// The longest projection name: 63 bytes.
pub const MAX_PROJECTION_NAME: usize = 63;

/// The longest projection path: 512 bytes, room for any path into a Kubernetes object.
pub const MAX_PROJECTION_PATH: usize = 512;

fn is_projection_name(name: &str) -> bool {
    (1..=MAX_PROJECTION_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// The optional parts of an object's metadata that a subscription's events carry; namespace,
/// name, resourceVersion and generation always come. Each part costs every event a copy
/// into the plugin's memory per string, so plugins ask only for what they read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetaFields {
    /// `uid`.
    pub uid: bool,
    /// `labels`.
    pub labels: bool,
    /// `owner-references`.
    pub owner_references: bool,
    /// `deletion-timestamp`.
    pub deletion_timestamp: bool,
}

impl MetaFields {
    /// No part: events carry the key and versions only.
    pub const NONE: Self = Self {
        uid: false,
        labels: false,
        owner_references: false,
        deletion_timestamp: false,
    };

    /// Every part.
    pub const ALL: Self = Self {
        uid: true,
        labels: true,
        owner_references: true,
        deletion_timestamp: true,
    };
}

impl From<guest::MetaFields> for MetaFields {
    fn from(fields: guest::MetaFields) -> Self {
        Self {
            uid: fields.contains(guest::MetaFields::UID),
            labels: fields.contains(guest::MetaFields::LABELS),
            owner_references: fields.contains(guest::MetaFields::OWNER_REFERENCES),
            deletion_timestamp: fields.contains(guest::MetaFields::DELETION_TIMESTAMP),
        }
    }
}

/// How a reconcile-mode event becomes work-queue keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyMapping {
    /// The object's own key.
    OwnKey,
    /// Its owner of this kind (group and kind compared; version ignored).
    Owner(Gvk),
    /// Whatever the plugin's `map-event` returns.
    Computed,
}

/// How a plugin is driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Every notification in order, in batches, to one instance.
    Events,
    /// Keys through a rate-limited queue to this many workers (at least 1).
    Reconcile {
        /// Worker count.
        workers: usize,
    },
}

/// A custom index the plugin declared.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexDecl {
    /// The plugin's name for it.
    pub name: String,
    /// The resource it indexes.
    pub resource: Gvk,
    /// What it is computed from.
    pub spec: IndexSource,
}

/// What a declared index is computed from.
#[derive(Debug, Clone, PartialEq)]
pub enum IndexSource {
    /// A label's value.
    Label(String),
    /// Owner uids.
    OwnerUid,
    /// A path into the object; the values it files an object under are
    /// [`IndexSpec::Path`](kubeplug_informer::indexer::IndexSpec::Path)'s.
    Path(FieldPath),
}

/// The most subscriptions a plugin may declare by default (`max_subscriptions`): 32. Each
/// one is an informer handler (and often an informer of its own, with a watch on the API
/// server); the example plugins use one to three.
pub const MAX_SUBSCRIPTIONS: usize = 32;

/// The most custom indexes a plugin may declare by default (`max_indexes`): 32. Every index is
/// evaluated on every change of its resource, for every plugin's sake, on the informer's own
/// task.
pub const MAX_INDEXES: usize = 32;

/// The most reconcile workers a plugin may ask for by default: 16, more than a host's cores
/// can run at once (`max_reconcile_workers` in the configuration).
pub const MAX_RECONCILE_WORKERS: usize = 16;

/// What the host's configuration lets a plugin describe: how many subscriptions, indexes,
/// reconcile workers and projections per subscription (`max_subscriptions`, `max_indexes`,
/// `max_reconcile_workers`, `max_projections`). The default is the built-in bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DescriptionBounds {
    /// The most subscriptions.
    pub subscriptions: usize,
    /// The most projections in one subscription.
    pub projections: usize,
    /// The most custom indexes.
    pub indexes: usize,
    /// The most reconcile workers.
    pub reconcile_workers: usize,
}

impl Default for DescriptionBounds {
    fn default() -> Self {
        Self {
            subscriptions: MAX_SUBSCRIPTIONS,
            projections: MAX_PROJECTIONS,
            indexes: MAX_INDEXES,
            reconcile_workers: MAX_RECONCILE_WORKERS,
        }
    }
}

/// The most resource types a plugin may list in `reads`, and in `writes`: 64 each, more
/// than the built-in types a controller could reasonably touch.
pub const MAX_RESOURCES: usize = 64;

/// The longest string in a description (name parts, namespaces, selectors, index names and
/// specs, the version text): 4096 bytes, the bound on a host-call argument, so that whatever
/// a plugin declares it can also pass to the cache.
pub const MAX_TEXT: usize = 4096;

/// What `describe()` returned, in host types and not yet checked. The runtime converts the
/// guest's answer into it; tests and fuzzing build it directly. [`Description::check`]
/// turns it into a [`Description`] or names the field that is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct RawDescription {
    /// `name`.
    pub name: String,
    /// `version`.
    pub version: String,
    /// `subscriptions`, as sent (empty namespaces and selectors not yet dropped).
    pub subscriptions: Vec<SubscriptionSpec>,
    /// `delivery`; `Reconcile { workers: 0 }` means one worker.
    pub delivery: Delivery,
    /// `indexes`.
    pub indexes: Vec<RawIndex>,
    /// `reads`.
    pub reads: Vec<Read>,
    /// `writes`, verbs as sent (duplicates allowed).
    pub writes: Vec<(Gvk, Vec<WriteVerb>)>,
}

/// An `index-decl` as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawIndex {
    /// `name`.
    pub name: String,
    /// `resource-type`.
    pub resource: Gvk,
    /// `spec`.
    pub spec: RawIndexSpec,
}

/// An `index-spec` as sent: a path is still text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawIndexSpec {
    /// `label(key)`.
    Label(String),
    /// `owner-uid`.
    OwnerUid,
    /// `path(text)`.
    Path(String),
}

/// Why a description was refused. Every message starts with the field concerned, as the
/// WIT record names it (`subscriptions[2].label-selector`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DescriptionError {
    /// The name is not a DNS label.
    #[error(
        "name: {} is not a DNS label (lowercase letters, digits, '-', at most 63 bytes)",
        quoted(.0)
    )]
    InvalidName(String),
    /// The version text is not a version: shown in `/plugins`, `kubeplug check` and logs,
    /// it must be short and plain.
    #[error(
        "version: {} is not a version (1 to {MAX_VERSION} bytes of letters, digits, '.', '-', '+' \
         and '_')",
        quoted(.0)
    )]
    InvalidVersion(String),
    /// A namespace, or a part of a resource type, is not a valid name of its kind.
    #[error("{field}: {source}")]
    InvalidIdentifier {
        /// Where it is, e.g. `subscriptions[0].resource-type`.
        field: String,
        /// What is wrong with it.
        #[source]
        source: NameError,
    },
    /// No subscription.
    #[error("subscriptions: describe() returned none; a plugin watches at least one type")]
    NoSubscription,
    /// A list has more entries than its bound.
    #[error("{field}: {count} entries; at most {limit}{}", set_by(*.setting))]
    TooMany {
        /// The list: `subscriptions`, `indexes`, `reads` or `writes`.
        field: &'static str,
        /// How many it has.
        count: usize,
        /// Its bound.
        limit: usize,
        /// The configuration key that sets the bound, if one does.
        setting: Option<&'static str>,
    },
    /// More reconcile workers than the configuration allows.
    #[error("delivery: {workers} reconcile workers; at most {limit} (max_reconcile_workers)")]
    TooManyWorkers {
        /// How many it asked for.
        workers: usize,
        /// The bound.
        limit: usize,
    },
    /// A string is longer than [`MAX_TEXT`].
    #[error("{field}: {length} bytes; at most {limit}")]
    TooLong {
        /// Where it is, e.g. `subscriptions[0].resource-type.kind`.
        field: String,
        /// Its length.
        length: usize,
        /// The bound.
        limit: usize,
    },
    /// A selector did not parse.
    #[error(
        "subscriptions[{index}].{what} ({resource}): {} does not parse: {reason}",
        quoted(.text)
    )]
    InvalidSelector {
        /// Subscription index.
        index: usize,
        /// Its resource (`group/version/Kind`).
        resource: String,
        /// `label-selector` or `field-selector`.
        what: &'static str,
        /// The text.
        text: String,
        /// The parser's complaint.
        reason: String,
    },
    /// An index is on a resource the plugin neither subscribes to nor reads.
    #[error(
        "indexes[{index}] ({}): on {resource}, which the plugin neither subscribes to nor lists in reads",
        quoted(.name)
    )]
    IndexOnUnknownResource {
        /// Its position.
        index: usize,
        /// Index name.
        name: String,
        /// Its resource.
        resource: Gvk,
    },
    /// Two indexes share a name (or one is called `namespace`).
    #[error(
        "indexes[{index}]: name {} is used twice (or is the built-in `namespace`)",
        quoted(.name)
    )]
    DuplicateIndex {
        /// Its position.
        index: usize,
        /// The name.
        name: String,
    },
    /// A subscription declares more projections than its bound.
    #[error(
        "subscriptions[{subscription}].projections: {count} entries; at most {limit} \
         (max_projections)"
    )]
    TooManyProjections {
        /// Subscription index.
        subscription: usize,
        /// How many it declares.
        count: usize,
        /// The bound.
        limit: usize,
    },
    /// A projection's name or path is not valid.
    #[error("subscriptions[{subscription}].projections[{projection}].{field}: {reason}")]
    InvalidProjection {
        /// Subscription index.
        subscription: usize,
        /// Projection index.
        projection: usize,
        /// `name` or `path`.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// An index path did not parse.
    #[error("indexes[{index}] ({}): {reason}", quoted(.name))]
    InvalidIndexPath {
        /// Its position.
        index: usize,
        /// Index name.
        name: String,
        /// The parser's complaint.
        reason: PathError,
    },
}

/// ` (KEY)` for a bound the configuration sets.
fn set_by(setting: Option<&'static str>) -> String {
    setting.map(|key| format!(" ({key})")).unwrap_or_default()
}

fn check_count(
    field: &'static str,
    count: usize,
    limit: usize,
    setting: Option<&'static str>,
) -> Result<(), DescriptionError> {
    if count > limit {
        return Err(DescriptionError::TooMany {
            field,
            count,
            limit,
            setting,
        });
    }
    Ok(())
}

/// `Err(TooLong)` naming `field()` (built only then) when `text` is over [`MAX_TEXT`].
/// The longest version text: 128 bytes, room for any semantic version with pre-release and
/// build parts.
pub const MAX_VERSION: usize = 128;

/// Whether `text` reads as a version: what semantic versions, `v`-prefixed tags and dates use.
fn is_version(text: &str) -> bool {
    (1..=MAX_VERSION).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+' | b'_'))
}

fn check_text(field: impl FnOnce() -> String, text: &str) -> Result<(), DescriptionError> {
    if text.len() > MAX_TEXT {
        return Err(DescriptionError::TooLong {
            field: field(),
            length: text.len(),
            limit: MAX_TEXT,
        });
    }
    Ok(())
}

/// Its length, then each part by its rule: a type reaches discovery URLs.
fn check_gvk(field: &dyn Fn() -> String, gvk: &Gvk) -> Result<(), DescriptionError> {
    check_text(|| format!("{}.group", field()), &gvk.group)?;
    check_text(|| format!("{}.version", field()), &gvk.version)?;
    check_text(|| format!("{}.kind", field()), &gvk.kind)?;
    gvk.check()
        .map_err(|source| DescriptionError::InvalidIdentifier {
            field: field(),
            source,
        })
}

fn check_subscription_count(
    count: usize,
    bounds: &DescriptionBounds,
) -> Result<(), DescriptionError> {
    check_count(
        "subscriptions",
        count,
        bounds.subscriptions,
        Some("max_subscriptions"),
    )
}

/// The guest's projections of subscription `subscription`, parsed and checked.
fn parse_projections(
    subscription: usize,
    projections: Vec<wit::Projection>,
    bounds: &DescriptionBounds,
) -> Result<Projections, DescriptionError> {
    Projections::parse_list(projections, bounds.projections).map_err(|error| match error {
        ProjectionListError::TooMany { count } => DescriptionError::TooManyProjections {
            subscription,
            count,
            limit: bounds.projections,
        },
        ProjectionListError::Invalid {
            projection,
            field,
            reason,
        } => DescriptionError::InvalidProjection {
            subscription,
            projection,
            field,
            reason,
        },
    })
}

fn check_projection_count(
    subscription: usize,
    count: usize,
    bounds: &DescriptionBounds,
) -> Result<(), DescriptionError> {
    if count > bounds.projections {
        return Err(DescriptionError::TooManyProjections {
            subscription,
            count,
            limit: bounds.projections,
        });
    }
    Ok(())
}

/// The contract of [`Projection`] for each of a subscription's projections, and its count.
fn check_projections(
    subscription: usize,
    projections: &[Projection],
    bounds: &DescriptionBounds,
) -> Result<(), DescriptionError> {
    check_projection_count(subscription, projections.len(), bounds)?;
    let mut names = BTreeSet::new();
    for (projection, p) in projections.iter().enumerate() {
        let invalid = |field, reason| DescriptionError::InvalidProjection {
            subscription,
            projection,
            field,
            reason,
        };
        if !is_projection_name(&p.name) {
            return Err(invalid("name", invalid_projection_name(&p.name)));
        }
        if !names.insert(p.name.as_str()) {
            return Err(invalid(
                "name",
                format!("{} is used twice", quoted(&p.name)),
            ));
        }
        let length = p.path.as_str().len();
        if length > MAX_PROJECTION_PATH {
            return Err(invalid(
                "path",
                format!("{length} bytes; at most {MAX_PROJECTION_PATH}"),
            ));
        }
    }
    Ok(())
}

fn check_subscription(
    index: usize,
    s: &SubscriptionSpec,
    bounds: &DescriptionBounds,
) -> Result<(), DescriptionError> {
    let at = |field: &str| format!("subscriptions[{index}].{field}");
    check_projections(index, &s.projections, bounds)?;
    check_gvk(&|| at("resource-type"), &s.resource)?;
    if let KeyMapping::Owner(owner) = &s.enqueue {
        check_gvk(&|| at("enqueue.owner"), owner)?;
    }
    for (field, text) in [
        ("namespace", &s.namespace),
        ("label-selector", &s.label_selector),
        ("field-selector", &s.field_selector),
    ] {
        if let Some(text) = text {
            check_text(|| at(field), text)?;
        }
    }
    if let Some(namespace) = s.namespace.as_deref().filter(|ns| !ns.is_empty()) {
        check_namespace(namespace).map_err(|source| DescriptionError::InvalidIdentifier {
            field: at("namespace"),
            source,
        })?;
    }
    let invalid = |what, text: &str, reason: String| DescriptionError::InvalidSelector {
        index,
        resource: s.resource.to_string(),
        what,
        text: text.to_owned(),
        reason,
    };
    if let Some(text) = &s.label_selector {
        LabelSelector::parse(text).map_err(|e| invalid("label-selector", text, e.to_string()))?;
    }
    if let Some(text) = &s.field_selector {
        FieldSelector::parse(text).map_err(|e| invalid("field-selector", text, e.to_string()))?;
    }
    Ok(())
}

impl Description {
    /// Converts and checks what a plugin's `describe()` returned, within `bounds`.
    pub(crate) fn from_guest(
        raw: guest::Description,
        bounds: &DescriptionBounds,
    ) -> Result<Self, DescriptionError> {
        let gvk = Gvk::from;
        // Bound the work before parsing any path.
        check_subscription_count(raw.subscriptions.len(), bounds)?;
        let subscriptions = raw
            .subscriptions
            .into_iter()
            .enumerate()
            .map(|(index, s)| {
                let projections = parse_projections(index, s.projections, bounds)?;
                Ok(SubscriptionSpec {
                    resource: gvk(s.resource_type),
                    namespace: s.namespace,
                    label_selector: s.label_selector,
                    field_selector: s.field_selector,
                    resync_period: s.resync_period_ms.map(Duration::from_millis),
                    meta_fields: s.meta_fields.into(),
                    wants_object_json: s.wants_object_json,
                    wants_old_json: s.wants_old_json,
                    enqueue: match s.enqueue {
                        guest::KeyMapping::OwnKey => KeyMapping::OwnKey,
                        guest::KeyMapping::Owner(g) => KeyMapping::Owner(g.into()),
                        guest::KeyMapping::Computed => KeyMapping::Computed,
                    },
                    projections,
                })
            })
            .collect::<Result<Vec<_>, DescriptionError>>()?;
        let indexes = raw
            .indexes
            .into_iter()
            .map(|decl| RawIndex {
                name: decl.name,
                resource: gvk(decl.resource_type),
                spec: match decl.spec {
                    guest::IndexSpec::Label(key) => RawIndexSpec::Label(key),
                    guest::IndexSpec::OwnerUid => RawIndexSpec::OwnerUid,
                    guest::IndexSpec::Path(text) => RawIndexSpec::Path(text),
                },
            })
            .collect();
        let writes = raw
            .writes
            .into_iter()
            .map(|w| {
                let verbs = w
                    .verbs
                    .into_iter()
                    .map(|v| match v {
                        guest::WriteVerb::Apply => WriteVerb::Apply,
                        guest::WriteVerb::Patch => WriteVerb::Patch,
                        guest::WriteVerb::PatchStatus => WriteVerb::PatchStatus,
                        guest::WriteVerb::Create => WriteVerb::Create,
                        guest::WriteVerb::Delete => WriteVerb::Delete,
                        guest::WriteVerb::RecordEvent => WriteVerb::RecordEvent,
                    })
                    .collect();
                (gvk(w.resource_type), verbs)
            })
            .collect();
        Self::check(
            RawDescription {
                name: raw.name,
                version: raw.version,
                subscriptions,
                delivery: match raw.delivery {
                    guest::Delivery::Events => Delivery::Events,
                    guest::Delivery::Reconcile(n) => Delivery::Reconcile {
                        workers: n as usize,
                    },
                },
                indexes,
                reads: raw
                    .reads
                    .into_iter()
                    .map(|r| Read {
                        resource: gvk(r.resource_type),
                        wants_object_json: r.wants_object_json,
                    })
                    .collect(),
                writes,
            },
            bounds,
        )
    }

    /// Checks a raw description against the contract of [`Description`], `bounds` and the
    /// fixed bounds ([`MAX_RESOURCES`], [`MAX_TEXT`]); drops empty namespaces and selectors
    /// and merges duplicate verbs. Counts are checked before anything is looked at one by
    /// one.
    pub fn check(
        raw: RawDescription,
        bounds: &DescriptionBounds,
    ) -> Result<Self, DescriptionError> {
        if !is_dns_label(&raw.name) {
            return Err(DescriptionError::InvalidName(raw.name));
        }
        if !is_version(&raw.version) {
            return Err(DescriptionError::InvalidVersion(raw.version));
        }
        if raw.subscriptions.is_empty() {
            return Err(DescriptionError::NoSubscription);
        }
        check_subscription_count(raw.subscriptions.len(), bounds)?;
        check_count(
            "indexes",
            raw.indexes.len(),
            bounds.indexes,
            Some("max_indexes"),
        )?;
        check_count("reads", raw.reads.len(), MAX_RESOURCES, None)?;
        check_count("writes", raw.writes.len(), MAX_RESOURCES, None)?;
        if let Delivery::Reconcile { workers } = raw.delivery
            && workers > bounds.reconcile_workers
        {
            return Err(DescriptionError::TooManyWorkers {
                workers,
                limit: bounds.reconcile_workers,
            });
        }
        for (index, s) in raw.subscriptions.iter().enumerate() {
            check_subscription(index, s, bounds)?;
        }
        for (index, read) in raw.reads.iter().enumerate() {
            check_gvk(&|| format!("reads[{index}].resource-type"), &read.resource)?;
        }
        for (index, (resource, _)) in raw.writes.iter().enumerate() {
            check_gvk(&|| format!("writes[{index}].resource-type"), resource)?;
        }
        let subscriptions: Vec<SubscriptionSpec> = raw
            .subscriptions
            .into_iter()
            .map(|s| SubscriptionSpec {
                namespace: s.namespace.filter(|ns| !ns.is_empty()),
                label_selector: s.label_selector.filter(|s| !s.is_empty()),
                field_selector: s.field_selector.filter(|s| !s.is_empty()),
                ..s
            })
            .collect();
        let mut names = BTreeSet::from(["namespace".to_owned()]);
        let mut indexes = Vec::with_capacity(raw.indexes.len());
        for (index, decl) in raw.indexes.into_iter().enumerate() {
            let at = |field: &str| format!("indexes[{index}].{field}");
            check_text(|| at("name"), &decl.name)?;
            check_gvk(&|| at("resource-type"), &decl.resource)?;
            if let RawIndexSpec::Label(text) | RawIndexSpec::Path(text) = &decl.spec {
                check_text(|| at("spec"), text)?;
            }
            if !subscriptions.iter().any(|s| s.resource == decl.resource)
                && !raw.reads.iter().any(|read| read.resource == decl.resource)
            {
                return Err(DescriptionError::IndexOnUnknownResource {
                    index,
                    name: decl.name,
                    resource: decl.resource,
                });
            }
            if !names.insert(decl.name.clone()) {
                return Err(DescriptionError::DuplicateIndex {
                    index,
                    name: decl.name,
                });
            }
            let spec = match decl.spec {
                RawIndexSpec::Label(key) => IndexSource::Label(key),
                RawIndexSpec::OwnerUid => IndexSource::OwnerUid,
                RawIndexSpec::Path(text) => {
                    IndexSource::Path(FieldPath::parse(&text).map_err(|reason| {
                        DescriptionError::InvalidIndexPath {
                            index,
                            name: decl.name.clone(),
                            reason,
                        }
                    })?)
                }
            };
            indexes.push(IndexDecl {
                name: decl.name,
                resource: decl.resource,
                spec,
            });
        }
        Ok(Self {
            name: raw.name,
            version: raw.version,
            subscriptions,
            delivery: match raw.delivery {
                Delivery::Events => Delivery::Events,
                Delivery::Reconcile { workers } => Delivery::Reconcile {
                    workers: workers.max(1),
                },
            },
            indexes,
            reads: raw.reads,
            writes: raw
                .writes
                .into_iter()
                .map(|(resource, verbs)| (resource, verbs.into_iter().collect()))
                .collect(),
        })
    }

    /// Every type the plugin reads, each of which its grants must allow: its
    /// subscriptions, the owners its keys map to (a reconcile reads them through the cache),
    /// its declared reads and its indexes' types.
    pub fn read_types(&self) -> BTreeSet<Gvk> {
        let mut reads: BTreeSet<Gvk> = self.subscribed().cloned().collect();
        for subscription in &self.subscriptions {
            if let KeyMapping::Owner(owner) = &subscription.enqueue {
                reads.insert(owner.clone());
            }
        }
        reads.extend(self.reads.iter().map(|read| read.resource.clone()));
        reads.extend(self.indexes.iter().map(|index| index.resource.clone()));
        reads
    }

    /// The types whose cache reads carry the objects' JSON: those of a read or a
    /// subscription that wants it.
    pub fn json_types(&self) -> BTreeSet<Gvk> {
        let reads = self.reads.iter().filter(|r| r.wants_object_json);
        let subscriptions = self.subscriptions.iter().filter(|s| s.wants_object_json);
        reads
            .map(|r| r.resource.clone())
            .chain(subscriptions.map(|s| s.resource.clone()))
            .collect()
    }

    /// The types whose objects' bodies the plugin needs in the cache: its JSON types, and
    /// those of a subscription with old JSON or projections and of a `path` index. On every
    /// other type it reads metadata only, and a projected cache read is refused.
    pub fn body_types(&self) -> BTreeSet<Gvk> {
        let mut types = self.json_types();
        types.extend(
            self.subscriptions
                .iter()
                .filter(|s| s.wants_old_json || !s.projections.is_empty())
                .map(|s| s.resource.clone()),
        );
        types.extend(
            self.indexes
                .iter()
                .filter(|i| matches!(i.spec, IndexSource::Path(_)))
                .map(|i| i.resource.clone()),
        );
        types
    }

    /// Every resource type the plugin subscribes to.
    pub fn subscribed(&self) -> impl Iterator<Item = &Gvk> {
        self.subscriptions.iter().map(|s| &s.resource)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels() {
        assert!(is_dns_label("label-audit"));
        assert!(is_dns_label("a1"));
        assert!(!is_dns_label("Label"));
        assert!(!is_dns_label("-a"));
        assert!(!is_dns_label(""));
        assert!(!is_dns_label(&"a".repeat(64)));
    }

    fn pods() -> Gvk {
        Gvk::new("", "v1", "Pod")
    }

    fn subscription(resource: Gvk) -> SubscriptionSpec {
        SubscriptionSpec {
            resource,
            namespace: None,
            label_selector: None,
            field_selector: None,
            resync_period: None,
            meta_fields: MetaFields::ALL,
            wants_object_json: false,
            wants_old_json: false,
            enqueue: KeyMapping::OwnKey,
            projections: Projections::default(),
        }
    }

    fn projection(name: &str, path: &str) -> Projection {
        Projection {
            name: name.to_owned(),
            path: FieldPath::parse(path).unwrap(),
        }
    }

    #[test]
    fn projections_keep_their_contract() {
        let with = |projections: Vec<Projection>| {
            let mut r = raw();
            r.subscriptions[0].projections = projections.into();
            r
        };
        let fine = with(vec![
            projection("replicas", "spec.replicas"),
            projection("images_v1.x-y", "spec.containers[*].image"),
        ]);
        let checked = Description::check(fine, &DescriptionBounds::default()).unwrap();
        assert_eq!(checked.subscriptions[0].projections.len(), 2);
        let cases = [
            (
                vec![projection("", "a")],
                "subscriptions[0].projections[0].name: \"\" is not 1 to 63 bytes",
            ),
            (
                vec![projection(&"n".repeat(64), "a")],
                "subscriptions[0].projections[0].name: ",
            ),
            (
                vec![projection("a", "x"), projection("a", "y")],
                "subscriptions[0].projections[1].name: \"a\" is used twice",
            ),
            (
                vec![projection("a", &format!("x.{}", "y".repeat(511)))],
                "subscriptions[0].projections[0].path: 513 bytes; at most 512",
            ),
            (
                (0..=MAX_PROJECTIONS)
                    .map(|i| projection(&format!("p{i}"), "a"))
                    .collect(),
                "subscriptions[0].projections: 17 entries; at most 16 (max_projections)",
            ),
        ];
        for (projections, expected) in cases {
            let message = refusal(with(projections));
            assert!(message.starts_with(expected), "{message}");
        }
    }

    fn raw() -> RawDescription {
        RawDescription {
            name: "probe".to_owned(),
            version: "1".to_owned(),
            subscriptions: vec![subscription(pods())],
            delivery: Delivery::Reconcile { workers: 0 },
            indexes: Vec::new(),
            reads: Vec::new(),
            writes: vec![(pods(), vec![WriteVerb::Patch, WriteVerb::Patch])],
        }
    }

    fn index(name: &str, spec: RawIndexSpec) -> RawIndex {
        RawIndex {
            name: name.to_owned(),
            resource: pods(),
            spec,
        }
    }

    fn refusal(raw: RawDescription) -> String {
        Description::check(raw, &DescriptionBounds::default())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_valid_description_is_normalised() {
        let mut raw = raw();
        raw.subscriptions[0].namespace = Some(String::new());
        raw.subscriptions[0].label_selector = Some(String::new());
        // Fields beyond the key's two are the server's to accept: one node's Pods.
        raw.subscriptions[0].field_selector = Some("spec.nodeName=node-1".to_owned());
        let checked = Description::check(raw, &DescriptionBounds::default()).unwrap();
        assert_eq!(
            checked.subscriptions[0].field_selector.as_deref(),
            Some("spec.nodeName=node-1")
        );
        assert_eq!(checked.delivery, Delivery::Reconcile { workers: 1 });
        assert_eq!(checked.subscriptions[0].namespace, None);
        assert_eq!(checked.subscriptions[0].label_selector, None);
        assert_eq!(checked.writes[0].1, BTreeSet::from([WriteVerb::Patch]));
    }

    #[test]
    fn lists_past_their_bounds_are_refused_naming_the_field_and_bound() {
        let mut many = raw();
        many.subscriptions = vec![subscription(pods()); MAX_SUBSCRIPTIONS + 1];
        assert_eq!(
            refusal(many),
            format!(
                "subscriptions: {} entries; at most {MAX_SUBSCRIPTIONS} (max_subscriptions)",
                MAX_SUBSCRIPTIONS + 1
            )
        );
        let mut many = raw();
        many.indexes = (0..=MAX_INDEXES)
            .map(|i| index(&format!("i{i}"), RawIndexSpec::OwnerUid))
            .collect();
        assert_eq!(
            refusal(many),
            format!(
                "indexes: {} entries; at most {MAX_INDEXES} (max_indexes)",
                MAX_INDEXES + 1
            )
        );
        let mut many = raw();
        many.reads = vec![Read::metadata(pods()); MAX_RESOURCES + 1];
        assert!(refusal(many).starts_with("reads: 65 entries; at most 64"));
        let mut many = raw();
        many.writes = vec![(pods(), Vec::new()); MAX_RESOURCES + 1];
        assert!(refusal(many).starts_with("writes: 65 entries; at most 64"));
        let mut fits = raw();
        fits.subscriptions = vec![subscription(pods()); MAX_SUBSCRIPTIONS];
        assert!(Description::check(fits, &DescriptionBounds::default()).is_ok());
    }

    /// Issue 19: `reconcile(4294967295)` asked for four billion workers; the bounds come
    /// from the configuration, and a description past them is refused naming the key.
    #[test]
    fn the_configured_bounds_hold() {
        let mut greedy = raw();
        greedy.delivery = Delivery::Reconcile {
            workers: u32::MAX as usize,
        };
        assert_eq!(
            refusal(greedy),
            "delivery: 4294967295 reconcile workers; at most 16 (max_reconcile_workers)"
        );
        let tight = DescriptionBounds {
            subscriptions: 1,
            projections: 0,
            indexes: 0,
            reconcile_workers: 2,
        };
        let mut two = raw();
        two.subscriptions.push(subscription(pods()));
        let error = Description::check(two, &tight).unwrap_err().to_string();
        assert_eq!(
            error,
            "subscriptions: 2 entries; at most 1 (max_subscriptions)"
        );
        let mut three = raw();
        three.delivery = Delivery::Reconcile { workers: 3 };
        assert!(Description::check(three, &tight).is_err());
    }

    #[test]
    fn a_version_is_short_and_plain() {
        for good in ["0.1.0", "v2", "1.0.0-rc.1+build.5", "2026_12_02"] {
            let mut r = raw();
            r.version = good.to_owned();
            assert!(
                Description::check(r, &DescriptionBounds::default()).is_ok(),
                "{good}"
            );
        }
        for bad in [
            String::new(),
            "a".repeat(MAX_VERSION + 1),
            "1.0\nINFO forged".into(),
            "1 0".into(),
        ] {
            let mut r = raw();
            r.version = bad.clone();
            assert!(refusal(r).starts_with("version: "), "{bad:?}");
        }
        // Quoted, and cut: a long version is not echoed whole.
        let mut r = raw();
        r.version = "é".repeat(MAX_TEXT);
        assert!(refusal(r).len() < 512);
    }

    #[test]
    fn strings_past_the_bound_are_refused_naming_where_they_are() {
        let long = "a".repeat(MAX_TEXT + 1);
        let too_long = |field: &str| format!("{field}: {} bytes; at most {MAX_TEXT}", MAX_TEXT + 1);
        let mut r = raw();
        r.subscriptions.push(subscription(pods()));
        r.subscriptions[1].label_selector = Some(long.clone());
        assert_eq!(refusal(r), too_long("subscriptions[1].label-selector"));
        let mut r = raw();
        r.subscriptions[0].enqueue = KeyMapping::Owner(Gvk::new("apps", "v1", &long));
        assert_eq!(refusal(r), too_long("subscriptions[0].enqueue.owner.kind"));
        let mut r = raw();
        r.reads = vec![
            Read::metadata(pods()),
            Read::metadata(Gvk::new(&long, "v1", "X")),
        ];
        assert_eq!(refusal(r), too_long("reads[1].resource-type.group"));
        let mut r = raw();
        r.indexes = vec![index("by-path", RawIndexSpec::Path(long.clone()))];
        assert_eq!(refusal(r), too_long("indexes[0].spec"));
        let mut r = raw();
        r.writes[0].0.version = long;
        assert_eq!(refusal(r), too_long("writes[0].resource-type.version"));
    }

    #[test]
    fn other_refusals_name_the_field() {
        let mut r = raw();
        r.name = "Not A Label".to_owned();
        assert!(refusal(r).starts_with("name: "));
        let mut r = raw();
        r.subscriptions.clear();
        assert!(refusal(r).starts_with("subscriptions: "));
        let mut r = raw();
        r.subscriptions[0].field_selector = Some("metadata.name".to_owned());
        assert!(refusal(r).starts_with("subscriptions[0].field-selector (v1/Pod): "));
        let mut r = raw();
        r.subscriptions[0].field_selector = Some("spec..nodeName=n1".to_owned());
        assert!(refusal(r).starts_with("subscriptions[0].field-selector (v1/Pod): "));
        let mut r = raw();
        r.indexes = vec![
            index("a", RawIndexSpec::OwnerUid),
            index("a", RawIndexSpec::Label("app".to_owned())),
        ];
        assert!(refusal(r).starts_with("indexes[1]: name \"a\" is used twice"));
        let mut r = raw();
        r.indexes = vec![index("p", RawIndexSpec::Path("spec..x".to_owned()))];
        assert!(refusal(r).starts_with("indexes[0] (\"p\"): path"));
        let mut r = raw();
        r.indexes = vec![RawIndex {
            resource: Gvk::new("", "v1", "Secret"),
            ..index("s", RawIndexSpec::OwnerUid)
        }];
        assert!(refusal(r).starts_with("indexes[0] (\"s\"): on v1/Secret"));
    }

    /// Issue 19: a type or namespace a plugin describes reaches discovery URLs and request
    /// paths; one that is not a valid name fails the load, and the message quotes at most
    /// 256 bytes of it.
    #[test]
    fn types_and_namespaces_that_are_not_names_are_refused() {
        let mut r = raw();
        r.subscriptions[0].resource = Gvk::new("", "v1/namespaces/kube-system/secrets", "Secret");
        let refused = refusal(r);
        assert!(
            refused.starts_with("subscriptions[0].resource-type: version \"v1/namespaces"),
            "{refused}"
        );
        let mut r = raw();
        r.subscriptions[0].namespace = Some("kube system".to_owned());
        assert!(refusal(r).starts_with("subscriptions[0].namespace: namespace \"kube system\""));
        let mut r = raw();
        r.reads = vec![Read::metadata(Gvk::new("evil.example.com/..", "v1", "Pod"))];
        assert!(refusal(r).starts_with("reads[0].resource-type: group "));
        let mut r = raw();
        r.writes[0].0.kind = "Pod/status".to_owned();
        assert!(refusal(r).starts_with("writes[0].resource-type: kind "));
        let mut r = raw();
        r.name = "x".repeat(48 << 20);
        let refused = refusal(r);
        assert!(refused.len() < 512, "{} bytes", refused.len());
        assert!(refused.contains("(50331648 bytes in all)"), "{refused}");
    }
}
