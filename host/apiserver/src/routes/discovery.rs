//! Discovery: the API groups, versions and resources the server serves, and the OpenAPI v3
//! documents kubectl reads before a PATCH.

use std::collections::BTreeMap;

use http::{Response, StatusCode};
use kubeplug_informer::resource::Resource;
use serde_json::{Value, json};

use super::{Body, error, json_response};
use crate::{Shared, lock};

pub(super) fn groups(shared: &Shared) -> Response<Body> {
    let mut by_group: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for resource in lock(&shared.resources)
        .iter()
        .filter(|r| !r.group.is_empty())
    {
        let versions = by_group.entry(resource.group.clone()).or_default();
        if !versions.contains(&resource.version) {
            versions.push(resource.version.clone());
        }
    }
    let groups: Vec<Value> = by_group
        .into_iter()
        .map(|(name, versions)| {
            let entries: Vec<Value> = versions
                .iter()
                .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
                .collect();
            let preferred = entries[0].clone();
            json!({"name": name, "versions": entries, "preferredVersion": preferred})
        })
        .collect();
    json_response(
        StatusCode::OK,
        &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}),
    )
}

pub(super) fn group_version(shared: &Shared, group: &str, version: &str) -> Response<Body> {
    let resources: Vec<Value> = lock(&shared.resources)
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .flat_map(|r| {
            let singular = r.kind.to_lowercase();
            let mut resource = json!({"name": r.plural, "singularName": singular,
                "namespaced": r.namespaced, "kind": r.kind,
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]});
            if let Some(aliases) = shared.aliases.get(&(r.group.clone(), r.plural.clone())) {
                if !aliases.short_names.is_empty() {
                    resource["shortNames"] = json!(aliases.short_names);
                }
                if !aliases.categories.is_empty() {
                    resource["categories"] = json!(aliases.categories);
                }
            }
            [
                resource,
                json!({"name": format!("{}/status", r.plural), "singularName": "",
                    "namespaced": r.namespaced, "kind": r.kind, "verbs": ["get", "patch", "update"]}),
            ]
        })
        .collect();
    if resources.is_empty() {
        return error(404, "the server could not find the requested resource");
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    json_response(
        StatusCode::OK,
        &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    )
}

/// The path of a group-version's API, `api/v1` or `apis/{group}/{version}`.
fn api_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: a document per group-version served. What kubectl reads of them is whether
/// a PATCH takes `fieldValidation` (then it leaves validation to the server and does not
/// fetch schemas), so that is all they say; the hash changes when the resources do.
pub(super) fn openapi_root(shared: &Shared) -> Response<Body> {
    let resources = lock(&shared.resources).clone();
    let mut paths = serde_json::Map::new();
    for resource in &resources {
        let path = api_path(&resource.group, &resource.version);
        let hash = format!("{:016x}", fingerprint(&resources, resource));
        paths.insert(
            path.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={hash}")}),
        );
    }
    json_response(StatusCode::OK, &json!({"paths": paths}))
}

/// A hash of the resources of `of`'s group-version.
fn fingerprint(resources: &[Resource], of: &Resource) -> u64 {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut hasher = DefaultHasher::new();
    for resource in resources
        .iter()
        .filter(|r| r.group == of.group && r.version == of.version)
    {
        (&resource.kind, &resource.plural, resource.namespaced).hash(&mut hasher);
    }
    hasher.finish()
}

/// A group-version's OpenAPI v3 document: each resource's object path, whose PATCH names its
/// kind and takes `fieldValidation`. No schemas: the server does not validate fields, it
/// stores what it is sent.
pub(super) fn openapi_group_version(shared: &Shared, group: &str, version: &str) -> Response<Body> {
    let mut paths = serde_json::Map::new();
    for resource in lock(&shared.resources)
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let scope = if resource.namespaced {
            "namespaces/{namespace}/"
        } else {
            ""
        };
        let path = format!(
            "/{}/{scope}{}/{{name}}",
            api_path(group, version),
            resource.plural
        );
        let kind = json!({"group": group, "version": version, "kind": resource.kind});
        paths.insert(
            path,
            json!({"patch": {
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": kind,
                "parameters": [{"name": "fieldValidation", "in": "query",
                    "schema": {"type": "string", "uniqueItems": true}}],
                "responses": {"200": {"description": "OK"}},
            }}),
        );
    }
    if paths.is_empty() {
        return error(404, "the server could not find the requested resource");
    }
    json_response(
        StatusCode::OK,
        &json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0"}, "paths": paths}),
    )
}
