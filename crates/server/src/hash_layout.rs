//! How a hash is laid over engine records, so that a write costs the same whatever the hash's
//! size.
//!
//! A small hash is one record (tag 1, `values`). Once its record would pass the small limit it
//! becomes a root record (tag 2: field count, bucket count, field bytes, salt) plus buckets
//! stored as the key's engine parts 0..bucket count (a part lives and dies with its key: DEL,
//! expiry, SET and FLUSHDB remove them, RENAME moves them, and they are never keys themselves).
//! A field lives in the bucket its salted hash picks by linear hashing: with `n` buckets and
//! `low` the largest power of two not above `n`, bucket = hash mod 2·low, or hash mod low when
//! that is `n` or more. The hash grows one bucket at a time (bucket `n - low` splits into itself
//! and the new bucket `n`) while the average bucket holds more than the target, and shrinks
//! (the last bucket merges into its buddy) under a quarter of it, so one write reads and
//! writes the root and at most a few buckets. Under a quarter of the small limit the hash
//! becomes one record again.
//!
//! The target is small (`BUCKET_BYTES_TARGET_MIN`: each write logs its whole bucket) until the
//! hash is too big for that many buckets, then grows with it up to `BUCKET_BYTES_TARGET_MAX`.
//! Averages over the maximum always split; splits toward a smaller target are at most
//! `SOFT_SPLITS_PER_WRITE_MAX` per write, so a hash whose buckets are bigger than today's target
//! (after the hash shrank, or written by a build with bigger buckets) is split over many writes,
//! never in one batch too big to log.
//!
//! Every write rewrites the root (a new version for WATCH) in the command's one engine batch
//! with the buckets it changed: a crash keeps all of a command's changes or none.

use std::collections::BTreeMap;

use bytes::Bytes;
use rand::Rng;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::command::{fail, CommandError, KeyStore};
use crate::commands::WRONGTYPE;
use crate::values::{field_entry_bytes, Collection, CorruptValue, HashRecord, HashRoot, Stored};

/// A small hash whose record would pass this many bytes (or the namespace's value limit, if
/// lower) becomes bucketed.
pub const SMALL_HASH_BYTES_MAX: u64 = 8 * 1024;
/// Field bytes the average bucket holds at most while the hash has room for that many buckets.
pub const BUCKET_BYTES_TARGET_MIN: u64 = 1024;
/// Field bytes the average bucket holds at most whatever the hash's size (at most a quarter of
/// the value limit).
pub const BUCKET_BYTES_TARGET_MAX: u64 = 4 * 1024;
/// Random buckets HRANDFIELD reads per field it must pick before it reads the whole hash instead.
pub const SAMPLE_ATTEMPTS_PER_PICK: usize = 16;
/// Fields one command may add per bucket (a small hash counting as one) before it splits the
/// hash in memory (`OpenHash::split_while_crowded`), so that an HSET or SADD of 100,000 fields
/// searches bounded buckets instead of one ever longer list (quadratic). A hash stored is laid
/// out by `save` as before: this only bounds the searches of one command.
pub const FIELDS_ADDED_PER_BUCKET_MAX: u64 = 256;
/// Splits one write makes toward a target under `BUCKET_BYTES_TARGET_MAX` (splits that keep the
/// average under the maximum are not counted).
pub const SOFT_SPLITS_PER_WRITE_MAX: u32 = 4;

/// The limits of one namespace's hashes.
#[derive(Clone, Copy, Debug)]
pub struct HashLimits {
    /// Largest record the namespace stores.
    pub value_bytes_max: u64,
    /// Largest small-hash record.
    pub small_bytes_max: u64,
    pub bucket_bytes_target_min: u64,
    pub bucket_bytes_target_max: u64,
    /// Buckets one hash may have (the engine's parts per key).
    pub buckets_max: u32,
}

impl HashLimits {
    pub fn new(value_bytes_max: u64, buckets_max: u32) -> HashLimits {
        assert!(buckets_max > 0, "a hash needs at least one bucket");
        let bucket_bytes_target_max = BUCKET_BYTES_TARGET_MAX.min(value_bytes_max / 4).max(1);
        HashLimits {
            value_bytes_max,
            small_bytes_max: SMALL_HASH_BYTES_MAX.min(value_bytes_max),
            bucket_bytes_target_min: BUCKET_BYTES_TARGET_MIN.min(bucket_bytes_target_max),
            bucket_bytes_target_max,
            buckets_max,
        }
    }

    /// Field bytes one hash may hold: every bucket at the maximum target.
    pub fn hash_bytes_max(&self) -> u64 {
        u64::from(self.buckets_max) * self.bucket_bytes_target_max
    }

    /// The average bucket size a hash of `field_bytes` aims at: the minimum target, or more when
    /// the hash would need more buckets than it may have.
    fn bucket_bytes_target(&self, field_bytes: u64) -> u64 {
        field_bytes.div_ceil(u64::from(self.buckets_max)).clamp(self.bucket_bytes_target_min, self.bucket_bytes_target_max)
    }

    /// Under this many field bytes a bucketed hash becomes one record again.
    fn bucketed_bytes_min(&self) -> u64 {
        self.small_bytes_max / 4
    }
}

struct Bucket {
    fields: HashRecord,
    dirty: bool,
}

/// A bucket not decoded: as read (`get` scans a record without decoding it: SADD of a present
/// member, ZADD's and HGET's lookups), or as one change in place left it (`dirty`: a set or a
/// removal copies the record around the field it changes, `HashRecord::bucket_spliced`).
struct StoredBucket {
    record: Bytes,
    dirty: bool,
}

/// The buckets read or changed so far, by number: each decoded or as stored, never both.
#[derive(Default)]
struct Buckets {
    decoded: BTreeMap<u32, Bucket>,
    stored: BTreeMap<u32, StoredBucket>,
}

impl Buckets {
    /// Bucket `number` decoded: from its stored record if it has one here, else read.
    fn load(&mut self, store: &mut dyn KeyStore, key: &[u8], number: u32) -> Result<&mut Bucket, CommandError> {
        if let std::collections::btree_map::Entry::Vacant(entry) = self.decoded.entry(number) {
            let (record, dirty) = match self.stored.remove(&number) {
                Some(stored) => (stored.record, stored.dirty),
                None => (read_bucket(store, key, number)?, false),
            };
            entry.insert(Bucket { fields: HashRecord::decode_bucket(&record)?, dirty });
        }
        Ok(self.decoded.get_mut(&number).expect("inserted above"))
    }

    /// Bucket `number`'s record, read the first time; None when the bucket is decoded.
    fn stored(&mut self, store: &mut dyn KeyStore, key: &[u8], number: u32) -> Result<Option<&mut StoredBucket>, CommandError> {
        if self.decoded.contains_key(&number) {
            return Ok(None);
        }
        if let std::collections::btree_map::Entry::Vacant(entry) = self.stored.entry(number) {
            entry.insert(StoredBucket { record: read_bucket(store, key, number)?, dirty: false });
        }
        Ok(self.stored.get_mut(&number))
    }

    /// Bucket `number` to change in place: its record when it is not decoded and was not
    /// changed yet in this command (a bucket changed again is decoded: one copy of its record
    /// per change would cost more than decoding it once); None when it is to be decoded.
    fn for_splicing(&mut self, store: &mut dyn KeyStore, key: &[u8], number: u32) -> Result<Option<&mut StoredBucket>, CommandError> {
        if self.stored.get(&number).is_some_and(|stored| stored.dirty) {
            self.load(store, key, number)?;
        }
        self.stored(store, key, number)
    }

    fn insert(&mut self, number: u32, bucket: Bucket) {
        self.stored.remove(&number);
        self.decoded.insert(number, bucket);
    }

    fn remove(&mut self, number: u32) {
        self.decoded.remove(&number);
        self.stored.remove(&number);
    }

    /// The changed buckets' records, by number (a changed stored record is handed over, not
    /// copied).
    fn into_changed_records(self) -> Vec<(u32, Vec<u8>)> {
        let decoded = self.decoded.into_iter().filter(|(_, bucket)| bucket.dirty).map(|(number, bucket)| (number, bucket.fields.encode_bucket()));
        let stored = self.stored.into_iter().filter(|(_, stored)| stored.dirty).map(|(number, stored)| (number, Vec::from(stored.record)));
        decoded.chain(stored).collect()
    }
}

enum Layout {
    Small(HashRecord),
    Bucketed {
        root: HashRoot,
        buckets: Buckets,
        /// The root as stored before this command (its buckets past the final count are
        /// deleted); None when the hash was not bucketed.
        stored_root: Option<HashRoot>,
    },
}

/// A hash, or a set (members are fields with empty values), as one command sees it: read
/// lazily, changed in memory, written back by `save`.
pub struct OpenHash {
    key: Bytes,
    collection: Collection,
    expiry_unix_ms: u64,
    layout: Layout,
    changed: bool,
    /// Fields when opened: the fields added since are what `split_while_crowded` bounds.
    fields_at_open: u64,
}

impl OpenHash {
    /// The key's hash or set; None when the key is missing, WRONGTYPE when it holds another type.
    pub fn open(store: &mut dyn KeyStore, key: &Bytes, collection: Collection) -> Result<Option<OpenHash>, CommandError> {
        let Some(value) = store.get(key)? else { return Ok(None) };
        let (stored_collection, layout) = match Stored::decode(value.bytes)? {
            Stored::Small(stored_collection, fields) => (stored_collection, Layout::Small(fields)),
            Stored::Bucketed(stored_collection, root) => {
                (stored_collection, Layout::Bucketed { root, buckets: Buckets::default(), stored_root: Some(root) })
            }
            Stored::String(_) | Stored::List(_) | Stored::ChunkedList(_) | Stored::Stream(_) => return fail(WRONGTYPE),
        };
        if stored_collection != collection {
            return fail(WRONGTYPE);
        }
        let mut hash = OpenHash { key: key.clone(), collection, expiry_unix_ms: value.expiry_unix_ms, layout, changed: false, fields_at_open: 0 };
        hash.fields_at_open = hash.len();
        Ok(Some(hash))
    }

    /// The key's hash or set, or a new empty one when the key is missing.
    pub fn open_or_new(store: &mut dyn KeyStore, key: &Bytes, collection: Collection) -> Result<OpenHash, CommandError> {
        Ok(OpenHash::open(store, key, collection)?.unwrap_or_else(|| OpenHash {
            key: key.clone(),
            collection,
            expiry_unix_ms: 0,
            layout: Layout::Small(HashRecord::default()),
            changed: false,
            fields_at_open: 0,
        }))
    }

    /// A new hash or set of `fields` (no field twice), without expiry, for `save` to write
    /// under a key that is absent (deleted first: `save` does not remove another value's parts).
    pub fn with_distinct_fields(key: &Bytes, collection: Collection, fields: Vec<(Bytes, Bytes)>) -> OpenHash {
        debug_assert!(fields.len() == fields.iter().map(|(field, _)| field).collect::<std::collections::HashSet<_>>().len());
        OpenHash { key: key.clone(), collection, expiry_unix_ms: 0, layout: Layout::Small(HashRecord { fields }), changed: true, fields_at_open: 0 }
    }

    /// A hash bucketed in memory only (`split_while_crowded`: every bucket is in `buckets`)
    /// becomes one record of its fields again, which `save` lays out as any new hash.
    pub fn join_buckets_made_in_memory(&mut self) {
        if let Layout::Bucketed { stored_root: None, buckets, .. } = &mut self.layout {
            assert!(buckets.stored.is_empty(), "a hash bucketed in memory has no stored bucket");
            let fields = std::mem::take(&mut buckets.decoded).into_values().flat_map(|bucket| bucket.fields.fields).collect();
            self.layout = Layout::Small(HashRecord { fields });
        }
    }

    /// Whether the hash was stored as a root and buckets when opened.
    pub fn is_stored_bucketed(&self) -> bool {
        matches!(self.layout, Layout::Bucketed { stored_root: Some(_), .. })
    }

    /// The fields of a hash or set kept in one record, in their order (None once bucketed).
    pub fn small_fields_mut(&mut self) -> Option<&mut Vec<(Bytes, Bytes)>> {
        match &mut self.layout {
            Layout::Small(fields) => Some(&mut fields.fields),
            Layout::Bucketed { .. } => None,
        }
    }

    pub fn len(&self) -> u64 {
        match &self.layout {
            Layout::Small(fields) => fields.fields.len() as u64,
            Layout::Bucketed { root, .. } => root.field_count,
        }
    }

    pub fn get(&mut self, store: &mut dyn KeyStore, field: &[u8]) -> Result<Option<Bytes>, CommandError> {
        let key = self.key.clone();
        Ok(match &mut self.layout {
            Layout::Small(fields) => fields.get(field).cloned(),
            Layout::Bucketed { root, buckets, .. } => {
                let number = bucket_of(field_hash(root, field), root.bucket_count);
                match buckets.stored(store, &key, number)? {
                    Some(stored) => HashRecord::find_in_bucket(&stored.record, field)?,
                    None => buckets.decoded[&number].fields.get(field).cloned(),
                }
            }
        })
    }

    /// Sets a field; true when it is new.
    pub fn set(&mut self, store: &mut dyn KeyStore, field: Bytes, value: Bytes) -> Result<bool, CommandError> {
        self.changed = true;
        let key = self.key.clone();
        Ok(match &mut self.layout {
            Layout::Small(fields) => {
                let added = fields.set(field, value);
                if fields.fields.len() as u64 > self.fields_at_open + FIELDS_ADDED_PER_BUCKET_MAX {
                    self.layout = bucketed_from(&key, std::mem::take(fields));
                    self.split_while_crowded(store)?;
                }
                added
            }
            Layout::Bucketed { root, buckets, .. } => {
                let number = bucket_of(field_hash(root, &field), root.bucket_count);
                let new_bytes = field_entry_bytes(&field, &value);
                let (added, old_bytes) = match buckets.for_splicing(store, &key, number)? {
                    Some(stored) => {
                        let (spliced, old) = HashRecord::bucket_spliced(&stored.record, &field, Some(&value))?;
                        (stored.record, stored.dirty) = (Bytes::from(spliced.expect("a set changes its bucket")), true);
                        (old.is_none(), old.map_or(0, |old| field_entry_bytes(&field, &old)))
                    }
                    None => {
                        let bucket = buckets.load(store, &key, number)?;
                        let old_bytes = bucket.fields.get(&field).map_or(0, |old| field_entry_bytes(&field, old));
                        bucket.dirty = true;
                        (bucket.fields.set(field, value), old_bytes)
                    }
                };
                root.field_bytes = root.field_bytes - old_bytes + new_bytes;
                root.field_count += u64::from(added);
                if added {
                    self.split_while_crowded(store)?;
                }
                added
            }
        })
    }

    /// Splits buckets while this command added more than FIELDS_ADDED_PER_BUCKET_MAX fields per
    /// bucket; `save` lays the hash out by bytes afterwards.
    fn split_while_crowded(&mut self, store: &mut dyn KeyStore) -> Result<(), CommandError> {
        let fields_at_open = self.fields_at_open;
        let Layout::Bucketed { root, buckets, .. } = &mut self.layout else { unreachable!("called on a bucketed hash") };
        while root.field_count.saturating_sub(fields_at_open) > u64::from(root.bucket_count) * FIELDS_ADDED_PER_BUCKET_MAX {
            split(store, &self.key, root, buckets)?;
        }
        Ok(())
    }

    /// Removes a field; true when it was there.
    pub fn remove(&mut self, store: &mut dyn KeyStore, field: &[u8]) -> Result<bool, CommandError> {
        let key = self.key.clone();
        let removed = match &mut self.layout {
            Layout::Small(fields) => fields.remove(field),
            Layout::Bucketed { root, buckets, .. } => {
                let number = bucket_of(field_hash(root, field), root.bucket_count);
                let old_bytes = match buckets.for_splicing(store, &key, number)? {
                    Some(stored) => {
                        let (spliced, old) = HashRecord::bucket_spliced(&stored.record, field, None)?;
                        if let Some(spliced) = spliced {
                            (stored.record, stored.dirty) = (Bytes::from(spliced), true);
                        }
                        old.map(|old| field_entry_bytes(field, &old))
                    }
                    None => {
                        let bucket = buckets.load(store, &key, number)?;
                        let old_bytes = bucket.fields.get(field).map(|old| field_entry_bytes(field, old));
                        bucket.dirty |= bucket.fields.remove(field);
                        old_bytes
                    }
                };
                if let Some(old_bytes) = old_bytes {
                    root.field_bytes -= old_bytes;
                    root.field_count -= 1;
                }
                old_bytes.is_some()
            }
        };
        self.changed |= removed;
        Ok(removed)
    }

    /// Every field and value: insertion order for a small hash, bucket order otherwise.
    pub fn into_fields(self, store: &mut dyn KeyStore) -> Result<Vec<(Bytes, Bytes)>, CommandError> {
        match self.layout {
            Layout::Small(fields) => Ok(fields.fields),
            Layout::Bucketed { root, mut buckets, .. } => {
                let mut all = Vec::with_capacity(root.field_count.min(1 << 20) as usize);
                for number in 0..root.bucket_count {
                    all.append(&mut buckets.load(store, &self.key, number)?.fields.fields);
                }
                Ok(all)
            }
        }
    }

    /// `picks` fields chosen at random, with their values, as HRANDFIELD wants them: distinct
    /// fields when `distinct` (every field when the hash has no more than `picks`), else exactly
    /// `picks` choices that may repeat (none from an empty hash). A bucketed hash is sampled a
    /// random bucket at a time, then a random field of it, so a pick reads one bucket, not the
    /// hash (a field of a smaller bucket is a little more likely); distinct picks of more than a
    /// third of it, or a sampling that keeps missing, read it all, as HGETALL does.
    pub fn random_fields(mut self, store: &mut dyn KeyStore, picks: usize, distinct: bool, random: &mut impl Rng) -> Result<Vec<(Bytes, Bytes)>, CommandError> {
        let len = self.len() as usize;
        if len == 0 || picks == 0 {
            return Ok(Vec::new());
        }
        if !distinct || picks.saturating_mul(3) <= len {
            if let Some(chosen) = self.sample_buckets(store, picks, distinct, random)? {
                return Ok(chosen);
            }
        }
        let mut fields = self.into_fields(store)?;
        if fields.is_empty() {
            return Ok(Vec::new());
        }
        if !distinct {
            return Ok((0..picks).map(|_| fields[random.gen_range(0..fields.len())].clone()).collect());
        }
        if picks < fields.len() {
            let chosen = rand::seq::index::sample(random, fields.len(), picks);
            return Ok(chosen.into_iter().map(|at| std::mem::take(&mut fields[at])).collect());
        }
        Ok(fields)
    }

    /// `random_fields` by random buckets; None for a small hash, or when
    /// `SAMPLE_ATTEMPTS_PER_PICK` attempts per pick did not find enough (empty buckets, or
    /// counts that disagree with the buckets).
    fn sample_buckets(&mut self, store: &mut dyn KeyStore, picks: usize, distinct: bool, random: &mut impl Rng) -> Result<Option<Vec<(Bytes, Bytes)>>, CommandError> {
        let key = self.key.clone();
        let Layout::Bucketed { root, buckets, .. } = &mut self.layout else { return Ok(None) };
        let mut chosen = Vec::with_capacity(picks);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..picks.saturating_mul(SAMPLE_ATTEMPTS_PER_PICK) {
            if chosen.len() == picks {
                return Ok(Some(chosen));
            }
            let number = random.gen_range(0..root.bucket_count);
            let fields = &buckets.load(store, &key, number)?.fields.fields;
            if fields.is_empty() {
                continue;
            }
            let (field, value) = &fields[random.gen_range(0..fields.len())];
            if !distinct || seen.insert(field.clone()) {
                chosen.push((field.clone(), value.clone()));
            }
        }
        Ok((chosen.len() == picks).then_some(chosen))
    }

    /// One HSCAN step from `cursor`: the fields of the buckets visited (at least one, then more
    /// until `count` fields were seen) and the next cursor, 0 when the iteration is complete. A
    /// small hash answers every field at once with cursor 0, as Redis does for small encodings.
    ///
    /// The cursor is a position in the field-hash space, advanced in reverse-binary order (as
    /// Redis's SCAN): a bucket is the set of hashes with given low bits, so in bit-reversed
    /// order it is one aligned interval, and every cursor returned is the end of the bucket just
    /// read. Whatever splits and merges happen between calls, all hashes bit-reversed below the
    /// cursor were in buckets already returned: a field present for the whole iteration is
    /// returned at least once (a split may return it twice).
    pub fn scan(self, store: &mut dyn KeyStore, mut cursor: u64, count: usize) -> Result<ScanPage, CommandError> {
        let Layout::Bucketed { root, mut buckets, .. } = self.layout else {
            return Ok(ScanPage { next_cursor: 0, fields: self.into_fields(store)? });
        };
        let mut fields = Vec::new();
        loop {
            let number = bucket_of(cursor, root.bucket_count);
            fields.extend(buckets.load(store, &self.key, number)?.fields.fields.iter().cloned());
            cursor = next_scan_cursor(cursor, bucket_hash_bits(number, root.bucket_count));
            if cursor == 0 || fields.len() >= count {
                return Ok(ScanPage { next_cursor: cursor, fields });
            }
        }
    }

    /// Whether a field was added, changed or removed since it was opened.
    pub fn is_changed(&self) -> bool {
        self.changed
    }

    /// Writes the changes back, keeping the key's expiry: deletes the key when no field is
    /// left (as Redis), and moves between the layouts at their limits. Every check is made
    /// before the first write (a Redis error never follows a buffered write). A bucketed
    /// hash's root is written only when it changed, or when `versions_watched` (some client
    /// watches keys: WATCH sees a key's changes through its root's version).
    pub fn save(mut self, store: &mut dyn KeyStore, limits: &HashLimits, versions_watched: bool) -> Result<Saved, CommandError> {
        if !self.changed {
            return Ok(Saved::Unchanged);
        }
        if self.len() == 0 {
            store.delete(&self.key)?;
            return Ok(Saved::Deleted);
        }
        self.join_buckets_made_in_memory();
        if matches!(&self.layout, Layout::Bucketed { root, .. } if root.field_bytes < limits.bucketed_bytes_min()) {
            let (key, collection, expiry_unix_ms) = (self.key.clone(), self.collection, self.expiry_unix_ms);
            let small = HashRecord { fields: self.into_fields(store)? };
            // `put` drops the buckets: the key is one record again.
            store.put(&key, &small.encode(collection), expiry_unix_ms)?;
            return Ok(Saved::OneRecord);
        }
        if let Layout::Small(fields) = &mut self.layout {
            let encoded = fields.encode(self.collection);
            if encoded.len() as u64 <= limits.small_bytes_max {
                store.put(&self.key, &encoded, self.expiry_unix_ms)?;
                return Ok(Saved::OneRecord);
            }
            self.layout = bucketed_from(&self.key, std::mem::take(fields));
        }
        let Layout::Bucketed { root, buckets, stored_root, .. } = &mut self.layout else { unreachable!("converted above") };
        if root.field_bytes > limits.hash_bytes_max() {
            return fail(format!(
                "ERR {} would hold {} bytes of fields, over the limit of {} bytes for one {0}",
                self.collection.type_name(),
                root.field_bytes,
                limits.hash_bytes_max()
            ));
        }
        rebalance(store, &self.key, root, buckets, limits)?;
        let writes = std::mem::take(buckets).into_changed_records();
        for (_, encoded) in &writes {
            if encoded.len() as u64 > limits.value_bytes_max {
                return fail(format!(
                    "ERR a bucket of this {} would be {} bytes, over the namespace's value limit of {} bytes",
                    self.collection.type_name(),
                    encoded.len(),
                    limits.value_bytes_max
                ));
            }
        }
        for (number, encoded) in writes {
            store.put_part(&self.key, number, encoded)?;
        }
        let stored_bucket_count = stored_root.map_or(0, |stored| stored.bucket_count);
        for number in (root.bucket_count..stored_bucket_count).rev() {
            store.delete_part(&self.key, number)?;
        }
        if versions_watched || *stored_root != Some(*root) {
            store.put_keeping_parts(&self.key, &root.encode(self.collection), self.expiry_unix_ms)?;
        }
        Ok(Saved::Bucketed)
    }
}

/// What `OpenHash::save` left stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Saved {
    /// Nothing changed: nothing was written.
    Unchanged,
    /// No field was left: the key is gone, parts and all.
    Deleted,
    /// One record, without parts (`put` dropped any).
    OneRecord,
    /// A root and buckets.
    Bucketed,
}

/// One HSCAN reply: the fields found and the cursor to continue from (0: done).
pub struct ScanPage {
    pub next_cursor: u64,
    pub fields: Vec<(Bytes, Bytes)>,
}

/// A small hash's fields as a bucketed hash of one bucket (rebalanced by `save`).
fn bucketed_from(key: &[u8], fields: HashRecord) -> Layout {
    let root = HashRoot {
        field_count: fields.fields.len() as u64,
        bucket_count: 1,
        field_bytes: fields.fields.iter().map(|(field, value)| field_entry_bytes(field, value)).sum(),
        salt: salt_of(key),
    };
    let buckets = Buckets { decoded: BTreeMap::from([(0, Bucket { fields, dirty: true })]), stored: BTreeMap::new() };
    Layout::Bucketed { root, buckets, stored_root: None }
}

/// Splits while the average bucket is over the target (at most `SOFT_SPLITS_PER_WRITE_MAX`
/// splits while it is under the maximum target), merges while under a quarter of the target.
fn rebalance(
    store: &mut dyn KeyStore,
    key: &[u8],
    root: &mut HashRoot,
    buckets: &mut Buckets,
    limits: &HashLimits,
) -> Result<(), CommandError> {
    let target = limits.bucket_bytes_target(root.field_bytes);
    let mut soft_splits = 0;
    while root.bucket_count < limits.buckets_max {
        let capacity = |bytes_per_bucket: u64| u64::from(root.bucket_count) * bytes_per_bucket;
        let over_max = root.field_bytes > capacity(limits.bucket_bytes_target_max);
        let over_target = root.field_bytes > capacity(target) && soft_splits < SOFT_SPLITS_PER_WRITE_MAX;
        if !over_max && !over_target {
            break;
        }
        soft_splits += u32::from(!over_max);
        split(store, key, root, buckets)?;
    }
    while root.bucket_count > 1 && root.field_bytes < u64::from(root.bucket_count) * target / 4 {
        merge_last(store, key, root, buckets)?;
    }
    Ok(())
}

/// Adds bucket `n`, taking from bucket `n - low` the fields that now hash to it.
fn split(store: &mut dyn KeyStore, key: &[u8], root: &mut HashRoot, buckets: &mut Buckets) -> Result<(), CommandError> {
    let new_number = root.bucket_count;
    let source = new_number - lowest_power(new_number);
    let grown = HashRoot { bucket_count: new_number + 1, ..*root };
    let source_bucket = buckets.load(store, key, source)?;
    let (moved, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut source_bucket.fields.fields)
        .into_iter()
        .partition(|(field, _)| bucket_of(field_hash(&grown, field), grown.bucket_count) == new_number);
    source_bucket.fields.fields = kept;
    source_bucket.dirty = true;
    buckets.insert(new_number, Bucket { fields: HashRecord { fields: moved }, dirty: true });
    *root = grown;
    Ok(())
}

/// Removes the last bucket, moving its fields into the bucket it was split from.
fn merge_last(store: &mut dyn KeyStore, key: &[u8], root: &mut HashRoot, buckets: &mut Buckets) -> Result<(), CommandError> {
    let last = root.bucket_count - 1;
    let target = last - lowest_power(last);
    let mut moved = std::mem::take(&mut buckets.load(store, key, last)?.fields.fields);
    buckets.remove(last);
    let target_bucket = buckets.load(store, key, target)?;
    target_bucket.fields.fields.append(&mut moved);
    target_bucket.dirty = true;
    root.bucket_count = last;
    Ok(())
}

fn read_bucket(store: &mut dyn KeyStore, key: &[u8], number: u32) -> Result<Bytes, CommandError> {
    match store.get_part(key, number)? {
        Some(bytes) => Ok(Bytes::from(bytes)),
        None => Err(CorruptValue("hash bucket missing").into()),
    }
}

/// The salt of a hash's field hashes: secret (chosen fields cannot pile into one bucket) and,
/// within one server process, the same for a key each time it becomes bucketed, so that an HSCAN
/// cursor keeps its meaning if the hash shrinks to one record and grows back between two calls.
fn salt_of(key: &[u8]) -> u64 {
    static PROCESS_SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    xxh3_64_with_seed(key, *PROCESS_SEED.get_or_init(rand::random))
}

fn field_hash(root: &HashRoot, field: &[u8]) -> u64 {
    xxh3_64_with_seed(field, root.salt)
}

/// The largest power of two not above `count` (which is at least 1).
fn lowest_power(count: u32) -> u32 {
    debug_assert!(count > 0);
    1 << (31 - count.leading_zeros())
}

/// Linear hashing: the bucket of a field hash among `bucket_count` buckets.
fn bucket_of(hash: u64, bucket_count: u32) -> u32 {
    let low = u64::from(lowest_power(bucket_count));
    let number = hash & (2 * low - 1);
    (if number >= u64::from(bucket_count) { hash & (low - 1) } else { number }) as u32
}

/// How many low bits of a field's hash pick bucket `number` among `bucket_count`: one more
/// than the level for buckets already split at this level and their new halves.
fn bucket_hash_bits(number: u32, bucket_count: u32) -> u32 {
    let low = lowest_power(bucket_count);
    let level = low.trailing_zeros();
    if number < bucket_count - low || number >= low { level + 1 } else { level }
}

/// How many buckets of bucket `number`'s share of the field hashes would hold all of them: the
/// weight that scales a sampled bucket up to the whole hash (an unsplit bucket holds twice the
/// share of a split one).
pub fn buckets_per_share(number: u32, bucket_count: u32) -> u64 {
    assert!(number < bucket_count);
    1 << bucket_hash_bits(number, bucket_count)
}

/// The cursor after the bucket holding `cursor`, picked by its low `bits` hash bits: the next
/// such class of hashes in bit-reversed order, 0 after the last.
fn next_scan_cursor(cursor: u64, bits: u32) -> u64 {
    let above_bucket = u64::MAX.checked_shl(bits).unwrap_or(0);
    (cursor | above_bucket).reverse_bits().wrapping_add(1).reverse_bits()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory_store::MemoryStore;

    fn set_fields(store: &mut MemoryStore, limits: &HashLimits, fields: impl IntoIterator<Item = (String, usize)>) {
        let key = Bytes::from_static(b"hash");
        let mut hash = OpenHash::open_or_new(store, &key, Collection::Hash).unwrap();
        for (field, value_bytes) in fields {
            hash.set(store, Bytes::from(field), Bytes::from(vec![b'v'; value_bytes])).unwrap();
        }
        hash.save(store, limits, false).unwrap();
    }

    fn root(store: &MemoryStore) -> HashRoot {
        root_or_none(store).expect("the hash is bucketed")
    }

    #[test]
    fn buckets_stay_near_the_small_target_until_the_hash_needs_bigger_ones() {
        let limits = HashLimits { value_bytes_max: 1 << 20, small_bytes_max: 8192, bucket_bytes_target_min: 1024, bucket_bytes_target_max: 4096, buckets_max: 64 };
        let mut store = MemoryStore::default();
        for number in 0..400 {
            set_fields(&mut store, &limits, [(format!("field:{number}"), 200)]);
            let root = root_or_none(&store);
            if let Some(root) = root {
                let average = root.field_bytes / u64::from(root.bucket_count);
                // Each write splits enough to keep the average near the target for its size.
                assert!(average <= limits.bucket_bytes_target(root.field_bytes) + 220, "{number}: {average}");
                assert!(root.bucket_count <= limits.buckets_max);
            }
        }
        // 400 fields of about 215 bytes: past 64 buckets of 1 KiB, so the target grew.
        let grown = root(&store);
        assert_eq!(grown.bucket_count, 64);
        assert!(grown.field_bytes > 64 * 1024);
    }

    #[test]
    fn a_command_adding_many_tiny_fields_searches_bounded_buckets_and_stores_them_all() {
        let limits = HashLimits::new(1 << 20, 4096);
        let mut store = MemoryStore::default();
        let count = 80_000;
        let started = std::time::Instant::now();
        set_fields(&mut store, &limits, (0..count).map(|number| (number.to_string(), 0)));
        // All in one list this took seconds (each of 80,000 inserts searched the ones before).
        assert!(started.elapsed() < std::time::Duration::from_secs(2), "{:?}", started.elapsed());
        let grown = root(&store);
        assert_eq!(grown.field_count, count as u64);
        let mut hash = OpenHash::open(&mut store, &Bytes::from_static(b"hash"), Collection::Hash).unwrap().unwrap();
        for number in (0..count).step_by(997) {
            assert_eq!(hash.get(&mut store, number.to_string().as_bytes()).unwrap().as_deref(), Some(&b""[..]));
        }
        assert_eq!(hash.into_fields(&mut store).unwrap().len(), count);
        // The stored layout is the one `save` chooses by bytes, whatever the splits in memory.
        let mut one_by_one = MemoryStore::default();
        for number in 0..count {
            let mut hash = OpenHash::open_or_new(&mut one_by_one, &Bytes::from_static(b"hash"), Collection::Hash).unwrap();
            hash.set(&mut one_by_one, Bytes::from(number.to_string()), Bytes::new()).unwrap();
            hash.save(&mut one_by_one, &limits, false).unwrap();
        }
        assert!(root(&store).bucket_count <= root(&one_by_one).bucket_count);
    }

    fn root_or_none(store: &MemoryStore) -> Option<HashRoot> {
        match Stored::decode(store.keys[b"hash".as_slice()].bytes.clone()).unwrap() {
            Stored::Bucketed(Collection::Hash, root) => Some(root),
            _ => None,
        }
    }

    #[test]
    fn random_fields_sample_a_bucketed_hash_and_fall_back_to_reading_it_whole() {
        use rand::SeedableRng;
        let limits = HashLimits::new(1 << 20, 32_767);
        let mut store = MemoryStore::default();
        set_fields(&mut store, &limits, (0..300).map(|n| (format!("field:{n}"), 400)));
        assert!(root(&store).bucket_count > 1);
        let key = Bytes::from_static(b"hash");
        let mut random = rand::rngs::StdRng::seed_from_u64(3);
        let mut pick = |store: &mut MemoryStore, picks: usize, distinct: bool| {
            let hash = OpenHash::open(store, &key, Collection::Hash).unwrap().unwrap();
            hash.random_fields(store, picks, distinct, &mut random).unwrap().into_iter().map(|(field, _)| field).collect::<Vec<_>>()
        };
        let distinct = pick(&mut store, 40, true);
        assert_eq!(distinct.iter().collect::<std::collections::HashSet<_>>().len(), 40);
        assert_eq!(pick(&mut store, 500, false).len(), 500);
        assert_eq!(pick(&mut store, 1000, true).len(), 300, "more than there are: all of them");
        // A root that counts more fields than its buckets hold: sampling gives up, reading the
        // whole hash answers with what there is.
        let mut wrong = root(&store);
        wrong.field_count = 100_000;
        store.put_keeping_parts(&key, &wrong.encode(Collection::Hash), 0).unwrap();
        assert_eq!(pick(&mut store, 400, true).len(), 300);
    }

    /// Commands of a few sets and removals each, on a hash that grows into buckets and shrinks
    /// back to one record: a bucket changed in its record, changed again (decoded), read, split,
    /// merged or gathered into one record holds what a model map holds.
    #[test]
    fn random_sets_and_removals_keep_the_hash_as_a_model_map() {
        use rand::SeedableRng;
        let limits = HashLimits { value_bytes_max: 1 << 20, small_bytes_max: 2048, bucket_bytes_target_min: 512, bucket_bytes_target_max: 1024, buckets_max: 256 };
        let key = Bytes::from_static(b"hash");
        let mut random = rand::rngs::StdRng::seed_from_u64(21);
        let mut store = MemoryStore::default();
        let mut model = std::collections::BTreeMap::new();
        for step in 0..4000 {
            let mut hash = OpenHash::open_or_new(&mut store, &key, Collection::Hash).unwrap();
            let growing = (step / 1000) % 2 == 0;
            for _ in 0..random.gen_range(1..6) {
                let field = Bytes::from(format!("field:{}", random.gen_range(0..600)));
                if random.gen_bool(if growing { 0.2 } else { 0.8 }) {
                    assert_eq!(hash.remove(&mut store, &field).unwrap(), model.remove(&field).is_some(), "step {step}: removal of {field:?}");
                } else {
                    let value = Bytes::from(vec![b'a' + random.gen_range(0..26u8); random.gen_range(0..40)]);
                    assert_eq!(hash.set(&mut store, field.clone(), value.clone()).unwrap(), model.insert(field, value).is_none(), "step {step}");
                }
                let probe = Bytes::from(format!("field:{}", random.gen_range(0..600)));
                assert_eq!(hash.get(&mut store, &probe).unwrap().as_ref(), model.get(&probe), "step {step}: {probe:?}");
            }
            assert_eq!(hash.len(), model.len() as u64);
            hash.save(&mut store, &limits, false).unwrap();
            if step % 97 == 0 {
                let stored = OpenHash::open(&mut store, &key, Collection::Hash).unwrap().map_or_else(Vec::new, |hash| hash.into_fields(&mut store).unwrap());
                assert_eq!(stored.into_iter().collect::<std::collections::BTreeMap<_, _>>(), model, "step {step}");
            }
        }
    }

    /// Replacing a value with one of its size leaves the root as it was: it is written again
    /// only while some client watches keys (WATCH sees a hash change through its root).
    #[test]
    fn an_unchanged_root_is_rewritten_only_while_keys_are_watched() {
        let limits = HashLimits::new(1 << 20, 32_767);
        let mut store = MemoryStore::default();
        set_fields(&mut store, &limits, (0..100).map(|n| (format!("field:{n}"), 400)));
        let key = Bytes::from_static(b"hash");
        let update = |store: &mut MemoryStore, value_bytes: usize, versions_watched: bool| {
            let mut hash = OpenHash::open(store, &key, Collection::Hash).unwrap().unwrap();
            assert!(!hash.set(store, Bytes::from_static(b"field:7"), Bytes::from(vec![b'w'; value_bytes])).unwrap());
            let (parts, keys) = (store.part_writes, store.key_writes);
            hash.save(store, &limits, versions_watched).unwrap();
            (store.part_writes - parts, store.key_writes - keys)
        };
        // The first writes split buckets toward the target (a few per write): wait them out.
        let mut settled = false;
        for _ in 0..100 {
            let before_update = root(&store);
            update(&mut store, 400, true);
            if root(&store) == before_update {
                settled = true;
                break;
            }
        }
        assert!(settled, "the buckets stopped splitting");
        let before = root(&store);
        assert_eq!(update(&mut store, 400, false), (1, 0), "same size, nobody watching: the bucket only");
        assert_eq!(update(&mut store, 400, true), (1, 1), "same size, keys watched: the root too");
        assert_eq!(update(&mut store, 401, false), (1, 1), "the root's byte count changed");
        assert_eq!(root(&store).field_bytes, before.field_bytes + 1);
        let mut hash = OpenHash::open(&mut store, &key, Collection::Hash).unwrap().unwrap();
        assert_eq!(hash.get(&mut store, b"field:7").unwrap(), Some(Bytes::from(vec![b'w'; 401])));
    }

    #[test]
    fn a_hash_with_buckets_over_the_target_is_split_a_few_buckets_per_write() {
        // Built with the old, bigger target, then written with the small one.
        let big_buckets = HashLimits { value_bytes_max: 1 << 20, small_bytes_max: 8192, bucket_bytes_target_min: 4096, bucket_bytes_target_max: 4096, buckets_max: 1024 };
        let mut store = MemoryStore::default();
        set_fields(&mut store, &big_buckets, (0..1000).map(|number| (format!("field:{number}"), 200)));
        let before = root(&store);
        let small_buckets = HashLimits { bucket_bytes_target_min: 1024, ..big_buckets };
        store.part_writes = 0;
        set_fields(&mut store, &small_buckets, [("one more".to_string(), 200)]);
        let after = root(&store);
        assert_eq!(after.bucket_count, before.bucket_count + SOFT_SPLITS_PER_WRITE_MAX);
        // The bucket written, plus each split's two halves at most.
        assert!(store.part_writes <= 1 + 2 * SOFT_SPLITS_PER_WRITE_MAX as usize, "{}", store.part_writes);
        let mut hash = OpenHash::open(&mut store, &Bytes::from_static(b"hash"), Collection::Hash).unwrap().unwrap();
        assert_eq!(hash.len(), 1001);
        assert!(hash.get(&mut store, b"field:999").unwrap().is_some());
    }

    #[test]
    fn linear_hashing_splits_only_the_split_bucket() {
        for count in 1..200u32 {
            for hash in 0..2000u64 {
                let before = bucket_of(hash, count);
                let after = bucket_of(hash, count + 1);
                assert!(before < count && after <= count);
                let split = count - lowest_power(count);
                // Only fields of the split bucket move, and only to the new bucket.
                assert!(before == after || (before == split && after == count), "{count} {hash}");
            }
        }
    }

    #[test]
    fn each_bucket_holds_the_share_of_hashes_its_weight_names() {
        const HASHES: u64 = 1 << 12;
        for count in 1..200u32 {
            let mut held = vec![0u64; count as usize];
            for hash in 0..HASHES {
                held[bucket_of(hash, count) as usize] += 1;
            }
            for (number, held) in held.into_iter().enumerate() {
                assert_eq!(held * buckets_per_share(number as u32, count), HASHES, "{count} {number}");
            }
        }
    }

    /// The hashes in bucket `number` of `bucket_count` and the cursor after it, as `scan` walks.
    fn scan_step(hashes: &[u64], cursor: u64, bucket_count: u32) -> (Vec<u64>, u64) {
        let number = bucket_of(cursor, bucket_count);
        let found = hashes.iter().copied().filter(|&hash| bucket_of(hash, bucket_count) == number).collect();
        (found, next_scan_cursor(cursor, bucket_hash_bits(number, bucket_count)))
    }

    #[test]
    fn scan_cursor_visits_every_bucket_once_when_nothing_changes() {
        for bucket_count in 1..300u32 {
            let mut cursor = 0;
            let mut visited = Vec::new();
            loop {
                visited.push(bucket_of(cursor, bucket_count));
                cursor = next_scan_cursor(cursor, bucket_hash_bits(*visited.last().unwrap(), bucket_count));
                if cursor == 0 {
                    break;
                }
            }
            visited.sort_unstable();
            assert_eq!(visited, (0..bucket_count).collect::<Vec<_>>(), "{bucket_count}");
        }
    }

    #[test]
    fn scan_cursor_returns_every_hash_while_buckets_split_and_merge() {
        use rand::{Rng, SeedableRng};
        let mut random = rand::rngs::StdRng::seed_from_u64(7);
        let hashes: Vec<u64> = (0..3000).map(|_| random.gen()).collect();
        for _ in 0..500 {
            let mut bucket_count: u32 = random.gen_range(1..200);
            let (mut cursor, mut seen) = (0, std::collections::HashSet::new());
            loop {
                let (found, next) = scan_step(&hashes, cursor, bucket_count);
                seen.extend(found);
                cursor = next;
                if cursor == 0 {
                    break;
                }
                // Between calls the hash grows or shrinks by a few buckets, or by many.
                let change: i64 = if random.gen_bool(0.1) { random.gen_range(-100..100) } else { random.gen_range(-3..=3) };
                bucket_count = (i64::from(bucket_count) + change).clamp(1, 400) as u32;
            }
            assert_eq!(seen.len(), hashes.len());
        }
    }
}
