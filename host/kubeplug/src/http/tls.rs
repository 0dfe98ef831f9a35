//! HTTPS for the host's endpoints: the serving certificate, from a directory (reloaded when
//! it is rotated, as controller-runtime's certwatcher does) or self-signed at start, and a
//! listener that completes TLS handshakes beside the accept loop, so that a client that
//! never finishes its handshake holds up nobody else.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, bail};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;

/// The files of a certificate directory, named as controller-runtime and cert-manager's
/// `kubernetes.io/tls` Secrets name them.
const CERT_FILE: &str = "tls.crt";
const KEY_FILE: &str = "tls.key";

/// How often a certificate directory is checked for a rotated pair.
const RELOAD_EVERY: Duration = Duration::from_secs(10);

/// A PEM file larger than this is not a certificate chain or a key; it is refused unread.
const MAX_PEM_BYTES: u64 = 1024 * 1024;

/// A handshake not finished in this time is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes in progress at once; further connections wait in the kernel's backlog.
const MAX_HANDSHAKES: usize = 64;

/// Finished handshakes waiting for the HTTP server to take them. When full, handshaking
/// tasks wait for room (and so, through [`MAX_HANDSHAKES`], the accept loop).
const HANDSHAKEN_BOUND: usize = 64;

/// Where the serving certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CertificateSource {
    /// `tls.crt` and `tls.key` in this directory (`--metrics-cert-dir`).
    Dir(PathBuf),
    /// Made at start for `localhost`, `127.0.0.1` and the host name; clients that do not
    /// pin it skip verification, as the kubelet's probes and Prometheus with
    /// `insecure_skip_verify` do.
    SelfSigned,
}

/// The certificate every handshake is answered with. One writer: the reload task of
/// [`serving_config`]; handshakes read it.
#[derive(Debug)]
struct CurrentCertificate(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for CurrentCertificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().expect("certificate lock poisoned").clone())
    }
}

/// The TLS configuration for `source`; with a directory, a task reloads the pair when its
/// files change, until `cancel` fires. A pair that does not load at start is the error; one
/// that does not load on a later change is logged, and the previous pair kept.
pub(crate) fn serving_config(
    source: &CertificateSource,
    cancel: CancellationToken,
) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certificate = match source {
        CertificateSource::Dir(dir) => load_pair(dir, &provider)?,
        CertificateSource::SelfSigned => self_signed(&provider)?,
    };
    let current = Arc::new(CurrentCertificate(RwLock::new(Arc::new(certificate))));
    if let CertificateSource::Dir(dir) = source {
        tokio::spawn(reload(
            dir.clone(),
            provider.clone(),
            current.clone(),
            cancel,
        ));
    }
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("the TLS provider offers no protocol version")?
        .with_no_client_auth()
        .with_cert_resolver(current);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Reads `dir`'s pair: a chain and the key of its first certificate.
fn load_pair(dir: &Path, provider: &CryptoProvider) -> anyhow::Result<CertifiedKey> {
    let cert_path = dir.join(CERT_FILE);
    let key_path = dir.join(KEY_FILE);
    let chain = CertificateDer::pem_slice_iter(&read_pem(&cert_path)?)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{}: not a PEM certificate chain", cert_path.display()))?;
    if chain.is_empty() {
        bail!("{}: holds no certificate", cert_path.display());
    }
    let key = PrivateKeyDer::from_pem_slice(&read_pem(&key_path)?)
        .with_context(|| format!("{}: not a PEM private key", key_path.display()))?;
    CertifiedKey::from_der(chain, key, provider).with_context(|| {
        format!(
            "{} and {} do not make a serving pair",
            cert_path.display(),
            key_path.display()
        )
    })
}

fn read_pem(path: &Path) -> anyhow::Result<Vec<u8>> {
    let size = std::fs::metadata(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .len();
    if size > MAX_PEM_BYTES {
        bail!(
            "{}: {size} bytes; a PEM file here is at most {MAX_PEM_BYTES}",
            path.display()
        );
    }
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

fn self_signed(provider: &CryptoProvider) -> anyhow::Result<CertifiedKey> {
    let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    // In a pod, the pod's name.
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname")
        && !host.trim().is_empty()
    {
        names.push(host.trim().to_owned());
    }
    let made = rcgen::generate_simple_self_signed(names)
        .context("cannot make a self-signed serving certificate")?;
    let key = PrivateKeyDer::Pkcs8(made.signing_key.serialize_der().into());
    CertifiedKey::from_der(vec![made.cert.der().clone()], key, provider)
        .context("the self-signed serving certificate does not load")
}

/// When the pair's files last changed, and their sizes: a rotation changes one of them.
fn stamp(dir: &Path) -> Option<[(SystemTime, u64); 2]> {
    let of = |name| {
        let metadata = std::fs::metadata(dir.join(name)).ok()?;
        Some((metadata.modified().ok()?, metadata.len()))
    };
    Some([of(CERT_FILE)?, of(KEY_FILE)?])
}

/// Polls `dir` every [`RELOAD_EVERY`] and swaps in a changed pair once it loads. Polling
/// rather than watching: Secret volumes change by swapping a symlink, which inotify
/// reports on the directory's `..data`, and a poll sees every way of replacing files.
async fn reload(
    dir: PathBuf,
    provider: Arc<CryptoProvider>,
    current: Arc<CurrentCertificate>,
    cancel: CancellationToken,
) {
    let mut loaded = stamp(&dir);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(RELOAD_EVERY) => {}
        }
        let now = stamp(&dir);
        if now == loaded {
            continue;
        }
        match load_pair(&dir, &provider) {
            Ok(pair) => {
                *current.0.write().expect("certificate lock poisoned") = Arc::new(pair);
                loaded = now;
                tracing::info!(dir = %dir.display(), "serving certificate reloaded");
            }
            // A rotation may be half written: the next poll tries again.
            Err(error) => tracing::warn!(
                "the serving certificate changed but does not load; still serving the previous \
                 one: {error:#}"
            ),
        }
    }
}

/// A TCP listener whose connections come out with their TLS handshake done.
pub(crate) struct TlsListener {
    handshaken: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Accepts on `listener` and handshakes with `config` until `cancel` fires.
    pub(crate) fn new(
        listener: TcpListener,
        config: Arc<rustls::ServerConfig>,
        cancel: CancellationToken,
    ) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let (sender, handshaken) = mpsc::channel(HANDSHAKEN_BOUND);
        tokio::spawn(accept_loop(
            listener,
            TlsAcceptor::from(config),
            sender,
            cancel,
        ));
        Ok(Self { handshaken, local })
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    handshaken: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
    cancel: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = tokio::select! {
            () = cancel.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of descriptors, or the peer left before it was accepted: wait a little
                // rather than spin, as axum's own listener does.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let handshaken = handshaken.clone();
        tokio::spawn(async move {
            let _slot = slot;
            // A failed or slow handshake is the client's problem; nothing to serve.
            if let Ok(Ok(tls)) =
                tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
            {
                let _ = handshaken.send((tls, peer)).await;
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.handshaken.recv().await {
            Some(accepted) => accepted,
            // The accept loop stopped: so is the server, through its graceful shutdown.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes a self-signed pair for `name` into `dir`; returns its certificate.
    fn write_pair(dir: &Path, name: &str) -> Vec<u8> {
        let made = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
        std::fs::write(dir.join(CERT_FILE), made.cert.pem()).unwrap();
        std::fs::write(dir.join(KEY_FILE), made.signing_key.serialize_pem()).unwrap();
        made.cert.der().to_vec()
    }

    fn provider() -> Arc<CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    #[test]
    fn a_missing_mismatched_or_oversized_pair_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let error = format!("{:#}", load_pair(dir.path(), &provider()).unwrap_err());
        assert!(error.contains("tls.crt"), "{error}");

        write_pair(dir.path(), "first.example");
        let first_key = std::fs::read(dir.path().join(KEY_FILE)).unwrap();
        write_pair(dir.path(), "second.example");
        std::fs::write(dir.path().join(KEY_FILE), first_key).unwrap();
        let error = format!("{:#}", load_pair(dir.path(), &provider()).unwrap_err());
        assert!(error.contains("do not make a serving pair"), "{error}");

        std::fs::write(dir.path().join(CERT_FILE), "not PEM").unwrap();
        let error = format!("{:#}", load_pair(dir.path(), &provider()).unwrap_err());
        assert!(error.contains("tls.crt: holds no certificate"), "{error}");

        let big = vec![b'A'; MAX_PEM_BYTES as usize + 1];
        std::fs::write(dir.path().join(CERT_FILE), big).unwrap();
        let error = format!("{:#}", load_pair(dir.path(), &provider()).unwrap_err());
        assert!(error.contains("at most 1048576"), "{error}");
    }

    #[tokio::test]
    async fn a_self_signed_certificate_is_made_at_start() {
        let config = serving_config(&CertificateSource::SelfSigned, CancellationToken::new());
        assert!(config.is_ok(), "{:?}", config.err());
    }

    /// A rotated pair is served from the next poll on; a half-written rotation is not, and
    /// the previous pair keeps serving until the rotation completes.
    #[tokio::test(start_paused = true)]
    async fn a_rotated_pair_is_served_after_the_next_poll() {
        let dir = tempfile::tempdir().unwrap();
        let first = write_pair(dir.path(), "first.example");
        let provider = provider();
        let pair = load_pair(dir.path(), &provider).unwrap();
        let current = Arc::new(CurrentCertificate(RwLock::new(Arc::new(pair))));
        let cancel = CancellationToken::new();
        tokio::spawn(reload(
            dir.path().to_owned(),
            provider,
            current.clone(),
            cancel.clone(),
        ));
        let served = || current.0.read().unwrap().cert[0].to_vec();
        let poll = || tokio::time::sleep(RELOAD_EVERY + Duration::from_secs(1));

        // Half a rotation: the new certificate beside the old key.
        let key = std::fs::read(dir.path().join(KEY_FILE)).unwrap();
        let second = write_pair(dir.path(), "second.example.org");
        let second_key = std::fs::read(dir.path().join(KEY_FILE)).unwrap();
        std::fs::write(dir.path().join(KEY_FILE), key).unwrap();
        poll().await;
        assert_eq!(served(), first, "a mismatched pair replaced the served one");

        std::fs::write(dir.path().join(KEY_FILE), second_key).unwrap();
        poll().await;
        assert_eq!(served(), second, "the rotated pair is not served");
        cancel.cancel();
    }
}
