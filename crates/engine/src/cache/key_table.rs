//! A shard's table from key to slab slot: open addressing with linear probing over 8-byte
//! slots, each holding a 32-bit tag of the key and the entry's slab slot number.
//!
//! Why not hashbrown's table, which the cache used first: it keeps its control bytes and its
//! slots in two places, so a lookup in a large table took two cache misses before the slab entry,
//! and where a key's probe starts depends on its internals. Here a lookup's first slot holds the
//! tag and the slot number together (one miss, usually the only one: the next slots share its
//! line), and where it is depends only on the key and the table's size, which a mirror outside
//! the shard's lock publishes (`TableMirror`): a reader prefetches it while it looks the key up in
//! the index, before it takes the shard's lock.
//!
//! Slot layout: `tag << 32 | (slot number + 1)`; 0 is an empty slot. The home slot of a tag is
//! `tag * slots >> 32` (multiply-shift), so growing and shrinking rehash from the slots alone,
//! without reading the slab. Invariant: every entry is reachable from its home slot without
//! crossing an empty slot (linear probing; removal shifts later entries back to keep it).

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use super::SlotIndex;

/// A table grows when an insert would fill more than LOAD_MAX_NUMERATOR/LOAD_MAX_DENOMINATOR of
/// its slots (linear probing stays short below it), so just after doubling it is 3/8 full.
const LOAD_MAX_NUMERATOR: usize = 3;
const LOAD_MAX_DENOMINATOR: usize = 4;
/// The smallest table allocated.
const KEY_TABLE_SLOTS_MIN: usize = 16;
pub(super) const KEY_TABLE_SLOT_BYTES: usize = std::mem::size_of::<u64>();
const EMPTY_SLOT: u64 = 0;

/// The 32-bit tag of a key: the high half of its 64 digest bits, mixed.
fn tag_of(key_hash: u64) -> u32 {
    (key_hash.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32
}

fn home_of(tag: u32, slots: usize) -> usize {
    ((u64::from(tag) * slots as u64) >> 32) as usize
}

fn slot_word(tag: u32, index: SlotIndex) -> u64 {
    (u64::from(tag) << 32) | (u64::from(index) + 1)
}

fn tag_in(word: u64) -> u32 {
    (word >> 32) as u32
}

fn index_in(word: u64) -> SlotIndex {
    debug_assert_ne!(word, EMPTY_SLOT);
    (word as u32) - 1
}

/// The most entries a table of `slots` holds before it grows.
fn items_max(slots: usize) -> usize {
    slots / LOAD_MAX_DENOMINATOR * LOAD_MAX_NUMERATOR
}

/// The fewest slots (a power of two) that hold `items` entries.
fn slots_for(items: usize) -> usize {
    let mut slots = KEY_TABLE_SLOTS_MIN;
    while items_max(slots) < items {
        slots *= 2;
    }
    slots
}

#[derive(Default)]
pub(super) struct KeyTable {
    /// A power-of-two number of slots, or none before the first insert.
    slots: Box<[u64]>,
    len: usize,
}

impl KeyTable {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Entries the table holds before its next insert makes it grow.
    pub(super) fn capacity(&self) -> usize {
        items_max(self.slots.len())
    }

    pub(super) fn allocation_bytes(&self) -> usize {
        self.slots.len() * KEY_TABLE_SLOT_BYTES
    }

    /// What the next insert adds to the allocation: nothing, or a doubling.
    pub(super) fn growth_bytes(&self) -> usize {
        if self.len < self.capacity() {
            return 0;
        }
        slots_for(self.len + 1) * KEY_TABLE_SLOT_BYTES - self.allocation_bytes()
    }

    /// The slab slot of the key whose entry `is_key` recognizes (it checks the full key: two keys
    /// may share a tag).
    pub(super) fn find(&self, key_hash: u64, is_key: impl Fn(SlotIndex) -> bool) -> Option<SlotIndex> {
        if self.slots.is_empty() {
            return None;
        }
        let tag = tag_of(key_hash);
        let mask = self.slots.len() - 1;
        let mut position = home_of(tag, self.slots.len());
        loop {
            let word = self.slots[position];
            if word == EMPTY_SLOT {
                return None;
            }
            if tag_in(word) == tag && is_key(index_in(word)) {
                return Some(index_in(word));
            }
            position = (position + 1) & mask;
        }
    }

    /// The slab slot of the first entry whose tag is the key's, unchecked: where a prefetch of
    /// the key's entry should aim (a lookup confirms the key with the entry itself).
    pub(super) fn likely_index(&self, key_hash: u64) -> Option<SlotIndex> {
        self.find(key_hash, |_| true)
    }

    /// Adds the entry at slab slot `index` for a key the table does not hold.
    pub(super) fn insert(&mut self, key_hash: u64, index: SlotIndex) {
        if self.len + 1 > self.capacity() {
            self.rebuild(slots_for(self.len + 1));
        }
        Self::place(&mut self.slots, slot_word(tag_of(key_hash), index));
        self.len += 1;
    }

    fn place(slots: &mut [u64], word: u64) {
        let mask = slots.len() - 1;
        let mut position = home_of(tag_in(word), slots.len());
        while slots[position] != EMPTY_SLOT {
            position = (position + 1) & mask;
        }
        slots[position] = word;
    }

    /// Removes the entry at slab slot `index` of the key `key_hash`; false when absent.
    pub(super) fn remove(&mut self, key_hash: u64, index: SlotIndex) -> bool {
        if self.slots.is_empty() {
            return false;
        }
        let word = slot_word(tag_of(key_hash), index);
        let mask = self.slots.len() - 1;
        let mut position = home_of(tag_of(key_hash), self.slots.len());
        while self.slots[position] != word {
            if self.slots[position] == EMPTY_SLOT {
                return false;
            }
            position = (position + 1) & mask;
        }
        self.shift_back_into(position);
        self.len -= 1;
        true
    }

    /// Empties slot `hole` and moves back every later entry of the run that may take it, so
    /// that each stays reachable from its home slot.
    fn shift_back_into(&mut self, mut hole: usize) {
        let mask = self.slots.len() - 1;
        let mut next = (hole + 1) & mask;
        while self.slots[next] != EMPTY_SLOT {
            let home = home_of(tag_in(self.slots[next]), self.slots.len());
            // The entry at `next` may move to `hole` unless its home lies in (hole, next].
            let home_after_hole = (home.wrapping_sub(hole + 1) & mask) < (next.wrapping_sub(hole) & mask);
            if !home_after_hole {
                self.slots[hole] = self.slots[next];
                hole = next;
            }
            next = (next + 1) & mask;
        }
        self.slots[hole] = EMPTY_SLOT;
    }

    /// Gives back the allocation down to what `items` entries need (at least the current ones).
    pub(super) fn shrink_to(&mut self, items: usize) {
        let slots = slots_for(items.max(self.len));
        if slots < self.slots.len() {
            self.rebuild(slots);
        }
    }

    pub(super) fn clear(&mut self) {
        *self = KeyTable::default();
    }

    fn rebuild(&mut self, slots: usize) {
        assert!(slots.is_power_of_two() && items_max(slots) >= self.len, "{slots} slots cannot hold {} entries", self.len);
        let mut rebuilt = vec![EMPTY_SLOT; slots].into_boxed_slice();
        for &word in self.slots.iter().filter(|&&word| word != EMPTY_SLOT) {
            Self::place(&mut rebuilt, word);
        }
        self.slots = rebuilt;
    }
}

/// Where a shard's table lives, readable without the shard's lock: a reader computes a key's
/// home slot from it and prefetches it. Updated under the shard's write lock after the table
/// may have moved; a reader that races the update prefetches a stale or wrong address, which
/// costs nothing (a prefetch never faults) and is never read through.
#[derive(Default)]
pub(super) struct TableMirror {
    slots_address: AtomicPtr<u64>,
    slots: AtomicUsize,
}

impl TableMirror {
    /// Publishes where `table` is now; writes nothing when it has not moved or resized (readers
    /// keep the mirror's cache line shared).
    pub(super) fn follow(&self, table: &KeyTable) {
        let address = table.slots.as_ptr().cast_mut();
        if self.slots_address.load(Ordering::Relaxed) != address || self.slots.load(Ordering::Relaxed) != table.slots.len() {
            self.slots_address.store(address, Ordering::Relaxed);
            self.slots.store(table.slots.len(), Ordering::Relaxed);
        }
    }

    /// Prefetches the home slot of `key_hash`.
    pub(super) fn prefetch(&self, key_hash: u64) {
        let slots = self.slots.load(Ordering::Relaxed);
        if slots == 0 {
            return;
        }
        let home = home_of(tag_of(key_hash), slots);
        hybridkv_media::prefetch_address(self.slots_address.load(Ordering::Relaxed).wrapping_add(home).cast::<u8>());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use std::collections::HashMap;

    /// The key hashes whose tag is `tag`: tag_of multiplies by an odd constant, so its inverse
    /// gives keys of any chosen product.
    fn key_with_tag(tag: u32, low: u32) -> u64 {
        let multiplier = 0x9E37_79B9_7F4A_7C15u64;
        let mut inverse = multiplier;
        for _ in 0..6 {
            inverse = inverse.wrapping_mul(2u64.wrapping_sub(multiplier.wrapping_mul(inverse)));
        }
        ((u64::from(tag) << 32) | u64::from(low)).wrapping_mul(inverse)
    }

    /// Random inserts and removes against a model, with a tenth of the keys sharing four tags
    /// (one home slot, long runs, removals from their middle).
    #[test]
    fn finds_exactly_what_was_inserted_and_not_removed() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let pool: Vec<u64> = (0..5000u32)
            .map(|n| if n % 10 == 0 { key_with_tag(n % 4, rng.gen()) } else { rng.gen() })
            .collect();
        assert_eq!(tag_of(pool[0]), 0);
        let mut table = KeyTable::default();
        let mut present: HashMap<u64, SlotIndex> = HashMap::new();
        // The key of each slab slot number handed out, as the slab would tell.
        let mut key_of: Vec<u64> = Vec::new();
        for step in 0..100_000 {
            let key_hash = pool[rng.gen_range(0..pool.len())];
            let found = table.find(key_hash, |index| key_of[index as usize] == key_hash);
            assert_eq!(found, present.get(&key_hash).copied(), "step {step}");
            // The prefetch target is an entry of the key's tag: the key's own unless another
            // key of its tag comes first in its run.
            match table.likely_index(key_hash) {
                Some(likely) => assert_eq!(tag_of(key_of[likely as usize]), tag_of(key_hash), "step {step}"),
                None => assert_eq!(found, None, "step {step}"),
            }
            match found {
                Some(index) if rng.gen_bool(0.6) => {
                    assert!(table.remove(key_hash, index), "step {step}");
                    present.remove(&key_hash);
                }
                Some(_) => {}
                None => {
                    let index = key_of.len() as SlotIndex;
                    key_of.push(key_hash);
                    table.insert(key_hash, index);
                    present.insert(key_hash, index);
                }
            }
            if step % 20_000 == 0 {
                table.shrink_to(0);
            }
            assert_eq!(table.len(), present.len());
        }
        for (&key_hash, &index) in &present {
            assert_eq!(table.find(key_hash, |found| key_of[found as usize] == key_hash), Some(index));
        }
        assert!(!table.remove(pool[0] ^ 1, 0), "an absent entry is not removed");
    }

    #[test]
    fn growth_is_what_the_next_insert_allocates() {
        let mut table = KeyTable::default();
        for item in 0..100_000u32 {
            let (before, growth) = (table.allocation_bytes(), table.growth_bytes());
            table.insert(u64::from(item).wrapping_mul(0x2545_F491_4F6C_DD1D), item);
            assert_eq!(table.allocation_bytes(), before + growth, "at {item} items");
            assert!(table.len() <= table.capacity());
        }
        assert!(table.allocation_bytes() <= 100_000 * KEY_TABLE_SLOT_BYTES * 8 / 3 + KEY_TABLE_SLOT_BYTES);
    }

    #[test]
    fn shrinking_keeps_every_entry() {
        let mut table = KeyTable::default();
        for item in 0..10_000u32 {
            table.insert(u64::from(item).wrapping_mul(0x2545_F491_4F6C_DD1D), item);
        }
        for item in 0..9_900u32 {
            assert!(table.remove(u64::from(item).wrapping_mul(0x2545_F491_4F6C_DD1D), item));
        }
        let before = table.allocation_bytes();
        table.shrink_to(200);
        assert!(table.allocation_bytes() < before);
        for item in 9_900..10_000u32 {
            assert_eq!(table.find(u64::from(item).wrapping_mul(0x2545_F491_4F6C_DD1D), |found| found == item), Some(item));
        }
    }
}
