//! The key-value mixes: mix-50-50, read-only, write-only (440-byte values) and mix-70-30 (64-byte
//! values), GETs and SETs of uniformly chosen keys that were all ingested first.

use bytes::BytesMut;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{load_spec, Target, WorkloadOutcome};
use crate::args::Workload;
use crate::data::{key_name, record_value, MIX_VALUE_BYTES, RESTART_VALUE_BYTES, SCAN_RECORD_BYTES, SMALL_VALUE_BYTES};
use crate::error::BenchResult;
use crate::ingest::{ingest, set_records};
use crate::loadgen::{run_load, OperationSource};
use crate::protocol::encode_command;
use crate::record::Settings;

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
    let keys = settings.keys;
    let seed = settings.seed;
    let load = run_load(&spec, |connection| {
        Box::new(MixOperations {
            random: StdRng::seed_from_u64(seed.wrapping_add(connection)),
            keys,
            read_percent: read_percent(workload),
            value: record_value(connection, value_bytes),
        }) as Box<dyn OperationSource>
    })
    .await?;
    let mut outcome = WorkloadOutcome::default();
    outcome.add_load(&load);
    outcome.set("ingest_seconds", ingest_time.as_secs_f64());
    Ok(outcome)
}

struct MixOperations {
    random: StdRng,
    keys: u64,
    read_percent: u32,
    /// Written by every SET of this connection: the value's content does not matter to the
    /// server, and generating a fresh one per SET would spend the client's CPU, not the server's.
    value: Vec<u8>,
}

impl OperationSource for MixOperations {
    fn next_operation(&mut self, output: &mut BytesMut) -> usize {
        let key = key_name(self.random.gen_range(0..self.keys.max(1)));
        if self.random.gen_range(0..100) < self.read_percent {
            encode_command(&[b"GET".as_slice(), key.as_bytes()], output);
        } else {
            encode_command(&[b"SET".as_slice(), key.as_bytes(), &self.value], output);
        }
        1
    }
}
