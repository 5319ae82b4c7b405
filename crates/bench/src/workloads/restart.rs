//! The restart workload (Aerospike fast restart): load the keys, stop the server (SIGTERM or
//! SIGKILL), start it on the same files, and time (1) until it answers PING and (2) until every
//! key — or a uniform sample of them — is served with its value. Both times run from the start
//! of the new process.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{Target, WorkloadOutcome};
use crate::connection::Connection;
use crate::data::{key_name, record_value, RESTART_VALUE_BYTES};
use crate::error::{BenchError, BenchResult};
use crate::ingest::{ingest, set_records};
use crate::protocol::Reply;
use crate::record::Settings;
use crate::servers::{RedisPersistence, ServerSpec};

/// Connections and MGET size of the read-back: enough to keep the server's 2 cores busy.
const VERIFY_CONNECTIONS: usize = 4;
const VERIFY_BATCH_KEYS: usize = 500;

pub async fn run(settings: &Settings, target: &mut Target) -> BenchResult<WorkloadOutcome> {
    let ingest_time = ingest(&target.address, settings.keys, "restart", set_records(|number| record_value(number, RESTART_VALUE_BYTES))).await?;
    let mut outcome = WorkloadOutcome::default();
    outcome.set("ingest_seconds", ingest_time.as_secs_f64());
    outcome.set("keys", settings.keys as f64);
    if let Some(server) = &target.server {
        outcome.notes.push(restart_source(server.spec()));
    }
    let ready_seconds = target.restart(settings.stop).await?;
    let verify_started = Instant::now();
    let sample = sample_keys(settings);
    let check = verify(&target.address, Arc::new(sample)).await?;
    outcome.set("ready_seconds", ready_seconds);
    outcome.set("served_seconds", ready_seconds + verify_started.elapsed().as_secs_f64());
    outcome.set("keys_verified", check.verified as f64);
    outcome.set("keys_missing", check.missing as f64);
    outcome.set("keys_wrong", check.wrong as f64);
    if check.missing + check.wrong > 0 {
        outcome.notes.push(format!("{} keys missing and {} with a wrong value after the restart", check.missing, check.wrong));
    }
    Ok(outcome)
}

fn restart_source(spec: &ServerSpec) -> String {
    match spec {
        ServerSpec::Redis { persistence: RedisPersistence::SnapshotOnSave, .. } => "Redis reloads an RDB snapshot taken with SAVE before the stop".into(),
        ServerSpec::Redis { .. } => "Redis reloads its append-only file".into(),
        ServerSpec::Hybridkv { .. } => "hybridkv reopens its index and records in place".into(),
    }
}

/// Every key number, or a uniform sample of `--verify-keys` of them.
fn sample_keys(settings: &Settings) -> Vec<u64> {
    match settings.verify_keys {
        Some(count) if count < settings.keys => {
            let mut random = StdRng::seed_from_u64(settings.seed);
            (0..count).map(|_| random.gen_range(0..settings.keys)).collect()
        }
        _ => (0..settings.keys).collect(),
    }
}

struct Check {
    verified: u64,
    missing: u64,
    wrong: u64,
}

struct SharedCheck {
    next_batch: AtomicUsize,
    verified: AtomicU64,
    missing: AtomicU64,
    wrong: AtomicU64,
}

async fn verify(address: &str, numbers: Arc<Vec<u64>>) -> BenchResult<Check> {
    let shared = Arc::new(SharedCheck { next_batch: AtomicUsize::new(0), verified: AtomicU64::new(0), missing: AtomicU64::new(0), wrong: AtomicU64::new(0) });
    let mut tasks = Vec::new();
    for _ in 0..VERIFY_CONNECTIONS {
        let connection = Connection::open(address).await?;
        tasks.push(tokio::spawn(verify_on(connection, numbers.clone(), shared.clone())));
    }
    for task in tasks {
        task.await.map_err(|join| BenchError::Verification(format!("a read-back task failed: {join}")))??;
    }
    Ok(Check { verified: shared.verified.load(Ordering::Relaxed), missing: shared.missing.load(Ordering::Relaxed), wrong: shared.wrong.load(Ordering::Relaxed) })
}

async fn verify_on(mut connection: Connection, numbers: Arc<Vec<u64>>, shared: Arc<SharedCheck>) -> BenchResult<()> {
    loop {
        let first = shared.next_batch.fetch_add(VERIFY_BATCH_KEYS, Ordering::Relaxed);
        let Some(batch) = numbers.get(first..(first + VERIFY_BATCH_KEYS).min(numbers.len())).filter(|batch| !batch.is_empty()) else {
            return Ok(());
        };
        let mut command = vec![String::from("MGET")];
        command.extend(batch.iter().map(|&number| key_name(number)));
        let Reply::Array(Some(values)) = connection.command(&command).await? else {
            return Err(BenchError::Protocol { address: connection.address().to_string(), detail: "MGET reply is not an array".into() });
        };
        for (&number, value) in batch.iter().zip(values) {
            let counter = match value {
                Reply::Bulk(Some(value)) if value == record_value(number, RESTART_VALUE_BYTES) => &shared.verified,
                Reply::Bulk(None) => &shared.missing,
                _ => &shared.wrong,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }
}
