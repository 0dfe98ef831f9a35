//! The proxy in front of the shared API server: cuts and stalls hit only its clients.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchParams};
use kubeplug_envtest::{AfterCut, Envtest, User};

use crate::{bounded, config_map};

#[tokio::test]
async fn a_cut_fails_the_proxied_client_while_the_direct_one_works() -> anyhow::Result<()> {
    let Some(env) = Envtest::shared() else {
        return Ok(());
    };
    let namespace = env.namespace("cut")?;
    let proxy = env.proxy()?;
    let proxied: Api<ConfigMap> = Api::namespaced(env.client_via(User::Admin, &proxy)?, &namespace);
    let direct: Api<ConfigMap> = Api::namespaced(env.client(User::Admin)?, &namespace);
    bounded(
        "create through the proxy",
        proxied.create(&PostParams::default(), &config_map("a", "1")),
    )
    .await?;
    assert!(
        proxy.open_connections() > 0,
        "kube keeps its connection open"
    );

    proxy.cut(AfterCut::Refuse);
    let refused = bounded("get through the cut proxy", proxied.get("a")).await;
    assert!(refused.is_err(), "{refused:?}");
    bounded("get directly", direct.get("a")).await?;

    proxy.accept_again();
    bounded("get through the proxy again", proxied.get("a")).await?;
    Ok(())
}

#[tokio::test]
async fn a_cut_ends_an_open_watch() -> anyhow::Result<()> {
    let Some(env) = Envtest::shared() else {
        return Ok(());
    };
    let namespace = env.namespace("cut-watch")?;
    let proxy = env.proxy()?;
    let proxied: Api<ConfigMap> = Api::namespaced(env.client_via(User::Admin, &proxy)?, &namespace);
    let list = bounded("list", proxied.list(&ListParams::default())).await?;
    let version = list.metadata.resource_version.unwrap_or_default();
    let mut events = bounded(
        "watch",
        proxied.watch(&WatchParams::default().timeout(60), &version),
    )
    .await?
    .boxed();
    proxy.cut(AfterCut::Accept);
    // The stream ends or fails; it does not wait for the watch's 60 s.
    match bounded("the watch's end", events.next()).await {
        None | Some(Err(_)) => {}
        Some(Ok(event)) => panic!("expected the watch to end, got {event:?}"),
    }
    bounded("list after the cut", proxied.list(&ListParams::default())).await?;
    Ok(())
}

#[tokio::test]
async fn a_stall_holds_requests_until_resumed() -> anyhow::Result<()> {
    let Some(env) = Envtest::shared() else {
        return Ok(());
    };
    let namespace = env.namespace("stall")?;
    let proxy = env.proxy()?;
    let proxied: Api<ConfigMap> = Api::namespaced(env.client_via(User::Admin, &proxy)?, &namespace);
    let direct: Api<ConfigMap> = Api::namespaced(env.client(User::Admin)?, &namespace);
    bounded(
        "create",
        direct.create(&PostParams::default(), &config_map("a", "1")),
    )
    .await?;
    bounded("get through the proxy", proxied.get("a")).await?;

    proxy.stall();
    let mut held = tokio::spawn(async move { proxied.get("a").await });
    assert!(
        tokio::time::timeout(Duration::from_secs(1), &mut held)
            .await
            .is_err(),
        "the request finished through a stalled proxy"
    );
    assert!(
        proxy.open_connections() > 0,
        "a stall keeps connections open"
    );
    bounded("get directly", direct.get("a")).await?;

    proxy.resume();
    let map = bounded("the held request", held).await??;
    assert_eq!(map.data, config_map("a", "1").data);
    Ok(())
}
