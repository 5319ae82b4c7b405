//! The DRAM record cache in front of records on ssd and pmem, bounded in bytes, with the S3-FIFO
//! admission and eviction policy (see docs/design/cache.md for why).
//!
//! One entry per key: a shard's table (`key_table.rs`: 8-byte slots of a tag and a slot number,
//! found where a reader can prefetch before it takes the shard's lock) finds it by the key's
//! digest (64 bits of it) among the entries of the shard's slab (a vector of 48-byte slots;
//! queues hold 4-byte slot numbers: about 80-115 bytes of structures beside a 120-byte record),
//! and the entry holds
//! the record it last saw for that key with the record's location and its block's sequence
//! number. A lookup names all three and hits only when the entry holds that very record. Records
//! never change once written and a block's sequence number changes whenever the block is reused,
//! so a hit can never be stale: the index decides which location is current (under the partition
//! lock), and an entry holding any other record is a miss. Two keys sharing 64 digest bits would
//! share one entry and miss more, never read each other's records.
//!
//! Because an entry is the key's, a write updates it in place (one shard lock, one table probe):
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

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

use hashbrown::HashTable;

mod key_table;
use key_table::{KeyTable, TableMirror};

use crate::striped_counter::StripedCounter;
use crate::waiting_lock::WaitingRwLock;

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
const FREQUENCY_MAX: u8 = 3;
/// Bytes of a cached record that `prefetch_entries` asks for, line by line: a 440-byte value's
/// record whole; the hardware prefetcher follows the rest of a longer one once it is read.
const RECORD_PREFETCH_BYTES_MAX: usize = 512;
/// Slab slots of removed entries that a shard tolerates, beyond one per live entry, before it
/// frees them all at once (each is freed anyway when its queue slot reaches a queue's head).
const REMOVED_SLOTS_SLACK: usize = 1024;
/// A queue, table or free list whose allocation holds more than this many times its items (the
/// small FIFO after the main one has filled) is given back down to `SLOTS_KEPT_PER_ITEM` times
/// them.
const SLOTS_PER_ITEM_MAX: usize = 4;
const SLOTS_KEPT_PER_ITEM: usize = 2;
/// Structures this small are never shrunk: they cost less than the rehoming would.
const SLOTS_NEVER_SHRUNK: usize = 64;
/// A full slab grows by this fraction of its slots (and at least `SLAB_GROWTH_SLOTS_MIN`): a
/// vector's doubling would leave up to half of its 48-byte slots unused.
const SLAB_GROWTH_DIVISOR: usize = 8;
const SLAB_GROWTH_SLOTS_MIN: usize = 64;

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

/// Where an entry lives in its shard's slab. Queues and the table hold these (4 bytes each)
/// rather than keys.
type SlotIndex = u32;

struct Entry {
    /// Copied out under the shard's read lock, never shared: handing out a reference-counted
    /// record would cost each hit two atomic writes to the record's line, which two workers
    /// reading the same hot record would bounce between their caches.
    record: Box<[u8]>,
    key_hash: u64,
    location: u64,
    block_seq: u64,
    /// Reads since the entry was last at the head of its queue, saturating at FREQUENCY_MAX;
    /// atomic so that a hit needs the shard lock only shared.
    frequency: AtomicU8,
    /// Loaded ahead of the command that reads it: that first read is not a second access and
    /// must not buy the entry its way from the small FIFO into the main one.
    loaded_ahead: AtomicBool,
    /// Which queue holds the entry's one queue slot.
    in_main: bool,
}

impl Entry {
    fn holds(&self, key: &CacheKey) -> bool {
        self.location == key.location && self.block_seq == key.block_seq
    }

    fn cache_key(&self) -> CacheKey {
        CacheKey { key_hash: self.key_hash, location: self.location, block_seq: self.block_seq }
    }
}

/// A slot of a shard's slab. Invariant: every `Live` and `Removed` slot has exactly one queue
/// slot (in the small or the main FIFO), a `Free` slot none; the table indexes exactly the
/// `Live` slots; the free list holds exactly the `Free` slots.
enum SlabSlot {
    Live(Entry),
    /// Its entry was removed (the key was deleted) while its queue slot still waits in a queue;
    /// it becomes free when that queue slot comes up, so a queue slot never names another
    /// entry than its own.
    Removed,
    Free,
}

/// Digests are already well spread; one multiply-rotate readies them for hashbrown, which takes
/// its 7-bit tags from the top bits and the bucket from the low ones.
fn table_hash(word: u64) -> u64 {
    word.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29)
}

/// The ghost FIFO remembers 32 bits of a key: a ghost is a hint (a false match only sends an
/// entry to the main FIFO early), and half the bytes hold twice the keys.
fn ghost_fingerprint(key_hash: u64) -> u32 {
    (key_hash ^ (key_hash >> 32)) as u32
}

fn live_entry(slab: &[SlabSlot], index: SlotIndex) -> &Entry {
    match &slab[index as usize] {
        SlabSlot::Live(entry) => entry,
        _ => panic!("slab slot {index} is indexed or queued as live but is not"),
    }
}

/// The capacity to shrink a structure of `items` in an allocation of `capacity` to, when it is
/// sparse enough to be worth it.
fn sparse_capacity_kept(items: usize, capacity: usize) -> Option<usize> {
    let kept_items = items.max(SLOTS_NEVER_SHRUNK);
    (capacity > kept_items * SLOTS_PER_ITEM_MAX).then_some(kept_items * SLOTS_KEPT_PER_ITEM)
}

#[derive(Default)]
struct Shard {
    /// The slab indices of the live entries, found by key.
    table: KeyTable,
    slab: Vec<SlabSlot>,
    free: Vec<SlotIndex>,
    small: VecDeque<SlotIndex>,
    main: VecDeque<SlotIndex>,
    ghost: VecDeque<u32>,
    ghost_members: HashTable<u32>,
    small_bytes: u64,
    main_bytes: u64,
    /// Slab slots in the `Removed` state.
    removed_slots: usize,
    /// The bytes of the structures as last charged to the cache (`RecordCache::recharge`).
    charged_structure_bytes: u64,
}

#[derive(Default)]
pub(crate) struct CacheCounters {
    pub(crate) hits: StripedCounter,
    pub(crate) misses: StripedCounter,
    pub(crate) evictions: AtomicU64,
}

pub(crate) struct RecordCache {
    shards: Box<[WaitingRwLock<Shard>]>,
    /// Where each shard's table is, for prefetching without the shard's lock.
    table_mirrors: Box<[TableMirror]>,
    budget_bytes: u64,
    /// Bytes charged by every shard together: the records' allocations and the shards' slabs,
    /// tables and queues at their allocated capacity. Changed only under the lock of the shard
    /// whose entries or structures change, so it can pass the budget only between an insert and
    /// its evictions.
    used_bytes: AtomicU64,
    pub(crate) counters: CacheCounters,
}

/// What a cached record's allocation really takes: the record as a malloc chunk. The entry's
/// slab slot, table slot and queue slot are charged with the structures that hold them.
fn charge(record: &[u8]) -> u64 {
    let request = record.len() as u64;
    (request + MALLOC_CHUNK_HEADER_BYTES).next_multiple_of(MALLOC_CHUNK_ALIGN_BYTES).max(MALLOC_CHUNK_MIN_BYTES)
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
            shards: (0..shard_count).map(|_| WaitingRwLock::new(Shard::default())).collect(),
            table_mirrors: (0..shard_count).map(|_| TableMirror::default()).collect(),
            budget_bytes,
            used_bytes: AtomicU64::new(0),
            counters: CacheCounters::default(),
        }
    }

    fn shard_number(&self, key_hash: u64) -> usize {
        let mixed = key_hash.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ((mixed >> 32) as usize) % self.shards.len()
    }

    fn shard(&self, key_hash: u64) -> &WaitingRwLock<Shard> {
        &self.shards[self.shard_number(key_hash)]
    }

    /// A shard's share of the budget: it sizes the shard's small FIFO.
    fn shard_share_bytes(&self) -> u64 {
        self.budget_bytes / self.shards.len() as u64
    }

    /// Starts loading the table slot where a lookup of `key_hash` begins, so that the lookup,
    /// done after the key's index entry is found, does not wait for it.
    pub(crate) fn prefetch(&self, key_hash: u64) {
        self.table_mirrors[self.shard_number(key_hash)].prefetch(key_hash);
    }

    /// Starts loading the entries of `key_hashes`, then their records (up to
    /// RECORD_PREFETCH_BYTES_MAX bytes of each); the caller prefetched their table slots a while
    /// before (`prefetch`). The three dependent misses of each lookup (table slot, slab slot,
    /// record) then overlap across the keys of a group instead of following one another.
    pub(crate) fn prefetch_entries(&self, key_hashes: impl Iterator<Item = u64> + Clone) {
        for key_hash in key_hashes.clone() {
            let shard = self.shard(key_hash).read();
            if let Some(index) = shard.table.likely_index(key_hash) {
                let slot: *const SlabSlot = shard.slab.as_ptr().wrapping_add(index as usize);
                hybridkv_media::prefetch_address(slot.cast());
                hybridkv_media::prefetch_address(slot.cast::<u8>().wrapping_add(std::mem::size_of::<SlabSlot>() - 1));
            }
        }
        for key_hash in key_hashes {
            if let Some(entry) = self.shard(key_hash).read().find(key_hash) {
                hybridkv_media::prefetch_line_range(entry.record.as_ptr(), entry.record.len().min(RECORD_PREFETCH_BYTES_MAX));
            }
        }
    }

    fn over_budget(&self) -> bool {
        self.used_bytes.load(Ordering::Relaxed) > self.budget_bytes
    }

    pub(crate) fn get(&self, key: CacheKey) -> Option<Vec<u8>> {
        let shard = self.shard(key.key_hash).read();
        let found = shard.find(key.key_hash).filter(|entry| entry.holds(&key)).map(|entry| {
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
        counter.add(1);
        found
    }

    /// Looks a record up without counting an access (listing keys is not reading values).
    pub(crate) fn peek(&self, key: CacheKey) -> Option<Vec<u8>> {
        let shard = self.shard(key.key_hash).read();
        shard.find(key.key_hash).filter(|entry| entry.holds(&key)).map(|entry| entry.record.to_vec())
    }

    /// Whether the cache holds the record `key`, without counting an access.
    pub(crate) fn contains(&self, key: CacheKey) -> bool {
        self.shard(key.key_hash).read().find(key.key_hash).is_some_and(|entry| entry.holds(&key))
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
        self.counters.misses.add(1);
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
        if let Some(index) = shard.index_of(key.key_hash) {
            let entry = shard.entry_mut(index);
            let update = match admission {
                Admission::Read { .. } => key.written_at() > entry.cache_key().written_at(),
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
            self.charge_change(old_bytes, bytes);
        } else {
            let admits = match admission {
                Admission::Read { .. } => true,
                Admission::Written { admit_absent } => admit_absent && self.takes_without_evicting(&shard, bytes),
                Admission::Moved { .. } => false,
            };
            if !admits {
                return;
            }
            let returning = shard.returns_from_ghost(key.key_hash);
            shard.push(key, Box::from(record), bytes, returning, loaded_ahead);
            self.charge_change(0, bytes);
        }
        self.recharge(&mut shard);
        self.evict_while_over_budget(&mut shard, share);
        self.table_mirrors[home].follow(&shard.table);
        drop(shard);
        drop(replaced);
        // The home shard ran empty while others hold the excess: take it from them, one at a time.
        let shard_count = self.shards.len();
        for step in 1..shard_count {
            if !self.over_budget() {
                break;
            }
            let number = (home + step) % shard_count;
            let mut shard = self.shards[number].write();
            self.evict_while_over_budget(&mut shard, share);
            self.table_mirrors[number].follow(&shard.table);
        }
    }

    /// Whether `shard` can take a new entry of `record_bytes` with the cache staying within its
    /// budget, counting what its slab, table and small FIFO would grow by: then admitting it
    /// evicts nothing.
    fn takes_without_evicting(&self, shard: &Shard, record_bytes: u64) -> bool {
        self.used_bytes.load(Ordering::Relaxed) + record_bytes + shard.new_entry_growth_bytes() <= self.budget_bytes
    }

    /// Evicts from `shard` until the cache fits its budget or the shard is empty.
    fn evict_while_over_budget(&self, shard: &mut Shard, share_bytes: u64) {
        if !self.over_budget() || shard.live_entries() == 0 {
            // Nothing moves in the queues: no count to add, nothing to shrink.
            return;
        }
        let mut evicted = 0;
        while self.over_budget() && shard.live_entries() > 0 {
            let (count, freed_bytes) = shard.evict_one(share_bytes);
            self.used_bytes.fetch_sub(freed_bytes, Ordering::Relaxed);
            evicted += count;
            // A key remembered in the ghost FIFO may have grown its structures.
            self.recharge(shard);
        }
        self.counters.evictions.fetch_add(evicted, Ordering::Relaxed);
        shard.shrink_sparse_structures();
        self.recharge(shard);
    }

    /// Brings the charge for `shard`'s structures to what they have allocated now (they grow on
    /// inserts; sparse ones shrink after evictions).
    fn recharge(&self, shard: &mut Shard) {
        let bytes = shard.structure_bytes();
        self.charge_change(shard.charged_structure_bytes, bytes);
        shard.charged_structure_bytes = bytes;
    }

    /// Charges `new_bytes` in place of `old_bytes`. Unchanged charges (a record rewritten at
    /// its size, structures that did not grow) leave `used_bytes` alone: it is one cache line
    /// for every worker, and an add of zero still takes the line from the other core.
    fn charge_change(&self, old_bytes: u64, new_bytes: u64) {
        if new_bytes > old_bytes {
            self.used_bytes.fetch_add(new_bytes - old_bytes, Ordering::Relaxed);
        } else if new_bytes < old_bytes {
            self.used_bytes.fetch_sub(old_bytes - new_bytes, Ordering::Relaxed);
        }
    }

    /// Empties the cache (for a COLD measurement).
    pub(crate) fn clear(&self) {
        for (shard, mirror) in self.shards.iter().zip(self.table_mirrors.iter()) {
            let mut shard = shard.write();
            let charged = shard.small_bytes + shard.main_bytes + shard.charged_structure_bytes;
            self.used_bytes.fetch_sub(charged, Ordering::Relaxed);
            *shard = Shard::default();
            mirror.follow(&shard.table);
        }
    }

    pub(crate) fn used_bytes(&self) -> u64 {
        self.used_bytes.load(Ordering::Relaxed)
    }

    /// Records held now (each shard read at its own moment).
    pub(crate) fn entries(&self) -> u64 {
        self.shards.iter().map(|shard| shard.read().live_entries() as u64).sum()
    }

    pub(crate) fn capacity_bytes(&self) -> u64 {
        self.budget_bytes
    }
}

impl Shard {
    fn live_entries(&self) -> usize {
        self.table.len()
    }

    fn index_of(&self, key_hash: u64) -> Option<SlotIndex> {
        let slab = &self.slab;
        self.table.find(key_hash, |index| live_entry(slab, index).key_hash == key_hash)
    }

    fn find(&self, key_hash: u64) -> Option<&Entry> {
        self.index_of(key_hash).map(|index| live_entry(&self.slab, index))
    }

    fn entry_mut(&mut self, index: SlotIndex) -> &mut Entry {
        match &mut self.slab[index as usize] {
            SlabSlot::Live(entry) => entry,
            _ => panic!("slab slot {index} is indexed or queued as live but is not"),
        }
    }

    /// What the shard's slab, table, queues and ghost FIFO have allocated (capacities, not
    /// lengths).
    fn structure_bytes(&self) -> u64 {
        let index_bytes = std::mem::size_of::<SlotIndex>();
        let slots = self.small.capacity() + self.main.capacity() + self.free.capacity() + self.ghost.capacity();
        (self.table.allocation_bytes()
            + self.ghost_members.allocation_size()
            + self.slab.capacity() * std::mem::size_of::<SlabSlot>()
            + slots * index_bytes) as u64
    }

    /// What the shard's structures grow by when a new entry joins: a slab step, a doubled table,
    /// a doubled small FIFO, for whichever of them is full.
    fn new_entry_growth_bytes(&self) -> u64 {
        let slab_growth = if self.free.is_empty() && self.slab.len() == self.slab.capacity() {
            Self::slab_growth_slots(self.slab.len()) * std::mem::size_of::<SlabSlot>()
        } else {
            0
        };
        let queue_growth = if self.small.len() == self.small.capacity() { self.small.capacity().max(1) * std::mem::size_of::<SlotIndex>() } else { 0 };
        (slab_growth + queue_growth + self.table.growth_bytes()) as u64
    }

    fn slab_growth_slots(slots: usize) -> usize {
        (slots / SLAB_GROWTH_DIVISOR).max(SLAB_GROWTH_SLOTS_MIN)
    }

    /// Gives back allocations left sparse (the small FIFO fills first and then shrinks as
    /// entries move on to the main FIFO; tables after a burst of removals).
    fn shrink_sparse_structures(&mut self) {
        for queue in [&mut self.small, &mut self.main] {
            if let Some(kept) = sparse_capacity_kept(queue.len(), queue.capacity()) {
                queue.shrink_to(kept);
            }
        }
        if let Some(kept) = sparse_capacity_kept(self.ghost.len(), self.ghost.capacity()) {
            self.ghost.shrink_to(kept);
        }
        if self.free.len() > SLOTS_NEVER_SHRUNK && self.free.len() * SLAB_GROWTH_DIVISOR > self.slab.len() {
            self.compact_slab();
        }
        if let Some(kept) = sparse_capacity_kept(self.table.len(), self.table.capacity()) {
            self.table.shrink_to(kept);
        }
        if let Some(kept) = sparse_capacity_kept(self.ghost_members.len(), self.ghost_members.capacity()) {
            self.ghost_members.shrink_to(kept, |&fingerprint| table_hash(fingerprint as u64));
        }
    }

    /// Renumbers the live entries into a slab without free or removed slots, in queue order
    /// (small FIFO, then main), and rebuilds the table and queues to match. Entries leave
    /// faster than they come while the ghost FIFO and the tables grow into the budget after a
    /// start, and their free slots would otherwise stay allocated for good.
    fn compact_slab(&mut self) {
        let mut old_slab = std::mem::take(&mut self.slab);
        let live = self.live_entries();
        self.slab.reserve_exact(live + Self::slab_growth_slots(live));
        self.table.clear();
        self.free = Vec::new();
        self.removed_slots = 0;
        for queue in [&mut self.small, &mut self.main] {
            let old_queue = std::mem::take(queue);
            for old_index in old_queue {
                let SlabSlot::Live(entry) = std::mem::replace(&mut old_slab[old_index as usize], SlabSlot::Free) else { continue };
                let index = SlotIndex::try_from(self.slab.len()).expect("a shard's entries fit its 32-bit slot numbers");
                let key_hash = entry.key_hash;
                self.slab.push(SlabSlot::Live(entry));
                self.table.insert(key_hash, index);
                queue.push_back(index);
            }
        }
        assert_eq!(self.slab.len(), live, "every live entry had one queue slot");
        assert!(old_slab.iter().all(|slot| !matches!(slot, SlabSlot::Live(_))), "every live entry moved");
    }

    /// A new entry: a new record in the small FIFO with no reads, a returning key (ghost hit)
    /// in the main FIFO.
    fn push(&mut self, key: CacheKey, record: Box<[u8]>, bytes: u64, in_main: bool, loaded_ahead: bool) {
        let entry = Entry {
            record,
            key_hash: key.key_hash,
            location: key.location,
            block_seq: key.block_seq,
            frequency: AtomicU8::new(0),
            loaded_ahead: AtomicBool::new(loaded_ahead),
            in_main,
        };
        let index = match self.free.pop() {
            Some(index) => {
                assert!(matches!(self.slab[index as usize], SlabSlot::Free), "the free list names free slots");
                self.slab[index as usize] = SlabSlot::Live(entry);
                index
            }
            None => {
                if self.slab.len() == self.slab.capacity() {
                    self.slab.reserve_exact(Self::slab_growth_slots(self.slab.len()));
                }
                let index = SlotIndex::try_from(self.slab.len()).expect("a shard's entries fit its 32-bit slot numbers");
                self.slab.push(SlabSlot::Live(entry));
                index
            }
        };
        self.table.insert(key.key_hash, index);
        if in_main {
            self.main.push_back(index);
            self.main_bytes += bytes;
        } else {
            self.small.push_back(index);
            self.small_bytes += bytes;
        }
    }

    /// An entry's record of `old_bytes` was replaced by one of `new_bytes` in its queue.
    fn resize(&mut self, in_main: bool, old_bytes: u64, new_bytes: u64) {
        let queue_bytes = if in_main { &mut self.main_bytes } else { &mut self.small_bytes };
        *queue_bytes = *queue_bytes - old_bytes + new_bytes;
    }

    /// Takes a live entry out of the table; its slab slot is left for the caller to mark.
    fn unindex(&mut self, key_hash: u64, index: SlotIndex) {
        assert!(self.table.remove(key_hash, index), "live slab slot {index} is missing from the table");
    }

    /// Removes a key's entry (its slab slot stays `Removed` until its queue slot comes up);
    /// returns its bytes and its record, to be freed outside the lock.
    fn remove(&mut self, key_hash: u64) -> Option<(u64, Box<[u8]>)> {
        let index = self.index_of(key_hash)?;
        self.unindex(key_hash, index);
        let SlabSlot::Live(entry) = std::mem::replace(&mut self.slab[index as usize], SlabSlot::Removed) else {
            unreachable!("index_of names live slots");
        };
        let bytes = charge(&entry.record);
        if entry.in_main {
            self.main_bytes -= bytes;
        } else {
            self.small_bytes -= bytes;
        }
        self.removed_slots += 1;
        self.trim_ghost();
        if self.removed_slots > self.live_entries() + REMOVED_SLOTS_SLACK {
            self.free_removed_slots();
        }
        Some((bytes, entry.record))
    }

    fn free_slot(slab: &mut [SlabSlot], free: &mut Vec<SlotIndex>, index: SlotIndex) {
        slab[index as usize] = SlabSlot::Free;
        free.push(index);
    }

    /// Drops the queue slots of removed entries and frees their slab slots.
    fn free_removed_slots(&mut self) {
        let (slab, free) = (&mut self.slab, &mut self.free);
        let mut keep_live = |&index: &SlotIndex| {
            let removed = matches!(slab[index as usize], SlabSlot::Removed);
            if removed {
                Self::free_slot(slab, free, index);
            }
            !removed
        };
        self.small.retain(&mut keep_live);
        self.main.retain(&mut keep_live);
        self.removed_slots = 0;
    }

    /// Pops a queue's head: the live entry it stands for, or nothing when the queue is empty or
    /// the slot was a removed entry's (then freed).
    fn pop_live(&mut self, from_main: bool) -> Option<SlotIndex> {
        let queue = if from_main { &mut self.main } else { &mut self.small };
        let index = queue.pop_front()?;
        if matches!(self.slab[index as usize], SlabSlot::Removed) {
            Self::free_slot(&mut self.slab, &mut self.free, index);
            self.removed_slots -= 1;
            return None;
        }
        Some(index)
    }

    /// Takes one step of S3-FIFO eviction (an entry leaving, or moving on in its queues, or a
    /// removed entry's slot freed; a shard with entries always has a queue to take from);
    /// returns the entries that left the cache and the bytes they freed.
    fn evict_one(&mut self, share_bytes: u64) -> (u64, u64) {
        let small_budget = share_bytes * SMALL_PERCENT / 100;
        let from_main = !(self.small_bytes > small_budget || self.main.is_empty());
        let Some(index) = self.pop_live(from_main) else { return (0, 0) };
        let entry = self.entry_mut(index);
        let bytes = charge(&entry.record);
        let frequency = entry.frequency.get_mut();
        if *frequency > 0 {
            if from_main {
                *frequency -= 1;
            } else {
                // The frequency moves with the entry: it buys the entry its first round in main.
                entry.in_main = true;
                self.small_bytes -= bytes;
                self.main_bytes += bytes;
            }
            self.main.push_back(index);
            return (0, 0);
        }
        let key_hash = entry.key_hash;
        self.unindex(key_hash, index);
        Self::free_slot(&mut self.slab, &mut self.free, index);
        if from_main {
            self.main_bytes -= bytes;
            self.trim_ghost();
        } else {
            self.small_bytes -= bytes;
            self.remember(key_hash);
        }
        (1, bytes)
    }

    /// Whether the ghost FIFO remembers the key (which then leaves the ghost map).
    fn returns_from_ghost(&mut self, key_hash: u64) -> bool {
        let fingerprint = ghost_fingerprint(key_hash);
        match self.ghost_members.find_entry(table_hash(fingerprint as u64), |&other| other == fingerprint) {
            Ok(found) => {
                found.remove();
                true
            }
            Err(_) => false,
        }
    }

    fn remember(&mut self, key_hash: u64) {
        let fingerprint = ghost_fingerprint(key_hash);
        let hash = table_hash(fingerprint as u64);
        self.ghost.push_back(fingerprint);
        if self.ghost_members.find(hash, |&other| other == fingerprint).is_none() {
            self.ghost_members.insert_unique(hash, fingerprint, |&other| table_hash(other as u64));
        }
        self.trim_ghost();
    }

    /// Keeps the ghost FIFO within GHOST_KEYS_PER_ENTRY keys per live entry, as entries leave.
    /// Every key of `ghost_members` is in `ghost` (a key that returned stays there until it
    /// leaves), so popping `ghost` empties the map eventually.
    fn trim_ghost(&mut self) {
        let ghost_keys_max = (self.live_entries() * GHOST_KEYS_PER_ENTRY).max(1);
        while self.ghost.len() > ghost_keys_max {
            let Some(oldest) = self.ghost.pop_front() else { break };
            if let Ok(found) = self.ghost_members.find_entry(table_hash(oldest as u64), |&other| other == oldest) {
                found.remove();
            }
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
            let records = shard.slab.iter().filter_map(|slot| match slot {
                SlabSlot::Live(entry) => Some(charge(&entry.record)),
                _ => None,
            });
            records.sum::<u64>() + shard.structure_bytes()
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
            assert!(shard.ghost.len() <= (shard.live_entries() * GHOST_KEYS_PER_ENTRY).max(1));
            assert!(shard.ghost_members.len() <= shard.ghost.len());
        }
        cache.clear();
        assert_eq!(cache.used_bytes(), 0);
    }

    /// A stream of keys read once (each evicts another): the slab reuses the slots it frees,
    /// and the tables and queues stay dense, so an entry's structures cost at most a slab slot
    /// and its growth step, a table slot at the lowest load a table falls to before it shrinks
    /// (3/16), two queue slots (a queue shrinks once a quarter full) and a ghost key.
    #[test]
    fn churn_keeps_the_structures_dense() {
        let cache = RecordCache::new(8 << 20);
        for location in 0..400_000 {
            cache.insert(key(location), &record(100));
            assert!(cache.used_bytes() <= cache.capacity_bytes());
        }
        assert_eq!(cache.used_bytes(), recomputed_charge(&cache));
        let table_slot_bytes = key_table::KEY_TABLE_SLOT_BYTES as u64 * 16 / 3 + 1;
        let queue_slot_bytes = std::mem::size_of::<SlotIndex>() as u64 * SLOTS_PER_ITEM_MAX as u64;
        let slab_slot_bytes = std::mem::size_of::<SlabSlot>() as u64 * (SLAB_GROWTH_DIVISOR as u64 + 1) / SLAB_GROWTH_DIVISOR as u64;
        let bound_per_entry = slab_slot_bytes + 2 * table_slot_bytes + 2 * queue_slot_bytes;
        for shard in cache.shards.iter() {
            let shard = shard.read();
            let entries = shard.live_entries() as u64;
            assert!(entries > 1000);
            assert!(shard.structure_bytes() <= entries * bound_per_entry + 4096, "{} structure bytes for {entries} entries", shard.structure_bytes());
            // A slab with more than one slot in SLAB_GROWTH_DIVISOR free is compacted.
            assert!(shard.slab.len() as u64 <= entries + entries / (SLAB_GROWTH_DIVISOR as u64 - 1) + SLOTS_NEVER_SHRUNK as u64 + 1, "{} slab slots, {} free, {} removed, {entries} entries, queues {} {}", shard.slab.len(), shard.free.len(), shard.removed_slots, shard.small.len(), shard.main.len());
        }
    }

    /// Larger records pushing out many small ones leave the slab mostly free: it is compacted,
    /// and every entry left is still found where the table says.
    #[test]
    fn a_slab_left_sparse_is_compacted_and_keeps_every_entry() {
        let cache = RecordCache::new(1 << 20);
        assert_eq!(cache.shards.len(), 1);
        for location in 0..8_000 {
            cache.insert(key(location), &record(40));
        }
        let slots_before = cache.shards[0].read().slab.len();
        for location in 8_000..8_400 {
            cache.insert(key(location), &record(2_000));
        }
        let shard = cache.shards[0].read();
        assert!(shard.slab.len() * 2 < slots_before, "{} slots after, {slots_before} before", shard.slab.len());
        for (index, slot) in shard.slab.iter().enumerate() {
            if let SlabSlot::Live(entry) = slot {
                assert_eq!(shard.index_of(entry.key_hash), Some(index as SlotIndex));
            }
        }
        assert_eq!(shard.small.len() + shard.main.len(), shard.live_entries() + shard.removed_slots);
        drop(shard);
        assert_eq!(cache.used_bytes(), recomputed_charge(&cache));
        assert!(cache.get(key(8_399)).is_some());
    }

    /// A record loaded ahead of its command counts one miss, and the command's read one hit that
    /// is not a reuse: it leaves the small FIFO like a record read once.
    #[test]
    fn a_read_of_a_record_loaded_ahead_is_not_a_reuse() {
        let cache = RecordCache::new(1 << 20);
        cache.insert_ahead(key(1), &record(500));
        assert!(cache.get(key(1)).is_some());
        assert_eq!((cache.counters.misses.get(), cache.counters.hits.get()), (1, 1));
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
    fn slab_table_and_queue_slots_are_the_sizes_the_design_counts() {
        assert_eq!(std::mem::size_of::<SlabSlot>(), 48);
        assert_eq!(std::mem::size_of::<SlotIndex>(), 4);
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

    /// A budget as large as the records plus their slab, table and queue slots at the lowest
    /// load the structures fall to as they grow (a slab just grown is 8/9 full, a table 3/8, a
    /// queue half).
    #[test]
    fn a_budget_as_large_as_the_data_keeps_all_of_it() {
        let records = 20_000u64;
        let table_slot_bytes = key_table::KEY_TABLE_SLOT_BYTES as u64;
        let slab_slot_bytes = std::mem::size_of::<SlabSlot>() as u64 * (SLAB_GROWTH_DIVISOR as u64 + 1) / SLAB_GROWTH_DIVISOR as u64;
        let structure_bytes_per_entry = slab_slot_bytes + table_slot_bytes * 8 / 3 + 2 * std::mem::size_of::<SlotIndex>() as u64;
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

    #[test]
    fn prefetching_entries_changes_no_entry_and_counts_no_access() {
        let cache = RecordCache::new(1 << 20);
        for location in 0..100 {
            cache.insert(key(location), &record(100));
        }
        let frequencies = |cache: &RecordCache| -> Vec<u8> {
            (0..100).map(|location| cache.shard(location).read().find(location).unwrap().frequency.load(Ordering::Relaxed)).collect()
        };
        let before = frequencies(&cache);
        cache.prefetch_entries((0..200).chain([u64::MAX]));
        assert_eq!(frequencies(&cache), before);
        assert_eq!((cache.counters.hits.get(), cache.counters.misses.get()), (0, 0));
        assert!((0..100).all(|location| cache.peek(key(location)) == Some(record(100))));
        RecordCache::new(1 << 20).prefetch_entries([1, 2].into_iter());
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
        assert!(cache.counters.hits.get() > 0 && cache.counters.evictions.load(Ordering::Relaxed) > 0);
    }

    #[test]
    fn reused_blocks_never_serve_old_records() {
        let cache = RecordCache::new(1 << 20);
        cache.insert(CacheKey { block_seq: 1, ..key(5) }, &record(10));
        assert!(cache.get(CacheKey { block_seq: 2, ..key(5) }).is_none());
    }
}
