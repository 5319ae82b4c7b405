//! A key's second part space seen as a key of its own, so that `crate::list_layout` can keep
//! a list there beside the key's own record: a sorted set's order index, a stream's entries.
//! The list's top (or its one record) is part `SECOND_PART_SPACE`; its part `n` (a directory,
//! chunk or free part) is part `SECOND_PART_SPACE + 1 + n`. The space is dense as the engine
//! requires: `put` and `delete` drop its parts last first.

use hybridkv_engine::{EngineError, ScanPage, Value, SECOND_PART_SPACE};

use crate::command::KeyStore;

/// The key's second part space seen as a key of its own for `OpenList`: the list's top is
/// part SECOND_PART_SPACE, its part `n` (a directory, chunk or free part) part
/// SECOND_PART_SPACE + 1 + n.
pub struct SecondSpace<'s> {
    pub store: &'s mut dyn KeyStore,
}

const TOP_PART: u32 = SECOND_PART_SPACE;

fn list_part(number: u32) -> u32 {
    TOP_PART + 1 + number
}

impl SecondSpace<'_> {
    /// Deletes the list's parts (directories, chunks, free parts), last first (the space stays
    /// dense).
    fn delete_list_parts(&mut self, key: &[u8]) -> Result<(), EngineError> {
        let mut count = 0;
        while self.store.get_part(key, list_part(count))?.is_some() {
            count += 1;
        }
        for number in (0..count).rev() {
            self.store.delete_part(key, list_part(number))?;
        }
        Ok(())
    }
}

impl KeyStore for SecondSpace<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<Value>, EngineError> {
        Ok(self.store.get_part(key, TOP_PART)?.map(|bytes| Value { bytes, expiry_unix_ms: 0, version: 0 }))
    }
    fn put(&mut self, key: &[u8], value: &[u8], _: u64) -> Result<(), EngineError> {
        self.delete_list_parts(key)?;
        self.store.put_part(key, TOP_PART, value.to_vec())
    }
    fn put_keeping_parts(&mut self, key: &[u8], value: &[u8], _: u64) -> Result<(), EngineError> {
        self.store.put_part(key, TOP_PART, value.to_vec())
    }
    fn delete(&mut self, key: &[u8]) -> Result<bool, EngineError> {
        let existed = self.store.get_part(key, TOP_PART)?.is_some();
        self.delete_list_parts(key)?;
        if existed {
            self.store.delete_part(key, TOP_PART)?;
        }
        Ok(existed)
    }
    fn get_part(&mut self, key: &[u8], number: u32) -> Result<Option<Vec<u8>>, EngineError> {
        self.store.get_part(key, list_part(number))
    }
    fn put_part(&mut self, key: &[u8], number: u32, value: Vec<u8>) -> Result<(), EngineError> {
        self.store.put_part(key, list_part(number), value)
    }
    fn delete_part(&mut self, key: &[u8], number: u32) -> Result<(), EngineError> {
        self.store.delete_part(key, list_part(number))
    }
    fn parts_per_key_max(&self) -> u32 {
        self.store.parts_per_key_max() - 1
    }
    fn rename(&mut self, _: &[u8], _: &[u8]) -> Result<bool, EngineError> {
        unreachable!("a list in the second part space reads and writes only its own records")
    }
    fn copy(&mut self, _: &[u8], _: &[u8]) -> Result<bool, EngineError> {
        unreachable!("a list in the second part space reads and writes only its own records")
    }
    fn key_count(&mut self) -> Result<u64, EngineError> {
        unreachable!("a list in the second part space reads and writes only its own records")
    }
    fn scan(&mut self, _: u64, _: usize) -> Result<ScanPage, EngineError> {
        unreachable!("a list in the second part space reads and writes only its own records")
    }
    fn random_key(&mut self) -> Result<Option<Vec<u8>>, EngineError> {
        unreachable!("a list in the second part space reads and writes only its own records")
    }
    fn delete_every_key(&mut self) -> Result<(), EngineError> {
        unreachable!("a list in the second part space reads and writes only its own records")
    }
    fn is_transaction(&self) -> bool {
        self.store.is_transaction()
    }
}

