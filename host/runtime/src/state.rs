//! What a store holds: WASI context, resource table, limits, the call deadline, and the
//! plugin's host context (grants, cache, writer, counters).

use std::collections::BTreeMap;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use kubeplug_policy::names::printable;
use kubeplug_workqueue::TokenBucket;
use tokio::io::AsyncWrite;
use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::grants::Policy;
use crate::gvk::Gvk;
use crate::observer::{CallRecord, CurrentCall, PluginObserver, ReconcileCall};
use crate::plugin::PluginLimits;
use crate::status::{PluginMetrics, PluginStats};
use crate::view::{CacheView, ClusterWriter};
use kubeplug_informer::informer::CacheHandle;

/// Everything host functions of one plugin share, across its instances.
pub(crate) struct HostContext {
    /// The plugin's name, on every log line and error.
    pub(crate) plugin: Arc<str>,
    /// What it may read and write.
    pub(crate) policy: Policy,
    /// The caches' view, asked only what the host knows of types; the caches themselves
    /// are `caches`.
    pub(crate) cache: Arc<dyn CacheView>,
    /// The cache of every type the plugin may read that an informer serves, opened once at
    /// load and held for the version's life.
    pub(crate) caches: BTreeMap<Gvk, CacheHandle>,
    /// The cluster.
    pub(crate) writer: Arc<dyn ClusterWriter>,
    /// Its own metrics.
    pub(crate) metrics: Arc<PluginMetrics>,
    /// Its counters.
    pub(crate) stats: Arc<PluginStats>,
    /// (resource, the plugin's index name) → the informer's index name.
    pub(crate) indexes: BTreeMap<(Gvk, String), String>,
    /// The most projections one `cache` call may ask for (`max_projections`).
    pub(crate) max_projections: usize,
    /// Shared by `log` and captured stdout/stderr.
    pub(crate) log_budget: Arc<Mutex<LogBudget>>,
    /// Its cluster writes' rate, shared by its instances.
    pub(crate) write_budget: TokenBucket,
    /// While true, its writes answer `unavailable` at once and those waiting for the write
    /// rate give up: see [`Plugin::fence_writes`](crate::Plugin::fence_writes).
    pub(crate) writes_fenced: tokio::sync::watch::Sender<bool>,
    /// Who is told what the plugin does; `None` under `run`.
    pub(crate) observer: Option<PluginObserver>,
}

impl HostContext {
    /// The one way a host context is built: for `plugin` with `policy`, reading `cache` and
    /// writing to `writer`, with fresh metrics and counters, full log and write budgets
    /// (`limits.writes`), the projections bound of `limits`, no opened caches, no declared
    /// indexes, writes not fenced and no observer. Callers that share counters, open caches,
    /// declare indexes or observe set those fields over it
    /// (`HostContext { stats, ..HostContext::new(..) }`).
    pub(crate) fn new(
        plugin: Arc<str>,
        policy: Policy,
        cache: Arc<dyn CacheView>,
        writer: Arc<dyn ClusterWriter>,
        limits: &PluginLimits,
    ) -> Self {
        Self {
            plugin,
            policy,
            cache,
            caches: BTreeMap::new(),
            writer,
            metrics: Arc::default(),
            stats: Arc::default(),
            indexes: BTreeMap::new(),
            max_projections: limits.description.projections,
            log_budget: Arc::new(Mutex::new(LogBudget::new())),
            write_budget: write_budget(limits),
            writes_fenced: tokio::sync::watch::Sender::new(false),
            observer: None,
        }
    }

    /// Hands `record` to the observer, if there is one; `during` is asked only then.
    pub(crate) fn observe(
        &self,
        during: impl FnOnce() -> Option<Arc<ReconcileCall>>,
        record: impl FnOnce() -> CallRecord,
    ) {
        if let Some(observer) = &self.observer {
            observer.observe(&self.plugin, during(), record());
        }
    }
}

/// One plugin's log records (`log` calls and stdout/stderr lines together), paced:
/// [`RATE`](Self::RATE) per second, bursts of [`BURST`](Self::BURST). A record over the budget
/// is dropped and counted; the next record that gets through carries the count (`dropped`).
#[derive(Debug)]
pub(crate) struct LogBudget {
    bucket: TokenBucket,
    /// Records dropped since the last one that got through.
    dropped: u64,
}

impl LogBudget {
    /// 100 records per second per plugin: a busy plugin logging a line per event at the
    /// informer's usual rates, while a loop printing as fast as it can cannot flood the
    /// host's log (or its log shipping) for everyone else.
    const RATE: f64 = 100.0;
    /// Bursts of 200: what a plugin prints at start or while handling one full batch.
    const BURST: u32 = 200;

    /// A full budget.
    pub(crate) fn new() -> Self {
        Self {
            bucket: TokenBucket::new(Self::RATE, Self::BURST),
            dropped: 0,
        }
    }

    /// Takes a token: `Some(dropped before this one)` if the record may be logged.
    pub(crate) fn take(&mut self) -> Option<u64> {
        self.take_at(Instant::now().into())
    }

    /// [`take`](Self::take) at `now` (not before the previous call's `now`).
    fn take_at(&mut self, now: tokio::time::Instant) -> Option<u64> {
        if self.bucket.try_take(now) {
            Some(std::mem::take(&mut self.dropped))
        } else {
            self.dropped += 1;
            None
        }
    }
}

/// A full write budget for a plugin with `limits`.
fn write_budget(limits: &PluginLimits) -> TokenBucket {
    let rate = &limits.writes;
    TokenBucket::new(rate.per_second, rate.burst)
}

/// The longest a call may wait in all for its write rate before a write fails with
/// `unavailable`: a plugin that keeps writing faster than its rate is told, rather than kept
/// in one call for ever.
pub(crate) const MAX_WRITE_WAIT: Duration = Duration::from_secs(30);

/// The data of one plugin instance's store.
pub(crate) struct StoreState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limits: MeteredLimits,
    /// When the current call must have returned.
    pub(crate) deadline: Instant,
    /// How long the current call has waited for its write rate: not counted against the
    /// deadline, but bounded ([`MAX_WRITE_WAIT`]).
    pub(crate) write_wait: Duration,
    /// The reconcile call in progress, for the observer.
    pub(crate) current_call: CurrentCall,
    pub(crate) host: Arc<HostContext>,
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl StoreState {
    /// A store for `host`'s plugin: WASI with no preopened directory, an empty environment,
    /// no network, stdout/stderr into tracing; memory, core instances, table elements and
    /// WASI resources capped by `limits`.
    pub(crate) fn new(host: Arc<HostContext>, limits: &PluginLimits) -> Self {
        let current_call = CurrentCall::default();
        let wasi = WasiCtxBuilder::new()
            .stdout(Capture::new(&host, &current_call, "stdout"))
            .stderr(Capture::new(&host, &current_call, "stderr"))
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }))
            .build();
        let store_limits = StoreLimitsBuilder::new()
            .memory_size(limits.max_memory)
            .instances(limits.max_instances)
            .tables(32)
            .table_elements(limits.max_table_elements)
            .memories(8)
            .trap_on_grow_failure(false)
            .build();
        let mut table = ResourceTable::new();
        table.set_max_capacity(limits.max_wasi_resources);
        Self {
            wasi,
            table,
            limits: MeteredLimits {
                limits: store_limits,
                max_memory: limits.max_memory,
                linear_memory: 0,
                refused_memory: false,
            },
            deadline: Instant::now(),
            write_wait: Duration::ZERO,
            current_call,
            host,
        }
    }
}

/// The store's [`StoreLimits`], counting the linear memory they let the instance have.
///
/// A component's core memories are not visible from the host; the limiter is the one place
/// wasmtime reports them, as it asks before creating or growing each.
pub(crate) struct MeteredLimits {
    limits: StoreLimits,
    /// The memory cap, for the message of a trap it caused.
    pub(crate) max_memory: usize,
    /// Whether a memory growth was refused since the last call began: a trap that follows
    /// is most likely the guest's reaction to it.
    pub(crate) refused_memory: bool,
    /// Bytes of linear memory granted, summed over the instance's memories. A granted growth
    /// that then fails to map is still counted (wasmtime does not say by how much it failed).
    pub(crate) linear_memory: usize,
}

impl ResourceLimiter for MeteredLimits {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let granted = self.limits.memory_growing(current, desired, maximum)?;
        if granted {
            self.linear_memory += desired.saturating_sub(current);
        } else {
            self.refused_memory = true;
        }
        Ok(granted)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}

/// Longest line kept from a plugin's stdout or stderr; the rest of the line is dropped.
const MAX_LINE: usize = 4096;

/// A plugin's stdout or stderr: complete lines go to the observer, and to tracing at `info`
/// (stdout) or `warn` (stderr) with the plugin's name, through the plugin's log budget.
/// Writes always succeed, so a chatty plugin is throttled, never blocked or failed.
#[derive(Clone)]
struct Capture {
    host: Arc<HostContext>,
    current_call: CurrentCall,
    stream: &'static str,
    line: Arc<Mutex<Vec<u8>>>,
}

impl Capture {
    fn new(host: &Arc<HostContext>, current_call: &CurrentCall, stream: &'static str) -> Self {
        Self {
            host: host.clone(),
            current_call: current_call.clone(),
            stream,
            line: Arc::default(),
        }
    }

    fn emit(&self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        self.host.observe(
            || self.current_call.get(),
            || CallRecord::Output {
                stream: self.stream,
                line: text.clone().into_owned(),
            },
        );
        let taken = self
            .host
            .log_budget
            .lock()
            .map(|mut b| b.take())
            .unwrap_or(None);
        if let Some(dropped) = taken {
            let plugin = &*self.host.plugin;
            // A control character in a plugin's line must not forge the host's log.
            let text = printable(&text);
            if self.stream == "stderr" {
                tracing::warn!(plugin, stream = self.stream, dropped, "{text}");
            } else {
                tracing::info!(plugin, stream = self.stream, dropped, "{text}");
            }
        }
    }

    fn write(&self, mut buf: &[u8]) {
        let Ok(mut line) = self.line.lock() else {
            return;
        };
        while let Some(end) = buf.iter().position(|&b| b == b'\n') {
            let room = MAX_LINE.saturating_sub(line.len());
            line.extend_from_slice(&buf[..end.min(room)]);
            self.emit(&line);
            line.clear();
            buf = &buf[end + 1..];
        }
        let room = MAX_LINE.saturating_sub(line.len());
        line.extend_from_slice(&buf[..buf.len().min(room)]);
    }
}

impl IsTerminal for Capture {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Capture {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl AsyncWrite for Capture {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.write(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_budget_allows_a_burst_then_its_rate_and_counts_the_rest() {
        let start = tokio::time::Instant::now();
        let mut budget = LogBudget::new();
        let burst = LogBudget::BURST as usize;
        let passed = (0..burst + 50)
            .filter(|_| budget.take_at(start).is_some())
            .count();
        assert_eq!(passed, burst, "a full bucket lets a burst through, no more");
        // 100 per second: 10 ms buys one record, which reports the 50 dropped before it.
        let later = start + Duration::from_millis(10);
        assert_eq!(budget.take_at(later), Some(50));
        assert_eq!(budget.take_at(later), None);
        // A second buys RATE records, and the bucket never holds more than BURST.
        let second = later + Duration::from_secs(1);
        let passed = (0..500)
            .filter(|_| budget.take_at(second).is_some())
            .count();
        assert_eq!(passed, LogBudget::RATE as usize);
        let idle = second + Duration::from_secs(3600);
        let passed = (0..500).filter(|_| budget.take_at(idle).is_some()).count();
        assert_eq!(passed, burst);
    }
}
