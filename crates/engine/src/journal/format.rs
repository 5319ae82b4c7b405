//! Journal segment and checkpoint image formats.
//!
//! Segment file `<namespace>.journal.<number:016>`: a header, then entries back to back.
//!
//! | offset | size | segment header field                 |
//! |-------:|-----:|--------------------------------------|
//! | 0      | 8    | magic "HKVJRNL1"                     |
//! | 8      | 4    | format version                       |
//! | 12     | 4    | reserved, 0                          |
//! | 16     | 8    | segment number                       |
//! | 24     | 4    | crc32c of bytes 0..24                |
//!
//! | offset | size | entry field                                           |
//! |-------:|-----:|-------------------------------------------------------|
//! | 0      | 4    | crc32c of bytes 4 .. 24 + length                      |
//! | 4      | 4    | length of the data                                    |
//! | 8      | 8    | offset in the DRAM record space the data was written at |
//! | 16     | 8    | segment number (rejects bytes left from another file) |
//! | 24     | n    | data, then zero padding to 8 bytes                    |
//!
//! Checkpoint image `<namespace>.image`: page 0 holds two image-header slots (0 and 2048); the
//! record space follows from IMAGE_DATA_OFFSET, byte for byte.
//!
//! | offset | size | image header field                                    |
//! |-------:|-----:|-------------------------------------------------------|
//! | 0      | 8    | magic "HKVIMAG1"                                      |
//! | 8      | 4    | format version                                        |
//! | 12     | 4    | reserved, 0                                           |
//! | 16     | 8    | header sequence number (the larger valid slot wins)   |
//! | 24     | 8    | first journal segment to replay on top of the image   |
//! | 32     | 4    | crc32c of bytes 0..32                                 |

use crate::log::record::{u32_at, u64_at};

pub(crate) const SEGMENT_MAGIC: u64 = u64::from_le_bytes(*b"HKVJRNL1");
pub(crate) const IMAGE_MAGIC: u64 = u64::from_le_bytes(*b"HKVIMAG1");
pub(crate) const JOURNAL_FORMAT_VERSION: u32 = 1;
pub(crate) const SEGMENT_HEADER_BYTES: usize = 64;
pub(crate) const ENTRY_HEADER_BYTES: usize = 24;
pub(crate) const ENTRY_ALIGN_BYTES: usize = 8;
pub(crate) const IMAGE_HEADER_SLOT_BYTES: usize = 2048;
pub(crate) const IMAGE_DATA_OFFSET: u64 = 4096;

pub(crate) fn encode_segment_header(number: u64) -> [u8; SEGMENT_HEADER_BYTES] {
    let mut bytes = [0u8; SEGMENT_HEADER_BYTES];
    bytes[0..8].copy_from_slice(&SEGMENT_MAGIC.to_le_bytes());
    bytes[8..12].copy_from_slice(&JOURNAL_FORMAT_VERSION.to_le_bytes());
    bytes[16..24].copy_from_slice(&number.to_le_bytes());
    let checksum = crc32c::crc32c(&bytes[..24]);
    bytes[24..28].copy_from_slice(&checksum.to_le_bytes());
    bytes
}

pub(crate) fn decode_segment_header(bytes: &[u8]) -> Option<u64> {
    let valid = bytes.len() >= SEGMENT_HEADER_BYTES
        && u64_at(bytes, 0) == SEGMENT_MAGIC
        && u32_at(bytes, 8) == JOURNAL_FORMAT_VERSION
        && crc32c::crc32c(&bytes[..24]) == u32_at(bytes, 24);
    valid.then(|| u64_at(bytes, 16))
}

pub(crate) fn entry_bytes(data_len: usize) -> usize {
    (ENTRY_HEADER_BYTES + data_len).next_multiple_of(ENTRY_ALIGN_BYTES)
}

pub(crate) fn encode_entry(segment: u64, offset: u64, data: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&segment.to_le_bytes());
    out.extend_from_slice(data);
    let checksum = crc32c::crc32c(&out[start + 4..]);
    out[start..start + 4].copy_from_slice(&checksum.to_le_bytes());
    out.resize(start + entry_bytes(data.len()), 0);
}

/// The entry at the start of `bytes`: (record-space offset, data), or None at the end of the
/// valid part of a segment.
pub(crate) fn decode_entry(bytes: &[u8], segment: u64) -> Option<(u64, &[u8])> {
    if bytes.len() < ENTRY_HEADER_BYTES {
        return None;
    }
    let len = u32_at(bytes, 4) as usize;
    let end = ENTRY_HEADER_BYTES.checked_add(len)?;
    if len == 0 || end > bytes.len() || u64_at(bytes, 16) != segment {
        return None;
    }
    (crc32c::crc32c(&bytes[4..end]) == u32_at(bytes, 0)).then(|| (u64_at(bytes, 8), &bytes[ENTRY_HEADER_BYTES..end]))
}

pub(crate) fn encode_image_header(seq: u64, first_segment: u64) -> [u8; IMAGE_HEADER_SLOT_BYTES] {
    let mut bytes = [0u8; IMAGE_HEADER_SLOT_BYTES];
    bytes[0..8].copy_from_slice(&IMAGE_MAGIC.to_le_bytes());
    bytes[8..12].copy_from_slice(&JOURNAL_FORMAT_VERSION.to_le_bytes());
    bytes[16..24].copy_from_slice(&seq.to_le_bytes());
    bytes[24..32].copy_from_slice(&first_segment.to_le_bytes());
    let checksum = crc32c::crc32c(&bytes[..32]);
    bytes[32..36].copy_from_slice(&checksum.to_le_bytes());
    bytes
}

/// (sequence, first segment to replay) of a valid image header slot.
pub(crate) fn decode_image_header(bytes: &[u8]) -> Option<(u64, u64)> {
    let valid = bytes.len() >= 36
        && u64_at(bytes, 0) == IMAGE_MAGIC
        && u32_at(bytes, 8) == JOURNAL_FORMAT_VERSION
        && crc32c::crc32c(&bytes[..32]) == u32_at(bytes, 32);
    valid.then(|| (u64_at(bytes, 16), u64_at(bytes, 24)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_reject_damage_and_other_segments() {
        let mut out = Vec::new();
        encode_entry(3, 4096, b"payload", &mut out);
        assert_eq!(out.len(), entry_bytes(7));
        assert_eq!(decode_entry(&out, 3), Some((4096, &b"payload"[..])));
        assert_eq!(decode_entry(&out, 4), None);
        out[30] ^= 1;
        assert_eq!(decode_entry(&out, 3), None);
        assert_eq!(decode_entry(&[0u8; 64], 0), None);
    }

    #[test]
    fn headers_round_trip() {
        assert_eq!(decode_segment_header(&encode_segment_header(12)), Some(12));
        assert_eq!(decode_image_header(&encode_image_header(2, 9)), Some((2, 9)));
        assert_eq!(decode_image_header(&[0u8; 64]), None);
    }
}
