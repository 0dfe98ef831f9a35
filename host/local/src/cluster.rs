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
    #[error("{path} is not valid YAML ({source}); its objects are left as they were")]
    BadYaml {
        /// The file.
        path: PathBuf,
        /// The parser's error, with line and column.
        #[source]
        source: serde_yaml_ng::Error,
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
                Err(source) => report.errors.push(LocalError::BadYaml {
                    path: path.clone(),
                    source,
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
        metadata["creationTimestamp"] =
            stored.unwrap_or_else(|| kubeplug_memory::creation_timestamp().into());
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
    /// The memory server's source for `key`, its field selector checked against the type.
    fn source(&self, key: &InformerKey) -> Result<MemoryListerWatcher, FactoryError> {
        // Refused here, when the informer is made, rather than by every list it would try.
        SelectableFields::of(&key.resource)
            .check(&key.fields)
            .map_err(|message| FactoryError::SelectorRefused {
                key: key.to_string(),
                reason: format!("field selector {}: {message}", key.fields),
            })?;
        Ok(self.server.lister_watcher(
            key.resource.clone(),
            key.namespace.clone(),
            Some(key.labels.clone()),
            Some(key.fields.clone()),
        ))
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
fn parse_documents(bytes: &[u8]) -> Result<Vec<serde_json::Value>, serde_yaml_ng::Error> {
    let mut documents = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_slice(bytes) {
        let value = serde_json::Value::deserialize(document)?;
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
pub(crate) mod tests;
