//! C guests: every `*.c` of the plugin's directory, compiled by Debian's clang-19 against its
//! wasi-libc (WASI preview 1) and turned into a component in-process: `wit-parser` reads the
//! WIT, wit-bindgen's C generator writes the bindings and an object file carrying the
//! `plugin` world (linked into the module), and `wit-component` makes the component, adapting
//! preview 1 to preview 2 with the reactor adapter of the host's wasmtime release. No CLI
//! beyond the compiler. The C SDK (`sdk/c`: `kubeplug.h`, helpers and a settings reader) is
//! compiled into every plugin with the bindings.

use std::path::{Path, PathBuf};
use std::process::Command;

use wit_component::ComponentEncoder;
use wit_parser::{Resolve, WorldId};

use crate::process::{apt_install, create_dir, run, runs};
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

/// The world every plugin implements.
const WORLD: &str = "plugin";

/// The C SDK, written beside the bindings and compiled into every C plugin.
const SDK: [(&str, &str); 2] = [
    ("kubeplug.h", include_str!("../sdk/c/kubeplug.h")),
    ("kubeplug_sdk.c", include_str!("../sdk/c/kubeplug_sdk.c")),
];

pub(crate) fn check(toolchains: &Toolchains) -> Result<(), BuildError> {
    let install = format!(
        "apt-get install -y {}` (or `{}",
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

pub(crate) fn install() -> Result<(), BuildError> {
    apt_install(&PACKAGES)
}

/// The `plugin` world of the WIT package in `wit`, parsed.
fn world(wit: &Path) -> Result<(Resolve, WorldId), BuildError> {
    let what = || format!("the WIT package in {}", wit.display());
    let mut resolve = Resolve::new();
    let (package, _) = resolve.push_dir(wit).map_err(|e| BuildError::Component {
        what: what(),
        cause: format!("{e:#}"),
    })?;
    let world =
        resolve
            .select_world(&[package], Some(WORLD))
            .map_err(|e| BuildError::Component {
                what: what(),
                cause: format!("{e:#}"),
            })?;
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
        .map_err(|e| BuildError::Component {
            what: "generating the C bindings".to_owned(),
            cause: format!("{e:#}"),
        })?;
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

/// `core` (a preview-1 reactor module carrying its world) as a component.
fn componentize(core: &[u8]) -> Result<Vec<u8>, String> {
    ComponentEncoder::default()
        .validate(true)
        .module(core)
        .map_err(|e| format!("reading the core module: {e:#}"))?
        .adapter(
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )
        .map_err(|e| format!("adding the WASI preview-1 reactor adapter: {e:#}"))?
        .encode()
        .map_err(|e| format!("encoding the component: {e:#}"))
}

pub(crate) fn build(project: &Project, options: &BuildOptions) -> Result<PathBuf, BuildError> {
    check(&options.toolchains)?;
    let Project { name, dir, .. } = project;
    let work = options.work.join("c").join(name);
    let bindings = work.join("bindings");
    let (mut resolve, world) = world(&options.wit)?;
    write_bindings(&mut resolve, world, &bindings)?;
    let core = work.join(format!("{name}.core.wasm"));
    let mut clang = Command::new(CLANG);
    clang
        .args([
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
        &mut clang,
        &format!("{CLANG} on the C sources of {}", dir.display()),
    )?;
    let module = std::fs::read(&core).map_err(BuildError::io("reading", &core))?;
    let component = componentize(&module).map_err(|cause| BuildError::Component {
        what: format!("making a component of C plugin {name} ({})", core.display()),
        cause,
    })?;
    let out = work.join(format!("{name}.wasm"));
    std::fs::write(&out, component).map_err(BuildError::io("writing", &out))?;
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
