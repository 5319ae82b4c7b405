//! The primary index: a hash table keyed by the 128-bit key digest, split into partitions that
//! grow independently (so growth never pauses more than one small partition), on a byte region of
//! any tier. Entries hold offsets only, so a region mapped at another address stays valid.
//!
//! Region layout:
//!
//! | offset            | size                  | content                                   |
//! |-------------------|-----------------------|-------------------------------------------|
//! | 0                 | HEADER_AREA_BYTES     | two header slots (see `header`)           |
//! | DIRECTORY_OFFSET  | 16 × PARTITION_COUNT  | partition directory                       |
//! | HEAP_OFFSET       | rest                  | partition tables, 32-byte entries         |
//!
//! Directory entry: word 0 = table offset / 64 << 24 | capacity in slots (published with one
//! 8-byte store after the new table is durable); word 1 = CRC-32C of the table's bytes, written
//! at checkpoints. Entries carry no checksum of their own: after a clean shutdown
//! `verify_tables` checks every table against its word 1 at open, and a mismatch means a cold
//! rebuild (it also counts the partitions' entries, at every open).
//!
//! Each partition also has, in DRAM, the entries of records not yet durable ("pending"): reads
//! see them first; they reach the table only once their record is durable (see
//! docs/design/commit.md).

mod allocator;
pub(crate) mod entry;
pub(crate) mod header;
mod pending;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hybridkv_media::{DurabilityPath, Medium};
use parking_lot::{Mutex, RwLock};

use crate::digest::Digest;
use crate::error::{EngineError, Result};
use crate::log::record::u64_at;
use crate::log::Location;
use allocator::{ExtentAllocator, EXTENT_ALIGN_BYTES};
pub(crate) use entry::{entry_expiry, Entry, ENTRY_BYTES, PART_EXPIRY_MARK};
pub use entry::EXPIRY_UNIX_MS_MAX;
use entry::LOCATION_OFFSET;
pub(crate) use pending::PendingEntry;
use pending::PendingEntries;
pub(crate) use header::{current_boot_id, IndexHeader};
use header::{HEADER_AREA_BYTES, HEADER_SLOT_BYTES};

pub(crate) const PARTITION_COUNT: usize = 4096;
// Parts share their owner's partition through the top 16 digest bits (`crate::digest`).
const _: () = assert!(PARTITION_COUNT <= 1 << 16);
const DIRECTORY_OFFSET: u64 = HEADER_AREA_BYTES;
const DIRECTORY_ENTRY_BYTES: u64 = 16;
/// Where a directory entry keeps its table's checksum.
const TABLE_CHECKSUM_OFFSET: u64 = 8;
pub(crate) const HEAP_OFFSET: u64 = (DIRECTORY_OFFSET + PARTITION_COUNT as u64 * DIRECTORY_ENTRY_BYTES).next_multiple_of(4096);
const TABLE_SLOTS_MIN: u32 = 16;
const TABLE_SLOTS_MAX: u32 = (1 << 24) - 1;
/// A partition grows when live entries, deleted slots and pending entries pass this load.
/// 60–80% keeps linear probing short (about 13 slots for a miss at 80%, 50 at 90%); what a
/// higher load would save and cost is in docs/design/formats.md ("Index space per key").
const LOAD_PERCENT_MAX: u64 = 80;
/// Load right after growing: the growth factor is LOAD_PERCENT_MAX / LOAD_PERCENT_AFTER_GROWTH.
const LOAD_PERCENT_AFTER_GROWTH: u64 = 60;
const CAPACITY_SHIFT: u32 = 24;

const _: () = assert!(PARTITION_COUNT.is_power_of_two());
const _: () = assert!(DIRECTORY_OFFSET % HEADER_SLOT_BYTES == 0);
const _: () = assert!(LOAD_PERCENT_AFTER_GROWTH < LOAD_PERCENT_MAX);

pub(crate) struct Partition {
    table_offset: u64,
    capacity: u32,
    live: u32,
    tombstones: u32,
    pending: PendingEntries,
}

enum Probe {
    Found(u32, Entry),
    /// Not present; the slot where an insert goes, if any is free.
    Absent(Option<u32>),
}

pub(crate) struct Index {
    medium: Arc<dyn Medium>,
    partitions: Box<[RwLock<Partition>]>,
    dirty: Box<[AtomicBool]>,
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
    pub(crate) fn create(medium: Arc<dyn Medium>, fingerprint: u64, namespace: &str) -> Result<Index> {
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
            partitions.push(RwLock::new(Partition {
                table_offset: offset,
                capacity: TABLE_SLOTS_MIN,
                live: 0,
                tombstones: 0,
                pending: PendingEntries::default(),
            }));
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
            boot_id: current_boot_id(),
            checkpoint_unix_ms: 0,
        };
        Ok(Index::assemble(medium, partitions, allocator, header, namespace, true))
    }

    /// Attaches an existing index region. `Ok(Err(reason))` when it is missing, damaged or from
    /// another configuration: the caller rebuilds it.
    pub(crate) fn attach(
        medium: Arc<dyn Medium>,
        fingerprint: u64,
        namespace: &str,
    ) -> Result<std::result::Result<Index, String>> {
        let mut slots = vec![0u8; HEADER_AREA_BYTES as usize];
        medium.read_at(0, &mut slots)?;
        let (slot_a, slot_b) = slots.split_at(HEADER_SLOT_BYTES as usize);
        let Some(header) = IndexHeader::newest(slot_a, slot_b) else {
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
        for words in directory.chunks_exact(DIRECTORY_ENTRY_BYTES as usize) {
            let table = u64::from_le_bytes(words[..8].try_into().expect("8 bytes"));
            let (offset, capacity) = ((table >> CAPACITY_SHIFT) * EXTENT_ALIGN_BYTES, (table & TABLE_SLOTS_MAX as u64) as u32);
            if !(TABLE_SLOTS_MIN..=TABLE_SLOTS_MAX).contains(&capacity) || offset < HEAP_OFFSET {
                return Ok(Err("index directory entry out of range".into()));
            }
            used.push((offset, capacity as u64 * ENTRY_BYTES));
            // Counted by `verify_tables`.
            partitions.push(RwLock::new(Partition { table_offset: offset, capacity, live: 0, tombstones: 0, pending: PendingEntries::default() }));
        }
        let Some(allocator) = ExtentAllocator::with_used(HEAP_OFFSET, region_bytes, &mut used) else {
            return Ok(Err("index tables overlap or run past the region".into()));
        };
        Ok(Ok(Index::assemble(medium, partitions, allocator, header, namespace, false)))
    }

    /// `dirty`: whether every partition must be made durable at the next checkpoint (a new
    /// index) or none (an attached one, durable as its header says).
    fn assemble(
        medium: Arc<dyn Medium>,
        partitions: Vec<RwLock<Partition>>,
        allocator: ExtentAllocator,
        header: IndexHeader,
        namespace: &str,
        dirty: bool,
    ) -> Index {
        Index {
            switch_tables_at_checkpoint: medium.info().tier.survives_power_cut(),
            medium,
            partitions: partitions.into_boxed_slice(),
            dirty: (0..PARTITION_COUNT).map(|_| AtomicBool::new(dirty)).collect(),
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

    pub(crate) fn partition(&self, number: usize) -> &RwLock<Partition> {
        &self.partitions[number]
    }

    pub(crate) fn used_bytes(&self) -> u64 {
        HEAP_OFFSET + self.allocator.lock().used_bytes()
    }

    pub(crate) fn capacity_bytes(&self) -> u64 {
        self.medium.len_bytes()
    }

    pub(crate) fn table_entry_count(&self) -> u64 {
        self.partitions.iter().map(|partition| partition.read().live as u64).sum()
    }

    /// Entries of parts in the tables (a pass over every table: done once, at start-up).
    pub(crate) fn table_part_count(&self) -> Result<u64> {
        let mut parts = 0;
        for partition in self.partitions.iter() {
            parts += u64::from(count_entries(&self.read_table(&partition.read())?).parts);
        }
        Ok(parts)
    }

    fn slot_offset(partition: &Partition, slot: u32) -> u64 {
        partition.table_offset + slot as u64 * ENTRY_BYTES
    }

    fn read_slot(&self, partition: &Partition, slot: u32) -> Result<Entry> {
        let mut bytes = [0u8; ENTRY_BYTES as usize];
        self.medium.read_at(Self::slot_offset(partition, slot), &mut bytes)?;
        Ok(Entry::decode(&bytes))
    }

    fn probe(&self, partition: &Partition, digest: Digest) -> Result<Probe> {
        let mut slot = digest.home_slot(partition.capacity);
        let mut first_deleted = None;
        for _ in 0..partition.capacity {
            let entry = self.read_slot(partition, slot)?;
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
        Ok(Probe::Absent(first_deleted))
    }

    /// Starts loading the slot where the probe for `digest` begins (see `Medium::prefetch`).
    pub(crate) fn prefetch_home_slot(&self, partition: &Partition, digest: Digest) {
        self.medium.prefetch(Self::slot_offset(partition, digest.home_slot(partition.capacity)), ENTRY_BYTES);
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
        // Publishing takes at most one new slot per digest, whatever its number of pending entries.
        let needed = partition.live as u64 + partition.tombstones as u64 + partition.pending.distinct_len() as u64 + 1;
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
        let keep = partition.live as u64 + partition.pending.distinct_len() as u64 + 1;
        let capacity = (keep * 100).div_ceil(LOAD_PERCENT_AFTER_GROWTH).max(TABLE_SLOTS_MIN as u64);
        if capacity > TABLE_SLOTS_MAX as u64 {
            return Err(index_full(&self.namespace, self.medium.len_bytes()));
        }
        let capacity = capacity as u32;
        let bytes = capacity as u64 * ENTRY_BYTES;
        let offset = self.allocator.lock().allocate(bytes).ok_or_else(|| index_full(&self.namespace, self.medium.len_bytes()))?;
        let old_extent = (partition.table_offset, partition.capacity as u64 * ENTRY_BYTES);
        let mut old = vec![0u8; old_extent.1 as usize];
        self.medium.read_at(old_extent.0, &mut old)?;
        let mut table = vec![0u8; bytes as usize];
        let mut live = 0;
        for entry_bytes in old.chunks_exact(ENTRY_BYTES as usize) {
            let entry = Entry::decode(entry_bytes.try_into().expect("entry-sized chunk"));
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
            live += 1;
        }
        self.medium.write_at(offset, &table)?;
        if self.switch_tables_at_checkpoint {
            self.deferred_free.lock().push(old_extent);
        } else {
            self.medium.store_u64(directory_offset(number), table_word(offset, capacity))?;
            self.allocator.lock().release(old_extent.0, old_extent.1);
        }
        partition.table_offset = offset;
        partition.capacity = capacity;
        partition.live = live;
        partition.tombstones = 0;
        self.dirty[number].store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Bytes of old tables waiting for a checkpoint before they can be reused.
    pub(crate) fn deferred_free_bytes(&self) -> u64 {
        self.deferred_free.lock().iter().map(|&(_, len)| len).sum()
    }

    /// Writes `entry` into the table (insert or replace); returns the entry it replaced.
    pub(crate) fn table_put(&self, partition: &mut Partition, number: usize, entry: Entry) -> Result<Option<Entry>> {
        assert!(entry.location.is_record());
        self.dirty[number].store(true, Ordering::Relaxed);
        match self.probe(partition, entry.digest)? {
            Probe::Found(slot, old) => {
                let at = Self::slot_offset(partition, slot);
                self.medium.store_u64(at + entry::META_OFFSET, entry.meta())?;
                self.medium.store_u64(at + LOCATION_OFFSET, entry.location.0)?;
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
                // Counts may be stale after a crash until recovery recounts: never underflow.
                if self.read_slot(partition, slot)?.location == Location::DELETED {
                    partition.tombstones = partition.tombstones.saturating_sub(1);
                }
                self.medium.write_at(at, &entry.prefix())?;
                self.medium.store_u64(at + LOCATION_OFFSET, entry.location.0)?;
                partition.live += 1;
                if (partition.live as u64 + partition.tombstones as u64) * 100 > partition.capacity as u64 * LOAD_PERCENT_MAX {
                    self.grow(partition, number)?;
                }
                Ok(None)
            }
        }
    }

    /// Marks `digest` deleted in the table; returns the entry it removed.
    pub(crate) fn table_remove(&self, partition: &mut Partition, number: usize, digest: Digest) -> Result<Option<Entry>> {
        let Probe::Found(slot, old) = self.probe(partition, digest)? else { return Ok(None) };
        self.dirty[number].store(true, Ordering::Relaxed);
        self.medium.store_u64(Self::slot_offset(partition, slot) + LOCATION_OFFSET, Location::DELETED.0)?;
        partition.live = partition.live.saturating_sub(1);
        partition.tombstones += 1;
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
        let mut entries = Vec::with_capacity(partition.live as usize);
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
    /// the expiry and generation of those it gives back changed, then recomputes the
    /// partition's counts from its table (a crash leaves them stale).
    pub(crate) fn repair(&self, partition: &mut Partition, mut repaired: impl FnMut(&Entry) -> Option<Entry>) -> Result<()> {
        for slot in 0..partition.capacity {
            let entry = self.read_slot(partition, slot)?;
            if !entry.location.is_record() {
                continue;
            }
            let at = Self::slot_offset(partition, slot);
            match repaired(&entry) {
                None => self.medium.store_u64(at + LOCATION_OFFSET, Location::DELETED.0)?,
                Some(sound) if sound != entry => {
                    assert!(sound.digest == entry.digest && sound.location == entry.location, "only the meta word is repaired");
                    self.medium.store_u64(at + entry::META_OFFSET, sound.meta())?;
                }
                Some(_) => {}
            }
        }
        self.recount(partition)
    }

    /// Recomputes a partition's counts from its table.
    fn recount(&self, partition: &mut Partition) -> Result<()> {
        set_counts(partition, &self.read_table(partition)?);
        Ok(())
    }

    fn read_table(&self, partition: &Partition) -> Result<Vec<u8>> {
        let mut table = vec![0u8; (partition.capacity as u64 * ENTRY_BYTES) as usize];
        self.medium.read_at(partition.table_offset, &mut table)?;
        Ok(table)
    }

    /// Counts the entries of every partition and, with `check`, checks every table against the
    /// checksum its directory entry holds (they match only as of the last checkpoint, so after a
    /// clean shutdown). `Ok(Err(reason))` on a mismatch: the caller rebuilds.
    pub(crate) fn verify_tables(&self, check: bool) -> Result<std::result::Result<(), String>> {
        let mut directory = vec![0u8; PARTITION_COUNT * DIRECTORY_ENTRY_BYTES as usize];
        self.medium.read_at(DIRECTORY_OFFSET, &mut directory)?;
        for ((number, partition), words) in self.partitions.iter().enumerate().zip(directory.chunks_exact(DIRECTORY_ENTRY_BYTES as usize)) {
            let mut partition = partition.write();
            let table = self.read_table(&partition)?;
            let stored = u64_at(words, TABLE_CHECKSUM_OFFSET as usize);
            if check && u64::from(crc32c::crc32c(&table)) != stored {
                return Ok(Err(format!("index partition {number} does not match its checksum")));
            }
            set_counts(&mut partition, &table);
        }
        Ok(Ok(()))
    }

    /// Makes the index durable as of `consistent_position` (every record before it is reflected)
    /// and records it in the header, with `clean` for a clean shutdown.
    pub(crate) fn checkpoint(&self, consistent_position: u64, next_lsn: u64, clean: bool) -> Result<()> {
        let whole_region = self.medium.info().durability == DurabilityPath::MsyncFallback;
        // Only tables replaced before this point have their successors made durable below.
        let releasable = std::mem::take(&mut *self.deferred_free.lock());
        for number in 0..PARTITION_COUNT {
            if !self.dirty[number].swap(false, Ordering::Relaxed) {
                continue;
            }
            let partition = self.partitions[number].read();
            let directory = directory_offset(number);
            let checksum = crc32c::crc32c(&self.read_table(&partition)?);
            self.medium.store_u64(directory, table_word(partition.table_offset, partition.capacity))?;
            self.medium.store_u64(directory + TABLE_CHECKSUM_OFFSET, u64::from(checksum))?;
            if !whole_region {
                self.medium.persist(partition.table_offset, partition.capacity as u64 * ENTRY_BYTES)?;
                self.medium.persist(directory, DIRECTORY_ENTRY_BYTES)?;
            }
        }
        if whole_region {
            // msync writes back only dirty pages: one call beats thousands of small ones.
            self.medium.persist(0, self.medium.len_bytes())?;
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

    fn write_header(&self, change: impl FnOnce(&mut IndexHeader)) -> Result<()> {
        let mut header = self.header.lock();
        let mut next = *header;
        change(&mut next);
        next.seq += 1;
        next.boot_id = current_boot_id();
        let slot_offset = (next.seq % 2) * HEADER_SLOT_BYTES;
        self.medium.write_at(slot_offset, &next.encode())?;
        self.medium.persist(slot_offset, HEADER_SLOT_BYTES)?;
        *header = next;
        Ok(())
    }
}

fn directory_offset(number: usize) -> u64 {
    DIRECTORY_OFFSET + number as u64 * DIRECTORY_ENTRY_BYTES
}

fn table_word(offset: u64, capacity: u32) -> u64 {
    assert!(offset % EXTENT_ALIGN_BYTES == 0 && capacity <= TABLE_SLOTS_MAX);
    (offset / EXTENT_ALIGN_BYTES) << CAPACITY_SHIFT | capacity as u64
}

/// (live entries, deleted slots) of a table's bytes.
/// The entries of one table: live ones (parts included), parts alone, and deleted slots.
struct EntryCounts {
    live: u32,
    parts: u32,
    tombstones: u32,
}

/// A partition's live and deleted slot counts, from its table's bytes.
fn set_counts(partition: &mut Partition, table: &[u8]) {
    let counts = count_entries(table);
    (partition.live, partition.tombstones) = (counts.live, counts.tombstones);
}

fn count_entries(table: &[u8]) -> EntryCounts {
    let mut counts = EntryCounts { live: 0, parts: 0, tombstones: 0 };
    for bytes in table.chunks_exact(ENTRY_BYTES as usize) {
        match Location(u64_at(bytes, LOCATION_OFFSET as usize)) {
            Location::EMPTY => {}
            Location::DELETED => counts.tombstones += 1,
            _ => {
                counts.live += 1;
                counts.parts += u32::from(Entry::decode(bytes.try_into().expect("entry-sized chunk")).is_part());
            }
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

    fn entry(key: u32) -> Entry {
        Entry {
            digest: Digest::of(0, &key.to_le_bytes()),
            location: Location::new(1, 64 + key as u64 * 8, 64),
            expiry_unix_ms: 0,
            generation: 1,
        }
    }

    #[test]
    fn tables_grow_and_keep_every_entry_across_attach() {
        let store = SimStore::new(1);
        let medium = store.open("index", Tier::Pmem, 16 << 20).unwrap().medium;
        let index = Index::create(medium.clone(), 7, "test").unwrap();
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
        let index = Index::attach(medium, 7, "test").unwrap().unwrap();
        assert!(index.header().clean);
        assert_eq!(index.verify_tables(true).unwrap(), Ok(()));
        for key in 0..20_000 {
            let number = index.partition_of(entry(key).digest);
            let found = index.lookup(&index.partition(number).read(), entry(key).digest).unwrap();
            assert_eq!(found, (key % 3 != 0).then(|| entry(key)), "key {key}");
        }
        assert_eq!(index.table_entry_count(), 20_000 - 6667);
    }

    #[test]
    fn pending_entries_override_the_table_until_dropped() {
        let store = SimStore::new(2);
        let index = Index::create(store.open("index", Tier::Dram, 8 << 20).unwrap().medium, 1, "t").unwrap();
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
        Index::create(medium.clone(), 7, "t").unwrap().checkpoint(0, 1, true).unwrap();
        assert!(Index::attach(medium.clone(), 8, "t").unwrap().is_err());
        medium.write_at(DIRECTORY_OFFSET, &[0xff; 8]).unwrap();
        assert!(Index::attach(medium, 7, "t").unwrap().is_err());
    }

    #[test]
    fn a_damaged_table_fails_its_checksum_when_checked() {
        let store = SimStore::new(4);
        let medium = store.open("index", Tier::Pmem, 8 << 20).unwrap().medium;
        let index = Index::create(medium.clone(), 7, "t").unwrap();
        let number = index.partition_of(entry(1).digest);
        index.table_put(&mut index.partition(number).write(), number, entry(1)).unwrap();
        index.checkpoint(0, 1, true).unwrap();
        let table_offset = index.partition(number).read().table_offset;
        drop(index);
        let index = Index::attach(medium.clone(), 7, "t").unwrap().unwrap();
        assert_eq!(index.verify_tables(true).unwrap(), Ok(()));
        assert_eq!(index.table_entry_count(), 1, "counted while verified");
        // A byte of an empty slot: covered too (a wrong digest there would not be read).
        let empty_slot = (entry(1).digest.home_slot(TABLE_SLOTS_MIN) + 1) % TABLE_SLOTS_MIN;
        medium.write_at(table_offset + empty_slot as u64 * ENTRY_BYTES + 3, &[0x5a]).unwrap();
        assert!(index.verify_tables(true).unwrap().is_err());
        assert_eq!(index.verify_tables(false).unwrap(), Ok(()));
    }
}
