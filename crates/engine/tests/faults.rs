//! Limits and faults: a full device, failed and full syncs, oversized input, damaged media.

mod common;

use std::sync::Arc;

use common::*;
use hybridkv_engine::{BatchOp, Database, Durability, EngineError, RestartKind, Tier, KIB};
use hybridkv_media::sim::{FaultKind, FaultOn, FaultPlan, SimStore};

fn sim_database(index: Tier, data: Tier) -> (SimStore, Arc<SimStore>, hybridkv_engine::Config) {
    let store = SimStore::new(5);
    let provider = Arc::new(store.clone());
    let config = config_for(std::path::Path::new("/sim"), vec![small_namespace("ns", index, data, Durability::Always)]);
    (store, provider, config)
}

#[test]
fn a_full_device_refuses_writes_clearly_and_recovers_after_deletes() {
    let (_store, provider, config) = sim_database(Tier::Pmem, Tier::Ssd);
    let database = Database::open_with(config, provider).unwrap();
    let namespace = database.namespace(0).unwrap();
    let value = vec![7u8; 8 * KIB as usize];
    let mut stored = 0;
    let error = loop {
        match namespace.put(&key(stored), &value, 0) {
            Ok(()) => stored += 1,
            Err(error) => break error,
        }
    };
    assert!(matches!(error, EngineError::DataFull { .. }), "{error}");
    assert!(error.is_out_of_space());
    assert!(error.to_string().contains("namespace 'ns'"), "{error}");
    assert!(stored > 300, "the device held {stored} values before it was full");
    for number in 0..stored {
        assert_eq!(namespace.get(&key(number)).unwrap().unwrap().bytes, value, "key {number} harmed");
    }
    for number in (0..stored).filter(|number| number % 4 != 0) {
        namespace.delete(&key(number)).unwrap();
    }
    for _ in 0..64 {
        database.run_maintenance_once().unwrap();
    }
    assert!(namespace.stats().defragmented_blocks > 0);
    namespace.put(b"after", &value, 0).expect("space was reclaimed");
    for number in (0..stored).step_by(4) {
        assert_eq!(namespace.get(&key(number)).unwrap().unwrap().bytes, value, "key {number} lost by defrag");
    }
}

#[test]
fn a_failed_sync_fails_the_write_poisons_writes_and_loses_nothing_acknowledged() {
    for kind in [FaultKind::Eio, FaultKind::NoSpace] {
        let (store, provider, config) = sim_database(Tier::Pmem, Tier::Ssd);
        let database = Database::open_with(config.clone(), provider.clone()).unwrap();
        let namespace = database.namespace(0).unwrap();
        namespace.put(b"kept", b"1", 0).unwrap();
        store.inject(FaultPlan { at_op: store.operations() + 1, kind, on: FaultOn::Persist, repeat: true });
        let error = namespace.put(b"lost", b"2", 0).unwrap_err();
        assert_eq!(error.is_out_of_space(), kind == FaultKind::NoSpace, "{error}");
        assert_eq!(namespace.get(b"lost").unwrap(), None, "an unacknowledged write stays invisible");
        assert_eq!(namespace.key_count(), 1, "and uncounted");
        let refused = namespace.put(b"later", b"3", 0).unwrap_err();
        assert!(matches!(refused, EngineError::Poisoned { .. }), "{refused}");
        assert_eq!(namespace.get(b"kept").unwrap().unwrap().bytes, b"1", "reads keep working");
        drop(database);
        store.clear_faults();
        let database = Database::open_with(config, provider).unwrap();
        let namespace = database.namespace(0).unwrap();
        assert_eq!(namespace.get(b"kept").unwrap().unwrap().bytes, b"1");
        namespace.put(b"later", b"3", 0).expect("a restart clears the poison");
    }
}

#[test]
fn oversized_keys_values_and_batches_are_refused() {
    let (_store, provider, config) = sim_database(Tier::Dram, Tier::Dram);
    let database = Database::open_with(config, provider).unwrap();
    let namespace = database.namespace(0).unwrap();
    let huge_key = vec![b'k'; hybridkv_engine::KEY_BYTES_MAX + 1];
    assert!(matches!(namespace.put(&huge_key, b"v", 0), Err(EngineError::KeyTooLarge { .. })));
    namespace.put(b"", b"v", 0).expect("the empty key is a key, as in Redis");
    assert_eq!(namespace.get(b"").unwrap().unwrap().bytes, b"v");
    assert!(namespace.delete(b"").unwrap());
    let big_value = vec![0u8; 16 * KIB as usize + 1];
    assert!(matches!(namespace.put(b"k", &big_value, 0), Err(EngineError::ValueTooLarge { .. })));
    let batch = (0..8)
        .map(|number| BatchOp::Put { key: key(number), value: vec![1u8; 15 * KIB as usize], expiry_unix_ms: 0 })
        .collect();
    assert!(matches!(namespace.apply_batch(batch), Err(EngineError::BatchTooLarge { .. })));
    assert_eq!(namespace.key_count(), 0, "a refused batch writes nothing");
    let error = namespace.transaction(&[b"a"], |transaction| transaction.put(b"b", b"v", 0)).unwrap_err();
    assert!(matches!(error, EngineError::UndeclaredKey), "{error}");
}

#[test]
fn a_damaged_record_is_reported_never_served_and_others_still_are() {
    let (store, provider, config) = sim_database(Tier::Pmem, Tier::Pmem);
    let database = Database::open_with(config.clone(), provider.clone()).unwrap();
    let namespace = database.namespace(0).unwrap();
    for number in 0..50 {
        namespace.put(&key(number), &value(number, 1, 100), 0).unwrap();
    }
    database.close().unwrap();
    // The first record of the first block: flip a byte of its value.
    assert!(store.corrupt("ns.data", Tier::Pmem, 64 + 40 + 12 + 5));
    let database = Database::open_with(config, provider).unwrap();
    let namespace = database.namespace(0).unwrap();
    let mut damaged = 0;
    for number in 0..50 {
        match namespace.get(&key(number)) {
            Ok(found) => assert_eq!(found.unwrap().bytes, value(number, 1, 100)),
            Err(EngineError::Corrupt { .. }) => damaged += 1,
            Err(other) => panic!("unexpected error {other}"),
        }
    }
    assert_eq!(damaged, 1);
    assert_eq!(namespace.stats().corrupt_records, 1);
}

#[test]
fn a_damaged_index_region_leads_to_a_cold_rebuild() {
    let (store, provider, config) = sim_database(Tier::Pmem, Tier::Ssd);
    let database = Database::open_with(config.clone(), provider.clone()).unwrap();
    for number in 0..100 {
        database.namespace(0).unwrap().put(&key(number), b"v", 0).unwrap();
    }
    database.close().unwrap();
    for offset in [10, 2048 + 10] {
        store.corrupt("ns.index", Tier::Pmem, offset);
    }
    let database = Database::open_with(config, provider).unwrap();
    assert_eq!(database.restart_reports()[0].kind, RestartKind::Cold);
    assert_eq!(database.namespace(0).unwrap().key_count(), 100);
}

#[test]
fn concurrent_writers_share_flushes_and_every_write_survives() {
    let dir = tempfile::tempdir().unwrap();
    let mut namespace_config = small_namespace("ns", Tier::Pmem, Tier::Ssd, Durability::Always);
    namespace_config.data_bytes = 64 * hybridkv_engine::MIB;
    let config = config_for(dir.path(), vec![namespace_config]);
    let database = Database::open(config.clone()).unwrap();
    let namespace = database.namespace(0).unwrap().clone();
    const THREADS: u64 = 8;
    const WRITES: u64 = 200;
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let namespace = namespace.clone();
            scope.spawn(move || {
                for number in 0..WRITES {
                    let id = thread * WRITES + number;
                    namespace.put(&key(id), &value(id, 1, 64), 0).unwrap();
                    assert!(namespace.get(&key(id)).unwrap().is_some());
                }
            });
        }
    });
    let stats = namespace.stats();
    assert_eq!(stats.writes, THREADS * WRITES);
    assert!(stats.flushes < stats.writes, "group commit: {} flushes for {} writes", stats.flushes, stats.writes);
    drop(namespace);
    drop(database);
    let database = Database::open(config).unwrap();
    let namespace = database.namespace(0).unwrap();
    for id in 0..THREADS * WRITES {
        assert_eq!(namespace.get(&key(id)).unwrap().unwrap().bytes, value(id, 1, 64));
    }
}

#[test]
fn a_key_whose_expiry_is_set_or_removed_expires_as_its_latest_record_says() {
    // Index entries hold no expiry, only a tag that the record has one, rewritten with each put.
    let (_store, provider, config) = sim_database(Tier::Pmem, Tier::Pmem);
    let database = Database::open_with(config, provider).unwrap();
    let namespace = database.namespace(0).unwrap();
    let past = hybridkv_engine::now_unix_ms() - 1;
    let later = hybridkv_engine::now_unix_ms() + 3_600_000;
    // 0: expiring, then persisted; 1: persistent, then expired; 2: expiring later, then expired.
    namespace.put(&key(0), b"a", past).unwrap();
    namespace.put(&key(0), b"b", 0).unwrap();
    namespace.put(&key(1), b"c", 0).unwrap();
    namespace.put(&key(1), b"d", past).unwrap();
    namespace.put(&key(2), b"e", later).unwrap();
    assert_eq!(namespace.get(&key(2)).unwrap().unwrap().expiry_unix_ms, later, "to the ms, from the record");
    namespace.put(&key(2), b"f", past).unwrap();
    for _ in 0..2 {
        assert_eq!(namespace.get(&key(0)).unwrap().map(|value| (value.bytes, value.expiry_unix_ms)), Some((b"b".to_vec(), 0)));
        assert_eq!(namespace.get(&key(1)).unwrap(), None);
        assert_eq!(namespace.get(&key(2)).unwrap(), None);
        assert_eq!(namespace.scan(0, usize::MAX).unwrap().keys, vec![key(0)]);
        // The sweep reclaims the expired keys and keeps the persisted one.
        for _ in 0..200 {
            database.run_maintenance_once().unwrap();
        }
        assert_eq!(namespace.key_count(), 1);
    }
}

#[test]
fn expired_keys_are_reclaimed_and_records_in_dram_survive_checkpoints() {
    let (store, provider, config) = sim_database(Tier::Shmem, Tier::Dram);
    let database = Database::open_with(config.clone(), provider.clone()).unwrap();
    let namespace = database.namespace(0).unwrap();
    let announced = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let listener_announced = std::sync::Arc::clone(&announced);
    assert!(namespace.listen_for_expiries(Box::new(move |key| listener_announced.lock().unwrap().push(key.to_vec()))));
    assert!(!namespace.listen_for_expiries(Box::new(|_| {})), "one listener");
    let soon = hybridkv_engine::now_unix_ms() + 50;
    for number in 0..400 {
        // Nineteen keys in twenty expire: their blocks fall under the low-water mark in effect
        // while most of the space is free (docs/design/commit.md, Defragmentation).
        let expiry = if number % 20 != 0 { soon } else { 0 };
        namespace.put(&key(number), &value(number, 1, 1000), expiry).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(80));
    for _ in 0..200 {
        database.run_maintenance_once().unwrap();
    }
    assert_eq!(namespace.key_count(), 20, "expired keys were reclaimed");
    let stats = namespace.stats();
    assert_eq!((stats.expiring_keys, stats.expired_keys), (0, 380), "each counted once, by the sweep or defragmentation");
    let mut announced = announced.lock().unwrap().clone();
    announced.sort();
    let mut expired: Vec<Vec<u8>> = (0..400).filter(|number| number % 20 != 0).map(key).collect();
    expired.sort();
    assert_eq!(announced, expired, "each expired key announced once, whichever path deleted it");
    assert!(stats.defragmented_blocks > 0, "their space was reclaimed");
    assert!(store.list_names().iter().filter(|name| name.contains("journal")).count() <= 2, "covered segments deleted");
    store.freeze();
    drop(database);
    store.crash_process();
    let database = Database::open_with(config, provider).unwrap();
    let namespace = database.namespace(0).unwrap();
    for number in 0..400 {
        let found = namespace.get(&key(number)).unwrap();
        assert_eq!(found.map(|value| value.bytes), (number % 20 == 0).then(|| value(number, 1, 1000)), "key {number}");
    }
}

#[test]
fn clearing_a_namespace_of_large_keys_fits_its_batches_in_blocks_and_lasts() {
    let (store, provider, config) = sim_database(Tier::Pmem, Tier::Ssd);
    let database = Database::open_with(config.clone(), provider.clone()).unwrap();
    let namespace = database.namespace(0).unwrap();
    for number in 0..120u8 {
        let mut big_key = vec![number; 8 * KIB as usize];
        big_key[0] = b'k';
        namespace.put(&big_key, b"v", 0).unwrap();
    }
    namespace.clear().unwrap();
    assert_eq!(namespace.key_count(), 0);
    assert!(namespace.scan(0, 1000).unwrap().keys.is_empty());
    store.freeze();
    drop(database);
    store.crash_process();
    let database = Database::open_with(config, provider).unwrap();
    assert_eq!(database.namespace(0).unwrap().key_count(), 0);
}

/// Under `periodic` (and `none`) records are published to the index, and counted as live in
/// their blocks, only when a flush comes by; background housekeeping comes by more often. Blocks
/// filled in between hold only live records and must not be taken for empty and defragmented.
#[test]
fn blocks_of_records_not_yet_published_are_not_defragmented() {
    for durability in [Durability::Periodic, Durability::None] {
        let dir = tempfile::tempdir().unwrap();
        let mut namespace_config = small_namespace("ns", Tier::Dram, Tier::Pmem, durability);
        namespace_config.periodic_ms = 60_000;
        let mut config = config_for(dir.path(), vec![namespace_config]);
        config.background_maintenance = true;
        let database = Database::open(config).unwrap();
        let namespace = database.namespace(0).unwrap();
        let value = vec![3u8; KIB as usize];
        // About eight blocks of 64 KiB, each key written once: nothing to reclaim. Written while
        // housekeeping comes by (every 50 ms), after its first round has set up the accounting.
        std::thread::sleep(std::time::Duration::from_millis(200));
        for number in 0..500 {
            namespace.put(&key(number), &value, 0).unwrap();
            if number % 50 == 0 {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert_eq!(namespace.stats().defragmented_blocks, 0, "{durability:?}: fresh blocks were defragmented");
        database.close().unwrap();
    }
}

/// Checkpoints bound the log tail a crash leaves to replay by records as well as by bytes.
#[test]
fn the_replay_after_a_crash_is_bounded_by_the_checkpoint_interval_in_records() {
    for (interval_records, replayed_min, replayed_max) in [(100, 0, 100), (1_000_000, 250, 250)] {
        let store = SimStore::new(9);
        let provider = Arc::new(store.clone());
        let mut namespace_config = small_namespace("ns", Tier::Pmem, Tier::Pmem, Durability::Always);
        namespace_config.checkpoint_interval_bytes = namespace_config.data_bytes;
        namespace_config.checkpoint_interval_records = interval_records;
        let config = config_for(std::path::Path::new("/sim"), vec![namespace_config]);
        let database = Database::open_with(config.clone(), provider.clone()).unwrap();
        for number in 0..250 {
            database.namespace(0).unwrap().put(&key(number), b"value", 0).unwrap();
            database.run_maintenance_once().unwrap();
        }
        store.freeze();
        drop(database);
        store.crash_process();
        let database = Database::open_with(config, provider).unwrap();
        let report = &database.restart_reports()[0];
        assert_eq!(report.kind, RestartKind::AfterCrash);
        assert!(
            (replayed_min..=replayed_max).contains(&report.records_replayed),
            "interval {interval_records} records: {} replayed",
            report.records_replayed
        );
        assert_eq!(database.namespace(0).unwrap().get(&key(249)).unwrap().unwrap().bytes, b"value");
    }
}

/// A defragmented block waits for a checkpoint that covers its moves before it is freed (a
/// checkpoint per defragmentation round was a third of the background thread's work under
/// overwrites); a crash while it waits loses nothing, and a clean close frees what waits.
#[test]
fn emptied_blocks_wait_for_a_checkpoint_and_a_crash_meanwhile_loses_nothing() {
    let store = SimStore::new(11);
    let provider = Arc::new(store.clone());
    let mut namespace_config = small_namespace("ns", Tier::Pmem, Tier::Ssd, Durability::Always);
    // No checkpoint by interval: only the ones the test asks for, and defragmentation's own.
    namespace_config.checkpoint_interval_bytes = namespace_config.data_bytes;
    namespace_config.checkpoint_interval_records = 1_000_000;
    let blocks = namespace_config.data_bytes / namespace_config.write_block_bytes;
    let config = config_for(std::path::Path::new("/sim"), vec![namespace_config]);
    let database = Database::open_with(config.clone(), provider.clone()).unwrap();
    let namespace = database.namespace(0).unwrap();
    // Two versions of 100 keys of 1 KiB: the first version's blocks end up with nothing live.
    for version in 1..=2 {
        for number in 0..100 {
            namespace.put(&key(number), &value(number, version, 1000), 0).unwrap();
        }
    }
    let used_before = namespace.stats().data.used_bytes;
    for _ in 0..4 {
        database.run_maintenance_once().unwrap();
    }
    assert!(blocks >= 32, "a few emptied blocks must be under the share that forces a checkpoint");
    assert_eq!(namespace.stats().defragmented_blocks, 0, "emptied blocks are not freed before a checkpoint");
    assert!(namespace.stats().defrag_blocks_waiting > 0);
    assert_eq!(namespace.stats().data.used_bytes, used_before);
    store.freeze();
    drop(database);
    store.crash_process();

    let database = Database::open_with(config.clone(), provider.clone()).unwrap();
    let namespace = database.namespace(0).unwrap();
    for number in 0..100 {
        assert_eq!(namespace.get(&key(number)).unwrap().unwrap().bytes, value(number, 2, 1000), "key {number}");
    }
    // The checkpoint after the crash covers the block again emptied (nothing moved since).
    for _ in 0..4 {
        database.run_maintenance_once().unwrap();
    }
    let mut freed = namespace.stats().defragmented_blocks;
    assert!(freed > 0);
    for version in 3..=4 {
        for number in 0..100 {
            namespace.put(&key(number), &value(number, version, 1000), 0).unwrap();
        }
        for _ in 0..4 {
            database.run_maintenance_once().unwrap();
        }
        assert_eq!(namespace.stats().defragmented_blocks, freed, "version {version}: the emptied blocks wait");
        if version == 3 {
            database.checkpoint().unwrap();
            database.run_maintenance_once().unwrap();
            assert!(namespace.stats().defragmented_blocks > freed, "freed once a checkpoint covers the moves");
            assert_eq!(namespace.stats().defrag_blocks_waiting, 0);
            freed = namespace.stats().defragmented_blocks;
        }
    }
    let used_at_close = namespace.stats().data.used_bytes;
    database.close().unwrap();

    let database = Database::open_with(config, provider).unwrap();
    let namespace = database.namespace(0).unwrap();
    assert!(namespace.stats().data.used_bytes < used_at_close, "the close freed the blocks that waited");
    for number in 0..100 {
        assert_eq!(namespace.get(&key(number)).unwrap().unwrap().bytes, value(number, 4, 1000), "key {number}");
    }
}
