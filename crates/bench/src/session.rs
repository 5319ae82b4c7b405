//! One `hybridkv bench` run: a single target, hybridkv against Redis in alternating rounds
//! (--compare), or hybridkv over every placement (--matrix). Servers are started fresh for each
//! measurement so no run inherits another's data or caches.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::args::{CompareWith, Placement, RedisRestartSource, RunArgs, TargetKind, VerifyKeys, Workload};
use crate::error::{BenchError, BenchResult};
use crate::record::{self, Machine, Measurement, RoundRatios, RunMode, RunRecord, Settings};
use crate::servers::{check_hybridkv_binary, find_redis_server, ManagedServer, RedisPersistence, ServerSpec};
use crate::workloads::{self, headline_metrics, value_bytes_for, MoreIs, Target};

/// redis-benchmark's default client count: the reference most readers know.
const CONNECTIONS_DEFAULT: u64 = 50;
/// The IRIS T4 test's 128 inbound interfaces.
const MESSAGING_STREAMS: u64 = 128;
const KEYS_DEFAULT: u64 = 200_000;
const KEYS_LARGE_DEFAULT: u64 = 1_000_000;
/// Messaging stores every message of the run: the server's default 4 GiB fills in about 12 s here.
const MESSAGING_DATA_BYTES: &str = "16GiB";

pub fn resolve_settings(args: &RunArgs) -> Settings {
    let workload = args.workload;
    let connections_default = match workload {
        Workload::Messaging => MESSAGING_STREAMS,
        _ => CONNECTIONS_DEFAULT,
    };
    let keys_default = match workload {
        Workload::Mix7030 | Workload::Restart => KEYS_LARGE_DEFAULT,
        _ => KEYS_DEFAULT,
    };
    Settings {
        connections: args.connections.unwrap_or(connections_default),
        pipeline: args.pipeline,
        rate_per_second: args.rate,
        keys: args.keys.unwrap_or(keys_default),
        value_bytes: value_bytes_for(workload) as u64,
        warmup_seconds: args.warmup.as_secs_f64(),
        duration_seconds: args.duration.as_secs_f64(),
        operations: args.ops,
        durability: args.durability,
        placement: args.placement.to_string(),
        journal: args.journal.map(|journal| journal.name().to_string()),
        stop: args.stop,
        redis_restart_from: args.redis_restart_from,
        verify_keys: match args.verify_keys {
            VerifyKeys::All => None,
            VerifyKeys::Sample(count) => Some(count),
        },
        seed: args.seed,
        distribution: args.distribution,
        cache: args.cache.clone(),
        data_bytes: args.data_bytes.clone().or_else(|| (workload == Workload::Messaging).then(|| MESSAGING_DATA_BYTES.to_string())),
        baseline_placement: (args.compare == Some(CompareWith::Placement)).then(|| args.baseline_placement.to_string()),
    }
}

pub struct Session<'a> {
    args: &'a RunArgs,
    settings: Settings,
    redis_binary: Option<PathBuf>,
}

impl<'a> Session<'a> {
    pub fn new(args: &'a RunArgs) -> BenchResult<Session<'a>> {
        let wants_redis = args.compare == Some(CompareWith::Redis) || (args.addr.is_none() && args.compare.is_none() && args.target == TargetKind::Redis);
        let wants_hybridkv = args.addr.is_none() && (args.compare.is_some() || args.matrix || args.target == TargetKind::Hybridkv);
        if wants_hybridkv {
            check_hybridkv_binary(&args.hybridkv_binary)?;
        }
        // Found even when not started, for the redis-server version in the machine description.
        let redis_binary = find_redis_server(args.redis_server.as_deref());
        let redis_binary = if wants_redis { Some(redis_binary?) } else { redis_binary.ok() };
        if args.workload == Workload::Restart && args.addr.is_some() {
            return Err(BenchError::InvalidArgument("restart stops and starts the server: use --target, not --addr".into()));
        }
        Ok(Session { args, settings: resolve_settings(args), redis_binary })
    }

    pub async fn run(&self) -> BenchResult<RunRecord> {
        let (mode, measurements, rounds) = if let Some(compare) = self.args.compare {
            let (measurements, rounds) = self.compare().await?;
            let mode = match compare {
                CompareWith::Redis => RunMode::Compare,
                CompareWith::Placement => RunMode::ComparePlacements,
            };
            (mode, measurements, rounds)
        } else if self.args.matrix {
            (RunMode::Matrix, self.matrix().await, Vec::new())
        } else {
            (RunMode::Single, vec![self.single().await?], Vec::new())
        };
        let median_ratios = medians(&rounds);
        let notes = error_warnings(&measurements);
        for note in &notes {
            eprintln!("warning: {note}");
        }
        Ok(RunRecord {
            timestamp_utc: record::timestamp_utc(),
            workload: self.args.workload,
            mode,
            command_line: record::command_line(),
            machine: Machine::describe(self.redis_binary.as_deref()),
            settings: self.settings.clone(),
            measurements,
            rounds,
            median_ratios,
            notes,
        })
    }

    async fn single(&self) -> BenchResult<Measurement> {
        match (&self.args.addr, self.args.target) {
            (Some(address), _) => self.measure(Target { address: address.clone(), server: None }, None).await,
            (None, TargetKind::Hybridkv) => self.measure_started(self.hybridkv_spec(&self.args.placement), None).await,
            (None, TargetKind::Redis) => self.measure_started(self.redis_spec()?, None).await,
        }
    }

    /// A B A B …: hybridkv then the baseline (Redis, or hybridkv on --baseline-placement) in each
    /// round, so drift on a shared machine hits both.
    async fn compare(&self) -> BenchResult<(Vec<Measurement>, Vec<RoundRatios>)> {
        let mut measurements = Vec::new();
        let mut rounds = Vec::new();
        for round in 1..=self.args.rounds {
            let ours = self.measure_started(self.hybridkv_spec(&self.args.placement), Some(round)).await?;
            let baseline = match self.args.compare {
                Some(CompareWith::Placement) => self.hybridkv_spec(&self.args.baseline_placement),
                _ => self.redis_spec()?,
            };
            let theirs = self.measure_started(baseline, Some(round)).await?;
            let ratios = ratios(self.args.workload, &ours, &theirs);
            eprintln!("round {round}/{}: {} ÷ {}: {}", self.args.rounds, ours.server, theirs.server, describe_ratios(&ratios));
            rounds.push(RoundRatios { round, ratios });
            measurements.extend([ours, theirs]);
        }
        Ok((measurements, rounds))
    }

    /// Every placement; one that fails is recorded with its error and the others still run.
    async fn matrix(&self) -> Vec<Measurement> {
        let mut measurements = Vec::new();
        for placement in Placement::all() {
            let spec = self.hybridkv_spec(&placement);
            let label = spec.label();
            match self.measure_started(spec, None).await {
                Ok(measurement) => measurements.push(measurement),
                Err(error) => {
                    eprintln!("{label}: failed: {error}");
                    measurements.push(failed_measurement(&placement, label, &error));
                }
            }
        }
        measurements
    }

    async fn measure_started(&self, spec: ServerSpec, round: Option<u32>) -> BenchResult<Measurement> {
        eprintln!("starting {}", spec.label());
        let server = ManagedServer::start(spec).await?;
        let target = Target { address: server.address(), server: Some(server) };
        self.measure(target, round).await
    }

    async fn measure(&self, mut target: Target, round: Option<u32>) -> BenchResult<Measurement> {
        let server = target.label();
        eprintln!("{}: {server}", self.args.workload);
        let mut outcome = workloads::run(self.args.workload, &self.settings, &mut target).await?;
        // Other people's builds and tests share these 2 cores: the load says how quiet it was.
        if let Some(load) = load_average_one_minute() {
            outcome.set("machine_load_average_1m", load);
        }
        let placement = target.server.as_ref().and_then(|server| match server.spec() {
            ServerSpec::Hybridkv { placement, .. } => Some(placement.to_string()),
            ServerSpec::Redis { .. } => None,
        });
        Ok(Measurement { target: target.name().to_string(), server, placement, round, metrics: outcome.metrics, latency: outcome.latency, notes: outcome.notes })
    }

    fn hybridkv_spec(&self, placement: &Placement) -> ServerSpec {
        ServerSpec::Hybridkv {
            binary: self.args.hybridkv_binary.clone(),
            placement: placement.clone(),
            journal: self.args.journal,
            durability: self.args.durability,
            cache: self.args.cache.clone(),
            data_bytes: self.settings.data_bytes.clone(),
        }
    }

    fn redis_spec(&self) -> BenchResult<ServerSpec> {
        let binary = self.redis_binary.clone().ok_or_else(|| BenchError::RedisServerMissing { searched: "PATH".into() })?;
        let persistence = if self.args.workload == Workload::Restart && self.args.redis_restart_from == RedisRestartSource::Rdb {
            RedisPersistence::SnapshotOnSave
        } else {
            RedisPersistence::matching(self.args.durability)
        };
        Ok(ServerSpec::Redis { binary, persistence })
    }
}

/// The first field of /proc/loadavg: runnable tasks averaged over the last minute.
fn load_average_one_minute() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

fn failed_measurement(placement: &Placement, server: String, error: &BenchError) -> Measurement {
    Measurement {
        target: "hybridkv".into(),
        server,
        placement: Some(placement.to_string()),
        round: None,
        metrics: BTreeMap::new(),
        latency: None,
        notes: vec![format!("failed: {error}")],
    }
}

/// Per headline metric, how many times better hybridkv did (> 1 = hybridkv better).
pub fn ratios(workload: Workload, ours: &Measurement, theirs: &Measurement) -> BTreeMap<String, f64> {
    headline_metrics(workload)
        .iter()
        .filter_map(|&(name, more_is)| {
            let (ours, theirs) = (*ours.metrics.get(name)?, *theirs.metrics.get(name)?);
            let ratio = match more_is {
                MoreIs::Better => ours / theirs,
                MoreIs::Worse => theirs / ours,
            };
            ratio.is_finite().then(|| (name.to_string(), ratio))
        })
        .collect()
}

fn medians(rounds: &[RoundRatios]) -> BTreeMap<String, f64> {
    let names: Vec<&String> = rounds.first().map(|round| round.ratios.keys().collect()).unwrap_or_default();
    names
        .into_iter()
        .filter_map(|name| {
            let values: Vec<f64> = rounds.iter().filter_map(|round| round.ratios.get(name).copied()).collect();
            median(values).map(|value| (name.clone(), value))
        })
        .collect()
}

pub fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    Some(if values.len().is_multiple_of(2) { (values[middle - 1] + values[middle]) / 2.0 } else { values[middle] })
}

fn describe_ratios(ratios: &BTreeMap<String, f64>) -> String {
    ratios.iter().map(|(name, ratio)| format!("{name} {ratio:.2}×")).collect::<Vec<_>>().join(", ")
}

/// A measurement with error replies counted them as operations (a fast `-OOM` counts like a
/// stored message): its throughput, and any ratio taken from it, measure the errors.
fn error_warnings(measurements: &[Measurement]) -> Vec<String> {
    measurements
        .iter()
        .filter_map(|measurement| {
            let errors = measurement.metrics.get("errors").copied().unwrap_or(0.0);
            (errors > 0.0).then(|| {
                let round = measurement.round.map_or_else(String::new, |round| format!("round {round}, "));
                format!("NOT A VALID MEASUREMENT: {round}{} answered {errors} error replies, counted as operations in its throughput and ratios", measurement.server)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(Vec::new()), None);
    }

    fn measurement(metrics: &[(&str, f64)]) -> Measurement {
        Measurement {
            target: String::new(),
            server: "hybridkv pmem/pmem".into(),
            placement: None,
            round: Some(2),
            metrics: metrics.iter().map(|&(name, value)| (name.to_string(), value)).collect(),
            latency: None,
            notes: Vec::new(),
        }
    }

    #[test]
    fn measurements_with_error_replies_are_called_invalid() {
        let warnings = error_warnings(&[measurement(&[("errors", 0.0)]), measurement(&[("errors", 18488.0)])]);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].starts_with("NOT A VALID MEASUREMENT: round 2, hybridkv pmem/pmem answered 18488"), "{}", warnings[0]);
    }

    #[test]
    fn ratios_favour_hybridkv_when_above_one() {
        let throughput = ratios(Workload::Mix5050, &measurement(&[("ops_per_second", 200.0)]), &measurement(&[("ops_per_second", 100.0)]));
        assert_eq!(throughput.get("ops_per_second"), Some(&2.0));
        let restart = ratios(Workload::Restart, &measurement(&[("ready_seconds", 0.5), ("served_seconds", 1.0)]), &measurement(&[("ready_seconds", 10.0), ("served_seconds", 12.0)]));
        assert_eq!(restart.get("ready_seconds"), Some(&20.0));
        assert_eq!(restart.get("served_seconds"), Some(&12.0));
    }
}
