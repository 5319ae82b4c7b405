//! The DRAM record cache in front of records on ssd and pmem, bounded in bytes, with the S3-FIFO
//! admission and eviction policy (see docs/design/cache.md for why).
//!
//! Entries are keyed by (record location, block sequence number). Records never change once
//! written and a block's sequence number changes whenever the block is reused, so a cached entry
//! can never be stale: the index decides which location is current, and entries for locations it
//! no longer names simply age out. Nothing needs invalidating on writes or deletes.
//!
//! S3-FIFO (Yang et al., SOSP 2023): new entries enter a small FIFO (10% of the bytes); those read
//! again before they leave it move to the main FIFO, the others are dropped and remembered in a
//! ghost FIFO of keys only; a key found in the ghost FIFO goes straight to the main FIFO. The main
//! FIFO gives entries read since they were last at its tail another round (2-bit frequency). A
//! scan that reads every record once therefore passes through the small FIFO without displacing
//! the main one, where the hot set lives.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// Independent shards, so that concurrent readers rarely contend.
const SHARDS: usize = 16;
/// Share of a shard's bytes given to the small FIFO, in percent.
const SMALL_PERCENT: u64 = 10;
/// Bookkeeping bytes charged per entry on top of the record bytes (maps, queues, Arc header).
pub(crate) const ENTRY_OVERHEAD_BYTES: u64 = 96;
const FREQUENCY_MAX: u8 = 3;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct CacheKey {
    pub(crate) location: u64,
    pub(crate) block_seq: u64,
}

struct Entry {
    record: Arc<[u8]>,
    frequency: u8,
}

#[derive(Default)]
struct Shard {
    entries: HashMap<CacheKey, Entry>,
    small: VecDeque<CacheKey>,
    main: VecDeque<CacheKey>,
    ghost: VecDeque<CacheKey>,
    ghost_members: HashMap<CacheKey, ()>,
    small_bytes: u64,
    main_bytes: u64,
    /// Bytes and count of every entry ever inserted: their mean sizes the ghost FIFO.
    inserted_bytes: u64,
    inserted_entries: u64,
}

#[derive(Default)]
pub(crate) struct CacheCounters {
    pub(crate) hits: AtomicU64,
    pub(crate) misses: AtomicU64,
    pub(crate) evictions: AtomicU64,
}

pub(crate) struct RecordCache {
    shards: Box<[Mutex<Shard>]>,
    shard_budget_bytes: u64,
    pub(crate) counters: CacheCounters,
}

fn charge(record: &[u8]) -> u64 {
    record.len() as u64 + ENTRY_OVERHEAD_BYTES
}

impl RecordCache {
    pub(crate) fn new(budget_bytes: u64) -> RecordCache {
        RecordCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            shard_budget_bytes: budget_bytes / SHARDS as u64,
            counters: CacheCounters::default(),
        }
    }

    fn shard(&self, key: &CacheKey) -> &Mutex<Shard> {
        let mixed = (key.location ^ key.block_seq.rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        &self.shards[(mixed >> 60) as usize % SHARDS]
    }

    pub(crate) fn get(&self, key: CacheKey) -> Option<Arc<[u8]>> {
        let mut shard = self.shard(&key).lock();
        let found = shard.entries.get_mut(&key).map(|entry| {
            entry.frequency = (entry.frequency + 1).min(FREQUENCY_MAX);
            entry.record.clone()
        });
        let counter = if found.is_some() { &self.counters.hits } else { &self.counters.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Looks an entry up without counting an access (listing keys is not reading values).
    pub(crate) fn peek(&self, key: CacheKey) -> Option<Arc<[u8]>> {
        self.shard(&key).lock().entries.get(&key).map(|entry| entry.record.clone())
    }

    pub(crate) fn insert(&self, key: CacheKey, record: Arc<[u8]>) {
        let bytes = charge(&record);
        if bytes > self.shard_budget_bytes * SMALL_PERCENT / 100 {
            return;
        }
        let mut shard = self.shard(&key).lock();
        if shard.entries.contains_key(&key) {
            return;
        }
        shard.inserted_bytes += bytes;
        shard.inserted_entries += 1;
        let to_main = shard.ghost_members.remove(&key).is_some();
        shard.entries.insert(key, Entry { record, frequency: 0 });
        if to_main {
            shard.main.push_back(key);
            shard.main_bytes += bytes;
        } else {
            shard.small.push_back(key);
            shard.small_bytes += bytes;
        }
        let evicted = shard.make_room(self.shard_budget_bytes);
        self.counters.evictions.fetch_add(evicted, Ordering::Relaxed);
    }

    /// Empties the cache (for a COLD measurement).
    pub(crate) fn clear(&self) {
        for shard in self.shards.iter() {
            *shard.lock() = Shard::default();
        }
    }

    pub(crate) fn used_bytes(&self) -> u64 {
        self.shards.iter().map(|shard| {
            let shard = shard.lock();
            shard.small_bytes + shard.main_bytes
        }).sum()
    }

    pub(crate) fn capacity_bytes(&self) -> u64 {
        self.shard_budget_bytes * SHARDS as u64
    }
}

impl Shard {
    /// Evicts until the shard fits its budget; returns how many entries left the cache.
    fn make_room(&mut self, budget_bytes: u64) -> u64 {
        let small_budget = budget_bytes * SMALL_PERCENT / 100;
        let mut evicted = 0;
        while self.small_bytes + self.main_bytes > budget_bytes {
            if self.small_bytes > small_budget || self.main.is_empty() {
                evicted += self.evict_from_small(budget_bytes);
            } else {
                evicted += self.evict_from_main();
            }
        }
        evicted
    }

    fn evict_from_small(&mut self, budget_bytes: u64) -> u64 {
        let Some(key) = self.small.pop_front() else { return 0 };
        let entry = self.entries.get_mut(&key).expect("queued entries exist");
        let bytes = charge(&entry.record);
        self.small_bytes -= bytes;
        if entry.frequency > 0 {
            // The frequency moves with the entry: it buys the entry its first round in main.
            self.main.push_back(key);
            self.main_bytes += bytes;
            return 0;
        }
        self.entries.remove(&key);
        self.remember(key, budget_bytes);
        1
    }

    fn evict_from_main(&mut self) -> u64 {
        let Some(key) = self.main.pop_front() else { return 0 };
        let entry = self.entries.get_mut(&key).expect("queued entries exist");
        if entry.frequency > 0 {
            entry.frequency -= 1;
            self.main.push_back(key);
            return 0;
        }
        let bytes = charge(&entry.record);
        self.main_bytes -= bytes;
        self.entries.remove(&key);
        1
    }

    /// The ghost FIFO holds as many keys as the main FIFO can hold entries of the mean size.
    fn remember(&mut self, key: CacheKey, budget_bytes: u64) {
        self.ghost.push_back(key);
        self.ghost_members.insert(key, ());
        let mean_entry_bytes = (self.inserted_bytes / self.inserted_entries.max(1)).max(1);
        let ghost_entries_max = (budget_bytes * (100 - SMALL_PERCENT) / 100 / mean_entry_bytes).max(1) as usize;
        while self.ghost.len() > ghost_entries_max {
            if let Some(old) = self.ghost.pop_front() {
                self.ghost_members.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(location: u64) -> CacheKey {
        CacheKey { location, block_seq: 1 }
    }

    fn record(len: usize) -> Arc<[u8]> {
        vec![7u8; len].into()
    }

    #[test]
    fn the_budget_holds() {
        let cache = RecordCache::new(1 << 20);
        for location in 0..10_000 {
            cache.insert(key(location), record(500));
            assert!(cache.used_bytes() <= cache.capacity_bytes());
        }
        assert!(cache.counters.evictions.load(Ordering::Relaxed) > 0);
    }

    #[test]
    fn a_scan_does_not_evict_a_hot_set_that_fits() {
        let cache = RecordCache::new(4 << 20);
        let hot: Vec<u64> = (0..2000).collect();
        for _ in 0..3 {
            for &location in &hot {
                if cache.get(key(location)).is_none() {
                    cache.insert(key(location), record(500));
                }
            }
        }
        for location in 1_000_000..1_100_000 {
            cache.insert(key(location), record(500));
        }
        let kept = hot.iter().filter(|&&location| cache.get(key(location)).is_some()).count();
        assert!(kept * 100 >= hot.len() * 95, "only {kept} of {} hot entries survived the scan", hot.len());
    }

    #[test]
    fn reused_blocks_never_serve_old_records() {
        let cache = RecordCache::new(1 << 20);
        cache.insert(CacheKey { location: 5, block_seq: 1 }, record(10));
        assert!(cache.get(CacheKey { location: 5, block_seq: 2 }).is_none());
    }
}
