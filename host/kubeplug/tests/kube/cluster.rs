//! The API server a scenario runs on: the fake one of `tests/fake-apiserver`, or a real
//! kube-apiserver v1.32 (`kubeplug-envtest`: one control plane for this test binary, a
//! namespace per scenario). A scenario is written once, against [`Cluster`], and runs on both
//! (`on_both_servers!`); where the two answer differently, the real one is right.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use http::{Method, Request, header};
use http_body_util::BodyExt as _;
use kube::client::Body;
use kubeplug_envtest::{Envtest, Proxy};
use kubeplug_fake_apiserver::{FakeApiServer, FakeOptions};
use kubeplug_informer::resource::Resource;
use serde_json::{Value, json};

/// The `User-Agent` of the test's own requests, to tell them from the host's.
pub(crate) const TEST_AGENT: &str = "kubeplug-tests";

/// Which API server a scenario runs on.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Server {
    Fake,
    Real,
}

/// Runs each scenario's body on each server, as the tests `fake_apiserver` and
/// `kube_apiserver` of a module named after the scenario.
macro_rules! on_both_servers {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn fake_apiserver() {
                super::$scenario(crate::cluster::Server::Fake).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn kube_apiserver() {
                super::$scenario(crate::cluster::Server::Real).await;
            }
        }
    )*};
}
pub(crate) use on_both_servers;

enum Backend {
    Fake(FakeApiServer),
    Real(&'static Envtest),
}

/// An API server serving Deployments, a namespace on it, a kubeconfig for the host (as the
/// admin), and an admin client for the test.
pub(crate) struct Cluster {
    pub(crate) namespace: String,
    pub(crate) kubeconfig: PathBuf,
    pub(crate) dir: tempfile::TempDir,
    admin: kube::Client,
    backend: Backend,
}

pub(crate) fn deployments() -> Resource {
    Resource::new("apps", "v1", "Deployment", "deployments", true)
}

/// A Deployment the real API server accepts, without the label label-audit asks for.
pub(crate) fn deployment(name: &str) -> Value {
    serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]},
            },
        },
    })
}

impl Cluster {
    /// `None` when the real server's assets are missing (the harness said so on stderr).
    pub(crate) async fn start(server: Server, scenario: &str) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let (backend, namespace, kubeconfig) = match server {
            Server::Fake => {
                let fake = FakeApiServer::start(FakeOptions::default()).await.unwrap();
                fake.serve(deployments());
                let kubeconfig = fake.write_kubeconfig(dir.path()).unwrap();
                (Backend::Fake(fake), "team-a".to_owned(), kubeconfig)
            }
            Server::Real => {
                let env = Envtest::shared()?;
                let namespace = env.namespace(scenario).unwrap();
                (Backend::Real(env), namespace, env.kubeconfig().to_owned())
            }
        };
        let admin = kube_client(&kubeconfig).await;
        Some(Self {
            namespace,
            kubeconfig,
            dir,
            admin,
            backend,
        })
    }

    /// The fake server, when the scenario runs on it.
    pub(crate) fn fake(&self) -> Option<&FakeApiServer> {
        match &self.backend {
            Backend::Fake(fake) => Some(fake),
            Backend::Real(_) => None,
        }
    }

    /// The real control plane, when the scenario runs on it.
    pub(crate) fn envtest(&self) -> Option<&'static Envtest> {
        match self.backend {
            Backend::Real(env) => Some(env),
            Backend::Fake(_) => None,
        }
    }

    /// A kubeconfig for the host, as the admin, through `proxy` (real server only).
    pub(crate) fn kubeconfig_via(&self, proxy: &Proxy, name: &str) -> PathBuf {
        let env = self
            .envtest()
            .expect("a proxy stands in front of the real server");
        let direct = std::fs::read_to_string(env.kubeconfig()).unwrap();
        let proxied = direct.replace(&env.apiserver_addr().to_string(), &proxy.addr().to_string());
        assert_ne!(
            direct, proxied,
            "the kubeconfig names the API server's address"
        );
        let path = self.dir.path().join(name);
        std::fs::write(&path, proxied).unwrap();
        path
    }

    /// A kubeconfig for the host as ServiceAccount `kubeplug`, bound to exactly what
    /// `kubeplug rbac --plugins PLUGINS --name NAME ARGS` prints (real server only).
    pub(crate) async fn as_printed_rbac_allows(
        &self,
        name: &str,
        plugins: &Path,
        args: &[&std::ffi::OsStr],
    ) -> PathBuf {
        let rbac = crate::support::kubeplug()
            .args(["rbac", "--plugins"])
            .arg(plugins)
            .args(["--name", name, "--service-account", "kubeplug"])
            .args(["--service-account-namespace", &self.namespace])
            .args(args)
            .output()
            .unwrap();
        assert!(
            rbac.status.success(),
            "{}",
            String::from_utf8_lossy(&rbac.stderr)
        );
        self.apply_rbac(&String::from_utf8(rbac.stdout).unwrap())
            .await;
        let token = self.service_account_token("kubeplug").await;
        self.kubeconfig_for(&token, "host.kubeconfig")
    }

    /// Binds ClusterRole `role` to ServiceAccount `account` of the namespace, as `binding`.
    pub(crate) async fn bind_cluster_role(&self, binding: &str, role: &str, account: &str) {
        self.request(
            Method::POST,
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            Some(&json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": binding},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": account,
                              "namespace": self.namespace}],
            })),
        )
        .await
        .unwrap();
    }

    /// A kubeconfig for the host that authenticates with `token` instead of the admin's
    /// (real server only).
    pub(crate) fn kubeconfig_for(&self, token: &str, name: &str) -> PathBuf {
        let env = self.envtest().expect("tokens are the real server's");
        let admin = std::fs::read_to_string(env.kubeconfig()).unwrap();
        let config = admin.replace(env.token(kubeplug_envtest::User::Admin), token);
        assert_ne!(admin, config, "the kubeconfig holds the token");
        let path = self.dir.path().join(name);
        std::fs::write(&path, config).unwrap();
        path
    }

    /// An admin request: the answer's JSON, or its status code and body.
    pub(crate) async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, (u16, String)> {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::USER_AGENT, TEST_AGENT)
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

    /// Creates `object` in `collection` (a path), panicking on a refusal.
    pub(crate) async fn create(&self, collection: &str, object: &Value) -> Value {
        self.request(Method::POST, collection, Some(object))
            .await
            .unwrap_or_else(|e| panic!("creating in {collection}: {e:?}"))
    }

    /// Creates the Deployment `name` in the namespace.
    pub(crate) async fn create_deployment(&self, name: &str) {
        let path = format!("/apis/apps/v1/namespaces/{}/deployments", self.namespace);
        self.create(&path, &deployment(name)).await;
    }

    /// The namespace's `events.k8s.io/v1` Events.
    pub(crate) async fn events(&self) -> Vec<Value> {
        let path = format!(
            "/apis/events.k8s.io/v1/namespaces/{}/events",
            self.namespace
        );
        let list = self.request(Method::GET, &path, None).await.unwrap();
        list["items"].as_array().cloned().unwrap_or_default()
    }

    /// Names of the objects an Event with `reason` was recorded about.
    pub(crate) async fn noted(&self, reason: &str) -> std::collections::BTreeSet<String> {
        self.events()
            .await
            .into_iter()
            .filter(|event| event["reason"] == reason)
            .filter_map(|event| Some(event["regarding"]["name"].as_str()?.to_owned()))
            .collect()
    }

    /// Who holds the Lease `name` in the namespace.
    pub(crate) async fn lease_holder(&self, name: &str) -> Option<String> {
        let path = format!(
            "/apis/coordination.k8s.io/v1/namespaces/{}/leases/{name}",
            self.namespace
        );
        let lease = self.request(Method::GET, &path, None).await.ok()?;
        lease["spec"]["holderIdentity"]
            .as_str()
            .filter(|holder| !holder.is_empty())
            .map(str::to_owned)
    }

    /// Creates ServiceAccount `name` in the namespace and returns a token for it.
    pub(crate) async fn service_account_token(&self, name: &str) -> String {
        let accounts = format!("/api/v1/namespaces/{}/serviceaccounts", self.namespace);
        self.create(
            &accounts,
            &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}),
        )
        .await;
        let request = json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        });
        let answer = self
            .create(&format!("{accounts}/{name}/token"), &request)
            .await;
        answer["status"]["token"].as_str().unwrap().to_owned()
    }

    /// Creates every RBAC document of `yaml` (what `kubeplug rbac` prints).
    pub(crate) async fn apply_rbac(&self, yaml: &str) {
        for document in serde_yaml_ng::Deserializer::from_str(yaml) {
            let document: Value = serde::Deserialize::deserialize(document).unwrap();
            let collection = match document["kind"].as_str().unwrap() {
                "ClusterRole" => "clusterroles".to_owned(),
                "ClusterRoleBinding" => "clusterrolebindings".to_owned(),
                namespaced => format!(
                    "namespaces/{}/{}s",
                    document["metadata"]["namespace"].as_str().unwrap(),
                    namespaced.to_lowercase()
                ),
            };
            self.create(
                &format!("/apis/rbac.authorization.k8s.io/v1/{collection}"),
                &document,
            )
            .await;
        }
    }
}

/// A kube client for `kubeconfig`'s current context.
async fn kube_client(kubeconfig: &Path) -> kube::Client {
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(kubeconfig).unwrap(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// Polls `probe` every 100 ms until it gives a value; panics naming `what` after a minute.
pub(crate) async fn eventually<T, F>(what: &str, mut probe: impl FnMut() -> F) -> T
where
    F: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not as expected after a minute"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
