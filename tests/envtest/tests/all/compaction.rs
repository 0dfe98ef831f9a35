//! Compacting etcd through its JSON gateway expires older resource versions.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kubeplug_envtest::{Envtest, Options, User};

use crate::{api_status, bounded, config_map};

/// The first event of a watch from `version`.
async fn first_event(api: &Api<ConfigMap>, version: &str) -> anyhow::Result<WatchEvent<ConfigMap>> {
    let params = WatchParams::default().timeout(10);
    let mut events = bounded("start a watch", api.watch(&params, version))
        .await?
        .boxed();
    let first = bounded("a watch event", events.try_next()).await?;
    first.ok_or_else(|| anyhow::anyhow!("the watch from {version} ended without an event"))
}

#[tokio::test]
async fn a_compaction_expires_watches_and_continue_tokens_from_before_it() -> anyhow::Result<()> {
    // Without the watch cache etcd serves the watch, so its compaction shows.
    let Some(env) = Envtest::start_or_skip(&Options::default().watch_cache(false)) else {
        return Ok(());
    };
    let namespace = env.namespace("compaction")?;
    let api: Api<ConfigMap> = Api::namespaced(env.client(User::Admin)?, &namespace);
    let post = PostParams::default();
    let first = bounded("create a", api.create(&post, &config_map("a", "1"))).await?;
    let old_version = first.metadata.resource_version.clone().unwrap_or_default();
    bounded("create b", api.create(&post, &config_map("b", "2"))).await?;
    let page = bounded("list a page", api.list(&ListParams::default().limit(1))).await?;
    let token = page.metadata.continue_.clone().unwrap_or_default();
    assert!(
        !token.is_empty(),
        "two objects, a page of one: there is more"
    );

    // Before the compaction the old version is still watchable: the next event is b's.
    match first_event(&api, &old_version).await? {
        WatchEvent::Added(map) => assert_eq!(map.metadata.name.as_deref(), Some("b")),
        other => panic!("expected b's ADDED, got {other:?}"),
    }

    bounded("create c", api.create(&post, &config_map("c", "3"))).await?;
    let revision = env.compact()?;
    assert!(
        revision > old_version.parse::<i64>()? + 1,
        "the compaction passed b"
    );

    match first_event(&api, &old_version).await {
        Ok(WatchEvent::Error(status)) => assert_eq!(status.code, 410, "{status:?}"),
        Err(error) => match error.downcast_ref::<kube::Error>() {
            Some(kube::Error::Api(status)) => assert_eq!(status.code, 410, "{status:?}"),
            _ => panic!("expected 410, got {error:?}"),
        },
        Ok(other) => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    let status = api_status(
        bounded(
            "the next page",
            api.list(&ListParams::default().limit(1).continue_token(&token)),
        )
        .await,
        "410 Expired",
    );
    assert_eq!(
        (status.code, status.reason.as_str()),
        (410, "Expired"),
        "{status:?}"
    );

    // New versions are unaffected.
    let current = bounded("list", api.list(&ListParams::default())).await?;
    assert_eq!(current.items.len(), 3);
    let mut events = bounded(
        "watch from now",
        api.watch(
            &WatchParams::default().timeout(10),
            &current.metadata.resource_version.unwrap_or_default(),
        ),
    )
    .await?
    .boxed();
    bounded(
        "update a",
        api.replace("a", &post, &config_map("a", "changed")),
    )
    .await?;
    match bounded("the update's event", events.next()).await {
        Some(Ok(WatchEvent::Modified(map))) => {
            assert_eq!(map.data, config_map("a", "changed").data)
        }
        other => panic!("expected a's MODIFIED, got {other:?}"),
    }
    Ok(())
}
