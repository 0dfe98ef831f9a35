//! Why a plugin file did not load, by stage, and which failures are worth retrying.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kubeplug_informer::factory::FactoryError;
use kubeplug_informer::reflector::ReflectorError;
use kubeplug_informer::source::SourceError;
use kubeplug_runtime::{Gvk, LoadError};

use super::PluginId;
use super::delivery::StartError;

/// Why a plugin file did not become, or replace, a running plugin. Each message names the
/// file and the stage that failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LoadFailure {
    /// The directory refused the file before reading it.
    #[error("{path}: {cause}", path = path.display())]
    Rejected { path: PathBuf, cause: String },
    /// Its configuration section is invalid.
    #[error("{path}: settings", path = path.display())]
    Settings {
        path: PathBuf,
        #[source]
        source: crate::config::ParseError,
    },
    /// Compile, link, init, describe or validation failed.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// It subscribes to a type the cluster does not serve.
    #[error("{path}: resolve: plugin {plugin} subscribes to {resource}, which the cluster does not serve", path = path.display())]
    Unresolved {
        path: PathBuf,
        plugin: String,
        resource: Gvk,
    },
    /// It subscribes to a cluster-scoped type in a namespace.
    #[error("{path}: resolve: plugin {plugin} subscribes to {resource} in namespace {namespace}, but {resource} is cluster-scoped", path = path.display())]
    ClusterScoped {
        path: PathBuf,
        plugin: String,
        resource: Gvk,
        namespace: String,
    },
    /// It subscribes in another namespace than the host's.
    #[error("{path}: resolve: plugin {plugin} subscribes to {resource} in namespace {namespace}, but the host watches only namespace {host} (--namespace)", path = path.display())]
    OutsideNamespace {
        path: PathBuf,
        plugin: String,
        resource: Gvk,
        namespace: String,
        host: String,
    },
    /// The plugin describes itself by another name than its file's.
    #[error("{path}: name: {cause}", path = path.display())]
    NameMismatch {
        path: PathBuf,
        plugin: String,
        cause: String,
    },
    /// The configuration pins another content for this name.
    #[error("{path}: pin: its SHA-256 is {actual}, but [plugins.{name}] sha256 allows only {expected}", path = path.display())]
    NotPinned {
        path: PathBuf,
        name: String,
        expected: String,
        actual: String,
    },
    /// A subscription's selector is one the cluster refuses (a field the type does not
    /// select on): the plugin's mistake, so the same file is not tried again.
    #[error("{path}: subscribe: plugin {plugin}", path = path.display())]
    Selector {
        path: PathBuf,
        plugin: String,
        #[source]
        source: FactoryError,
    },
    /// Leasing its informers, registering its handlers or starting its driver failed.
    #[error("{path}: start", path = path.display())]
    Start {
        path: PathBuf,
        #[source]
        source: StartError,
    },
    /// Informers it reads did not sync within its sync deadline; it starts once they do.
    #[error(
        "{path}: sync: plugin {plugin} is loaded, but after {deadline:?} (sync_deadline_s) {} not synced: {}; it starts once {}",
        if informers.len() == 1 { "this informer has" } else { "these informers have" },
        informers.iter().map(|(summary, cause)| format!("{summary} ({cause})")).collect::<Vec<_>>().join(", "),
        if informers.len() == 1 { "it does" } else { "they do" },
        path = path.display()
    )]
    NotSynced {
        path: PathBuf,
        plugin: String,
        deadline: Duration,
        /// Each informer not synced: `informer v1/Secret: 403 Forbidden`, and the whole
        /// error behind it.
        informers: Vec<(String, String)>,
    },
}

impl LoadFailure {
    /// Whether the same file may load later, once the cluster changes: a type served later
    /// (a CustomResourceDefinition installed after the plugin), an informer that could not
    /// start.
    pub(super) fn is_retryable(&self) -> bool {
        matches!(
            self,
            LoadFailure::Unresolved { .. } | LoadFailure::Start { .. }
        )
    }

    /// The name the plugin described itself with, when it failed after describing itself.
    pub(super) fn plugin(&self) -> Option<&str> {
        match self {
            LoadFailure::Unresolved { plugin, .. }
            | LoadFailure::ClusterScoped { plugin, .. }
            | LoadFailure::OutsideNamespace { plugin, .. }
            | LoadFailure::NameMismatch { plugin, .. }
            | LoadFailure::Selector { plugin, .. }
            | LoadFailure::NotSynced { plugin, .. } => Some(plugin),
            LoadFailure::Rejected { .. }
            | LoadFailure::Settings { .. }
            | LoadFailure::NotPinned { .. }
            | LoadFailure::Load(_)
            | LoadFailure::Start { .. } => None,
        }
    }

    /// The file that failed.
    pub(super) fn path(&self) -> &Path {
        match self {
            LoadFailure::Rejected { path, .. }
            | LoadFailure::Settings { path, .. }
            | LoadFailure::Unresolved { path, .. }
            | LoadFailure::ClusterScoped { path, .. }
            | LoadFailure::OutsideNamespace { path, .. }
            | LoadFailure::NameMismatch { path, .. }
            | LoadFailure::Selector { path, .. }
            | LoadFailure::NotPinned { path, .. }
            | LoadFailure::Start { path, .. }
            | LoadFailure::NotSynced { path, .. } => path,
            LoadFailure::Load(error) => error.path(),
        }
    }

    /// The plugin that failed: today always the file's.
    pub(super) fn id(&self) -> PluginId {
        PluginId::File(self.path().to_owned())
    }

    /// The whole failure with its sources, `a: b: c`, as `/plugins` and the log show it.
    pub(super) fn message(&self) -> String {
        kubeplug_kube::config::error_chain(self)
    }

    /// The failure in the host's words only (the stage; for a sync, each informer's type and
    /// HTTP status), for `/readyz`, which answers anyone: none of the plugin's own text.
    pub(super) fn summary(&self) -> String {
        let stage = match self {
            LoadFailure::NotSynced { informers, .. } => {
                return informers
                    .iter()
                    .map(|(summary, _)| summary.as_str())
                    .collect::<Vec<_>>()
                    .join(", ");
            }
            LoadFailure::Rejected { .. } => "the directory refused its file",
            LoadFailure::Settings { .. } => "its configuration section is invalid",
            LoadFailure::Load(_) => "it did not load",
            LoadFailure::Unresolved { .. } => "it subscribes to a type the cluster does not serve",
            LoadFailure::ClusterScoped { .. } | LoadFailure::OutsideNamespace { .. } => {
                "it subscribes outside the namespaces it may watch"
            }
            LoadFailure::NameMismatch { .. } => "its file is named unlike the plugin",
            LoadFailure::Selector { .. } => "a subscription's selector is refused",
            LoadFailure::NotPinned { .. } => "its content is not the one pinned by sha256",
            LoadFailure::Start { .. } => "its handlers could not start",
        };
        format!("{stage} (see /plugins)")
    }
}

/// Why an informer has not synced, in a few host-written words: the HTTP status the server
/// answered (`403 Forbidden`), or the kind of failure.
pub(super) fn why_not_synced(error: Option<&ReflectorError>) -> String {
    let source = match error {
        None => return "no answer yet".to_owned(),
        Some(
            ReflectorError::ListFailed { source, .. } | ReflectorError::WatchFailed { source, .. },
        ) => source,
        Some(ReflectorError::WatchEnded { status, .. }) => {
            return status_words(status.code, &status.reason);
        }
        Some(_) => return "failing".to_owned(),
    };
    match source {
        SourceError::Status { status, .. } => status_words(status.code, &status.reason),
        SourceError::Transport { .. } => "cannot reach the API server".to_owned(),
        SourceError::Decode { .. } => "undecodable answers".to_owned(),
        _ => "failing".to_owned(),
    }
}

/// `403 Forbidden`: the code, and the server's machine-readable reason when it is a plain
/// word (it is the server's text, shown on an open endpoint).
fn status_words(code: u16, reason: &str) -> String {
    let plain = !reason.is_empty()
        && reason.len() <= 64
        && reason.bytes().all(|b| b.is_ascii_alphanumeric());
    if plain {
        format!("{code} {reason}")
    } else {
        code.to_string()
    }
}
