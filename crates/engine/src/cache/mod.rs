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
/// Keys the ghost FIFO of a shard remembers, per live entry of the shard (the paper's ghost FIFO
/// holds as many keys as the main FIFO holds entries).
const GHOST_KEYS_PER_ENTRY: usize = 1;
/// glibc malloc: a chunk is the request plus one 8-byte size word, in steps of 16 bytes, and at
/// least 32 bytes.
const MALLOC_CHUNK_HEADER_BYTES: u64 = 8;
const MALLOC_CHUNK_ALIGN_BYTES: u64 = 16;
const MALLOC_CHUNK_MIN_BYTES: u64 = 32;
/// The strong and weak counters in front of an `Arc`'s bytes.
const ARC_HEADER_BYTES: u64 = 16;
/// hashbrown's tables: one control byte per bucket plus one group of trailing control bytes.
const HASH_TABLE_GROUP_BYTES: u64 = 16;
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
    /// The bytes of the maps and queues as last charged to the cache (`RecordCache::recharge`).
    charged_structure_bytes: u64,
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
    /// Bytes charged by every shard together: the records' allocations and the shards' maps and
    /// queues at their allocated capacity. Changed only under the lock of the shard whose
    /// entries or structures change, so it can pass the budget only between an insert and its
    /// evictions.
    used_bytes: AtomicU64,
    pub(crate) counters: CacheCounters,
}

/// What a cached record's allocation really takes: the `Arc` header and the record, as a malloc
/// chunk. The entry's map slot and queue slot are charged with the structures that hold them.
fn charge(record: &[u8]) -> u64 {
    let request = ARC_HEADER_BYTES + record.len() as u64;
    (request + MALLOC_CHUNK_HEADER_BYTES).next_multiple_of(MALLOC_CHUNK_ALIGN_BYTES).max(MALLOC_CHUNK_MIN_BYTES)
}

/// Bytes hashbrown allocates for a map of `capacity` (as `HashMap::capacity` reports it) with
/// slots of `slot_bytes`: buckets are a power of two kept at most 7/8 full.
fn map_bytes(capacity: usize, slot_bytes: usize) -> u64 {
    if capacity == 0 {
        return 0;
    }
    let buckets = (capacity as u64 * 8).div_ceil(7).next_power_of_two();
    buckets * (slot_bytes as u64 + 1) + HASH_TABLE_GROUP_BYTES
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

    /// A shard's share of the budget: it sizes the shard's small FIFO.
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
        let returning = shard.ghost_members.remove(&key).is_some();
        let placement = inherited.unwrap_or(Placement { in_main: returning, frequency: 0 });
        shard.push(key, record, bytes, placement);
        self.used_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.recharge(&mut shard);
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
            // A key remembered in the ghost FIFO may have grown it.
            self.recharge(shard);
        }
        self.counters.evictions.fetch_add(evicted, Ordering::Relaxed);
    }

    /// Charges the growth of `shard`'s maps and queues (they grow on inserts and never shrink,
    /// so the charge only rises, until `clear`).
    fn recharge(&self, shard: &mut Shard) {
        let bytes = shard.structure_bytes();
        if bytes > shard.charged_structure_bytes {
            self.used_bytes.fetch_add(bytes - shard.charged_structure_bytes, Ordering::Relaxed);
            shard.charged_structure_bytes = bytes;
        }
    }

    /// Empties the cache (for a COLD measurement).
    pub(crate) fn clear(&self) {
        for shard in self.shards.iter() {
            let mut shard = shard.write();
            let charged = shard.small_bytes + shard.main_bytes + shard.charged_structure_bytes;
            self.used_bytes.fetch_sub(charged, Ordering::Relaxed);
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
    /// What the shard's maps and queues have allocated (capacities, not lengths).
    fn structure_bytes(&self) -> u64 {
        let slot_bytes = std::mem::size_of::<Slot>() as u64;
        map_bytes(self.entries.capacity(), std::mem::size_of::<(CacheKey, Entry)>())
            + map_bytes(self.ghost_members.capacity(), std::mem::size_of::<CacheKey>())
            + (self.small.capacity() + self.main.capacity()) as u64 * slot_bytes
            + self.ghost.capacity() as u64 * std::mem::size_of::<CacheKey>() as u64
    }

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
            self.evict_from_small()
        } else {
            self.evict_from_main()
        }
    }

    fn evict_from_small(&mut self) -> (u64, u64) {
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
        self.remember(slot.0);
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

    /// The ghost FIFO holds at most GHOST_KEYS_PER_ENTRY keys per live entry of the shard.
    fn remember(&mut self, key: CacheKey) {
        self.ghost.push_back(key);
        self.ghost_members.insert(key, ());
        let ghost_keys_max = (self.entries.len() * GHOST_KEYS_PER_ENTRY).max(1);
        while self.ghost.len() > ghost_keys_max {
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

    /// Bytes charged for the records alone (the rest is the shards' maps and queues).
    fn record_bytes_charged(cache: &RecordCache) -> u64 {
        cache.shards.iter().map(|shard| shard.read().small_bytes + shard.read().main_bytes).sum()
    }

    /// The charge recomputed from scratch: every record's allocation and every map and queue
    /// (ghost FIFO included) at its allocated capacity.
    fn recomputed_charge(cache: &RecordCache) -> u64 {
        cache.shards.iter().map(|shard| {
            let shard = shard.read();
            shard.entries.values().map(|entry| charge(&entry.record)).sum::<u64>() + shard.structure_bytes()
        }).sum()
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

    /// Small records (where the maps and queues weigh most) read, replaced and removed at
    /// random: the charge always equals what the records, maps and queues have allocated, and
    /// never passes the budget.
    #[test]
    fn the_charge_counts_maps_queues_and_the_ghost_fifo_and_stays_within_the_budget() {
        use rand::{Rng, SeedableRng};
        let cache = RecordCache::new(8 << 20);
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let mut location_of = vec![None; 200_000];
        let mut next_location = 0;
        for step in 0..400_000u64 {
            let number = rng.gen_range(0..location_of.len());
            let fresh = key(next_location);
            next_location += 1;
            match (location_of[number], rng.gen_range(0..10)) {
                (Some(old), 0..=2) => cache.replace(key(old), fresh, record(rng.gen_range(20..200))),
                (Some(old), 3) => {
                    cache.remove(key(old));
                    location_of[number] = None;
                    continue;
                }
                (Some(old), _) if cache.get(key(old)).is_some() => continue,
                _ => cache.insert(fresh, record(rng.gen_range(20..200))),
            }
            location_of[number] = Some(fresh.location);
            assert!(cache.used_bytes() <= cache.capacity_bytes(), "step {step}");
        }
        assert_eq!(cache.used_bytes(), recomputed_charge(&cache));
        let structures = cache.used_bytes() - record_bytes_charged(&cache);
        assert!(structures > 0 && cache.counters.evictions.load(Ordering::Relaxed) > 0);
        for shard in cache.shards.iter() {
            let shard = shard.read();
            assert!(shard.ghost.len() <= (shard.entries.len() * GHOST_KEYS_PER_ENTRY).max(1));
            assert_eq!(shard.ghost.len(), shard.ghost_members.len());
        }
        cache.clear();
        assert_eq!(cache.used_bytes(), 0);
    }

    #[test]
    fn the_record_charge_is_the_malloc_chunk_of_the_arc() {
        assert_eq!(charge(&record(0)), 32);
        assert_eq!(charge(&record(8)), 32);
        assert_eq!(charge(&record(120)), 144);
        assert_eq!(charge(&record(121)), 160);
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

    /// A budget as large as the records plus their map and queue slots at the lowest load
    /// the structures fall to (a map just grown is 7/16 full, a queue half full).
    #[test]
    fn a_budget_as_large_as_the_data_keeps_all_of_it() {
        let records = 20_000u64;
        let map_slot_bytes = std::mem::size_of::<(CacheKey, Entry)>() as u64 + 1;
        let structure_bytes_per_entry = map_slot_bytes * 16 / 7 + 2 * std::mem::size_of::<Slot>() as u64;
        let cache = RecordCache::new(records * (charge(&record(500)) + structure_bytes_per_entry + 1));
        for location in 0..records {
            cache.insert(key(location), record(500));
        }
        assert_eq!(cache.counters.evictions.load(Ordering::Relaxed), 0);
        assert!((0..records).all(|location| cache.get(key(location)).is_some()));
        assert_eq!(record_bytes_charged(&cache), records * charge(&record(500)));
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
        assert_eq!(record_bytes_charged(&cache), charge(&record(500)));
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
        assert_eq!(record_bytes_charged(&cache), charge(&record(100)));
    }

    #[test]
    fn reused_blocks_never_serve_old_records() {
        let cache = RecordCache::new(1 << 20);
        cache.insert(CacheKey { location: 5, block_seq: 1 }, record(10));
        assert!(cache.get(CacheKey { location: 5, block_seq: 2 }).is_none());
    }
}
