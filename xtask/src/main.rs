//! `cargo xtask <task>`: repository chores. Run `cargo xtask help`.

use anyhow::{Result, bail};

const HELP: &str = "\
usage: cargo xtask <task>

tasks:
  install-toolchains       install what every guest language needs: the Rust target
                           wasm32-wasip2 (rustup), clang-19 and wasi-libc (apt-get, as root or
                           with sudo), componentize-qjs (npm ci) and componentize-py (pip, in a
                           venv) at the versions pinned in host/build/pins/, and the
                           TypeScript of the tests (xtask/pins/typescript), under
                           target/toolchains/; does nothing for what is already there
  build-plugins [NAME...]  build the plugins under plugins/ (all when no NAME is given) into
                           target/plugins/<name>.wasm (test guests of plugins/tests/ into
                           target/test-plugins/): Rust crates, and directories holding
                           handler.c, handler.js or handler.py
  bench [SCENARIO...] [--quick]
                           run the benchmarks in release (all scenarios when none is given:
                           pipeline, decode, field-select, wire, cache-memory, crossing,
                           pipeline-wasm, fan-out, languages, kube-sync, workqueue, hot-swap;
                           one-core ones under taskset -c 0), print a table of their figures
                           against the targets, and write it with the machine's description to
                           target/bench/<date>.json; --quick: tiny sizes.
                           See benches/README.md
  help                     this text";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let layout = xtask::Layout::from_manifest_dir();
    match args.first().map(String::as_str) {
        Some("build-plugins") => {
            for path in xtask::build_plugins(&layout, &args[1..])? {
                eprintln!("built {}", path.display());
            }
            Ok(())
        }
        Some("bench") => {
            let bench_args = xtask::bench::BenchArgs::parse(&args[1..])?;
            let report = xtask::bench::bench(&layout, &bench_args)?;
            eprintln!("wrote {}", report.display());
            Ok(())
        }
        Some("install-toolchains") if args.len() == 1 => xtask::install_toolchains(&layout),
        Some("help") | None => {
            eprintln!("{HELP}");
            Ok(())
        }
        Some(_) => bail!("unknown task {:?}\n\n{HELP}", args.join(" ")),
    }
}
