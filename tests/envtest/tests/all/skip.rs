//! Without assets: one visible skip line, or a failure on CI. Runs with or without assets.

use std::process::{Command, Stdio};

fn run_without_assets(ci: Option<&str>) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kubeplug-envtest"));
    command
        .env_remove("KUBEBUILDER_ASSETS")
        .env_remove("KUBEPLUG_ENVTEST_ETCD")
        .env_remove("CI")
        .stdin(Stdio::null());
    if let Some(ci) = ci {
        command.env("CI", ci);
    }
    command.output().expect("the kubeplug-envtest binary runs")
}

#[test]
fn without_assets_one_line_says_what_is_skipped_and_how_to_provide_them() {
    for ci in [None, Some("false")] {
        let output = run_without_assets(ci);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with("kubeplug-envtest: skipping main and every later test"),
            "{stderr}"
        );
        assert!(stderr.contains("KUBEBUILDER_ASSETS"), "{stderr}");
        assert!(stderr.contains("KUBEPLUG_ENVTEST_ETCD"), "{stderr}");
    }
}

#[test]
fn with_ci_set_missing_assets_fail() {
    let output = run_without_assets(Some("true"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(101), "a panic: {stderr}");
    assert!(
        stderr.contains("CI is set, so the envtest tests must run"),
        "{stderr}"
    );
    assert!(stderr.contains("KUBEBUILDER_ASSETS is not set"), "{stderr}");
}
