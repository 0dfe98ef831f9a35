//! `kubeplug build [DIR]`: one plugin project into `DIR/<name>.wasm`, checked.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context as _, bail};
use kubeplug_build::{BuildOptions, Language, Project};
use kubeplug_runtime::interface::WIT_FILES;
use kubeplug_runtime::{Runtime, RuntimeConfig};

use crate::check::offline_spec;
use crate::cli::BuildArgs;
use crate::config::Config;
use crate::run::artifact_cache_dir;

/// Builds the project in `args.dir` with its language's toolchain, loads it as `run` would
/// short of the grants (compile, link, `init`, `describe`, validation), and only then copies
/// the component to `DIR/<name>.wasm`: a plugin that does not load, or describes itself
/// under another name than its manifest's, fails the build and leaves `DIR/<name>.wasm` as it
/// was (a plugins directory may be watching it).
pub(crate) async fn build(args: BuildArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let project = Project::open(&args.dir)?;
    if project.language == Language::Rust {
        // The SDK a project of `kubeplug new` depends on, where it expects it: written again
        // when missing (another machine, a data directory wiped), unchanged otherwise.
        if let Some(data) = kubeplug_build::data_dir() {
            super::sdk::write_rust(&data)?;
        }
    }
    let options = BuildOptions {
        wit: wit_dir(&project)?,
        toolchains: super::toolchains(args.toolchains)?,
        work: project.dir.join("target").join("kubeplug"),
    };
    let component = {
        let project = project.clone();
        tokio::task::spawn_blocking(move || build_blocking(&project, &options))
            .await
            .context("the build thread failed")??
    };
    let output = project.dir.join(format!("{}.wasm", project.name));
    // Through the artefact cache `run` and `test` read: the check's compile is theirs too.
    let runtime = Runtime::new(RuntimeConfig {
        artifact_cache: artifact_cache_dir(),
        ..RuntimeConfig::default()
    })
    .context("cannot start the WebAssembly engine")?;
    let (spec, _) = offline_spec(&component, &Config::default(), None)?;
    let description = runtime.inspect(spec).await.with_context(|| {
        format!(
            "{} was built, but does not load; it is not written",
            output.display()
        )
    })?;
    if description.name != project.name {
        bail!(
            "{}: describe() says the plugin is called {:?}, its manifest {:?}; it is not written",
            output.display(),
            description.name,
            project.name
        );
    }
    kubeplug_build::publish(&component, &output)?;
    let size = std::fs::metadata(&output).map_or(0, |m| m.len());
    // What was built is this command's output.
    #[allow(clippy::print_stdout)]
    {
        println!(
            "built {} ({} {}, {} plugin, {} KiB) in {:.1} s",
            output.display(),
            description.name,
            description.version,
            project.language,
            size / 1024,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

fn build_blocking(project: &Project, options: &BuildOptions) -> anyhow::Result<PathBuf> {
    kubeplug_build::build(project, options)
        .with_context(|| format!("building {} plugin {}", project.language, project.name))
}

/// The WIT the project builds against: its own `wit/`, as `kubeplug new` writes it; else
/// the one this host serves, written under the project's `target/`. A Rust project's SDK
/// carries its own.
fn wit_dir(project: &Project) -> anyhow::Result<PathBuf> {
    let own = project.dir.join("wit");
    if own.is_dir() || project.language == Language::Rust {
        return Ok(own);
    }
    let carried = project.dir.join("target").join("kubeplug").join("wit");
    write_wit(&carried)?;
    Ok(carried)
}

/// Writes the WIT this host serves into `dir`.
pub(crate) fn write_wit(dir: &Path) -> anyhow::Result<()> {
    for (name, text) in WIT_FILES {
        super::write_if_changed(&dir.join(name), text)?;
    }
    Ok(())
}
