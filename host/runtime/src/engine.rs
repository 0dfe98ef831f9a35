//! The shared wasmtime engine: Cranelift, epoch interruption driven by a ticker thread, the
//! instance allocator, and the compiled-artefact cache.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::observer::CallObserver;
use crate::state::StoreState;

/// How instances get their memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allocator {
    /// mmap per instance at instantiation (wasmtime's default). Chosen by default: see
    /// `RuntimeConfig::default`.
    OnDemand,
    /// Pre-reserved slots for at most this many live instances.
    Pooling {
        /// Instance slots reserved up front.
        instances: u32,
    },
}

/// Engine-wide settings.
#[derive(Clone)]
pub struct RuntimeConfig {
    /// Host-private directory for compiled artefacts; `None` disables the cache. Never point
    /// it at the plugin directory: artefacts are trusted native code.
    pub artifact_cache: Option<PathBuf>,
    /// Epoch tick; call deadlines are checked at this granularity.
    pub epoch_tick: Duration,
    /// The instance allocator.
    pub allocator: Allocator,
    /// Largest linear memory an instance may reach (also the pooling slot size).
    pub max_memory: usize,
    /// Told what every plugin of this runtime does (see [`observer`](crate::observer));
    /// `None`, the default, builds no record.
    pub observer: Option<Arc<dyn CallObserver>>,
}

impl std::fmt::Debug for RuntimeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeConfig")
            .field("artifact_cache", &self.artifact_cache)
            .field("epoch_tick", &self.epoch_tick)
            .field("allocator", &self.allocator)
            .field("max_memory", &self.max_memory)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl Default for RuntimeConfig {
    /// On-demand allocation. Measured with `benches/crossing.rs` (label-reader, 100 live
    /// instances, this 2-core machine under load): instantiate + init 50–150 µs on-demand vs
    /// 45–60 µs pooling, 28 vs 32 KiB RSS per instance, and no measurable difference in the
    /// per-event cost of a call. Instances are few and long-lived (one per plugin in events
    /// mode, one per worker in reconcile mode) and re-created only after a fault, so pooling's
    /// faster instantiation buys little, while its slots must be sized and reserved up front
    /// (capping the plugin count and the memory cap per plugin).
    fn default() -> Self {
        Self {
            artifact_cache: None,
            epoch_tick: Duration::from_millis(10),
            allocator: Allocator::OnDemand,
            max_memory: 64 << 20,
            observer: None,
        }
    }
}

/// Why the engine could not be built or a plugin compiled.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// wasmtime refused the configuration.
    #[error("configuring the wasmtime engine")]
    ConfigFailed(#[source] wasmtime::Error),
    /// Linking WASI or the kubeplug interfaces failed (a host bug).
    #[error("linking the host's {interfaces} interfaces")]
    LinkFailed {
        /// `wasi` or `kubeplug:plugin`.
        interfaces: &'static str,
        /// wasmtime's error.
        #[source]
        source: wasmtime::Error,
    },
    /// The artefact cache directory could not be created.
    #[error("creating the artefact cache {}", path.display())]
    CacheDirFailed {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The epoch ticker thread could not be started.
    #[error("starting the epoch ticker thread")]
    TickerFailed(#[source] std::io::Error),
    /// The bytes are not a component this engine loads (empty, not WebAssembly, a core
    /// module, another binary version), found before wasmtime parses them.
    #[error("{reason}")]
    NotAComponent {
        /// What the file is instead, and what to do about it.
        reason: String,
    },
    /// wasmtime could not compile the component.
    #[error("compiling the component")]
    CompileFailed(#[source] wasmtime::Error),
}

/// Stops the ticker thread when the last engine handle goes.
#[derive(Debug)]
struct Ticker {
    stop: Arc<AtomicBool>,
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The engine, linker and artefact cache every plugin shares. Cheap to clone.
///
/// Contract: compiled code is only ever read back from `artifact_cache`, a directory this
/// host writes, under a name made of the SHA-256 of the component's bytes and the engine's
/// compatibility hash; a file that fails to load is recompiled and replaced.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) engine: Engine,
    pub(crate) linker: Arc<Linker<StoreState>>,
    pub(crate) config: RuntimeConfig,
    /// The artefact cache in use: the configured one, unless it was not private.
    artefacts: Option<PathBuf>,
    engine_hash: String,
    _ticker: Arc<Ticker>,
    pub(crate) live: Arc<LiveCounts>,
}

/// How many plugins and instances of this runtime are alive: what a reload must give back.
#[derive(Debug, Default)]
pub(crate) struct LiveCounts {
    plugins: AtomicUsize,
    instances: AtomicUsize,
}

/// Plugins and instances alive at one instant; see [`Runtime::live`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Live {
    /// Loaded [`Plugin`](crate::Plugin)s not yet dropped.
    pub plugins: usize,
    /// [`PluginInstance`](crate::PluginInstance)s (each with its own store) not yet dropped,
    /// including the short-lived ones made at load.
    pub instances: usize,
}

/// Counts one live plugin or instance until dropped.
pub(crate) struct LiveToken {
    counts: Arc<LiveCounts>,
    instance: bool,
}

impl LiveToken {
    pub(crate) fn plugin(counts: &Arc<LiveCounts>) -> Self {
        counts.plugins.fetch_add(1, Ordering::Relaxed);
        Self {
            counts: counts.clone(),
            instance: false,
        }
    }

    pub(crate) fn instance(counts: &Arc<LiveCounts>) -> Self {
        counts.instances.fetch_add(1, Ordering::Relaxed);
        Self {
            counts: counts.clone(),
            instance: true,
        }
    }
}

impl Drop for LiveToken {
    fn drop(&mut self) {
        let counter = if self.instance {
            &self.counts.instances
        } else {
            &self.counts.plugins
        };
        counter.fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("config", &self.config)
            .finish()
    }
}

/// Where a compiled component came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompileSource {
    /// Compiled now (cold).
    Compiled,
    /// Loaded from the artefact cache.
    Cached,
}

impl Runtime {
    /// Builds the engine and starts its epoch ticker.
    pub fn new(config: RuntimeConfig) -> Result<Self, EngineError> {
        let mut wasm = Config::new();
        wasm.strategy(wasmtime::Strategy::Cranelift)
            .wasm_component_model(true)
            .epoch_interruption(true)
            .memory_reservation(config.max_memory as u64)
            .memory_guard_size(64 << 10);
        if let Allocator::Pooling { instances } = config.allocator {
            let mut pool = PoolingAllocationConfig::default();
            pool.total_component_instances(instances)
                .total_core_instances(instances * 4)
                .total_memories(instances * 2)
                .total_tables(instances * 4)
                .total_stacks(instances)
                .max_memory_size(config.max_memory);
            wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        }
        let engine = Engine::new(&wasm).map_err(EngineError::ConfigFailed)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|source| {
            EngineError::LinkFailed {
                interfaces: "wasi",
                source,
            }
        })?;
        crate::bindings::Plugin::add_to_linker::<_, wasmtime::component::HasSelf<StoreState>>(
            &mut linker,
            |state| state,
        )
        .map_err(|source| EngineError::LinkFailed {
            interfaces: "kubeplug:plugin",
            source,
        })?;
        let artefacts = match &config.artifact_cache {
            Some(dir) => private_cache_dir(dir)
                .map_err(|source| EngineError::CacheDirFailed {
                    path: dir.clone(),
                    source,
                })?
                .then(|| dir.clone()),
            None => None,
        };
        let mut hasher = std::hash::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_hash = format!("{:016x}", hasher.finish());
        let stop = Arc::new(AtomicBool::new(false));
        let ticking = (engine.weak(), stop.clone(), config.epoch_tick);
        std::thread::Builder::new()
            .name("kubeplug-epoch".into())
            .spawn(move || {
                let (weak, stop, tick) = ticking;
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    match weak.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })
            .map_err(EngineError::TickerFailed)?;
        Ok(Self {
            engine,
            linker: Arc::new(linker),
            config,
            artefacts,
            engine_hash,
            _ticker: Arc::new(Ticker { stop }),
            live: Arc::default(),
        })
    }

    /// Plugins and instances alive now.
    pub fn live(&self) -> Live {
        Live {
            plugins: self.live.plugins.load(Ordering::Relaxed),
            instances: self.live.instances.load(Ordering::Relaxed),
        }
    }

    /// The settings this runtime was built with.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// Compiles `bytes`, or loads the artefact cached for exactly these bytes and this
    /// engine. Blocking and CPU-heavy: call it off the async threads.
    pub fn compile(&self, bytes: &[u8]) -> Result<(Component, CompileSource), EngineError> {
        check_component_header(bytes)?;
        let Some(dir) = &self.artefacts else {
            return Component::new(&self.engine, bytes)
                .map(|c| (c, CompileSource::Compiled))
                .map_err(EngineError::CompileFailed);
        };
        let digest = Sha256::digest(bytes);
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        let file = dir.join(format!("{hex}-{}.cwasm", self.engine_hash));
        if let Ok(artefact) = std::fs::read(&file) {
            // SAFETY: `file` lives in the host-private cache directory, which only this
            // function writes, under a name binding it to these exact component bytes and
            // this engine's compatibility hash; wasmtime additionally checks its header.
            #[allow(unsafe_code)] // the one place compiled code is read back; see above
            let loaded = unsafe { Component::deserialize(&self.engine, &artefact) };
            match loaded {
                Ok(component) => return Ok((component, CompileSource::Cached)),
                Err(e) => tracing::warn!(
                    file = %file.display(), error = %e,
                    "cached artefact unusable; recompiling"
                ),
            }
        }
        let component = Component::new(&self.engine, bytes).map_err(EngineError::CompileFailed)?;
        match component.serialize() {
            Ok(artefact) => {
                if let Err(e) = write_atomically(&file, &artefact) {
                    tracing::warn!(file = %file.display(), error = %e, "cannot cache the compiled plugin");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot serialize the compiled plugin"),
        }
        Ok((component, CompileSource::Compiled))
    }
}

/// Tells apart the common wrong files before wasmtime's parser does, with advice.
fn check_component_header(bytes: &[u8]) -> Result<(), EngineError> {
    const MAGIC: &[u8] = b"\0asm";
    const COMPONENT: [u8; 4] = [0x0d, 0x00, 0x01, 0x00];
    const CORE_MODULE: [u8; 4] = [0x01, 0x00, 0x00, 0x00];
    let not = |reason: String| Err(EngineError::NotAComponent { reason });
    if bytes.is_empty() {
        return not("the file is empty".to_owned());
    }
    if !bytes.starts_with(MAGIC) {
        return not("not a WebAssembly binary (it does not start with \\0asm)".to_owned());
    }
    match bytes.get(4..8) {
        None => not(format!(
            "truncated: {} bytes, shorter than a WebAssembly header",
            bytes.len()
        )),
        Some(version) if version == COMPONENT => Ok(()),
        Some(version) if version == CORE_MODULE => not(
            "a core WebAssembly module, not a component: build it for wasm32-wasip2, or wrap it \
             with `wasm-tools component new` and the WASI preview-1 adapter"
                .to_owned(),
        ),
        Some(version) => not(format!(
            "unknown WebAssembly version/layer {version:02x?}; kubeplug loads components \
             (version 0x0d, layer 1)"
        )),
    }
}

/// Whether `dir` may hold compiled code this host loads: whoever can write there runs code
/// in the host. Its parent is made if missing (it may be shared, such as a 0777 emptyDir);
/// the directory itself is created with mode 0700, or, if it exists, must be a directory
/// (not a symlink) of this user's that neither group nor others may write. Otherwise one
/// error line says why, and nothing is cached.
fn private_cache_dir(dir: &Path) -> std::io::Result<bool> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => return Ok(true),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(error),
    }
    let found = std::fs::symlink_metadata(dir)?;
    // The owner of a file this process creates: its effective user.
    let user = tempfile::tempfile()?.metadata()?.uid();
    let refusal = if !found.is_dir() {
        Some("it is not a directory (or is a symlink)".to_owned())
    } else if found.uid() != user {
        Some(format!("it belongs to user {}, not to {user}", found.uid()))
    } else if found.mode() & 0o022 != 0 {
        Some(format!(
            "its mode {:o} lets others than its owner write there",
            found.mode() & 0o777
        ))
    } else {
        None
    };
    match refusal {
        None => Ok(true),
        Some(why) => {
            tracing::error!(
                dir = %dir.display(),
                "not using the compiled-plugin cache: {why}; whoever writes there runs code in \
                 the host. Plugins are compiled at every load until it is fixed"
            );
            Ok(false)
        }
    }
}

/// Writes `bytes` to `file` whole or not at all: through a temporary file of a unique name
/// beside it (two loads of the same plugin at once must not share one), renamed into place.
fn write_atomically(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut temporary = tempfile::Builder::new()
        .prefix(".partial-")
        .tempfile_in(dir)?;
    temporary.write_all(bytes)?;
    temporary.persist(file).map(drop).map_err(|e| e.error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_files_are_named_before_parsing() {
        let reason = |bytes: &[u8]| check_component_header(bytes).unwrap_err().to_string();
        assert_eq!(reason(b""), "the file is empty");
        assert!(reason(b"hello, world").contains("not a WebAssembly binary"));
        assert!(reason(b"\0asm\x0d").starts_with("truncated: 5 bytes"));
        assert!(reason(b"\0asm\x01\0\0\0").contains("core WebAssembly module, not a component"));
        assert!(reason(b"\0asm\x0e\0\x01\0").contains("unknown WebAssembly version/layer"));
        assert!(check_component_header(b"\0asm\x0d\0\x01\0").is_ok());
    }
}
