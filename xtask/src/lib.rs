//! Repository chores, as a library so that tests run exactly what `cargo xtask` runs.
//!
//! `build_plugins` is the one place that builds plugins from source. Each guest language is a
//! [`Toolchain`]: [`Rust`], [`C`], [`JavaScript`] and [`Python`]. A toolchain finds its plugins,
//! checks that what it needs is installed (saying which command installs it when not), builds
//! them under `target/guests` and copies the components to `target/plugins/<name>.wasm`, or,
//! for the test guests under `plugins/tests/`, to `target/test-plugins/<name>.wasm`, so that a
//! plugins directory of examples never picks up a hostile test guest.
//!
//! How each toolchain recognises its plugins under `plugins/` (the directory's name is the
//! plugin's name, and must be the name its `describe()` returns):
//!
//! | language | marker in the plugin's directory | built with |
//! |---|---|---|
//! | Rust | `Cargo.toml` declaring a `cdylib` (name: the package's) | cargo, `wasm32-wasip2` |
//! | C | `handler.c` (every `*.c` of the directory is compiled) | clang-19, then `wit-component` in-process |
//! | JavaScript | `handler.js` (an ES module exporting `handler`) | `componentize-qjs` |
//! | Python | `handler.py` (a module defining `class Handler`) | `componentize-py` |
//!
//! `install_toolchains` (`cargo xtask install-toolchains`) installs what every toolchain
//! needs, with the same commands the "not installed" errors name: the Rust target with rustup,
//! the C compiler from Debian's packages, and `componentize-qjs` and `componentize-py` at the
//! versions pinned in `xtask/toolchains/` into `target/toolchains/`.
//!
//! [`bench`] (`cargo xtask bench`) runs the benchmarks and checks their figures against the
//! project's targets.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use anyhow::{Context, Result, bail};

pub mod bench;
pub mod boundaries;
mod c;
mod javascript;
mod python;
mod rust;

pub use c::C;
pub use javascript::JavaScript;
pub use python::Python;
pub use rust::{Rust, WASM_TARGET};

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

    /// `plugins/`: the guest sources (and the Rust guest workspace).
    pub fn plugins_dir(&self) -> PathBuf {
        self.root.join("plugins")
    }

    /// `wit/`: the plugin contract every guest is built against.
    pub fn wit_dir(&self) -> PathBuf {
        self.root.join("wit")
    }

    /// `xtask/toolchains/`: the pinned versions of the npm and PyPI guest tools.
    pub fn pins_dir(&self) -> PathBuf {
        self.root.join("xtask").join("toolchains")
    }

    /// `target/toolchains`: where `install-toolchains` puts the npm and PyPI guest tools.
    pub fn toolchains_dir(&self) -> PathBuf {
        self.root.join("target").join("toolchains")
    }

    /// `target/guests`: the guest builds' own target directory (its own cargo lock).
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

    /// Where the plugin whose manifest (or source directory) is `manifest` is copied to.
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
    fn check_installed(&self, layout: &Layout) -> Result<()>;

    /// Installs what [`check_installed`](Self::check_installed) wants, with the commands its
    /// errors name; does nothing when it is already satisfied.
    fn install(&self, layout: &Layout) -> Result<()>;

    /// Builds `names` (all of [`plugins`](Self::plugins) when empty) and returns the
    /// components, copied to [`Layout::output_dir_for`] its manifest.
    fn build(&self, layout: &Layout, names: &[String]) -> Result<Vec<PathBuf>>;
}

/// Every toolchain, in build order.
pub fn toolchains() -> Vec<Box<dyn Toolchain>> {
    vec![
        Box::new(Rust),
        Box::new(C),
        Box::new(JavaScript),
        Box::new(Python),
    ]
}

/// Builds the plugins called `names` (every plugin when empty) with whichever toolchain owns
/// each, and returns the paths of the built components. Fails when two toolchains claim the
/// same name, since both would write `<name>.wasm`.
pub fn build_plugins(layout: &Layout, names: &[String]) -> Result<Vec<PathBuf>> {
    let toolchains = toolchains();
    let mut owners: Vec<(String, &'static str)> = Vec::new();
    let mut owned = Vec::new();
    for toolchain in &toolchains {
        let own = toolchain.plugins(layout)?;
        for name in &own {
            if let Some((_, other)) = owners.iter().find(|(n, _)| n == name) {
                bail!(
                    "two plugins are called {name:?} under {} ({other} and {}); rename one \
                     directory",
                    layout.plugins_dir().display(),
                    toolchain.language()
                );
            }
            owners.push((name.clone(), toolchain.language()));
        }
        owned.push(own);
    }
    let unclaimed: Vec<&String> = names
        .iter()
        .filter(|n| !owners.iter().any(|(o, _)| o == *n))
        .collect();
    if !unclaimed.is_empty() {
        bail!(
            "no plugin called {unclaimed:?} under {}",
            layout.plugins_dir().display()
        );
    }
    let mut built = Vec::new();
    for (toolchain, own) in toolchains.iter().zip(owned) {
        let mine: Vec<String> = names.iter().filter(|n| own.contains(n)).cloned().collect();
        if (names.is_empty() && !own.is_empty()) || !mine.is_empty() {
            built.extend(
                toolchain
                    .build(layout, &mine)
                    .with_context(|| format!("building {} plugins", toolchain.language()))?,
            );
        }
    }
    Ok(built)
}

/// Installs every toolchain's tools (`cargo xtask install-toolchains`); see
/// [`Toolchain::install`].
pub fn install_toolchains(layout: &Layout) -> Result<()> {
    for toolchain in toolchains() {
        toolchain
            .install(layout)
            .with_context(|| format!("installing the {} toolchain", toolchain.language()))?;
        toolchain.check_installed(layout).with_context(|| {
            format!(
                "the {} toolchain is still missing after its install",
                toolchain.language()
            )
        })?;
    }
    Ok(())
}

/// The directories under `plugins/` holding a file called `marker`, as (name, directory),
/// sorted by name. Skips build output and installed dependencies.
fn marked_dirs(layout: &Layout, marker: &str) -> Result<Vec<(String, PathBuf)>> {
    let mut found = Vec::new();
    let mut stack = vec![layout.plugins_dir()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir)
            .with_context(|| format!("reading plugin directory {}", dir.display()))?;
        for entry in entries {
            let path = entry?.path();
            let Some(file_name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if path.is_dir() {
                if !matches!(file_name, "target" | "node_modules" | "__pycache__")
                    && !file_name.starts_with('.')
                {
                    stack.push(path);
                }
            } else if file_name == marker {
                let name = dir
                    .file_name()
                    .and_then(|n| n.to_str())
                    .with_context(|| format!("{} has no UTF-8 directory name", path.display()))?;
                found.push((name.to_owned(), dir.clone()));
            }
        }
    }
    found.sort();
    Ok(found)
}

/// The entries of `all` called `names` (all of them when `names` is empty).
fn select(
    language: &str,
    all: Vec<(String, PathBuf)>,
    names: &[String],
) -> Result<Vec<(String, PathBuf)>> {
    if names.is_empty() {
        return Ok(all);
    }
    names
        .iter()
        .map(|name| {
            all.iter()
                .find(|(n, _)| n == name)
                .cloned()
                .with_context(|| format!("no {language} plugin called {name}"))
        })
        .collect()
}

/// Runs `command`, failing with `what` and its exit status when it does not succeed (its own
/// output goes to our stderr and stdout, where the user sees why).
fn run(command: &mut Command, what: &str) -> Result<()> {
    let status = command
        .status()
        .with_context(|| format!("{what}: cannot start {:?}", command.get_program()))?;
    if !status.success() {
        bail!("{what} failed ({status}); see the output above");
    }
    Ok(())
}

/// Whether `program` can be started (`program --version` exits successfully).
fn runs(program: impl AsRef<std::ffi::OsStr>) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `apt-get update` then `apt-get install -y PACKAGES`, through `sudo` when we are not root.
fn apt_install(packages: &[&str]) -> Result<()> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let apt = |args: &[&str]| {
        let mut command = if root {
            Command::new("apt-get")
        } else {
            let mut sudo = Command::new("sudo");
            sudo.arg("apt-get");
            sudo
        };
        command.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        command
    };
    if !root && !runs("sudo") {
        bail!(
            "installing Debian packages needs root and there is no sudo: run as root \
             `apt-get update && apt-get install -y {}`",
            packages.join(" ")
        );
    }
    run(&mut apt(&["update"]), "apt-get update")?;
    let mut install = apt(&["install", "-y", "--no-install-recommends"]);
    install.args(packages);
    run(
        &mut install,
        &format!("apt-get install {}", packages.join(" ")),
    )
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
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let tmp = to.with_extension("wasm.tmp");
    std::fs::write(&tmp, &bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, to).with_context(|| format!("renaming into {}", to.display()))?;
    Ok(())
}

/// The newest modification time of `paths` and, for directories, of every file below them
/// (skipping installed dependencies and build output, as [`marked_dirs`] does).
fn newest_input(paths: &[&Path]) -> Result<SystemTime> {
    let mut newest = SystemTime::UNIX_EPOCH;
    let mut stack: Vec<PathBuf> = paths.iter().map(|p| p.to_path_buf()).collect();
    while let Some(path) = stack.pop() {
        let meta =
            std::fs::metadata(&path).with_context(|| format!("reading {}", path.display()))?;
        if meta.is_dir() {
            for entry in
                std::fs::read_dir(&path).with_context(|| format!("reading {}", path.display()))?
            {
                let child = entry?.path();
                let skip = child.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                    matches!(n, "target" | "node_modules" | "__pycache__") || n.starts_with('.')
                });
                if !skip {
                    stack.push(child);
                }
            }
        } else {
            newest = newest.max(meta.modified()?);
        }
    }
    Ok(newest)
}

/// Whether `output` exists and is newer than every one of `inputs` (see [`newest_input`]).
///
/// The JavaScript and Python tools do not build reproducibly (each run snapshots a fresh
/// heap), so rebuilding unchanged sources would hand the host new bytes every time: a new
/// compile (seconds to minutes) and a reload for nothing.
fn up_to_date(output: &Path, inputs: &[&Path]) -> Result<bool> {
    let Ok(built) = std::fs::metadata(output).and_then(|m| m.modified()) else {
        return Ok(false);
    };
    Ok(built > newest_input(inputs)?)
}

/// Copies the component `built` of the plugin whose sources are in `dir` to its output
/// directory as `<name>.wasm`, returning the destination.
fn publish(layout: &Layout, name: &str, dir: &Path, built: &Path) -> Result<PathBuf> {
    let to = layout.output_dir_for(dir).join(format!("{name}.wasm"));
    copy_if_changed(built, &to)?;
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repository root holding only `plugins/` with these files.
    fn layout_with(files: &[&str]) -> (tempfile::TempDir, Layout) {
        let dir = tempfile::tempdir().unwrap();
        for file in files {
            let path = dir.path().join("plugins").join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "").unwrap();
        }
        let layout = Layout {
            root: dir.path().to_path_buf(),
        };
        (dir, layout)
    }

    #[test]
    fn every_toolchain_finds_its_examples() {
        let layout = Layout::from_manifest_dir();
        for (toolchain, example) in toolchains().iter().zip([
            "label-audit",
            "label-audit-c",
            "label-audit-js",
            "label-audit-py",
        ]) {
            let names = toolchain.plugins(&layout).unwrap();
            assert!(
                names.contains(&example.to_owned()),
                "{}: {names:?}",
                toolchain.language()
            );
        }
        assert!(
            JavaScript
                .plugins(&layout)
                .unwrap()
                .contains(&"crashloop-alert".to_owned())
        );
    }

    #[test]
    fn markers_name_plugins_by_directory_and_skip_installed_dependencies() {
        let (_dir, layout) = layout_with(&[
            "examples/audit/handler.js",
            "examples/audit/lib.js",
            "tests/probe/handler.js",
            "examples/audit/node_modules/dep/handler.js",
            "examples/other/handler.py",
        ]);
        assert_eq!(
            JavaScript.plugins(&layout).unwrap(),
            ["audit", "probe"],
            "one plugin per marker; node_modules is not searched"
        );
        assert_eq!(Python.plugins(&layout).unwrap(), ["other"]);
        assert!(C.plugins(&layout).unwrap().is_empty());
    }

    #[test]
    fn test_guests_and_examples_go_to_separate_directories() {
        let layout = Layout::from_manifest_dir();
        let probe = layout.plugins_dir().join("tests").join("probe");
        let example = layout.plugins_dir().join("examples").join("audit");
        assert_eq!(layout.output_dir_for(&probe), layout.test_output_dir());
        assert_eq!(layout.output_dir_for(&example), layout.output_dir());
    }

    #[test]
    fn a_name_two_toolchains_claim_is_refused() {
        let (_dir, layout) = layout_with(&["examples/audit/handler.js", "tests/audit/handler.py"]);
        let error = build_plugins(&layout, &["audit".into()]).unwrap_err();
        let message = format!("{error:#}");
        assert!(
            message.contains("two plugins are called \"audit\"")
                && message.contains("JavaScript and Python"),
            "{message}"
        );
    }

    #[test]
    fn a_build_is_up_to_date_until_an_input_changes() {
        let (dir, _layout) = layout_with(&["examples/audit/handler.js", "examples/audit/lib.js"]);
        let sources = dir.path().join("plugins/examples/audit");
        let output = dir.path().join("audit.wasm");
        assert!(!up_to_date(&output, &[&sources]).unwrap(), "never built");
        let set_modified = |path: &Path, seconds: u64| {
            let time = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(seconds);
            std::fs::File::options()
                .write(true)
                .open(path)
                .unwrap()
                .set_modified(time)
                .unwrap();
        };
        std::fs::write(&output, "").unwrap();
        set_modified(&sources.join("handler.js"), 1_000);
        set_modified(&sources.join("lib.js"), 1_000);
        set_modified(&output, 2_000);
        assert!(up_to_date(&output, &[&sources]).unwrap());
        set_modified(&sources.join("lib.js"), 3_000);
        assert!(
            !up_to_date(&output, &[&sources]).unwrap(),
            "any file of the plugin counts, not only the marker"
        );
    }

    #[test]
    fn every_rust_plugin_is_a_member_of_the_guest_workspace() {
        // plugins/Cargo.toml lists its members one by one (a glob would take the other
        // languages' directories for crates); cargo builds no crate it does not list.
        let layout = Layout::from_manifest_dir();
        let manifest = std::fs::read_to_string(layout.plugins_dir().join("Cargo.toml")).unwrap();
        for (name, crate_manifest) in Rust::manifests(&layout).unwrap() {
            let dir = crate_manifest.parent().unwrap();
            let relative = dir.strip_prefix(layout.plugins_dir()).unwrap();
            let entry = format!("\"{}\"", relative.display());
            assert!(
                manifest.contains(&entry),
                "add {entry} to `members` in plugins/Cargo.toml (plugin {name})"
            );
        }
    }

    /// Issue 21: adding a plugin in another language under `plugins/` broke every Rust
    /// build until `plugins/Cargo.toml` excluded its directory.
    #[test]
    fn a_plugin_in_another_language_needs_no_edit_of_the_guest_workspace() {
        let layout = Layout::from_manifest_dir();
        let copy = tempfile::tempdir().unwrap();
        let plugins = copy.path().join("plugins");
        copy_sources(&layout.plugins_dir(), &plugins);
        for (dir, marker) in [
            ("examples/new-js", javascript::MARKER),
            ("tests/new-c", c::MARKER),
        ] {
            std::fs::create_dir_all(plugins.join(dir)).unwrap();
            std::fs::write(plugins.join(dir).join(marker), "").unwrap();
        }
        let output = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args([
                "metadata",
                "--no-deps",
                "--offline",
                "--format-version",
                "1",
            ])
            .arg("--manifest-path")
            .arg(plugins.join("Cargo.toml"))
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Copies the sources under `from` (not build output or installed dependencies).
    fn copy_sources(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap();
            if matches!(
                name.to_str(),
                Some("target" | "node_modules" | "__pycache__")
            ) {
                continue;
            }
            if path.is_dir() {
                copy_sources(&path, &to.join(name));
            } else {
                std::fs::copy(&path, to.join(name)).unwrap();
            }
        }
    }

    #[test]
    fn an_unknown_plugin_is_named() {
        let (_dir, layout) = layout_with(&["examples/audit/handler.js"]);
        let error = build_plugins(&layout, &["nope".into()]).unwrap_err();
        assert!(
            error.to_string().contains("no plugin called [\"nope\"]"),
            "{error}"
        );
    }
}
