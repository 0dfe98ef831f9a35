//! Where the kube-apiserver and etcd binaries are, and what happens when they are not.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Once;

use crate::EnvtestError;

/// The directory holding `kube-apiserver` and `etcd`: controller-runtime's envtest layout.
pub const ASSETS_VAR: &str = "KUBEBUILDER_ASSETS";
/// Overrides the etcd binary, e.g. `/usr/bin/etcd` from Debian's `etcd-server` (etcd 3.4).
pub const ETCD_VAR: &str = "KUBEPLUG_ENVTEST_ETCD";
/// When set (to anything but empty, `0` or `false`), missing assets fail instead of skipping.
pub const CI_VAR: &str = "CI";

/// The two binaries a control plane runs. Both take the flags the harness passes (see the crate
/// docs); any etcd 3.4.23 or later does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assets {
    /// The kube-apiserver binary.
    pub kube_apiserver: PathBuf,
    /// The etcd binary.
    pub etcd: PathBuf,
}

impl Assets {
    /// Finds the binaries: `$KUBEBUILDER_ASSETS/kube-apiserver`, and `$KUBEPLUG_ENVTEST_ETCD` if
    /// set, else `$KUBEBUILDER_ASSETS/etcd`. Each must be an executable file.
    pub fn discover() -> Result<Assets, EnvtestError> {
        let dir = std::env::var_os(ASSETS_VAR)
            .filter(|dir| !dir.is_empty())
            .map(PathBuf::from)
            .ok_or(EnvtestError::AssetsNotConfigured)?;
        let kube_apiserver = executable("kube-apiserver", dir.join("kube-apiserver"), ASSETS_VAR)?;
        let etcd = match std::env::var_os(ETCD_VAR).filter(|path| !path.is_empty()) {
            Some(path) => executable("etcd", PathBuf::from(path), ETCD_VAR)?,
            None => executable("etcd", dir.join("etcd"), ASSETS_VAR)?,
        };
        Ok(Assets {
            kube_apiserver,
            etcd,
        })
    }

    /// [`discover`](Self::discover) for a test that can do without a control plane: when the
    /// binaries are missing it returns `None`, and the first time in a process it writes one
    /// line to stderr naming the test skipped first and how to provide the binaries. The line
    /// goes to the process's stderr directly, past libtest's capture, so a plain `cargo test`
    /// shows it among the test results (libtest itself reports a skipped test as passed).
    ///
    /// # Panics
    /// When `CI` is set (see [`CI_VAR`]): on CI a missing binary is a failure, never a skip.
    pub fn discover_or_skip() -> Option<Assets> {
        match Assets::discover() {
            Ok(assets) => Some(assets),
            Err(error) if in_ci() => {
                panic!("{CI_VAR} is set, so the envtest tests must run: {error}")
            }
            Err(error) => {
                static SAID: Once = Once::new();
                SAID.call_once(|| {
                    let thread = std::thread::current();
                    let test = thread.name().unwrap_or("a test");
                    // Written directly, not with eprintln!, which libtest captures for passing
                    // tests.
                    let _ignored = writeln!(
                        std::io::stderr().lock(),
                        "kubeplug-envtest: skipping {test} and every later test that needs a real \
                         kube-apiserver and etcd: {error}"
                    );
                });
                None
            }
        }
    }
}

fn in_ci() -> bool {
    std::env::var(CI_VAR).is_ok_and(|value| !matches!(value.as_str(), "" | "0" | "false"))
}

fn executable(
    binary: &'static str,
    path: PathBuf,
    variable: &'static str,
) -> Result<PathBuf, EnvtestError> {
    if is_executable_file(&path) {
        Ok(path)
    } else {
        Err(EnvtestError::AssetMissing {
            binary,
            path,
            variable,
        })
    }
}

fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_or_a_plain_file_is_not_an_executable() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("etcd");
        std::fs::write(&plain, "not a program").unwrap();
        assert!(!is_executable_file(dir.path()));
        assert!(!is_executable_file(&plain));
        assert!(!is_executable_file(&dir.path().join("missing")));
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(is_executable_file(&plain));
    }

    #[test]
    fn a_missing_binary_names_its_path_and_variable() {
        let error = executable("etcd", PathBuf::from("/nonexistent/etcd"), ETCD_VAR).unwrap_err();
        let message = error.to_string();
        assert!(message.contains("/nonexistent/etcd"), "{message}");
        assert!(message.contains(ETCD_VAR), "{message}");
    }
}
