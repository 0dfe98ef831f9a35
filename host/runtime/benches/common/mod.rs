//! What the end-to-end benches share (`pipeline_wasm.rs`, `fan_out.rs`): `pipeline.rs`'s
//! generated 5–6 KB Pods, listed in pages, then MODIFIED events cycling over them, emitted
//! in phases the bench sends, flat out or paced and stamped with the time of emission.

use std::io::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::FutureExt;
use kubeplug_bench_support::pod_json;
use kubeplug_informer::resource::Resource;
use kubeplug_informer::source::{
    ListPage, ListRequest, ListerWatcher, SourceError, WatchEvent, WatchRequest, WatchStream,
};
use kubeplug_runtime::Plugin;
use tokio::sync::mpsc;

/// The label the source stamps paced updates with: Unix nanoseconds, zero-padded.
pub(crate) const STAMP_LABEL: &str = "bench-written-at";
const STAMP_DIGITS: usize = 19;

pub(crate) fn pod_resource() -> Resource {
    Resource::new("", "v1", "Pod", "pods", true)
}

/// Fails, naming `plugin` and its last error, once any of its calls failed: the figures of a
/// failing plugin would time its error path.
pub(crate) fn ensure_no_failed_call(plugin: &Plugin) -> anyhow::Result<()> {
    let status = plugin.status();
    anyhow::ensure!(
        status.calls_failed == 0,
        "{} failed a call: {:?}",
        plugin.name(),
        status.last_error
    );
    Ok(())
}

/// The Pods the source replays, each with a zero stamp, and where each one's digits are.
pub(crate) struct Pods {
    /// The Pods as the source lists them (stamp zero).
    pub(crate) json: Vec<Bytes>,
    stamp_at: Vec<usize>,
}

impl Pods {
    /// Pods `0..count` of [`pod_json`], each with the stamp label.
    pub(crate) fn generate(count: usize) -> Self {
        let zeros = "0".repeat(STAMP_DIGITS);
        let (json, stamp_at) = (0..count)
            .map(|i| {
                let pod = pod_json(i).replacen(
                    r#""labels":{"#,
                    &format!(r#""labels":{{"{STAMP_LABEL}":"{zeros}","#),
                    1,
                );
                let at = pod.find(STAMP_LABEL).expect("stamped") + STAMP_LABEL.len() + 3;
                (Bytes::from(pod), at)
            })
            .unzip();
        Self { json, stamp_at }
    }

    /// Pod `i` stamped with the time now.
    fn stamped(&self, i: usize) -> Bytes {
        let mut json = self.json[i].to_vec();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos();
        let at = self.stamp_at[i];
        write!(
            &mut json[at..at + STAMP_DIGITS],
            "{nanos:0width$}",
            width = STAMP_DIGITS
        )
        .expect("nanoseconds fit 19 digits");
        Bytes::from(json)
    }
}

/// A run of updates the source emits when told to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Phase {
    /// MODIFIED events to emit.
    pub(crate) updates: usize,
    /// Updates per second, each stamped; `None`: as fast as possible, unstamped.
    pub(crate) paced: Option<f64>,
}

/// Lists the Pods in pages; its first watch emits the phases sent to it, MODIFIED events
/// cycling over the Pods, and stays open between phases (later watches stay silent).
pub(crate) struct Replay {
    pods: Arc<Pods>,
    phases: Mutex<Option<mpsc::UnboundedReceiver<Phase>>>,
    watches: AtomicUsize,
}

impl Replay {
    /// The source of `pods`, and the sender its watch takes phases from.
    pub(crate) fn new(pods: Arc<Pods>) -> (Self, mpsc::UnboundedSender<Phase>) {
        let (phases, feed) = mpsc::unbounded_channel();
        let replay = Self {
            pods,
            phases: Mutex::new(Some(feed)),
            watches: AtomicUsize::new(0),
        };
        (replay, phases)
    }

    /// Watches opened so far.
    pub(crate) fn watches(&self) -> usize {
        self.watches.load(Ordering::Relaxed)
    }
}

/// Where the watch stream is.
struct Feed {
    pods: Arc<Pods>,
    phases: mpsc::UnboundedReceiver<Phase>,
    current: Option<(Phase, Instant, usize)>,
    next_pod: usize,
}

impl Feed {
    /// The next update; `None` once the phase sender is gone.
    async fn next(&mut self) -> Option<WatchEvent> {
        loop {
            if let Some((phase, started, sent)) = &mut self.current
                && *sent < phase.updates
            {
                let k = *sent;
                *sent += 1;
                let i = self.next_pod % self.pods.json.len();
                self.next_pod += 1;
                let json = match phase.paced {
                    None => {
                        // As a network read would now and then.
                        if k % 64 == 63 {
                            tokio::task::yield_now().await;
                        }
                        self.pods.json[i].clone()
                    }
                    Some(rate) => {
                        wait_until(*started + Duration::from_secs_f64(k as f64 / rate)).await;
                        self.pods.stamped(i)
                    }
                };
                return Some(WatchEvent::Modified(json));
            }
            let phase = self.phases.recv().await?;
            self.current = Some((phase, Instant::now(), 0));
        }
    }
}

/// Waits until `due`, evenly: tokio's timer ticks in milliseconds, so an interval of a few
/// microseconds would fire in bursts of hundreds, and the latency would be the bursts'.
/// Sleeps through what the timer can time, then yields until `due` (the core is otherwise
/// idle then).
async fn wait_until(due: Instant) {
    loop {
        let now = Instant::now();
        if now >= due {
            return;
        }
        if due - now > Duration::from_millis(2) {
            tokio::time::sleep(due - now - Duration::from_millis(1)).await;
        } else {
            tokio::task::yield_now().await;
        }
    }
}

impl ListerWatcher for Replay {
    fn list(
        &self,
        request: ListRequest,
    ) -> futures::future::BoxFuture<'_, Result<ListPage, SourceError>> {
        let start: usize = request
            .continue_token
            .map_or(0, |t| t.parse().expect("our token"));
        let all = &self.pods.json;
        let end = (start + request.limit.unwrap_or(u32::MAX) as usize).min(all.len());
        let page = ListPage {
            items: all[start..end].to_vec(),
            resource_version: "1".into(),
            continue_token: (end < all.len()).then(|| end.to_string()),
        };
        async move { Ok(page) }.boxed()
    }

    fn watch(
        &self,
        _: WatchRequest,
    ) -> futures::future::BoxFuture<'_, Result<WatchStream, SourceError>> {
        self.watches.fetch_add(1, Ordering::Relaxed);
        let phases = self.phases.lock().expect("not poisoned").take();
        let stream: WatchStream = match phases {
            Some(phases) => {
                let feed = Feed {
                    pods: self.pods.clone(),
                    phases,
                    current: None,
                    next_pod: 0,
                };
                Box::pin(futures::stream::unfold(feed, |mut feed| async move {
                    let event = feed.next().await?;
                    Some((Ok(event), feed))
                }))
            }
            None => Box::pin(futures::stream::pending()),
        };
        async move { Ok(stream) }.boxed()
    }
}
