//! The 128-bit digest of (namespace, key) that the index is keyed by.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

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

/// Hashes a digest for in-memory maps by its low word: a digest is already uniformly random,
/// and its low word is independent of its partition (the high word's top bits), so a map of one
/// partition's digests spreads as well as any. Far cheaper than the default SipHash.
#[derive(Default)]
pub(crate) struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u128(&mut self, value: u128) {
        self.0 ^= value as u64;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

pub(crate) type DigestMap<V> = HashMap<Digest, V, BuildHasherDefault<DigestHasher>>;

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

    #[test]
    fn digests_of_one_partition_hash_to_spread_buckets_and_control_bits() {
        use std::hash::BuildHasher;
        let build = BuildHasherDefault::<DigestHasher>::default();
        let one_partition: Vec<Digest> =
            (0..200_000u32).map(|key| Digest::of(3, &key.to_le_bytes())).filter(|digest| digest.partition(4096) == 7).collect();
        assert!(one_partition.len() > 20);
        let hashes: Vec<u64> = one_partition.iter().map(|digest| build.hash_one(digest)).collect();
        let distinct = |bits: fn(u64) -> u64| hashes.iter().map(|&hash| bits(hash)).collect::<std::collections::BTreeSet<_>>().len();
        // A map indexes buckets with the low bits and filters with the top 7: both must vary.
        assert!(distinct(|hash| hash & 0xff) > hashes.len().min(256) / 2);
        assert!(distinct(|hash| hash >> 57) > 16);
        let mut map = DigestMap::default();
        for (number, digest) in one_partition.iter().enumerate() {
            map.insert(*digest, number);
        }
        assert!(one_partition.iter().enumerate().all(|(number, digest)| map[digest] == number));
    }
}
