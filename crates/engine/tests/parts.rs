//! Parts of a key (`Transaction::put_part`): records that belong to a key, are never keys
//! themselves (not counted, listed, scanned or picked at random), go when the key is deleted,
//! replaced, expired or flushed, move with RENAME, survive restarts and crashes with every index
//! placement (the dram index is rebuilt from the records at every start), and are written
//! atomically with their key across power cuts; a key's second part space goes with it too.

mod common;

use std::sync::Arc;

use common::workload::env_number;
use common::*;
use hybridkv_engine::{now_unix_ms, Database, Durability, EngineError, Namespace, RestartKind, Tier, SECOND_PART_SPACE};
use hybridkv_media::sim::SimStore;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn write_with_parts(namespace: &Namespace, key: &[u8], version: u64, parts: u32) {
    namespace
        .transaction(&[key], |transaction| {
            transaction.put(key, &version_value(version, parts), 0)?;
            for number in 0..parts {
                transaction.put_part(key, number, version_value(version, number))?;
            }
            // `put` dropped the old parts; the new ones are written after it in the same batch.
            Ok(())
        })
        .unwrap();
}

/// A database of one dram/dram namespace with durability `none` on a simulated medium.
fn simulated_dram_database(seed: u64) -> Database {
    let config = config_for(std::path::Path::new("/sim"), vec![small_namespace("ns", Tier::Dram, Tier::Dram, Durability::None)]);
    Database::open_with(config, Arc::new(SimStore::new(seed))).unwrap()
}

fn version_value(version: u64, number: u32) -> Vec<u8> {
    format!("{version}/{number}").into_bytes()
}

fn parts_of(namespace: &Namespace, key: &[u8]) -> Vec<Vec<u8>> {
    namespace
        .transaction(&[key], |transaction| {
            let mut parts = Vec::new();
            while let Some(part) = transaction.get_part(key, parts.len() as u32)? {
                parts.push(part);
            }
            Ok(parts)
        })
        .unwrap()
}

fn listed_keys(namespace: &Namespace) -> Vec<Vec<u8>> {
    scan_all_keys(namespace).into_iter().collect()
}

fn scanned_keys(namespace: &Namespace) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    namespace
        .scan_records(|key, _| {
            keys.push(key.to_vec());
            true
        })
        .unwrap();
    keys.sort();
    keys
}

/// Only the keys are visible as keys, and each has exactly the parts written with it.
fn assert_keys_and_parts(namespace: &Namespace, expected: &[(&[u8], u32)], context: &str) {
    let mut keys: Vec<Vec<u8>> = expected.iter().map(|(key, _)| key.to_vec()).collect();
    keys.sort();
    assert_eq!(namespace.key_count(), expected.len() as u64, "{context}");
    assert_eq!(listed_keys(namespace), keys, "{context}");
    assert_eq!(scanned_keys(namespace), keys, "{context}");
    for &(key, parts) in expected {
        assert_eq!(namespace.part_count(key).unwrap(), parts, "{context}");
        assert_eq!(parts_of(namespace, key).len() as u32, parts, "{context}");
    }
}

#[test]
fn parts_are_not_keys_and_live_and_die_with_their_key() {
    for index in INDEX_TIERS {
        for data in DATA_TIERS {
            let context = format!("{index}/{data}");
            let store = SimStore::new(3);
            let provider = Arc::new(store.clone());
            let config = config_for(std::path::Path::new("/sim"), vec![small_namespace("ns", index, data, Durability::Always)]);
            let database = Database::open_with(config.clone(), provider.clone()).unwrap();
            let namespace = database.namespace(0).unwrap().clone();
            write_with_parts(&namespace, b"owner", 1, 5);
            write_with_parts(&namespace, b"small", 1, 0);
            namespace.put(b"plain", b"v", 0).unwrap();
            assert_keys_and_parts(&namespace, &[(b"owner", 5), (b"small", 0), (b"plain", 0)], &context);
            assert_eq!(parts_of(&namespace, b"owner")[3], version_value(1, 3), "{context}");
            // Writing fewer parts through `put` leaves no stale ones behind.
            write_with_parts(&namespace, b"owner", 2, 3);
            assert_keys_and_parts(&namespace, &[(b"owner", 3), (b"small", 0), (b"plain", 0)], &context);
            // A new expiry keeps them; a rename moves them; a delete takes them.
            namespace.transaction(&[b"owner"], |t| t.put_keeping_parts(b"owner", b"root", u64::MAX / 2)).unwrap();
            assert_eq!(namespace.part_count(b"owner").unwrap(), 3, "{context}");
            namespace.transaction(&[b"owner", b"plain"], |t| t.rename(b"owner", b"plain")).unwrap();
            assert_keys_and_parts(&namespace, &[(b"plain", 3), (b"small", 0)], &context);
            assert_eq!(namespace.part_count(b"owner").unwrap(), 0, "{context}");
            assert_eq!(parts_of(&namespace, b"plain")[2], version_value(2, 2), "{context}");

            // Across a clean restart and a process crash (the dram index is rebuilt from records).
            database.close().unwrap();
            let database = Database::open_with(config.clone(), provider.clone()).unwrap();
            let namespace = database.namespace(0).unwrap().clone();
            assert_keys_and_parts(&namespace, &[(b"plain", 3), (b"small", 0)], &format!("{context} restarted"));
            store.freeze();
            drop(namespace);
            drop(database);
            store.crash_process();
            let database = Database::open_with(config.clone(), provider.clone()).unwrap();
            let namespace = database.namespace(0).unwrap().clone();
            assert_keys_and_parts(&namespace, &[(b"plain", 3), (b"small", 0)], &format!("{context} crashed"));

            // An expired key's parts go when expiry is reclaimed; FLUSHDB takes everything.
            write_with_parts(&namespace, b"short", 7, 4);
            namespace.transaction(&[b"short"], |t| t.put_keeping_parts(b"short", b"root", 1)).unwrap();
            // Expiry reclaim visits a few partitions per round: enough rounds to pass them all.
            for _ in 0..200 {
                database.run_maintenance_once().unwrap();
            }
            assert_eq!(namespace.part_count(b"short").unwrap(), 0, "{context}");
            assert_keys_and_parts(&namespace, &[(b"plain", 3), (b"small", 0)], &context);
            namespace.clear().unwrap();
            assert_keys_and_parts(&namespace, &[], &context);
            assert_eq!(namespace.part_count(b"plain").unwrap(), 0, "{context}");
            database.close().unwrap();
        }
    }
}

#[test]
fn parts_per_key_are_limited_with_a_typed_error() {
    let database = simulated_dram_database(4);
    let namespace = database.namespace(0).unwrap();
    let limit = namespace.parts_per_key_max();
    assert!(limit > 100);
    let result = namespace.transaction(&[b"k"], |t| {
        t.put(b"k", b"root", 0)?;
        t.put_part(b"k", limit, b"one too many")
    });
    assert!(matches!(result, Err(EngineError::TooManyParts { limit: reported }) if reported == limit), "{result:?}");
    // A key with every part it may have is still deleted in one batch.
    write_with_parts(namespace, b"k", 1, limit);
    assert!(namespace.delete(b"k").unwrap());
    assert_eq!(namespace.part_count(b"k").unwrap(), 0);
    assert_eq!(namespace.key_count(), 0);
}

fn write_in_both_spaces(namespace: &Namespace, key: &[u8], first: u32, second: u32) {
    namespace
        .transaction(&[key], |transaction| {
            transaction.put(key, b"root", 0)?;
            for number in 0..first {
                transaction.put_part(key, number, version_value(1, number))?;
            }
            for number in SECOND_PART_SPACE..SECOND_PART_SPACE + second {
                transaction.put_part(key, number, version_value(2, number))?;
            }
            Ok(())
        })
        .unwrap();
}

fn second_space_parts_of(namespace: &Namespace, key: &[u8]) -> Vec<Vec<u8>> {
    namespace
        .transaction(&[key], |transaction| {
            let mut parts = Vec::new();
            while let Some(part) = transaction.get_part(key, SECOND_PART_SPACE + parts.len() as u32)? {
                parts.push(part);
            }
            Ok(parts)
        })
        .unwrap()
}

#[test]
fn parts_of_the_second_space_go_with_their_key_as_the_first_spaces_do() {
    let database = simulated_dram_database(7);
    let namespace = database.namespace(0).unwrap();
    write_in_both_spaces(namespace, b"k", 3, 2);
    assert_eq!(namespace.part_count(b"k").unwrap(), 5);
    assert_eq!(second_space_parts_of(namespace, b"k"), vec![version_value(2, SECOND_PART_SPACE), version_value(2, SECOND_PART_SPACE + 1)]);
    namespace.transaction(&[b"k", b"moved"], |t| t.rename(b"k", b"moved")).unwrap();
    namespace.transaction(&[b"moved", b"copy"], |t| t.copy(b"moved", b"copy")).unwrap();
    for key in [&b"moved"[..], b"copy"] {
        assert_eq!((parts_of(namespace, key).len(), second_space_parts_of(namespace, key).len()), (3, 2));
    }
    assert_eq!(namespace.part_count(b"k").unwrap(), 0);
    namespace.put(b"copy", b"plain", 0).unwrap();
    assert_eq!(namespace.part_count(b"copy").unwrap(), 0, "put drops both spaces");
    // Each space holds as many parts as a key may have; the key still goes in one batch.
    let limit = namespace.parts_per_key_max();
    write_in_both_spaces(namespace, b"full", limit, limit);
    let result = namespace.transaction(&[b"full"], |t| t.put_part(b"full", SECOND_PART_SPACE + limit, b"one too many"));
    assert!(matches!(result, Err(EngineError::TooManyParts { .. })), "{result:?}");
    assert!(namespace.delete(b"full").unwrap());
    assert!(namespace.delete(b"moved").unwrap());
    assert_eq!((namespace.part_count(b"full").unwrap(), namespace.part_count(b"moved").unwrap()), (0, 0));
    assert_eq!(namespace.key_count(), 1);
}

/// Replacing a key deletes its parts while they are still pending (not yet flushed into the
/// index tables) as well as once they are published.
#[test]
fn a_put_takes_pending_and_published_parts() {
    let database = simulated_dram_database(5);
    let namespace = database.namespace(0).unwrap();
    write_with_parts(namespace, b"pending", 1, 4);
    namespace.put(b"pending", b"plain", 0).unwrap();
    assert_eq!(namespace.part_count(b"pending").unwrap(), 0, "pending parts");
    write_with_parts(namespace, b"published", 1, 4);
    database.checkpoint().unwrap();
    namespace.put(b"published", b"plain", 0).unwrap();
    assert_eq!(namespace.part_count(b"published").unwrap(), 0, "published parts");
}

#[test]
fn a_key_whose_parts_do_not_fit_in_one_batch_is_not_renamed() {
    let database = simulated_dram_database(6);
    let namespace = database.namespace(0).unwrap();
    let part = vec![7u8; 8 * 1024];
    // Ten 8 KiB parts, written in two batches: more than one 64 KiB write block holds.
    for numbers in [0..5u32, 5..10] {
        namespace
            .transaction(&[b"big"], |t| {
                t.put_keeping_parts(b"big", b"root", 0)?;
                numbers.clone().try_for_each(|number| t.put_part(b"big", number, part.as_slice()))
            })
            .unwrap();
    }
    namespace.put(b"target", b"old", 0).unwrap();
    let result = namespace.transaction(&[b"big", b"target"], |t| t.rename(b"big", b"target"));
    let block_space = (64 * 1024 - 64) as usize;
    assert!(
        matches!(result, Err(EngineError::PartsTooLarge { operation: "rename", parts: 10, len_bytes, limit_bytes }) if len_bytes > limit_bytes && limit_bytes == block_space),
        "{result:?}"
    );
    // Nothing moved.
    assert_keys_and_parts(namespace, &[(b"big", 10), (b"target", 0)], "after the refused rename");
    assert_eq!(namespace.get(b"target").unwrap().unwrap().bytes, b"old");
}

#[test]
fn a_copy_has_its_own_parts_and_leaves_the_source_as_it_was() {
    let database = simulated_dram_database(7);
    let namespace = database.namespace(0).unwrap();
    write_with_parts(namespace, b"source", 1, 3);
    write_with_parts(namespace, b"target", 9, 5);
    assert!(namespace.transaction(&[b"source", b"target"], |t| t.copy(b"source", b"target")).unwrap());
    assert_keys_and_parts(namespace, &[(b"source", 3), (b"target", 3)], "the target's five old parts gave way to three");
    assert_eq!(parts_of(namespace, b"target"), parts_of(namespace, b"source"));
    assert_eq!(namespace.get(b"target").unwrap().unwrap().bytes, version_value(1, 3));
    namespace.delete(b"source").unwrap();
    assert_keys_and_parts(namespace, &[(b"target", 3)], "deleting the source keeps the copy's parts");
    assert!(!namespace.transaction(&[b"missing", b"other"], |t| t.copy(b"missing", b"other")).unwrap());
    assert_keys_and_parts(namespace, &[(b"target", 3)], "copying nothing writes nothing");
}

#[test]
fn deleting_every_key_in_a_transaction_takes_parts_and_expired_keys_or_nothing_when_too_big() {
    let database = simulated_dram_database(8);
    let namespace = database.namespace(0).unwrap();
    write_with_parts(namespace, b"hash", 1, 3);
    namespace.put(b"expired", b"x", 1).unwrap();
    namespace.put(b"plain", b"y", 0).unwrap();
    let (kept, _) = namespace
        .transaction_over_all(|t| {
            t.put(b"early", b"gone with the rest", 0)?;
            t.delete_every_key()?;
            t.put(b"late", b"kept", 0)?;
            t.key_count()
        })
        .unwrap();
    assert_eq!(kept, 1, "the transaction sees only what it wrote after");
    assert_keys_and_parts(namespace, &[(b"late", 0)], "every key before went, parts and expired keys too");

    // 1,500 keys of 48-byte records: more than one 64 KiB write block holds.
    for first in (0..1500u32).step_by(500) {
        let keys: Vec<Vec<u8>> = (first..first + 500).map(|number| format!("k{number:05}").into_bytes()).collect();
        let key_refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        namespace.transaction(&key_refs, |t| key_refs.iter().try_for_each(|key| t.put(key, b"", 0))).unwrap();
    }
    let result = namespace.transaction_over_all(|t| t.delete_every_key());
    assert!(matches!(result, Err(EngineError::BatchTooLarge { len_bytes, limit_bytes }) if len_bytes > limit_bytes), "{result:?}");
    assert_eq!(namespace.key_count(), 1501, "nothing deleted");
}

/// After a power cut, every key's record and parts are of one write: the record's version is
/// every part's version and its part count is the number of parts.
#[test]
fn a_key_and_its_parts_are_written_atomically_across_power_cuts() {
    for seed in 0..env_number("HYBRIDKV_PARTS_POWER_CUTS", 60) {
        let mut rng = StdRng::seed_from_u64(seed);
        let SimRun { index, data, store, provider, config } = random_sim_run(&mut rng, seed);
        let database = Database::open_with(config.clone(), provider.clone()).unwrap();
        let namespace = database.namespace(0).unwrap().clone();
        store.cut_power_at(store.operations() + rng.gen_range(1..200));
        for version in 1..60u64 {
            let key = key(rng.gen_range(0..4));
            let parts = rng.gen_range(0..12);
            let written = namespace.transaction(&[&key], |t| {
                if parts == 0 {
                    return t.delete(&key).map(|_| ());
                }
                t.put(&key, &version_value(version, parts), 0)?;
                (0..parts).try_for_each(|number| t.put_part(&key, number, version_value(version, number)))
            });
            if written.is_err() {
                break;
            }
        }
        store.freeze();
        drop(namespace);
        drop(database);
        store.power_cut();
        let database = Database::open_with(config, provider).unwrap();
        let namespace = database.namespace(0).unwrap();
        let keys = listed_keys(namespace);
        assert_eq!(namespace.key_count(), keys.len() as u64, "seed {seed}");
        for number in 0..4 {
            let key = key(number);
            let Some(record) = namespace.get(&key).unwrap() else {
                assert_eq!(namespace.part_count(&key).unwrap(), 0, "seed {seed}: parts without their key");
                continue;
            };
            let text = String::from_utf8(record.bytes).unwrap();
            let (version, count) = text.split_once('/').unwrap();
            let parts = parts_of(namespace, &key);
            assert_eq!(parts.len().to_string(), count, "seed {seed} ({index}/{data})");
            for (part_number, part) in parts.iter().enumerate() {
                assert_eq!(part, &format!("{version}/{part_number}").into_bytes(), "seed {seed} ({index}/{data})");
            }
        }
    }
}

/// How a run of `key_and_part_counts_are_right_after_every_kind_of_start` ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Clean,
    /// At a random media operation: a change of the index may be cut in the middle.
    ProcessCrash,
    PowerCut,
}

/// The key count (DBSIZE) agrees with the keys listed, the count of keys with an expiry with
/// those whose value has one, and every key has the parts written with it; returns the keys.
fn assert_counts_consistent(namespace: &Namespace, context: &str) -> Vec<Vec<u8>> {
    let keys = listed_keys(namespace);
    assert_eq!(namespace.key_count(), keys.len() as u64, "{context}");
    let values: Vec<_> = keys.iter().map(|key| namespace.get(key).unwrap().unwrap()).collect();
    let expiring = values.iter().filter(|value| value.expiry_unix_ms != 0).count();
    assert_eq!(namespace.expiring_key_count(), expiring as u64, "{context}");
    for (key, value) in keys.iter().zip(values) {
        let record = String::from_utf8(value.bytes).unwrap();
        let (_, count) = record.split_once('/').unwrap();
        assert_eq!(namespace.part_count(key).unwrap().to_string(), count, "{context}");
        assert_eq!(parts_of(namespace, key).len().to_string(), count, "{context}");
    }
    keys
}

/// Counts after every kind of start: warm (from the index directory, no table read), after a
/// process crash (only changes it interrupted are recounted), after a power cut (every partition
/// the log tail touched is repaired and recounted) and after a cold rebuild. Half the writes
/// give their key an expiry (a day ahead: none expires during the test), so keys gain and lose
/// one. 100 seeds by default (seed 61 found records replayed after a process crash lost by a later
/// power cut: recovery.md, "Records in DRAM"); `HYBRIDKV_COUNT_FIRST_SEED` and
/// `HYBRIDKV_COUNT_RESTARTS` choose others.
#[test]
fn key_and_part_counts_are_right_after_every_kind_of_start() {
    let tomorrow_unix_ms = now_unix_ms() + 86_400_000;
    let first = env_number("HYBRIDKV_COUNT_FIRST_SEED", 0);
    for seed in first..first + env_number("HYBRIDKV_COUNT_RESTARTS", 100) {
        let mut rng = StdRng::seed_from_u64(seed);
        let index = [Tier::Shmem, Tier::Pmem][seed as usize % 2];
        let data = DATA_TIERS[rng.gen_range(0..3)];
        let store = SimStore::new(seed);
        let provider = Arc::new(store.clone());
        let config = config_for(std::path::Path::new("/sim"), vec![small_namespace("ns", index, data, Durability::Always)]);
        let mut database = Database::open_with(config.clone(), provider.clone()).unwrap();
        let mut version = 0;
        for stop in [Stop::Clean, Stop::ProcessCrash, Stop::PowerCut, Stop::Clean] {
            let context = format!("seed {seed} ({index}/{data}), after {stop:?}");
            let namespace = database.namespace(0).unwrap().clone();
            if stop != Stop::Clean {
                store.cut_power_at(store.operations() + rng.gen_range(1..600));
            }
            for _ in 0..60 {
                version += 1;
                let key = key(rng.gen_range(0..24));
                let parts = rng.gen_range(0..6);
                let written = namespace.transaction(&[&key], |t| {
                    if parts == 0 && rng.gen_bool(0.5) {
                        return t.delete(&key).map(|_| ());
                    }
                    let expiry_unix_ms = if rng.gen_bool(0.5) { tomorrow_unix_ms } else { 0 };
                    t.put(&key, &version_value(version, parts), expiry_unix_ms)?;
                    (0..parts).try_for_each(|number| t.put_part(&key, number, version_value(version, number)))
                });
                if written.is_err() {
                    break;
                }
            }
            drop(namespace);
            match stop {
                Stop::Clean => database.close().unwrap(),
                Stop::ProcessCrash | Stop::PowerCut => {
                    store.freeze();
                    drop(database);
                    if stop == Stop::PowerCut { store.power_cut() } else { store.crash_process() }
                }
            }
            database = Database::open_with(config.clone(), provider.clone()).unwrap();
            let expected = match stop {
                Stop::Clean => RestartKind::Warm,
                // A power cut loses an index in shmem.
                Stop::PowerCut if index == Tier::Shmem => RestartKind::Cold,
                _ => RestartKind::AfterCrash,
            };
            assert_eq!(database.restart_reports()[0].kind, expected, "{context}");
            assert_counts_consistent(database.namespace(0).unwrap(), &context);
        }
        let keys = listed_keys(database.namespace(0).unwrap());
        database.close().unwrap();
        let mut rebuilt = config.clone();
        rebuilt.namespaces[0].index = Tier::Dram;
        let database = Database::open_with(rebuilt, provider).unwrap();
        assert_eq!(database.restart_reports()[0].kind, RestartKind::Cold);
        let context = format!("seed {seed} ({index}/{data}), cold rebuild");
        assert_eq!(assert_counts_consistent(database.namespace(0).unwrap(), &context), keys, "{context}");
    }
}
