//! Test guest: for every event, records what it saw and what the cache answers (by key, by
//! label selector `app=web`, by its declared index `by-config-map` for `cm-a`) as one
//! `Observation` created through `cluster`, so the test sees exactly what the guest saw.

use kubeplug_sdk::prelude::*;
use serde_json::json;

struct CacheQuerier;

fn pods() -> Gvk {
    gvk("", "v1", "Pod")
}

fn keys(list: Result<Vec<CachedObject>, Error>) -> serde_json::Value {
    match list {
        Ok(objects) => json!(objects.iter().map(|o| o.meta.key()).collect::<Vec<_>>()),
        Err(e) => json!(format!("error: {e}")),
    }
}

impl Plugin for CacheQuerier {
    fn init(_settings: Settings) -> Result<Self, InitError> {
        Ok(CacheQuerier)
    }

    fn describe(&self) -> Description {
        let mut d = Description::events(
            "cache-querier",
            "0.1.0",
            vec![Subscription::to(pods()).with_json()],
        );
        d.indexes.push(IndexDecl {
            name: "by-config-map".into(),
            resource_type: pods(),
            spec: IndexSpec::Path("spec.volumes[*].configMap.name".into()),
        });
        d.writes.push(WriteRequest {
            resource_type: gvk("test.kubeplug.io", "v1", "Observation"),
            verbs: vec![WriteVerb::Create],
        });
        d
    }

    fn on_event(&mut self, event: &Event) -> Result<(), String> {
        let key = event.key();
        let cached = cache::get(&pods(), &key).map_err(|e| e.to_string())?;
        let parsed: serde_json::Value = event.object()?;
        let observation = json!({
            "change": match event.change {
                EventType::Added => "Added",
                EventType::Updated => "Updated",
                EventType::Deleted => "Deleted",
            },
            "key": key,
            "rv": event.meta.resource_version,
            "initial": event.in_initial_list,
            "app": event.label("app"),
            "json_name": parsed["metadata"]["name"],
            "cached_rv": cached.map(|o| o.meta.resource_version),
            "web": keys(cache::list(&pods(), None, Some("app=web"))),
            "cm_a": keys(cache::by_index(&pods(), "by-config-map", "cm-a")),
            "index_values": cache::index_values(&pods(), "by-config-map").map_err(|e| e.to_string())?,
        });
        cluster::create(
            &gvk("test.kubeplug.io", "v1", "Observation"),
            None,
            &observation.to_string(),
        )
        .map(drop)
        .map_err(|e| format!("recording the observation: {e}"))
    }
}

export_plugin!(CacheQuerier);
