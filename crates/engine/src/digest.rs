//! The 128-bit digest of (namespace, key) that the index is keyed by.

use xxhash_rust::xxh3::{xxh3_128_with_seed, xxh3_64};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Digest(pub(crate) u128);

impl Digest {
    pub(crate) fn of(namespace_seed: u64, key: &[u8]) -> Digest {
        Digest(xxh3_128_with_seed(key, namespace_seed))
    }

    /// The partition: the top bits, independent of the probe position (low bits).
    pub(crate) fn partition(self, partition_count: usize) -> usize {
        debug_assert!(partition_count.is_power_of_two());
        ((self.0 >> 64) as u64 >> (64 - partition_count.trailing_zeros())) as usize
    }

    /// Where linear probing starts in a table of `capacity` slots (multiply-shift range reduction).
    pub(crate) fn home_slot(self, capacity: u32) -> u32 {
        (((self.0 as u64) as u128 * capacity as u128) >> 64) as u32
    }

    pub(crate) fn low(self) -> u64 {
        self.0 as u64
    }

    pub(crate) fn high(self) -> u64 {
        (self.0 >> 64) as u64
    }

    pub(crate) fn from_words(low: u64, high: u64) -> Digest {
        Digest(((high as u128) << 64) | low as u128)
    }
}

/// Bytes of a part key: the owner's digest (low then high word, little-endian) and the part
/// number (u32 LE). A fixed, short key whatever the owner's key length, so the tombstones of all
/// of a key's parts stay small.
pub(crate) const PART_KEY_BYTES: usize = 20;

/// Mixed into the seed of part digests: part keys and user keys are separate digest domains.
const PART_DOMAIN_SEED: u64 = 0x7061_7274_6b65_7973;

/// High digest bits a part takes from its owner: every partition count up to 2^16 uses only
/// these bits, so a part always lives in its owner's partition (under the same lock).
const OWNER_HIGH_MASK: u64 = 0xffff << 48;

pub(crate) fn part_key(owner: Digest, number: u32) -> [u8; PART_KEY_BYTES] {
    let mut key = [0u8; PART_KEY_BYTES];
    key[0..8].copy_from_slice(&owner.low().to_le_bytes());
    key[8..16].copy_from_slice(&owner.high().to_le_bytes());
    key[16..20].copy_from_slice(&number.to_le_bytes());
    key
}

impl Digest {
    /// The digest of a part record from its key (see `part_key`; the record decoder rejects part
    /// records with keys of another length).
    pub(crate) fn of_part_key(namespace_seed: u64, key: &[u8]) -> Digest {
        assert_eq!(key.len(), PART_KEY_BYTES, "part keys are validated when decoded");
        let owner_high = u64::from_le_bytes(key[8..16].try_into().expect("8 bytes"));
        let own = Digest(xxh3_128_with_seed(key, namespace_seed ^ PART_DOMAIN_SEED));
        Digest::from_words(own.low(), (owner_high & OWNER_HIGH_MASK) | (own.high() & !OWNER_HIGH_MASK))
    }
}

/// The digest seed of a namespace: its name, so that equal keys in two namespaces differ.
pub(crate) fn namespace_seed(name: &str) -> u64 {
    xxh3_64(name.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_and_home_slots_stay_in_range() {
        for key in 0..1000u32 {
            let digest = Digest::of(1, &key.to_le_bytes());
            assert!(digest.partition(4096) < 4096);
            assert!(digest.home_slot(37) < 37);
            assert_eq!(Digest::from_words(digest.low(), digest.high()), digest);
        }
        assert_ne!(Digest::of(1, b"k"), Digest::of(2, b"k"));
    }

    #[test]
    fn parts_share_their_owners_partition_and_nothing_else() {
        for key in 0..1000u32 {
            let owner = Digest::of(5, &key.to_le_bytes());
            let first = Digest::of_part_key(5, &part_key(owner, 0));
            let second = Digest::of_part_key(5, &part_key(owner, 1));
            assert_eq!(first.partition(4096), owner.partition(4096));
            assert_eq!(second.partition(65536), owner.partition(65536));
            assert_ne!(first, second);
            assert_ne!(first, Digest::of(5, &part_key(owner, 0)));
        }
    }
}
