//! `cargo xtask bench [SCENARIO...] [--quick]`: runs the benchmark targets in release, collects
//! the figure lines they print (`kubeplug_bench_support::Figure`), checks them against
//! [`TARGETS`], prints a table and writes everything, with a description of the machine, to
//! `target/bench/<timestamp>.json`. `benches/README.md` describes each scenario.
//!
//! The bench binaries are built once by one `cargo bench --no-run` (one feature resolution
//! for all of them), then run directly, so that a "one core" scenario pins the bench under
//! `taskset -c 0` and not the compiler.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use kubeplug_bench_support::Figure;

use crate::Layout;

/// One benchmark target and how to run it.
#[derive(Debug)]
pub struct Scenario {
    /// The name on the command line.
    pub name: &'static str,
    /// The cargo package holding the bench target.
    pub package: &'static str,
    /// The bench target, or for [`Kind::BinTest`] the binary.
    pub bench: &'static str,
    /// What cargo builds and how it reports its figures.
    pub kind: Kind,
    /// Whether the issue's "one core" applies: pinned with `taskset -c 0` where it exists.
    pub one_core: bool,
    /// The environment `--quick` sets (unless already set): tiny sizes.
    pub quick: &'static [(&'static str, &'static str)],
    /// Features the bench target needs (its `required-features`), as `package/feature`.
    pub features: &'static [&'static str],
}

/// How a scenario's target is built and run, and how it reports.
#[derive(Debug)]
pub enum Kind {
    /// A `harness = false` bench target (`cargo bench --bench <bench>`), run with `--bench`;
    /// it prints figure lines.
    Bench,
    /// One test of binary `<bench>`'s unit tests, built in the bench profile (`cargo bench
    /// --bin <bench>`) and run alone with `--nocapture`, for a measurement that needs the
    /// binary's private modules; `figures` reads the figures from what the test prints.
    BinTest {
        /// The test's full name.
        test: &'static str,
        /// Environment set in a full (not `--quick`) run.
        full_env: &'static [(&'static str, &'static str)],
        /// The figures in the test's output; none when it printed no summary.
        figures: fn(&str) -> Vec<Figure>,
        /// The figures' `<bench>` part, as [`TARGETS`] keys them.
        prefix: &'static str,
    },
}

impl Scenario {
    /// The first part of its figures' names.
    pub fn figure_prefix(&self) -> &'static str {
        match self.kind {
            Kind::Bench => self.bench,
            Kind::BinTest { prefix, .. } => prefix,
        }
    }
}

/// Every scenario, in the order `cargo xtask bench` runs them.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "pipeline",
        package: "kubeplug-informer",
        bench: "pipeline",
        kind: Kind::Bench,
        one_core: true,
        quick: &[
            ("KUBEPLUG_BENCH_OBJECTS", "2000"),
            ("KUBEPLUG_BENCH_UPDATES", "20000"),
        ],
        features: &[],
    },
    Scenario {
        name: "decode",
        package: "kubeplug-informer",
        bench: "decode",
        kind: Kind::Bench,
        one_core: true,
        quick: &[("KUBEPLUG_BENCH_OBJECTS", "20000")],
        features: &[],
    },
    Scenario {
        name: "field-select",
        package: "kubeplug-memory",
        bench: "field_select",
        kind: Kind::Bench,
        one_core: true,
        quick: &[("KUBEPLUG_BENCH_OBJECTS", "2000")],
        features: &[],
    },
    Scenario {
        name: "wire",
        package: "kubeplug-kube",
        bench: "wire",
        kind: Kind::Bench,
        one_core: true,
        quick: &[("KUBEPLUG_BENCH_OBJECTS", "20000")],
        features: &[],
    },
    Scenario {
        name: "cache-memory",
        package: "kubeplug-kube",
        bench: "cache_memory",
        kind: Kind::Bench,
        one_core: false,
        quick: &[("KUBEPLUG_BENCH_OBJECTS", "2000")],
        features: &[],
    },
    Scenario {
        name: "crossing",
        package: "kubeplug-runtime",
        bench: "crossing",
        kind: Kind::Bench,
        one_core: true,
        quick: &[
            ("KUBEPLUG_BENCH_OBJECTS", "2000"),
            ("KUBEPLUG_BENCH_INSTANCES", "10"),
        ],
        features: &[],
    },
    Scenario {
        name: "pipeline-wasm",
        package: "kubeplug-runtime",
        bench: "pipeline_wasm",
        kind: Kind::Bench,
        one_core: true,
        quick: &[
            ("KUBEPLUG_BENCH_OBJECTS", "2000"),
            ("KUBEPLUG_BENCH_UPDATES", "20000"),
            ("KUBEPLUG_BENCH_LATENCY_SECONDS", "1"),
        ],
        features: &[],
    },
    Scenario {
        name: "fan-out",
        package: "kubeplug-runtime",
        bench: "fan_out",
        kind: Kind::Bench,
        one_core: true,
        quick: &[
            ("KUBEPLUG_BENCH_OBJECTS", "1000"),
            ("KUBEPLUG_BENCH_UPDATES", "2000"),
        ],
        features: &[],
    },
    Scenario {
        name: "languages",
        package: "kubeplug-runtime",
        bench: "languages",
        kind: Kind::Bench,
        one_core: false,
        quick: &[
            ("KUBEPLUG_BENCH_EVENTS", "1000"),
            ("KUBEPLUG_BENCH_INSTANCES", "5"),
        ],
        features: &[],
    },
    Scenario {
        name: "kube-sync",
        package: "kubeplug-kube",
        bench: "kube_sync",
        kind: Kind::Bench,
        one_core: false,
        quick: &[("KUBEPLUG_BENCH_OBJECTS", "1000")],
        features: &[],
    },
    // Against a real kube-apiserver: KUBEBUILDER_ASSETS must be exported (the envtest
    // layout, e.g. ../shared/envtest/v1.32); without it the bench prints the envtest skip
    // line and reports no figures, and with CI set it fails.
    Scenario {
        name: "envtest-sync",
        package: "kubeplug-kube",
        bench: "envtest_sync",
        kind: Kind::Bench,
        one_core: false,
        quick: &[("KUBEPLUG_BENCH_OBJECTS", "1000")],
        features: &[],
    },
    Scenario {
        name: "workqueue",
        package: "kubeplug-workqueue",
        bench: "throughput",
        kind: Kind::Bench,
        one_core: false,
        quick: &[("KUBEPLUG_BENCH_OPS", "100000")],
        features: &["kubeplug-workqueue/prometheus"],
    },
    Scenario {
        name: "idle",
        package: "kubeplug",
        bench: "idle",
        kind: Kind::Bench,
        one_core: false,
        quick: &[("KUBEPLUG_BENCH_IDLE_SECONDS", "10")],
        features: &[],
    },
    Scenario {
        name: "shard",
        package: "kubeplug",
        bench: "shard",
        kind: Kind::Bench,
        one_core: false,
        quick: &[
            ("KUBEPLUG_BENCH_SHARD_TRIALS", "3"),
            ("KUBEPLUG_BENCH_SHARD_OBJECTS", "300"),
        ],
        features: &[],
    },
    Scenario {
        name: "hot-swap",
        package: "kubeplug",
        bench: "kubeplug",
        kind: Kind::BinTest {
            test: "plugins::tests::reload_storm",
            full_env: &[("KUBEPLUG_STORM_FULL", "1")],
            figures: reload_storm_figures,
            prefix: "hot_swap",
        },
        one_core: false,
        quick: &[],
        features: &[],
    },
];

/// What a target constrains: the figure's value or its ratio against its baseline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bound {
    /// `value >= x`.
    ValueAtLeast(f64),
    /// `value <= x`.
    ValueAtMost(f64),
    /// `ratio >= x`.
    RatioAtLeast(f64),
    /// `ratio <= x`.
    RatioAtMost(f64),
}

impl Bound {
    /// Whether `figure` meets the bound; `None` when the figure has no ratio to check.
    pub fn holds(self, figure: &Figure) -> Option<bool> {
        match self {
            Self::ValueAtLeast(x) => Some(figure.value >= x),
            Self::ValueAtMost(x) => Some(figure.value <= x),
            Self::RatioAtLeast(x) => figure.ratio.map(|r| r >= x),
            Self::RatioAtMost(x) => figure.ratio.map(|r| r <= x),
        }
    }

    fn describe(self) -> String {
        match self {
            Self::ValueAtLeast(x) => format!("≥ {}", readable_number(x)),
            Self::ValueAtMost(x) => format!("≤ {}", readable_number(x)),
            Self::RatioAtLeast(x) => format!("ratio ≥ {x}"),
            Self::RatioAtMost(x) => format!("ratio ≤ {x}"),
        }
    }
}

/// The targets of issue 9, keyed by figure name.
pub const TARGETS: &[(&str, Bound)] = &[
    // P4: Wasm no-op / native closure, as throughputs.
    ("crossing.noop.per_event", Bound::RatioAtLeast(0.8)),
    ("crossing.label.per_event", Bound::RatioAtLeast(0.8)),
    // P4: ≥ 200k deltas/s into the Wasm no-op on one core.
    (
        "crossing.noop.events_per_second",
        Bound::ValueAtLeast(200_000.0),
    ),
    // P4 end to end: source → … → listener → Wasm plugin, against a native closure there.
    ("pipeline_wasm.noop.per_delta", Bound::RatioAtLeast(0.8)),
    ("pipeline_wasm.label.per_delta", Bound::RatioAtLeast(0.8)),
    // Issue 23: projections against the native readers of the same fields, and what 12 path
    // indexes cost an informer's updates.
    ("pipeline_wasm.fields.per_delta", Bound::RatioAtLeast(1.0)),
    (
        "pipeline_wasm.fields.per_delta_vs_projected",
        Bound::RatioAtLeast(0.8),
    ),
    (
        "pipeline_wasm.fields_js.per_delta",
        Bound::RatioAtLeast(0.5),
    ),
    (
        "pipeline_wasm.fields_py.per_delta",
        Bound::RatioAtLeast(0.5),
    ),
    (
        "pipeline_wasm.native_path_indexes.per_delta",
        Bound::RatioAtLeast(0.7),
    ),
    (
        "pipeline_wasm.noop.deltas_per_second",
        Bound::ValueAtLeast(200_000.0),
    ),
    // P6: plugins of one type share one informer, so one watch.
    ("fan_out.watches", Bound::ValueAtMost(1.0)),
    // P5: a hot swap loses and duplicates nothing.
    ("hot_swap.lost", Bound::ValueAtMost(0.0)),
    ("hot_swap.duplicated", Bound::ValueAtMost(0.0)),
    // An idle host (issue 27): under 1 % of a core, locally and against an API server.
    ("idle.local.cpu_share", Bound::ValueAtMost(1.0)),
    ("idle.kube.cpu_share", Bound::ValueAtMost(1.0)),
    // P2/P3: the cache against kube-rs's reflector store, and against the JSON it holds.
    ("cache_memory.kubeplug_vs_kube_rs", Bound::ValueAtMost(0.5)),
    (
        "cache_memory.kubeplug.bytes_per_object",
        Bound::RatioAtMost(1.3),
    ),
    ("pipeline.cache_bytes_per_object", Bound::RatioAtMost(1.3)),
    (
        "kube_sync.10000.list_then_watch.cache_bytes_per_object",
        Bound::RatioAtMost(1.3),
    ),
    (
        "kube_sync.10000.streaming_list.cache_bytes_per_object",
        Bound::RatioAtMost(1.3),
    ),
    (
        "kube_sync.100000.list_then_watch.cache_bytes_per_object",
        Bound::RatioAtMost(1.3),
    ),
    (
        "kube_sync.100000.streaming_list.cache_bytes_per_object",
        Bound::RatioAtMost(1.3),
    ),
    // Issue 18, initial sync against a real kube-apiserver: kubeplug's streaming list in
    // ≤ 0.8× the time of kube-rs's streaming watcher. The ratio is of throughputs (kube-rs's
    // time over kubeplug's), so the target reads ≥ 1 / 0.8 = 1.25.
    (
        "envtest_sync.kubeplug_streaming_list.objects_per_second",
        Bound::RatioAtLeast(1.25),
    ),
    // Issue 18: RSS once synced ≤ 0.6× kube-rs's reflector of `DynamicObject`s, both modes.
    (
        "envtest_sync.kubeplug_list_then_watch.rss_synced",
        Bound::RatioAtMost(0.6),
    ),
    (
        "envtest_sync.kubeplug_streaming_list.rss_synced",
        Bound::RatioAtMost(0.6),
    ),
    // Issue 24: a metadata-only informer syncs no slower than kube-rs's metadata watcher
    // (throughputs, so ≥ 1.0), and its RSS grows ≤ 0.3× the whole-object informer's.
    (
        "envtest_sync.kubeplug_metadata_only.objects_per_second",
        Bound::RatioAtLeast(1.0),
    ),
    (
        "envtest_sync.kubeplug_metadata_only.rss_growth",
        Bound::RatioAtMost(0.3),
    ),
];

/// The target of `figure`, if it has one.
pub fn target_of(figure: &str) -> Option<Bound> {
    TARGETS
        .iter()
        .find(|(name, _)| *name == figure)
        .map(|(_, bound)| *bound)
}

/// What `cargo xtask bench` was asked to do.
#[derive(Debug)]
pub struct BenchArgs {
    /// The scenarios to run, in [`SCENARIOS`] order.
    pub scenarios: Vec<&'static Scenario>,
    /// Tiny sizes.
    pub quick: bool,
}

impl BenchArgs {
    /// Parses `[SCENARIO...] [--quick]`; no scenario means all of them.
    pub fn parse(args: &[String]) -> Result<Self> {
        let quick = args.iter().any(|a| a == "--quick");
        let names: Vec<&String> = args.iter().filter(|a| *a != "--quick").collect();
        if let Some(unknown) = names
            .iter()
            .find(|n| !SCENARIOS.iter().any(|s| s.name == n.as_str()))
        {
            let known: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
            bail!("no bench scenario called {unknown:?}; the scenarios are {known:?}");
        }
        let scenarios = SCENARIOS
            .iter()
            .filter(|s| names.is_empty() || names.iter().any(|n| n.as_str() == s.name))
            .collect();
        Ok(Self { scenarios, quick })
    }
}

/// Runs `args`' scenarios and returns the report written under `target/bench/`.
pub fn bench(layout: &Layout, args: &BenchArgs) -> Result<PathBuf> {
    let executables = build(layout, &args.scenarios)?;
    let taskset = Command::new("taskset")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let mut figures = Vec::new();
    let mut runs = Vec::new();
    for scenario in &args.scenarios {
        let Built {
            executable,
            package_dir,
        } = executables
            .get(scenario.name)
            .with_context(|| format!("cargo built no bench {}", scenario.bench))?;
        let pinned = scenario.one_core && taskset;
        let mut command = if pinned {
            let mut c = Command::new("taskset");
            c.args(["-c", "0"]).arg(executable);
            c
        } else {
            Command::new(executable)
        };
        command.current_dir(package_dir);
        match scenario.kind {
            // `--bench` is what `cargo bench` passes: the benches' full (non-smoke) mode.
            Kind::Bench => {
                command.arg("--bench");
            }
            Kind::BinTest { test, full_env, .. } => {
                command.args([test, "--exact", "--nocapture", "--test-threads=1"]);
                if !args.quick {
                    command.envs(full_env.iter().copied());
                }
            }
        }
        if args.quick {
            for (name, value) in scenario.quick {
                if std::env::var_os(name).is_none() {
                    command.env(name, value);
                }
            }
        }
        eprintln!(
            "== {} ({}{})",
            scenario.name,
            executable.display(),
            if pinned { ", taskset -c 0" } else { "" }
        );
        let found = run_collecting(&mut command, scenario)?;
        runs.push(serde_json::json!({
            "scenario": scenario.name,
            "pinned_to_one_core": pinned,
            "figures": found.len(),
        }));
        figures.extend(found);
    }
    #[allow(clippy::print_stdout)] // The table is what the task is for; progress goes to stderr.
    {
        print!("{}", table(&figures));
    }
    let machine = machine(layout);
    let report = serde_json::json!({
        "machine": machine,
        "quick": args.quick,
        "scenarios": runs,
        "figures": figures.iter().map(figure_json).collect::<Vec<_>>(),
    });
    let dir = layout.root.join("target").join("bench");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let stamp = machine["date"]
        .as_str()
        .unwrap_or("undated")
        .replace(':', "-");
    let path = dir.join(format!("{stamp}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// A built bench target.
struct Built {
    executable: PathBuf,
    /// Where `cargo bench` would run it from.
    package_dir: PathBuf,
}

/// Builds every bench target of `scenarios` in one `cargo bench --no-run`, and returns each
/// one by scenario name.
fn build(layout: &Layout, scenarios: &[&Scenario]) -> Result<BTreeMap<&'static str, Built>> {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command.current_dir(&layout.root).args([
        "bench",
        "--no-run",
        "--message-format=json-render-diagnostics",
    ]);
    for scenario in scenarios {
        let target = match scenario.kind {
            Kind::Bench => "--bench",
            Kind::BinTest { .. } => "--bin",
        };
        command
            .args(["-p", scenario.package])
            .args([target, scenario.bench]);
        for feature in scenario.features {
            command.args(["--features", feature]);
        }
    }
    let output = command
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo bench --no-run")?;
    if !output.status.success() {
        bail!("cargo bench --no-run failed ({})", output.status);
    }
    let mut built = BTreeMap::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let (Some(executable), Some(name), Some(manifest)) = (
            message["executable"].as_str(),
            message["target"]["name"].as_str(),
            message["manifest_path"].as_str(),
        ) else {
            continue;
        };
        let is_bench = message["target"]["kind"]
            .as_array()
            .is_some_and(|kinds| kinds.iter().any(|k| k == "bench"));
        let is_test_harness = message["profile"]["test"] == true;
        let package_dir = Path::new(manifest)
            .parent()
            .context("a manifest path has a directory")?;
        if let Some(scenario) = scenarios.iter().find(|s| {
            let kind_matches = match s.kind {
                Kind::Bench => is_bench,
                Kind::BinTest { .. } => !is_bench && is_test_harness,
            };
            kind_matches && s.bench == name && package_dir.ends_with(package_path(s.package))
        }) {
            built.insert(
                scenario.name,
                Built {
                    executable: PathBuf::from(executable),
                    package_dir: package_dir.to_path_buf(),
                },
            );
        }
    }
    Ok(built)
}

/// The directory of a package under the repository root (`kubeplug-informer` →
/// `host/informer`, `kubeplug` → `host/kubeplug`), to tell apart same-named bench targets of
/// different packages.
fn package_path(package: &str) -> PathBuf {
    Path::new("host").join(package.trim_start_matches("kubeplug-"))
}

/// Runs `command`, passing its output through to stderr, and returns the figures it printed
/// (for a [`Kind::BinTest`], those its `figures` finds in the output).
fn run_collecting(command: &mut Command, scenario: &Scenario) -> Result<Vec<Figure>> {
    let name = scenario.name;
    let mut output = String::new();
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting the {name} bench"))?;
    let stdout = child.stdout.take().context("piped stdout")?;
    let mut figures = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.with_context(|| format!("reading the {name} bench's output"))?;
        eprintln!("{line}");
        figures.extend(Figure::from_json(&line));
        output.push_str(&line);
        output.push('\n');
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("the {name} bench failed ({status})");
    }
    if let Kind::BinTest {
        test,
        figures: read,
        ..
    } = scenario.kind
    {
        figures = read(&output);
        if figures.is_empty() {
            bail!("{test} printed no summary to read figures from");
        }
        for figure in &figures {
            eprintln!("{}", figure.to_json());
        }
    }
    Ok(figures)
}

/// The figures of the summary `reload_storm` (`host/kubeplug/src/plugins/tests.rs`) prints
/// once it has checked that every delta was handled exactly once:
///
/// `reload storm: 1000 swaps, 21000 deltas handled, 0 lost, 0 duplicated; rename → first
/// delta on the new version: uncached 180ms, cached p50 12ms p99 40ms max 51ms; RSS after 100
/// swaps 90000 KiB, at the end 91000 KiB; live after: …`
///
/// Durations are Rust's `Debug` form. None when there is no such line.
pub fn reload_storm_figures(output: &str) -> Vec<Figure> {
    // With `--nocapture` the summary follows libtest's `test <name> ... ` on the same line.
    let Some(line) = output
        .lines()
        .find_map(|l| l.split_once("reload storm: ").map(|(_, summary)| summary))
    else {
        return Vec::new();
    };
    // The number just before `marker`.
    let count = |marker: &str| {
        let (before, _) = line.split_once(marker)?;
        before.split_whitespace().last()?.parse::<f64>().ok()
    };
    // The duration just after `marker`, in milliseconds.
    let millis = |marker: &str| {
        let (_, after) = line.split_once(marker)?;
        let token = after.split([',', ' ', ';']).next()?;
        debug_duration(token).map(|d| d.as_secs_f64() * 1e3)
    };
    let found = [
        ("hot_swap.swaps", count(" swaps,"), "swaps"),
        (
            "hot_swap.deltas_handled",
            count(" deltas handled"),
            "deltas",
        ),
        ("hot_swap.lost", count(" lost"), "deltas"),
        ("hot_swap.duplicated", count(" duplicated"), "deltas"),
        ("hot_swap.first_delta_uncached", millis("uncached "), "ms"),
        (
            "hot_swap.first_delta_cached_p50",
            millis("cached p50 "),
            "ms",
        ),
        ("hot_swap.first_delta_cached_p99", millis(" p99 "), "ms"),
        ("hot_swap.first_delta_cached_max", millis(" max "), "ms"),
        (
            "hot_swap.rss_at_end",
            count(" KiB; live").map(|kib| kib * 1024.0),
            "bytes",
        ),
    ];
    found
        .into_iter()
        .filter_map(|(name, value, unit)| Some(Figure::new(name, value?, unit)))
        .collect()
}

/// A `Duration` as `{:?}` prints it: `150ns`, `12.5µs`, `3.25ms`, `1.2s`.
fn debug_duration(text: &str) -> Option<std::time::Duration> {
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let seconds = match unit {
        "ns" => number / 1e9,
        "µs" => number / 1e6,
        "ms" => number / 1e3,
        "s" => number,
        _ => return None,
    };
    Some(std::time::Duration::from_secs_f64(seconds))
}

/// The figure as the report stores it: the bench's fields, then its target and whether it holds.
fn figure_json(figure: &Figure) -> serde_json::Value {
    let target = target_of(&figure.figure);
    serde_json::json!({
        "figure": figure.figure,
        "value": figure.value,
        "unit": figure.unit,
        "baseline": figure.baseline,
        "ratio": figure.ratio,
        "target": target.map(Bound::describe),
        "holds": target.and_then(|t| t.holds(figure)),
    })
}

/// The readable table: one row per figure, with its target and whether it holds.
pub fn table(figures: &[Figure]) -> String {
    let rows: Vec<[String; 7]> = figures
        .iter()
        .map(|f| {
            let target = target_of(&f.figure);
            [
                f.figure.clone(),
                readable_number(f.value),
                f.unit.clone(),
                f.baseline.clone().unwrap_or_default(),
                f.ratio.map_or(String::new(), |r| format!("{r:.3}")),
                target.map_or(String::new(), Bound::describe),
                match target.and_then(|t| t.holds(f)) {
                    Some(true) => "yes".into(),
                    Some(false) => "NO".into(),
                    None => String::new(),
                },
            ]
        })
        .collect();
    let header = [
        "figure", "value", "unit", "baseline", "ratio", "target", "holds",
    ]
    .map(String::from);
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (column, (cell, width)) in row.iter().zip(widths).enumerate() {
            let pad = width - cell.chars().count();
            // Numbers right-aligned, text left-aligned.
            if matches!(column, 1 | 4) {
                let _ = write!(line, "{}{cell}  ", " ".repeat(pad));
            } else {
                let _ = write!(line, "{cell}{}  ", " ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A value with digits enough to read and not more: `1234567` → `1234567`, `0.8123` → `0.812`.
fn readable_number(value: f64) -> String {
    if value.abs() >= 100.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.3}")
    }
}

/// The machine the figures come from: cores, CPU model, date, and the commit measured.
fn machine(layout: &Layout) -> serde_json::Value {
    let output = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .current_dir(&layout.root)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_owned())
        });
    serde_json::json!({
        "nproc": std::thread::available_parallelism().map_or(0, usize::from),
        "cpu_model": cpu_model,
        "date": output("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]),
        "git_commit": output("git", &["rev-parse", "HEAD"]),
        "git_dirty": output("git", &["status", "--porcelain"]).map(|s| !s.is_empty()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn no_scenario_means_all_and_names_select_in_run_order() {
        let all = BenchArgs::parse(&[]).unwrap();
        assert_eq!(all.scenarios.len(), SCENARIOS.len());
        assert!(!all.quick);
        let some = BenchArgs::parse(&args(&["workqueue", "--quick", "pipeline"])).unwrap();
        let names: Vec<&str> = some.scenarios.iter().map(|s| s.name).collect();
        assert_eq!(names, ["pipeline", "workqueue"]);
        assert!(some.quick);
    }

    #[test]
    fn an_unknown_scenario_is_named_with_the_known_ones() {
        let error = BenchArgs::parse(&args(&["pipelin"]))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("\"pipelin\"") && error.contains("cache-memory"),
            "{error}"
        );
    }

    #[test]
    fn every_target_names_a_figure_of_a_scenario() {
        for (figure, _) in TARGETS {
            let bench = figure.split('.').next().unwrap();
            assert!(
                SCENARIOS.iter().any(|s| s.figure_prefix() == bench),
                "{figure} belongs to no scenario"
            );
        }
    }

    #[test]
    fn targets_hold_or_not_on_value_or_ratio() {
        let noop = Figure::new("crossing.noop.per_event", 900.0, "ns")
            .against("crossing.native.per_event", 0.75);
        assert_eq!(target_of(&noop.figure).unwrap().holds(&noop), Some(false));
        let rate = Figure::new("crossing.noop.events_per_second", 250_000.0, "events/s");
        assert_eq!(target_of(&rate.figure).unwrap().holds(&rate), Some(true));
        let unratioed = Figure::new("crossing.noop.per_event", 900.0, "ns");
        assert_eq!(
            target_of(&unratioed.figure).unwrap().holds(&unratioed),
            None
        );
        assert_eq!(target_of("decode.objects_per_second"), None);
    }

    #[test]
    fn the_reload_storm_summary_becomes_figures() {
        let output = "running 1 test\n\
            test plugins::tests::reload_storm ... reload storm: 1000 swaps, 20950 deltas handled, 0 lost, 0 duplicated; rename → \
            first delta on the new version: uncached 1.25s, cached p50 12.5ms p99 40ms max \
            812.5µs; RSS after 100 swaps 90000 KiB, at the end 91000 KiB; live after: Live { \
            plugins: 1, instances: 1 }\nok\n";
        let figures: BTreeMap<String, (f64, String)> = reload_storm_figures(output)
            .into_iter()
            .map(|f| (f.figure, (f.value, f.unit)))
            .collect();
        let value = |name: &str| figures[name].0;
        assert_eq!(figures.len(), 9, "{figures:?}");
        assert_eq!(value("hot_swap.swaps"), 1000.0);
        assert_eq!(value("hot_swap.deltas_handled"), 20950.0);
        assert_eq!(value("hot_swap.lost"), 0.0);
        assert_eq!(value("hot_swap.duplicated"), 0.0);
        assert!((value("hot_swap.first_delta_uncached") - 1250.0).abs() < 1e-6);
        assert!((value("hot_swap.first_delta_cached_p50") - 12.5).abs() < 1e-6);
        assert!((value("hot_swap.first_delta_cached_p99") - 40.0).abs() < 1e-6);
        assert!((value("hot_swap.first_delta_cached_max") - 0.8125).abs() < 1e-9);
        assert_eq!(value("hot_swap.rss_at_end"), 91000.0 * 1024.0);
        assert_eq!(figures["hot_swap.lost"].1, "deltas");
        assert!(reload_storm_figures("test result: ok").is_empty());
    }

    #[test]
    fn table_lines_up_figures_with_targets() {
        let lines = [
            r#"# 200 Pods of 5121 bytes"#,
            &Figure::new("crossing.noop.per_event", 1250.0, "ns")
                .against("crossing.native.per_event", 0.84)
                .to_json(),
            "| figure | value |",
            &Figure::new("decode.objects_per_second", 123456.7, "objects/s").to_json(),
            &Figure::new("cache_memory.kubeplug_vs_kube_rs", 0.61, "x").to_json(),
        ];
        let figures: Vec<Figure> = lines.iter().filter_map(|l| Figure::from_json(l)).collect();
        assert_eq!(figures.len(), 3);
        let table = table(&figures);
        let rows: Vec<&str> = table.lines().collect();
        assert_eq!(rows.len(), 4, "{table}");
        assert!(rows[0].starts_with("figure"));
        assert!(
            rows[1].contains("crossing.native.per_event")
                && rows[1].contains("0.840")
                && rows[1].contains("ratio ≥ 0.8")
                && rows[1].ends_with("yes"),
            "{table}"
        );
        assert!(
            rows[2].contains("123457") && !rows[2].contains("yes"),
            "{table}"
        );
        assert!(
            rows[3].contains("≤ 0.500") && rows[3].ends_with("NO"),
            "{table}"
        );
        // Values are right-aligned under the header's column.
        let value_end = |row: &str, value: &str| row.find(value).unwrap() + value.len();
        assert_eq!(value_end(rows[1], "1250"), value_end(rows[2], "123457"));
    }
}
