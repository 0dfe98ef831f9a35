//! kube-apiserver's audit log: what every request was, who sent it and with which client, so
//! that a test can check what a client sent (its `User-Agent`, its verbs and paths) as the
//! server saw it.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::EnvtestError;
use crate::certs::write;

/// Every request at the `Metadata` level (no bodies), once its response is complete, and a
/// long-running one (a watch) also when its response starts.
const POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, Panic]
rules:
- level: Metadata
";

/// The audit policy and log of one control plane.
#[derive(Clone, Debug)]
pub(crate) struct Audit {
    pub(crate) policy_file: PathBuf,
    pub(crate) log_file: PathBuf,
}

/// One request as the API server recorded it: when its response was complete, and for a
/// long-running request (a watch) also when its response started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEvent {
    /// `ResponseComplete`, or `ResponseStarted` for a long-running request under way.
    pub stage: String,
    /// `get`, `list`, `watch`, `create`, `patch`, ...
    pub verb: String,
    /// The path and query.
    pub request_uri: String,
    /// The authenticated user's name.
    pub user: String,
    /// The `User-Agent` header; empty when there was none.
    pub user_agent: String,
    /// The response's status code (a started watch has none yet).
    pub code: Option<u16>,
}

impl Audit {
    /// Writes the policy into `dir`; the API server writes its log beside it.
    pub(crate) fn write(dir: &Path) -> Result<Audit, EnvtestError> {
        Ok(Audit {
            policy_file: write(dir, "audit-policy.yaml", POLICY)?,
            log_file: dir.join("audit.log"),
        })
    }

    /// The events logged so far, oldest first. A line the server is still writing (the last,
    /// without its newline) is left for the next call.
    pub(crate) fn events(&self) -> Result<Vec<AuditEvent>, EnvtestError> {
        let unreadable = |cause: String| EnvtestError::AuditLogUnreadable {
            path: self.log_file.clone(),
            cause,
        };
        let text = match std::fs::read_to_string(&self.log_file) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(unreadable(error.to_string())),
        };
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        complete
            .lines()
            .map(|line| {
                let event: Value = serde_json::from_str(line)
                    .map_err(|e| unreadable(format!("{e}: {}", snippet(line))))?;
                let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
                Ok(AuditEvent {
                    stage: text(&event["stage"]),
                    verb: text(&event["verb"]),
                    request_uri: text(&event["requestURI"]),
                    user: text(&event["user"]["username"]),
                    user_agent: text(&event["userAgent"]),
                    code: event["responseStatus"]["code"]
                        .as_u64()
                        .and_then(|code| u16::try_from(code).ok()),
                })
            })
            .collect()
    }
}

/// The start of `line`, for an error message.
fn snippet(line: &str) -> &str {
    let mut end = line.len().min(200);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}
