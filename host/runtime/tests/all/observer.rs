//! The observer (`RuntimeConfig::observer`): every log record, output line, write, refusal,
//! reconcile result and failed call of a plugin, typed, in the reconcile call it happened
//! in. No tracing subscriber is installed in this test binary, so nothing here can come
//! from the log.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Result, ensure};
use kubeplug_informer::indexer::new_indexer;
use kubeplug_memory::MemoryServer;
use kubeplug_runtime::events::run_events;
use kubeplug_runtime::reconcile::run_reconcile;
use kubeplug_runtime::{
    CallObserver, CallRecord, Grants, Gvk, ObjectRef, Observed, PluginLimits, Runtime,
    RuntimeConfig, Write, WriteVerb,
};
use kubeplug_workqueue::{ItemExponential, Outcome, Queue};

use crate::fixtures::*;

/// Keeps every record.
#[derive(Default)]
struct Records(Mutex<Vec<Observed>>);

impl CallObserver for Records {
    fn observe(&self, observed: Observed) {
        self.0.lock().unwrap().push(observed);
    }
}

impl Records {
    fn all(&self) -> Vec<Observed> {
        self.0.lock().unwrap().clone()
    }

    /// The records made during reconcile calls of `name`, each with its call's number.
    fn of(&self, name: &str) -> Vec<(u64, CallRecord)> {
        self.all()
            .into_iter()
            .filter_map(|o| {
                let call = o.during?;
                (call.target.name == name).then_some((call.number, o.record))
            })
            .collect()
    }

    /// The outcomes of the reconcile calls of `name`.
    fn outcomes(&self, name: &str) -> Vec<Outcome<String>> {
        self.of(name)
            .into_iter()
            .filter_map(|(_, record)| match record {
                CallRecord::Reconciled { outcome } => Some(outcome),
                _ => None,
            })
            .collect()
    }
}

fn observed_runtime(records: &Arc<Records>) -> Runtime {
    Runtime::new(RuntimeConfig {
        observer: Some(records.clone()),
        ..RuntimeConfig::default()
    })
    .expect("engine")
}

fn config_map(name: &str, mode: &str) -> String {
    format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns","labels":{{"mode":"{mode}"}}}}}}"#)
}

fn queue() -> Queue<ObjectRef> {
    // Retries far beyond the test: each key's first call is the one looked at.
    let retry = Duration::from_secs(3600);
    Queue::builder("observed")
        .rate_limiter(ItemExponential::new(retry, retry))
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_and_results_are_recorded_in_the_reconcile_call_that_made_them() -> Result<()> {
    let server = MemoryServer::new();
    let modes = [
        ("ok-0", "ok"),
        ("ok-1", "ok"),
        ("again", "requeue"),
        ("broken", "fail"),
    ];
    for (name, mode) in modes {
        server
            .create(&config_maps(), &config_map(name, mode))
            .unwrap();
    }
    let (informer, receivers) = informer(&server, config_maps(), 1);
    let records = Arc::new(Records::default());
    let plugin = load(
        &observed_runtime(&records),
        "reconciler",
        BTreeMap::from([(gvk(&config_maps()), informer.indexer().clone())]),
        Arc::new(Recorder::default()),
        Grants::default().allow_write(observations(), WriteVerb::Create),
        PluginLimits::default(),
    )
    .await?;
    let reconciler = run_reconcile(plugin, receivers, queue())?;
    until("every key reconciled", Duration::from_secs(60), || {
        modes
            .iter()
            .all(|(name, _)| !records.outcomes(name).is_empty())
    })
    .await?;
    reconciler.queue.shut_down();
    reconciler.workers.join().await;
    informer.shutdown();

    for (name, mode) in modes {
        let made = records.of(name);
        let first = made[0].0;
        let call: Vec<&CallRecord> = made
            .iter()
            .filter(|(number, _)| *number == first)
            .map(|(_, record)| record)
            .collect();
        // Start and end Observations, created for this key, then the result.
        ensure!(call.len() == 3, "{name}: {call:?}");
        for (record, phase) in call[..2].iter().zip(["start", "end"]) {
            let CallRecord::Write {
                write: Write::Create { resource, json, .. },
                result: Ok(()),
            } = record
            else {
                anyhow::bail!("{name}: expected a create, got {record:?}");
            };
            let document: serde_json::Value = serde_json::from_str(json)?;
            ensure!(*resource == observations());
            ensure!(
                document["key"] == format!("ns/{name}"),
                "{name}: {document}"
            );
            ensure!(document["phase"] == phase, "{name}: {document}");
        }
        let CallRecord::Reconciled { outcome } = call[2] else {
            anyhow::bail!("{name}: expected the result last, got {:?}", call[2]);
        };
        match (mode, outcome) {
            ("ok", Outcome::Done) => {}
            ("requeue", Outcome::RequeueAfter(delay)) => {
                ensure!(*delay == Duration::from_millis(150));
            }
            ("fail", Outcome::Error(error)) => {
                ensure!(error.contains("ns/broken is labelled mode=fail"), "{error}");
            }
            _ => anyhow::bail!("{name} ({mode}): {outcome:?}"),
        }
    }
    let numbers: Vec<u64> = modes
        .iter()
        .map(|(name, _)| records.of(name)[0].0)
        .collect();
    let mut distinct = numbers.clone();
    distinct.sort_unstable();
    distinct.dedup();
    ensure!(
        distinct.len() == numbers.len(),
        "calls share a number: {numbers:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_grants_refuse_is_recorded_as_refused() -> Result<()> {
    let server = MemoryServer::new();
    server
        .create(&config_maps(), &config_map("a", "ok"))
        .unwrap();
    let (informer, receivers) = informer(&server, config_maps(), 1);
    let records = Arc::new(Records::default());
    let writer = Arc::new(Recorder::default());
    let plugin = load(
        &observed_runtime(&records),
        "reconciler",
        BTreeMap::from([(gvk(&config_maps()), informer.indexer().clone())]),
        writer.clone(),
        Grants::default(),
        PluginLimits::default(),
    )
    .await?;
    let reconciler = run_reconcile(plugin, receivers, queue())?;
    until("the key reconciled", Duration::from_secs(60), || {
        !records.outcomes("a").is_empty()
    })
    .await?;
    reconciler.queue.shut_down();
    reconciler.workers.join().await;
    informer.shutdown();

    let made: Vec<CallRecord> = records.of("a").into_iter().map(|(_, r)| r).collect();
    ensure!(
        made[0]
            == CallRecord::Refused {
                verb: WriteVerb::Create,
                resource: observations(),
            },
        "{made:?}"
    );
    ensure!(
        matches!(&made[1], CallRecord::Reconciled { outcome: Outcome::Error(e) } if e.contains("no grant to create")),
        "{made:?}"
    );
    ensure!(writer.writes.lock().unwrap().is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_and_output_lines_are_recorded_though_nothing_is_logged() -> Result<()> {
    let server = MemoryServer::new();
    let (informer, receivers) = informer(&server, config_maps(), 1);
    let records = Arc::new(Records::default());
    let settings = serde_json::json!({"name": "sandbox-probe"});
    // It declares an index on Secrets, so it needs a cache of them to load.
    let secrets = Gvk::new("", "v1", "Secret");
    let spec = spec(
        "sandbox-probe",
        &settings.to_string(),
        BTreeMap::from([
            (gvk(&config_maps()), informer.indexer().clone()),
            (secrets.clone(), new_indexer().1),
        ]),
        Arc::new(Recorder::default()),
        Grants::default().allow_read(secrets),
        PluginLimits::default(),
    )?;
    let plugin = Arc::new(observed_runtime(&records).load(spec).await?);
    let reconciler = run_reconcile(plugin, receivers, queue())?;
    for action in ["log-3", "print-2", "stderr-1"] {
        reconciler.queue.add(ObjectRef {
            resource: gvk(&config_maps()),
            namespace: None,
            name: action.to_owned(),
        });
    }
    until("every action taken", Duration::from_secs(60), || {
        ["log-3", "print-2", "stderr-1"]
            .iter()
            .all(|action| !records.outcomes(action).is_empty())
    })
    .await?;
    reconciler.queue.shut_down();
    reconciler.workers.join().await;
    informer.shutdown();

    let logs: Vec<CallRecord> = records.of("log-3").into_iter().map(|(_, r)| r).collect();
    for (n, record) in logs[..3].iter().enumerate() {
        let expected = CallRecord::Log {
            level: tracing::Level::INFO,
            message: format!("log {n} of sandbox-probe"),
            fields: vec![("n".to_owned(), n.to_string())],
        };
        ensure!(*record == expected, "{record:?}");
    }
    let lines = |action: &str| -> Vec<(&'static str, String)> {
        records
            .of(action)
            .into_iter()
            .filter_map(|(_, record)| match record {
                CallRecord::Output { stream, line } => Some((stream, line)),
                _ => None,
            })
            .collect()
    };
    ensure!(
        lines("print-2")
            == [
                ("stdout", "print 0 of sandbox-probe".to_owned()),
                ("stdout", "print 1 of sandbox-probe".to_owned())
            ]
    );
    ensure!(lines("stderr-1") == [("stderr", "stderr 0 of sandbox-probe".to_owned())]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_events_call_is_recorded_outside_any_reconcile() -> Result<()> {
    let server = MemoryServer::new();
    server.create(&pods(), &pod("p", &[], &[])).expect("a pod");
    let (informer, receivers) = informer(&server, pods(), 1);
    let records = Arc::new(Records::default());
    let limits = PluginLimits {
        attempts: 1,
        ..PluginLimits::default()
    };
    let plugin = load(
        &observed_runtime(&records),
        "hostile-panic",
        BTreeMap::from([(gvk(&pods()), informer.indexer().clone())]),
        Arc::new(Recorder::default()),
        Grants::default(),
        limits,
    )
    .await?;
    let driver = run_events(plugin, receivers)?;
    let failure = || {
        records
            .all()
            .into_iter()
            .find(|o| matches!(o.record, CallRecord::Failed { .. }))
    };
    until("a failure recorded", Duration::from_secs(60), || {
        failure().is_some()
    })
    .await?;
    driver.abort();
    informer.shutdown();

    let failed = failure().expect("just seen");
    ensure!(failed.during.is_none() && &*failed.plugin == "hostile-panic");
    let CallRecord::Failed { error } = failed.record else {
        anyhow::bail!("{failed:?}");
    };
    ensure!(error.contains("handle-events trapped"), "{error}");
    // The panic message went to stderr, before the trap.
    let panicked = records.all().into_iter().any(|o| {
        matches!(&o.record, CallRecord::Output { stream: "stderr", line } if line.contains("hostile-panic was given 1 events"))
    });
    ensure!(panicked, "{:?}", records.all());
    Ok(())
}
