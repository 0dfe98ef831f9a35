//! The shared control plane: objects, users and the kubeconfig file.

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::api::{Api, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kubeplug_envtest::{Envtest, User};

use crate::{api_status, bounded, config_map};

#[tokio::test]
async fn the_admin_creates_a_config_map_and_reads_it_back() -> anyhow::Result<()> {
    let Some(env) = Envtest::shared() else {
        return Ok(());
    };
    let namespace = env.namespace("read-back")?;
    let api: Api<ConfigMap> = Api::namespaced(env.client(User::Admin)?, &namespace);
    let created = bounded(
        "create",
        api.create(&PostParams::default(), &config_map("a", "1")),
    )
    .await?;
    let read = bounded("get", api.get("a")).await?;
    assert_eq!(read.data, config_map("a", "1").data);
    assert_eq!(read.metadata.uid, created.metadata.uid);
    assert_eq!(
        read.metadata.resource_version,
        created.metadata.resource_version
    );
    // The audit log has every request, with who sent it and with which client.
    let path = format!("/api/v1/namespaces/{namespace}/configmaps");
    let request = http::Request::get(format!("{path}/a"))
        .header(http::header::USER_AGENT, "envtest-probe/1")
        .body(Vec::new())?;
    bounded("get", env.client(User::Admin)?.request_text(request)).await?;
    let events = env.audit_events()?;
    let create = events
        .iter()
        .find(|e| e.verb == "create" && e.request_uri.starts_with(&path))
        .expect("the create is in the audit log");
    assert_eq!(create.user, User::Admin.name());
    assert_eq!(create.code, Some(201));
    let probe = events
        .iter()
        .find(|e| e.user_agent == "envtest-probe/1")
        .expect("the probe is in the audit log");
    assert_eq!(
        (probe.verb.as_str(), probe.request_uri.as_str()),
        ("get", format!("{path}/a").as_str())
    );
    Ok(())
}

#[tokio::test]
async fn the_unprivileged_user_is_forbidden_by_rbac() -> anyhow::Result<()> {
    let Some(env) = Envtest::shared() else {
        return Ok(());
    };
    let namespace = env.namespace("forbidden")?;
    let api: Api<ConfigMap> = Api::namespaced(env.client(User::Unprivileged)?, &namespace);
    let status = api_status(
        bounded("list", api.list(&ListParams::default())).await,
        "a 403",
    );
    assert_eq!(
        (status.code, status.reason.as_str()),
        (403, "Forbidden"),
        "{status:?}"
    );
    assert!(
        status.message.contains("\"envtest-user\""),
        "{}",
        status.message
    );
    // The same request as the admin works: the refusal is RBAC's, not a broken namespace.
    let admin: Api<ConfigMap> = Api::namespaced(env.client(User::Admin)?, &namespace);
    bounded("list as admin", admin.list(&ListParams::default())).await?;
    Ok(())
}

/// The ECDSA P-256 service-account key signs tokens the API server then accepts.
#[tokio::test]
async fn service_account_tokens_signed_with_the_ecdsa_key_authenticate() -> anyhow::Result<()> {
    let Some(env) = Envtest::shared() else {
        return Ok(());
    };
    let namespace = env.namespace("token")?;
    let admin = env.client(User::Admin)?;
    let accounts: Api<ServiceAccount> = Api::namespaced(admin, &namespace);
    let mut account = ServiceAccount::default();
    account.metadata.name = Some("robot".into());
    bounded(
        "create the account",
        accounts.create(&PostParams::default(), &account),
    )
    .await?;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(vec!["https://kubernetes.default.svc".into()]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let issued = bounded(
        "request a token",
        accounts.create_token_request("robot", &PostParams::default(), &request),
    )
    .await?;
    let token = issued
        .status
        .and_then(|status| status.token)
        .unwrap_or_default();
    assert!(!token.is_empty());

    let dir = tempfile::tempdir()?;
    let as_token = |token: &str| -> anyhow::Result<Api<ConfigMap>> {
        let path = dir.path().join(format!("token-{}", token.len()));
        std::fs::write(&path, token)?;
        let mut config = env.kube_config(User::Admin);
        config.auth_info.token_file = Some(path.display().to_string());
        Ok(Api::namespaced(kube::Client::try_from(config)?, &namespace))
    };
    // Authenticated as the account (RBAC then refuses it), where a forged token is not.
    let status = api_status(
        bounded(
            "list as the account",
            as_token(&token)?.list(&ListParams::default()),
        )
        .await,
        "a 403",
    );
    assert_eq!(status.code, 403, "{status:?}");
    let account_name = format!("system:serviceaccount:{namespace}:robot");
    assert!(status.message.contains(&account_name), "{}", status.message);
    // One character inside the signature changed (the last one may carry only padding bits,
    // which base64 decoders ignore).
    let signature = token.rfind('.').expect("a JWT") + 10;
    let replacement = if &token[signature..=signature] == "A" {
        "B"
    } else {
        "A"
    };
    let forged = format!(
        "{}{replacement}{}",
        &token[..signature],
        &token[signature + 1..]
    );
    let status = api_status(
        bounded(
            "list with a forged token",
            as_token(&forged)?.list(&ListParams::default()),
        )
        .await,
        "a 401",
    );
    assert_eq!(status.code, 401, "{status:?}");
    Ok(())
}

#[tokio::test]
async fn the_kubeconfig_file_reaches_the_server_as_the_admin() -> anyhow::Result<()> {
    let Some(env) = Envtest::shared() else {
        return Ok(());
    };
    let kubeconfig = Kubeconfig::read_from(env.kubeconfig())?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let namespace = env.namespace("kubeconfig")?;
    let api: Api<ConfigMap> = Api::namespaced(kube::Client::try_from(config)?, &namespace);
    bounded(
        "create",
        api.create(&PostParams::default(), &config_map("b", "2")),
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn etcds_revision_is_the_resource_version_the_api_server_writes() -> anyhow::Result<()> {
    let Some(env) = Envtest::shared() else {
        return Ok(());
    };
    let namespace = env.namespace("revision")?;
    let api: Api<ConfigMap> = Api::namespaced(env.client(User::Admin)?, &namespace);
    let before = env.etcd_status()?;
    let created = bounded(
        "create",
        api.create(&PostParams::default(), &config_map("c", "3")),
    )
    .await?;
    let after = env.etcd_status()?;
    let version: i64 = created
        .metadata
        .resource_version
        .as_deref()
        .unwrap_or("")
        .parse()?;
    // Other tests write to the shared etcd meanwhile, so only the order is certain.
    assert!(
        before.revision < version && version <= after.revision,
        "{before:?} {version} {after:?}"
    );
    eprintln!("etcd {} at revision {}", after.version, after.revision);
    Ok(())
}
