//! A namespace written under one durability and restarted after a power cut under another:
//! recovery judges the log by the durability configured at the restart (`always` trusts that
//! every record before the last valid one was durable, `periodic` reads an invalid record as the
//! end of the durable log), so a log written under `periodic` and recovered under `always` must
//! still give keys that all read (no record reported damaged) and a key count that matches the
//! keys listed. Writes under `periodic` may be lost at a power cut, so values are not compared.
//! `HYBRIDKV_SWITCH_SEEDS` sets the number of runs (200 by default; 2,000 passed by hand).

mod common;

use std::sync::Arc;

use common::workload::env_number;
use common::*;
use hybridkv_engine::{Database, Durability, Tier};
use hybridkv_media::sim::SimStore;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Keys the workload writes and deletes.
const KEYS: u64 = 300;
/// Operations of the first life, at most (a power cut ends it at a random media operation).
const OPERATIONS_MAX: u64 = 3000;

#[test]
fn a_log_written_under_periodic_recovers_whole_under_always_after_a_power_cut() {
    let mut failures = Vec::new();
    for seed in 0..env_number("HYBRIDKV_SWITCH_SEEDS", 200) {
        let mut rng = StdRng::seed_from_u64(seed);
        let index = [Tier::Shmem, Tier::Pmem][rng.gen_range(0..2)];
        let data = DATA_TIERS[rng.gen_range(0..3)];
        let store = SimStore::new(seed);
        let provider = Arc::new(store.clone());
        let config_with = |durability| config_for(std::path::Path::new("/sim"), vec![small_namespace("ns", index, data, durability)]);
        let database = Database::open_with(config_with(Durability::Periodic), provider.clone()).unwrap();
        let namespace = database.namespace(0).unwrap().clone();
        store.cut_power_at(store.operations() + rng.gen_range(50..OPERATIONS_MAX));
        for version in 0..OPERATIONS_MAX {
            let key = key(rng.gen_range(0..KEYS));
            let written = if rng.gen_bool(0.2) {
                namespace.delete(&key).map(|_| ())
            } else {
                namespace.put(&key, &value(version, 1, rng.gen_range(10..3000)), 0)
            };
            if written.is_err() {
                break;
            }
            if version % 97 == 0 {
                // Flushes, checkpoints and defragmentation happen between the writes too.
                let _ = database.run_maintenance_once();
            }
        }
        drop(namespace);
        store.freeze();
        drop(database);
        store.power_cut();
        let context = format!("seed {seed} ({index}/{data})");
        let database = match Database::open_with(config_with(Durability::Always), provider) {
            Ok(database) => database,
            Err(error) => {
                failures.push(format!("{context}: the restart failed: {error}"));
                continue;
            }
        };
        let namespace = database.namespace(0).unwrap();
        let unreadable = (0..KEYS).filter(|&number| namespace.get(&key(number)).is_err()).count();
        let listed = scan_all_keys(namespace).len() as u64;
        if unreadable > 0 || namespace.key_count() != listed {
            failures.push(format!("{context}: {unreadable} keys unreadable, key count {} for {listed} listed", namespace.key_count()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
