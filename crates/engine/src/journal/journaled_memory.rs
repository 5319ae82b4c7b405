//! A DRAM record space whose every write is also appended to a journal; `persist` makes the
//! journal durable (group commit happens above, one `persist` per group). `checkpoint` writes the
//! blocks changed since the last one to the image, then deletes the journal segments it covers.
//!
//! Recovery: load the image, replay every journal segment from the image's first segment on, in
//! order (see `replay_segments` for damaged and torn entries); then start a new segment.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hybridkv_media::{MediaError, MediaProvider, Medium, MediumInfo, MmapRegion, Tier};
use parking_lot::Mutex;

use super::format::*;
use crate::error::{EngineError, Result};
use crate::log::{is_blank_block_start, BLOCK_START_BYTES};

/// Bytes of a segment to write, taken under the state lock.
struct WriteOut {
    segment: Arc<dyn Medium>,
    offset: u64,
    bytes: Vec<u8>,
}

/// What a write-out hands over to be synced.
struct ToSync {
    segment: Arc<dyn Medium>,
    segment_number: u64,
    /// Once `segment` is synced, it is durable up to here.
    written_end: u64,
    /// Segments rotated away from, not synced yet.
    older: Vec<Arc<dyn Medium>>,
}

struct JournalState {
    segment: Arc<dyn Medium>,
    segment_number: u64,
    /// Segment offset of `unwritten[0]`: page-aligned for block files, so the tail page is
    /// rewritten whole.
    unwritten_start: u64,
    unwritten: Vec<u8>,
    /// Where the next entry goes in the segment.
    write_offset: u64,
    /// The segment is durable up to here (a persist has synced it); 0 until the first persist
    /// after it became current, which also synced every segment before it.
    durable_end: u64,
    /// Segments written out but not yet made durable (rotated away from).
    unpersisted: Vec<Arc<dyn Medium>>,
    /// Lists of segments rotated away from that a sync has taken and not finished (or failed):
    /// while any is, `durable_end` does not advance, since a later segment's durable end tells
    /// replay that every older segment was synced.
    older_segments_syncing: usize,
    image_seq: u64,
}

pub(crate) struct JournaledMemory {
    info: MediumInfo,
    memory: MmapRegion,
    provider: Arc<dyn MediaProvider>,
    journal_tier: Tier,
    prefix: String,
    segment_bytes: u64,
    block_bytes: u64,
    image: Arc<dyn Medium>,
    state: Mutex<JournalState>,
    changed_blocks: Mutex<BTreeSet<u64>>,
    /// Serialises writes of journal bytes to segments (see `write_out`).
    write_out: Mutex<()>,
    journal_writes: AtomicU64,
}

impl JournaledMemory {
    /// Opens the record space of `namespace`: image plus journal replay when they exist.
    pub(crate) fn open(
        provider: Arc<dyn MediaProvider>,
        namespace: &str,
        journal_tier: Tier,
        data_bytes: u64,
        block_bytes: u64,
        segment_bytes: u64,
    ) -> Result<JournaledMemory> {
        let memory = MmapRegion::anonymous(data_bytes)?;
        let image = provider.open(&format!("{namespace}.image"), journal_tier, IMAGE_DATA_OFFSET + data_bytes)?.medium;
        let prefix = format!("{namespace}.journal.");
        let (image_seq, first_segment) = load_image(&*image, &memory, data_bytes, block_bytes)?;
        let mut replayed_blocks = BTreeSet::new();
        let mut target = ReplayTarget { memory: &memory, block_bytes, replayed_blocks: &mut replayed_blocks };
        let last_segment = replay_segments(&*provider, journal_tier, &prefix, first_segment, segment_bytes, &mut target)?;
        let segment_number = last_segment.max(first_segment.saturating_sub(1)) + 1;
        let segment = create_segment(&*provider, journal_tier, &prefix, segment_number, segment_bytes)?;
        let info = MediumInfo { tier: Tier::Dram, path: None, durability: segment.info().durability };
        let state = JournalState {
            segment,
            segment_number,
            unwritten_start: 0,
            unwritten: encode_segment_header(segment_number).to_vec(),
            write_offset: SEGMENT_HEADER_BYTES as u64,
            durable_end: 0,
            unpersisted: Vec::new(),
            older_segments_syncing: 0,
            image_seq,
        };
        let journaled = JournaledMemory {
            info,
            memory,
            provider,
            journal_tier,
            prefix,
            segment_bytes,
            block_bytes,
            image,
            state: Mutex::new(state),
            // Everything replayed must reach the image before the segments it came from can go;
            // the blocks loaded from the image alone are there already. (Marking every block
            // made the first checkpoint of a fresh 4 GiB namespace rewrite the whole image while
            // it served: 60% of the server's CPU under the messaging benchmark.)
            changed_blocks: Mutex::new(replayed_blocks),
            write_out: Mutex::new(()),
            journal_writes: AtomicU64::new(0),
        };
        // What replay applied may be bytes a process crash left written but never synced (the
        // entry in flight, or a whole unsynced tail): the index, checkpointed once open, would
        // then name records that a later power cut takes away. A checkpoint now makes the
        // replayed blocks durable in the image and deletes the segments they came from, torn
        // tails included, before anything can depend on them.
        if last_segment != 0 {
            journaled.checkpoint()?;
        }
        Ok(journaled)
    }

    pub(crate) fn journal_writes(&self) -> u64 {
        self.journal_writes.load(Ordering::Relaxed)
    }

    pub(crate) fn journal_info(&self) -> MediumInfo {
        self.state.lock().segment.info().clone()
    }

    pub(crate) fn journal_bytes(&self) -> u64 {
        let state = self.state.lock();
        let live_segments = self.provider.list(&self.prefix, self.journal_tier).map(|names| names.len() as u64).unwrap_or(1);
        (live_segments.saturating_sub(1)) * self.segment_bytes + state.write_offset
    }

    fn append_entry(&self, state: &mut JournalState, offset: u64, data: &[u8]) -> Result<(), MediaError> {
        let needed = entry_bytes(data.len()) as u64;
        assert!(
            needed + SEGMENT_HEADER_BYTES as u64 <= self.segment_bytes,
            "a journal entry larger than a segment; the configuration keeps writes below a block"
        );
        if state.write_offset + needed > self.segment_bytes {
            self.rotate(state)?;
        }
        encode_entry(state.segment_number, offset, state.durable_end, data, &mut state.unwritten);
        state.write_offset += needed;
        Ok(())
    }

    /// Takes the unwritten bytes of the current segment (padded to the write alignment) for a
    /// write-out, keeping the partly filled last page to be rewritten whole next time.
    fn take_unwritten(&self, state: &mut JournalState) -> Option<WriteOut> {
        if state.unwritten.is_empty() {
            return None;
        }
        let alignment = state.segment.write_alignment_bytes() as usize;
        let unwritten_len = state.unwritten.len();
        let keep_from = unwritten_len / alignment * alignment;
        let mut bytes = state.unwritten.clone();
        bytes.resize(unwritten_len.next_multiple_of(alignment), 0);
        let write_out = WriteOut { segment: state.segment.clone(), offset: state.unwritten_start, bytes };
        state.unwritten.drain(..keep_from);
        state.unwritten_start += keep_from as u64;
        self.journal_writes.fetch_add(1, Ordering::Relaxed);
        Some(write_out)
    }

    /// Hands everything appended so far to the journal's medium. The bytes are taken under the
    /// state lock and written under the write-out lock, taken before the state lock is released:
    /// no other write-out can come between, so an older copy of the tail page never overwrites a
    /// newer one, and appends continue during the I/O. Returns the segments still to be synced.
    /// `take_older`: the segments rotated away from are handed over too (to be synced).
    fn write_out(&self, take_older: bool) -> Result<ToSync, MediaError> {
        let mut state = self.state.lock();
        let work = self.take_unwritten(&mut state);
        let to_sync = ToSync {
            segment: state.segment.clone(),
            segment_number: state.segment_number,
            written_end: state.write_offset,
            older: if take_older { Self::take_older(&mut state) } else { Vec::new() },
        };
        let _write_out = self.write_out.lock();
        drop(state);
        if let Some(work) = work {
            work.segment.write_at(work.offset, &work.bytes)?;
        }
        Ok(to_sync)
    }

    fn take_older(state: &mut JournalState) -> Vec<Arc<dyn Medium>> {
        let older = std::mem::take(&mut state.unpersisted);
        state.older_segments_syncing += usize::from(!older.is_empty());
        older
    }

    /// Syncs segments taken by `take_older`. After a failure the count stays up: no later entry
    /// then claims a durability that is not there (and the namespace refuses writes anyway).
    fn sync_older(&self, older: Vec<Arc<dyn Medium>>) -> Result<(), MediaError> {
        for old in &older {
            old.persist(0, old.len_bytes())?;
        }
        if !older.is_empty() {
            self.state.lock().older_segments_syncing -= 1;
        }
        Ok(())
    }

    fn rotate(&self, state: &mut JournalState) -> Result<(), MediaError> {
        if let Some(work) = self.take_unwritten(state) {
            let _write_out = self.write_out.lock();
            work.segment.write_at(work.offset, &work.bytes)?;
        }
        let number = state.segment_number + 1;
        let segment = create_segment(&*self.provider, self.journal_tier, &self.prefix, number, self.segment_bytes)
            .map_err(|error| match error {
                EngineError::Media(media) => media,
                other => MediaError::Io { what: other.to_string(), source: std::io::Error::other("journal") },
            })?;
        let old = std::mem::replace(&mut state.segment, segment);
        state.unpersisted.push(old);
        state.segment_number = number;
        state.unwritten_start = 0;
        state.unwritten = encode_segment_header(number).to_vec();
        state.write_offset = SEGMENT_HEADER_BYTES as u64;
        state.durable_end = 0;
        Ok(())
    }

    /// Writes the blocks changed since the last checkpoint to the image and deletes the journal
    /// segments the image now covers. Appends may continue meanwhile: a block copied while it
    /// changes is repaired at recovery by the segments kept (they hold every write after the
    /// rotation below).
    pub(crate) fn checkpoint(&self) -> Result<()> {
        let (first_kept, old_segments) = {
            let mut state = self.state.lock();
            self.rotate(&mut state)?;
            (state.segment_number, Self::take_older(&mut state))
        };
        self.sync_older(old_segments)?;
        let changed = std::mem::take(&mut *self.changed_blocks.lock());
        let mut block = vec![0u8; self.block_bytes as usize];
        for &slot in &changed {
            self.memory.read_at(slot * self.block_bytes, &mut block)?;
            self.image.write_at(IMAGE_DATA_OFFSET + slot * self.block_bytes, &block)?;
        }
        self.image.persist(0, self.image.len_bytes())?;
        let seq = {
            let mut state = self.state.lock();
            state.image_seq += 1;
            state.image_seq
        };
        let mut page = vec![0u8; IMAGE_DATA_OFFSET as usize];
        self.image.read_at(0, &mut page)?;
        let slot = (seq % 2) as usize * IMAGE_HEADER_SLOT_BYTES;
        page[slot..slot + IMAGE_HEADER_SLOT_BYTES].copy_from_slice(&encode_image_header(seq, first_kept));
        self.image.write_at(0, &page)?;
        self.image.persist(0, IMAGE_DATA_OFFSET)?;
        for name in self.provider.list(&self.prefix, self.journal_tier)? {
            if segment_number_of(&name, &self.prefix).is_some_and(|number| number < first_kept) {
                self.provider.remove(&name, self.journal_tier)?;
            }
        }
        self.provider.sync_names(self.journal_tier)?;
        Ok(())
    }
}

impl Medium for JournaledMemory {
    fn info(&self) -> &MediumInfo {
        &self.info
    }

    fn len_bytes(&self) -> u64 {
        self.memory.len_bytes()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MediaError> {
        self.memory.read_at(offset, buf)
    }

    fn prefetch(&self, offset: u64, len: u64) {
        self.memory.prefetch(offset, len)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), MediaError> {
        let mut state = self.state.lock();
        self.append_entry(&mut state, offset, data)?;
        self.memory.write_at(offset, data)?;
        self.changed_blocks.lock().extend(blocks_of(offset, data.len(), self.block_bytes));
        Ok(())
    }

    fn store_u64(&self, offset: u64, value: u64) -> Result<(), MediaError> {
        self.write_at(offset, &value.to_le_bytes())
    }

    /// Segments rotated away from stay on the list until a persist syncs them.
    fn write_back(&self) -> Result<(), MediaError> {
        self.write_out(false).map(|_| ())
    }

    /// Makes every write so far durable: written out (see `write_out`), then synced without
    /// holding any lock, older segments first; then later entries say how far the current
    /// segment is durable (replay trusts the placement of damaged data only that far).
    fn persist(&self, _offset: u64, _len: u64) -> Result<(), MediaError> {
        let to_sync = self.write_out(true)?;
        self.sync_older(to_sync.older)?;
        to_sync.segment.persist(0, to_sync.segment.len_bytes())?;
        let mut state = self.state.lock();
        let nothing_older_unsynced = state.unpersisted.is_empty() && state.older_segments_syncing == 0;
        if state.segment_number == to_sync.segment_number && nothing_older_unsynced {
            state.durable_end = state.durable_end.max(to_sync.written_end);
        }
        Ok(())
    }
}

fn segment_name(prefix: &str, number: u64) -> String {
    format!("{prefix}{number:016}")
}

fn segment_number_of(name: &str, prefix: &str) -> Option<u64> {
    name.strip_prefix(prefix)?.parse().ok()
}

fn create_segment(
    provider: &dyn MediaProvider,
    tier: Tier,
    prefix: &str,
    number: u64,
    segment_bytes: u64,
) -> Result<Arc<dyn Medium>> {
    let name = segment_name(prefix, number);
    let opened = provider.open(&name, tier, segment_bytes)?;
    if opened.existed {
        return Err(EngineError::Corrupt { what: name, detail: "journal segment already exists".into() });
    }
    provider.sync_names(tier)?;
    Ok(opened.medium)
}

/// Loads the image into `memory`; returns (image sequence, first segment to replay).
///
/// Without a header that verifies, the image's blocks are loaded all the same and every journal
/// segment still present is replayed (first segment 0): the journal is a physical redo log
/// applied in order, so replaying from before the image's checkpoint ends in the same bytes, and
/// a segment is deleted only once a durable checkpoint covers it. Treating damaged headers as
/// "no image" would start the namespace empty.
fn load_image(image: &dyn Medium, memory: &MmapRegion, data_bytes: u64, block_bytes: u64) -> Result<(u64, u64)> {
    let mut page = vec![0u8; IMAGE_DATA_OFFSET as usize];
    image.read_at(0, &mut page)?;
    let newest = [0, IMAGE_HEADER_SLOT_BYTES]
        .iter()
        .filter_map(|&slot| decode_image_header(&page[slot..slot + IMAGE_HEADER_SLOT_BYTES]))
        .max_by_key(|&(seq, _)| seq);
    if newest.is_none() && page.iter().any(|&byte| byte != 0) {
        tracing::error!("checkpoint image: no header verifies; loading its blocks and replaying every journal segment");
    }
    let (seq, first_segment) = newest.unwrap_or((0, 0));
    let mut block = vec![0u8; block_bytes as usize];
    for slot in 0..data_bytes / block_bytes {
        let at = IMAGE_DATA_OFFSET + slot * block_bytes;
        // A damaged block header is the record log's to judge: every block not free is loaded.
        image.read_at(at, &mut block[..BLOCK_START_BYTES])?;
        if is_blank_block_start(&block[..BLOCK_START_BYTES]) {
            continue;
        }
        image.read_at(at, &mut block)?;
        memory.write_at(slot * block_bytes, &block)?;
    }
    Ok((seq, first_segment))
}

/// A journal segment read whole for replay.
struct SegmentRead {
    name: String,
    bytes: Vec<u8>,
    parsed: ParsedSegment,
}

/// Replays segments numbered `first` and up into `memory`, in order, adding the blocks it writes
/// to `replayed_blocks`; returns the largest segment number seen (0: none).
///
/// An entry whose data fails its checksum is either damaged at rest or torn by a crash while it
/// was written. Damage is replayed all the same, its bytes placed where its frame says: the
/// records inside carry checksums of their own, so one damaged byte costs one record (reported
/// when read) instead of every record the entry carried (a defragmentation round moves many keys
/// in one write). A torn entry was never acknowledged, and its missing bytes must not overwrite
/// older acknowledged ones, so it is skipped. They are told apart by durability: an entry that
/// ends at or before a later entry's durable end, or in a segment before one that was synced from
/// its start, had been synced whole before.
fn replay_segments(
    provider: &dyn MediaProvider,
    tier: Tier,
    prefix: &str,
    first: u64,
    segment_bytes: u64,
    target: &mut ReplayTarget<'_>,
) -> Result<u64> {
    let mut numbers: Vec<u64> =
        provider.list(prefix, tier)?.iter().filter_map(|name| segment_number_of(name, prefix)).collect();
    numbers.sort_unstable();
    let mut last = 0;
    let mut previous: Option<SegmentRead> = None;
    for number in numbers.into_iter().filter(|&number| number >= first) {
        last = number;
        let current = read_segment(provider, tier, prefix, number, segment_bytes)?;
        if let Some(previous) = previous.take() {
            let synced_whole = current.parsed.durable_end() >= SEGMENT_HEADER_BYTES as u64;
            apply_segment(&previous, synced_whole, target)?;
        }
        previous = Some(current);
    }
    if let Some(previous) = previous {
        apply_segment(&previous, false, target)?;
    }
    Ok(last)
}

/// Reads and parses segment `number`. A damaged segment header does not stop its replay (every
/// entry names its segment); one of another format version is refused unless nothing follows it.
fn read_segment(provider: &dyn MediaProvider, tier: Tier, prefix: &str, number: u64, segment_bytes: u64) -> Result<SegmentRead> {
    let name = segment_name(prefix, number);
    let medium = provider.open(&name, tier, segment_bytes)?.medium;
    let mut bytes = vec![0u8; medium.len_bytes() as usize];
    medium.read_at(0, &mut bytes)?;
    match decode_segment_header(&bytes) {
        SegmentHeader::Valid { number: found } if found == number => {}
        SegmentHeader::OtherVersion { version } if bytes[SEGMENT_HEADER_BYTES.min(bytes.len())..].iter().any(|&byte| byte != 0) => {
            return Err(EngineError::Corrupt {
                what: name,
                detail: format!(
                    "journal segment of format version {version} (this build replays version {SEGMENT_FORMAT_VERSION}): \
                     stop the build that wrote it cleanly, which leaves nothing to replay, before upgrading"
                ),
            });
        }
        SegmentHeader::OtherVersion { .. } => {}
        SegmentHeader::Valid { .. } | SegmentHeader::Invalid => {
            tracing::error!(segment = %name, "journal: segment header damaged; its entries are replayed all the same");
        }
    }
    let parsed = parse_segment(&bytes, number);
    Ok(SegmentRead { name, bytes, parsed })
}

/// Writes the entries of `segment` into `memory` (see `replay_segments`); `synced_whole`: a later
/// segment shows that this one was synced to its end.
/// Where journal entries are replayed: the record space, and the blocks that replay wrote.
struct ReplayTarget<'a> {
    memory: &'a MmapRegion,
    block_bytes: u64,
    replayed_blocks: &'a mut BTreeSet<u64>,
}

fn apply_segment(segment: &SegmentRead, synced_whole: bool, into: &mut ReplayTarget<'_>) -> Result<()> {
    let ReplayTarget { memory, block_bytes, replayed_blocks } = into;
    let name = &segment.name;
    for &(from, to) in &segment.parsed.skipped_ranges {
        tracing::error!(segment = %name, offset = from, skipped_bytes = to - from, "journal: bytes holding no valid entry skipped (damage, or a write torn by a crash)");
    }
    let durable_end = if synced_whole { u64::MAX } else { segment.parsed.durable_end() };
    for entry in &segment.parsed.entries {
        let offset = entry.start;
        if entry.found_by_trailer {
            tracing::error!(segment = %name, offset, "journal: an entry whose header is damaged was found by its trailer");
        }
        if !entry.data_intact {
            if entry.end() as u64 > durable_end {
                tracing::warn!(segment = %name, offset, "journal: an entry never synced whole skipped (a write torn by a crash, or damage)");
                continue;
            }
            tracing::error!(segment = %name, offset, "journal: damaged data of a synced entry replayed; its records are checked when read");
        }
        let data = entry.data(&segment.bytes);
        let target = entry.frame.target;
        if target.checked_add(data.len() as u64).is_none_or(|end| end > memory.len_bytes()) {
            tracing::error!(segment = %name, offset, target, "journal: an entry past the end of the record space skipped");
            continue;
        }
        memory.write_at(target, data)?;
        replayed_blocks.extend(blocks_of(target, data.len(), *block_bytes));
    }
    Ok(())
}

/// The blocks a write of `len` bytes at `offset` touches (one for an empty write).
fn blocks_of(offset: u64, len: usize, block_bytes: u64) -> std::ops::RangeInclusive<u64> {
    offset / block_bytes..=(offset + len.max(1) as u64 - 1) / block_bytes
}

#[cfg(test)]
mod tests {
    use hybridkv_media::sim::SimStore;

    use super::*;

    const BLOCK_BYTES: u64 = 64 * 1024;
    const DATA_BYTES: u64 = 4 * BLOCK_BYTES;
    const SEGMENT_BYTES: u64 = 256 * 1024;
    const FIRST_SEGMENT: &str = "ns.journal.0000000000000001";
    const WRITE_BYTES: usize = 1000;

    fn open(store: &SimStore) -> JournaledMemory {
        JournaledMemory::open(Arc::new(store.clone()), "ns", Tier::Pmem, DATA_BYTES, BLOCK_BYTES, SEGMENT_BYTES).unwrap()
    }

    fn read(memory: &JournaledMemory, offset: u64) -> Vec<u8> {
        let mut bytes = vec![0u8; WRITE_BYTES];
        memory.read_at(offset, &mut bytes).unwrap();
        bytes
    }

    /// Offset in the first segment of data byte `at` of write number `write` (all of WRITE_BYTES).
    fn data_byte(write: usize, at: usize) -> u64 {
        (SEGMENT_HEADER_BYTES + write * entry_bytes(WRITE_BYTES) + ENTRY_FRAME_BYTES + at) as u64
    }

    /// Three writes each made durable, then a fourth only written, and the process dies.
    fn crashed_after_four_writes() -> SimStore {
        let store = SimStore::new(1);
        let memory = open(&store);
        for write in 0..3u8 {
            memory.write_at(u64::from(write) * 1000, &[0xa0 + write; WRITE_BYTES]).unwrap();
            memory.persist(0, 0).unwrap();
        }
        memory.write_at(5000, &[0xd0; WRITE_BYTES]).unwrap();
        memory.write_back().unwrap();
        store.freeze();
        drop(memory);
        store.crash_process();
        store
    }

    #[test]
    fn every_write_is_replayed_after_a_crash() {
        let store = crashed_after_four_writes();
        let memory = open(&store);
        for write in 0..3u8 {
            assert_eq!(read(&memory, u64::from(write) * 1000), vec![0xa0 + write; WRITE_BYTES]);
        }
        assert_eq!(read(&memory, 5000), vec![0xd0; WRITE_BYTES]);
    }

    /// The fourth write was never synced, but replay after the process crash applied it and
    /// readers saw it: a power cut after that restart must not take it away.
    #[test]
    fn what_replay_applied_survives_a_later_power_cut() {
        let store = crashed_after_four_writes();
        let memory = open(&store);
        assert_eq!(read(&memory, 5000), vec![0xd0; WRITE_BYTES]);
        store.freeze();
        drop(memory);
        store.power_cut();
        let memory = open(&store);
        assert_eq!(read(&memory, 5000), vec![0xd0; WRITE_BYTES], "made durable at open");
        for write in 0..3u8 {
            assert_eq!(read(&memory, u64::from(write) * 1000), vec![0xa0 + write; WRITE_BYTES]);
        }
        assert!(!store.list_names().iter().any(|name| name == FIRST_SEGMENT), "the replayed segment is covered by the image");
    }

    #[test]
    fn damaged_data_of_a_durable_entry_is_replayed_in_place() {
        let store = crashed_after_four_writes();
        assert!(store.flip_bits(FIRST_SEGMENT, Tier::Pmem, data_byte(1, 10), 0x0f));
        let memory = open(&store);
        let mut expected = vec![0xa1; WRITE_BYTES];
        expected[10] ^= 0x0f;
        assert_eq!(read(&memory, 1000), expected, "only the damaged byte differs");
        assert_eq!(read(&memory, 2000), vec![0xa2; WRITE_BYTES]);
    }

    #[test]
    fn an_entry_never_known_durable_is_not_replayed_when_its_data_fails() {
        let store = crashed_after_four_writes();
        assert!(store.flip_bits(FIRST_SEGMENT, Tier::Pmem, data_byte(3, 10), 0x0f));
        let memory = open(&store);
        assert_eq!(read(&memory, 5000), vec![0; WRITE_BYTES], "it may be a torn write: skipped");
        assert_eq!(read(&memory, 2000), vec![0xa2; WRITE_BYTES]);
    }

    #[test]
    fn an_entry_whose_header_is_damaged_is_replayed_by_its_trailer() {
        let store = crashed_after_four_writes();
        assert!(store.flip_bits(FIRST_SEGMENT, Tier::Pmem, data_byte(1, 0) - 30, 0x40));
        let memory = open(&store);
        assert_eq!(read(&memory, 1000), vec![0xa1; WRITE_BYTES]);
    }

    #[test]
    fn the_last_entry_of_a_segment_is_known_durable_by_the_next_segment() {
        let store = SimStore::new(2);
        let memory = open(&store);
        let per_segment = (SEGMENT_BYTES as usize - SEGMENT_HEADER_BYTES) / entry_bytes(WRITE_BYTES);
        let fill = |write: usize| (write % 251) as u8;
        for write in 0..per_segment + 3 {
            memory.write_at((write % 200) as u64 * 1000 + 50_000 * u64::from(write >= per_segment), &vec![fill(write); WRITE_BYTES]).unwrap();
            memory.persist(0, 0).unwrap();
        }
        store.freeze();
        drop(memory);
        store.crash_process();
        let last = per_segment - 1;
        assert!(store.flip_bits(FIRST_SEGMENT, Tier::Pmem, data_byte(last, 0), 0x01));
        let memory = open(&store);
        let mut expected = vec![fill(last); WRITE_BYTES];
        expected[0] ^= 0x01;
        assert_eq!(read(&memory, (last % 200) as u64 * 1000), expected);
    }
}
