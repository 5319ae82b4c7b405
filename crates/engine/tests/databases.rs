//! Database numbers past the configured namespaces: opened on demand with the first namespace's
//! placement, and opened again at start once they left media behind.

mod common;

use std::sync::Arc;

use common::*;
use hybridkv_engine::{Config, Database, Durability, KeySnapshot, Tier};
use hybridkv_media::sim::SimStore;

fn four_databases() -> Config {
    let mut config = config_for(std::path::Path::new("/sim"), vec![small_namespace("first", Tier::Pmem, Tier::Ssd, Durability::Always)]);
    config.databases = 4;
    config
}

fn opened_numbers(database: &Database) -> Vec<usize> {
    database.namespaces().map(|(number, _)| number).collect()
}

#[test]
fn an_on_demand_database_opens_when_asked_and_again_at_start_once_it_has_media() {
    let store = SimStore::new(11);
    let provider = Arc::new(store.clone());
    let database = Database::open_with(four_databases(), provider.clone()).unwrap();
    assert_eq!(database.database_count(), 4);
    assert_eq!(opened_numbers(&database), [0]);
    assert!(database.namespace(2).is_none());
    let second = database.open_namespace(2).unwrap().clone();
    assert_eq!(second.name(), "db2");
    assert_eq!(second.config().data, Tier::Ssd);
    assert!(Arc::ptr_eq(&second, database.open_namespace(2).unwrap()), "opened once");
    let past_the_last = database.open_namespace(4).err().expect("only 4 databases");
    assert!(past_the_last.to_string().contains("past the last one (3)"), "{past_the_last}");
    second.put(b"key", b"in db2", 0).unwrap();
    assert_eq!(opened_numbers(&database), [0, 2]);
    drop(second);

    store.freeze();
    drop(database);
    store.crash_process();
    let database = Database::open_with(four_databases(), provider.clone()).unwrap();
    assert_eq!(opened_numbers(&database), [0, 2], "db2 left media behind, db1 and db3 none");
    assert_eq!(database.restart_reports().len(), 2);
    assert_eq!(database.namespace(2).unwrap().get(b"key").unwrap().unwrap().bytes, b"in db2");
    assert_eq!(database.namespace(0).unwrap().get(b"key").unwrap(), None, "databases do not share keys");
    database.close().unwrap();

    let database = Database::open_with(four_databases(), provider).unwrap();
    assert_eq!(opened_numbers(&database), [0, 2]);
    assert_eq!(database.namespace(2).unwrap().get(b"key").unwrap().unwrap().bytes, b"in db2");
}

#[test]
fn threads_opening_one_database_at_once_get_the_same_namespace() {
    let store = SimStore::new(12);
    let database = Database::open_with(four_databases(), Arc::new(store)).unwrap();
    let opened: Vec<Arc<_>> = std::thread::scope(|scope| {
        let openers: Vec<_> = (0..4).map(|_| scope.spawn(|| database.open_namespace(3).unwrap().clone())).collect();
        openers.into_iter().map(|opener| opener.join().unwrap()).collect()
    });
    assert!(opened.iter().all(|namespace| Arc::ptr_eq(namespace, &opened[0])));
    assert_eq!(opened_numbers(&database), [0, 3]);
    assert_eq!(database.restart_reports().len(), 2);
}

#[test]
fn a_key_snapshot_is_written_whole_in_another_database_and_sync_makes_it_durable_under_any_mode() {
    let store = SimStore::new(13);
    let provider = Arc::new(store.clone());
    let mut config = config_for(std::path::Path::new("/sim"), vec![small_namespace("first", Tier::Pmem, Tier::Ssd, Durability::None)]);
    config.databases = 2;
    let database = Database::open_with(config.clone(), provider.clone()).unwrap();
    let source = database.namespace(0).unwrap();
    source
        .transaction(&[b"hash"], |t| {
            t.put(b"hash", b"root", 4_000_000_000_000)?;
            (0..3).try_for_each(|number| t.put_part(b"hash", number, format!("part {number}").as_bytes()))
        })
        .unwrap();
    let snapshot: KeySnapshot = source.transaction(&[b"hash"], |t| t.snapshot(b"hash", "copy")).unwrap().expect("written above");
    assert_eq!(snapshot.parts.len(), 3);
    assert!(source.transaction(&[b"absent"], |t| t.snapshot(b"absent", "copy")).unwrap().is_none());
    let target = database.open_namespace(1).unwrap();
    target.transaction(&[b"hash"], |t| t.put_snapshot(b"hash", &snapshot)).unwrap();
    target.sync().unwrap();

    store.freeze();
    drop(database);
    store.power_cut();
    let database = Database::open_with(config, provider).unwrap();
    let target = database.namespace(1).expect("reopened: it has media");
    let copied = target.transaction(&[b"hash"], |t| t.snapshot(b"hash", "copy")).unwrap().expect("durable before the cut");
    assert_eq!((copied.value.bytes, copied.value.expiry_unix_ms, copied.parts), (snapshot.value.bytes, snapshot.value.expiry_unix_ms, snapshot.parts));
}

/// The namespace serving each database number, "-" where none is open.
fn served_by(database: &Database) -> Vec<String> {
    (0..database.database_count()).map(|number| database.namespace(number).map_or("-".into(), |namespace| namespace.name().to_string())).collect()
}

#[test]
fn swapped_databases_exchange_namespaces_for_good_across_a_clean_close_and_a_crash() {
    let store = SimStore::new(14);
    let provider = Arc::new(store.clone());
    let database = Database::open_with(four_databases(), provider.clone()).unwrap();
    database.namespace(0).unwrap().put(b"key", b"zero", 0).unwrap();
    database.open_namespace(2).unwrap().put(b"key", b"two", 0).unwrap();
    database.swap(0, 2).unwrap();
    assert_eq!(served_by(&database), ["db2", "-", "first", "-"]);
    assert_eq!(database.namespace(0).unwrap().get(b"key").unwrap().unwrap().bytes, b"two");
    assert_eq!((database.home(0), database.home(2)), (2, 0));
    database.swap(1, 1).unwrap();
    assert_eq!(served_by(&database), ["db2", "-", "first", "-"], "a swap with itself changes nothing");
    database.close().unwrap();

    let database = Database::open_with(four_databases(), provider.clone()).unwrap();
    assert_eq!(served_by(&database), ["db2", "-", "first", "-"]);
    assert_eq!(database.namespace(2).unwrap().get(b"key").unwrap().unwrap().bytes, b"zero");
    database.swap(2, 3).unwrap();
    assert_eq!(served_by(&database), ["db2", "-", "db3", "first"], "the unopened side is opened");
    store.freeze();
    drop(database);
    store.crash_process();

    let database = Database::open_with(four_databases(), provider).unwrap();
    assert_eq!(served_by(&database), ["db2", "-", "db3", "first"]);
    assert_eq!(database.namespace(3).unwrap().get(b"key").unwrap().unwrap().bytes, b"zero");
    assert!(database.swap(0, 4).unwrap_err().to_string().contains("past the last one (3)"));
}

#[test]
fn a_namespace_swapped_to_a_number_past_a_smaller_count_is_left_unopened_and_comes_back_with_the_count() {
    let store = SimStore::new(15);
    let provider = Arc::new(store.clone());
    let database = Database::open_with(four_databases(), provider.clone()).unwrap();
    database.swap(0, 3).unwrap();
    database.namespace(3).unwrap().put(b"key", b"first's", 0).unwrap();
    database.close().unwrap();

    let mut two_databases = four_databases();
    two_databases.databases = 2;
    let database = Database::open_with(two_databases, provider.clone()).unwrap();
    assert_eq!(served_by(&database), ["db3", "-"], "database 0 is db3's; first serves number 3, past the last");
    database.close().unwrap();
    let database = Database::open_with(four_databases(), provider).unwrap();
    assert_eq!(served_by(&database), ["db3", "-", "-", "first"]);
    assert_eq!(database.namespace(3).unwrap().get(b"key").unwrap().unwrap().bytes, b"first's");
}

/// Power cut at every operation of a series of swaps: after the reboot each number is served
/// as after the last acknowledged swap, or after the one that was in flight.
#[test]
fn a_power_cut_during_swaps_keeps_every_acknowledged_swap_and_the_one_in_flight_whole_or_not_at_all() {
    const SWAPS: [(usize, usize); 5] = [(0, 1), (1, 2), (2, 3), (3, 0), (0, 2)];
    for cut_after in 0..(2 * SWAPS.len() as u64 + 1) {
        let store = SimStore::new(1_000 + cut_after);
        let provider = Arc::new(store.clone());
        let database = Database::open_with(four_databases(), provider.clone()).unwrap();
        (0..4).for_each(|number| assert!(database.open_namespace(number).is_ok()));
        let mut acknowledged = served_by(&database);
        let mut in_flight = None;
        store.cut_power_at(store.operations() + cut_after);
        for (first, second) in SWAPS {
            let mut after = acknowledged.clone();
            after.swap(first, second);
            if database.swap(first, second).is_err() {
                in_flight = Some(after);
                break;
            }
            acknowledged = after;
        }
        store.freeze();
        drop(database);
        store.power_cut();
        let database = Database::open_with(four_databases(), provider).unwrap();
        let recovered = served_by(&database);
        assert!(recovered == acknowledged || Some(&recovered) == in_flight.as_ref(), "cut after {cut_after}: {recovered:?}, acknowledged {acknowledged:?}, in flight {in_flight:?}");
    }
}
