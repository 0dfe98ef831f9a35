//! The sandbox boundary, tested from outside: what a component may import, what a guest
//! reaches at run time (files, directories, environment, sockets), what it sees of other
//! plugins and of the host, what it reads of the cluster beyond its grants, where compiled
//! code comes from, and where its output goes.
//!
//! The guest is `plugins/tests/sandbox-probe`: a reconcile call's target name is the action
//! it tries, and its answer (`error(report)`) says what happened.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, bail};
use kubeplug_informer::indexer::{Indexer, new_indexer};
use kubeplug_informer::object::ObjectDecoder;
use kubeplug_informer::resource::Resource;
use kubeplug_runtime::{
    CompileSource, Grants, Gvk, LoadError, ObjectRef, Plugin, PluginLimits, PluginSpec, ReadGrant,
    Runtime, RuntimeConfig,
};
use tracing::field::{Field, Visit};
use tracing::span;
use tracing::subscriber::Interest;

use crate::fixtures::*;

fn config_maps() -> Gvk {
    Gvk::new("", "v1", "ConfigMap")
}

fn secrets() -> Gvk {
    Gvk::new("", "v1", "Secret")
}

/// A cache of `kind` holding one object, `ns/one`, labelled `app=web`.
fn cache_of(kind: &str, plural: &str) -> Indexer {
    let decoder = ObjectDecoder::new(Resource::new("", "v1", kind, plural, true));
    let json = r#"{"metadata":{"name":"one","namespace":"ns","resourceVersion":"1","labels":{"app":"web"}}}"#;
    let (mut writer, indexer) = new_indexer();
    writer.put(Arc::new(
        decoder.decode(json.as_bytes()).expect("a valid object"),
    ));
    indexer
}

/// What the probe reads, granted: ConfigMaps and Secrets (it declares both).
fn probe_reads() -> Grants {
    Grants::default()
        .allow_read(config_maps())
        .allow_read(secrets())
}

/// The probe named `name`, given `secret` and `port`, with ConfigMap, Secret and Pod caches,
/// granted exactly `grants`.
async fn probe(
    runtime: &Runtime,
    name: &str,
    secret: &str,
    port: u16,
    grants: Grants,
) -> Result<Arc<Plugin>> {
    let settings = serde_json::json!({"name": name, "secret": secret, "port": port});
    let caches = BTreeMap::from([
        (config_maps(), cache_of("ConfigMap", "configmaps")),
        (secrets(), cache_of("Secret", "secrets")),
        (Gvk::new("", "v1", "Pod"), cache_of("Pod", "pods")),
    ]);
    let spec = exact_spec(
        "sandbox-probe",
        &settings.to_string(),
        caches,
        Arc::new(Recorder::default()),
        grants,
        PluginLimits::default(),
    )?;
    Ok(Arc::new(runtime.load(spec).await?))
}

/// Has a fresh instance of `plugin` try `action`; its report.
async fn act(plugin: &Plugin, action: &str) -> Result<String> {
    let mut instance = plugin.instantiate().await?;
    let target = ObjectRef {
        resource: config_maps(),
        namespace: None,
        name: action.to_owned(),
    };
    let answer = format!("{:?}", instance.reconcile(&target).await?);
    let report = answer
        .split_once("Error(\"")
        .and_then(|(_, rest)| rest.strip_suffix("\")"))
        .with_context(|| format!("{action}: the probe answered {answer}"))?;
    Ok(report.replace("\\\"", "\""))
}

/// The outcomes in a report of `escaped`/`refused (…)` attempts, failing on any escape.
fn all_refused(action: &str, report: &str, attempts: usize) -> Result<()> {
    let refused = report.matches("refused (").count();
    if report.contains("escaped") || refused != attempts {
        bail!("{action}: expected {attempts} refusals, got: {report}");
    }
    Ok(())
}

/// A WebAssembly component whose only import is `interface` of WIT package `package`
/// (`ns:name@version`), encoded here from WIT and a hand-written core module.
/// Appends `n` as unsigned LEB128, as wasm encodes lengths.
fn leb128(out: &mut Vec<u8>, mut n: usize) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn component_importing(package: &str, interface: &str) -> Result<Vec<u8>> {
    let wit = format!(
        "package {package};\ninterface {interface} {{ call: func(); }}\n\
         world probe {{ import {interface}; }}\n"
    );
    let mut resolve = wit_parser::Resolve::default();
    let id = resolve.push_str("probe.wit", &wit)?;
    let world = resolve.select_world(&[id], Some("probe"))?;
    let (name, version) = package.split_once('@').context("a versioned package")?;
    let module_name = format!("{name}/{interface}@{version}");
    // A core module that imports the interface's one function: the type section holds
    // `func() -> ()`, the import section that function under the interface's name.
    let mut imports = vec![1];
    leb128(&mut imports, module_name.len());
    imports.extend_from_slice(module_name.as_bytes());
    imports.extend_from_slice(&[4, b'c', b'a', b'l', b'l', 0x00, 0x00]);
    let mut module = b"\0asm\x01\0\0\0".to_vec();
    module.extend_from_slice(&[0x01, 0x04, 0x01, 0x60, 0x00, 0x00]);
    module.push(0x02);
    leb128(&mut module, imports.len());
    module.extend_from_slice(&imports);
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )?;
    wit_component::ComponentEncoder::default()
        .module(&module)?
        .validate(true)
        .encode()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_importing_outside_wasi_and_kubeplug_is_refused_naming_the_import() -> Result<()>
{
    let runtime = runtime();
    let spec = |interface: &str, package: &str| -> Result<PluginSpec> {
        Ok(PluginSpec {
            path: std::path::PathBuf::from(format!("/plugins/{interface}.wasm")),
            bytes: component_importing(package, interface)?,
            settings: "{}".into(),
            grants: Grants::default(),
            limits: PluginLimits::default(),
            cache: Arc::new(kubeplug_runtime::IndexerMap::default()),
            writer: Arc::new(Recorder::default()),
        })
    };
    for (package, interface, import) in [
        ("evil:net@1.0.0", "raw", "evil:net/raw@1.0.0"),
        // WASI, but not 0.2: a newer WASI is a new sandbox to review first.
        ("wasi:http@0.3.0", "outgoing", "wasi:http/outgoing@0.3.0"),
    ] {
        match runtime.load(spec(interface, package)?).await {
            Err(error @ LoadError::ForbiddenImport { .. }) => {
                let message = error.to_string();
                assert!(
                    message.contains(import) && message.contains("/plugins/"),
                    "{message}"
                );
            }
            Err(other) => bail!("{import}: expected a forbidden import, got: {other}"),
            Ok(_) => bail!("{import}: a component importing it was loaded"),
        }
    }
    // Our package, another minor: refused with both versions named.
    match runtime.load(spec("cache", "kubeplug:plugin@0.1.0")?).await {
        Err(error @ LoadError::InterfaceVersion { .. }) => {
            let message = error.to_string();
            for part in [
                "/plugins/cache.wasm",
                "built against kubeplug:plugin@0.1.0 (kubeplug:plugin/cache@0.1.0)",
                "serves kubeplug:plugin@0.2.0",
            ] {
                assert!(message.contains(part), "{message} should say {part:?}");
            }
        }
        Err(other) => bail!("kubeplug:plugin@0.1.0: expected a version error, got: {other}"),
        Ok(_) => bail!("a component of kubeplug:plugin@0.1.0 was loaded"),
    }
    Ok(())
}

/// The name a component imports is the plugin author's: a refusal quotes it cut, so that a
/// 20,000-byte version does not become a 20,000-byte message in the log and `/plugins`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_import_is_named_cut_to_a_readable_length() -> Result<()> {
    let runtime = runtime();
    let long = "a".repeat(20_000);
    for package in [
        format!("kubeplug:plugin@0.9.0-{long}"),
        format!("evil:net@1.0.0-{long}"),
    ] {
        let spec = PluginSpec {
            path: std::path::PathBuf::from("/plugins/long.wasm"),
            bytes: component_importing(&package, "raw")?,
            settings: "{}".into(),
            grants: Grants::default(),
            limits: PluginLimits::default(),
            cache: Arc::new(kubeplug_runtime::IndexerMap::default()),
            writer: Arc::new(Recorder::default()),
        };
        let message = match runtime.load(spec).await {
            Err(error) => error.to_string(),
            Ok(_) => bail!("a component importing {package:.40} was loaded"),
        };
        assert!(
            message.len() < 2_000,
            "{} bytes: {message:.300}",
            message.len()
        );
        let named = &package[..package.find('@').unwrap()];
        assert!(message.contains(named), "{message:.300}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_directories_environment_and_sockets_are_refused_at_run_time() -> Result<()> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let port = listener.local_addr()?.port();
    let runtime = runtime();
    let plugin = probe(&runtime, "probe", "", port, probe_reads()).await?;

    all_refused("open-file", &act(&plugin, "open-file").await?, 3)?;
    all_refused("list-dir", &act(&plugin, "list-dir").await?, 2)?;
    all_refused("socket", &act(&plugin, "socket").await?, 4)?;
    assert_eq!(
        listener.accept().map_err(|e| e.kind()).err(),
        Some(std::io::ErrorKind::WouldBlock),
        "the host's listener was never reached"
    );
    assert!(
        std::env::vars_os().count() > 0,
        "the host has an environment to leak"
    );
    let environment = act(&plugin, "environment").await?;
    assert!(
        environment.starts_with("vars=0 args=0 "),
        "the guest's environment is empty: {environment}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_of_one_component_never_see_each_others_settings_memory_or_metrics() -> Result<()> {
    let runtime = runtime();
    let alpha = probe(&runtime, "probe-a", "alpha", 9, probe_reads()).await?;
    let beta = probe(&runtime, "probe-b", "beta", 9, probe_reads()).await?;
    for _ in 0..2 {
        assert_eq!(
            act(&alpha, "secret").await?,
            "secret=alpha remembered=alpha"
        );
        assert_eq!(act(&beta, "secret").await?, "secret=beta remembered=beta");
    }
    for (plugin, own) in [(&alpha, "alpha"), (&beta, "beta")] {
        let series: Vec<String> = plugin
            .metrics()
            .snapshot()
            .into_keys()
            .map(|(name, labels)| format!("{name}{labels:?}"))
            .collect();
        assert_eq!(
            series,
            [format!("secret_total[(\"secret\", \"{own}\")]")],
            "{}",
            plugin.name()
        );
    }
    Ok(())
}

/// A plugin reads what it both declares and is granted (issue 19: it used to grant itself
/// whatever it subscribed to). A declared read without a grant fails the load, naming the
/// type and the configuration lines that would grant it; granted, every cache call answers;
/// a type it does not declare is refused through every cache call even under `*`, and each
/// refusal is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_need_a_declaration_and_a_grant() -> Result<()> {
    const READS: [&str; 5] = ["get", "list", "keys", "by-index", "index-values"];
    let runtime = runtime();
    let ungranted = Grants::default().allow_read(config_maps());
    let error = match probe(&runtime, "probe", "", 9, ungranted).await {
        Ok(_) => bail!("a plugin loaded without a grant for its declared read of Secrets"),
        Err(error) => error.to_string(),
    };
    assert!(
        error.contains("grants: plugin probe reads types it is not granted: v1/Secret")
            && error.contains("[plugins.probe.grants]\nread = [\"v1/Secret\"]"),
        "{error}"
    );

    let everything = Grants::default().allow_reads(ReadGrant::All);
    let granted = probe(&runtime, "probe", "", 9, everything).await?;
    for how in READS {
        let report = act(&granted, &format!("read-{how}-secrets")).await?;
        assert!(report.starts_with("allowed 1"), "{how}: {report}");
        let undeclared = act(&granted, &format!("read-{how}-pods")).await?;
        assert!(
            undeclared.starts_with("not-permitted: plugin probe may not read v1/Pod"),
            "{how}: {undeclared}"
        );
    }
    assert_eq!(
        granted.status().denied,
        READS.len() as u64,
        "each refusal is counted"
    );
    Ok(())
}

#[test]
fn compiled_code_is_read_only_from_the_host_private_cache() -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;

    let dir = tempfile::tempdir()?;
    let bytes = std::fs::read(guest("noop")?)?;
    let config = |cache: &str| RuntimeConfig {
        artifact_cache: Some(dir.path().join(cache)),
        ..RuntimeConfig::default()
    };

    // The runtime makes its cache directory private (the refusals of one that is not are
    // in `artifacts.rs`).
    let cache = dir.path().join("cache");
    let runtime = Runtime::new(config("cache"))?;
    assert_eq!(
        std::fs::metadata(&cache)?.permissions().mode() & 0o777,
        0o700
    );
    assert_eq!(runtime.compile(&bytes)?.1, CompileSource::Compiled);
    let artefact = std::fs::read_dir(&cache)?
        .next()
        .context("an artefact in the cache")??
        .path();

    // A plugins directory holding the very artefact, under the cache's own file name: a
    // runtime whose cache is elsewhere compiles, it never looks there.
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins)?;
    std::fs::copy(&artefact, plugins.join(artefact.file_name().unwrap()))?;
    std::fs::write(plugins.join("noop.wasm"), &bytes)?;
    let elsewhere = Runtime::new(config("other-cache"))?;
    assert_eq!(
        elsewhere
            .compile(&std::fs::read(plugins.join("noop.wasm"))?)?
            .1,
        CompileSource::Compiled
    );

    // Compiled code handed over as a plugin file is refused before wasmtime sees it.
    let error = runtime
        .compile(&std::fs::read(&artefact)?)
        .expect_err("a compiled artefact is not a plugin");
    assert!(
        error.to_string().contains("not a WebAssembly binary"),
        "{error}"
    );
    Ok(())
}

/// Every tracing event on this thread, as field name → value text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<BTreeMap<String, String>>>>);

impl Captured {
    /// The events `plugin` logged on `stream` (`stdout`, `stderr`, or `None` for `log`).
    fn of(&self, plugin: &str, stream: Option<&str>) -> Vec<BTreeMap<String, String>> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|e| {
                e.get("plugin").map(String::as_str) == Some(plugin)
                    && e.get("stream").map(String::as_str) == stream
            })
            .cloned()
            .collect()
    }
}

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl tracing::Subscriber for Captured {
    fn register_callsite(&self, _: &'static tracing::Metadata<'static>) -> Interest {
        Interest::sometimes()
    }

    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }

    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}

    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        self.0.lock().unwrap().push(fields.0);
    }

    fn enter(&self, _: &span::Id) {}

    fn exit(&self, _: &span::Id) {}
}

/// On a current-thread runtime the guest runs on this thread, so a thread-local subscriber
/// sees everything it writes.
#[tokio::test]
async fn output_reaches_tracing_named_by_plugin_and_the_excess_is_dropped_and_counted() -> Result<()>
{
    const BURST: usize = 200;
    const PRINTED: usize = 1000;
    let captured = Captured::default();
    let _guard = tracing::subscriber::set_default(captured.clone());
    let runtime = runtime();
    let plugin = probe(&runtime, "probe-logs", "", 9, probe_reads()).await?;

    assert_eq!(
        act(&plugin, &format!("print-{PRINTED}")).await?,
        "wrote 1000"
    );
    let printed = captured.of("probe-logs", Some("stdout"));
    assert!(
        (BURST..PRINTED).contains(&printed.len()),
        "a burst gets through, not everything: {} of {PRINTED}",
        printed.len()
    );
    let mut accounted = 0;
    for event in &printed {
        // A line that got through after others were dropped says how many.
        accounted += 1 + event["dropped"].parse::<usize>()?;
        assert_eq!(
            event["message"],
            format!("print {} of probe-logs", accounted - 1)
        );
    }

    // Once the budget refills, the next line through carries the count of those dropped
    // (and of any stderr line of an attempt that came too early).
    let mut attempts = 0;
    let report = loop {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        act(&plugin, "stderr-1").await?;
        if let Some(event) = captured.of("probe-logs", Some("stderr")).pop() {
            break event;
        }
        attempts += 1;
        if attempts > 500 {
            bail!("no stderr line got through");
        }
    };
    assert_eq!(report["message"], "stderr 0 of probe-logs");
    let dropped: usize = report["dropped"].parse()?;
    assert_eq!(
        accounted + dropped,
        PRINTED + attempts,
        "every line is logged or counted"
    );

    // 50 ms refill at least 5 records of budget.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    act(&plugin, "log-3").await?;
    let logged = captured.of("probe-logs", None);
    let messages: Vec<&str> = logged.iter().map(|e| e["message"].as_str()).collect();
    assert!(
        messages.ends_with(&[
            "log 0 of probe-logs n=\"0\"",
            "log 1 of probe-logs n=\"1\"",
            "log 2 of probe-logs n=\"2\""
        ]),
        "{messages:?}"
    );
    Ok(())
}
