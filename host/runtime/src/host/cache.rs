//! `kubeplug:plugin/cache`: reads from the informer caches, within the plugin's grants.

use std::sync::Arc;

use kubeplug_informer::indexer::{Indexer, NAMESPACE_INDEX};
use kubeplug_informer::object::Object;
use kubeplug_informer::selector::LabelSelector;

use super::check_len;
use crate::bindings::kubeplug::plugin::cache::Host;
use crate::bindings::wit::{CachedObject, Error, Gvk as WitGvk};
use crate::convert::cached;
use crate::gvk::Gvk;
use crate::state::StoreState;
use crate::status::PluginStats;

type Answer<T> = wasmtime::Result<Result<T, Error>>;

impl StoreState {
    /// The cache for `resource`, if the plugin may read it and an informer serves it.
    fn readable(&self, resource: WitGvk) -> Result<(Gvk, Indexer), Error> {
        let resource = Gvk::from(resource);
        if !self.host.policy.may_read(&resource) {
            PluginStats::add(&self.host.stats.denied, 1);
            return Err(Error::NotPermitted(format!(
                "plugin {} may not read {resource}: it neither subscribes to it nor has a read grant",
                self.host.plugin
            )));
        }
        match self.host.cache.indexer(&resource) {
            Some(indexer) => Ok((resource, indexer)),
            None => Err(Error::NotFound(format!("no informer serves {resource}"))),
        }
    }

    /// The informer's name of the plugin's index `index` on `resource`.
    fn index_name(&self, resource: &Gvk, index: &str) -> Result<String, Error> {
        check_len("index name", index)?;
        if index == NAMESPACE_INDEX {
            return Ok(NAMESPACE_INDEX.to_owned());
        }
        self.host
            .indexes
            .get(&(resource.clone(), index.to_owned()))
            .cloned()
            .ok_or_else(|| {
                Error::NotFound(format!(
                    "plugin {} declared no index {index:?} on {resource}",
                    self.host.plugin
                ))
            })
    }
}

fn objects(list: impl IntoIterator<Item = Arc<Object>>) -> Vec<CachedObject> {
    let mut list: Vec<Arc<Object>> = list.into_iter().collect();
    list.sort_by(|a, b| a.key().as_str().cmp(b.key().as_str()));
    list.iter().map(|o| cached(o)).collect()
}

impl Host for StoreState {
    fn get(&mut self, resource_type: WitGvk, key: String) -> Answer<Option<CachedObject>> {
        Ok((|| {
            check_len("key", &key)?;
            if key.is_empty() || key.split('/').count() > 2 || key.split('/').any(str::is_empty) {
                return Err(Error::InvalidInput(format!(
                    "key {key:?} is not `namespace/name` or `name`"
                )));
            }
            let (_, indexer) = self.readable(resource_type)?;
            Ok(indexer.get(&key).map(|o| cached(&o)))
        })())
    }

    fn list(
        &mut self,
        resource_type: WitGvk,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> Answer<Vec<CachedObject>> {
        Ok((|| {
            let selector = match &label_selector {
                Some(text) => {
                    check_len("label selector", text)?;
                    Some(LabelSelector::parse(text).map_err(|e| {
                        Error::InvalidInput(format!("label selector {text:?}: {e}"))
                    })?)
                }
                None => None,
            };
            if let Some(ns) = &namespace {
                check_len("namespace", ns)?;
            }
            let (_, indexer) = self.readable(resource_type)?;
            let found = match namespace.as_deref().filter(|ns| !ns.is_empty()) {
                Some(ns) => indexer.by_index(NAMESPACE_INDEX, ns).unwrap_or_else(|_| {
                    indexer
                        .list()
                        .into_iter()
                        .filter(|o| o.namespace() == Some(ns))
                        .collect()
                }),
                None => indexer.list(),
            };
            Ok(objects(found.into_iter().filter(|o| {
                selector.as_ref().is_none_or(|s| s.matches(&**o))
            })))
        })())
    }

    fn keys(&mut self, resource_type: WitGvk, namespace: Option<String>) -> Answer<Vec<String>> {
        Ok((|| {
            let (_, indexer) = self.readable(resource_type)?;
            let mut keys: Vec<String> = indexer
                .list_keys()
                .into_iter()
                .filter(|k| {
                    namespace
                        .as_deref()
                        .is_none_or(|ns| k.namespace() == Some(ns))
                })
                .map(|k| k.as_str().to_owned())
                .collect();
            keys.sort();
            Ok(keys)
        })())
    }

    fn by_index(
        &mut self,
        resource_type: WitGvk,
        index: String,
        value: String,
    ) -> Answer<Vec<CachedObject>> {
        Ok((|| {
            check_len("index value", &value)?;
            let (resource, indexer) = self.readable(resource_type)?;
            let name = self.index_name(&resource, &index)?;
            let found = indexer
                .by_index(&name, &value)
                .map_err(|e| Error::NotFound(format!("{resource}: {e}")))?;
            Ok(objects(found))
        })())
    }

    fn index_values(&mut self, resource_type: WitGvk, index: String) -> Answer<Vec<String>> {
        Ok((|| {
            let (resource, indexer) = self.readable(resource_type)?;
            let name = self.index_name(&resource, &index)?;
            let mut values = indexer
                .index_values(&name)
                .map_err(|e| Error::NotFound(format!("{resource}: {e}")))?;
            values.sort();
            Ok(values)
        })())
    }
}
