//! Background work of a namespace, on one thread: periodic flushes (durability `periodic` and
//! `none`), checkpoints that bound replay, defragmentation of blocks under the low-water mark,
//! reclaiming expired keys, and the live-byte audit after a warm start.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::MutexGuard;

use super::Namespace;
use crate::background_pace;
use crate::config::Durability;
use crate::digest::Digest;
use crate::error::Result;
use crate::index::{entry_expiry, record_expired, Index, PendingEntry};
use crate::log::{position_seq, Location, NewRecord, RecordView, Walked, Writer, BLOCK_HEADER_BYTES};

const MAINTENANCE_TICK: Duration = Duration::from_millis(5);
/// Expiry reclaim, defragmentation and the other work that need not run at every tick.
const HOUSEKEEPING_INTERVAL: Duration = Duration::from_millis(50);
/// How often durability `none` hands buffered writes to the operating system.
const NONE_WRITE_BACK_INTERVAL_MS: u64 = 100;
/// Partitions examined for expired keys per tick: a full pass takes 4096 / 32 ticks.
const EXPIRY_PARTITIONS_PER_TICK: usize = 32;
/// Blocks defragmented together.
const DEFRAG_BLOCKS_PER_ROUND: usize = 8;
/// Emptied blocks (live records moved out) wait for a checkpoint before they are freed; one is
/// taken for them once 1/N of the blocks wait, or at once when space is short. A checkpoint makes
/// every index page changed since the last one durable: one per defragmentation round (up to
/// 10 a second under overwrites) took a third of the background thread's time.
const EMPTIED_BLOCKS_FRACTION_MAX: usize = 16;
/// Under 1/N of the blocks free, defragmentation runs at every tick.
pub(super) const FREE_BLOCKS_LOW_FRACTION: usize = 8;
/// Once 1/N of the blocks are in use the configured low-water mark applies; with fewer in use the
/// mark is scaled down by their share (at a tenth in use, a fifth of the mark): a block left
/// alone keeps losing live records to overwrites and deletes, so waiting copies fewer live bytes
/// per byte freed (at a tenth live, a ninth of a byte; at half live, one byte), and while most of
/// the space is free nothing is gained by freeing more of it early.
const USED_BLOCKS_FULL_LOW_WATER_FRACTION: u64 = 2;
/// A checkpoint is taken early when old index tables waiting for one pass 1/N of the region.
const INDEX_DEFERRED_FRACTION_MAX: u64 = 8;
/// Background threads give way to foreground threads (`background_pace`) only while at most 1/N
/// of the blocks are in use: then their falling behind costs nothing. With more in use they run
/// straight through, or writers outrun them: defragmentation fell behind the writers of big
/// hashes, and publication (which tells defragmentation and the space hold what is dead) behind
/// a stream of overwrites that filled a small tier within a quarter of a second, whose writes
/// then failed with -OOM (see docs/design/commit.md, "Background work in short bursts").
const PACED_USED_BLOCKS_FRACTION: usize = 4;

/// When the first checkpoint of a start is taken.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpenCheckpoint {
    Now,
    /// At the next round of background work.
    InBackground,
}

impl Namespace {
    /// Whether background work may give way to foreground threads: while at most
    /// 1/PACED_USED_BLOCKS_FRACTION of the blocks are in use.
    pub(crate) fn background_may_pace(&self) -> bool {
        let used_blocks = self.log.block_count() - self.log.free_block_count();
        used_blocks * PACED_USED_BLOCKS_FRACTION <= self.log.block_count()
    }

    /// Called once recovery is done: the key count (from the partitions' counts), the first
    /// checkpoint (which also marks the index open, i.e. not clean; an index attached after a
    /// crash is not clean already), and whether live-byte accounting must be audited.
    pub(crate) fn finish_open(&self, accounting_rebuilt: bool, checkpoint: OpenCheckpoint) -> Result<()> {
        self.keyspace.reset(self.index.table_key_count(), self.index.table_expiring_count());
        self.lsn_at_checkpoint.store(self.log.next_lsn(), Ordering::Relaxed);
        match checkpoint {
            OpenCheckpoint::Now => {
                // The new active block's header must be durable before the index names its position.
                let position = self.log.append_position();
                self.wait_durable_with(position, true)?;
                self.index.checkpoint(position, self.log.next_lsn(), false)?;
                self.last_checkpoint_unix_ms.store(crate::now_unix_ms(), Ordering::Relaxed);
            }
            OpenCheckpoint::InBackground => self.checkpoint_wanted.store(true, Ordering::Relaxed),
        }
        self.accounting_ready.store(accounting_rebuilt, Ordering::Relaxed);
        Ok(())
    }

    pub(crate) fn start_maintenance(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let stopping = self.stopping.clone();
        let name = format!("hkv-maint-{}", self.config.name);
        let handle = std::thread::Builder::new()
            .name(name)
            .spawn(move || maintenance_loop(weak, stopping))
            .expect("spawning the maintenance thread");
        self.background_threads.lock().push(handle);
        self.background_write_out.store(true, Ordering::Relaxed);
    }

    pub(crate) fn stop_maintenance(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        self.committed.notify_all();
        for handle in std::mem::take(&mut *self.background_threads.lock()) {
            let _ = handle.join();
        }
        // Nobody decides about space any more: what it held waits for durability alone.
        self.space_reclaimable.store(false, Ordering::Relaxed);
        self.release_space_waiters(true);
    }

    /// Makes everything durable and checkpoints the index (and the journal, for records in
    /// DRAM); `clean` marks a clean shutdown.
    pub(crate) fn checkpoint(&self, clean: bool) -> Result<()> {
        let _one_at_a_time = self.checkpoint_lock.lock();
        let position = self.log.append_position();
        self.wait_durable_with(position, true)?;
        if let Some(journal) = &self.journal {
            journal.checkpoint()?;
        }
        let next_lsn = self.log.next_lsn();
        self.index.checkpoint(position, next_lsn, clean)?;
        self.checkpointed_position.store(position, Ordering::Release);
        self.last_checkpoint_unix_ms.store(crate::now_unix_ms(), Ordering::Relaxed);
        self.log_bytes_at_checkpoint.store(self.log.bytes_appended(), Ordering::Relaxed);
        self.lsn_at_checkpoint.store(next_lsn, Ordering::Relaxed);
        Ok(())
    }

    /// Clean shutdown: no writes may run concurrently.
    pub(crate) fn close(&self) -> Result<()> {
        self.stop_maintenance();
        self.checkpoint(true)?;
        // The clean checkpoint covers every move: nothing in the emptied blocks is needed.
        let defragmenting = self.defrag_running.lock();
        if self.full_scans_running.load(Ordering::Acquire) > 0 {
            return Ok(());
        }
        self.free_emptied_blocks(&defragmenting)
    }

    /// One round of background work, flush included, whatever the timers say.
    pub(crate) fn maintain_once(&self) -> Result<()> {
        let mut state = self.manual_maintenance.lock();
        state.last_flush = Instant::now() - Duration::from_secs(3600);
        state.last_housekeeping = state.last_flush;
        self.maintain(&mut state)
    }

    fn maintain(&self, state: &mut LoopState) -> Result<()> {
        let since_flush_ms = state.last_flush.elapsed().as_millis() as u64;
        let flush_due = match self.durability() {
            Durability::Always => false,
            Durability::Periodic => since_flush_ms >= self.config.periodic_ms,
            Durability::None => since_flush_ms >= NONE_WRITE_BACK_INTERVAL_MS,
        };
        if flush_due {
            state.last_flush = Instant::now();
            let persist = self.durability() == Durability::Periodic;
            self.wait_durable_with(self.log.append_position(), persist)?;
        }
        let bytes_since_checkpoint = self.log.bytes_appended() - self.log_bytes_at_checkpoint.load(Ordering::Relaxed);
        let records_since_checkpoint = self.log.next_lsn().saturating_sub(self.lsn_at_checkpoint.load(Ordering::Relaxed));
        let interval_passed = bytes_since_checkpoint >= self.config.checkpoint_interval_bytes
            || records_since_checkpoint >= self.config.checkpoint_interval_records;
        // Old index tables are reused only after a checkpoint: do not let them fill the region.
        let index_waiting = self.index.deferred_free_bytes() > self.index.capacity_bytes() / INDEX_DEFERRED_FRACTION_MAX;
        if interval_passed || index_waiting || self.checkpoint_wanted.swap(false, Ordering::Relaxed) {
            self.checkpoint(false)?;
        }
        // Short of free blocks, defragmentation runs at every tick, not only at housekeeping.
        let short_of_space = self.short_of_space();
        if short_of_space {
            self.defragment_blocks(self.defrag_low_water_bytes())?;
        }
        if state.last_housekeeping.elapsed() < HOUSEKEEPING_INTERVAL {
            return Ok(());
        }
        state.last_housekeeping = Instant::now();
        // After a warm start, tables not used yet are checked here (a damaged one condemns the
        // index: see `Index::check_unchecked_tables`).
        self.index.check_unchecked_tables()?;
        if self.index.is_condemned() {
            // Which records the refused partitions still need is unknown: nothing is reclaimed
            // until the next start has rebuilt the index.
            return Ok(());
        }
        if !self.accounting_ready.load(Ordering::Relaxed) {
            self.audit_live_bytes()?;
            self.accounting_ready.store(true, Ordering::Relaxed);
        }
        self.reclaim_expired(state)?;
        if !short_of_space {
            self.defragment_blocks(self.defrag_low_water_bytes())?;
        }
        Ok(())
    }

    /// Live bytes under which a block is defragmented now: the configured low-water mark once
    /// space is half used, a mark scaled down by the share in use before (see
    /// USED_BLOCKS_FULL_LOW_WATER_FRACTION).
    fn defrag_low_water_bytes(&self) -> u64 {
        let low_water = self.log.block_bytes() * self.config.defrag_low_water_percent as u64 / 100;
        let blocks = self.log.block_count() as u64;
        let used_blocks = blocks - self.log.free_block_count() as u64;
        let scaled = low_water * (used_blocks * USED_BLOCKS_FULL_LOW_WATER_FRACTION).min(blocks) / blocks;
        // A block with no live record costs nothing to free: it always qualifies.
        scaled.max(1)
    }

    /// Recomputes each block's live bytes from the index (after a warm start, where they are not
    /// known). Approximate under concurrent writes: defragmentation re-checks every record.
    fn audit_live_bytes(&self) -> Result<()> {
        let mut blocks = self.log.sealed_blocks();
        blocks.push(self.log.active_block());
        let mut window = Vec::new();
        for (slot, seq) in blocks {
            let mut live = 0u64;
            self.walk_block_prefetching(slot, seq, &mut window, |offset, view, digest| {
                let location = Namespace::location_of(slot, BLOCK_HEADER_BYTES as u64 + offset, view);
                if view.header.is_tombstone() || self.points_at(digest, location) {
                    live += view.header.record_bytes() as u64;
                }
                Ok(true)
            })?;
            self.log.set_live_bytes(slot, live);
        }
        Ok(())
    }

    fn points_at(&self, digest: Digest, location: Location) -> bool {
        let partition = self.index.partition(self.index.partition_of(digest)).read();
        matches!(self.index.lookup(&partition, digest), Ok(Some(entry)) if entry.location == location)
    }

    /// Deletes keys whose expiry has passed, a few partitions per call, so their space can be
    /// reclaimed (a tombstone keeps an older version from coming back after a rebuild). Only
    /// entries tagged as expiring are looked at; their records (outside the partition's lock)
    /// tell whether they have expired, and the others' times to live feed INFO's average.
    fn reclaim_expired(&self, state: &mut LoopState) -> Result<()> {
        let now = crate::now_unix_ms();
        let (mut ttl_sum_ms, mut ttl_samples) = (0u64, 0u64);
        for _ in 0..EXPIRY_PARTITIONS_PER_TICK {
            background_pace::pace();
            let number = state.expiry_cursor;
            state.expiry_cursor = (state.expiry_cursor + 1) % crate::index::PARTITION_COUNT;
            let expiring: Vec<Location> = {
                let partition = self.index.partition(number).read();
                self.index.entries(&partition)?.into_iter().filter(|e| e.expires).map(|e| e.location).collect()
            };
            for location in expiring {
                let block_seq = self.log.block_seq(location.slot());
                let mut buffer = Vec::new();
                let Ok(view) = self.log.read_verified(location, &mut buffer) else { continue };
                if !record_expired(view.header.is_part(), view.header.expiry_unix_ms, now) {
                    if view.header.expiry_unix_ms != 0 {
                        ttl_sum_ms = ttl_sum_ms.saturating_add(entry_expiry(false, view.header.expiry_unix_ms).saturating_sub(now));
                        ttl_samples += 1;
                    }
                    continue;
                }
                let key = view.key.to_vec();
                if self.transaction(&[&key], |transaction| transaction.delete_if_still(&key, location, block_seq))? {
                    self.keyspace.note_expired();
                    self.announce_expired(&key);
                }
            }
        }
        self.keyspace.sample_ttls(ttl_sum_ms, ttl_samples);
        Ok(())
    }

    fn short_of_space(&self) -> bool {
        self.log.free_block_count() * FREE_BLOCKS_LOW_FRACTION < self.log.block_count()
    }

    /// Moves the live records of the emptiest blocks under the low-water mark (up to
    /// DEFRAG_BLOCKS_PER_ROUND) to the head of the log; the emptied blocks are freed once a
    /// checkpoint taken after the moves covers them, which this round takes when enough of them
    /// wait or space is short (`EMPTIED_BLOCKS_FRACTION_MAX`).
    fn defragment_blocks(&self, low_water_bytes: u64) -> Result<()> {
        if !self.accounting_ready.load(Ordering::Relaxed) || self.check_writable().is_err() || self.index.is_condemned() {
            return Ok(());
        }
        let mut window = self.defrag_running.lock();
        if self.full_scans_running.load(Ordering::Acquire) > 0 {
            return Ok(());
        }
        let emptied = self.move_live_records_out(low_water_bytes, &mut window)?;
        let waiting = {
            let mut waiting = self.emptied_blocks.lock();
            waiting.extend(emptied);
            waiting.len()
        };
        if waiting > 0 && (waiting * EMPTIED_BLOCKS_FRACTION_MAX >= self.log.block_count() || self.short_of_space()) {
            // The index must stop depending on these blocks' records (dropped tombstones
            // included) durably before they go.
            self.checkpoint(false)?;
        }
        self.free_emptied_blocks(&window)
    }

    /// One round of moves: the blocks whose every live record has been re-appended, each with
    /// the log position the checkpoint that frees it must reach. The caller holds
    /// `defrag_running` (whose buffer is `window`) and no full scan runs.
    fn move_live_records_out(&self, low_water_bytes: u64, window: &mut Vec<u8>) -> Result<Vec<EmptiedBlock>> {
        let sealed = self.log.sealed_blocks();
        let oldest_seq = sealed.first().map(|&(_, seq)| seq);
        // A record counts as live in its block once it is published, and `periodic` and `none`
        // publish at their flushes while housekeeping comes by more often: a block filled since
        // the last flush looks emptier than it is (moving its fresh records doubled the writes).
        // Only blocks wholly before the published position are judged.
        let published_seq = position_seq(self.commit.lock().durable_position);
        let waiting: Vec<u32> = self.emptied_blocks.lock().iter().map(|block| block.slot).collect();
        let mut candidates: Vec<(u32, u64)> = sealed
            .iter()
            .copied()
            .filter(|&(slot, seq)| seq < published_seq && !waiting.contains(&slot) && self.log.live_bytes(slot) < low_water_bytes)
            .collect();
        candidates.sort_by_key(|&(slot, _)| self.log.live_bytes(slot));
        candidates.truncate(DEFRAG_BLOCKS_PER_ROUND);
        let mut emptied = Vec::with_capacity(candidates.len());
        for &(slot, seq) in &candidates {
            let walked = self.move_block_out(slot, seq, window, Some(seq) == oldest_seq)?;
            // A round takes tens of milliseconds a block: holds for space end on time meanwhile.
            self.note_space();
            if walked.skipped_bytes > 0 {
                // A damaged record may be the one the index holds for its key: freeing the block
                // would turn a read reported as damaged into a silent loss. The block stays.
                tracing::error!(namespace = %self.config.name, slot, skipped_bytes = walked.skipped_bytes, "damaged records in a write block: it is not defragmented");
                continue;
            }
            emptied.push(EmptiedBlock { slot, moves_end_position: self.log.append_position() });
        }
        self.wake_committer_after_seal();
        Ok(emptied)
    }

    /// Re-appends the live records of the block `slot`, read through `window`.
    fn move_block_out(&self, slot: u32, seq: u64, window: &mut Vec<u8>, oldest: bool) -> Result<Walked> {
        let paced = self.background_may_pace();
        self.walk_block_prefetching(slot, seq, window, |offset, view, digest| {
            let location = Namespace::location_of(slot, BLOCK_HEADER_BYTES as u64 + offset, view);
            self.move_if_live(view, digest, location, oldest)?;
            if paced {
                background_pace::pace();
            }
            Ok(true)
        })
    }

    /// Frees the emptied blocks that the last checkpoint covers. The caller holds
    /// `defrag_running` (passing its buffer as proof) and no full scan runs.
    fn free_emptied_blocks(&self, _defrag_running: &MutexGuard<'_, Vec<u8>>) -> Result<()> {
        let covered = self.checkpointed_position.load(Ordering::Acquire);
        let mut waiting = self.emptied_blocks.lock();
        while let Some(at) = waiting.iter().position(|block| block.moves_end_position <= covered) {
            self.log.free_block(waiting[at].slot)?;
            waiting.swap_remove(at);
            self.counters.defragmented_blocks.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Re-appends the record at `location` when the index still points at it (a tombstone when
    /// no older block could hold a version it hides); an expired record becomes a tombstone,
    /// unless it has parts: those go with it in one batch, when `reclaim_expired` comes by.
    fn move_if_live(&self, view: &RecordView<'_>, digest: Digest, location: Location, oldest: bool) -> Result<()> {
        let number = self.index.partition_of(digest);
        let mut partition = self.index.partition(number).write();
        let current = self.index.lookup(&partition, digest)?;
        let header = &view.header;
        let mut expired = false;
        let (tombstone, lsn) = if header.is_tombstone() {
            if current.is_some() || oldest {
                return Ok(());
            }
            (true, Some(header.lsn))
        } else {
            match current {
                Some(entry) if entry.location == location => {
                    let has_parts = || self.index.lookup(&partition, self.part_digest(digest, 0)).map(|part| part.is_some());
                    // The entry names this record: its header tells the expiry.
                    if record_expired(header.is_part(), header.expiry_unix_ms, crate::now_unix_ms()) && !has_parts()? {
                        self.keyspace.change(Some(&entry), None);
                        self.keyspace.note_expired();
                        expired = true;
                        (true, None)
                    } else {
                        (false, Some(header.lsn))
                    }
                }
                _ => return Ok(()),
            }
        };
        if !tombstone {
            self.index.reserve_one(&mut partition, number)?;
        }
        let record = NewRecord {
            key: view.key,
            value: if tombstone { &[] } else { view.value },
            tombstone,
            part: header.is_part(),
            expiry_unix_ms: if tombstone { 0 } else { entry_expiry(header.is_part(), header.expiry_unix_ms) },
            generation: header.generation,
            lsn,
        };
        let publication = |appended: &[crate::log::Appended]| super::Publication {
            items: vec![self.publish_item(digest, &record, &appended[0])],
        };
        let (appended, encoded) = self.log.append(std::slice::from_ref(&record), false, Writer::Defrag, publication)?;
        self.carry_cached(digest, location, &appended[0], &encoded);
        let item = self.publish_item(digest, &record, &appended[0]);
        Index::push_pending(&mut partition, PendingEntry { entry: item.entry, lsn: item.lsn });
        self.unpublished_records.fetch_add(1, Ordering::Relaxed);
        drop(partition);
        if expired {
            self.announce_expired(view.key);
        }
        Ok(())
    }
}

impl Namespace {
    /// A moved record stays cached if it was: the hot set survives defragmentation.
    fn carry_cached(&self, digest: Digest, from: Location, moved: &crate::log::Appended, encoded: &[u8]) {
        let Some(cache) = &self.cache else { return };
        cache.relocate(self.cache_key(digest, from), self.cache_key(digest, moved.location), encoded);
    }
}

/// A block whose live records were all moved out: freed once a checkpoint at or after
/// `moves_end_position` is durable (docs/design/recovery.md, invariant 5).
pub(crate) struct EmptiedBlock {
    slot: u32,
    moves_end_position: u64,
}

pub(crate) struct LoopState {
    last_flush: Instant,
    last_housekeeping: Instant,
    expiry_cursor: usize,
}

impl LoopState {
    pub(crate) fn new() -> LoopState {
        LoopState { last_flush: Instant::now(), last_housekeeping: Instant::now(), expiry_cursor: 0 }
    }
}

fn maintenance_loop(namespace: Weak<Namespace>, stopping: Arc<std::sync::atomic::AtomicBool>) {
    let mut state = LoopState::new();
    let mut last_error_report = Instant::now() - Duration::from_secs(60);
    while !stopping.load(Ordering::Relaxed) {
        std::thread::sleep(MAINTENANCE_TICK);
        let Some(namespace) = namespace.upgrade() else { return };
        namespace.note_space();
        background_pace::mark_background(namespace.background_may_pace());
        if let Err(error) = namespace.maintain(&mut state) {
            if last_error_report.elapsed() >= Duration::from_secs(10) {
                last_error_report = Instant::now();
                tracing::warn!(namespace = %namespace.config.name, %error, "background maintenance failed; retrying");
            }
        }
    }
}
