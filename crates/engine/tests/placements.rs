//! Every placement pair, index {dram, shmem, pmem} × data {dram, pmem, ssd}: put, get, delete,
//! expiry, batch, scan, reopen after a clean close, reopen after a simulated crash.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::*;
use hybridkv_engine::{now_unix_ms, BatchOp, Database, Durability, RestartKind, Tier};
use hybridkv_media::sim::SimStore;

fn exercise(database: &Database) {
    let namespace = database.namespace(0).unwrap();
    for number in 0..300 {
        namespace.put(&key(number), &value(number, 1, 100 + number as usize), 0).unwrap();
    }
    for number in 0..300 {
        let found = namespace.get(&key(number)).unwrap().unwrap();
        assert_eq!(found.bytes, value(number, 1, 100 + number as usize));
        assert_eq!(found.expiry_unix_ms, 0);
    }
    assert!(namespace.delete(&key(7)).unwrap());
    assert!(!namespace.delete(&key(7)).unwrap());
    assert_eq!(namespace.get(&key(7)).unwrap(), None);
    namespace.put(&key(8), b"soon gone", now_unix_ms() - 1).unwrap();
    assert_eq!(namespace.get(&key(8)).unwrap(), None, "expired keys are invisible");
    let later = now_unix_ms() + 3_600_000;
    namespace.put(&key(9), b"later", later).unwrap();
    assert_eq!(namespace.get(&key(9)).unwrap().unwrap().expiry_unix_ms, later);
    namespace
        .apply_batch(vec![
            BatchOp::Put { key: key(1000), value: b"a".to_vec(), expiry_unix_ms: 0 },
            BatchOp::Put { key: key(1001), value: b"b".to_vec(), expiry_unix_ms: 0 },
            BatchOp::Delete { key: key(10) },
        ])
        .unwrap();
    assert_eq!(namespace.get(&key(1001)).unwrap().unwrap().bytes, b"b");
    assert_eq!(namespace.get(&key(10)).unwrap(), None);
    assert_eq!(scan_all(database), expected_keys());
}

fn expected_keys() -> BTreeSet<Vec<u8>> {
    let mut keys: BTreeSet<Vec<u8>> = (0..300).filter(|n| ![7, 8, 10].contains(n)).map(key).collect();
    keys.insert(key(1000));
    keys.insert(key(1001));
    keys
}

fn scan_all(database: &Database) -> BTreeSet<Vec<u8>> {
    scan_all_keys(database.namespace(0).unwrap())
}

fn verify_after_restart(database: &Database) {
    let report = &database.restart_reports()[0];
    let found = scan_all(database);
    let missing: Vec<_> = expected_keys().difference(&found).map(|k| String::from_utf8_lossy(k).into_owned()).collect();
    let extra: Vec<_> = found.difference(&expected_keys()).map(|k| String::from_utf8_lossy(k).into_owned()).collect();
    assert!(missing.is_empty() && extra.is_empty(), "{report:?}: missing {} {:?}, extra {:?}", missing.len(), &missing[..missing.len().min(5)], extra);
    let namespace = database.namespace(0).unwrap();
    for number in [0, 1, 299] {
        assert_eq!(namespace.get(&key(number)).unwrap().unwrap().bytes, value(number, 1, 100 + number as usize));
    }
    assert_eq!(namespace.get(&key(1000)).unwrap().unwrap().bytes, b"a");
    assert_eq!(namespace.key_count(), expected_keys().len() as u64 + 1, "key 8 expired but not reclaimed yet");
}

fn expected_kind(index: Tier, clean: bool, power_cut: bool) -> RestartKind {
    match (index, clean, power_cut) {
        (Tier::Dram, _, _) => RestartKind::Cold,
        (Tier::Shmem, _, true) => RestartKind::Cold,
        (_, true, _) => RestartKind::Warm,
        _ => RestartKind::AfterCrash,
    }
}

#[test]
fn every_placement_on_real_files_survives_clean_close_and_crash() {
    for index in INDEX_TIERS {
        for data in DATA_TIERS {
            let dir = tempfile::tempdir().unwrap();
            let shm = tempfile::tempdir_in("/dev/shm").unwrap();
            let mut config = config_for(dir.path(), vec![small_namespace("ns", index, data, Durability::Always)]);
            config.shmem_dir = shm.path().to_path_buf();
            let database = Database::open(config.clone()).unwrap();
            assert_eq!(database.restart_reports()[0].kind, RestartKind::Fresh);
            exercise(&database);
            database.close().unwrap();

            let database = Database::open(config.clone()).unwrap();
            assert_eq!(database.restart_reports()[0].kind, expected_kind(index, true, false), "{index}/{data} clean");
            verify_after_restart(&database);
            // A process crash: dropped without close.
            drop(database);
            let database = Database::open(config).unwrap();
            assert_eq!(database.restart_reports()[0].kind, expected_kind(index, false, false), "{index}/{data} crash");
            verify_after_restart(&database);
        }
    }
}

#[test]
fn every_placement_on_the_simulated_medium_survives_crash_and_power_cut() {
    for index in INDEX_TIERS {
        for data in DATA_TIERS {
            let store = SimStore::new(index as u64 * 10 + data as u64);
            let dir = std::path::PathBuf::from("/nonexistent");
            let config = config_for(&dir, vec![small_namespace("ns", index, data, Durability::Always)]);
            let provider = Arc::new(store.clone());
            let database = Database::open_with(config.clone(), provider.clone()).unwrap();
            exercise(&database);
            store.freeze();
            drop(database);
            store.crash_process();
            let database = Database::open_with(config.clone(), provider.clone()).unwrap();
            assert_eq!(database.restart_reports()[0].kind, expected_kind(index, false, false), "{index}/{data}");
            verify_after_restart(&database);
            store.freeze();
            drop(database);
            store.power_cut();
            let database = Database::open_with(config, provider).unwrap();
            assert_eq!(database.restart_reports()[0].kind, expected_kind(index, false, true), "{index}/{data} cut");
            verify_after_restart(&database);
        }
    }
}

#[test]
fn after_a_process_crash_replay_reads_the_log_tail_not_each_overwritten_record() {
    const KEYS: u64 = 50;
    const VERSIONS: u64 = 40;
    let store = SimStore::new(7);
    let mut namespace_config = small_namespace("ns", Tier::Pmem, Tier::Ssd, Durability::Always);
    // No checkpoint during the writes: the whole log is the tail the start replays.
    namespace_config.checkpoint_interval_bytes = 64 * 1024 * 1024;
    let config = config_for(std::path::Path::new("/nonexistent"), vec![namespace_config]);
    let provider = Arc::new(store.clone());
    let database = Database::open_with(config.clone(), provider.clone()).unwrap();
    let namespace = database.namespace(0).unwrap();
    for version in 1..=VERSIONS {
        for number in 0..KEYS {
            namespace.put(&key(number), &value(number, version, 100), 0).unwrap();
        }
    }
    store.freeze();
    drop(database);
    store.crash_process();
    let reads_before = store.ssd_reads();
    let database = Database::open_with(config, provider).unwrap();
    let report = &database.restart_reports()[0];
    assert_eq!(report.kind, RestartKind::AfterCrash);
    assert_eq!(report.records_replayed, KEYS * VERSIONS);
    // One read per block start and per tail block, not one per record a later version
    // supersedes (1,950 here).
    let reads = store.ssd_reads() - reads_before;
    assert!(reads < 200, "{reads} ssd reads to start");
    let namespace = database.namespace(0).unwrap();
    for number in 0..KEYS {
        assert_eq!(namespace.get(&key(number)).unwrap().unwrap().bytes, value(number, VERSIONS, 100));
    }
}

#[test]
fn a_block_filled_to_its_last_byte_is_followed_by_the_next_on_block_files() {
    // A 64 KiB block holds 65,472 record bytes: 93 records of 704 bytes (40-byte header, 12-byte
    // key, 652-byte value) fill it exactly, so the 94th write opens the next block when every
    // page of the full one is already written out (durability `always` writes each one out).
    const VALUE_BYTES: usize = 652;
    let dir = tempfile::tempdir().unwrap();
    let config = config_for(dir.path(), vec![small_namespace("ns", Tier::Pmem, Tier::Ssd, Durability::Always)]);
    let database = Database::open(config.clone()).unwrap();
    let namespace = database.namespace(0).unwrap();
    for number in 0..94 {
        namespace.put(&key(number), &value(number, 1, VALUE_BYTES), 0).unwrap();
    }
    database.close().unwrap();
    let database = Database::open(config).unwrap();
    let namespace = database.namespace(0).unwrap();
    for number in 0..94 {
        assert_eq!(namespace.get(&key(number)).unwrap().unwrap().bytes, value(number, 1, VALUE_BYTES), "key {number}");
    }
}
