//! Why a description was refused: one variant per kind of refusal, each message naming the
//! field concerned.

use kubeplug_json::path::PathError;
use kubeplug_policy::NameError;
use kubeplug_policy::names::quoted;

use super::MAX_VERSION;
use crate::gvk::Gvk;

/// ` (KEY)` for a bound the configuration sets.
fn set_by(setting: Option<&'static str>) -> String {
    setting.map(|key| format!(" ({key})")).unwrap_or_default()
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
    /// A string is longer than [`MAX_TEXT`](super::MAX_TEXT).
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
