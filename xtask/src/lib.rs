//! Repository chores, as a library so that tests run exactly what `cargo xtask` runs.
//!
//! [`build_plugins`] builds the plugins under `plugins/` through `kubeplug-build`, the build
//! path `kubeplug build` takes too, and copies the components to `target/plugins/<name>.wasm`,
//! or, for the test guests under `plugins/tests/`, to `target/test-plugins/<name>.wasm`, so
//! that a plugins directory of examples never picks up a hostile test guest. A plugin's name
//! is its directory's (a Rust crate's: its package's), and must be the name its
//! `describe()` returns:
//!
//! | language | what makes a directory under `plugins/` a plugin |
//! |---|---|
//! | Rust | a `Cargo.toml` declaring a `cdylib`, a member of `plugins/Cargo.toml` |
//! | C | `handler.c` (every `*.c` of the directory is compiled) |
//! | JavaScript | `handler.js` (an ES module exporting `handler`) |
//! | Python | `handler.py` (a module defining `class Handler`) |
//!
//! [`install_toolchains`] (`cargo xtask install-toolchains`) installs what every language
//! needs into `target/toolchains/`, with the commands the "not installed" errors name, and
//! the TypeScript compiler the tests type-check the JavaScript SDK's declarations with.
//!
//! [`bench`] (`cargo xtask bench`) runs the benchmarks and checks their figures against the
//! project's targets.
//!
//! `cargo test -p xtask` checks rules `ARCHITECTURE.md` states: [`boundaries`] (which crates
//! may never be built into which) and [`lines`] (no source file over 1,000 lines).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use kubeplug_build::{BuildOptions, Language, Project, Toolchains};

pub mod bench;
pub mod boundaries;
pub mod lines;
mod rust;

pub use kubeplug_build::WASM_TARGET;

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

    /// `target/toolchains`: where `install-toolchains` puts the npm and PyPI guest tools.
    pub fn toolchains_dir(&self) -> PathBuf {
        self.root.join("target").join("toolchains")
    }

    /// `target/toolchains/typescript`: the TypeScript compiler of the tests.
    pub fn typescript_dir(&self) -> PathBuf {
        self.toolchains_dir().join("typescript")
    }

    /// The guest toolchains of this repository, whose errors name `cargo xtask`.
    pub fn toolchains(&self) -> Toolchains {
        Toolchains::new(self.toolchains_dir())
            .with_install_command("cargo xtask install-toolchains")
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

    /// Where the plugin whose sources are in `dir` is copied to.
    pub fn output_dir_for(&self, dir: &Path) -> PathBuf {
        if dir.starts_with(self.plugins_dir().join("tests")) {
            self.test_output_dir()
        } else {
            self.output_dir()
        }
    }
}

/// Every plugin under `plugins/`, sorted by name. Fails when two directories hold plugins
/// of the same name, since both would write `<name>.wasm`.
pub fn plugins(layout: &Layout) -> Result<Vec<Project>> {
    let mut all: Vec<Project> = Vec::new();
    for language in Language::ALL {
        let found = match language.entry_file() {
            None => rust::plugins(layout)?,
            Some(entry) => marked_dirs(layout, entry)?,
        };
        for (name, dir) in found {
            if let Some(other) = all.iter().find(|p| p.name == name) {
                bail!(
                    "two plugins are called {name:?} under {} ({} and {language}); rename one \
                     directory",
                    layout.plugins_dir().display(),
                    other.language
                );
            }
            all.push(Project {
                name,
                dir,
                language,
            });
        }
    }
    all.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(all)
}

/// Builds the plugins called `names` (every plugin when empty) and returns the paths of the
/// built components: the Rust ones in one cargo build of the guest workspace, the others
/// one by one.
pub fn build_plugins(layout: &Layout, names: &[String]) -> Result<Vec<PathBuf>> {
    let all = plugins(layout)?;
    let unknown: Vec<&String> = names
        .iter()
        .filter(|n| !all.iter().any(|p| p.name == **n))
        .collect();
    if !unknown.is_empty() {
        bail!(
            "no plugin called {unknown:?} under {}",
            layout.plugins_dir().display()
        );
    }
    let selected: Vec<&Project> = all
        .iter()
        .filter(|p| names.is_empty() || names.contains(&p.name))
        .collect();
    let options = BuildOptions {
        wit: layout.wit_dir(),
        toolchains: layout.toolchains(),
        work: layout.guest_target_dir(),
    };
    let mut built = Vec::new();
    let crates: Vec<String> = selected
        .iter()
        .filter(|p| p.language == Language::Rust)
        .map(|p| p.name.clone())
        .collect();
    if !crates.is_empty() {
        let manifest = layout.plugins_dir().join("Cargo.toml");
        for (name, component) in kubeplug_build::build_crates(&manifest, &crates, &options.work)? {
            let project = selected.iter().find(|p| p.name == name).expect("selected");
            built.push(publish(layout, project, &component)?);
        }
    }
    for project in selected.iter().filter(|p| p.language != Language::Rust) {
        let component = kubeplug_build::build(project, &options)
            .with_context(|| format!("building {} plugin {}", project.language, project.name))?;
        built.push(publish(layout, project, &component)?);
    }
    Ok(built)
}

/// Copies `project`'s component to its output directory as `<name>.wasm`.
fn publish(layout: &Layout, project: &Project, component: &Path) -> Result<PathBuf> {
    let to = layout
        .output_dir_for(&project.dir)
        .join(format!("{}.wasm", project.name));
    kubeplug_build::publish(component, &to)?;
    Ok(to)
}

/// Installs every language's toolchain (`cargo xtask install-toolchains`); see
/// [`Toolchains::install`].
pub fn install_toolchains(layout: &Layout) -> Result<()> {
    let toolchains = layout.toolchains();
    for language in Language::ALL {
        toolchains
            .install(language)
            .with_context(|| format!("installing the {language} toolchain"))?;
    }
    install_typescript(layout)
}

/// The pinned TypeScript of `xtask/pins/typescript`: a tool of this repository's tests, not
/// of plugin authors, so not among `kubeplug-build`'s toolchains.
fn install_typescript(layout: &Layout) -> Result<()> {
    let pins = layout.root.join("xtask/pins/typescript");
    let dir = layout.typescript_dir();
    let version = |file: &Path, pointer: &str| -> Option<String> {
        let json: serde_json::Value = serde_json::from_slice(&std::fs::read(file).ok()?).ok()?;
        Some(json.pointer(pointer)?.as_str()?.to_owned())
    };
    let pinned = version(
        &pins.join("package-lock.json"),
        "/packages/node_modules~1typescript/version",
    );
    let installed = version(
        &dir.join("node_modules/typescript/package.json"),
        "/version",
    );
    if pinned.is_some() && installed == pinned {
        return Ok(());
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for file in ["package.json", "package-lock.json"] {
        std::fs::copy(pins.join(file), dir.join(file))
            .with_context(|| format!("copying {file} into {}", dir.display()))?;
    }
    let status = std::process::Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(&dir)
        .status()
        .context("running npm ci for TypeScript")?;
    if !status.success() {
        bail!("npm ci in {} failed ({status})", dir.display());
    }
    Ok(())
}

/// Every file under `plugins/` but build output and installed dependencies, sorted.
fn source_files(layout: &Layout) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut stack = vec![layout.plugins_dir()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir)
            .with_context(|| format!("reading plugin directory {}", dir.display()))?;
        for item in entries {
            let path = item?.path();
            let generated = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                matches!(n, "target" | "node_modules" | "__pycache__") || n.starts_with('.')
            });
            if path.is_dir() {
                if !generated {
                    stack.push(path);
                }
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// The directories under `plugins/` holding a file called `entry`, as (name, directory),
/// sorted by name.
fn marked_dirs(layout: &Layout, entry: &str) -> Result<Vec<(String, PathBuf)>> {
    let mut found = Vec::new();
    for file in source_files(layout)? {
        if file.file_name().is_some_and(|n| n == entry) {
            let dir = file.parent().expect("a file is in a directory");
            let name = dir
                .file_name()
                .and_then(|n| n.to_str())
                .with_context(|| format!("{} has no UTF-8 directory name", file.display()))?;
            found.push((name.to_owned(), dir.to_path_buf()));
        }
    }
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

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

    /// The names of `layout`'s plugins of `language`.
    fn named(layout: &Layout, language: Language) -> Vec<String> {
        let all = plugins(layout).unwrap();
        let of_language = all.into_iter().filter(|p| p.language == language);
        of_language.map(|p| p.name).collect()
    }

    #[test]
    fn every_language_finds_its_examples() {
        let layout = Layout::from_manifest_dir();
        for (language, example) in [
            (Language::Rust, "label-audit"),
            (Language::C, "label-audit-c"),
            (Language::JavaScript, "label-audit-js"),
            (Language::JavaScript, "crashloop-alert"),
            (Language::Python, "label-audit-py"),
        ] {
            let names = named(&layout, language);
            assert!(names.contains(&example.to_owned()), "{language}: {names:?}");
        }
    }

    #[test]
    fn entry_files_name_plugins_by_directory_and_skip_installed_dependencies() {
        let (_dir, layout) = layout_with(&[
            "examples/audit/handler.js",
            "examples/audit/lib.js",
            "tests/probe/handler.js",
            "examples/audit/node_modules/dep/handler.js",
            "examples/other/handler.py",
        ]);
        assert_eq!(
            named(&layout, Language::JavaScript),
            ["audit", "probe"],
            "one plugin per entry file; node_modules is not searched"
        );
        assert_eq!(named(&layout, Language::Python), ["other"]);
        assert!(named(&layout, Language::C).is_empty());
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
    fn every_rust_plugin_is_a_member_of_the_guest_workspace() {
        // plugins/Cargo.toml lists its members one by one (a glob would take the other
        // languages' directories for crates); cargo builds no crate it does not list.
        let layout = Layout::from_manifest_dir();
        let manifest = std::fs::read_to_string(layout.plugins_dir().join("Cargo.toml")).unwrap();
        for (name, crate_manifest) in rust::manifests(&layout).unwrap() {
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
            ("examples/new-js", "handler.js"),
            ("tests/new-c", "handler.c"),
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

    /// Issue 21: the Rust SDK read its WIT from `../../wit`, so it built only inside this
    /// checkout. It carries a copy, which must be the contract itself, and packages alone.
    #[test]
    fn the_rust_sdk_carries_the_wit_and_packages_alone() {
        let layout = Layout::from_manifest_dir();
        let sdk = layout.plugins_dir().join("sdk-rust");
        let files = |dir: &Path| -> Vec<(String, Vec<u8>)> {
            let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .map(|p| {
                    let name = p.file_name().unwrap().to_string_lossy().into_owned();
                    (name, std::fs::read(&p).unwrap())
                })
                .collect();
            files.sort();
            files
        };
        assert!(
            files(&sdk.join("wit")) == files(&layout.wit_dir()),
            "plugins/sdk-rust/wit differs from wit/: copy wit/ into it"
        );
        let output = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["package", "--list", "--allow-dirty", "--offline"])
            .arg("--manifest-path")
            .arg(sdk.join("Cargo.toml"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stderr}");
        let listed = String::from_utf8(output.stdout).unwrap();
        for file in [
            "src/lib.rs",
            "wit/world.wit",
            "wit/types.wit",
            "wit/imports.wit",
        ] {
            assert!(
                listed.lines().any(|l| l == file),
                "{file} not in:\n{listed}"
            );
        }
        let source = std::fs::read_to_string(sdk.join("src/lib.rs")).unwrap();
        assert!(
            source.contains("path: \"wit\"") && !source.contains("../"),
            "the bindings read the crate's own wit/"
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
