//! How a sorted set is laid over engine records, so that a write, a rank or the start of a
//! range costs about the same whatever the set's size.
//!
//! The members and their scores are a hash (`crate::hash_layout`): member → score (8 bytes,
//! `values::encode_score`), one record while small, then a root plus buckets in the key's parts;
//! ZSCORE, and the lookup every write starts with, read one bucket.
//!
//! The order is kept apart. A small set's record is itself kept in Redis's order (score, then
//! member bytes), so reading it is reading the order. A bucketed set also has an order index: a
//! list (`crate::list_layout`) of entries in Redis's order, each the score as 8 bytes that sort
//! as the scores do (`order_entry`) followed by the member, stored in the key's second part space
//! (`SECOND_PART_SPACE`): the list's top (or its one record) at the space's first part, its
//! directories and chunks after it (`crate::second_space`). A rank or a range end is found by binary
//! search (`OpenList::partition_point`: over the directories, then one directory's chunks, by
//! their last entries, then within one chunk; the chunks read are kept for the command); a write
//! removes the member's old entry and inserts the new one, rewriting one chunk, its directory
//! and the list's top besides the hash's bucket and root.
//!
//! Invariants: a bucketed sorted set's order index holds exactly its members with their
//! scores, in Redis's order, with no score -0 (stored as 0, which sorts the same); a sorted set
//! in one record has no part in the second space (`put` of the one record drops them). Every
//! change is in the command's one engine batch, so a crash keeps both structures or neither.

use bytes::Bytes;

use crate::command::{CommandError, KeyStore};
use crate::group_store::{self, Kept, KeptSortedSet};
use crate::hash_layout::{HashLimits, OpenHash, Saved};
use crate::list_layout::{End, ListLimits, OpenList, CHUNKS_TARGET};
use crate::second_space::SecondSpace;
use crate::values::{decode_score, encode_score, Collection, CorruptValue};

/// A member and its score.
pub type Scored = (Bytes, f64);

/// Bytes of an order entry before its member: the score.
const ORDER_SCORE_BYTES: usize = 8;

/// A sorted set's fields (member → 8-byte score) as members and scores.
pub fn scored(fields: Vec<(Bytes, Bytes)>) -> Result<Vec<Scored>, CorruptValue> {
    fields.into_iter().map(|(member, score)| Ok((member, decode_score(&score)?))).collect()
}

/// A sorted set's fields as members and scores in Redis's order.
fn scored_in_order(fields: Vec<(Bytes, Bytes)>) -> Result<Vec<Scored>, CorruptValue> {
    let mut members = scored(fields)?;
    members.sort_unstable_by(by_score_then_member);
    Ok(members)
}

/// Redis's order: by score, then by member bytes.
pub fn by_score_then_member(a: &Scored, b: &Scored) -> std::cmp::Ordering {
    a.1.partial_cmp(&b.1).expect("scores are never NaN").then_with(|| a.0.cmp(&b.0))
}

/// A score as stored: -0 becomes 0, as in Redis's listpack, which reads its "-0" back as the
/// integer 0 (a Redis skiplist of more than 128 members keeps -0).
pub fn stored_score(score: f64) -> f64 {
    if score == 0.0 { 0.0 } else { score }
}

/// An order entry: the score's bits made to sort as the scores do (sign bit flipped for
/// positive scores, every bit for negative ones), big-endian, then the member, so that entries
/// compare as bytes in Redis's order.
pub fn order_entry(member: &[u8], score: f64) -> Bytes {
    debug_assert!(!(score.is_nan() || score == 0.0 && score.is_sign_negative()), "stored scores only");
    let bits = score.to_bits();
    let sortable = if bits >> 63 == 1 { !bits } else { bits | 1 << 63 };
    let mut entry = Vec::with_capacity(ORDER_SCORE_BYTES + member.len());
    entry.extend_from_slice(&sortable.to_be_bytes());
    entry.extend_from_slice(member);
    Bytes::from(entry)
}

pub fn decode_order_entry(entry: &Bytes) -> Result<Scored, CorruptValue> {
    let Some(score_bytes) = entry.get(..ORDER_SCORE_BYTES) else { return Err(CorruptValue("order entry too short")) };
    let sortable = u64::from_be_bytes(score_bytes.try_into().expect("8 bytes"));
    let bits = if sortable >> 63 == 1 { sortable & !(1 << 63) } else { !sortable };
    let score = decode_score(&bits.to_le_bytes())?;
    Ok((entry.slice(ORDER_SCORE_BYTES..), score))
}

/// The order index's limits in a namespace: its top takes one part of the second space, and
/// its chunks grow early enough that it holds whatever the set's hash may hold (at most
/// `parts_per_key_max` buckets of at most a quarter of the value limit) in half its parts, with
/// chunks of up to half the value limit (its directories and free parts take far fewer than
/// the other half).
pub fn order_index_limits(value_bytes_max: u64, parts_per_key_max: u32) -> ListLimits {
    let chunks_max = parts_per_key_max - 1;
    ListLimits { chunks_target: u64::from(chunks_max / 2).min(CHUNKS_TARGET), ..ListLimits::new(value_bytes_max, chunks_max).searched() }
}

/// A sorted set as one command sees it: read lazily, changed in memory, written back by `save`.
pub struct OpenSortedSet {
    key: Bytes,
    members: OpenHash,
    /// The order index of a set stored bucketed; None for a set in one record or new.
    order: Option<OpenList>,
    order_limits: ListLimits,
}

impl OpenSortedSet {
    /// The key's sorted set; None when the key is missing, WRONGTYPE when it holds another type.
    pub fn open(store: &mut dyn KeyStore, key: &Bytes, order_limits: ListLimits) -> Result<Option<OpenSortedSet>, CommandError> {
        let Some(members) = OpenHash::open(store, key, Collection::SortedSet)? else { return Ok(None) };
        let order = match members.is_stored_bucketed() {
            true => Some(OpenList::open(&mut SecondSpace { store }, key, order_limits)?.ok_or(CorruptValue("bucketed sorted set without its order index"))?),
            false => None,
        };
        Ok(Some(OpenSortedSet { key: key.clone(), members, order, order_limits }))
    }

    /// `open`, taking the sorted set an earlier ZADD of a pipelined group kept open
    /// (`save_or_keep`); the caller ends with `save_or_keep` (`OpenList::open_kept`).
    pub fn open_kept(store: &mut dyn KeyStore, key: &Bytes, order_limits: ListLimits) -> Result<Option<OpenSortedSet>, CommandError> {
        let wanted = |kept| match kept {
            Kept::SortedSet(kept) => Ok(kept.set),
            other => Err(other),
        };
        group_store::open_kept(store, key, wanted, |store| OpenSortedSet::open(store, key, order_limits))
    }

    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// `save`, or, in a pipelined group, keeps the set open for the group's next command on
    /// its key (`KeyStore::keep`), which saves it before anything else touches the key. A set
    /// left empty is saved now: its key is deleted, as the next command must see.
    pub fn save_or_keep(self, store: &mut dyn KeyStore, hash_limits: &HashLimits, versions_watched: bool) -> Result<(), CommandError> {
        if !self.members.is_changed() || self.len() == 0 {
            return self.save(store, hash_limits, versions_watched);
        }
        let kept = KeptSortedSet { set: self, hash_limits: *hash_limits, versions_watched };
        group_store::keep_or_save(store, Kept::SortedSet(Box::new(kept)))
    }

    /// A new sorted set of `members` (distinct), for `save` to write under a key that is
    /// absent (deleted first).
    pub fn with_members(key: &Bytes, members: Vec<Scored>, order_limits: ListLimits) -> OpenSortedSet {
        let fields = members.into_iter().map(|(member, score)| (member, encode_score(stored_score(score)))).collect();
        OpenSortedSet { key: key.clone(), members: OpenHash::with_distinct_fields(key, Collection::SortedSet, fields), order: None, order_limits }
    }

    pub fn len(&self) -> u64 {
        self.members.len()
    }

    /// Whether the set is one record (read whole, in order) rather than buckets and an index.
    pub fn is_one_record(&self) -> bool {
        self.order.is_none()
    }

    pub fn score(&mut self, store: &mut dyn KeyStore, member: &[u8]) -> Result<Option<f64>, CommandError> {
        Ok(self.members.get(store, member)?.map(|value| decode_score(&value)).transpose()?)
    }

    /// Sets the member's score (-0 is stored as 0).
    pub fn set_score(&mut self, store: &mut dyn KeyStore, member: Bytes, score: f64) -> Result<(), CommandError> {
        let score = stored_score(score);
        let old = self.score(store, &member)?;
        self.members.set(store, member.clone(), encode_score(score))?;
        if let Some(order) = &mut self.order {
            let mut space = SecondSpace { store };
            if let Some(old) = old {
                let rank = entry_rank(order, &mut space, &(member.clone(), old))?;
                order.remove(&mut space, rank)?;
            }
            let entry = (member, score);
            let rank = entry_rank(order, &mut space, &entry)?;
            order.insert(&mut space, rank, order_entry(&entry.0, entry.1))?;
        }
        Ok(())
    }

    /// Removes the member; true when it was there.
    pub fn remove(&mut self, store: &mut dyn KeyStore, member: &[u8]) -> Result<bool, CommandError> {
        let Some(score) = self.score(store, member)? else { return Ok(false) };
        self.members.remove(store, member)?;
        if let Some(order) = &mut self.order {
            let mut space = SecondSpace { store };
            let rank = entry_rank(order, &mut space, &(Bytes::copy_from_slice(member), score))?;
            let removed = order.remove(&mut space, rank)?;
            if decode_order_entry(&removed)?.0.as_ref() != member {
                return Err(CorruptValue("order index disagrees with its sorted set").into());
            }
        }
        Ok(true)
    }

    /// The members at ranks `ranks` (within 0..len), in Redis's order.
    pub fn members_at(&mut self, store: &mut dyn KeyStore, ranks: std::ops::Range<u64>) -> Result<Vec<Scored>, CommandError> {
        if ranks.is_empty() {
            return Ok(Vec::new());
        }
        assert!(ranks.end <= self.len(), "ranks {ranks:?} past a set of {}", self.len());
        match &mut self.order {
            Some(order) => {
                let entries = order.range(&mut SecondSpace { store }, ranks.start, ranks.end - 1)?;
                Ok(entries.iter().map(decode_order_entry).collect::<Result<_, _>>()?)
            }
            None => {
                let mut members = self.small_members()?;
                members.truncate(ranks.end as usize);
                Ok(members.split_off(ranks.start as usize))
            }
        }
    }

    /// Removes and answers the members at ranks `ranks` (within 0..len), in Redis's order: the
    /// order index loses them in one pass (`OpenList::remove_range`: the chunks wholly inside
    /// are dropped unread), the hash one by one.
    pub fn remove_ranks(&mut self, store: &mut dyn KeyStore, ranks: std::ops::Range<u64>) -> Result<Vec<Scored>, CommandError> {
        let members = self.members_at(store, ranks.clone())?;
        for (member, _) in &members {
            if !self.members.remove(store, member)? {
                return Err(CorruptValue("order index names a member its sorted set lacks").into());
            }
        }
        if let Some(order) = &mut self.order {
            order.remove_range(&mut SecondSpace { store }, ranks.start, ranks.end)?;
        }
        Ok(members)
    }

    /// A set in one record: its members sorted (the record is in order when stored, not
    /// necessarily after this command's changes).
    fn small_members(&mut self) -> Result<Vec<Scored>, CommandError> {
        let fields = self.members.small_fields_mut().expect("a set without an order index is one record").clone();
        Ok(scored_in_order(fields)?)
    }

    /// The first rank whose member `reached` holds for (len when none), `reached` being false
    /// then true along Redis's order: a binary search over the order index.
    pub fn partition_point(&mut self, store: &mut dyn KeyStore, reached: impl Fn(&Scored) -> bool) -> Result<u64, CommandError> {
        match &mut self.order {
            Some(order) => search(order, &mut SecondSpace { store }, reached),
            None => Ok(self.small_members()?.iter().position(reached).map_or(self.len(), |at| at as u64)),
        }
    }

    /// Writes the changes back, keeping the key's expiry: the hash first (which drops the order
    /// index when the set becomes one record or empty), then the order index of a set that is
    /// bucketed, built from every member when it was not bucketed before.
    pub fn save(mut self, store: &mut dyn KeyStore, hash_limits: &HashLimits, versions_watched: bool) -> Result<(), CommandError> {
        self.members.join_buckets_made_in_memory();
        let in_one_record = match self.members.small_fields_mut() {
            Some(fields) => {
                let members = scored_in_order(std::mem::take(fields))?;
                *fields = members.iter().map(|(member, score)| (member.clone(), encode_score(*score))).collect();
                Some(members)
            }
            None => None,
        };
        let saved = self.members.save(store, hash_limits, versions_watched)?;
        let mut space = SecondSpace { store };
        match (saved, self.order, in_one_record) {
            (Saved::Bucketed, Some(order), _) => order.save(&mut space),
            (Saved::Bucketed, None, Some(members)) => {
                let mut order = OpenList::open_or_new(&mut space, &self.key, self.order_limits)?;
                for (member, score) in members {
                    order.push(&mut space, End::Tail, order_entry(&member, score))?;
                }
                order.save(&mut space)
            }
            (Saved::Bucketed, None, None) => unreachable!("a set bucketed as stored has its order index open"),
            // Unchanged: nothing to write; one record or deleted: `put` or `delete` took the index.
            _ => Ok(()),
        }
    }
}

/// The rank `entry` has, or would have, in the order index: order entries compare as bytes in
/// Redis's order, so the probes compare without decoding.
fn entry_rank(order: &mut OpenList, space: &mut SecondSpace<'_>, entry: &Scored) -> Result<u64, CommandError> {
    let target = order_entry(&entry.0, entry.1);
    order.partition_point_at_least(space, &target)
}

/// Binary search over the order index: the first rank whose entry `reached` holds for.
fn search(order: &mut OpenList, space: &mut SecondSpace<'_>, reached: impl Fn(&Scored) -> bool) -> Result<u64, CommandError> {
    order.partition_point(space, |entry| Ok(reached(&decode_order_entry(entry)?)))
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};

    use hybridkv_engine::SECOND_PART_SPACE;

    use super::*;
    use crate::list_layout::{CHUNK_BYTES_TARGET_MIN, DIRECTORY_CHUNKS_MAX};
    use crate::memory_store::MemoryStore;

    const ORDER_LIMITS: ListLimits = ListLimits { value_bytes_max: 1 << 20, chunks_max: 4096, chunk_bytes_min: CHUNK_BYTES_TARGET_MIN, chunks_target: CHUNKS_TARGET, directory_chunks_max: DIRECTORY_CHUNKS_MAX, separators: true };

    fn hash_limits() -> HashLimits {
        HashLimits::new(1 << 20, 4096)
    }

    fn key() -> Bytes {
        Bytes::from_static(b"zset")
    }

    #[test]
    fn order_entries_sort_as_redis_orders_members() {
        let mut scored: Vec<Scored> = [-f64::INFINITY, -1e300, -2.5, -f64::MIN_POSITIVE, 0.0, f64::MIN_POSITIVE, 1.0, 1.0, 1e300, f64::INFINITY]
            .iter()
            .enumerate()
            .map(|(at, score)| (Bytes::from(vec![b'a' + (9 - at as u8); at % 3]), *score))
            .collect();
        scored.sort_by(by_score_then_member);
        let entries: Vec<Bytes> = scored.iter().map(|(member, score)| order_entry(member, *score)).collect();
        let mut sorted = entries.clone();
        sorted.sort();
        assert_eq!(entries, sorted);
        for (entry, expected) in entries.iter().zip(&scored) {
            let decoded = decode_order_entry(entry).unwrap();
            assert_eq!((decoded.0, decoded.1.to_bits()), (expected.0.clone(), expected.1.to_bits()));
        }
        assert!(decode_order_entry(&Bytes::from_static(b"short")).is_err());
    }

    /// The stored set: its hash's members and, when bucketed, its order index, which must agree.
    fn stored(store: &mut MemoryStore) -> Vec<Scored> {
        let Some(mut set) = OpenSortedSet::open(store, &key(), ORDER_LIMITS).unwrap() else {
            assert!(store.parts.is_empty(), "parts left without their key");
            return Vec::new();
        };
        let bucketed = !set.is_one_record();
        let second_space = store.parts.keys().any(|(_, number)| *number >= SECOND_PART_SPACE);
        assert_eq!(bucketed, second_space, "an order index exactly when bucketed");
        let in_order = set.members_at(store, 0..set.len()).unwrap();
        let mut from_hash: Vec<Scored> = OpenHash::open(store, &key(), Collection::SortedSet)
            .unwrap()
            .unwrap()
            .into_fields(store)
            .unwrap()
            .into_iter()
            .map(|(member, score)| (member, decode_score(&score).unwrap()))
            .collect();
        from_hash.sort_by(by_score_then_member);
        assert_eq!(in_order, from_hash, "the order index holds the hash's members");
        in_order
    }

    #[test]
    fn random_writes_keep_the_order_index_equal_to_a_model_through_growth_and_shrinking() {
        let mut random = rand::rngs::StdRng::seed_from_u64(11);
        let mut store = MemoryStore::default();
        let mut model: std::collections::BTreeMap<Bytes, f64> = std::collections::BTreeMap::new();
        for step in 0..400 {
            let mut set = OpenSortedSet::open(&mut store, &key(), ORDER_LIMITS).unwrap().unwrap_or_else(|| OpenSortedSet::with_members(&key(), Vec::new(), ORDER_LIMITS));
            // Grow past the one-record limit, then shrink back under it, twice.
            let growing = (step / 100) % 2 == 0;
            for _ in 0..random.gen_range(1..60) {
                let member = Bytes::from(format!("member:{:05}:{}", random.gen_range(0..3000), "x".repeat(random.gen_range(0..40))));
                if growing || random.gen_bool(0.2) {
                    let score = f64::from(random.gen_range(-20..20)) / 4.0;
                    set.set_score(&mut store, member.clone(), score).unwrap();
                    model.insert(member, stored_score(score));
                } else if random.gen_bool(0.1) {
                    let start = random.gen_range(0..=set.len());
                    let end = random.gen_range(start..=set.len().min(start + 200));
                    let mut in_order: Vec<Scored> = model.iter().map(|(member, score)| (member.clone(), *score)).collect();
                    in_order.sort_by(by_score_then_member);
                    let removed = set.remove_ranks(&mut store, start..end).unwrap();
                    assert_eq!(removed, in_order[start as usize..end as usize], "step {step}");
                    for (member, _) in removed {
                        model.remove(&member);
                    }
                } else if let Some(existing) = model.keys().nth(random.gen_range(0..model.len().max(1))).cloned() {
                    assert!(set.remove(&mut store, &existing).unwrap());
                    model.remove(&existing);
                }
            }
            if let Some(target) = model.iter().next().map(|(member, score)| (member.clone(), *score)) {
                let mut expected: Vec<Scored> = model.iter().map(|(member, score)| (member.clone(), *score)).collect();
                expected.sort_by(by_score_then_member);
                let rank = set.partition_point(&mut store, |other| by_score_then_member(other, &target) != std::cmp::Ordering::Less).unwrap();
                assert_eq!(expected[rank as usize], target, "step {step}");
                let last = expected.len() as u64;
                assert_eq!(set.members_at(&mut store, last.saturating_sub(3)..last).unwrap(), expected[expected.len().saturating_sub(3)..], "step {step}");
            }
            set.save(&mut store, &hash_limits(), false).unwrap();
            let mut expected: Vec<Scored> = model.iter().map(|(member, score)| (member.clone(), *score)).collect();
            expected.sort_by(by_score_then_member);
            assert_eq!(stored(&mut store), expected, "step {step}");
        }
    }

    /// The order index's parts past its top (directories, chunks, free parts) and their bytes.
    fn order_chunks(store: &MemoryStore) -> (usize, usize) {
        let chunks: Vec<usize> = store.parts.iter().filter(|((_, number), _)| *number > SECOND_PART_SPACE).map(|(_, bytes)| bytes.len()).collect();
        (chunks.len(), chunks.iter().sum())
    }

    #[test]
    fn members_added_one_command_at_a_time_in_random_places_keep_the_index_in_half_full_chunks() {
        let mut random = rand::rngs::StdRng::seed_from_u64(3);
        let mut store = MemoryStore::default();
        for number in 0..6_000 {
            let mut set = OpenSortedSet::open(&mut store, &key(), ORDER_LIMITS).unwrap().unwrap_or_else(|| OpenSortedSet::with_members(&key(), Vec::new(), ORDER_LIMITS));
            set.set_score(&mut store, Bytes::from(format!("element:{number}")), f64::from(random.gen_range(0..100_000))).unwrap();
            set.save(&mut store, &hash_limits(), false).unwrap();
        }
        let (chunks, index_bytes) = order_chunks(&store);
        assert!(chunks <= index_bytes / 2048 + 2, "{chunks} chunks for {index_bytes} bytes");
        assert_eq!(stored(&mut store).len(), 6_000);
    }

    #[test]
    fn members_removed_one_command_at_a_time_at_random_leave_no_swarm_of_small_chunks() {
        let mut random = rand::rngs::StdRng::seed_from_u64(5);
        let mut store = MemoryStore::default();
        let members: Vec<Scored> = (0..12_000).map(|number| (Bytes::from(format!("element:{number:05}")), f64::from(number % 977))).collect();
        OpenSortedSet::with_members(&key(), members.clone(), ORDER_LIMITS).save(&mut store, &hash_limits(), false).unwrap();
        let mut left: Vec<Bytes> = members.into_iter().map(|(member, _)| member).collect();
        while left.len() > 2_000 {
            let member = left.swap_remove(random.gen_range(0..left.len()));
            let mut set = OpenSortedSet::open(&mut store, &key(), ORDER_LIMITS).unwrap().unwrap();
            assert!(set.remove(&mut store, &member).unwrap());
            set.save(&mut store, &hash_limits(), false).unwrap();
        }
        let (chunks, index_bytes) = order_chunks(&store);
        assert!(chunks <= index_bytes / 1024 + 2, "{chunks} chunks for {index_bytes} bytes");
        assert_eq!(stored(&mut store).len(), 2_000);
    }

    #[test]
    fn a_write_to_a_big_set_rewrites_a_bounded_number_of_records() {
        let mut store = MemoryStore::default();
        let members = (0..20_000).map(|number| (Bytes::from(format!("member:{number}")), f64::from(number % 100))).collect();
        OpenSortedSet::with_members(&key(), members, ORDER_LIMITS).save(&mut store, &hash_limits(), false).unwrap();
        assert_eq!(stored(&mut store).len(), 20_000);
        // The hash splits its buckets toward its target a few per write: let it get there.
        for number in 0..300 {
            let mut set = OpenSortedSet::open(&mut store, &key(), ORDER_LIMITS).unwrap().unwrap();
            set.set_score(&mut store, Bytes::from(format!("member:{number}")), -1.0).unwrap();
            set.save(&mut store, &hash_limits(), false).unwrap();
        }
        let (parts_before, keys_before) = (store.part_writes, store.key_writes);
        let mut set = OpenSortedSet::open(&mut store, &key(), ORDER_LIMITS).unwrap().unwrap();
        set.set_score(&mut store, Bytes::from_static(b"member:7"), 1e6).unwrap();
        set.save(&mut store, &hash_limits(), false).unwrap();
        // The bucket, the order index's top, at most two chunks (the old and new entry's) and
        // their directories.
        assert!(store.part_writes - parts_before <= 6, "{}", store.part_writes - parts_before);
        assert!(store.key_writes - keys_before <= 1);
        let mut set = OpenSortedSet::open(&mut store, &key(), ORDER_LIMITS).unwrap().unwrap();
        assert_eq!(set.members_at(&mut store, 19_999..20_000).unwrap(), vec![(Bytes::from_static(b"member:7"), 1e6)]);
    }
}
