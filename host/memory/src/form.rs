//! The metadata form of an object: `meta.k8s.io/v1` `PartialObjectMetadata`, what
//! kube-apiserver answers when asked with
//! `Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1` (client-go's
//! metadata informers, controller-runtime's `OnlyMetadata`, kube's `metadata_watcher`).
//! The fake API server answers in it over HTTP, and [`MemoryListerWatcher::metadata_only`]
//! in process, so that `--local` and the tests take the path a real server's answers take.
//!
//! [`MemoryListerWatcher::metadata_only`]: crate::MemoryListerWatcher::metadata_only

use bytes::Bytes;
use serde_json::value::RawValue;

/// The kind of one object in the metadata form.
pub const OBJECT_KIND: &str = "PartialObjectMetadata";
/// The kind of a list in the metadata form.
pub const LIST_KIND: &str = "PartialObjectMetadataList";
/// The group-version of both.
pub const META_API_VERSION: &str = "meta.k8s.io/v1";

/// `object` (JSON with `kind` and `apiVersion`) as a `PartialObjectMetadata`: its
/// `metadata`, as stored, managedFields included. An object whose metadata cannot be found
/// is returned whole.
pub fn partial_object_metadata(object: Bytes) -> Bytes {
    match metadata_of(&object) {
        Some(metadata) => Bytes::from(format!(
            "{{\"kind\":\"{OBJECT_KIND}\",\"apiVersion\":\"{META_API_VERSION}\",\"metadata\":{metadata}}}"
        )),
        None => object,
    }
}

/// The text of `object`'s `metadata`, read without building a tree.
fn metadata_of(object: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Metadata<'a> {
        #[serde(borrow)]
        metadata: &'a RawValue,
    }
    let found: Metadata<'_> = serde_json::from_slice(object).ok()?;
    Some(found.metadata.get().to_owned())
}
