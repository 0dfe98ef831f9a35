//! The compiled-artefact cache: cold compile, then cached; a damaged artefact is replaced.

use anyhow::Result;
use kubeplug_runtime::{CompileSource, Runtime, RuntimeConfig};

use crate::fixtures::guest;

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
    assert_eq!(
        runtime.compile(&bytes).map_err(anyhow::Error::msg)?.1,
        CompileSource::Compiled
    );
    assert_eq!(
        runtime.compile(&bytes).map_err(anyhow::Error::msg)?.1,
        CompileSource::Cached
    );
    // Another runtime with the same engine settings reuses it (a host restart).
    let again = Runtime::new(config)?;
    assert_eq!(
        again.compile(&bytes).map_err(anyhow::Error::msg)?.1,
        CompileSource::Cached
    );

    // Different bytes, different artefact.
    let other = std::fs::read(guest("label-reader")?)?;
    assert_eq!(
        runtime.compile(&other).map_err(anyhow::Error::msg)?.1,
        CompileSource::Compiled
    );

    // A damaged artefact is recompiled and replaced, never trusted.
    for entry in std::fs::read_dir(&cache)? {
        std::fs::write(entry?.path(), b"garbage")?;
    }
    assert_eq!(
        runtime.compile(&bytes).map_err(anyhow::Error::msg)?.1,
        CompileSource::Compiled
    );
    assert_eq!(
        runtime.compile(&bytes).map_err(anyhow::Error::msg)?.1,
        CompileSource::Cached
    );
    Ok(())
}

#[test]
fn garbage_is_refused_with_the_compile_stage_named() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let error = runtime.compile(b"\0asm not really").unwrap_err();
    assert!(!error.is_empty());
}
