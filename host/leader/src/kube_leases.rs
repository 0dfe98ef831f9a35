//! The Lease in the Kubernetes API.

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;

use crate::{LeaseError, LeaseRecord, LeaseStore};

/// A `coordination.k8s.io/v1` Lease, read and written with optimistic concurrency.
#[derive(Clone)]
pub struct KubeLeases {
    api: Api<Lease>,
    namespace: String,
    name: String,
}

impl std::fmt::Debug for KubeLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KubeLeases({}/{})", self.namespace, self.name)
    }
}

impl KubeLeases {
    /// The Lease `name` in `namespace`.
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    fn lease(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn error(&self, verb: &'static str, error: kube::Error) -> LeaseError {
        match error {
            kube::Error::Api(response) if response.code == 409 => LeaseError::Conflict {
                lease: self.lease(),
            },
            error => LeaseError::Api {
                verb,
                lease: self.lease(),
                reason: error.to_string(),
            },
        }
    }

    fn to_lease(&self, record: &LeaseRecord) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                resource_version: record.resource_version.clone(),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: record.holder.clone(),
                lease_duration_seconds: Some(record.lease_duration_seconds),
                acquire_time: record.acquire_time.map(MicroTime),
                renew_time: record.renew_time.map(MicroTime),
                lease_transitions: Some(record.transitions),
                ..LeaseSpec::default()
            }),
        }
    }
}

fn to_record(lease: Lease) -> LeaseRecord {
    let spec = lease.spec.unwrap_or_default();
    LeaseRecord {
        holder: spec.holder_identity,
        lease_duration_seconds: spec.lease_duration_seconds.unwrap_or(0),
        acquire_time: spec.acquire_time.map(|t| t.0),
        renew_time: spec.renew_time.map(|t| t.0),
        transitions: spec.lease_transitions.unwrap_or(0),
        resource_version: lease.metadata.resource_version,
    }
}

impl LeaseStore for KubeLeases {
    fn get(&self) -> BoxFuture<'_, Result<Option<LeaseRecord>, LeaseError>> {
        async move {
            self.api
                .get_opt(&self.name)
                .await
                .map(|lease| lease.map(to_record))
                .map_err(|e| self.error("get", e))
        }
        .boxed()
    }

    fn create(&self, record: LeaseRecord) -> BoxFuture<'_, Result<LeaseRecord, LeaseError>> {
        async move {
            let lease = self.to_lease(&LeaseRecord {
                resource_version: None,
                ..record
            });
            self.api
                .create(&PostParams::default(), &lease)
                .await
                .map(to_record)
                .map_err(|e| self.error("create", e))
        }
        .boxed()
    }

    fn update(&self, record: LeaseRecord) -> BoxFuture<'_, Result<LeaseRecord, LeaseError>> {
        async move {
            let lease = self.to_lease(&record);
            self.api
                .replace(&self.name, &PostParams::default(), &lease)
                .await
                .map(to_record)
                .map_err(|e| self.error("update", e))
        }
        .boxed()
    }
}
