//! `cargo xtask <task>`: repository chores. Run `cargo xtask help`.

use anyhow::{Result, bail};

const HELP: &str = "\
usage: cargo xtask <task>

tasks:
  build-plugins [NAME...]  build the plugins under plugins/ (all when no NAME is given) into
                           target/plugins/<name>.wasm (test guests of plugins/tests/ into
                           target/test-plugins/); Rust guests need
                           `rustup target add wasm32-wasip2`
  help                     this text";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("build-plugins") => {
            let layout = xtask::Layout::from_manifest_dir();
            for path in xtask::build_plugins(&layout, &args[1..])? {
                eprintln!("built {}", path.display());
            }
            Ok(())
        }
        Some("help") | None => {
            eprintln!("{HELP}");
            Ok(())
        }
        Some(other) => bail!("unknown task {other:?}\n\n{HELP}"),
    }
}
