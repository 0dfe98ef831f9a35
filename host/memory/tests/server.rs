//! The in-memory server through its public API: writes, lists, watches and faults, as the
//! Reflector and the fake API server see them.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use futures::executor::block_on;
use futures::{FutureExt, StreamExt};
use kubeplug_informer::object::{DecodeError, ObjectDecoder, ObjectKey};
use kubeplug_informer::resource::Resource;
use kubeplug_informer::selector::{FieldSelector, LabelSelector};
use kubeplug_informer::source::{
    ListPage, ListRequest, ListerWatcher, SourceError, Status, WatchEvent, WatchRequest,
    WatchStream,
};
use kubeplug_memory::{
    Call, Fault, Garbage, MemoryListerWatcher, MemoryServer, ServerConfig, Written,
};
use proptest::prelude::*;
use serde_json::Value;
use tokio::time::Instant;

fn pods() -> Resource {
    Resource::new("", "v1", "Pod", "pods", true)
}

fn pod(namespace: &str, name: &str, team: &str, data: &str) -> String {
    serde_json::json!({
        "metadata": {"name": name, "namespace": namespace, "labels": {"team": team}},
        "spec": {"data": data},
    })
    .to_string()
}

fn lister(
    server: &MemoryServer,
    namespace: Option<&str>,
    labels: Option<&str>,
    fields: Option<&str>,
) -> MemoryListerWatcher {
    server.lister_watcher(
        pods(),
        namespace.map(str::to_owned),
        labels.map(|s| LabelSelector::parse(s).unwrap()),
        fields.map(|s| FieldSelector::parse(s).unwrap()),
    )
}

fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

fn key_of(value: &Value) -> String {
    let metadata = &value["metadata"];
    let name = metadata["name"].as_str().unwrap_or("?");
    ObjectKey::new(metadata["namespace"].as_str(), name).to_string()
}

/// An event as `TYPE key resourceVersion`.
fn describe(event: &WatchEvent) -> String {
    let object = |kind: &str, bytes: &Bytes| match serde_json::from_slice::<Value>(bytes) {
        Ok(value) => {
            let rv = value["metadata"]["resourceVersion"].as_str().unwrap_or("?");
            format!("{kind} {} {rv}", key_of(&value))
        }
        Err(_) => format!("{kind} <not json>"),
    };
    match event {
        WatchEvent::Added(bytes) => object("ADDED", bytes),
        WatchEvent::Modified(bytes) => object("MODIFIED", bytes),
        WatchEvent::Deleted(bytes) => object("DELETED", bytes),
        WatchEvent::Bookmark {
            resource_version,
            initial_events_end,
        } => {
            let end = if *initial_events_end { " end" } else { "" };
            format!("BOOKMARK {resource_version}{end}")
        }
        WatchEvent::Error(status) => format!("ERROR {}", status.code),
    }
}

/// Every event available without waiting; `END` when the stream ended.
fn drain(stream: &mut WatchStream) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        match stream.next().now_or_never() {
            Some(Some(Ok(event))) => out.push(describe(&event)),
            Some(Some(Err(error))) => out.push(format!("ERR {error}")),
            Some(None) => {
                out.push("END".to_owned());
                return out;
            }
            None => return out,
        }
    }
}

fn watch_from(lw: &MemoryListerWatcher, rv: u64) -> WatchStream {
    let request = WatchRequest {
        resource_version: rv.to_string(),
        ..WatchRequest::default()
    };
    block_on(lw.watch(request)).unwrap()
}

fn list_pages(lw: &MemoryListerWatcher, limit: u32) -> Vec<ListPage> {
    let mut pages = Vec::new();
    let mut continue_token = None;
    loop {
        let request = ListRequest {
            limit: Some(limit),
            continue_token: continue_token.take(),
            resource_version: None,
        };
        let page = block_on(lw.list(request)).unwrap();
        continue_token = page.continue_token.clone();
        pages.push(page);
        if continue_token.is_none() {
            return pages;
        }
    }
}

fn status_code(result: Result<Written, Status>) -> (u16, String) {
    let status = result.unwrap_err();
    (status.code, status.reason)
}

#[test]
fn writes_assign_versions_and_uids_and_store_list_items() {
    let server = MemoryServer::new();
    let pods = pods();
    assert_eq!(server.current_resource_version(), 1);
    let created = server
        .create(
            &pods,
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"n","resourceVersion":"999","labels":{"x":"1"}},"spec":{"k":[1, 2]}}"#,
        )
        .unwrap();
    assert_eq!(created.resource_version, 2);
    assert_eq!(created.key.as_str(), "n/a");
    let value = json(&created.json);
    assert_eq!(value["metadata"]["resourceVersion"], "2");
    assert_eq!(value["spec"]["k"], serde_json::json!([1, 2]));
    assert_eq!(value["metadata"]["labels"]["x"], "1");
    assert!(value.get("kind").is_none() && value.get("apiVersion").is_none());
    let uid = value["metadata"]["uid"].as_str().unwrap().to_owned();
    assert!(!uid.is_empty());

    let again = server.create(&pods, &pod("n", "a", "t", "d"));
    assert_eq!(status_code(again), (409, "AlreadyExists".into()));
    let updated = server
        .update(
            &pods,
            r#"{"metadata":{"name":"a","namespace":"n","resourceVersion":"2"},"spec":{}}"#,
        )
        .unwrap();
    assert_eq!(updated.resource_version, 3);
    assert_eq!(json(&updated.json)["metadata"]["uid"], uid.as_str());
    let stale = server.update(
        &pods,
        r#"{"metadata":{"name":"a","namespace":"n","resourceVersion":"2"}}"#,
    );
    assert_eq!(status_code(stale), (409, "Conflict".into()));
    let missing = server.update(&pods, &pod("n", "nope", "t", "d"));
    assert_eq!(status_code(missing), (404, "NotFound".into()));
    let applied = server
        .apply(
            &pods,
            r#"{"metadata":{"name":"a","namespace":"n","resourceVersion":"2"}}"#,
        )
        .unwrap();
    assert_eq!(
        applied.resource_version, 4,
        "apply ignores the stale version"
    );
    assert_eq!(json(&applied.json)["metadata"]["uid"], uid.as_str());
    let own_uid = server
        .apply(
            &pods,
            r#"{"metadata":{"name":"b","namespace":"n","uid":"my-uid"}}"#,
        )
        .unwrap();
    assert_eq!(json(&own_uid.json)["metadata"]["uid"], "my-uid");

    let deleted = server.delete(&pods, &"n/a".into()).unwrap();
    assert_eq!(deleted.resource_version, 6);
    assert_eq!(json(&deleted.json)["metadata"]["resourceVersion"], "6");
    assert_eq!(server.get(&pods, &"n/a".into()), None);
    let gone = server.delete(&pods, &"n/a".into());
    assert_eq!(status_code(gone), (404, "NotFound".into()));
    assert_eq!(server.current_resource_version(), 6);
    assert_eq!(
        server
            .snapshot(&pods)
            .keys()
            .map(ObjectKey::as_str)
            .collect::<Vec<_>>(),
        ["n/b"]
    );
}

#[test]
fn bad_writes_are_refused_with_the_servers_codes() {
    let server = MemoryServer::new();
    let pods = pods();
    let nodes = Resource::new("", "v1", "Node", "nodes", false);
    for (resource, text, code) in [
        (&pods, "not json", 400),
        (
            &pods,
            r#"{"metadata":{"name":"a","namespace":"n"},"x":[}"#,
            400,
        ),
        (
            &pods,
            r#"{"kind":"Node","metadata":{"name":"a","namespace":"n"}}"#,
            400,
        ),
        (
            &pods,
            r#"{"apiVersion":"v2","metadata":{"name":"a","namespace":"n"}}"#,
            400,
        ),
        (
            &pods,
            r#"{"metadata":{"name":"a","namespace":"n","labels":{"x":1}}}"#,
            400,
        ),
        (&pods, r#"{"metadata":{"name":7,"namespace":"n"}}"#, 400),
        (&pods, r#"{"spec":{}}"#, 422),
        (&pods, r#"{"metadata":{"name":"","namespace":"n"}}"#, 422),
        (&pods, r#"{"metadata":{"name":"a"}}"#, 422),
        (&pods, r#"{"metadata":{"name":"a/b","namespace":"n"}}"#, 422),
        (&nodes, r#"{"metadata":{"name":"a","namespace":"n"}}"#, 422),
    ] {
        let status = server.create(resource, text).unwrap_err();
        assert_eq!(status.code, code, "{text}: {status}");
        assert!(status.message.contains(&resource.to_string()), "{status}");
    }
    assert_eq!(server.current_resource_version(), 1, "nothing was written");
    let node = server
        .create(&nodes, r#"{"metadata":{"name":"n1"}}"#)
        .unwrap();
    assert_eq!(node.key.as_str(), "n1");
}

#[test]
fn escapes_and_white_space_survive_the_rewrite() {
    let server = MemoryServer::new();
    let text = r#" { "metadata" : { "name" : "a", "namespace":"n",
        "annotations": {"q\"uote": "v\\n"} } , "data": {"k\u00e9": "\u2603", "n": [ 1 , 2 ]} } "#;
    let written = server
        .create(
            &Resource::new("", "v1", "ConfigMap", "configmaps", true),
            text,
        )
        .unwrap();
    let value = json(&written.json);
    assert_eq!(value["metadata"]["annotations"]["q\"uote"], "v\\n");
    assert_eq!(value["data"]["ké"], "☃");
    assert_eq!(value["data"]["n"], serde_json::json!([1, 2]));
}

#[test]
fn pages_share_one_version_and_add_up_to_the_full_list() {
    let server = MemoryServer::new();
    let pods = pods();
    for i in 0..10 {
        server
            .create(&pods, &pod("a", &format!("p{i}"), "t", "v0"))
            .unwrap();
    }
    for name in ["x", "y"] {
        server.create(&pods, &pod("b", name, "t", "v0")).unwrap();
    }
    let all = lister(&server, None, None, None);
    let full = block_on(all.list(ListRequest::default())).unwrap();
    assert_eq!(full.items.len(), 12);
    assert_eq!(full.continue_token, None);

    let first = block_on(all.list(ListRequest {
        limit: Some(3),
        ..ListRequest::default()
    }))
    .unwrap();
    // Writes after the first page, before and after the keys it returned.
    server.update(&pods, &pod("a", "p5", "t", "v1")).unwrap();
    server.delete(&pods, &"a/p7".into()).unwrap();
    server.create(&pods, &pod("a", "p55", "t", "v1")).unwrap();
    server.update(&pods, &pod("a", "p0", "t", "v1")).unwrap();
    server.delete(&pods, &"b/x".into()).unwrap();
    let mut pages = vec![first];
    while let Some(token) = pages.last().unwrap().continue_token.clone() {
        let page = block_on(all.list(ListRequest {
            limit: Some(3),
            continue_token: Some(token),
            resource_version: None,
        }))
        .unwrap();
        pages.push(page);
    }
    assert_eq!(pages.len(), 4);
    assert!(
        pages
            .iter()
            .all(|p| p.resource_version == full.resource_version)
    );
    let paged: Vec<Bytes> = pages.iter().flat_map(|p| p.items.clone()).collect();
    assert_eq!(
        paged, full.items,
        "pages show the state at the list's version"
    );

    let fresh = block_on(all.list(ListRequest::default())).unwrap();
    let keys: Vec<String> = fresh.items.iter().map(|i| key_of(&json(i))).collect();
    assert!(keys.contains(&"a/p55".to_owned()) && !keys.contains(&"a/p7".to_owned()));
    assert_eq!(
        fresh.resource_version,
        server.current_resource_version().to_string()
    );

    // A namespace and a selector narrow the pages too.
    server.apply(&pods, &pod("a", "p1", "other", "v1")).unwrap();
    let narrowed = lister(&server, Some("a"), Some("team=t"), None);
    let pages = list_pages(&narrowed, 2);
    let keys: Vec<String> = pages
        .iter()
        .flat_map(|p| p.items.iter().map(|i| key_of(&json(i))))
        .collect();
    assert_eq!(
        keys,
        [
            "a/p0", "a/p2", "a/p3", "a/p4", "a/p5", "a/p55", "a/p6", "a/p8", "a/p9"
        ]
    );
    assert_eq!(pages.len(), 5, "no empty last page");
}

#[test]
fn a_watch_from_a_lists_version_sees_exactly_the_later_changes() {
    let server = MemoryServer::new();
    let pods = pods();
    server.create(&pods, &pod("n", "a", "t", "0")).unwrap();
    server.create(&pods, &pod("n", "b", "t", "0")).unwrap();
    let lw = lister(&server, None, None, None);
    let list = block_on(lw.list(ListRequest::default())).unwrap();
    assert_eq!(list.resource_version, "3");
    server.create(&pods, &pod("n", "c", "t", "0")).unwrap();
    server.update(&pods, &pod("n", "a", "t", "1")).unwrap();
    server.delete(&pods, &"n/b".into()).unwrap();

    let mut watch = watch_from(&lw, 3);
    assert_eq!(
        drain(&mut watch),
        ["ADDED n/c 4", "MODIFIED n/a 5", "DELETED n/b 6"]
    );
    server.update(&pods, &pod("n", "c", "t", "1")).unwrap();
    assert_eq!(drain(&mut watch), ["MODIFIED n/c 7"]);
    assert_eq!(drain(&mut watch), Vec::<String>::new());

    let mut later = watch_from(&lw, 5);
    assert_eq!(drain(&mut later), ["DELETED n/b 6", "MODIFIED n/c 7"]);
    let mut now = watch_from(&lw, 7);
    assert_eq!(drain(&mut now), Vec::<String>::new());
    assert_eq!(server.open_watches(), 3);
    drop((watch, later));
    assert_eq!(server.open_watches(), 1);

    let other = Resource::new("apps", "v1", "Deployment", "deployments", true);
    server
        .create(&other, r#"{"metadata":{"name":"d","namespace":"n"}}"#)
        .unwrap();
    assert_eq!(
        drain(&mut now),
        Vec::<String>::new(),
        "other resources are not seen"
    );
    let event = block_on(lw.watch(WatchRequest {
        resource_version: "7".into(),
        ..WatchRequest::default()
    }))
    .unwrap()
    .next()
    .now_or_never();
    assert!(
        event.is_none(),
        "the Deployment's version is not a Pod event"
    );
}

#[test]
fn versions_older_than_the_history_are_gone() {
    let server = MemoryServer::with_config(ServerConfig {
        history: 3,
        ..ServerConfig::default()
    });
    let pods = pods();
    for i in 0..5 {
        server
            .create(&pods, &pod("n", &format!("p{i}"), "t", ""))
            .unwrap();
    }
    // Versions 2..=6 were written; the history keeps 4, 5 and 6.
    let lw = lister(&server, None, None, None);
    assert_eq!(
        drain(&mut watch_from(&lw, 3)),
        ["ADDED n/p2 4", "ADDED n/p3 5", "ADDED n/p4 6"]
    );
    assert_eq!(drain(&mut watch_from(&lw, 2)), ["ERROR 410", "END"]);

    let first = block_on(lw.list(ListRequest {
        limit: Some(2),
        ..ListRequest::default()
    }))
    .unwrap();
    let token = first.continue_token.clone().unwrap();
    // Compaction at the list's own version would leave it consistent; move on first.
    server.create(&pods, &pod("n", "p5", "t", "")).unwrap();
    server.inject(Fault::Compact);
    let error = block_on(lw.list(ListRequest {
        limit: Some(2),
        continue_token: Some(token),
        resource_version: None,
    }))
    .unwrap_err();
    assert!(error.is_gone(), "{error}");
    assert_eq!(drain(&mut watch_from(&lw, 6)), ["ERROR 410", "END"]);
    assert_eq!(drain(&mut watch_from(&lw, 7)), Vec::<String>::new());

    // Writes to another resource push a version out of the shared history too.
    let other = Resource::new("", "v1", "ConfigMap", "configmaps", true);
    let mut watch = watch_from(&lw, 7);
    for i in 0..4 {
        server
            .create(
                &other,
                &format!(r#"{{"metadata":{{"name":"c{i}","namespace":"n"}}}}"#),
            )
            .unwrap();
    }
    assert_eq!(
        drain(&mut watch),
        Vec::<String>::new(),
        "an open watch is not affected"
    );
    assert_eq!(drain(&mut watch_from(&lw, 7)), ["ERROR 410", "END"]);
}

#[test]
fn requests_for_future_or_malformed_versions_fail() {
    let server = MemoryServer::new();
    let lw = lister(&server, None, None, None);
    let watch = |rv: &str| {
        block_on(lw.watch(WatchRequest {
            resource_version: rv.to_owned(),
            ..WatchRequest::default()
        }))
    };
    let code = |r: Result<WatchStream, SourceError>| match r {
        Err(SourceError::Status { status, .. }) => status.code,
        other => panic!("expected an error, got {:?}", other.is_ok()),
    };
    assert_eq!(code(watch("9")), 504);
    assert_eq!(code(watch("x")), 400);
    let list = block_on(lw.list(ListRequest {
        continue_token: Some("garbage".into()),
        ..ListRequest::default()
    }));
    assert!(matches!(list, Err(SourceError::Status { status, .. }) if status.code == 400));
}

#[test]
fn selector_transitions_are_added_and_deleted() {
    let server = MemoryServer::new();
    let pods = pods();
    let start = server.current_resource_version();
    let team_a = lister(&server, Some("n"), Some("team=a"), None);
    let mut watch = watch_from(&team_a, start);
    let named_x = lister(&server, None, None, Some("metadata.name=x"));
    let mut x_watch = watch_from(&named_x, start);

    server.create(&pods, &pod("n", "x", "b", "0")).unwrap(); // 2: not team a
    server.update(&pods, &pod("n", "x", "a", "0")).unwrap(); // 3: joins
    server.update(&pods, &pod("n", "x", "a", "1")).unwrap(); // 4: changes
    server.update(&pods, &pod("n", "x", "b", "1")).unwrap(); // 5: leaves
    server.delete(&pods, &"n/x".into()).unwrap(); // 6: not team a any more
    server.create(&pods, &pod("m", "y", "a", "0")).unwrap(); // 7: other namespace
    server.create(&pods, &pod("n", "z", "a", "0")).unwrap(); // 8
    server.delete(&pods, &"n/z".into()).unwrap(); // 9
    let expected = [
        "ADDED n/x 3",
        "MODIFIED n/x 4",
        "DELETED n/x 5",
        "ADDED n/z 8",
        "DELETED n/z 9",
    ];
    assert_eq!(drain(&mut watch), expected);
    assert_eq!(
        drain(&mut watch_from(&team_a, start)),
        expected,
        "a replay from the history applies the same rules"
    );
    assert_eq!(
        drain(&mut x_watch),
        [
            "ADDED n/x 2",
            "MODIFIED n/x 3",
            "MODIFIED n/x 4",
            "MODIFIED n/x 5",
            "DELETED n/x 6"
        ]
    );

    // The DELETED of an object leaving the selector is its last matching state.
    let mut watch = watch_from(&team_a, 4);
    let Some(Some(Ok(WatchEvent::Deleted(bytes)))) = watch.next().now_or_never() else {
        panic!("expected DELETED");
    };
    let value = json(&bytes);
    assert_eq!(value["metadata"]["labels"]["team"], "a");
    assert_eq!(value["metadata"]["resourceVersion"], "5");
    assert_eq!(value["kind"], "Pod");
}

#[test]
fn end_watches_drops_connections_and_unread_events() {
    let server = MemoryServer::new();
    let pods = pods();
    let lw = lister(&server, None, None, None);
    let mut watch = watch_from(&lw, 1);
    server.create(&pods, &pod("n", "a", "t", "")).unwrap();
    server.create(&pods, &pod("n", "b", "t", "")).unwrap();
    assert_eq!(server.open_watches(), 1);
    server.inject(Fault::EndWatches);
    assert_eq!(server.open_watches(), 0);
    assert_eq!(
        drain(&mut watch),
        ["END"],
        "queued events are lost with the connection"
    );
    assert_eq!(
        drain(&mut watch_from(&lw, 1)),
        ["ADDED n/a 2", "ADDED n/b 3"]
    );
}

#[tokio::test]
async fn end_watches_wakes_a_waiting_stream() {
    let server = MemoryServer::new();
    let lw = lister(&server, None, None, None);
    let mut watch = lw
        .watch(WatchRequest {
            resource_version: "1".into(),
            ..WatchRequest::default()
        })
        .await
        .unwrap();
    let waiting = tokio::spawn(async move { watch.next().await.is_none() });
    tokio::task::yield_now().await;
    server.inject(Fault::EndWatches);
    assert!(waiting.await.unwrap(), "the stream ended");
}

#[test]
fn end_next_watch_after_cuts_one_stream_mid_way() {
    let server = MemoryServer::new();
    let pods = pods();
    for name in ["a", "b", "c"] {
        server.create(&pods, &pod("n", name, "t", "")).unwrap();
    }
    let lw = lister(&server, None, None, None);
    server.inject(Fault::EndNextWatchAfter(2));
    assert_eq!(
        drain(&mut watch_from(&lw, 1)),
        ["ADDED n/a 2", "ADDED n/b 3", "END"]
    );
    let mut next = watch_from(&lw, 3);
    assert_eq!(drain(&mut next), ["ADDED n/c 4"]);
    server.create(&pods, &pod("n", "d", "t", "")).unwrap();
    assert_eq!(drain(&mut next), ["ADDED n/d 5"], "only one watch is cut");
}

#[test]
fn calls_fail_as_scripted_and_are_counted() {
    let server = MemoryServer::new();
    let lw = lister(&server, None, None, None);
    server.inject(Fault::Fail {
        call: Call::List,
        times: 2,
        status: Status::new(500, "InternalError", "etcd is down"),
        retry_after: None,
    });
    server.inject(Fault::Fail {
        call: Call::Watch,
        times: 1,
        status: Status::new(429, "TooManyRequests", "slow down"),
        retry_after: Some(Duration::from_secs(3)),
    });
    for _ in 0..2 {
        let error = block_on(lw.list(ListRequest::default())).unwrap_err();
        assert_eq!(error.retry_after(), None);
        assert!(
            matches!(&error, SourceError::Status { status, .. } if status.code == 500),
            "{error}"
        );
    }
    block_on(lw.list(ListRequest::default())).unwrap();
    let request = WatchRequest {
        resource_version: "1".into(),
        ..WatchRequest::default()
    };
    let Err(error) = block_on(lw.watch(request.clone())) else {
        panic!("the watch should fail");
    };
    assert_eq!(error.retry_after(), Some(Duration::from_secs(3)));
    let _watch = block_on(lw.watch(request)).unwrap();
    assert_eq!((server.list_calls(), server.watch_calls()), (3, 2));
}

#[test]
fn garbage_events_come_first_on_the_next_watch() {
    let server = MemoryServer::new();
    let pods = pods();
    server.create(&pods, &pod("n", "a", "t", "")).unwrap();
    for garbage in [
        Garbage::NotJson,
        Garbage::Truncated,
        Garbage::WrongKind,
        Garbage::MissingName,
    ] {
        server.inject(Fault::Garbage(garbage));
    }
    let lw = lister(&server, None, None, None);
    let decoder = ObjectDecoder::new(pods.clone());
    let mut watch = watch_from(&lw, 1);
    let mut decoded = Vec::new();
    while let Some(Some(Ok(WatchEvent::Added(bytes)))) = watch.next().now_or_never() {
        decoded.push(decoder.decode(&bytes));
    }
    assert_eq!(decoded.len(), 5);
    assert!(matches!(decoded[0], Err(DecodeError::NotJson(_))));
    assert!(matches!(decoded[1], Err(DecodeError::NotJson(_))));
    let Err(DecodeError::WrongKind { found, .. }) = &decoded[2] else {
        panic!("expected the wrong kind, got {:?}", decoded[2]);
    };
    assert_eq!(found, "v1/NotPod");
    assert_eq!(decoded[3], Err(DecodeError::MissingName));
    assert_eq!(decoded[4].as_ref().unwrap().key().as_str(), "n/a");
    assert_eq!(
        drain(&mut watch_from(&lw, 1)),
        ["ADDED n/a 2"],
        "garbage is sent once"
    );
}

#[test]
fn restart_ends_watches_and_keeps_or_drops_the_history() {
    let server = MemoryServer::new();
    let pods = pods();
    let lw = lister(&server, None, None, None);
    server.create(&pods, &pod("n", "a", "t", "")).unwrap();
    let mut watch = watch_from(&lw, 1);
    server.inject(Fault::Restart { keep_history: true });
    assert_eq!(drain(&mut watch), ["END"]);
    assert_eq!(drain(&mut watch_from(&lw, 1)), ["ADDED n/a 2"]);

    let mut watch = watch_from(&lw, 2);
    server.inject(Fault::Restart {
        keep_history: false,
    });
    assert_eq!(drain(&mut watch), ["END"]);
    assert_eq!(drain(&mut watch_from(&lw, 1)), ["ERROR 410", "END"]);
    let written = server.create(&pods, &pod("n", "b", "t", "")).unwrap();
    assert_eq!(
        written.resource_version, 3,
        "versions continue after a restart"
    );
    assert_eq!(server.snapshot(&pods).len(), 2, "objects survive a restart");
}

#[tokio::test(start_paused = true)]
async fn stalls_delay_the_answer_in_tokio_time() {
    let server = MemoryServer::new();
    let lw = lister(&server, None, None, None);
    server.inject(Fault::Stall {
        call: Call::List,
        delay: Duration::from_secs(5),
    });
    server.inject(Fault::Stall {
        call: Call::Watch,
        delay: Duration::from_secs(7),
    });
    let start = Instant::now();
    lw.list(ListRequest::default()).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    lw.list(ListRequest::default()).await.unwrap();
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(5),
        "one stall per fault"
    );

    // A write during the stall is part of what the stalled watch answers.
    let writer = server.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        writer.create(&pods(), &pod("n", "a", "t", "")).unwrap();
    });
    let mut watch = lw
        .watch(WatchRequest {
            resource_version: "1".into(),
            ..WatchRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(12));
    assert_eq!(drain(&mut watch), ["ADDED n/a 2"]);
}

#[tokio::test(start_paused = true)]
async fn a_watch_ends_at_its_timeout() {
    let server = MemoryServer::new();
    let lw = lister(&server, None, None, None);
    let start = Instant::now();
    let mut watch = lw
        .watch(WatchRequest {
            resource_version: "1".into(),
            timeout: Some(Duration::from_secs(30)),
            ..WatchRequest::default()
        })
        .await
        .unwrap();
    let writer = server.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(10)).await;
        writer.create(&pods(), &pod("n", "a", "t", "")).unwrap();
    });
    let event = watch.next().await.unwrap().unwrap();
    assert_eq!(describe(&event), "ADDED n/a 2");
    assert_eq!(start.elapsed(), Duration::from_secs(10));
    assert!(watch.next().await.is_none());
    assert_eq!(start.elapsed(), Duration::from_secs(30));
    assert_eq!(server.open_watches(), 0);
}

#[test]
fn a_watcher_that_falls_behind_is_dropped_not_waited_for() {
    let server = MemoryServer::with_config(ServerConfig {
        watch_buffer: 2,
        ..ServerConfig::default()
    });
    let pods = pods();
    let lw = lister(&server, None, None, None);
    let mut watch = watch_from(&lw, 1);
    for name in ["a", "b", "c", "d", "e"] {
        server.create(&pods, &pod("n", name, "t", "")).unwrap();
    }
    assert_eq!(server.open_watches(), 0);
    assert_eq!(drain(&mut watch), ["ADDED n/a 2", "ADDED n/b 3", "END"]);
    assert_eq!(
        drain(&mut watch_from(&lw, 3)),
        ["ADDED n/c 4", "ADDED n/d 5", "ADDED n/e 6"]
    );
}

#[test]
fn bookmarks_go_only_to_watches_that_asked() {
    let server = MemoryServer::new();
    let lw = lister(&server, None, None, None);
    let mut plain = watch_from(&lw, 1);
    let mut with_bookmarks = block_on(lw.watch(WatchRequest {
        resource_version: "1".into(),
        bookmarks: true,
        ..WatchRequest::default()
    }))
    .unwrap();
    server
        .create(
            &Resource::new("", "v1", "Secret", "secrets", true),
            r#"{"metadata":{"name":"s","namespace":"n"}}"#,
        )
        .unwrap();
    server.bookmark();
    assert_eq!(drain(&mut with_bookmarks), ["BOOKMARK 2"]);
    assert_eq!(drain(&mut plain), Vec::<String>::new());
}

#[test]
fn streaming_lists_send_the_state_then_an_end_bookmark() {
    let pods = pods();
    let request = |bookmarks| WatchRequest {
        resource_version: String::new(),
        send_initial_events: true,
        bookmarks,
        ..WatchRequest::default()
    };
    let old = MemoryServer::new();
    let lw = lister(&old, None, None, None);
    assert!(!lw.supports_streaming_list());
    let Err(SourceError::Status { status, .. }) = block_on(lw.watch(request(true))) else {
        panic!("a v1.23 server refuses streaming lists");
    };
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));

    let server = MemoryServer::with_config(ServerConfig {
        streaming_list: true,
        ..ServerConfig::default()
    });
    for name in ["b", "a", "c"] {
        server.create(&pods, &pod("n", name, "t", "")).unwrap();
    }
    server.create(&pods, &pod("n", "d", "other", "")).unwrap();
    let lw = lister(&server, None, Some("team=t"), None);
    assert!(lw.supports_streaming_list());
    let mut watch = block_on(lw.watch(request(true))).unwrap();
    assert_eq!(
        drain(&mut watch),
        [
            "ADDED n/a 3",
            "ADDED n/b 2",
            "ADDED n/c 4",
            "BOOKMARK 5 end"
        ]
    );
    server.update(&pods, &pod("n", "a", "t", "1")).unwrap();
    assert_eq!(drain(&mut watch), ["MODIFIED n/a 6"]);
    let mut without = block_on(lw.watch(request(false))).unwrap();
    assert_eq!(
        drain(&mut without),
        ["ADDED n/a 6", "ADDED n/b 2", "ADDED n/c 4"],
        "no end marker without bookmarks, as on a real server"
    );
    let mut legacy = watch_from(&lw, 0);
    assert_eq!(
        drain(&mut legacy).len(),
        3,
        "a watch from 0 starts with the state"
    );
}

#[test]
fn the_decoder_reads_what_the_server_emits() {
    let server = MemoryServer::new();
    let pods = pods();
    let decoder = ObjectDecoder::new(pods.clone());
    let first = server.create(&pods, &pod("n", "a", "t", "0")).unwrap();
    let lw = lister(&server, None, Some("team=t"), None);
    let list = block_on(lw.list(ListRequest::default())).unwrap();
    let item = decoder.decode(&list.items[0]).unwrap();
    assert_eq!(item.resource_version(), first.resource_version);
    assert_eq!(item.label("team"), Some("t"));
    assert_eq!(item.uid(), json(&first.json)["metadata"]["uid"].as_str());

    let mut watch = watch_from(&lw, first.resource_version);
    let added = server.create(&pods, &pod("n", "b", "t", "0")).unwrap();
    let modified = server.update(&pods, &pod("n", "b", "t", "1")).unwrap();
    let left = server.update(&pods, &pod("n", "b", "u", "1")).unwrap();
    let deleted = server.delete(&pods, &"n/a".into()).unwrap();
    let mut versions = Vec::new();
    while let Some(Some(Ok(event))) = watch.next().now_or_never() {
        let (WatchEvent::Added(bytes) | WatchEvent::Modified(bytes) | WatchEvent::Deleted(bytes)) =
            &event
        else {
            panic!("unexpected {event:?}");
        };
        assert!(bytes.starts_with(br#"{"kind":"Pod","apiVersion":"v1","#));
        versions.push(decoder.decode(bytes).unwrap().resource_version());
    }
    assert_eq!(
        versions,
        [
            added.resource_version,
            modified.resource_version,
            left.resource_version,
            deleted.resource_version
        ]
    );
}

/// A write in the property test: key index, team label, or a delete.
#[derive(Debug, Clone)]
enum Op {
    Apply(usize, bool, u8),
    Delete(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..6usize, any::<bool>(), any::<u8>()).prop_map(|(k, a, d)| Op::Apply(k, a, d)),
        1 => (0..6usize).prop_map(Op::Delete),
    ]
}

fn run(server: &MemoryServer, ops: &[Op]) {
    for op in ops {
        match op {
            Op::Apply(k, team_a, data) => {
                let team = if *team_a { "a" } else { "b" };
                let text = pod(["n", "m"][k % 2], &format!("p{k}"), team, &data.to_string());
                server.apply(&pods(), &text).unwrap();
            }
            Op::Delete(k) => {
                // Deleting a missing object is a 404 and changes nothing.
                let _ = server.delete(
                    &pods(),
                    &ObjectKey::new(Some(["n", "m"][k % 2]), &format!("p{k}")),
                );
            }
        }
    }
}

/// Checks one case of `list_then_watch_reproduces_the_state`.
fn list_then_watch(
    [before, during, after]: [&[Op]; 3],
    limit: u32,
    selector: Option<&str>,
    namespace: Option<&str>,
) -> Result<(), TestCaseError> {
    let server = MemoryServer::new();
    let lw = lister(&server, namespace, selector, None);
    run(&server, before);
    let mut request = ListRequest {
        limit: Some(limit),
        ..ListRequest::default()
    };
    let mut list_rv = None;
    let mut cache = BTreeMap::new();
    loop {
        let page = block_on(lw.list(request.clone())).unwrap();
        let list_rv = list_rv.get_or_insert_with(|| page.resource_version.clone());
        prop_assert_eq!(&page.resource_version, list_rv);
        for item in &page.items {
            let value = json(item);
            cache.insert(key_of(&value), value["metadata"]["resourceVersion"].clone());
        }
        if request.continue_token.is_none() {
            run(&server, during);
        }
        request.continue_token = page.continue_token;
        if request.continue_token.is_none() {
            break;
        }
    }
    run(&server, after);
    let mut last_rv: u64 = list_rv.unwrap().parse().unwrap();
    let mut watch = watch_from(&lw, last_rv);
    while let Some(Some(Ok(event))) = watch.next().now_or_never() {
        let (WatchEvent::Added(bytes) | WatchEvent::Modified(bytes) | WatchEvent::Deleted(bytes)) =
            &event
        else {
            panic!("unexpected {event:?}");
        };
        let value = json(bytes);
        let rv = value["metadata"]["resourceVersion"].clone();
        let rv_number: u64 = rv.as_str().unwrap().parse().unwrap();
        prop_assert!(rv_number > last_rv, "versions increase");
        last_rv = rv_number;
        let key = key_of(&value);
        match event {
            WatchEvent::Added(_) => prop_assert!(cache.insert(key, rv).is_none()),
            WatchEvent::Modified(_) => prop_assert!(cache.insert(key, rv).is_some()),
            _ => prop_assert!(cache.remove(&key).is_some()),
        }
    }
    let decoder = ObjectDecoder::new(pods());
    let selector = selector.map(|s| LabelSelector::parse(s).unwrap());
    let expected: BTreeMap<String, Value> = server
        .snapshot(&pods())
        .values()
        .map(|bytes| decoder.decode(bytes).unwrap())
        .filter(|o| namespace.is_none_or(|ns| o.namespace() == Some(ns)))
        .filter(|o| selector.as_ref().is_none_or(|s| s.matches(o)))
        .map(|o| {
            (
                o.key().to_string(),
                Value::from(o.resource_version().to_string()),
            )
        })
        .collect();
    prop_assert_eq!(cache, expected);
    Ok(())
}

proptest! {
    /// A paged list interleaved with writes, then a watch from its version, reproduce
    /// exactly the server's final state as a filtered informer would see it.
    #[test]
    fn list_then_watch_reproduces_the_state(
        before in prop::collection::vec(op(), 0..20),
        during in prop::collection::vec(op(), 0..10),
        after in prop::collection::vec(op(), 0..20),
        limit in 1u32..4,
        selector in prop::sample::select(vec![None, Some("team=a"), Some("team!=a")]),
        namespace in prop::sample::select(vec![None, Some("n")]),
    ) {
        list_then_watch([&before, &during, &after], limit, selector, namespace)?;
    }
}
