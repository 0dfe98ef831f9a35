//! Hostile test guest: calls every host function with well-typed but invalid values
//! (unknown resource, malformed key, bad selector, huge strings, bad metric names, writes
//! without grant). Each must come back as an ordinary error: it counts them in
//! `host_errors_total` and anything that unexpectedly succeeds in `host_accepted_total`.

use kubeplug_sdk::prelude::*;

struct Args;

fn tally<T, E>(results: Vec<Result<T, E>>) -> Result<(), String> {
    let errors = results.iter().filter(|r| r.is_err()).count() as u64;
    let accepted = results.len() as u64 - errors;
    metrics::counter_add("host_errors_total", &[], errors).map_err(|e| e.to_string())?;
    metrics::counter_add("host_accepted_total", &[], accepted).map_err(|e| e.to_string())
}

impl Plugin for Args {
    fn init(_settings: Settings) -> Result<Self, InitError> {
        Ok(Args)
    }

    fn describe(&self) -> Description {
        Description::events(
            "hostile-args",
            "0.1.0",
            vec![Subscription::to(gvk("", "v1", "Pod"))],
        )
    }

    fn handle_events(&mut self, _batch: Vec<Event>) -> Result<(), String> {
        let pods = gvk("", "v1", "Pod");
        let huge = "k".repeat(1 << 20);
        let unknown = gvk("nope.example.com", "v9", "Unicorn");
        let target = ObjectRef {
            resource_type: pods.clone(),
            namespace: Some("ns".into()),
            name: "p".into(),
        };
        let cache_results: Vec<Result<(), Error>> = vec![
            cache::get(&unknown, "ns/a").map(drop),
            cache::get(&pods, "a/b/c").map(drop),
            cache::get(&pods, "").map(drop),
            cache::get(&pods, &huge).map(drop),
            cache::list(&pods, None, Some("app in (")).map(drop),
            cache::list(&pods, Some(&huge), None).map(drop),
            cache::by_index(&pods, "no-such-index", "x").map(drop),
            cache::index_values(&unknown, "namespace").map(drop),
            metrics::counter_add("9-bad name", &[], 1),
            metrics::gauge_set(&huge, &[], 1.0),
            cluster::apply(&target, "{not json", false).map(drop),
            cluster::delete(&target),
            cluster::create(&pods, Some("ns"), &huge).map(drop),
            cluster::patch(&target, cluster::PatchType::Merge, "{}", Some("scale")).map(drop),
        ];
        tally(cache_results)
    }
}

export_plugin!(Args);
