//! Client configuration: the in-cluster path over HTTPS, and bad kubeconfigs.

use kubeplug_fake_apiserver::{FakeApiServer, FakeOptions};
use kubeplug_kube::config::{ConfigSource, InCluster, KubeClient};

async fn tls_server(token: &str) -> FakeApiServer {
    FakeApiServer::start(FakeOptions {
        tls: true,
        bearer_token: Some(token.to_owned()),
        ..FakeOptions::default()
    })
    .await
    .unwrap()
}

fn service_account(dir: &std::path::Path, token: &str, ca_pem: &str) {
    std::fs::write(dir.join("token"), token).unwrap();
    std::fs::write(dir.join("ca.crt"), ca_pem).unwrap();
    std::fs::write(dir.join("namespace"), "kubeplug-system\n").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_cluster_config_sends_the_bearer_token_and_verifies_the_ca() {
    let server = tls_server("s3cr3t").await;
    let dir = tempfile::tempdir().unwrap();
    service_account(dir.path(), "s3cr3t", server.ca_pem().unwrap());
    let port = server.socket_addr().port().to_string();
    let in_cluster = InCluster::with_dir(Some("127.0.0.1".into()), Some(port.clone()), dir.path());
    let client = KubeClient::from_source(&ConfigSource::InCluster(in_cluster))
        .await
        .unwrap();
    assert_eq!(client.client().default_namespace(), "kubeplug-system");
    client
        .check()
        .await
        .expect("the server answers over TLS with the token");
    let seen = server.requests();
    assert!(
        seen.iter()
            .all(|r| r.authorization.as_deref() == Some("Bearer s3cr3t")),
        "{seen:?}"
    );

    // A CA that did not sign the server's certificate: the TLS handshake must fail.
    let other = tls_server("x").await;
    let wrong = tempfile::tempdir().unwrap();
    service_account(wrong.path(), "s3cr3t", other.ca_pem().unwrap());
    let in_cluster = InCluster::with_dir(Some("127.0.0.1".into()), Some(port), wrong.path());
    let client = KubeClient::from_source(&ConfigSource::InCluster(in_cluster))
        .await
        .unwrap();
    let error = client.check().await.unwrap_err().to_string();
    assert!(
        error.contains("in-cluster") && error.contains(server.address()),
        "{error}"
    );

    // A wrong token is refused by the server (401), and said so.
    let bad_token = tempfile::tempdir().unwrap();
    service_account(bad_token.path(), "nope", server.ca_pem().unwrap());
    let in_cluster = InCluster::with_dir(
        Some("127.0.0.1".into()),
        Some(server.socket_addr().port().to_string()),
        bad_token.path(),
    );
    let client = KubeClient::from_source(&ConfigSource::InCluster(in_cluster))
        .await
        .unwrap();
    let error = client.check().await.unwrap_err().to_string();
    assert!(
        error.contains("Unauthorized") || error.contains("401"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_unreadable_and_dead_kubeconfigs_name_file_context_and_address() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let error = ConfigSource::Kubeconfig {
        path: missing.clone(),
        context: Some("prod".into()),
    }
    .load()
    .await
    .unwrap_err()
    .to_string();
    assert!(error.contains(&missing.display().to_string()), "{error}");

    // A directory cannot be read as a file.
    let error = ConfigSource::Kubeconfig {
        path: dir.path().to_owned(),
        context: None,
    }
    .load()
    .await
    .unwrap_err()
    .to_string();
    assert!(error.contains(&dir.path().display().to_string()), "{error}");

    let garbage = dir.path().join("garbage");
    std::fs::write(&garbage, "clusters: [[[").unwrap();
    let error = ConfigSource::Kubeconfig {
        path: garbage.clone(),
        context: None,
    }
    .load()
    .await
    .unwrap_err()
    .to_string();
    assert!(error.contains(&garbage.display().to_string()), "{error}");

    // An unknown context.
    let server = FakeApiServer::start(FakeOptions::default()).await.unwrap();
    let path = server.write_kubeconfig(dir.path()).unwrap();
    let error = ConfigSource::Kubeconfig {
        path: path.clone(),
        context: Some("nope".into()),
    }
    .load()
    .await
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("nope") && error.contains(&path.display().to_string()),
        "{error}"
    );

    // A server that is gone: the readiness check fails, naming file, context and address.
    let address = server.address().to_owned();
    drop(server);
    let dead = tempfile::tempdir().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let yaml = std::fs::read_to_string(&path)
        .unwrap()
        .replace(&address, &format!("http://127.0.0.1:{port}"));
    let dead_path = dead.path().join("kubeconfig");
    std::fs::write(&dead_path, yaml).unwrap();
    let client = KubeClient::from_source(&ConfigSource::Kubeconfig {
        path: dead_path.clone(),
        context: None,
    })
    .await
    .unwrap();
    let error = client.check().await.unwrap_err().to_string();
    assert!(error.contains(&dead_path.display().to_string()), "{error}");
    assert!(error.contains("\"fake\""), "{error}");
    assert!(error.contains(&format!("127.0.0.1:{port}")), "{error}");
}

/// The in-cluster environment is process-wide, and setting variables is `unsafe` in a
/// threaded test: this test runs [`in_cluster_child`] in a child process with
/// `KUBERNETES_SERVICE_HOST`/`PORT` set and `KUBECONFIG` pointing nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_cluster_environment_is_read_and_infer_falls_back_to_it() {
    let server = tls_server("from-env").await;
    let dir = tempfile::tempdir().unwrap();
    service_account(dir.path(), "from-env", server.ca_pem().unwrap());
    let port = server.socket_addr().port().to_string();
    let sa_dir = dir.path().to_owned();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "config::in_cluster_child",
                "--ignored",
                "--nocapture",
            ])
            .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
            .env("KUBERNETES_SERVICE_PORT", port)
            .env("KUBECONFIG", sa_dir.join("no-such-kubeconfig"))
            .env("KUBEPLUG_TEST_SA_DIR", &sa_dir)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "child failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("1 passed"),
        "the child test did not run:\n{stdout}"
    );
    assert!(
        server
            .requests()
            .iter()
            .any(|r| r.authorization.as_deref() == Some("Bearer from-env")),
        "{:?}",
        server.requests()
    );
}

/// Run only by [`in_cluster_environment_is_read_and_infer_falls_back_to_it`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run in a child process by in_cluster_environment_is_read_and_infer_falls_back_to_it"]
async fn in_cluster_child() {
    let dir = std::env::var("KUBEPLUG_TEST_SA_DIR").expect("run by the parent test");
    // Infer: the kubeconfig is missing, and the service account files are not at the standard
    // path on this machine, so the error names both attempts.
    let error = ConfigSource::Infer.load().await.unwrap_err().to_string();
    assert!(error.contains("no-such-kubeconfig"), "{error}");
    assert!(
        error.contains(kubeplug_kube::config::SERVICE_ACCOUNT_DIR) || error.contains("in-cluster"),
        "{error}"
    );
    // The environment as read by from_env, with the files where the test put them.
    let from_env = InCluster::from_env();
    assert_eq!(from_env.host.as_deref(), Some("127.0.0.1"));
    let in_cluster = InCluster::with_dir(from_env.host, from_env.port, std::path::Path::new(&dir));
    let client = KubeClient::from_source(&ConfigSource::InCluster(in_cluster))
        .await
        .unwrap();
    client.check().await.unwrap();
}
