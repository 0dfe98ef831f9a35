//! KubeListerWatcher on its own, with the fake server's faults: watch lines, `Status`
//! answers, bounds. Pages, selectors and scopes run on the fake and the real server in
//! `tests/real/both.rs`.

use futures::StreamExt;
use kubeplug_fake_apiserver::{FakeOptions, HttpFault};
use kubeplug_informer::selector::LabelSelector;
use kubeplug_informer::source::{
    ListRequest, ListerWatcher, SourceError, WatchEvent, WatchRequest,
};
use kubeplug_kube::lister::{KubeListerWatcher, KubeSourceOptions};

use crate::support::{cm, configmaps, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_cut_in_half_ends_the_watch_with_a_transport_error() {
    let f = start(FakeOptions::default()).await;
    let lw = f.lister(configmaps(), None, KubeSourceOptions::default());
    let rv = f.server.memory().current_resource_version().to_string();
    f.server.inject(HttpFault::CutNextWatchLine { after: 1 });
    let mut watch = lw
        .watch(WatchRequest {
            resource_version: rv,
            ..Default::default()
        })
        .await
        .unwrap();
    f.server
        .memory()
        .create(&configmaps(), &cm("a", "one", "t", "x"))
        .unwrap();
    f.server
        .memory()
        .create(&configmaps(), &cm("a", "two", "t", "x"))
        .unwrap();
    let first = tokio::time::timeout(std::time::Duration::from_secs(5), watch.next())
        .await
        .unwrap();
    assert!(matches!(first, Some(Ok(WatchEvent::Added(_)))), "{first:?}");
    let second = tokio::time::timeout(std::time::Duration::from_secs(5), watch.next())
        .await
        .unwrap();
    match second {
        Some(Err(SourceError::Transport { what: message, .. })) => {
            assert!(
                message.contains("/api/v1/configmaps") && message.contains(f.server.address()),
                "{message}"
            );
        }
        other => panic!("expected a transport error, got {other:?}"),
    }
    assert!(watch.next().await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_answers_keep_code_reason_and_retry_after() {
    let f = start(FakeOptions::default()).await;
    let lw = f.lister(configmaps(), None, KubeSourceOptions::default());
    f.server.inject(HttpFault::Fail {
        call: kubeplug_fake_apiserver::FaultCall::List,
        times: 1,
        code: 429,
        retry_after: Some(7),
    });
    match lw.list(ListRequest::default()).await {
        Err(SourceError::Status {
            status,
            retry_after,
        }) => {
            assert_eq!(
                (status.code, status.reason.as_str()),
                (429, "TooManyRequests")
            );
            assert_eq!(retry_after, Some(std::time::Duration::from_secs(7)));
        }
        other => panic!("{other:?}"),
    }
    // A field ConfigMaps are not selected on: the server's refusal is the list's error.
    let bad = KubeListerWatcher::new(
        f.client.clone(),
        configmaps(),
        None,
        KubeSourceOptions::default(),
    )
    .selecting(
        &LabelSelector::everything(),
        &"spec.color=red".parse().unwrap(),
    );
    match bad.list(ListRequest::default()).await {
        Err(SourceError::Status { status, .. }) => assert_eq!(status.code, 400),
        other => panic!("{other:?}"),
    }
    // An expired continue token: 410, which makes the Reflector restart its list.
    for i in 0..3 {
        f.server
            .memory()
            .create(&configmaps(), &cm("a", &format!("c{i}"), "t", "x"))
            .unwrap();
    }
    let page = lw
        .list(ListRequest {
            limit: Some(1),
            ..Default::default()
        })
        .await
        .unwrap();
    f.server
        .memory()
        .create(&configmaps(), &cm("a", "later", "t", "x"))
        .unwrap();
    f.server.inject(HttpFault::Compact);
    let error = lw
        .list(ListRequest {
            limit: Some(1),
            continue_token: page.continue_token,
            resource_version: None,
        })
        .await
        .unwrap_err();
    assert!(error.is_gone(), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_answer_or_object_past_its_bound_is_an_error_naming_the_bound() {
    let f = start(FakeOptions::default()).await;
    let big = "x".repeat(4096);
    for i in 0..4 {
        f.server
            .memory()
            .create(&configmaps(), &cm("a", &format!("cm-{i}"), "t", &big))
            .unwrap();
    }
    let whole = f
        .lister(configmaps(), None, KubeSourceOptions::default())
        .list(ListRequest::default())
        .await
        .unwrap();
    assert_eq!(whole.items.len(), 4);
    let body_bound = 3 * 4096;
    let small_pages = f.lister(
        configmaps(),
        None,
        KubeSourceOptions {
            max_list_bytes: body_bound,
            ..KubeSourceOptions::default()
        },
    );
    match small_pages.list(ListRequest::default()).await {
        Err(SourceError::Decode { what: message, .. }) => assert!(
            message.contains(&format!("over {body_bound} bytes (max_list_bytes)"))
                && message.contains("/api/v1/configmaps"),
            "{message}"
        ),
        other => panic!("expected the list bound to be named, got {other:?}"),
    }
    // Within the bound once the pages are smaller.
    let page = small_pages
        .list(ListRequest {
            limit: Some(2),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(page.items.len(), 2);

    let object_bound = 4096;
    let small_objects = f.lister(
        configmaps(),
        None,
        KubeSourceOptions {
            max_line_bytes: object_bound,
            ..KubeSourceOptions::default()
        },
    );
    match small_objects.list(ListRequest::default()).await {
        Err(SourceError::Decode { what: message, .. }) => assert!(
            message.contains("list item 0")
                && message.contains(&format!("over the {object_bound} bytes"))
                && message.contains("/api/v1/configmaps"),
            "{message}"
        ),
        other => panic!("expected the object bound to be named, got {other:?}"),
    }
}

/// Issue 24: a type served without the metadata form (as some aggregated APIs are) answers a
/// metadata-only source with whole objects; the metadata-only decoder keeps their metadata,
/// so the informer syncs and follows changes all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_without_the_metadata_form_falls_back_to_whole_objects() {
    use kubeplug_informer::informer::SharedIndexInformer;
    use kubeplug_informer::object::ObjectDecoder;
    use kubeplug_informer::reflector::ReflectorConfig;
    use kubeplug_informer::resource::Resource;

    let f = start(FakeOptions::default()).await;
    let widgets = Resource::new("example.com", "v1", "Widget", "widgets", true);
    f.server.serve_whole_only(widgets.clone());
    let widget = |name: &str| {
        format!(
            r#"{{"apiVersion":"example.com/v1","kind":"Widget","metadata":{{"name":"{name}","namespace":"ns"}},"spec":{{"size":1}}}}"#
        )
    };
    f.server.memory().create(&widgets, &widget("w1")).unwrap();
    let lw = f
        .lister(widgets.clone(), None, KubeSourceOptions::default())
        .metadata_only();
    let page = lw.list(ListRequest::default()).await.unwrap();
    let item: serde_json::Value = serde_json::from_slice(&page.items[0]).unwrap();
    assert!(item.get("spec").is_some(), "whole objects: {item}");

    let informer = SharedIndexInformer::new(
        std::sync::Arc::new(lw),
        ObjectDecoder::new(widgets.clone()).metadata_only(),
        ReflectorConfig::default(),
    );
    informer.start();
    tokio::time::timeout(std::time::Duration::from_secs(10), informer.wait_for_sync())
        .await
        .expect("synced");
    f.server.memory().create(&widgets, &widget("w2")).unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while informer.indexer().len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "w2 never arrived");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for object in informer.indexer().list() {
        let json: serde_json::Value = serde_json::from_str(object.json()).unwrap();
        assert_eq!(
            (json["kind"].as_str(), json["apiVersion"].as_str()),
            (Some("Widget"), Some("example.com/v1"))
        );
        assert!(json.get("spec").is_none(), "metadata alone cached: {json}");
    }
    informer.stop().await;
}

/// The Reflector draws each watch's timeout from `ReflectorConfig::watch_timeout`; the
/// lister asks the server for that draw, not one of its own (before, it took the shorter
/// of the two, and drew 150 to 290 s: a longer timeout never reached the server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_asks_the_server_for_the_reflectors_timeout() {
    use std::time::Duration;

    use kubeplug_informer::informer::SharedIndexInformer;
    use kubeplug_informer::object::ObjectDecoder;
    use kubeplug_informer::reflector::ReflectorConfig;

    let f = start(FakeOptions::default()).await;
    let lw = f.lister(configmaps(), None, KubeSourceOptions::default());
    let config = ReflectorConfig {
        watch_timeout: Duration::from_secs(437)..Duration::from_secs(438),
        ..ReflectorConfig::default()
    };
    let informer = SharedIndexInformer::new(
        std::sync::Arc::new(lw),
        ObjectDecoder::new(configmaps()),
        config,
    );
    informer.start();
    tokio::time::timeout(Duration::from_secs(10), informer.wait_for_sync())
        .await
        .expect("synced");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let watch = loop {
        let requests = f.server.requests();
        if let Some(watch) = requests.into_iter().find(|r| r.uri.contains("watch=1")) {
            break watch;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no watch was opened"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(watch.uri.contains("timeoutSeconds=437"), "{}", watch.uri);
    informer.stop().await;
}
