//! Helpers shared by the engine's scenario tests.
#![allow(dead_code)]

pub mod workload;

use std::path::Path;

use hybridkv_engine::{Config, Database, Durability, NamespaceConfig, Tier, KIB, MIB};

pub const INDEX_TIERS: [Tier; 3] = [Tier::Dram, Tier::Shmem, Tier::Pmem];
pub const DATA_TIERS: [Tier; 3] = [Tier::Dram, Tier::Pmem, Tier::Ssd];

/// A small namespace: 64 KiB write blocks, so tests cross blocks and defragment quickly.
pub fn small_namespace(name: &str, index: Tier, data: Tier, durability: Durability) -> NamespaceConfig {
    let mut config = NamespaceConfig::new(name);
    config.index = index;
    config.data = data;
    config.journal = if data == Tier::Dram { Tier::Ssd } else { Tier::Pmem };
    config.durability = durability;
    config.index_bytes = 4 * MIB;
    config.data_bytes = 4 * MIB;
    config.write_block_bytes = 64 * KIB;
    config.journal_segment_bytes = 256 * KIB;
    config.checkpoint_interval_bytes = 256 * KIB;
    config.value_bytes_max = 16 * KIB;
    config
}

pub fn config_for(dir: &Path, namespaces: Vec<NamespaceConfig>) -> Config {
    Config {
        data_dir: dir.join("data"),
        shmem_dir: dir.join("shm"),
        direct_io: true,
        background_maintenance: false,
        namespaces,
    }
}

pub fn key(number: u64) -> Vec<u8> {
    format!("key:{number:08}").into_bytes()
}

pub fn value(number: u64, version: u64, len: usize) -> Vec<u8> {
    let mut bytes = format!("v{version}:{number}:").into_bytes();
    bytes.resize(len.max(bytes.len()), b'x' + (version % 3) as u8);
    bytes
}

/// Values of the cache tests.
pub const VALUE_BYTES: usize = 1000;

/// The database and the shared-memory folder that must outlive it.
pub fn cached_database(dir: &std::path::Path, data: Tier, cache_bytes: u64, durability: Durability) -> (Database, tempfile::TempDir) {
    let mut namespace = small_namespace("ns", Tier::Shmem, data, durability);
    namespace.data_bytes = 64 * MIB;
    namespace.write_block_bytes = 1 * MIB;
    namespace.checkpoint_interval_bytes = 16 * MIB;
    namespace.cache_bytes = cache_bytes;
    let mut config = config_for(dir, vec![namespace]);
    let shmem = tempfile::tempdir_in("/dev/shm").unwrap();
    config.shmem_dir = shmem.path().to_path_buf();
    config.background_maintenance = true;
    (Database::open(config).unwrap(), shmem)
}

pub fn load(database: &Database, keys: u64) {
    let namespace = database.namespace(0).unwrap();
    for number in 0..keys {
        namespace.put(&key(number), &value(number, 0, VALUE_BYTES), 0).unwrap();
    }
}
