//! Where a record lives, packed into the 8 bytes an index entry has for it.
//!
//! | bits  | field                                                        |
//! |-------|--------------------------------------------------------------|
//! | 63–40 | write block slot (24 bits)                                    |
//! | 39–13 | offset in the block in 8-byte units (27 bits: blocks ≤ 1 GiB) |
//! | 12–0  | record size in 8-byte units, 0 when ≥ 64 KiB (13 bits)       |
//!
//! 0 never names a record (offset 0 holds the block header), so the index uses 0 for an empty
//! slot; u64::MAX (slot 2^24 - 1) is beyond every configuration and marks a deleted slot.

use crate::log::record::RECORD_ALIGN_BYTES;

const SLOT_SHIFT: u32 = 40;
const OFFSET_SHIFT: u32 = 13;
const OFFSET_MASK: u64 = (1 << 27) - 1;
const SIZE_MASK: u64 = (1 << 13) - 1;
/// Slots are 24 bits, and the all-ones slot is reserved for the deleted marker.
pub(crate) const BLOCK_SLOTS_MAX: u64 = (1 << 24) - 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Location(pub(crate) u64);

impl Location {
    pub(crate) const EMPTY: Location = Location(0);
    pub(crate) const DELETED: Location = Location(u64::MAX);

    pub(crate) fn new(slot: u32, offset: u64, record_bytes: usize) -> Location {
        assert!((slot as u64) < BLOCK_SLOTS_MAX);
        assert!(offset > 0 && offset.is_multiple_of(RECORD_ALIGN_BYTES as u64));
        let offset_units = offset / RECORD_ALIGN_BYTES as u64;
        assert!(offset_units <= OFFSET_MASK, "blocks are at most 1 GiB");
        assert!(record_bytes.is_multiple_of(RECORD_ALIGN_BYTES));
        let size_units = (record_bytes / RECORD_ALIGN_BYTES) as u64;
        let size_field = if size_units <= SIZE_MASK { size_units } else { 0 };
        Location(((slot as u64) << SLOT_SHIFT) | (offset_units << OFFSET_SHIFT) | size_field)
    }

    pub(crate) fn is_record(self) -> bool {
        self != Location::EMPTY && self != Location::DELETED
    }

    pub(crate) fn slot(self) -> u32 {
        (self.0 >> SLOT_SHIFT) as u32
    }

    pub(crate) fn offset(self) -> u64 {
        ((self.0 >> OFFSET_SHIFT) & OFFSET_MASK) * RECORD_ALIGN_BYTES as u64
    }

    /// The record's size when it is small enough to be packed here.
    pub(crate) fn record_bytes(self) -> Option<usize> {
        let units = self.0 & SIZE_MASK;
        (units != 0).then_some(units as usize * RECORD_ALIGN_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        let location = Location::new(123_456, 8 * 1_000_000, 496);
        assert_eq!((location.slot(), location.offset(), location.record_bytes()), (123_456, 8_000_000, Some(496)));
        assert!(location.is_record());
        assert_eq!(Location::new(1, 64, 1 << 20).record_bytes(), None);
        assert!(!Location::EMPTY.is_record() && !Location::DELETED.is_record());
    }
}
