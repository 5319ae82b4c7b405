//! A `KeyStore` in memory for the layouts' unit tests (`hash_layout`, `list_layout`): keys
//! and their parts in maps, with counts of what was written.

use std::collections::BTreeMap;

use hybridkv_engine::{EngineError, Value};

use crate::command::KeyStore;

/// Keys and their parts in memory; counts the parts and keys each save writes.
#[derive(Default)]
pub struct MemoryStore {
    pub keys: BTreeMap<Vec<u8>, Value>,
    pub parts: BTreeMap<(Vec<u8>, u32), Vec<u8>>,
    pub part_writes: usize,
    pub key_writes: usize,
    /// Bytes of every key and part record written.
    pub bytes_written: usize,
    pub part_reads: usize,
}

impl KeyStore for MemoryStore {
    fn get(&mut self, key: &[u8]) -> Result<Option<Value>, EngineError> {
        Ok(self.keys.get(key).cloned())
    }
    fn put(&mut self, key: &[u8], value: &[u8], expiry_unix_ms: u64) -> Result<(), EngineError> {
        self.parts.retain(|(owner, _), _| owner != key);
        self.put_keeping_parts(key, value, expiry_unix_ms)
    }
    fn put_keeping_parts(&mut self, key: &[u8], value: &[u8], expiry_unix_ms: u64) -> Result<(), EngineError> {
        self.key_writes += 1;
        self.bytes_written += value.len();
        self.keys.insert(key.to_vec(), Value { bytes: value.to_vec(), expiry_unix_ms, version: 0 });
        Ok(())
    }
    fn delete(&mut self, key: &[u8]) -> Result<bool, EngineError> {
        self.parts.retain(|(owner, _), _| owner != key);
        Ok(self.keys.remove(key).is_some())
    }
    fn rename(&mut self, _: &[u8], _: &[u8]) -> Result<bool, EngineError> {
        unimplemented!("not used by hash_layout")
    }
    fn copy(&mut self, _: &[u8], _: &[u8]) -> Result<bool, EngineError> {
        unimplemented!("not used by hash_layout")
    }
    fn get_part(&mut self, key: &[u8], number: u32) -> Result<Option<Vec<u8>>, EngineError> {
        self.part_reads += 1;
        Ok(self.parts.get(&(key.to_vec(), number)).cloned())
    }
    fn put_part(&mut self, key: &[u8], number: u32, value: Vec<u8>) -> Result<(), EngineError> {
        self.part_writes += 1;
        self.bytes_written += value.len();
        self.parts.insert((key.to_vec(), number), value);
        Ok(())
    }
    fn delete_part(&mut self, key: &[u8], number: u32) -> Result<(), EngineError> {
        self.parts.remove(&(key.to_vec(), number));
        Ok(())
    }
    fn parts_per_key_max(&self) -> u32 {
        unimplemented!("the tests pass their limits")
    }
    fn key_count(&mut self) -> Result<u64, EngineError> {
        Ok(self.keys.len() as u64)
    }
    fn scan(&mut self, _: u64, _: usize) -> Result<hybridkv_engine::ScanPage, EngineError> {
        unimplemented!("not used by hash_layout")
    }
    fn random_key(&mut self) -> Result<Option<Vec<u8>>, EngineError> {
        unimplemented!("not used by hash_layout")
    }
    fn delete_every_key(&mut self) -> Result<(), EngineError> {
        unimplemented!("not used by hash_layout")
    }
    fn is_transaction(&self) -> bool {
        false
    }
}

