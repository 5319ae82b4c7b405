//! The primary index: a hash table keyed by the 128-bit key digest, split into partitions that
//! grow independently (so growth never pauses more than one small partition), on a byte region of
//! any tier. Entries hold offsets only, so a region mapped at another address stays valid.
//!
//! Region layout:
//!
//! | offset            | size                  | content                                   |
//! |-------------------|-----------------------|-------------------------------------------|
//! | 0                 | HEADER_AREA_BYTES     | two header slots (see `header`)           |
//! | DIRECTORY_OFFSET  | 32 × PARTITION_COUNT  | partition directory                       |
//! | HEAP_OFFSET       | rest                  | partition tables, 24-byte entries         |
//!
//! Directory entry: word 0 = table offset / 64 << 24 | capacity in slots (published with one
//! 8-byte store after the new table is durable); word 1 = CRC-32C of the table's bytes and words
//! 2 and 3, written at checkpoints; word 2 = live entries | entries of parts << 32; word 3 =
//! deleted slots | entries with an expiry << 32, with CHANGING_FLAG (bit 63) set while a change
//! of the table and its counts is under way.
//! Words 2 and 3 always describe the table word 0 names and are kept up to date with every
//! change (ordinary stores, made durable at checkpoints), so no start needs to count entries.
//! Entries carry no checksum of their own: after a clean shutdown each table is checked against
//! its word 1 the first time it is used (or by the background sweep, `check_unchecked_tables`);
//! a mismatch refuses the partition's keys and invalidates the header, so the next start
//! rebuilds the index.
//!
//! Each partition also has, in DRAM, the entries of records not yet durable ("pending"): reads
//! see them first; they reach the table only once their record is durable (see
//! docs/design/commit.md).

mod allocator;
pub(crate) mod entry;
pub(crate) mod header;
mod pending;

use std::collections::hash_map::{self, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use hybridkv_media::{DurabilityPath, Medium};
use parking_lot::Mutex;

use crate::digest::Digest;
use crate::error::{EngineError, Result};
use crate::log::record::u64_at;
use crate::log::Location;
use crate::waiting_lock::WaitingRwLock;
use allocator::{ExtentAllocator, EXTENT_ALIGN_BYTES};
pub(crate) use entry::{entry_expiry, record_expired, Entry, ENTRY_BYTES, PART_EXPIRY_MARK};
pub use entry::EXPIRY_UNIX_MS_MAX;
use entry::LOCATION_OFFSET;
pub(crate) use pending::PendingEntry;
use pending::PendingEntries;
pub(crate) use header::IndexHeader;
use header::{HEADER_AREA_BYTES, HEADER_SLOT_BYTES};

pub(crate) const PARTITION_COUNT: usize = 4096;
// Parts share their owner's partition through the top 16 digest bits (`crate::digest`).
const _: () = assert!(PARTITION_COUNT <= 1 << 16);
const DIRECTORY_OFFSET: u64 = HEADER_AREA_BYTES;
const DIRECTORY_ENTRY_BYTES: u64 = 32;
/// Where a directory entry keeps its table's checksum.
const TABLE_CHECKSUM_OFFSET: u64 = 8;
/// Where a directory entry keeps its table's live entries (low half) and entries of parts (high).
const LIVE_AND_PARTS_OFFSET: u64 = 16;
/// Where a directory entry keeps its table's deleted slots (low half), entries with an expiry
/// (bits 32–62) and CHANGING_FLAG.
const TOMBSTONES_OFFSET: u64 = 24;
/// Where word 3 keeps the count of entries with an expiry, and its mask once shifted down.
const EXPIRING_SHIFT: u32 = 32;
const EXPIRING_MASK: u64 = (1 << 31) - 1;
/// Set in word 3 while the table and its counts are being changed: after a process crash the
/// counts of a partition with the flag may disagree with its table and are recomputed.
const CHANGING_FLAG: u64 = 1 << 63;
pub(crate) const HEAP_OFFSET: u64 = (DIRECTORY_OFFSET + PARTITION_COUNT as u64 * DIRECTORY_ENTRY_BYTES).next_multiple_of(4096);
const TABLE_SLOTS_MIN: u32 = 16;
const TABLE_SLOTS_MAX: u32 = (1 << 24) - 1;
/// A partition grows when live entries, deleted slots and pending entries pass this load.
/// With LOAD_PERCENT_AFTER_GROWTH, 75–90% keeps the index at most 32 bytes per key (24-byte
/// entries, issue 2); what it costs in probe length (about 5.5 slots for a hit at 90%, 50 for a
/// miss) is in docs/design/formats.md ("Index space per key").
const LOAD_PERCENT_MAX: u64 = 90;
/// Load right after growing: the growth factor is LOAD_PERCENT_MAX / LOAD_PERCENT_AFTER_GROWTH.
const LOAD_PERCENT_AFTER_GROWTH: u64 = 75;
const CAPACITY_SHIFT: u32 = 24;
/// Slots a probe reads at once after its first read (192 bytes: three cache lines).
const PROBE_RUN_SLOTS: u32 = 8;
/// Slots of a probe's first read (48 bytes: one cache line, or two for 2 home slots in 8).
const PROBE_FIRST_RUN_SLOTS: u32 = 2;

const _: () = assert!(PARTITION_COUNT.is_power_of_two());
const _: () = assert!(DIRECTORY_OFFSET.is_multiple_of(HEADER_SLOT_BYTES));
const _: () = assert!(LOAD_PERCENT_AFTER_GROWTH < LOAD_PERCENT_MAX);

/// A partition's table may be used: created or rebuilt in this run, attached after a crash (the
/// log tail changed tables after their checksums were written), or checked.
const TABLE_USABLE: u8 = 0;
/// Attached after a clean stop and not yet checked against its checksum.
const TABLE_UNCHECKED: u8 = 1;
/// Failed its check: refused until a restart rebuilds the index.
const TABLE_DAMAGED: u8 = 2;

pub(crate) struct Partition {
    number: usize,
    table_offset: u64,
    capacity: u32,
    /// The table's entries, as directory words 2 and 3 hold them.
    counts: EntryCounts,
    pending: PendingEntries,
}

impl Partition {
    fn empty(number: usize, table_offset: u64, capacity: u32) -> Partition {
        Partition { number, table_offset, capacity, counts: EntryCounts::default(), pending: PendingEntries::default() }
    }
}

enum Probe {
    Found(u32, Entry),
    /// Not present; the slot where an insert goes, if any is free.
    Absent(Option<u32>),
}

pub(crate) struct Index {
    medium: Arc<dyn Medium>,
    partitions: Box<[WaitingRwLock<Partition>]>,
    dirty: Box<[AtomicBool]>,
    /// TABLE_USABLE, TABLE_UNCHECKED or TABLE_DAMAGED, per partition.
    table_states: Box<[AtomicU8]>,
    unchecked_tables: AtomicUsize,
    /// Per partition: the table in use is a grown one the durable directory will name only from
    /// the next checkpoint on; until then the durable counts keep describing the old table.
    switch_pending: Box<[AtomicBool]>,
    /// A table failed its check: the header stays invalid, so the next start rebuilds.
    condemned: AtomicBool,
    /// The machine boot (`MediaProvider::boot_id`) written into every header.
    boot_id: u64,
    allocator: Mutex<ExtentAllocator>,
    header: Mutex<IndexHeader>,
    namespace: String,
    /// Whether grown tables replace old ones only at checkpoints (media that survive power cuts).
    switch_tables_at_checkpoint: bool,
    deferred_free: Mutex<Vec<(u64, u64)>>,
}

impl Index {
    /// An empty index over `medium`: any previous content is invalidated first (durably), so a
    /// crash while it is being filled leads to another rebuild, never to a half-built index.
    pub(crate) fn create(medium: Arc<dyn Medium>, fingerprint: u64, namespace: &str, boot_id: u64) -> Result<Index> {
        medium.write_at(0, &[0u8; HEADER_AREA_BYTES as usize])?;
        medium.persist(0, HEADER_AREA_BYTES)?;
        let region_bytes = medium.len_bytes();
        let mut allocator = ExtentAllocator::with_used(HEAP_OFFSET, region_bytes, &mut [])
            .expect("an empty heap has no overlaps");
        let mut partitions = Vec::with_capacity(PARTITION_COUNT);
        for number in 0..PARTITION_COUNT {
            let bytes = TABLE_SLOTS_MIN as u64 * ENTRY_BYTES;
            let offset = allocator.allocate(bytes).ok_or_else(|| index_full(namespace, region_bytes))?;
            medium.write_at(offset, &vec![0u8; bytes as usize])?;
            let directory = directory_offset(number);
            medium.write_at(directory, &[0u8; DIRECTORY_ENTRY_BYTES as usize])?;
            medium.store_u64(directory, table_word(offset, TABLE_SLOTS_MIN))?;
            partitions.push(WaitingRwLock::new(Partition::empty(number, offset, TABLE_SLOTS_MIN)));
        }
        medium.persist(0, allocator_end(&allocator, region_bytes))?;
        let header = IndexHeader {
            partition_count: PARTITION_COUNT as u32,
            region_bytes,
            fingerprint,
            seq: 0,
            clean: false,
            consistent_position: 0,
            next_lsn: 1,
            boot_id,
            checkpoint_unix_ms: 0,
        };
        Ok(Index::assemble(medium, partitions, allocator, header, namespace, true, boot_id))
    }

    /// Attaches an existing index region. `Ok(Err(reason))` when it is missing, damaged or from
    /// another configuration: the caller rebuilds it.
    pub(crate) fn attach(
        medium: Arc<dyn Medium>,
        fingerprint: u64,
        namespace: &str,
        boot_id: u64,
    ) -> Result<std::result::Result<Index, String>> {
        let mut slots = vec![0u8; HEADER_AREA_BYTES as usize];
        medium.read_at(0, &mut slots)?;
        let (slot_a, slot_b) = slots.split_at(HEADER_SLOT_BYTES as usize);
        let Some(header) = IndexHeader::newest(slot_a, slot_b) else {
            if let Some(version) = IndexHeader::other_version(slot_a).or_else(|| IndexHeader::other_version(slot_b)) {
                return Ok(Err(format!("the index is of format version {version}, this build's is {}", header::INDEX_FORMAT_VERSION)));
            }
            return Ok(Err("no valid index header".into()));
        };
        let region_bytes = medium.len_bytes();
        if header.partition_count as usize != PARTITION_COUNT
            || header.region_bytes != region_bytes
            || header.fingerprint != fingerprint
        {
            return Ok(Err("index header is from another configuration".into()));
        }
        let mut directory = vec![0u8; PARTITION_COUNT * DIRECTORY_ENTRY_BYTES as usize];
        medium.read_at(DIRECTORY_OFFSET, &mut directory)?;
        let mut used = Vec::with_capacity(PARTITION_COUNT);
        let mut partitions = Vec::with_capacity(PARTITION_COUNT);
        for (number, words) in directory.chunks_exact(DIRECTORY_ENTRY_BYTES as usize).enumerate() {
            let table = u64_at(words, 0);
            let (offset, capacity) = ((table >> CAPACITY_SHIFT) * EXTENT_ALIGN_BYTES, (table & TABLE_SLOTS_MAX as u64) as u32);
            if !(TABLE_SLOTS_MIN..=TABLE_SLOTS_MAX).contains(&capacity) || offset < HEAP_OFFSET {
                return Ok(Err("index directory entry out of range".into()));
            }
            used.push((offset, capacity as u64 * ENTRY_BYTES));
            // Counts of a change a crash interrupted are recomputed by recovery
            // (`interrupted_changes`); until then they only need to be in range.
            let counts = DurableCounts::decode(words);
            let mut partition = Partition::empty(number, offset, capacity);
            partition.counts = if counts.fit(capacity) { counts.counts } else { EntryCounts::default() };
            partitions.push(WaitingRwLock::new(partition));
        }
        let Some(allocator) = ExtentAllocator::with_used(HEAP_OFFSET, region_bytes, &mut used) else {
            return Ok(Err("index tables overlap or run past the region".into()));
        };
        let index = Index::assemble(medium, partitions, allocator, header, namespace, false, boot_id);
        if header.clean {
            for state in index.table_states.iter() {
                state.store(TABLE_UNCHECKED, Ordering::Relaxed);
            }
            index.unchecked_tables.store(PARTITION_COUNT, Ordering::Relaxed);
        }
        Ok(Ok(index))
    }

    /// Partitions whose durable counts may disagree with their tables: a change was under way
    /// when the process stopped (CHANGING_FLAG), or the counts are out of range. After a clean
    /// stop there are none unless the directory is damaged.
    pub(crate) fn interrupted_changes(&self) -> Result<Vec<usize>> {
        let mut directory = vec![0u8; PARTITION_COUNT * DIRECTORY_ENTRY_BYTES as usize];
        self.medium.read_at(DIRECTORY_OFFSET, &mut directory)?;
        Ok(directory
            .chunks_exact(DIRECTORY_ENTRY_BYTES as usize)
            .enumerate()
            .filter(|(_, words)| {
                let capacity = (u64_at(words, 0) & TABLE_SLOTS_MAX as u64) as u32;
                let counts = DurableCounts::decode(words);
                counts.changing || !counts.fit(capacity)
            })
            .map(|(number, _)| number)
            .collect())
    }

    /// `dirty`: whether every partition must be made durable at the next checkpoint (a new
    /// index) or none (an attached one, durable as its header says).
    fn assemble(
        medium: Arc<dyn Medium>,
        partitions: Vec<WaitingRwLock<Partition>>,
        allocator: ExtentAllocator,
        header: IndexHeader,
        namespace: &str,
        dirty: bool,
        boot_id: u64,
    ) -> Index {
        Index {
            switch_tables_at_checkpoint: medium.info().tier.survives_power_cut(),
            medium,
            partitions: partitions.into_boxed_slice(),
            dirty: (0..PARTITION_COUNT).map(|_| AtomicBool::new(dirty)).collect(),
            table_states: (0..PARTITION_COUNT).map(|_| AtomicU8::new(TABLE_USABLE)).collect(),
            unchecked_tables: AtomicUsize::new(0),
            switch_pending: (0..PARTITION_COUNT).map(|_| AtomicBool::new(false)).collect(),
            condemned: AtomicBool::new(false),
            boot_id,
            allocator: Mutex::new(allocator),
            header: Mutex::new(header),
            namespace: namespace.to_string(),
            deferred_free: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn header(&self) -> IndexHeader {
        *self.header.lock()
    }

    pub(crate) fn medium(&self) -> &Arc<dyn Medium> {
        &self.medium
    }

    pub(crate) fn partition_of(&self, digest: Digest) -> usize {
        digest.partition(PARTITION_COUNT)
    }

    pub(crate) fn partition(&self, number: usize) -> &WaitingRwLock<Partition> {
        &self.partitions[number]
    }

    pub(crate) fn used_bytes(&self) -> u64 {
        HEAP_OFFSET + self.allocator.lock().used_bytes()
    }

    pub(crate) fn capacity_bytes(&self) -> u64 {
        self.medium.len_bytes()
    }

    #[cfg(test)]
    fn table_entry_count(&self) -> u64 {
        self.partitions.iter().map(|partition| partition.read().counts.live as u64).sum()
    }

    /// Live entries in the tables that are keys, not parts (from the partitions' counts).
    pub(crate) fn table_key_count(&self) -> u64 {
        self.sum_of_counts(|counts| counts.live.saturating_sub(counts.parts))
    }

    /// Live entries in the tables of keys with an expiry (from the partitions' counts).
    pub(crate) fn table_expiring_count(&self) -> u64 {
        self.sum_of_counts(|counts| counts.expiring)
    }

    fn sum_of_counts(&self, count: impl Fn(&EntryCounts) -> u32) -> u64 {
        self.partitions.iter().map(|partition| u64::from(count(&partition.read().counts))).sum()
    }

    fn slot_offset(partition: &Partition, slot: u32) -> u64 {
        partition.table_offset + slot as u64 * ENTRY_BYTES
    }

    fn read_slot(&self, partition: &Partition, slot: u32) -> Result<Entry> {
        let mut bytes = [0u8; ENTRY_BYTES as usize];
        self.medium.read_at(Self::slot_offset(partition, slot), &mut bytes)?;
        Ok(Entry::decode(&bytes, partition.number))
    }

    /// Linear probing from the digest's home slot. The first medium read takes
    /// `PROBE_FIRST_RUN_SLOTS` (most lookups of a present key end there, so they fetch one cache
    /// line, not three); later reads take `PROBE_RUN_SLOTS`: a miss at 90% load visits about 50
    /// slots, and one read per slot cost more in calls than in memory traffic.
    fn probe(&self, partition: &Partition, digest: Digest) -> Result<Probe> {
        self.ensure_usable(partition)?;
        let mut slot = digest.home_slot(partition.capacity);
        let mut first_deleted = None;
        let mut run = [0u8; PROBE_RUN_SLOTS as usize * ENTRY_BYTES as usize];
        let mut visited = 0;
        while visited < partition.capacity {
            let run_limit = if visited == 0 { PROBE_FIRST_RUN_SLOTS } else { PROBE_RUN_SLOTS };
            let run_slots = run_limit.min(partition.capacity - slot).min(partition.capacity - visited);
            let run_bytes = &mut run[..(run_slots as u64 * ENTRY_BYTES) as usize];
            self.medium.read_at(Self::slot_offset(partition, slot), run_bytes)?;
            for bytes in run_bytes.chunks_exact(ENTRY_BYTES as usize) {
                let entry = Entry::decode(bytes.try_into().expect("entry-sized chunk"), partition.number);
                if entry.location == Location::EMPTY {
                    return Ok(Probe::Absent(Some(first_deleted.unwrap_or(slot))));
                }
                if entry.location == Location::DELETED {
                    first_deleted.get_or_insert(slot);
                } else if entry.digest == digest {
                    return Ok(Probe::Found(slot, entry));
                }
                slot = if slot + 1 == partition.capacity { 0 } else { slot + 1 };
            }
            visited += run_slots;
        }
        Ok(Probe::Absent(first_deleted))
    }

    /// Starts loading the slot where the probe for `digest` begins (see `Medium::prefetch`).
    pub(crate) fn prefetch_home_slot(&self, partition: &Partition, digest: Digest) {
        self.medium.prefetch(Self::slot_offset(partition, digest.home_slot(partition.capacity)), ENTRY_BYTES);
    }

    /// Starts loading the slot where the probe for `digest` begins, unless its partition is
    /// locked for writing: a hint, never waited for.
    pub(crate) fn prefetch_entry(&self, digest: Digest) {
        if let Some(partition) = self.partitions[self.partition_of(digest)].try_read() {
            self.prefetch_home_slot(&partition, digest);
        }
    }

    /// Whether the partition holds no part, in its table or pending: then a part lookup there
    /// would miss, and a write that replaces a key need not probe for the key's parts.
    pub(crate) fn holds_no_parts(partition: &Partition) -> bool {
        partition.counts.parts == 0 && !partition.pending.holds_parts()
    }

    /// The newest entry for `digest`: a pending one first, then the table. None when absent or
    /// deleted (expiry is the caller's business).
    pub(crate) fn lookup(&self, partition: &Partition, digest: Digest) -> Result<Option<Entry>> {
        if let Some(pending) = partition.pending.newest(digest) {
            return Ok(pending.entry.location.is_record().then_some(pending.entry));
        }
        self.table_lookup(partition, digest)
    }

    pub(crate) fn table_lookup(&self, partition: &Partition, digest: Digest) -> Result<Option<Entry>> {
        Ok(match self.probe(partition, digest)? {
            Probe::Found(_, entry) => Some(entry),
            Probe::Absent(_) => None,
        })
    }

    /// Makes sure the table can take every pending entry plus one more, growing it if needed:
    /// called before a write is appended, so that publishing it later cannot fail for space.
    pub(crate) fn reserve_one(&self, partition: &mut Partition, number: usize) -> Result<()> {
        self.ensure_usable(partition)?;
        // Publishing takes at most one new slot per digest, whatever its number of pending entries.
        let needed = partition.counts.live as u64 + partition.counts.tombstones as u64 + partition.pending.distinct_len() as u64 + 1;
        if needed * 100 > partition.capacity as u64 * LOAD_PERCENT_MAX {
            self.grow(partition, number)?;
        }
        Ok(())
    }

    /// Moves the partition to a larger table (dropping deleted slots). On a medium that survives
    /// power cuts, the durable directory keeps naming the old table, which is not reused, until
    /// a checkpoint has made the new one durable: growth costs no flush, and a power cut leaves
    /// either table intact. Elsewhere the switch is immediate.
    fn grow(&self, partition: &mut Partition, number: usize) -> Result<()> {
        self.begin_change(partition)?;
        let old_extent = (partition.table_offset, partition.capacity as u64 * ENTRY_BYTES);
        let mut old = vec![0u8; old_extent.1 as usize];
        self.medium.read_at(old_extent.0, &mut old)?;
        // Entries counted in the table itself: the partition's counts may be stale while recovery
        // replays the log tail after a crash, and a new table too small for the entries copied
        // into it would never find a free slot.
        let keep = count_entries(&old).live as u64 + partition.pending.distinct_len() as u64 + 1;
        let capacity = (keep * 100).div_ceil(LOAD_PERCENT_AFTER_GROWTH).max(TABLE_SLOTS_MIN as u64);
        if capacity > TABLE_SLOTS_MAX as u64 {
            return Err(index_full(&self.namespace, self.medium.len_bytes()));
        }
        let capacity = capacity as u32;
        let bytes = capacity as u64 * ENTRY_BYTES;
        let offset = self.allocator.lock().allocate(bytes).ok_or_else(|| index_full(&self.namespace, self.medium.len_bytes()))?;
        let mut table = vec![0u8; bytes as usize];
        for entry_bytes in old.chunks_exact(ENTRY_BYTES as usize) {
            let entry = Entry::decode(entry_bytes.try_into().expect("entry-sized chunk"), number);
            if !entry.location.is_record() {
                continue;
            }
            let mut target = entry.digest.home_slot(capacity);
            while table[(target as u64 * ENTRY_BYTES + LOCATION_OFFSET) as usize..][..8] != [0u8; 8] {
                target = if target + 1 == capacity { 0 } else { target + 1 };
            }
            let at = (target as u64 * ENTRY_BYTES) as usize;
            table[at..at + LOCATION_OFFSET as usize].copy_from_slice(&entry.prefix());
            table[at + LOCATION_OFFSET as usize..at + ENTRY_BYTES as usize].copy_from_slice(&entry.location.0.to_le_bytes());
        }
        self.medium.write_at(offset, &table)?;
        if self.switch_tables_at_checkpoint {
            // The durable counts go on describing the old table, as the durable directory does.
            self.end_change(partition)?;
            self.switch_pending[number].store(true, Ordering::Relaxed);
            self.deferred_free.lock().push(old_extent);
        } else {
            self.medium.store_u64(directory_offset(number), table_word(offset, capacity))?;
            self.allocator.lock().release(old_extent.0, old_extent.1);
        }
        partition.table_offset = offset;
        partition.capacity = capacity;
        set_counts(partition, &table);
        self.dirty[number].store(true, Ordering::Relaxed);
        self.end_change(partition)
    }

    /// Bytes of old tables waiting for a checkpoint before they can be reused.
    pub(crate) fn deferred_free_bytes(&self) -> u64 {
        self.deferred_free.lock().iter().map(|&(_, len)| len).sum()
    }

    /// Writes `entry` into the table (insert or replace); returns the entry it replaced.
    pub(crate) fn table_put(&self, partition: &mut Partition, number: usize, entry: Entry) -> Result<Option<Entry>> {
        assert!(entry.location.is_record());
        assert_eq!(partition.number, number);
        let probe = self.probe(partition, entry.digest)?;
        self.dirty[number].store(true, Ordering::Relaxed);
        match probe {
            Probe::Found(slot, old) => {
                let at = Self::slot_offset(partition, slot);
                // A key's entry gaining or losing its expiry changes a count (so would a part's
                // digest turning up as a key's, which only a damaged entry could do).
                let counts_change = (old.part, old.expires) != (entry.part, entry.expires);
                if counts_change {
                    self.begin_change(partition)?;
                }
                self.medium.store_u64(at + entry::TAGGED_HIGH_OFFSET, entry.tagged_high())?;
                self.medium.store_u64(at + LOCATION_OFFSET, entry.location.0)?;
                if counts_change {
                    partition.counts.take_out(&old);
                    partition.counts.count_in((entry.part, entry.expires));
                    self.end_change(partition)?;
                }
                Ok(Some(old))
            }
            Probe::Absent(free) => {
                let slot = match free {
                    Some(slot) => slot,
                    None => {
                        self.grow(partition, number)?;
                        return self.table_put(partition, number, entry);
                    }
                };
                let at = Self::slot_offset(partition, slot);
                self.begin_change(partition)?;
                // Counts may be stale after a crash until recovery recounts: never underflow.
                if self.read_slot(partition, slot)?.location == Location::DELETED {
                    partition.counts.tombstones = partition.counts.tombstones.saturating_sub(1);
                }
                self.medium.write_at(at, &entry.prefix())?;
                self.medium.store_u64(at + LOCATION_OFFSET, entry.location.0)?;
                partition.counts.count_in((entry.part, entry.expires));
                if (partition.counts.live as u64 + partition.counts.tombstones as u64) * 100 > partition.capacity as u64 * LOAD_PERCENT_MAX {
                    self.grow(partition, number)?;
                }
                self.end_change(partition)?;
                Ok(None)
            }
        }
    }

    /// Marks `digest` deleted in the table; returns the entry it removed.
    pub(crate) fn table_remove(&self, partition: &mut Partition, number: usize, digest: Digest) -> Result<Option<Entry>> {
        assert_eq!(partition.number, number);
        let Probe::Found(slot, old) = self.probe(partition, digest)? else { return Ok(None) };
        self.dirty[number].store(true, Ordering::Relaxed);
        self.begin_change(partition)?;
        self.medium.store_u64(Self::slot_offset(partition, slot) + LOCATION_OFFSET, Location::DELETED.0)?;
        partition.counts.take_out(&old);
        partition.counts.tombstones += 1;
        self.end_change(partition)?;
        Ok(Some(old))
    }

    pub(crate) fn push_pending(partition: &mut Partition, pending: PendingEntry) {
        partition.pending.push(pending);
    }

    /// Removes the pending entry of the record with `lsn` (published or withdrawn).
    pub(crate) fn drop_pending(partition: &mut Partition, digest: Digest, lsn: u64) {
        partition.pending.remove(digest, lsn);
    }

    /// Every live entry of the partition as reads see it (pending entries override the table).
    pub(crate) fn entries(&self, partition: &Partition) -> Result<Vec<Entry>> {
        self.ensure_usable(partition)?;
        let mut entries = Vec::with_capacity(partition.counts.live as usize);
        for slot in 0..partition.capacity {
            let entry = self.read_slot(partition, slot)?;
            if entry.location.is_record() && partition.pending.newest(entry.digest).is_none() {
                entries.push(entry);
            }
        }
        entries.extend(partition.pending.newest_entries().filter(|entry| entry.location.is_record()));
        Ok(entries)
    }

    pub(crate) fn mark_dirty(&self, number: usize) {
        self.dirty[number].store(true, Ordering::Relaxed);
    }

    /// Marks deleted every entry `repaired` gives None for (entries torn by a crash), rewrites
    /// the tags of those it gives back changed, keeps only the newest (by `newness`) of sound
    /// entries sharing a digest, then recomputes the partition's counts from its table (a crash
    /// leaves them stale).
    pub(crate) fn repair<Order: Ord>(
        &self,
        partition: &mut Partition,
        mut repaired: impl FnMut(&Entry) -> Option<Entry>,
        newness: impl Fn(&Entry) -> Order,
    ) -> Result<()> {
        self.ensure_usable(partition)?;
        self.begin_change(partition)?;
        // The sound entry kept for each digest so far: its slot and newness.
        let mut kept: HashMap<Digest, (u32, Order)> = HashMap::new();
        for slot in 0..partition.capacity {
            let entry = self.read_slot(partition, slot)?;
            if !entry.location.is_record() {
                continue;
            }
            let at = Self::slot_offset(partition, slot);
            match repaired(&entry) {
                None => {
                    self.medium.store_u64(at + LOCATION_OFFSET, Location::DELETED.0)?;
                    continue;
                }
                Some(sound) if sound != entry => {
                    assert!(sound.digest == entry.digest && sound.location == entry.location, "only the tags are repaired");
                    self.medium.store_u64(at + entry::TAGGED_HIGH_OFFSET, sound.tagged_high())?;
                }
                Some(_) => {}
            }
            // Two sound entries of one key: a power cut kept the insert of the key's entry into
            // another slot but lost the deletion of its earlier one. The newer record wins.
            let newness = newness(&entry);
            let stale_slot = match kept.entry(entry.digest) {
                hash_map::Entry::Vacant(vacant) => {
                    vacant.insert((slot, newness));
                    continue;
                }
                hash_map::Entry::Occupied(mut occupied) if newness > occupied.get().1 => occupied.insert((slot, newness)).0,
                hash_map::Entry::Occupied(_) => slot,
            };
            self.medium.store_u64(Self::slot_offset(partition, stale_slot) + LOCATION_OFFSET, Location::DELETED.0)?;
        }
        self.recount(partition)
    }

    /// Recomputes a partition's counts from its table, and stores them.
    fn recount(&self, partition: &mut Partition) -> Result<()> {
        set_counts(partition, &self.read_table(partition)?);
        self.end_change(partition)
    }

    /// Marks the durable counts of the partition as not matching its table until `end_change`
    /// (only while they describe the table in use: see `switch_pending`).
    fn begin_change(&self, partition: &Partition) -> Result<()> {
        if !self.switch_pending[partition.number].load(Ordering::Relaxed) {
            let directory = directory_offset(partition.number);
            self.medium.store_u64(directory + TOMBSTONES_OFFSET, DurableCounts::changing(partition.counts).tombstones_word())?;
        }
        Ok(())
    }

    /// Stores the partition's counts, which match its table again (see `begin_change`).
    fn end_change(&self, partition: &Partition) -> Result<()> {
        if !self.switch_pending[partition.number].load(Ordering::Relaxed) {
            self.store_counts(partition.number, DurableCounts::of(partition))?;
        }
        Ok(())
    }

    fn store_counts(&self, number: usize, counts: DurableCounts) -> Result<()> {
        let directory = directory_offset(number);
        self.medium.store_u64(directory + LIVE_AND_PARTS_OFFSET, counts.live_and_parts_word())?;
        self.medium.store_u64(directory + TOMBSTONES_OFFSET, counts.tombstones_word())?;
        Ok(())
    }

    /// Fails with `IndexDamaged` unless the partition's table may be used; checks it first when
    /// it was attached after a clean stop and has not been checked yet.
    fn ensure_usable(&self, partition: &Partition) -> Result<()> {
        let state = &self.table_states[partition.number];
        if state.load(Ordering::Acquire) == TABLE_UNCHECKED {
            self.check_table(partition)?;
        }
        match state.load(Ordering::Acquire) {
            TABLE_USABLE => Ok(()),
            _ => Err(EngineError::IndexDamaged { namespace: self.namespace.clone(), partition: partition.number }),
        }
    }

    /// Checks an unchecked table against the checksum its directory entry holds. Concurrent
    /// checks of one table (under its read lock) are harmless: the first to finish records the
    /// outcome. A mismatch condemns the index: the next start rebuilds it.
    fn check_table(&self, partition: &Partition) -> Result<()> {
        let mut words = [0u8; DIRECTORY_ENTRY_BYTES as usize];
        self.medium.read_at(directory_offset(partition.number), &mut words)?;
        let table = self.read_table(partition)?;
        let sound = u64::from(table_checksum(&table, &words)) == u64_at(&words, TABLE_CHECKSUM_OFFSET as usize)
            && DurableCounts::decode(&words) == DurableCounts::of(partition)
            && DurableCounts::of(partition).fit(partition.capacity);
        let outcome = if sound { TABLE_USABLE } else { TABLE_DAMAGED };
        let state = &self.table_states[partition.number];
        if state.compare_exchange(TABLE_UNCHECKED, outcome, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.unchecked_tables.fetch_sub(1, Ordering::Relaxed);
            if !sound {
                tracing::error!(
                    namespace = %self.namespace,
                    partition = partition.number,
                    "index partition does not match its checksum: its keys are refused, and the next start rebuilds the index"
                );
                self.condemn()?;
            }
        }
        Ok(())
    }

    /// Checks every table not checked yet (the background sweep after a warm start: each takes
    /// its partition's read lock alone). Returns how many tables failed.
    pub(crate) fn check_unchecked_tables(&self) -> Result<usize> {
        if self.unchecked_tables.load(Ordering::Relaxed) == 0 {
            return Ok(0);
        }
        let mut damaged = 0;
        for partition in self.partitions.iter() {
            let partition = partition.read();
            if self.table_states[partition.number].load(Ordering::Acquire) == TABLE_UNCHECKED {
                self.check_table(&partition)?;
            }
            damaged += usize::from(self.table_states[partition.number].load(Ordering::Acquire) == TABLE_DAMAGED);
        }
        Ok(damaged)
    }

    /// Whether a table failed its check in this run (see `condemn`).
    pub(crate) fn is_condemned(&self) -> bool {
        self.condemned.load(Ordering::Relaxed)
    }

    /// Invalidates both header slots, durably, and keeps them invalid: whatever else this run
    /// does, the next start finds no index header and rebuilds the index from the log.
    fn condemn(&self) -> Result<()> {
        let _header = self.header.lock();
        self.condemned.store(true, Ordering::Relaxed);
        self.medium.write_at(0, &[0u8; HEADER_AREA_BYTES as usize])?;
        self.medium.persist(0, HEADER_AREA_BYTES)?;
        Ok(())
    }

    fn read_table(&self, partition: &Partition) -> Result<Vec<u8>> {
        self.read_table_at(partition.table_offset, partition.capacity)
    }

    fn read_table_at(&self, offset: u64, capacity: u32) -> Result<Vec<u8>> {
        let mut table = vec![0u8; (capacity as u64 * ENTRY_BYTES) as usize];
        self.medium.read_at(offset, &mut table)?;
        Ok(table)
    }

    /// Makes the index durable as of `consistent_position` (every record before it is reflected)
    /// and records it in the header, with `clean` for a clean shutdown.
    pub(crate) fn checkpoint(&self, consistent_position: u64, next_lsn: u64, clean: bool) -> Result<()> {
        let whole_region = self.medium.info().durability == DurabilityPath::MsyncFallback;
        // Only tables replaced before this point have their successors made durable below.
        let releasable = std::mem::take(&mut *self.deferred_free.lock());
        // msync writes back only dirty pages, in no promised order: one call for every table beats
        // thousands of small ones, and it returns before any directory word changes, so the
        // directory never names a table whose bytes are not yet durable.
        let durable_tables = whole_region.then(|| self.current_tables());
        if whole_region {
            self.medium.persist(HEAP_OFFSET, self.medium.len_bytes() - HEAP_OFFSET)?;
        }
        for number in 0..PARTITION_COUNT {
            if !self.dirty[number].swap(false, Ordering::Relaxed) {
                continue;
            }
            let partition = self.partitions[number].read();
            let named = match &durable_tables {
                // Replaced after the heap was made durable: the directory names the table that was
                // (it holds every entry before the consistent position, and `releasable` cannot
                // hold it) until the next checkpoint names its successor.
                Some(tables) if tables[number].0 != partition.table_offset => {
                    self.dirty[number].store(true, Ordering::Relaxed);
                    tables[number]
                }
                _ => (partition.table_offset, partition.capacity),
            };
            self.name_table_in_directory(&partition, named, whole_region)?;
        }
        if whole_region {
            self.medium.persist(DIRECTORY_OFFSET, HEAP_OFFSET - DIRECTORY_OFFSET)?;
        }
        self.write_header(|header| {
            header.consistent_position = consistent_position;
            header.next_lsn = next_lsn;
            header.clean = clean;
            header.checkpoint_unix_ms = crate::now_unix_ms();
        })?;
        let mut allocator = self.allocator.lock();
        for (offset, len) in releasable {
            allocator.release(offset, len);
        }
        Ok(())
    }

    /// Writes a partition's directory entry naming `table` (offset, capacity): the partition's
    /// table, or the one it replaced since the heap was last made durable. Made durable here
    /// unless `whole_region` (the caller then syncs the whole directory).
    fn name_table_in_directory(&self, partition: &Partition, table: (u64, u32), whole_region: bool) -> Result<()> {
        let (offset, capacity) = table;
        let is_current = offset == partition.table_offset;
        let bytes = self.read_table_at(offset, capacity)?;
        let counts = if is_current { DurableCounts::of(partition) } else { DurableCounts::from(count_entries(&bytes)) };
        if !whole_region {
            // The table is durable before the directory names it.
            self.medium.persist(offset, bytes.len() as u64)?;
        }
        let directory = directory_offset(partition.number);
        // Word 0 and the counts change together: a grown table replaces the old one here.
        self.medium.store_u64(directory + TOMBSTONES_OFFSET, DurableCounts::changing(counts.counts).tombstones_word())?;
        if is_current {
            self.switch_pending[partition.number].store(false, Ordering::Relaxed);
        }
        self.medium.store_u64(directory, table_word(offset, capacity))?;
        self.store_counts(partition.number, counts)?;
        let mut words = [0u8; DIRECTORY_ENTRY_BYTES as usize];
        words[LIVE_AND_PARTS_OFFSET as usize..][..8].copy_from_slice(&counts.live_and_parts_word().to_le_bytes());
        words[TOMBSTONES_OFFSET as usize..][..8].copy_from_slice(&counts.tombstones_word().to_le_bytes());
        self.medium.store_u64(directory + TABLE_CHECKSUM_OFFSET, u64::from(table_checksum(&bytes, &words)))?;
        if !whole_region {
            self.medium.persist(directory, DIRECTORY_ENTRY_BYTES)?;
        }
        Ok(())
    }

    /// Every partition's table: (offset, capacity).
    fn current_tables(&self) -> Vec<(u64, u32)> {
        self.partitions
            .iter()
            .map(|partition| {
                let partition = partition.read();
                (partition.table_offset, partition.capacity)
            })
            .collect()
    }

    fn write_header(&self, change: impl FnOnce(&mut IndexHeader)) -> Result<()> {
        let mut header = self.header.lock();
        if self.condemned.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut next = *header;
        change(&mut next);
        next.seq += 1;
        next.boot_id = self.boot_id;
        let slot_offset = (next.seq % 2) * HEADER_SLOT_BYTES;
        self.medium.write_at(slot_offset, &next.encode())?;
        self.medium.persist(slot_offset, HEADER_SLOT_BYTES)?;
        *header = next;
        Ok(())
    }
}

/// Calls `visit` on each item in order, having started `prefetch` of the item `distance` ahead:
/// index slots are random, and each one is a memory miss that would otherwise be waited for alone.
pub(crate) fn for_each_prefetching<I: Iterator + Clone>(
    items: I,
    distance: usize,
    prefetch: impl Fn(&I::Item),
    mut visit: impl FnMut(I::Item) -> Result<()>,
) -> Result<()> {
    let mut ahead = items.clone();
    for item in ahead.by_ref().take(distance) {
        prefetch(&item);
    }
    for item in items {
        if let Some(later) = ahead.next() {
            prefetch(&later);
        }
        visit(item)?;
    }
    Ok(())
}

fn directory_offset(number: usize) -> u64 {
    DIRECTORY_OFFSET + number as u64 * DIRECTORY_ENTRY_BYTES
}

fn table_word(offset: u64, capacity: u32) -> u64 {
    assert!(offset.is_multiple_of(EXTENT_ALIGN_BYTES) && capacity <= TABLE_SLOTS_MAX);
    (offset / EXTENT_ALIGN_BYTES) << CAPACITY_SHIFT | capacity as u64
}

/// The entries of one table: live ones (parts included), parts alone, keys' entries with an
/// expiry, and deleted slots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct EntryCounts {
    live: u32,
    parts: u32,
    /// Live entries tagged as having an expiry (never parts; counted in `live` too).
    expiring: u32,
    tombstones: u32,
}

impl EntryCounts {
    /// Counts a live entry written into a slot, with its tags (part, has an expiry).
    fn count_in(&mut self, (part, expires): (bool, bool)) {
        self.live += 1;
        self.parts += u32::from(part);
        self.expiring += u32::from(expires);
    }

    /// Stops counting a live entry. Counts may be stale after a crash until recovery recounts:
    /// never underflow.
    fn take_out(&mut self, entry: &Entry) {
        self.live = self.live.saturating_sub(1);
        self.parts = self.parts.saturating_sub(u32::from(entry.part));
        self.expiring = self.expiring.saturating_sub(u32::from(entry.expires));
    }
}

/// A partition's counts, from its table's bytes.
fn set_counts(partition: &mut Partition, table: &[u8]) {
    partition.counts = count_entries(table);
}

/// Words 2 and 3 of a directory entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DurableCounts {
    counts: EntryCounts,
    changing: bool,
}

impl From<EntryCounts> for DurableCounts {
    fn from(counts: EntryCounts) -> DurableCounts {
        DurableCounts { counts, changing: false }
    }
}

impl DurableCounts {
    fn of(partition: &Partition) -> DurableCounts {
        DurableCounts::from(partition.counts)
    }

    /// The counts flagged as being changed (`begin_change`).
    fn changing(counts: EntryCounts) -> DurableCounts {
        DurableCounts { counts, changing: true }
    }

    /// The counts words 2 and 3 of `words` hold (damaged ones do not `fit` their table).
    fn decode(words: &[u8]) -> DurableCounts {
        let live_and_parts = u64_at(words, LIVE_AND_PARTS_OFFSET as usize);
        let word = u64_at(words, TOMBSTONES_OFFSET as usize);
        let counts = EntryCounts {
            live: live_and_parts as u32,
            parts: (live_and_parts >> 32) as u32,
            expiring: ((word >> EXPIRING_SHIFT) & EXPIRING_MASK) as u32,
            tombstones: word as u32,
        };
        DurableCounts { counts, changing: word & CHANGING_FLAG != 0 }
    }

    fn live_and_parts_word(&self) -> u64 {
        u64::from(self.counts.live) | u64::from(self.counts.parts) << 32
    }

    fn tombstones_word(&self) -> u64 {
        assert!(u64::from(self.counts.expiring) <= EXPIRING_MASK);
        let flag = if self.changing { CHANGING_FLAG } else { 0 };
        u64::from(self.counts.tombstones) | u64::from(self.counts.expiring) << EXPIRING_SHIFT | flag
    }

    /// Whether the counts are possible in a table of `capacity` slots.
    fn fit(&self, capacity: u32) -> bool {
        let EntryCounts { live, parts, expiring, tombstones } = self.counts;
        parts <= live && u64::from(parts) + u64::from(expiring) <= u64::from(live) && u64::from(live) + u64::from(tombstones) <= u64::from(capacity)
    }
}

/// What a directory entry's word 1 holds: the CRC-32C of the table's bytes, then of words 2 and
/// 3 of `directory_entry` (its counts, as they are when the table is not being changed).
fn table_checksum(table: &[u8], directory_entry: &[u8]) -> u32 {
    crate::checksum::crc32c_of_two(table, &directory_entry[LIVE_AND_PARTS_OFFSET as usize..DIRECTORY_ENTRY_BYTES as usize])
}

fn count_entries(table: &[u8]) -> EntryCounts {
    let mut counts = EntryCounts::default();
    for bytes in table.chunks_exact(ENTRY_BYTES as usize) {
        match Location(u64_at(bytes, LOCATION_OFFSET as usize)) {
            Location::EMPTY => {}
            Location::DELETED => counts.tombstones += 1,
            _ => counts.count_in(Entry::slot_tags(bytes)),
        }
    }
    counts
}

fn allocator_end(allocator: &ExtentAllocator, region_bytes: u64) -> u64 {
    (HEAP_OFFSET + allocator.used_bytes()).min(region_bytes)
}

fn index_full(namespace: &str, capacity_bytes: u64) -> EngineError {
    EngineError::IndexFull { namespace: namespace.to_string(), capacity_bytes }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hybridkv_media::sim::SimStore;
    use hybridkv_media::{MediaProvider, Tier};

    /// Every other key's entry has an expiry, every fifth is a part's (tags round-trip).
    fn entry(key: u32) -> Entry {
        let (part, expiry_unix_ms) = if key.is_multiple_of(5) { (true, PART_EXPIRY_MARK) } else { (false, u64::from(key % 2) * 1000) };
        Entry::new(Digest::of(0, &key.to_le_bytes()), Location::new(1, 64 + key as u64 * 8, 64), part, expiry_unix_ms)
    }

    #[test]
    fn tables_grow_and_keep_every_entry_across_attach() {
        let store = SimStore::new(1);
        let medium = store.open("index", Tier::Pmem, 16 << 20).unwrap().medium;
        let index = Index::create(medium.clone(), 7, "test", 0).unwrap();
        for key in 0..20_000 {
            let number = index.partition_of(entry(key).digest);
            let mut partition = index.partition(number).write();
            index.table_put(&mut partition, number, entry(key)).unwrap();
        }
        for key in (0..20_000).step_by(3) {
            let number = index.partition_of(entry(key).digest);
            let mut partition = index.partition(number).write();
            assert!(index.table_remove(&mut partition, number, entry(key).digest).unwrap().is_some());
        }
        index.checkpoint(5, 6, true).unwrap();
        drop(index);
        let index = Index::attach(medium, 7, "test", 0).unwrap().unwrap();
        assert!(index.header().clean);
        assert_eq!(index.table_entry_count(), 20_000 - 6667, "counts from the directory, no table read");
        let expiring = (0..20_000u32).filter(|&key| key % 3 != 0 && entry(key).expires).count();
        assert_eq!(index.table_expiring_count(), expiring as u64);
        assert!(index.interrupted_changes().unwrap().is_empty());
        assert_eq!(index.check_unchecked_tables().unwrap(), 0);
        for key in 0..20_000 {
            let number = index.partition_of(entry(key).digest);
            let found = index.lookup(&index.partition(number).read(), entry(key).digest).unwrap();
            assert_eq!(found, (key % 3 != 0).then(|| entry(key)), "key {key}");
        }
        assert_eq!(index.table_entry_count(), 20_000 - 6667);
    }

    #[test]
    fn a_key_gaining_and_losing_its_expiry_is_counted_durably() {
        let store = SimStore::new(8);
        let medium = store.open("index", Tier::Pmem, 8 << 20).unwrap().medium;
        let index = Index::create(medium.clone(), 7, "t", 0).unwrap();
        let digest = Digest::of(0, b"key");
        let number = index.partition_of(digest);
        let put = |expiry_unix_ms: u64, offset: u64| {
            let entry = Entry::new(digest, Location::new(1, offset, 64), false, expiry_unix_ms);
            index.table_put(&mut index.partition(number).write(), number, entry).unwrap();
        };
        let expiring = |index: &Index| index.partition(number).read().counts.expiring;
        put(0, 64);
        assert_eq!(expiring(&index), 0);
        put(1_000, 128);
        assert_eq!(expiring(&index), 1, "a replacement that adds an expiry");
        put(2_000, 192);
        assert_eq!(expiring(&index), 1);
        put(0, 256);
        assert_eq!(expiring(&index), 0, "a replacement that drops it");
        put(3_000, 320);
        index.checkpoint(5, 6, true).unwrap();
        drop(index);
        let index = Index::attach(medium, 7, "t", 0).unwrap().unwrap();
        assert_eq!(expiring(&index), 1, "from the directory");
        assert_eq!(index.check_unchecked_tables().unwrap(), 0, "the checksum covers the count");
        index.table_remove(&mut index.partition(number).write(), number, digest).unwrap();
        assert_eq!(expiring(&index), 0);
    }

    #[test]
    fn growth_sizes_the_new_table_by_the_entries_of_the_old_one_not_by_stale_counts() {
        let store = SimStore::new(7);
        let index = Index::create(store.open("index", Tier::Pmem, 8 << 20).unwrap().medium, 7, "t", 0).unwrap();
        let number = index.partition_of(entry(0).digest);
        let keys: Vec<u32> = (0..).filter(|&key| index.partition_of(entry(key).digest) == number).take(30).collect();
        let mut partition = index.partition(number).write();
        for &key in &keys {
            index.table_put(&mut partition, number, entry(key)).unwrap();
        }
        // During a replay after a crash, counts flagged as changing are stale until the repair.
        partition.counts.live = 0;
        index.grow(&mut partition, number).unwrap();
        assert!(partition.capacity as usize > keys.len());
        for &key in &keys {
            assert_eq!(index.lookup(&partition, entry(key).digest).unwrap(), Some(entry(key)), "key {key}");
        }
    }

    #[test]
    fn repair_keeps_the_newest_of_two_entries_of_one_key() {
        let store = SimStore::new(3);
        let index = Index::create(store.open("index", Tier::Pmem, 8 << 20).unwrap().medium, 1, "t", 0).unwrap();
        let older = Entry { part: false, expires: false, ..entry(1) };
        let newer = Entry { location: Location::new(2, 64, 64), ..older };
        let number = index.partition_of(older.digest);
        let mut partition = index.partition(number).write();
        index.table_put(&mut partition, number, older).unwrap();
        let Probe::Found(slot, _) = index.probe(&partition, older.digest).unwrap() else { panic!("just put") };
        // What a power cut can leave: the key's entry in the next slot too, naming a later record.
        let mut bytes = [0u8; ENTRY_BYTES as usize];
        index.medium.read_at(Index::slot_offset(&partition, slot), &mut bytes).unwrap();
        let copy_at = Index::slot_offset(&partition, (slot + 1) % partition.capacity);
        index.medium.write_at(copy_at, &bytes).unwrap();
        index.medium.store_u64(copy_at + LOCATION_OFFSET, newer.location.0).unwrap();
        assert_eq!(index.read_table(&partition).map(|table| count_entries(&table).live).unwrap(), 2);

        index.repair(&mut partition, |entry| Some(*entry), |entry| (entry.location.slot(), entry.location.offset())).unwrap();
        assert_eq!(index.entries(&partition).unwrap(), vec![newer]);
        assert_eq!(partition.counts.live, 1);
    }

    #[test]
    fn pending_entries_override_the_table_until_dropped() {
        let store = SimStore::new(2);
        let index = Index::create(store.open("index", Tier::Dram, 8 << 20).unwrap().medium, 1, "t", 0).unwrap();
        let digest = entry(1).digest;
        let number = index.partition_of(digest);
        let mut partition = index.partition(number).write();
        index.table_put(&mut partition, number, entry(1)).unwrap();
        let deletion = Entry { location: Location::DELETED, ..entry(1) };
        Index::push_pending(&mut partition, PendingEntry { entry: deletion, lsn: 9 });
        assert_eq!(index.lookup(&partition, digest).unwrap(), None);
        assert!(index.entries(&partition).unwrap().is_empty());
        Index::drop_pending(&mut partition, digest, 9);
        assert_eq!(index.lookup(&partition, digest).unwrap(), Some(entry(1)));
    }

    #[test]
    fn a_foreign_or_damaged_region_is_refused() {
        let store = SimStore::new(3);
        let medium = store.open("index", Tier::Pmem, 8 << 20).unwrap().medium;
        Index::create(medium.clone(), 7, "t", 0).unwrap().checkpoint(0, 1, true).unwrap();
        assert!(Index::attach(medium.clone(), 8, "t", 0).unwrap().is_err());
        medium.write_at(DIRECTORY_OFFSET, &[0xff; 8]).unwrap();
        assert!(Index::attach(medium, 7, "t", 0).unwrap().is_err());
    }

    #[test]
    fn a_damaged_table_is_refused_when_first_used_and_the_header_is_invalidated() {
        let store = SimStore::new(4);
        let medium = store.open("index", Tier::Pmem, 8 << 20).unwrap().medium;
        let index = Index::create(medium.clone(), 7, "t", 0).unwrap();
        let number = index.partition_of(entry(1).digest);
        index.table_put(&mut index.partition(number).write(), number, entry(1)).unwrap();
        index.checkpoint(0, 1, true).unwrap();
        let table_offset = index.partition(number).read().table_offset;
        drop(index);
        // A byte of an empty slot: covered too (a wrong digest there would not be read).
        let empty_slot = (entry(1).digest.home_slot(TABLE_SLOTS_MIN) + 1) % TABLE_SLOTS_MIN;
        medium.write_at(table_offset + empty_slot as u64 * ENTRY_BYTES + 3, &[0x5a]).unwrap();
        let index = Index::attach(medium.clone(), 7, "t", 0).unwrap().unwrap();
        assert_eq!(index.table_entry_count(), 1, "counted from the directory");
        let refused = index.lookup(&index.partition(number).read(), entry(1).digest);
        assert!(matches!(refused, Err(EngineError::IndexDamaged { partition, .. }) if partition == number), "{refused:?}");
        assert_eq!(index.check_unchecked_tables().unwrap(), 1, "the others are sound");
        let other = (number + 1) % PARTITION_COUNT;
        assert_eq!(index.lookup(&index.partition(other).read(), entry(1).digest).unwrap(), None);
        index.checkpoint(0, 1, true).unwrap();
        assert!(Index::attach(medium, 7, "t", 0).unwrap().is_err(), "the header stays invalid: the next start rebuilds");
    }

    #[test]
    fn counts_of_a_change_interrupted_by_a_crash_are_flagged() {
        let store = SimStore::new(5);
        let medium = store.open("index", Tier::Shmem, 8 << 20).unwrap().medium;
        let index = Index::create(medium.clone(), 7, "t", 0).unwrap();
        let number = index.partition_of(entry(1).digest);
        let mut partition = index.partition(number).write();
        index.table_put(&mut partition, number, entry(1)).unwrap();
        assert!(index.interrupted_changes().unwrap().is_empty(), "a finished change is not flagged");
        // A process stopping inside a change leaves the flag set.
        index.begin_change(&partition).unwrap();
        assert_eq!(index.interrupted_changes().unwrap(), vec![number]);
        index.recount(&mut partition).unwrap();
        assert!(index.interrupted_changes().unwrap().is_empty());
        assert_eq!(partition.counts, EntryCounts { live: 1, parts: 0, expiring: 1, tombstones: 0 });
    }

    #[test]
    fn durable_counts_describe_the_table_the_directory_names_after_a_crash() {
        // Shmem switches to a grown table at once, pmem at the next checkpoint.
        for tier in [Tier::Shmem, Tier::Pmem] {
            let store = SimStore::new(6);
            let medium = store.open("index", tier, 16 << 20).unwrap().medium;
            let index = Index::create(medium.clone(), 7, "t", 0).unwrap();
            let put = |key: u32| {
                let number = index.partition_of(entry(key).digest);
                index.table_put(&mut index.partition(number).write(), number, entry(key)).unwrap();
            };
            (0..10_000).for_each(put);
            index.checkpoint(5, 6, false).unwrap();
            // Tables grow again after the checkpoint; nothing more is made durable.
            (10_000..30_000).for_each(put);
            for key in (0..30_000).step_by(5) {
                let number = index.partition_of(entry(key).digest);
                index.table_remove(&mut index.partition(number).write(), number, entry(key).digest).unwrap();
            }
            drop(index);
            store.crash_process();
            let index = Index::attach(medium, 7, "t", 0).unwrap().unwrap();
            assert!(index.interrupted_changes().unwrap().is_empty(), "{tier}");
            for number in 0..PARTITION_COUNT {
                let mut partition = index.partition(number).write();
                let durable = partition.counts;
                index.recount(&mut partition).unwrap();
                assert_eq!(durable, partition.counts, "{tier} partition {number}");
            }
        }
    }
}
