//! The compiled-artefact cache: cold compile, then cached; a damaged artefact is replaced;
//! identical plugins compiled at once leave one whole artefact; a directory others can
//! write to is never used.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use anyhow::Result;
use kubeplug_runtime::{CompileSource, Runtime, RuntimeConfig};

use crate::fixtures::guest;

fn cached_in(cache: &Path) -> Result<Runtime> {
    Ok(Runtime::new(RuntimeConfig {
        artifact_cache: Some(cache.to_owned()),
        ..RuntimeConfig::default()
    })?)
}

/// The entries of `dir`, by name.
fn entries(dir: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        names.push(entry?.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

/// Regression (issue 19): the temporary file was named after the process, so two loads of
/// identical files at once (plugins load in parallel) wrote one temporary file together and
/// could rename it into place half-written. Each write has a temporary file of its own now.
#[test]
fn identical_plugins_compiled_at_once_leave_one_whole_artefact() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cache = dir.path().join("artefacts");
    let bytes = std::fs::read(guest("noop")?)?;
    let runtime = cached_in(&cache)?;
    std::thread::scope(|scope| {
        let compiles: Vec<_> = (0..4)
            .map(|_| scope.spawn(|| runtime.compile(&bytes).map(drop)))
            .collect();
        for compile in compiles {
            compile.join().expect("no panic").expect("compiled");
        }
    });
    let names = entries(&cache)?;
    assert_eq!(
        names.len(),
        1,
        "one artefact, no temporary file left: {names:?}"
    );
    assert!(names[0].ends_with(".cwasm"), "{names:?}");
    assert_eq!(cached_in(&cache)?.compile(&bytes)?.1, CompileSource::Cached);
    Ok(())
}

/// Whoever can write to the cache runs code in the host: a cache directory writable by
/// others, owned by another user, or a symlink is not used (the host compiles every time)
/// and left as it is. Its parent may be shared, as a 0777 emptyDir is.
#[test]
fn a_cache_directory_others_can_write_to_is_never_used() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let bytes = std::fs::read(guest("noop")?)?;
    let uncached = |cache: &Path| -> Result<()> {
        let runtime = cached_in(cache)?;
        for _ in 0..2 {
            assert_eq!(
                runtime.compile(&bytes)?.1,
                CompileSource::Compiled,
                "{}",
                cache.display()
            );
        }
        Ok(())
    };

    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared)?;
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777))?;
    uncached(&shared)?;
    assert!(entries(&shared)?.is_empty(), "nothing written there");
    assert_eq!(
        std::fs::metadata(&shared)?.permissions().mode() & 0o777,
        0o777,
        "left as it is"
    );

    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere)?;
    let linked = dir.path().join("linked");
    std::os::unix::fs::symlink(&elsewhere, &linked)?;
    uncached(&linked)?;

    // As root, a directory of another user (nobody); as anyone else, chown is refused and
    // that case is left out.
    let foreign = dir.path().join("foreign");
    std::fs::create_dir(&foreign)?;
    std::fs::set_permissions(&foreign, std::fs::Permissions::from_mode(0o700))?;
    if std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).is_ok() {
        uncached(&foreign)?;
    }

    // Under a shared parent, the runtime's own private directory is used.
    let private = shared.join("kubeplug").join("artifacts");
    let runtime = cached_in(&private)?;
    runtime.compile(&bytes)?;
    assert_eq!(runtime.compile(&bytes)?.1, CompileSource::Cached);
    assert_eq!(
        std::fs::metadata(&private)?.permissions().mode() & 0o777,
        0o700
    );
    Ok(())
}

#[test]
fn compiled_components_are_cached_by_content_and_engine() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cache = dir.path().join("artefacts");
    let bytes = std::fs::read(guest("noop")?)?;
    let config = RuntimeConfig {
        artifact_cache: Some(cache.clone()),
        ..RuntimeConfig::default()
    };
    let runtime = Runtime::new(config.clone())?;
    assert_eq!(runtime.compile(&bytes)?.1, CompileSource::Compiled);
    assert_eq!(runtime.compile(&bytes)?.1, CompileSource::Cached);
    // Another runtime with the same engine settings reuses it (a host restart).
    let again = Runtime::new(config)?;
    assert_eq!(again.compile(&bytes)?.1, CompileSource::Cached);

    // Different bytes, different artefact.
    let other = std::fs::read(guest("label-reader")?)?;
    assert_eq!(runtime.compile(&other)?.1, CompileSource::Compiled);

    // A damaged artefact is recompiled and replaced, never trusted.
    for entry in std::fs::read_dir(&cache)? {
        std::fs::write(entry?.path(), b"garbage")?;
    }
    assert_eq!(runtime.compile(&bytes)?.1, CompileSource::Compiled);
    assert_eq!(runtime.compile(&bytes)?.1, CompileSource::Cached);
    Ok(())
}

#[test]
fn garbage_is_refused_with_the_compile_stage_named() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let error = runtime.compile(b"\0asm not really").unwrap_err();
    assert!(
        matches!(error, kubeplug_runtime::EngineError::NotAComponent { .. })
            && error.to_string().contains("unknown WebAssembly version"),
        "{error}"
    );
}
