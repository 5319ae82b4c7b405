//! I/O faults walked over every media operation of a workload: for each placement, for ENOSPC and
//! EIO, as a one-off and as a lasting fault, the fault is injected at media operation #1, #2, …
//! #N of the same seeded workload (every write, 8-byte store and sync of every medium, journal
//! included). At each point:
//!
//! - the operation that met the fault reports an error of the injected kind (ENOSPC as "out of
//!   space"), and reads keep serving exactly the acknowledged state;
//! - once the fault is gone, a write either succeeds (the refused write appended nothing) or is
//!   refused as poisoned (a failed sync: writes wait for a restart);
//! - after a power cut and a restart, every acknowledged write is there, the failed operation is
//!   there whole or not at all, and the database takes writes and keeps them.
//!
//! A lasting fault must also refuse the next write while it lasts. The test command walks one-off
//! faults; the full campaign adds lasting ones and a longer workload:
//!
//! ```text
//! HYBRIDKV_FAULT_LASTING=1 HYBRIDKV_FAULT_WORKLOAD_OPERATIONS=60 HYBRIDKV_FAULT_SEED=7 \
//!     cargo test --release -p hybridkv-engine --test fault_campaign -- --nocapture
//! ```
//!
//! `HYBRIDKV_FAULT_WORKLOAD_OPERATIONS` sets the workload length (default 24 engine operations),
//! `HYBRIDKV_FAULT_SEED` the workload seed (default 1). A failure names its point and the command.

mod common;

use std::sync::Arc;

use common::workload::*;
use common::*;
use hybridkv_engine::{Config, Database, Durability, EngineError, Tier};
use hybridkv_media::sim::{FaultKind, FaultOn, FaultPlan, SimStore};
use rand::rngs::StdRng;
use rand::SeedableRng;

/// Index, data: records on a region, on block files, and in DRAM with a journal on block files.
const PLACEMENTS: [(Tier, Tier); 3] = [(Tier::Pmem, Tier::Pmem), (Tier::Shmem, Tier::Ssd), (Tier::Pmem, Tier::Dram)];
/// Every this many engine operations the workload runs maintenance (checkpoints, defrag).
const MAINTENANCE_EVERY_OPERATIONS: usize = 8;

#[derive(Clone, Copy, Debug)]
struct Walk {
    index: Tier,
    data: Tier,
    kind: FaultKind,
    lasting: bool,
    seed: u64,
    operations: usize,
}

/// What happened at one fault point.
#[derive(Debug, PartialEq, Eq)]
enum PointOutcome {
    /// The workload met the fault; after it, a write succeeded without a restart.
    RecoveredInPlace,
    /// The workload met the fault; writes were refused until the restart.
    RecoveredByRestart,
    /// The fault hit an operation whose failure the engine absorbed (nothing to report).
    Absorbed,
}

fn config(walk: &Walk) -> Config {
    config_for(std::path::Path::new("/sim"), vec![small_namespace("ns", walk.index, walk.data, Durability::Always)])
}

/// Runs the workload; stops at the first error and returns it with the operation it failed.
fn run_workload(database: &Database, walk: &Walk, model: &mut Model) -> Option<(EngineError, Option<Operation>)> {
    let mut rng = StdRng::seed_from_u64(walk.seed);
    for step in 0..walk.operations {
        let operation = random_operation(&mut rng);
        if step % MAINTENANCE_EVERY_OPERATIONS == MAINTENANCE_EVERY_OPERATIONS - 1 {
            if let Err(error) = database.run_maintenance_once() {
                return Some((error, None));
            }
        }
        match apply(database, &operation) {
            Ok(()) => *model = applied(model, &operation),
            Err(error) => return Some((error, Some(operation))),
        }
    }
    None
}

/// Media operations the workload performs after open, without faults.
fn media_operations(walk: &Walk) -> u64 {
    let store = SimStore::new(walk.seed);
    let database = Database::open_with(config(walk), Arc::new(store.clone())).unwrap();
    let before = store.operations();
    assert!(run_workload(&database, walk, &mut Model::new()).is_none(), "{walk:?}: the workload fails without faults");
    store.operations() - before
}

fn check_state(state: &Model, model: &Model, in_flight: Option<&Operation>, context: &str) {
    let with_in_flight = in_flight.map(|operation| applied(model, operation));
    assert!(
        state == model || Some(state) == with_in_flight.as_ref(),
        "{context}: state is neither the acknowledged one nor it plus the whole failed operation; differs at {:?}",
        differences(model, state)
    );
}

fn walk_point(walk: &Walk, point: u64) -> PointOutcome {
    let context = format!("{walk:?} fault at media operation #{point}");
    let store = SimStore::new(walk.seed);
    let provider = Arc::new(store.clone());
    let database = Database::open_with(config(walk), provider.clone()).unwrap();
    let plan = FaultPlan { at_op: store.operations() + point, kind: walk.kind, on: FaultOn::Any, repeat: walk.lasting };
    store.inject(plan);
    let mut model = Model::new();
    let failure = run_workload(&database, walk, &mut model);
    let (outcome, in_flight) = match failure {
        None => {
            store.clear_faults();
            (PointOutcome::Absorbed, None)
        }
        Some((error, in_flight)) => {
            let expected_kind = matches!(error, EngineError::Media(_) | EngineError::DataFull { .. } | EngineError::IndexFull { .. })
                && error.is_out_of_space() == (walk.kind == FaultKind::NoSpace);
            assert!(expected_kind, "{context}: the caller got {error:?}");
            let faulty = format!("{context}, while faulty after {error:?}");
            check_state(&state_of(&database, &faulty), &model, in_flight.as_ref(), &faulty);
            if walk.lasting {
                let refused = database.namespace(0).unwrap().put(b"probe", b"while faulty", 0);
                assert!(refused.is_err(), "{context}: a write succeeded while the device still failed");
            }
            store.clear_faults();
            let probe = database.namespace(0).unwrap().put(b"probe", b"after the fault", 0);
            match probe {
                Ok(()) => {
                    model = applied(&model, &vec![(b"probe".to_vec(), Some(b"after the fault".to_vec()))]);
                    let after_fault = format!("{context}, after the fault");
                    let state = state_of(&database, &after_fault);
                    check_state(&state, &model, in_flight.as_ref(), &after_fault);
                    // A failed operation visible once later writes were acknowledged must last.
                    model = state;
                    (PointOutcome::RecoveredInPlace, None)
                }
                Err(EngineError::Poisoned { .. }) => (PointOutcome::RecoveredByRestart, in_flight),
                Err(other) => panic!("{context}: after the fault was cleared a write got {other:?}"),
            }
        }
    };
    store.freeze();
    drop(database);
    store.power_cut();
    let database = Database::open_with(config(walk), provider.clone())
        .unwrap_or_else(|error| panic!("{context}: reopen after the fault failed: {error}"));
    let after_restart = format!("{context}, after the restart");
    let state = state_of(&database, &after_restart);
    check_state(&state, &model, in_flight.as_ref(), &after_restart);
    database.namespace(0).unwrap().put(b"after restart", b"1", 0).unwrap_or_else(|error| panic!("{context}: {error}"));
    database.close().unwrap();
    let database = Database::open_with(config(walk), provider).unwrap();
    assert!(database.namespace(0).unwrap().get(b"after restart").unwrap().is_some(), "{context}: lost after restart");
    outcome
}

fn walk_all_points(walk: Walk) -> [u64; 3] {
    let points = media_operations(&walk);
    let mut counts = [0u64; 3];
    for point in 1..=points {
        let outcome = std::panic::catch_unwind(|| walk_point(&walk, point)).unwrap_or_else(|panic| {
            eprintln!(
                "fault campaign: {walk:?} FAILED at media operation #{point}; replay the campaign with:\n  \
                 HYBRIDKV_FAULT_LASTING={} HYBRIDKV_FAULT_SEED={} HYBRIDKV_FAULT_WORKLOAD_OPERATIONS={} cargo test --release -p hybridkv-engine --test fault_campaign -- --nocapture",
                u8::from(walk.lasting),
                walk.seed,
                walk.operations
            );
            std::panic::resume_unwind(panic)
        });
        counts[outcome as usize] += 1;
    }
    counts
}

#[test]
fn every_write_and_sync_point_survives_enospc_and_eio() {
    let seed = env_number("HYBRIDKV_FAULT_SEED", 1);
    let operations = env_number("HYBRIDKV_FAULT_WORKLOAD_OPERATIONS", 24) as usize;
    let lasting_too = env_number("HYBRIDKV_FAULT_LASTING", 0) == 1;
    let started = std::time::Instant::now();
    let mut total = [0u64; 3];
    for (index, data) in PLACEMENTS {
        for kind in [FaultKind::NoSpace, FaultKind::Eio] {
            for lasting in [false, true].into_iter().take(if lasting_too { 2 } else { 1 }) {
                let walk = Walk { index, data, kind, lasting, seed, operations };
                let counts = walk_all_points(walk);
                eprintln!(
                    "fault campaign: {index}/{data} {kind:?} {}: {} points: {} recovered in place, {} by restart, {} absorbed",
                    if lasting { "lasting" } else { "one-off" },
                    counts.iter().sum::<u64>(),
                    counts[0],
                    counts[1],
                    counts[2]
                );
                for (sum, count) in total.iter_mut().zip(counts) {
                    *sum += count;
                }
            }
        }
    }
    assert!(total[0] + total[1] > 0, "no fault point was met");
    eprintln!(
        "fault campaign: seed {seed}, {operations} operations: {} fault points ({} recovered in place, {} by restart, {} absorbed), 0 acknowledged writes lost, {:.1} s",
        total.iter().sum::<u64>(),
        total[0],
        total[1],
        total[2],
        started.elapsed().as_secs_f64()
    );
}
