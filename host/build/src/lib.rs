//! Builds kubeplug plugins from source, and installs what each guest language needs: the
//! one build path behind `kubeplug build`, `kubeplug toolchains install` and
//! `cargo xtask build-plugins`.
//!
//! A [`Project`] is a plugin's source directory, its [`Language`] and its name. [`build`]
//! runs that language's own toolchain and returns the component:
//!
//! | language | sources | built with |
//! |---|---|---|
//! | Rust | a crate declaring a `cdylib` | cargo, `wasm32-wasip2` (wit-bindgen's macro) |
//! | C | every `*.c` of the directory | clang-19 (or `zig cc`) against wasi-libc, then a component made in-process (wit-bindgen's C generator, `wit-component`, the preview-1 reactor adapter of the host's wasmtime) |
//! | JavaScript | `handler.js`, an ES module exporting `handler` | `componentize-qjs` (QuickJS) |
//! | Python | `handler.py`, a module defining `class Handler` | `componentize-py` (CPython) |
//!
//! The npm and PyPI tools are pinned by the files under `pins/`, which this crate carries,
//! and installed by [`Toolchains::install`] into a directory of the caller's choosing; the
//! Rust target comes from rustup and the C compiler from Debian's packages (as root) or PyPI's
//! `ziglang`. When something
//! is missing, the error names it and the command that installs it.

use std::path::{Path, PathBuf};
use std::process::ExitStatus;

mod c;
mod javascript;
mod process;
mod project;
mod python;
mod rust;
mod toolchains;

pub use c::CCompiler;
pub use project::ProjectError;
pub use rust::{WASM_TARGET, build_crates};
pub use toolchains::{Toolchains, data_dir};

/// The TypeScript declarations of a JavaScript plugin (file name, text), for its editor and
/// `tsc --checkJs`; `kubeplug new` writes them into a JavaScript project: `kubeplug.d.ts`,
/// the types of the SDK (`./kubeplug.js`, staged by [`build`]), and `kubeplug-wit.d.ts`,
/// the WIT's records and the host's imports as componentize-qjs binds them.
pub const JAVASCRIPT_TYPES: [(&str, &str); 2] = [
    ("kubeplug.d.ts", include_str!("../sdk/js/kubeplug.d.ts")),
    (
        "kubeplug-wit.d.ts",
        include_str!("../sdk/js/kubeplug-wit.d.ts"),
    ),
];

/// A guest language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Language {
    /// A crate built for `wasm32-wasip2`.
    Rust,
    /// C sources built with clang-19 or `zig cc`, and wasi-libc.
    C,
    /// An ES module built with `componentize-qjs`.
    JavaScript,
    /// A module built with `componentize-py`.
    Python,
}

impl Language {
    /// Every language, in the order builds and installs take them.
    pub const ALL: [Language; 4] = [
        Language::Rust,
        Language::C,
        Language::JavaScript,
        Language::Python,
    ];

    /// Its name on the command line: `rust`, `c`, `javascript`, `python`.
    pub fn id(self) -> &'static str {
        match self {
            Language::Rust => "rust",
            Language::C => "c",
            Language::JavaScript => "javascript",
            Language::Python => "python",
        }
    }

    /// The language called `id` (or a common short name: `js`, `py`).
    pub fn from_id(id: &str) -> Option<Self> {
        match id {
            "rust" => Some(Language::Rust),
            "c" => Some(Language::C),
            "javascript" | "js" => Some(Language::JavaScript),
            "python" | "py" => Some(Language::Python),
            _ => None,
        }
    }

    /// The file whose presence makes a directory a plugin of this language, for the
    /// languages whose sources have a fixed entry point.
    pub fn entry_file(self) -> Option<&'static str> {
        match self {
            Language::Rust => None,
            Language::C => Some(c::ENTRY),
            Language::JavaScript => Some(javascript::ENTRY),
            Language::Python => Some(python::ENTRY),
        }
    }
}

impl std::fmt::Display for Language {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Language::Rust => "Rust",
            Language::C => "C",
            Language::JavaScript => "JavaScript",
            Language::Python => "Python",
        })
    }
}

/// A plugin's sources: what [`build`] takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Project {
    /// The plugin's name: the name its `describe()` returns and the output's file stem.
    pub name: String,
    /// The directory holding its sources.
    pub dir: PathBuf,
    /// The language of its sources.
    pub language: Language,
}

/// Where a build reads the contract from and writes its intermediate files.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// The `kubeplug:plugin` WIT package the plugin is built against.
    pub wit: PathBuf,
    /// The installed npm and PyPI tools.
    pub toolchains: Toolchains,
    /// A directory of its own for intermediate files (bindings, core modules, components
    /// before they are copied out) and, for Rust, cargo's target directory.
    pub work: PathBuf,
}

/// Why a build or an install failed. Every message names the plugin or tool and the cause;
/// a tool's own output goes to the caller's stderr, where the user sees why.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// Something a language needs is not installed.
    #[error("{what} is not installed ({found}); install it with `{install}`")]
    NotInstalled {
        /// The tool or package.
        what: String,
        /// What was found instead.
        found: String,
        /// The command that installs it.
        install: String,
    },
    /// A tool could not be started.
    #[error("{what}: cannot start {program}: {source}")]
    CannotStart {
        /// What the tool was to do.
        what: String,
        /// The program.
        program: String,
        /// Why it could not start.
        #[source]
        source: std::io::Error,
    },
    /// A tool ran and failed.
    #[error("{what} failed ({status}); see its output above")]
    ToolFailed {
        /// What the tool was to do.
        what: String,
        /// How it exited.
        status: ExitStatus,
    },
    /// A file or directory could not be read or written.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done: `reading`, `writing`, `creating`...
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The WIT package, the bindings or the component could not be made.
    #[error("{what}")]
    Component {
        /// What was being made.
        what: String,
        /// The WIT tools' error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The build ran but did not produce what it should have.
    #[error("{0}")]
    Output(String),
}

impl BuildError {
    /// A [`BuildError::Component`] of `what`, from the WIT tools' error.
    fn component<E>(what: String) -> impl FnOnce(E) -> Self
    where
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        move |e| BuildError::Component {
            what,
            source: e.into(),
        }
    }

    fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_owned();
        move |source| BuildError::Io {
            action,
            path,
            source,
        }
    }
}

/// Builds `project` and returns the component: a file under `options.work`, which the
/// caller copies where it belongs. JavaScript and Python are rebuilt only when an input
/// (the sources, the WIT, the tool's pin) is newer than the last build: their tools do not
/// build reproducibly, and new bytes mean a new compile in every host that loads them.
pub fn build(project: &Project, options: &BuildOptions) -> Result<PathBuf, BuildError> {
    // The tools run in the project's directory: every path they get must hold from there.
    let absolute =
        |path: &Path| std::path::absolute(path).map_err(BuildError::io("resolving", path));
    let project = &Project {
        dir: absolute(&project.dir)?,
        ..project.clone()
    };
    let options = &BuildOptions {
        wit: absolute(&options.wit)?,
        toolchains: options.toolchains.clone(),
        work: absolute(&options.work)?,
    };
    // The plugin's staging and work directories are shared by whoever builds it.
    let _turn = process::lock(&options.work.join("locks").join(format!(
        "{}-{}.lock",
        project.language.id(),
        project.name
    )))?;
    match project.language {
        Language::Rust => {
            let manifest = project.dir.join("Cargo.toml");
            let built = build_crates(
                &manifest,
                std::slice::from_ref(&project.name),
                &options.work,
            )?;
            built
                .into_iter()
                .next()
                .map(|(_, path)| path)
                .ok_or_else(|| {
                    BuildError::Output(format!(
                        "cargo built no cdylib for package {} ({})",
                        project.name,
                        manifest.display()
                    ))
                })
        }
        Language::C => c::build(project, options),
        Language::JavaScript => javascript::build(project, options),
        Language::Python => python::build(project, options),
    }
}

/// Copies the component `built` to `to`, unless `to` already holds the same bytes (so that
/// its mtime, and a host watching it, stay quiet). Writes a temporary file and renames it,
/// so that a host watching `to` never reads half a component.
pub fn publish(built: &Path, to: &Path) -> Result<(), BuildError> {
    process::copy_if_changed(built, to)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests of one binary build the example plugins at once, and builds of one plugin
    /// shared its work directory: a JavaScript build lost the staged sources another had just
    /// removed ("copying …/handler.js: No such file"), and clang crashed on C bindings
    /// another build was rewriting (both seen in CI). Builds of one plugin now take turns:
    /// all of them succeed, with the same component.
    #[test]
    fn builds_of_one_plugin_at_once_all_succeed() {
        let repository = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for (name, language) in [
            ("label-audit-js", Language::JavaScript),
            ("label-audit-c", Language::C),
        ] {
            let project = Project {
                name: name.to_owned(),
                dir: repository.join("plugins/examples").join(name),
                language,
            };
            for round in 0..2 {
                // A new work directory each round: a JavaScript build done once is up to date.
                let scratch = tempfile::tempdir().unwrap();
                let options = BuildOptions {
                    wit: repository.join("wit"),
                    // Where `cargo xtask install-toolchains` installs them, as CI does.
                    toolchains: Toolchains::new(repository.join("target/toolchains")),
                    work: scratch.path().to_owned(),
                };
                let components: Vec<Vec<u8>> = std::thread::scope(|scope| {
                    let builds: Vec<_> = (0..4)
                        .map(|_| scope.spawn(|| build(&project, &options)))
                        .collect();
                    builds
                        .into_iter()
                        .map(|build| {
                            let built = build
                                .join()
                                .unwrap()
                                .unwrap_or_else(|e| panic!("{name}, round {round}: {e}"));
                            std::fs::read(built).unwrap()
                        })
                        .collect()
                });
                assert!(
                    components.windows(2).all(|pair| pair[0] == pair[1]),
                    "{name}, round {round}: the builds made different components"
                );
            }
        }
    }
}
