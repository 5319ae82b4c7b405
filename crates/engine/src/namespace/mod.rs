//! A namespace: one primary index, one record log (and, for records in DRAM, one journal), the
//! read path, and the public API the server calls. The write path (transactions, group commit,
//! publication) is in `write`, background work (flushes, checkpoints, defragmentation, expiry)
//! in `maintenance`, and start-up in `crate::recovery`.

mod commit;
mod full_scan;
mod keyspace;
mod load_ahead;
mod maintenance;
mod space;
mod write;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLockReadGuard};
use std::thread::JoinHandle;

use hybridkv_media::{DurabilityPath, MediaProvider, Medium, Tier};
use parking_lot::{Condvar, Mutex};

use crate::cache::{CacheKey, RecordCache};
use crate::config::{Durability, NamespaceConfig, KEY_BYTES_MAX};
use crate::digest::{namespace_seed, part_key, Digest};
use crate::error::{EngineError, Result};
use crate::index::{entry_expiry, record_expired, Entry, Index, Partition};
use crate::journal::JournaledMemory;
use crate::log::record::{decode_header, record_bytes, RecordHeader};
use crate::log::{Location, RecordLog, RecordView, RECORD_HEADER_BYTES};
use crate::recovery::RestartReport;
use crate::stats::{CacheStats, NamespaceStats, TierUsage};
use crate::striped_counter::StripedCounter;
use commit::CommitState;

pub use commit::{CommitTicket, DurableCallback};
pub use full_scan::FullScanReport;
pub use load_ahead::{CacheLoad, SubmitReads, LOAD_AHEAD_WINDOW_READS};
pub use write::{KeySnapshot, Transaction};

/// The first part number of a key's second part space: parts 0, 1, 2… and
/// SECOND_PART_SPACE, SECOND_PART_SPACE + 1… are two dense sequences of one key's parts.
pub const SECOND_PART_SPACE: u32 = 1 << 31;
/// Where each part space starts.
const PART_SPACE_STARTS: [u32; 2] = [0, SECOND_PART_SPACE];

/// Probes a key's part numbers, each space from its start until `exists` answers false there
/// (a key's parts are numbered densely in each space).
pub(crate) fn probe_part_numbers(mut exists: impl FnMut(u32) -> Result<bool>) -> Result<()> {
    for first in PART_SPACE_STARTS {
        let mut number = first;
        while exists(number)? {
            number += 1;
        }
    }
    Ok(())
}
pub(crate) use maintenance::OpenCheckpoint;
pub(crate) use write::Publication;

/// A value as stored, with its expiry and a version that changes on every write of the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Value {
    pub bytes: Vec<u8>,
    /// Unix ms; 0 = no expiry.
    pub expiry_unix_ms: u64,
    /// The record's LSN: equal versions mean the key was not written in between.
    pub version: u64,
}

impl Value {
    /// Reads the clock only for values that have an expiry.
    pub(crate) fn has_expired_now(&self) -> bool {
        self.expiry_unix_ms != 0 && self.expiry_unix_ms <= crate::now_unix_ms()
    }
}

pub enum BatchOp {
    Put { key: Vec<u8>, value: Vec<u8>, expiry_unix_ms: u64 },
    Delete { key: Vec<u8> },
}

pub struct ScanPage {
    pub keys: Vec<Vec<u8>>,
    /// 0 when the scan is complete.
    pub next_cursor: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) hits: StripedCounter,
    pub(crate) misses: StripedCounter,
    pub(crate) writes: StripedCounter,
    /// Writes in periodic or none durability that waited for a flush: PENDING_RECORDS_MAX
    /// records were waiting for publication.
    pub(crate) writes_held_for_backlog: AtomicU64,
    /// Writes whose acknowledgement was held while space was short (`space.rs`).
    pub(crate) writes_held_for_space: AtomicU64,
    pub(crate) flushes: AtomicU64,
    pub(crate) log_writes: AtomicU64,
    pub(crate) defragmented_blocks: AtomicU64,
    pub(crate) corrupt_records: AtomicU64,
}

pub struct Namespace {
    pub(crate) config: NamespaceConfig,
    pub(crate) seed: u64,
    pub(crate) index: Index,
    pub(crate) log: RecordLog<Publication>,
    pub(crate) journal: Option<Arc<JournaledMemory>>,
    pub(crate) cache: Option<RecordCache>,
    pub(crate) load_ahead_gate: load_ahead::LoadAheadGate,
    pub(crate) device_loads: load_ahead::DeviceLoads,
    pub(crate) commit: Mutex<CommitState>,
    pub(crate) committed: Condvar,
    pub(crate) keyspace: keyspace::KeyspaceStats,
    /// Records appended but not yet published (bounded by flushing early).
    pub(crate) unpublished_records: AtomicUsize,
    /// A writer woke a committer for the records waiting for publication since a committer
    /// last started a flush (`wake_committer_for_backlog`).
    pub(crate) backlog_wake_sent: AtomicBool,
    /// Dead records fill at least half of the used blocks (`space.rs`; set by the maintenance
    /// thread).
    pub(crate) space_reclaimable: AtomicBool,
    /// Acknowledgements held for space, oldest first.
    pub(crate) space_waiters: Mutex<Vec<space::SpaceWaiter>>,
    pub(crate) counters: Counters,
    pub(crate) poisoned: Mutex<Option<String>>,
    pub(crate) last_checkpoint_unix_ms: AtomicU64,
    pub(crate) log_bytes_at_checkpoint: AtomicU64,
    /// The log's next LSN when the last checkpoint was taken (records since: the LSNs handed out).
    pub(crate) lsn_at_checkpoint: AtomicU64,
    pub(crate) checkpoint_lock: Mutex<()>,
    /// Live-byte accounting is trustworthy (rebuilt, or audited after a warm start).
    pub(crate) accounting_ready: AtomicBool,
    /// A checkpoint is due at the next round of background work (see `OpenCheckpoint`).
    checkpoint_wanted: AtomicBool,
    pub(crate) stopping: Arc<AtomicBool>,
    /// Background maintenance runs (`Config::background_maintenance`): committers then also
    /// write out sealed blocks' pages as soon as a block is sealed, and flush once
    /// PENDING_RECORDS_EARLY_FLUSH records wait for publication. Without it (deterministic
    /// tests) the next flush or rotation does, on the thread that calls it.
    pub(crate) background_write_out: AtomicBool,
    /// The maintenance thread and the committer threads.
    pub(crate) background_threads: Mutex<Vec<JoinHandle<()>>>,
    pub(crate) manual_maintenance: Mutex<maintenance::LoopState>,
    /// Full scans under way: defragmentation waits for them (so moves never duplicate a record).
    pub(crate) full_scans_running: AtomicUsize,
    /// Held while blocks are being defragmented; holds the block image buffer each round reuses
    /// (a fresh 8 MiB buffer per round is new memory the kernel faults in and zeroes).
    pub(crate) defrag_running: Mutex<Vec<u8>>,
    /// Defragmented blocks waiting for a checkpoint that covers their moves before they are freed.
    pub(crate) emptied_blocks: Mutex<Vec<maintenance::EmptiedBlock>>,
    /// The log position of the last checkpoint taken by this process (0 before the first).
    pub(crate) checkpointed_position: AtomicU64,
    /// Told the key of every key the background work deletes because it expired.
    expiry_listener: OnceLock<ExpiryListener>,
}

/// Called with the key of each key the background work deleted because it expired, after its
/// deletion and with no lock of the namespace held (keyspace notifications' `expired`).
pub type ExpiryListener = Box<dyn Fn(&[u8]) + Send + Sync>;

/// Keys of `get_many` whose memory misses are overlapped: enough to cover the memory latency,
/// few enough that the prefetched slots and records (about 600 bytes a key) stay in the L1 cache.
const GET_MANY_GROUP_KEYS: usize = 16;

/// How a read uses the record cache: a value read counts as an access and is admitted; listing
/// keys (SCAN, KEYS) only uses what is already cached, so a key listing cannot flood the cache.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CacheUse {
    Read,
    Peek,
}

/// A fingerprint of what makes an index belong to a record log: the namespace and the data
/// placement. An index region with another fingerprint is rebuilt.
pub(crate) fn fingerprint_of(config: &NamespaceConfig) -> u64 {
    let text = format!("{}|{}|{}|{}", config.name, config.data, config.data_bytes, config.write_block_bytes);
    xxhash_rust::xxh3::xxh3_64(text.as_bytes())
}

/// The key of a record cache entry: 64 of the digest's 128 bits (two keys sharing them share an
/// entry and miss more; a lookup still matches the record's location).
pub(crate) fn cache_key_hash(digest: Digest) -> u64 {
    digest.0 as u64
}

/// The namespace's record cache: records on ssd get one, and records on pmem when that is real
/// persistent memory (MAP_SYNC). A pmem file on the msync fallback is read through the kernel's
/// page cache, which is DRAM already: a record cache in front would hold a second copy of the same
/// bytes and add a map probe per read and write (mix-50-50 through the server measured about 10%
/// more CPU per command with it; docs/design/cache.md). Records in DRAM get none either.
fn record_cache_for(config: &NamespaceConfig, data_durability: DurabilityPath) -> Option<RecordCache> {
    let wanted = cache_configured(config);
    if wanted && data_durability == DurabilityPath::MsyncFallback {
        tracing::info!(namespace = %config.name, "pmem data on the msync fallback is read from the page cache: no record cache");
        return None;
    }
    wanted.then(|| RecordCache::new(config.cache_bytes))
}

/// Whether the configuration asks for a record cache: a budget, and records off DRAM.
fn cache_configured(config: &NamespaceConfig) -> bool {
    config.cache_bytes > 0 && config.data != Tier::Dram
}

impl Namespace {
    /// Opens the namespace's media and recovers it (see `crate::recovery`).
    pub(crate) fn open(config: NamespaceConfig, provider: Arc<dyn MediaProvider>) -> Result<(Arc<Namespace>, RestartReport)> {
        config.validate()?;
        let name = &config.name;
        let journal = match config.data {
            Tier::Dram => Some(Arc::new(JournaledMemory::open(
                provider.clone(),
                name,
                config.journal,
                config.data_bytes,
                config.write_block_bytes,
                config.journal_segment_bytes,
            )?)),
            _ => None,
        };
        let data: Arc<dyn Medium> = match &journal {
            Some(journal) => journal.clone(),
            None => provider.open(&format!("{name}.data"), config.data, config.data_bytes)?.medium,
        };
        let index_medium = provider.open(&format!("{name}.index"), config.index, config.index_bytes)?;
        crate::recovery::open_namespace(config, data, index_medium, journal, provider.boot_id())
    }

    /// Sets the listener told of every key deleted because it expired, from now on; false
    /// (and nothing changes) when one is set already.
    pub fn listen_for_expiries(&self, listener: ExpiryListener) -> bool {
        self.expiry_listener.set(listener).is_ok()
    }

    pub(crate) fn announce_expired(&self, key: &[u8]) {
        if let Some(listener) = self.expiry_listener.get() {
            listener(key);
        }
    }

    pub(crate) fn assemble(config: NamespaceConfig, index: Index, log: RecordLog<Publication>, journal: Option<Arc<JournaledMemory>>) -> Namespace {
        Namespace {
            seed: namespace_seed(&config.name),
            cache: record_cache_for(&config, log.medium().info().durability),
            load_ahead_gate: load_ahead::LoadAheadGate::default(),
            device_loads: load_ahead::DeviceLoads::default(),
            config,
            index,
            log,
            journal,
            commit: Mutex::new(CommitState::new()),
            committed: Condvar::new(),
            keyspace: keyspace::KeyspaceStats::default(),
            unpublished_records: AtomicUsize::new(0),
            backlog_wake_sent: AtomicBool::new(false),
            space_reclaimable: AtomicBool::new(false),
            space_waiters: Mutex::new(Vec::new()),
            counters: Counters::default(),
            poisoned: Mutex::new(None),
            last_checkpoint_unix_ms: AtomicU64::new(0),
            log_bytes_at_checkpoint: AtomicU64::new(0),
            lsn_at_checkpoint: AtomicU64::new(0),
            checkpoint_lock: Mutex::new(()),
            accounting_ready: AtomicBool::new(false),
            checkpoint_wanted: AtomicBool::new(false),
            stopping: Arc::new(AtomicBool::new(false)),
            background_write_out: AtomicBool::new(false),
            background_threads: Mutex::new(Vec::new()),
            manual_maintenance: Mutex::new(maintenance::LoopState::new()),
            full_scans_running: AtomicUsize::new(0),
            defrag_running: Mutex::new(Vec::new()),
            emptied_blocks: Mutex::new(Vec::new()),
            checkpointed_position: AtomicU64::new(0),
            expiry_listener: OnceLock::new(),
        }
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    pub fn config(&self) -> &NamespaceConfig {
        &self.config
    }

    pub(crate) fn digest(&self, key: &[u8]) -> Digest {
        Digest::of(self.seed, key)
    }

    /// The digest of a verified record: of its key, in the part domain for a part.
    pub(crate) fn record_digest(&self, view: &RecordView<'_>) -> Digest {
        if view.header.is_part() {
            Digest::of_part_key(self.seed, view.key)
        } else {
            self.digest(view.key)
        }
    }

    /// Walks the records of block `slot` through `window` (see `RecordLog::walk_block`), loading
    /// each record's index slot a few records before `visit(offset after the block header,
    /// record, its digest)` looks it up; `visit` returns false to stop.
    pub(crate) fn walk_block_prefetching(
        &self,
        slot: u32,
        seq: u64,
        window: &mut Vec<u8>,
        visit: impl FnMut(u64, &RecordView<'_>, Digest) -> Result<bool>,
    ) -> Result<crate::log::Walked> {
        let ahead = |view: &RecordView<'_>| {
            let digest = self.record_digest(view);
            self.index.prefetch_entry(digest);
            digest
        };
        self.log.walk_block(slot, seq, window, ahead, visit)
    }

    /// The digest of part `number` of the key whose digest is `owner`.
    pub(crate) fn part_digest(&self, owner: Digest, number: u32) -> Digest {
        Digest::of_part_key(self.seed, &part_key(owner, number))
    }

    /// Parts one key may have in each of its two part spaces (`SECOND_PART_SPACE`): the
    /// tombstones of a quarter of a write block's worth per space, so that deleting the key and
    /// all its parts stays one batch (half a block at most).
    pub fn parts_per_key_max(&self) -> u32 {
        let tombstone_bytes = record_bytes(crate::digest::PART_KEY_BYTES, 0) as u64;
        (self.config.write_block_bytes / 4 / tombstone_bytes - 1).min(u64::from(SECOND_PART_SPACE - 1)) as u32
    }

    /// How many parts the key has, in both part spaces (each numbered densely from its start).
    pub fn part_count(&self, key: &[u8]) -> Result<u32> {
        Self::check_key(key)?;
        let owner = self.digest(key);
        let partition = self.index.partition(self.index.partition_of(owner)).read();
        let mut count = 0;
        probe_part_numbers(|number| {
            let exists = self.index.lookup(&partition, self.part_digest(owner, number))?.is_some();
            count += u32::from(exists);
            Ok(exists)
        })?;
        Ok(count)
    }
    pub(crate) fn check_key(key: &[u8]) -> Result<()> {
        if key.len() > KEY_BYTES_MAX {
            return Err(EngineError::KeyTooLarge { len_bytes: key.len(), limit_bytes: KEY_BYTES_MAX });
        }
        Ok(())
    }

    /// Reads and verifies the record of `entry`, the entry of `key` (of a part of a key when
    /// `part`), through the record cache when there is one, expired or not. A damaged record is
    /// counted, logged and reported, never served; so is a record that does not match its entry
    /// (another key's or kind's, or with an expiry where the entry has none or the reverse):
    /// entries carry no checksum of their own, and 128-bit digests of two keys do not collide.
    pub(crate) fn read_entry(&self, entry: &Entry, key: &[u8], part: bool) -> Result<Option<Value>> {
        let record = self.read_record(entry, CacheUse::Read)?;
        self.entry_value(record, entry, key, part).map(Some)
    }

    /// The value in `record`, the verified record `entry` names, if it is the entry's (see
    /// `read_entry`).
    fn entry_value(&self, record: Vec<u8>, entry: &Entry, key: &[u8], part: bool) -> Result<Value> {
        let header = verified_header(&record);
        let matches = key_of(&record) == key
            && header.is_part() == part
            && Entry::new(entry.digest, entry.location, part, header.expiry_unix_ms) == *entry;
        if !matches {
            self.counters.corrupt_records.fetch_add(1, Ordering::Relaxed);
            let error = EngineError::Corrupt {
                what: format!("index entry naming block {} offset {}", entry.location.slot(), entry.location.offset()),
                detail: "the record there is not this entry's (another key or kind, or its expiry tag differs)".into(),
            };
            tracing::error!(namespace = %self.config.name, %error, "damaged index entry not served");
            return Err(error);
        }
        Ok(value_in_place(record))
    }

    /// How the record cache knows the record of `digest`'s key at `location`.
    pub(crate) fn cache_key(&self, digest: Digest, location: Location) -> CacheKey {
        CacheKey { key_hash: cache_key_hash(digest), location: location.0, block_seq: self.log.block_seq(location.slot()) }
    }

    /// The verified record of `entry`, found under `partition`'s read lock, which is released
    /// before any device read: a read from ssd takes tens of microseconds, and the writers of the
    /// partition's other (possibly hot) keys, and the readers queued behind them, would wait for
    /// it. None when the record's block was freed or reused once the lock was let go (the key was
    /// rewritten or moved): the caller looks the key up again. A record read this way is the one
    /// the entry named when it was looked up; if the key was written since, the cache keeps the
    /// newer record if it holds it (`RecordCache::insert`), and otherwise takes the superseded
    /// one, a miss for every later lookup until the key is written again or the entry ages out.
    pub(super) fn read_record_releasing(&self, partition: RwLockReadGuard<'_, Partition>, entry: &Entry) -> Result<Option<Vec<u8>>> {
        let Some(cache) = self.cache.as_ref().filter(|_| self.reads_may_wait()) else {
            return self.read_record(entry, CacheUse::Read).map(Some);
        };
        let cache_key = self.cache_key(entry.digest, entry.location);
        if let Some(record) = cache.get(cache_key) {
            return Ok(Some(record));
        }
        self.read_medium_releasing(cache, partition, entry, cache_key, false)
    }

    /// The device read of `read_record_releasing`, after the cache missed: the record is
    /// admitted to the cache, as loaded `ahead` of its command or as read by it.
    pub(super) fn read_medium_releasing(
        &self,
        cache: &RecordCache,
        partition: RwLockReadGuard<'_, Partition>,
        entry: &Entry,
        cache_key: CacheKey,
        ahead: bool,
    ) -> Result<Option<Vec<u8>>> {
        drop(partition);
        let mut buffer = Vec::new();
        let read = self.log.read_verified_unpinned(entry.location, cache_key.block_seq, &mut buffer);
        if read.as_ref().is_ok_and(Option::is_some) {
            if ahead {
                cache.insert_ahead(cache_key, &buffer);
            } else {
                cache.insert(cache_key, &buffer);
            }
        }
        Ok(self.counted(read)?.map(|()| buffer))
    }

    /// The verified bytes of the record `entry` names, from the cache or the medium.
    fn read_record(&self, entry: &Entry, cache_use: CacheUse) -> Result<Vec<u8>> {
        let location = entry.location;
        let mut buffer = Vec::new();
        let Some(cache) = &self.cache else {
            self.read_verified_counted(location, &mut buffer)?;
            return Ok(buffer);
        };
        let cache_key = self.cache_key(entry.digest, location);
        let cached = match cache_use {
            CacheUse::Read => cache.get(cache_key),
            CacheUse::Peek => cache.peek(cache_key),
        };
        if let Some(record) = cached {
            return Ok(record);
        }
        self.read_verified_counted(location, &mut buffer)?;
        if cache_use == CacheUse::Read {
            cache.insert(cache_key, &buffer);
        }
        Ok(buffer)
    }

    fn read_verified_counted(&self, location: Location, buffer: &mut Vec<u8>) -> Result<()> {
        self.counted(self.log.read_verified(location, buffer).map(drop))
    }

    /// `read`, after counting and logging a damaged record.
    fn counted<T>(&self, read: Result<T>) -> Result<T> {
        match read {
            Ok(value) => Ok(value),
            Err(error) => {
                if matches!(error, EngineError::Corrupt { .. }) {
                    self.counters.corrupt_records.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(namespace = %self.config.name, %error, "damaged record not served");
                }
                Err(error)
            }
        }
    }

    /// Empties the record cache (for COLD measurements).
    pub fn clear_cache(&self) {
        if let Some(cache) = &self.cache {
            cache.clear();
        }
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Value>> {
        Self::check_key(key)?;
        let digest = self.digest(key);
        self.prefetch_cache_slot(digest);
        self.get_digested(key, digest)
    }

    /// Gets several keys, answering for each, in order, what `get` would. Keys are taken in
    /// groups of GET_MANY_GROUP_KEYS whose memory misses overlap: the group's index slots are
    /// all prefetched, then its records, and only then read, so a group of random gets waits
    /// about two memory latencies in all instead of two per key. For MGET and runs of pipelined
    /// GETs. A key that is not valid fails the whole call, before anything is read.
    pub fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Value>>> {
        let mut digests = Vec::with_capacity(keys.len());
        for key in keys {
            Self::check_key(key)?;
            digests.push(self.digest(key));
        }
        let mut values = Vec::with_capacity(keys.len());
        for (keys, digests) in keys.chunks(GET_MANY_GROUP_KEYS).zip(digests.chunks(GET_MANY_GROUP_KEYS)) {
            self.prefetch_group(digests)?;
            for (key, &digest) in keys.iter().zip(digests) {
                values.push(self.get_digested(key, digest)?);
            }
        }
        Ok(values)
    }

    /// Starts loading what reading `keys` will touch (a hint, for a run of pipelined reads run
    /// one by one next): the same prefetches as a group of `get_many`. Invalid keys are skipped,
    /// and so is a key whose partition a writer holds (a hint must not wait).
    pub fn prefetch_reads(&self, keys: &[&[u8]]) {
        let digests: Vec<Digest> = keys.iter().filter(|key| Self::check_key(key).is_ok()).map(|key| self.digest(key)).collect();
        let _ = self.prefetch_group(&digests[..digests.len().min(GET_MANY_GROUP_KEYS)]);
    }

    /// Prefetches the index slots of `digests`, then the records they name (a hint: the reads
    /// that follow look everything up again under the partition locks; a partition a writer
    /// holds is passed over rather than waited for).
    fn prefetch_group(&self, digests: &[Digest]) -> Result<()> {
        for &digest in digests {
            let Some(partition) = self.index.partition(self.index.partition_of(digest)).try_read() else { continue };
            self.index.prefetch_home_slot(&partition, digest);
            self.prefetch_cache_slot(digest);
        }
        self.prefetch_cached_records(digests);
        for &digest in digests {
            let Some(partition) = self.index.partition(self.index.partition_of(digest)).try_read() else { continue };
            if let Some(entry) = self.index.lookup(&partition, digest)? {
                self.log.prefetch_record(entry.location);
            }
        }
        Ok(())
    }

    /// Starts loading the record cache's entries of a group of keys `digests`, then the records
    /// they hold, once their table slots are on their way (`prefetch_cache_slot`): a hint, for
    /// a group of reads whose three dependent cache misses each (table slot, entry, record)
    /// should overlap across the group. A single key has nothing to overlap with.
    pub(crate) fn prefetch_cached_records(&self, digests: &[Digest]) {
        if let Some(cache) = self.cache.as_ref().filter(|_| digests.len() > 1) {
            cache.prefetch_entries(digests.iter().map(|&digest| cache_key_hash(digest)));
        }
    }

    /// Starts loading where the record cache's lookup of `digest` begins: it overlaps the
    /// index lookup that must come first (the cache is asked for the location the index names).
    pub(crate) fn prefetch_cache_slot(&self, digest: Digest) {
        if let Some(cache) = &self.cache {
            cache.prefetch(cache_key_hash(digest));
        }
    }

    /// `get` of a digested key whose cache slot the caller prefetched.
    fn get_digested(&self, key: &[u8], digest: Digest) -> Result<Option<Value>> {
        let found = loop {
            let partition = self.index.partition(self.index.partition_of(digest)).read();
            let Some(entry) = self.index.lookup(&partition, digest)? else { break None };
            if let Some(record) = self.read_record_releasing(partition, &entry)? {
                break Some(self.entry_value(record, &entry, key, false)?).filter(|value| !value.has_expired_now());
            }
        };
        let counter = if found.is_some() { &self.counters.hits } else { &self.counters.misses };
        counter.add(1);
        Ok(found)
    }

    pub fn put(&self, key: &[u8], value: &[u8], expiry_unix_ms: u64) -> Result<()> {
        self.transaction(&[key], |transaction| transaction.put(key, value, expiry_unix_ms))
    }

    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        self.transaction(&[key], |transaction| transaction.delete(key))
    }

    /// Applies every operation or, after a crash, none of them.
    pub fn apply_batch(&self, operations: Vec<BatchOp>) -> Result<()> {
        let keys: Vec<&[u8]> = operations
            .iter()
            .map(|operation| match operation {
                BatchOp::Put { key, .. } | BatchOp::Delete { key } => key.as_slice(),
            })
            .collect();
        self.transaction(&keys, |transaction| {
            for operation in &operations {
                match operation {
                    BatchOp::Put { key, value, expiry_unix_ms } => transaction.put(key, value, *expiry_unix_ms)?,
                    BatchOp::Delete { key } => {
                        transaction.delete(key)?;
                    }
                }
            }
            Ok(())
        })
    }

    /// Keys of one or more whole partitions from `cursor` on. Every key present for the whole scan
    /// is returned at least once, as Redis's SCAN promises.
    pub fn scan(&self, cursor: u64, count_hint: usize) -> Result<ScanPage> {
        let now = crate::now_unix_ms();
        scan_pages(cursor, count_hint, |number, keys| self.keys_of_partition(number, now, keys))
    }

    fn keys_of_partition(&self, number: usize, now: u64, keys: &mut Vec<Vec<u8>>) -> Result<()> {
        self.keys_in(&self.index.partition(number).read(), now, keys)
    }

    /// Appends the unexpired keys of `partition` (locked by the caller) to `keys`.
    pub(crate) fn keys_in(&self, partition: &Partition, now: u64, keys: &mut Vec<Vec<u8>>) -> Result<()> {
        for entry in self.index.entries(partition)? {
            if entry.part {
                continue;
            }
            match self.read_record(&entry, CacheUse::Peek) {
                Ok(record) if !record_expired(false, verified_header(&record).expiry_unix_ms, now) => keys.push(key_of(&record).to_vec()),
                Ok(_) => {}
                // Counted and logged; the other keys are still listed.
                Err(EngineError::Corrupt { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    pub fn random_key(&self) -> Result<Option<Vec<u8>>> {
        let now = crate::now_unix_ms();
        self.random_key_from(now, |number, keys| self.keys_of_partition(number, now, keys))
    }

    /// A key of the first partition with any, from a partition chosen by the clock on, as
    /// `keys_of` lists them.
    pub(crate) fn random_key_from(&self, now: u64, mut keys_of: impl FnMut(usize, &mut Vec<Vec<u8>>) -> Result<()>) -> Result<Option<Vec<u8>>> {
        let partition_count = crate::index::PARTITION_COUNT;
        let start = (now as usize).wrapping_mul(2654435761) % partition_count;
        for step in 0..partition_count {
            let mut keys = Vec::new();
            keys_of((start + step) % partition_count, &mut keys)?;
            if !keys.is_empty() {
                let choice = (now as usize).wrapping_mul(40503) % keys.len();
                return Ok(Some(keys.swap_remove(choice)));
            }
        }
        Ok(None)
    }

    /// Keys stored, including expired ones not yet reclaimed (as Redis's DBSIZE); parts are not
    /// keys.
    pub fn key_count(&self) -> u64 {
        self.keyspace.keys()
    }

    /// Sets the counters Redis's CONFIG RESETSTAT clears to zero: gets' hits and misses, and the
    /// keys deleted as expired.
    pub fn reset_statistics(&self) {
        self.counters.hits.reset();
        self.counters.misses.reset();
        self.keyspace.reset_expired();
    }

    /// How many of the keys have an expiry (expired ones too, until reclaimed).
    pub fn expiring_key_count(&self) -> u64 {
        self.keyspace.expiring()
    }

    /// Deletes every key (FLUSHDB): tombstones, partition by partition.
    pub fn clear(&self) -> Result<()> {
        // Tombstone batches stay well inside one write block, whatever the key sizes.
        let batch_bytes_max = (self.config.write_block_bytes / 4) as usize;
        for number in 0..crate::index::PARTITION_COUNT {
            let mut keys = Vec::new();
            // A clock of 0 makes expired keys count too: they go as well.
            self.keys_of_partition(number, 0, &mut keys)?;
            let mut batch = Vec::new();
            let mut batch_bytes = 0;
            for key in keys {
                // A key's parts go in the same batch as the key (`Transaction::delete`).
                let part_bytes = self.part_count(&key)? as usize * record_bytes(crate::digest::PART_KEY_BYTES, 0);
                let bytes = record_bytes(key.len(), 0) + part_bytes;
                if batch_bytes + bytes > batch_bytes_max {
                    self.apply_batch(std::mem::take(&mut batch))?;
                    batch_bytes = 0;
                }
                batch_bytes += bytes;
                batch.push(BatchOp::Delete { key });
            }
            if !batch.is_empty() {
                self.apply_batch(batch)?;
            }
        }
        // Every record cached before is dead now; their entries would only age out.
        self.clear_cache();
        Ok(())
    }

    pub fn stats(&self) -> NamespaceStats {
        let counter = |value: &AtomicU64| value.load(Ordering::Relaxed);
        let data_medium = self.log.medium();
        let journal = self.journal.as_ref().map(|journal| {
            let info = journal.journal_info();
            TierUsage {
                tier: info.tier,
                durability: info.durability,
                used_bytes: journal.journal_bytes(),
                capacity_bytes: self.config.checkpoint_interval_bytes + self.config.journal_segment_bytes,
            }
        });
        let journal_writes = self.journal.as_ref().map_or(counter(&self.counters.log_writes), |j| j.journal_writes());
        NamespaceStats {
            name: self.config.name.clone(),
            keys: self.key_count(),
            expiring_keys: self.keyspace.expiring(),
            average_ttl_ms: self.keyspace.average_ttl_ms(),
            expired_keys: self.keyspace.expired(),
            durability: self.config.durability,
            index: TierUsage {
                tier: self.config.index,
                durability: self.index.medium().info().durability,
                used_bytes: self.index.used_bytes(),
                capacity_bytes: self.index.capacity_bytes(),
            },
            data: TierUsage {
                tier: self.config.data,
                durability: data_medium.info().durability,
                used_bytes: self.log.used_bytes(),
                capacity_bytes: data_medium.len_bytes(),
            },
            journal,
            flushes: counter(&self.counters.flushes),
            journal_writes,
            log_bytes_written: self.log.bytes_appended(),
            rotations_waited_for_write_out: self.log.rotations_waited_for_write_out(),
            writes_held_for_backlog: counter(&self.counters.writes_held_for_backlog),
            writes_held_for_space: counter(&self.counters.writes_held_for_space),
            records_awaiting_publication: self.log_backlog() as u64,
            defrag_blocks_waiting: self.emptied_blocks.lock().len() as u64,
            gets: self.counters.hits.get() + self.counters.misses.get(),
            hits: self.counters.hits.get(),
            misses: self.counters.misses.get(),
            writes: self.counters.writes.get(),
            defragmented_blocks: counter(&self.counters.defragmented_blocks),
            cache_bypassed: self.cache.is_none() && cache_configured(&self.config),
            device_reads: self.device_read_counts(),
            cache: self.cache.as_ref().map(|cache| CacheStats {
                hits: cache.counters.hits.get(),
                misses: cache.counters.misses.get(),
                evictions: counter(&cache.counters.evictions),
                entries: cache.entries(),
                used_bytes: cache.used_bytes(),
                capacity_bytes: cache.capacity_bytes(),
            }),
            corrupt_records: counter(&self.counters.corrupt_records),
            last_checkpoint_unix_ms: counter(&self.last_checkpoint_unix_ms),
        }
    }

    pub(crate) fn durability(&self) -> Durability {
        self.config.durability
    }

    /// Where a verified record view sits, for the accounting of moves and recovery.
    pub(crate) fn location_of(slot: u32, offset: u64, view: &RecordView<'_>) -> Location {
        Location::new(slot, offset, view.header.record_bytes())
    }
}

/// The key of a verified record.
fn key_of(record: &[u8]) -> &[u8] {
    let header = verified_header(record);
    &record[RECORD_HEADER_BYTES..RECORD_HEADER_BYTES + header.key_len as usize]
}

fn verified_header(record: &[u8]) -> RecordHeader {
    decode_header(record).expect("verified records have valid headers")
}

/// The page of a scan from `cursor` (a partition number): the keys `keys_of` lists for each
/// partition in turn until at least `count_hint` (and at least one partition was listed).
pub(crate) fn scan_pages(cursor: u64, count_hint: usize, mut keys_of: impl FnMut(usize, &mut Vec<Vec<u8>>) -> Result<()>) -> Result<ScanPage> {
    let partition_count = crate::index::PARTITION_COUNT as u64;
    let (mut number, mut keys) = (cursor, Vec::new());
    while number < partition_count && keys.len() < count_hint.max(1) {
        keys_of(number as usize, &mut keys)?;
        number += 1;
    }
    Ok(ScanPage { keys, next_cursor: if number >= partition_count { 0 } else { number } })
}

/// The value of a verified record held in `record`; the value becomes the buffer itself (one
/// allocation per read).
fn value_in_place(mut record: Vec<u8>) -> Value {
    let header = verified_header(&record);
    let key_end = RECORD_HEADER_BYTES + header.key_len as usize;
    let value_len = header.value_len as usize;
    record.copy_within(key_end..key_end + value_len, 0);
    record.truncate(value_len);
    Value { bytes: record, expiry_unix_ms: entry_expiry(header.is_part(), header.expiry_unix_ms), version: header.lsn }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use hybridkv_media::sim::SimStore;

    use crate::config::{Config, MIB};
    use crate::{Database, Durability, EngineError, Tier};

    /// The store must outlive the database (declared first, it is dropped last).
    fn database(index: Tier, data: Tier) -> (SimStore, Database) {
        let store = SimStore::new(7);
        let database = Database::open_with(small_config(index, data), std::sync::Arc::new(store.clone())).unwrap();
        (store, database)
    }

    /// One small namespace on the simulated medium, durability `none`, no background threads.
    pub(super) fn small_config(index: Tier, data: Tier) -> Config {
        let mut namespace = crate::NamespaceConfig::new("many");
        namespace.index = index;
        namespace.data = data;
        namespace.journal = Tier::Pmem;
        namespace.durability = Durability::None;
        namespace.index_bytes = 4 * MIB;
        namespace.data_bytes = 8 * MIB;
        namespace.write_block_bytes = MIB;
        namespace.journal_segment_bytes = MIB;
        namespace.checkpoint_interval_bytes = MIB;
        namespace.cache_bytes = MIB;
        namespace.value_bytes_max = 1024;
        Config {
            data_dir: PathBuf::from("/sim/data"),
            shmem_dir: PathBuf::from("/sim/shm"),
            direct_io: false,
            background_maintenance: false,
            databases: 1,
            namespaces: vec![namespace],
        }
    }

    /// Keys 0..60 written, then (after a checkpoint, so that both table and pending entries are
    /// read) every third deleted and every fifth from 1 written again (6, 21, 36 and 51 come
    /// back); keys 60..80 never written: 44 present.
    #[test]
    fn get_many_answers_as_get_does_for_each_key() {
        for (index, data) in [(Tier::Dram, Tier::Dram), (Tier::Pmem, Tier::Ssd), (Tier::Shmem, Tier::Pmem)] {
            let (_store, database) = database(index, data);
            let namespace = database.namespace(0).unwrap();
            let key = |number: u32| format!("key:{number}").into_bytes();
            for number in 0..60 {
                namespace.put(&key(number), format!("value {number}").as_bytes(), 0).unwrap();
            }
            database.checkpoint().unwrap();
            for number in (0..60).step_by(3) {
                namespace.delete(&key(number)).unwrap();
            }
            for number in (1..60).step_by(5) {
                namespace.put(&key(number), format!("new value {number}").as_bytes(), 0).unwrap();
            }
            let keys: Vec<Vec<u8>> = (0..80).rev().map(key).collect();
            let names: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            let many = namespace.get_many(&names).unwrap();
            let single: Vec<_> = names.iter().map(|name| namespace.get(name).unwrap()).collect();
            assert_eq!(many, single, "{index}/{data}");
            assert_eq!(many.iter().filter(|value| value.is_some()).count(), 44, "{index}/{data}");
            assert_eq!(many[80 - 1 - 6].as_ref().unwrap().bytes, b"new value 6", "{index}/{data}");
        }
    }

    #[test]
    fn get_many_refuses_an_invalid_key_before_reading_anything() {
        let (_store, database) = database(Tier::Dram, Tier::Dram);
        let namespace = database.namespace(0).unwrap();
        let too_long = vec![b'k'; crate::config::KEY_BYTES_MAX + 1];
        let before = namespace.stats().gets;
        let result = namespace.get_many(&[b"fine".as_slice(), too_long.as_slice()]);
        assert!(matches!(result, Err(EngineError::KeyTooLarge { .. })), "{result:?}");
        assert_eq!(namespace.stats().gets, before);
        assert!(namespace.get_many(&[]).unwrap().is_empty());
    }
}
