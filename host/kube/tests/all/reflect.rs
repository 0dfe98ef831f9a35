//! Informers over the kube source: bookmarks, relists, back-off, streaming lists, bad answers.

use std::time::{Duration, Instant};

use kubeplug_fake_apiserver::{FakeOptions, FaultCall, HttpFault};
use kubeplug_informer::reflector::{InitialListMode, ReflectorConfig};
use kubeplug_kube::lister::KubeSourceOptions;
use kubeplug_memory::Garbage;

use crate::support::{
    Errors, View, cache_state, cm, configmaps, eventually, informer, quick_config, server_state,
    start, synced,
};

const WAIT: Duration = Duration::from_secs(20);

fn list_then_watch() -> ReflectorConfig {
    ReflectorConfig {
        initial_list: InitialListMode::ListThenWatch,
        ..quick_config()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bookmark_advances_the_resume_version_so_a_restart_needs_no_relist() {
    let f = start(FakeOptions::default()).await;
    let secrets = kubeplug_informer::resource::Resource::new("", "v1", "Secret", "secrets", true);
    f.server
        .memory()
        .create(&configmaps(), &cm("a", "cm", "t", "x"))
        .unwrap();
    let errors = Errors::default();
    let inf = informer(
        f.lister(configmaps(), None, KubeSourceOptions::default()),
        configmaps(),
        list_then_watch(),
        &errors,
    );
    inf.start();
    synced(&inf, WAIT).await;
    // Other resources move the global version far past the configmaps' list version.
    for i in 0..20 {
        f.server
            .memory()
            .create(
                &secrets,
                &format!(r#"{{"metadata":{{"name":"s{i}","namespace":"a"}}}}"#),
            )
            .unwrap();
    }
    let events = inf.reflector_counts().events;
    // Bookmarks until one arrives (the watch may still be opening).
    assert!(
        eventually(WAIT, || {
            f.server.bookmark();
            inf.reflector_counts().events > events
        })
        .await
    );
    let watches = f.server.memory().watch_calls();
    // Compaction then a restart: a watch from the list's version would now be 410.
    f.server.inject(HttpFault::Compact);
    f.server.inject(HttpFault::Restart);
    assert!(eventually(WAIT, || f.server.memory().watch_calls() > watches).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        inf.reflector_counts().lists,
        1,
        "no relist: {:?}",
        errors.all()
    );
    assert!(
        !errors.all().iter().any(|e| e.contains("410")),
        "{:?}",
        errors.all()
    );
    inf.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_410_relist_delivers_tombstones_for_objects_deleted_meanwhile() {
    let f = start(FakeOptions::default()).await;
    for i in 1..=5 {
        f.server
            .memory()
            .create(&configmaps(), &cm("a", &format!("cm-{i}"), "t", "x"))
            .unwrap();
    }
    let errors = Errors::default();
    let inf = informer(
        f.lister(configmaps(), None, KubeSourceOptions::default()),
        configmaps(),
        list_then_watch(),
        &errors,
    );
    let view = View::follow(&inf);
    inf.start();
    synced(&inf, WAIT).await;
    // Keep the informer from watching while objects go away and the history is compacted.
    f.server.inject(HttpFault::Fail {
        call: FaultCall::Watch,
        times: 1_000_000,
        code: 503,
        retry_after: None,
    });
    f.server.inject(HttpFault::DropWatches);
    f.server
        .memory()
        .delete(&configmaps(), &"a/cm-2".into())
        .unwrap();
    f.server
        .memory()
        .delete(&configmaps(), &"a/cm-3".into())
        .unwrap();
    f.server
        .memory()
        .create(&configmaps(), &cm("a", "cm-9", "t", "x"))
        .unwrap();
    f.server.inject(HttpFault::Compact);
    f.server.inject(HttpFault::Fail {
        call: FaultCall::Watch,
        times: 0,
        code: 503,
        retry_after: None,
    });
    assert!(
        eventually(WAIT, || cache_state(&inf)
            == server_state(&f.server, &configmaps()))
        .await
    );
    assert!(
        eventually(WAIT, || view.present()
            == server_state(&f.server, &configmaps()))
        .await
    );
    let mut tombstones = view.tombstones.lock().unwrap().clone();
    tombstones.sort();
    assert_eq!(tombstones, vec!["a/cm-2".to_owned(), "a/cm-3".to_owned()]);
    assert!(inf.reflector_counts().lists >= 2);
    assert!(
        errors.all().iter().any(|e| e.contains("410")),
        "{:?}",
        errors.all()
    );
    inf.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn back_off_honours_retry_after() {
    let f = start(FakeOptions::default()).await;
    f.server
        .memory()
        .create(&configmaps(), &cm("a", "cm", "t", "x"))
        .unwrap();
    f.server.inject(HttpFault::Fail {
        call: FaultCall::List,
        times: 1,
        code: 429,
        retry_after: Some(2),
    });
    let errors = Errors::default();
    let inf = informer(
        f.lister(configmaps(), None, KubeSourceOptions::default()),
        configmaps(),
        list_then_watch(),
        &errors,
    );
    let started = Instant::now();
    inf.start();
    synced(&inf, WAIT).await;
    let took = started.elapsed();
    // The back-off alone would be 20-40 ms.
    assert!(took >= Duration::from_secs(2), "synced after {took:?}");
    assert!(took < Duration::from_secs(10), "synced after {took:?}");
    assert!(
        errors.all().iter().any(|e| e.contains("429")),
        "{:?}",
        errors.all()
    );
    inf.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_list_is_used_when_offered() {
    let f = start(FakeOptions {
        streaming_list: true,
        ..FakeOptions::default()
    })
    .await;
    for i in 0..5 {
        f.server
            .memory()
            .create(&configmaps(), &cm("a", &format!("cm-{i}"), "t", "x"))
            .unwrap();
    }
    let errors = Errors::default();
    let inf = informer(
        f.lister(configmaps(), None, KubeSourceOptions::default()),
        configmaps(),
        quick_config(),
        &errors,
    );
    inf.start();
    synced(&inf, WAIT).await;
    assert_eq!(cache_state(&inf), server_state(&f.server, &configmaps()));
    assert_eq!(f.server.memory().list_calls(), 0, "no list call");
    assert!(
        f.server
            .requests()
            .iter()
            .any(|r| r.uri.contains("sendInitialEvents=true")
                && r.uri.contains("resourceVersionMatch=NotOlderThan"))
    );
    inf.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_streaming_list_falls_back_to_list_then_watch() {
    let f = start(FakeOptions {
        streaming_list: false,
        ..FakeOptions::default()
    })
    .await;
    for i in 0..5 {
        f.server
            .memory()
            .create(&configmaps(), &cm("a", &format!("cm-{i}"), "t", "x"))
            .unwrap();
    }
    let errors = Errors::default();
    let inf = informer(
        f.lister(configmaps(), None, KubeSourceOptions::default()),
        configmaps(),
        quick_config(),
        &errors,
    );
    inf.start();
    synced(&inf, WAIT).await;
    assert_eq!(cache_state(&inf), server_state(&f.server, &configmaps()));
    assert!(
        f.server.memory().list_calls() >= 3,
        "paginated list after the refusal"
    );
    let requests = f.server.requests();
    let refused = requests
        .iter()
        .position(|r| r.uri.contains("sendInitialEvents=true"))
        .expect("tried streaming");
    assert!(
        requests[refused..]
            .iter()
            .any(|r| !r.uri.contains("watch=1") && r.uri.contains("limit=2"))
    );
    // With the flag off, no streaming list is even tried.
    let f2 = start(FakeOptions::default()).await;
    let off = KubeSourceOptions {
        streaming_list: false,
        ..KubeSourceOptions::default()
    };
    let inf2 = informer(
        f2.lister(configmaps(), None, off),
        configmaps(),
        quick_config(),
        &errors,
    );
    inf2.start();
    synced(&inf2, WAIT).await;
    assert!(
        !f2.server
            .requests()
            .iter()
            .any(|r| r.uri.contains("sendInitialEvents"))
    );
    inf.stop().await;
    inf2.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_answers_are_reported_with_the_resource_and_the_informer_recovers() {
    let f = start(FakeOptions::default()).await;
    for i in 0..3 {
        f.server
            .memory()
            .create(&configmaps(), &cm("a", &format!("cm-{i}"), "t", "x"))
            .unwrap();
    }
    let raw = |code: u16, body: &str| HttpFault::RawAnswer {
        call: FaultCall::List,
        times: 1,
        code,
        body: body.to_owned(),
    };
    let errors = Errors::default();
    let inf = informer(
        f.lister(configmaps(), None, KubeSourceOptions::default()),
        configmaps(),
        list_then_watch(),
        &errors,
    );
    let view = View::follow(&inf);
    // A non-JSON answer, then a list of the wrong kind, then a Status of an unknown shape.
    f.server.inject(raw(200, "<html>502 Bad Gateway</html>"));
    f.server.inject(raw(
        200,
        r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[]}"#,
    ));
    f.server
        .inject(raw(500, r#"{"kind":"Mystery","detail":"?"}"#));
    inf.start();
    synced(&inf, WAIT).await;
    let all = errors.all();
    assert!(all.len() >= 3, "{all:?}");
    assert!(
        all.iter().all(|e| e.contains("configmaps")),
        "every error names the resource: {all:?}"
    );
    assert!(all.iter().any(|e| e.contains("Bad Gateway")), "{all:?}");
    assert!(
        all.iter()
            .any(|e| e.contains("PodList") || e.contains("ConfigMapList")),
        "{all:?}"
    );
    assert!(
        all.iter()
            .any(|e| e.contains("500") && e.contains("Mystery")),
        "{all:?}"
    );
    // Garbage in the watch: reported, and the informer carries on from the last good version.
    f.server.inject(HttpFault::Garbage(Garbage::NotJson));
    f.server.inject(HttpFault::DropWatches);
    f.server
        .memory()
        .create(&configmaps(), &cm("a", "after", "t", "x"))
        .unwrap();
    assert!(
        eventually(WAIT, || cache_state(&inf)
            == server_state(&f.server, &configmaps()))
        .await
    );
    assert!(
        eventually(WAIT, || view.present()
            == server_state(&f.server, &configmaps()))
        .await
    );
    assert!(
        errors
            .all()
            .iter()
            .any(|e| e.contains("watch line is not an event envelope")),
        "{:?}",
        errors.all()
    );
    inf.stop().await;
}
