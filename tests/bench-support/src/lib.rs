//! What kubeplug's benchmarks share, so every bench reports the same way:
//!
//! - [`pod_json`]: the generated 5–6 KB Pod (managedFields included) of the pipeline, decoding
//!   and cache-memory benches, so their figures are about the same objects;
//! - [`Figure`]: the one JSON line per figure that `cargo xtask bench` collects;
//! - [`Run`]: a full `cargo bench` run or a `cargo test` smoke run, and the size knobs
//!   (`KUBEPLUG_BENCH_*`) that apply in a full run;
//! - [`median`], [`rss_bytes`], [`peak_rss_bytes`], [`cpu_time`].

mod pod;

pub use pod::pod_json;

/// One measured figure, printed as one JSON line on stdout:
/// `{"figure":"pipeline.steady_state","value":..,"unit":"deltas/s","baseline":null,"ratio":null}`.
///
/// `figure` is `<bench>.<what>`, unique across benches: `cargo xtask bench` keys its targets
/// by it. `baseline` names the figure this one is compared with, measured in the same
/// process or run; `ratio` is then this one's throughput over the baseline's for speeds
/// (higher is better) and this one's size over the baseline's for memory (lower is better).
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// `<bench>.<what>`.
    pub figure: String,
    /// The measurement, usually a median.
    pub value: f64,
    /// Its unit: `deltas/s`, `ns`, `bytes`, `ratio`…
    pub unit: String,
    /// The figure this one is compared with, if any.
    pub baseline: Option<String>,
    /// This one against `baseline` (see the type's documentation for the direction).
    pub ratio: Option<f64>,
}

impl Figure {
    /// A figure without a baseline.
    pub fn new(figure: impl Into<String>, value: f64, unit: impl Into<String>) -> Self {
        Self {
            figure: figure.into(),
            value,
            unit: unit.into(),
            baseline: None,
            ratio: None,
        }
    }

    /// Compares this figure with `baseline`, whose ratio is `ratio`.
    pub fn against(mut self, baseline: impl Into<String>, ratio: f64) -> Self {
        self.baseline = Some(baseline.into());
        self.ratio = Some(ratio);
        self
    }

    /// The JSON line, without its newline.
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "figure": self.figure,
            "value": self.value,
            "unit": self.unit,
            "baseline": self.baseline,
            "ratio": self.ratio,
        })
        .to_string()
    }

    /// The figure a bench printed as `line`, or `None` when the line is something else (a
    /// table row, a comment, another JSON object).
    pub fn from_json(line: &str) -> Option<Self> {
        let line = line.trim();
        if !line.starts_with('{') {
            return None;
        }
        let object: serde_json::Value = serde_json::from_str(line).ok()?;
        Some(Self {
            figure: object.get("figure")?.as_str()?.to_owned(),
            value: object.get("value")?.as_f64()?,
            unit: object.get("unit")?.as_str()?.to_owned(),
            baseline: object
                .get("baseline")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned),
            ratio: object.get("ratio").and_then(serde_json::Value::as_f64),
        })
    }

    /// Prints the JSON line on stdout.
    #[allow(clippy::print_stdout)] // Reporting on stdout is what a figure is for.
    pub fn print(&self) {
        println!("{}", self.to_json());
    }
}

/// How a bench binary was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Run {
    /// `cargo bench` (which passes `--bench`): full sizes unless a knob says otherwise.
    Full,
    /// `cargo test` runs bench targets with `test = true` without `--bench`: tiny sizes, an
    /// unoptimised build, figures that mean nothing; it only proves the bench still works.
    Smoke,
}

impl Run {
    /// `Full` when started with `--bench`, `Smoke` otherwise.
    pub fn from_args() -> Self {
        if std::env::args().any(|arg| arg == "--bench") {
            Self::Full
        } else {
            Self::Smoke
        }
    }

    /// The environment variable `name` (a positive integer) in a full run, else `full`; in a
    /// smoke run always `smoke`.
    pub fn size(self, name: &str, full: usize, smoke: usize) -> usize {
        match self {
            Self::Smoke => smoke,
            Self::Full => std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|&v: &usize| v > 0)
                .unwrap_or(full),
        }
    }

    /// The environment variable `name` (comma-separated positive integers) in a full run,
    /// else `full`; in a smoke run always `smoke`. For a bench measured at several sizes.
    pub fn sizes(self, name: &str, full: &[usize], smoke: &[usize]) -> Vec<usize> {
        let from_env = || {
            let text = std::env::var(name).ok()?;
            text.split(',')
                .map(|n| n.trim().parse().ok().filter(|&n: &usize| n > 0))
                .collect::<Option<Vec<usize>>>()
                .filter(|sizes| !sizes.is_empty())
        };
        match self {
            Self::Smoke => smoke.to_vec(),
            Self::Full => from_env().unwrap_or_else(|| full.to_vec()),
        }
    }

    /// Repetitions of each measurement (`KUBEPLUG_BENCH_REPETITIONS`, default 5; 1 in a smoke
    /// run). Figures are the median.
    pub fn repetitions(self) -> usize {
        self.size("KUBEPLUG_BENCH_REPETITIONS", 5, 1)
    }
}

/// The median of `samples` (the mean of the two middle ones for an even count).
///
/// # Panics
/// If `samples` is empty.
pub fn median(mut samples: Vec<f64>) -> f64 {
    assert!(!samples.is_empty(), "a median of no samples");
    samples.sort_by(f64::total_cmp);
    let mid = samples.len() / 2;
    if samples.len().is_multiple_of(2) {
        (samples[mid - 1] + samples[mid]) / 2.0
    } else {
        samples[mid]
    }
}

/// The process's resident set size now, from `/proc/self/statm` (0 where there is none).
pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// The process's peak resident set size so far (`VmHWM`; 0 where there is none).
pub fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// The CPU time process `pid` has used so far, user and system, its threads (also those that
/// ended) included, from `/proc/<pid>/stat`; `None` where there is none. Resolution: one
/// clock tick (`getconf CLK_TCK`, usually 10 ms).
pub fn cpu_time(pid: u32) -> Option<std::time::Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, field 2, is in parentheses and may hold spaces: count from after it.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // utime and stime are fields 14 and 15; `fields[0]` is field 3.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let per_second = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| {
            String::from_utf8(out.stdout)
                .ok()?
                .trim()
                .parse::<u64>()
                .ok()
        })
        .filter(|&hz| hz > 0)
        .unwrap_or(100);
    Some(std::time::Duration::from_secs_f64(
        ticks as f64 / per_second as f64,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_grows_with_work_done() {
        let before = cpu_time(std::process::id()).unwrap();
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < std::time::Duration::from_millis(100) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let after = cpu_time(std::process::id()).unwrap();
        assert!(after > before, "{before:?} then {after:?}");
        assert_eq!(cpu_time(u32::MAX), None);
    }

    #[test]
    fn figure_line_has_the_collected_shape() {
        let line = Figure::new("crossing.noop.per_event", 812.5, "ns")
            .against("crossing.native.per_event", 0.5)
            .to_json();
        let parsed: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(parsed["figure"], "crossing.noop.per_event");
        assert_eq!(parsed["value"], 812.5);
        assert_eq!(parsed["unit"], "ns");
        assert_eq!(parsed["baseline"], "crossing.native.per_event");
        assert_eq!(parsed["ratio"], 0.5);
        let plain: serde_json::Value =
            serde_json::from_str(&Figure::new("a.b", 1.0, "s").to_json()).unwrap();
        assert!(plain["baseline"].is_null() && plain["ratio"].is_null());
    }

    #[test]
    fn figure_lines_read_back_and_other_lines_do_not() {
        let figure = Figure::new("pipeline.cache_bytes_per_object", 3100.0, "bytes")
            .against("pipeline.cached_json_bytes_per_object", 1.1);
        assert_eq!(Figure::from_json(&figure.to_json()), Some(figure));
        let plain = Figure::new("decode.objects_per_second", 1e5, "objects/s");
        assert_eq!(Figure::from_json(&plain.to_json()), Some(plain));
        for other in [
            "| figure | value |",
            "",
            "# 10 Pods",
            r#"{"phase":"kube-rs"}"#,
            "{",
        ] {
            assert_eq!(Figure::from_json(other), None, "{other:?}");
        }
    }

    #[test]
    fn smoke_runs_ignore_size_lists() {
        assert_eq!(
            Run::Smoke.sizes("KUBEPLUG_BENCH_NO_SUCH_KNOB", &[10, 100], &[2]),
            [2]
        );
        assert_eq!(
            Run::Full.sizes("KUBEPLUG_BENCH_NO_SUCH_KNOB", &[10, 100], &[2]),
            [10, 100]
        );
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn generated_pods_are_five_to_six_kilobytes_of_valid_json() {
        for i in [0, 1, 99_999] {
            let json = pod_json(i);
            assert!((5_000..6_500).contains(&json.len()), "{} bytes", json.len());
            let pod: serde_json::Value = serde_json::from_str(&json).unwrap();
            assert_eq!(
                pod["metadata"]["managedFields"].as_array().unwrap().len(),
                4
            );
        }
    }
}
