//! Rust guests: crates declaring a `cdylib`, built by cargo for `wasm32-wasip2` (wit-bindgen's
//! macro; no cargo-component needed).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::BuildError;
use crate::process::run;

/// The Rust target guests are built for.
pub const WASM_TARGET: &str = "wasm32-wasip2";

/// The command that installs the target.
fn install_command() -> String {
    format!("rustup target add {WASM_TARGET}")
}

pub(crate) fn check() -> Result<(), BuildError> {
    let output = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .map_err(|source| BuildError::CannotStart {
            what: "finding the Rust sysroot".to_owned(),
            program: "rustc".to_owned(),
            source,
        })?;
    let sysroot = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let lib = Path::new(&sysroot).join("lib/rustlib").join(WASM_TARGET);
    if !lib.is_dir() {
        return Err(BuildError::NotInstalled {
            what: format!("the Rust target {WASM_TARGET}"),
            found: format!("no {}", lib.display()),
            install: install_command(),
        });
    }
    Ok(())
}

pub(crate) fn install() -> Result<(), BuildError> {
    run(
        Command::new("rustup").args(["target", "add", WASM_TARGET]),
        &install_command(),
    )
}

/// Builds the cdylib crates `packages` of the workspace or package at `manifest` in release
/// for [`WASM_TARGET`], with `target_dir` as cargo's target directory, and returns each
/// package's component as (package, file), in the order given. Cargo's diagnostics go to
/// stderr; which file each package produced comes from its JSON messages, not from a guess
/// at its name.
pub fn build_crates(
    manifest: &Path,
    packages: &[String],
    target_dir: &Path,
) -> Result<Vec<(String, PathBuf)>, BuildError> {
    check()?;
    let what = format!("cargo build of {packages:?} ({})", manifest.display());
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo
        .args(["build", "--release", "--target", WASM_TARGET])
        .args(["--message-format", "json-render-diagnostics"])
        .arg("--manifest-path")
        .arg(manifest)
        .arg("--target-dir")
        .arg(target_dir)
        // A host build that runs us may have set these for its own target; the guest build
        // must not inherit them.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    for package in packages {
        cargo.args(["--package", package]);
    }
    let output = cargo.output().map_err(|source| BuildError::CannotStart {
        what: what.clone(),
        program: "cargo".to_owned(),
        source,
    })?;
    if !output.status.success() {
        return Err(BuildError::ToolFailed {
            what,
            status: output.status,
        });
    }
    let artefacts = cdylibs(&String::from_utf8_lossy(&output.stdout));
    packages
        .iter()
        .map(|package| {
            let library = package.replace('-', "_");
            let file = artefacts
                .iter()
                .find(|(name, _)| *name == library)
                .map(|(_, file)| file.clone())
                .ok_or_else(|| {
                    BuildError::Output(format!(
                        "cargo built no cdylib for package {package} ({}); declare \
                         `[lib] crate-type = [\"cdylib\"]` in its Cargo.toml",
                        manifest.display()
                    ))
                })?;
            Ok((package.clone(), file))
        })
        .collect()
}

/// The (library name, `.wasm` file) of every cdylib in cargo's JSON messages.
fn cdylibs(messages: &str) -> Vec<(String, PathBuf)> {
    messages
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["reason"] == "compiler-artifact")
        .filter(|message| {
            message["target"]["kind"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|k| k == "cdylib"))
        })
        .filter_map(|message| {
            let name = message["target"]["name"].as_str()?.to_owned();
            let file = message["filenames"]
                .as_array()?
                .iter()
                .filter_map(|f| f.as_str())
                .find(|f| f.ends_with(".wasm"))?;
            Some((name, PathBuf::from(file)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdylibs_come_from_cargos_messages() {
        let messages = concat!(
            r#"{"reason":"compiler-artifact","target":{"kind":["lib"],"name":"kubeplug_sdk"},"filenames":["/t/libkubeplug_sdk.rlib"]}"#,
            "\n",
            r#"{"reason":"compiler-artifact","target":{"kind":["cdylib"],"name":"label_audit"},"filenames":["/t/wasm32-wasip2/release/label_audit.wasm"]}"#,
            "\n",
            r#"{"reason":"build-finished","success":true}"#,
            "\nnot json\n"
        );
        assert_eq!(
            cdylibs(messages),
            [(
                "label_audit".to_owned(),
                PathBuf::from("/t/wasm32-wasip2/release/label_audit.wasm")
            )]
        );
    }
}
