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
