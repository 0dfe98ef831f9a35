//! Repository chores, as a library so that tests run exactly what `cargo xtask` runs.
//!
//! `build_plugins` is the one place that builds plugins from source. Each guest language is a
//! [`Toolchain`]; Rust is the first. A toolchain finds its plugins, checks that what it needs
//! is installed (saying which command installs it when not), builds them into its own target
//! directory and copies the components to `target/plugins/<name>.wasm`, or, for the test
//! guests under `plugins/tests/`, to `target/test-plugins/<name>.wasm`, so that a plugins
//! directory of examples never picks up a hostile test guest.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The Rust target guests are built for.
pub const WASM_TARGET: &str = "wasm32-wasip2";

/// Where things live, all computed from the repository root (never from `CARGO_TARGET_DIR`,
/// which belongs to the host build that may be running us).
#[derive(Debug, Clone)]
pub struct Layout {
    /// The repository root.
    pub root: PathBuf,
}

impl Layout {
    /// The layout of the repository this crate belongs to.
    pub fn from_manifest_dir() -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("xtask lives one level below the repository root")
            .to_path_buf();
        Self { root }
    }

    /// `plugins/`: the guest workspace.
    pub fn plugins_dir(&self) -> PathBuf {
        self.root.join("plugins")
    }

    /// `target/guests`: the guest build's own target directory (its own cargo lock).
    pub fn guest_target_dir(&self) -> PathBuf {
        self.root.join("target").join("guests")
    }

    /// `target/plugins`: the built example and user plugins, `<name>.wasm`.
    pub fn output_dir(&self) -> PathBuf {
        self.root.join("target").join("plugins")
    }

    /// `target/test-plugins`: the built test guests of `plugins/tests/`, `<name>.wasm`.
    pub fn test_output_dir(&self) -> PathBuf {
        self.root.join("target").join("test-plugins")
    }

    /// Where the plugin whose manifest is `manifest` is copied to.
    pub fn output_dir_for(&self, manifest: &Path) -> PathBuf {
        if manifest.starts_with(self.plugins_dir().join("tests")) {
            self.test_output_dir()
        } else {
            self.output_dir()
        }
    }
}

/// One guest language's build.
pub trait Toolchain {
    /// The language, for messages.
    fn language(&self) -> &'static str;

    /// The plugins this toolchain builds, by name.
    fn plugins(&self, layout: &Layout) -> Result<Vec<String>>;

    /// Fails with the command that installs what is missing.
    fn check_installed(&self) -> Result<()>;

    /// Builds `names` (all of [`plugins`](Self::plugins) when empty) and returns the
    /// components, copied to [`Layout::output_dir_for`] its manifest.
    fn build(&self, layout: &Layout, names: &[String]) -> Result<Vec<PathBuf>>;
}

/// Rust guests: the members of `plugins/Cargo.toml` that are `cdylib`s, built with cargo for
/// `wasm32-wasip2` (wit-bindgen's macro; no cargo-component needed).
#[derive(Debug, Default)]
pub struct Rust;

impl Rust {
    /// Every `Cargo.toml` under `plugins/` (skipping the SDK) that declares a cdylib.
    fn manifests(layout: &Layout) -> Result<Vec<(String, PathBuf)>> {
        let mut found = Vec::new();
        let mut stack = vec![layout.plugins_dir()];
        while let Some(dir) = stack.pop() {
            let entries = std::fs::read_dir(&dir)
                .with_context(|| format!("reading plugin directory {}", dir.display()))?;
            for entry in entries {
                let path = entry?.path();
                if path.is_dir() && path.file_name().is_some_and(|n| n != "target") {
                    stack.push(path);
                } else if path.file_name().is_some_and(|n| n == "Cargo.toml")
                    && dir != layout.plugins_dir()
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
        }
        found.sort();
        Ok(found)
    }
}

/// The `name = "..."` of a manifest's `[package]` table (enough TOML for our own manifests).
fn package_name(manifest: &str) -> Option<String> {
    let package = manifest.split("[package]").nth(1)?;
    package.lines().find_map(|line| {
        let value = line.trim().strip_prefix("name")?.trim().strip_prefix('=')?;
        Some(value.trim().trim_matches('"').to_owned())
    })
}

impl Toolchain for Rust {
    fn language(&self) -> &'static str {
        "Rust"
    }

    fn plugins(&self, layout: &Layout) -> Result<Vec<String>> {
        Ok(Self::manifests(layout)?
            .into_iter()
            .map(|(n, _)| n)
            .collect())
    }

    fn check_installed(&self) -> Result<()> {
        let output = Command::new("rustc")
            .args(["--print", "sysroot"])
            .output()
            .context("running `rustc --print sysroot`: is Rust installed?")?;
        let sysroot = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        let lib = Path::new(&sysroot).join("lib/rustlib").join(WASM_TARGET);
        if !lib.is_dir() {
            bail!(
                "the Rust target {WASM_TARGET} is not installed (no {}); install it with \
                 `rustup target add {WASM_TARGET}`",
                lib.display()
            );
        }
        Ok(())
    }

    fn build(&self, layout: &Layout, names: &[String]) -> Result<Vec<PathBuf>> {
        self.check_installed()?;
        let all = Self::manifests(layout)?;
        let selected: Vec<&String> = if names.is_empty() {
            all.iter().map(|(n, _)| n).collect()
        } else {
            names.iter().collect()
        };
        if selected.is_empty() {
            return Ok(Vec::new());
        }
        let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cargo
            .args([
                "build",
                "--release",
                "--target",
                WASM_TARGET,
                "--manifest-path",
            ])
            .arg(layout.plugins_dir().join("Cargo.toml"))
            .arg("--target-dir")
            .arg(layout.guest_target_dir())
            // The host build that runs us may have set these for its own target; the guest
            // build must not inherit them.
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("CARGO_BUILD_TARGET");
        for name in &selected {
            cargo.args(["--package", name]);
        }
        let status = cargo
            .status()
            .context("running cargo to build the Rust plugins")?;
        if !status.success() {
            bail!("building Rust plugins {selected:?} failed ({status}); see cargo's output above");
        }
        let built = layout.guest_target_dir().join(WASM_TARGET).join("release");
        selected
            .into_iter()
            .map(|name| {
                let manifest = all
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, manifest)| manifest.as_path())
                    .with_context(|| format!("no Rust plugin called {name}"))?;
                let out = layout.output_dir_for(manifest);
                std::fs::create_dir_all(&out)
                    .with_context(|| format!("creating {}", out.display()))?;
                let file = format!("{}.wasm", name.replace('-', "_"));
                let from = built.join(&file);
                let to = out.join(format!("{name}.wasm"));
                copy_if_changed(&from, &to)?;
                Ok(to)
            })
            .collect()
    }
}

/// Copies `from` to `to` unless `to` already has the same bytes (so its mtime, and anything
/// watching it, stays quiet). Writes to a temporary file and renames, so a reader never sees
/// a half-written component.
fn copy_if_changed(from: &Path, to: &Path) -> Result<()> {
    let bytes = std::fs::read(from)
        .with_context(|| format!("reading built component {}", from.display()))?;
    if std::fs::read(to).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    let tmp = to.with_extension("wasm.tmp");
    std::fs::write(&tmp, &bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, to).with_context(|| format!("renaming into {}", to.display()))?;
    Ok(())
}

/// Every toolchain, in build order. The polyglot work adds C, JavaScript and Python here.
pub fn toolchains() -> Vec<Box<dyn Toolchain>> {
    vec![Box::new(Rust)]
}

/// Builds the plugins called `names` (every plugin when empty) with whichever toolchain owns
/// each, and returns the paths of the built components.
pub fn build_plugins(layout: &Layout, names: &[String]) -> Result<Vec<PathBuf>> {
    let mut built = Vec::new();
    let mut unclaimed: Vec<&String> = names.iter().collect();
    for toolchain in toolchains() {
        let own = toolchain.plugins(layout)?;
        let mine: Vec<String> = names.iter().filter(|n| own.contains(n)).cloned().collect();
        unclaimed.retain(|n| !own.contains(n));
        if names.is_empty() || !mine.is_empty() {
            built.extend(
                toolchain
                    .build(layout, &mine)
                    .with_context(|| format!("building {} plugins", toolchain.language()))?,
            );
        }
    }
    if !unclaimed.is_empty() {
        bail!(
            "no plugin called {unclaimed:?} under {}",
            layout.plugins_dir().display()
        );
    }
    Ok(built)
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
    fn the_rust_toolchain_finds_the_test_guests() {
        let names = Rust.plugins(&Layout::from_manifest_dir()).unwrap();
        assert!(names.contains(&"noop".to_owned()), "{names:?}");
        assert!(
            !names.contains(&"kubeplug-sdk".to_owned()),
            "the SDK is a library"
        );
    }
}
