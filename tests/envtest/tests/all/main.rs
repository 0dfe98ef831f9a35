//! The harness against a real kube-apiserver and etcd. Without `KUBEBUILDER_ASSETS` the tests
//! that need them print a skip line and pass (fail with `CI` set); `skip` runs everywhere.
//! `KUBEPLUG_ENVTEST_ETCD=/usr/bin/etcd` runs them all on Debian's etcd 3.4 instead.

mod basics;
mod builtin_kinds;
mod compaction;
mod lifetime;
mod proxy;
mod restart;
mod skip;

use std::future::Future;
use std::time::Duration;

/// Every await on the cluster in these tests is bounded by this.
const STEP: Duration = Duration::from_secs(30);

/// `future`, or a panic naming `what` after [`STEP`].
async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(STEP, future).await {
        Ok(output) => output,
        Err(_) => panic!("{what} took more than {STEP:?}"),
    }
}

/// A ConfigMap named `name` with one key.
fn config_map(name: &str, value: &str) -> k8s_openapi::api::core::v1::ConfigMap {
    k8s_openapi::api::core::v1::ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        data: Some([("key".to_owned(), value.to_owned())].into()),
        ..Default::default()
    }
}

/// The `Status` of an API error, or a panic naming what was expected.
fn api_status(
    result: Result<impl std::fmt::Debug, kube::Error>,
    expected: &str,
) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected {expected}, got {other:?}"),
    }
}
