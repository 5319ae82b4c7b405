//! The record cache in front of records on ssd and pmem, and the full scan that bypasses it.

mod common;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use common::*;
use hybridkv_engine::{CacheLoad, Database, Durability, Namespace, SubmitReads, Tier, KIB, MIB};
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
fn a_full_scan_stopped_early_counts_the_bytes_it_read() {
    let dir = tempfile::tempdir().unwrap();
    let (database, _shmem) = cached_database(dir.path(), Tier::Ssd, MIB, Durability::Periodic);
    let namespace = database.namespace(0).unwrap();
    for number in 0..100 {
        namespace.put(&key(number), &value(number, 0, 300), 0).unwrap();
    }
    let whole = namespace.scan_records(|_, _| true).unwrap();
    assert_eq!((whole.records_visited, whole.blocks_read), (100, 1));
    let mut visits = 0;
    let stopped = namespace
        .scan_records(|_, _| {
            visits += 1;
            visits < 3
        })
        .unwrap();
    assert_eq!((stopped.records_visited, stopped.blocks_read), (3, 1));
    assert!(whole.bytes_read > 100 * 300, "a whole block counts whole: {whole:?}");
    assert!(stopped.bytes_read >= 3 * 300 && stopped.bytes_read < whole.bytes_read / 2, "{stopped:?} against {whole:?}");
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
    assert!(!namespace.reads_would_wait(&[absent, &[b'k'; 20_000]]), "only indexed records wait");
    // Its record tells that a key has expired: a read of it waits for the device too.
    assert!(namespace.reads_would_wait(&[expired]));

    namespace.load_into_cache(&[present.to_vec(), absent.to_vec(), vec![b'k'; 20_000]]);
    assert!(!namespace.reads_would_wait(&[present]));
    let before = namespace.stats().cache.unwrap();
    assert_eq!(namespace.get(present).unwrap().unwrap().bytes, value(7, 0, VALUE_BYTES));
    let after = namespace.stats().cache.unwrap();
    assert_eq!((after.hits - before.hits, after.misses - before.misses), (1, 0), "served from the cache");
}

/// A batch over several write blocks (most records on the device; the last ones in the active
/// block), loaded by `load_batch`, loads every record once: one miss each, then one hit each when
/// read.
fn check_that_a_large_batch_is_loaded_whole(load_batch: impl FnOnce(&Namespace, &[Vec<u8>])) {
    const KEYS: u64 = 3_000;
    let dir = tempfile::tempdir().unwrap();
    // `always`: each write is published before the next, so no block looks emptier than it is
    // to the background defragmentation, which would move records while they are loaded.
    let (database, _shmem) = cached_database(dir.path(), Tier::Ssd, 16 * MIB, Durability::Always);
    let namespace = database.namespace(0).unwrap();
    load(&database, KEYS);
    namespace.clear_cache();
    let keys: Vec<Vec<u8>> = (0..KEYS).map(|number| key(number).to_vec()).collect();
    let before = namespace.stats().cache.unwrap();
    load_batch(namespace, &keys);
    let loaded = namespace.stats().cache.unwrap();
    assert_eq!((loaded.hits - before.hits, loaded.misses - before.misses), (0, KEYS));
    for number in 0..KEYS {
        assert_eq!(namespace.get(&key(number)).unwrap().unwrap().bytes, value(number, 0, VALUE_BYTES));
    }
    let read = namespace.stats().cache.unwrap();
    assert_eq!((read.hits - loaded.hits, read.misses - loaded.misses), (KEYS, 0), "every record was loaded");
}

/// On several threads, when no thread is spared the wait for the device.
#[test]
fn a_large_batch_is_loaded_whole() {
    check_that_a_large_batch_is_loaded_whole(|namespace, keys| namespace.load_into_cache(keys));
}

/// Submits the queued device reads and drives `finish_device_reads` until `load` is ready, as
/// the server's submission and completion tasks do.
fn wait_for(namespace: &Namespace, mut load: CacheLoad) {
    namespace.submit_device_reads();
    let mut context = Context::from_waker(Waker::noop());
    let deadline = Instant::now() + Duration::from_secs(10);
    while Pin::new(&mut load).poll(&mut context).is_pending() {
        assert!(Instant::now() < deadline, "device reads finish within 10 s");
        namespace.finish_device_reads();
    }
}

/// Through the device read queue, in slices as the server's batches come, with absent and
/// invalid keys among them: no thread waits for the device. The whole batch needs more reads
/// than the queue takes in flight (512): the caller is told to load it on threads, and no read
/// is left started (each record is still loaded exactly once).
#[test]
fn a_large_batch_is_loaded_whole_through_the_device_read_queue() {
    check_that_a_large_batch_is_loaded_whole(|namespace, keys| {
        assert!(namespace.device_read_completions().is_some(), "O_DIRECT and io_uring on the machines we test on");
        let mut keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        assert!(namespace.start_loading_into_cache(&keys, SubmitReads::Now).is_none());
        keys.extend([b"never written".as_slice(), &[b'k'; 20_000]]);
        for part in keys.chunks(200) {
            wait_for(namespace, namespace.start_loading_into_cache(part, SubmitReads::Later).expect("a device read queue"));
        }
    });
}

/// Records longer than the first read (whose locations do not carry their length) take a
/// second device read, and are then served from the cache.
#[test]
fn long_records_are_loaded_through_the_device_read_queue_in_two_reads() {
    const KEYS: u64 = 12;
    const LONG_VALUE_BYTES: usize = 100 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let (database, _shmem) = cached_database(dir.path(), Tier::Ssd, 16 * MIB, Durability::Always);
    let namespace = database.namespace(0).unwrap();
    for number in 0..KEYS {
        namespace.put(&key(number), &value(number, 0, LONG_VALUE_BYTES), 0).unwrap();
    }
    namespace.clear_cache();
    let keys: Vec<Vec<u8>> = (0..KEYS).map(|number| key(number).to_vec()).collect();
    let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    wait_for(namespace, namespace.start_loading_into_cache(&keys, SubmitReads::Now).expect("a device read queue"));
    let loaded = namespace.stats().cache.unwrap();
    for number in 0..KEYS {
        assert_eq!(namespace.get(&key(number)).unwrap().unwrap().bytes, value(number, 0, LONG_VALUE_BYTES));
    }
    let read = namespace.stats().cache.unwrap();
    assert_eq!((read.hits - loaded.hits, read.misses - loaded.misses), (KEYS, 0), "every long record was loaded");
}

/// Reads queued with `SubmitReads::Later` wait for `submit_device_reads`, and the loads of
/// several callers then share one submission.
#[test]
fn loads_queued_for_later_share_the_submission_that_follows() {
    let dir = tempfile::tempdir().unwrap();
    let (database, _shmem) = cached_database(dir.path(), Tier::Ssd, 16 * MIB, Durability::Always);
    let namespace = database.namespace(0).unwrap();
    // Three write blocks of 1 MiB: the first keys' records are on the device, not in the
    // active block's copy in DRAM.
    load(&database, 3000);
    namespace.clear_cache();
    let keys: Vec<Vec<u8>> = (0..3).map(|number| key(number).to_vec()).collect();
    let before = namespace.device_read_counts().expect("O_DIRECT and io_uring on the machines we test on");
    let mut loads: Vec<CacheLoad> = keys.iter().map(|key| namespace.start_loading_into_cache(&[key.as_slice()], SubmitReads::Later).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(50));
    namespace.finish_device_reads();
    let mut context = Context::from_waker(Waker::noop());
    assert!(loads.iter_mut().all(|load| Pin::new(load).poll(&mut context).is_pending()), "nothing was submitted");
    assert_eq!(namespace.device_read_counts().unwrap(), before);
    for load in loads {
        wait_for(namespace, load);
    }
    let after = namespace.device_read_counts().unwrap();
    assert_eq!((after.submissions - before.submissions, after.reads - before.reads), (1, 3));
    for number in 0..3 {
        assert_eq!(namespace.get(&key(number)).unwrap().unwrap().bytes, value(number, 0, VALUE_BYTES));
    }
}

/// Loads through the device read queue race with rewrites of the same keys (and the
/// defragmentation they cause): a get always returns the key's newest value.
#[test]
fn loads_through_the_device_read_queue_never_make_the_cache_serve_an_older_value() {
    const KEYS: u64 = 400;
    const ROUNDS: u64 = 30;
    let dir = tempfile::tempdir().unwrap();
    let (database, _shmem) = cached_database(dir.path(), Tier::Ssd, 64 * KIB, Durability::None);
    let namespace = database.namespace(0).unwrap();
    load(&database, KEYS);
    let version_of = |number: u64, round: u64| value(number, round, 300);
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            for round in 1..=ROUNDS {
                for number in 0..KEYS {
                    namespace.put(&key(number), &version_of(number, round), 0).unwrap();
                }
            }
        });
        let keys: Vec<Vec<u8>> = (0..KEYS).map(|number| key(number).to_vec()).collect();
        let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        while !writer.is_finished() {
            namespace.clear_cache();
            for part in keys.chunks(64) {
                wait_for(namespace, namespace.start_loading_into_cache(part, SubmitReads::Now).expect("a device read queue"));
            }
        }
    });
    for number in 0..KEYS {
        assert_eq!(namespace.get(&key(number)).unwrap().unwrap().bytes, version_of(number, ROUNDS), "key {number}");
    }
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
    assert!(!namespace.checks_load_ahead(), "callers need not gather keys meanwhile");

    for _ in 0..=reads_per_window {
        namespace.clear_cache();
        namespace.get(&key(7)).unwrap().unwrap();
    }
    namespace.clear_cache();
    assert!(namespace.reads_would_wait(&[&key(7)]), "a window of misses turns it back on");
    assert!(namespace.checks_load_ahead());
}

#[test]
fn records_in_memory_never_wait() {
    let dir = tempfile::tempdir().unwrap();
    let (database, _shmem) = cached_database(dir.path(), Tier::Pmem, 4 * MIB, Durability::None);
    let namespace = database.namespace(0).unwrap();
    load(&database, 10);
    namespace.clear_cache();
    assert!(!namespace.reads_may_wait());
    assert!(!namespace.checks_load_ahead());
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
    // The cache's maps and queues: queue slots of replaced entries linger up to one per entry
    // plus 1,024 before they are dropped, and capacities grow by doubling.
    const STRUCTURE_BYTES_MAX: u64 = 128 * KIB;
    let before = namespace.stats().cache.unwrap();
    assert!(before.used_bytes <= KEYS * cached_bytes_per_key + STRUCTURE_BYTES_MAX, "{before:?}");
    for number in 0..KEYS / 2 {
        namespace.delete(&key(number)).unwrap();
    }
    // The maps and queues keep their capacity: the records alone leave.
    let after = namespace.stats().cache.unwrap();
    assert!(before.used_bytes - after.used_bytes >= KEYS / 2 * VALUE_BYTES as u64, "deleted keys leave the cache: {before:?} {after:?}");
    for number in 0..KEYS {
        let expected = (number >= KEYS / 2).then(|| value(number, 59, VALUE_BYTES));
        assert_eq!(namespace.get(&key(number)).unwrap().map(|found| found.bytes), expected);
    }
    namespace.clear().unwrap();
    assert_eq!(namespace.stats().cache.unwrap().used_bytes, 0, "FLUSHDB empties the cache");
}

/// Reads from ssd let their partition lock go during the device read: a reader whose record's
/// block is defragmented, freed and reused meanwhile looks the key up again. Readers see only the
/// key's own values, never older than one they saw before, while one writer rewrites the keys
/// through a data space that defragmentation keeps reusing.
#[test]
fn reads_outside_the_partition_lock_see_each_key_move_forward_while_blocks_are_reused() {
    let dir = tempfile::tempdir().unwrap();
    let mut namespace_config = small_namespace("ns", Tier::Shmem, Tier::Ssd, Durability::None);
    namespace_config.cache_bytes = 64 * KIB;
    let mut config = config_for(dir.path(), vec![namespace_config]);
    let shmem = tempfile::tempdir_in("/dev/shm").unwrap();
    config.shmem_dir = shmem.path().to_path_buf();
    config.background_maintenance = true;
    let database = Database::open(config).unwrap();
    let namespace = database.namespace(0).unwrap().clone();
    const KEYS: u64 = 100;
    const VERSIONS: u64 = 300;
    let version_of = |number: u64, bytes: &[u8]| -> u64 {
        let text = String::from_utf8_lossy(bytes);
        let (version, rest) = text[1..].split_once(':').expect("a value of the test");
        assert!(rest.starts_with(&format!("{number}:")), "key {number} read {text}");
        version.parse().unwrap()
    };
    for number in 0..KEYS {
        namespace.put(&key(number), &value(number, 0, 200), 0).unwrap();
    }
    let writing = std::sync::atomic::AtomicBool::new(true);
    std::thread::scope(|scope| {
        for reader in 0..3u64 {
            let (namespace, writing) = (namespace.clone(), &writing);
            scope.spawn(move || {
                let mut rng = StdRng::seed_from_u64(reader);
                let mut seen = vec![0u64; KEYS as usize];
                while writing.load(std::sync::atomic::Ordering::Relaxed) {
                    let number = rng.gen_range(0..KEYS);
                    let found = namespace.get(&key(number)).unwrap().expect("keys are never deleted");
                    let version = version_of(number, &found.bytes);
                    assert!(version >= seen[number as usize], "key {number}: version {version} after {}", seen[number as usize]);
                    seen[number as usize] = version;
                }
            });
        }
        /// Stops the readers however the writer ends (a failed put panics).
        struct StopReaders<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for StopReaders<'_> {
            fn drop(&mut self) {
                self.0.store(false, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let _stop = StopReaders(&writing);
        for version in 1..=VERSIONS {
            for number in 0..KEYS {
                namespace.put(&key(number), &value(number, version, 200), 0).unwrap();
            }
            // Frees blocks as fast as the writer fills them.
            database.run_maintenance_once().unwrap();
        }
    });
    assert!(namespace.stats().defragmented_blocks > 0, "the test must free and reuse blocks");
    for number in 0..KEYS {
        assert_eq!(version_of(number, &namespace.get(&key(number)).unwrap().unwrap().bytes), VERSIONS);
    }
}

#[test]
fn a_read_prefetch_is_a_hint_that_counts_nothing_and_never_waits_for_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let (database, _shmem) = cached_database(dir.path(), Tier::Ssd, 256 * KIB, Durability::None);
    let namespace = database.namespace(0).unwrap();
    for number in 0..64 {
        namespace.put(&key(number), &value(number, 0, VALUE_BYTES), 0).unwrap();
    }
    let keys: Vec<Vec<u8>> = (0..64).map(key).collect();
    let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let too_long = vec![b'k'; 100_000];
    let before = namespace.stats().cache.unwrap();
    // This thread holds key 0's partition for writing: a prefetch that waited for it would
    // never return.
    namespace
        .transaction(&[&key(0)], |transaction| {
            namespace.prefetch_reads(&keys);
            namespace.prefetch_reads(&[b"", &too_long, &key(1000)]);
            transaction.put(&key(0), &value(0, 1, VALUE_BYTES), 0)
        })
        .unwrap();
    let after = namespace.stats().cache.unwrap();
    assert_eq!((after.hits, after.misses), (before.hits, before.misses), "a prefetch is not an access");
    for number in 0..64 {
        let step = u64::from(number == 0);
        assert_eq!(namespace.get(&key(number)).unwrap().unwrap().bytes, value(number, step, VALUE_BYTES));
    }
}
