//! The local cluster: a directory of YAML manifests served as a Kubernetes API.
//!
//! Every object in the directory's files is applied to an in-memory API server
//! ([`MemoryServer`]), which assigns resourceVersions and serves lists and watches exactly as
//! the informers expect. Editing, adding or deleting files produces the matching watch events.

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use kubeplug_informer::factory::{FactoryError, InformerKey, SourceProvider};
use kubeplug_informer::object::ObjectKey;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::selector::{FieldSelector, LabelSelector};
use kubeplug_informer::source::{ListerWatcher, Status};
use kubeplug_memory::{MemoryListerWatcher, MemoryServer, SelectableFields};
use serde::Deserialize as _;
use tracing::info;

use crate::kinds::KindRegistry;
use crate::watch::{ScanCounts, ScanReason};

/// The largest manifest file read: 16 MiB. The biggest published CRD bundles are a few MiB,
/// and a parsed YAML tree takes several times its text, so a larger file is a mistake (a log,
/// an archive, a link to a device) that would cost far more memory than any cluster needs.
pub const MAX_MANIFEST_BYTES: u64 = 16 << 20;

/// What went wrong with the directory or one of its manifests. None of these stops the
/// cluster: the rest of the directory is still served.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// The manifest directory cannot be listed.
    #[error("cannot read the manifest directory {path}: {source}")]
    ReadDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A manifest file cannot be read.
    #[error("cannot read {path}: {source}")]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A manifest is not a regular file (a FIFO, a socket, a link to a device) or is over
    /// [`MAX_MANIFEST_BYTES`]; the objects it had before stay as they were.
    #[error("{path} is not read: {reason}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A file is not valid YAML; the objects it had before stay as they were.
    #[error("{path} is not valid YAML ({reason}); its objects are left as they were")]
    BadYaml {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        reason: String,
    },
    /// One document of a file is not a Kubernetes object.
    #[error("{path}, document {document}: {reason}")]
    BadObject {
        /// The file.
        path: PathBuf,
        /// The document's position in the file, from 1.
        document: usize,
        /// What is wrong.
        reason: String,
    },
    /// A document's kind is not served: neither built in nor declared by a CRD in the directory.
    #[error(
        "{path}, document {document}: no resource serves {api_version} {kind}; add its \
         CustomResourceDefinition to the directory"
    )]
    UnknownKind {
        /// The file.
        path: PathBuf,
        /// The document's position in the file, from 1.
        document: usize,
        /// The object's `apiVersion`.
        api_version: String,
        /// The object's `kind`.
        kind: String,
    },
    /// Two files, or two documents of one file, declare the same object; the first one keeps it.
    #[error("{path} declares {resource} {key}, which {owner} already declares; keeping {owner}'s")]
    Duplicate {
        /// The later file.
        path: PathBuf,
        /// The object's resource.
        resource: String,
        /// The object's key.
        key: String,
        /// The file that declares it first.
        owner: PathBuf,
    },
    /// The in-memory server refused an object.
    #[error("{path}: the server refused {resource} {key}: {status}")]
    Refused {
        /// The file.
        path: PathBuf,
        /// The object's resource.
        resource: String,
        /// The object's key.
        key: String,
        /// What the server said.
        status: Box<Status>,
    },
}

/// An object's identity across files.
type ObjectId = (Resource, ObjectKey);

/// What one file contributed at its last successful parse.
#[derive(Default)]
struct FileObjects {
    /// Hash of the file's bytes: an unchanged file is not parsed again.
    content_hash: u64,
    /// The objects it declares, as JSON.
    objects: BTreeMap<ObjectId, String>,
}

#[derive(Default)]
struct State {
    registry: KindRegistry,
    files: HashMap<PathBuf, FileObjects>,
    /// Which file declares each object. Invariant: `owners[id] == f` if and only if
    /// `files[f].objects` has `id`.
    owners: HashMap<ObjectId, PathBuf>,
}

/// What one scan of the directory changed, and what it could not load.
#[derive(Debug, Default)]
pub struct ScanReport {
    /// Objects created or changed on the server.
    pub applied: usize,
    /// Objects deleted from the server.
    pub deleted: usize,
    /// Problems found, each naming its file.
    pub errors: Vec<LocalError>,
    /// Files written too recently to be taken as whole (a writer may have truncated one and
    /// not yet written it again) were left as they were: scan again after this long.
    pub recheck_after: Option<Duration>,
}

/// A directory of manifests served as a cluster. Cheap to clone.
///
/// Contract: after [`rescan`](Self::rescan) the server holds exactly the objects the
/// directory's readable manifests declare (first file wins on duplicates), plus whatever
/// clients wrote since and no file overrides; a file that fails to parse keeps its previous
/// objects, and while [`watch`](Self::watch) follows the directory, a file written less than
/// a moment ago keeps them until it settles. Namespaced objects without a namespace go to
/// `default`, as with kubectl.
#[derive(Clone)]
pub struct LocalCluster {
    /// The manifest directories and files served.
    roots: Vec<PathBuf>,
    server: MemoryServer,
    state: Arc<Mutex<State>>,
    scans: Arc<ScanCounts>,
}

impl std::fmt::Debug for LocalCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCluster")
            .field("roots", &self.roots)
            .finish()
    }
}

impl LocalCluster {
    /// Serves `dir`, loading it once. Fails only if the directory cannot be listed; problems
    /// with single files are in the report.
    pub fn open(dir: impl Into<PathBuf>) -> Result<(Self, ScanReport), LocalError> {
        Self::open_paths(vec![dir.into()])
    }

    /// Serves the manifests of several directories and files (a file is read whatever its
    /// extension), loading them once; no paths serve an empty cluster. Fails only if a path
    /// cannot be read; problems with single files are in the report.
    pub fn open_paths(roots: Vec<PathBuf>) -> Result<(Self, ScanReport), LocalError> {
        for root in &roots {
            let path = root.clone();
            if root.is_dir() {
                std::fs::read_dir(root).map_err(|source| LocalError::ReadDir { path, source })?;
            } else {
                std::fs::metadata(root).map_err(|source| LocalError::ReadFile { path, source })?;
            }
        }
        let cluster = Self {
            roots,
            server: MemoryServer::new(),
            state: Arc::default(),
            scans: Arc::default(),
        };
        let report = cluster.rescan(ScanReason::Start);
        Ok((cluster, report))
    }

    /// The in-memory API server behind the cluster (clients write to it directly).
    pub fn server(&self) -> &MemoryServer {
        &self.server
    }

    /// The manifest directories and files served.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// The kinds served now: the built-in ones and those the manifests' CRDs declare.
    pub fn registry(&self) -> KindRegistry {
        self.lock().registry.clone()
    }

    /// The resource serving `kind` at `api_version`, built in or declared by a CRD.
    pub fn resolve(&self, api_version: &str, kind: &str) -> Option<Resource> {
        self.lock().registry.resolve(api_version, kind).cloned()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("local cluster state poisoned by a panic")
    }

    /// How many scans ran, by reason.
    pub fn scan_counts(&self) -> Arc<ScanCounts> {
        self.scans.clone()
    }

    /// Brings the server in line with the directory, counting the scan under `reason`.
    /// Blocking file I/O: call it off the async threads (the watcher does).
    pub fn rescan(&self, reason: ScanReason) -> ScanReport {
        self.scan(reason, Duration::ZERO)
    }

    /// [`rescan`](Self::rescan), except that a file whose content changed less than `settle`
    /// ago is left as it was and named in [`ScanReport::recheck_after`]. Editors and
    /// `std::fs::write` truncate a file before writing it again; a scan in between would
    /// read it empty (or cut short) and delete its objects, only to create them again at the
    /// next scan, and every plugin would see both. A file whose mtime lies in the future is
    /// taken as it is: its age cannot be judged, and waiting could last forever.
    pub(crate) fn scan(&self, reason: ScanReason, settle: Duration) -> ScanReport {
        self.scans.count(reason);
        let mut report = ScanReport::default();
        let mut paths = Vec::new();
        for root in &self.roots {
            let collected = if root.is_dir() {
                collect_manifests(root, &mut paths)
            } else {
                paths.push(root.clone());
                Ok(())
            };
            if let Err(source) = collected {
                report.errors.push(LocalError::ReadDir {
                    path: root.clone(),
                    source,
                });
                return report;
            }
        }
        let mut state = self.lock();

        // Read what changed; parse it into documents.
        let mut changed: Vec<(PathBuf, u64, Vec<serde_json::Value>)> = Vec::new();
        for path in &paths {
            let Manifest { bytes, modified } = match read_manifest(path) {
                Ok(manifest) => manifest,
                Err(error) => {
                    report.errors.push(error);
                    continue;
                }
            };
            let hash = content_hash(&bytes);
            if state
                .files
                .get(path)
                .is_some_and(|f| f.content_hash == hash)
            {
                continue;
            }
            let age = modified.and_then(|m| SystemTime::now().duration_since(m).ok());
            if let Some(age) = age.filter(|age| *age < settle) {
                let wait = settle - age;
                report.recheck_after = Some(report.recheck_after.map_or(wait, |w| w.max(wait)));
                continue;
            }
            match parse_documents(&bytes) {
                Ok(documents) => changed.push((path.clone(), hash, documents)),
                Err(reason) => report.errors.push(LocalError::BadYaml {
                    path: path.clone(),
                    reason,
                }),
            }
        }
        // CRDs first, so that custom objects in any file resolve.
        for (_, _, documents) in &changed {
            for document in documents {
                if document["kind"] == "CustomResourceDefinition" {
                    state.registry.learn_crd(document);
                }
            }
        }

        let removed: Vec<PathBuf> = state
            .files
            .keys()
            .filter(|f| !paths.contains(f))
            .cloned()
            .collect();
        for path in removed {
            let old = state.files.remove(&path).unwrap_or_default();
            for id in old.objects.into_keys() {
                self.forget(&mut state, &path, id, &mut report);
            }
        }
        for (path, hash, documents) in changed {
            let objects = to_objects(&state.registry, &path, documents, &mut report);
            self.replace_file(&mut state, path, hash, objects, &mut report);
        }
        report
    }

    /// Applies a file's new objects and deletes the ones it no longer declares.
    fn replace_file(
        &self,
        state: &mut State,
        path: PathBuf,
        hash: u64,
        objects: BTreeMap<ObjectId, String>,
        report: &mut ScanReport,
    ) {
        let old = state.files.remove(&path).unwrap_or_default();
        let mut kept = BTreeMap::new();
        for (id, json) in objects {
            if let Some(owner) = state.owners.get(&id).filter(|o| **o != path) {
                report.errors.push(LocalError::Duplicate {
                    path: path.clone(),
                    resource: id.0.to_string(),
                    key: id.1.to_string(),
                    owner: owner.clone(),
                });
                continue;
            }
            if old.objects.get(&id) != Some(&json) {
                match self
                    .server
                    .apply(&id.0, &self.with_creation_timestamp(&id, &json))
                {
                    Ok(written) => {
                        info!(file = %path.display(), resource = %id.0, key = %written.key, rv = written.resource_version, "local cluster: applied");
                        report.applied += 1;
                    }
                    Err(status) => {
                        report.errors.push(LocalError::Refused {
                            path: path.clone(),
                            resource: id.0.to_string(),
                            key: id.1.to_string(),
                            status: Box::new(status),
                        });
                        continue;
                    }
                }
            }
            state.owners.insert(id.clone(), path.clone());
            kept.insert(id, json);
        }
        for id in old.objects.into_keys() {
            if !kept.contains_key(&id) {
                self.forget(state, &path, id, report);
            }
        }
        state.files.insert(
            path,
            FileObjects {
                content_hash: hash,
                objects: kept,
            },
        );
    }

    /// `json` with `metadata.creationTimestamp`, as the API server sets it on create: the
    /// stored object's when there is one (editing a file does not make its object new), else
    /// now. A manifest that sets its own keeps it.
    fn with_creation_timestamp(&self, id: &ObjectId, json: &str) -> String {
        let Ok(mut object) = serde_json::from_str::<serde_json::Value>(json) else {
            return json.to_owned();
        };
        let metadata = &mut object["metadata"];
        if !metadata.is_object() || metadata.get("creationTimestamp").is_some() {
            return json.to_owned();
        }
        let stored = self
            .server
            .get(&id.0, &id.1)
            .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
            .and_then(|stored| stored["metadata"].get("creationTimestamp").cloned());
        metadata["creationTimestamp"] = stored.unwrap_or_else(|| {
            let now = jiff::Timestamp::now().as_second();
            let now = jiff::Timestamp::from_second(now).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
            serde_json::Value::from(now.to_string())
        });
        object.to_string()
    }

    /// Deletes an object `path` declared, unless another file owns it.
    fn forget(&self, state: &mut State, path: &Path, id: ObjectId, report: &mut ScanReport) {
        if state.owners.get(&id).is_some_and(|owner| owner != path) {
            return;
        }
        state.owners.remove(&id);
        match self.server.delete(&id.0, &id.1) {
            Ok(_) => {
                info!(file = %path.display(), resource = %id.0, key = %id.1, "local cluster: deleted");
                report.deleted += 1;
            }
            // Already gone: a client deleted it meanwhile.
            Err(status) if status.code == 404 => {}
            Err(status) => report.errors.push(LocalError::Refused {
                path: path.to_owned(),
                resource: id.0.to_string(),
                key: id.1.to_string(),
                status: Box::new(status),
            }),
        }
    }
}

impl LocalCluster {
    /// The memory server's source for `key`, its selectors checked.
    fn source(&self, key: &InformerKey) -> Result<MemoryListerWatcher, FactoryError> {
        let unavailable = |reason: String| FactoryError::SourceUnavailable {
            key: key.to_string(),
            reason,
        };
        let labels = key
            .label_selector
            .as_deref()
            .map(LabelSelector::parse)
            .transpose()
            .map_err(|e| unavailable(e.to_string()))?;
        let fields = key
            .field_selector
            .as_deref()
            .map(FieldSelector::parse)
            .transpose()
            .map_err(|e| unavailable(e.to_string()))?;
        // Refused here, when the informer is made, rather than by every list it would try.
        if let Some(fields) = &fields {
            SelectableFields::of(&key.resource)
                .check(fields)
                .map_err(|message| unavailable(format!("field selector {fields}: {message}")))?;
        }
        Ok(self
            .server
            .lister_watcher(key.resource.clone(), key.namespace.clone(), labels, fields))
    }
}

impl SourceProvider for LocalCluster {
    fn lister_watcher(&self, key: &InformerKey) -> Result<Arc<dyn ListerWatcher>, FactoryError> {
        Ok(Arc::new(self.source(key)?))
    }

    fn metadata_lister_watcher(
        &self,
        key: &InformerKey,
    ) -> Result<Option<Arc<dyn ListerWatcher>>, FactoryError> {
        Ok(Some(Arc::new(self.source(key)?.metadata_only())))
    }
}

/// A manifest file as one scan read it.
struct Manifest {
    bytes: Vec<u8>,
    /// When it was last written, where the file system keeps that.
    modified: Option<SystemTime>,
}

/// The manifest `path`, if it is a regular file of at most [`MAX_MANIFEST_BYTES`]. The bound
/// is applied while reading too, as the file may grow or be replaced between the check and
/// the read.
fn read_manifest(path: &Path) -> Result<Manifest, LocalError> {
    use std::io::Read as _;
    let unreadable = |reason: String| LocalError::Unreadable {
        path: path.to_owned(),
        reason,
    };
    let read_error = |source| LocalError::ReadFile {
        path: path.to_owned(),
        source,
    };
    // Checked before opening: opening a FIFO would wait for a writer.
    if !std::fs::metadata(path).map_err(read_error)?.is_file() {
        return Err(unreadable("it is not a regular file".to_owned()));
    }
    let file = std::fs::File::open(path).map_err(read_error)?;
    let metadata = file.metadata().map_err(read_error)?;
    let too_large = |size: u64| {
        unreadable(format!(
            "it is {size} bytes, more than the {MAX_MANIFEST_BYTES} a manifest file may have"
        ))
    };
    if metadata.len() > MAX_MANIFEST_BYTES {
        return Err(too_large(metadata.len()));
    }
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    (&file)
        .take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    // Asked after reading, so that a write during the read counts as recent.
    let modified = file.metadata().map_err(read_error)?.modified().ok();
    Ok(Manifest { bytes, modified })
}

/// Manifest files under `dir`, recursively; hidden entries and other extensions are skipped.
fn collect_manifests(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        if hidden {
            continue;
        }
        let kind = entry.file_type()?;
        if kind.is_dir() {
            collect_manifests(&path, out)?;
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            out.push(path);
        }
    }
    out.sort();
    Ok(())
}

fn content_hash(bytes: &[u8]) -> u64 {
    let mut hasher = DefaultHasher::new();
    bytes.hash(&mut hasher);
    hasher.finish()
}

/// The documents of a YAML (or JSON) file; empty documents are dropped and `List`s expanded.
fn parse_documents(bytes: &[u8]) -> Result<Vec<serde_json::Value>, String> {
    let mut documents = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_slice(bytes) {
        let value = serde_json::Value::deserialize(document).map_err(|e| e.to_string())?;
        match value {
            serde_json::Value::Null => {}
            serde_json::Value::Object(ref map)
                if map.get("kind").and_then(|k| k.as_str()) == Some("List") =>
            {
                let items = map.get("items").and_then(|i| i.as_array()).cloned();
                documents.extend(items.unwrap_or_default());
            }
            value => documents.push(value),
        }
    }
    Ok(documents)
}

/// Turns documents into objects keyed by identity; bad documents are reported and skipped.
fn to_objects(
    registry: &KindRegistry,
    path: &Path,
    documents: Vec<serde_json::Value>,
    report: &mut ScanReport,
) -> BTreeMap<ObjectId, String> {
    let mut objects = BTreeMap::new();
    for (index, mut document) in documents.into_iter().enumerate() {
        let bad = |reason: &str| LocalError::BadObject {
            path: path.to_owned(),
            document: index + 1,
            reason: reason.to_owned(),
        };
        let (Some(api_version), Some(kind)) = (
            document["apiVersion"].as_str().map(str::to_owned),
            document["kind"].as_str().map(str::to_owned),
        ) else {
            report.errors.push(bad("apiVersion and kind are required"));
            continue;
        };
        let Some(resource) = registry.resolve(&api_version, &kind).cloned() else {
            report.errors.push(LocalError::UnknownKind {
                path: path.to_owned(),
                document: index + 1,
                api_version,
                kind,
            });
            continue;
        };
        let Some(name) = document["metadata"]["name"].as_str().map(str::to_owned) else {
            report.errors.push(bad("metadata.name is required"));
            continue;
        };
        let metadata = document["metadata"]
            .as_object_mut()
            .expect("metadata has a name, so it is an object");
        let namespace = scope_namespace(&resource, metadata);
        let key = ObjectKey::new(namespace.as_deref(), &name);
        // Within a file as across files, the first declaration wins and a later one is reported.
        match objects.entry((resource, key)) {
            std::collections::btree_map::Entry::Vacant(entry) => {
                entry.insert(document.to_string());
            }
            std::collections::btree_map::Entry::Occupied(entry) => {
                let (resource, key) = entry.key();
                report.errors.push(LocalError::Duplicate {
                    path: path.to_owned(),
                    resource: resource.to_string(),
                    key: key.to_string(),
                    owner: path.to_owned(),
                });
            }
        }
    }
    objects
}

/// Gives `metadata` the namespace its resource's scope calls for, as `kubectl apply` does: a
/// namespaced object without one goes to `default`, a cluster-scoped one loses any it has.
/// Returns the namespace.
pub fn scope_namespace(
    resource: &Resource,
    metadata: &mut serde_json::Map<String, serde_json::Value>,
) -> Option<String> {
    if resource.namespaced {
        let namespace = metadata
            .entry("namespace")
            .or_insert_with(|| "default".into());
        Some(namespace.as_str().unwrap_or("default").to_owned())
    } else {
        metadata.remove("namespace");
        None
    }
}

#[cfg(test)]
pub(crate) mod tests {
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
            field_selector: Some("spec.nodeName=n2".into()),
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
            field_selector: Some("status.replicas=1".into()),
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
        assert!(
            messages[0].contains("document 1") && messages[0].contains("example.com/v1 Widget")
        );
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
}
