//! Custom indexes declared as data (`index-spec`) and evaluated by the host.

use kubeplug_informer::indexer::IndexSpec;

use crate::description::IndexSource;

/// The informer index for a declared source. Same source, same name: plugins share it.
pub fn informer_spec(source: &IndexSource) -> IndexSpec {
    match source {
        IndexSource::Label(key) => IndexSpec::Label(key.clone()),
        IndexSource::OwnerUid => IndexSpec::OwnerUid,
        IndexSource::Path(path) => IndexSpec::Path(path.clone()),
    }
}
