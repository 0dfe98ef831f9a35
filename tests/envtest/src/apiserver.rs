//! kube-apiserver: its command line, readiness, and the harness's own HTTPS requests to it.

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::{CertificateDer, ServerName};

use crate::EnvtestError;
use crate::audit::Audit;
use crate::certs::Credentials;
use crate::http::{self, Response};
use crate::process::{Supervised, log_tail};

const BINARY: &str = "kube-apiserver";

/// A running kube-apiserver; [`restart`](Self::restart) replaces its process, keeping its
/// command line (ports, certificates, etcd).
#[derive(Debug)]
pub(crate) struct ApiServer {
    path: PathBuf,
    args: Vec<OsString>,
    port: u16,
    log: PathBuf,
    https: Https,
    process: Supervised,
}

/// What shapes kube-apiserver's command line beyond the control plane's files and ports.
#[derive(Clone, Debug)]
pub(crate) struct Flags {
    pub(crate) watch_cache: bool,
    /// Where its audit policy is, and its audit log goes.
    pub(crate) audit: Audit,
}

impl ApiServer {
    /// Starts kube-apiserver on `port` against etcd's client URL and waits until it is ready.
    pub(crate) fn start(
        path: &Path,
        port: u16,
        etcd_url: &str,
        credentials: &Credentials,
        flags: &Flags,
        log: PathBuf,
        ready_timeout: Duration,
    ) -> Result<ApiServer, EnvtestError> {
        let args = args(port, etcd_url, credentials, flags);
        let https = Https::new(port, credentials)?;
        let process = Supervised::spawn(BINARY, path, &args, &log, None)?;
        let mut server = ApiServer {
            path: path.to_owned(),
            args,
            port,
            log,
            https,
            process,
        };
        server.wait_ready(ready_timeout)?;
        Ok(server)
    }

    /// Stops the process (SIGTERM, as a node shutdown would) and starts it again with the same
    /// command line; returns once it is ready.
    pub(crate) fn restart(&mut self, ready_timeout: Duration) -> Result<(), EnvtestError> {
        self.process.stop()?;
        let process = Supervised::spawn(BINARY, &self.path, &self.args, &self.log, None)?;
        // The old (stopped) process's handle goes here; dropping it again does nothing.
        drop(std::mem::replace(&mut self.process, process));
        self.wait_ready(ready_timeout)
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    pub(crate) fn pid(&self) -> u32 {
        self.process.pid()
    }

    pub(crate) fn https(&self) -> &Https {
        &self.https
    }

    /// Polls `/readyz` (every check passed: etcd reachable, RBAC's bootstrap roles written) and
    /// then the `default` namespace, which the API server creates a moment after it is ready, so
    /// that a test can use both at once.
    fn wait_ready(&mut self, timeout: Duration) -> Result<(), EnvtestError> {
        let started = Instant::now();
        for path in ["/readyz", "/api/v1/namespaces/default"] {
            loop {
                self.process.check_running()?;
                let last = match self.https.get(path) {
                    Ok(response) if response.status == 200 => break,
                    Ok(response) => format!("{path}: {} {}", response.status, response.text()),
                    Err(error) => format!("{path}: {error}"),
                };
                if started.elapsed() > timeout {
                    return Err(EnvtestError::NotReady {
                        binary: BINARY,
                        port: self.port,
                        waited: timeout,
                        last,
                        log: self.log.clone(),
                        log_tail: log_tail(&self.log),
                    });
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }
}

/// The command line. Everything listens on 127.0.0.1 only.
fn args(port: u16, etcd_url: &str, credentials: &Credentials, flags: &Flags) -> Vec<OsString> {
    let file = |flag: &str, path: &Path| {
        let mut arg = OsString::from(format!("--{flag}="));
        arg.push(path);
        arg
    };
    let mut args: Vec<OsString> = vec![
        format!("--etcd-servers={etcd_url}").into(),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}").into(),
        "--advertise-address=127.0.0.1".into(),
        file("tls-cert-file", &credentials.serving_cert_file),
        file("tls-private-key-file", &credentials.serving_key_file),
        file("client-ca-file", &credentials.ca_file),
        file(
            "service-account-key-file",
            &credentials.service_account_public_file,
        ),
        file(
            "service-account-signing-key-file",
            &credentials.service_account_key_file,
        ),
        "--service-account-issuer=https://kubernetes.default.svc".into(),
        file("token-auth-file", &credentials.token_auth_file),
        "--authorization-mode=RBAC".into(),
        file("audit-policy-file", &flags.audit.policy_file),
        file("audit-log-path", &flags.audit.log_file),
        "--service-cluster-ip-range=10.0.0.0/24".into(),
        // Otherwise it complains every 10 s that 127.0.0.1 cannot be an Endpoints address.
        "--endpoint-reconciler-type=none".into(),
    ];
    if !flags.watch_cache {
        args.push("--watch-cache=false".into());
    }
    args
}

/// Blocking HTTPS to the API server as the admin, trusting only the control plane's CA.
#[derive(Clone, Debug)]
pub(crate) struct Https {
    port: u16,
    tls: Arc<rustls::ClientConfig>,
    token: String,
}

impl Https {
    fn new(port: u16, credentials: &Credentials) -> Result<Https, EnvtestError> {
        let tls_failed = |source| EnvtestError::TlsSetupFailed {
            ca: credentials.ca_file.clone(),
            source,
        };
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from(credentials.ca_der.clone()))
            .map_err(tls_failed)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(tls_failed)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Https {
            port,
            tls: Arc::new(tls),
            token: credentials.admin_token().to_owned(),
        })
    }

    pub(crate) fn get(&self, path: &str) -> Result<Response, String> {
        self.send("GET", path, None)
    }

    pub(crate) fn post(&self, path: &str, json: &[u8]) -> Result<Response, String> {
        self.send("POST", path, Some(json))
    }

    fn send(&self, method: &str, path: &str, json: Option<&[u8]>) -> Result<Response, String> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        tcp.set_read_timeout(Some(Duration::from_secs(10)))
            .and_then(|()| tcp.set_write_timeout(Some(Duration::from_secs(10))))
            .map_err(|e| format!("setting timeouts: {e}"))?;
        let name = ServerName::IpAddress(Ipv4Addr::LOCALHOST.into());
        let tls = rustls::ClientConnection::new(self.tls.clone(), name)
            .map_err(|e| format!("starting TLS: {e}"))?;
        let stream = rustls::StreamOwned::new(tls, tcp);
        http::request(
            stream,
            method,
            &addr.to_string(),
            path,
            Some(&self.token),
            json,
        )
    }
}
