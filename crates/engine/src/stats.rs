use hybridkv_media::{DurabilityPath, Tier};

use crate::config::Durability;

/// Bytes used and available on one tier, as INFO memory reports it.
#[derive(Clone, Debug)]
pub struct TierUsage {
    pub tier: Tier,
    pub durability: DurabilityPath,
    pub used_bytes: u64,
    pub capacity_bytes: u64,
}

#[derive(Clone, Debug)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    /// Records the cache holds now.
    pub entries: u64,
    pub used_bytes: u64,
    pub capacity_bytes: u64,
}

/// A namespace's figures for INFO and the metrics endpoint. Counters are totals since start.
#[derive(Clone, Debug)]
pub struct NamespaceStats {
    pub name: String,
    pub keys: u64,
    /// Keys with an expiry (expired ones too, until reclaimed).
    pub expiring_keys: u64,
    /// Estimate of those keys' average time to live from the expiry sweep's samples, ms (0: no
    /// key has an expiry, or none was sampled yet).
    pub average_ttl_ms: u64,
    /// Keys deleted because they had expired, since the namespace was opened.
    pub expired_keys: u64,
    pub durability: Durability,
    pub index: TierUsage,
    pub data: TierUsage,
    pub journal: Option<TierUsage>,
    /// Calls that made log or journal bytes durable (one per group commit).
    pub flushes: u64,
    /// Appends to the journal (records in DRAM only).
    pub journal_writes: u64,
    pub log_bytes_written: u64,
    /// Appends that had to rotate while the previous sealed block was still being written out,
    /// and waited for its write.
    pub rotations_waited_for_write_out: u64,
    /// Writes (durability periodic or none) acknowledged only after a flush, because
    /// PENDING_RECORDS_MAX records were waiting for publication (back-pressure).
    pub writes_held_for_backlog: u64,
    /// Writes acknowledged only once defragmentation had freed space, or after a hold of
    /// SPACE_HOLD_MS_MAX (the data tier was short of free blocks it could free).
    pub writes_held_for_space: u64,
    /// Records appended and not yet published to the index (the backlog): committers flush
    /// them from PENDING_RECORDS_EARLY_FLUSH on, writers wait past PENDING_RECORDS_MAX.
    pub records_awaiting_publication: u64,
    pub gets: u64,
    pub hits: u64,
    pub misses: u64,
    pub writes: u64,
    pub defragmented_blocks: u64,
    /// Defragmented blocks whose records were all moved out, waiting for a checkpoint to free
    /// them (docs/design/commit.md, Defragmentation): counted in the data tier's used bytes.
    pub defrag_blocks_waiting: u64,
    /// The record cache, when the namespace has one.
    pub cache: Option<CacheStats>,
    /// What the device read queue (records on ssd, O_DIRECT and io_uring) has submitted.
    pub device_reads: Option<hybridkv_media::DeviceReadCounts>,
    /// A cache was configured, but the records are read from DRAM anyway (pmem on the msync
    /// fallback: the page cache), so the namespace runs without one.
    pub cache_bypassed: bool,
    pub corrupt_records: u64,
    pub last_checkpoint_unix_ms: u64,
}
