//! Which components this host accepts, by the names they import and export: the version of
//! `kubeplug:plugin` it serves, and the WASI it provides.
//!
//! The versioning policy (`wit/README.md`): a patch release of `kubeplug:plugin` only adds
//! interfaces or functions, so a component built against any patch of the served minor
//! links (wasmtime's linker matches names semver-aware, and takes what the component does
//! not use as unused); anything else is a new minor, which the host refuses by name.

/// The version of the `kubeplug:plugin` package in `wit/`, the one this host serves.
pub const SERVED_VERSION: &str = "0.2.0";

/// The package every plugin interface belongs to.
const PACKAGE: &str = "kubeplug:plugin";

/// The WIT files of the served version, as (file name, text): what plugins build against,
/// carried so that `kubeplug build` and `kubeplug new` need no checkout.
pub const WIT_FILES: [(&str, &str); 4] = [
    ("types.wit", include_str!("../../../wit/types.wit")),
    ("imports.wit", include_str!("../../../wit/imports.wit")),
    ("world.wit", include_str!("../../../wit/world.wit")),
    ("README.md", include_str!("../../../wit/README.md")),
];

/// What a component's import or export name says about whether this host serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NameCheck {
    /// WASI 0.2, or `kubeplug:plugin` of the served minor.
    Served,
    /// `kubeplug:plugin` of a version this host does not serve.
    OtherVersion {
        /// The version the component names.
        found: String,
    },
    /// Anything else: another package, or a name without a version.
    Foreign,
}

/// Checks one import or export name (`wasi:io/streams@0.2.6`, `kubeplug:plugin/log@0.2.0`).
pub(crate) fn check_name(name: &str) -> NameCheck {
    let Some((interface, version)) = name.rsplit_once('@') else {
        return NameCheck::Foreign;
    };
    if interface
        .strip_prefix(PACKAGE)
        .is_some_and(|rest| rest.starts_with('/'))
    {
        return if compatible(version, SERVED_VERSION) {
            NameCheck::Served
        } else {
            NameCheck::OtherVersion {
                found: version.to_owned(),
            }
        };
    }
    if interface.starts_with("wasi:") && compatible(version, "0.2.0") {
        return NameCheck::Served;
    }
    NameCheck::Foreign
}

/// Whether `found` is semver-compatible with `served` as the component model's tools take
/// it: the same major, and for `0.y` the same minor too (for `0.0.z`, the same patch).
/// Pre-releases and build metadata match only exactly.
fn compatible(found: &str, served: &str) -> bool {
    let parse = |version: &str| -> Option<[u64; 3]> {
        let mut parts = version.split('.').map(|part| part.parse::<u64>().ok());
        let parsed = [parts.next()??, parts.next()??, parts.next()??];
        parts.next().is_none().then_some(parsed)
    };
    let (Some(found), Some(served)) = (parse(found), parse(served)) else {
        return found == served;
    };
    match served {
        [0, 0, _] => found == served,
        [0, minor, _] => found[0] == 0 && found[1] == minor,
        [major, _, _] => found[0] == major,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wasi_02_and_the_served_minor_of_our_package_are_served() {
        for name in [
            "wasi:cli/environment@0.2.6",
            "wasi:io/streams@0.2.0",
            "kubeplug:plugin/cache@0.2.0",
            "kubeplug:plugin/handler@0.2.7",
        ] {
            assert_eq!(check_name(name), NameCheck::Served, "{name}");
        }
    }

    #[test]
    fn another_minor_of_our_package_is_named() {
        for (name, found) in [
            ("kubeplug:plugin/cache@0.1.0", "0.1.0"),
            ("kubeplug:plugin/handler@0.9.0", "0.9.0"),
            ("kubeplug:plugin/log@1.2.0", "1.2.0"),
            ("kubeplug:plugin/log@0.2.0-rc.1", "0.2.0-rc.1"),
            ("kubeplug:plugin/log@0.2", "0.2"),
        ] {
            assert_eq!(
                check_name(name),
                NameCheck::OtherVersion {
                    found: found.to_owned()
                },
                "{name}"
            );
        }
    }

    #[test]
    fn everything_else_is_foreign() {
        for name in [
            "wasi:http/outgoing-handler@0.3.0",
            "evil:net/raw@1.0.0",
            "kubeplug:pluginx/log@0.2.0",
            "kubeplug:plugin/log",
            "env",
        ] {
            assert_eq!(check_name(name), NameCheck::Foreign, "{name}");
        }
    }

    #[test]
    fn the_served_version_is_the_package_in_wit() {
        let wit = WIT_FILES.iter().filter(|(name, _)| name.ends_with(".wit"));
        for (_, file) in wit {
            let package = file.lines().next().unwrap();
            assert_eq!(package, format!("package {PACKAGE}@{SERVED_VERSION};"));
        }
    }

    #[test]
    fn every_file_of_wit_is_carried() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../wit");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let mut carried: Vec<String> = WIT_FILES.iter().map(|(n, _)| (*n).to_owned()).collect();
        carried.sort();
        assert_eq!(carried, on_disk);
    }
}
