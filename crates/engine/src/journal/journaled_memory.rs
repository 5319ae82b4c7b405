//! A DRAM record space whose every write is also appended to a journal; `persist` makes the
//! journal durable (group commit happens above, one `persist` per group). `checkpoint` writes the
//! blocks changed since the last one to the image, then deletes the journal segments it covers.
//!
//! Recovery: load the image, replay every journal segment from the image's first segment on, in
//! order, each up to its first invalid entry; then start a new segment.

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

struct JournalState {
    segment: Arc<dyn Medium>,
    segment_number: u64,
    /// Segment offset of `unwritten[0]`: page-aligned for block files, so the tail page is
    /// rewritten whole.
    unwritten_start: u64,
    unwritten: Vec<u8>,
    /// Where the next entry goes in the segment.
    write_offset: u64,
    /// Segments written out but not yet made durable (rotated away from).
    unpersisted: Vec<Arc<dyn Medium>>,
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
        let last_segment =
            replay_segments(&*provider, journal_tier, &prefix, first_segment, segment_bytes, &memory, block_bytes, &mut replayed_blocks)?;
        let segment_number = last_segment.max(first_segment.saturating_sub(1)) + 1;
        let segment = create_segment(&*provider, journal_tier, &prefix, segment_number, segment_bytes)?;
        let info = MediumInfo { tier: Tier::Dram, path: None, durability: segment.info().durability };
        let state = JournalState {
            segment,
            segment_number,
            unwritten_start: 0,
            unwritten: encode_segment_header(segment_number).to_vec(),
            write_offset: SEGMENT_HEADER_BYTES as u64,
            unpersisted: Vec::new(),
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
        encode_entry(state.segment_number, offset, data, &mut state.unwritten);
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
    fn write_out(&self) -> Result<(Arc<dyn Medium>, Vec<Arc<dyn Medium>>), MediaError> {
        let mut state = self.state.lock();
        let work = self.take_unwritten(&mut state);
        let segments = (state.segment.clone(), std::mem::take(&mut state.unpersisted));
        let _write_out = self.write_out.lock();
        drop(state);
        if let Some(work) = work {
            work.segment.write_at(work.offset, &work.bytes)?;
        }
        Ok(segments)
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
            (state.segment_number, std::mem::take(&mut state.unpersisted))
        };
        for segment in &old_segments {
            segment.persist(0, segment.len_bytes())?;
        }
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

    fn write_back(&self) -> Result<(), MediaError> {
        let (_, older) = self.write_out()?;
        // Segments rotated away from stay on the list until a persist has synced them.
        self.state.lock().unpersisted.extend(older);
        Ok(())
    }

    /// Makes every write so far durable: written out (see `write_out`), then synced without
    /// holding any lock.
    fn persist(&self, _offset: u64, _len: u64) -> Result<(), MediaError> {
        let (segment, older) = self.write_out()?;
        for old in older {
            old.persist(0, old.len_bytes())?;
        }
        segment.persist(0, segment.len_bytes())
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

/// Replays segments numbered `first` and up into `memory`, adding the blocks it writes to
/// `replayed_blocks`; returns the largest segment number seen (0: none).
fn replay_segments(
    provider: &dyn MediaProvider,
    tier: Tier,
    prefix: &str,
    first: u64,
    segment_bytes: u64,
    memory: &MmapRegion,
    block_bytes: u64,
    replayed_blocks: &mut BTreeSet<u64>,
) -> Result<u64> {
    let mut numbers: Vec<u64> =
        provider.list(prefix, tier)?.iter().filter_map(|name| segment_number_of(name, prefix)).collect();
    numbers.sort_unstable();
    let mut last = 0;
    for number in numbers.into_iter().filter(|&number| number >= first) {
        last = number;
        let name = segment_name(prefix, number);
        let medium = provider.open(&name, tier, segment_bytes)?.medium;
        let mut bytes = vec![0u8; medium.len_bytes() as usize];
        medium.read_at(0, &mut bytes)?;
        if decode_segment_header(&bytes) != Some(number) {
            continue;
        }
        let mut offset = SEGMENT_HEADER_BYTES;
        while let Some(start) = next_entry_from(&bytes, offset, number) {
            if start != offset {
                tracing::error!(
                    segment = %name,
                    offset,
                    skipped_bytes = start - offset,
                    "journal: invalid bytes before a valid entry (damage, or a write torn by a crash) skipped"
                );
            }
            let (target, data) = decode_entry(&bytes[start..], number).expect("found valid");
            if target.checked_add(data.len() as u64).is_none_or(|end| end > memory.len_bytes()) {
                break;
            }
            memory.write_at(target, data)?;
            replayed_blocks.extend(blocks_of(target, data.len(), block_bytes));
            offset = start + entry_bytes(data.len());
        }
    }
    Ok(last)
}

/// The blocks a write of `len` bytes at `offset` touches (one for an empty write).
fn blocks_of(offset: u64, len: usize, block_bytes: u64) -> std::ops::RangeInclusive<u64> {
    offset / block_bytes..=(offset + len.max(1) as u64 - 1) / block_bytes
}

/// The offset of the first valid entry of segment `number` at or after `offset` (8-byte aligned):
/// replay goes on past a damaged entry, since an entry carries its checksum and segment number.
fn next_entry_from(bytes: &[u8], offset: usize, number: u64) -> Option<usize> {
    (offset..bytes.len()).step_by(ENTRY_ALIGN_BYTES).find(|&at| decode_entry(&bytes[at..], number).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_finds_the_entry_after_a_damaged_one() {
        let mut bytes = vec![0u8; SEGMENT_HEADER_BYTES];
        let mut starts = Vec::new();
        for data in [&b"first"[..], b"second", b"third"] {
            starts.push(bytes.len());
            encode_entry(7, 0, data, &mut bytes);
        }
        bytes.resize(bytes.len() + 256, 0);
        assert_eq!(next_entry_from(&bytes, starts[1], 7), Some(starts[1]));
        bytes[starts[1] + 4] ^= 0x20;
        assert_eq!(next_entry_from(&bytes, starts[1], 7), Some(starts[2]), "the damaged entry is skipped");
        assert_eq!(next_entry_from(&bytes, starts[2] + 8, 7), None, "zeroes after the last entry");
    }
}
