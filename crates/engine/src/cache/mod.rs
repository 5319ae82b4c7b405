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
//!
//! The byte budget is global, not split per shard: keys never hash evenly across shards, and a
//! per-shard budget of 1/16 made a cache as large as the data evict from its fuller shards (an
//! evicted record read again evicts the next one of the same pass: a FIFO's worst case). An insert
//! evicts from its own shard while the cache is over budget, and from the other shards, one lock
//! at a time, when its own shard has nothing left to evict.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

/// Independent shards, so that concurrent readers rarely contend (a hit takes its shard's lock
/// shared; admissions and evictions take it exclusively).
const SHARDS_MAX: usize = 64;
/// A smaller cache has fewer shards, so that each shard's small FIFO holds a useful number of
/// records.
const SHARD_BYTES_MIN: u64 = 4 << 20;
/// The largest record admitted, as a fraction of the whole small FIFO.
const SMALL_FIFO_PER_RECORD_MIN: u64 = 16;
/// Share of a shard's bytes given to the small FIFO, in percent.
const SMALL_PERCENT: u64 = 10;
/// Bookkeeping bytes charged per entry on top of the record bytes (maps, queues, Arc header).
pub(crate) const ENTRY_OVERHEAD_BYTES: u64 = 96;
const FREQUENCY_MAX: u8 = 3;
/// Queue slots left behind by removed entries that a shard tolerates, beyond one per live
/// entry, before it compacts its queues.
const STALE_QUEUE_SLOTS_SLACK: usize = 1024;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct CacheKey {
    pub(crate) location: u64,
    pub(crate) block_seq: u64,
}

struct Entry {
    record: Arc<[u8]>,
    /// Reads since the entry was last at the head of its queue, saturating at FREQUENCY_MAX;
    /// atomic so that a hit needs the shard lock only shared.
    frequency: AtomicU8,
    in_main: bool,
    /// Matches the entry's one live queue slot; slots of removed entries carry older tickets.
    ticket: u64,
}

/// A queue slot: the key and the ticket of the entry it was queued for.
type Slot = (CacheKey, u64);

/// Cache keys are a record location and a block sequence number: one multiply-rotate per word
/// spreads them well enough, far cheaper than the default SipHash.
#[derive(Default)]
struct CacheKeyHasher(u64);

impl Hasher for CacheKeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(byte as u64);
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0 ^ word).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type KeyMap<V> = HashMap<CacheKey, V, BuildHasherDefault<CacheKeyHasher>>;

#[derive(Default)]
struct Shard {
    entries: KeyMap<Entry>,
    small: VecDeque<Slot>,
    main: VecDeque<Slot>,
    ghost: VecDeque<CacheKey>,
    ghost_members: KeyMap<()>,
    small_bytes: u64,
    main_bytes: u64,
    /// Queue slots whose entry was removed (by `replace`), skipped when they come up.
    stale_slots: usize,
    next_ticket: u64,
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
    shards: Box<[RwLock<Shard>]>,
    budget_bytes: u64,
    /// Bytes charged by every shard together; changed only under the shard lock whose entries
    /// are added or removed, so it can pass the budget only between an insert and its evictions.
    used_bytes: AtomicU64,
    pub(crate) counters: CacheCounters,
}

fn charge(record: &[u8]) -> u64 {
    record.len() as u64 + ENTRY_OVERHEAD_BYTES
}

/// Where a new entry starts: a new record in the small FIFO with no reads; a returning key (ghost
/// hit) or the new version of a cached record in the main FIFO, the latter with the old reads.
#[derive(Clone, Copy)]
struct Placement {
    in_main: bool,
    frequency: u8,
}

impl RecordCache {
    pub(crate) fn new(budget_bytes: u64) -> RecordCache {
        let shard_count = (budget_bytes / SHARD_BYTES_MIN).clamp(1, SHARDS_MAX as u64) as usize;
        RecordCache {
            shards: (0..shard_count).map(|_| RwLock::new(Shard::default())).collect(),
            budget_bytes,
            used_bytes: AtomicU64::new(0),
            counters: CacheCounters::default(),
        }
    }

    fn shard_number(&self, key: &CacheKey) -> usize {
        let mixed = (key.location ^ key.block_seq.rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ((mixed >> 32) as usize) % self.shards.len()
    }

    fn shard(&self, key: &CacheKey) -> &RwLock<Shard> {
        &self.shards[self.shard_number(key)]
    }

    /// A shard's share of the budget: it sizes the shard's small FIFO and ghost FIFO.
    fn shard_share_bytes(&self) -> u64 {
        self.budget_bytes / self.shards.len() as u64
    }

    fn over_budget(&self) -> bool {
        self.used_bytes.load(Ordering::Relaxed) > self.budget_bytes
    }

    pub(crate) fn get(&self, key: CacheKey) -> Option<Arc<[u8]>> {
        let shard = self.shard(&key).read();
        let found = shard.entries.get(&key).map(|entry| {
            // Two hits at once may count as one: the frequency is a hint.
            let frequency = entry.frequency.load(Ordering::Relaxed);
            if frequency < FREQUENCY_MAX {
                entry.frequency.store(frequency + 1, Ordering::Relaxed);
            }
            entry.record.clone()
        });
        let counter = if found.is_some() { &self.counters.hits } else { &self.counters.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Looks an entry up without counting an access (listing keys is not reading values).
    pub(crate) fn peek(&self, key: CacheKey) -> Option<Arc<[u8]>> {
        self.shard(&key).read().entries.get(&key).map(|entry| entry.record.clone())
    }

    /// Whether the cache holds `key`, without counting an access.
    pub(crate) fn contains(&self, key: CacheKey) -> bool {
        self.shard(&key).read().entries.contains_key(&key)
    }

    /// Admits a record read from the medium (or written) that the cache does not hold.
    pub(crate) fn insert(&self, key: CacheKey, record: Arc<[u8]>) {
        self.admit(key, record, None);
    }

    /// Admits the new version of a key in place of its previous record `old` (which nobody will
    /// look up again once the index names the new one): the old entry leaves at once instead of
    /// ageing out, and the new one keeps its place in the main FIFO and its reads, so a hot key
    /// that is written often stays cached.
    pub(crate) fn replace(&self, old: CacheKey, key: CacheKey, record: Arc<[u8]>) {
        let inherited = self.take(old);
        self.admit(key, record, inherited);
    }

    /// Puts `record` in place of `old` (a moved record, or its key's new version), keeping the
    /// queue and reads; nothing when the cache does not hold `old`.
    pub(crate) fn relocate(&self, old: CacheKey, key: CacheKey, record: Arc<[u8]>) {
        if let Some(placement) = self.take(old) {
            self.admit(key, record, Some(placement));
        }
    }

    /// Drops a record nobody will read again (its key was deleted).
    pub(crate) fn remove(&self, old: CacheKey) {
        self.take(old);
    }

    /// Removes an entry; where it was in the queues, if the cache held it.
    fn take(&self, old: CacheKey) -> Option<Placement> {
        let (bytes, placement) = self.shard(&old).write().remove(&old)?;
        self.used_bytes.fetch_sub(bytes, Ordering::Relaxed);
        Some(placement)
    }

    fn admit(&self, key: CacheKey, record: Arc<[u8]>, inherited: Option<Placement>) {
        let bytes = charge(&record);
        if bytes > self.budget_bytes * SMALL_PERCENT / 100 / SMALL_FIFO_PER_RECORD_MIN {
            return;
        }
        let share = self.shard_share_bytes();
        let home = self.shard_number(&key);
        let mut shard = self.shards[home].write();
        if shard.entries.contains_key(&key) {
            return;
        }
        shard.inserted_bytes += bytes;
        shard.inserted_entries += 1;
        let returning = shard.ghost_members.remove(&key).is_some();
        let placement = inherited.unwrap_or(Placement { in_main: returning, frequency: 0 });
        shard.push(key, record, bytes, placement);
        self.used_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.evict_while_over_budget(&mut shard, share);
        drop(shard);
        // The home shard ran empty while others hold the excess: take it from them, one at a time.
        let shard_count = self.shards.len();
        for step in 1..shard_count {
            if !self.over_budget() {
                break;
            }
            self.evict_while_over_budget(&mut self.shards[(home + step) % shard_count].write(), share);
        }
    }

    /// Evicts from `shard` until the cache fits its budget or the shard is empty.
    fn evict_while_over_budget(&self, shard: &mut Shard, share_bytes: u64) {
        let mut evicted = 0;
        while self.over_budget() && !shard.entries.is_empty() {
            let (count, freed_bytes) = shard.evict_one(share_bytes);
            evicted += count;
            self.used_bytes.fetch_sub(freed_bytes, Ordering::Relaxed);
        }
        self.counters.evictions.fetch_add(evicted, Ordering::Relaxed);
    }

    /// Empties the cache (for a COLD measurement).
    pub(crate) fn clear(&self) {
        for shard in self.shards.iter() {
            let mut shard = shard.write();
            self.used_bytes.fetch_sub(shard.small_bytes + shard.main_bytes, Ordering::Relaxed);
            *shard = Shard::default();
        }
    }

    pub(crate) fn used_bytes(&self) -> u64 {
        self.used_bytes.load(Ordering::Relaxed)
    }

    pub(crate) fn capacity_bytes(&self) -> u64 {
        self.budget_bytes
    }
}

impl Shard {
    fn push(&mut self, key: CacheKey, record: Arc<[u8]>, bytes: u64, placement: Placement) {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let Placement { in_main, frequency } = placement;
        self.entries.insert(key, Entry { record, frequency: AtomicU8::new(frequency), in_main, ticket });
        if in_main {
            self.main.push_back((key, ticket));
            self.main_bytes += bytes;
        } else {
            self.small.push_back((key, ticket));
            self.small_bytes += bytes;
        }
    }

    /// Removes an entry (its queue slot goes stale); returns its bytes and where it was.
    fn remove(&mut self, key: &CacheKey) -> Option<(u64, Placement)> {
        let entry = self.entries.remove(key)?;
        let bytes = charge(&entry.record);
        if entry.in_main {
            self.main_bytes -= bytes;
        } else {
            self.small_bytes -= bytes;
        }
        self.stale_slots += 1;
        if self.stale_slots > self.entries.len() + STALE_QUEUE_SLOTS_SLACK {
            self.drop_stale_slots();
        }
        Some((bytes, Placement { in_main: entry.in_main, frequency: entry.frequency.into_inner() }))
    }

    fn drop_stale_slots(&mut self) {
        let entries = &self.entries;
        let live = |&(key, ticket): &Slot| entries.get(&key).is_some_and(|entry| entry.ticket == ticket);
        self.small.retain(live);
        self.main.retain(live);
        self.stale_slots = 0;
    }

    /// The entry a popped queue slot stands for, unless the slot went stale.
    fn live_entry(&mut self, (key, ticket): Slot) -> Option<&mut Entry> {
        let entry = self.entries.get_mut(&key).filter(|entry| entry.ticket == ticket);
        if entry.is_none() {
            self.stale_slots = self.stale_slots.saturating_sub(1);
        }
        entry
    }

    /// Takes one step of S3-FIFO eviction (an entry leaving, or moving on in its queues, or a
    /// stale slot dropped; a shard with entries always has a queue to take from); returns the
    /// entries that left the cache and the bytes they freed.
    fn evict_one(&mut self, share_bytes: u64) -> (u64, u64) {
        let small_budget = share_bytes * SMALL_PERCENT / 100;
        if self.small_bytes > small_budget || self.main.is_empty() {
            self.evict_from_small(share_bytes)
        } else {
            self.evict_from_main()
        }
    }

    fn evict_from_small(&mut self, share_bytes: u64) -> (u64, u64) {
        let Some(slot) = self.small.pop_front() else { return (0, 0) };
        let Some(entry) = self.live_entry(slot) else { return (0, 0) };
        let bytes = charge(&entry.record);
        if *entry.frequency.get_mut() > 0 {
            // The frequency moves with the entry: it buys the entry its first round in main.
            entry.in_main = true;
            self.small_bytes -= bytes;
            self.main.push_back(slot);
            self.main_bytes += bytes;
            return (0, 0);
        }
        self.small_bytes -= bytes;
        self.entries.remove(&slot.0);
        self.remember(slot.0, share_bytes);
        (1, bytes)
    }

    fn evict_from_main(&mut self) -> (u64, u64) {
        let Some(slot) = self.main.pop_front() else { return (0, 0) };
        let Some(entry) = self.live_entry(slot) else { return (0, 0) };
        if *entry.frequency.get_mut() > 0 {
            *entry.frequency.get_mut() -= 1;
            self.main.push_back(slot);
            return (0, 0);
        }
        let bytes = charge(&entry.record);
        self.main_bytes -= bytes;
        self.entries.remove(&slot.0);
        (1, bytes)
    }

    /// The ghost FIFO holds as many keys as the shard's share of the main FIFO can hold entries of
    /// the mean size.
    fn remember(&mut self, key: CacheKey, share_bytes: u64) {
        self.ghost.push_back(key);
        self.ghost_members.insert(key, ());
        let mean_entry_bytes = (self.inserted_bytes / self.inserted_entries.max(1)).max(1);
        let ghost_entries_max = (share_bytes * (100 - SMALL_PERCENT) / 100 / mean_entry_bytes).max(1) as usize;
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
    fn a_budget_as_large_as_the_data_keeps_all_of_it() {
        let records = 20_000u64;
        let cache = RecordCache::new(records * charge(&record(500)));
        for location in 0..records {
            cache.insert(key(location), record(500));
        }
        assert_eq!(cache.counters.evictions.load(Ordering::Relaxed), 0);
        assert!((0..records).all(|location| cache.get(key(location)).is_some()));
        cache.insert(key(records), record(500));
        assert_eq!(cache.counters.evictions.load(Ordering::Relaxed), 1);
        assert_eq!(cache.used_bytes(), records * charge(&record(500)));
    }

    #[test]
    fn a_replaced_record_leaves_and_its_successor_keeps_its_reads() {
        let cache = RecordCache::new(1 << 20);
        cache.insert(key(1), record(500));
        for _ in 0..3 {
            assert!(cache.get(key(1)).is_some());
        }
        cache.replace(key(1), key(2), record(500));
        assert!(cache.peek(key(1)).is_none());
        assert_eq!(cache.used_bytes(), charge(&record(500)));
        // The successor survives a flood of one-hit records, as its predecessor would have.
        for location in 1000..10_000 {
            cache.insert(key(location), record(500));
        }
        assert!(cache.peek(key(2)).is_some());
        assert!(cache.used_bytes() <= cache.capacity_bytes());
    }

    #[test]
    fn replacing_often_under_budget_keeps_the_queues_bounded() {
        let cache = RecordCache::new(64 << 20);
        cache.insert(key(0), record(100));
        for location in 1..100_000 {
            cache.replace(key(location - 1), key(location), record(100));
        }
        let shards_slots: usize = cache.shards.iter().map(|shard| {
            let shard = shard.read();
            shard.small.len() + shard.main.len()
        }).sum();
        assert!(shards_slots <= cache.shards.len() * (STALE_QUEUE_SLOTS_SLACK + 2), "{shards_slots} queue slots");
        assert_eq!(cache.used_bytes(), charge(&record(100)));
    }

    #[test]
    fn reused_blocks_never_serve_old_records() {
        let cache = RecordCache::new(1 << 20);
        cache.insert(CacheKey { location: 5, block_seq: 1 }, record(10));
        assert!(cache.get(CacheKey { location: 5, block_seq: 2 }).is_none());
    }
}
