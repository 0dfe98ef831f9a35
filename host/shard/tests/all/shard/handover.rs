//! Handovers: targeted cases, and a model of replicas that join, die, freeze, reload and see
//! each other late, in every order proptest finds, checked for overlap after every action.

use std::collections::BTreeMap;
use std::time::Duration;

use kubeplug_shard::{
    Assignment, MAX_NARROWINGS, MemberLease, MembershipError, PluginShard, RingVersion, Served,
    Step, target,
};
use proptest::prelude::*;

const PLUGIN: &str = "audit";

fn lease(member: &str, content: &str, ring: Option<&RingVersion>) -> MemberLease {
    MemberLease {
        name: format!("ring-{member}"),
        holder: Some(member.to_owned()),
        duration: Duration::from_secs(15),
        renewed: None,
        plugins: Ok(BTreeMap::from([(
            PLUGIN.to_owned(),
            Served {
                content: content.to_owned(),
                ring: ring.map(ToString::to_string),
            },
        )])),
    }
}

fn narrow(step: Step) -> (Assignment, RingVersion) {
    match step {
        Step::Narrow { assignment, report } => (assignment, report),
        other => panic!("expected a narrowing, got {other:?}"),
    }
}

fn keys() -> Vec<String> {
    (0..300).map(|i| format!("ns/object-{i}")).collect()
}

#[test]
fn a_joining_member_waits_until_the_others_have_let_go() {
    let ring_ab = target(PLUGIN, &[&lease("a", "c1", None), &lease("b", "c1", None)]);
    let v1 = ring_ab.version().clone();
    let mut a = PluginShard::new("a", PLUGIN);
    let (_, report) = narrow(a.step(&[&lease("a", "c1", None), &lease("b", "c1", None)]));
    a.reported(report);
    let step = a.step(&[&lease("a", "c1", Some(&v1)), &lease("b", "c1", Some(&v1))]);
    let Step::Widen {
        assignment,
        previous,
    } = step
    else {
        panic!("{step:?}")
    };
    assert!(keys().iter().all(|key| !previous.owns(key)));
    let before: Vec<bool> = keys().iter().map(|key| assignment.owns(key)).collect();

    // c joins: a narrows at once to the keys it keeps, reports, and c waits for b.
    let joined = [
        lease("a", "c1", Some(&v1)),
        lease("b", "c1", Some(&v1)),
        lease("c", "c1", None),
    ];
    let view: Vec<&MemberLease> = joined.iter().collect();
    let (narrowed, v2) = narrow(a.step(&view));
    assert_ne!(v1, v2);
    for (key, owned) in keys().iter().zip(&before) {
        assert!(
            !narrowed.owns(key) || *owned,
            "{key} is gained before the handover"
        );
    }
    a.reported(v2.clone());
    let mut c = PluginShard::new("c", PLUGIN);
    let (nothing, _) = narrow(c.step(&view));
    c.reported(v2.clone());
    assert!(keys().iter().all(|key| !nothing.owns(key)));
    let waiting = [
        lease("a", "c1", Some(&v2)),
        lease("b", "c1", Some(&v1)),
        lease("c", "c1", Some(&v2)),
    ];
    let view: Vec<&MemberLease> = waiting.iter().collect();
    assert!(matches!(c.step(&view), Step::Idle));
    assert!(matches!(a.step(&view), Step::Idle));
    let done = [
        lease("a", "c1", Some(&v2)),
        lease("b", "c1", Some(&v2)),
        lease("c", "c1", Some(&v2)),
    ];
    let view: Vec<&MemberLease> = done.iter().collect();
    let Step::Widen { assignment, .. } = c.step(&view) else {
        panic!()
    };
    assert!(keys().iter().any(|key| assignment.owns(key)));
}

#[test]
fn a_member_whose_lease_cannot_be_read_holds_every_handover() {
    let unreadable = MemberLease {
        plugins: Err(MembershipError::Malformed {
            lease: "ring-b".into(),
            reason: "expected a map".into(),
        }),
        ..lease("b", "c1", None)
    };
    let mut a = PluginShard::new("a", PLUGIN);
    let (_, report) = narrow(a.step(&[&lease("a", "c1", None), &unreadable]));
    a.reported(report.clone());
    let me = lease("a", "c1", Some(&report));
    assert!(matches!(a.step(&[&me, &unreadable]), Step::Idle));
    // The ring is a's alone: b lists nothing it can read, so it owns nothing.
    assert_eq!(target(PLUGIN, &[&me, &unreadable]).members(), ["a"]);
}

#[test]
fn during_a_rollout_the_content_most_members_run_owns_the_keys() {
    let view = [
        lease("a", "old", None),
        lease("b", "new", None),
        lease("c", "new", None),
    ];
    let view: Vec<&MemberLease> = view.iter().collect();
    assert_eq!(target(PLUGIN, &view).members(), ["b", "c"]);
    // On a tie every replica picks the same: the greater content hash.
    let tie = [lease("a", "sha256:0a", None), lease("b", "sha256:0b", None)];
    let tie: Vec<&MemberLease> = tie.iter().collect();
    assert_eq!(target(PLUGIN, &tie).members(), ["b"]);
    assert_eq!(
        target(PLUGIN, &[tie[1], tie[0]]).version(),
        target(PLUGIN, &tie).version()
    );
    // A member that does not list the plugin is in none of its rings.
    let other = MemberLease {
        plugins: Ok(BTreeMap::new()),
        ..lease("d", "new", None)
    };
    assert_eq!(target(PLUGIN, &[tie[1], &other]).members(), ["b"]);
}

#[test]
fn a_member_set_that_never_settles_costs_deliveries_not_overlap() {
    let mut a = PluginShard::new("a", PLUGIN);
    let (_, v) = narrow(a.step(&[&lease("a", "c", None)]));
    a.reported(v.clone());
    assert!(matches!(
        a.step(&[&lease("a", "c", Some(&v))]),
        Step::Widen { .. }
    ));
    let me = lease("a", "c", Some(&v));
    let joiners: Vec<MemberLease> = (0..=MAX_NARROWINGS)
        .map(|i| lease(&format!("j{i}"), "c", None))
        .collect();
    let mut last = None;
    for count in 1..=joiners.len() {
        let view: Vec<&MemberLease> = std::iter::once(&me).chain(&joiners[..count]).collect();
        let (assignment, report) = narrow(a.step(&view));
        a.reported(report);
        last = Some(assignment);
    }
    assert!(keys().iter().all(|key| !last.as_ref().unwrap().owns(key)));
}

/// One replica in the model.
#[derive(Debug)]
struct Replica {
    name: String,
    content: &'static str,
    shard: PluginShard,
    /// What its drivers deliver.
    delivering: Assignment,
    /// A narrowing published, its report not yet written.
    pending_report: Option<RingVersion>,
    /// The Leases as it last observed them.
    view: Vec<MemberLease>,
    dead: bool,
    frozen: bool,
}

#[derive(Debug, Clone)]
enum Action {
    /// Observe, step and report in one go: the replica's loop when nothing interleaves.
    Act(usize),
    Observe(usize),
    Step(usize),
    Report(usize),
    Join,
    Kill(usize),
    /// A dead or frozen replica's Lease expires in everyone's eyes.
    Expire(usize),
    Freeze(usize),
    Resume(usize),
    /// The replica's plugin is hot-reloaded to new content.
    Reload(usize),
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        12 => (0..8usize).prop_map(Action::Act),
        6 => (0..8usize).prop_map(Action::Observe),
        6 => (0..8usize).prop_map(Action::Step),
        6 => (0..8usize).prop_map(Action::Report),
        1 => Just(Action::Join),
        1 => (0..8usize).prop_map(Action::Kill),
        2 => (0..8usize).prop_map(Action::Expire),
        1 => (0..8usize).prop_map(Action::Freeze),
        2 => (0..8usize).prop_map(Action::Resume),
        1 => (0..8usize).prop_map(Action::Reload),
    ]
}

/// The replicas and the Leases the API server holds.
struct Model {
    replicas: Vec<Replica>,
    leases: BTreeMap<String, MemberLease>,
}

impl Model {
    fn new(count: usize) -> Self {
        let mut model = Self {
            replicas: Vec::new(),
            leases: BTreeMap::new(),
        };
        for _ in 0..count {
            model.join();
        }
        model.settle();
        model
    }

    fn join(&mut self) {
        let name = format!("r{}", self.replicas.len());
        self.leases.insert(name.clone(), lease(&name, "c1", None));
        self.replicas.push(Replica {
            shard: PluginShard::new(&name, PLUGIN),
            delivering: Assignment::nothing(&name),
            pending_report: None,
            view: Vec::new(),
            dead: false,
            frozen: false,
            content: "c1",
            name,
        });
    }

    /// Whether the replica's deliveries count: alive, and not fenced by its own expired Lease
    /// (a frozen replica whose Lease expired passed its renew deadline first).
    fn delivers(&self, replica: &Replica) -> bool {
        !replica.dead && self.leases.contains_key(&replica.name)
    }

    /// Carries out `action`; a replica index is taken modulo the replicas there are, so that
    /// every action acts on one.
    fn apply(&mut self, action: &Action) {
        let count = self.replicas.len();
        let action = match *action {
            Action::Act(i) => {
                for action in [Action::Observe(i), Action::Step(i), Action::Report(i)] {
                    self.apply(&action);
                }
                return;
            }
            Action::Observe(i) => Action::Observe(i % count),
            Action::Step(i) => Action::Step(i % count),
            Action::Report(i) => Action::Report(i % count),
            Action::Kill(i) => Action::Kill(i % count),
            Action::Expire(i) => Action::Expire(i % count),
            Action::Freeze(i) => Action::Freeze(i % count),
            Action::Resume(i) => Action::Resume(i % count),
            Action::Reload(i) => Action::Reload(i % count),
            Action::Join => Action::Join,
        };
        match action {
            Action::Join => self.join(),
            Action::Observe(i) if i < count && self.acts(i) => {
                self.replicas[i].view = self.leases.values().cloned().collect();
            }
            Action::Step(i) if i < count && self.acts(i) => {
                let replica = &mut self.replicas[i];
                let view: Vec<&MemberLease> = replica.view.iter().collect();
                match replica.shard.step(&view) {
                    Step::Idle => {}
                    Step::Narrow { assignment, report } => {
                        replica.delivering = assignment;
                        replica.pending_report = Some(report);
                    }
                    Step::Widen { assignment, .. } => replica.delivering = assignment,
                }
            }
            Action::Report(i) if i < count && self.acts(i) => {
                let replica = &mut self.replicas[i];
                if let (Some(report), Some(lease)) = (
                    replica.pending_report.take(),
                    self.leases.get_mut(&replica.name),
                ) {
                    *lease = self::lease(&replica.name, replica.content, Some(&report));
                    replica.shard.reported(report);
                }
            }
            Action::Kill(i) if i < count => {
                self.replicas[i].dead = true;
                self.replicas[i].frozen = false;
                self.replicas[i].delivering = Assignment::nothing(&self.replicas[i].name);
            }
            Action::Expire(i) if i < count => {
                let replica = &self.replicas[i];
                if replica.dead || replica.frozen {
                    self.leases.remove(&replica.name);
                }
            }
            Action::Freeze(i) if i < count && !self.replicas[i].dead => {
                self.replicas[i].frozen = true;
            }
            Action::Resume(i) if i < count && self.replicas[i].frozen && !self.replicas[i].dead => {
                let replica = &mut self.replicas[i];
                replica.frozen = false;
                if !self.leases.contains_key(&replica.name) {
                    // It sees its Lease expired: drop everything, rejoin as a new member.
                    replica.delivering = replica.shard.drop_all();
                    replica.pending_report = None;
                    self.leases.insert(
                        replica.name.clone(),
                        lease(&replica.name, replica.content, None),
                    );
                }
            }
            Action::Reload(i) if i < count && self.acts(i) => {
                let replica = &mut self.replicas[i];
                replica.content = "c2";
                if let Some(lease) = self.leases.get_mut(&replica.name) {
                    let ring = lease.plugins.as_ref().unwrap()[PLUGIN].ring.clone();
                    let ring = ring.as_deref().and_then(RingVersion::parse);
                    *lease = self::lease(&replica.name, "c2", ring.as_ref());
                }
            }
            _ => {}
        }
    }

    fn acts(&self, i: usize) -> bool {
        !self.replicas[i].dead && !self.replicas[i].frozen
    }

    fn overlap(&self, keys: &[String]) -> Option<String> {
        for key in keys {
            let owners: Vec<&str> = self
                .replicas
                .iter()
                .filter(|replica| self.delivers(replica) && replica.delivering.owns(key))
                .map(|replica| replica.name.as_str())
                .collect();
            if owners.len() > 1 {
                return Some(format!("{key} is delivered by {owners:?}"));
            }
        }
        None
    }

    /// Everyone resumes, dead Leases expire, and the live replicas observe, step and report
    /// until nothing changes.
    fn settle(&mut self) {
        for i in 0..self.replicas.len() {
            if self.replicas[i].dead {
                self.apply(&Action::Expire(i));
            }
            self.apply(&Action::Resume(i));
        }
        for _ in 0..4 {
            for i in 0..self.replicas.len() {
                self.apply(&Action::Act(i));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn no_key_is_ever_delivered_by_two_replicas_and_every_key_finds_its_owner(
        actions in prop::collection::vec(action(), 1..120),
    ) {
        let keys = keys();
        let mut model = Model::new(3);
        for action in &actions {
            model.apply(action);
            if let Some(overlap) = model.overlap(&keys) {
                return Err(TestCaseError::fail(format!("after {action:?}: {overlap}")));
            }
        }
        model.settle();
        prop_assert_eq!(model.overlap(&keys), None);
        if model.replicas.iter().all(|replica| replica.dead) {
            return Ok(());
        }
        for key in &keys {
            let owners = model
                .replicas
                .iter()
                .filter(|replica| model.delivers(replica) && replica.delivering.owns(key))
                .count();
            prop_assert_eq!(owners, 1, "{} has no owner after settling", key);
        }
    }
}
