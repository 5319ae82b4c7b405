//! The index entry: 24 bytes, offsets only, no pointers.
//!
//! | offset | size | field                                                                  |
//! |-------:|-----:|------------------------------------------------------------------------|
//! | 0      | 8    | digest, low 64 bits                                                    |
//! | 8      | 8    | digest, high 64 bits, its top PARTITION_BITS replaced by tags (below)   |
//! | 16     | 8    | record location (see `log::location`); 0 empty, u64::MAX deleted       |
//!
//! The top PARTITION_BITS of a digest name its partition, which the table the entry is in
//! implies: the entry stores tags there instead and decoding puts the partition back, so no digest
//! bit is lost. Tags: bit 63 `PART_TAG` (the entry is a part's), bit 62 `EXPIRES_TAG` (the
//! record has an expiry: only such entries need their record read to tell whether the key has
//! expired), bits 61 .. 64 − PARTITION_BITS zero (ignored when read). Expiry and generation are
//! in the record header, not here.
//!
//! The location is written last, with one aligned 8-byte store: it publishes the entry.

use crate::digest::Digest;
use crate::log::Location;
use crate::log::record::u64_at;

pub(crate) const ENTRY_BYTES: u64 = 24;
pub(crate) const DIGEST_LOW_OFFSET: u64 = 0;
/// The high digest word with the tags: rewritten (before the location) when a key's entry
/// changes from expiring to not or back.
pub(crate) const TAGGED_HIGH_OFFSET: u64 = DIGEST_LOW_OFFSET + 8;
pub(crate) const LOCATION_OFFSET: u64 = TAGGED_HIGH_OFFSET + 8;
const _: () = assert!(LOCATION_OFFSET + 8 == ENTRY_BYTES);
const _: () = assert!(LOCATION_OFFSET.is_multiple_of(8) && ENTRY_BYTES.is_multiple_of(8), "the publishing store must stay 8-byte aligned");

/// Digest bits that name the partition (the top ones), stored as tags.
const PARTITION_BITS: u32 = super::PARTITION_COUNT.trailing_zeros();
const PARTITION_SHIFT: u32 = 64 - PARTITION_BITS;
const PARTITION_MASK: u64 = u64::MAX << PARTITION_SHIFT;
const PART_TAG: u64 = 1 << 63;
const EXPIRES_TAG: u64 = 1 << 62;
const _: () = assert!((PART_TAG | EXPIRES_TAG) & !PARTITION_MASK == 0, "the tags must fit in the partition bits");

/// Expiry times must fit in 48 bits (until the year 10889). Keys' expiries are clamped one below
/// it: the largest value, `PART_EXPIRY_MARK`, is the expiry field of part records (which never
/// expire). Records written before parts existed may hold a key's expiry of `2^48 - 1`:
/// everything that takes an expiry from a record goes through `entry_expiry`, which reads it as
/// this maximum.
pub const EXPIRY_UNIX_MS_MAX: u64 = (1 << 48) - 2;
/// The expiry field of a part's record.
pub(crate) const PART_EXPIRY_MARK: u64 = EXPIRY_UNIX_MS_MAX + 1;

/// The expiry a record stands for: the part mark for parts, the clamped expiry otherwise.
pub(crate) fn entry_expiry(part: bool, expiry_unix_ms: u64) -> u64 {
    if part { PART_EXPIRY_MARK } else { expiry_unix_ms.min(EXPIRY_UNIX_MS_MAX) }
}

/// Whether a record with this expiry field (a part's or a key's) has expired at `now_unix_ms`.
pub(crate) fn record_expired(part: bool, expiry_unix_ms: u64, now_unix_ms: u64) -> bool {
    !part && expiry_unix_ms != 0 && entry_expiry(part, expiry_unix_ms) <= now_unix_ms
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) digest: Digest,
    pub(crate) location: Location,
    /// A part's entry (parts are not keys: counting and listing keys skip them).
    pub(crate) part: bool,
    /// The record has an expiry; never for parts.
    pub(crate) expires: bool,
}

impl Entry {
    /// The entry of a record of `digest` at `location` whose expiry field is `expiry_unix_ms`.
    pub(crate) fn new(digest: Digest, location: Location, part: bool, expiry_unix_ms: u64) -> Entry {
        Entry { digest, location, part, expires: !part && expiry_unix_ms != 0 }
    }

    /// The entry in `bytes`, a slot of partition `partition`'s table.
    pub(crate) fn decode(bytes: &[u8; ENTRY_BYTES as usize], partition: usize) -> Entry {
        let tagged_high = u64_at(bytes, TAGGED_HIGH_OFFSET as usize);
        let high = (tagged_high & !PARTITION_MASK) | (partition as u64) << PARTITION_SHIFT;
        let part = tagged_high & PART_TAG != 0;
        Entry {
            digest: Digest::from_words(u64_at(bytes, DIGEST_LOW_OFFSET as usize), high),
            location: Location(u64_at(bytes, LOCATION_OFFSET as usize)),
            part,
            expires: !part && tagged_high & EXPIRES_TAG != 0,
        }
    }

    /// The tags of the entry in the slot `bytes`, without its digest: (part, has an expiry).
    pub(crate) fn slot_tags(bytes: &[u8]) -> (bool, bool) {
        let tagged_high = u64_at(bytes, TAGGED_HIGH_OFFSET as usize);
        let part = tagged_high & PART_TAG != 0;
        (part, !part && tagged_high & EXPIRES_TAG != 0)
    }

    /// The high digest word as stored: the partition bits replaced by the tags.
    pub(crate) fn tagged_high(&self) -> u64 {
        assert!(!(self.part && self.expires), "parts never expire");
        let tags = if self.part { PART_TAG } else { 0 } | if self.expires { EXPIRES_TAG } else { 0 };
        (self.digest.high() & !PARTITION_MASK) | tags
    }

    /// The bytes written before the location is published.
    pub(crate) fn prefix(&self) -> [u8; LOCATION_OFFSET as usize] {
        let mut bytes = [0u8; LOCATION_OFFSET as usize];
        bytes[DIGEST_LOW_OFFSET as usize..][..8].copy_from_slice(&self.digest.low().to_le_bytes());
        bytes[TAGGED_HIGH_OFFSET as usize..][..8].copy_from_slice(&self.tagged_high().to_le_bytes());
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_with_their_partition_and_tags() {
        for key in 0..1000u32 {
            let digest = Digest::of(9, &key.to_le_bytes());
            let partition = digest.partition(super::super::PARTITION_COUNT);
            for (part, expiry) in [(false, 0), (false, 17), (true, PART_EXPIRY_MARK)] {
                let entry = Entry::new(digest, Location(u64::from(key + 1) << 13), part, expiry);
                let mut bytes = [0u8; ENTRY_BYTES as usize];
                bytes[..LOCATION_OFFSET as usize].copy_from_slice(&entry.prefix());
                bytes[LOCATION_OFFSET as usize..].copy_from_slice(&entry.location.0.to_le_bytes());
                assert_eq!(Entry::decode(&bytes, partition), entry);
                assert_eq!(Entry::slot_tags(&bytes), (part, expiry == 17));
                assert_eq!(entry.expires, expiry == 17);
            }
        }
    }

    #[test]
    fn expiry_is_decided_from_the_record_fields() {
        assert!(!record_expired(false, 0, u64::MAX));
        assert!(!record_expired(true, PART_EXPIRY_MARK, u64::MAX));
        assert!(record_expired(false, 10, 10));
        assert!(!record_expired(false, 11, 10));
        // A key's record of a build before parts, holding the part mark, is a key's maximum.
        assert!(record_expired(false, PART_EXPIRY_MARK, EXPIRY_UNIX_MS_MAX));
    }
}
