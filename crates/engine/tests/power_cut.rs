//! Power cuts at random points of a random workload with durability `always`, on the simulated
//! medium (unflushed bytes dropped or torn at 8 bytes for regions and 4 KiB for blocks). After
//! recovery: every acknowledged write is there with its latest acknowledged value, no damaged
//! record is served, the index and the records agree (scan, get and key count), and the
//! operation cut in flight — a batch included — is applied entirely or not at all.
//!
//! The simulated medium also reorders: each unflushed 8-byte store (region) or 4-KiB page (block
//! file) independently holds, after the cut, its durable value, its last value or any value it
//! held in between.
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
use hybridkv_engine::Database;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Engine operations of the life that meets the cut.
const OPERATIONS_PER_RUN: usize = 80;
/// Media operations per engine operation, roughly: the cut lands anywhere in the run.
const MEDIA_OPERATIONS_PER_OPERATION: u64 = 6;

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
        let operation = random_operation(&mut rng);
        apply(&database, &operation).unwrap();
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
        let operation = random_operation(&mut rng);
        let result = if step % 10 == 9 { database.run_maintenance_once() } else { Ok(()) };
        let result = result.and_then(|()| apply(&database, &operation));
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
    let context = format!("seed {seed} ({index}/{data})");
    let state = state_of(&database, &context);
    let with_in_flight = in_flight.as_ref().map(|operation| applied(&model, operation));
    assert!(
        state == model || Some(&state) == with_in_flight.as_ref(),
        "seed {seed} ({index}/{data}, {:?}): recovered state is neither the acknowledged one nor it plus the whole operation in flight\nin flight: {:?}\nmissing or changed: {:?}",
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
    RunOutcome { cut_in_workload: in_flight.is_some(), acknowledged_operations }
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
