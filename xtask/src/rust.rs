//! Rust guests under `plugins/`: the crates of the guest workspace that declare a `cdylib`.

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::{Layout, source_files};

/// Every crate under `plugins/` (not the SDK, a library) that declares a cdylib, as
/// (package name, manifest), sorted.
pub(crate) fn manifests(layout: &Layout) -> Result<Vec<(String, PathBuf)>> {
    let mut found = Vec::new();
    for path in source_files(layout)? {
        if path.file_name().is_some_and(|n| n == "Cargo.toml")
            && path.parent() != Some(layout.plugins_dir().as_path())
        {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            if text.contains("cdylib") {
                let name = package_name(&text)
                    .with_context(|| format!("no package name in {}", path.display()))?;
                found.push((name, path));
            }
        }
    }
    found.sort();
    Ok(found)
}

/// The Rust plugins as (name, directory).
pub(crate) fn plugins(layout: &Layout) -> Result<Vec<(String, PathBuf)>> {
    Ok(manifests(layout)?
        .into_iter()
        .map(|(name, manifest)| {
            let dir = manifest.parent().expect("a manifest is in a directory");
            (name, dir.to_path_buf())
        })
        .collect())
}

/// The `name = "..."` of a manifest's `[package]` table (enough TOML for our own manifests).
fn package_name(manifest: &str) -> Option<String> {
    let package = manifest.split("[package]").nth(1)?;
    package.lines().find_map(|line| {
        let value = line.trim().strip_prefix("name")?.trim().strip_prefix('=')?;
        Some(value.trim().trim_matches('"').to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_name_reads_the_package_table() {
        let manifest =
            "[package]\nname = \"label-reader\"\nversion = \"0.1.0\"\n[lib]\nname = \"x\"\n";
        assert_eq!(package_name(manifest).as_deref(), Some("label-reader"));
        assert_eq!(package_name("[workspace]\n"), None);
    }

    #[test]
    fn the_rust_plugins_include_the_test_guests_and_not_the_sdk() {
        let names: Vec<String> = plugins(&Layout::from_manifest_dir())
            .unwrap()
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert!(names.contains(&"noop".to_owned()), "{names:?}");
        assert!(
            !names.contains(&"kubeplug-sdk".to_owned()),
            "the SDK is a library"
        );
    }
}
