//! Rust guests: the members of `plugins/Cargo.toml` that are `cdylib`s.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::{Layout, Toolchain, copy_if_changed, run};

/// The Rust target guests are built for.
pub const WASM_TARGET: &str = "wasm32-wasip2";

/// Rust guests: the members of `plugins/Cargo.toml` that are `cdylib`s, built with cargo for
/// `wasm32-wasip2` (wit-bindgen's macro; no cargo-component needed).
#[derive(Debug, Default)]
pub struct Rust;

impl Rust {
    /// Every `Cargo.toml` under `plugins/` (skipping the SDK) that declares a cdylib.
    pub(crate) fn manifests(layout: &Layout) -> Result<Vec<(String, PathBuf)>> {
        let mut found = Vec::new();
        let mut stack = vec![layout.plugins_dir()];
        while let Some(dir) = stack.pop() {
            let entries = std::fs::read_dir(&dir)
                .with_context(|| format!("reading plugin directory {}", dir.display()))?;
            for entry in entries {
                let path = entry?.path();
                if path.is_dir()
                    && path
                        .file_name()
                        .is_some_and(|n| n != "target" && n != "node_modules")
                {
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

    fn check_installed(&self, _layout: &Layout) -> Result<()> {
        let output = Command::new("rustc")
            .args(["--print", "sysroot"])
            .output()
            .context("running `rustc --print sysroot`: is Rust installed?")?;
        let sysroot = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        let lib = Path::new(&sysroot).join("lib/rustlib").join(WASM_TARGET);
        if !lib.is_dir() {
            bail!(
                "the Rust target {WASM_TARGET} is not installed (no {}); install it with \
                 `rustup target add {WASM_TARGET}` (or `cargo xtask install-toolchains`)",
                lib.display()
            );
        }
        Ok(())
    }

    fn install(&self, layout: &Layout) -> Result<()> {
        if self.check_installed(layout).is_ok() {
            return Ok(());
        }
        run(
            Command::new("rustup")
                .args(["target", "add", WASM_TARGET])
                .current_dir(&layout.root),
            &format!("rustup target add {WASM_TARGET}"),
        )
    }

    fn build(&self, layout: &Layout, names: &[String]) -> Result<Vec<PathBuf>> {
        self.check_installed(layout)?;
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
        run(
            &mut cargo,
            &format!("building Rust plugins {selected:?} with cargo"),
        )?;
        let built = layout.guest_target_dir().join(WASM_TARGET).join("release");
        selected
            .into_iter()
            .map(|name| {
                let manifest = all
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, manifest)| manifest.as_path())
                    .with_context(|| format!("no Rust plugin called {name}"))?;
                let file = format!("{}.wasm", name.replace('-', "_"));
                let to = layout.output_dir_for(manifest).join(format!("{name}.wasm"));
                copy_if_changed(&built.join(&file), &to)?;
                Ok(to)
            })
            .collect()
    }
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
