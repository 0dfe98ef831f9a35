//! Every event in every state, with names for the serving versions and their deliveries.

use super::*;

type Version = &'static str;
type Delivery = &'static str;
type TestLifecycle = Lifecycle<Version, Delivery>;
type TestEvent = Event<Version, Delivery>;

/// A state's label, the events that reach it, and its syncing candidate's token, if any.
type Reached = (&'static str, Vec<TestEvent>, Option<CancellationToken>);

/// An event's label and a maker of a fresh one.
type Make = (&'static str, fn() -> TestEvent);

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

/// The state after `events` from an unseen identity, with what ended on the way.
fn after(events: Vec<TestEvent>) -> (Option<TestLifecycle>, Vec<String>) {
    let mut state = None;
    let mut ended = Vec::new();
    for event in events {
        let step = Lifecycle::step(state, event);
        state = step.next;
        ended.push(ended_names(step.ended));
    }
    ended.retain(|names| !names.is_empty());
    (state, ended)
}

/// `/plugins`'s state name.
fn name(state: &Option<TestLifecycle>) -> &'static str {
    state.as_ref().map_or("gone", Lifecycle::state_name)
}

/// The serving version and its deliveries, as `"v1 d1"` (`"v1"` standing by, `"-"` none).
fn serving_names(state: &Option<TestLifecycle>) -> String {
    let Some(lifecycle) = state else {
        return "-".to_owned();
    };
    let names: Vec<&str> = [lifecycle.serving(), lifecycle.delivering()]
        .into_iter()
        .flatten()
        .copied()
        .collect();
    match names.is_empty() {
        true => "-".to_owned(),
        false => names.join(" "),
    }
}

/// What ended, as `"v1 d1"` (`""`: nothing).
fn ended_names(ended: Ended<Version, Delivery>) -> String {
    [ended.retired, ended.stopped]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The states worth telling apart, each reached the way the host reaches it, with the
/// syncing candidate's token where there is one.
fn states() -> Vec<Reached> {
    let token = CancellationToken::new;
    let mut states = Vec::new();
    let mut add = |label, events: Vec<TestEvent>, cancel: Option<CancellationToken>| {
        states.push((label, events, cancel));
    };
    let serving = || {
        vec![
            Event::Proposed(hash(1)),
            Event::Installed("v1"),
            Event::Deliver("d1"),
        ]
    };
    let serving_then = |more: Vec<TestEvent>| {
        let mut events = serving();
        events.extend(more);
        events
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
    add("serving", serving(), None);
    add(
        "serving, standing by",
        vec![Event::Proposed(hash(1)), Event::Installed("v1")],
        None,
    );
    add(
        "serving, quarantined",
        serving_then(vec![Event::Health(quarantined())]),
        None,
    );
    add(
        "serving, loading v2",
        serving_then(vec![Event::Proposed(hash(2))]),
        None,
    );
    let t = token();
    add(
        "serving, v2 syncing",
        serving_then(vec![Event::Proposed(hash(2)), Event::Syncing(t.clone())]),
        Some(t),
    );
    add(
        "serving, v2 failed",
        serving_then(vec![
            Event::Proposed(hash(2)),
            Event::Failed(failure("bad v2")),
        ]),
        None,
    );
    states
}

/// What each event leads to from each state: `/plugins`'s name, the serving version and its
/// deliveries, what ended, and whether the syncing candidate's wait was cancelled.
#[test]
fn every_event_in_every_state() {
    type Expect = (&'static str, &'static str, &'static str, bool);
    let events: Vec<Make> = vec![
        ("proposed new", || Event::Proposed(hash(9))),
        ("proposed again", || Event::Proposed(hash(1))),
        ("described", || Event::Described("named".to_owned())),
        ("syncing", || Event::Syncing(CancellationToken::new())),
        ("stalled", || Event::Stalled(failure("stuck"))),
        ("failed", || Event::Failed(failure("broken"))),
        ("installed", || Event::Installed("new")),
        ("swapped", || Event::Swapped("new")),
        ("deliver", || Event::Deliver("d2")),
        ("standby", || Event::Standby),
        ("withdrawn", || Event::Withdrawn),
        ("quarantined", || Event::Health(quarantined())),
        ("running again", || Event::Health(RunState::Running)),
    ];
    let expected: Vec<(&str, [Expect; 13])> = vec![
        (
            "loading",
            [
                ("loading", "-", "", false),
                ("loading", "-", "", false),
                ("loading", "-", "", false),
                ("syncing", "-", "", false),
                ("loading", "-", "", false),
                ("failed", "-", "", false),
                ("standby", "new", "", false),
                ("loading", "-", "new", false),
                ("loading", "-", "d2", false),
                ("loading", "-", "", false),
                ("gone", "-", "", false),
                ("loading", "-", "", false),
                ("loading", "-", "", false),
            ],
        ),
        (
            "syncing",
            [
                ("loading", "-", "", true),
                ("loading", "-", "", true),
                ("syncing", "-", "", false),
                ("syncing", "-", "", true),
                ("failed", "-", "", false),
                ("failed", "-", "", true),
                ("standby", "new", "", true),
                ("syncing", "-", "new", false),
                ("syncing", "-", "d2", false),
                ("syncing", "-", "", false),
                ("gone", "-", "", true),
                ("syncing", "-", "", false),
                ("syncing", "-", "", false),
            ],
        ),
        (
            "syncing late",
            [
                ("loading", "-", "", true),
                ("failed", "-", "", true),
                ("failed", "-", "", false),
                ("failed", "-", "", true),
                ("failed", "-", "", false),
                ("failed", "-", "", true),
                ("standby", "new", "", true),
                ("failed", "-", "new", false),
                ("failed", "-", "d2", false),
                ("failed", "-", "", false),
                ("gone", "-", "", true),
                ("failed", "-", "", false),
                ("failed", "-", "", false),
            ],
        ),
        (
            "failed",
            [
                ("loading", "-", "", false),
                ("failed", "-", "", false),
                ("failed", "-", "", false),
                ("failed", "-", "", false),
                ("failed", "-", "", false),
                ("failed", "-", "", false),
                ("standby", "new", "", false),
                ("failed", "-", "new", false),
                ("failed", "-", "d2", false),
                ("failed", "-", "", false),
                ("gone", "-", "", false),
                ("failed", "-", "", false),
                ("failed", "-", "", false),
            ],
        ),
        (
            "failed, tried again",
            [
                ("loading", "-", "", false),
                ("failed", "-", "", false),
                ("failed", "-", "", false),
                ("failed", "-", "", false),
                ("failed", "-", "", false),
                ("failed", "-", "", false),
                ("standby", "new", "", false),
                ("failed", "-", "new", false),
                ("failed", "-", "d2", false),
                ("failed", "-", "", false),
                ("gone", "-", "", false),
                ("failed", "-", "", false),
                ("failed", "-", "", false),
            ],
        ),
        (
            "serving",
            [
                ("loading", "v1 d1", "", false),
                ("loading", "v1 d1", "", false),
                ("running", "v1 d1", "", false),
                ("syncing", "v1 d1", "", false),
                ("running", "v1 d1", "", false),
                ("running", "v1 d1", "", false),
                ("standby", "new", "v1 d1", false),
                ("running", "new d1", "v1", false),
                ("running", "v1 d2", "d1", false),
                ("standby", "v1", "d1", false),
                ("gone", "-", "v1 d1", false),
                ("quarantined", "v1 d1", "", false),
                ("running", "v1 d1", "", false),
            ],
        ),
        (
            "serving, standing by",
            [
                ("loading", "v1", "", false),
                ("loading", "v1", "", false),
                ("standby", "v1", "", false),
                ("syncing", "v1", "", false),
                ("standby", "v1", "", false),
                ("standby", "v1", "", false),
                ("standby", "new", "v1", false),
                ("standby", "new", "v1", false),
                ("running", "v1 d2", "", false),
                ("standby", "v1", "", false),
                ("gone", "-", "v1", false),
                ("standby", "v1", "", false),
                ("standby", "v1", "", false),
            ],
        ),
        (
            "serving, quarantined",
            [
                ("loading", "v1 d1", "", false),
                ("loading", "v1 d1", "", false),
                ("quarantined", "v1 d1", "", false),
                ("syncing", "v1 d1", "", false),
                ("quarantined", "v1 d1", "", false),
                ("quarantined", "v1 d1", "", false),
                ("standby", "new", "v1 d1", false),
                ("running", "new d1", "v1", false),
                ("quarantined", "v1 d2", "d1", false),
                ("standby", "v1", "d1", false),
                ("gone", "-", "v1 d1", false),
                ("quarantined", "v1 d1", "", false),
                ("running", "v1 d1", "", false),
            ],
        ),
        (
            "serving, loading v2",
            [
                ("loading", "v1 d1", "", false),
                ("loading", "v1 d1", "", false),
                ("loading", "v1 d1", "", false),
                ("syncing", "v1 d1", "", false),
                ("loading", "v1 d1", "", false),
                ("running", "v1 d1", "", false),
                ("standby", "new", "v1 d1", false),
                ("running", "new d1", "v1", false),
                ("loading", "v1 d2", "d1", false),
                ("loading", "v1", "d1", false),
                ("gone", "-", "v1 d1", false),
                ("loading", "v1 d1", "", false),
                ("loading", "v1 d1", "", false),
            ],
        ),
        (
            "serving, v2 syncing",
            [
                ("loading", "v1 d1", "", true),
                ("loading", "v1 d1", "", true),
                ("syncing", "v1 d1", "", false),
                ("syncing", "v1 d1", "", true),
                ("running", "v1 d1", "", false),
                ("running", "v1 d1", "", true),
                ("standby", "new", "v1 d1", true),
                ("running", "new d1", "v1", true),
                ("syncing", "v1 d2", "d1", false),
                ("syncing", "v1", "d1", false),
                ("gone", "-", "v1 d1", true),
                ("syncing", "v1 d1", "", false),
                ("syncing", "v1 d1", "", false),
            ],
        ),
        (
            "serving, v2 failed",
            [
                ("loading", "v1 d1", "", false),
                ("loading", "v1 d1", "", false),
                ("running", "v1 d1", "", false),
                ("running", "v1 d1", "", false),
                ("running", "v1 d1", "", false),
                ("running", "v1 d1", "", false),
                ("standby", "new", "v1 d1", false),
                ("running", "new d1", "v1", false),
                ("running", "v1 d2", "d1", false),
                ("standby", "v1", "d1", false),
                ("gone", "-", "v1 d1", false),
                ("quarantined", "v1 d1", "", false),
                ("running", "v1 d1", "", false),
            ],
        ),
    ];
    assert_eq!(states().len(), expected.len(), "every state has its row");
    for (label, outcomes) in expected {
        let (state, ended, _) = rebuild(label);
        assert!(ended.is_empty(), "{label}: nothing ended getting there");
        assert_eq!(name(&state), label_name(label), "{label}");
        for ((event_label, event), outcome) in events.iter().zip(outcomes) {
            let (state, _, token) = rebuild(label);
            let step = Lifecycle::step(state, event());
            let (expected_name, expected_serving, expected_ended, cancelled) = outcome;
            let case = format!("{label} + {event_label}");
            assert_eq!(name(&step.next), expected_name, "{case}: state");
            assert_eq!(
                serving_names(&step.next),
                expected_serving,
                "{case}: serving"
            );
            assert_eq!(ended_names(step.ended), expected_ended, "{case}: ended");
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
    Option<TestLifecycle>,
    Vec<String>,
    Option<CancellationToken>,
) {
    let (_, events, token) = states()
        .into_iter()
        .find(|(l, ..)| *l == label)
        .expect("a known state");
    let (state, ended) = after(events);
    (state, ended, token)
}

/// `/plugins`'s name for each state of [`states`].
fn label_name(label: &str) -> &'static str {
    match label {
        "loading" => "loading",
        "syncing" => "syncing",
        "syncing late" | "failed" | "failed, tried again" => "failed",
        "serving" | "serving, v2 failed" => "running",
        "serving, standing by" => "standby",
        "serving, quarantined" => "quarantined",
        "serving, loading v2" => "loading",
        "serving, v2 syncing" => "syncing",
        other => panic!("unknown state {other}"),
    }
}

/// A source withdrawing a plugin mid-load: the load's later events find no identity; its
/// wait is cancelled, and its version or deliveries, should they come, end instead of
/// serving.
#[test]
fn a_plugin_withdrawn_mid_load_never_serves() {
    let (state, _) = after(vec![Event::Proposed(hash(1)), Event::Withdrawn]);
    assert!(state.is_none());
    let cancel = CancellationToken::new();
    let step = TestLifecycle::step(None, Event::Syncing(cancel.clone()));
    assert!(step.next.is_none() && cancel.is_cancelled());
    for (event, ends) in [
        (Event::Installed("v1"), "v1"),
        (Event::Swapped("v1"), "v1"),
        (Event::Deliver("d1"), "d1"),
    ] {
        let step = Lifecycle::step(None, event);
        assert!(step.next.is_none());
        assert_eq!(ended_names(step.ended), ends);
    }
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
            Event::Deliver("d1"),
            Event::Proposed(hash(2)),
            Event::Health(quarantined()),
        ]
    };
    let then = |more: Vec<TestEvent>| {
        let mut events = validating();
        events.extend(more);
        events
    };
    let (state, _) = after(validating());
    let state = state.unwrap();
    assert_eq!(state.state_name(), "loading");
    assert_eq!(state.last_error(), Some("trapped"));

    let (state, _) = after(then(vec![Event::Failed(failure("bad v2"))]));
    let state = state.unwrap();
    assert_eq!(state.state_name(), "quarantined");
    assert_eq!(state.serving(), Some(&"v1"));
    assert_eq!(
        state.last_error(),
        Some("trapped"),
        "the serving version's error first"
    );
    assert_eq!(state.failure(), Some(&failure("bad v2")));

    let (state, ended) = after(then(vec![Event::Swapped("v2")]));
    let state = state.unwrap();
    assert_eq!(state.state_name(), "running");
    assert_eq!(state.last_error(), None);
    assert_eq!(
        (state.serving(), state.delivering()),
        (Some(&"v2"), Some(&"d1"))
    );
    assert_eq!(ended, ["v1"], "the old version ends, its deliveries stay");

    let (state, ended) = after(then(vec![Event::Standby]));
    assert_eq!(
        state.unwrap().state_name(),
        "loading",
        "a candidate says more"
    );
    assert_eq!(ended, ["d1"]);
    let (state, _) = after(then(vec![Event::Failed(failure("bad v2")), Event::Standby]));
    assert_eq!(
        state.unwrap().state_name(),
        "standby",
        "a version that does not deliver is standing by, whatever its driver last said"
    );
}
