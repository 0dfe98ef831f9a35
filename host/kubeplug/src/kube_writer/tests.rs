//! The writer against both API servers, through one body per scenario: the fake one of
//! `tests/fake-apiserver`, and a real kube-apiserver v1.32 (`kubeplug-envtest`, one control
//! plane for this test binary, a namespace per test; skipped with one line without its
//! assets). Where the two answer differently, the real one is right.

use kubeplug_envtest::{Envtest, User};
use kubeplug_fake_apiserver::{FakeApiServer, FakeOptions};
use kubeplug_kube::config::{ConfigSource, Loaded, Origin};
use kubeplug_runtime::view::{EventSeverity, PatchedPart};

use super::*;

/// Which API server a test body runs on.
#[derive(Debug, Clone, Copy)]
enum Server {
    Fake,
    Real,
}

/// Runs a scenario's body on each server, as the tests `fake_apiserver` and
/// `kube_apiserver` of a module named after the scenario.
macro_rules! on_both_servers {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn fake_apiserver() {
                super::$scenario(super::Server::Fake).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn kube_apiserver() {
                super::$scenario(super::Server::Real).await;
            }
        }
    )*};
}

on_both_servers!(
    apply_creates_then_merges_under_the_field_manager,
    patches_reach_the_object_or_its_status,
    create_and_delete_and_their_errors,
    events_are_events_k8s_io_v1_objects,
    a_refused_write_is_unavailable_naming_the_object,
);

/// A Deployment the real API server accepts: a selector, and a template it matches.
fn deployment(name: &str, replicas: u32) -> Value {
    serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"a": "b"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]},
            },
        },
    })
}

/// A namespace holding the Deployment `web`, a writer on its server, and an admin client to
/// read back what the writer wrote.
struct Setup {
    namespace: String,
    writer: KubeWriter,
    admin: kube::Client,
    /// The fake server, when the body runs on it: its request log, and dropping it.
    fake: Option<FakeApiServer>,
    dir: tempfile::TempDir,
}

impl Setup {
    /// `None` when the real server's assets are missing (the harness said so on stderr).
    async fn new(server: Server, test: &str) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let (namespace, kubeconfig, fake) = match server {
            Server::Fake => {
                let fake = FakeApiServer::start(FakeOptions::default()).await.unwrap();
                fake.serve(Resource::new(
                    "apps",
                    "v1",
                    "Deployment",
                    "deployments",
                    true,
                ));
                let kubeconfig = fake.write_kubeconfig(dir.path()).unwrap();
                ("team-a".to_owned(), kubeconfig, Some(fake))
            }
            Server::Real => {
                let env = Envtest::shared()?;
                let namespace = env.namespace(test).unwrap();
                (namespace, env.kubeconfig().to_owned(), None)
            }
        };
        let client = KubeClient::from_source(&ConfigSource::Kubeconfig {
            path: kubeconfig,
            context: None,
        })
        .await
        .unwrap();
        let setup = Self {
            writer: KubeWriter::new(
                client.clone(),
                Discovery::new(client.clone()),
                "host-1".into(),
            ),
            admin: client.client().clone(),
            namespace,
            fake,
            dir,
        };
        let created = setup
            .request(
                Method::POST,
                &setup.deployments(""),
                Some(deployment("web", 1)),
            )
            .await;
        assert!(created.is_ok(), "creating web: {created:?}");
        Some(setup)
    }

    /// The path of the namespace's Deployments, or of one of them.
    fn deployments(&self, name: &str) -> String {
        let collection = format!("/apis/apps/v1/namespaces/{}/deployments", self.namespace);
        if name.is_empty() {
            collection
        } else {
            format!("{collection}/{name}")
        }
    }

    /// An admin request: the answer's JSON, or its status code and body.
    async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, (u16, String)> {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::CONTENT_TYPE, "application/json")
            .body(body.map(|b| b.to_string().into_bytes()).unwrap_or_default())
            .unwrap();
        let response = self.admin.send(request.map(Body::from)).await.unwrap();
        let code = response.status().as_u16();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if (200..300).contains(&code) {
            Ok(serde_json::from_str(&text).unwrap())
        } else {
            Err((code, text))
        }
    }

    /// The stored Deployment `name`.
    async fn stored(&self, name: &str) -> Value {
        self.request(Method::GET, &self.deployments(name), None)
            .await
            .unwrap_or_else(|e| panic!("reading {name}: {e:?}"))
    }

    fn target(&self, name: &str) -> ObjectRef {
        ObjectRef {
            resource: Gvk::new("apps", "v1", "Deployment"),
            namespace: Some(self.namespace.clone()),
            name: name.into(),
        }
    }
}

async fn apply_creates_then_merges_under_the_field_manager(server: Server) {
    let Some(setup) = Setup::new(server, "apply").await else {
        return;
    };
    let mut new = deployment("new", 1);
    new["metadata"]["labels"] = serde_json::json!({"x": "1"});
    for (name, json) in [
        ("new", new),
        (
            "web",
            serde_json::json!({"metadata": {"labels": {"x": "1"}}}),
        ),
    ] {
        let written = setup
            .writer
            .write(
                "test",
                Write::Apply {
                    target: setup.target(name),
                    json: json.to_string(),
                    force: true,
                    field_manager: "kubeplug/test".into(),
                },
            )
            .await
            .unwrap();
        let written: Value = serde_json::from_str(&written).unwrap();
        assert_eq!(written["metadata"]["labels"]["x"], "1", "{written}");
        let object = setup.stored(name).await;
        assert_eq!(object["metadata"]["labels"]["x"], "1");
        let managers = object["metadata"]["managedFields"].as_array().unwrap();
        assert!(
            managers
                .iter()
                .any(|m| m["manager"] == "kubeplug/test" && m["operation"] == "Apply"),
            "{managers:?}"
        );
    }
    // Fields the plugin does not manage stay.
    assert_eq!(setup.stored("web").await["metadata"]["labels"]["a"], "b");
    if let Some(fake) = &setup.fake {
        let applies: Vec<_> = fake
            .requests()
            .into_iter()
            .filter(|r| r.method == "PATCH")
            .map(|r| r.uri)
            .collect();
        assert_eq!(
            applies,
            [
                "/apis/apps/v1/namespaces/team-a/deployments/new?fieldManager=kubeplug%2Ftest&force=true",
                "/apis/apps/v1/namespaces/team-a/deployments/web?fieldManager=kubeplug%2Ftest&force=true",
            ]
        );
    }
}

async fn patches_reach_the_object_or_its_status(server: Server) {
    let Some(setup) = Setup::new(server, "patch").await else {
        return;
    };
    let patch = |patch_type, patch: &str, part: PatchedPart| Write::Patch {
        target: setup.target("web"),
        patch_type,
        patch: patch.into(),
        part,
    };
    let writes = [
        patch(
            PatchType::Merge,
            r#"{"spec":{"replicas":3}}"#,
            PatchedPart::Object,
        ),
        patch(
            PatchType::Json,
            r#"[{"op":"add","path":"/metadata/labels/j","value":"k"}]"#,
            PatchedPart::Object,
        ),
        patch(
            PatchType::Merge,
            r#"{"status":{"replicas":3}}"#,
            PatchedPart::Status,
        ),
        // The object's own patch cannot change its status, nor the status patch anything
        // else.
        patch(
            PatchType::Merge,
            r#"{"status":{"replicas":9}}"#,
            PatchedPart::Object,
        ),
        patch(
            PatchType::Merge,
            r#"{"spec":{"replicas":9},"metadata":{"labels":{"s":"t"}}}"#,
            PatchedPart::Status,
        ),
        patch(
            PatchType::Json,
            r#"[{"op":"replace","path":"/spec/replicas","value":9}]"#,
            PatchedPart::Status,
        ),
    ];
    for write in writes {
        setup.writer.write("test", write).await.unwrap();
    }
    let object = setup.stored("web").await;
    assert_eq!(object["spec"]["replicas"], 3, "{object}");
    assert_eq!(object["metadata"]["labels"]["j"], "k");
    assert_eq!(object["metadata"]["labels"].get("s"), None, "{object}");
    assert_eq!(object["status"]["replicas"], 3, "{object}");
    assert_eq!(object["status"].get("spec"), None, "{object}");
    let error = setup
        .writer
        .write(
            "test",
            patch(
                PatchType::Json,
                r#"[{"op":"remove","path":"/nope"}]"#,
                PatchedPart::Object,
            ),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, WriteError::Invalid(_)), "{error:?}");
}

async fn create_and_delete_and_their_errors(server: Server) {
    let Some(setup) = Setup::new(server, "create").await else {
        return;
    };
    let create = |name: &str| {
        let mut object = deployment(name, 2);
        object["status"] = serde_json::json!({"replicas": 7});
        Write::Create {
            resource: Gvk::new("apps", "v1", "Deployment"),
            namespace: Some(setup.namespace.clone()),
            json: object.to_string(),
        }
    };
    let created = setup.writer.write("test", create("api")).await.unwrap();
    let created: Value = serde_json::from_str(&created).unwrap();
    assert!(
        created["metadata"]["resourceVersion"].is_string(),
        "{created}"
    );
    let stored = setup.stored("api").await;
    assert_eq!(stored["spec"]["replicas"], 2);
    // A creation sets no status: only the status subresource does.
    assert_eq!(stored["status"].get("replicas"), None, "{stored}");

    let error = setup.writer.write("test", create("api")).await.unwrap_err();
    assert!(
        matches!(&error, WriteError::Conflict(m) if m.contains("\"api\"") && m.contains("already exists")),
        "{error:?}"
    );
    let error = setup
        .writer
        .write("test", create("Not_A_Name"))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, WriteError::Invalid(m) if m.contains("Not_A_Name")),
        "{error:?}"
    );

    let delete = || Write::Delete {
        target: setup.target("api"),
    };
    assert_eq!(setup.writer.write("test", delete()).await.unwrap(), "");
    let error = setup.writer.write("test", delete()).await.unwrap_err();
    let key = format!("{}/api", setup.namespace);
    assert!(
        matches!(&error, WriteError::NotFound(m) if m.contains(&key)),
        "{error:?}"
    );
    let unserved = Write::Delete {
        target: ObjectRef {
            resource: Gvk::new("example.com", "v1", "Widget"),
            ..setup.target("w")
        },
    };
    let error = setup.writer.write("test", unserved).await.unwrap_err();
    assert!(
        matches!(&error, WriteError::NotFound(m) if m.contains("example.com/v1")),
        "{error:?}"
    );
}

async fn events_are_events_k8s_io_v1_objects(server: Server) {
    let Some(setup) = Setup::new(server, "events").await else {
        return;
    };
    for _ in 0..2 {
        setup
            .writer
            .write(
                "test",
                Write::RecordEvent {
                    regarding: setup.target("web"),
                    regarding_uid: Some("0b6b4a52-3d2f-4f0e-9c1a-2f1d5e7c9a10".into()),
                    severity: EventSeverity::Warning,
                    reason: "MissingLabels".into(),
                    message: "é".repeat(600),
                    reporting_controller: "kubeplug/test".into(),
                },
            )
            .await
            .unwrap();
    }
    let path = format!(
        "/apis/events.k8s.io/v1/namespaces/{}/events",
        setup.namespace
    );
    let list = setup.request(Method::GET, &path, None).await.unwrap();
    let events = list["items"].as_array().unwrap();
    assert_eq!(events.len(), 2, "names are unique: {list}");
    let event = &events[0];
    assert_eq!(event["metadata"]["namespace"], setup.namespace.as_str());
    assert!(
        event["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("web.")
    );
    assert_eq!(
        event["regarding"],
        serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
                           "namespace": setup.namespace, "name": "web",
                           "uid": "0b6b4a52-3d2f-4f0e-9c1a-2f1d5e7c9a10"})
    );
    for (field, value) in [
        ("type", "Warning"),
        ("reason", "MissingLabels"),
        ("action", "MissingLabels"),
        ("reportingController", "kubeplug/test"),
        ("reportingInstance", "host-1"),
    ] {
        assert_eq!(event[field], value, "{field}");
    }
    assert_eq!(event["note"].as_str().unwrap().len(), 1024);
    // RFC 3339 with microseconds, as `MicroTime`: 2026-11-29T08:34:24.123456Z.
    let time = event["eventTime"].as_str().unwrap();
    assert_eq!(
        (time.len(), &time[19..20], &time[26..]),
        (27, ".", "Z"),
        "{time}"
    );
}

/// Refused by the server (the fake without its token: 401; the real one as a user RBAC
/// grants nothing: 403), then unreachable (the fake server gone).
async fn a_refused_write_is_unavailable_naming_the_object(server: Server) {
    let Some(setup) = Setup::new(server, "refused").await else {
        return;
    };
    let delete = || Write::Delete {
        target: setup.target("web"),
    };
    let delete_web = || Write::Delete {
        target: ObjectRef {
            resource: Gvk::new("apps", "v1", "Deployment"),
            namespace: Some("team-a".into()),
            name: "web".into(),
        },
    };
    let refused = match &setup.fake {
        Some(_) => {
            let refusing = FakeApiServer::start(FakeOptions {
                bearer_token: Some("secret".into()),
                ..FakeOptions::default()
            })
            .await
            .unwrap();
            refusing.serve(Resource::new(
                "apps",
                "v1",
                "Deployment",
                "deployments",
                true,
            ));
            let yaml = refusing
                .kubeconfig_yaml(None)
                .replace("token: secret", "{}");
            let path = setup.dir.path().join("no-token");
            std::fs::write(&path, yaml).unwrap();
            let client = KubeClient::from_source(&ConfigSource::Kubeconfig {
                path,
                context: None,
            })
            .await
            .unwrap();
            let writer = KubeWriter::new(client.clone(), Discovery::new(client), "h".into());
            writer.write("test", delete()).await.unwrap_err()
        }
        None => {
            let env = Envtest::shared().expect("the setup ran on it");
            let loaded = Loaded {
                config: env.kube_config(User::Unprivileged),
                origin: Origin {
                    file: None,
                    context: None,
                    address: env.apiserver_addr().to_string(),
                },
            };
            let client = KubeClient::new(loaded).unwrap();
            let writer = KubeWriter::new(client.clone(), Discovery::new(client), "h".into());
            writer.write("test", delete()).await.unwrap_err()
        }
    };
    assert!(matches!(refused, WriteError::Unavailable(_)), "{refused:?}");
    assert!(refused.to_string().contains("/web"), "{refused}");
    // Then the fake server goes away.
    let Setup { fake, writer, .. } = setup;
    if let Some(fake) = fake {
        let address = fake.address().to_owned();
        drop(fake);
        let gone = writer.write("test", delete_web()).await.unwrap_err();
        assert!(
            matches!(&gone, WriteError::Unavailable(m) if m.contains(&address) && m.contains("team-a/web")),
            "{gone:?}"
        );
    }
}

#[test]
fn status_codes_map_to_write_errors() {
    for (code, expected) in [
        (404, "not found"),
        (409, "conflict"),
        (400, "invalid"),
        (422, "invalid"),
        (401, "unavailable"),
        (403, "unavailable"),
        (429, "unavailable"),
        (500, "unavailable"),
        (503, "unavailable"),
    ] {
        let status = Status::new(code, "Reason", "the message");
        let error = status_error(&status, "patch apps/v1/Deployment team-a/web");
        let text = error.to_string();
        assert!(text.starts_with(expected), "{code}: {text}");
        assert!(
            text.contains("team-a/web") && text.contains("the message"),
            "{text}"
        );
    }
}
