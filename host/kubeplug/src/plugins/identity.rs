//! Who a plugin is, whichever source proposes its versions.

use std::fmt;
use std::path::{Path, PathBuf};

/// A plugin's identity: the key of the plugin table, of `/plugins` and of `/readyz`. A
/// source proposes versions of a plugin under its identity, and withdraws it; the plugin's
/// lifecycle decides what serves. The plugins directory is the one source today, each of
/// its files a plugin; the `ClusterPlugin` and namespaced `Plugin` resources will each add
/// a variant (`NAME`, `NAMESPACE/NAME`), and code that only a file has will stop compiling
/// where it must learn about them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum PluginId {
    /// A file of the plugins directory.
    File(PathBuf),
}

impl PluginId {
    /// The file it comes from.
    pub(crate) fn file(&self) -> &Path {
        match self {
            PluginId::File(path) => path,
        }
    }
}

impl fmt::Display for PluginId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PluginId::File(path) => path.display().fmt(f),
        }
    }
}
