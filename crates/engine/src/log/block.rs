//! Write blocks: the unit of allocation, append and defragmentation of the record log.
//!
//! A block starts with a header; records follow back to back from BLOCK_HEADER_BYTES.
//!
//! | offset | size | field                                                      |
//! |-------:|-----:|------------------------------------------------------------|
//! | 0      | 8    | magic "HKVBLOK1"                                            |
//! | 8      | 4    | format version                                              |
//! | 12     | 4    | slot number (position of the block on the medium)          |
//! | 16     | 8    | block sequence number: order of the log, never reused, > 0 |
//! | 24     | 8    | block size in bytes                                         |
//! | 32     | 8    | namespace fingerprint                                       |
//! | 40     | 8    | creation time, Unix ms                                      |
//! | 48     | 12   | reserved, 0                                                 |
//! | 60     | 4    | crc32c of bytes 0..60                                       |
//!
//! A free block has a zeroed header and a zeroed first record header. A block whose header is
//! damaged (invalid, or zeroed over a record) is recognised by its first record, which carries the
//! low 32 bits of the block's sequence number, and its header is rewritten.

use crate::log::record::{u32_at, u64_at};

pub(crate) const BLOCK_MAGIC: u64 = u64::from_le_bytes(*b"HKVBLOK1");
pub(crate) const BLOCK_FORMAT_VERSION: u32 = 1;
const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = MAGIC_OFFSET + 8;
const SLOT_OFFSET: usize = VERSION_OFFSET + 4;
const SEQ_OFFSET: usize = SLOT_OFFSET + 4;
const SIZE_OFFSET: usize = SEQ_OFFSET + 8;
const FINGERPRINT_OFFSET: usize = SIZE_OFFSET + 8;
const CREATED_OFFSET: usize = FINGERPRINT_OFFSET + 8;
const CHECKSUM_OFFSET: usize = 60;
pub(crate) const BLOCK_HEADER_BYTES: usize = CHECKSUM_OFFSET + 4;

const _: () = assert!(CREATED_OFFSET + 8 <= CHECKSUM_OFFSET);
const _: () = assert!(BLOCK_HEADER_BYTES == 64);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BlockHeader {
    pub(crate) slot: u32,
    pub(crate) seq: u64,
    pub(crate) block_bytes: u64,
    pub(crate) fingerprint: u64,
    pub(crate) created_unix_ms: u64,
}

impl BlockHeader {
    pub(crate) fn encode(&self) -> [u8; BLOCK_HEADER_BYTES] {
        assert!(self.seq > 0);
        let mut bytes = [0u8; BLOCK_HEADER_BYTES];
        bytes[MAGIC_OFFSET..MAGIC_OFFSET + 8].copy_from_slice(&BLOCK_MAGIC.to_le_bytes());
        bytes[VERSION_OFFSET..VERSION_OFFSET + 4].copy_from_slice(&BLOCK_FORMAT_VERSION.to_le_bytes());
        bytes[SLOT_OFFSET..SLOT_OFFSET + 4].copy_from_slice(&self.slot.to_le_bytes());
        bytes[SEQ_OFFSET..SEQ_OFFSET + 8].copy_from_slice(&self.seq.to_le_bytes());
        bytes[SIZE_OFFSET..SIZE_OFFSET + 8].copy_from_slice(&self.block_bytes.to_le_bytes());
        bytes[FINGERPRINT_OFFSET..FINGERPRINT_OFFSET + 8].copy_from_slice(&self.fingerprint.to_le_bytes());
        bytes[CREATED_OFFSET..CREATED_OFFSET + 8].copy_from_slice(&self.created_unix_ms.to_le_bytes());
        let checksum = crate::checksum::crc32c(&bytes[..CHECKSUM_OFFSET]);
        bytes[CHECKSUM_OFFSET..].copy_from_slice(&checksum.to_le_bytes());
        bytes
    }

    /// The header of an in-use block at `slot`, or None for a free, foreign or damaged one.
    pub(crate) fn decode(bytes: &[u8], slot: u32, block_bytes: u64, fingerprint: u64) -> Option<BlockHeader> {
        if bytes.len() < BLOCK_HEADER_BYTES
            || u64_at(bytes, MAGIC_OFFSET) != BLOCK_MAGIC
            || u32_at(bytes, VERSION_OFFSET) != BLOCK_FORMAT_VERSION
            || crate::checksum::crc32c(&bytes[..CHECKSUM_OFFSET]) != u32_at(bytes, CHECKSUM_OFFSET)
        {
            return None;
        }
        let header = BlockHeader {
            slot: u32_at(bytes, SLOT_OFFSET),
            seq: u64_at(bytes, SEQ_OFFSET),
            block_bytes: u64_at(bytes, SIZE_OFFSET),
            fingerprint: u64_at(bytes, FINGERPRINT_OFFSET),
            created_unix_ms: u64_at(bytes, CREATED_OFFSET),
        };
        let belongs = header.slot == slot && header.block_bytes == block_bytes && header.fingerprint == fingerprint;
        (belongs && header.seq > 0).then_some(header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_reject_foreign_blocks() {
        let header = BlockHeader { slot: 3, seq: 77, block_bytes: 1 << 20, fingerprint: 5, created_unix_ms: 1 };
        let bytes = header.encode();
        assert_eq!(BlockHeader::decode(&bytes, 3, 1 << 20, 5), Some(header));
        assert_eq!(BlockHeader::decode(&bytes, 4, 1 << 20, 5), None);
        assert_eq!(BlockHeader::decode(&bytes, 3, 1 << 20, 6), None);
        assert_eq!(BlockHeader::decode(&[0u8; 64], 3, 1 << 20, 5), None);
        let mut damaged = bytes;
        damaged[20] ^= 1;
        assert_eq!(BlockHeader::decode(&damaged, 3, 1 << 20, 5), None);
    }
}
