//! Python guests: `handler.py`, a module defining `class Handler` (the WIT interface's
//! functions as methods), built by `componentize-py` (CPython compiled to Wasm, snapshotted
//! with Wizer) at the version `pins/requirements.txt` pins, installed into a virtual
//! environment (so it works on Debian's externally-managed Python too). The SDK
//! (`sdk/python/kubeplug.py`) is staged into a directory of its own, on the Python path after
//! the plugin's, so a handler imports it as `kubeplug`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::process::{apt_install, create_dir, run, up_to_date, write_atomically};
use crate::{BuildError, BuildOptions, Language, Project, Toolchains};

/// The module every Python plugin has; the other modules of its directory can be imported.
pub(crate) const ENTRY: &str = "handler.py";

/// The PyPI package that builds the components.
const TOOL: &str = "componentize-py";

/// The SDK, staged as the module `kubeplug`.
const SDK: &str = include_str!("../sdk/python/kubeplug.py");

/// The SDK's file name in its staging directory.
const SDK_FILE: &str = "kubeplug.py";

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
    pinned_in(REQUIREMENTS, TOOL)
}

/// The version `requirements` (the text of a requirements file under `pins/`) pins
/// `package` to.
pub(crate) fn pinned_in(requirements: &'static str, package: &str) -> &'static str {
    requirements
        .lines()
        .find_map(|line| line.trim().strip_prefix(package)?.strip_prefix("=="))
        .map(str::trim)
        .unwrap_or_else(|| panic!("a file under pins/ pins {package}"))
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
    install_venv(&venv(toolchains), REQUIREMENTS, TOOL)
}

/// Makes a virtual environment at `venv` and installs `requirements` (the text of a
/// requirements file) into it: the PyPI tools of every language that takes one.
pub(crate) fn install_venv(venv: &Path, requirements: &str, what: &str) -> Result<(), BuildError> {
    if !has_venv() {
        apt_install(&["python3", "python3-venv"])?;
    }
    run(
        Command::new("python3").args(["-m", "venv"]).arg(venv),
        &format!("python3 -m venv {}", venv.display()),
    )?;
    let file = venv.join("kubeplug-requirements.txt");
    std::fs::write(&file, requirements).map_err(BuildError::io("writing", &file))?;
    run(
        Command::new(venv.join("bin").join("pip"))
            .args(["install", "--disable-pip-version-check", "-r"])
            .arg(&file),
        &format!("pip install {what} into {}", venv.display()),
    )
}

pub(crate) fn build(project: &Project, options: &BuildOptions) -> Result<PathBuf, BuildError> {
    check(&options.toolchains)?;
    let Project { name, dir, .. } = project;
    let work = options.work.join("python");
    create_dir(&work)?;
    let out = work.join(format!("{name}.wasm"));
    // Written only when it changed, so that its time stamp says when it did; and whole, as
    // every Python plugin's build reads it, whichever holds its own plugin's lock.
    let sdk = work.join("sdk");
    let staged_sdk = sdk.join(SDK_FILE);
    if std::fs::read_to_string(&staged_sdk).ok().as_deref() != Some(SDK) {
        write_atomically(&staged_sdk, SDK.as_bytes())?;
    }
    // The tool itself stands for its version: reinstalling it makes it newer.
    let tool = tool(&options.toolchains);
    if up_to_date(&out, &[dir, &options.wit, &tool, &sdk])? {
        return Ok(out);
    }
    let mut componentize = Command::new(&tool);
    componentize
        .arg("--wit-path")
        .arg(&options.wit)
        .args(["--world", "plugin", "componentize", "handler"])
        // The plugin's own modules first: they are what its imports mean.
        .arg("--python-path")
        .arg(dir)
        .arg("--python-path")
        .arg(&sdk)
        .arg("--output")
        .arg(&out);
    run(
        &mut componentize,
        &format!("{TOOL} on {}", dir.join(ENTRY).display()),
    )?;
    Ok(out)
}
