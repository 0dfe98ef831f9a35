//! Restarting the API server on the same etcd.

use std::time::Instant;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kubeplug_envtest::{Envtest, Options, User};

use crate::{bounded, config_map};

#[tokio::test]
async fn a_restart_keeps_objects_and_resource_versions() -> anyhow::Result<()> {
    let Some(mut env) = Envtest::start_or_skip(&Options::default()) else {
        return Ok(());
    };
    let namespace = env.namespace("restart")?;
    let client = env.client(User::Admin)?;
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let before = bounded(
        "create",
        api.create(&PostParams::default(), &config_map("kept", "1")),
    )
    .await?;
    let (old_apiserver, etcd, addr) = (env.apiserver_pid(), env.etcd_pid(), env.apiserver_addr());

    let started = Instant::now();
    env.restart_apiserver()?;
    eprintln!("kube-apiserver restarted in {:?}", started.elapsed());
    assert_ne!(env.apiserver_pid(), old_apiserver);
    assert_eq!((env.etcd_pid(), env.apiserver_addr()), (etcd, addr));

    // The client made before the restart reconnects by itself.
    let after = bounded("get after the restart", api.get("kept")).await?;
    assert_eq!(after.metadata.uid, before.metadata.uid);
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    assert_eq!(after.data, before.data);
    let newer = bounded(
        "create after",
        api.create(&PostParams::default(), &config_map("new", "2")),
    )
    .await?;
    let version = |map: &ConfigMap| {
        map.metadata
            .resource_version
            .as_deref()
            .unwrap_or("")
            .parse::<u64>()
    };
    assert!(version(&newer)? > version(&before)?);
    Ok(())
}
