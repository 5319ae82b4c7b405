//! The key-value mixes: mix-50-50, read-only, write-only (440-byte values) and mix-70-30 (64-byte
//! values), GETs and SETs of keys that were all ingested first, chosen uniformly or zipfian. The
//! server's record-cache hits and misses during the measurement give its hit ratio.

use bytes::BytesMut;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::server_counters::CounterSet;
use super::{load_spec, Target, WorkloadOutcome};
use crate::args::{KeyDistribution, Workload};
use crate::data::{key_name, record_value, MIX_VALUE_BYTES, RESTART_VALUE_BYTES, SCAN_RECORD_BYTES, SMALL_VALUE_BYTES};
use crate::error::BenchResult;
use crate::ingest::{ingest, set_records};
use crate::loadgen::{run_load, OperationSource};
use crate::protocol::encode_command;
use crate::record::Settings;
use crate::zipfian::{Zipfian, ZIPFIAN_THETA_DEFAULT};

/// Percent of operations that are GETs.
fn read_percent(workload: Workload) -> u32 {
    match workload {
        Workload::Mix5050 => 50,
        Workload::ReadOnly => 100,
        Workload::WriteOnly => 0,
        _ => 70,
    }
}

/// The value size each workload stores (messaging stores 1–2 KB messages instead).
pub fn value_bytes_for(workload: Workload) -> usize {
    match workload {
        Workload::Mix7030 => SMALL_VALUE_BYTES,
        Workload::Restart => RESTART_VALUE_BYTES,
        Workload::Scan => SCAN_RECORD_BYTES,
        _ => MIX_VALUE_BYTES,
    }
}

pub async fn run(workload: Workload, settings: &Settings, target: &mut Target) -> BenchResult<WorkloadOutcome> {
    let value_bytes = value_bytes_for(workload);
    let ingest_time = ingest(&target.address, settings.keys, workload.name(), set_records(move |number| record_value(number, value_bytes))).await?;
    let spec = load_spec(settings, &target.address);
    let keys = settings.keys.max(1);
    let seed = settings.seed;
    let choice = match settings.distribution {
        KeyDistribution::Uniform => KeyChoice::Uniform { keys },
        KeyDistribution::Zipfian => KeyChoice::Zipfian(Zipfian::new(keys.max(2), ZIPFIAN_THETA_DEFAULT)),
    };
    let operations = |connection| {
        Box::new(MixOperations {
            random: StdRng::seed_from_u64(seed.wrapping_add(connection)),
            choice,
            read_percent: read_percent(workload),
            value: record_value(connection, value_bytes),
        }) as Box<dyn OperationSource>
    };
    let (load, cache_at_start, cache_at_end) = CACHE_COUNTERS.around_load(&target.address, spec.warmup, run_load(&spec, operations)).await?;
    let mut outcome = WorkloadOutcome::default();
    outcome.add_load(&load);
    outcome.set("ingest_seconds", ingest_time.as_secs_f64());
    if let (Some(hits), Some(misses)) = (cache_at_end.growth_since(&cache_at_start, 0), cache_at_end.growth_since(&cache_at_start, 1)) {
        if hits + misses > 0 {
            outcome.set("cache_hit_percent", hits as f64 * 100.0 / (hits + misses) as f64);
        }
    }
    Ok(outcome)
}

/// hybridkv's record-cache lookups (records on ssd or DAX pmem; none for records in DRAM).
const CACHE_COUNTERS: CounterSet = CounterSet { section: "memory", suffixes: &["_cache_hits", "_cache_misses"] };

#[derive(Clone, Copy)]
enum KeyChoice {
    Uniform { keys: u64 },
    Zipfian(Zipfian),
}

impl KeyChoice {
    fn next(&self, random: &mut StdRng) -> u64 {
        match self {
            KeyChoice::Uniform { keys } => random.gen_range(0..*keys),
            KeyChoice::Zipfian(zipfian) => zipfian.sample(random),
        }
    }
}

struct MixOperations {
    random: StdRng,
    choice: KeyChoice,
    read_percent: u32,
    /// Written by every SET of this connection: the value's content does not matter to the
    /// server, and generating a fresh one per SET would spend the client's CPU, not the server's.
    value: Vec<u8>,
}

impl OperationSource for MixOperations {
    fn next_operation(&mut self, output: &mut BytesMut) -> usize {
        let key = key_name(self.choice.next(&mut self.random));
        if self.random.gen_range(0..100) < self.read_percent {
            encode_command(&[b"GET".as_slice(), key.as_bytes()], output);
        } else {
            encode_command(&[b"SET".as_slice(), key.as_bytes(), &self.value], output);
        }
        1
    }
}
