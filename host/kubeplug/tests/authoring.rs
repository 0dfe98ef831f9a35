//! `kubeplug build` and `kubeplug toolchains`, as a plugin author runs them in a repository
//! of their own: the projects are copies of the examples in a scratch directory, with the
//! manifest of their language, and `kubeplug` runs with a scratch `HOME` whose data
//! directory holds the toolchains `cargo xtask install-toolchains` installed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A scratch `HOME`, its data directory and projects.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    /// A scratch directory whose data directory's toolchains are the repository's.
    fn with_toolchains() -> Self {
        let scratch = Self::empty();
        let toolchains = scratch.data().join("kubeplug/toolchains");
        std::fs::create_dir_all(toolchains.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(
            repository()
                .join("target/toolchains")
                .canonicalize()
                .unwrap(),
            &toolchains,
        )
        .unwrap();
        scratch
    }

    /// A scratch directory with nothing installed.
    fn empty() -> Self {
        let scratch = Self {
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir_all(scratch.dir.path().join("home")).unwrap();
        scratch
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// `kubeplug` with this `HOME` and data and cache directories.
    fn kubeplug(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_kubeplug"));
        command
            .env("HOME", self.dir.path().join("home"))
            .env("XDG_DATA_HOME", self.data())
            .env("XDG_CACHE_HOME", self.dir.path().join("cache"))
            .env_remove("KUBEPLUG_TOOLCHAINS")
            .env_remove("KUBEPLUG_LOG");
        command
    }

    /// A copy of the example `example`'s sources as a project with `manifest` (file name,
    /// text).
    fn project(&self, example: &str, manifest: (&str, &str)) -> PathBuf {
        let dir = self.dir.path().join("projects").join(example);
        std::fs::create_dir_all(&dir).unwrap();
        let sources = repository().join("plugins/examples").join(example);
        for entry in std::fs::read_dir(sources).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
            }
        }
        std::fs::write(dir.join(manifest.0), manifest.1).unwrap();
        dir
    }

    fn build(&self, dir: &Path) -> Output {
        self.kubeplug()
            .arg("build")
            .current_dir(dir)
            .output()
            .unwrap()
    }
}

/// Issue 21: a C, JavaScript and Python plugin built from a directory outside the checkout,
/// with nothing but its sources and the manifest of its language.
#[test]
fn build_makes_a_checked_component_in_each_language() {
    let scratch = Scratch::with_toolchains();
    for (example, manifest, language) in [
        (
            "label-audit-c",
            ("plugin.toml", "[plugin]\nname = \"label-audit-c\"\n"),
            "C",
        ),
        (
            "label-audit-js",
            (
                "package.json",
                r#"{"name": "label-audit-js", "private": true}"#,
            ),
            "JavaScript",
        ),
        (
            "label-audit-py",
            (
                "pyproject.toml",
                "[project]\nname = \"label-audit-py\"\nversion = \"0.1.0\"\n",
            ),
            "Python",
        ),
    ] {
        let dir = scratch.project(example, manifest);
        let output = scratch.build(&dir);
        let stdout = text(&output.stdout);
        assert!(
            output.status.success(),
            "{example}: {}",
            text(&output.stderr)
        );
        // Named as the command was given its directory: `.` by default.
        assert!(
            stdout.starts_with(&format!(
                "built ./{example}.wasm ({example} 0.1.0, {language} plugin, "
            )),
            "{stdout}"
        );
        assert!(dir.join(format!("{example}.wasm")).is_file());
        // Without a wit/ of its own, it built against the one the binary carries.
        let carried = dir.join("target/kubeplug/wit/world.wit");
        assert!(
            std::fs::read_to_string(carried)
                .unwrap()
                .starts_with("package kubeplug:plugin@")
        );
    }
}

#[test]
fn build_refuses_a_plugin_that_describes_itself_under_another_name() {
    let scratch = Scratch::with_toolchains();
    let dir = scratch.project(
        "label-audit-c",
        ("plugin.toml", "[plugin]\nname = \"audit\"\n"),
    );
    let output = scratch.build(&dir);
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains(
            "./audit.wasm: describe() says the plugin is called \"label-audit-c\", its manifest \"audit\""
        ),
        "{stderr}"
    );
}

#[test]
fn build_names_a_missing_toolchain_and_the_command_that_installs_it() {
    let scratch = Scratch::empty();
    let dir = scratch.project(
        "label-audit-js",
        ("package.json", r#"{"name": "label-audit-js"}"#),
    );
    let output = scratch.build(&dir);
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    let toolchains = scratch.data().join("kubeplug/toolchains");
    assert!(
        stderr.contains(&format!(
            "componentize-qjs 0.4.5 is not installed (none in {}); install it with \
             `kubeplug toolchains install javascript --dir {}`",
            toolchains.join("js").display(),
            toolchains.display()
        )),
        "{stderr}"
    );
}

#[test]
fn build_says_what_a_project_lacks() {
    let scratch = Scratch::with_toolchains();
    let empty = scratch.dir.path().join("projects/empty");
    std::fs::create_dir_all(&empty).unwrap();
    let output = scratch.build(&empty);
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("not a plugin project"), "{stderr}");

    let dir = scratch.project(
        "label-audit-js",
        ("package.json", r#"{"name": "Label_Audit"}"#),
    );
    let stderr = text(&scratch.build(&dir).stderr);
    assert!(
        stderr.contains("package.json: name: \"Label_Audit\" is not a DNS label"),
        "{stderr}"
    );
}

#[test]
fn toolchains_install_leaves_what_is_installed_alone() {
    let scratch = Scratch::with_toolchains();
    let output = scratch
        .kubeplug()
        .args(["toolchains", "install"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout),
        "rust: already installed\nc: already installed\njavascript: already installed\n\
         python: already installed\n"
    );
    let output = scratch
        .kubeplug()
        .args(["toolchains", "install", "cobol"])
        .output()
        .unwrap();
    assert!(
        text(&output.stderr).contains("unknown language \"cobol\""),
        "{}",
        text(&output.stderr)
    );
}
