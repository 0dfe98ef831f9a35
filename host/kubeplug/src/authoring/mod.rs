//! Commands for plugin authors, in their own repositories: `kubeplug new`, `kubeplug build`
//! and `kubeplug toolchains install`, on top of `kubeplug-build`, the build path
//! `cargo xtask build-plugins` takes too.

mod build;
mod new;
mod sdk;
mod toolchains;

pub(crate) use build::build;
pub(crate) use new::new;
pub(crate) use toolchains::install;

use std::path::PathBuf;

use anyhow::anyhow;
use kubeplug_build::Toolchains;

/// Writes `text` to `path` (and its directory) unless it holds it already, so that an
/// unchanged file keeps its mtime and nothing rebuilds for it.
fn write_if_changed(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    use anyhow::Context as _;
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// The toolchains in `dir`, else in the default data directory.
fn toolchains(dir: Option<PathBuf>) -> anyhow::Result<Toolchains> {
    let dir = dir.or_else(Toolchains::default_dir).ok_or_else(|| {
        anyhow!("no toolchains directory: set --toolchains (or XDG_DATA_HOME or HOME)")
    })?;
    Ok(Toolchains::new(dir))
}
