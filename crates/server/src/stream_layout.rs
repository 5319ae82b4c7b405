//! How a stream is laid over engine records, so that an XADD, or a read from a given ID, costs
//! about the same whatever the stream's size.
//!
//! The key's record (tag 11, `values::StreamRoot`) holds the stream's counters: its length,
//! the last ID it ever had, the greatest ID deleted, the entries ever added, and its consumer
//! groups' names. The entries are a list (`crate::list_layout`) in the key's second part space
//! (`crate::second_space`), in ID order, each entry its ID as 16 big-endian bytes followed by
//! its fields and values (`values::encode_stream_entry`), so that entries compare as bytes as
//! their IDs do and an ID is found by binary search (`OpenList::search` with separators) without
//! decoding the entries it passes. XADD pushes at the list's tail (one chunk, its directory
//! and the list's top rewritten, as RPUSH); trimming drops entries from the head (whole chunks
//! unread, `OpenList::remove_range`); XDEL removes the one entry.
//!
//! A consumer group is a record of its own (tag 12, `values::ConsumerGroup`: its last
//! delivered ID, its consumers and its pending entries) in the key's first part space: the
//! root lists the groups' names, group `n` being part `n`. A group is read the first time a
//! command needs it; XADD never reads one. Destroying group `n` moves the last group's record
//! into part `n`, so the parts stay dense.
//!
//! Invariants: the list holds exactly `length` entries in strictly increasing ID order, every
//! ID at most `last_id`; parts 0..group count hold the groups the root names, in its order;
//! every pending entry of a group names one of its consumers. The key's record, the list and
//! the groups change in the command's one engine batch, so a crash keeps all or none.

use bytes::Bytes;

use crate::command::{fail, CommandError, KeyStore};
use crate::commands::WRONGTYPE;
use crate::group_store::{self, Kept};
use crate::list_layout::{End, ListLimits, OpenList};
use crate::second_space::SecondSpace;
use crate::values::{decode_stream_entry, encode_stream_entry, Consumer, ConsumerGroup, CorruptValue, Pending, Stored, StreamId, StreamRoot, STREAM_ID_BYTES};

/// An entry: its ID and its fields and values (field, value, field, value…).
pub type StreamEntry = (StreamId, Vec<Bytes>);

/// A pending entry delivered again: its ID, and its fields and values unless it was deleted.
pub type Redelivered = (StreamId, Option<Vec<Bytes>>);

/// What XADD's and XTRIM's trimming keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrimTo {
    /// At most this many entries.
    MaxLen(u64),
    /// No entry with an ID under this one.
    MinId(StreamId),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trim {
    pub to: TrimTo,
    /// `~`: only whole chunks go (as Redis drops only whole nodes), so more may stay.
    pub approximate: bool,
    /// Entries one trim removes at most (0: no limit).
    pub limit: u64,
}

/// A group as a command read it.
struct LoadedGroup {
    group: ConsumerGroup,
    dirty: bool,
}

/// A stream as one command sees it: read lazily, changed in memory, written back by `save`.
pub struct OpenStream {
    key: Bytes,
    expiry_unix_ms: u64,
    root: StreamRoot,
    entries: OpenList,
    /// Beside `root.groups`: each group once read (None: not read yet, or taken).
    groups: Vec<Option<LoadedGroup>>,
    /// Parts past the last group once groups were destroyed: deleted by `save`.
    freed_group_parts: Vec<u32>,
    /// Largest record the namespace stores: a group's record is checked against it.
    value_bytes_max: u64,
    changed: bool,
}

impl OpenStream {
    /// The key's stream; None when the key is missing, WRONGTYPE when it holds another type.
    pub fn open(store: &mut dyn KeyStore, key: &Bytes, limits: ListLimits) -> Result<Option<OpenStream>, CommandError> {
        let Some(value) = store.get(key)? else { return Ok(None) };
        let Stored::Stream(root) = Stored::decode(value.bytes)? else { return fail(WRONGTYPE) };
        let entries = OpenList::open_or_new(&mut SecondSpace { store }, key, limits)?;
        if entries.len() != root.length {
            return Err(CorruptValue("stream length disagrees with its entries").into());
        }
        let groups = root.groups.iter().map(|_| None).collect();
        let value_bytes_max = limits.value_bytes_max;
        Ok(Some(OpenStream { key: key.clone(), expiry_unix_ms: value.expiry_unix_ms, root, entries, groups, freed_group_parts: Vec::new(), value_bytes_max, changed: false }))
    }

    /// `open`, taking the stream an earlier XADD of a pipelined group kept open
    /// (`save_or_keep`); the caller ends with `save_or_keep` (`OpenList::open_kept`).
    pub fn open_kept(store: &mut dyn KeyStore, key: &Bytes, limits: ListLimits) -> Result<Option<OpenStream>, CommandError> {
        let wanted = |kept| match kept {
            Kept::Stream(stream) => Ok(*stream),
            other => Err(other),
        };
        group_store::open_kept(store, key, wanted, |store| OpenStream::open(store, key, limits))
    }

    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// `save`, or, in a pipelined group, keeps the stream open for the group's next command on
    /// its key (`KeyStore::keep`), which saves it before anything else touches the key.
    pub fn save_or_keep(self, store: &mut dyn KeyStore) -> Result<(), CommandError> {
        if !self.changed {
            return self.save(store);
        }
        group_store::keep_or_save(store, Kept::Stream(Box::new(self)))
    }

    /// A new empty stream for `save` to write under a key that is absent.
    pub fn new(store: &mut dyn KeyStore, key: &Bytes, limits: ListLimits) -> Result<OpenStream, CommandError> {
        let entries = OpenList::open_or_new(&mut SecondSpace { store }, key, limits)?;
        assert_eq!(entries.len(), 0, "a key without a record has no stream entries");
        let value_bytes_max = limits.value_bytes_max;
        Ok(OpenStream { key: key.clone(), expiry_unix_ms: 0, root: StreamRoot::default(), entries, groups: Vec::new(), freed_group_parts: Vec::new(), value_bytes_max, changed: true })
    }

    pub fn len(&self) -> u64 {
        self.root.length
    }

    pub fn root(&self) -> &StreamRoot {
        &self.root
    }

    /// The records holding entries, and the records of the stream in all (its key's, the
    /// entries' list's top and directories): XINFO STREAM's radix-tree keys and nodes.
    pub fn records(&self) -> (u64, u64) {
        let (chunks, list_records) = self.entries.record_counts();
        (chunks, list_records + 1)
    }

    /// The counters, to change (XSETID): the stream is saved.
    pub fn root_mut(&mut self) -> &mut StreamRoot {
        self.changed = true;
        &mut self.root
    }

    /// Appends an entry whose ID is greater than every ID the stream had.
    pub fn append(&mut self, store: &mut dyn KeyStore, id: StreamId, fields: &[Bytes]) -> Result<(), CommandError> {
        assert!(id > self.root.last_id, "stream IDs only grow: {id} after {}", self.root.last_id);
        assert!(!fields.is_empty() && fields.len().is_multiple_of(2), "fields and values in pairs");
        self.entries.push(&mut SecondSpace { store }, End::Tail, encode_stream_entry(id, fields))?;
        self.root.length += 1;
        self.root.last_id = id;
        self.root.entries_added += 1;
        self.changed = true;
        Ok(())
    }

    /// The rank of the first entry whose ID is at least `id` (len when none).
    fn rank_of(&mut self, store: &mut dyn KeyStore, id: StreamId) -> Result<u64, CommandError> {
        // An entry is its 16-byte ID then more bytes, so it is at least the ID's bytes exactly
        // when its ID is at least `id`.
        let target = id.to_be_bytes();
        let reached = |entry: &Bytes| match entry.get(..STREAM_ID_BYTES) {
            Some(entry_id) => Ok(entry_id >= &target[..]),
            None => Err(CorruptValue("stream entry too short").into()),
        };
        self.entries.search(&mut SecondSpace { store }, &reached, Some(&target))
    }

    /// The entries with IDs in `start..=end`: the first `count` of them (0: all), or with
    /// `reverse` the last `count`, last first.
    pub fn range(&mut self, store: &mut dyn KeyStore, start: StreamId, end: StreamId, count: u64, reverse: bool) -> Result<Vec<StreamEntry>, CommandError> {
        if start > end || self.len() == 0 {
            return Ok(Vec::new());
        }
        let first = self.rank_of(store, start)?;
        let past = match end.next() {
            Some(after) => self.rank_of(store, after)?,
            None => self.len(),
        };
        if first >= past {
            return Ok(Vec::new());
        }
        let wanted = if count == 0 { past - first } else { count.min(past - first) };
        let (from, to) = if reverse { (past - wanted, past) } else { (first, first + wanted) };
        let mut entries = self.entries.range(&mut SecondSpace { store }, from, to - 1)?;
        if reverse {
            entries.reverse();
        }
        Ok(entries.iter().map(decode_stream_entry).collect::<Result<_, _>>()?)
    }

    /// The first (`End::Head`) or last entry, None when the stream is empty.
    pub fn edge_entry(&mut self, store: &mut dyn KeyStore, end: End) -> Result<Option<StreamEntry>, CommandError> {
        let mut entries = self.range(store, StreamId::ZERO, StreamId::MAX, 1, end == End::Tail)?;
        Ok(entries.pop())
    }

    /// Deletes the entry with this ID; true when there was one.
    pub fn delete(&mut self, store: &mut dyn KeyStore, id: StreamId) -> Result<bool, CommandError> {
        let rank = self.rank_of(store, id)?;
        if rank == self.len() || StreamId::of_entry(&self.entries.get(&mut SecondSpace { store }, rank)?)? != id {
            return Ok(false);
        }
        self.entries.remove(&mut SecondSpace { store }, rank)?;
        self.root.length -= 1;
        self.root.max_deleted_id = self.root.max_deleted_id.max(id);
        self.changed = true;
        Ok(true)
    }

    /// Removes entries from the oldest on as `trim` says; answers how many.
    pub fn trim(&mut self, store: &mut dyn KeyStore, trim: Trim) -> Result<u64, CommandError> {
        let mut removing = match trim.to {
            TrimTo::MaxLen(length_max) => self.len().saturating_sub(length_max),
            TrimTo::MinId(id) => self.rank_of(store, id)?,
        };
        if trim.limit > 0 {
            removing = removing.min(trim.limit);
        }
        if trim.approximate {
            removing = self.entries.head_elements_in_whole_chunks(&mut SecondSpace { store }, removing)?;
        }
        if removing == 0 {
            return Ok(0);
        }
        self.entries.remove_range(&mut SecondSpace { store }, 0, removing)?;
        self.root.length -= removing;
        self.changed = true;
        Ok(removing)
    }

    /// The entry with this ID, if the stream has it.
    pub fn entry(&mut self, store: &mut dyn KeyStore, id: StreamId) -> Result<Option<StreamEntry>, CommandError> {
        Ok(self.range(store, id, id, 1, false)?.pop())
    }

    /// The ID of the first entry (0-0 when there is none): Redis's recorded first ID.
    pub fn first_id(&mut self, store: &mut dyn KeyStore) -> Result<StreamId, CommandError> {
        Ok(self.edge_entry(store, End::Head)?.map_or(StreamId::ZERO, |(id, _)| id))
    }

    /// Whether an entry from `start` on may have been deleted (Redis's
    /// streamRangeHasTombstones, to the stream's end): then a group's read count cannot simply
    /// be carried forward.
    fn has_tombstones_from(&self, first_id: StreamId, start: StreamId) -> bool {
        let deleted = self.root.max_deleted_id;
        self.root.length > 0 && deleted != StreamId::ZERO && first_id <= deleted && start <= deleted
    }

    /// How many entries were added up to `id` (Redis's
    /// streamEstimateDistanceFromFirstEverEntry), when that can be known.
    fn entries_added_up_to(&self, first_id: StreamId, id: StreamId) -> Option<u64> {
        let root = &self.root;
        if root.entries_added == 0 {
            return Some(0);
        }
        if root.length == 0 && id <= root.last_id || id == root.last_id {
            return Some(root.entries_added);
        }
        if id > root.last_id {
            return None;
        }
        if root.max_deleted_id == StreamId::ZERO || root.max_deleted_id < first_id {
            if id < first_id {
                return Some(root.entries_added - root.length);
            }
            if id == first_id {
                return Some(root.entries_added - root.length + 1);
            }
        }
        None
    }

    /// A group's lag (entries not delivered to it yet), when it can be known.
    pub fn lag(&mut self, store: &mut dyn KeyStore, group: &ConsumerGroup) -> Result<Option<i64>, CommandError> {
        if self.root.entries_added == 0 {
            return Ok(Some(0));
        }
        let first_id = self.first_id(store)?;
        let read = match group.entries_read {
            Some(read) if !self.has_tombstones_from(first_id, group.last_id) => Some(read),
            _ => self.entries_added_up_to(first_id, group.last_id),
        };
        Ok(read.map(|read| self.root.entries_added as i64 - read as i64))
    }

    fn group_slot(&self, name: &[u8]) -> Option<usize> {
        self.root.groups.iter().position(|group| group.as_ref() == name)
    }

    fn load_group(&mut self, store: &mut dyn KeyStore, slot: usize) -> Result<&mut LoadedGroup, CommandError> {
        if self.groups[slot].is_none() {
            let record = store.get_part(&self.key, slot as u32)?.ok_or(CorruptValue("stream group missing"))?;
            self.groups[slot] = Some(LoadedGroup { group: ConsumerGroup::decode(&record)?, dirty: false });
        }
        Ok(self.groups[slot].as_mut().expect("loaded above"))
    }

    /// The group's names, in the order the stream keeps them.
    pub fn group_names(&self) -> &[Bytes] {
        &self.root.groups
    }

    /// The group called `name`, read.
    pub fn group(&mut self, store: &mut dyn KeyStore, name: &[u8]) -> Result<Option<&ConsumerGroup>, CommandError> {
        match self.group_slot(name) {
            Some(slot) => Ok(Some(&self.load_group(store, slot)?.group)),
            None => Ok(None),
        }
    }

    /// The group called `name`, taken out to change (`put_group` gives it back).
    pub fn take_group(&mut self, store: &mut dyn KeyStore, name: &[u8]) -> Result<Option<ConsumerGroup>, CommandError> {
        let Some(slot) = self.group_slot(name) else { return Ok(None) };
        let loaded = self.load_group(store, slot)?;
        let group = std::mem::take(&mut loaded.group);
        self.groups[slot] = None;
        Ok(Some(group))
    }

    /// Gives back a group `take_group` took, changed: it is saved.
    pub fn put_group(&mut self, name: &[u8], group: ConsumerGroup) {
        let slot = self.group_slot(name).expect("a group taken from this stream");
        self.groups[slot] = Some(LoadedGroup { group, dirty: true });
        self.changed = true;
    }

    /// Adds a group; false when one has that name.
    pub fn create_group(&mut self, name: Bytes, group: ConsumerGroup) -> bool {
        if self.group_slot(&name).is_some() {
            return false;
        }
        self.root.groups.push(name);
        self.groups.push(Some(LoadedGroup { group, dirty: true }));
        self.freed_group_parts.retain(|&part| part as usize >= self.groups.len());
        self.changed = true;
        true
    }

    /// Removes a group; false when there is none of that name. The last group takes its part.
    pub fn destroy_group(&mut self, store: &mut dyn KeyStore, name: &[u8]) -> Result<bool, CommandError> {
        let Some(slot) = self.group_slot(name) else { return Ok(false) };
        let last = self.groups.len() - 1;
        self.load_group(store, last)?.dirty = true;
        self.root.groups.swap_remove(slot);
        self.groups.swap_remove(slot);
        self.freed_group_parts.push(last as u32);
        self.changed = true;
        Ok(true)
    }

    /// Delivers the entries after the group's last ID to `consumer` (XREADGROUP's `>`): up to
    /// `count` (0: all), moving the group's last ID and read count on and, unless `no_ack`,
    /// adding them to its pending entries.
    pub fn deliver_new(&mut self, store: &mut dyn KeyStore, group: &mut ConsumerGroup, consumer: &Bytes, count: u64, no_ack: bool, now_ms: u64) -> Result<Vec<StreamEntry>, CommandError> {
        let Some(start) = group.last_id.next() else { return Ok(Vec::new()) };
        let entries = self.range(store, start, StreamId::MAX, count, false)?;
        let first_id = if entries.is_empty() { StreamId::ZERO } else { self.first_id(store)? };
        for (id, _) in &entries {
            match group.entries_read {
                Some(read) if !self.has_tombstones_from(first_id, *id) => group.entries_read = Some(read + 1),
                _ if self.root.entries_added > 0 => group.entries_read = self.entries_added_up_to(first_id, *id),
                _ => {}
            }
            group.last_id = *id;
            if !no_ack {
                group.pending.insert(*id, Pending { consumer: consumer.clone(), delivered_ms: now_ms, deliveries: 1 });
            }
        }
        Ok(entries)
    }

    /// Delivers again `consumer`'s pending entries from `start` on (XREADGROUP with an ID): up
    /// to `count` (0: all), each with its fields, or None when the entry was deleted since.
    pub fn deliver_pending(&mut self, store: &mut dyn KeyStore, group: &mut ConsumerGroup, consumer: &[u8], start: StreamId, count: u64, now_ms: u64) -> Result<Vec<Redelivered>, CommandError> {
        let owned = group.pending.range(start..).filter(|(_, pending)| pending.consumer.as_ref() == consumer).map(|(id, _)| *id);
        let ids: Vec<StreamId> = if count == 0 { owned.collect() } else { owned.take(count as usize).collect() };
        let mut delivered = Vec::with_capacity(ids.len());
        for id in ids {
            let fields = self.entry(store, id)?.map(|(_, fields)| fields);
            if fields.is_some() {
                let pending = group.pending.get_mut(&id).expect("listed above");
                (pending.delivered_ms, pending.deliveries) = (now_ms, pending.deliveries + 1);
            }
            delivered.push((id, fields));
        }
        Ok(delivered)
    }

    /// Writes the changes back, keeping the key's expiry: the entries (their list's parts),
    /// the groups changed, then the key's record.
    pub fn save(self, store: &mut dyn KeyStore) -> Result<(), CommandError> {
        if !self.changed {
            return Ok(());
        }
        assert_eq!(self.entries.len(), self.root.length, "the counters follow the entries");
        assert_eq!(self.groups.len(), self.root.groups.len(), "a slot per group");
        // Every group checked before anything is written: an error leaves the stream as it was.
        let mut group_records = Vec::new();
        for (slot, loaded) in self.groups.iter().enumerate() {
            if let Some(LoadedGroup { group, dirty: true }) = loaded {
                let record = group.encode();
                if record.len() as u64 > self.value_bytes_max {
                    let name = String::from_utf8_lossy(&self.root.groups[slot]);
                    return fail(format!(
                        "ERR consumer group '{name}' would take {} bytes with {} pending entries, over the limit of {} bytes for one record: acknowledge entries (XACK) or read fewer at a time (COUNT)",
                        record.len(),
                        group.pending.len(),
                        self.value_bytes_max
                    ));
                }
                group_records.push((slot as u32, record));
            }
        }
        self.entries.save(&mut SecondSpace { store })?;
        for (part, record) in group_records {
            store.put_part(&self.key, part, record)?;
        }
        let mut freed = self.freed_group_parts;
        freed.sort_unstable_by(|a, b| b.cmp(a));
        for part in freed {
            assert!(part as usize >= self.groups.len(), "only parts past the last group are freed");
            store.delete_part(&self.key, part)?;
        }
        store.put_keeping_parts(&self.key, &self.root.encode(), self.expiry_unix_ms)?;
        Ok(())
    }
}

impl ConsumerGroup {
    /// A group created at `last_id` (XGROUP CREATE), with a read count if known.
    pub fn starting_at(last_id: StreamId, entries_read: Option<u64>) -> ConsumerGroup {
        ConsumerGroup { last_id, entries_read, ..ConsumerGroup::default() }
    }

    /// Records that `name` was seen now, adding it when new; true when it was added.
    pub fn see_consumer(&mut self, name: &Bytes, now_ms: u64) -> bool {
        match self.consumers.binary_search_by(|consumer| consumer.name.cmp(name)) {
            Ok(at) => {
                self.consumers[at].seen_ms = now_ms;
                false
            }
            Err(at) => {
                self.consumers.insert(at, Consumer { name: name.clone(), seen_ms: now_ms });
                true
            }
        }
    }

    /// Adds a consumer unless there is one of that name; true when added.
    pub fn add_consumer(&mut self, name: &Bytes, now_ms: u64) -> bool {
        self.consumer(name).is_none() && self.see_consumer(name, now_ms)
    }

    pub fn consumer(&self, name: &[u8]) -> Option<&Consumer> {
        self.consumers.binary_search_by(|consumer| consumer.name.as_ref().cmp(name)).ok().map(|at| &self.consumers[at])
    }

    /// Removes a consumer and its pending entries: how many it had, None when there was no
    /// such consumer.
    pub fn remove_consumer(&mut self, name: &[u8]) -> Option<u64> {
        let at = self.consumers.binary_search_by(|consumer| consumer.name.as_ref().cmp(name)).ok()?;
        self.consumers.remove(at);
        let before = self.pending.len();
        self.pending.retain(|_, pending| pending.consumer.as_ref() != name);
        Some((before - self.pending.len()) as u64)
    }

    /// The pending entries of one consumer.
    pub fn pending_of(&self, name: &[u8]) -> u64 {
        self.pending.values().filter(|pending| pending.consumer.as_ref() == name).count() as u64
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::list_layout::{CHUNKS_TARGET, CHUNK_BYTES_TARGET_MIN};
    use crate::memory_store::MemoryStore;

    const LIMITS: ListLimits = ListLimits { value_bytes_max: 1 << 20, chunks_max: 4096, chunk_bytes_min: CHUNK_BYTES_TARGET_MIN, chunks_target: CHUNKS_TARGET, directory_chunks_max: 8, separators: true };

    fn key() -> Bytes {
        Bytes::from_static(b"stream")
    }

    fn open(store: &mut MemoryStore) -> OpenStream {
        match OpenStream::open(store, &key(), LIMITS).unwrap() {
            Some(stream) => stream,
            None => OpenStream::new(store, &key(), LIMITS).unwrap(),
        }
    }

    fn fields(number: u64) -> Vec<Bytes> {
        vec![Bytes::from_static(b"field"), Bytes::from(format!("value {number} {}", "v".repeat((number % 300) as usize)))]
    }

    #[test]
    fn entries_read_back_in_id_order_through_adds_deletes_ranges_and_trims_as_a_model_has_them() {
        let mut random = rand::rngs::StdRng::seed_from_u64(7);
        let mut store = MemoryStore::default();
        let mut model: std::collections::BTreeMap<StreamId, Vec<Bytes>> = std::collections::BTreeMap::new();
        let mut next_ms = 1;
        for step in 0..300 {
            let mut stream = open(&mut store);
            for _ in 0..random.gen_range(1..40) {
                next_ms += random.gen_range(0..3);
                let id = StreamId { ms: next_ms, seq: random.gen_range(0..2) }.max(stream.root().last_id.next().unwrap());
                stream.append(&mut store, id, &fields(id.ms)).unwrap();
                model.insert(id, fields(id.ms));
            }
            if random.gen_bool(0.3) {
                let victim = model.keys().nth(random.gen_range(0..model.len())).copied().unwrap();
                assert!(stream.delete(&mut store, victim).unwrap());
                assert!(!stream.delete(&mut store, victim).unwrap());
                model.remove(&victim);
            }
            if step % 25 == 24 {
                let keep = random.gen_range(0..model.len() as u64);
                let removed = stream.trim(&mut store, Trim { to: TrimTo::MaxLen(keep), approximate: false, limit: 0 }).unwrap();
                assert_eq!(removed, model.len() as u64 - keep);
                while model.len() as u64 > keep {
                    model.pop_first();
                }
            }
            let (start, end) = (StreamId { ms: random.gen_range(0..next_ms), seq: 0 }, StreamId { ms: random.gen_range(0..next_ms + 1), seq: u64::MAX });
            let count = random.gen_range(0..20);
            let expected: Vec<StreamEntry> = model.range(start..=end.max(start)).map(|(id, fields)| (*id, fields.clone())).collect();
            let forward = stream.range(&mut store, start, end, count, false).unwrap();
            let backward = stream.range(&mut store, start, end, count, true).unwrap();
            let take = if count == 0 { expected.len() } else { expected.len().min(count as usize) };
            if start <= end {
                assert_eq!(forward, expected[..take], "step {step}");
                assert_eq!(backward, expected.iter().rev().take(take).cloned().collect::<Vec<_>>(), "step {step}");
            }
            stream.save(&mut store).unwrap();
            let mut reopened = open(&mut store);
            assert_eq!(reopened.len(), model.len() as u64);
            let all = reopened.range(&mut store, StreamId::ZERO, StreamId::MAX, 0, false).unwrap();
            assert_eq!(all, model.iter().map(|(id, fields)| (*id, fields.clone())).collect::<Vec<_>>(), "step {step}");
        }
    }

    #[test]
    fn approximate_trims_drop_only_whole_chunks_and_at_most_the_limit() {
        let mut store = MemoryStore::default();
        let mut stream = open(&mut store);
        for ms in 1..=5_000 {
            stream.append(&mut store, StreamId { ms, seq: 0 }, &fields(ms)).unwrap();
        }
        stream.save(&mut store).unwrap();
        let mut stream = open(&mut store);
        let removed = stream.trim(&mut store, Trim { to: TrimTo::MaxLen(4_000), approximate: true, limit: 0 }).unwrap();
        assert!(removed > 0 && removed <= 1_000, "{removed}");
        let first = stream.edge_entry(&mut store, End::Head).unwrap().unwrap().0;
        assert_eq!(first, StreamId { ms: removed + 1, seq: 0 });
        let limited = stream.trim(&mut store, Trim { to: TrimTo::MinId(StreamId { ms: 4_990, seq: 0 }), approximate: true, limit: 100 }).unwrap();
        assert!(limited <= 100, "{limited}");
        let exact = stream.trim(&mut store, Trim { to: TrimTo::MinId(StreamId { ms: 4_990, seq: 0 }), approximate: false, limit: 0 }).unwrap();
        assert_eq!(removed + limited + exact, 4_989);
        assert_eq!(stream.edge_entry(&mut store, End::Head).unwrap().unwrap().0, StreamId { ms: 4_990, seq: 0 });
        assert_eq!(stream.edge_entry(&mut store, End::Tail).unwrap().unwrap().0, StreamId { ms: 5_000, seq: 0 });
        stream.save(&mut store).unwrap();
        assert_eq!(open(&mut store).len(), 11);
    }

    #[test]
    fn groups_keep_their_pending_entries_and_dense_parts_through_reads_acks_and_destroys() {
        let mut store = MemoryStore::default();
        let mut stream = open(&mut store);
        for ms in 1..=50 {
            stream.append(&mut store, StreamId { ms, seq: 0 }, &fields(ms)).unwrap();
        }
        for name in ["a", "b", "c"] {
            assert!(stream.create_group(Bytes::from(name), ConsumerGroup::starting_at(StreamId::ZERO, None)));
        }
        assert!(!stream.create_group(Bytes::from_static(b"b"), ConsumerGroup::default()));
        stream.save(&mut store).unwrap();
        let group_parts = |store: &MemoryStore| store.parts.keys().filter(|(_, number)| *number < hybridkv_engine::SECOND_PART_SPACE).map(|(_, number)| *number).collect::<Vec<_>>();
        assert_eq!(group_parts(&store), vec![0, 1, 2]);

        let mut stream = open(&mut store);
        let mut group = stream.take_group(&mut store, b"c").unwrap().unwrap();
        let consumer = Bytes::from_static(b"reader");
        assert!(group.see_consumer(&consumer, 1_000));
        let delivered = stream.deliver_new(&mut store, &mut group, &consumer, 20, false, 1_000).unwrap();
        assert_eq!(delivered.len(), 20);
        assert_eq!((group.last_id, group.entries_read, group.pending.len()), (StreamId { ms: 20, seq: 0 }, Some(20), 20));
        group.pending.remove(&StreamId { ms: 3, seq: 0 });
        stream.put_group(b"c", group);
        assert!(stream.delete(&mut store, StreamId { ms: 5, seq: 0 }).unwrap());
        stream.save(&mut store).unwrap();

        let mut stream = open(&mut store);
        assert!(stream.destroy_group(&mut store, b"a").unwrap());
        assert!(!stream.destroy_group(&mut store, b"a").unwrap());
        stream.save(&mut store).unwrap();
        assert_eq!(group_parts(&store), vec![0, 1], "the last group took the destroyed one's part");

        let mut stream = open(&mut store);
        assert_eq!(stream.group_names(), [Bytes::from_static(b"c"), Bytes::from_static(b"b")]);
        let mut group = stream.take_group(&mut store, b"c").unwrap().unwrap();
        assert_eq!((group.pending.len(), group.pending_of(b"reader")), (19, 19));
        let again = stream.deliver_pending(&mut store, &mut group, b"reader", StreamId { ms: 4, seq: 0 }, 3, 2_000).unwrap();
        assert_eq!(again.iter().map(|(id, fields)| (id.ms, fields.is_some())).collect::<Vec<_>>(), vec![(4, true), (5, false), (6, true)]);
        assert_eq!(group.pending[&StreamId { ms: 4, seq: 0 }].deliveries, 2);
        assert_eq!(group.pending[&StreamId { ms: 5, seq: 0 }].deliveries, 1, "a deleted entry is not counted as delivered");
        assert_eq!(stream.lag(&mut store, &group).unwrap(), Some(30), "a deletion before the group's last ID leaves its count right");
        assert!(stream.delete(&mut store, StreamId { ms: 30, seq: 0 }).unwrap());
        assert_eq!(stream.lag(&mut store, &group).unwrap(), None, "an entry deleted after the group's last ID: unknown");
        assert_eq!(group.remove_consumer(b"reader"), Some(19));
        assert!(group.pending.is_empty());
        stream.put_group(b"c", group);
        stream.save(&mut store).unwrap();
        let mut stream = open(&mut store);
        assert!(stream.group(&mut store, b"c").unwrap().unwrap().consumers.is_empty());
    }

    #[test]
    fn an_emptied_stream_keeps_its_counters_and_no_entry_parts() {
        let mut store = MemoryStore::default();
        let mut stream = open(&mut store);
        for ms in 1..=400 {
            stream.append(&mut store, StreamId { ms, seq: 7 }, &fields(ms)).unwrap();
        }
        stream.save(&mut store).unwrap();
        let mut stream = open(&mut store);
        assert!(stream.delete(&mut store, StreamId { ms: 400, seq: 7 }).unwrap());
        assert_eq!(stream.trim(&mut store, Trim { to: TrimTo::MaxLen(0), approximate: false, limit: 0 }).unwrap(), 399);
        stream.save(&mut store).unwrap();
        assert!(store.parts.is_empty(), "no entries, no parts");
        let stream = open(&mut store);
        assert_eq!((stream.len(), stream.root().last_id, stream.root().max_deleted_id, stream.root().entries_added), (0, StreamId { ms: 400, seq: 7 }, StreamId { ms: 400, seq: 7 }, 400));
    }
}
