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
}
