//! The secure endpoints on a real API server: the host, running with exactly the rules
//! `kubeplug rbac` prints, serves HTTPS with the certificate of `--metrics-cert-dir`, keeps
//! `/healthz` and `/readyz` open, and answers `/metrics` and `/plugins` only to a caller
//! whose token the API server authenticates and whose access it allows.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kubeplug_envtest::User;
use rustls::pki_types::ServerName;

use crate::cluster::{Cluster, Server, eventually};
use crate::support::{Host, wait_until};

/// A CA, and a serving pair for `localhost` it signed, written as `tls.crt` and `tls.key`
/// into `dir`; returns a client configuration trusting the CA alone.
fn serving_pair(dir: &Path) -> Arc<rustls::ClientConfig> {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &ca)
        .unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("tls.crt"), leaf.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), leaf_key.serialize_pem()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// `GET path` over HTTPS to `localhost` at `address`, with `token` as a bearer token: the
/// status code and the body.
fn https_get(
    address: SocketAddr,
    tls: &Arc<rustls::ClientConfig>,
    path: &str,
    token: Option<&str>,
) -> (u16, String) {
    let tcp = TcpStream::connect(address).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let connection = rustls::ClientConnection::new(tls.clone(), name).unwrap();
    let mut stream = rustls::StreamOwned::new(connection, tcp);
    let authorization = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\n{authorization}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = Vec::new();
    // The server may close without close_notify once the body is sent.
    let _ = stream.read_to_end(&mut response);
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {response:?}"));
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secure_endpoints_answer_only_callers_the_api_server_authorises() {
    let Some(cluster) = Cluster::start(Server::Real, "secure").await else {
        return;
    };
    let env = cluster.envtest().unwrap();
    let dir = cluster.dir.path();
    let plugins = dir.join("plugins");
    std::fs::create_dir(&plugins).unwrap();

    // The host's ServiceAccount gets what `kubeplug rbac` prints, and nothing else.
    let name = format!("kubeplug-{}", cluster.namespace);
    let kubeconfig = cluster.as_printed_rbac_allows(&name, &plugins, &[]).await;

    // Whoever scrapes is bound to the reader role it printed.
    let scraper = cluster.service_account_token("scraper").await;
    cluster
        .bind_cluster_role(
            &format!("{name}-scraper"),
            &format!("{name}-metrics-reader"),
            "scraper",
        )
        .await;

    let tls = serving_pair(&dir.join("certs"));
    let host = Host::spawn(
        std::iter::empty::<&str>(),
        [
            "--kubeconfig".as_ref(),
            kubeconfig.as_os_str(),
            "--plugins".as_ref(),
            plugins.as_os_str(),
            "--metrics-cert-dir".as_ref(),
            dir.join("certs").as_os_str(),
        ],
    );
    let address = host.address;
    let get = |path: &str, token: Option<&str>| https_get(address, &tls, path, token);

    // Open, and host-written: no token needed.
    assert_eq!(get("/healthz", None), (200, "ok".to_owned()));
    wait_until("/readyz answers 200 without a token", || {
        (get("/readyz", None).0 == 200).then_some(())
    });

    for path in ["/metrics", "/plugins"] {
        assert_eq!(get(path, None).0, 401, "{path} without a token");
        assert_eq!(get(path, Some("made-up")).0, 401, "{path}, a made-up token");
        let (status, body) = get(path, Some(env.token(User::Unprivileged)));
        assert_eq!(status, 403, "{path} for a user without the role: {body}");
        assert!(body.contains(User::Unprivileged.name()), "{body}");
    }
    // A new binding is seen by the API server's authoriser a moment after it is created.
    let metrics = eventually("the scraper reads /metrics", || async {
        let (status, body) = get("/metrics", Some(&scraper));
        (status == 200).then_some(body)
    })
    .await;
    assert!(metrics.contains("kubeplug_"), "{metrics}");
    assert_eq!(get("/plugins", Some(&scraper)), (200, "[]".to_owned()));

    // Plain HTTP gets no answer from the TLS port.
    let mut plain = TcpStream::connect(address).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(plain, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(
        !String::from_utf8_lossy(&answer).contains("kubeplug_"),
        "metrics served in plain HTTP"
    );
}
