//! C guests: a directory with `handler.c`, compiled by Debian's clang-19 against its wasi-libc
//! (WASI preview 1) and turned into a component in-process: `wit-parser` reads `wit/`,
//! wit-bindgen's C generator writes the bindings and an object file carrying the `plugin`
//! world (linked into the module), and `wit-component` makes the component, adapting preview 1
//! to preview 2 with the reactor adapter of the host's wasmtime release. No CLI beyond the
//! compiler.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use wit_component::ComponentEncoder;
use wit_parser::{Resolve, WorldId};

use crate::{Layout, Toolchain, apt_install, marked_dirs, publish, run, runs, select};

/// The file that makes a directory under `plugins/` a C plugin.
pub(crate) const MARKER: &str = "handler.c";

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

/// C guests (see the module documentation).
#[derive(Debug, Default)]
pub struct C;

fn install_command() -> String {
    format!("apt-get install -y {}", PACKAGES.join(" "))
}

/// The `plugin` world of `wit/`, parsed.
fn world(layout: &Layout) -> Result<(Resolve, WorldId)> {
    let mut resolve = Resolve::new();
    let (package, _) = resolve
        .push_dir(layout.wit_dir())
        .with_context(|| format!("parsing the WIT package in {}", layout.wit_dir().display()))?;
    let world = resolve
        .select_world(&[package], Some(WORLD))
        .with_context(|| format!("no world {WORLD:?} in {}", layout.wit_dir().display()))?;
    Ok((resolve, world))
}

/// Writes wit-bindgen's C bindings of the world into `dir`: `plugin.h`, `plugin.c`, and
/// `plugin_component_type.o`, the world as a custom section for the linker to carry into the
/// module, where `wit-component` finds it.
fn write_bindings(resolve: &mut Resolve, world: WorldId, dir: &Path) -> Result<()> {
    let mut files = wit_bindgen_core::Files::default();
    wit_bindgen_c::Opts::default()
        .build()
        .generate(resolve, world, &mut files)
        .context("generating the C bindings")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (name, contents) in files.iter() {
        let path = dir.join(name);
        std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The `*.c` files of a plugin's directory, sorted.
fn sources(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut sources = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "c") {
            sources.push(path);
        }
    }
    sources.sort();
    Ok(sources)
}

/// `core` (a preview-1 reactor module carrying its world) as a component.
fn componentize(core: &[u8]) -> Result<Vec<u8>> {
    ComponentEncoder::default()
        .validate(true)
        .module(core)
        .context("reading the core module")?
        .adapter(
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )
        .context("adding the WASI preview-1 reactor adapter")?
        .encode()
        .context("encoding the component")
}

impl Toolchain for C {
    fn language(&self) -> &'static str {
        "C"
    }

    fn plugins(&self, layout: &Layout) -> Result<Vec<String>> {
        Ok(marked_dirs(layout, MARKER)?
            .into_iter()
            .map(|(n, _)| n)
            .collect())
    }

    fn check_installed(&self, _layout: &Layout) -> Result<()> {
        if !runs(CLANG) {
            bail!(
                "{CLANG} is not installed (not on PATH); install the C toolchain with `{}` \
                 (or `cargo xtask install-toolchains`)",
                install_command()
            );
        }
        for (package, file) in INSTALLED_FILES {
            if !Path::new(file).exists() {
                bail!(
                    "{package} is not installed (no {file}); install the C toolchain with \
                     `{}` (or `cargo xtask install-toolchains`)",
                    install_command()
                );
            }
        }
        Ok(())
    }

    fn install(&self, layout: &Layout) -> Result<()> {
        if self.check_installed(layout).is_ok() {
            return Ok(());
        }
        apt_install(&PACKAGES)
    }

    fn build(&self, layout: &Layout, names: &[String]) -> Result<Vec<PathBuf>> {
        let selected = select(self.language(), marked_dirs(layout, MARKER)?, names)?;
        if selected.is_empty() {
            return Ok(Vec::new());
        }
        self.check_installed(layout)?;
        let (mut resolve, world) = world(layout)?;
        // Every C plugin implements the same world: one set of bindings serves them all.
        let bindings = layout.guest_target_dir().join("c").join("bindings");
        write_bindings(&mut resolve, world, &bindings)?;
        let mut built = Vec::new();
        for (name, dir) in selected {
            let work = layout.guest_target_dir().join("c").join(&name);
            std::fs::create_dir_all(&work)
                .with_context(|| format!("creating {}", work.display()))?;
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
                .args(sources(&dir)?)
                .arg(bindings.join(format!("{WORLD}.c")))
                .arg(bindings.join(format!("{WORLD}_component_type.o")))
                .arg("-o")
                .arg(&core);
            run(
                &mut clang,
                &format!("compiling C plugin {name} ({})", dir.display()),
            )?;
            let module =
                std::fs::read(&core).with_context(|| format!("reading {}", core.display()))?;
            let component = componentize(&module).with_context(|| {
                format!("making a component of C plugin {name} ({})", core.display())
            })?;
            let out = work.join(format!("{name}.wasm"));
            std::fs::write(&out, component)
                .with_context(|| format!("writing {}", out.display()))?;
            built.push(publish(layout, &name, &dir, &out)?);
        }
        Ok(built)
    }
}
