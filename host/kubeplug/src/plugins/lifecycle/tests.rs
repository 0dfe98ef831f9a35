//! Every event in every state, with a name for the serving version.

use super::*;

type Version = &'static str;

/// A state's label, the events that reach it, and its syncing candidate's token, if any.
type Reached = (&'static str, Vec<Event<Version>>, Option<CancellationToken>);

/// An event's label and a maker of a fresh one.
type Make = (&'static str, fn() -> Event<Version>);

fn hash(byte: u8) -> ContentHash {
    ContentHash([byte; 32])
}

fn quarantined() -> RunState {
    RunState::Quarantined {
        retry_in: std::time::Duration::from_secs(1),
        last_error: "trapped".to_owned(),
    }
}

fn failure(text: &str) -> Failure {
    Failure {
        message: text.to_owned(),
        summary: format!("{text} (summary)"),
    }
}

/// The state after `events` from an unseen identity, with the versions retired on the way.
fn after(events: Vec<Event<Version>>) -> (Option<Lifecycle<Version>>, Vec<Version>) {
    let mut state = None;
    let mut retired = Vec::new();
    for event in events {
        let step = Lifecycle::step(state, event);
        state = step.next;
        retired.extend(step.retired);
    }
    (state, retired)
}

/// `/plugins`'s state name, a serving version delivering.
fn name(state: &Option<Lifecycle<Version>>) -> &'static str {
    state
        .as_ref()
        .map_or("gone", |lifecycle| lifecycle.state_name(|_| true))
}

/// The states worth telling apart, each reached the way the host reaches it, with the
/// syncing candidate's token where there is one.
fn states() -> Vec<Reached> {
    let token = CancellationToken::new;
    let mut states = Vec::new();
    let mut add = |label, events: Vec<Event<Version>>, cancel: Option<CancellationToken>| {
        states.push((label, events, cancel));
    };
    add("loading", vec![Event::Proposed(hash(1))], None);
    let t = token();
    add(
        "syncing",
        vec![Event::Proposed(hash(1)), Event::Syncing(t.clone())],
        Some(t),
    );
    let t = token();
    add(
        "syncing late",
        vec![
            Event::Proposed(hash(1)),
            Event::Syncing(t.clone()),
            Event::Stalled(failure("late")),
        ],
        Some(t),
    );
    add(
        "failed",
        vec![Event::Proposed(hash(1)), Event::Failed(failure("bad"))],
        None,
    );
    add(
        "failed, tried again",
        vec![
            Event::Proposed(hash(1)),
            Event::Failed(failure("bad")),
            Event::Proposed(hash(1)),
        ],
        None,
    );
    add(
        "serving",
        vec![Event::Proposed(hash(1)), Event::Installed("v1")],
        None,
    );
    add(
        "serving, quarantined",
        vec![
            Event::Proposed(hash(1)),
            Event::Installed("v1"),
            Event::Health(quarantined()),
        ],
        None,
    );
    add(
        "serving, loading v2",
        vec![
            Event::Proposed(hash(1)),
            Event::Installed("v1"),
            Event::Proposed(hash(2)),
        ],
        None,
    );
    let t = token();
    add(
        "serving, v2 syncing",
        vec![
            Event::Proposed(hash(1)),
            Event::Installed("v1"),
            Event::Proposed(hash(2)),
            Event::Syncing(t.clone()),
        ],
        Some(t),
    );
    add(
        "serving, v2 failed",
        vec![
            Event::Proposed(hash(1)),
            Event::Installed("v1"),
            Event::Proposed(hash(2)),
            Event::Failed(failure("bad v2")),
        ],
        None,
    );
    states
}

/// What each event leads to from each state: `/plugins`'s name, the serving version, the
/// versions retired, and whether the syncing candidate's wait was cancelled.
#[test]
fn every_event_in_every_state() {
    type Expect = (&'static str, Option<Version>, Vec<Version>, bool);
    let events: Vec<Make> = vec![
        ("proposed new", || Event::Proposed(hash(9))),
        ("proposed again", || Event::Proposed(hash(1))),
        ("described", || Event::Described("named".to_owned())),
        ("syncing", || Event::Syncing(CancellationToken::new())),
        ("stalled", || Event::Stalled(failure("stuck"))),
        ("failed", || Event::Failed(failure("broken"))),
        ("installed", || Event::Installed("new")),
        ("swapped", || Event::Swapped),
        ("withdrawn", || Event::Withdrawn),
        ("quarantined", || Event::Health(quarantined())),
        ("running again", || Event::Health(RunState::Running)),
    ];
    let expected: Vec<(&str, [Expect; 11])> = vec![
        (
            "loading",
            [
                ("loading", None, vec![], false),
                ("loading", None, vec![], false),
                ("loading", None, vec![], false),
                ("syncing", None, vec![], false),
                ("loading", None, vec![], false),
                ("failed", None, vec![], false),
                ("running", Some("new"), vec![], false),
                ("loading", None, vec![], false),
                ("gone", None, vec![], false),
                ("loading", None, vec![], false),
                ("loading", None, vec![], false),
            ],
        ),
        (
            "syncing",
            [
                ("loading", None, vec![], true),
                ("loading", None, vec![], true),
                ("syncing", None, vec![], false),
                ("syncing", None, vec![], true),
                ("failed", None, vec![], false),
                ("failed", None, vec![], true),
                ("running", Some("new"), vec![], true),
                ("syncing", None, vec![], false),
                ("gone", None, vec![], true),
                ("syncing", None, vec![], false),
                ("syncing", None, vec![], false),
            ],
        ),
        (
            "syncing late",
            [
                ("loading", None, vec![], true),
                ("failed", None, vec![], true),
                ("failed", None, vec![], false),
                ("failed", None, vec![], true),
                ("failed", None, vec![], false),
                ("failed", None, vec![], true),
                ("running", Some("new"), vec![], true),
                ("failed", None, vec![], false),
                ("gone", None, vec![], true),
                ("failed", None, vec![], false),
                ("failed", None, vec![], false),
            ],
        ),
        (
            "failed",
            [
                ("loading", None, vec![], false),
                ("failed", None, vec![], false),
                ("failed", None, vec![], false),
                ("failed", None, vec![], false),
                ("failed", None, vec![], false),
                ("failed", None, vec![], false),
                ("running", Some("new"), vec![], false),
                ("failed", None, vec![], false),
                ("gone", None, vec![], false),
                ("failed", None, vec![], false),
                ("failed", None, vec![], false),
            ],
        ),
        (
            "failed, tried again",
            [
                ("loading", None, vec![], false),
                ("failed", None, vec![], false),
                ("failed", None, vec![], false),
                ("failed", None, vec![], false),
                ("failed", None, vec![], false),
                ("failed", None, vec![], false),
                ("running", Some("new"), vec![], false),
                ("failed", None, vec![], false),
                ("gone", None, vec![], false),
                ("failed", None, vec![], false),
                ("failed", None, vec![], false),
            ],
        ),
        (
            "serving",
            [
                ("loading", Some("v1"), vec![], false),
                ("loading", Some("v1"), vec![], false),
                ("running", Some("v1"), vec![], false),
                ("syncing", Some("v1"), vec![], false),
                ("running", Some("v1"), vec![], false),
                ("running", Some("v1"), vec![], false),
                ("running", Some("new"), vec!["v1"], false),
                ("running", Some("v1"), vec![], false),
                ("gone", None, vec!["v1"], false),
                ("quarantined", Some("v1"), vec![], false),
                ("running", Some("v1"), vec![], false),
            ],
        ),
        (
            "serving, quarantined",
            [
                ("loading", Some("v1"), vec![], false),
                ("loading", Some("v1"), vec![], false),
                ("quarantined", Some("v1"), vec![], false),
                ("syncing", Some("v1"), vec![], false),
                ("quarantined", Some("v1"), vec![], false),
                ("quarantined", Some("v1"), vec![], false),
                ("running", Some("new"), vec!["v1"], false),
                ("running", Some("v1"), vec![], false),
                ("gone", None, vec!["v1"], false),
                ("quarantined", Some("v1"), vec![], false),
                ("running", Some("v1"), vec![], false),
            ],
        ),
        (
            "serving, loading v2",
            [
                ("loading", Some("v1"), vec![], false),
                ("loading", Some("v1"), vec![], false),
                ("loading", Some("v1"), vec![], false),
                ("syncing", Some("v1"), vec![], false),
                ("loading", Some("v1"), vec![], false),
                ("running", Some("v1"), vec![], false),
                ("running", Some("new"), vec!["v1"], false),
                ("running", Some("v1"), vec![], false),
                ("gone", None, vec!["v1"], false),
                ("loading", Some("v1"), vec![], false),
                ("loading", Some("v1"), vec![], false),
            ],
        ),
        (
            "serving, v2 syncing",
            [
                ("loading", Some("v1"), vec![], true),
                ("loading", Some("v1"), vec![], true),
                ("syncing", Some("v1"), vec![], false),
                ("syncing", Some("v1"), vec![], true),
                ("running", Some("v1"), vec![], false),
                ("running", Some("v1"), vec![], true),
                ("running", Some("new"), vec!["v1"], true),
                ("running", Some("v1"), vec![], false),
                ("gone", None, vec!["v1"], true),
                ("syncing", Some("v1"), vec![], false),
                ("syncing", Some("v1"), vec![], false),
            ],
        ),
        (
            "serving, v2 failed",
            [
                ("loading", Some("v1"), vec![], false),
                ("loading", Some("v1"), vec![], false),
                ("running", Some("v1"), vec![], false),
                ("running", Some("v1"), vec![], false),
                ("running", Some("v1"), vec![], false),
                ("running", Some("v1"), vec![], false),
                ("running", Some("new"), vec!["v1"], false),
                ("running", Some("v1"), vec![], false),
                ("gone", None, vec!["v1"], false),
                ("quarantined", Some("v1"), vec![], false),
                ("running", Some("v1"), vec![], false),
            ],
        ),
    ];
    assert_eq!(states().len(), expected.len(), "every state has its row");
    for (label, outcomes) in expected {
        let (state, retired, _) = rebuild(label);
        assert!(retired.is_empty(), "{label}: nothing retired getting there");
        assert_eq!(name(&state), label_name(label), "{label}");
        for ((event_label, event), outcome) in events.iter().zip(outcomes) {
            let (state, _, token) = rebuild(label);
            let step = Lifecycle::step(state, event());
            let (expected_name, expected_serving, expected_retired, cancelled) = outcome;
            let case = format!("{label} + {event_label}");
            assert_eq!(name(&step.next), expected_name, "{case}: state");
            assert_eq!(
                step.next.as_ref().and_then(|l| l.serving().copied()),
                expected_serving,
                "{case}: serving"
            );
            assert_eq!(
                step.retired.into_iter().collect::<Vec<_>>(),
                expected_retired,
                "{case}: retired"
            );
            assert_eq!(
                token.is_some_and(|t| t.is_cancelled()),
                cancelled,
                "{case}: the syncing candidate's wait cancelled"
            );
        }
    }
}

/// The state named `label` in [`states`], built again with a token of its own.
fn rebuild(
    label: &str,
) -> (
    Option<Lifecycle<Version>>,
    Vec<Version>,
    Option<CancellationToken>,
) {
    let (_, events, token) = states()
        .into_iter()
        .find(|(l, ..)| *l == label)
        .expect("a known state");
    let (state, retired) = after(events);
    (state, retired, token)
}

/// `/plugins`'s name for each state of [`states`].
fn label_name(label: &str) -> &'static str {
    match label {
        "loading" => "loading",
        "syncing" => "syncing",
        "syncing late" | "failed" | "failed, tried again" => "failed",
        "serving" | "serving, v2 failed" => "running",
        "serving, quarantined" => "quarantined",
        "serving, loading v2" => "loading",
        "serving, v2 syncing" => "syncing",
        other => panic!("unknown state {other}"),
    }
}

/// A source withdrawing a plugin mid-load: the load's later events find no identity; its
/// wait is cancelled and its version, should it install, is retired instead of served.
#[test]
fn a_plugin_withdrawn_mid_load_never_serves() {
    let (state, _) = after(vec![Event::Proposed(hash(1)), Event::Withdrawn]);
    assert!(state.is_none());
    let cancel = CancellationToken::new();
    let step = Lifecycle::<Version>::step(None, Event::Syncing(cancel.clone()));
    assert!(step.next.is_none() && cancel.is_cancelled());
    let step = Lifecycle::step(None, Event::Installed("v1"));
    assert!(step.next.is_none());
    assert_eq!(step.retired, Some("v1"));
}

/// A swap arriving while the first version syncs supersedes it; the failure of an earlier
/// version stays shown until one serves, and `/readyz` counts it failed only while no new
/// content loads.
#[test]
fn failures_stay_until_a_version_serves() {
    let (state, _) = after(vec![
        Event::Proposed(hash(1)),
        Event::Failed(failure("bad")),
        Event::Proposed(hash(2)),
    ]);
    let state = state.unwrap();
    assert_eq!(state.failure(), Some(&failure("bad")));
    assert!(!state.has_failed(), "new content loads");
    let (state, _) = after(vec![
        Event::Proposed(hash(1)),
        Event::Failed(failure("bad")),
        Event::Proposed(hash(1)),
    ]);
    assert!(state.unwrap().has_failed(), "the same content tried again");
    let (state, _) = after(vec![
        Event::Proposed(hash(1)),
        Event::Syncing(CancellationToken::new()),
        Event::Stalled(failure("late")),
    ]);
    assert!(state.unwrap().has_failed(), "its informers are late");
    let (state, _) = after(vec![
        Event::Proposed(hash(1)),
        Event::Failed(failure("bad")),
        Event::Proposed(hash(2)),
        Event::Installed("v2"),
    ]);
    let state = state.unwrap();
    assert_eq!(state.failure(), None);
    assert!(!state.has_failed());
}

#[test]
fn the_described_name_is_kept_for_a_plugin_that_never_served() {
    let (state, _) = after(vec![
        Event::Proposed(hash(1)),
        Event::Described("audit".to_owned()),
        Event::Failed(failure("bad")),
    ]);
    assert_eq!(state.unwrap().described_as(), Some("audit"));
}

/// A quarantine while a swap validates is the serving version's: `/plugins` shows the
/// candidate loading with the quarantine's error, the candidate failing leaves the
/// quarantined version serving, and the candidate swapping in starts afresh.
#[test]
fn a_quarantine_while_a_swap_validates() {
    let validating = || {
        vec![
            Event::Proposed(hash(1)),
            Event::Installed("v1"),
            Event::Proposed(hash(2)),
            Event::Health(quarantined()),
        ]
    };
    let then = |event| {
        let mut events = validating();
        events.push(event);
        events
    };
    let (state, _) = after(validating());
    let state = state.unwrap();
    assert_eq!(state.state_name(|_| true), "loading");
    assert_eq!(state.last_error(), Some("trapped"));

    let (state, _) = after(then(Event::Failed(failure("bad v2"))));
    let state = state.unwrap();
    assert_eq!(state.state_name(|_| true), "quarantined");
    assert_eq!(state.serving(), Some(&"v1"));
    assert_eq!(
        state.last_error(),
        Some("trapped"),
        "the serving version's error first"
    );
    assert_eq!(state.failure(), Some(&failure("bad v2")));

    let (state, _) = after(then(Event::Swapped));
    let state = state.unwrap();
    assert_eq!(state.state_name(|_| true), "running");
    assert_eq!(state.last_error(), None);

    let (state, _) = after(validating());
    let state = state.unwrap();
    assert_eq!(
        state.state_name(|_| false),
        "loading",
        "a candidate says more"
    );
    let (state, _) = after(then(Event::Failed(failure("bad v2"))));
    assert_eq!(
        state.unwrap().state_name(|_| false),
        "standby",
        "a version that does not deliver is standing by, whatever its driver last said"
    );
}
