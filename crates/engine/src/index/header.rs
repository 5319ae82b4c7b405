//! The index region header, kept twice (slots A and B, written alternately) so that a write torn
//! by a crash always leaves the previous header intact.
//!
//! | offset | size | field                                                         |
//! |-------:|-----:|---------------------------------------------------------------|
//! | 0      | 8    | magic "HKVINDX1"                                              |
//! | 8      | 4    | format version                                                |
//! | 12     | 4    | partition count                                               |
//! | 16     | 8    | region size in bytes                                          |
//! | 24     | 8    | fingerprint of the namespace and its data placement           |
//! | 32     | 8    | header sequence number (the larger valid slot wins)           |
//! | 40     | 8    | clean shutdown: 1 when closed cleanly, 0 while open           |
//! | 48     | 8    | consistent log position: the index reflects every record before it |
//! | 56     | 8    | next LSN at that position                                     |
//! | 64     | 8    | id of the machine boot that wrote the header (`MediaProvider::boot_id`) |
//! | 72     | 8    | time of the checkpoint, Unix ms                               |
//! | 80     | 4    | crc32c of bytes 0..80                                         |

use crate::log::record::{u32_at, u64_at};

pub(crate) const INDEX_MAGIC: u64 = u64::from_le_bytes(*b"HKVINDX1");
/// 5: directory word 3 also counts the entries with an expiry (4: 24-byte index entries, tags in
/// place of the digest's partition bits, no expiry or generation; 3: 32-byte index entries holding them, and the 32-byte directory entries of 4:
/// their table's counts, kept up to date, and a checksum covering them; 2: 16-byte directory
/// entries, a checksum of the table alone; 1: entry counts only). Other versions are rebuilt cold.
pub(crate) const INDEX_FORMAT_VERSION: u32 = 5;
pub(crate) const HEADER_SLOT_BYTES: u64 = 2048;
pub(crate) const HEADER_AREA_BYTES: u64 = 2 * HEADER_SLOT_BYTES;
const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = MAGIC_OFFSET + 8;
const PARTITIONS_OFFSET: usize = VERSION_OFFSET + 4;
const REGION_BYTES_OFFSET: usize = PARTITIONS_OFFSET + 4;
const FINGERPRINT_OFFSET: usize = REGION_BYTES_OFFSET + 8;
const SEQ_OFFSET: usize = FINGERPRINT_OFFSET + 8;
const CLEAN_OFFSET: usize = SEQ_OFFSET + 8;
const POSITION_OFFSET: usize = CLEAN_OFFSET + 8;
const NEXT_LSN_OFFSET: usize = POSITION_OFFSET + 8;
const BOOT_ID_OFFSET: usize = NEXT_LSN_OFFSET + 8;
const CHECKPOINT_TIME_OFFSET: usize = BOOT_ID_OFFSET + 8;
const CHECKSUM_OFFSET: usize = CHECKPOINT_TIME_OFFSET + 8;
pub(crate) const HEADER_BYTES: usize = CHECKSUM_OFFSET + 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IndexHeader {
    pub(crate) partition_count: u32,
    pub(crate) region_bytes: u64,
    pub(crate) fingerprint: u64,
    pub(crate) seq: u64,
    pub(crate) clean: bool,
    pub(crate) consistent_position: u64,
    pub(crate) next_lsn: u64,
    pub(crate) boot_id: u64,
    pub(crate) checkpoint_unix_ms: u64,
}

impl IndexHeader {
    pub(crate) fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut bytes = [0u8; HEADER_BYTES];
        let mut put = |offset: usize, value: &[u8]| bytes[offset..offset + value.len()].copy_from_slice(value);
        put(MAGIC_OFFSET, &INDEX_MAGIC.to_le_bytes());
        put(VERSION_OFFSET, &INDEX_FORMAT_VERSION.to_le_bytes());
        put(PARTITIONS_OFFSET, &self.partition_count.to_le_bytes());
        put(REGION_BYTES_OFFSET, &self.region_bytes.to_le_bytes());
        put(FINGERPRINT_OFFSET, &self.fingerprint.to_le_bytes());
        put(SEQ_OFFSET, &self.seq.to_le_bytes());
        put(CLEAN_OFFSET, &(self.clean as u64).to_le_bytes());
        put(POSITION_OFFSET, &self.consistent_position.to_le_bytes());
        put(NEXT_LSN_OFFSET, &self.next_lsn.to_le_bytes());
        put(BOOT_ID_OFFSET, &self.boot_id.to_le_bytes());
        put(CHECKPOINT_TIME_OFFSET, &self.checkpoint_unix_ms.to_le_bytes());
        let checksum = crate::checksum::crc32c(&bytes[..CHECKSUM_OFFSET]);
        bytes[CHECKSUM_OFFSET..].copy_from_slice(&checksum.to_le_bytes());
        bytes
    }

    /// The format version of a header slot that has this format's magic but another version (an
    /// index written by an earlier or later build), for the reason a start gives for rebuilding.
    pub(crate) fn other_version(bytes: &[u8]) -> Option<u32> {
        let version = (bytes.len() >= HEADER_BYTES && u64_at(bytes, MAGIC_OFFSET) == INDEX_MAGIC).then(|| u32_at(bytes, VERSION_OFFSET))?;
        (version != INDEX_FORMAT_VERSION).then_some(version)
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<IndexHeader> {
        if bytes.len() < HEADER_BYTES
            || u64_at(bytes, MAGIC_OFFSET) != INDEX_MAGIC
            || u32_at(bytes, VERSION_OFFSET) != INDEX_FORMAT_VERSION
            || crate::checksum::crc32c(&bytes[..CHECKSUM_OFFSET]) != u32_at(bytes, CHECKSUM_OFFSET)
        {
            return None;
        }
        let clean = match u64_at(bytes, CLEAN_OFFSET) {
            0 => false,
            1 => true,
            _ => return None,
        };
        Some(IndexHeader {
            partition_count: u32_at(bytes, PARTITIONS_OFFSET),
            region_bytes: u64_at(bytes, REGION_BYTES_OFFSET),
            fingerprint: u64_at(bytes, FINGERPRINT_OFFSET),
            seq: u64_at(bytes, SEQ_OFFSET),
            clean,
            consistent_position: u64_at(bytes, POSITION_OFFSET),
            next_lsn: u64_at(bytes, NEXT_LSN_OFFSET),
            boot_id: u64_at(bytes, BOOT_ID_OFFSET),
            checkpoint_unix_ms: u64_at(bytes, CHECKPOINT_TIME_OFFSET),
        })
    }

    /// The newer of the two header slots that are valid.
    pub(crate) fn newest(slot_a: &[u8], slot_b: &[u8]) -> Option<IndexHeader> {
        match (IndexHeader::decode(slot_a), IndexHeader::decode(slot_b)) {
            (Some(a), Some(b)) => Some(if a.seq >= b.seq { a } else { b }),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_valid_slot_wins_and_damage_is_detected() {
        let older = IndexHeader {
            partition_count: 4096,
            region_bytes: 1 << 30,
            fingerprint: 9,
            seq: 4,
            clean: true,
            consistent_position: 77,
            next_lsn: 100,
            boot_id: 1,
            checkpoint_unix_ms: 5,
        };
        let newer = IndexHeader { seq: 5, clean: false, ..older };
        assert_eq!(IndexHeader::newest(&older.encode(), &newer.encode()), Some(newer));
        let mut torn = newer.encode();
        torn[50] ^= 0x10;
        assert_eq!(IndexHeader::newest(&older.encode(), &torn), Some(older));
        assert_eq!(IndexHeader::newest(&[0; HEADER_BYTES], &torn), None);
    }
}
