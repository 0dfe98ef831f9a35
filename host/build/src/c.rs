//! C guests: every `*.c` of the plugin's directory, compiled against wasi-libc (WASI
//! preview 1) by `zig cc` when PyPI's `ziglang` is installed under the toolchains directory
//! (what a user without root gets), else by Debian's clang-19, and turned into a component
//! in-process: `wit-parser` reads the
//! WIT, wit-bindgen's C generator writes the bindings and an object file carrying the
//! `plugin` world (linked into the module), and `wit-component` makes the component, adapting
//! preview 1 to preview 2 with the reactor adapter of the host's wasmtime release. No CLI
//! beyond the compiler. The C SDK (`sdk/c`: `kubeplug.h`, helpers and a settings reader) is
//! compiled into every plugin with the bindings.

use std::path::{Path, PathBuf};
use std::process::Command;

use wit_component::ComponentEncoder;
use wit_parser::{Resolve, WorldId};

use crate::process::{apt_install, create_dir, is_root, run, runs, write_atomically};
use crate::python::{install_venv, pinned_in};
use crate::{BuildError, BuildOptions, Language, Project, Toolchains};

/// The file every C plugin has; the others are compiled beside it.
pub(crate) const ENTRY: &str = "handler.c";

/// The compiler (Debian's versioned name).
const CLANG: &str = "clang-19";

/// Debian's packages for the compiler, the linker, the preview-1 libc and the wasm32 builtins.
const PACKAGES: [&str; 4] = [
    "clang-19",
    "lld-19",
    "wasi-libc",
    "libclang-rt-19-dev-wasm32",
];

/// Files each package installs, to name the one that is missing.
const INSTALLED_FILES: [(&str, &str); 3] = [
    ("lld-19", "/usr/lib/llvm-19/bin/wasm-ld"),
    ("wasi-libc", "/usr/lib/wasm32-wasi/libc.a"),
    (
        "libclang-rt-19-dev-wasm32",
        "/usr/lib/llvm-19/lib/clang/19/lib/wasi/libclang_rt.builtins-wasm32.a",
    ),
];

/// The PyPI package carrying `zig`.
const ZIG: &str = "ziglang";

const ZIG_REQUIREMENTS: &str = include_str!("../pins/zig-requirements.txt");

/// A C compiler for `wasm32-wasi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CCompiler {
    /// Debian's clang-19, lld-19 and wasi-libc, installed with apt: needs root.
    Clang,
    /// `zig cc` from PyPI's `ziglang`, which builds its own wasi-libc on first use: installed
    /// under the toolchains directory, without root.
    Zig,
}

impl CCompiler {
    /// The compiler `kubeplug toolchains install c` installs when none is named: clang-19 as
    /// root, zig otherwise.
    pub fn default_for_user() -> Self {
        if is_root() {
            CCompiler::Clang
        } else {
            CCompiler::Zig
        }
    }
}

/// `TOOLCHAINS/c`: the virtual environment holding the pinned `ziglang`.
fn zig_venv(toolchains: &Toolchains) -> PathBuf {
    toolchains.dir().join("c")
}

/// `python -m ziglang` of the toolchains' virtual environment, with zig's caches under
/// the toolchains directory (its libc, built once) and the build's work directory.
fn zig(toolchains: &Toolchains, work: &Path) -> Command {
    let venv = zig_venv(toolchains);
    let mut zig = Command::new(venv.join("bin").join("python"));
    zig.args(["-m", ZIG])
        .env("ZIG_GLOBAL_CACHE_DIR", venv.join("cache"))
        .env("ZIG_LOCAL_CACHE_DIR", work.join("zig-cache"));
    zig
}

/// Whether the pinned zig is installed in the toolchains directory.
fn check_zig(toolchains: &Toolchains) -> Result<(), BuildError> {
    let pinned = pinned_in(ZIG_REQUIREMENTS, ZIG);
    let output = zig(toolchains, toolchains.dir()).arg("version").output();
    let version = output
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    if version.as_deref() == Some(pinned) {
        return Ok(());
    }
    Err(BuildError::NotInstalled {
        what: format!("zig {pinned}"),
        found: format!(
            "{} in {}",
            version.as_deref().unwrap_or("none"),
            zig_venv(toolchains).display()
        ),
        install: format!(
            "{} --c-compiler zig",
            toolchains.install_command(Language::C)
        ),
    })
}

/// The world every plugin implements.
const WORLD: &str = "plugin";

/// The C SDK, written beside the bindings and compiled into every C plugin.
const SDK: [(&str, &str); 2] = [
    ("kubeplug.h", include_str!("../sdk/c/kubeplug.h")),
    ("kubeplug_sdk.c", include_str!("../sdk/c/kubeplug_sdk.c")),
];

/// The compiler a build uses: zig when it is installed in the toolchains directory (only a
/// deliberate install puts it there), else clang-19 when Debian's packages are complete.
fn compiler(toolchains: &Toolchains) -> Result<CCompiler, BuildError> {
    if check_zig(toolchains).is_ok() {
        return Ok(CCompiler::Zig);
    }
    check_clang(toolchains)?;
    Ok(CCompiler::Clang)
}

pub(crate) fn check(toolchains: &Toolchains) -> Result<(), BuildError> {
    compiler(toolchains).map(|_| ())
}

fn check_clang(toolchains: &Toolchains) -> Result<(), BuildError> {
    let install = format!(
        "apt-get install -y {}` as root, or `{}",
        PACKAGES.join(" "),
        toolchains.install_command(Language::C)
    );
    if !runs(CLANG) {
        return Err(BuildError::NotInstalled {
            what: CLANG.to_owned(),
            found: "not on PATH".to_owned(),
            install,
        });
    }
    for (package, file) in INSTALLED_FILES {
        if !Path::new(file).exists() {
            return Err(BuildError::NotInstalled {
                what: package.to_owned(),
                found: format!("no {file}"),
                install,
            });
        }
    }
    Ok(())
}

pub(crate) fn install(toolchains: &Toolchains, compiler: CCompiler) -> Result<(), BuildError> {
    match compiler {
        CCompiler::Clang => apt_install(&PACKAGES),
        CCompiler::Zig => install_venv(&zig_venv(toolchains), ZIG_REQUIREMENTS, ZIG),
    }
}

/// Whether `compiler` is ready to build.
pub(crate) fn check_compiler(
    toolchains: &Toolchains,
    compiler: CCompiler,
) -> Result<(), BuildError> {
    match compiler {
        CCompiler::Clang => check_clang(toolchains),
        CCompiler::Zig => check_zig(toolchains),
    }
}

/// The `plugin` world of the WIT package in `wit`, parsed.
pub(crate) fn world(wit: &Path) -> Result<(Resolve, WorldId), BuildError> {
    let what = || format!("the WIT package in {}", wit.display());
    let mut resolve = Resolve::new();
    let (package, _) = resolve
        .push_dir(wit)
        .map_err(BuildError::component(what()))?;
    let world = resolve
        .select_world(&[package], Some(WORLD))
        .map_err(BuildError::component(what()))?;
    Ok((resolve, world))
}

/// Writes wit-bindgen's C bindings of the world into `dir`: `plugin.h`, `plugin.c`, and
/// `plugin_component_type.o`, the world as a custom section for the linker to carry into the
/// module, where `wit-component` finds it; and the SDK, `kubeplug.h` and `kubeplug_sdk.c`.
fn write_bindings(resolve: &mut Resolve, world: WorldId, dir: &Path) -> Result<(), BuildError> {
    let mut files = wit_bindgen_core::Files::default();
    wit_bindgen_c::Opts::default()
        .build()
        .generate(resolve, world, &mut files)
        .map_err(BuildError::component(
            "generating the C bindings".to_owned(),
        ))?;
    create_dir(dir)?;
    let sdk = SDK.iter().map(|(name, text)| (*name, text.as_bytes()));
    for (name, contents) in files.iter().chain(sdk) {
        let path = dir.join(name);
        std::fs::write(&path, contents).map_err(BuildError::io("writing", &path))?;
    }
    Ok(())
}

/// The `*.c` files of a plugin's directory, sorted.
fn sources(dir: &Path) -> Result<Vec<PathBuf>, BuildError> {
    let mut sources = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(BuildError::io("reading", dir))? {
        let path = entry.map_err(BuildError::io("reading", dir))?.path();
        if path.extension().is_some_and(|e| e == "c") {
            sources.push(path);
        }
    }
    sources.sort();
    Ok(sources)
}

/// `core` (a preview-1 reactor module carrying its world) as a component; `what` names it
/// in an error, before the step that failed.
fn componentize(core: &[u8], what: &str) -> Result<Vec<u8>, BuildError> {
    let failed = |step: &str| BuildError::component(format!("{what}: {step}"));
    ComponentEncoder::default()
        .validate(true)
        .module(core)
        .map_err(failed("reading the core module"))?
        .adapter(
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )
        .map_err(failed("adding the WASI preview-1 reactor adapter"))?
        .encode()
        .map_err(failed("encoding the component"))
}

pub(crate) fn build(project: &Project, options: &BuildOptions) -> Result<PathBuf, BuildError> {
    let compiler = compiler(&options.toolchains)?;
    let Project { name, dir, .. } = project;
    let work = options.work.join("c").join(name);
    let bindings = work.join("bindings");
    let (mut resolve, world) = world(&options.wit)?;
    write_bindings(&mut resolve, world, &bindings)?;
    let core = work.join(format!("{name}.core.wasm"));
    let (mut cc, cc_name) = match compiler {
        CCompiler::Clang => (Command::new(CLANG), CLANG),
        CCompiler::Zig => {
            let mut zig = zig(&options.toolchains, &work);
            zig.arg("cc");
            (zig, "zig cc")
        }
    };
    cc.args([
        "--target=wasm32-wasi",
        "-mexec-model=reactor",
        "-Os",
        "-Wall",
        "-Wextra",
        "-Werror",
        // The generated bindings have parameters some plugins do not use.
        "-Wno-unused-parameter",
        "-Wl,--strip-debug",
        "-I",
    ])
    .arg(&bindings)
    .arg("-I")
    .arg(dir)
    .args(sources(dir)?)
    .arg(bindings.join(format!("{WORLD}.c")))
    .arg(bindings.join("kubeplug_sdk.c"))
    .arg(bindings.join(format!("{WORLD}_component_type.o")))
    .arg("-o")
    .arg(&core);
    run(
        &mut cc,
        &format!("{cc_name} on the C sources of {}", dir.display()),
    )?;
    let module = std::fs::read(&core).map_err(BuildError::io("reading", &core))?;
    let component = componentize(
        &module,
        &format!("making a component of C plugin {name} ({})", core.display()),
    )?;
    let out = work.join(format!("{name}.wasm"));
    // Read by the caller after the build's lock is released, maybe while the next build of
    // the plugin writes it again.
    write_atomically(&out, &component)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repository() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    /// Every import `plugin.h` declares is in the C section of the docs, with its signature
    /// as generated: a WIT change that alters one fails here until the docs follow.
    #[test]
    fn the_docs_list_every_import_with_its_signature() {
        let (mut resolve, world) = world(&repository().join("wit")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        write_bindings(&mut resolve, world, dir.path()).unwrap();
        let header = std::fs::read_to_string(dir.path().join("plugin.h")).unwrap();
        let docs = std::fs::read_to_string(repository().join("docs/plugins-in-other-languages.md"))
            .unwrap();
        let imports: Vec<&str> = header
            .lines()
            .filter_map(|line| line.strip_prefix("extern "))
            .filter_map(|signature| signature.strip_suffix(';'))
            .collect();
        assert!(imports.len() >= 14, "{imports:?}");
        for signature in imports {
            assert!(
                docs.contains(&format!("`{signature}`")),
                "docs/plugins-in-other-languages.md lacks `{signature}`"
            );
        }
    }
}
