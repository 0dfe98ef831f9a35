//! Request paths of API groups, collections and objects. Every segment that comes from a
//! name (group, version, plural, namespace, object, subresource) is percent-encoded, so that
//! no name can add a segment (`web/status`), a query (`web?force=true`) or leave the path
//! (`..`): the host checks names before they get here (`kubeplug_policy::names`), and the
//! encoding holds even for one that slipped through.

use kubeplug_informer::resource::Resource;
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};

/// What a path segment may not hold as it is: RFC 3986's delimiters and anything that is
/// not printable ASCII. Letters, digits and `-._~:@!$&'()*+,;=` stay as they are.
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'[')
    .add(b'\\')
    .add(b']')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// Appends `/` and `segment`, encoded.
fn push_segment(path: &mut String, segment: &str) {
    path.push('/');
    path.extend(utf8_percent_encode(segment, SEGMENT));
}

/// `/api/{version}` for the core group, `/apis/{group}/{version}` otherwise.
pub fn group_version_path(group: &str, version: &str) -> String {
    let mut path = String::new();
    if group.is_empty() {
        path.push_str("/api");
    } else {
        path.push_str("/apis");
        push_segment(&mut path, group);
    }
    push_segment(&mut path, version);
    path
}

/// The path of `resource`'s collection: in `namespace` when the resource is namespaced and
/// one is given (all namespaces otherwise); a namespace given for a cluster-scoped resource
/// is ignored.
pub fn collection_path(resource: &Resource, namespace: Option<&str>) -> String {
    let mut path = group_version_path(&resource.group, &resource.version);
    if resource.namespaced
        && let Some(ns) = namespace.filter(|ns| !ns.is_empty())
    {
        path.push_str("/namespaces");
        push_segment(&mut path, ns);
    }
    push_segment(&mut path, &resource.plural);
    path
}

/// The path of the object `name` of `resource` in `namespace`, or of its `subresource`.
pub fn object_path(
    resource: &Resource,
    namespace: Option<&str>,
    name: &str,
    subresource: Option<&str>,
) -> String {
    let mut path = collection_path(resource, namespace);
    push_segment(&mut path, name);
    if let Some(subresource) = subresource {
        push_segment(&mut path, subresource);
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_for_core_grouped_namespaced_and_cluster_resources() {
        let cm = Resource::new("", "v1", "ConfigMap", "configmaps", true);
        assert_eq!(
            collection_path(&cm, Some("ns")),
            "/api/v1/namespaces/ns/configmaps"
        );
        assert_eq!(collection_path(&cm, None), "/api/v1/configmaps");
        let node = Resource::new("", "v1", "Node", "nodes", false);
        assert_eq!(collection_path(&node, Some("ns")), "/api/v1/nodes");
        let deploy = Resource::new("apps", "v1", "Deployment", "deployments", true);
        assert_eq!(
            object_path(&deploy, Some("a"), "web", Some("status")),
            "/apis/apps/v1/namespaces/a/deployments/web/status"
        );
        assert_eq!(group_version_path("apps", "v1"), "/apis/apps/v1");
    }

    /// The attacks of issue 19 on request paths: each stays one segment.
    #[test]
    fn names_stay_one_segment_each() {
        let deploy = Resource::new("apps", "v1", "Deployment", "deployments", true);
        let at = |namespace: &str, name: &str| object_path(&deploy, Some(namespace), name, None);
        assert_eq!(
            at("team-a", "web/status"),
            "/apis/apps/v1/namespaces/team-a/deployments/web%2Fstatus"
        );
        assert_eq!(
            at("team-a", "web?fieldManager=x&force=true"),
            "/apis/apps/v1/namespaces/team-a/deployments/web%3FfieldManager=x&force=true"
        );
        assert_eq!(
            at("kube system", "a%2Fb"),
            "/apis/apps/v1/namespaces/kube%20system/deployments/a%252Fb"
        );
        assert_eq!(
            group_version_path("", "v1/namespaces/kube-system/secrets"),
            "/api/v1%2Fnamespaces%2Fkube-system%2Fsecrets"
        );
        for name in ["a\nb", "a#b", "x y", "ü"] {
            let path = at("ns", name);
            let last = path.rsplit('/').next().unwrap();
            assert!(
                http::Uri::try_from(&path).is_ok() && !last.is_empty(),
                "{name:?} → {path}"
            );
        }
    }
}
