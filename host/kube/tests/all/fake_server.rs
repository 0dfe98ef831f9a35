//! The fake server through the kube client: the shapes of the captured answers to writes,
//! and list pages.

use kubeplug_fake_apiserver::FakeOptions;
use serde_json::{Value, json};

use crate::support::{Fixture, start};

async fn call(
    f: &Fixture,
    method: &str,
    uri: &str,
    content_type: &str,
    body: Value,
) -> (u16, Value) {
    let request = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type)
        .body(kube::client::Body::from(body.to_string().into_bytes()))
        .unwrap();
    let response = f.client.client().send(request).await.unwrap();
    let code = response.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

const CM: &str = "/api/v1/namespaces/wire/configmaps";
const JSON: &str = "application/json";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crud_patch_status_apply_events_and_leases() {
    let f = start(FakeOptions::default()).await;
    let (code, created) = call(&f, "POST", CM, JSON, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm-1"}, "data": {"k": "v"}})).await;
    assert_eq!(code, 201);
    assert_eq!(created["kind"], "ConfigMap");
    assert_eq!(created["metadata"]["namespace"], "wire");
    assert!(
        created["metadata"]["uid"].is_string()
            && created["metadata"]["creationTimestamp"].is_string()
    );

    let (code, status) = call(&f, "POST", CM, JSON, json!({"metadata": {"name": "cm-1"}})).await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (409, Some("AlreadyExists"))
    );
    assert_eq!(status["message"], "configmaps \"cm-1\" already exists");
    let (code, status) = call(
        &f,
        "POST",
        CM,
        JSON,
        json!({"metadata": {"name": "Bad_Name"}}),
    )
    .await;
    assert_eq!((code, status["reason"].as_str()), (422, Some("Invalid")));
    assert_eq!(status["details"]["causes"][0]["field"], "metadata.name");
    let (code, status) = call(&f, "GET", &format!("{CM}/nope"), JSON, Value::Null).await;
    assert_eq!((code, status["reason"].as_str()), (404, Some("NotFound")));
    assert_eq!(status["details"]["kind"], "configmaps");

    let (code, patched) = call(
        &f,
        "PATCH",
        &format!("{CM}/cm-1"),
        "application/merge-patch+json",
        json!({"data": {"k": null, "n": "1"}}),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(patched["data"], json!({"n": "1"}));
    let (code, patched) = call(
        &f,
        "PATCH",
        &format!("{CM}/cm-1"),
        "application/json-patch+json",
        json!([{"op": "add", "path": "/data/m", "value": "2"}]),
    )
    .await;
    assert_eq!(
        (code, &patched["data"]),
        (200, &json!({"n": "1", "m": "2"}))
    );

    let (code, applied) = call(&f, "PATCH", &format!("{CM}/applied?fieldManager=kubeplug%2Fexample&force=true"), "application/apply-patch+yaml",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied", "labels": {"owner": "kubeplug"}}, "data": {"a": "1"}})).await;
    assert_eq!(code, 201);
    let entry = &applied["metadata"]["managedFields"][0];
    assert_eq!(
        (entry["manager"].as_str(), entry["operation"].as_str()),
        (Some("kubeplug/example"), Some("Apply"))
    );
    assert_eq!(
        entry["fieldsV1"],
        json!({"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:owner": {}}}})
    );
    let (code, applied) = call(&f, "PATCH", &format!("{CM}/applied?fieldManager=kubeplug%2Fexample"), "application/apply-patch+yaml",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"b": "2"}})).await;
    assert_eq!(
        (code, &applied["data"]),
        (200, &json!({"a": "1", "b": "2"}))
    );
    assert_eq!(
        applied["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // The status subresource changes status only.
    let pods = "/api/v1/namespaces/wire/pods";
    call(
        &f,
        "POST",
        pods,
        JSON,
        json!({"metadata": {"name": "p"}, "spec": {"x": 1}}),
    )
    .await;
    let (code, pod) = call(
        &f,
        "PUT",
        &format!("{pods}/p/status"),
        JSON,
        json!({"metadata": {"name": "p"}, "spec": {"x": 2}, "status": {"phase": "Running"}}),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        (&pod["spec"]["x"], &pod["status"]["phase"]),
        (&json!(1), &json!("Running"))
    );
    let (_, pod) = call(
        &f,
        "PATCH",
        &format!("{pods}/p/status"),
        "application/merge-patch+json",
        json!({"status": {"ready": true}}),
    )
    .await;
    assert_eq!(pod["status"], json!({"phase": "Running", "ready": true}));

    // events.k8s.io/v1 Event creation with generateName.
    let (code, event) = call(&f, "POST", "/apis/events.k8s.io/v1/namespaces/wire/events", JSON, json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"generateName": "cm-1-"},
        "regarding": {"kind": "ConfigMap", "name": "cm-1", "namespace": "wire"}, "reportingController": "kubeplug",
        "reportingInstance": "kubeplug-0", "action": "Reconcile", "reason": "Synced", "note": "ok", "type": "Normal"})).await;
    assert_eq!(code, 201, "{event}");
    assert!(
        event["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("cm-1-")
    );

    // Leases: PUT honours the resourceVersion precondition.
    let leases = "/apis/coordination.k8s.io/v1/namespaces/wire/leases";
    let (_, lease) = call(
        &f,
        "POST",
        leases,
        JSON,
        json!({"metadata": {"name": "leader"}, "spec": {"holderIdentity": "a"}}),
    )
    .await;
    let rv = lease["metadata"]["resourceVersion"].clone();
    let (code, renewed) = call(&f, "PUT", &format!("{leases}/leader"), JSON, json!({"metadata": {"name": "leader", "resourceVersion": rv}, "spec": {"holderIdentity": "a", "renewTime": "now"}})).await;
    assert_eq!(code, 200);
    let (code, conflict) = call(&f, "PUT", &format!("{leases}/leader"), JSON, json!({"metadata": {"name": "leader", "resourceVersion": rv}, "spec": {"holderIdentity": "b"}})).await;
    assert_eq!((code, conflict["reason"].as_str()), (409, Some("Conflict")));
    assert_ne!(renewed["metadata"]["resourceVersion"], rv);

    let (code, _) = call(&f, "DELETE", &format!("{CM}/cm-1"), JSON, Value::Null).await;
    assert_eq!(code, 200);
    let (code, _) = call(&f, "DELETE", &format!("{CM}/cm-1"), JSON, Value::Null).await;
    assert_eq!(code, 404);
}

/// One page of the ConfigMaps in `wire`: (items, remainingItemCount, continue).
async fn list_page(
    f: &Fixture,
    query: &str,
    token: Option<&str>,
) -> (usize, Option<u64>, Option<String>) {
    let mut uri = format!("{CM}?{query}");
    if let Some(token) = token {
        uri.push_str(&format!("&continue={token}"));
    }
    let (code, list) = call(f, "GET", &uri, JSON, Value::Null).await;
    assert_eq!(code, 200, "{list}");
    let metadata = &list["metadata"];
    (
        list["items"].as_array().unwrap().len(),
        metadata["remainingItemCount"].as_u64(),
        metadata["continue"].as_str().map(str::to_owned),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_count_the_items_that_remain() {
    let f = start(FakeOptions::default()).await;
    for i in 0..7 {
        let team = if i % 2 == 0 { "a" } else { "b" };
        let body = json!({"metadata": {"name": format!("cm-{i}"), "labels": {"team": team}}});
        assert_eq!(call(&f, "POST", CM, JSON, body).await.0, 201);
    }
    let all = "limit=3";
    let (items, remaining, first) = list_page(&f, all, None).await;
    assert_eq!((items, remaining), (3, Some(4)));
    // Team a's first page ends at the same object and version, so at the same token: its
    // count must not be taken for the unselected list's.
    let team_a = "limit=2&labelSelector=team%3Da";
    let (items, remaining, team_a_first) = list_page(&f, team_a, None).await;
    assert_eq!((items, remaining), (2, Some(2)));
    assert_eq!(team_a_first, first);
    let first = first.unwrap();
    let (items, remaining, second) = list_page(&f, all, Some(&first)).await;
    assert_eq!((items, remaining), (3, Some(1)));
    // A page asked for again counts the same.
    assert_eq!(list_page(&f, all, Some(&first)).await.1, Some(1));
    let (items, remaining, last) = list_page(&f, all, second.as_deref()).await;
    assert_eq!((items, remaining, last), (1, None, None));
    let (items, remaining, last) = list_page(&f, team_a, Some(&first)).await;
    assert_eq!((items, remaining, last), (2, None, None));
}
