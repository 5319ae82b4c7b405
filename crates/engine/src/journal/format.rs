//! Journal segment and checkpoint image formats.
//!
//! Segment file `<namespace>.journal.<number:016>`: a header, then entries back to back.
//!
//! | offset | size | segment header field                 |
//! |-------:|-----:|--------------------------------------|
//! | 0      | 8    | magic "HKVJRNL1"                     |
//! | 8      | 4    | segment format version (2)           |
//! | 12     | 4    | reserved, 0                          |
//! | 16     | 8    | segment number                       |
//! | 24     | 4    | crc32c of bytes 0..24                |
//!
//! An entry is a frame (header), its data, and the frame again (trailer), so that the data of
//! an entry whose header is damaged is still found, and the data checksum is apart from the
//! frame's, so that damaged data can still be placed (see `journaled_memory::replay_segments`).
//!
//! | offset  | size | entry frame field                                                   |
//! |--------:|-----:|---------------------------------------------------------------------|
//! | 0       | 4    | crc32c of bytes 4..40 of the frame                                  |
//! | 4       | 4    | length n of the data (> 0)                                          |
//! | 8       | 8    | offset in the DRAM record space the data was written at             |
//! | 16      | 8    | segment number (rejects bytes left from another file)               |
//! | 24      | 8    | durable end: the segment was durable up to here when this was appended |
//! | 32      | 4    | crc32c of the data                                                  |
//! | 36      | 4    | kind: "EHDR" before the data, "ETRL" after it                       |
//!
//! | entry offset      | size | entry part                          |
//! |------------------:|-----:|-------------------------------------|
//! | 0                 | 40   | frame, kind "EHDR"                  |
//! | 40                | n    | data, then zero padding to 8 bytes  |
//! | 40 + n (padded)   | 40   | frame, kind "ETRL"                  |
//!
//! Checkpoint image `<namespace>.image`: page 0 holds two image-header slots (0 and 2048); the
//! record space follows from IMAGE_DATA_OFFSET, byte for byte.
//!
//! | offset | size | image header field                                    |
//! |-------:|-----:|-------------------------------------------------------|
//! | 0      | 8    | magic "HKVIMAG1"                                      |
//! | 8      | 4    | image format version (1)                              |
//! | 12     | 4    | reserved, 0                                           |
//! | 16     | 8    | header sequence number (the larger valid slot wins)   |
//! | 24     | 8    | first journal segment to replay on top of the image   |
//! | 32     | 4    | crc32c of bytes 0..32                                 |

use crate::log::record::{u32_at, u64_at};

pub(crate) const SEGMENT_MAGIC: u64 = u64::from_le_bytes(*b"HKVJRNL1");
pub(crate) const IMAGE_MAGIC: u64 = u64::from_le_bytes(*b"HKVIMAG1");
pub(crate) const SEGMENT_FORMAT_VERSION: u32 = 2;
pub(crate) const IMAGE_FORMAT_VERSION: u32 = 1;
pub(crate) const SEGMENT_HEADER_BYTES: usize = 64;
pub(crate) const ENTRY_ALIGN_BYTES: usize = 8;
pub(crate) const IMAGE_HEADER_SLOT_BYTES: usize = 2048;
pub(crate) const IMAGE_DATA_OFFSET: u64 = 4096;

const FRAME_CHECKSUM_OFFSET: usize = 0;
const FRAME_LENGTH_OFFSET: usize = FRAME_CHECKSUM_OFFSET + 4;
const FRAME_TARGET_OFFSET: usize = FRAME_LENGTH_OFFSET + 4;
const FRAME_SEGMENT_OFFSET: usize = FRAME_TARGET_OFFSET + 8;
const FRAME_DURABLE_END_OFFSET: usize = FRAME_SEGMENT_OFFSET + 8;
const FRAME_DATA_CHECKSUM_OFFSET: usize = FRAME_DURABLE_END_OFFSET + 8;
const FRAME_KIND_OFFSET: usize = FRAME_DATA_CHECKSUM_OFFSET + 4;
pub(crate) const ENTRY_FRAME_BYTES: usize = FRAME_KIND_OFFSET + 4;
const HEADER_KIND: u32 = u32::from_le_bytes(*b"EHDR");
const TRAILER_KIND: u32 = u32::from_le_bytes(*b"ETRL");
const _: () = assert!(ENTRY_FRAME_BYTES.is_multiple_of(ENTRY_ALIGN_BYTES), "entries stay 8-byte aligned");
const _: () = assert!(SEGMENT_HEADER_BYTES.is_multiple_of(ENTRY_ALIGN_BYTES), "the first entry is 8-byte aligned");

/// What a segment header says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SegmentHeader {
    Valid { number: u64 },
    /// Verifies, but written by another format version.
    OtherVersion { version: u32 },
    Invalid,
}

pub(crate) fn encode_segment_header(number: u64) -> [u8; SEGMENT_HEADER_BYTES] {
    let mut bytes = [0u8; SEGMENT_HEADER_BYTES];
    bytes[0..8].copy_from_slice(&SEGMENT_MAGIC.to_le_bytes());
    bytes[8..12].copy_from_slice(&SEGMENT_FORMAT_VERSION.to_le_bytes());
    bytes[16..24].copy_from_slice(&number.to_le_bytes());
    let checksum = crate::checksum::crc32c(&bytes[..24]);
    bytes[24..28].copy_from_slice(&checksum.to_le_bytes());
    bytes
}

pub(crate) fn decode_segment_header(bytes: &[u8]) -> SegmentHeader {
    let verifies =
        bytes.len() >= SEGMENT_HEADER_BYTES && u64_at(bytes, 0) == SEGMENT_MAGIC && crate::checksum::crc32c(&bytes[..24]) == u32_at(bytes, 24);
    match verifies.then(|| u32_at(bytes, 8)) {
        None => SegmentHeader::Invalid,
        Some(SEGMENT_FORMAT_VERSION) => SegmentHeader::Valid { number: u64_at(bytes, 16) },
        Some(version) => SegmentHeader::OtherVersion { version },
    }
}

/// Bytes an entry of `data_len` bytes of data takes in a segment.
pub(crate) fn entry_bytes(data_len: usize) -> usize {
    ENTRY_FRAME_BYTES + data_len.next_multiple_of(ENTRY_ALIGN_BYTES) + ENTRY_FRAME_BYTES
}

/// What an entry's frame (header or trailer) says about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EntryFrame {
    pub(crate) data_len: usize,
    /// Where the data goes in the record space.
    pub(crate) target: u64,
    /// The segment was durable up to this offset when the entry was appended.
    pub(crate) durable_end: u64,
    pub(crate) data_checksum: u32,
}

impl EntryFrame {
    fn encode(&self, segment: u64, kind: u32) -> [u8; ENTRY_FRAME_BYTES] {
        let mut bytes = [0u8; ENTRY_FRAME_BYTES];
        bytes[FRAME_LENGTH_OFFSET..FRAME_TARGET_OFFSET].copy_from_slice(&(self.data_len as u32).to_le_bytes());
        bytes[FRAME_TARGET_OFFSET..FRAME_SEGMENT_OFFSET].copy_from_slice(&self.target.to_le_bytes());
        bytes[FRAME_SEGMENT_OFFSET..FRAME_DURABLE_END_OFFSET].copy_from_slice(&segment.to_le_bytes());
        bytes[FRAME_DURABLE_END_OFFSET..FRAME_DATA_CHECKSUM_OFFSET].copy_from_slice(&self.durable_end.to_le_bytes());
        bytes[FRAME_DATA_CHECKSUM_OFFSET..FRAME_KIND_OFFSET].copy_from_slice(&self.data_checksum.to_le_bytes());
        bytes[FRAME_KIND_OFFSET..ENTRY_FRAME_BYTES].copy_from_slice(&kind.to_le_bytes());
        let checksum = crate::checksum::crc32c(&bytes[FRAME_LENGTH_OFFSET..]);
        bytes[..FRAME_LENGTH_OFFSET].copy_from_slice(&checksum.to_le_bytes());
        bytes
    }

    /// The frame of `kind` at the start of `bytes`, when it verifies and belongs to `segment`.
    fn decode(bytes: &[u8], segment: u64, kind: u32) -> Option<EntryFrame> {
        // The cheap comparisons first: replay tries every 8-byte step of a damaged range.
        let plausible = bytes.len() >= ENTRY_FRAME_BYTES
            && u32_at(bytes, FRAME_KIND_OFFSET) == kind
            && u64_at(bytes, FRAME_SEGMENT_OFFSET) == segment
            && u32_at(bytes, FRAME_LENGTH_OFFSET) > 0;
        let verifies = plausible
            && crate::checksum::crc32c(&bytes[FRAME_LENGTH_OFFSET..ENTRY_FRAME_BYTES]) == u32_at(bytes, FRAME_CHECKSUM_OFFSET);
        verifies.then(|| EntryFrame {
            data_len: u32_at(bytes, FRAME_LENGTH_OFFSET) as usize,
            target: u64_at(bytes, FRAME_TARGET_OFFSET),
            durable_end: u64_at(bytes, FRAME_DURABLE_END_OFFSET),
            data_checksum: u32_at(bytes, FRAME_DATA_CHECKSUM_OFFSET),
        })
    }
}

/// Appends the entry that writes `data` at `target` to `out`, a segment's bytes from an entry
/// boundary on.
pub(crate) fn encode_entry(segment: u64, target: u64, durable_end: u64, data: &[u8], out: &mut Vec<u8>) {
    assert!(!data.is_empty() && data.len() <= u32::MAX as usize, "an entry carries 1 byte to 4 GiB of data");
    let start = out.len();
    let frame = EntryFrame { data_len: data.len(), target, durable_end, data_checksum: crate::checksum::crc32c(data) };
    out.extend_from_slice(&frame.encode(segment, HEADER_KIND));
    out.extend_from_slice(data);
    out.resize(start + entry_bytes(data.len()) - ENTRY_FRAME_BYTES, 0);
    out.extend_from_slice(&frame.encode(segment, TRAILER_KIND));
    debug_assert_eq!(out.len() - start, entry_bytes(data.len()));
}

/// An entry found in a segment.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ParsedEntry {
    /// Segment offset of the entry.
    pub(crate) start: usize,
    pub(crate) frame: EntryFrame,
    /// The data matches its checksum.
    pub(crate) data_intact: bool,
    /// The header did not verify: the trailer told the frame.
    pub(crate) found_by_trailer: bool,
}

impl ParsedEntry {
    pub(crate) fn end(&self) -> usize {
        self.start + entry_bytes(self.frame.data_len)
    }

    /// The entry's data in `segment`, the bytes it was parsed from.
    pub(crate) fn data<'a>(&self, segment: &'a [u8]) -> &'a [u8] {
        &segment[self.start + ENTRY_FRAME_BYTES..self.start + ENTRY_FRAME_BYTES + self.frame.data_len]
    }
}

/// A segment's entries, in order, and the ranges between them that hold no entry (damage, or a
/// write torn by a crash); the unwritten rest of the segment is neither.
#[derive(Debug, Default)]
pub(crate) struct ParsedSegment {
    pub(crate) entries: Vec<ParsedEntry>,
    pub(crate) skipped_ranges: Vec<(usize, usize)>,
}

impl ParsedSegment {
    /// The furthest offset up to which some entry of the segment says it was durable.
    pub(crate) fn durable_end(&self) -> u64 {
        self.entries.iter().map(|entry| entry.frame.durable_end).max().unwrap_or(0)
    }
}

/// Parses the entries of segment `number` (all its bytes, header included). An entry is found
/// by its header, or, when that does not verify, by its trailer; past a range where neither
/// verifies, parsing resumes at the next header (8-byte steps).
pub(crate) fn parse_segment(bytes: &[u8], number: u64) -> ParsedSegment {
    let mut parsed = ParsedSegment::default();
    let mut offset = SEGMENT_HEADER_BYTES;
    while offset < bytes.len() {
        let by_header = EntryFrame::decode(&bytes[offset..], number, HEADER_KIND).filter(|frame| fits(bytes, offset, frame));
        let found = match by_header {
            Some(frame) => Some((frame, false)),
            None => match search_past_damage(bytes, offset, number) {
                Search::Trailer(frame) => Some((frame, true)),
                Search::NextHeader(at) => {
                    parsed.skipped_ranges.push((offset, at));
                    offset = at;
                    continue;
                }
                Search::Nothing => None,
            },
        };
        let Some((frame, found_by_trailer)) = found else { break };
        let mut entry = ParsedEntry { start: offset, frame, data_intact: false, found_by_trailer };
        entry.data_intact = crate::checksum::crc32c(entry.data(bytes)) == frame.data_checksum;
        offset = entry.end();
        parsed.entries.push(entry);
    }
    parsed
}

fn fits(bytes: &[u8], start: usize, frame: &EntryFrame) -> bool {
    start.checked_add(entry_bytes(frame.data_len)).is_some_and(|end| end <= bytes.len())
}

enum Search {
    /// The trailer of the entry that starts where the search started.
    Trailer(EntryFrame),
    /// The next header that verifies, at this offset.
    NextHeader(usize),
    /// Neither, up to the end of the segment.
    Nothing,
}

/// Looks past an entry start whose header does not verify for the trailer of that entry, or for
/// the next header (whichever comes first).
fn search_past_damage(bytes: &[u8], start: usize, number: u64) -> Search {
    for at in (start + ENTRY_ALIGN_BYTES..bytes.len().saturating_sub(ENTRY_FRAME_BYTES - 1)).step_by(ENTRY_ALIGN_BYTES) {
        if let Some(frame) = EntryFrame::decode(&bytes[at..], number, TRAILER_KIND) {
            if at + ENTRY_FRAME_BYTES == start + entry_bytes(frame.data_len) {
                return Search::Trailer(frame);
            }
        }
        if EntryFrame::decode(&bytes[at..], number, HEADER_KIND).is_some_and(|frame| fits(bytes, at, &frame)) {
            return Search::NextHeader(at);
        }
    }
    Search::Nothing
}

pub(crate) fn encode_image_header(seq: u64, first_segment: u64) -> [u8; IMAGE_HEADER_SLOT_BYTES] {
    let mut bytes = [0u8; IMAGE_HEADER_SLOT_BYTES];
    bytes[0..8].copy_from_slice(&IMAGE_MAGIC.to_le_bytes());
    bytes[8..12].copy_from_slice(&IMAGE_FORMAT_VERSION.to_le_bytes());
    bytes[16..24].copy_from_slice(&seq.to_le_bytes());
    bytes[24..32].copy_from_slice(&first_segment.to_le_bytes());
    let checksum = crate::checksum::crc32c(&bytes[..32]);
    bytes[32..36].copy_from_slice(&checksum.to_le_bytes());
    bytes
}

/// (sequence, first segment to replay) of a valid image header slot.
pub(crate) fn decode_image_header(bytes: &[u8]) -> Option<(u64, u64)> {
    let valid = bytes.len() >= 36
        && u64_at(bytes, 0) == IMAGE_MAGIC
        && u32_at(bytes, 8) == IMAGE_FORMAT_VERSION
        && crate::checksum::crc32c(&bytes[..32]) == u32_at(bytes, 32);
    valid.then(|| (u64_at(bytes, 16), u64_at(bytes, 24)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATA: [&[u8]; 3] = [b"first", b"the second entry", b"third"];

    /// A segment of number 7 holding DATA at targets 0, 100, 200, with zeroes after; the entries' starts.
    fn segment() -> (Vec<u8>, Vec<usize>) {
        let mut bytes = encode_segment_header(7).to_vec();
        let mut starts = Vec::new();
        for (number, data) in DATA.iter().enumerate() {
            starts.push(bytes.len());
            encode_entry(7, number as u64 * 100, 64 + number as u64, data, &mut bytes);
        }
        bytes.resize(bytes.len() + 512, 0);
        (bytes, starts)
    }

    fn parsed_data(bytes: &[u8], parsed: &ParsedSegment) -> Vec<Vec<u8>> {
        parsed.entries.iter().map(|entry| entry.data(bytes).to_vec()).collect()
    }

    #[test]
    fn entries_round_trip_with_their_frames() {
        let (bytes, starts) = segment();
        let parsed = parse_segment(&bytes, 7);
        assert_eq!(parsed_data(&bytes, &parsed), DATA.iter().map(|data| data.to_vec()).collect::<Vec<_>>());
        assert_eq!(parsed.entries.iter().map(|entry| entry.start).collect::<Vec<_>>(), starts);
        assert!(parsed.entries.iter().all(|entry| entry.data_intact && !entry.found_by_trailer));
        assert_eq!(parsed.entries[1].frame.target, 100);
        assert_eq!(parsed.durable_end(), 66);
        assert!(parsed.skipped_ranges.is_empty());
        assert_eq!(starts[1] - starts[0], entry_bytes(DATA[0].len()));
    }

    #[test]
    fn another_segments_entries_are_not_taken() {
        let (bytes, _) = segment();
        assert!(parse_segment(&bytes, 8).entries.is_empty());
    }

    #[test]
    fn an_entry_whose_header_is_damaged_is_found_by_its_trailer() {
        let (mut bytes, starts) = segment();
        bytes[starts[1] + FRAME_TARGET_OFFSET] ^= 0x10;
        let parsed = parse_segment(&bytes, 7);
        assert_eq!(parsed.entries.len(), 3);
        assert!(parsed.entries[1].found_by_trailer && parsed.entries[1].data_intact);
        assert_eq!(parsed.entries[1].frame.target, 100);
        assert!(parsed.skipped_ranges.is_empty());
    }

    #[test]
    fn damaged_data_is_found_in_place_and_marked() {
        let (mut bytes, starts) = segment();
        bytes[starts[1] + ENTRY_FRAME_BYTES + 3] ^= 0x01;
        let parsed = parse_segment(&bytes, 7);
        assert_eq!(parsed.entries.len(), 3);
        assert!(!parsed.entries[1].data_intact && !parsed.entries[1].found_by_trailer);
        assert!(parsed.entries[0].data_intact && parsed.entries[2].data_intact);
    }

    #[test]
    fn an_entry_with_both_frames_damaged_is_skipped_up_to_the_next() {
        let (mut bytes, starts) = segment();
        bytes[starts[1]] ^= 0x01;
        bytes[starts[2] - 1] ^= 0x80;
        let parsed = parse_segment(&bytes, 7);
        assert_eq!(parsed_data(&bytes, &parsed), vec![DATA[0].to_vec(), DATA[2].to_vec()]);
        assert_eq!(parsed.skipped_ranges, vec![(starts[1], starts[2])]);
    }

    #[test]
    fn a_torn_last_entry_keeps_its_header_and_loses_its_data() {
        let (mut bytes, starts) = segment();
        let end = starts[2] + entry_bytes(DATA[2].len());
        bytes[starts[2] + ENTRY_FRAME_BYTES..end].fill(0);
        let parsed = parse_segment(&bytes, 7);
        assert_eq!(parsed.entries.len(), 3);
        assert!(!parsed.entries[2].data_intact);
    }

    #[test]
    fn headers_round_trip_and_tell_other_versions() {
        assert_eq!(decode_segment_header(&encode_segment_header(12)), SegmentHeader::Valid { number: 12 });
        let mut old = encode_segment_header(12);
        old[8..12].copy_from_slice(&1u32.to_le_bytes());
        let checksum = crate::checksum::crc32c(&old[..24]);
        old[24..28].copy_from_slice(&checksum.to_le_bytes());
        assert_eq!(decode_segment_header(&old), SegmentHeader::OtherVersion { version: 1 });
        assert_eq!(decode_segment_header(&[0u8; 64]), SegmentHeader::Invalid);
        assert_eq!(decode_image_header(&encode_image_header(2, 9)), Some((2, 9)));
        assert_eq!(decode_image_header(&[0u8; 64]), None);
    }
}
