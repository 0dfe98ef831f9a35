//! `kubeplug build` and `kubeplug toolchains`, as a plugin author runs them in a repository
//! of their own: the projects are copies of the examples in a scratch directory, with the
//! manifest of their language, and `kubeplug` runs with a scratch `HOME` whose data
//! directory holds the toolchains `cargo xtask install-toolchains` installed.

// Shared by the binary's test targets; this one needs only the running host and polling.
#[allow(dead_code)]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::{Host, wait_until};

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

    /// `kubeplug` with this `HOME` and data and cache directories (and the real rustup and
    /// cargo homes, which a scratch `HOME` would hide from cargo).
    fn kubeplug(&self) -> Command {
        let home = PathBuf::from(std::env::var_os("HOME").expect("HOME is set"));
        let rustup = std::env::var_os("RUSTUP_HOME").map_or(home.join(".rustup"), PathBuf::from);
        let cargo = std::env::var_os("CARGO_HOME").map_or(home.join(".cargo"), PathBuf::from);
        let mut command = Command::new(env!("CARGO_BIN_EXE_kubeplug"));
        command
            .env("RUSTUP_HOME", rustup)
            .env("CARGO_HOME", cargo)
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
            "./audit.wasm: describe() says the plugin is called \"label-audit-c\", its manifest \"audit\"; it is not written"
        ),
        "{stderr}"
    );
    // Issue 44: a refused build leaves no plugin behind for a watched directory to load.
    assert!(!dir.join("audit.wasm").exists());
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

/// Issue 21: a user without root gets zig from PyPI for C (`--c-compiler zig` chooses it as
/// root), and a C project builds with it. Installed under `target/test-toolchains/zig` and
/// kept, as `target/toolchains` is: zig builds its wasi-libc there once.
#[test]
fn a_c_project_builds_with_zig_from_pypi() {
    let scratch = Scratch::empty();
    let toolchains = repository().join("target/test-toolchains/zig");
    let output = scratch
        .kubeplug()
        .args(["toolchains", "install", "c", "--c-compiler", "zig", "--dir"])
        .arg(&toolchains)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).starts_with("c: "),
        "{}",
        text(&output.stdout)
    );

    let output = new(&scratch, &["hello-zig", "--lang", "c"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let dir = scratch.dir.path().join("projects/hello-zig");
    let output = scratch
        .kubeplug()
        .arg("build")
        .arg("--toolchains")
        .arg(&toolchains)
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    // zig's cache holds the wasi-libc it built: zig compiled the plugin, not clang-19.
    let built = std::fs::read_dir(toolchains.join("c/cache/o"))
        .unwrap()
        .any(|entry| entry.unwrap().path().join("libc.a").is_file());
    assert!(built, "no libc.a in zig's cache");
    let output = scratch
        .kubeplug()
        .args(["test", "hello-zig.wasm", "--events", "events.yaml"])
        .args(["--config", "kubeplug.toml"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", text(&output.stderr));
    assert!(
        stdout.contains("events_total{change=\"deleted\"} 1 (counter)"),
        "{stdout}"
    );
}

/// `tsc -p DIR` with the TypeScript `cargo xtask install-toolchains` installed.
fn typecheck(dir: &Path) -> Output {
    let tsc = repository().join("target/toolchains/typescript/node_modules/typescript/bin/tsc");
    assert!(
        tsc.is_file(),
        "no {}: run `cargo xtask install-toolchains`",
        tsc.display()
    );
    Command::new("node")
        .arg(tsc)
        .arg("-p")
        .arg(dir)
        .output()
        .unwrap()
}

/// Issue 21: the JavaScript SDK's declarations type the templates and label-audit-js, and
/// `tsc` over them (the `typecheck` script of a new project) catches a wrong call.
#[test]
fn javascript_projects_type_check_against_the_sdk_declarations() {
    let scratch = Scratch::with_toolchains();
    for (name, mode) in [("typed-events", "events"), ("typed-sync", "reconcile")] {
        let output = new(&scratch, &[name, "--lang", "javascript", "--mode", mode]);
        assert!(output.status.success(), "{}", text(&output.stderr));
        let dir = scratch.dir.path().join("projects").join(name);
        let output = typecheck(&dir);
        assert!(output.status.success(), "{name}: {}", text(&output.stdout));
    }
    // label-audit-js, with the files a new project has besides its sources.
    let dir = scratch.project(
        "label-audit-js",
        ("package.json", r#"{"name": "label-audit-js"}"#),
    );
    let events = scratch.dir.path().join("projects/typed-events");
    for file in ["tsconfig.json", "kubeplug.d.ts", "kubeplug-wit.d.ts"] {
        std::fs::copy(events.join(file), dir.join(file)).unwrap();
    }
    let output = typecheck(&dir);
    assert!(output.status.success(), "{}", text(&output.stdout));
    // A misspelt subscription field and a wrong argument to a host import are caught.
    let handler = events.join("handler.js");
    let source = std::fs::read_to_string(&handler).unwrap();
    let broken = source.replace(
        "subscription(CONFIG_MAPS)",
        "subscription(CONFIG_MAPS, { wantsObjectJSON: true })",
    );
    assert_ne!(
        broken, source,
        "the template subscribes as the test expects"
    );
    std::fs::write(&handler, broken).unwrap();
    let stdout = text(&typecheck(&events).stdout);
    assert!(
        stdout.contains("'wantsObjectJSON' does not exist"),
        "{stdout}"
    );
    let dir = scratch.dir.path().join("projects/typed-sync");
    let handler = dir.join("handler.js");
    let source = std::fs::read_to_string(&handler).unwrap();
    let broken = source.replace("get(resourceType, key)", "get(key, resourceType)");
    assert_ne!(
        broken, source,
        "the template reads the cache as the test expects"
    );
    std::fs::write(&handler, broken).unwrap();
    let stdout = text(&typecheck(&dir).stdout);
    assert!(stdout.contains("handler.js"), "{stdout}");
    assert!(stdout.contains("error TS2345"), "{stdout}");
}

/// `kubeplug new` in the scratch directory's `projects/`.
fn new(scratch: &Scratch, args: &[&str]) -> Output {
    let projects = scratch.dir.path().join("projects");
    std::fs::create_dir_all(&projects).unwrap();
    scratch
        .kubeplug()
        .arg("new")
        .args(args)
        .current_dir(projects)
        .output()
        .unwrap()
}

/// The files under `dir` that name `needle`, build output aside (symlinks not followed).
fn naming(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.symlink_metadata().unwrap().is_dir() {
            if path.file_name().is_some_and(|n| n != "target") {
                found.extend(naming(&path, needle));
            }
        } else if std::fs::read(&path)
            .is_ok_and(|bytes| String::from_utf8_lossy(&bytes).contains(needle))
        {
            found.push(path);
        }
    }
    found
}

/// Issue 21: each language and mode `kubeplug new` has a template for, from a scratch
/// directory outside the checkout: new, build, check with its own configuration section,
/// and test on its sample events. Nothing written names the checkout.
#[test]
fn new_projects_build_check_and_replay_their_sample_events() {
    let scratch = Scratch::with_toolchains();
    for (name, lang, mode, replayed) in [
        (
            "hello-rs",
            "rust",
            "events",
            "events_total{change=\"deleted\"} 1 (counter)",
        ),
        (
            "sync-rs",
            "rust",
            "reconcile",
            "reconcile v1/ConfigMap default/web-config: requeue-after 60000ms",
        ),
        (
            "hello-js",
            "javascript",
            "events",
            "events_total{change=\"updated\"} 1 (counter)",
        ),
        (
            "sync-js",
            "javascript",
            "reconcile",
            "reconcile v1/ConfigMap default/web-config: done",
        ),
        (
            "hello-c",
            "c",
            "events",
            "events_total{change=\"deleted\"} 1 (counter)",
        ),
        (
            "sync-c",
            "c",
            "reconcile",
            "log info: gone: nothing to do key=\"default/web-config\"",
        ),
        (
            "hello-py",
            "python",
            "events",
            "events_total{change=\"added\"} 1 (counter)",
        ),
        (
            "sync-py",
            "python",
            "reconcile",
            "log info: reconciling key=\"default/web-config\" resourceVersion=",
        ),
    ] {
        let output = new(&scratch, &[name, "--lang", lang, "--mode", mode]);
        assert!(output.status.success(), "{name}: {}", text(&output.stderr));
        let dir = scratch.dir.path().join("projects").join(name);
        assert!(text(&output.stdout).starts_with(&format!("created {name} ({name}: ")));

        let output = scratch.build(&dir);
        assert!(output.status.success(), "{name}: {}", text(&output.stderr));
        let wasm = format!("{name}.wasm");
        let output = scratch
            .kubeplug()
            .args(["check", &wasm, "--config", "kubeplug.toml"])
            .current_dir(&dir)
            .output()
            .unwrap();
        let stdout = text(&output.stdout);
        assert!(output.status.success(), "{name}: {}", text(&output.stderr));
        assert!(stdout.contains("read v1/ConfigMap: granted"), "{stdout}");
        let output = scratch
            .kubeplug()
            .args([
                "test",
                &wasm,
                "--events",
                "events.yaml",
                "--config",
                "kubeplug.toml",
            ])
            .current_dir(&dir)
            .output()
            .unwrap();
        let stdout = text(&output.stdout);
        assert!(
            output.status.success(),
            "{name}: {stdout}{}",
            text(&output.stderr)
        );
        assert!(stdout.contains(replayed), "{name}: {stdout}");
    }
    // The JavaScript and Python SDKs' settings readers refuse what is not an object.
    for project in ["hello-js", "hello-py"] {
        let output = scratch
            .kubeplug()
            .args([
                "test",
                &format!("{project}.wasm"),
                "--events",
                "events.yaml",
            ])
            .args(["--settings", "[1]", "--config", "kubeplug.toml"])
            .current_dir(scratch.dir.path().join("projects").join(project))
            .output()
            .unwrap();
        assert!(
            text(&output.stderr).contains("invalid settings: expected an object"),
            "{project}: {}",
            text(&output.stderr)
        );
    }
    // The SDK a Rust project refers to is written again when missing (another machine, a
    // data directory wiped).
    std::fs::remove_dir_all(scratch.data().join("kubeplug/sdk")).unwrap();
    let output = scratch.build(&scratch.dir.path().join("projects/hello-rs"));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let checkout = repository().canonicalize().unwrap();
    let checkout = checkout.to_str().unwrap();
    // What `new` wrote: the projects and the SDK (the toolchains are the repository's here).
    for written in ["projects", "data/kubeplug/sdk"] {
        assert_eq!(
            naming(&scratch.dir.path().join(written), checkout),
            Vec::<PathBuf>::new(),
            "files naming the checkout"
        );
    }
}

#[test]
fn new_refuses_a_bad_name_or_a_directory_in_use_before_writing_anything() {
    let scratch = Scratch::empty();
    let output = new(&scratch, &["Bad_Name", "--lang", "rust"]);
    assert!(
        text(&output.stderr).contains("plugin name: \"Bad_Name\" is not a DNS label"),
        "{}",
        text(&output.stderr)
    );
    assert!(!scratch.dir.path().join("projects/Bad_Name").exists());

    let used = scratch.dir.path().join("projects/used");
    std::fs::create_dir_all(&used).unwrap();
    std::fs::write(used.join("notes.txt"), "mine").unwrap();
    let output = new(&scratch, &["used", "--lang", "javascript"]);
    assert!(
        text(&output.stderr).contains("used exists and is not empty"),
        "{}",
        text(&output.stderr)
    );
    assert_eq!(std::fs::read_dir(&used).unwrap().count(), 1);
    let output = new(&scratch, &["used", "--lang", "javascript", "--force"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(
        std::fs::read_to_string(used.join("notes.txt")).unwrap(),
        "mine"
    );
}

/// Issue 21: the loop of a plugin author with a host running on a laptop, in every
/// language: new projects built and dropped into one `kubeplug run --local`, their effect
/// seen, each edited, rebuilt and dropped in again, and every new version seen at once
/// (`--replay-on-swap`) and on a change.
#[test]
fn new_plugins_run_and_reload_in_a_local_host() {
    let scratch = Scratch::with_toolchains();
    let projects = [
        ("live-rs", "rust", "src/lib.rs"),
        ("live-c", "c", "handler.c"),
        ("live-js", "javascript", "handler.js"),
        ("live-py", "python", "handler.py"),
    ];
    let plugins = scratch.dir.path().join("plugins");
    let cluster = scratch.dir.path().join("cluster");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::create_dir_all(&cluster).unwrap();
    let dir = |name: &str| scratch.dir.path().join("projects").join(name);
    let build_into_plugins = |name: &str| {
        let output = scratch.build(&dir(name));
        assert!(output.status.success(), "{name}: {}", text(&output.stderr));
        // Copied as an author would copy it: the host waits until the file is complete.
        let file = format!("{name}.wasm");
        std::fs::copy(dir(name).join(&file), plugins.join(&file)).unwrap();
    };
    // One host configuration holding every project's section.
    let mut config = String::new();
    for (name, lang, _) in projects {
        let output = new(&scratch, &[name, "--lang", lang]);
        assert!(output.status.success(), "{name}: {}", text(&output.stderr));
        config += &std::fs::read_to_string(dir(name).join("kubeplug.toml")).unwrap();
        build_into_plugins(name);
    }
    let config_file = scratch.dir.path().join("kubeplug.toml");
    std::fs::write(&config_file, config).unwrap();
    let config_map = |greeting: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: web-config, namespace: default}}\ndata: {{greeting: {greeting}}}\n"
        )
    };
    std::fs::write(cluster.join("cm.yaml"), config_map("hello")).unwrap();

    let host = Host::start([
        "--local".as_ref(),
        cluster.as_os_str(),
        "--plugins".as_ref(),
        plugins.as_os_str(),
        "--config".as_ref(),
        config_file.as_os_str(),
        "--replay-on-swap".as_ref(),
    ]);
    let logged = |name: &str, message: &str, change: &str| {
        host.stderr_lines().iter().any(|line| {
            line.contains(&format!(" {message} "))
                && line.contains(name)
                && line.contains(&format!("change=\"{change}\""))
                && line.contains("default/web-config")
        })
    };
    let wait_for_all = |what: &str, message: &str, change: &str| {
        for (name, _, _) in projects {
            wait_until(&format!("{name}: {what}"), || {
                logged(name, message, change).then_some(())
            });
        }
    };
    wait_for_all("the plugin logs the ConfigMap", "event", "added");

    for (name, _, handler) in projects {
        let handler = dir(name).join(handler);
        let source = std::fs::read_to_string(&handler).unwrap();
        let edited =
            source
                .replacen(r#""event","#, r#""seen","#, 1)
                .replacen(r#""0.1.0""#, r#""0.2.0""#, 1);
        assert_ne!(source, edited, "{name}: the template logs \"event\"");
        std::fs::write(&handler, edited).unwrap();
        build_into_plugins(name);
    }
    wait_for_all(
        "the new version is handed the ConfigMap again",
        "seen",
        "added",
    );
    std::fs::write(cluster.join("cm.yaml"), config_map("bonjour")).unwrap();
    wait_for_all("the new version sees the change", "seen", "updated");
    let status: serde_json::Value = serde_json::from_str(&host.get("/plugins").1).unwrap();
    for (name, _, _) in projects {
        let plugin = status
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == name);
        assert_eq!(
            plugin.map(|p| &p["version"]),
            Some(&serde_json::json!("0.2.0")),
            "{name}: {status}"
        );
    }
}
