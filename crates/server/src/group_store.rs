//! The store a pipelined group of single-key writes runs on (`command::run_grouped`): the
//! group's transaction, plus the values its commands kept open: lists (pushes and pops),
//! streams (XADD) and sorted sets (ZADD, ZINCRBY, their pops). Sixteen pipelined pushes to one list decoded
//! and rewrote its top, end directory and end chunk sixteen times, though only the last records
//! are written (a key's repeated records collapse in the transaction); now the first push
//! decodes them, the last save encodes them. Any other access to a kept value's key, and the end of the group, saves
//! the value first, so every other reader sees it as written, and a save that fails aborts the
//! group, which then runs one command at a time (each command meets its own outcome as it
//! would have alone).

use hybridkv_engine::{EngineError, ScanPage, Transaction, Value};

use crate::command::{CommandError, KeyStore};
use crate::hash_layout::HashLimits;
use crate::list_layout::OpenList;
use crate::sorted_set_layout::OpenSortedSet;
use crate::stream_layout::OpenStream;

/// A value a command of a group left open for the next command on its key (boxed: an open
/// stream is a few hundred bytes, and it moves in and out of the store at every command).
pub enum Kept {
    List(Box<OpenList>),
    Stream(Box<OpenStream>),
    SortedSet(Box<KeptSortedSet>),
}

/// A sorted set with what its `save` needs besides the store.
pub struct KeptSortedSet {
    pub set: OpenSortedSet,
    pub hash_limits: HashLimits,
    /// Whether some session watched keys when the command kept it: a later watcher cannot
    /// read the key's version before the group's transaction lets its partition go, so the
    /// group's save needs no fresher answer (hash_layout's "every hash write rewrites its root").
    pub versions_watched: bool,
}

impl Kept {
    pub fn key(&self) -> &[u8] {
        match self {
            Kept::List(list) => list.key(),
            Kept::Stream(stream) => stream.key(),
            Kept::SortedSet(kept) => kept.set.key(),
        }
    }

    pub fn save(self, store: &mut dyn KeyStore) -> Result<(), CommandError> {
        match self {
            Kept::List(list) => (*list).save(store),
            Kept::Stream(stream) => (*stream).save(store),
            Kept::SortedSet(kept) => {
                let KeptSortedSet { set, hash_limits, versions_watched } = *kept;
                set.save(store, &hash_limits, versions_watched)
            }
        }
    }

    /// `save` for the group's store. A Redis error (a list over its part limit) aborts the
    /// group too: it belongs to a command whose reply was already made, and which meets it when
    /// run alone.
    fn save_or_abort(self, store: &mut dyn KeyStore) -> Result<(), EngineError> {
        self.save(store).map_err(|error| match error {
            CommandError::Engine(error) => error,
            CommandError::Redis(text) => EngineError::Aborted { reason: text.into_owned() },
        })
    }
}

/// The value of the `wanted` kind an earlier command of the group kept under `key`, else what
/// `open` reads (another kind kept there is kept again, and `open`'s read saves it first, so it
/// sees it as written). The caller ends with `keep_or_save`: the kept changes live only in the
/// value it holds.
pub fn open_kept<T>(
    store: &mut dyn KeyStore,
    key: &[u8],
    wanted: fn(Kept) -> Result<T, Kept>,
    open: impl FnOnce(&mut dyn KeyStore) -> Result<Option<T>, CommandError>,
) -> Result<Option<T>, CommandError> {
    if let Some(kept) = store.take_kept(key) {
        match wanted(kept) {
            Ok(value) => return Ok(Some(value)),
            Err(other) => keep_or_save(store, other)?,
        }
    }
    open(store)
}

/// Keeps `value` for the group's next command on its key, or saves it when `store` keeps none.
pub fn keep_or_save(store: &mut dyn KeyStore, value: Kept) -> Result<(), CommandError> {
    match store.keep(value) {
        Some(value) => value.save(store),
        None => Ok(()),
    }
}

pub struct GroupStore<'s, 't> {
    transaction: &'s mut Transaction<'t>,
    /// At most one per key; few (a group's commands).
    kept: Vec<Kept>,
    /// Keys whose kept value the running command took and has neither kept again nor replaced
    /// (`put` or `delete` of its key).
    lent: Vec<Vec<u8>>,
}

impl<'s, 't> GroupStore<'s, 't> {
    pub fn new(transaction: &'s mut Transaction<'t>) -> Self {
        GroupStore { transaction, kept: Vec::new(), lent: Vec::new() }
    }

    /// Saves every kept value (before the group's transaction commits).
    pub fn save_kept(&mut self) -> Result<(), EngineError> {
        while let Some(value) = self.kept.pop() {
            value.save_or_abort(self.transaction)?;
        }
        Ok(())
    }

    /// After each command: a command that took a kept value and returned without keeping or
    /// saving it (an error on its way) dropped the changes of the commands before it, so the
    /// group must not commit; it runs again one command at a time.
    pub fn check_nothing_dropped(&self) -> Result<(), EngineError> {
        match self.lent.is_empty() {
            true => Ok(()),
            false => Err(EngineError::Aborted { reason: "a value kept open for the group was dropped unsaved".into() }),
        }
    }

    /// Before `key`'s whole value is replaced: a value lent under it is superseded.
    fn replacing(&mut self, key: &[u8]) -> Result<(), EngineError> {
        self.lent.retain(|lent| lent != key);
        self.save_kept_value(key)
    }

    /// Saves the value kept under `key`, if any, before its key is read or written otherwise.
    fn save_kept_value(&mut self, key: &[u8]) -> Result<(), EngineError> {
        match self.kept.iter().position(|value| value.key() == key) {
            Some(at) => self.kept.swap_remove(at).save_or_abort(self.transaction),
            None => Ok(()),
        }
    }
}

impl KeyStore for GroupStore<'_, '_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<Value>, EngineError> {
        self.save_kept_value(key)?;
        self.transaction.get(key)
    }
    fn put(&mut self, key: &[u8], value: &[u8], expiry_unix_ms: u64) -> Result<(), EngineError> {
        self.replacing(key)?;
        self.transaction.put(key, value, expiry_unix_ms)
    }
    fn put_keeping_parts(&mut self, key: &[u8], value: &[u8], expiry_unix_ms: u64) -> Result<(), EngineError> {
        self.save_kept_value(key)?;
        self.transaction.put_keeping_parts(key, value, expiry_unix_ms)
    }
    fn delete(&mut self, key: &[u8]) -> Result<bool, EngineError> {
        self.replacing(key)?;
        self.transaction.delete(key)
    }
    fn rename(&mut self, source: &[u8], target: &[u8]) -> Result<bool, EngineError> {
        self.replacing(source)?;
        self.replacing(target)?;
        self.transaction.rename(source, target)
    }
    fn copy(&mut self, source: &[u8], target: &[u8]) -> Result<bool, EngineError> {
        self.save_kept_value(source)?;
        self.replacing(target)?;
        self.transaction.copy(source, target)
    }
    fn get_part(&mut self, key: &[u8], number: u32) -> Result<Option<Vec<u8>>, EngineError> {
        self.save_kept_value(key)?;
        self.transaction.get_part(key, number)
    }
    fn put_part(&mut self, key: &[u8], number: u32, value: Vec<u8>) -> Result<(), EngineError> {
        self.save_kept_value(key)?;
        self.transaction.put_part(key, number, value)
    }
    fn delete_part(&mut self, key: &[u8], number: u32) -> Result<(), EngineError> {
        self.save_kept_value(key)?;
        self.transaction.delete_part(key, number)
    }
    fn parts_per_key_max(&self) -> u32 {
        self.transaction.parts_per_key_max()
    }
    fn key_count(&mut self) -> Result<u64, EngineError> {
        self.save_kept()?;
        self.transaction.key_count()
    }
    fn scan(&mut self, cursor: u64, count_hint: usize) -> Result<ScanPage, EngineError> {
        self.save_kept()?;
        self.transaction.scan(cursor, count_hint)
    }
    fn random_key(&mut self) -> Result<Option<Vec<u8>>, EngineError> {
        self.save_kept()?;
        self.transaction.random_key()
    }
    fn delete_every_key(&mut self) -> Result<(), EngineError> {
        self.save_kept()?;
        self.transaction.delete_every_key()
    }
    fn is_transaction(&self) -> bool {
        true
    }
    fn keep(&mut self, value: Kept) -> Option<Kept> {
        self.lent.retain(|lent| lent != value.key());
        debug_assert!(self.kept.iter().all(|kept| kept.key() != value.key()), "a kept value is taken before its key is opened again");
        self.kept.push(value);
        None
    }
    fn take_kept(&mut self, key: &[u8]) -> Option<Kept> {
        let at = self.kept.iter().position(|value| value.key() == key)?;
        self.lent.push(key.to_vec());
        Some(self.kept.swap_remove(at))
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use bytes::Bytes;
    use hybridkv_engine::{Config, Database, Durability, NamespaceConfig, Tier, KIB, MIB};
    use hybridkv_media::sim::SimStore;

    use super::*;
    use crate::list_layout::{End, ListLimits};

    fn database() -> Database {
        let mut namespace = NamespaceConfig::new("lists");
        (namespace.index, namespace.data, namespace.journal, namespace.durability) = (Tier::Dram, Tier::Dram, Tier::Ssd, Durability::Periodic);
        (namespace.index_bytes, namespace.data_bytes, namespace.write_block_bytes, namespace.value_bytes_max) = (4 * MIB, 4 * MIB, 64 * KIB, 16 * KIB);
        let config = Config {
            data_dir: PathBuf::from("/sim/data"),
            shmem_dir: PathBuf::from("/sim/shm"),
            direct_io: false,
            background_maintenance: false,
            namespaces: vec![namespace],
            databases: 1,
        };
        Database::open_with(config, Arc::new(SimStore::new(46))).unwrap()
    }

    const LIMITS: ListLimits = ListLimits { value_bytes_max: 16 * KIB, chunks_max: 255, chunk_bytes_min: crate::list_layout::CHUNK_BYTES_TARGET_MIN, chunks_target: 64, directory_chunks_max: 8, separators: false };

    /// Pushes `elements` to the list under `key` as one grouped command would.
    fn push(store: &mut GroupStore<'_, '_>, key: &Bytes, elements: &[&str]) {
        let mut list = OpenList::open_kept(store, key, LIMITS).unwrap().unwrap_or_else(|| OpenList::open_or_new(store, key, LIMITS).unwrap());
        for element in elements {
            list.push(store, End::Tail, Bytes::copy_from_slice(element.as_bytes())).unwrap();
        }
        list.save_or_keep(store).unwrap();
    }

    fn elements(store: &mut dyn KeyStore, key: &Bytes) -> Vec<Bytes> {
        let mut list = OpenList::open(store, key, LIMITS).unwrap().expect("a list");
        let len = list.len();
        list.range(store, 0, len - 1).unwrap()
    }

    #[test]
    fn a_kept_list_is_written_before_its_key_is_read_and_at_the_group_end() {
        let database = database();
        let namespace = database.namespace(0).unwrap();
        let (key, other) = (Bytes::from_static(b"queue"), Bytes::from_static(b"other"));
        namespace
            .transaction(&[&key, &other], |transaction| {
                let mut store = GroupStore::new(transaction);
                push(&mut store, &key, &["a", "b"]);
                push(&mut store, &other, &["x"]);
                push(&mut store, &key, &["c"]);
                assert_eq!(store.kept.len(), 2, "both lists kept, once each");
                assert!(store.transaction.get(&key)?.is_none(), "not written while kept");
                assert_eq!(elements(&mut store, &key), ["a", "b", "c"], "a read sees the pushes");
                assert_eq!(store.kept.len(), 1, "the read saved its key's list, not the other");
                store.save_kept()?;
                store.check_nothing_dropped()
            })
            .unwrap();
        assert_eq!(elements(&mut crate::command::DirectStore(namespace), &other), ["x"]);
    }

    #[test]
    fn a_command_that_drops_a_kept_list_aborts_the_group_and_nothing_is_written() {
        let database = database();
        let namespace = database.namespace(0).unwrap();
        let key = Bytes::from_static(b"queue");
        let outcome = namespace.transaction(&[&key], |transaction| {
            let mut store = GroupStore::new(transaction);
            push(&mut store, &key, &["a"]);
            store.check_nothing_dropped()?;
            let taken = OpenList::open_kept(&mut store, &key, LIMITS).unwrap();
            drop(taken);
            store.check_nothing_dropped()
        });
        assert!(matches!(outcome, Err(EngineError::Aborted { .. })), "{outcome:?}");
        assert!(namespace.get(&key).unwrap().is_none());
    }
}
