//! A replica's own member Lease, written by server-side apply, and the ring's Leases read
//! back from the informer's objects.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kubeplug_informer::object::Object;
use kubeplug_shard::{
    MemberLease, MembershipError, PLUGINS_ANNOTATION, RING_LABEL, Served, read_plugins,
    write_plugins,
};

/// The field manager of member Leases.
const FIELD_MANAGER: &str = "kubeplug-sharding";

/// This replica's Lease in the ring.
pub(crate) struct OwnLease {
    api: Api<Lease>,
    name: String,
    ring: String,
    identity: String,
    duration: Duration,
    /// When this replica first held it, kept across renewals.
    acquired: Option<Timestamp>,
}

impl OwnLease {
    /// The Lease `<ring>-<identity>` in `api`'s namespace.
    pub(crate) fn new(api: Api<Lease>, ring: &str, identity: &str, duration: Duration) -> Self {
        Self {
            api,
            name: lease_name(ring, identity),
            ring: ring.to_owned(),
            identity: identity.to_owned(),
            duration,
            acquired: None,
        }
    }

    /// The Lease's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The Leases of its namespace.
    pub(crate) fn api(&self) -> &Api<Lease> {
        &self.api
    }

    /// Writes the Lease as held now, listing `plugins`: creates it, renews it, or takes it
    /// back after it expired. Server-side apply: one request, and no resourceVersion to
    /// track, since no one else writes it.
    pub(crate) async fn renew(
        &mut self,
        plugins: &BTreeMap<String, Served>,
    ) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let acquired = *self.acquired.get_or_insert(now);
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some(BTreeMap::from([(RING_LABEL.to_owned(), self.ring.clone())])),
                annotations: Some(BTreeMap::from([(
                    PLUGINS_ANNOTATION.to_owned(),
                    write_plugins(plugins),
                )])),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(
                    i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX),
                ),
                acquire_time: Some(MicroTime(acquired)),
                renew_time: Some(MicroTime(now)),
                ..LeaseSpec::default()
            }),
        };
        let params = PatchParams::apply(FIELD_MANAGER).force();
        self.api
            .patch(&self.name, &params, &Patch::Apply(&lease))
            .await
            .map(drop)
    }

    /// Deletes the Lease, so that the others need not wait for it to expire. Call only once
    /// nothing is delivered any more.
    pub(crate) async fn release(&self) -> Result<(), kube::Error> {
        self.api
            .delete(&self.name, &DeleteParams::default())
            .await
            .map(drop)
    }
}

/// Deletes the ring member's Lease `name` if it is still at `resource_version`: a member
/// dead for long, whose Lease no one renews. Another replica deleting it first, or its holder
/// renewing it meanwhile, is no error.
pub(crate) async fn delete_stale(
    api: &Api<Lease>,
    name: &str,
    resource_version: &str,
) -> Result<(), kube::Error> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: Some(resource_version.to_owned()),
            uid: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => Ok(()),
        Err(error) => Err(error),
    }
}

/// `<ring>-<identity>`.
pub(crate) fn lease_name(ring: &str, identity: &str) -> String {
    format!("{ring}-{identity}")
}

/// A ring member's Lease as the informer holds it. A Lease that is not one (a JSON the API
/// server would not send) counts as a member whose list cannot be read.
pub(crate) fn member_lease(object: &Object) -> MemberLease {
    let name = object.name().to_owned();
    let lease: Lease = match serde_json::from_str(object.json()) {
        Ok(lease) => lease,
        Err(error) => {
            return MemberLease {
                holder: None,
                duration: Duration::ZERO,
                renewed: None,
                plugins: Err(MembershipError::Malformed {
                    lease: name.clone(),
                    reason: error.to_string(),
                }),
                name,
            };
        }
    };
    let spec = lease.spec.unwrap_or_default();
    let plugins = match lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(PLUGINS_ANNOTATION))
    {
        Some(text) => read_plugins(&name, text),
        None => Ok(BTreeMap::new()),
    };
    MemberLease {
        holder: spec.holder_identity,
        duration: Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
        ),
        renewed: spec.renew_time.map(|time| time.0.to_string()),
        plugins,
        name,
    }
}
