//! `kubeplug record`: writes the live events of chosen resources to a file that
//! `kubeplug test` replays (the format is in `replay::events`).
//!
//! It subscribes to each resource through the informer factory, as a plugin would, so the
//! file starts with the initial list (as ADDED) and continues with every change, flushed as
//! it comes, until `--count` events, `--duration`, or Ctrl-C / SIGTERM.

use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::pin::Pin;

use anyhow::{Context as _, anyhow};
use futures::{Stream, StreamExt as _};
use kubeplug_informer::factory::{InformerKey, SharedInformerFactory};
use kubeplug_informer::informer::HandlerOptions;
use kubeplug_informer::listener::{ListenerReceiver, Notification, NotificationBatch};
use kubeplug_informer::reflector::ReflectorConfig;
use kubeplug_runtime::Gvk;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::cli::RecordArgs;
use crate::replay::{Change, Format};
use crate::run::{Backend, open_kube, open_local};
use crate::signals::stop_on_signals;

/// Notifications taken from a listener at once.
const BATCH: usize = 256;

/// Every subscription's batches, merged as they come.
type Batches = futures::stream::SelectAll<Pin<Box<dyn Stream<Item = NotificationBatch> + Send>>>;

/// Records until a stop condition; the file holds every event written before it.
pub(crate) async fn record(args: RecordArgs) -> anyhow::Result<()> {
    let signalled = stop_on_signals();
    let types = args
        .resources
        .iter()
        .map(|text| Gvk::parse(text).map_err(|e| anyhow!("--resource {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let cancel = CancellationToken::new();
    let cluster = match &args.cluster.local {
        Some(dir) => open_local(dir, &cancel)?,
        None => {
            open_kube(
                args.cluster.kubeconfig.clone(),
                args.cluster.context.clone(),
            )
            .await?
        }
    };
    if let Backend::Kube { client, .. } = &cluster.backend {
        client.check().await.context("cannot reach the cluster")?;
    }

    let factory = SharedInformerFactory::new(cluster.provider.clone(), ReflectorConfig::default());
    let mut subscriptions = Vec::new();
    let mut batches = Batches::new();
    for gvk in &types {
        let resource = cluster
            .resolve
            .resolve(gvk)
            .await
            .ok_or_else(|| anyhow!("--resource {gvk}: the cluster does not serve it"))?;
        let key = InformerKey {
            namespace: args.namespace.clone().filter(|_| resource.namespaced),
            ..InformerKey::all(resource)
        };
        let (registration, receiver) = factory
            .subscribe(key, HandlerOptions::default())?
            .into_parts();
        batches.push(Box::pin(futures::stream::unfold(
            receiver,
            |mut receiver: ListenerReceiver| async move {
                receiver
                    .recv_batch(BATCH)
                    .await
                    .map(|batch| (batch, receiver))
            },
        )));
        subscriptions.push(registration);
    }

    let mut recorder = Recorder::create(&args.out)?;
    let deadline = args.duration.map(|duration| Instant::now() + duration);
    // One future for the whole recording, so that no signal is missed between steps.
    let stop = async {
        tokio::select! {
            () = signalled.cancelled() => "signal",
            () = sleep_until(deadline) => "--duration ran out",
        }
    };
    tokio::pin!(stop);
    let mut state = State::Recording;
    let why = loop {
        state = match state {
            State::Recording => {
                recorder
                    .step(&mut batches, stop.as_mut(), args.count)
                    .await?
            }
            State::Stopped(why) => break why,
        };
    };
    info!(
        events = recorder.written,
        file = %args.out.display(),
        "recorded; stopped: {why}"
    );

    cancel.cancel();
    drop(subscriptions);
    factory.shutdown().await;
    if let Backend::Local { watching, .. } = cluster.backend {
        let _ = watching.await;
    }
    Ok(())
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Where the recording is.
enum State {
    /// Writing notifications as they come.
    Recording,
    /// Done, and why.
    Stopped(&'static str),
}

/// The output file and what went into it.
struct Recorder {
    path: PathBuf,
    out: BufWriter<File>,
    format: Format,
    /// Events written so far.
    written: u64,
}

impl Recorder {
    fn create(path: &Path) -> anyhow::Result<Self> {
        let file = File::create(path)
            .with_context(|| format!("cannot create the events file {}", path.display()))?;
        Ok(Self {
            path: path.to_owned(),
            out: BufWriter::new(file),
            format: Format::for_path(path),
            written: 0,
        })
    }

    /// Waits for the next batch (or a reason to stop) and writes it, flushed.
    async fn step(
        &mut self,
        batches: &mut Batches,
        stop: Pin<&mut impl Future<Output = &'static str>>,
        count: Option<u64>,
    ) -> anyhow::Result<State> {
        if count.is_some_and(|count| self.written >= count) {
            return Ok(State::Stopped("--count reached"));
        }
        let batch = tokio::select! {
            biased;
            why = stop => return Ok(State::Stopped(why)),
            batch = batches.next() => batch,
        };
        let Some(batch) = batch else {
            return Ok(State::Stopped("the informers stopped"));
        };
        for notification in batch.iter() {
            if count.is_some_and(|count| self.written >= count) {
                break;
            }
            let change = match notification {
                Notification::Add { .. } => Change::Added,
                // A resync re-delivers what is cached; it is not a change.
                Notification::Update { resync: true, .. } => continue,
                Notification::Update { .. } => Change::Modified,
                Notification::Delete { .. } => Change::Deleted,
            };
            let event = self
                .format
                .render(change, notification.object().json())
                .with_context(|| format!("{} is not JSON", notification.key()))?;
            self.out
                .write_all(event.as_bytes())
                .with_context(|| format!("cannot write {}", self.path.display()))?;
            self.written += 1;
        }
        self.out
            .flush()
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        Ok(State::Recording)
    }
}
