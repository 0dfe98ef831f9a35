//! `kubeplug:plugin/cache`: reads from the informer caches, within the plugin's grants.

use std::sync::Arc;

use kubeplug_informer::indexer::{Indexer, IndexerError, NAMESPACE_INDEX};
use kubeplug_informer::object::Object;
use kubeplug_informer::selector::LabelSelector;

use super::{check_answer, check_len};
use crate::bindings::kubeplug::plugin::cache::Host;
use crate::bindings::wit::{
    CachedObject, Error, Gvk as WitGvk, ProjectedObject, Projection as WitProjection,
};
use crate::convert::{cached, meta_size, projected_object, value_size};
use crate::description::{ProjectionListError, Projections};
use crate::gvk::Gvk;
use crate::state::StoreState;
use crate::status::PluginStats;

type Answer<T> = wasmtime::Result<Result<T, Error>>;

impl StoreState {
    /// The cache for `resource`, if the plugin may read it and an informer serves it.
    fn readable(&self, resource: WitGvk) -> Result<(Gvk, Indexer), Error> {
        let resource = super::checked_gvk(resource)?;
        if !self.host.policy.may_read(&resource) {
            PluginStats::add(&self.host.stats.denied, 1);
            return Err(Error::NotPermitted(format!(
                "plugin {} may not read {resource}: it does not both declare the read (a \
                 subscription, `reads`, an index) and have a grant for it",
                self.host.plugin
            )));
        }
        match self.host.caches.get(&resource) {
            Some(cache) if !cache.has_synced() => Err(Error::Unavailable(format!(
                "the cache of {resource} has not synced yet; try again later"
            ))),
            Some(cache) => Ok((resource, cache.indexer().clone())),
            None => Err(Error::NotFound(format!("no informer serves {resource}"))),
        }
    }

    /// Refuses a projected read of `resource` unless the plugin declared that it reads the
    /// objects' bodies: without that the host may hold metadata only.
    fn check_bodies(&self, resource: &Gvk) -> Result<(), Error> {
        if self.host.policy.reads_bodies(resource) {
            return Ok(());
        }
        PluginStats::add(&self.host.stats.denied, 1);
        Err(Error::NotPermitted(format!(
            "plugin {} reads {resource} without bodies: to read it through projections, \
             declare a read of it with wants-object-json",
            self.host.plugin
        )))
    }

    /// The projections a call asks for, checked as a subscription's are: at most
    /// `max_projections`, names unique, each name and path by
    /// [`Projection::parse`](crate::description::Projection::parse).
    fn call_projections(&self, projections: Vec<WitProjection>) -> Result<Projections, Error> {
        let bound = self.host.max_projections;
        Projections::parse_list(projections, bound).map_err(|error| {
            Error::InvalidInput(match error {
                ProjectionListError::TooMany { count } => {
                    format!("projections: {count} entries; at most {bound} (max_projections)")
                }
                ProjectionListError::Invalid {
                    projection,
                    field,
                    reason,
                } => format!("projections[{projection}].{field}: {reason}"),
            })
        })
    }

    /// The objects of `resource_type` in `namespace` (all when `None` or empty) matching
    /// `label_selector`, unsorted, with the checked type.
    fn listed(
        &self,
        resource_type: WitGvk,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> Result<(Gvk, Vec<Arc<Object>>), Error> {
        let selector =
            match &label_selector {
                Some(text) => {
                    check_len("label selector", text)?;
                    Some(LabelSelector::parse(text).map_err(|e| {
                        Error::InvalidInput(format!("label selector {text:?}: {e}"))
                    })?)
                }
                None => None,
            };
        if let Some(ns) = namespace.as_deref().filter(|ns| !ns.is_empty()) {
            check_len("namespace", ns)?;
            super::check_namespace(ns)?;
        }
        let (resource, indexer) = self.readable(resource_type)?;
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
        let matching = found
            .into_iter()
            .filter(|o| selector.as_ref().is_none_or(|s| s.matches(&**o)))
            .collect();
        Ok((resource, matching))
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

/// A failed index read as the guest sees it: an index that broke is `unavailable` (the host
/// logged why); one that does not exist is `not-found`.
fn index_error(resource: &Gvk, error: &IndexerError) -> Error {
    match error {
        IndexerError::IndexFailed { .. } => Error::Unavailable(format!("{resource}: {error}")),
        _ => Error::NotFound(format!("{resource}: {error}")),
    }
}

/// `list` sorted by key, as the guest gets them, with their JSON or metadata only; `call`
/// names the call if the answer is over the bound.
fn objects(
    call: &str,
    list: impl IntoIterator<Item = Arc<Object>>,
    with_json: bool,
) -> Result<Vec<CachedObject>, Error> {
    let mut list: Vec<Arc<Object>> = list.into_iter().collect();
    check_answer(
        call,
        list.iter()
            .map(|o| meta_size(o) + if with_json { o.json().len() } else { 0 }),
    )?;
    list.sort_by(|a, b| a.key().as_str().cmp(b.key().as_str()));
    Ok(list.iter().map(|o| cached(o, with_json)).collect())
}

/// `key` when it is `namespace/name` or `name`.
fn check_key(key: &str) -> Result<(), Error> {
    check_len("key", key)?;
    if key.is_empty() || key.split('/').count() > 2 || key.split('/').any(str::is_empty) {
        return Err(Error::InvalidInput(format!(
            "key {key:?} is not `namespace/name` or `name`"
        )));
    }
    Ok(())
}

/// `list` sorted by key and read through `projections`; `call` names the call if the answer
/// is over the bound. Projections may select more than the objects' JSON (several of the
/// same large field), so the answer is counted as it is built and abandoned at the bound.
fn projected_objects(
    call: &str,
    mut list: Vec<Arc<Object>>,
    projections: &Projections,
) -> Result<Vec<ProjectedObject>, Error> {
    list.sort_by(|a, b| a.key().as_str().cmp(b.key().as_str()));
    let mut answer = Vec::with_capacity(list.len());
    let mut total = 0;
    for object in &list {
        let projected = projected_object(object, projections);
        let values: usize = projected
            .projected
            .iter()
            .flat_map(|p| &p.values)
            .map(value_size)
            .sum();
        total += meta_size(object) + values;
        check_answer(call, [total])?;
        answer.push(projected);
    }
    Ok(answer)
}

impl Host for StoreState {
    fn get(&mut self, resource_type: WitGvk, key: String) -> Answer<Option<CachedObject>> {
        Ok((|| {
            check_key(&key)?;
            let (resource, indexer) = self.readable(resource_type)?;
            let with_json = self.host.policy.reads_json(&resource);
            Ok(indexer.get(key.as_str()).map(|o| cached(&o, with_json)))
        })())
    }

    fn list(
        &mut self,
        resource_type: WitGvk,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> Answer<Vec<CachedObject>> {
        Ok((|| {
            let (resource, matching) = self.listed(resource_type, namespace, label_selector)?;
            let with_json = self.host.policy.reads_json(&resource);
            objects(&format!("list of {resource}"), matching, with_json)
        })())
    }

    fn get_projected(
        &mut self,
        resource_type: WitGvk,
        key: String,
        projections: Vec<WitProjection>,
    ) -> Answer<Option<ProjectedObject>> {
        Ok((|| {
            check_key(&key)?;
            let projections = self.call_projections(projections)?;
            let (resource, indexer) = self.readable(resource_type)?;
            self.check_bodies(&resource)?;
            let found = indexer.get(key.as_str()).into_iter().collect();
            let call = format!("get-projected of {resource} {key}");
            Ok(projected_objects(&call, found, &projections)?.pop())
        })())
    }

    fn list_projected(
        &mut self,
        resource_type: WitGvk,
        namespace: Option<String>,
        label_selector: Option<String>,
        projections: Vec<WitProjection>,
    ) -> Answer<Vec<ProjectedObject>> {
        Ok((|| {
            let projections = self.call_projections(projections)?;
            let (resource, matching) = self.listed(resource_type, namespace, label_selector)?;
            self.check_bodies(&resource)?;
            projected_objects(
                &format!("list-projected of {resource}"),
                matching,
                &projections,
            )
        })())
    }

    fn keys(&mut self, resource_type: WitGvk, namespace: Option<String>) -> Answer<Vec<String>> {
        Ok((|| {
            if let Some(ns) = namespace.as_deref().filter(|ns| !ns.is_empty()) {
                check_len("namespace", ns)?;
                super::check_namespace(ns)?;
            }
            let (resource, indexer) = self.readable(resource_type)?;
            let mut keys: Vec<String> = indexer
                .list_keys()
                .into_iter()
                .filter(|k| {
                    // As in `list`: an empty namespace is none.
                    namespace
                        .as_deref()
                        .filter(|ns| !ns.is_empty())
                        .is_none_or(|ns| k.namespace() == Some(ns))
                })
                .map(|k| k.as_str().to_owned())
                .collect();
            check_answer(&format!("keys of {resource}"), keys.iter().map(String::len))?;
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
                .map_err(|e| index_error(&resource, &e))?;
            let with_json = self.host.policy.reads_json(&resource);
            objects(
                &format!("by-index {index:?} of {resource}"),
                found,
                with_json,
            )
        })())
    }

    fn index_values(&mut self, resource_type: WitGvk, index: String) -> Answer<Vec<String>> {
        Ok((|| {
            let (resource, indexer) = self.readable(resource_type)?;
            let name = self.index_name(&resource, &index)?;
            let mut values = indexer
                .index_values(&name)
                .map_err(|e| index_error(&resource, &e))?;
            check_answer(
                &format!("index-values {index:?} of {resource}"),
                values.iter().map(String::len),
            )?;
            values.sort();
            Ok(values)
        })())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kubeplug_informer::indexer::new_indexer;
    use kubeplug_informer::object::ObjectDecoder;
    use kubeplug_informer::resource::Resource;

    use super::*;
    use crate::Grants;
    use crate::PluginLimits;
    use crate::description::{Delivery, Description, Read};
    use crate::grants::Policy;
    use crate::host::{MAX_ANSWER, MAX_ARG};
    use crate::state::HostContext;
    use crate::view::{IndexerMap, NoCluster};
    use kubeplug_informer::informer::CacheHandle;

    fn config_maps() -> Gvk {
        Gvk::new("", "v1", "ConfigMap")
    }

    /// A store whose plugin subscribes to ConfigMaps, holding one `size`-byte ConfigMap per
    /// name in `names` (namespace `ns`, label `app=web`).
    fn store(names: &[String], size: usize) -> StoreState {
        store_read(names, size, Read::bodies(config_maps()))
    }

    /// The same, for a plugin whose one declared read is `read`.
    fn store_read(names: &[String], size: usize, read: Read) -> StoreState {
        let description = Description {
            name: "probe".to_owned(),
            version: "1".to_owned(),
            subscriptions: Vec::new(),
            delivery: Delivery::Events,
            indexes: Vec::new(),
            reads: vec![read],
            writes: Vec::new(),
        };
        let policy = Policy::new(&Grants::default().allow_read(config_maps()), &description);
        let decoder = ObjectDecoder::new(Resource::new("", "v1", "ConfigMap", "configmaps", true));
        let (mut writer, indexer) = new_indexer();
        for name in names {
            let json = serde_json::json!({
                "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1",
                             "labels": {"app": "web"}},
                "data": {"k": "x".repeat(size)},
            });
            let object = decoder.decode(json.to_string().as_bytes()).unwrap();
            writer.put(Arc::new(object));
        }
        let host = HostContext {
            caches: BTreeMap::from([(config_maps(), CacheHandle::complete(indexer.clone()))]),
            ..HostContext::new(
                "probe".into(),
                policy,
                Arc::new(IndexerMap(BTreeMap::from([(config_maps(), indexer)]))),
                Arc::new(NoCluster),
                &PluginLimits::default(),
            )
        };
        StoreState::new(Arc::new(host), &PluginLimits::default())
    }

    fn refusal<T: std::fmt::Debug>(answer: Answer<T>) -> String {
        match answer.expect("a host call never traps on its arguments") {
            Err(Error::InvalidInput(message)) => message,
            other => panic!("expected invalid-input, got {other:?}"),
        }
    }

    #[test]
    fn answers_over_the_bound_are_refused_before_anything_is_copied() {
        // Seventeen 1 MiB objects: over 16 MiB together, each well under it.
        let names: Vec<String> = (0..17).map(|i| format!("cm-{i:02}")).collect();
        let mut state = store(&names, 1 << 20);
        let resource = WitGvk::from(&config_maps());
        let message = refusal(state.list(resource.clone(), None, None));
        assert!(
            message.starts_with("list of v1/ConfigMap: the answer would be")
                && message.contains(&format!("over the {MAX_ANSWER} a cache call may return")),
            "{message}"
        );
        let message = refusal(state.by_index(resource.clone(), "namespace".into(), "ns".into()));
        assert!(
            message.starts_with("by-index \"namespace\" of v1/ConfigMap"),
            "{message}"
        );
        let narrowed = state
            .list(resource.clone(), None, Some("app=db".into()))
            .unwrap()
            .unwrap();
        assert!(narrowed.is_empty(), "a narrower query still answers");
        let one = state
            .get(resource.clone(), "ns/cm-00".into())
            .unwrap()
            .unwrap();
        assert!(one.is_some(), "a single object is always within the bound");
        assert_eq!(state.keys(resource, None).unwrap().unwrap().len(), 17);
    }

    #[test]
    fn key_and_index_value_answers_are_bounded_too() {
        let bound_in_keys = MAX_ANSWER / MAX_ARG + 1;
        let names: Vec<String> = (0..bound_in_keys)
            .map(|i| format!("{i:0>width$}", width = MAX_ARG - "ns/".len()))
            .collect();
        let mut state = store(&names, 0);
        let resource = WitGvk::from(&config_maps());
        let message = refusal(state.keys(resource.clone(), None));
        assert!(
            message.starts_with("keys of v1/ConfigMap: the answer would be"),
            "{message}"
        );
    }

    #[test]
    fn arguments_over_the_bound_are_refused_naming_the_argument() {
        let mut state = store(&["a".to_owned()], 0);
        let resource = WitGvk::from(&config_maps());
        let long = "a".repeat(MAX_ARG + 1);
        let over = |what: &str| format!("{what} is {} bytes; at most {MAX_ARG}", MAX_ARG + 1);
        assert_eq!(
            refusal(state.get(resource.clone(), long.clone())),
            over("key")
        );
        assert_eq!(
            refusal(state.list(resource.clone(), None, Some(long.clone()))),
            over("label selector")
        );
        assert_eq!(
            refusal(state.keys(resource.clone(), Some(long.clone()))),
            over("namespace")
        );
        assert_eq!(
            refusal(state.by_index(resource.clone(), long.clone(), "v".into())),
            over("index name")
        );
        assert_eq!(
            refusal(state.by_index(resource, "namespace".into(), long)),
            over("index value")
        );
    }

    #[test]
    fn projected_answers_are_bounded_as_they_are_built() {
        let names: Vec<String> = (0..17).map(|i| format!("cm-{i:02}")).collect();
        let mut state = store(&names, 1 << 20);
        let resource = WitGvk::from(&config_maps());
        let data = |count: usize| -> Vec<WitProjection> {
            (0..count)
                .map(|i| WitProjection {
                    name: format!("data-{i}"),
                    path: "data".to_owned(),
                })
                .collect()
        };
        // Sixteen copies of one 1 MiB map: one object, over the bound.
        let message = refusal(state.get_projected(resource.clone(), "ns/cm-00".into(), data(16)));
        assert!(
            message.starts_with("get-projected of v1/ConfigMap ns/cm-00: the answer would be"),
            "{message}"
        );
        let message = refusal(state.list_projected(resource.clone(), None, None, data(1)));
        assert!(
            message.starts_with("list-projected of v1/ConfigMap: the answer would be"),
            "{message}"
        );
        let one = state
            .get_projected(resource, "ns/cm-00".into(), data(1))
            .unwrap()
            .unwrap()
            .expect("cached");
        assert_eq!(one.projected[0].values.len(), 1);
    }

    #[test]
    fn metadata_reads_carry_no_json_and_refuse_projections() {
        // Seventeen 1 MiB objects: their JSON is over the bound, their metadata is not.
        let names: Vec<String> = (0..17).map(|i| format!("cm-{i:02}")).collect();
        let mut state = store_read(&names, 1 << 20, Read::metadata(config_maps()));
        let resource = WitGvk::from(&config_maps());
        let listed = state.list(resource.clone(), None, None).unwrap().unwrap();
        assert_eq!(listed.len(), 17);
        assert!(
            listed
                .iter()
                .all(|o| o.json.is_none() && !o.meta.labels.is_empty())
        );
        let one = state
            .get(resource.clone(), "ns/cm-00".into())
            .unwrap()
            .unwrap();
        assert_eq!(one.expect("cached").json, None);
        let projections = vec![WitProjection {
            name: "data".to_owned(),
            path: "data".to_owned(),
        }];
        let refused = state
            .get_projected(resource, "ns/cm-00".into(), projections)
            .unwrap();
        assert!(
            matches!(&refused, Err(Error::NotPermitted(m)) if m.contains("declare a read of it with wants-object-json")),
            "{refused:?}"
        );
    }
}
