//! Python guests: `handler.py`, a module defining `class Handler` (the WIT interface's
//! functions as methods), built by `componentize-py` (CPython compiled to Wasm, snapshotted
//! with Wizer) at the version `pins/requirements.txt` pins, installed into a virtual
//! environment (so it works on Debian's externally-managed Python too).

use std::path::PathBuf;
use std::process::Command;

use crate::process::{apt_install, create_dir, run, up_to_date};
use crate::{BuildError, BuildOptions, Language, Project, Toolchains};

/// The module every Python plugin has; the other modules of its directory can be imported.
pub(crate) const ENTRY: &str = "handler.py";

/// The PyPI package that builds the components.
const TOOL: &str = "componentize-py";

const REQUIREMENTS: &str = include_str!("../pins/requirements.txt");

/// `TOOLCHAINS/python`: the virtual environment holding the pinned tool.
fn venv(toolchains: &Toolchains) -> PathBuf {
    toolchains.dir().join("python")
}

fn tool(toolchains: &Toolchains) -> PathBuf {
    venv(toolchains).join("bin").join(TOOL)
}

/// The version `requirements.txt` pins the tool to.
fn pinned() -> &'static str {
    REQUIREMENTS
        .lines()
        .find_map(|line| line.trim().strip_prefix(TOOL)?.strip_prefix("=="))
        .map(str::trim)
        .expect("pins/requirements.txt pins the tool")
}

/// Whether `python3` can make a virtual environment with pip in it.
fn has_venv() -> bool {
    Command::new("python3")
        .args(["-c", "import venv, ensurepip"])
        .output()
        .is_ok_and(|o| o.status.success())
}

pub(crate) fn check(toolchains: &Toolchains) -> Result<(), BuildError> {
    let output = Command::new(tool(toolchains)).arg("--version").output();
    let version = output
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    if version.as_deref() != Some(format!("{TOOL} {}", pinned()).as_str()) {
        return Err(BuildError::NotInstalled {
            what: format!("{TOOL} {}", pinned()),
            found: format!(
                "{} in {}",
                version.as_deref().unwrap_or("none"),
                venv(toolchains).display()
            ),
            install: toolchains.install_command(Language::Python),
        });
    }
    Ok(())
}

pub(crate) fn install(toolchains: &Toolchains) -> Result<(), BuildError> {
    if !has_venv() {
        apt_install(&["python3", "python3-venv"])?;
    }
    let venv = venv(toolchains);
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        &format!("python3 -m venv {}", venv.display()),
    )?;
    let requirements = venv.join("kubeplug-requirements.txt");
    std::fs::write(&requirements, REQUIREMENTS)
        .map_err(BuildError::io("writing", &requirements))?;
    run(
        Command::new(venv.join("bin").join("pip"))
            .args(["install", "--disable-pip-version-check", "-r"])
            .arg(&requirements),
        &format!("pip install {TOOL} into {}", venv.display()),
    )
}

pub(crate) fn build(project: &Project, options: &BuildOptions) -> Result<PathBuf, BuildError> {
    check(&options.toolchains)?;
    let Project { name, dir, .. } = project;
    let work = options.work.join("python");
    create_dir(&work)?;
    let out = work.join(format!("{name}.wasm"));
    // The tool itself stands for its version: reinstalling it makes it newer.
    let tool = tool(&options.toolchains);
    if up_to_date(&out, &[dir, &options.wit, &tool])? {
        return Ok(out);
    }
    let mut componentize = Command::new(&tool);
    componentize
        .arg("--wit-path")
        .arg(&options.wit)
        .args(["--world", "plugin", "componentize", "handler"])
        .arg("--python-path")
        .arg(dir)
        .arg("--output")
        .arg(&out);
    run(
        &mut componentize,
        &format!("{TOOL} on {}", dir.join(ENTRY).display()),
    )?;
    Ok(out)
}
