//! The index entry: 32 bytes, offsets only, no pointers.
//!
//! | offset | size | field                                                          |
//! |-------:|-----:|----------------------------------------------------------------|
//! | 0      | 8    | digest, low 64 bits                                            |
//! | 8      | 8    | digest, high 64 bits                                           |
//! | 16     | 8    | meta: expiry (Unix ms, 0 = none) << 16 \| generation (16 bits)  |
//! | 24     | 8    | record location (see `log::location`); 0 empty, u64::MAX deleted |
//!
//! The location is written last, with one aligned 8-byte store: it publishes the entry.

use crate::digest::Digest;
use crate::log::Location;
use crate::log::record::u64_at;

pub(crate) const ENTRY_BYTES: u64 = 32;
pub(crate) const DIGEST_OFFSET: u64 = 0;
pub(crate) const META_OFFSET: u64 = DIGEST_OFFSET + 16;
pub(crate) const LOCATION_OFFSET: u64 = META_OFFSET + 8;
const _: () = assert!(LOCATION_OFFSET + 8 == ENTRY_BYTES);

/// Expiry times must fit in the 48 bits the meta word leaves them (until the year 10889).
/// Keys' expiries are clamped one below it: the largest value marks the entries of parts (which
/// never expire), so that counting keys needs no record reads. Records written before parts
/// existed may hold a key's expiry of `2^48 - 1`: everything that takes an expiry from a record
/// goes through `entry_expiry`, which reads it as this maximum.
pub const EXPIRY_UNIX_MS_MAX: u64 = (1 << 48) - 2;
/// The expiry field of a part's entry and record.
pub(crate) const PART_EXPIRY_MARK: u64 = EXPIRY_UNIX_MS_MAX + 1;

/// The expiry an entry holds for a record: the part mark for parts, the clamped expiry otherwise.
pub(crate) fn entry_expiry(part: bool, expiry_unix_ms: u64) -> u64 {
    if part { PART_EXPIRY_MARK } else { expiry_unix_ms.min(EXPIRY_UNIX_MS_MAX) }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) digest: Digest,
    pub(crate) location: Location,
    pub(crate) expiry_unix_ms: u64,
    pub(crate) generation: u16,
}

impl Entry {
    pub(crate) fn meta(&self) -> u64 {
        assert!(self.expiry_unix_ms <= PART_EXPIRY_MARK);
        (self.expiry_unix_ms << 16) | self.generation as u64
    }

    pub(crate) fn decode(bytes: &[u8; ENTRY_BYTES as usize]) -> Entry {
        let meta = u64_at(bytes, META_OFFSET as usize);
        Entry {
            digest: Digest::from_words(u64_at(bytes, 0), u64_at(bytes, 8)),
            location: Location(u64_at(bytes, LOCATION_OFFSET as usize)),
            expiry_unix_ms: meta >> 16,
            generation: meta as u16,
        }
    }

    /// The bytes written before the location is published.
    pub(crate) fn prefix(&self) -> [u8; LOCATION_OFFSET as usize] {
        let mut bytes = [0u8; LOCATION_OFFSET as usize];
        bytes[0..8].copy_from_slice(&self.digest.low().to_le_bytes());
        bytes[8..16].copy_from_slice(&self.digest.high().to_le_bytes());
        bytes[16..24].copy_from_slice(&self.meta().to_le_bytes());
        bytes
    }

    pub(crate) fn is_part(&self) -> bool {
        self.expiry_unix_ms == PART_EXPIRY_MARK
    }

    /// Reads the clock only for entries that have an expiry.
    pub(crate) fn is_expired_now(&self) -> bool {
        self.expiry_unix_ms != 0 && self.is_expired(crate::now_unix_ms())
    }

    pub(crate) fn is_expired(&self, now_unix_ms: u64) -> bool {
        self.expiry_unix_ms != 0 && self.expiry_unix_ms <= now_unix_ms
    }
}
