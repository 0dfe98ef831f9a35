//! `kubeplug new NAME --lang LANG [--mode MODE]`: a standalone plugin project, anywhere.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, anyhow, bail};
use kubeplug_policy::names::check_plugin_name;
use kubeplug_runtime::interface::SERVED_VERSION;

use crate::cli::{NewArgs, NewLanguage, NewMode};

/// One file of a template: its path in the project and its text, with `__NAME__` for the
/// plugin's name (and, in a Rust manifest, `__SDK__` for the SDK's directory).
type Template = (&'static str, &'static str);

const COMMON: [Template; 3] = [
    ("README.md", include_str!("templates/common/README.md")),
    ("events.yaml", include_str!("templates/common/events.yaml")),
    (
        "kubeplug.toml",
        include_str!("templates/common/kubeplug.toml"),
    ),
];

const RUST: [Template; 2] = [
    ("Cargo.toml", include_str!("templates/rust/Cargo.toml")),
    (".gitignore", include_str!("templates/rust/gitignore")),
];

const C: [Template; 2] = [
    ("plugin.toml", include_str!("templates/c/plugin.toml")),
    (".gitignore", include_str!("templates/c/gitignore")),
];

const PYTHON: [Template; 2] = [
    (
        "pyproject.toml",
        include_str!("templates/python/pyproject.toml"),
    ),
    (".gitignore", include_str!("templates/python/gitignore")),
];

const JAVASCRIPT: [Template; 3] = [
    (
        "package.json",
        include_str!("templates/javascript/package.json"),
    ),
    (
        "tsconfig.json",
        include_str!("templates/javascript/tsconfig.json"),
    ),
    (".gitignore", include_str!("templates/javascript/gitignore")),
];

/// The handler of each language and mode.
fn handler(language: NewLanguage, mode: NewMode) -> anyhow::Result<Template> {
    Ok(match (language, mode) {
        (NewLanguage::Rust, NewMode::Events) => {
            ("src/lib.rs", include_str!("templates/rust/events.rs"))
        }
        (NewLanguage::Rust, NewMode::Reconcile) => {
            ("src/lib.rs", include_str!("templates/rust/reconcile.rs"))
        }
        (NewLanguage::Javascript, NewMode::Events) => {
            ("handler.js", include_str!("templates/javascript/events.js"))
        }
        (NewLanguage::Javascript, NewMode::Reconcile) => (
            "handler.js",
            include_str!("templates/javascript/reconcile.js"),
        ),
        (NewLanguage::C, NewMode::Events) => ("handler.c", include_str!("templates/c/events.c")),
        (NewLanguage::C, NewMode::Reconcile) => {
            ("handler.c", include_str!("templates/c/reconcile.c"))
        }
        (NewLanguage::Python, NewMode::Events) => {
            ("handler.py", include_str!("templates/python/events.py"))
        }
        (NewLanguage::Python, NewMode::Reconcile) => {
            ("handler.py", include_str!("templates/python/reconcile.py"))
        }
    })
}

/// Writes the project, having checked the name and the directory first: nothing is
/// written for a bad name, or into a directory that holds anything unless `--force`.
pub(crate) async fn new(args: NewArgs) -> anyhow::Result<()> {
    let name = args.name.as_str();
    check_plugin_name(name).map_err(|e| anyhow!("{}: {} {}", e.what, e.value, e.rule))?;
    let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from(name));
    let occupied = std::fs::read_dir(&dir).is_ok_and(|mut entries| entries.next().is_some());
    if occupied && !args.force {
        bail!(
            "{} exists and is not empty; choose another --dir, or pass --force to write into it",
            dir.display()
        );
    }
    let handler = handler(args.lang, args.mode)?;
    let (language, files): (&str, &[Template]) = match args.lang {
        NewLanguage::Rust => ("Rust", &RUST),
        NewLanguage::Javascript => ("JavaScript", &JAVASCRIPT),
        NewLanguage::Python => ("Python", &PYTHON),
        NewLanguage::C => ("C", &C),
    };
    let mode = match args.mode {
        NewMode::Events => "events",
        NewMode::Reconcile => "reconcile",
    };
    let sdk = match args.lang {
        NewLanguage::Rust => {
            let data = kubeplug_build::data_dir()
                .ok_or_else(|| anyhow!("no data directory: set XDG_DATA_HOME or HOME"))?;
            Some(super::sdk::write_rust(&data)?)
        }
        NewLanguage::Javascript | NewLanguage::Python | NewLanguage::C => None,
    };
    let minor = SERVED_VERSION
        .rsplit_once('.')
        .map_or(SERVED_VERSION, |(m, _)| m);
    let fill = |text: &str| {
        text.replace("__NAME__", name)
            .replace("__LANGUAGE__", language)
            .replace("__MODE__", mode)
            .replace("__WIT_VERSION__", SERVED_VERSION)
            .replace("__WIT_MINOR__", &format!("{minor}.x"))
            .replace(
                "__SDK__",
                &sdk.as_deref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            )
    };
    for (path, text) in COMMON.iter().chain(files).chain([&handler]) {
        write(&dir.join(path), &fill(text))?;
    }
    super::build::write_wit(&dir.join("wit"))?;
    match args.lang {
        NewLanguage::Rust => lock(&dir),
        NewLanguage::Javascript => {
            for (file, text) in kubeplug_build::JAVASCRIPT_TYPES {
                write(&dir.join(file), text)?;
            }
        }
        NewLanguage::Python | NewLanguage::C => {}
    }
    // What was made is this command's output.
    #[allow(clippy::print_stdout)]
    {
        println!(
            "created {} ({name}: {language}, {mode} mode); build it with `cd {} && kubeplug build`",
            dir.display(),
            dir.display()
        );
    }
    Ok(())
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Writes the Rust project's lock file, so that its first build uses the versions of its
/// creation. Without the registry (offline), the first `cargo build` writes it instead.
fn lock(dir: &Path) {
    let locked = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .arg("generate-lockfile")
        .arg("--manifest-path")
        .arg(dir.join("Cargo.toml"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !locked {
        tracing::warn!(
            "cargo generate-lockfile failed in {}; the first build writes Cargo.lock",
            dir.display()
        );
    }
}
