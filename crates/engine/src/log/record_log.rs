//! The record log: append-only write blocks on a medium, the active block, block rotation, reads,
//! and the two halves of a flush (collecting what to make durable, then making it durable).
//!
//! Region media (dram, pmem with DAX, journaled DRAM) receive records at append time and are
//! persisted by range. Buffered media (ssd block files, and pmem files on the msync fallback)
//! receive records in an in-memory copy of the active block; a flush writes its changed pages out
//! and syncs the medium. Rotation seals the filled block's copy, whose last pages the next flush
//! writes out, so no append waits for I/O. Either way a record is readable as soon as `append`
//! returns.
//!
//! `RecordLog<P>` also keeps, in append order and under the append lock, one publication `P` per
//! append, so that the layer above can publish index entries in log order after a flush.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use hybridkv_media::{AlignedBuffer, DeviceRead, DurabilityPath, Medium, DEVICE_READ_BYTES_MAX, PAGE_BYTES};
use parking_lot::{Mutex, MutexGuard, RwLock};

use crate::error::{EngineError, Result};
use crate::log::block::{BlockHeader, BLOCK_HEADER_BYTES};
use crate::log::block_walk::{read_page_window, BlockWalk, BLOCK_WALK_WINDOW_BYTES};
use crate::log::location::{Location, BLOCK_SLOTS_MAX};
use crate::log::record::{
    self, decode_header, u32_at, RecordHeader, RecordView, BLOCK_SEQ_OFFSET, RECORD_ALIGN_BYTES, RECORD_HEADER_BYTES,
};

/// Blocks kept free for defragmentation, so that it can always make progress on a full device.
pub(crate) const BLOCKS_RESERVED_FOR_DEFRAG: usize = 2;
/// One more block kept for deletions, so that a full device can still be emptied.
pub(crate) const BLOCKS_RESERVED_FOR_DELETIONS: usize = 1;
/// First read of a record: most records fit, so one read usually suffices.
const RECORD_READ_AHEAD_BYTES: usize = 1024;
/// Encoding buffers of appends kept for the next appends (`recycle_encoded`), and the largest
/// kept: a pipelined group's batch takes hundreds of KiB, and an allocation that size made
/// afresh faulted in, and zeroed, new pages at each group.
const SPARE_ENCODING_BUFFERS_MAX: usize = 4;
const SPARE_ENCODING_BUFFER_BYTES_MAX: usize = 1 << 20;

/// A log position: block sequence number in the high 32 bits, offset in the block in the low 32.
/// Positions grow with every append and never repeat.
pub(crate) fn position(seq: u64, offset: u64) -> u64 {
    assert!(seq < 1 << 32 && offset < 1 << 32);
    (seq << 32) | offset
}

pub(crate) fn position_seq(position: u64) -> u64 {
    position >> 32
}

pub(crate) fn position_offset(position: u64) -> u64 {
    position & 0xffff_ffff
}

/// A record to append; `lsn` is `None` for a new write and the original LSN for a moved record.
pub(crate) struct NewRecord<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) value: &'a [u8],
    pub(crate) tombstone: bool,
    /// A part of another key's value (FLAG_PART).
    pub(crate) part: bool,
    pub(crate) expiry_unix_ms: u64,
    pub(crate) generation: u32,
    pub(crate) lsn: Option<u64>,
}

pub(crate) struct Appended {
    pub(crate) location: Location,
    pub(crate) lsn: u64,
    pub(crate) record_bytes: usize,
}

/// Who asks for space: writes that add data may not dip into the blocks reserved for deletions
/// and defragmentation, deletions not into those reserved for defragmentation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Writer {
    Client,
    Deletion,
    Defrag,
}

impl Writer {
    fn reserved_blocks(self) -> usize {
        match self {
            Writer::Client => BLOCKS_RESERVED_FOR_DEFRAG + BLOCKS_RESERVED_FOR_DELETIONS,
            Writer::Deletion => BLOCKS_RESERVED_FOR_DEFRAG,
            Writer::Defrag => 0,
        }
    }
}

struct BlockSlot {
    /// Sequence number of the block in this slot; 0 when free.
    seq: AtomicU64,
    live_bytes: AtomicU64,
}

struct AppendState<P> {
    active_slot: u32,
    active_seq: u64,
    write_offset: u64,
    next_lsn: u64,
    next_seq: u64,
    free_slots: BTreeSet<u32>,
    /// Unbuffered region media: medium ranges written since the last flush, [start, end).
    unflushed_ranges: Vec<(u64, u64)>,
    /// Buffered media: offset in the active block below which the medium already has the bytes.
    written_out_offset: u64,
    /// Buffered media: the pages of the block sealed last that no write-out has taken yet.
    sealed_unwritten: Option<SealedPages>,
    publications: Vec<P>,
}

/// The DRAM copies of a buffered medium's blocks whose records are not all on the medium yet:
/// the active block's, and the block sealed last until a write-out has put its last pages on
/// the medium. Reads of records in these blocks come from here. A copy's bytes past its
/// block's write offset may be an earlier block's (a recycled copy is not zeroed: zeroing 8 MiB
/// at each rotation was a tenth of the server's CPU under heavy writes); every page written
/// out carries zeros there instead (`take_changed_pages`, `seal_active_copy`), as a page
/// zeroed whole would.
struct BlockCopies {
    active_slot: u32,
    active: AlignedBuffer,
    sealed: Option<(u32, Arc<AlignedBuffer>)>,
}

impl BlockCopies {
    fn copy_of(&self, slot: u32) -> Option<&AlignedBuffer> {
        if self.active_slot == slot {
            return Some(&self.active);
        }
        self.sealed.as_ref().filter(|(sealed, _)| *sealed == slot).map(|(_, image)| &**image)
    }
}

/// Pages of a sealed block still to be written out: bytes [start, end) of the medium, which
/// lie in the block copy `image` from `start - block_base` on.
struct SealedPages {
    block_base: u64,
    start: u64,
    end: u64,
    image: Arc<AlignedBuffer>,
}

impl SealedPages {
    fn bytes(&self) -> &[u8] {
        &self.image.as_slice()[(self.start - self.block_base) as usize..(self.end - self.block_base) as usize]
    }
}

/// What one flush must make durable, taken atomically with respect to appends.
pub(crate) struct FlushWork<P> {
    /// Every record before this position is covered by this flush.
    pub(crate) upto_position: u64,
    pub(crate) publications: Vec<P>,
    ranges: Vec<(u64, u64)>,
}

pub(crate) struct RecordLog<P> {
    medium: Arc<dyn Medium>,
    /// Blocks whose damaged header could not be recognised (see `open`).
    set_aside_slots: u64,
    block_bytes: u64,
    fingerprint: u64,
    buffered: bool,
    slots: Vec<BlockSlot>,
    state: Mutex<AppendState<P>>,
    /// Buffered media only.
    copies: Option<RwLock<BlockCopies>>,
    /// A block copy for the next rotation, recycled from a sealed block's copy once its pages
    /// are on the medium (allocating one under the append lock stalled appends).
    spare_copy: Mutex<Option<AlignedBuffer>>,
    /// Serialises writing pages of the active block, or of the sealed one, out to a buffered
    /// medium (see `take_flush_work`), and holds the page-aligned copy of the active block's
    /// changed pages that a flush writes: kept, because a fresh multi-MiB allocation faults its
    /// pages in under the append lock, and aligned, so that O_DIRECT needs no bounce copy.
    write_out: Mutex<Option<AlignedBuffer>>,
    /// `AppendState::sealed_unwritten` is set: a flush should come soon to write it out. Kept
    /// apart so that committers read it without the append lock (they hold the commit lock).
    sealed_pages_waiting: AtomicBool,
    /// A block was sealed with pages to write out since `take_seal_notice` last looked.
    seal_unannounced: AtomicBool,
    bytes_appended: AtomicU64,
    /// `AppendState::free_slots.len()`, stored wherever it changes (under the append lock), so
    /// that writers and the maintenance thread read it without the lock.
    free_blocks: AtomicUsize,
    /// The emptied publication queue of the last flush, kept with its allocation for the next
    /// one: appends push onto the queue under the append lock, and a queue grown from nothing
    /// every flush reallocated under it (up to 100,000 publications between two flushes) into
    /// fresh memory, which the kernel zeroes on first touch, a huge page at a time.
    spare_publications: Mutex<Vec<P>>,
    /// Encoding buffers given back by appends' callers, empty (`recycle_encoded`).
    spare_encoding_buffers: Mutex<Vec<Vec<u8>>>,
    /// Rotations that found the previous sealed block's pages not yet written and waited for
    /// them (one write block of appends outran one block's write-out).
    rotations_waited_for_write_out: AtomicU64,
}

impl<P> RecordLog<P> {
    /// Reads every block header; returns the log (with no active block yet) and the blocks in use,
    /// ordered by sequence number.
    pub(crate) fn open(
        medium: Arc<dyn Medium>,
        block_bytes: u64,
        fingerprint: u64,
    ) -> Result<(RecordLog<P>, Vec<BlockHeader>)> {
        let slot_count = medium.len_bytes() / block_bytes;
        assert!((4..BLOCK_SLOTS_MAX).contains(&slot_count), "validated by the configuration");
        // One small read per write block: nothing around a header is needed now.
        medium.expect_scattered_reads(true);
        let scanned = scan_block_starts(&*medium, block_bytes, slot_count, fingerprint);
        medium.expect_scattered_reads(false);
        let (mut in_use, mut free_slots, damaged) = scanned?;
        let newest_intact_seq = in_use.iter().map(|header| header.seq).max().unwrap_or(0);
        // Blocks whose headers were lost are newer than the newest intact one by at most a slot
        // count each (see `next_seq` below), so their numbers lie under this bound.
        let seq_bound = newest_intact_seq + 1 + 2 * slot_count;
        let mut set_aside_slots = 0;
        for slot in damaged {
            match first_record(&*medium, slot, block_bytes, seq_bound)? {
                FirstRecord::Valid { seq } if in_use.iter().all(|header| header.seq != seq) => {
                    let header = BlockHeader { slot, seq, block_bytes, fingerprint, created_unix_ms: 0 };
                    tracing::error!(slot, seq, "write block header damaged: block recognised by its records, header rewritten");
                    rewrite_header(&*medium, &header)?;
                    in_use.push(header);
                }
                FirstRecord::Absent => {
                    // Nothing to keep (a block start torn by a crash, or damage over an empty block).
                    tracing::warn!(slot, "write block header invalid over an empty block: freed");
                    free_slots.insert(slot);
                }
                _ => {
                    tracing::error!(slot, "write block header damaged and its block unrecognisable: set aside, neither read nor reused");
                    set_aside_slots += 1;
                }
            }
        }
        in_use.sort_by_key(|header| header.seq);
        let slots = (0..slot_count)
            .map(|slot| BlockSlot {
                seq: AtomicU64::new(in_use.iter().find(|h| h.slot as u64 == slot).map_or(0, |h| h.seq)),
                live_bytes: AtomicU64::new(0),
            })
            .collect();
        // A pmem file without DAX is written like a block file: appends fill the DRAM copy of the
        // active block under the append lock, and each flush writes the changed pages out in one
        // write, outside it (one write per flush rather than per append, and no page-cache work
        // while appenders wait on the lock).
        let buffered = medium.write_alignment_bytes() > 1 || medium.info().durability == DurabilityPath::MsyncFallback;
        let state = AppendState {
            active_slot: u32::MAX,
            active_seq: 0,
            write_offset: 0,
            next_lsn: 1,
            // Sequence numbers are never reused, not even those of blocks whose headers were lost
            // (damage, or a crash that tore the header of a block it had started): such a block's
            // records may still lie past the end of a new block in its slot and would verify under
            // a reused number. Up to a slot count of blocks can have been started after the newest
            // intact one, so numbering resumes that many past it.
            next_seq: in_use.last().map_or(0, |header| header.seq) + 1 + slot_count,
            free_slots,
            unflushed_ranges: Vec::new(),
            written_out_offset: 0,
            sealed_unwritten: None,
            publications: Vec::new(),
        };
        let copies = buffered.then(|| {
            RwLock::new(BlockCopies { active_slot: u32::MAX, active: AlignedBuffer::zeroed(block_bytes as usize), sealed: None })
        });
        let free_blocks = AtomicUsize::new(state.free_slots.len());
        let log = RecordLog {
            medium,
            set_aside_slots,
            block_bytes,
            fingerprint,
            buffered,
            slots,
            state: Mutex::new(state),
            copies,
            spare_copy: Mutex::new(None),
            write_out: Mutex::new(None),
            sealed_pages_waiting: AtomicBool::new(false),
            seal_unannounced: AtomicBool::new(false),
            bytes_appended: AtomicU64::new(0),
            free_blocks,
            spare_publications: Mutex::new(Vec::new()),
            spare_encoding_buffers: Mutex::new(Vec::new()),
            rotations_waited_for_write_out: AtomicU64::new(0),
        };
        Ok((log, in_use))
    }

    pub(crate) fn block_bytes(&self) -> u64 {
        self.block_bytes
    }

    /// Blocks neither in use nor free: their header is damaged beyond recognition.
    pub(crate) fn set_aside_slots(&self) -> u64 {
        self.set_aside_slots
    }

    pub(crate) fn medium(&self) -> &Arc<dyn Medium> {
        &self.medium
    }

    pub(crate) fn block_count(&self) -> usize {
        self.slots.len()
    }

    pub(crate) fn free_block_count(&self) -> usize {
        self.free_blocks.load(Ordering::Relaxed)
    }

    pub(crate) fn bytes_appended(&self) -> u64 {
        self.bytes_appended.load(Ordering::Relaxed)
    }

    pub(crate) fn rotations_waited_for_write_out(&self) -> u64 {
        self.rotations_waited_for_write_out.load(Ordering::Relaxed)
    }

    pub(crate) fn used_bytes(&self) -> u64 {
        (self.slots.len() - self.free_block_count()) as u64 * self.block_bytes
    }

    /// The sequence number of the block in `slot`; 0 when free or beyond the log.
    pub(crate) fn block_seq(&self, slot: u32) -> u64 {
        self.slots.get(slot as usize).map_or(0, |block| block.seq.load(Ordering::Acquire))
    }

    pub(crate) fn add_live_bytes(&self, slot: u32, bytes: usize) {
        self.slots[slot as usize].live_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn remove_live_bytes(&self, slot: u32, bytes: usize) {
        let live = &self.slots[slot as usize].live_bytes;
        let _ = live.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |current| {
            Some(current.saturating_sub(bytes as u64))
        });
    }

    pub(crate) fn live_bytes(&self, slot: u32) -> u64 {
        self.slots[slot as usize].live_bytes.load(Ordering::Relaxed)
    }

    pub(crate) fn set_live_bytes(&self, slot: u32, bytes: u64) {
        self.slots[slot as usize].live_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Sets the LSN the next new record gets (recovery knows the largest one seen).
    pub(crate) fn set_next_lsn(&self, next_lsn: u64) {
        let mut state = self.state.lock();
        state.next_lsn = state.next_lsn.max(next_lsn);
    }

    pub(crate) fn next_lsn(&self) -> u64 {
        self.state.lock().next_lsn
    }

    /// The position the next append gets: every record appended so far lies before it.
    pub(crate) fn append_position(&self) -> u64 {
        let state = self.state.lock();
        position(state.active_seq, state.write_offset)
    }

    /// The active block and its sequence number.
    pub(crate) fn active_block(&self) -> (u32, u64) {
        let state = self.state.lock();
        (state.active_slot, state.active_seq)
    }

    /// Blocks in use other than the active one, with their sequence numbers, oldest first.
    pub(crate) fn sealed_blocks(&self) -> Vec<(u32, u64)> {
        let active = self.state.lock().active_slot;
        let mut blocks: Vec<(u32, u64)> = (0..self.slots.len() as u32)
            .filter(|&slot| slot != active)
            .map(|slot| (slot, self.block_seq(slot)))
            .filter(|&(_, seq)| seq != 0)
            .collect();
        blocks.sort_by_key(|&(_, seq)| seq);
        blocks
    }

    /// Continues appending in a block that recovery found cleanly ended at `end_offset`.
    pub(crate) fn resume_block(&self, header: &BlockHeader, end_offset: u64) -> Result<()> {
        let mut state = self.state.lock();
        if let Some(copies) = &self.copies {
            let mut copies = copies.write();
            let readable = end_offset.next_multiple_of(PAGE_BYTES).min(self.block_bytes) as usize;
            let active = copies.active.as_mut_slice();
            active.fill(0);
            self.medium.read_at(self.block_base(header.slot), &mut active[..readable])?;
            active[end_offset as usize..readable].fill(0);
            copies.active_slot = header.slot;
        }
        state.active_slot = header.slot;
        state.active_seq = header.seq;
        state.write_offset = end_offset;
        state.written_out_offset = end_offset;
        Ok(())
    }

    /// Starts a fresh active block (at open, or after a crash left the last block's tail unknown).
    pub(crate) fn start_new_block(&self) -> Result<()> {
        let mut state = self.lock_ready_to_rotate(|_| true)?;
        self.rotate(&mut state, Writer::Defrag)
    }

    /// Takes the append lock. When `must_rotate` says the append needs a new block and the
    /// copy sealed at the rotation before still waits for its write-out (the flushes fell a
    /// whole block behind), writes that out first, outside the append lock: appends never wait
    /// for I/O while holding it. So at most one sealed copy exists.
    fn lock_ready_to_rotate(&self, must_rotate: impl Fn(&AppendState<P>) -> bool) -> Result<MutexGuard<'_, AppendState<P>>> {
        let mut waited = false;
        loop {
            let state = self.state.lock();
            // The cheap test first: most appends fit in the active block and never look at the
            // copies' lock, which every append takes for writing.
            let sealed_copy_waits = || self.copies.as_ref().is_some_and(|copies| copies.read().sealed.is_some());
            if !(must_rotate(&state) && sealed_copy_waits()) {
                return Ok(state);
            }
            drop(state);
            if !std::mem::replace(&mut waited, true) {
                self.rotations_waited_for_write_out.fetch_add(1, Ordering::Relaxed);
            }
            self.write_out_sealed_pages()?;
        }
    }

    /// Writes out the sealed copy's pages that no flush has taken (a flush that took them holds
    /// the write-out lock until they are written and the copy retired).
    fn write_out_sealed_pages(&self) -> Result<()> {
        let _write_out = self.write_out.lock();
        let sealed = self.take_sealed_pages(&mut self.state.lock());
        sealed.map_or(Ok(()), |sealed| self.write_out_sealed(sealed))
    }

    fn take_sealed_pages(&self, state: &mut AppendState<P>) -> Option<SealedPages> {
        self.sealed_pages_waiting.store(false, Ordering::Relaxed);
        state.sealed_unwritten.take()
    }

    fn block_base(&self, slot: u32) -> u64 {
        slot as u64 * self.block_bytes
    }

    /// The most record bytes one batch may take: a block's, less its header.
    pub(crate) fn batch_bytes_max(&self) -> usize {
        (self.block_bytes as usize) - BLOCK_HEADER_BYTES
    }

    /// Appends `records` contiguously in one block (a batch never spans blocks), queues
    /// `publication`, and returns where each record went and the bytes written (the records back
    /// to back, in order). Nothing is written when it fails.
    pub(crate) fn append(
        &self,
        records: &[NewRecord<'_>],
        batch: bool,
        writer: Writer,
        publication: impl FnOnce(&[Appended]) -> P,
    ) -> Result<(Vec<Appended>, Vec<u8>)> {
        let total: usize = records.iter().map(|r| record::record_bytes(r.key.len(), r.value.len())).sum();
        let capacity = self.batch_bytes_max();
        if total > capacity {
            return Err(EngineError::BatchTooLarge { len_bytes: total, limit_bytes: capacity });
        }
        // Taken before the append lock: an allocation may fault in fresh pages (a huge page is
        // zeroed whole), and every appender would wait for it.
        let mut encoded = self.spare_encoding_buffers.lock().pop().unwrap_or_default();
        encoded.reserve(total);
        let mut appended = Vec::with_capacity(records.len());
        let must_rotate = |state: &AppendState<P>| state.write_offset + total as u64 > self.block_bytes || state.active_slot == u32::MAX;
        let mut state = self.lock_ready_to_rotate(must_rotate)?;
        if must_rotate(&state) {
            self.rotate(&mut state, writer)?;
        }
        let start_offset = state.write_offset;
        for (position_in_batch, new) in records.iter().enumerate() {
            let is_last = position_in_batch + 1 == records.len();
            let lsn = new.lsn.unwrap_or_else(|| {
                let lsn = state.next_lsn;
                state.next_lsn += 1;
                lsn
            });
            let mut flags = 0;
            if new.tombstone {
                flags |= record::FLAG_TOMBSTONE;
            }
            if new.part {
                flags |= record::FLAG_PART;
            }
            if batch {
                flags |= record::FLAG_BATCH_MEMBER;
                if is_last {
                    flags |= record::FLAG_BATCH_END;
                }
            }
            let header = RecordHeader {
                value_len: new.value.len() as u32,
                key_len: new.key.len() as u16,
                flags,
                block_seq_low: state.active_seq as u32,
                lsn,
                expiry_unix_ms: new.expiry_unix_ms,
                generation: new.generation,
                batch_len: if batch && is_last { records.len() as u32 } else { 0 },
            };
            let offset = start_offset + encoded.len() as u64;
            record::encode(&header, new.key, new.value, &mut encoded);
            let record_bytes = (start_offset + encoded.len() as u64 - offset) as usize;
            appended.push(Appended { location: Location::new(state.active_slot, offset, record_bytes), lsn, record_bytes });
        }
        debug_assert_eq!(encoded.len(), total);
        self.write_into_active(&mut state, &encoded)?;
        self.bytes_appended.fetch_add(total as u64, Ordering::Relaxed);
        let queued = publication(&appended);
        state.publications.push(queued);
        Ok((appended, encoded))
    }

    fn write_into_active(&self, state: &mut AppendState<P>, bytes: &[u8]) -> Result<()> {
        let offset = state.write_offset;
        if let Some(copies) = &self.copies {
            let mut copies = copies.write();
            debug_assert_eq!(copies.active_slot, state.active_slot);
            copies.active.as_mut_slice()[offset as usize..offset as usize + bytes.len()].copy_from_slice(bytes);
        } else {
            let start = self.block_base(state.active_slot) + offset;
            self.medium.write_at(start, bytes)?;
            Self::note_unflushed(&mut state.unflushed_ranges, start, start + bytes.len() as u64);
        }
        state.write_offset += bytes.len() as u64;
        Ok(())
    }

    fn note_unflushed(ranges: &mut Vec<(u64, u64)>, start: u64, end: u64) {
        match ranges.last_mut() {
            Some(last) if last.1 == start => last.1 = end,
            _ => ranges.push((start, end)),
        }
    }

    /// Seals the active block and opens a new one in the lowest free slot.
    fn rotate(&self, state: &mut AppendState<P>, writer: Writer) -> Result<()> {
        if state.free_slots.len() <= writer.reserved_blocks() {
            return Err(EngineError::DataFull {
                namespace: String::new(),
                capacity_bytes: self.slots.len() as u64 * self.block_bytes,
            });
        }
        let slot = *state.free_slots.first().expect("checked above");
        let header = BlockHeader {
            slot,
            seq: state.next_seq,
            block_bytes: self.block_bytes,
            fingerprint: self.fingerprint,
            created_unix_ms: crate::now_unix_ms(),
        };
        if let Some(copies) = &self.copies {
            // The first block's copy is still the zeroed one the log opened with.
            let blank = (state.active_slot != u32::MAX)
                .then(|| self.spare_copy.lock().take().unwrap_or_else(|| AlignedBuffer::zeroed(self.block_bytes as usize)));
            // One write lock for the swap and the new slot: a reader between the two would
            // find the sealed block's slot naming the recycled copy, an earlier block's bytes.
            let mut copies = copies.write();
            if let Some(blank) = blank {
                self.seal_active_copy(state, &mut copies, blank);
            }
            copies.active.as_mut_slice()[..BLOCK_HEADER_BYTES].copy_from_slice(&header.encode());
            copies.active_slot = slot;
        } else {
            let start = self.block_base(slot);
            self.medium.write_at(start, &header.encode())?;
            Self::note_unflushed(&mut state.unflushed_ranges, start, start + BLOCK_HEADER_BYTES as u64);
        }
        state.free_slots.remove(&slot);
        self.free_blocks.store(state.free_slots.len(), Ordering::Relaxed);
        self.slots[slot as usize].seq.store(header.seq, Ordering::Release);
        self.slots[slot as usize].live_bytes.store(0, Ordering::Relaxed);
        state.next_seq += 1;
        state.active_slot = slot;
        state.active_seq = header.seq;
        state.write_offset = BLOCK_HEADER_BYTES as u64;
        state.written_out_offset = 0;
        Ok(())
    }

    /// Swaps the active block's copy for `blank` (recycled) and keeps the old copy as the sealed
    /// one, whose pages not yet on the medium the next flush writes out (`take_flush_work`; a
    /// committer is woken at each seal, see `take_seal_notice`); its records are read from it
    /// until then. The caller made sure no sealed copy is left (`lock_ready_to_rotate`), and
    /// names the new active slot before it lets go of `copies`.
    fn seal_active_copy(&self, state: &mut AppendState<P>, copies: &mut BlockCopies, blank: AlignedBuffer) {
        assert!(copies.sealed.is_none(), "one sealed copy at most");
        assert_eq!(copies.active_slot, state.active_slot);
        let mut old = std::mem::replace(&mut copies.active, blank);
        // A block filled to its last byte may have been written out whole already: its copy is
        // still sealed, for the flush to recycle, with nothing to write.
        let (start, end) = self.unwritten_page_range(state);
        old.as_mut_slice()[state.write_offset as usize..end as usize].fill(0);
        let image = Arc::new(old);
        let block_base = self.block_base(state.active_slot);
        copies.sealed = Some((state.active_slot, Arc::clone(&image)));
        state.written_out_offset = state.write_offset;
        state.sealed_unwritten = Some(SealedPages { block_base, start: block_base + start, end: block_base + end, image });
        self.sealed_pages_waiting.store(true, Ordering::Relaxed);
        self.seal_unannounced.store(true, Ordering::Relaxed);
    }

    /// Whether a block was sealed with pages to write out since the last call: the caller wakes
    /// a committer, whose flush writes them (`sealed_pages_waiting`).
    pub(crate) fn take_seal_notice(&self) -> bool {
        self.seal_unannounced.load(Ordering::Relaxed) && self.seal_unannounced.swap(false, Ordering::Relaxed)
    }

    /// A sealed block's last pages wait for a flush to write them out.
    pub(crate) fn sealed_pages_waiting(&self) -> bool {
        self.sealed_pages_waiting.load(Ordering::Relaxed)
    }

    /// Takes back the bytes an `append` answered, once its caller is done with them, for a later
    /// append to encode into (up to `SPARE_ENCODING_BUFFERS_MAX` buffers of at most
    /// `SPARE_ENCODING_BUFFER_BYTES_MAX`).
    pub(crate) fn recycle_encoded(&self, mut encoded: Vec<u8>) {
        if encoded.capacity() > SPARE_ENCODING_BUFFER_BYTES_MAX {
            return;
        }
        encoded.clear();
        let mut spare = self.spare_encoding_buffers.lock();
        if spare.len() < SPARE_ENCODING_BUFFERS_MAX {
            spare.push(encoded);
        }
    }

    /// Takes back a flush's publications once published: they are dropped here (off the append
    /// lock) and their queue's allocation kept for a later flush.
    pub(crate) fn recycle_publications(&self, mut publications: Vec<P>) {
        publications.clear();
        let mut spare = self.spare_publications.lock();
        if publications.capacity() > spare.capacity() {
            *spare = publications;
        }
    }

    /// The queued publications alone, without writing anything out: what a poisoned namespace
    /// withdraws.
    pub(crate) fn take_publications(&self) -> Vec<P> {
        std::mem::take(&mut self.state.lock().publications)
    }

    /// Takes what the next flush must make durable: everything appended so far. For buffered media
    /// the changed pages are copied under the append lock and written out after it is released,
    /// with the sealed copy's pages, under the write-out lock, which is taken before the append
    /// lock: no other write-out can come between a copy and its write, so an older copy of a
    /// page never overwrites a newer one, and appends continue during the I/O (they never wait
    /// for the write-out lock). The work is returned even when the write fails, so that the
    /// caller can withdraw its publications.
    pub(crate) fn take_flush_work(&self) -> (FlushWork<P>, Result<()>) {
        let spare_publications = std::mem::take(&mut *self.spare_publications.lock());
        let mut write_out = self.write_out.lock();
        let mut state = self.state.lock();
        let upto_position = position(state.active_seq, state.write_offset);
        let publications = std::mem::replace(&mut state.publications, spare_publications);
        let ranges = std::mem::take(&mut state.unflushed_ranges);
        let mut written = self.medium.write_back().map_err(EngineError::from);
        let sealed = if written.is_ok() { self.take_sealed_pages(&mut state) } else { None };
        let pages = self.copies.as_ref().and_then(|copies| {
            let staging = write_out.get_or_insert_with(|| AlignedBuffer::zeroed(self.block_bytes as usize));
            (state.active_slot != u32::MAX && state.write_offset > state.written_out_offset)
                .then(|| self.take_changed_pages(&mut state, &copies.read(), staging))
        });
        drop(state);
        if let Some(sealed) = sealed {
            written = written.and_then(|()| self.write_out_sealed(sealed));
        }
        if let (Some((start, len)), Some(staging), true) = (pages, write_out.as_ref(), written.is_ok()) {
            written = self.medium.write_at(start, &staging.as_slice()[..len]).map_err(EngineError::from);
        }
        drop(write_out);
        (FlushWork { upto_position, publications, ranges }, written)
    }

    /// Writes a sealed block's last pages out (the caller holds the write-out lock), stops
    /// reading its records from the copy and recycles it. After a failed write the pages go
    /// back, untaken: their records are still read from the copy, and the next rotation tries
    /// the write again (`lock_ready_to_rotate`) and fails as it did.
    fn write_out_sealed(&self, sealed: SealedPages) -> Result<()> {
        let written = if sealed.start < sealed.end { self.medium.write_at(sealed.start, sealed.bytes()) } else { Ok(()) };
        if let Err(error) = written {
            self.state.lock().sealed_unwritten = Some(sealed);
            self.sealed_pages_waiting.store(true, Ordering::Relaxed);
            return Err(error.into());
        }
        self.retire_sealed_copy(&sealed);
        self.recycle_copy(sealed);
        Ok(())
    }

    fn retire_sealed_copy(&self, sealed: &SealedPages) {
        let copies = self.copies.as_ref().expect("only buffered media seal copies");
        let mut copies = copies.write();
        assert!(
            copies.sealed.as_ref().is_some_and(|(_, image)| Arc::ptr_eq(image, &sealed.image)),
            "a sealed copy stays until its pages are written out"
        );
        copies.sealed = None;
    }

    /// Keeps a written-out sealed copy for the next rotation.
    fn recycle_copy(&self, sealed: SealedPages) {
        let image = Arc::try_unwrap(sealed.image).ok().expect("a retired sealed copy is referenced by its pages alone");
        self.spare_copy.lock().get_or_insert(image);
    }

    /// The pages of the active block changed since the last write-out (the partly filled last
    /// one whole), as offsets in the block.
    fn unwritten_page_range(&self, state: &AppendState<P>) -> (u64, u64) {
        let start = state.written_out_offset / PAGE_BYTES * PAGE_BYTES;
        let end = state.write_offset.next_multiple_of(PAGE_BYTES).min(self.block_bytes);
        (start, end.max(start))
    }

    /// Copies the pages of the active block changed since the last write-out to the start of
    /// `staging`, with zeros past the write offset, and marks them written out; returns their
    /// medium offset and length.
    fn take_changed_pages(&self, state: &mut AppendState<P>, copies: &BlockCopies, staging: &mut AlignedBuffer) -> (u64, usize) {
        let (start, end) = self.unwritten_page_range(state);
        state.written_out_offset = state.write_offset;
        let (len, written) = ((end - start) as usize, (state.write_offset - start) as usize);
        let staged = &mut staging.as_mut_slice()[..len];
        staged[..written].copy_from_slice(&copies.active.as_slice()[start as usize..state.write_offset as usize]);
        staged[written..].fill(0);
        (self.block_base(state.active_slot) + start, len)
    }

    /// Makes the bytes of `work` durable.
    pub(crate) fn persist(&self, work: &FlushWork<P>) -> Result<()> {
        if self.buffered {
            self.medium.persist(0, self.medium.len_bytes())?;
        } else {
            for &(start, end) in &work.ranges {
                self.medium.persist(start, end - start)?;
            }
        }
        Ok(())
    }

    /// Reads the whole record at `location` into `out` (without verifying it).
    pub(crate) fn read_record(&self, location: Location, out: &mut Vec<u8>) -> Result<()> {
        out.resize(self.first_read_bytes(location)?, 0);
        self.read_block_bytes(location.slot(), location.offset(), out)?;
        if location.record_bytes().is_none() {
            let full = self.full_record_bytes(location, out)?;
            if full > out.len() {
                let already = out.len();
                out.resize(full, 0);
                self.read_block_bytes(location.slot(), location.offset() + already as u64, &mut out[already..])?;
            }
            out.truncate(full);
        }
        Ok(())
    }

    /// How many bytes a read of the record at `location` starts with: the record's length when
    /// the location carries it, else `RECORD_READ_AHEAD_BYTES` (its header tells the rest).
    fn first_read_bytes(&self, location: Location) -> Result<usize> {
        // Locations come from media: a damaged one is an operating error, not a bug.
        let in_range = location.is_record()
            && (location.slot() as usize) < self.slots.len()
            && location.offset() + RECORD_HEADER_BYTES as u64 <= self.block_bytes;
        if !in_range {
            return Err(corrupt(location, "location outside the record log"));
        }
        let block_end = self.block_bytes - location.offset();
        match location.record_bytes() {
            Some(bytes) if bytes as u64 > block_end => Err(corrupt(location, "record runs past its block")),
            Some(bytes) => Ok(bytes),
            None => Ok(RECORD_READ_AHEAD_BYTES.min(block_end as usize)),
        }
    }

    /// The length of the record at `location` whose first bytes are `first`, from its header.
    fn full_record_bytes(&self, location: Location, first: &[u8]) -> Result<usize> {
        let header = decode_header(first).map_err(|_| corrupt(location, "bad header"))?;
        let full = header.record_bytes();
        if full as u64 > self.block_bytes - location.offset() {
            return Err(corrupt(location, "record runs past its block"));
        }
        Ok(full)
    }

    /// The device read that fetches the record at `location` (`token` names it), or None when
    /// the record is read from memory: a block copy (active or sealed), or a medium without a device
    /// read queue. Records outside the active block are wholly on the medium, and stay there
    /// unchanged while their block keeps its sequence number.
    pub(crate) fn device_read_of(&self, location: Location, token: u64) -> Result<Option<DeviceRead>> {
        let len = self.first_read_bytes(location)?;
        // Lengths a location carries, and the read-ahead, stay far below the queue's limit.
        assert!(len <= DEVICE_READ_BYTES_MAX, "a first read of {len} bytes");
        let in_copy = self.copies.as_ref().is_some_and(|copies| copies.read().copy_of(location.slot()).is_some());
        if self.medium.device_reads().is_none() || in_copy {
            return Ok(None);
        }
        Ok(Some(DeviceRead { offset: self.block_base(location.slot()) + location.offset(), len, token }))
    }

    /// What `bytes`, read by a `device_read_of(location)` when the block's sequence number was
    /// `seq`, turned out to hold: the verified record; nothing, when the block was reused since
    /// (as `read_verified_unpinned`); or the first bytes of a record longer than the read, to be
    /// read whole (`device_read_of_whole`).
    pub(crate) fn finish_device_read(&self, location: Location, seq: u64, mut bytes: Vec<u8>) -> Result<DeviceReadOutcome> {
        let verified = (|| {
            if location.record_bytes().is_none() {
                let full = self.full_record_bytes(location, &bytes)?;
                if full > bytes.len() {
                    return Ok(DeviceReadOutcome::Longer { record_bytes: full });
                }
                bytes.truncate(full);
            }
            record::decode(&bytes, seq as u32).map_err(|error| corrupt(location, &format!("{error:?}")))?;
            Ok(DeviceReadOutcome::Record(std::mem::take(&mut bytes)))
        })();
        match verified {
            Err(EngineError::Corrupt { .. }) if self.block_seq(location.slot()) != seq => Ok(DeviceReadOutcome::Gone),
            other => other,
        }
    }

    /// The device read of the whole `record_bytes` at `location`, after a first read found the
    /// record longer (`DeviceReadOutcome::Longer`); None when that is more than one device read
    /// takes (the command that needs the record reads it).
    pub(crate) fn device_read_of_whole(&self, location: Location, record_bytes: usize, token: u64) -> Option<DeviceRead> {
        (record_bytes <= DEVICE_READ_BYTES_MAX).then(|| DeviceRead { offset: self.block_base(location.slot()) + location.offset(), len: record_bytes, token })
    }

    /// Starts loading the record at `location` from a memory medium (see `Medium::prefetch`).
    pub(crate) fn prefetch_record(&self, location: Location) {
        let bytes = location.record_bytes().unwrap_or(RECORD_READ_AHEAD_BYTES);
        self.medium.prefetch(self.block_base(location.slot()) + location.offset(), bytes as u64);
    }

    fn read_block_bytes(&self, slot: u32, offset: u64, out: &mut [u8]) -> Result<()> {
        if let Some(copies) = &self.copies {
            let copies = copies.read();
            if let Some(copy) = copies.copy_of(slot) {
                out.copy_from_slice(&copy.as_slice()[offset as usize..offset as usize + out.len()]);
                return Ok(());
            }
        }
        Ok(self.medium.read_at(self.block_base(slot) + offset, out)?)
    }

    /// Reads and verifies the record at `location`.
    pub(crate) fn read_verified<'a>(&self, location: Location, out: &'a mut Vec<u8>) -> Result<RecordView<'a>> {
        self.read_record(location, out)?;
        let seq = self.block_seq(location.slot());
        record::decode(out, seq as u32).map_err(|error| corrupt(location, &format!("{error:?}")))
    }

    /// Reads and verifies the record at `location` of the block whose sequence number was `seq`
    /// when its index entry was looked up, with nothing keeping the block in use meanwhile:
    /// None when the block was freed or reused since (the bytes may then be its next use's).
    /// Records never change while their block keeps its sequence number, and each carries that
    /// number under its checksum, so a record that verifies is the one the entry named.
    pub(crate) fn read_verified_unpinned(&self, location: Location, seq: u64, out: &mut Vec<u8>) -> Result<Option<()>> {
        let read = self.read_record(location, out).and_then(|()| {
            record::decode(out, seq as u32).map(drop).map_err(|error| corrupt(location, &format!("{error:?}")))
        });
        match read {
            Err(EngineError::Corrupt { .. }) if self.block_seq(location.slot()) != seq => Ok(None),
            other => other.map(Some),
        }
    }

    /// Reads block `slot` from `from_offset` to the end into `buffer` (for recovery) and returns
    /// where in `buffer` the byte at `from_offset` is. The read covers whole pages into a
    /// page-aligned window of `buffer`, so a block file with direct I/O reads straight into it,
    /// not through a bounce buffer of its own (a block's worth of memory more).
    pub(crate) fn read_block_from(&self, slot: u32, from_offset: u64, buffer: &mut Vec<u8>) -> Result<usize> {
        assert!(from_offset <= self.block_bytes, "a block is read from inside it or from its end (nothing)");
        let mut read = |offset, out: &mut [u8]| self.read_block_bytes(slot, offset, out);
        let (start, end) = read_page_window(buffer, from_offset, self.block_bytes, &mut read)?;
        buffer.truncate(end);
        Ok(start)
    }

    /// Walks the records of block `slot` (sequence number `seq`) past damage, a window at a time
    /// through `buffer`, which keeps at most a window's bytes: see `block_walk`.
    pub(crate) fn walk_block<T>(
        &self,
        slot: u32,
        seq: u64,
        buffer: &mut Vec<u8>,
        ahead: impl FnMut(&RecordView<'_>) -> T,
        visit: impl FnMut(u64, &RecordView<'_>, T) -> Result<bool>,
    ) -> Result<Walked> {
        let walk = BlockWalk {
            records_start: BLOCK_HEADER_BYTES as u64,
            block_bytes: self.block_bytes,
            seq,
            window_bytes: BLOCK_WALK_WINDOW_BYTES.min(self.block_bytes),
            buffer,
            read: |offset: u64, out: &mut [u8]| {
                assert!(offset.is_multiple_of(PAGE_BYTES) && out.len().is_multiple_of(PAGE_BYTES as usize), "windows are whole pages (no bounce buffer)");
                self.read_block_bytes(slot, offset, out)
            },
        };
        walk.run(ahead, visit)
    }

    /// Frees a block whose live records have all been moved and made durable: its start is
    /// zeroed durably, so no later recovery sees its stale records. The first record's header is
    /// zeroed (durably) before the block's, so a zeroed block header over a record is always
    /// damage (see `open`), never a freed block.
    pub(crate) fn free_block(&self, slot: u32) -> Result<()> {
        assert_ne!(self.state.lock().active_slot, slot, "the active block is never freed");
        assert!(
            self.copies.as_ref().is_none_or(|copies| copies.read().copy_of(slot).is_none()),
            "a block is freed only once its records are published, so after its pages were written out"
        );
        let base = self.block_base(slot);
        if self.buffered {
            // One page, written whole.
            self.medium.write_at(base, &vec![0u8; PAGE_BYTES as usize])?;
            self.medium.persist(base, PAGE_BYTES)?;
        } else {
            let first_record = base + BLOCK_HEADER_BYTES as u64;
            self.medium.write_at(first_record, &[0u8; RECORD_HEADER_BYTES])?;
            self.medium.persist(first_record, RECORD_HEADER_BYTES as u64)?;
            self.medium.write_at(base, &[0u8; BLOCK_HEADER_BYTES])?;
            self.medium.persist(base, BLOCK_HEADER_BYTES as u64)?;
        }
        self.slots[slot as usize].seq.store(0, Ordering::Release);
        self.slots[slot as usize].live_bytes.store(0, Ordering::Relaxed);
        let mut state = self.state.lock();
        state.free_slots.insert(slot);
        self.free_blocks.store(state.free_slots.len(), Ordering::Relaxed);
        Ok(())
    }
}

/// Bytes at the start of a block that are all zero exactly when the block is free: its header
/// and its first record's header.
pub(crate) const BLOCK_START_BYTES: usize = BLOCK_HEADER_BYTES + RECORD_HEADER_BYTES;
const _: () = assert!(BLOCK_START_BYTES as u64 <= PAGE_BYTES, "freeing a buffered block zeroes one page");

/// Whether `start` (a block's first BLOCK_START_BYTES) is that of a free block.
pub(crate) fn is_blank_block_start(start: &[u8]) -> bool {
    assert_eq!(start.len(), BLOCK_START_BYTES);
    start.iter().all(|&byte| byte == 0)
}

/// What starts a block whose header is damaged.
enum FirstRecord {
    /// Zeroes: the block holds no record.
    Absent,
    /// A valid record, of the block numbered `seq`.
    Valid { seq: u64 },
    /// Anything else: a damaged record, another use's leftovers, or an implausible sequence number.
    Unrecognised,
}

/// Every slot's start, in slot order: headers of blocks in use, blank slots, and damaged slots.
fn scan_block_starts(
    medium: &dyn Medium,
    block_bytes: u64,
    slot_count: u64,
    fingerprint: u64,
) -> Result<(Vec<BlockHeader>, BTreeSet<u32>, Vec<u32>)> {
    let (mut in_use, mut free_slots, mut damaged) = (Vec::new(), BTreeSet::new(), Vec::new());
    let mut start_bytes = [0u8; BLOCK_START_BYTES];
    for slot in 0..slot_count as u32 {
        medium.read_at(slot as u64 * block_bytes, &mut start_bytes)?;
        match BlockHeader::decode(&start_bytes[..BLOCK_HEADER_BYTES], slot, block_bytes, fingerprint) {
            Some(header) => in_use.push(header),
            None if is_blank_block_start(&start_bytes) => {
                free_slots.insert(slot);
            }
            // A zeroed header over a record is damage too: freeing zeroes the first record's
            // header before the block's (see `free_block`).
            None => damaged.push(slot),
        }
    }
    Ok((in_use, free_slots, damaged))
}

/// How a block whose header is damaged or zeroed (with a record after it) is told from garbage:
/// each record carries the low 32 bits of its block's sequence number under its checksum; the
/// high bits are those of the largest plausible number, at most `seq_bound`.
fn first_record(medium: &dyn Medium, slot: u32, block_bytes: u64, seq_bound: u64) -> Result<FirstRecord> {
    let base = slot as u64 * block_bytes + BLOCK_HEADER_BYTES as u64;
    let room = (block_bytes - BLOCK_HEADER_BYTES as u64) as usize;
    let mut bytes = vec![0u8; RECORD_READ_AHEAD_BYTES.min(room)];
    medium.read_at(base, &mut bytes)?;
    if bytes[..RECORD_HEADER_BYTES].iter().all(|&byte| byte == 0) {
        return Ok(FirstRecord::Absent);
    }
    let Ok(header) = decode_header(&bytes) else { return Ok(FirstRecord::Unrecognised) };
    let Some(seq) = seq_with_low_bits(header.block_seq_low, seq_bound) else { return Ok(FirstRecord::Unrecognised) };
    if header.record_bytes() > room {
        return Ok(FirstRecord::Unrecognised);
    }
    if header.record_bytes() > bytes.len() {
        bytes.resize(header.record_bytes(), 0);
        medium.read_at(base, &mut bytes)?;
    }
    Ok(if record::decode(&bytes, seq as u32).is_ok() { FirstRecord::Valid { seq } } else { FirstRecord::Unrecognised })
}

/// Writes `header` over a damaged one, durably, in as many bytes as the medium writes at once.
fn rewrite_header(medium: &dyn Medium, header: &BlockHeader) -> Result<()> {
    let base = header.slot as u64 * header.block_bytes;
    let mut bytes = vec![0u8; BLOCK_HEADER_BYTES.next_multiple_of(medium.write_alignment_bytes().max(1) as usize)];
    medium.read_at(base, &mut bytes)?;
    bytes[..BLOCK_HEADER_BYTES].copy_from_slice(&header.encode());
    medium.write_at(base, &bytes)?;
    Ok(medium.persist(base, bytes.len() as u64)?)
}

/// The largest block sequence number in 1..=bound whose low 32 bits are `low`.
fn seq_with_low_bits(low: u32, bound: u64) -> Option<u64> {
    let candidate = (bound & !u64::from(u32::MAX)) | u64::from(low);
    let seq = if candidate > bound { candidate.checked_sub(1 << 32)? } else { candidate };
    (seq > 0).then_some(seq)
}

/// What a device read of a record's first bytes turned out to hold (`finish_device_read`).
pub(crate) enum DeviceReadOutcome {
    /// The verified record.
    Record(Vec<u8>),
    /// The block was freed or reused since the lookup: not the record that was looked for.
    Gone,
    /// A record longer than the read, of this many bytes.
    Longer { record_bytes: usize },
}

fn corrupt(location: Location, detail: &str) -> EngineError {
    EngineError::Corrupt {
        what: format!("record at block {} offset {}", location.slot(), location.offset()),
        detail: detail.to_string(),
    }
}

/// What a walk over a block image found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Walked {
    /// The end offset (relative to the image start) of the last valid record.
    pub(crate) end: u64,
    /// Bytes of invalid records skipped before a later valid one (damage, or a torn write).
    pub(crate) skipped_bytes: u64,
}

/// Walks the records of a block image from its start. At an invalid record the walk ends, or,
/// when `past_damage`, goes on at the next valid record of the block if there is one: every
/// record carries its checksum and its block's sequence number, so one damaged record does not
/// hide the records after it.
pub(crate) fn walk_records<'image>(
    image: &'image [u8],
    block_seq: u64,
    past_damage: bool,
    mut visit: impl FnMut(u64, &RecordView<'image>),
) -> Walked {
    let mut offset = 0usize;
    let mut skipped_bytes = 0;
    while offset + RECORD_HEADER_BYTES <= image.len() {
        match record::decode(&image[offset..], block_seq as u32) {
            // A record ends with its padding: one whose padding runs past the image is cut short.
            Ok(view) if view.header.record_bytes() <= image.len() - offset => {
                let size = view.header.record_bytes();
                visit(offset as u64, &view);
                offset += size;
            }
            Err(_) if past_damage => match next_valid_record(image, offset + RECORD_ALIGN_BYTES, block_seq as u32) {
                Some(next) => {
                    skipped_bytes += (next - offset) as u64;
                    offset = next;
                }
                None => break,
            },
            _ => break,
        }
    }
    Walked { end: offset as u64, skipped_bytes }
}

/// The first offset at or after `from` (record-aligned) holding a valid record of this block.
fn next_valid_record(image: &[u8], from: usize, block_seq_low: u32) -> Option<usize> {
    let last = image.len().checked_sub(RECORD_HEADER_BYTES)?;
    (from..=last).step_by(RECORD_ALIGN_BYTES).find(|&at| {
        // Cheap filter first: zeroes and an earlier use's leftovers fail it.
        u32_at(image, at + BLOCK_SEQ_OFFSET) == block_seq_low && record::decode(&image[at..], block_seq_low).is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sequence_number_is_rebuilt_from_its_low_bits_below_the_bound() {
        assert_eq!(seq_with_low_bits(7, 20), Some(7));
        assert_eq!(seq_with_low_bits(21, 20), None, "above the bound, no earlier number has those bits");
        assert_eq!(seq_with_low_bits(0, 20), None, "sequence numbers start at 1");
        let bound = (3 << 32) + 10;
        assert_eq!(seq_with_low_bits(5, bound), Some((3 << 32) + 5));
        assert_eq!(seq_with_low_bits(11, bound), Some((2 << 32) + 11));
    }

    const TEST_BLOCK_BYTES: u64 = 64 * 1024;

    /// A log on a simulated ssd file; the store must outlive it.
    fn buffered_log() -> (hybridkv_media::sim::SimStore, RecordLog<()>) {
        use hybridkv_media::{sim::SimStore, MediaProvider, Tier};
        let store = SimStore::new(5);
        let medium = store.open("data", Tier::Ssd, 8 * TEST_BLOCK_BYTES).unwrap().medium;
        let (log, in_use) = RecordLog::open(medium, TEST_BLOCK_BYTES, 7).unwrap();
        assert!(in_use.is_empty() && log.buffered);
        log.start_new_block().unwrap();
        (store, log)
    }

    /// Appends 1 KiB records until one lands in a new block; returns the last record of the
    /// block it left, with its bytes.
    fn append_until_rotation(log: &RecordLog<()>) -> (Location, Vec<u8>) {
        append_until_rotation_with(log, |_| ())
    }

    /// `append_until_rotation`, telling `appended` each record's location.
    fn append_until_rotation_with(log: &RecordLog<()>, appended_at: impl Fn(Location)) -> (Location, Vec<u8>) {
        let value = vec![7u8; 1024];
        let mut last: Option<(Location, Vec<u8>)> = None;
        loop {
            let record = NewRecord { key: b"key", value: &value, tombstone: false, part: false, expiry_unix_ms: 0, generation: 1, lsn: None };
            let (appended, encoded) = log.append(std::slice::from_ref(&record), false, Writer::Client, |_| ()).unwrap();
            appended_at(appended[0].location);
            match last {
                Some((location, _)) if location.slot() != appended[0].location.slot() => return last.unwrap(),
                _ => last = Some((appended[0].location, encoded)),
            }
        }
    }

    fn on_medium(log: &RecordLog<()>, location: Location, len: usize) -> Vec<u8> {
        let mut bytes = vec![0u8; len];
        log.medium.read_at(log.block_base(location.slot()) + location.offset(), &mut bytes).unwrap();
        bytes
    }

    #[test]
    fn a_sealed_block_is_read_from_its_copy_until_the_next_flush_writes_its_last_pages() {
        let (_store, log) = buffered_log();
        let (location, bytes) = append_until_rotation(&log);
        assert_ne!(on_medium(&log, location, bytes.len()), bytes, "rotation wrote nothing out");
        assert!(log.sealed_pages_waiting());
        assert!(log.take_seal_notice() && !log.take_seal_notice(), "one notice per seal");
        let mut read = Vec::new();
        assert_eq!(log.read_verified(location, &mut read).unwrap().value, &[7u8; 1024][..], "read from the sealed copy");
        let (_work, written) = log.take_flush_work();
        written.unwrap();
        assert!(!log.sealed_pages_waiting());
        assert_eq!(on_medium(&log, location, bytes.len()), bytes, "the flush wrote the sealed block's last pages");
        assert!(log.copies.as_ref().unwrap().read().sealed.is_none(), "the copy is retired");
        assert!(log.spare_copy.lock().is_some(), "and kept for the next rotation");
        assert_eq!(log.read_verified(location, &mut read).unwrap().value, &[7u8; 1024][..], "read from the medium");
    }

    #[test]
    fn a_rotation_writes_out_the_sealed_block_no_flush_has_taken() {
        let (_store, log) = buffered_log();
        let (first, first_bytes) = append_until_rotation(&log);
        let (second, second_bytes) = append_until_rotation(&log);
        assert_eq!(on_medium(&log, first, first_bytes.len()), first_bytes, "the second rotation wrote the first sealed block");
        assert_ne!(on_medium(&log, second, second_bytes.len()), second_bytes, "and sealed the second");
        let copies = log.copies.as_ref().unwrap().read();
        assert_eq!(copies.sealed.as_ref().map(|(slot, _)| *slot), Some(second.slot()), "one sealed copy at most");
    }

    /// A recycled copy keeps an earlier block's bytes past the write offset; the pages written
    /// out of it, at a flush or at a seal, carry zeros there.
    #[test]
    fn pages_written_from_a_recycled_copy_carry_zeros_past_the_last_record() {
        let (_store, log) = buffered_log();
        append_until_rotation(&log);
        log.take_flush_work().1.unwrap();
        assert!(log.spare_copy.lock().is_some(), "the first block's copy is recycled");
        append_until_rotation(&log);
        let active_end = |log: &RecordLog<()>| {
            let state = log.state.lock();
            (state.active_slot, state.write_offset)
        };
        let page_tail_on_medium = |log: &RecordLog<()>, slot: u32, end: u64| {
            let mut tail = vec![0xAAu8; (end.next_multiple_of(PAGE_BYTES) - end) as usize];
            log.medium.read_at(log.block_base(slot) + end, &mut tail).unwrap();
            tail
        };
        let (slot, end) = active_end(&log);
        let stale_in_copy = log.copies.as_ref().unwrap().read().active.as_slice()[end as usize..].iter().any(|&byte| byte != 0);
        assert!(stale_in_copy, "the third block's copy is the first's, not zeroed");
        log.take_flush_work().1.unwrap();
        assert!(page_tail_on_medium(&log, slot, end).iter().all(|&byte| byte == 0), "a flushed page carries zeros past the write offset");
        let value = [3u8; 100];
        let record = NewRecord { key: b"key", value: &value, tombstone: false, part: false, expiry_unix_ms: 0, generation: 1, lsn: None };
        log.append(std::slice::from_ref(&record), false, Writer::Client, |_| ()).unwrap();
        let (slot, end) = active_end(&log);
        log.copies.as_ref().unwrap().write().active.as_mut_slice()[end as usize..].fill(0x55);
        let (last, last_bytes) = append_until_rotation(&log);
        assert_eq!(last.slot(), slot);
        log.take_flush_work().1.unwrap();
        let sealed_end = last.offset() + last_bytes.len() as u64;
        assert!(page_tail_on_medium(&log, slot, sealed_end).iter().all(|&byte| byte == 0), "a sealed block's last page carries zeros past its last record");
    }

    /// An append encodes into a buffer an earlier append's caller gave back; a buffer past the
    /// largest kept is dropped.
    #[test]
    fn an_appends_encoding_buffer_given_back_serves_the_next_append() {
        let (_store, log) = buffered_log();
        let value = vec![5u8; 4096];
        let record = NewRecord { key: b"key", value: &value, tombstone: false, part: false, expiry_unix_ms: 0, generation: 1, lsn: None };
        let (_, encoded) = log.append(std::slice::from_ref(&record), false, Writer::Client, |_| ()).unwrap();
        let (pointer, capacity) = (encoded.as_ptr(), encoded.capacity());
        log.recycle_encoded(encoded);
        let (_, again) = log.append(std::slice::from_ref(&record), false, Writer::Client, |_| ()).unwrap();
        assert_eq!((again.as_ptr(), again.capacity()), (pointer, capacity), "the same buffer");
        assert_eq!(again.len(), record::record_bytes(3, 4096), "holding this append's record alone");
        log.recycle_encoded(Vec::with_capacity(SPARE_ENCODING_BUFFER_BYTES_MAX + 1));
        assert!(log.spare_encoding_buffers.lock().is_empty(), "too large to keep");
        for _ in 0..SPARE_ENCODING_BUFFERS_MAX + 2 {
            log.recycle_encoded(Vec::with_capacity(16));
        }
        assert_eq!(log.spare_encoding_buffers.lock().len(), SPARE_ENCODING_BUFFERS_MAX);
    }

    /// A reader of the records just appended keeps finding them while appends rotate blocks
    /// and flushes recycle the sealed copies: the active copy changes hands with its slot.
    #[test]
    fn records_read_during_rotations_are_always_the_appended_ones() {
        use hybridkv_media::{sim::SimStore, MediaProvider, Tier};
        const ROTATIONS: usize = 300;
        let store = SimStore::new(5);
        let medium = store.open("data", Tier::Ssd, (ROTATIONS as u64 + 4) * TEST_BLOCK_BYTES).unwrap().medium;
        let (log, _) = RecordLog::<()>::open(medium, TEST_BLOCK_BYTES, 7).unwrap();
        log.start_new_block().unwrap();
        let latest = AtomicU64::new(0);
        let done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let reader = scope.spawn(|| {
                let mut out = Vec::new();
                let mut reads = 0u64;
                while !done.load(Ordering::Acquire) {
                    let location = Location(latest.load(Ordering::Acquire));
                    if location.0 != 0 {
                        let record = log.read_verified(location, &mut out).unwrap_or_else(|error| panic!("read {location:?}: {error}"));
                        assert_eq!(record.key, b"key");
                        reads += 1;
                    }
                }
                reads
            });
            for _ in 0..ROTATIONS {
                append_until_rotation_with(&log, |location| latest.store(location.0, Ordering::Release));
                log.take_flush_work().1.unwrap();
            }
            done.store(true, Ordering::Release);
            assert!(reader.join().unwrap() > 0);
        });
    }

    /// Appends push onto the flush's queue under the append lock: a queue given back after its
    /// publication is the next flush's queue, with its allocation, so appends do not grow one.
    #[test]
    fn a_published_queue_of_publications_keeps_its_allocation_for_the_next_flush() {
        let (_store, log) = buffered_log();
        let record = NewRecord { key: b"key", value: b"value", tombstone: false, part: false, expiry_unix_ms: 0, generation: 1, lsn: None };
        for _ in 0..1000 {
            log.append(std::slice::from_ref(&record), false, Writer::Client, |_| ()).unwrap();
        }
        let (work, written) = log.take_flush_work();
        written.unwrap();
        assert_eq!(work.publications.len(), 1000);
        let capacity = work.publications.capacity();
        log.recycle_publications(work.publications);
        let (work, written) = log.take_flush_work();
        written.unwrap();
        assert!(work.publications.is_empty());
        assert_eq!(log.state.lock().publications.capacity(), capacity, "the appends' queue is the recycled one");
    }

    #[test]
    fn only_zeroes_over_the_header_and_the_first_record_header_make_a_free_block() {
        let mut start = [0u8; BLOCK_START_BYTES];
        assert!(is_blank_block_start(&start));
        start[BLOCK_HEADER_BYTES] = 1;
        assert!(!is_blank_block_start(&start), "a record after a zeroed header is damage, not a free block");
    }
}
