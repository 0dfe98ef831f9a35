//! Why a plugin file did not load, by stage, and which failures are worth retrying.

use std::path::{Path, PathBuf};

use kubeplug_runtime::{Gvk, LoadError};

/// Why a plugin file did not become, or replace, a running plugin. Each message names the
/// file and the stage that failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LoadFailure {
    /// The directory refused the file before reading it.
    #[error("{path}: {cause}", path = path.display())]
    Rejected { path: PathBuf, cause: String },
    /// Its configuration section is invalid.
    #[error("{path}: settings: {cause}", path = path.display())]
    Settings { path: PathBuf, cause: String },
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
    /// Registering its handlers or starting its driver failed.
    #[error("{path}: start: {cause}", path = path.display())]
    Start { path: PathBuf, cause: String },
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
            | LoadFailure::NameMismatch { plugin, .. } => Some(plugin),
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
            | LoadFailure::NotPinned { path, .. }
            | LoadFailure::Start { path, .. } => path,
            LoadFailure::Load(error) => error.path(),
        }
    }
}
