//! Running the toolchains' commands, and the files around them.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use crate::BuildError;

/// Runs `command`, failing with `what` and its exit status when it does not succeed. All its
/// output goes to our stderr, where the user sees why it failed, and our stdout stays the
/// caller's.
pub(crate) fn run(command: &mut Command, what: &str) -> Result<(), BuildError> {
    let status = command
        .stdout(std::io::stderr())
        .status()
        .map_err(|source| BuildError::CannotStart {
            what: what.to_owned(),
            program: command.get_program().to_string_lossy().into_owned(),
            source,
        })?;
    if !status.success() {
        return Err(BuildError::ToolFailed {
            what: what.to_owned(),
            status,
        });
    }
    Ok(())
}

/// Whether `program --version` runs and succeeds.
pub(crate) fn runs(program: impl AsRef<OsStr>) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether this process runs as root.
pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `apt-get update` then `apt-get install -y PACKAGES`, through `sudo` when not root.
pub(crate) fn apt_install(packages: &[&str]) -> Result<(), BuildError> {
    let root = is_root();
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
        return Err(BuildError::NotInstalled {
            what: packages.join(", "),
            found: "installing Debian packages needs root, and there is no sudo".to_owned(),
            install: format!(
                "apt-get update && apt-get install -y {} (as root)",
                packages.join(" ")
            ),
        });
    }
    run(&mut apt(&["update"]), "apt-get update")?;
    let mut install = apt(&["install", "-y", "--no-install-recommends"]);
    install.args(packages);
    run(
        &mut install,
        &format!("apt-get install {}", packages.join(" ")),
    )
}

/// Creates `dir` and its parents.
pub(crate) fn create_dir(dir: &Path) -> Result<(), BuildError> {
    std::fs::create_dir_all(dir).map_err(BuildError::io("creating", dir))
}

/// Holds `path`, a lock file, exclusively until the returned file is dropped, waiting for
/// whoever holds it. A build's staging and work directories are the plugin's, whoever
/// builds it, so two builds of one plugin at once (the tests of one binary run in parallel,
/// as may two `kubeplug build`s) would remove and rewrite each other's files mid-compile.
/// An advisory `flock`: it holds between processes as between threads, and is released
/// when a build crashes.
pub(crate) fn lock(path: &Path) -> Result<std::fs::File, BuildError> {
    if let Some(dir) = path.parent() {
        create_dir(dir)?;
    }
    let file = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(BuildError::io("opening the lock file", path))?;
    file.lock().map_err(BuildError::io("locking", path))?;
    Ok(file)
}

/// Copies `from` to `to` unless `to` already has the same bytes, through
/// [`write_atomically`]: two builds publishing one plugin at once each rename a whole file
/// of their own, and a watched plugins directory never sees half of one.
pub(crate) fn copy_if_changed(from: &Path, to: &Path) -> Result<(), BuildError> {
    let bytes = std::fs::read(from).map_err(BuildError::io("reading", from))?;
    if std::fs::read(to).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    write_atomically(to, &bytes)
}

/// Writes `bytes` to `to` through a temporary file of a unique name renamed into place, so
/// that a reader of `to` sees the old file or the new one, never half of one.
pub(crate) fn write_atomically(to: &Path, bytes: &[u8]) -> Result<(), BuildError> {
    use std::io::Write as _;

    let dir = to.parent().filter(|dir| !dir.as_os_str().is_empty());
    let dir = dir.unwrap_or(Path::new("."));
    create_dir(dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".publishing-")
        .tempfile_in(dir)
        .map_err(BuildError::io("creating a temporary file in", dir))?;
    tmp.write_all(bytes)
        .map_err(BuildError::io("writing", tmp.path()))?;
    tmp.persist(to)
        .map(drop)
        .map_err(|e| BuildError::io("renaming into", to)(e.error))
}

/// Replaces `to` with a copy of the sources under `from` (not [generated
/// directories](is_generated_dir)).
pub(crate) fn copy_sources(from: &Path, to: &Path) -> Result<(), BuildError> {
    if to.exists() {
        std::fs::remove_dir_all(to).map_err(BuildError::io("removing", to))?;
    }
    create_dir(to)?;
    for entry in std::fs::read_dir(from).map_err(BuildError::io("reading", from))? {
        let path = entry.map_err(BuildError::io("reading", from))?.path();
        let Some(name) = path.file_name() else {
            continue;
        };
        if path.is_dir() {
            if !name.to_str().is_some_and(is_generated_dir) {
                copy_sources(&path, &to.join(name))?;
            }
        } else {
            std::fs::copy(&path, to.join(name)).map_err(BuildError::io("copying", &path))?;
        }
    }
    Ok(())
}

/// Names of directories that hold build output or installed dependencies, never sources.
pub(crate) fn is_generated_dir(name: &str) -> bool {
    matches!(name, "target" | "node_modules" | "__pycache__") || name.starts_with('.')
}

/// The newest modification time of `paths` and of every file below them (skipping
/// [generated directories](is_generated_dir)).
fn newest_input(paths: &[&Path]) -> Result<SystemTime, BuildError> {
    let mut newest = SystemTime::UNIX_EPOCH;
    let mut stack: Vec<PathBuf> = paths.iter().map(|p| p.to_path_buf()).collect();
    while let Some(path) = stack.pop() {
        let meta = std::fs::metadata(&path).map_err(BuildError::io("reading", &path))?;
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).map_err(BuildError::io("reading", &path))? {
                let child = entry.map_err(BuildError::io("reading", &path))?.path();
                let generated = child
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(is_generated_dir);
                if !generated {
                    stack.push(child);
                }
            }
        } else {
            newest = newest.max(meta.modified().map_err(BuildError::io("reading", &path))?);
        }
    }
    Ok(newest)
}

/// Whether `output` exists and is newer than every one of `inputs` (see [`newest_input`]).
pub(crate) fn up_to_date(output: &Path, inputs: &[&Path]) -> Result<bool, BuildError> {
    let Ok(built) = std::fs::metadata(output).and_then(|m| m.modified()) else {
        return Ok(false);
    };
    Ok(built > newest_input(inputs)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_is_up_to_date_until_an_input_changes() {
        let dir = tempfile::tempdir().unwrap();
        let sources = dir.path().join("audit");
        std::fs::create_dir_all(sources.join("node_modules")).unwrap();
        for file in ["handler.js", "lib.js", "node_modules/dep.js"] {
            std::fs::write(sources.join(file), "").unwrap();
        }
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
        set_modified(&sources.join("node_modules/dep.js"), 5_000);
        set_modified(&output, 2_000);
        assert!(
            up_to_date(&output, &[&sources]).unwrap(),
            "installed dependencies are not sources"
        );
        set_modified(&sources.join("lib.js"), 3_000);
        assert!(
            !up_to_date(&output, &[&sources]).unwrap(),
            "any file of the plugin counts, not only the entry"
        );
    }

    #[test]
    fn an_unchanged_component_is_not_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let (from, to) = (dir.path().join("built.wasm"), dir.path().join("out/a.wasm"));
        std::fs::write(&from, b"\0asm").unwrap();
        copy_if_changed(&from, &to).unwrap();
        let first = std::fs::metadata(&to).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        copy_if_changed(&from, &to).unwrap();
        assert_eq!(std::fs::metadata(&to).unwrap().modified().unwrap(), first);
        assert_eq!(std::fs::read(&to).unwrap(), b"\0asm");
    }

    /// Two builds of one test binary published the same plugin at once through one
    /// temporary name, and one of them failed "renaming into …: No such file" (seen in CI).
    /// Each publish now renames a file of its own: all succeed, and the file is whole.
    #[test]
    fn publishes_of_one_plugin_at_once_all_succeed() {
        let dir = tempfile::tempdir().unwrap();
        let to = dir.path().join("out/a.wasm");
        let sources: Vec<(PathBuf, Vec<u8>)> = (0..8u8)
            .map(|i| {
                let from = dir.path().join(format!("built-{i}.wasm"));
                let bytes = vec![i; 256 << 10];
                std::fs::write(&from, &bytes).unwrap();
                (from, bytes)
            })
            .collect();
        for _ in 0..20 {
            std::thread::scope(|scope| {
                for (from, _) in &sources {
                    let to = &to;
                    scope.spawn(move || copy_if_changed(from, to).unwrap());
                }
            });
            let published = std::fs::read(&to).unwrap();
            assert!(sources.iter().any(|(_, bytes)| *bytes == published));
        }
        let left: Vec<_> = std::fs::read_dir(dir.path().join("out")).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left behind");
    }
}
