//! `kubeplug run --local DIR --serve-api ADDR`: the local cluster over the Kubernetes HTTP API
//! (`kubeplug-apiserver`), so that kubectl shows what the plugins did and writes objects they
//! react to, with a kubeconfig holding a token generated at start that every request must
//! carry (the manifests may hold Secrets). Served over HTTPS with a certificate made at start,
//! which the kubeconfig trusts: client-go sends a kubeconfig's token over HTTPS only.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, anyhow};
use kubeplug_apiserver::{Aliases, ApiOptions, ApiServer, CertificateAuthority};
use kubeplug_local::LocalCluster;
use tracing::info;

/// The name of the kubeconfig's cluster, user and context.
const CONTEXT: &str = "kubeplug-local";

/// The served API; dropping it stops the server and closes its watches.
#[derive(Debug)]
pub(crate) struct LocalApi {
    _server: ApiServer,
}

/// Where the kubeconfig goes without `--kubeconfig-out`: `$XDG_STATE_HOME/kubeplug/`, else
/// `$HOME/.local/state/kubeplug/`, as `local.kubeconfig`.
fn default_kubeconfig() -> Option<PathBuf> {
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/state"))
        })?;
    Some(state.join("kubeplug").join("local.kubeconfig"))
}

/// A bearer token: 32 bytes from the OS's random source, in hex.
fn token() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow!("cannot make the API token: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A TLS acceptor with a self-signed certificate for the loopback names, and its PEM.
fn tls() -> anyhow::Result<(tokio_rustls::TlsAcceptor, String)> {
    let names = ["localhost", "127.0.0.1", "::1"]
        .map(str::to_owned)
        .to_vec();
    let made = rcgen::generate_simple_self_signed(names)
        .context("cannot make the API's self-signed certificate")?;
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(made.signing_key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("the TLS provider offers no protocol version")?
        .with_no_client_auth()
        .with_single_cert(vec![made.cert.der().clone()], key)
        .context("the API's self-signed certificate does not load")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((
        tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        made.cert.pem(),
    ))
}

/// Writes `text` to `path` readable by its owner only: it holds the token.
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    // A file left by an earlier run may be readable by others: start afresh.
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("replacing {}", path.display()));
        }
        _ => {}
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// Serves `cluster` on `address` (a loopback address) and writes the kubeconfig for it to
/// `kubeconfig_out`, or the default path.
pub(crate) async fn serve(
    cluster: &LocalCluster,
    address: SocketAddr,
    kubeconfig_out: Option<PathBuf>,
) -> anyhow::Result<LocalApi> {
    let kubeconfig = kubeconfig_out
        .or_else(default_kubeconfig)
        .ok_or_else(|| anyhow!("no place for the kubeconfig: pass --kubeconfig-out FILE"))?;
    let token = token()?;
    let registry = cluster.registry();
    let aliases = registry
        .resources()
        .filter_map(|resource| {
            let found = registry.aliases(resource)?;
            let aliases = Aliases {
                short_names: found.short_names.clone(),
                categories: found.categories.clone(),
            };
            Some(((resource.group.clone(), resource.plural.clone()), aliases))
        })
        .collect();
    let options = ApiOptions {
        bearer_token: Some(token.clone()),
        resources: registry.resources().cloned().collect(),
        aliases,
    };
    let (acceptor, certificate) = tls()?;
    let server = ApiServer::bind(address, cluster.server().clone(), options, Some(acceptor))
        .await
        .context("--serve-api")?;
    let yaml = kubeplug_apiserver::kubeconfig_yaml(
        CONTEXT,
        server.address(),
        Some(&token),
        Some(CertificateAuthority::Pem(&certificate)),
    );
    write_private(&kubeconfig, &yaml)?;
    info!(
        server = server.address(),
        kubeconfig = %kubeconfig.display(),
        "serving the local cluster's API; try: kubectl --kubeconfig {} get pods -A",
        kubeconfig.display()
    );
    Ok(LocalApi { _server: server })
}
