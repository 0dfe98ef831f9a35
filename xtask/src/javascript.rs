//! JavaScript guests: a directory with `handler.js`, an ES module exporting `handler` (the
//! WIT interface's functions in camelCase), built by `componentize-qjs` (QuickJS, snapshotted
//! with Wizer) at the version pinned in `xtask/toolchains/package.json` and its lock file.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::{Layout, Toolchain, apt_install, marked_dirs, publish, run, runs, select, up_to_date};

/// The file that makes a directory under `plugins/` a JavaScript plugin.
pub(crate) const MARKER: &str = "handler.js";

/// The npm package that builds the components.
const TOOL: &str = "componentize-qjs";

/// JavaScript guests (see the module documentation).
#[derive(Debug, Default)]
pub struct JavaScript;

/// `target/toolchains/js`: where `npm ci` installs the pinned tool.
fn install_dir(layout: &Layout) -> PathBuf {
    layout.toolchains_dir().join("js")
}

/// The version of `package` that `package.json` at `path` asks for.
fn version_in(path: &std::path::Path, package: &str) -> Result<Option<String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let version = if package.is_empty() {
        &json["version"]
    } else {
        &json["dependencies"][package]
    };
    Ok(version.as_str().map(str::to_owned))
}

impl Toolchain for JavaScript {
    fn language(&self) -> &'static str {
        "JavaScript"
    }

    fn plugins(&self, layout: &Layout) -> Result<Vec<String>> {
        Ok(marked_dirs(layout, MARKER)?
            .into_iter()
            .map(|(n, _)| n)
            .collect())
    }

    fn check_installed(&self, layout: &Layout) -> Result<()> {
        let pins = layout.pins_dir().join("package.json");
        let pinned = version_in(&pins, TOOL)?
            .with_context(|| format!("{} does not pin {TOOL}", pins.display()))?;
        if !runs("node") {
            bail!(
                "Node.js is not installed; install it with `apt-get install -y nodejs npm` \
                 (Node.js 18 or later), then `cargo xtask install-toolchains`"
            );
        }
        let installed = install_dir(layout).join("node_modules").join(TOOL);
        let version = version_in(&installed.join("package.json"), "")
            .ok()
            .flatten();
        if version.as_deref() != Some(pinned.as_str()) {
            bail!(
                "{TOOL} {pinned} is not installed in {} (found {}); install it with \
                 `cargo xtask install-toolchains` (`npm ci` of {})",
                install_dir(layout).display(),
                version.as_deref().unwrap_or("none"),
                pins.display()
            );
        }
        Ok(())
    }

    fn install(&self, layout: &Layout) -> Result<()> {
        if self.check_installed(layout).is_ok() {
            return Ok(());
        }
        if !runs("npm") {
            apt_install(&["nodejs", "npm"])?;
        }
        // npm ci installs next to the package.json it reads: copy the pins under target/ so
        // that node_modules stays out of the source tree.
        let dir = install_dir(layout);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        for file in ["package.json", "package-lock.json"] {
            let from = layout.pins_dir().join(file);
            std::fs::copy(&from, dir.join(file))
                .with_context(|| format!("copying {} into {}", from.display(), dir.display()))?;
        }
        run(
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(&dir),
            &format!("npm ci in {}", dir.display()),
        )
    }

    fn build(&self, layout: &Layout, names: &[String]) -> Result<Vec<PathBuf>> {
        let selected = select(self.language(), marked_dirs(layout, MARKER)?, names)?;
        if selected.is_empty() {
            return Ok(Vec::new());
        }
        self.check_installed(layout)?;
        let tool = install_dir(layout)
            .join("node_modules")
            .join(TOOL)
            .join("cli.mjs");
        let work = layout.guest_target_dir().join("js");
        std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
        let mut built = Vec::new();
        for (name, dir) in selected {
            let out = work.join(format!("{name}.wasm"));
            let pins = layout.pins_dir().join("package.json");
            if up_to_date(&out, &[&dir, &layout.wit_dir(), &pins])? {
                built.push(publish(layout, &name, &dir, &out)?);
                continue;
            }
            let mut componentize = Command::new("node");
            componentize
                .arg(&tool)
                .arg("--wit")
                .arg(layout.wit_dir())
                .args(["--world", "plugin"])
                .arg("--js")
                .arg(dir.join(MARKER))
                // Relative imports resolve inside the plugin's directory, nowhere else.
                .arg("--module-root")
                .arg(&dir)
                // The host calls plugins without the component-model async ABI.
                .arg("--sync")
                .arg("-o")
                .arg(&out)
                .current_dir(&dir);
            run(
                &mut componentize,
                &format!("building JavaScript plugin {name} ({})", dir.display()),
            )?;
            built.push(publish(layout, &name, &dir, &out)?);
        }
        Ok(built)
    }
}
