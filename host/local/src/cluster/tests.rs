//! Tests of the local cluster, and the helpers `watch`'s tests share: loading a directory
//! of manifests into the in-memory server.

use kubeplug_informer::source::ListRequest;

use super::*;

pub(crate) fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

pub(crate) fn deployments() -> Resource {
    Resource::new("apps", "v1", "Deployment", "deployments", true)
}

fn keys(cluster: &LocalCluster, resource: &Resource) -> Vec<String> {
    cluster
        .server()
        .snapshot(resource)
        .into_keys()
        .map(|k| k.to_string())
        .collect()
}

const TWO_DEPLOYMENTS: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
  namespace: team-a
";

#[test]
fn loads_multi_document_files_and_defaults_the_namespace() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "apps.yaml", TWO_DEPLOYMENTS);
    write(
        dir.path(),
        "ns.yml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-a\n  namespace: ignored\n",
    );
    write(dir.path(), "notes.txt", "not a manifest");
    write(dir.path(), ".hidden.yaml", "garbage: [");
    let (cluster, report) = LocalCluster::open(dir.path()).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.applied, 3);
    assert_eq!(
        keys(&cluster, &deployments()),
        ["default/web", "team-a/api"]
    );
    let namespaces = Resource::new("", "v1", "Namespace", "namespaces", false);
    assert_eq!(keys(&cluster, &namespaces), ["team-a"]);
}

/// A subscription's field selector selects on what kube-apiserver selects the type on;
/// one naming a field the type lacks is refused when its informer is made, naming both.
#[tokio::test]
async fn field_selectors_select_as_kube_apiserver_does() {
    let dir = tempfile::tempdir().unwrap();
    let pod = |name: &str, node: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\n\
             spec: {{nodeName: {node}, containers: [{{name: c, image: busybox}}]}}\n---\n"
        )
    };
    write(
        dir.path(),
        "pods.yaml",
        &(pod("a", "n1") + &pod("b", "n2") + TWO_DEPLOYMENTS),
    );
    let (cluster, report) = LocalCluster::open(dir.path()).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let pods = Resource::new("", "v1", "Pod", "pods", true);
    let on_node = InformerKey {
        fields: "spec.nodeName=n2".parse().unwrap(),
        ..InformerKey::all(pods)
    };
    let page = SourceProvider::lister_watcher(&cluster, &on_node)
        .unwrap()
        .list(ListRequest::default())
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
    assert!(
        String::from_utf8_lossy(&page.items[0]).contains(r#""name":"b""#),
        "{:?}",
        page.items[0]
    );

    let lacking = InformerKey {
        fields: "status.replicas=1".parse().unwrap(),
        ..InformerKey::all(deployments())
    };
    let Err(error) = SourceProvider::lister_watcher(&cluster, &lacking) else {
        panic!("Deployments have no status.replicas field selector");
    };
    let error = error.to_string();
    assert!(
        error.contains("field selector status.replicas=1")
            && error.contains(r#""status.replicas" is not a known field selector"#),
        "{error}"
    );
}

#[test]
fn files_and_directories_are_served_together() {
    let dir = tempfile::tempdir().unwrap();
    let apps = dir.path().join("apps");
    std::fs::create_dir(&apps).unwrap();
    write(&apps, "apps.yaml", TWO_DEPLOYMENTS);
    // A file named explicitly is read whatever its extension.
    write(
        dir.path(),
        "fixture.txt",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: extra\n",
    );
    let (cluster, report) =
        LocalCluster::open_paths(vec![apps, dir.path().join("fixture.txt")]).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(
        keys(&cluster, &deployments()),
        ["default/extra", "default/web", "team-a/api"]
    );
    let (empty, _) = LocalCluster::open_paths(Vec::new()).unwrap();
    assert!(empty.resolve("apps/v1", "Deployment").is_some());
    let missing = LocalCluster::open_paths(vec![dir.path().join("missing.yaml")])
        .unwrap_err()
        .to_string();
    assert!(missing.contains("missing.yaml"), "{missing}");
}

#[test]
fn oversized_manifests_and_links_to_devices_are_refused_and_named() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "apps.yaml", TWO_DEPLOYMENTS);
    let (cluster, report) = LocalCluster::open(dir.path()).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    // Sparse: over the bound without writing it.
    let huge = std::fs::File::create(dir.path().join("huge.yaml")).unwrap();
    huge.set_len(MAX_MANIFEST_BYTES + 1).unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero.yaml")).unwrap();
    let report = cluster.rescan(ScanReason::Requested);
    let mut messages: Vec<String> = report.errors.iter().map(ToString::to_string).collect();
    messages.sort();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert!(
        messages[0].contains("huge.yaml")
            && messages[0].contains(&format!(
                "{} bytes, more than the {MAX_MANIFEST_BYTES}",
                MAX_MANIFEST_BYTES + 1
            )),
        "{}",
        messages[0]
    );
    assert!(
        messages[1].contains("zero.yaml") && messages[1].contains("not a regular file"),
        "{}",
        messages[1]
    );
    assert_eq!(
        keys(&cluster, &deployments()).len(),
        2,
        "the good file is still served"
    );
}

/// As the API server does on create: kubectl's AGE column reads it. An edit of the file
/// keeps it; a manifest's own is kept.
#[test]
fn objects_get_a_creation_timestamp_that_edits_keep() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "apps.yaml", TWO_DEPLOYMENTS);
    let (cluster, _) = LocalCluster::open(dir.path()).unwrap();
    let created = |name: &str| {
        let stored = cluster
            .server()
            .get(&deployments(), &ObjectKey::new(Some("default"), name))
            .unwrap();
        let stored: serde_json::Value = serde_json::from_slice(&stored).unwrap();
        stored["metadata"]["creationTimestamp"]
            .as_str()
            .map(str::to_owned)
    };
    let first = created("web").expect("a creationTimestamp");
    assert!(first.parse::<jiff::Timestamp>().is_ok(), "{first}");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    write(
        dir.path(),
        "apps.yaml",
        &TWO_DEPLOYMENTS.replace("replicas: 1", "replicas: 2"),
    );
    cluster.rescan(ScanReason::Requested);
    assert_eq!(created("web"), Some(first));
    write(
        dir.path(),
        "old.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: old\n  \
         creationTimestamp: \"2020-01-01T00:00:00Z\"\n",
    );
    cluster.rescan(ScanReason::Requested);
    assert_eq!(created("old").as_deref(), Some("2020-01-01T00:00:00Z"));
}

/// The flake this fixed: a scan between `std::fs::write`'s truncation and its write read
/// the file empty and deleted its Deployment, then created it again.
#[test]
fn a_file_caught_halfway_through_a_write_keeps_its_objects_until_it_settles() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "apps.yaml", TWO_DEPLOYMENTS);
    let (cluster, _) = LocalCluster::open(dir.path()).unwrap();
    let path = dir.path().join("apps.yaml");
    let both = vec!["default/web".to_owned(), "team-a/api".to_owned()];
    let settle = Duration::from_secs(60);
    let written_ago = |ago: Duration| {
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(SystemTime::now() - ago).unwrap();
    };

    // Truncated, then cut off inside the second document: both left as they were.
    std::fs::File::create(&path).unwrap();
    let report = cluster.scan(ScanReason::Event, settle);
    assert_eq!((report.applied, report.deleted), (0, 0));
    assert!(report.recheck_after.is_some_and(|wait| wait <= settle));
    assert_eq!(keys(&cluster, &deployments()), both);
    write(dir.path(), "apps.yaml", &TWO_DEPLOYMENTS[..100]);
    let report = cluster.scan(ScanReason::Retry, settle);
    assert_eq!((report.applied, report.deleted), (0, 0));
    assert_eq!(keys(&cluster, &deployments()), both);

    // Settled as it is: taken as it is.
    written_ago(settle);
    let report = cluster.scan(ScanReason::Retry, settle);
    assert_eq!((report.deleted, report.recheck_after), (1, None));
    assert_eq!(keys(&cluster, &deployments()), ["default/web"]);

    // A recent file elsewhere does not hold back a settled one, and an mtime in the
    // future (a copy from a skewed clock) is taken at once.
    write(dir.path(), "apps.yaml", "");
    written_ago(settle * 2);
    write(dir.path(), "more.yaml", TWO_DEPLOYMENTS);
    let report = cluster.scan(ScanReason::Event, settle);
    assert_eq!((report.applied, report.deleted), (0, 1));
    assert!(report.recheck_after.is_some());
    let file = std::fs::File::options()
        .write(true)
        .open(dir.path().join("more.yaml"));
    file.unwrap()
        .set_modified(SystemTime::now() + settle)
        .unwrap();
    let report = cluster.scan(ScanReason::Retry, settle);
    assert_eq!((report.applied, report.recheck_after), (2, None));
    assert_eq!(keys(&cluster, &deployments()), both);
}

#[test]
fn edits_additions_and_deletions_reach_the_server() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "apps.yaml", TWO_DEPLOYMENTS);
    let (cluster, _) = LocalCluster::open(dir.path()).unwrap();
    let rv_before = cluster.server().current_resource_version();

    // Unchanged files are not re-applied.
    let report = cluster.rescan(ScanReason::Requested);
    assert_eq!((report.applied, report.deleted), (0, 0));
    assert_eq!(cluster.server().current_resource_version(), rv_before);

    // Drop one document, change the other, add a file.
    write(
        dir.path(),
        "apps.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 3\n",
    );
    write(
        dir.path(),
        "more.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  a: b\n",
    );
    let report = cluster.rescan(ScanReason::Requested);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!((report.applied, report.deleted), (2, 1));
    assert_eq!(keys(&cluster, &deployments()), ["default/web"]);
    let web = cluster
        .server()
        .get(&deployments(), &"default/web".into())
        .unwrap();
    let web: serde_json::Value = serde_json::from_slice(&web).unwrap();
    assert_eq!(web["spec"]["replicas"], 3);

    std::fs::remove_file(dir.path().join("more.yaml")).unwrap();
    let report = cluster.rescan(ScanReason::Requested);
    assert_eq!(report.deleted, 1);
    let configmaps = Resource::new("", "v1", "ConfigMap", "configmaps", true);
    assert!(keys(&cluster, &configmaps).is_empty());
}

#[test]
fn a_broken_edit_keeps_the_old_objects_and_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "apps.yaml", TWO_DEPLOYMENTS);
    let (cluster, _) = LocalCluster::open(dir.path()).unwrap();
    write(
        dir.path(),
        "apps.yaml",
        "apiVersion: apps/v1\nkind: [unclosed\n",
    );
    let report = cluster.rescan(ScanReason::Requested);
    assert_eq!(report.errors.len(), 1);
    let message = report.errors[0].to_string();
    assert!(
        message.contains("apps.yaml") && message.contains("not valid YAML"),
        "{message}"
    );
    assert_eq!(keys(&cluster, &deployments()).len(), 2, "nothing lost");
}

#[test]
fn bad_documents_are_skipped_with_errors_naming_file_and_document() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "mixed.yaml",
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n---\nkind: ConfigMap\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: ok\n",
    );
    let (cluster, report) = LocalCluster::open(dir.path()).unwrap();
    let messages: Vec<String> = report.errors.iter().map(ToString::to_string).collect();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert!(messages[0].contains("document 1") && messages[0].contains("example.com/v1 Widget"));
    assert!(messages[1].contains("document 2") && messages[1].contains("apiVersion and kind"));
    assert_eq!(keys(&cluster, &deployments()), ["default/ok"]);
}

#[test]
fn a_crd_in_the_directory_makes_its_kind_servable() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "a-widget.yaml",
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n",
    );
    write(
        dir.path(),
        "z-crd.yaml",
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.example.com\nspec:\n  group: example.com\n  scope: Namespaced\n  names: {kind: Widget, plural: widgets}\n  versions: [{name: v1, served: true, storage: true}]\n",
    );
    let (cluster, report) = LocalCluster::open(dir.path()).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let widgets = cluster.resolve("example.com/v1", "Widget").unwrap();
    assert_eq!(keys(&cluster, &widgets), ["default/w"]);
}

#[test]
fn the_first_file_keeps_a_duplicated_object() {
    let dir = tempfile::tempdir().unwrap();
    let web = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n";
    write(dir.path(), "a.yaml", web);
    write(dir.path(), "b.yaml", web);
    let (cluster, report) = LocalCluster::open(dir.path()).unwrap();
    assert_eq!(report.errors.len(), 1);
    assert!(
        report.errors[0]
            .to_string()
            .contains("b.yaml declares apps/v1/deployments default/web")
    );
    std::fs::remove_file(dir.path().join("b.yaml")).unwrap();
    cluster.rescan(ScanReason::Requested);
    assert_eq!(
        keys(&cluster, &deployments()),
        ["default/web"],
        "a.yaml still declares it"
    );
}

#[test]
fn the_example_cluster_loads_cleanly() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/cluster");
    let (cluster, report) = LocalCluster::open(&dir).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(report.applied >= 6);
    assert_eq!(
        keys(&cluster, &deployments()),
        ["team-a/api", "team-a/web", "team-a/worker"]
    );
}

#[test]
fn a_missing_directory_is_an_error_naming_it() {
    let error = LocalCluster::open("/nonexistent/kubeplug-manifests").unwrap_err();
    assert!(
        error
            .to_string()
            .contains("/nonexistent/kubeplug-manifests")
    );
}
