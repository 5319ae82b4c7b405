//! Deferred commits: writes that return a ticket at once and are acknowledged by a callback once
//! durable (what the server uses), with several flushes in flight.

mod common;

use std::sync::mpsc;
use std::sync::Arc;

use common::*;
use hybridkv_engine::{Database, Durability, EngineError, Namespace, Tier, MIB, PERIODIC_MS_MAX};
use hybridkv_media::sim::{FaultKind, FaultOn, FaultPlan, SimStore};

/// Puts `key` without waiting; returns its ticket (durability `always` always gives one).
fn put_deferred(namespace: &Namespace, key: &[u8], value: &[u8]) -> hybridkv_engine::CommitTicket {
    let ((), ticket) = namespace.transaction_deferred(&[key], |transaction| transaction.put(key, value, 0)).unwrap();
    ticket.expect("durability always returns a ticket")
}

#[test]
fn callbacks_fire_once_durable_and_every_acknowledged_write_survives_a_power_cut() {
    let store = SimStore::new(11);
    let provider = Arc::new(store.clone());
    let config = config_for(std::path::Path::new("/sim"), vec![small_namespace("ns", Tier::Pmem, Tier::Ssd, Durability::Always)]);
    let database = Database::open_with(config.clone(), provider.clone()).unwrap();
    let namespace = database.namespace(0).unwrap().clone();
    const THREADS: u64 = 4;
    const WRITES: u64 = 300;
    let (acknowledged_sender, acknowledged) = mpsc::channel();
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (namespace, acknowledged_sender) = (namespace.clone(), acknowledged_sender.clone());
            scope.spawn(move || {
                for number in 0..WRITES {
                    let id = thread * WRITES + number;
                    let ticket = put_deferred(&namespace, &key(id), &value(id, 1, 64));
                    assert!(namespace.get(&key(id)).unwrap().is_some(), "visible before it is durable");
                    let sender = acknowledged_sender.clone();
                    namespace.on_durable(ticket, Box::new(move |result| sender.send((id, result.is_ok())).unwrap()));
                }
            });
        }
    });
    drop(acknowledged_sender);
    let outcomes: Vec<(u64, bool)> = acknowledged.iter().take((THREADS * WRITES) as usize).collect();
    assert_eq!(outcomes.len() as u64, THREADS * WRITES, "every callback is called");
    assert!(outcomes.iter().all(|(_, ok)| *ok));
    let stats = namespace.stats();
    assert!(stats.flushes < stats.writes, "group commit: {} flushes for {} writes", stats.flushes, stats.writes);
    store.power_cut();
    drop(namespace);
    drop(database);
    let database = Database::open_with(config, provider).unwrap();
    let namespace = database.namespace(0).unwrap();
    for (id, _) in outcomes {
        assert_eq!(namespace.get(&key(id)).unwrap().unwrap().bytes, value(id, 1, 64), "acknowledged write {id} lost");
    }
}

#[test]
fn a_failed_sync_fails_the_callbacks_and_their_writes_stay_invisible() {
    let store = SimStore::new(12);
    let provider = Arc::new(store.clone());
    let config = config_for(std::path::Path::new("/sim"), vec![small_namespace("ns", Tier::Pmem, Tier::Ssd, Durability::Always)]);
    let database = Database::open_with(config, provider).unwrap();
    let namespace = database.namespace(0).unwrap();
    store.inject(FaultPlan { at_op: store.operations() + 1, kind: FaultKind::Eio, on: FaultOn::Persist, repeat: true });
    let ticket = put_deferred(namespace, b"lost", b"1");
    let (sender, outcome) = mpsc::channel();
    namespace.on_durable(ticket, Box::new(move |result| sender.send(result).unwrap()));
    let error = outcome.recv().unwrap().unwrap_err();
    assert!(matches!(error, EngineError::Poisoned { .. }), "{error}");
    assert_eq!(namespace.get(b"lost").unwrap(), None, "an unacknowledged write is withdrawn");
    let (sender, late) = mpsc::channel();
    namespace.on_durable(ticket, Box::new(move |result| sender.send(result.is_err()).unwrap()));
    assert!(late.recv().unwrap(), "a callback left after the failure fails at once");
}

#[test]
fn a_flush_failing_at_any_step_calls_its_callbacks_and_refuses_later_writes() {
    // A failure in each media operation of a committer's flush in turn: the write-out, the sync
    // or the index's publication (which once failed without refusing writes, and its waiters
    // waited for ever).
    for fault_offset in 1..=8 {
        let store = SimStore::new(13);
        let provider = Arc::new(store.clone());
        let config = config_for(std::path::Path::new("/sim"), vec![small_namespace("ns", Tier::Pmem, Tier::Ssd, Durability::Always)]);
        let database = Database::open_with(config, provider).unwrap();
        let namespace = database.namespace(0).unwrap();
        store.inject(FaultPlan { at_op: store.operations() + fault_offset, kind: FaultKind::Eio, on: FaultOn::Any, repeat: true });
        let ticket = put_deferred(namespace, b"k", b"v");
        let (sender, outcome) = mpsc::channel();
        namespace.on_durable(ticket, Box::new(move |result| sender.send(result.is_ok()).unwrap()));
        let acknowledged = outcome
            .recv_timeout(std::time::Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("fault at operation +{fault_offset}: the callback was never called"));
        if !acknowledged {
            let later = namespace.transaction_deferred(&[b"j"], |transaction| transaction.put(b"j", b"w", 0));
            assert!(matches!(later, Err(EngineError::Poisoned { .. })), "fault at operation +{fault_offset}: a write after a failed flush");
        }
        store.clear_faults();
    }
}

/// A namespace with durability `periodic` whose one write block holds a backlog of 200,000 small
/// records (a sealed block would wake a committer to flush it).
fn periodic_namespace_of_big_blocks() -> hybridkv_engine::NamespaceConfig {
    let mut namespace_config = small_namespace("ns", Tier::Pmem, Tier::Ssd, Durability::Periodic);
    namespace_config.data_bytes = 64 * MIB;
    namespace_config.index_bytes = 32 * MIB;
    namespace_config.write_block_bytes = 16 * MIB;
    namespace_config.checkpoint_interval_bytes = 16 * MIB;
    namespace_config
}

#[test]
fn periodic_durability_returns_a_ticket_only_under_back_pressure() {
    let dir = tempfile::tempdir().unwrap();
    let database = Database::open(config_for(dir.path(), vec![periodic_namespace_of_big_blocks()])).unwrap();
    let namespace = database.namespace(0).unwrap();
    let ((), ticket) = namespace.transaction_deferred(&[b"k"], |transaction| transaction.put(b"k", b"v", 0)).unwrap();
    assert_eq!(ticket, None);
    let (read, ticket) = namespace.transaction_deferred(&[b"k"], |transaction| transaction.get(b"k")).unwrap();
    assert_eq!((read.unwrap().bytes, ticket), (b"v".to_vec(), None), "a transaction that only reads needs no flush");
    // Nothing flushes in the background here: the backlog grows until writes get tickets.
    let first_ticket = (0..200_000u64).find_map(|number| {
        let key = key(number);
        namespace.transaction_deferred(&[&key], |transaction| transaction.put(&key, b"v", 0)).unwrap().1
    });
    let ticket = first_ticket.expect("a growing backlog makes writers wait");
    let stats = namespace.stats();
    assert_eq!(stats.writes_held_for_backlog, 1, "INFO counts the held write");
    assert!(stats.records_awaiting_publication > 100_000, "{}", stats.records_awaiting_publication);
    namespace.wait_durable(ticket).unwrap();
    let ((), after) = namespace.transaction_deferred(&[b"k"], |transaction| transaction.put(b"k", b"w", 0)).unwrap();
    assert_eq!(after, None, "the flush cleared the backlog");
}

/// With background maintenance, a backlog of small records (many to a write block, so no block
/// seals) is flushed and published by a committer before writers would have to wait for it, long
/// before the periodic flush is due.
#[test]
fn a_backlog_of_small_records_is_flushed_in_the_background_before_writers_wait() {
    let dir = tempfile::tempdir().unwrap();
    let mut namespace_config = periodic_namespace_of_big_blocks();
    namespace_config.periodic_ms = PERIODIC_MS_MAX;
    let mut config = config_for(dir.path(), vec![namespace_config]);
    config.background_maintenance = true;
    let database = Database::open(config).unwrap();
    let namespace = database.namespace(0).unwrap();
    // Past the early-flush mark (a quarter of the back-pressure limit), short of the limit.
    for number in 0..40_000u64 {
        let key = key(number);
        let ((), ticket) = namespace.transaction_deferred(&[&key], |transaction| transaction.put(&key, b"v", 0)).unwrap();
        assert_eq!(ticket, None, "write {number} was held");
    }
    // A flush started at the mark (25,000) takes everything appended by then: at most the
    // 15,000 records after the mark may still wait (under the mark, nothing more is flushed).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while namespace.stats().records_awaiting_publication > 15_000 {
        let waiting = namespace.stats().records_awaiting_publication;
        assert!(std::time::Instant::now() < deadline, "{waiting} records still wait for publication after 20 s");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(namespace.stats().writes_held_for_backlog, 0);
}

/// Under `periodic` a write returns no ticket, and without background maintenance nothing
/// flushes it; a ticket for everything appended, redeemed with `on_durable`, has a committer
/// flush it at once (the server's WAITAOF), and the writes then survive a power cut.
#[test]
fn a_ticket_for_everything_appended_flushes_periodic_writes_now() {
    for (index, data) in [(Tier::Pmem, Tier::Ssd), (Tier::Shmem, Tier::Dram), (Tier::Dram, Tier::Pmem)] {
        let store = SimStore::new(5);
        let provider = Arc::new(store.clone());
        let config = config_for(std::path::Path::new("/sim"), vec![small_namespace("ns", index, data, Durability::Periodic)]);
        let database = Database::open_with(config.clone(), provider.clone()).unwrap();
        let namespace = database.namespace(0).unwrap().clone();
        assert!(namespace.appended_is_durable(), "{index}/{data}: nothing written yet");
        for number in 0..50 {
            let ((), ticket) = namespace.transaction_deferred(&[&key(number)], |transaction| transaction.put(&key(number), &value(number, 1, 100), 0)).unwrap();
            assert_eq!(ticket, None, "{index}/{data}: periodic writes wait for nothing");
        }
        assert!(!namespace.appended_is_durable(), "{index}/{data}");
        let (sender, flushed) = mpsc::channel();
        namespace.on_durable(namespace.ticket_for_appended(), Box::new(move |result| sender.send(result.is_ok()).unwrap()));
        assert_eq!(flushed.recv_timeout(std::time::Duration::from_secs(10)), Ok(true), "{index}/{data}");
        assert!(namespace.appended_is_durable(), "{index}/{data}");
        store.power_cut();
        drop(namespace);
        drop(database);
        let database = Database::open_with(config, provider).unwrap();
        let namespace = database.namespace(0).unwrap();
        for number in 0..50 {
            assert_eq!(namespace.get(&key(number)).unwrap().map(|found| found.bytes), Some(value(number, 1, 100)), "{index}/{data}: key {number}");
        }
    }
}
