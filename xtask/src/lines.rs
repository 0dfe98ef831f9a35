//! The longest a source file may grow, as `ARCHITECTURE.md`'s rules state: [`MAX_LINES`]
//! lines for every Rust file under [`CHECKED`] that is not a test file. A file past it is
//! split by job, or its inline tests move to a sibling `tests.rs`.
//!
//! Test files are exempt: a file named `tests.rs`, and anything under a `tests/` or
//! `benches/` directory below a checked directory (so `tests/fake-apiserver/src/lib.rs`, a
//! support crate, is checked; `host/informer/tests/all/main.rs` is not).

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The most lines a non-test source file may have.
pub const MAX_LINES: usize = 1_000;

/// The directories checked, relative to the repository root.
pub const CHECKED: &[&str] = &["host", "xtask", "tests"];

/// A source file over [`MAX_LINES`].
#[derive(Debug, PartialEq, Eq)]
pub struct TooLong {
    /// Its path, relative to the repository root.
    pub path: PathBuf,
    /// Its line count.
    pub lines: usize,
}

impl fmt::Display for TooLong {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} has {} lines, over the {MAX_LINES} a source file may have: split it by job, or \
             move its tests to a sibling tests.rs",
            self.path.display(),
            self.lines
        )
    }
}

/// Whether `relative`, a path below a checked directory, is a test file.
pub fn is_test_file(relative: &Path) -> bool {
    let in_test_dir = relative.parent().is_some_and(|dir| {
        dir.components()
            .any(|c| matches!(c.as_os_str().to_str(), Some("tests" | "benches")))
    });
    in_test_dir || relative.file_name().is_some_and(|name| name == "tests.rs")
}

/// The non-test `.rs` files under `root`'s [`CHECKED`] directories that are over
/// [`MAX_LINES`], sorted by path. Build output and hidden directories are not searched.
pub fn check(root: &Path) -> Result<Vec<TooLong>> {
    let mut too_long = Vec::new();
    for checked in CHECKED {
        let top = root.join(checked);
        let mut stack = vec![top.clone()];
        while let Some(dir) = stack.pop() {
            let entries =
                std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?;
            for entry in entries {
                let path = entry?.path();
                let name = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default();
                if path.is_dir() {
                    if !(name == "target" || name == "node_modules" || name.starts_with('.')) {
                        stack.push(path);
                    }
                    continue;
                }
                let below = path.strip_prefix(&top).expect("found under its top");
                if !name.ends_with(".rs") || is_test_file(below) {
                    continue;
                }
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let lines = text.lines().count();
                if lines > MAX_LINES {
                    let path = path.strip_prefix(root).expect("found under the root");
                    too_long.push(TooLong {
                        path: path.to_path_buf(),
                        lines,
                    });
                }
            }
        }
    }
    too_long.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(too_long)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Layout;

    #[test]
    fn no_source_file_is_over_the_limit() {
        let too_long = check(&Layout::from_manifest_dir().root).unwrap();
        let lines: Vec<String> = too_long.iter().map(ToString::to_string).collect();
        assert!(lines.is_empty(), "{}", lines.join("\n"));
    }

    /// A repository root holding these files, each with its number of lines.
    fn tree(files: &[(&str, usize)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for checked in CHECKED {
            std::fs::create_dir_all(dir.path().join(checked)).unwrap();
        }
        for (file, lines) in files {
            let path = dir.path().join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "// a line\n".repeat(*lines)).unwrap();
        }
        dir
    }

    #[test]
    fn a_file_one_line_over_is_named_with_its_count() {
        let dir = tree(&[
            ("host/a/src/long.rs", MAX_LINES + 1),
            ("host/a/src/limit.rs", MAX_LINES),
            ("tests/support/src/lib.rs", MAX_LINES + 5),
            ("plugins/elsewhere.rs", MAX_LINES + 1),
            ("host/a/src/long.txt", MAX_LINES + 1),
        ]);
        let too_long = check(dir.path()).unwrap();
        assert_eq!(
            too_long,
            [
                TooLong {
                    path: "host/a/src/long.rs".into(),
                    lines: MAX_LINES + 1,
                },
                TooLong {
                    path: "tests/support/src/lib.rs".into(),
                    lines: MAX_LINES + 5,
                },
            ]
        );
        assert!(
            too_long[0]
                .to_string()
                .starts_with("host/a/src/long.rs has 1001 lines, over the 1000"),
            "{}",
            too_long[0]
        );
    }

    #[test]
    fn test_files_and_build_output_are_not_checked() {
        let dir = tree(&[
            ("host/a/src/tests.rs", MAX_LINES + 1),
            ("host/a/src/object/tests.rs", MAX_LINES + 1),
            ("host/a/tests/all/main.rs", MAX_LINES + 1),
            ("host/a/benches/pipeline.rs", MAX_LINES + 1),
            ("tests/support/tests/wire.rs", MAX_LINES + 1),
            ("xtask/target/debug/build/out.rs", MAX_LINES + 1),
        ]);
        assert_eq!(check(dir.path()).unwrap(), []);
        assert!(is_test_file(Path::new("a/tests/x.rs")));
        assert!(!is_test_file(Path::new("a/src/tests_of_x.rs")));
        assert!(!is_test_file(Path::new("fake-apiserver/src/lib.rs")));
    }
}
