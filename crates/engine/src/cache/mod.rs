//! The DRAM record cache in front of records on ssd and pmem, bounded in bytes, with the S3-FIFO
//! admission and eviction policy (see docs/design/cache.md for why).
//!
//! One entry per key: the map is keyed by the key's digest (64 bits of it), and the entry holds
//! the record it last saw for that key with the record's location and its block's sequence
//! number. A lookup names all three and hits only when the entry holds that very record. Records
//! never change once written and a block's sequence number changes whenever the block is reused,
//! so a hit can never be stale: the index decides which location is current (under the partition
//! lock), and an entry holding any other record is a miss. Two keys sharing 64 digest bits would
//! share one entry and miss more, never read each other's records.
//!
//! Because an entry is the key's, a write updates it in place (one shard lock, one map probe):
//! the new record takes the old one's place in its queue and keeps its reads, so a hot key that
//! is written often stays cached and leaves no dead copy behind.
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
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

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
/// hashbrown's tables: one control byte per bucket plus one group of trailing control bytes.
const HASH_TABLE_GROUP_BYTES: u64 = 16;
const FREQUENCY_MAX: u8 = 3;
/// Queue slots left behind by removed entries that a shard tolerates, beyond one per live
/// entry, before it compacts its queues.
const STALE_QUEUE_SLOTS_SLACK: usize = 1024;
/// A queue whose allocation holds more than this many times its slots (the small FIFO shrinks
/// as the main one fills) is given back down to `QUEUE_SLOTS_KEPT_PER_SLOT` times them.
const QUEUE_CAPACITY_PER_SLOT_MAX: usize = 4;
const QUEUE_SLOTS_KEPT_PER_SLOT: usize = 2;
/// Queues this small are never shrunk: they cost less than the rehoming would.
const QUEUE_SLOTS_NEVER_SHRUNK: usize = 64;
/// The entry map doubles only when the shard could then hold at least this many times the
/// entries it holds at full capacity now (in eighths: 9/8): a doubled map costs its slots for
/// the buckets it leaves empty, and a full map at 7/8 load holds more records in the same bytes.
const MAP_GROWTH_ENTRIES_GAIN_EIGHTHS: u64 = 9;
/// A full map that is not to double keeps this share of its keys (in sixteenths) and is rebuilt
/// at its size: hashbrown turns removed keys' slots into tombstones that still count as used,
/// and at more than half full it doubles rather than clear them.
const FULL_MAP_KEPT_SIXTEENTHS: usize = 15;

/// A record as the cache knows it: its key (64 bits of the key's digest), its location and its
/// block's sequence number.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct CacheKey {
    pub(crate) key_hash: u64,
    pub(crate) location: u64,
    pub(crate) block_seq: u64,
}

impl CacheKey {
    /// Where the record was written in the log's order: block sequence, then offset (within a
    /// block the location orders by offset, its high bits being the block's slot). Records are
    /// appended one at a time to one active block, so of two records of a key the later one is
    /// the key's current one, or the older of the two is dead too.
    fn written_at(&self) -> (u64, u64) {
        (self.block_seq, self.location)
    }
}

struct Entry {
    /// Copied out under the shard's read lock, never shared: handing out a reference-counted
    /// record would cost each hit two atomic writes to the record's line, which two workers
    /// reading the same hot record would bounce between their caches.
    record: Box<[u8]>,
    location: u64,
    block_seq: u64,
    /// Reads since the entry was last at the head of its queue, saturating at FREQUENCY_MAX;
    /// atomic so that a hit needs the shard lock only shared.
    frequency: AtomicU8,
    /// Loaded ahead of the command that reads it: that first read is not a second access and
    /// must not buy the entry its way from the small FIFO into the main one.
    loaded_ahead: AtomicBool,
    in_main: bool,
    /// Matches the entry's one live queue slot; slots of removed entries carry older tickets.
    ticket: u64,
}

impl Entry {
    fn holds(&self, key: &CacheKey) -> bool {
        self.location == key.location && self.block_seq == key.block_seq
    }

    fn cache_key(&self, key_hash: u64) -> CacheKey {
        CacheKey { key_hash, location: self.location, block_seq: self.block_seq }
    }
}

/// A queue slot: the key and the ticket of the entry it was queued for.
type Slot = (u64, u64);

/// Keys are 64 bits of a digest (already well spread); one multiply-rotate readies them for
/// hashbrown's use of the top bits, far cheaper than the default SipHash.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
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

type KeyMap<V> = HashMap<u64, V, BuildHasherDefault<KeyHasher>>;

#[derive(Default)]
struct Shard {
    entries: KeyMap<Entry>,
    small: VecDeque<Slot>,
    main: VecDeque<Slot>,
    ghost: VecDeque<u64>,
    ghost_members: KeyMap<()>,
    small_bytes: u64,
    main_bytes: u64,
    /// Queue slots whose entry was removed (by `remove`), skipped when they come up.
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

/// What a cached record's allocation really takes: the record as a malloc chunk. The entry's map
/// slot and queue slot are charged with the structures that hold them.
fn charge(record: &[u8]) -> u64 {
    let request = record.len() as u64;
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

/// Moves a map's keys into a new map of the buckets they need, leaving the tombstones of removed
/// keys behind. Costs one move per key, once per FULL_MAP_KEPT_SIXTEENTHS' worth of inserts at
/// the least, and briefly a second table of the shard.
fn rebuild_at_size<V>(map: &mut KeyMap<V>) {
    let old = std::mem::take(map);
    let mut rebuilt = KeyMap::with_capacity_and_hasher(old.len(), BuildHasherDefault::default());
    rebuilt.extend(old);
    *map = rebuilt;
}

/// Whether a record given to the cache may take the place of the record its key's entry holds,
/// and whether it may be admitted when the key has no entry.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Admission {
    /// A record read from the medium (`ahead` of the command that reads it, or by it): admitted
    /// when absent; it replaces the entry's record only if written later (a read racing a write
    /// must not push the newer record out).
    Read { ahead: bool },
    /// The key's new record, written under its partition's write lock: it replaces whatever the
    /// entry holds; admitted when absent only if `admit_absent` and the cache has room for it
    /// without evicting (a write does not push records out, unless an admission to another
    /// shard takes the room between its check and its insert: a stream of new keys written once,
    /// such as messages, would otherwise pay an admission and an eviction each and flush the
    /// records that reads admitted).
    Written { admit_absent: bool },
    /// A record moved by defragmentation from `from`: it replaces the entry's record only if the
    /// entry holds `from`; never admitted when absent (a move is not a read).
    Moved { from: CacheKey },
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

    fn shard_number(&self, key_hash: u64) -> usize {
        let mixed = key_hash.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ((mixed >> 32) as usize) % self.shards.len()
    }

    fn shard(&self, key_hash: u64) -> &RwLock<Shard> {
        &self.shards[self.shard_number(key_hash)]
    }

    /// A shard's share of the budget: it sizes the shard's small FIFO.
    fn shard_share_bytes(&self) -> u64 {
        self.budget_bytes / self.shards.len() as u64
    }

    fn over_budget(&self) -> bool {
        self.used_bytes.load(Ordering::Relaxed) > self.budget_bytes
    }

    pub(crate) fn get(&self, key: CacheKey) -> Option<Vec<u8>> {
        let shard = self.shard(key.key_hash).read();
        let found = shard.entries.get(&key.key_hash).filter(|entry| entry.holds(&key)).map(|entry| {
            // Two hits at once may count as one: the frequency is a hint.
            let frequency = entry.frequency.load(Ordering::Relaxed);
            if entry.loaded_ahead.load(Ordering::Relaxed) {
                entry.loaded_ahead.store(false, Ordering::Relaxed);
            } else if frequency < FREQUENCY_MAX {
                entry.frequency.store(frequency + 1, Ordering::Relaxed);
            }
            entry.record.to_vec()
        });
        let counter = if found.is_some() { &self.counters.hits } else { &self.counters.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Looks a record up without counting an access (listing keys is not reading values).
    pub(crate) fn peek(&self, key: CacheKey) -> Option<Vec<u8>> {
        let shard = self.shard(key.key_hash).read();
        shard.entries.get(&key.key_hash).filter(|entry| entry.holds(&key)).map(|entry| entry.record.to_vec())
    }

    /// Whether the cache holds the record `key`, without counting an access.
    pub(crate) fn contains(&self, key: CacheKey) -> bool {
        self.shard(key.key_hash).read().entries.get(&key.key_hash).is_some_and(|entry| entry.holds(&key))
    }

    /// Admits a record read from the medium. It takes its key's entry only from a record written
    /// before it: a read that let the partition lock go before reading may come back with a
    /// record its key's writer has already superseded in the cache.
    pub(crate) fn insert(&self, key: CacheKey, record: &[u8]) {
        self.admit(key, record, Admission::Read { ahead: false });
    }

    /// Admits a record read from the medium ahead of the command that will read it (counted as
    /// the miss it is): like `insert`, but that command's read does not count as a reuse.
    pub(crate) fn insert_ahead(&self, key: CacheKey, record: &[u8]) {
        self.counters.misses.fetch_add(1, Ordering::Relaxed);
        self.admit(key, record, Admission::Read { ahead: true });
    }

    /// The key's new record, just written: it takes the place of the key's entry, keeping its
    /// queue and reads (so a hot key that is written often stays cached), or, when the key has
    /// no entry, is admitted if `admit_absent` and the cache has room for it.
    pub(crate) fn write(&self, key: CacheKey, record: &[u8], admit_absent: bool) {
        self.admit(key, record, Admission::Written { admit_absent });
    }

    /// A record moved from `from` to `key`: the entry follows it if it held `from`.
    pub(crate) fn relocate(&self, from: CacheKey, key: CacheKey, record: &[u8]) {
        assert_eq!(from.key_hash, key.key_hash, "a move keeps its key");
        self.admit(key, record, Admission::Moved { from });
    }

    /// Drops the entry of a key nobody will read again (it was deleted).
    pub(crate) fn remove(&self, key_hash: u64) {
        let removed = self.shard(key_hash).write().remove(key_hash);
        if let Some((bytes, _record)) = removed {
            self.used_bytes.fetch_sub(bytes, Ordering::Relaxed);
        }
    }

    fn admit(&self, key: CacheKey, record: &[u8], admission: Admission) {
        let bytes = charge(record);
        let loaded_ahead = admission == (Admission::Read { ahead: true });
        if bytes > self.budget_bytes * SMALL_PERCENT / 100 / SMALL_FIFO_PER_RECORD_MIN {
            // Too large to cache; whatever the key's entry holds is no longer its record.
            if !matches!(admission, Admission::Read { .. }) {
                self.remove(key.key_hash);
            }
            return;
        }
        let share = self.shard_share_bytes();
        let home = self.shard_number(key.key_hash);
        let mut shard = self.shards[home].write();
        // The record an update replaces is freed once the lock is let go.
        let mut replaced = None;
        if let Some(entry) = shard.entries.get_mut(&key.key_hash) {
            let update = match admission {
                Admission::Read { .. } => key.written_at() > entry.cache_key(key.key_hash).written_at(),
                Admission::Written { .. } => true,
                Admission::Moved { from } => entry.holds(&from),
            };
            if !update || entry.holds(&key) {
                return;
            }
            let old_bytes = charge(&entry.record);
            if entry.record.len() == record.len() {
                // As long as the old one: overwritten in place, without an allocation and a free.
                entry.record.copy_from_slice(record);
            } else {
                replaced = Some(std::mem::replace(&mut entry.record, Box::from(record)));
            }
            entry.location = key.location;
            entry.block_seq = key.block_seq;
            *entry.loaded_ahead.get_mut() = loaded_ahead;
            let in_main = entry.in_main;
            shard.resize(in_main, old_bytes, bytes);
            self.used_bytes.fetch_sub(old_bytes, Ordering::Relaxed);
        } else {
            let admits = match admission {
                Admission::Read { .. } => true,
                Admission::Written { admit_absent } => admit_absent && self.takes_without_evicting(&shard, share, bytes),
                Admission::Moved { .. } => false,
            };
            if !admits {
                return;
            }
            self.make_room_for_an_entry(&mut shard, share, bytes);
            let returning = shard.ghost_members.remove(&key.key_hash).is_some();
            shard.push(key, Box::from(record), bytes, returning, loaded_ahead);
        }
        self.used_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.recharge(&mut shard);
        self.evict_while_over_budget(&mut shard, share);
        drop(shard);
        drop(replaced);
        // The home shard ran empty while others hold the excess: take it from them, one at a time.
        let shard_count = self.shards.len();
        for step in 1..shard_count {
            if !self.over_budget() {
                break;
            }
            self.evict_while_over_budget(&mut self.shards[(home + step) % shard_count].write(), share);
        }
    }

    /// Whether `shard` can take a new entry of `record_bytes` with the cache staying within its
    /// budget, counting what its map and small FIFO would grow by: then admitting it evicts
    /// nothing.
    fn takes_without_evicting(&self, shard: &Shard, share_bytes: u64, record_bytes: u64) -> bool {
        let map_full = shard.entries.len() == shard.entries.capacity();
        if map_full && !shard.map_growth_pays(share_bytes, record_bytes) {
            return false;
        }
        let map_growth_bytes = if map_full { shard.grown_entry_map_bytes() - shard.entry_map_bytes() } else { 0 };
        let queue_growth_bytes = if shard.small.len() == shard.small.capacity() { (shard.small.capacity().max(1) * std::mem::size_of::<Slot>()) as u64 } else { 0 };
        self.used_bytes.load(Ordering::Relaxed) + record_bytes + map_growth_bytes + queue_growth_bytes <= self.budget_bytes
    }

    /// Evicts from `shard` until the cache fits its budget or the shard is empty.
    fn evict_while_over_budget(&self, shard: &mut Shard, share_bytes: u64) {
        if !self.over_budget() || shard.entries.is_empty() {
            // Nothing moves in the queues: no count to add, nothing to shrink.
            return;
        }
        let mut evicted = 0;
        while self.over_budget() && !shard.entries.is_empty() {
            evicted += self.evict_step(shard, share_bytes);
        }
        self.counters.evictions.fetch_add(evicted, Ordering::Relaxed);
        shard.shrink_sparse_queues();
        self.recharge(shard);
    }

    /// Before a new entry of `record_bytes` joins a full entry map that doubling would not pay
    /// for: evicts down to FULL_MAP_KEPT_SIXTEENTHS of the entries and rebuilds the map at its
    /// size, so that the insert cannot double it.
    fn make_room_for_an_entry(&self, shard: &mut Shard, share_bytes: u64, record_bytes: u64) {
        if shard.entries.len() < shard.entries.capacity() || shard.map_growth_pays(share_bytes, record_bytes) {
            return;
        }
        let kept_entries = shard.entries.len() * FULL_MAP_KEPT_SIXTEENTHS / 16;
        let mut evicted = 0;
        while shard.entries.len() > kept_entries {
            evicted += self.evict_step(shard, share_bytes);
        }
        self.counters.evictions.fetch_add(evicted, Ordering::Relaxed);
        rebuild_at_size(&mut shard.entries);
        self.recharge(shard);
        assert!(shard.entries.len() < shard.entries.capacity(), "a rebuilt map has room for an entry");
    }

    /// One S3-FIFO step; returns the entries that left.
    fn evict_step(&self, shard: &mut Shard, share_bytes: u64) -> u64 {
        let (count, freed_bytes) = shard.evict_one(share_bytes);
        self.used_bytes.fetch_sub(freed_bytes, Ordering::Relaxed);
        // A key remembered in the ghost FIFO may have grown it.
        self.recharge(shard);
        count
    }

    /// Brings the charge for `shard`'s maps and queues to what they have allocated now (maps
    /// grow on inserts and never shrink; sparse queues shrink after evictions).
    fn recharge(&self, shard: &mut Shard) {
        let bytes = shard.structure_bytes();
        if bytes >= shard.charged_structure_bytes {
            self.used_bytes.fetch_add(bytes - shard.charged_structure_bytes, Ordering::Relaxed);
        } else {
            self.used_bytes.fetch_sub(shard.charged_structure_bytes - bytes, Ordering::Relaxed);
        }
        shard.charged_structure_bytes = bytes;
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
        self.entry_map_bytes()
            + map_bytes(self.ghost_members.capacity(), std::mem::size_of::<u64>())
            + (self.small.capacity() + self.main.capacity()) as u64 * slot_bytes
            + self.ghost.capacity() as u64 * std::mem::size_of::<u64>() as u64
    }

    fn entry_map_bytes(&self) -> u64 {
        map_bytes(self.entries.capacity(), std::mem::size_of::<(u64, Entry)>())
    }

    /// What the entry map allocates once it doubles (its next insert when full).
    fn grown_entry_map_bytes(&self) -> u64 {
        map_bytes(self.entries.capacity() * 2 + 1, std::mem::size_of::<(u64, Entry)>())
    }

    /// Whether doubling the full entry map lets the shard, within its share of the budget, hold
    /// enough more entries (of the average size so far, `new_record_bytes` for the first) to be
    /// worth the buckets the doubled map leaves empty.
    fn map_growth_pays(&self, share_bytes: u64, new_record_bytes: u64) -> bool {
        let entries = self.entries.len() as u64;
        let record_bytes = (self.small_bytes + self.main_bytes).checked_div(entries).unwrap_or(new_record_bytes).max(1);
        let other_structure_bytes = self.structure_bytes() - self.entry_map_bytes();
        let room_bytes = share_bytes.saturating_sub(self.grown_entry_map_bytes() + other_structure_bytes);
        room_bytes / record_bytes * 8 >= entries * MAP_GROWTH_ENTRIES_GAIN_EIGHTHS
    }

    /// Gives back queue allocations left sparse (the small FIFO fills first and then shrinks as
    /// entries move on to the main FIFO).
    fn shrink_sparse_queues(&mut self) {
        fn shrink<T>(queue: &mut VecDeque<T>) {
            let kept_slots = queue.len().max(QUEUE_SLOTS_NEVER_SHRUNK);
            if queue.capacity() > kept_slots * QUEUE_CAPACITY_PER_SLOT_MAX {
                queue.shrink_to(kept_slots * QUEUE_SLOTS_KEPT_PER_SLOT);
            }
        }
        shrink(&mut self.small);
        shrink(&mut self.main);
        shrink(&mut self.ghost);
    }

    /// A new entry: a new record in the small FIFO with no reads, a returning key (ghost hit)
    /// in the main FIFO.
    fn push(&mut self, key: CacheKey, record: Box<[u8]>, bytes: u64, in_main: bool, loaded_ahead: bool) {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let entry = Entry {
            record,
            location: key.location,
            block_seq: key.block_seq,
            frequency: AtomicU8::new(0),
            loaded_ahead: AtomicBool::new(loaded_ahead),
            in_main,
            ticket,
        };
        self.entries.insert(key.key_hash, entry);
        if in_main {
            self.main.push_back((key.key_hash, ticket));
            self.main_bytes += bytes;
        } else {
            self.small.push_back((key.key_hash, ticket));
            self.small_bytes += bytes;
        }
    }

    /// An entry's record of `old_bytes` was replaced by one of `new_bytes` in its queue.
    fn resize(&mut self, in_main: bool, old_bytes: u64, new_bytes: u64) {
        let queue_bytes = if in_main { &mut self.main_bytes } else { &mut self.small_bytes };
        *queue_bytes = *queue_bytes - old_bytes + new_bytes;
    }

    /// Removes a key's entry (its queue slot goes stale); returns its bytes and its record, to
    /// be freed outside the lock.
    fn remove(&mut self, key_hash: u64) -> Option<(u64, Box<[u8]>)> {
        let entry = self.entries.remove(&key_hash)?;
        let bytes = charge(&entry.record);
        if entry.in_main {
            self.main_bytes -= bytes;
        } else {
            self.small_bytes -= bytes;
        }
        self.stale_slots += 1;
        self.trim_ghost();
        if self.stale_slots > self.entries.len() + STALE_QUEUE_SLOTS_SLACK {
            self.drop_stale_slots();
        }
        Some((bytes, entry.record))
    }

    fn drop_stale_slots(&mut self) {
        let entries = &self.entries;
        let live = |&(key_hash, ticket): &Slot| entries.get(&key_hash).is_some_and(|entry| entry.ticket == ticket);
        self.small.retain(live);
        self.main.retain(live);
        self.stale_slots = 0;
    }

    /// The entry a popped queue slot stands for, unless the slot went stale.
    fn live_entry(&mut self, (key_hash, ticket): Slot) -> Option<&mut Entry> {
        let entry = self.entries.get_mut(&key_hash).filter(|entry| entry.ticket == ticket);
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
        self.trim_ghost();
        (1, bytes)
    }

    /// The ghost FIFO holds at most GHOST_KEYS_PER_ENTRY keys per live entry of the shard.
    fn remember(&mut self, key_hash: u64) {
        let ghost_keys_max = (self.entries.len() * GHOST_KEYS_PER_ENTRY).max(1);
        let members = self.ghost_members.len();
        if members == self.ghost_members.capacity() && members >= ghost_keys_max {
            // As large as it needs to be: forget the oldest keys instead of doubling the map.
            while self.ghost_members.len() > members * FULL_MAP_KEPT_SIXTEENTHS / 16 {
                self.forget_oldest_ghost();
            }
            rebuild_at_size(&mut self.ghost_members);
        }
        self.ghost.push_back(key_hash);
        self.ghost_members.insert(key_hash, ());
        self.trim_ghost();
    }

    /// Keeps the ghost FIFO within GHOST_KEYS_PER_ENTRY keys per live entry, as entries leave.
    fn trim_ghost(&mut self) {
        let ghost_keys_max = (self.entries.len() * GHOST_KEYS_PER_ENTRY).max(1);
        while self.ghost.len() > ghost_keys_max {
            self.forget_oldest_ghost();
        }
    }

    /// Every key of `ghost_members` is in `ghost` (a key that returned stays there until it
    /// leaves), so popping `ghost` empties the map eventually.
    fn forget_oldest_ghost(&mut self) {
        if let Some(old) = self.ghost.pop_front() {
            self.ghost_members.remove(&old);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::Location;

    /// The record at `location` of a key of its own.
    fn key(location: u64) -> CacheKey {
        version(location, location)
    }

    /// The record at `location` of key `key_hash`.
    fn version(key_hash: u64, location: u64) -> CacheKey {
        CacheKey { key_hash, location: Location::new(1, 8 * location + 8, 8).0, block_seq: 1 }
    }

    fn record(len: usize) -> Vec<u8> {
        vec![7u8; len]
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

    fn queue_slots(cache: &RecordCache) -> usize {
        cache.shards.iter().map(|shard| {
            let shard = shard.read();
            shard.small.len() + shard.main.len()
        }).sum()
    }

    #[test]
    fn the_budget_holds() {
        let cache = RecordCache::new(1 << 20);
        for location in 0..10_000 {
            cache.insert(key(location), &record(500));
            assert!(cache.used_bytes() <= cache.capacity_bytes());
        }
        assert!(cache.counters.evictions.load(Ordering::Relaxed) > 0);
    }

    /// Small records (where the maps and queues weigh most) read, rewritten (at other sizes) and
    /// deleted at random: the charge always equals what the records, maps and queues have
    /// allocated, and never passes the budget.
    #[test]
    fn the_charge_counts_maps_queues_and_the_ghost_fifo_and_stays_within_the_budget() {
        use rand::{Rng, SeedableRng};
        let cache = RecordCache::new(8 << 20);
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let mut location_of = vec![None; 200_000];
        let mut next_location = 0;
        for step in 0..400_000u64 {
            let number = rng.gen_range(0..location_of.len());
            let fresh = version(number as u64, next_location);
            next_location += 1;
            match (location_of[number], rng.gen_range(0..10)) {
                (Some(_), 0..=2) => cache.write(fresh, &record(rng.gen_range(20..200)), true),
                (Some(_), 3) => {
                    cache.remove(number as u64);
                    location_of[number] = None;
                    continue;
                }
                (Some(old), _) if cache.get(version(number as u64, old)).is_some() => continue,
                _ => cache.insert(fresh, &record(rng.gen_range(20..200))),
            }
            location_of[number] = Some(next_location - 1);
            assert!(cache.used_bytes() <= cache.capacity_bytes(), "step {step}");
        }
        assert_eq!(cache.used_bytes(), recomputed_charge(&cache));
        let structures = cache.used_bytes() - record_bytes_charged(&cache);
        assert!(structures > 0 && cache.counters.evictions.load(Ordering::Relaxed) > 0);
        for shard in cache.shards.iter() {
            let shard = shard.read();
            assert!(shard.ghost.len() <= (shard.entries.len() * GHOST_KEYS_PER_ENTRY).max(1));
            assert!(shard.ghost_members.len() <= shard.ghost.len());
        }
        cache.clear();
        assert_eq!(cache.used_bytes(), 0);
    }

    /// A stream of keys read once (each evicts another) leaves hashbrown's tombstones behind;
    /// the entry map is rebuilt at its size rather than doubled, so it stays at least half full,
    /// and the queues keep no more than a few slots of allocation per entry.
    #[test]
    fn churn_keeps_the_maps_and_queues_dense() {
        let cache = RecordCache::new(8 << 20);
        for location in 0..400_000 {
            cache.insert(key(location), &record(100));
            assert!(cache.used_bytes() <= cache.capacity_bytes());
        }
        assert_eq!(cache.used_bytes(), recomputed_charge(&cache));
        for shard in cache.shards.iter() {
            let shard = shard.read();
            assert!(shard.entries.len() * 2 >= shard.entries.capacity(), "{} entries in a map for {}", shard.entries.len(), shard.entries.capacity());
            let queue_slots = shard.small.capacity() + shard.main.capacity();
            assert!(queue_slots <= (shard.entries.len() + QUEUE_SLOTS_NEVER_SHRUNK) * QUEUE_CAPACITY_PER_SLOT_MAX * 2, "{queue_slots} queue slots");
        }
    }

    /// A record loaded ahead of its command counts one miss, and the command's read one hit that
    /// is not a reuse: it leaves the small FIFO like a record read once.
    #[test]
    fn a_read_of_a_record_loaded_ahead_is_not_a_reuse() {
        let cache = RecordCache::new(1 << 20);
        cache.insert_ahead(key(1), &record(500));
        assert!(cache.get(key(1)).is_some());
        assert_eq!((cache.counters.misses.load(Ordering::Relaxed), cache.counters.hits.load(Ordering::Relaxed)), (1, 1));
        cache.insert(key(2), &record(500));
        assert!(cache.get(key(2)).is_some());
        for location in 10..5_000 {
            cache.insert(key(location), &record(500));
        }
        assert!(cache.get(key(2)).is_some(), "read after its admission: kept in the main FIFO");
        assert!(cache.get(key(1)).is_none(), "read only by the command it was loaded for: evicted");
    }

    /// A write as long as the record it replaces overwrites it in place, unless a reader still
    /// holds it: that reader keeps the bytes it was given.
    #[test]
    fn a_rewrite_of_the_same_size_never_changes_a_record_a_reader_holds() {
        let cache = RecordCache::new(1 << 20);
        cache.write(version(9, 1), b"first", true);
        let held = cache.get(version(9, 1)).unwrap();
        cache.write(version(9, 2), b"other", true);
        assert_eq!(&held[..], b"first");
        assert_eq!(&cache.get(version(9, 2)).unwrap()[..], b"other");
        assert!(cache.get(version(9, 1)).is_none(), "the entry holds the newer record only");
        drop(held);
        cache.write(version(9, 3), b"third", true);
        assert_eq!(&cache.get(version(9, 3)).unwrap()[..], b"third");
        assert_eq!(cache.used_bytes(), recomputed_charge(&cache));
    }

    #[test]
    fn the_record_charge_is_its_malloc_chunk() {
        assert_eq!(charge(&record(0)), 32);
        assert_eq!(charge(&record(24)), 32);
        assert_eq!(charge(&record(25)), 48);
        assert_eq!(charge(&record(120)), 128);
        assert_eq!(charge(&record(121)), 144);
    }

    /// The slot sizes docs/design/cache.md counts per entry.
    #[test]
    fn map_and_queue_slots_are_the_sizes_the_design_counts() {
        assert_eq!(std::mem::size_of::<(u64, Entry)>(), 56);
        assert_eq!(std::mem::size_of::<Slot>(), 16);
    }

    #[test]
    fn a_scan_does_not_evict_a_hot_set_that_fits() {
        let cache = RecordCache::new(4 << 20);
        let hot: Vec<u64> = (0..2000).collect();
        for _ in 0..3 {
            for &location in &hot {
                if cache.get(key(location)).is_none() {
                    cache.insert(key(location), &record(500));
                }
            }
        }
        for location in 1_000_000..1_100_000 {
            cache.insert(key(location), &record(500));
        }
        let kept = hot.iter().filter(|&&location| cache.get(key(location)).is_some()).count();
        assert!(kept * 100 >= hot.len() * 95, "only {kept} of {} hot entries survived the scan", hot.len());
    }

    /// A budget as large as the records plus their map and queue slots at the lowest load
    /// the structures fall to (a map just grown is 7/16 full, a queue half full).
    #[test]
    fn a_budget_as_large_as_the_data_keeps_all_of_it() {
        let records = 20_000u64;
        let map_slot_bytes = std::mem::size_of::<(u64, Entry)>() as u64 + 1;
        let structure_bytes_per_entry = map_slot_bytes * 16 / 7 + 2 * std::mem::size_of::<Slot>() as u64;
        let cache = RecordCache::new(records * (charge(&record(500)) + structure_bytes_per_entry + 1));
        for location in 0..records {
            cache.insert(key(location), &record(500));
        }
        assert_eq!(cache.counters.evictions.load(Ordering::Relaxed), 0);
        assert!((0..records).all(|location| cache.get(key(location)).is_some()));
        assert_eq!(record_bytes_charged(&cache), records * charge(&record(500)));
    }

    #[test]
    fn a_written_record_takes_its_predecessors_place_and_reads() {
        let cache = RecordCache::new(1 << 20);
        cache.insert(version(1, 1), &record(500));
        for _ in 0..3 {
            assert!(cache.get(version(1, 1)).is_some());
        }
        cache.write(version(1, 2), &record(300), true);
        assert!(cache.peek(version(1, 1)).is_none(), "the old record is never served again");
        assert!(cache.peek(version(1, 2)).is_some());
        assert_eq!(record_bytes_charged(&cache), charge(&record(300)));
        assert_eq!(queue_slots(&cache), 1, "updated in place");
        // The successor survives a flood of one-hit records, as its predecessor would have.
        for location in 1000..10_000 {
            cache.insert(key(location), &record(500));
        }
        assert!(cache.peek(version(1, 2)).is_some());
        assert!(cache.used_bytes() <= cache.capacity_bytes());
    }

    #[test]
    fn writing_often_under_budget_keeps_one_entry_and_one_queue_slot() {
        let cache = RecordCache::new(64 << 20);
        for location in 0..100_000 {
            cache.write(version(9, location), &record(100), true);
        }
        assert_eq!(queue_slots(&cache), 1);
        assert_eq!(record_bytes_charged(&cache), charge(&record(100)));
        assert!(cache.get(version(9, 99_999)).is_some() && cache.get(version(9, 99_998)).is_none());
    }

    /// A reader that read a key's record before a write and admits it after must not push the
    /// newer record out; a record read after the write replaces an older one.
    #[test]
    fn a_read_admits_a_record_only_over_an_older_one() {
        let cache = RecordCache::new(1 << 20);
        cache.write(version(4, 20), &record(100), true);
        cache.insert(version(4, 10), &record(100));
        assert!(cache.peek(version(4, 20)).is_some() && cache.peek(version(4, 10)).is_none());
        cache.insert(version(4, 30), &record(100));
        assert!(cache.peek(version(4, 30)).is_some() && cache.peek(version(4, 20)).is_none());
        let later_block = CacheKey { block_seq: 2, ..version(4, 1) };
        cache.insert(later_block, &record(100));
        assert!(cache.peek(later_block).is_some(), "a later block is later whatever the offset");
    }

    #[test]
    fn writes_admit_absent_keys_only_when_asked_and_moves_follow_only_the_record_held() {
        let cache = RecordCache::new(1 << 20);
        cache.write(version(1, 1), &record(100), false);
        assert!(cache.peek(version(1, 1)).is_none());
        cache.relocate(version(1, 1), version(1, 2), &record(100));
        assert!(cache.peek(version(1, 2)).is_none(), "a move admits nothing");
        cache.insert(version(1, 3), &record(100));
        cache.relocate(version(1, 1), version(1, 4), &record(100));
        assert!(cache.peek(version(1, 3)).is_some(), "a move of another record leaves the entry");
        cache.relocate(version(1, 3), version(1, 5), &record(100));
        assert!(cache.peek(version(1, 5)).is_some() && cache.peek(version(1, 3)).is_none());
        cache.write(version(1, 6), &record(100), false);
        assert!(cache.peek(version(1, 6)).is_some(), "a cached key stays cached");
    }

    #[test]
    fn writes_admit_absent_keys_only_while_the_cache_has_room() {
        let cache = RecordCache::new(1 << 20);
        cache.write(version(1, 1), &record(100), true);
        assert!(cache.peek(version(1, 1)).is_some(), "room: admitted");
        let mut key_hash = 2;
        loop {
            assert!(key_hash < 100_000, "writes fill the cache");
            cache.write(version(key_hash, 1), &record(100), true);
            assert_eq!(cache.counters.evictions.load(Ordering::Relaxed), 0, "a write evicts nothing to get in");
            assert!(cache.used_bytes() <= cache.capacity_bytes());
            if cache.peek(version(key_hash, 1)).is_none() {
                break;
            }
            key_hash += 1;
        }
        assert!(key_hash > 1000, "writes filled the cache first");
        let cached = (2..key_hash).rev().find(|&key| cache.peek(version(key, 1)).is_some()).unwrap();
        cache.write(version(cached, 2), &record(100), true);
        assert!(cache.peek(version(cached, 2)).is_some(), "a cached key's new record takes its place");
        cache.insert(version(key_hash, 1), &record(100));
        assert!(cache.peek(version(key_hash, 1)).is_some(), "a read still gets in, evicting");
    }

    #[test]
    fn a_write_too_large_to_cache_or_a_delete_drops_the_keys_entry() {
        let cache = RecordCache::new(1 << 20);
        cache.insert(version(1, 1), &record(100));
        cache.write(version(1, 2), &record(1 << 20), true);
        assert!(cache.peek(version(1, 1)).is_none() && cache.peek(version(1, 2)).is_none());
        cache.insert(version(2, 1), &record(100));
        cache.remove(2);
        assert!(cache.peek(version(2, 1)).is_none());
        assert_eq!(cache.used_bytes(), recomputed_charge(&cache));
        assert_eq!(record_bytes_charged(&cache), 0);
    }

    /// Writers, readers admitting what they read (often superseded by then), moves and deletes
    /// of the same keys at once: a lookup only ever returns the record it names, and the charge
    /// stays exact and within the budget.
    #[test]
    fn concurrent_writes_reads_moves_and_deletes_never_serve_another_record() {
        use rand::{Rng, SeedableRng};
        const KEYS: u64 = 512;
        const THREADS: u64 = 4;
        let cache = RecordCache::new(64 << 10);
        // The record at a location says which location and key it is (and has a size of its own).
        let record_at = |key: CacheKey| {
            let mut bytes = [key.key_hash.to_le_bytes(), key.location.to_le_bytes()].concat();
            bytes.resize(16 + (key.location % 97) as usize, 1);
            bytes
        };
        let latest: Vec<AtomicU64> = (0..KEYS).map(|_| AtomicU64::new(0)).collect();
        std::thread::scope(|scope| {
            for thread in 0..THREADS {
                let (cache, latest) = (&cache, &latest);
                scope.spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(thread);
                    for step in 0..40_000u64 {
                        let key_hash = rng.gen_range(0..KEYS);
                        let current = latest[key_hash as usize].load(Ordering::Relaxed);
                        let at = version(key_hash, current);
                        match rng.gen_range(0..10) {
                            0..=2 => {
                                // A write: a fresh location, later than every earlier one.
                                let number = (step * THREADS + thread) * KEYS + key_hash + 1;
                                let fresh = version(key_hash, number);
                                latest[key_hash as usize].fetch_max(number, Ordering::Relaxed);
                                cache.write(fresh, &record_at(fresh), true);
                            }
                            3 => cache.relocate(at, version(key_hash, current + 1), &record_at(version(key_hash, current + 1))),
                            4 => cache.remove(key_hash),
                            _ => match cache.get(at) {
                                Some(record) => assert_eq!(&record[..], &record_at(at)[..], "another record served"),
                                None => cache.insert(at, &record_at(at)),
                            },
                        }
                    }
                });
            }
        });
        assert_eq!(cache.used_bytes(), recomputed_charge(&cache));
        assert!(cache.used_bytes() <= cache.capacity_bytes());
        assert!(cache.counters.hits.load(Ordering::Relaxed) > 0 && cache.counters.evictions.load(Ordering::Relaxed) > 0);
    }

    #[test]
    fn reused_blocks_never_serve_old_records() {
        let cache = RecordCache::new(1 << 20);
        cache.insert(CacheKey { block_seq: 1, ..key(5) }, &record(10));
        assert!(cache.get(CacheKey { block_seq: 2, ..key(5) }).is_none());
    }
}
