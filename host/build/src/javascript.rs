//! JavaScript guests: `handler.js`, an ES module exporting `handler` (the WIT interface's
//! functions in camelCase), built by `componentize-qjs` (QuickJS, snapshotted with Wizer) at
//! the version `pins/package.json` and its lock file pin. The sources are staged with the
//! SDK (`sdk/js/kubeplug.js`) beside them, as `./kubeplug.js`.

use std::path::PathBuf;
use std::process::Command;

use crate::process::{apt_install, copy_sources, create_dir, run, runs, up_to_date};
use crate::{BuildError, BuildOptions, Language, Project, Toolchains};

/// The module every JavaScript plugin has; its relative imports resolve beside it.
pub(crate) const ENTRY: &str = "handler.js";

/// The npm package that builds the components.
const TOOL: &str = "componentize-qjs";

/// The SDK, staged beside the plugin's sources as `./kubeplug.js`.
const SDK: &str = include_str!("../sdk/js/kubeplug.js");

/// The SDK's file name among the staged sources.
const SDK_FILE: &str = "kubeplug.js";

const PACKAGE_JSON: &str = include_str!("../pins/package.json");
const PACKAGE_LOCK: &str = include_str!("../pins/package-lock.json");

/// `TOOLCHAINS/js`: where `npm ci` installs the pinned tool.
fn install_dir(toolchains: &Toolchains) -> PathBuf {
    toolchains.dir().join("js")
}

/// The version of the tool `package_json` depends on (`dependency` empty: its own version).
fn version_in(package_json: &str, dependency: &str) -> Option<String> {
    let json: serde_json::Value = serde_json::from_str(package_json).ok()?;
    let version = if dependency.is_empty() {
        &json["version"]
    } else {
        &json["dependencies"][dependency]
    };
    version.as_str().map(str::to_owned)
}

fn pinned() -> String {
    version_in(PACKAGE_JSON, TOOL).expect("pins/package.json pins the tool")
}

pub(crate) fn check(toolchains: &Toolchains) -> Result<(), BuildError> {
    let install = toolchains.install_command(Language::JavaScript);
    if !runs("node") {
        return Err(BuildError::NotInstalled {
            what: "Node.js (18 or later)".to_owned(),
            found: "no `node` on PATH".to_owned(),
            install: format!("apt-get install -y nodejs npm` and then `{install}"),
        });
    }
    let installed = install_dir(toolchains)
        .join("node_modules")
        .join(TOOL)
        .join("package.json");
    let version = std::fs::read_to_string(installed)
        .ok()
        .and_then(|text| version_in(&text, ""));
    if version.as_deref() != Some(pinned().as_str()) {
        return Err(BuildError::NotInstalled {
            what: format!("{TOOL} {}", pinned()),
            found: format!(
                "{} in {}",
                version.as_deref().unwrap_or("none"),
                install_dir(toolchains).display()
            ),
            install,
        });
    }
    Ok(())
}

pub(crate) fn install(toolchains: &Toolchains) -> Result<(), BuildError> {
    if !runs("npm") {
        apt_install(&["nodejs", "npm"])?;
    }
    // npm ci installs next to the package.json it reads.
    let dir = install_dir(toolchains);
    create_dir(&dir)?;
    for (file, contents) in [
        ("package.json", PACKAGE_JSON),
        ("package-lock.json", PACKAGE_LOCK),
    ] {
        let path = dir.join(file);
        std::fs::write(&path, contents).map_err(BuildError::io("writing", &path))?;
    }
    run(
        Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&dir),
        &format!("npm ci in {}", dir.display()),
    )
}

pub(crate) fn build(project: &Project, options: &BuildOptions) -> Result<PathBuf, BuildError> {
    check(&options.toolchains)?;
    let Project { name, dir, .. } = project;
    let install = install_dir(&options.toolchains);
    let work = options.work.join("js");
    create_dir(&work)?;
    let out = work.join(format!("{name}.wasm"));
    // The module root: a copy of the sources with the SDK beside them, so that a handler
    // imports "./kubeplug.js" and nothing outside its project.
    let root = work.join(name);
    let staged_sdk = root.join(SDK_FILE);
    let same_sdk = std::fs::read_to_string(&staged_sdk).is_ok_and(|staged| staged == SDK);
    // The installed tool's manifest stands for its version: reinstalling it makes it newer.
    let tool = install.join("node_modules").join(TOOL);
    if same_sdk && up_to_date(&out, &[dir, &options.wit, &tool.join("package.json")])? {
        return Ok(out);
    }
    copy_sources(dir, &root)?;
    std::fs::write(&staged_sdk, SDK).map_err(BuildError::io("writing", &staged_sdk))?;
    let tool = tool.join("cli.mjs");
    let mut componentize = Command::new("node");
    componentize
        .arg(&tool)
        .arg("--wit")
        .arg(&options.wit)
        .args(["--world", "plugin"])
        .arg("--js")
        .arg(root.join(ENTRY))
        // Relative imports resolve inside the staged sources, nowhere else.
        .arg("--module-root")
        .arg(&root)
        // The host calls plugins without the component-model async ABI.
        .arg("--sync")
        .arg("-o")
        .arg(&out)
        .current_dir(&root);
    run(
        &mut componentize,
        &format!("{TOOL} on {}", dir.join(ENTRY).display()),
    )?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use wit_parser::WorldItem;

    /// Every function the `plugin` world imports is declared in `kubeplug-wit.d.ts`, in the
    /// module componentize-qjs binds it to: a WIT change that adds or renames one fails here
    /// until the declarations follow.
    #[test]
    fn the_declarations_name_every_import_in_its_module() {
        let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../wit");
        let (resolve, world) = crate::c::world(&wit).unwrap();
        let declarations = include_str!("../sdk/js/kubeplug-wit.d.ts");
        let mut checked = 0;
        for item in resolve.worlds[world].imports.values() {
            let WorldItem::Interface { id, .. } = item else {
                continue;
            };
            let interface = &resolve.interfaces[*id];
            let Some(module) = resolve.id_of(*id) else {
                continue;
            };
            if interface.functions.is_empty() {
                continue;
            }
            let start = declarations
                .find(&format!("declare module \"{module}\" {{"))
                .unwrap_or_else(|| panic!("kubeplug-wit.d.ts lacks the module {module}"));
            let body = &declarations[start..];
            let body = &body[..body.find("\n}").expect("the module's block ends")];
            for name in interface.functions.keys() {
                let camel = camel_case(name);
                let declared = body.contains(&format!("export function {camel}("))
                    || body.contains(&format!("as {camel} }}"));
                assert!(declared, "kubeplug-wit.d.ts: {module} lacks {camel}");
                checked += 1;
            }
        }
        assert!(checked >= 14, "{checked} functions checked");
    }

    fn camel_case(kebab: &str) -> String {
        let mut words = kebab.split('-');
        let mut camel = words.next().unwrap_or_default().to_owned();
        for word in words {
            let mut chars = word.chars();
            camel.extend(chars.next().map(|c| c.to_ascii_uppercase()));
            camel.push_str(chars.as_str());
        }
        camel
    }
}
