//! The SDKs the binary carries, written under its data directory for the projects
//! `kubeplug new` makes to refer to: no project ever points into a checkout of kubeplug.

use std::path::{Path, PathBuf};

use anyhow::anyhow;

/// The Rust SDK's sources (`plugins/sdk-rust`, whose `wit/` is the contract itself).
const RUST_SOURCES: [(&str, &str); 6] = [
    (
        "src/lib.rs",
        include_str!("../../../../plugins/sdk-rust/src/lib.rs"),
    ),
    (
        "README.md",
        include_str!("../../../../plugins/sdk-rust/README.md"),
    ),
    (
        "wit/types.wit",
        include_str!("../../../../plugins/sdk-rust/wit/types.wit"),
    ),
    (
        "wit/imports.wit",
        include_str!("../../../../plugins/sdk-rust/wit/imports.wit"),
    ),
    (
        "wit/world.wit",
        include_str!("../../../../plugins/sdk-rust/wit/world.wit"),
    ),
    (
        "wit/README.md",
        include_str!("../../../../plugins/sdk-rust/wit/README.md"),
    ),
];

/// The SDK's manifest in the guest workspace, for its version.
const RUST_MANIFEST: &str = include_str!("../../../../plugins/sdk-rust/Cargo.toml");

/// The guest workspace's manifest, for the versions of the SDK's dependencies.
const GUEST_WORKSPACE: &str = include_str!("../../../../plugins/Cargo.toml");

/// A standalone manifest for the SDK, with its dependencies' versions filled in.
const RUST_MANIFEST_TEMPLATE: &str = include_str!("templates/rust/sdk-Cargo.toml");

/// The Rust SDK's version.
pub(crate) fn rust_version() -> anyhow::Result<String> {
    let manifest: toml::Table = toml::from_str(RUST_MANIFEST)?;
    manifest["package"]["version"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("the SDK's manifest has no version"))
}

/// The version requirement the guest workspace gives `dependency`.
fn dependency_version(dependency: &str) -> anyhow::Result<String> {
    let workspace: toml::Table = toml::from_str(GUEST_WORKSPACE)?;
    let entry = &workspace["workspace"]["dependencies"][dependency];
    entry
        .as_str()
        .or_else(|| entry.get("version")?.as_str())
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("the guest workspace gives {dependency} no version"))
}

/// The standalone manifest of the Rust SDK.
fn rust_manifest() -> anyhow::Result<String> {
    Ok(RUST_MANIFEST_TEMPLATE
        .replace("__SDK_VERSION__", &rust_version()?)
        .replace("__SERDE_JSON__", &dependency_version("serde_json")?)
        .replace("__SERDE__", &dependency_version("serde")?)
        .replace("__WIT_BINDGEN__", &dependency_version("wit-bindgen")?))
}

/// Writes the Rust SDK under `data` (`DATA/sdk/rust/kubeplug-sdk-VERSION`), unless it is
/// there already with the same content, and returns its directory.
pub(crate) fn write_rust(data: &Path) -> anyhow::Result<PathBuf> {
    let dir = data
        .join("sdk")
        .join("rust")
        .join(format!("kubeplug-sdk-{}", rust_version()?));
    let manifest = rust_manifest()?;
    let files = RUST_SOURCES
        .iter()
        .map(|(name, text)| (*name, *text))
        .chain([("Cargo.toml", manifest.as_str())]);
    for (name, text) in files {
        super::write_if_changed(&dir.join(name), text)?;
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standalone_manifest_takes_the_workspaces_versions() {
        let manifest: toml::Table = toml::from_str(&rust_manifest().unwrap()).unwrap();
        let dependencies = &manifest["dependencies"];
        assert_eq!(dependencies["wit-bindgen"].as_str(), Some("0.61"));
        assert_eq!(dependencies["serde"]["version"].as_str(), Some("1"));
        assert_eq!(manifest["package"]["version"].as_str(), Some("0.2.0"));
    }
}
