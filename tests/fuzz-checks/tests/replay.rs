//! Replays every checked-in fuzz input through its target's check on the stable toolchain:
//! the seed corpus (`fuzz/corpus/<target>/`) and the inputs that once broke a property
//! (`fuzz/regressions/<target>/`). A target without seeds fails the test, so a corpus cannot
//! silently go missing.

use std::path::{Path, PathBuf};

use kubeplug_fuzz_checks::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of `dir`, sorted; empty if it does not exist.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.expect("a readable directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

/// Runs `check` on every file of `fuzz/<kind>/<target>/`; returns how many there are. Every
/// broken file is listed (each one's panic message is printed above) before the test fails.
fn replay(kind: &str, target: &str, check: fn(&[u8])) -> usize {
    let files = inputs(&fuzz_dir().join(kind).join(target));
    let broken: Vec<String> = files
        .iter()
        .filter(|file| {
            let data = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            std::panic::catch_unwind(|| check(&data)).is_err()
        })
        .map(|file| file.display().to_string())
        .collect();
    assert!(
        broken.is_empty(),
        "{target}: these inputs break a property: {broken:#?}"
    );
    files.len()
}

#[test]
fn every_target_has_a_seed_corpus_and_it_holds() {
    for &(target, check) in TARGETS {
        let seeds = replay("corpus", target, check);
        assert!(seeds > 0, "fuzz/corpus/{target}/ is missing or empty");
    }
}

#[test]
fn every_regression_input_holds() {
    for &(target, check) in TARGETS {
        replay("regressions", target, check);
    }
}

#[test]
fn corpus_directories_are_the_targets() {
    let dir = fuzz_dir().join("corpus");
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    let mut expected: Vec<&str> = TARGETS.iter().map(|(name, _)| *name).collect();
    expected.sort();
    assert_eq!(
        found, expected,
        "a corpus directory per fuzz target, and no other"
    );
}
