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

/// The toolchains in `dir`, else in the default data directory.
fn toolchains(dir: Option<PathBuf>) -> anyhow::Result<Toolchains> {
    let dir = dir.or_else(Toolchains::default_dir).ok_or_else(|| {
        anyhow!("no toolchains directory: set --toolchains (or XDG_DATA_HOME or HOME)")
    })?;
    Ok(Toolchains::new(dir))
}
