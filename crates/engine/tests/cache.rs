//! The record cache in front of records on ssd and pmem, and the full scan that bypasses it.

mod common;

use std::collections::BTreeMap;

use common::*;
use hybridkv_engine::{Database, Durability, Tier, KIB, MIB};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[test]
fn the_cache_never_serves_a_stale_or_deleted_value_under_concurrent_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (database, _shmem) = cached_database(dir.path(), Tier::Ssd, 256 * KIB, Durability::None);
    let namespace = database.namespace(0).unwrap().clone();
    const THREADS: u64 = 4;
    const KEYS_PER_THREAD: u64 = 300;
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let namespace = namespace.clone();
            scope.spawn(move || {
                let mut rng = StdRng::seed_from_u64(thread);
                let mut latest: BTreeMap<u64, Option<u64>> = BTreeMap::new();
                for step in 0..4000u64 {
                    let number = thread * KEYS_PER_THREAD + rng.gen_range(0..KEYS_PER_THREAD);
                    match rng.gen_range(0..10) {
                        0 => {
                            namespace.delete(&key(number)).unwrap();
                            latest.insert(number, None);
                        }
                        1..=3 => {
                            namespace.put(&key(number), &value(number, step, VALUE_BYTES), 0).unwrap();
                            latest.insert(number, Some(step));
                        }
                        _ => {
                            let found = namespace.get(&key(number)).unwrap().map(|found| found.bytes);
                            let expected = latest.get(&number).copied().flatten().map(|v| value(number, v, VALUE_BYTES));
                            assert_eq!(found, expected, "key {number} at step {step}");
                        }
                    }
                }
            });
        }
    });
    let cache = namespace.stats().cache.unwrap();
    assert!(cache.hits > 0 && cache.evictions > 0, "{cache:?}");
    assert!(cache.used_bytes <= cache.capacity_bytes);
}

fn hot_hit_ratio(database: &Database, hot: &[u64]) -> f64 {
    let namespace = database.namespace(0).unwrap();
    let before = namespace.stats().cache.unwrap();
    for &number in hot {
        namespace.get(&key(number)).unwrap().unwrap();
    }
    let after = namespace.stats().cache.unwrap();
    (after.hits - before.hits) as f64 / hot.len() as f64
}

#[test]
fn scans_do_not_evict_a_hot_set_that_fits_and_the_budget_holds() {
    let dir = tempfile::tempdir().unwrap();
    let cache_bytes = 4 * MIB;
    let (database, _shmem) = cached_database(dir.path(), Tier::Ssd, cache_bytes, Durability::None);
    let keys = 16_000; // about 4 times the cache
    load(&database, keys);
    let namespace = database.namespace(0).unwrap();
    let hot: Vec<u64> = (0..1000).map(|n| n * 7).collect();
    for _ in 0..3 {
        hot_hit_ratio(&database, &hot);
    }
    assert!(hot_hit_ratio(&database, &hot) > 0.99);
    // A client-side scan: every key read once, through the cache.
    let mut cursor = 0;
    loop {
        let page = namespace.scan(cursor, 1000).unwrap();
        for key in &page.keys {
            namespace.get(key).unwrap();
        }
        cursor = page.next_cursor;
        if cursor == 0 {
            break;
        }
    }
    let after_client_scan = hot_hit_ratio(&database, &hot);
    assert!(after_client_scan > 0.95, "hot set hit ratio after a client scan: {after_client_scan}");
    // The full scan bypasses the cache entirely.
    let before = namespace.stats().cache.unwrap();
    let report = namespace.scan_records(|_, _| true).unwrap();
    assert_eq!(report.records_visited, keys);
    let after = namespace.stats().cache.unwrap();
    assert_eq!((before.hits, before.misses), (after.hits, after.misses));
    assert!(hot_hit_ratio(&database, &hot) > 0.99);
    assert!(after.used_bytes <= cache_bytes, "{after:?}");
}

#[test]
fn the_full_scan_visits_each_live_record_once() {
    for data in [Tier::Dram, Tier::Pmem, Tier::Ssd] {
        let dir = tempfile::tempdir().unwrap();
        let (database, _shmem) = cached_database(dir.path(), data, MIB, Durability::Periodic);
        let namespace = database.namespace(0).unwrap();
        for number in 0..3000 {
            namespace.put(&key(number), &value(number, 0, 300), 0).unwrap();
        }
        for number in (0..3000).step_by(3) {
            namespace.put(&key(number), &value(number, 1, 300), 0).unwrap();
        }
        for number in (1..3000).step_by(3) {
            namespace.delete(&key(number)).unwrap();
        }
        namespace.put(b"expired", b"x", hybridkv_engine::now_unix_ms() - 1).unwrap();
        let mut seen = BTreeMap::new();
        namespace
            .scan_records(|key, value| {
                assert!(seen.insert(key.to_vec(), value.bytes.clone()).is_none(), "{data}: a key visited twice");
                true
            })
            .unwrap();
        assert_eq!(seen.len(), 2000, "{data}");
        for number in 0..3000 {
            let expected = match number % 3 {
                0 => Some(value(number, 1, 300)),
                1 => None,
                _ => Some(value(number, 0, 300)),
            };
            assert_eq!(seen.get(&key(number)).cloned(), expected, "{data}: key {number}");
        }
    }
}

#[test]
fn records_loaded_ahead_are_then_read_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let (database, _shmem) = cached_database(dir.path(), Tier::Ssd, 4 * MIB, Durability::None);
    let namespace = database.namespace(0).unwrap();
    assert!(namespace.reads_may_wait());
    load(&database, 100);
    namespace.put(b"gone", b"soon", 1).unwrap();
    namespace.clear_cache();
    let (present, absent, expired): (&[u8], &[u8], &[u8]) = (&key(7), b"never written", b"gone");
    assert!(namespace.reads_would_wait(&[absent, present]));
    assert!(!namespace.reads_would_wait(&[absent, expired, &[b'k'; 20_000]]), "only live records wait");

    namespace.load_into_cache(&[present.to_vec(), absent.to_vec(), vec![b'k'; 20_000]]);
    assert!(!namespace.reads_would_wait(&[present]));
    let before = namespace.stats().cache.unwrap();
    assert_eq!(namespace.get(present).unwrap().unwrap().bytes, value(7, 0, VALUE_BYTES));
    let after = namespace.stats().cache.unwrap();
    assert_eq!((after.hits - before.hits, after.misses - before.misses), (1, 0), "served from the cache");
}

#[test]
fn batches_stop_checking_while_the_cache_hardly_misses_and_resume_when_it_does() {
    let dir = tempfile::tempdir().unwrap();
    let (database, _shmem) = cached_database(dir.path(), Tier::Ssd, 4 * MIB, Durability::None);
    let namespace = database.namespace(0).unwrap();
    load(&database, 100);
    let reads_per_window = hybridkv_engine::LOAD_AHEAD_WINDOW_READS;
    for round in 0..=reads_per_window {
        namespace.get(&key(round % 100)).unwrap().unwrap();
    }
    namespace.clear_cache();
    assert!(!namespace.reads_would_wait(&[&key(7)]), "a window without misses turns the check off");

    for _ in 0..=reads_per_window {
        namespace.clear_cache();
        namespace.get(&key(7)).unwrap().unwrap();
    }
    namespace.clear_cache();
    assert!(namespace.reads_would_wait(&[&key(7)]), "a window of misses turns it back on");
}

#[test]
fn records_in_memory_never_wait() {
    let dir = tempfile::tempdir().unwrap();
    let (database, _shmem) = cached_database(dir.path(), Tier::Pmem, 4 * MIB, Durability::None);
    let namespace = database.namespace(0).unwrap();
    load(&database, 10);
    namespace.clear_cache();
    assert!(!namespace.reads_may_wait());
    assert!(!namespace.reads_would_wait(&[&key(3)]));
}

#[test]
fn the_cache_holds_one_record_per_live_key_through_rewrites_deletes_and_defragmentation() {
    let dir = tempfile::tempdir().unwrap();
    let (database, _shmem) = cached_database(dir.path(), Tier::Ssd, 4 * MIB, Durability::Always);
    let namespace = database.namespace(0).unwrap();
    const KEYS: u64 = 200;
    let cached_bytes_per_key = VALUE_BYTES as u64 + 200;
    // About 12 MiB written in 1 MiB blocks: most blocks fall under the low-water mark.
    for version in 0..60 {
        for number in 0..KEYS {
            namespace.put(&key(number), &value(number, version, VALUE_BYTES), 0).unwrap();
        }
        database.run_maintenance_once().unwrap();
    }
    assert!(namespace.stats().defragmented_blocks > 0, "the test must move records");
    let cache = namespace.stats().cache.unwrap();
    assert!(cache.used_bytes <= KEYS * cached_bytes_per_key, "{cache:?}");
    for number in 0..KEYS / 2 {
        namespace.delete(&key(number)).unwrap();
    }
    let cache = namespace.stats().cache.unwrap();
    assert!(cache.used_bytes <= KEYS / 2 * cached_bytes_per_key, "deleted keys leave the cache: {cache:?}");
    for number in 0..KEYS {
        let expected = (number >= KEYS / 2).then(|| value(number, 59, VALUE_BYTES));
        assert_eq!(namespace.get(&key(number)).unwrap().map(|found| found.bytes), expected);
    }
    namespace.clear().unwrap();
    assert_eq!(namespace.stats().cache.unwrap().used_bytes, 0, "FLUSHDB empties the cache");
}
