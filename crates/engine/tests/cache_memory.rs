//! Resident memory under a record cache budget. Alone in its file so that no other test shares
//! the process whose memory it measures.

mod common;

use common::*;
use hybridkv_engine::{Durability, Tier, MIB};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|line| line.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

#[test]
fn resident_memory_stays_within_the_budgets() {
    let dir = tempfile::tempdir().unwrap();
    let cache_bytes = 8 * MIB;
    let before = resident_bytes();
    let (database, _shmem) = cached_database(dir.path(), Tier::Ssd, cache_bytes, Durability::Periodic);
    load(&database, 40_000); // 40 MB of records, 5 times the cache
    let namespace = database.namespace(0).unwrap();
    let mut rng = StdRng::seed_from_u64(3);
    for _ in 0..40_000 {
        namespace.get(&key(rng.gen_range(0..40_000))).unwrap().unwrap();
    }
    let stats = namespace.stats();
    let grown = resident_bytes().saturating_sub(before);
    // Budgets: the cache, the index in use, the block copies (active, sealed, a flush's staging
    // copy); plus a fixed allowance for thread stacks, allocator slack and pending entries
    // (documented in docs/design/cache.md).
    const FIXED_OVERHEAD_BYTES: u64 = 32 * MIB;
    let block_copies_bytes = 3 * namespace.config().write_block_bytes;
    let budget = cache_bytes + stats.index.used_bytes + block_copies_bytes + FIXED_OVERHEAD_BYTES;
    assert!(grown <= budget, "resident memory grew {grown} bytes, budget {budget}");
    assert!(stats.cache.unwrap().evictions > 0);
}
