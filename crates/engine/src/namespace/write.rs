//! The write path.
//!
//! 1. Lock the partitions of the declared keys (write locks, in partition order: no deadlock).
//! 2. Run the caller's body; its writes are buffered in the transaction.
//! 3. Reserve index space, append all records as one batch, and push a pending index entry per
//!    record (reads see it at once).
//! 4. Unlock, and (durability `always`) wait until a flush covers the batch: one thread flushes
//!    for everyone waiting (group commit), then publishes the entries into the index in log
//!    order, which is what makes a record durable before the index entry that points to it.

use std::sync::atomic::Ordering;
use std::sync::RwLockWriteGuard;

use super::commit::CommitTicket;
use super::{probe_part_numbers, Namespace, Value, SECOND_PART_SPACE};
use crate::background_pace;
use crate::config::Durability;
use crate::digest::Digest;
use crate::error::{EngineError, Result};
use crate::digest::{part_key, PART_KEY_BYTES};
use crate::index::{for_each_prefetching, Entry, Index, Partition, PendingEntry, EXPIRY_UNIX_MS_MAX, PART_EXPIRY_MARK};
use crate::log::record::record_bytes;
use crate::log::{position, Appended, FlushWork, Location, NewRecord, Writer};

/// How far ahead of the entry it publishes a flush starts loading index slots.
const PUBLISH_PREFETCH_DISTANCE_ITEMS: usize = 8;
/// Entries a flush publishes under one acquisition of their partition's lock when consecutive
/// entries share the partition (the buckets of one hash, a hot key): bounded, so that a writer
/// of that partition waits for that many publications at most.
const PUBLISH_ITEMS_PER_LOCK_MAX: usize = 32;
/// The generation field of new records. Builds before index format 4 counted it per key, to
/// check an entry's copy against its record; entries no longer hold one (24-byte entries,
/// docs/design/formats.md), so nothing reads it, and counting it would cost every overwrite a
/// read of the old record.
const RECORD_GENERATION: u32 = 0;

/// One record's index change, published once the record is durable.
pub(crate) struct PublishItem {
    pub(crate) partition: usize,
    /// `location` is DELETED for a tombstone.
    pub(crate) entry: Entry,
    pub(crate) lsn: u64,
    pub(crate) record_bytes: usize,
    pub(crate) record_location: Location,
    /// A key's record (not a part's): it counts in `keyspace`.
    pub(crate) is_key: bool,
}

pub(crate) struct Publication {
    pub(crate) items: Vec<PublishItem>,
}

/// `items` (in log order) grouped by partition, in log order within each: a flush's entries fall
/// in random partitions, and publishing a partition's entries together takes its lock and loads
/// its pending entries once for all of them rather than once each. Only the order within a
/// partition matters: a reader sees an entry pending or published alike, under its partition's lock.
fn grouped_by_partition<'a>(items: impl Iterator<Item = &'a PublishItem>) -> Vec<&'a PublishItem> {
    let mut grouped: Vec<&PublishItem> = items.collect();
    // Stable: equal partitions keep their log order.
    grouped.sort_by_key(|item| item.partition);
    grouped
}

/// Records waiting for publication beyond which writers flush themselves.
const PENDING_RECORDS_MAX: usize = 100_000;
/// Records waiting for publication from which a committer flushes them with no writer waiting:
/// small records (INCR's, over 100,000 to a write block) would otherwise pass
/// PENDING_RECORDS_MAX before their block seals, and every writer would then wait for a flush.
pub(crate) const PENDING_RECORDS_EARLY_FLUSH: usize = PENDING_RECORDS_MAX / 4;
const _: () = assert!(PENDING_RECORDS_EARLY_FLUSH > 0 && PENDING_RECORDS_EARLY_FLUSH < PENDING_RECORDS_MAX);

struct BufferedWrite {
    key: Vec<u8>,
    digest: Digest,
    /// None for a deletion.
    value: Option<(Vec<u8>, u64)>,
    part: bool,
    /// The write changes what readers of the key see: a put, or the deletion of a live key (not
    /// of an absent or expired one). `Transaction::changed_keys` lists these.
    visible: bool,
}

pub struct Transaction<'a> {
    namespace: &'a Namespace,
    /// In partition order (the order they were locked in).
    guards: Vec<(usize, RwLockWriteGuard<'a, Partition>)>,
    writes: Vec<BufferedWrite>,
    /// Some write of `writes` is a part's (kept rather than found by a scan of `writes` at
    /// every put: an MSET of 30,000 keys spent most of its time in those scans).
    wrote_parts: bool,
}

impl Transaction<'_> {
    fn guard(&mut self, digest: Digest) -> Result<&mut Partition> {
        let number = self.namespace.index.partition_of(digest);
        let position = self.held(number)?;
        Ok(&mut self.guards[position].1)
    }

    /// Starts loading the index slots, cache entries and cached records of the first
    /// GET_MANY_GROUP_KEYS keys `digests` (a larger batch's later lines would be evicted before
    /// its body reached them).
    fn prefetch_slots(&self, digests: &[Digest]) {
        let digests = &digests[..digests.len().min(super::GET_MANY_GROUP_KEYS)];
        for &digest in digests {
            let Ok(position) = self.held(self.namespace.index.partition_of(digest)) else { continue };
            self.namespace.index.prefetch_home_slot(&self.guards[position].1, digest);
            self.namespace.prefetch_cache_slot(digest);
        }
        self.namespace.prefetch_cached_records(digests);
    }

    /// Where partition `number`'s guard is; UndeclaredKey when the transaction does not hold it.
    fn held(&self, number: usize) -> Result<usize> {
        self.guards.binary_search_by_key(&number, |(held, _)| *held).map_err(|_| EngineError::UndeclaredKey)
    }

    /// A page of keys, as `Namespace::scan` lists them, as this transaction sees them (its own
    /// writes included). Only for a transaction over every partition (`transaction_over_all`).
    pub fn scan(&mut self, cursor: u64, count_hint: usize) -> Result<super::ScanPage> {
        let now = crate::now_unix_ms();
        let writes = self.key_writes_by_partition();
        super::scan_pages(cursor, count_hint, |number, keys| self.keys_of_partition(number, &writes, now, keys))
    }

    /// A key, as `Namespace::random_key` picks one, as this transaction sees them. Only for a
    /// transaction over every partition.
    pub fn random_key(&mut self) -> Result<Option<Vec<u8>>> {
        let now = crate::now_unix_ms();
        let writes = self.key_writes_by_partition();
        self.namespace.random_key_from(now, |number, keys| self.keys_of_partition(number, &writes, now, keys))
    }

    /// The last write of each key (not part) the transaction wrote, newest first.
    fn last_key_writes(&self) -> impl Iterator<Item = &BufferedWrite> {
        let mut seen = std::collections::HashSet::new();
        self.writes.iter().rev().filter(move |write| !write.part && seen.insert(write.digest))
    }

    /// `last_key_writes` by partition number.
    fn key_writes_by_partition(&self) -> std::collections::BTreeMap<usize, Vec<&BufferedWrite>> {
        let mut by_partition = std::collections::BTreeMap::<usize, Vec<&BufferedWrite>>::new();
        for write in self.last_key_writes() {
            by_partition.entry(self.namespace.index.partition_of(write.digest)).or_default().push(write);
        }
        by_partition
    }

    /// The unexpired keys of partition `number` (held), with the transaction's writes to it
    /// (`writes`, from `key_writes_by_partition`) applied.
    fn keys_of_partition(
        &self,
        number: usize,
        writes: &std::collections::BTreeMap<usize, Vec<&BufferedWrite>>,
        now: u64,
        keys: &mut Vec<Vec<u8>>,
    ) -> Result<()> {
        let partition = &self.guards[self.held(number)?].1;
        let first_new = keys.len();
        self.namespace.keys_in(partition, now, keys)?;
        for write in writes.get(&number).into_iter().flatten() {
            let listed = keys[first_new..].iter().position(|key| *key == write.key).map(|at| first_new + at);
            let stored = write.value.as_ref().is_some_and(|(_, expiry)| !super::record_expired(false, *expiry, now));
            match (stored, listed) {
                (true, None) => keys.push(write.key.clone()),
                (false, Some(at)) => {
                    keys.remove(at);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The key's current entry as the transaction sees it (its own writes first).
    fn current(&mut self, key: &[u8]) -> Result<Option<Value>> {
        Namespace::check_key(key)?;
        let digest = self.namespace.digest(key);
        self.current_of(key, digest, false)
    }

    /// The record of `key` (a part's key when `part`) whose digest is `digest`, as the
    /// transaction sees it.
    fn current_of(&mut self, key: &[u8], digest: Digest, part: bool) -> Result<Option<Value>> {
        if let Some(write) = self.writes.iter().rev().find(|write| write.digest == digest) {
            return Ok(write.value.as_ref().map(|(bytes, expiry)| Value {
                bytes: bytes.clone(),
                expiry_unix_ms: *expiry,
                version: 0,
            }));
        }
        let namespace = self.namespace;
        namespace.prefetch_cache_slot(digest);
        let partition = self.guard(digest)?;
        match namespace.index.lookup(partition, digest)? {
            Some(entry) => Ok(namespace.read_entry(&entry, key, part)?.filter(|value| !value.has_expired_now())),
            None => Ok(None),
        }
    }

    /// Whether part `number` of the key whose digest is `owner` exists, as the transaction sees
    /// it (parts never expire: they live as long as their key's record).
    fn part_exists(&mut self, owner: Digest, number: u32) -> Result<bool> {
        let digest = self.namespace.part_digest(owner, number);
        if let Some(write) = self.writes.iter().rev().find(|write| write.digest == digest) {
            return Ok(write.value.is_some());
        }
        let namespace = self.namespace;
        let partition = self.guard(digest)?;
        if Index::holds_no_parts(partition) {
            return Ok(false);
        }
        Ok(namespace.index.lookup(partition, digest)?.is_some())
    }

    pub fn get(&mut self, key: &[u8]) -> Result<Option<Value>> {
        self.current(key)
    }

    /// Sets the key's value; the key's parts, if it had any, are deleted with its old value.
    pub fn put(&mut self, key: &[u8], value: &[u8], expiry_unix_ms: u64) -> Result<()> {
        self.put_keeping_parts(key, value, expiry_unix_ms)?;
        self.delete_parts_of(self.namespace.digest(key))
    }

    /// Sets the key's value and keeps its parts (a new value of a key split into parts, or a
    /// new expiry: the parts live exactly as long as the key).
    pub fn put_keeping_parts(&mut self, key: &[u8], value: &[u8], expiry_unix_ms: u64) -> Result<()> {
        Namespace::check_key(key)?;
        self.check_value(value)?;
        let expiry_unix_ms = expiry_unix_ms.min(EXPIRY_UNIX_MS_MAX);
        let digest = self.namespace.digest(key);
        self.guard(digest)?;
        self.writes.push(BufferedWrite { key: key.to_vec(), digest, value: Some((value.to_vec(), expiry_unix_ms)), part: false, visible: true });
        Ok(())
    }

    pub fn parts_per_key_max(&self) -> u32 {
        self.namespace.parts_per_key_max()
    }

    fn check_value(&self, value: &[u8]) -> Result<()> {
        let limit = self.namespace.config.value_bytes_max as usize;
        if value.len() > limit {
            return Err(EngineError::ValueTooLarge { len_bytes: value.len(), limit_bytes: limit });
        }
        Ok(())
    }

    /// Part `number` of the key's value, if it exists. Parts belong to their key: they are not
    /// keys (not counted, listed or scanned), they never expire on their own, and they go when
    /// the key is deleted, expires or is replaced by `put`. A key has two part spaces, numbered
    /// from 0 and from `SECOND_PART_SPACE` (two structures of one value keep their parts apart);
    /// the caller keeps each numbered densely from its start (`part_count` and deletion stop at
    /// the first missing number).
    pub fn get_part(&mut self, key: &[u8], number: u32) -> Result<Option<Vec<u8>>> {
        Namespace::check_key(key)?;
        let part = part_key(self.namespace.digest(key), number);
        let digest = self.namespace.part_digest(self.namespace.digest(key), number);
        Ok(self.current_of(&part, digest, true)?.map(|value| value.bytes))
    }

    /// Writes part `number` of the key's value (see `get_part`); at most `parts_per_key_max`.
    /// Takes the bytes: a caller that encoded them hands them over rather than have them copied
    /// (a sorted set's ZADD writes two 4 KiB chunks).
    pub fn put_part(&mut self, key: &[u8], number: u32, value: impl Into<Vec<u8>>) -> Result<()> {
        let value = value.into();
        Namespace::check_key(key)?;
        self.check_value(&value)?;
        let limit = self.namespace.parts_per_key_max();
        if number & !SECOND_PART_SPACE >= limit {
            return Err(EngineError::TooManyParts { limit });
        }
        let owner = self.namespace.digest(key);
        let digest = self.namespace.part_digest(owner, number);
        self.guard(digest)?;
        let key = part_key(owner, number).to_vec();
        self.writes.push(BufferedWrite { key, digest, value: Some((value, PART_EXPIRY_MARK)), part: true, visible: true });
        self.wrote_parts = true;
        Ok(())
    }

    /// Deletes part `number` of the key's value (the caller keeps the numbers dense: it deletes
    /// the last part).
    pub fn delete_part(&mut self, key: &[u8], number: u32) -> Result<()> {
        Namespace::check_key(key)?;
        self.push_part_deletion(self.namespace.digest(key), number);
        Ok(())
    }

    fn push_part_deletion(&mut self, owner: Digest, number: u32) {
        let digest = self.namespace.part_digest(owner, number);
        self.writes.push(BufferedWrite { key: part_key(owner, number).to_vec(), digest, value: None, part: true, visible: true });
        self.wrote_parts = true;
    }

    /// Deletes every part of the key whose digest is `owner`, in both part spaces.
    fn delete_parts_of(&mut self, owner: Digest) -> Result<()> {
        // Parts live in their owner's partition: when it holds none and this transaction wrote
        // none, the key has none, and the two probes (a part digest each) are spared; every
        // SET and INCR ends here.
        if !self.wrote_parts && Index::holds_no_parts(self.guard(owner)?) {
            return Ok(());
        }
        probe_part_numbers(|number| {
            let exists = self.part_exists(owner, number)?;
            if exists {
                self.push_part_deletion(owner, number);
            }
            Ok(exists)
        })
    }

    /// Moves the key's value, expiry and parts to `target` (replacing what `target` held); false
    /// when `source` does not exist. All the parts are rewritten in this one batch (a crash
    /// keeps the rename whole or not at all), so a key whose parts do not fit in one write block
    /// cannot be renamed (PartsTooLarge, checked before anything is written).
    pub fn rename(&mut self, source: &[u8], target: &[u8]) -> Result<bool> {
        if source == target {
            return Ok(self.current(source)?.is_some());
        }
        if !self.write_copy(source, target, "rename")? {
            return Ok(false);
        }
        self.delete(source)?;
        Ok(true)
    }

    /// Copies the key's value, expiry and parts to `target` (replacing what `target` held); false
    /// when `source` does not exist. As `rename`, the copy is one batch, so a key whose parts do
    /// not fit in one write block cannot be copied (PartsTooLarge).
    pub fn copy(&mut self, source: &[u8], target: &[u8]) -> Result<bool> {
        assert!(source != target, "a key is not copied onto itself");
        self.write_copy(source, target, "copy")
    }

    /// Writes `source`'s value, expiry and parts under `target`; false when `source` does not
    /// exist. `operation` names the caller in PartsTooLarge.
    fn write_copy(&mut self, source: &[u8], target: &[u8], operation: &'static str) -> Result<bool> {
        let Some(snapshot) = self.snapshot(source, operation)? else { return Ok(false) };
        self.put_snapshot(target, &snapshot)?;
        Ok(true)
    }

    /// The key's value, expiry, version and parts as this transaction sees them, to be written
    /// under a key of another namespace (`put_snapshot`; MOVE, COPY … DB); None when the key is
    /// missing. PartsTooLarge, naming `operation`, when its parts would not fit in one batch.
    pub fn snapshot(&mut self, key: &[u8], operation: &'static str) -> Result<Option<KeySnapshot>> {
        let Some(value) = self.current(key)? else { return Ok(None) };
        let mut parts = Vec::new();
        probe_part_numbers(|number| {
            let part = self.get_part(key, number)?;
            let exists = part.is_some();
            parts.extend(part.map(|part| (number, part)));
            Ok(exists)
        })?;
        let part_bytes: usize = parts.iter().map(|(_, part)| record_bytes(PART_KEY_BYTES, part.len())).sum();
        let limit_bytes = self.namespace.log.batch_bytes_max();
        if part_bytes > limit_bytes {
            return Err(EngineError::PartsTooLarge { operation, parts: parts.len() as u32, len_bytes: part_bytes, limit_bytes });
        }
        Ok(Some(KeySnapshot { value, parts }))
    }

    /// Writes a snapshot's value, expiry and parts under `key`, replacing what it held.
    pub fn put_snapshot(&mut self, key: &[u8], snapshot: &KeySnapshot) -> Result<()> {
        Namespace::check_key(key)?;
        self.put(key, &snapshot.value.bytes, snapshot.value.expiry_unix_ms)?;
        for (number, part) in &snapshot.parts {
            self.put_part(key, *number, part.as_slice())?;
        }
        Ok(())
    }

    /// Deletes the key if its entry still names `expired`, a record of it found expired in block
    /// sequence `block_seq` (background reclaim): records never change, and the sequence tells
    /// the record from a later one at the same place in a reused block. True when it deletes.
    pub(crate) fn delete_if_still(&mut self, key: &[u8], expired: Location, block_seq: u64) -> Result<bool> {
        let digest = self.namespace.digest(key);
        let namespace = self.namespace;
        let partition = self.guard(digest)?;
        let current = namespace.index.lookup(partition, digest)?;
        let still = current.is_some_and(|entry| entry.location == expired) && namespace.log.block_seq(expired.slot()) == block_seq;
        if still {
            self.writes.push(BufferedWrite { key: key.to_vec(), digest, value: None, part: false, visible: false });
            self.delete_parts_of(digest)?;
        }
        Ok(still)
    }

    /// How many keys the namespace holds as this transaction sees it: `Namespace::key_count`,
    /// plus the keys its writes create, less those they delete (counted as the commit will count
    /// them: a key is there while the index has an entry for it).
    pub fn key_count(&mut self) -> Result<u64> {
        let mut change = 0i64;
        let last_writes: Vec<(Digest, bool)> = self.last_key_writes().map(|write| (write.digest, write.value.is_some())).collect();
        for (digest, stored) in last_writes {
            let namespace = self.namespace;
            let existed = namespace.index.lookup(self.guard(digest)?, digest)?.is_some();
            change += i64::from(stored) - i64::from(existed);
        }
        Ok(u64::try_from(self.namespace.key_count() as i64 + change).unwrap_or(0))
    }

    /// The keys whose values this transaction's writes change, as readers see them (not parts;
    /// a key written twice is listed twice): what WATCH must hear about.
    pub fn changed_keys(&self) -> impl Iterator<Item = &[u8]> {
        self.writes.iter().filter(|write| write.visible && !write.part).map(|write| write.key.as_slice())
    }

    /// Deletes the key and its parts; true when a live (unexpired) value was there.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool> {
        let existed = self.current(key)?.is_some();
        let digest = self.namespace.digest(key);
        self.writes.push(BufferedWrite { key: key.to_vec(), digest, value: None, part: false, visible: existed });
        self.delete_parts_of(digest)?;
        Ok(existed)
    }

    /// Deletes every key, expired ones too, with their parts, in this transaction's one batch
    /// (FLUSHDB inside MULTI; `Namespace::clear` outside). Only for a transaction over every
    /// partition. The batch must fit in one write block: keys are counted as they are listed, so
    /// a database too big for it fails with BatchTooLarge, nothing deleted, without being listed
    /// whole first (parts past the limit fail the commit the same way).
    pub fn delete_every_key(&mut self) -> Result<()> {
        let limit_bytes = self.namespace.log.batch_bytes_max();
        let writes = self.key_writes_by_partition();
        let (mut keys, mut len_bytes) = (Vec::new(), 0);
        for number in 0..crate::index::PARTITION_COUNT {
            let first_new = keys.len();
            // A clock of 0: expired keys, still counted until reclaimed, go as well.
            self.keys_of_partition(number, &writes, 0, &mut keys)?;
            len_bytes += keys[first_new..].iter().map(|key| record_bytes(key.len(), 0)).sum::<usize>();
            if len_bytes > limit_bytes {
                return Err(EngineError::BatchTooLarge { len_bytes, limit_bytes });
            }
        }
        drop(writes);
        keys.iter().try_for_each(|key| self.delete(key).map(|_| ()))
    }
}

/// A key's value and parts as read in one transaction (`Transaction::snapshot`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeySnapshot {
    pub value: Value,
    /// Each part with its number.
    pub parts: Vec<(u32, Vec<u8>)>,
}

/// `writes` without those a later write of the same key (or part) supersedes, in their order.
fn last_write_per_key(writes: Vec<BufferedWrite>) -> Vec<BufferedWrite> {
    if writes.len() < 2 {
        return writes;
    }
    let mut seen = std::collections::HashSet::with_capacity(writes.len());
    let mut last_of_key: Vec<bool> = writes.iter().rev().map(|write| seen.insert(write.digest)).collect();
    last_of_key.reverse();
    writes.into_iter().zip(last_of_key).filter_map(|(write, last)| last.then_some(write)).collect()
}

impl Namespace {
    /// Runs `body` atomically over the declared keys and commits its writes as one batch; with
    /// durability `always`, returns once they are durable.
    pub fn transaction<T>(&self, keys: &[&[u8]], body: impl FnOnce(&mut Transaction<'_>) -> Result<T>) -> Result<T> {
        let (result, ticket) = self.transaction_deferred(keys, body)?;
        if let Some(ticket) = ticket {
            self.wait_durable(ticket)?;
        }
        Ok(result)
    }

    /// Like `transaction`, without waiting: the writes are visible at once, and the ticket says
    /// what must happen before they may be acknowledged (`wait_durable`, `on_durable`). There
    /// is one when something was written and either durability is `always`, more than
    /// PENDING_RECORDS_MAX records wait for publication (back-pressure that bounds the pending
    /// entries: the writer, not its thread, waits for the flush), or the data tier is short of
    /// space that defragmentation can free (`space.rs`).
    pub fn transaction_deferred<T>(
        &self,
        keys: &[&[u8]],
        body: impl FnOnce(&mut Transaction<'_>) -> Result<T>,
    ) -> Result<(T, Option<CommitTicket>)> {
        let digests: Vec<Digest> = keys.iter().map(|key| self.digest(key)).collect();
        let mut numbers: Vec<usize> = digests.iter().map(|&digest| self.index.partition_of(digest)).collect();
        numbers.sort_unstable();
        numbers.dedup();
        self.transaction_over(numbers, &digests, body)
    }

    /// Like `transaction_deferred`, over every partition: for transactions that list or count
    /// the keys (KEYS, SCAN or RANDOMKEY inside MULTI). Every other writer waits meanwhile.
    pub fn transaction_over_all<T>(&self, body: impl FnOnce(&mut Transaction<'_>) -> Result<T>) -> Result<(T, Option<CommitTicket>)> {
        self.transaction_over((0..crate::index::PARTITION_COUNT).collect(), &[], body)
    }

    /// Runs `body` with partitions `numbers` (sorted, distinct: every transaction locks in
    /// partition order, so none waits for another in a cycle) locked for writing, having
    /// started loading the index and cache slots of the keys `digests` (the body's reads of
    /// random keys then overlap their memory misses instead of waiting for each in turn).
    fn transaction_over<T>(
        &self,
        numbers: Vec<usize>,
        digests: &[Digest],
        body: impl FnOnce(&mut Transaction<'_>) -> Result<T>,
    ) -> Result<(T, Option<CommitTicket>)> {
        assert!(numbers.windows(2).all(|pair| pair[0] < pair[1]), "partitions are locked in order, once each");
        let guards = numbers.into_iter().map(|number| (number, self.index.partition(number).write())).collect();
        let mut transaction = Transaction { namespace: self, guards, writes: Vec::new(), wrote_parts: false };
        transaction.prefetch_slots(digests);
        let result = body(&mut transaction)?;
        if transaction.writes.is_empty() {
            return Ok((result, None));
        }
        self.check_writable()?;
        let Transaction { mut guards, writes, .. } = transaction;
        // Deletions free space: only writes that store values are held for it.
        let stores_values = writes.iter().any(|write| write.value.is_some());
        let end_position = self.append_writes(&mut guards, writes)?;
        drop(guards);
        self.wake_committer_after_seal();
        self.counters.writes.add(1);
        Ok((result, self.ticket_after_append(end_position, stores_values)))
    }

    /// What the writer of a transaction that appended up to `end_position` waits for: that
    /// position to be durable under durability `always` or past PENDING_RECORDS_MAX records
    /// waiting for publication, and space while it is short (`space.rs`).
    fn ticket_after_append(&self, end_position: u64, stores_values: bool) -> Option<CommitTicket> {
        let backlog = self.log_backlog();
        if backlog >= PENDING_RECORDS_EARLY_FLUSH {
            self.wake_committer_for_backlog();
        }
        let held_for_backlog = self.durability() != Durability::Always && backlog > PENDING_RECORDS_MAX;
        if held_for_backlog {
            self.counters.writes_held_for_backlog.fetch_add(1, Ordering::Relaxed);
        }
        let held_for_space = stores_values && self.holds_writes_for_space();
        if held_for_space {
            self.counters.writes_held_for_space.fetch_add(1, Ordering::Relaxed);
        }
        let must_be_durable = self.durability() == Durability::Always || held_for_backlog;
        // Held for space alone, a write waits for no position (0 is always durable).
        let position = if must_be_durable { end_position } else { 0 };
        (must_be_durable || held_for_space).then_some(CommitTicket { position, held_for_space })
    }

    pub(crate) fn check_writable(&self) -> Result<()> {
        match &*self.poisoned.lock() {
            Some(reason) => Err(EngineError::Poisoned { namespace: self.config.name.clone(), reason: reason.clone() }),
            None => Ok(()),
        }
    }

    pub(super) fn log_backlog(&self) -> usize {
        self.unpublished_records.load(Ordering::Relaxed)
    }

    /// Appends the (deduplicated) writes as one batch and makes them visible as pending entries.
    fn append_writes(
        &self,
        guards: &mut [(usize, RwLockWriteGuard<'_, Partition>)],
        writes: Vec<BufferedWrite>,
    ) -> Result<u64> {
        let writes = last_write_per_key(writes);
        // Each write's place in `guards`, found once for the three passes below.
        let guard_of: Vec<usize> = writes
            .iter()
            .map(|write| {
                let number = self.index.partition_of(write.digest);
                guards.iter().position(|(held, _)| *held == number).expect("declared")
            })
            .collect();
        // The slots are random: start every miss before waiting for the first.
        for (write, &at) in writes.iter().zip(&guard_of) {
            self.index.prefetch_home_slot(&guards[at].1, write.digest);
            self.prefetch_cache_slot(write.digest);
        }
        let mut olds = Vec::with_capacity(writes.len());
        for (write, &at) in writes.iter().zip(&guard_of) {
            let (number, partition) = &mut guards[at];
            if write.value.is_some() {
                self.index.reserve_one(partition, *number)?;
            }
            olds.push(self.index.lookup(partition, write.digest)?);
        }
        let records: Vec<NewRecord<'_>> = writes
            .iter()
            .map(|write| NewRecord {
                key: &write.key,
                value: write.value.as_ref().map_or(&[][..], |(value, _)| value),
                tombstone: write.value.is_none(),
                part: write.part,
                expiry_unix_ms: write.value.as_ref().map_or(0, |(_, expiry)| *expiry),
                generation: RECORD_GENERATION,
                lsn: None,
            })
            .collect();
        let items = |appended: &[Appended]| Publication {
            items: writes
                .iter()
                .zip(&records)
                .zip(appended)
                .map(|((write, record), done)| self.publish_item(write.digest, record, done))
                .collect(),
        };
        let writer = if writes.iter().all(|write| write.value.is_none()) { Writer::Deletion } else { Writer::Client };
        let (appended, encoded) =
            self.log.append(&records, records.len() > 1, writer, items).map_err(|error| self.name_error(error))?;
        self.cache_written(&writes, &records, &appended, &encoded, &olds);
        self.log.recycle_encoded(encoded);
        let appended_writes = writes.iter().zip(&olds).zip(&records).zip(&appended).zip(&guard_of);
        for ((((write, old), record), done), &at) in appended_writes {
            let item = self.publish_item(write.digest, record, done);
            Index::push_pending(&mut guards[at].1, PendingEntry { entry: item.entry, lsn: done.lsn });
            if !write.part {
                self.keyspace.change(old.as_ref(), write.value.is_some().then_some(&item.entry));
            }
        }
        self.unpublished_records.fetch_add(appended.len(), Ordering::Relaxed);
        let last = appended.last().expect("at least one write");
        Ok(position(self.log.block_seq(last.location.slot()), last.location.offset() + last.record_bytes as u64))
    }

    /// Puts freshly written records in the record cache, each in its key's entry in place of the
    /// previous record (one shard lock per write): a key written is likely read soon, and its new
    /// location would otherwise cost a device read once its block leaves memory. A key the cache
    /// does not hold is admitted only while the cache has room (a write does not evict to get in).
    /// A tombstone is never read: it only takes its key's record out. Records on pmem are read
    /// at memory speed, so there a write only keeps an already cached key cached: admitting every
    /// written record cost more (admission and eviction) than the reads it would save.
    fn cache_written(
        &self,
        writes: &[BufferedWrite],
        records: &[NewRecord<'_>],
        appended: &[Appended],
        encoded: &[u8],
        olds: &[Option<Entry>],
    ) {
        let Some(cache) = &self.cache else { return };
        let admit_absent = self.reads_may_wait();
        let mut start = 0;
        for (((write, record), done), old) in writes.iter().zip(records).zip(appended).zip(olds) {
            let bytes = &encoded[start..start + done.record_bytes];
            start += done.record_bytes;
            match (old, record.tombstone) {
                (Some(_), true) => cache.remove(super::cache_key_hash(write.digest)),
                (None, true) => {}
                (_, false) => cache.write(self.cache_key(write.digest, done.location), bytes, admit_absent),
            }
        }
    }

    pub(crate) fn publish_item(&self, digest: Digest, record: &NewRecord<'_>, done: &Appended) -> PublishItem {
        let location = if record.tombstone { Location::DELETED } else { done.location };
        PublishItem {
            partition: self.index.partition_of(digest),
            entry: Entry::new(digest, location, record.part, record.expiry_unix_ms),
            lsn: done.lsn,
            record_bytes: done.record_bytes,
            record_location: done.location,
            is_key: !record.part,
        }
    }

    pub(crate) fn name_error(&self, error: EngineError) -> EngineError {
        match error {
            EngineError::DataFull { capacity_bytes, .. } => {
                EngineError::DataFull { namespace: self.config.name.clone(), capacity_bytes }
            }
            other => other,
        }
    }

    /// Publishes the index entries of a flush whose bytes are now durable (`synced`), in log
    /// order, and returns the position it covers. A failed sync, or an earlier flush that failed,
    /// withdraws the pending entries instead and poisons the namespace.
    pub(crate) fn publish_flush_work(&self, work: &FlushWork<Publication>, synced: Result<()>, persist: bool) -> Result<u64> {
        let items = work.publications.iter().flat_map(|publication| publication.items.iter());
        if let Err(error) = synced.and_then(|()| self.check_writable()) {
            self.poison(&error);
            // Writes appended after this flush took its work will never be flushed either (the
            // namespace refuses flushes from now on): withdraw them too, or reads would serve
            // values that were never acknowledged and vanish at the restart.
            let later = self.log.take_publications();
            for item in items.chain(later.iter().flat_map(|publication| publication.items.iter())) {
                self.withdraw(item);
            }
            return Err(error);
        }
        let mut published = 0;
        let mut held: Option<(usize, RwLockWriteGuard<'_, Partition>)> = None;
        let by_partition = grouped_by_partition(items);
        let prefetch = |item: &&PublishItem| self.index.prefetch_entry(item.entry.digest);
        let publishing = for_each_prefetching(by_partition.iter().copied(), PUBLISH_PREFETCH_DISTANCE_ITEMS, prefetch, |item| {
            let same_partition = held.as_ref().is_some_and(|(number, _)| *number == item.partition);
            if !same_partition || published % PUBLISH_ITEMS_PER_LOCK_MAX == 0 {
                // One partition lock at a time: let go of the last before taking the next.
                held = None;
                if !same_partition {
                    // Not between the runs of one partition: yielding there stretched a hot
                    // partition's publication (one hash's buckets) over many of its writers'
                    // turns, and HSET -P 16 to one hash lost a quarter of its throughput.
                    background_pace::pace();
                }
                held = Some((item.partition, self.index.partition(item.partition).write()));
            }
            let (_, partition) = held.as_mut().expect("taken above");
            self.publish(partition, item)?;
            published += 1;
            Ok(())
        });
        drop(held);
        let _ = self.unpublished_records.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |current| {
            Some(current.saturating_sub(published))
        });
        if let Err(error) = publishing {
            // The records are durable and their entries stay pending (reads see them), but the
            // index failed: the flush does not count as done, and a flush that is not done
            // must refuse writes, or its waiters would wait for it forever.
            self.poison(&error);
            return Err(error);
        }
        if persist {
            self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        }
        if !work.publications.is_empty() {
            self.counters.log_writes.fetch_add(1, Ordering::Relaxed);
        }
        Ok(work.upto_position)
    }

    /// Withdraws the pending entry of a write that never became durable; the key count follows
    /// what reads see again.
    fn withdraw(&self, item: &PublishItem) {
        let mut partition = self.index.partition(item.partition).write();
        if !item.is_key {
            Index::drop_pending(&mut partition, item.entry.digest, item.lsn);
            return;
        }
        let visible = |partition: &Partition| self.index.lookup(partition, item.entry.digest).ok().flatten();
        let before = visible(&partition);
        Index::drop_pending(&mut partition, item.entry.digest, item.lsn);
        let after = visible(&partition);
        self.keyspace.change(before.as_ref(), after.as_ref());
    }

    /// Publishes `item` into its partition, whose lock the caller holds.
    fn publish(&self, partition: &mut Partition, item: &PublishItem) -> Result<()> {
        let old = if item.entry.location.is_record() {
            self.index.table_put(partition, item.partition, item.entry)?
        } else {
            self.index.table_remove(partition, item.partition, item.entry.digest)?
        };
        Index::drop_pending(partition, item.entry.digest, item.lsn);
        if let Some(old) = old {
            self.forget_live_bytes(old.location);
        }
        self.log.add_live_bytes(item.record_location.slot(), item.record_bytes);
        Ok(())
    }

    /// Subtracts a superseded record from its block's live bytes.
    pub(crate) fn forget_live_bytes(&self, location: Location) {
        let bytes = match location.record_bytes() {
            Some(bytes) => bytes,
            None => {
                let mut buffer = Vec::new();
                match self.log.read_record(location, &mut buffer) {
                    Ok(()) => buffer.len(),
                    Err(_) => return,
                }
            }
        };
        self.log.remove_live_bytes(location.slot(), bytes);
    }

    pub(crate) fn poison(&self, error: &EngineError) {
        tracing::error!(namespace = %self.config.name, %error, "flush failed: refusing writes until restart");
        self.poisoned.lock().get_or_insert_with(|| error.to_string());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use hybridkv_media::sim::SimStore;

    use super::BufferedWrite;
    use crate::namespace::tests::small_config;
    use crate::{Database, Tier};

    #[test]
    fn changed_keys_are_puts_and_deletions_of_live_keys_without_parts() {
        let store = SimStore::new(12);
        let database = Database::open_with(small_config(Tier::Dram, Tier::Dram), Arc::new(store)).unwrap();
        let namespace = database.namespace(0).unwrap();
        namespace.put(b"live", b"v", 0).unwrap();
        let keys: [&[u8]; 4] = [b"new", b"absent", b"live", b"hash"];
        let changed = namespace
            .transaction(&keys, |transaction| {
                transaction.put(b"new", b"v", 0)?;
                assert!(!transaction.delete(b"absent")?);
                assert!(transaction.delete(b"live")?);
                transaction.put_part(b"hash", 0, b"bucket")?;
                Ok(transaction.changed_keys().map(<[u8]>::to_vec).collect::<Vec<_>>())
            })
            .unwrap();
        assert_eq!(changed, [b"new".to_vec(), b"live".to_vec()]);
    }

    /// Builds before parts existed clamped a key's expiry to `2^48 - 1`, which is now the part
    /// mark: such a record still reads as the key it is once the index is rebuilt from records.
    #[test]
    fn a_key_record_with_the_old_largest_expiry_reads_as_a_key() {
        let config = small_config(Tier::Dram, Tier::Pmem);
        let store = SimStore::new(11);
        let old_largest_expiry = (1 << 48) - 1;
        let database = Database::open_with(config.clone(), Arc::new(store.clone())).unwrap();
        database
            .namespace(0)
            .unwrap()
            .transaction(&[b"old"], |transaction| {
                let digest = transaction.namespace.digest(b"old");
                let value = Some((b"value".to_vec(), old_largest_expiry));
                transaction.writes.push(BufferedWrite { key: b"old".to_vec(), digest, value, part: false, visible: true });
                Ok(())
            })
            .unwrap();
        database.close().unwrap();
        let database = Database::open_with(config, Arc::new(store.clone())).unwrap();
        let namespace = database.namespace(0).unwrap();
        let value = namespace.get(b"old").unwrap().expect("the key is there");
        assert_eq!((value.bytes.as_slice(), value.expiry_unix_ms), (&b"value"[..], crate::EXPIRY_UNIX_MS_MAX));
        assert_eq!(namespace.key_count(), 1);
        assert_eq!(namespace.part_count(b"old").unwrap(), 0);
        database.close().unwrap();
    }

    #[test]
    fn a_transaction_counts_the_keys_its_own_writes_create_and_delete() {
        let store = SimStore::new(12);
        let database = Database::open_with(small_config(Tier::Dram, Tier::Dram), Arc::new(store.clone())).unwrap();
        let namespace = database.namespace(0).unwrap();
        namespace.put(b"kept", b"1", 0).unwrap();
        namespace.put(b"deleted", b"1", 0).unwrap();
        let keys: [&[u8]; 4] = [b"kept", b"deleted", b"new", b"never"];
        let counts = namespace
            .transaction(&keys, |transaction| {
                let before = transaction.key_count()?;
                transaction.put(b"new", b"1", 0)?;
                transaction.put(b"new", b"2", 0)?;
                transaction.put(b"kept", b"2", 0)?;
                transaction.delete(b"deleted")?;
                transaction.put(b"never", b"1", 0)?;
                transaction.delete(b"never")?;
                transaction.put_part(b"kept", 0, b"part")?;
                Ok((before, transaction.key_count()?))
            })
            .unwrap();
        assert_eq!(counts, (2, 2), "one key created, one deleted; rewrites, a key created and deleted again and parts change nothing");
        assert_eq!(namespace.key_count(), 2, "the commit counts as the transaction did");
        database.close().unwrap();
    }
}
