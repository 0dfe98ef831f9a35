//! Hostile test guest: tries to reach objects its grants do not name through the strings it
//! gives the host. Names and namespaces that would add path segments or a query
//! (`web/status`, `web?fieldManager=x&force=true`, `..`), resource types whose version is a
//! path (`v1/namespaces/kube-system/secrets`), bodies that name another object than the
//! call's target, and bodies that name a field twice. Granted every write on Pods, so only
//! the host's checks stand in the way: every call must come back `invalid-input`. It counts them in `invalid_total`, any other
//! refusal in `refused_otherwise_total` and anything accepted in `accepted_total`.

use kubeplug_sdk::prelude::*;

struct Paths;

fn pods() -> Gvk {
    gvk("", "v1", "Pod")
}

fn target(namespace: &str, name: &str) -> ObjectRef {
    ObjectRef::new(pods(), Some(namespace), name)
}

fn count(name: &str, n: usize) -> Result<(), String> {
    metrics::counter_add(name, &[], n as u64).map_err(|e| e.to_string())
}

impl Plugin for Paths {
    fn init(_settings: Settings) -> Result<Self, InitError> {
        Ok(Paths)
    }

    fn describe(&self) -> Description {
        Description::events("hostile-paths", "0.1.0", vec![Subscription::to(pods())])
    }

    fn handle_events(&mut self, _batch: Vec<Event>) -> Result<(), String> {
        let mut results: Vec<Result<(), Error>> = Vec::new();
        let names = [
            "web/status",
            "web?fieldManager=x&force=true",
            "a%2Fb",
            "..",
            ".",
            "a#b",
            "a\nb",
            "",
        ];
        for name in names {
            let merge = cluster::PatchType::Merge;
            results.push(cluster::patch(&target("ns", name), merge, "{}", None).map(drop));
            results.push(cluster::delete(&target("ns", name)));
        }
        for namespace in ["kube system", "../kube-system", "a/b", "UPPER"] {
            results.push(cluster::apply(&target(namespace, "p"), "{}", false).map(drop));
            results.push(cluster::create(&pods(), Some(namespace), "{}").map(drop));
            results.push(cache::list(&pods(), Some(namespace), None).map(drop));
        }
        let types = [
            gvk("", "v1/namespaces/kube-system/secrets", "Secret"),
            gvk("evil.example.com/../..", "v1", "Pod"),
            gvk("", "v1", "Pod/x"),
        ];
        for resource_type in types {
            let elsewhere = ObjectRef::new(resource_type.clone(), Some("ns"), "p");
            results.push(cluster::delete(&elsewhere));
            results.push(cluster::create(&resource_type, Some("ns"), "{}").map(drop));
            results.push(cache::get(&resource_type, "ns/p").map(drop));
        }
        // Bodies naming another object than the call's target.
        let other_name = r#"{"metadata":{"name":"q"}}"#;
        let other_namespace = r#"{"metadata":{"namespace":"kube-system"}}"#;
        results.push(cluster::apply(&target("ns", "p"), other_name, true).map(drop));
        results.push(cluster::apply(&target("ns", "p"), other_namespace, true).map(drop));
        let created = r#"{"metadata":{"name":"x","namespace":"kube-system"}}"#;
        results.push(cluster::create(&pods(), Some("ns"), created).map(drop));
        // Bodies naming a field twice: one reader may keep the first, another the last, so
        // a name check could pass on one object while the write goes to another.
        let twice = [
            r#"{"metadata":{"name":"p","namespace":"ns","name":"q"}}"#,
            r#"{"metadata":{"name":"p","namespace":"ns","namespace":"kube-system"}}"#,
            r#"{"apiVersion":"v1","apiVersion":"apps/v1","metadata":{"name":"p"}}"#,
            r#"{"kind":"Pod","kind":"Secret","metadata":{"name":"p"}}"#,
            r#"{"spec":{"containers":[{"name":"a","image":"x","name":"b"}]}}"#,
        ];
        for body in twice {
            let merge = cluster::PatchType::Merge;
            results.push(cluster::apply(&target("ns", "p"), body, true).map(drop));
            results.push(cluster::create(&pods(), Some("ns"), body).map(drop));
            results.push(cluster::create(&pods(), None, body).map(drop));
            results.push(cluster::patch(&target("ns", "p"), merge, body, None).map(drop));
            let status = Some("status");
            results.push(cluster::patch(&target("ns", "p"), merge, body, status).map(drop));
        }
        let json_patch = r#"[{"op":"add","path":"/metadata/labels","op":"remove"}]"#;
        let json = cluster::PatchType::Json;
        results.push(cluster::patch(&target("ns", "p"), json, json_patch, None).map(drop));

        let invalid = results
            .iter()
            .filter(|r| matches!(r, Err(Error::InvalidInput(_))))
            .count();
        let accepted = results.iter().filter(|r| r.is_ok()).count();
        count("invalid_total", invalid)?;
        count("accepted_total", accepted)?;
        count(
            "refused_otherwise_total",
            results.len() - invalid - accepted,
        )
    }
}

export_plugin!(Paths);
