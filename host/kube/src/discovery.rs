//! Discovery: (group, version, kind) → the resource's plural and scope.
//!
//! Uses the legacy discovery documents (`/api/v1`, `/apis/{group}/{version}`; `/api` and
//! `/apis` to list what is served). Each group-version's resources are cached; a kind not
//! found in the cache refreshes its group-version, so a CRD installed after start is found
//! the first time a plugin asks for it once [`MISS_TTL`] has passed since the last fetch.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::StreamExt as _;
use http::Request;
use kube::client::Body;
use kubeplug_informer::resource::Resource;
use serde::Deserialize;
use tokio::time::Instant;

use crate::config::{KubeClient, error_chain};
use crate::lister::{Read, read_at_most};
use crate::paths::group_version_path;
use crate::wire;

/// The largest discovery document read: 16 MiB, as large as an object may be. The biggest
/// real one, `/api/v1`, is about 30 KiB; anything near the bound is not discovery.
pub const MAX_DISCOVERY_BYTES: usize = 16 << 20;

/// How many discovery documents [`Discovery::warm`] fetches at once.
const WARM_PARALLELISM: usize = 8;

/// How long a fetched group-version answers a miss (a kind it lacks, or the group-version
/// not being served) without asking the server again. Every plugin file waiting for a CRD
/// retries on its own back-off, starting at a second; with this, however many there are,
/// discovery asks about one group-version at most once a second.
pub const MISS_TTL: Duration = Duration::from_secs(1);

/// Why a kind could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    /// The server does not serve the group-version at all.
    #[error("the server does not serve {group_version} (asked for kind {kind})")]
    GroupVersionNotServed {
        /// `group/version`, or `version` for the core group.
        group_version: String,
        /// The kind asked for.
        kind: String,
    },
    /// The group-version is served but has no such kind.
    #[error("the server serves no kind {kind} in {group_version} (it serves: {served})")]
    KindNotServed {
        /// `group/version`.
        group_version: String,
        /// The kind asked for.
        kind: String,
        /// The kinds it does serve, comma-separated.
        served: String,
    },
    /// The discovery request failed.
    #[error("discovery of {group_version} at {address} failed: {reason}")]
    RequestFailed {
        /// `group/version`.
        group_version: String,
        /// The server.
        address: String,
        /// Why.
        reason: String,
    },
}

/// `APIResourceList`, the fields we use.
#[derive(Debug, Deserialize)]
pub struct ApiResourceList {
    /// `group/version`.
    #[serde(rename = "groupVersion")]
    pub group_version: String,
    /// The resources, subresources (`pods/status`) included.
    pub resources: Vec<ApiResource>,
}

/// One entry of an `APIResourceList`.
#[derive(Debug, Clone, Deserialize)]
pub struct ApiResource {
    /// Plural name, or `plural/subresource`.
    pub name: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// The kind.
    pub kind: String,
    /// Verbs, e.g. `list`, `watch`.
    #[serde(default)]
    pub verbs: Vec<String>,
}

/// `APIVersions` (the answer to `/api`), the fields we use.
#[derive(Debug, Deserialize)]
pub struct ApiVersions {
    /// The core group's versions, e.g. `v1`.
    pub versions: Vec<String>,
}

/// `APIGroupList`, the fields we use.
#[derive(Debug, Deserialize)]
pub struct ApiGroupList {
    /// The groups.
    pub groups: Vec<ApiGroup>,
}

/// One group of an `APIGroupList`.
#[derive(Debug, Deserialize)]
pub struct ApiGroup {
    /// The group name.
    pub name: String,
    /// Its versions.
    pub versions: Vec<GroupVersionEntry>,
}

/// One version of an [`ApiGroup`].
#[derive(Debug, Deserialize)]
pub struct GroupVersionEntry {
    /// `group/version`.
    #[serde(rename = "groupVersion")]
    pub group_version: String,
    /// The version.
    pub version: String,
}

/// Resolves kinds to resources with a cache refreshed on a miss. Cheap to clone.
///
/// Contract: [`resolve`](Self::resolve) answers from the cache when it can; otherwise it
/// fetches the group-version's discovery document once and answers from that, unless that
/// document (or its absence) was fetched less than [`MISS_TTL`] ago. A failed lookup for one
/// kind never affects the others; a failed request is not cached.
#[derive(Clone)]
pub struct Discovery {
    client: KubeClient,
    /// Group-version → what it served when last fetched.
    cache: Arc<Mutex<HashMap<String, Fetched>>>,
}

/// One group-version's discovery document as last fetched.
#[derive(Clone)]
struct Fetched {
    /// Its top-level resources (subresources dropped); `None` when the server answered that
    /// it does not serve the group-version.
    resources: Option<Arc<[ApiResource]>>,
    at: Instant,
}

impl fmt::Debug for Discovery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Discovery")
            .field("cached", &self.lock().len())
            .finish()
    }
}

fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

impl Discovery {
    /// An empty cache over `client`.
    pub fn new(client: KubeClient) -> Self {
        Self {
            client,
            cache: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Fetched>> {
        // The map is only replaced entry by entry: a poisoned lock still holds a valid map.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The resource serving `kind` in `group`/`version`.
    pub async fn resolve(
        &self,
        group: &str,
        version: &str,
        kind: &str,
    ) -> Result<Resource, DiscoveryError> {
        let gv = group_version(group, version);
        let cached = self.lock().get(&gv).cloned();
        let resources = match cached {
            Some(fetched) => {
                if let Some(found) = fetched
                    .resources
                    .as_deref()
                    .and_then(|resources| find(resources, group, version, kind))
                {
                    return Ok(found);
                }
                if fetched.at.elapsed() < MISS_TTL {
                    fetched.resources
                } else {
                    self.refresh(group, version).await?
                }
            }
            None => self.refresh(group, version).await?,
        };
        let Some(resources) = resources else {
            return Err(DiscoveryError::GroupVersionNotServed {
                group_version: gv,
                kind: kind.to_owned(),
            });
        };
        find(&resources, group, version, kind).ok_or_else(|| DiscoveryError::KindNotServed {
            group_version: gv,
            kind: kind.to_owned(),
            served: resources
                .iter()
                .map(|r| r.kind.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// The resource serving `kind` in `group`/`version` if the cache already knows it; never
    /// asks the server. For callers that cannot wait (a plugin's synchronous host call).
    pub fn cached(&self, group: &str, version: &str, kind: &str) -> Option<Resource> {
        let fetched = self.lock().get(&group_version(group, version)).cloned()?;
        find(fetched.resources.as_deref()?, group, version, kind)
    }

    /// Fills the cache with every group-version the server serves (`/api`, `/apis`, then
    /// each one's document, as kubectl does), so that [`cached`](Self::cached) knows every
    /// type served at this moment. Returns how many group-versions were cached. A failing
    /// group-version (an aggregated API that is down) is logged and skipped: it is fetched
    /// again by the first [`resolve`](Self::resolve) that needs it.
    pub async fn warm(&self) -> Result<usize, DiscoveryError> {
        let core: ApiVersions = self.get_json("/api", "v1").await?;
        let groups: ApiGroupList = self.get_json("/apis", "apis").await?;
        let mut wanted: Vec<(String, String)> = core
            .versions
            .into_iter()
            .map(|version| (String::new(), version))
            .collect();
        for group in groups.groups {
            for entry in group.versions {
                wanted.push((group.name.clone(), entry.version));
            }
        }
        let fetched = futures::stream::iter(wanted)
            .map(|(group, version)| async move {
                let result = self.refresh(&group, &version).await;
                if let Err(error) = &result {
                    tracing::warn!(%error, "discovery: skipped a group-version");
                }
                matches!(result, Ok(Some(_)))
            })
            .buffer_unordered(WARM_PARALLELISM)
            .filter(|ok| std::future::ready(*ok))
            .count()
            .await;
        Ok(fetched)
    }

    /// GETs the discovery document at `path` as `T`; `what` names it in errors.
    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        what: &str,
    ) -> Result<T, DiscoveryError> {
        let (code, body) = self.get(path, what).await?;
        if !code.is_success() {
            return Err(self.failed(what, wire::decode_status(code.as_u16(), &body).to_string()));
        }
        serde_json::from_slice(&body)
            .map_err(|e| self.failed(what, format!("{e}: {}", wire::snippet(&body))))
    }

    /// GETs `path`: the answer's code and body, or why there was none.
    async fn get(
        &self,
        path: &str,
        what: &str,
    ) -> Result<(http::StatusCode, bytes::Bytes), DiscoveryError> {
        let request = Request::get(path)
            .header(http::header::ACCEPT, "application/json")
            .body(Body::empty())
            .map_err(|e| self.failed(what, e.to_string()))?;
        let response = self
            .client
            .client()
            .send(request)
            .await
            .map_err(|e| self.failed(what, error_chain(&e)))?;
        let code = response.status();
        match read_at_most(&mut response.into_body(), MAX_DISCOVERY_BYTES).await {
            Ok(Read::Whole(body)) => Ok((code, body)),
            Ok(Read::Cut(_)) => Err(self.failed(
                what,
                format!(
                    "the answer is over {MAX_DISCOVERY_BYTES} bytes; it is not a discovery document"
                ),
            )),
            Err(e) => Err(self.failed(what, error_chain(&e))),
        }
    }

    fn failed(&self, what: &str, reason: String) -> DiscoveryError {
        DiscoveryError::RequestFailed {
            group_version: what.to_owned(),
            address: self.client.origin().address.clone(),
            reason,
        }
    }

    /// Fetches the discovery document of `group`/`version` into the cache: its resources, or
    /// `None` when the server does not serve it.
    async fn refresh(
        &self,
        group: &str,
        version: &str,
    ) -> Result<Option<Arc<[ApiResource]>>, DiscoveryError> {
        let gv = group_version(group, version);
        let path = group_version_path(group, version);
        let (code, body) = self.get(&path, &gv).await?;
        let resources = if code == http::StatusCode::NOT_FOUND {
            None
        } else if code.is_success() {
            let list: ApiResourceList = serde_json::from_slice(&body)
                .map_err(|e| self.failed(&gv, format!("{e}: {}", wire::snippet(&body))))?;
            Some(
                list.resources
                    .into_iter()
                    .filter(|r| !r.name.contains('/'))
                    .collect(),
            )
        } else {
            return Err(self.failed(&gv, wire::decode_status(code.as_u16(), &body).to_string()));
        };
        let fetched = Fetched {
            resources: resources.clone(),
            at: Instant::now(),
        };
        self.lock().insert(gv, fetched);
        Ok(resources)
    }

    /// Forgets everything cached.
    pub fn invalidate(&self) {
        self.lock().clear();
    }
}

fn find(resources: &[ApiResource], group: &str, version: &str, kind: &str) -> Option<Resource> {
    resources
        .iter()
        .find(|r| r.kind == kind)
        .map(|r| Resource::new(group, version, kind, &r.name, r.namespaced))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(path: &str) -> String {
        let full = format!(
            "{}/../../../shared/fixtures/kube-apiserver/{path}",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"));
        let start = text.find("\n{").expect("a JSON body");
        text[start + 1..].trim().to_owned()
    }

    #[test]
    fn parses_captured_discovery_documents() {
        let core: ApiResourceList =
            serde_json::from_str(&body("v1.32.0-rc.0/discovery-api-v1.http")).unwrap();
        assert_eq!(core.group_version, "v1");
        let top: Vec<_> = core
            .resources
            .into_iter()
            .filter(|r| !r.name.contains('/'))
            .collect();
        let cm = find(&top, "", "v1", "ConfigMap").unwrap();
        assert_eq!((cm.plural.as_str(), cm.namespaced), ("configmaps", true));
        let node = find(&top, "", "v1", "Node").unwrap();
        assert_eq!((node.plural.as_str(), node.namespaced), ("nodes", false));
        assert!(find(&top, "", "v1", "Deployment").is_none());

        let apps: ApiResourceList =
            serde_json::from_str(&body("v1.32.0-rc.0/discovery-apps-v1.http")).unwrap();
        let top: Vec<_> = apps
            .resources
            .into_iter()
            .filter(|r| !r.name.contains('/'))
            .collect();
        let deploy = find(&top, "apps", "v1", "Deployment").unwrap();
        assert_eq!(deploy.plural, "deployments");
        // `Scale` is only a subresource: not something an informer can watch.
        assert!(find(&top, "apps", "v1", "Scale").is_none());

        let groups: ApiGroupList =
            serde_json::from_str(&body("v1.32.0-rc.0/discovery-apis.http")).unwrap();
        assert!(groups.groups.iter().any(|g| {
            g.name == "apps"
                && g.versions
                    .iter()
                    .any(|v| v.group_version == "apps/v1" && v.version == "v1")
        }));
    }
}
