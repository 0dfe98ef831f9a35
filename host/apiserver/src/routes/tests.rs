//! What each path names, as a client sees it: the answers to paths on both sides of each
//! route, sent through the routes as a connection sends them.

use std::net::SocketAddr;

use bytes::Bytes;
use http::{Method, Request, header};
use http_body_util::{BodyExt, Full};
use kubeplug_informer::resource::Resource;
use kubeplug_memory::MemoryServer;
use serde_json::{Value, json};

use super::{Routes, handle, routes};
use crate::{ApiOptions, ApiServer};

const TOKEN: &str = "route-token";

async fn server(bearer_token: Option<&str>) -> (ApiServer, Routes) {
    let options = ApiOptions {
        bearer_token: bearer_token.map(str::to_owned),
        resources: vec![
            Resource::new("", "v1", "ConfigMap", "configmaps", true),
            Resource::new("", "v1", "Namespace", "namespaces", false),
        ],
        aliases: Default::default(),
    };
    let address = SocketAddr::from(([127, 0, 0, 1], 0));
    let server = ApiServer::bind(address, MemoryServer::new(), options, None)
        .await
        .expect("a server");
    let routes = routes(server.shared.clone());
    (server, routes)
}

/// The code and the JSON body of the answer to `method path` (with `body`, and the token
/// when `token` is given).
async fn ask(
    (server, routes): &(ApiServer, Routes),
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = Request::builder().method(method).uri(path);
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let request = request
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("a request");
    let response = handle(&server.shared, routes, request).await;
    let code = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("a whole body")
        .to_bytes();
    let value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "{path}: not JSON ({e}): {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    (code, value)
}

/// The code and the `kind` (or, for a `Status`, the reason) of an answer.
fn summary((code, body): (u16, Value)) -> (u16, String) {
    let kind = body["kind"].as_str().unwrap_or_default();
    match kind {
        "Status" => (
            code,
            format!("Status {}", body["reason"].as_str().unwrap_or_default()),
        ),
        _ => (code, kind.to_owned()),
    }
}

#[tokio::test]
async fn each_path_names_what_kube_apiserver_names() {
    let server = server(None).await;
    let namespace =
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}});
    let configmap = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": "default"}});
    let created = ask(
        &server,
        Method::POST,
        "/api/v1/namespaces",
        None,
        Some(namespace),
    )
    .await;
    assert_eq!(created.0, 201, "{created:?}");
    let path = "/api/v1/namespaces/default/configmaps";
    let created = ask(&server, Method::POST, path, None, Some(configmap)).await;
    assert_eq!(created.0, 201, "{created:?}");

    let not_found = (404, "Status NotFound".to_owned());
    for (method, path, expected) in [
        (Method::GET, "/version", (200, String::new())),
        // Every method, as before the routes were declared.
        (Method::DELETE, "/api", (200, "APIVersions".to_owned())),
        (Method::GET, "/apis", (200, "APIGroupList".to_owned())),
        (Method::GET, "/api/v1", (200, "APIResourceList".to_owned())),
        (Method::GET, "/api/v2", not_found.clone()),
        (Method::GET, "/apis/apps/v1", not_found.clone()),
        (Method::GET, "/openapi/v3", (200, String::new())),
        (Method::GET, "/openapi/v3/api/v1", (200, String::new())),
        (Method::GET, "/openapi/v3/apis/apps/v1", not_found.clone()),
        (
            Method::GET,
            "/api/v1/namespaces",
            (200, "NamespaceList".to_owned()),
        ),
        (
            Method::GET,
            "/api/v1/namespaces/default",
            (200, "Namespace".to_owned()),
        ),
        // A Namespace's status, not a resource `status` in the namespace.
        (
            Method::GET,
            "/api/v1/namespaces/default/status",
            (200, "Namespace".to_owned()),
        ),
        (
            Method::GET,
            "/api/v1/namespaces/default/finalize",
            not_found.clone(),
        ),
        (
            Method::GET,
            "/api/v1/namespaces/default/status/x",
            not_found.clone(),
        ),
        (
            Method::GET,
            "/api/v1/configmaps",
            (200, "ConfigMapList".to_owned()),
        ),
        (
            Method::GET,
            "/api/v1/namespaces/default/configmaps",
            (200, "ConfigMapList".to_owned()),
        ),
        (
            Method::GET,
            "/api/v1/namespaces/default/configmaps/a",
            (200, "ConfigMap".to_owned()),
        ),
        (
            Method::GET,
            "/api/v1/namespaces/default/configmaps/a/status",
            (200, "ConfigMap".to_owned()),
        ),
        (
            Method::GET,
            "/api/v1/namespaces/default/configmaps/b",
            not_found.clone(),
        ),
        (
            Method::GET,
            "/api/v1/namespaces/default/configmaps/a/scale",
            not_found.clone(),
        ),
        (
            Method::GET,
            "/api/v1/namespaces/default/secrets",
            not_found.clone(),
        ),
        // Slashes at either end are ignored.
        (
            Method::GET,
            "/api/v1/namespaces/default/configmaps/a/",
            (200, "ConfigMap".to_owned()),
        ),
        (
            Method::GET,
            "//api/v1//",
            (200, "APIResourceList".to_owned()),
        ),
        (Method::GET, "/", not_found.clone()),
        (Method::GET, "/healthz", not_found.clone()),
        // A method a path does not take is a `405` Status, not an empty answer.
        (
            Method::POST,
            "/api/v1/namespaces/default/configmaps/a",
            (405, "Status MethodNotAllowed".to_owned()),
        ),
        (
            Method::PUT,
            "/api/v1/namespaces/default/configmaps",
            (405, "Status MethodNotAllowed".to_owned()),
        ),
    ] {
        let answer = summary(ask(&server, method.clone(), path, None, None).await);
        assert_eq!(answer, expected, "{method} {path}");
    }
}

#[tokio::test]
async fn the_token_is_checked_before_the_path() {
    let server = server(Some(TOKEN)).await;
    let unauthorized = (401, "Status Unauthorized".to_owned());
    for token in [
        None,
        Some("route-toke"),
        Some("route-tokeN"),
        Some("route-token-"),
    ] {
        for path in ["/api", "/nothing", "/api/v1/namespaces/default/configmaps"] {
            let answer = summary(ask(&server, Method::GET, path, token, None).await);
            assert_eq!(answer, unauthorized, "{path} with {token:?}");
        }
    }
    let answer = summary(ask(&server, Method::GET, "/nothing", Some(TOKEN), None).await);
    assert_eq!(answer, (404, "Status NotFound".to_owned()));
    let answer = summary(ask(&server, Method::GET, "/api", Some(TOKEN), None).await);
    assert_eq!(answer, (200, "APIVersions".to_owned()));
}

/// `generateName` gets kube-apiserver's suffix, drawn at random: five characters of its
/// alphabet, a new name each time.
#[tokio::test]
async fn generated_names_are_the_prefix_and_a_random_suffix() {
    let server = server(None).await;
    let namespace =
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}});
    let created = ask(
        &server,
        Method::POST,
        "/api/v1/namespaces",
        None,
        Some(namespace),
    )
    .await;
    assert_eq!(created.0, 201, "{created:?}");
    let mut names = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let configmap = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"generateName": "web-", "namespace": "default"}});
        let path = "/api/v1/namespaces/default/configmaps";
        let (code, body) = ask(&server, Method::POST, path, None, Some(configmap)).await;
        assert_eq!(code, 201, "{body}");
        let name = body["metadata"]["name"]
            .as_str()
            .expect("a name")
            .to_owned();
        let suffix = name.strip_prefix("web-").expect("the prefix");
        assert!(
            suffix.len() == 5
                && suffix
                    .bytes()
                    .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b)),
            "{name}"
        );
        names.insert(name);
    }
    assert_eq!(names.len(), 20, "{names:?}");
}
