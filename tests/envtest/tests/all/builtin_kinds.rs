//! The local cluster's built-in kinds are a checked-in capture of this server's discovery
//! (`host/local/src/builtin-kinds.v1.32.json`, which `kubeplug_local::KindRegistry` parses).
//! This test reduces the live discovery the same way and compares; with
//! `KUBEPLUG_UPDATE_KINDS=1` it writes the capture instead. The reduction lives here only: the
//! local crate reads the reduced file and never sees a discovery document.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kubeplug_envtest::{ASSETS_VAR, Envtest, User};

use crate::bounded;

/// The capture, as the local crate includes it.
const CAPTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../host/local/src/builtin-kinds.v1.32.json"
);
/// The capture's path as a reader of the repository names it.
const CAPTURE_NAME: &str = "host/local/src/builtin-kinds.v1.32.json";
/// Set to `1`: write the capture from the live server instead of comparing.
const UPDATE_VAR: &str = "KUBEPLUG_UPDATE_KINDS";
/// The command that refreshes the capture, run from the repository's root.
const REFRESH: &str = "KUBEPLUG_UPDATE_KINDS=1 KUBEBUILDER_ASSETS=DIR cargo test -p \
                       kubeplug-envtest builtin_kinds";

/// One served resource, as the capture lists it. Sorted by group, version, then kind.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Entry {
    group: String,
    version: String,
    kind: String,
    plural: String,
    namespaced: bool,
    /// kubectl's short names (`deploy`), when discovery gives any.
    #[serde(default)]
    short_names: Vec<String>,
    /// The categories (`all`) it belongs to, when discovery gives any.
    #[serde(default)]
    categories: Vec<String>,
}

impl Entry {
    /// The entry as one line of the capture.
    fn line(&self) -> String {
        let quote = |text: &str| serde_json::Value::from(text).to_string();
        let mut line = format!(
            "{{\"group\": {}, \"version\": {}, \"kind\": {}, \"plural\": {}, \"namespaced\": {}",
            quote(&self.group),
            quote(&self.version),
            quote(&self.kind),
            quote(&self.plural),
            self.namespaced
        );
        for (field, names) in [
            ("shortNames", &self.short_names),
            ("categories", &self.categories),
        ] {
            if !names.is_empty() {
                let _ = write!(line, ", \"{field}\": {}", serde_json::json!(names));
            }
        }
        line.push('}');
        line
    }
}

/// The capture file's contents.
#[derive(Debug, serde::Deserialize)]
struct Capture {
    server: String,
    resources: Vec<Entry>,
}

/// The resources of one group-version that the local cluster can store and watch: top-level
/// ones (no `pods/status`) whose verbs include `list` and `watch` (not TokenReview or
/// bindings, which can only be created), with the short names and categories the local
/// cluster's API serves kubectl.
fn reduce(group: &str, version: &str, list: &APIResourceList) -> Vec<Entry> {
    list.resources
        .iter()
        .filter(|resource| !resource.name.contains('/'))
        .filter(|resource| {
            ["list", "watch"]
                .iter()
                .all(|verb| resource.verbs.iter().any(|v| v == verb))
        })
        .map(|resource| Entry {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: resource.kind.clone(),
            plural: resource.name.clone(),
            namespaced: resource.namespaced,
            short_names: resource.short_names.clone().unwrap_or_default(),
            categories: resource.categories.clone().unwrap_or_default(),
        })
        .collect()
}

/// Every served group-version's reduced resources, sorted: the core group from `/api` and
/// `/api/VERSION`, the others from `/apis` and `/apis/GROUP/VERSION` (every version each group
/// serves, not only the preferred one: the local cluster resolves by `apiVersion`).
async fn discovered(client: &kube::Client) -> anyhow::Result<Vec<Entry>> {
    let mut entries = Vec::new();
    let core = bounded("GET /api", client.list_core_api_versions()).await?;
    for version in &core.versions {
        let list = bounded(
            &format!("GET /api/{version}"),
            client.list_core_api_resources(version),
        )
        .await?;
        entries.extend(reduce("", version, &list));
    }
    let groups = bounded("GET /apis", client.list_api_groups()).await?;
    for group in &groups.groups {
        for version in &group.versions {
            let list = bounded(
                &format!("GET /apis/{}", version.group_version),
                client.list_api_group_resources(&version.group_version),
            )
            .await?;
            entries.extend(reduce(&group.name, &version.version, &list));
        }
    }
    entries.sort();
    Ok(entries)
}

/// The capture as the refresh writes it: a header, then one resource per line.
fn render(server: &str, entries: &[Entry]) -> String {
    let quote = |text: &str| serde_json::Value::from(text).to_string();
    let about = "kubeplug's local cluster's built-in kinds (kubeplug_local::KindRegistry): every \
                 top-level resource whose verbs include list and watch, in every served version, \
                 with its short names and categories, from the discovery (/api/v1, /apis/GROUP/VERSION) of the kube-apiserver named \
                 by server. Written and checked by tests/envtest's builtin_kinds test.";
    let mut text = format!(
        "{{\n  \"about\": {},\n  \"refresh\": {},\n  \"server\": {},\n  \"resources\": [\n",
        quote(about),
        quote(REFRESH),
        quote(server)
    );
    for (n, entry) in entries.iter().enumerate() {
        let comma = if n + 1 < entries.len() { "," } else { "" };
        let _ = writeln!(text, "    {}{comma}", entry.line());
    }
    text.push_str("  ]\n}\n");
    text
}

/// What differs between the capture and the live discovery, or `None` when nothing does.
fn difference(captured: &Capture, live_server: &str, live: &[Entry]) -> Option<String> {
    if captured.resources == live {
        return None;
    }
    let in_capture: BTreeSet<&Entry> = captured.resources.iter().collect();
    let served: BTreeSet<&Entry> = live.iter().collect();
    let mut message = format!(
        "{CAPTURE_NAME} (captured from kube-apiserver {}) differs from the discovery of the live \
         kube-apiserver {live_server}:\n",
        captured.server
    );
    let missing: Vec<_> = served.difference(&in_capture).collect();
    let extra: Vec<_> = in_capture.difference(&served).collect();
    if !missing.is_empty() {
        message.push_str("  served but missing from the capture:\n");
        for entry in missing {
            let _ = writeln!(message, "    + {}", entry.line());
        }
    }
    if !extra.is_empty() {
        message.push_str("  in the capture but not served (or not listable and watchable):\n");
        for entry in extra {
            let _ = writeln!(message, "    - {}", entry.line());
        }
    }
    if in_capture == served {
        message.push_str("  the same resources, but not sorted or with duplicates\n");
    }
    let _ = write!(
        message,
        "Refresh it from the repository's root with {REFRESH}"
    );
    Some(message)
}

#[tokio::test]
async fn the_local_clusters_built_in_kinds_are_the_live_servers_discovery() -> anyhow::Result<()> {
    let update = std::env::var(UPDATE_VAR).is_ok_and(|value| value == "1");
    let Some(env) = Envtest::shared() else {
        assert!(
            !update,
            "{UPDATE_VAR}=1 refreshes {CAPTURE_NAME} from a live kube-apiserver: set {ASSETS_VAR}"
        );
        return Ok(());
    };
    let client = env.client(User::Admin)?;
    let server = bounded("GET /version", client.apiserver_version())
        .await?
        .git_version;
    let live = discovered(&client).await?;
    if update {
        std::fs::write(CAPTURE, render(&server, &live))?;
        eprintln!(
            "wrote {} resources of kube-apiserver {server} to {CAPTURE_NAME}",
            live.len()
        );
        return Ok(());
    }
    let text = std::fs::read_to_string(CAPTURE)?;
    let captured: Capture = serde_json::from_str(&text)
        .map_err(|error| anyhow::anyhow!("{CAPTURE_NAME} is malformed: {error}"))?;
    if let Some(message) = difference(&captured, &server, &live) {
        panic!("{message}");
    }
    Ok(())
}
