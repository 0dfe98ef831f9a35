//! Checks for the local cluster's manifest loader: the files of its directory are written by
//! people and tools, not by the API server, and may hold anything.

use std::path::PathBuf;
use std::sync::OnceLock;

use kubeplug_local::{LocalCluster, LocalError};
use serde::Deserialize as _;
use serde_json::Value;

/// One directory per process, reused: the fuzzer writes the manifest file again for each
/// input, and a fresh cluster reads it.
fn manifest_dir() -> &'static tempfile::TempDir {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("a temporary directory"))
}

/// A manifest file's bytes, loaded into a fresh local cluster.
///
/// Properties: loading never panics; every error names the file; every object served has a
/// name and (when namespaced) a namespace that match its key; and no document is lost in
/// silence: each document the reference YAML reader finds (lists expanded, empty documents
/// dropped) is either applied or reported, and a file that is not YAML is reported as such
/// with nothing applied.
pub fn local_manifest(data: &[u8]) {
    let path: PathBuf = manifest_dir().path().join("manifest.yaml");
    std::fs::write(&path, data).expect("writing the manifest");
    let (cluster, report) = LocalCluster::open(manifest_dir().path()).expect("the directory");

    let path_text = path.display().to_string();
    for error in &report.errors {
        assert!(error.to_string().contains(&path_text), "{error}");
    }

    let mut served = 0;
    for resource in cluster.registry().resources() {
        for (key, json) in cluster.server().snapshot(resource) {
            served += 1;
            let object: Value = serde_json::from_slice(&json).expect("served objects are JSON");
            let metadata = &object["metadata"];
            assert_eq!(metadata["name"].as_str(), Some(key.name()), "{key}");
            let namespace = metadata["namespace"].as_str();
            if resource.namespaced {
                assert_eq!(namespace, key.namespace(), "{key}");
            } else {
                assert_eq!((namespace, key.namespace()), (None, None), "{key}");
            }
        }
    }
    assert_eq!(
        served, report.applied,
        "objects served against objects applied"
    );

    match reference_documents(data) {
        Some(documents) => {
            let per_document = report
                .errors
                .iter()
                .filter(|e| !matches!(e, LocalError::BadYaml { .. }))
                .count();
            assert_eq!(
                report.applied + per_document,
                documents,
                "each document is applied or reported: {:?}",
                report.errors
            );
        }
        None => {
            assert_eq!(report.applied, 0);
            assert!(
                report
                    .errors
                    .iter()
                    .any(|e| matches!(e, LocalError::BadYaml { .. })),
                "a file that is not YAML is reported: {:?}",
                report.errors
            );
        }
    }
}

/// How many documents the file holds (empty ones dropped, `kind: List` expanded), or `None`
/// if it is not YAML that maps onto JSON.
fn reference_documents(data: &[u8]) -> Option<usize> {
    let mut count = 0;
    for document in serde_yaml_ng::Deserializer::from_slice(data) {
        match Value::deserialize(document).ok()? {
            Value::Null => {}
            Value::Object(map) if map.get("kind").is_some_and(|k| k == "List") => {
                count += map
                    .get("items")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len);
            }
            _ => count += 1,
        }
    }
    Some(count)
}
