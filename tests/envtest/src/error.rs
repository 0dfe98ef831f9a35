//! The crate's one error type.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

/// Why the harness could not provide or operate a control plane. Each variant is the step that
/// failed; its message names the binary, port or file involved and, where there is one, the tail
/// of the server's log.
#[derive(Debug, thiserror::Error)]
pub enum EnvtestError {
    /// `KUBEBUILDER_ASSETS` is not set, so there is no kube-apiserver or etcd to run.
    #[error(
        "KUBEBUILDER_ASSETS is not set: point it at a directory holding kube-apiserver and etcd \
         (the envtest layout, e.g. shared/envtest/v1.32); KUBEPLUG_ENVTEST_ETCD may name another \
         etcd binary (e.g. /usr/bin/etcd)"
    )]
    AssetsNotConfigured,
    /// A binary named by the environment is not there or not executable.
    #[error("{binary} not found or not executable at {} (from {variable})", path.display())]
    AssetMissing {
        /// `kube-apiserver` or `etcd`.
        binary: &'static str,
        /// Where it was looked for.
        path: PathBuf,
        /// The environment variable that led there.
        variable: &'static str,
    },
    /// The temporary directory for certificates, logs and etcd's data could not be made.
    #[error("cannot create the temporary directory for the control plane: {0}")]
    TempDirFailed(#[source] std::io::Error),
    /// Generating a key or certificate failed.
    #[error("cannot generate the {what}: {source}")]
    CertificateFailed {
        /// Which key or certificate.
        what: &'static str,
        /// rcgen's error.
        #[source]
        source: rcgen::Error,
    },
    /// Reading random bytes for a token failed.
    #[error("cannot read random bytes for the bearer tokens from /dev/urandom: {0}")]
    RandomFailed(#[source] std::io::Error),
    /// The harness's own TLS client could not be set up with the control plane's CA.
    #[error("cannot set up TLS with the control plane's CA {}: {source}", ca.display())]
    TlsSetupFailed {
        /// The CA's file.
        ca: PathBuf,
        /// rustls's error.
        #[source]
        source: rustls::Error,
    },
    /// Writing a file of the control plane (certificate, key, token file, kubeconfig, log) failed.
    #[error("cannot write {}: {source}", path.display())]
    WriteFailed {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// No free loopback port could be had.
    #[error("cannot reserve a free port on 127.0.0.1: {0}")]
    PortReservationFailed(#[source] std::io::Error),
    /// The wrapper shell that runs a server could not be started, or gave no pid.
    #[error("cannot start {binary} ({}) through /bin/sh: {cause}", path.display())]
    SpawnFailed {
        /// `kube-apiserver` or `etcd`.
        binary: &'static str,
        /// The binary's path.
        path: PathBuf,
        /// What went wrong.
        cause: String,
    },
    /// A server exited before it was ready.
    #[error("{binary} ended ({status}) before it was ready; the end of its log {}:\n{log_tail}", log.display())]
    ExitedEarly {
        /// `kube-apiserver` or `etcd`.
        binary: &'static str,
        /// How it ended.
        status: ExitStatus,
        /// Its log file.
        log: PathBuf,
        /// The last lines of its log.
        log_tail: String,
    },
    /// A server did not become ready in time.
    #[error(
        "{binary} on port {port} was not ready after {waited:?} (last answer: {last}); the end of \
         its log {}:\n{log_tail}", log.display()
    )]
    NotReady {
        /// `kube-apiserver` or `etcd`.
        binary: &'static str,
        /// The port it was asked on.
        port: u16,
        /// How long the harness waited.
        waited: Duration,
        /// The last answer or connection error.
        last: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of its log.
        log_tail: String,
    },
    /// A server did not exit after its wrapper's stdin was closed.
    #[error(
        "{binary} (pid {pid}) was still running {waited:?} after it was told to stop; its \
         wrapper shell should have killed it"
    )]
    StopFailed {
        /// `kube-apiserver` or `etcd`.
        binary: &'static str,
        /// The server's pid.
        pid: u32,
        /// How long the harness waited.
        waited: Duration,
    },
    /// A request to etcd's JSON gateway failed.
    #[error("etcd request POST http://127.0.0.1:{port}{path} failed: {cause}")]
    EtcdRequestFailed {
        /// etcd's client port.
        port: u16,
        /// The gateway path.
        path: &'static str,
        /// What went wrong.
        cause: String,
    },
    /// The API server refused to create a namespace, or could not be asked.
    #[error("cannot create namespace {name} on the kube-apiserver on port {port}: {cause}")]
    NamespaceCreateFailed {
        /// The namespace's name.
        name: String,
        /// The API server's port.
        port: u16,
        /// The API server's answer or the connection error.
        cause: String,
    },
    /// The loopback proxy could not listen.
    #[error("cannot start the proxy in front of 127.0.0.1:{target_port}: {source}")]
    ProxyStartFailed {
        /// The API server's port.
        target_port: u16,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// kube could not build a client from the harness's configuration.
    #[error("cannot build a kube client for {user}: {source}")]
    ClientFailed {
        /// The user's name.
        user: &'static str,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
    /// The API server's audit log could not be read.
    #[error("cannot read the audit log {}: {cause}", path.display())]
    AuditLogUnreadable {
        /// The log.
        path: PathBuf,
        /// Why: the I/O error, or the line that is not an audit event.
        cause: String,
    },
}
