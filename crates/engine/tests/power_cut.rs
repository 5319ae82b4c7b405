//! Power cuts at random points of a random workload with durability `always`, on the simulated
//! medium (unflushed bytes dropped or torn at 8 bytes for regions and 4 KiB for blocks). After
//! recovery: every acknowledged write is there with its latest acknowledged value, no damaged
//! record is served, the index and the records agree (scan, get and key count), and the
//! operation cut in flight — a batch included — is applied entirely or not at all.
//!
//! The simulated medium also reorders: each unflushed 8-byte store (region) or 4-KiB page (block
//! file) independently holds, after the cut, its durable value, its last value or any value it
//! held in between; a cut inside a persist leaves any subset of its range durable. For half of
//! the seeds pmem regions report the msync fallback, so a pmem index checkpoints through its
//! whole-region path (one persist of the table heap, then one of the directory).
//!
//! Some operations put a key with 13 to 40 parts, which all live in the key's index partition:
//! more entries than a fresh partition table takes, so partitions grow, and on pmem a grown table
//! is named in the directory only at the next checkpoint — the step whose ordering a cut tests.
//!
//! One seed is one run (a placement, a workload, a first life, a cut point); a failing seed prints
//! the command that replays it. At scale:
//!
//! ```text
//! HYBRIDKV_POWER_CUTS=100000 HYBRIDKV_POWER_CUT_FIRST_SEED=1000000 \
//!     cargo test --release -p hybridkv-engine --test power_cut -- --nocapture
//! ```
//!
//! `HYBRIDKV_POWER_CUTS` sets the number of seeds (default 1000, what the test command runs),
//! `HYBRIDKV_POWER_CUT_FIRST_SEED` the first (default 0), `HYBRIDKV_POWER_CUT_SEED` replays one.

mod common;

use common::workload::*;
use common::*;
use hybridkv_engine::{Database, EngineError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Engine operations of the life that meets the cut.
const OPERATIONS_PER_RUN: usize = 80;
/// Media operations per engine operation, roughly: the cut lands anywhere in the run.
const MEDIA_OPERATIONS_PER_OPERATION: u64 = 6;

/// Share of operations that put one key with parts instead of the common workload's writes.
const PUT_WITH_PARTS_SHARE: f64 = 0.15;
/// Parts of such a put: more than a fresh table of 16 slots takes at 90% load, so its partition grows.
const PARTS_PER_PUT: std::ops::Range<u32> = 13..41;

/// How often a long campaign reports its progress.
const PROGRESS_EVERY_SEEDS: u64 = 1000;

/// What one run met: whether the cut landed inside the workload (rather than after it).
struct RunOutcome {
    cut_in_workload: bool,
    acknowledged_operations: usize,
}

fn run(seed: u64) -> RunOutcome {
    let mut rng = StdRng::seed_from_u64(seed);
    let SimRun { index, data, store, provider, config } = random_sim_run(&mut rng, seed);
    let mut model = Model::new();
    // A first life, closed cleanly or crashed, so that the cut also meets recovered state.
    let database = Database::open_with(config.clone(), provider.clone()).unwrap();
    for _ in 0..rng.gen_range(0..OPERATIONS_PER_RUN) {
        let (operation, parts) = random_step(&mut rng);
        apply_step(&database, &operation, parts).unwrap();
        model = applied(&model, &operation);
    }
    if rng.gen_bool(0.5) {
        database.close().unwrap();
    } else {
        store.freeze();
        drop(database);
        store.crash_process();
    }
    let database = Database::open_with(config.clone(), provider.clone()).unwrap();
    let window = OPERATIONS_PER_RUN as u64 * MEDIA_OPERATIONS_PER_OPERATION;
    store.cut_power_at(store.operations() + rng.gen_range(1..=window));
    let mut in_flight: Option<Operation> = None;
    let mut acknowledged_operations = 0;
    for step in 0..OPERATIONS_PER_RUN {
        let (operation, parts) = random_step(&mut rng);
        let result = if step % 10 == 9 { database.run_maintenance_once() } else { Ok(()) };
        let result = result.and_then(|()| apply_step(&database, &operation, parts));
        match result {
            Ok(()) => {
                model = applied(&model, &operation);
                acknowledged_operations += 1;
            }
            Err(_) => {
                assert!(store.is_frozen(), "seed {seed}: an operation failed without a power cut");
                in_flight = Some(operation);
                break;
            }
        }
    }
    store.freeze();
    drop(database);
    store.power_cut();
    let database = Database::open_with(config.clone(), provider.clone())
        .unwrap_or_else(|error| panic!("seed {seed} ({index}/{data}): reopen failed: {error}"));
    let context = format!("seed {seed} ({index}/{data}, pmem {})", store.pmem_durability());
    let state = state_of(&database, &context);
    assert_parts_match_values(&database, &state, &context);
    let with_in_flight = in_flight.as_ref().map(|operation| applied(&model, operation));
    assert!(
        state == model || Some(&state) == with_in_flight.as_ref(),
        "{context} ({:?}): recovered state is neither the acknowledged one nor it plus the whole operation in flight\nin flight: {:?}\nmissing or changed: {:?}",
        database.restart_reports()[0].kind,
        in_flight.as_ref().map(|op| op.iter().map(|(k, v)| (String::from_utf8_lossy(k).into_owned(), v.as_ref().map(|v| v.len()))).collect::<Vec<_>>()),
        differences(&model, &state),
    );
    // The recovered database takes writes and keeps them across a clean restart.
    let operation = random_operation(&mut rng);
    apply(&database, &operation).unwrap();
    let expected = applied(&state, &operation);
    database.close().unwrap();
    let database = Database::open_with(config, provider).unwrap();
    assert_eq!(state_of(&database, &context), expected, "{context}: lost after a clean restart");
    assert_parts_match_values(&database, &expected, &context);
    RunOutcome { cut_in_workload: in_flight.is_some(), acknowledged_operations }
}

/// An operation of the common workload (no parts), or a put of one key with parts.
fn random_step(rng: &mut StdRng) -> (Operation, u32) {
    if !rng.gen_bool(PUT_WITH_PARTS_SHARE) {
        return (random_operation(rng), 0);
    }
    let parts = rng.gen_range(PARTS_PER_PUT);
    let value = format!("p{parts}:{}:", rng.gen::<u64>()).into_bytes();
    (vec![(key(rng.gen_range(0..WORKLOAD_KEYS)), Some(value))], parts)
}

/// Applies a step of `random_step`: a put with parts is one transaction (replacing the key's
/// parts), so a cut applies all of it or none.
fn apply_step(database: &Database, operation: &Operation, parts: u32) -> Result<(), EngineError> {
    if parts == 0 {
        return apply(database, operation);
    }
    let [(key, Some(value))] = operation.as_slice() else { unreachable!("a put with parts is one put") };
    database.namespace(0).unwrap().transaction(&[key], |transaction| {
        transaction.put(key, value, expiry_of(value))?;
        (0..parts).try_for_each(|number| transaction.put_part(key, number, part_value(value, number)))
    })
}

fn part_value(value: &[u8], number: u32) -> Vec<u8> {
    [format!("{number}/").as_bytes(), value].concat()
}

/// Parts a value says its key has: those of `random_step`'s puts with parts ("p<parts>:..."),
/// none for the common workload's values ("v...").
fn parts_of_value(value: &[u8]) -> u32 {
    let Some(rest) = value.strip_prefix(b"p") else { return 0 };
    let digits = rest.iter().take_while(|byte| byte.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).unwrap().parse().unwrap()
}

/// Every workload key has exactly the parts written with its value (none when absent).
fn assert_parts_match_values(database: &Database, state: &Model, context: &str) {
    let namespace = database.namespace(0).unwrap();
    for key in (0..WORKLOAD_KEYS).map(key) {
        let value = state.get(&key);
        let expected = value.map_or(0, |value| parts_of_value(value));
        let name = String::from_utf8_lossy(&key).into_owned();
        assert_eq!(namespace.part_count(&key).unwrap(), expected, "{context}: parts of {name}");
        let Some(value) = value else { continue };
        let parts = namespace
            .transaction(&[&key], |transaction| (0..expected).map(|number| transaction.get_part(&key, number)).collect::<Result<Vec<_>, _>>())
            .unwrap();
        for (number, part) in parts.into_iter().enumerate() {
            assert_eq!(part, Some(part_value(value, number as u32)), "{context}: part {number} of {name}");
        }
    }
}

/// Runs one seed; on failure prints the command that replays it, then fails.
fn run_reporting(seed: u64) -> RunOutcome {
    std::panic::catch_unwind(|| run(seed)).unwrap_or_else(|panic| {
        eprintln!(
            "power-cut campaign: seed {seed} FAILED; replay it with:\n  \
             HYBRIDKV_POWER_CUT_SEED={seed} cargo test --release -p hybridkv-engine --test power_cut -- --nocapture"
        );
        std::panic::resume_unwind(panic)
    })
}

#[test]
fn acknowledged_writes_survive_power_cuts_at_random_points() {
    if std::env::var("HYBRIDKV_POWER_CUT_SEED").is_ok() {
        run_reporting(env_number("HYBRIDKV_POWER_CUT_SEED", 0));
        return;
    }
    let cuts = env_number("HYBRIDKV_POWER_CUTS", 1000);
    let first = env_number("HYBRIDKV_POWER_CUT_FIRST_SEED", 0);
    let started = std::time::Instant::now();
    let (mut in_workload, mut acknowledged) = (0, 0);
    for seed in first..first + cuts {
        let outcome = run_reporting(seed);
        in_workload += u64::from(outcome.cut_in_workload);
        acknowledged += outcome.acknowledged_operations;
        if (seed - first + 1).is_multiple_of(PROGRESS_EVERY_SEEDS) {
            eprintln!("power-cut campaign: {} of {cuts} cut points, {:.0} s", seed - first + 1, started.elapsed().as_secs_f64());
        }
    }
    eprintln!(
        "power-cut campaign: seeds {first}..{}: {cuts} cut points ({in_workload} inside an operation), \
         {acknowledged} acknowledged operations before the cuts, 0 lost, {:.1} s",
        first + cuts,
        started.elapsed().as_secs_f64()
    );
}

/// Seeds of the campaign at scale that found bugs, replayed by the test command: each is one
/// workload and cut point of today's workload generator (a change to it makes them other trials,
/// still valid ones). 1008579: a slot deleted and taken again by another key after the checkpoint
/// kept an old location under a torn digest (`repaired_entry` in `crates/engine/src/recovery.rs`).
/// 3022943: a key's entry inserted into another slot survived the cut but the deletion of its
/// earlier entry did not: two entries of one key, listed twice by SCAN (`Index::repair`).
#[test]
fn seeds_that_found_bugs_pass() {
    for seed in [1_008_579, 3_022_943] {
        run_reporting(seed);
    }
}
