//! `kubeplug toolchains install [LANG...]`.

use std::time::Instant;

use anyhow::{Context as _, anyhow};
use kubeplug_build::Language;

use crate::cli::ToolchainsInstallArgs;

/// Installs the toolchains of `args.languages` (all when none is named), saying for each
/// whether it was there already or how long its install took.
pub(crate) async fn install(args: ToolchainsInstallArgs) -> anyhow::Result<()> {
    let languages = if args.languages.is_empty() {
        Language::ALL.to_vec()
    } else {
        args.languages
            .iter()
            .map(|id| {
                Language::from_id(id).ok_or_else(|| {
                    anyhow!("unknown language {id:?}: rust, c, javascript (js) or python (py)")
                })
            })
            .collect::<anyhow::Result<_>>()?
    };
    let toolchains = super::toolchains(args.dir)?;
    for language in languages {
        let toolchains = toolchains.clone();
        let started = Instant::now();
        let already = toolchains.check(language).is_ok();
        tokio::task::spawn_blocking(move || toolchains.install(language))
            .await
            .context("the install thread failed")?
            .with_context(|| format!("installing the {language} toolchain"))?;
        // Progress of this command, as its output.
        #[allow(clippy::print_stdout)]
        if already {
            println!("{}: already installed", language.id());
        } else {
            println!(
                "{}: installed in {:.1} s",
                language.id(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(())
}
