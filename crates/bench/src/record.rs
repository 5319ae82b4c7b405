//! What a run writes: one JSON file per run with the machine, the exact command line, the
//! parameters and every measurement. `hybridkv bench report` reads these files back.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::args::{Durability, KeyDistribution, RedisRestartSource, StopMode, Workload};
use crate::error::{BenchError, BenchResult};

/// Points of the latency percentile curve kept in the JSON (and drawn in the plots).
const CURVE_PERCENTILES: [f64; 12] = [0.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 100.0];
const NANOSECONDS_PER_MICROSECOND: f64 = 1_000.0;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunRecord {
    pub timestamp_utc: String,
    pub workload: Workload,
    pub mode: RunMode,
    pub command_line: String,
    pub machine: Machine,
    pub settings: Settings,
    pub measurements: Vec<Measurement>,
    /// --compare only: each round's ratios (hybridkv better when > 1) and their medians.
    pub rounds: Vec<RoundRatios>,
    pub median_ratios: BTreeMap<String, f64>,
    pub notes: Vec<String>,
}

impl RunRecord {
    /// In a comparison, whether `measurement` is of the baseline (Redis, or hybridkv on the
    /// baseline placement) rather than of the hybridkv placement under test.
    pub fn is_baseline(&self, measurement: &Measurement) -> bool {
        match self.mode {
            RunMode::Compare => measurement.target != "hybridkv",
            RunMode::ComparePlacements => measurement.placement.as_deref() != Some(self.settings.placement.as_str()),
            RunMode::Single | RunMode::Matrix => false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunMode {
    Single,
    Compare,
    /// --compare placement: hybridkv on --placement against hybridkv on --baseline-placement.
    ComparePlacements,
    Matrix,
}

/// The parameters a run actually used (defaults resolved).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Settings {
    pub connections: u64,
    pub pipeline: u64,
    pub rate_per_second: Option<f64>,
    pub keys: u64,
    pub value_bytes: u64,
    pub warmup_seconds: f64,
    pub duration_seconds: f64,
    pub operations: Option<u64>,
    pub durability: Durability,
    pub placement: String,
    pub journal: Option<String>,
    pub stop: StopMode,
    pub redis_restart_from: RedisRestartSource,
    /// Keys the restart workload reads back; `None` = all of them.
    pub verify_keys: Option<u64>,
    pub seed: u64,
    /// Results written before these fields existed were uniform, with the server's default cache.
    #[serde(default)]
    pub distribution: KeyDistribution,
    #[serde(default)]
    pub cache: Option<String>,
    /// hybridkv's `--data-bytes`; `None`: the server's default.
    #[serde(default)]
    pub data_bytes: Option<String>,
    /// --compare placement only.
    #[serde(default)]
    pub baseline_placement: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Measurement {
    /// `hybridkv`, `redis`, or `external` (--addr).
    pub target: String,
    /// How the server was configured, e.g. "redis appendfsync always".
    pub server: String,
    pub placement: Option<String>,
    pub round: Option<u32>,
    /// Named figures; the names are listed in docs/BENCHMARKS.md.
    pub metrics: BTreeMap<String, f64>,
    pub latency: Option<LatencySummary>,
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LatencySummary {
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    /// (percentile, latency in µs) pairs.
    pub curve: Vec<(f64, f64)>,
}

impl LatencySummary {
    pub fn from_histogram(histogram: &Histogram<u64>) -> LatencySummary {
        let at = |percentile: f64| histogram.value_at_percentile(percentile) as f64 / NANOSECONDS_PER_MICROSECOND;
        LatencySummary {
            mean_us: histogram.mean() / NANOSECONDS_PER_MICROSECOND,
            p50_us: at(50.0),
            p90_us: at(90.0),
            p99_us: at(99.0),
            p999_us: at(99.9),
            max_us: histogram.max() as f64 / NANOSECONDS_PER_MICROSECOND,
            curve: CURVE_PERCENTILES.iter().map(|&percentile| (percentile, at(percentile))).collect(),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RoundRatios {
    pub round: u32,
    pub ratios: BTreeMap<String, f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Machine {
    pub processors: usize,
    pub memory_bytes: u64,
    pub kernel: String,
    pub cpu_model: String,
    pub git_commit: String,
    pub redis_version: String,
}

impl Machine {
    pub fn describe(redis_server: Option<&Path>) -> Machine {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        let meminfo = read("/proc/meminfo");
        let memory_kibibytes = field_after(&meminfo, "MemTotal:").and_then(|text| text.split_whitespace().next()?.parse::<u64>().ok());
        Machine {
            processors: std::thread::available_parallelism().map_or(1, |count| count.get()),
            memory_bytes: memory_kibibytes.unwrap_or(0) * 1024,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            cpu_model: field_after(&read("/proc/cpuinfo"), "model name").map(|text| text.trim_start_matches([' ', '\t', ':']).to_string()).unwrap_or_default(),
            git_commit: command_output("git", &["rev-parse", "--short", "HEAD"]),
            redis_version: redis_server.map(|binary| command_output(&binary.display().to_string(), &["--version"])).unwrap_or_default(),
        }
    }
}

fn field_after<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find_map(|line| line.strip_prefix(name)).map(str::trim)
}

fn command_output(program: &str, arguments: &[&str]) -> String {
    std::process::Command::new(program)
        .args(arguments)
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The command line as typed, quoted where a shell would need it.
pub fn command_line() -> String {
    std::env::args()
        .map(|argument| {
            if !argument.is_empty() && argument.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c)) {
                argument
            } else {
                format!("'{}'", argument.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn timestamp_utc() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// Writes `record` as `<directory>/<timestamp>-<workload>.json` and returns the path.
pub fn save(record: &RunRecord, directory: &Path) -> BenchResult<PathBuf> {
    std::fs::create_dir_all(directory).map_err(BenchError::io(format!("creating {}", directory.display())))?;
    let stem = format!("{}-{}", record.timestamp_utc.replace(':', "-"), record.workload);
    let path = (0..)
        .map(|attempt| directory.join(if attempt == 0 { format!("{stem}.json") } else { format!("{stem}-{attempt}.json") }))
        .find(|candidate| !candidate.exists())
        .unwrap_or_else(|| directory.join(format!("{stem}.json")));
    let text = serde_json::to_string_pretty(record).map_err(|error| BenchError::Results(error.to_string()))?;
    std::fs::write(&path, text + "\n").map_err(BenchError::io(format!("writing {}", path.display())))?;
    Ok(path)
}

pub fn load(path: &Path) -> BenchResult<RunRecord> {
    let text = std::fs::read_to_string(path).map_err(BenchError::io(format!("reading {}", path.display())))?;
    serde_json::from_str(&text).map_err(|error| BenchError::Results(format!("{}: {error}", path.display())))
}
