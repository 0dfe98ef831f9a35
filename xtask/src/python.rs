//! Python guests: a directory with `handler.py`, a module defining `class Handler` (the WIT
//! interface's functions as methods), built by `componentize-py` (CPython compiled to Wasm,
//! snapshotted with Wizer) at the version pinned in `xtask/toolchains/requirements.txt`,
//! installed into a virtual environment under `target/` (so it works on Debian's
//! externally-managed Python too).

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::{Layout, Toolchain, apt_install, marked_dirs, publish, run, select, up_to_date};

/// The file that makes a directory under `plugins/` a Python plugin.
pub(crate) const MARKER: &str = "handler.py";

/// The PyPI package that builds the components.
const TOOL: &str = "componentize-py";

/// Python guests (see the module documentation).
#[derive(Debug, Default)]
pub struct Python;

/// `target/toolchains/python`: the virtual environment holding the pinned tool.
fn venv(layout: &Layout) -> PathBuf {
    layout.toolchains_dir().join("python")
}

fn tool(layout: &Layout) -> PathBuf {
    venv(layout).join("bin").join(TOOL)
}

/// The version `requirements.txt` pins the tool to.
fn pinned(layout: &Layout) -> Result<String> {
    let path = layout.pins_dir().join("requirements.txt");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .find_map(|line| line.trim().strip_prefix(TOOL)?.strip_prefix("=="))
        .map(|v| v.trim().to_owned())
        .with_context(|| format!("{} does not pin {TOOL}==VERSION", path.display()))
}

/// Whether `python3` can make a virtual environment with pip in it.
fn has_venv() -> bool {
    Command::new("python3")
        .args(["-c", "import venv, ensurepip"])
        .output()
        .is_ok_and(|o| o.status.success())
}

impl Toolchain for Python {
    fn language(&self) -> &'static str {
        "Python"
    }

    fn plugins(&self, layout: &Layout) -> Result<Vec<String>> {
        Ok(marked_dirs(layout, MARKER)?
            .into_iter()
            .map(|(n, _)| n)
            .collect())
    }

    fn check_installed(&self, layout: &Layout) -> Result<()> {
        let pinned = pinned(layout)?;
        let output = Command::new(tool(layout)).arg("--version").output();
        let version = output
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
        if version.as_deref() != Some(format!("{TOOL} {pinned}").as_str()) {
            bail!(
                "{TOOL} {pinned} is not installed in {} (found {}); install it with \
                 `cargo xtask install-toolchains` (`python3 -m venv {0}` and `pip install -r {}` \
                 in it)",
                venv(layout).display(),
                version.as_deref().unwrap_or("none"),
                layout.pins_dir().join("requirements.txt").display()
            );
        }
        Ok(())
    }

    fn install(&self, layout: &Layout) -> Result<()> {
        if self.check_installed(layout).is_ok() {
            return Ok(());
        }
        if !has_venv() {
            apt_install(&["python3", "python3-venv"])?;
        }
        let venv = venv(layout);
        run(
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
            &format!("python3 -m venv {}", venv.display()),
        )?;
        run(
            Command::new(venv.join("bin").join("pip"))
                .args(["install", "--disable-pip-version-check", "-r"])
                .arg(layout.pins_dir().join("requirements.txt")),
            &format!("pip install {TOOL} into {}", venv.display()),
        )
    }

    fn build(&self, layout: &Layout, names: &[String]) -> Result<Vec<PathBuf>> {
        let selected = select(self.language(), marked_dirs(layout, MARKER)?, names)?;
        if selected.is_empty() {
            return Ok(Vec::new());
        }
        self.check_installed(layout)?;
        let work = layout.guest_target_dir().join("python");
        std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
        let mut built = Vec::new();
        for (name, dir) in selected {
            let out = work.join(format!("{name}.wasm"));
            let pins = layout.pins_dir().join("requirements.txt");
            if up_to_date(&out, &[&dir, &layout.wit_dir(), &pins])? {
                built.push(publish(layout, &name, &dir, &out)?);
                continue;
            }
            let mut componentize = Command::new(tool(layout));
            componentize
                .arg("--wit-path")
                .arg(layout.wit_dir())
                .args(["--world", "plugin", "componentize", "handler"])
                .arg("--python-path")
                .arg(&dir)
                .arg("--output")
                .arg(&out);
            run(
                &mut componentize,
                &format!("building Python plugin {name} ({})", dir.display()),
            )?;
            built.push(publish(layout, &name, &dir, &out)?);
        }
        Ok(built)
    }
}
