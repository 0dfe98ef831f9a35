//! Where the guest toolchains live, and checking and installing them per language.

use std::path::{Path, PathBuf};

use crate::{BuildError, CCompiler, Language, c, javascript, python, rust};

/// kubeplug's data directory: `$XDG_DATA_HOME/kubeplug`, else
/// `$HOME/.local/share/kubeplug`. It holds the toolchains and the SDKs.
pub fn data_dir() -> Option<PathBuf> {
    let data = std::env::var_os("XDG_DATA_HOME")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/share"))
        })?;
    Some(data.join("kubeplug"))
}

/// The directory holding the installed npm and PyPI tools (`js/`: `componentize-qjs`,
/// `python/`: a virtual environment with `componentize-py`, `c/`: one with `ziglang` when
/// C is installed without root), at the versions this crate pins. Rust's target, and
/// clang-19 when C is installed as root, are the system's.
#[derive(Debug, Clone)]
pub struct Toolchains {
    dir: PathBuf,
    /// The command that installs everything here, for "not installed" errors; `None`:
    /// `kubeplug toolchains install`.
    install_command: Option<String>,
}

impl Toolchains {
    /// The toolchains in `dir` (made absolute: the tools run in the projects' directories).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        Self {
            dir: std::path::absolute(&dir).unwrap_or(dir),
            install_command: None,
        }
    }

    /// Names `command` in errors about a missing tool, instead of `kubeplug toolchains
    /// install` (`cargo xtask install-toolchains` inside the repository).
    pub fn with_install_command(mut self, command: impl Into<String>) -> Self {
        self.install_command = Some(command.into());
        self
    }

    /// `DATA/toolchains` of [`data_dir`].
    pub fn default_dir() -> Option<PathBuf> {
        Some(data_dir()?.join("toolchains"))
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The command that installs `language`'s toolchain here.
    pub(crate) fn install_command(&self, language: Language) -> String {
        match &self.install_command {
            Some(command) => command.clone(),
            None => format!(
                "kubeplug toolchains install {} --dir {}",
                language.id(),
                self.dir.display()
            ),
        }
    }

    /// Fails with what is missing for `language` and the command that installs it.
    pub fn check(&self, language: Language) -> Result<(), BuildError> {
        match language {
            Language::Rust => rust::check(),
            Language::C => c::check(self),
            Language::JavaScript => javascript::check(self),
            Language::Python => python::check(self),
        }
    }

    /// Installs what [`check`](Self::check) wants for `language`, unless it is satisfied:
    /// `rustup target add`, `npm ci` or `pip install` of the pinned versions, and for C
    /// [`CCompiler::default_for_user`]. Checks again afterwards.
    pub fn install(&self, language: Language) -> Result<(), BuildError> {
        if self.check(language).is_ok() {
            return Ok(());
        }
        match language {
            Language::Rust => rust::install()?,
            Language::C => return self.install_c(CCompiler::default_for_user()),
            Language::JavaScript => javascript::install(self)?,
            Language::Python => python::install(self)?,
        }
        self.check(language)
    }

    /// Fails with what `compiler` lacks to build C plugins, and the command that installs it.
    pub fn check_c(&self, compiler: CCompiler) -> Result<(), BuildError> {
        c::check_compiler(self, compiler)
    }

    /// Installs `compiler` for C plugins unless it is ready: `apt-get install` of clang-19's
    /// packages (as root or through sudo), or `pip install` of the pinned `ziglang` here.
    /// Builds take zig when it is here, clang-19 otherwise.
    pub fn install_c(&self, compiler: CCompiler) -> Result<(), BuildError> {
        if self.check_c(compiler).is_ok() {
            return Ok(());
        }
        c::install(self, compiler)?;
        self.check_c(compiler)
    }
}
