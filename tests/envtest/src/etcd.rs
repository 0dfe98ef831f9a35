//! etcd: its command line, readiness, and its JSON gateway (status and compaction).

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::EnvtestError;
use crate::http;
use crate::process::{Supervised, log_tail};

const BINARY: &str = "etcd";

/// What etcd's `/v3/maintenance/status` reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdStatus {
    /// The store's current revision: the newest resourceVersion the API server has written.
    pub revision: i64,
    /// etcd's version, e.g. `3.5.16` (envtest's) or `3.4.23` (Debian's).
    pub version: String,
}

/// A running single-member etcd on loopback.
#[derive(Debug)]
pub(crate) struct Etcd {
    client_port: u16,
    process: Supervised,
}

impl Etcd {
    /// Starts etcd with its data in `data_dir`, serving clients on `client_port` and (alone)
    /// peers on `peer_port`, and waits until its gateway answers. When the harness goes away,
    /// the wrapper removes `remove_on_stop` after etcd has stopped: the control plane's
    /// directory, which a shared instance never drops.
    pub(crate) fn start(
        path: &Path,
        data_dir: &Path,
        client_port: u16,
        peer_port: u16,
        log: PathBuf,
        remove_on_stop: &Path,
        ready_timeout: Duration,
    ) -> Result<Etcd, EnvtestError> {
        let args = args(data_dir, client_port, peer_port);
        let process = Supervised::spawn(BINARY, path, &args, &log, Some(remove_on_stop))?;
        let mut etcd = Etcd {
            client_port,
            process,
        };
        let started = Instant::now();
        loop {
            etcd.process.check_running()?;
            let last = match etcd.status() {
                Ok(_) => return Ok(etcd),
                Err(error) => error.to_string(),
            };
            if started.elapsed() > ready_timeout {
                return Err(EnvtestError::NotReady {
                    binary: BINARY,
                    port: client_port,
                    waited: ready_timeout,
                    last,
                    log_tail: log_tail(&log),
                    log,
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `http://127.0.0.1:PORT`, for `--etcd-servers`.
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The current revision and etcd's version.
    pub(crate) fn status(&self) -> Result<EtcdStatus, EnvtestError> {
        const PATH: &str = "/v3/maintenance/status";
        let answer = self.post(PATH, b"{}")?;
        let failed = |cause: String| EnvtestError::EtcdRequestFailed {
            port: self.client_port,
            path: PATH,
            cause,
        };
        // The gateway writes int64 fields as JSON strings (proto3's JSON mapping).
        let revision = answer["header"]["revision"]
            .as_str()
            .and_then(|revision| revision.parse().ok())
            .ok_or_else(|| failed(format!("no header.revision in {answer}")))?;
        let version = answer["version"]
            .as_str()
            .ok_or_else(|| failed(format!("no version in {answer}")))?
            .to_owned();
        Ok(EtcdStatus { revision, version })
    }

    /// Compacts the key space at `revision` and waits until the compaction is applied
    /// (`physical`), so that every older revision is gone when it returns.
    pub(crate) fn compact(&self, revision: i64) -> Result<(), EnvtestError> {
        let body = serde_json::json!({ "revision": revision.to_string(), "physical": true });
        self.post("/v3/kv/compaction", body.to_string().as_bytes())
            .map(drop)
    }

    /// A gateway request; its JSON answer, or the error with etcd's message.
    fn post(&self, path: &'static str, body: &[u8]) -> Result<serde_json::Value, EnvtestError> {
        let failed = |cause: String| EnvtestError::EtcdRequestFailed {
            port: self.client_port,
            path,
            cause,
        };
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.client_port));
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
            .map_err(|e| failed(format!("connecting: {e}")))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| failed(format!("setting a timeout: {e}")))?;
        let response = http::request(stream, "POST", &addr.to_string(), path, None, Some(body))
            .map_err(failed)?;
        if response.status != 200 {
            return Err(failed(format!("{} {}", response.status, response.text())));
        }
        serde_json::from_slice(&response.body)
            .map_err(|e| failed(format!("not JSON ({e}): {}", response.text())))
    }
}

/// The command line: only flags that both etcd builds take (envtest's takes a subset of etcd's
/// own; Debian's 3.4.23 takes all of them, `--unsafe-no-fsync` included, though its `--help`
/// does not list it). Both reject an unknown flag with exit status 2.
fn args(data_dir: &Path, client_port: u16, peer_port: u16) -> Vec<OsString> {
    let client = format!("http://127.0.0.1:{client_port}");
    let peer = format!("http://127.0.0.1:{peer_port}");
    let mut data_dir_arg = OsString::from("--data-dir=");
    data_dir_arg.push(data_dir);
    vec![
        "--name=envtest".into(),
        data_dir_arg,
        format!("--listen-client-urls={client}").into(),
        format!("--advertise-client-urls={client}").into(),
        format!("--listen-peer-urls={peer}").into(),
        format!("--initial-advertise-peer-urls={peer}").into(),
        format!("--initial-cluster=envtest={peer}").into(),
        // The data is thrown away with the test; fsync only slows every write.
        "--unsafe-no-fsync".into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_server_that_never_answers_is_reported_with_the_end_of_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("fake-etcd");
        std::fs::write(
            &fake,
            "#!/bin/sh\necho \"pretending to be etcd with $1\" >&2\nexec sleep 300\n",
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        // A port nothing listens on: the listener closes again at once.
        let port = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|listener| listener.local_addr())
            .unwrap()
            .port();
        let error = Etcd::start(
            &fake,
            &dir.path().join("data"),
            port,
            port,
            dir.path().join("etcd.log"),
            &dir.path().join("nothing-to-remove"),
            Duration::from_millis(500),
        )
        .unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, EnvtestError::NotReady { .. }), "{message}");
        assert!(
            message.contains(&format!("etcd on port {port} was not ready")),
            "{message}"
        );
        assert!(
            message.contains("pretending to be etcd with --name=envtest"),
            "{message}"
        );
    }
}
