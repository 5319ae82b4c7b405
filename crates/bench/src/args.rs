//! `hybridkv bench` options. Workload and option documentation lives here because clap turns it
//! into `--help`.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `hybridkv bench`: run a workload, or regenerate bench/RESULTS.md with `hybridkv bench report`.
#[derive(Debug, Clone, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub action: Option<BenchAction>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum BenchAction {
    /// Regenerate bench/RESULTS.md from bench/results/*.json (tables, plots) and bench/results/*.md
    /// (other tools' fragments, included verbatim); text outside the generated block is kept.
    Report(ReportArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct ReportArgs {
    /// Where the JSON results and markdown fragments are.
    #[arg(long, default_value = "bench/results")]
    pub results_dir: PathBuf,
    /// The file to regenerate.
    #[arg(long, default_value = "bench/RESULTS.md")]
    pub output: PathBuf,
}

#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// What to run (see the list below).
    #[arg(long, value_enum, default_value_t = Workload::Mix5050)]
    pub workload: Workload,
    /// Which server the harness starts, on a free port in a temporary directory.
    #[arg(long, value_enum, default_value_t = TargetKind::Hybridkv)]
    pub target: TargetKind,
    /// Use an already running server at HOST:PORT instead of starting one (no restarts possible:
    /// scan's first pass is then not COLD, and restart cannot run).
    #[arg(long, conflicts_with_all = ["compare", "matrix"])]
    pub addr: Option<String>,
    /// Run hybridkv and this target alternately (A B A B ...) and report per-round ratios:
    /// `redis`, or hybridkv on `--baseline-placement` (with the same flags otherwise).
    #[arg(long, value_enum)]
    pub compare: Option<CompareWith>,
    /// The placement `--compare placement` measures `--placement` against.
    #[arg(long, default_value = "dram/dram")]
    pub baseline_placement: Placement,
    /// Rounds of --compare (each round runs both targets once).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(3..=100))]
    pub rounds: u32,
    /// Run the workload on hybridkv over every placement index {dram,shmem,pmem} × data {dram,pmem,ssd}.
    #[arg(long, conflicts_with = "compare")]
    pub matrix: bool,
    /// hybridkv's placement INDEX/DATA: index ∈ dram|shmem|pmem, data ∈ dram|pmem|ssd.
    #[arg(long, default_value = "pmem/pmem")]
    pub placement: Placement,
    /// hybridkv's journal tier (pmem|ssd), used where records live in DRAM; the server's default otherwise.
    #[arg(long, value_enum)]
    pub journal: Option<JournalTier>,
    /// Durability of both targets: always (Redis appendfsync always), periodic (everysec), none (no AOF).
    #[arg(long, value_enum, default_value_t = Durability::Periodic)]
    pub durability: Durability,
    /// Client connections [default: 50 as redis-benchmark; 128 inbound streams for messaging]. scan reads over one connection.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub connections: Option<u64>,
    /// Operations sent per batch on each connection before its replies are awaited.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub pipeline: u64,
    /// Fixed offered load in operations/s over all connections (open loop; latency counted from
    /// each batch's scheduled send time). Without it the load is closed-loop.
    #[arg(long)]
    pub rate: Option<f64>,
    /// How the mixes choose keys: uniformly, or zipfian with theta 0.99 (scrambled, as YCSB).
    #[arg(long, value_enum, default_value_t = KeyDistribution::Uniform)]
    pub distribution: KeyDistribution,
    /// hybridkv's DRAM record cache in front of records on ssd or pmem (its `serve --cache`),
    /// e.g. 216MB or 64MiB; the server's default (256MiB) when not given.
    #[arg(long)]
    pub cache: Option<String>,
    /// hybridkv's data tier (its `serve --data-bytes`), e.g. 16GiB [default: 16GiB for messaging,
    /// which keeps every message of the run (at 40k inbound messages/s that is 300 MB/s); the
    /// server's default (4GiB) otherwise]. A run that fills it gets OOM replies, counted as errors.
    #[arg(long)]
    pub data_bytes: Option<String>,
    /// Records ingested before the measurement [default: 200000; 1000000 for mix-70-30 and restart].
    #[arg(long)]
    pub keys: Option<u64>,
    /// Warm-up before the measurement (operations not counted), e.g. 2s, 500ms.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    /// Length of the measurement, e.g. 20s.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Stop the measurement after this many operations instead of after --duration.
    #[arg(long)]
    pub ops: Option<u64>,
    /// restart: how the server is stopped before it is started again.
    #[arg(long, value_enum, default_value_t = StopMode::Clean)]
    pub stop: StopMode,
    /// restart against Redis: what Redis reloads, its append-only file or an RDB snapshot taken with SAVE.
    #[arg(long, value_enum, default_value_t = RedisRestartSource::Aof)]
    pub redis_restart_from: RedisRestartSource,
    /// restart: how many keys (chosen uniformly, or `all`) must be served before the restart counts as done.
    #[arg(long, default_value = "all")]
    pub verify_keys: VerifyKeys,
    /// Where the JSON result and plots are written.
    #[arg(long, default_value = "bench/results")]
    pub results_dir: PathBuf,
    /// Do not draw PNG plots.
    #[arg(long)]
    pub no_plots: bool,
    /// The hybridkv binary the harness starts.
    #[arg(long, default_value = "target/release/hybridkv")]
    pub hybridkv_binary: PathBuf,
    /// The redis-server binary [default: redis-server from PATH].
    #[arg(long)]
    pub redis_server: Option<PathBuf>,
    /// Seed of the key and value choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// 50% GET / 50% SET, 440-byte values, uniform keys (Aerospike on Optane). Reports ops/s and latency.
    #[value(name = "mix-50-50")]
    #[serde(rename = "mix-50-50")]
    Mix5050,
    /// 100% GET, 440-byte values, uniform keys.
    ReadOnly,
    /// 100% SET, 440-byte values, uniform keys.
    WriteOnly,
    /// 70% GET / 30% SET, 64-byte values, uniform keys (Aerospike on PMem 200).
    #[value(name = "mix-70-30")]
    #[serde(rename = "mix-70-30")]
    Mix7030,
    /// HL7-like messaging (IRIS T4): per inbound message (1–2 KB) store it and 4 transforms of it,
    /// 5 objects in one MULTI/EXEC; 128 inbound streams. Reports inbound messages/s and the
    /// server's journal writes/s from INFO.
    Messaging,
    /// One full pass over all records (SCAN + pipelined MGET) with a filter and an aggregate, COLD
    /// (right after a server restart; the OS page cache is not dropped) then WARM (again at once).
    Scan,
    /// Load the keys, stop the server (--stop clean|kill), start it again; reports the time until it
    /// answers PING and until every key (or --verify-keys N of them) is served with its value.
    Restart,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Mix5050 => "mix-50-50",
            Workload::ReadOnly => "read-only",
            Workload::WriteOnly => "write-only",
            Workload::Mix7030 => "mix-70-30",
            Workload::Messaging => "messaging",
            Workload::Scan => "scan",
            Workload::Restart => "restart",
        }
    }

    pub const ALL: [Workload; 7] = [
        Workload::Mix5050,
        Workload::ReadOnly,
        Workload::WriteOnly,
        Workload::Mix7030,
        Workload::Messaging,
        Workload::Scan,
        Workload::Restart,
    ];
}

impl fmt::Display for Workload {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.name())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TargetKind {
    Hybridkv,
    Redis,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CompareWith {
    Redis,
    Placement,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyDistribution {
    /// Every key equally likely.
    #[default]
    Uniform,
    /// Scrambled zipfian, theta 0.99: a small hot set takes most operations.
    Zipfian,
}

impl KeyDistribution {
    pub fn name(self) -> &'static str {
        match self {
            KeyDistribution::Uniform => "uniform",
            KeyDistribution::Zipfian => "zipfian 0.99",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Durability {
    Always,
    Periodic,
    None,
}

impl Durability {
    pub fn name(self) -> &'static str {
        match self {
            Durability::Always => "always",
            Durability::Periodic => "periodic",
            Durability::None => "none",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum JournalTier {
    Pmem,
    Ssd,
}

impl JournalTier {
    pub fn name(self) -> &'static str {
        match self {
            JournalTier::Pmem => "pmem",
            JournalTier::Ssd => "ssd",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopMode {
    /// SIGTERM, then wait for the process to exit.
    Clean,
    /// SIGKILL (kill -9): a crash.
    Kill,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RedisRestartSource {
    Aof,
    Rdb,
}

pub const INDEX_TIERS: [&str; 3] = ["dram", "shmem", "pmem"];
pub const DATA_TIERS: [&str; 3] = ["dram", "pmem", "ssd"];

/// A hybridkv placement: where the primary index and the records live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub index: &'static str,
    pub data: &'static str,
}

impl Placement {
    pub fn all() -> Vec<Placement> {
        INDEX_TIERS.iter().flat_map(|&index| DATA_TIERS.iter().map(move |&data| Placement { index, data })).collect()
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}/{}", self.index, self.data)
    }
}

impl FromStr for Placement {
    type Err = String;

    fn from_str(text: &str) -> Result<Placement, String> {
        let (index, data) = text.split_once('/').ok_or_else(|| format!("placement {text:?} is not INDEX/DATA"))?;
        let index = INDEX_TIERS.iter().find(|&&tier| tier == index).ok_or_else(|| format!("index tier {index:?} is not one of {INDEX_TIERS:?}"))?;
        let data = DATA_TIERS.iter().find(|&&tier| tier == data).ok_or_else(|| format!("data tier {data:?} is not one of {DATA_TIERS:?}"))?;
        Ok(Placement { index, data })
    }
}

/// How many keys the restart workload reads back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifyKeys {
    All,
    Sample(u64),
}

impl FromStr for VerifyKeys {
    type Err = String;

    fn from_str(text: &str) -> Result<VerifyKeys, String> {
        if text == "all" {
            return Ok(VerifyKeys::All);
        }
        match text.parse::<u64>() {
            Ok(count) if count > 0 => Ok(VerifyKeys::Sample(count)),
            _ => Err(format!("{text:?} is neither `all` nor a positive count")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placements_parse_and_cover_the_matrix() {
        assert_eq!("shmem/ssd".parse::<Placement>(), Ok(Placement { index: "shmem", data: "ssd" }));
        assert!("ssd/dram".parse::<Placement>().is_err());
        assert!("pmem".parse::<Placement>().is_err());
        assert_eq!(Placement::all().len(), INDEX_TIERS.len() * DATA_TIERS.len());
    }

    #[test]
    fn verify_keys_parse() {
        assert_eq!("all".parse::<VerifyKeys>(), Ok(VerifyKeys::All));
        assert_eq!("1000".parse::<VerifyKeys>(), Ok(VerifyKeys::Sample(1000)));
        assert!("0".parse::<VerifyKeys>().is_err());
        assert!("many".parse::<VerifyKeys>().is_err());
    }
}
