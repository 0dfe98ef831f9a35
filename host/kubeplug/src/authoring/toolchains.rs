//! `kubeplug toolchains install [LANG...]`.

use std::time::Instant;

use anyhow::{Context as _, anyhow};
use kubeplug_build::{CCompiler, Language};

use crate::cli::{CCompilerArg, ToolchainsInstallArgs};

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
    let c_compiler = match args.c_compiler {
        None => CCompiler::default_for_user(),
        Some(CCompilerArg::Clang) => CCompiler::Clang,
        Some(CCompilerArg::Zig) => CCompiler::Zig,
    };
    let toolchains = super::toolchains(args.dir)?;
    for language in languages {
        let toolchains = toolchains.clone();
        let started = Instant::now();
        let already = match language {
            Language::C => toolchains.check_c(c_compiler).is_ok(),
            _ => toolchains.check(language).is_ok(),
        };
        tokio::task::spawn_blocking(move || match language {
            Language::C => toolchains.install_c(c_compiler),
            _ => toolchains.install(language),
        })
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
