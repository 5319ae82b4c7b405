//! A partition's pending entries: the entries of records not yet durable, which reads see before
//! the table's. They are pushed in log order and published in log order, so publication drops
//! them from the front of a queue; a map keeps each digest's newest one, so that a lookup costs
//! the same however many writes wait (a hot key, or a big hash whose buckets all live in their
//! key's partition, can leave tens of thousands of them in one partition between flushes).

use std::collections::VecDeque;

use super::Entry;
use crate::digest::{Digest, DigestMap};

/// An entry for a record that is not durable yet; `entry.location` is DELETED for a deletion.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PendingEntry {
    pub(crate) entry: Entry,
    pub(crate) lsn: u64,
}

/// Room for entries a partition keeps once all of its entries are published. More is given back:
/// a burst (a defragmentation round, a big hash's writes) leaves no lasting growth in each of the
/// 4096 partitions it touched.
const ROOM_KEPT_WHEN_EMPTY_ENTRIES: usize = 8;

#[derive(Default)]
pub(crate) struct PendingEntries {
    /// In the order they were pushed (log order).
    queue: VecDeque<PendingEntry>,
    /// Per digest with entries in `queue`: the newest of them and how many there are.
    newest: DigestMap<(PendingEntry, u32)>,
    /// Entries in `queue` that are parts (writes replacing a key probe for its parts only when
    /// some may exist).
    part_entries: usize,
}

impl PendingEntries {
    pub(crate) fn push(&mut self, pending: PendingEntry) {
        self.queue.push_back(pending);
        self.part_entries += usize::from(pending.entry.part);
        self.newest
            .entry(pending.entry.digest)
            .and_modify(|(newest, count)| {
                *newest = pending;
                *count += 1;
            })
            .or_insert((pending, 1));
    }

    /// The newest pending entry of `digest`.
    pub(crate) fn newest(&self, digest: Digest) -> Option<&PendingEntry> {
        self.newest.get(&digest).map(|(newest, _)| newest)
    }

    /// Removes the pending entry of the record with `lsn`: the oldest one, unless a write is
    /// withdrawn out of order.
    pub(crate) fn remove(&mut self, digest: Digest, lsn: u64) {
        let matches = |pending: &PendingEntry| pending.lsn == lsn && pending.entry.digest == digest;
        let removed = if self.queue.front().is_some_and(matches) {
            self.queue.pop_front()
        } else if let Some(position) = self.queue.iter().position(matches) {
            self.queue.remove(position)
        } else {
            return;
        };
        self.part_entries -= removed.map_or(0, |removed| usize::from(removed.entry.part));
        // One probe of the map: publication removes an entry per record flushed.
        let std::collections::hash_map::Entry::Occupied(mut occupied) = self.newest.entry(digest) else {
            unreachable!("every queued digest is in the map")
        };
        let (newest, count) = occupied.get_mut();
        *count -= 1;
        if *count == 0 {
            occupied.remove();
        } else if newest.lsn == lsn {
            *newest = *self.queue.iter().rev().find(|pending| pending.entry.digest == digest).expect("count > 0");
        }
        if self.queue.is_empty() && self.queue.capacity() > ROOM_KEPT_WHEN_EMPTY_ENTRIES {
            self.queue.shrink_to(ROOM_KEPT_WHEN_EMPTY_ENTRIES);
            self.newest.shrink_to(ROOM_KEPT_WHEN_EMPTY_ENTRIES);
        }
    }

    /// Pending entries, one per digest that has any.
    pub(crate) fn distinct_len(&self) -> usize {
        self.newest.len()
    }

    /// Whether any pending entry is a part's.
    pub(crate) fn holds_parts(&self) -> bool {
        self.part_entries > 0
    }

    /// The newest pending entry of every digest that has any.
    pub(crate) fn newest_entries(&self) -> impl Iterator<Item = &Entry> {
        self.newest.values().map(|(newest, _)| &newest.entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::Location;

    fn pending(key: u64, lsn: u64) -> PendingEntry {
        let entry = Entry::new(Digest::from_words(key, key), Location(lsn << 13), false, 0);
        PendingEntry { entry, lsn }
    }

    #[test]
    fn the_newest_entry_of_a_digest_survives_removals_in_any_order() {
        let mut entries = PendingEntries::default();
        for lsn in 1..=6 {
            entries.push(pending(lsn % 2, lsn));
        }
        assert_eq!(entries.distinct_len(), 2);
        assert_eq!(entries.newest(Digest::from_words(0, 0)).unwrap().lsn, 6);
        entries.remove(Digest::from_words(1, 1), 1);
        // Out of order: the newest goes first, the one before it becomes the newest.
        entries.remove(Digest::from_words(0, 0), 6);
        assert_eq!(entries.newest(Digest::from_words(0, 0)).unwrap().lsn, 4);
        entries.remove(Digest::from_words(0, 0), 99);
        for lsn in [2, 3, 4, 5] {
            entries.remove(Digest::from_words(lsn % 2, lsn % 2), lsn);
        }
        assert!(entries.newest(Digest::from_words(0, 0)).is_none() && entries.newest(Digest::from_words(1, 1)).is_none());
        assert_eq!(entries.distinct_len(), 0);
        assert_eq!(entries.newest_entries().count(), 0);
    }

    #[test]
    fn a_burst_leaves_no_lasting_room_once_published() {
        let mut entries = PendingEntries::default();
        for lsn in 1..=1000 {
            entries.push(pending(lsn, lsn));
        }
        for lsn in 1..=999 {
            entries.remove(Digest::from_words(lsn, lsn), lsn);
        }
        assert!(entries.queue.capacity() >= 1000, "room stays while entries wait");
        entries.remove(Digest::from_words(1000, 1000), 1000);
        assert!(entries.queue.capacity() <= 2 * ROOM_KEPT_WHEN_EMPTY_ENTRIES);
        assert!(entries.newest.capacity() <= 2 * ROOM_KEPT_WHEN_EMPTY_ENTRIES);
    }

    #[test]
    fn parts_are_counted_until_their_last_entry_leaves() {
        let mut entries = PendingEntries::default();
        entries.push(pending(1, 1));
        assert!(!entries.holds_parts());
        let part = |lsn| PendingEntry { entry: Entry { part: true, ..pending(2, lsn).entry }, lsn };
        entries.push(part(2));
        entries.push(part(3));
        entries.remove(Digest::from_words(2, 2), 3);
        assert!(entries.holds_parts(), "one part entry is still pending");
        entries.remove(Digest::from_words(2, 2), 2);
        assert!(!entries.holds_parts());
    }
}
