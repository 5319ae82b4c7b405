//! Helpers shared by the engine's scenario tests.
#![allow(dead_code)]

pub mod workload;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use hybridkv_engine::{Config, Database, Durability, Namespace, NamespaceConfig, Tier, KIB, MIB};
use hybridkv_media::sim::SimStore;
use rand::rngs::StdRng;
use rand::Rng;

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
        databases: namespaces.len(),
        namespaces,
    }
}

/// One simulated run: a random placement of one namespace (durability `always`) on a store.
pub struct SimRun {
    pub index: Tier,
    pub data: Tier,
    pub store: SimStore,
    pub provider: Arc<SimStore>,
    pub config: Config,
}

pub fn random_sim_run(rng: &mut StdRng, seed: u64) -> SimRun {
    let index = INDEX_TIERS[rng.gen_range(0..3)];
    let data = DATA_TIERS[rng.gen_range(0..3)];
    let store = SimStore::new(seed);
    let provider = Arc::new(store.clone());
    let config = config_for(Path::new("/sim"), vec![small_namespace("ns", index, data, Durability::Always)]);
    SimRun { index, data, store, provider, config }
}

/// Every key SCAN lists, page by page.
pub fn scan_all_keys(namespace: &Namespace) -> BTreeSet<Vec<u8>> {
    let mut keys = BTreeSet::new();
    let mut cursor = 0;
    loop {
        let page = namespace.scan(cursor, 10).unwrap();
        keys.extend(page.keys);
        if page.next_cursor == 0 {
            return keys;
        }
        cursor = page.next_cursor;
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
    namespace.write_block_bytes = MIB;
    // Room for records longer than a location's length field can name (64 KiB).
    namespace.value_bytes_max = 256 * KIB;
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
