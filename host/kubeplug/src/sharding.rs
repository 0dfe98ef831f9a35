//! `run --sharding`: this replica's side of the ring (ARCHITECTURE.md, "Sharding"). It
//! renews its own Lease, watches the ring's Leases through an informer, and moves each
//! plugin's keys with a [`PluginShard`]: narrowed shares settle before their ring is
//! reported, widened ones replay the keys gained from the cache.

mod fence;
mod lease;

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use kube::Api;
use kubeplug_informer::factory::{InformerKey, SharedInformerFactory};
use kubeplug_informer::informer::HandlerOptions;
use kubeplug_informer::listener::{ListenerReceiver, Notification};
use kubeplug_informer::resource::Resource;
use kubeplug_kube::config::KubeClient;
use kubeplug_leader::ElectionConfig;
use kubeplug_runtime::KeyShare;
use kubeplug_shard::{Assignment, Membership, PluginShard, RING_LABEL, RingVersion, Served, Step};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

pub(crate) use fence::{FencedWriter, LeaseClock};

use crate::cli::ShardingArgs;
use crate::http::Readiness;
use crate::kube_writer::reporting_instance;
use crate::plugins::PluginHost;

/// The most Lease notifications taken at once.
const LEASE_BATCH: usize = 64;

/// Where this replica sits: its ring, name and Lease namespace, and the Lease durations.
#[derive(Debug, Clone)]
pub(crate) struct ShardingSetup {
    pub(crate) ring: String,
    pub(crate) identity: String,
    pub(crate) namespace: String,
    pub(crate) durations: ElectionConfig,
}

impl ShardingSetup {
    /// From the flags; the names are checked, since they make the Lease's name and label.
    pub(crate) fn new(
        args: &ShardingArgs,
        durations: ElectionConfig,
        client: &KubeClient,
    ) -> anyhow::Result<Self> {
        let identity = args
            .sharding_identity
            .clone()
            .unwrap_or_else(reporting_instance);
        let namespace = args
            .sharding_namespace
            .clone()
            .unwrap_or_else(|| client.client().default_namespace().to_owned());
        check_label_value("--sharding-id", &args.sharding_id)?;
        let name = lease::lease_name(&args.sharding_id, &identity);
        kubeplug_policy::names::check_name(&name).with_context(|| {
            format!("--sharding-id and --sharding-identity make the Lease name {name:?}")
        })?;
        Ok(Self {
            ring: args.sharding_id.clone(),
            identity,
            namespace,
            durations,
        })
    }
}

/// A label value: at most 63 characters, alphanumerics with `-`, `_` or `.` inside.
fn check_label_value(flag: &str, value: &str) -> anyhow::Result<()> {
    let inner_ok = value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    let ends_ok = value
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric())
        && value
            .bytes()
            .last()
            .is_some_and(|b| b.is_ascii_alphanumeric());
    if value.len() > 63 || !inner_ok || !ends_ok {
        bail!(
            "{flag} {value:?} is not a label value: at most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit"
        );
    }
    Ok(())
}

/// The sharding series.
#[derive(Clone)]
pub(crate) struct ShardMetrics {
    members: Gauge,
    keys_owned: Family<Vec<(String, String)>, Gauge>,
    handovers: Counter,
    handover_seconds: Histogram,
}

impl ShardMetrics {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            members: Gauge::default(),
            keys_owned: Family::default(),
            handovers: Counter::default(),
            handover_seconds: Histogram::new([0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 40.0, 80.0]),
        };
        registry.register(
            "kubeplug_shard_members",
            "Live members of this replica's ring, itself included.",
            metrics.members.clone(),
        );
        registry.register(
            "kubeplug_shard_keys_owned",
            "Cached keys this replica delivers, per plugin, as of its last handover.",
            metrics.keys_owned.clone(),
        );
        registry.register(
            "kubeplug_shard_handovers",
            "Handovers this replica completed (a plugin's keys widened to a new ring).",
            metrics.handovers.clone(),
        );
        registry.register(
            "kubeplug_shard_handover_seconds",
            "From a plugin's first narrowing to its widening: how long a membership change took to hand over.",
            metrics.handover_seconds.clone(),
        );
        metrics
    }
}

/// The readiness check of a sharded replica: passes while its Lease is valid, with the
/// ring's members and each plugin's share as notes.
pub(crate) const SHARDING_CHECK: &str = "sharding";

/// What a sharded replica reports of itself in `/plugins` and `/readyz?verbose`; written by
/// the coordinator alone.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct ShardReport {
    /// The ring's name.
    pub(crate) ring: String,
    /// This replica's name in it.
    pub(crate) identity: String,
    /// Whether its Lease is valid: it delivers only while it is.
    pub(crate) lease_valid: bool,
    /// The live members it sees.
    pub(crate) members: Vec<String>,
    /// Per plugin.
    pub(crate) plugins: BTreeMap<String, PluginShareReport>,
}

/// One plugin's share on this replica.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct PluginShareReport {
    /// The ring version of its last completed handover.
    pub(crate) ring_version: Option<String>,
    /// That ring's members.
    pub(crate) ring_members: Vec<String>,
    /// Cached keys this replica delivers, as of that handover.
    pub(crate) keys_owned: usize,
    /// A handover is in progress: the replica delivers only keys it keeps.
    pub(crate) handing_over: bool,
}

/// The report the coordinator keeps current.
pub(crate) type ShardStatus = Arc<std::sync::Mutex<ShardReport>>;

/// The running coordinator.
pub(crate) struct Sharding {
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

impl Sharding {
    /// Leaves the ring: call once the plugins have stopped delivering. The Lease is
    /// deleted, so the others hand over at once.
    pub(crate) async fn leave(self) {
        self.cancel.cancel();
        let _ = self.task.await;
    }
}

/// Joins the ring: renews this replica's Lease, watches the ring's, and shares each
/// plugin's keys. The host must be [`sharded`](PluginHost::sharded).
pub(crate) fn join(
    client: &KubeClient,
    factory: &SharedInformerFactory,
    host: Arc<PluginHost>,
    setup: ShardingSetup,
    clock: LeaseClock,
    metrics: ShardMetrics,
    observed: (ShardStatus, Readiness),
) -> anyhow::Result<Sharding> {
    let leases = Resource::new("coordination.k8s.io", "v1", "Lease", "leases", true);
    let key = InformerKey {
        namespace: Some(setup.namespace.clone()),
        labels: format!("{RING_LABEL}={}", setup.ring)
            .parse()
            .with_context(|| format!("--sharding-id {:?}: not a label value", setup.ring))?,
        ..InformerKey::all(leases)
    };
    let (registration, receiver) = factory
        .subscribe(key, HandlerOptions::default())
        .context("cannot watch the ring's Leases")?
        .into_parts();
    let own = lease::OwnLease::new(
        Api::namespaced(client.client().clone(), &setup.namespace),
        &setup.ring,
        &setup.identity,
        setup.durations.lease_duration,
    );
    info!(ring = %setup.ring, identity = %setup.identity, lease = %format!("{}/{}", setup.namespace, own.name()), "sharding");
    let cancel = CancellationToken::new();
    let (status, readiness) = observed;
    {
        let mut report = status.lock().expect("shard status poisoned");
        report.ring = setup.ring.clone();
        report.identity = setup.identity.clone();
    }
    readiness.fail(
        SHARDING_CHECK,
        "this replica's Lease has not been written yet".to_owned(),
    );
    let coordinator = Coordinator {
        status,
        readiness,
        member: setup.identity.clone(),
        setup,
        host,
        own,
        clock,
        metrics,
        membership: Membership::new(),
        shards: BTreeMap::new(),
        served: BTreeMap::new(),
        unconfirmed: BTreeMap::new(),
        narrowing_since: BTreeMap::new(),
        next_renewal: Instant::now(),
        dirty: true,
        versions: BTreeMap::new(),
    };
    let stop = cancel.clone();
    let task = tokio::spawn(async move {
        let _registration = registration;
        coordinator.run(receiver, stop).await;
    });
    Ok(Sharding { cancel, task })
}

/// One replica's coordinator: the only writer of its Lease and of its plugins' shares.
struct Coordinator {
    setup: ShardingSetup,
    member: String,
    host: Arc<PluginHost>,
    own: lease::OwnLease,
    clock: LeaseClock,
    metrics: ShardMetrics,
    membership: Membership,
    shards: BTreeMap<String, PluginShard>,
    /// What this replica's Lease lists.
    served: BTreeMap<String, Served>,
    /// Ring versions written into `served` whose write has not succeeded yet.
    unconfirmed: BTreeMap<String, RingVersion>,
    /// When each plugin's handover in progress began.
    narrowing_since: BTreeMap<String, Instant>,
    next_renewal: Instant,
    /// `served` changed since the last successful write.
    dirty: bool,
    /// The resourceVersion of each ring Lease observed, by name: a stale one is deleted only
    /// if it is still at that version.
    versions: BTreeMap<String, String>,
    status: ShardStatus,
    readiness: Readiness,
}

/// What the coordinator is doing between steps.
enum State {
    /// The Lease is valid: plugins' keys follow the ring.
    Member,
    /// The Lease is not valid (never renewed, or not in time): nothing is delivered, and the
    /// next successful renewal rejoins as a new member.
    Fenced,
}

impl Coordinator {
    async fn run(mut self, mut leases: ListenerReceiver, cancel: CancellationToken) {
        let mut changes = self.host.subscribe_changes();
        let mut state = State::Fenced;
        loop {
            state = self.step(state).await;
            self.report(&state);
            let wake = self.next_wake();
            tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                batch = leases.recv_batch(LEASE_BATCH) => {
                    let Some(batch) = batch else { break };
                    let now = Instant::now().into_std();
                    for notification in batch.iter() {
                        let object = notification.object();
                        match notification {
                            Notification::Delete { .. } => {
                                self.membership.remove(object.name());
                                self.versions.remove(object.name());
                            }
                            _ => {
                                self.versions.insert(object.name().to_owned(), object.resource_version_text().into_owned());
                                self.membership.observe(lease::member_lease(object), now);
                            }
                        }
                    }
                }
                _ = changes.changed() => {}
                () = tokio::time::sleep_until(wake) => {}
            }
        }
        self.leave().await;
    }

    /// One round: fence if the Lease lapsed, follow the plugins served, step every plugin's
    /// shard, and renew the Lease when due or changed.
    async fn step(&mut self, state: State) -> State {
        let state = match (state, self.clock.valid()) {
            (State::Member, false) => {
                warn!(identity = %self.member, "this replica's Lease was not renewed in time: it delivers nothing and rejoins");
                self.drop_all().await;
                State::Fenced
            }
            (state, _) => state,
        };
        self.follow_plugins();
        if matches!(state, State::Member) {
            self.step_plugins().await;
        }
        if self.dirty || Instant::now() >= self.next_renewal {
            self.renew().await;
        }
        if matches!(state, State::Member) {
            self.delete_stale().await;
        }
        match (state, self.clock.valid()) {
            (State::Fenced, true) => {
                info!(identity = %self.member, "this replica's Lease is valid: it takes part in the ring");
                State::Member
            }
            (state, _) => state,
        }
    }

    /// Deletes the Leases of members dead for a lease duration past their expiry, so that
    /// they do not pile up as pods come and go, and a replica joining later need not wait for
    /// them to expire in its eyes. Safe: a member dead in this replica's eyes stopped
    /// delivering at its renew deadline, long before.
    async fn delete_stale(&mut self) {
        let now = Instant::now().into_std();
        let stale: Vec<(String, String)> = self
            .membership
            .stale(now, self.setup.durations.lease_duration)
            .iter()
            .filter(|lease| lease.name != self.own.name())
            .filter_map(|lease| Some((lease.name.clone(), self.versions.get(&lease.name)?.clone())))
            .collect();
        for (name, version) in stale {
            let deleted = tokio::time::timeout(
                self.setup.durations.retry_period,
                lease::delete_stale(self.own.api(), &name, &version),
            )
            .await;
            match deleted {
                Ok(Ok(())) => {
                    info!(lease = %name, "deleted the Lease of a member dead for long");
                    self.membership.remove(&name);
                    self.versions.remove(&name);
                }
                Ok(Err(error)) => {
                    warn!(%error, lease = %name, "cannot delete a dead member's Lease")
                }
                Err(_) => {
                    warn!(lease = %name, "deleting a dead member's Lease did not finish in time")
                }
            }
        }
    }

    /// Publishes the replica's view for `/plugins`, and its readiness.
    fn report(&self, state: &State) {
        let live: Vec<String> = self
            .membership
            .live(Instant::now().into_std())
            .iter()
            .filter_map(|lease| lease.member().map(str::to_owned))
            .collect();
        let mut report = self.status.lock().expect("shard status poisoned");
        report.lease_valid = matches!(state, State::Member);
        report.members = live;
        report
            .plugins
            .retain(|plugin, _| self.shards.contains_key(plugin));
        for (plugin, shard) in &self.shards {
            let entry = report.plugins.entry(plugin.clone()).or_default();
            entry.handing_over = shard.handing_over();
        }
        let notes: Vec<String> = report
            .plugins
            .iter()
            .map(|(plugin, share)| {
                format!(
                    "{plugin}: ring {} of {:?}, {} keys{}",
                    share.ring_version.as_deref().unwrap_or("none"),
                    share.ring_members,
                    share.keys_owned,
                    if share.handing_over {
                        ", handing over"
                    } else {
                        ""
                    }
                )
            })
            .collect();
        let members = format!("ring {} members {:?}", report.ring, report.members);
        drop(report);
        match state {
            State::Member => self
                .readiness
                .ready_with_notes(SHARDING_CHECK, std::iter::once(members).chain(notes).collect()),
            State::Fenced => self.readiness.fail(
                SHARDING_CHECK,
                "this replica's Lease is not valid (not renewed in time, or not yet written): it delivers nothing".to_owned(),
            ),
        }
    }

    /// Delivers nothing, forgets every ring, and lists no ring version.
    async fn drop_all(&mut self) {
        for (plugin, shard) in &mut self.shards {
            shard.drop_all();
            // The shares already deliver nothing: they check the Lease's validity.
            drop(self.host.share(plugin, nothing()).await);
        }
        for served in self.served.values_mut() {
            served.ring = None;
        }
        self.unconfirmed.clear();
        self.narrowing_since.clear();
        self.dirty = true;
    }

    /// Lists the plugins the host serves now, with their content; a plugin gone is dropped
    /// (the host stopped its deliveries when it unloaded it).
    fn follow_plugins(&mut self) {
        let now_served = self.host.served();
        let before = self.served.len();
        self.served
            .retain(|plugin, _| now_served.contains_key(plugin));
        self.shards
            .retain(|plugin, _| now_served.contains_key(plugin));
        self.unconfirmed
            .retain(|plugin, _| now_served.contains_key(plugin));
        self.dirty |= self.served.len() != before;
        for (plugin, content) in now_served {
            match self.served.get_mut(&plugin) {
                Some(served) if served.content == content => {}
                Some(served) => {
                    served.content = content;
                    self.dirty = true;
                }
                None => {
                    self.shards
                        .insert(plugin.clone(), PluginShard::new(&self.member, &plugin));
                    self.served.insert(
                        plugin,
                        Served {
                            content,
                            ring: None,
                        },
                    );
                    self.dirty = true;
                }
            }
        }
    }

    /// Steps every plugin's shard against the live members.
    async fn step_plugins(&mut self) {
        let now = Instant::now();
        let live = self.membership.live(now.into_std());
        self.metrics.members.set(live.len() as i64);
        let mut steps = Vec::new();
        for (plugin, shard) in &mut self.shards {
            match shard.step(&live) {
                Step::Idle => {}
                step => steps.push((plugin.clone(), step)),
            }
        }
        for (plugin, step) in steps {
            match step {
                Step::Idle => {}
                Step::Narrow { assignment, report } => {
                    self.narrowing_since.entry(plugin.clone()).or_insert(now);
                    let settled = self.host.share(&plugin, self.key_share(assignment)).await;
                    // Calls end within their deadline, which the margin bounds.
                    if tokio::time::timeout(self.setup.durations.margin(), settled)
                        .await
                        .is_err()
                    {
                        warn!(
                            plugin,
                            "a call under the previous share is still in flight; the ring is reported later"
                        );
                        continue;
                    }
                    debug!(plugin, ring = %report, "narrowed");
                    if let Some(served) = self.served.get_mut(&plugin) {
                        served.ring = Some(report.to_string());
                    }
                    self.unconfirmed.insert(plugin, report);
                    self.dirty = true;
                }
                Step::Widen {
                    assignment,
                    previous,
                } => self.widen(&plugin, assignment, &previous).await,
            }
        }
    }

    async fn widen(&mut self, plugin: &str, assignment: Assignment, previous: &Assignment) {
        let members = assignment
            .ring()
            .map(|ring| ring.members().to_vec())
            .unwrap_or_default();
        let owned = assignment.clone();
        drop(self.host.share(plugin, self.key_share(assignment)).await);
        let replayed = self
            .host
            .replay(plugin, &|key| owned.owns(key) && !previous.owns(key));
        let keys = self.host.count_keys(plugin, &|key| owned.owns(key));
        if let Some(share) = self
            .status
            .lock()
            .expect("shard status poisoned")
            .plugins
            .get_mut(plugin)
        {
            share.ring_version = owned.ring().map(|ring| ring.version().to_string());
            share.ring_members = members.clone();
            share.keys_owned = keys;
        }
        self.metrics
            .keys_owned
            .get_or_create(&vec![("plugin".to_owned(), plugin.to_owned())])
            .set(keys as i64);
        self.metrics.handovers.inc();
        if let Some(since) = self.narrowing_since.remove(plugin) {
            self.metrics
                .handover_seconds
                .observe(since.elapsed().as_secs_f64());
        }
        info!(
            plugin,
            ring = %owned.ring().map(|r| r.version().to_string()).unwrap_or_default(),
            ?members,
            keys,
            replayed,
            "handover done: delivering this replica's share"
        );
    }

    fn key_share(&self, assignment: Assignment) -> KeyShare {
        lease_bound(assignment, self.clock.clone())
    }

    /// Writes the Lease, bounded by what is left of the renew deadline (the whole deadline
    /// while fenced); confirms the ring versions it carried.
    async fn renew(&mut self) {
        let sent = Instant::now();
        let bound = match self.clock.valid_at(sent) {
            true => self.clock.until() - sent,
            false => self.setup.durations.renew_deadline,
        };
        let written: BTreeMap<String, RingVersion> = std::mem::take(&mut self.unconfirmed);
        let result = tokio::time::timeout(bound, self.own.renew(&self.served)).await;
        self.next_renewal = Instant::now() + self.setup.durations.retry_period;
        match result {
            Ok(Ok(())) => {
                self.clock
                    .renewed(sent, self.setup.durations.renew_deadline);
                self.dirty = false;
                for (plugin, version) in written {
                    if let Some(shard) = self.shards.get_mut(&plugin) {
                        shard.reported(version);
                    }
                }
            }
            Ok(Err(error)) => {
                warn!(%error, lease = self.own.name(), "cannot renew this replica's Lease");
                self.unconfirmed = written;
            }
            Err(_) => {
                warn!(
                    lease = self.own.name(),
                    "renewing this replica's Lease did not finish in time"
                );
                self.unconfirmed = written;
            }
        }
    }

    /// The next moment something is due without a notification: a renewal, a member's
    /// expiry, this replica's own.
    fn next_wake(&self) -> Instant {
        let now = Instant::now();
        let mut wake = self.next_renewal;
        if let Some(expiry) = self.membership.next_expiry(now.into_std()) {
            wake = wake.min(Instant::from_std(expiry));
        }
        if self.clock.valid_at(now) {
            wake = wake.min(self.clock.until());
        }
        wake
    }

    /// Stops delivering, then deletes the Lease.
    async fn leave(&mut self) {
        self.clock.expire();
        for plugin in self.shards.keys() {
            let settled = self.host.share(plugin, nothing()).await;
            let _ = tokio::time::timeout(self.setup.durations.margin(), settled).await;
        }
        match self.own.release().await {
            Ok(()) => info!(lease = self.own.name(), "left the ring: Lease deleted"),
            Err(error) => {
                warn!(%error, lease = self.own.name(), "cannot delete this replica's Lease; it expires on its own");
            }
        }
    }
}

/// A share of `assignment`'s keys that lapses with the Lease: a replica resumed after a
/// freeze delivers nothing of what it held, whichever of its tasks runs first.
fn lease_bound(assignment: Assignment, clock: LeaseClock) -> KeyShare {
    KeyShare::only(move |key| clock.valid() && assignment.owns(key))
}

/// The share of no key.
fn nothing() -> KeyShare {
    KeyShare::only(|_| false)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_share_delivers_nothing_once_the_lease_lapses() {
        let mut shard = PluginShard::new("a", "audit");
        let lease = kubeplug_shard::MemberLease {
            name: "kubeplug-a".into(),
            holder: Some("a".into()),
            duration: Duration::from_secs(15),
            renewed: None,
            plugins: Ok(BTreeMap::from([(
                "audit".to_owned(),
                Served {
                    content: "c".into(),
                    ring: None,
                },
            )])),
        };
        let Step::Narrow { report, .. } = shard.step(&[&lease]) else {
            panic!("a first step narrows")
        };
        shard.reported(report);
        let Step::Widen { assignment, .. } = shard.step(&[&lease]) else {
            panic!("a lone member widens at once")
        };
        let clock = LeaseClock::new();
        clock.renewed(Instant::now(), Duration::from_secs(10));
        let share = lease_bound(assignment, clock);
        assert!(share.owns("ns/any"));
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(!share.owns("ns/any"), "the Lease lapsed");
    }

    #[test]
    fn ring_names_are_label_values() {
        assert!(check_label_value("--sharding-id", "kubeplug").is_ok());
        let error = check_label_value("--sharding-id", "-bad").unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("--sharding-id \"-bad\" is not a label value")
        );
        assert!(check_label_value("--sharding-id", &"a".repeat(64)).is_err());
    }

    #[test]
    fn a_lease_of_the_ring_reads_back_as_a_member() {
        let json = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"kubeplug-a","namespace":"ns","resourceVersion":"5","annotations":{"shard.kubeplug.io/v1-plugins":"{\"audit\":{\"content\":\"ab\"}}"}},"spec":{"holderIdentity":"a","leaseDurationSeconds":15,"renewTime":"2026-12-03T18:00:00.000000Z"}}"#;
        let resource = Resource::new("coordination.k8s.io", "v1", "Lease", "leases", true);
        let object = kubeplug_informer::object::ObjectDecoder::new(resource)
            .decode(json.as_bytes())
            .unwrap();
        let member = lease::member_lease(&object);
        assert_eq!(member.member(), Some("a"));
        assert_eq!(member.duration, Duration::from_secs(15));
        assert_eq!(member.plugins.unwrap()["audit"].content, "ab");
    }
}
