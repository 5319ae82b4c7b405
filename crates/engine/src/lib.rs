//! The hybridkv storage engine: per-namespace primary index, record log and journal, each on the
//! memory tier the operator chose, with group commit and restart without index rebuild.
//!
//! Reading order: `config` → `digest` → `log/record` (record format) → `log/block` →
//! `log/record_log` (appends, group commit) → `index/` (persistent hash index) → `journal/`
//! (records in DRAM) → `namespace` (write and read paths) → `recovery` → `numbering` → `database`.

mod background_pace;
mod cache;
mod checksum;
mod config;
mod database;
mod digest;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod index;
mod journal;
mod log;
mod namespace;
mod numbering;
mod recovery;
mod stats;
mod striped_counter;
mod waiting_lock;

pub use config::{
    default_shmem_dir, parse_size_bytes, Config, Durability, NamespaceConfig, GIB, KEY_BYTES_MAX, KIB, MIB,
    DATABASES_DEFAULT, NAMESPACES_MAX, PERIODIC_MS_MAX,
};
pub use database::Database;
pub use error::{EngineError, Result};
pub use index::EXPIRY_UNIX_MS_MAX;
pub use hybridkv_media::{DurabilityPath, Tier};
pub use namespace::{BatchOp, CacheLoad, CommitTicket, DurableCallback, ExpiryListener, FullScanReport, KeySnapshot, Namespace, ScanPage, SubmitReads, Transaction, Value, LOAD_AHEAD_WINDOW_READS, SECOND_PART_SPACE};
pub use recovery::{RestartKind, RestartReport};
pub use stats::{CacheStats, NamespaceStats, TierUsage};
pub use striped_counter::{thread_stripe, StripedCounter, COUNTER_STRIPES};

/// Milliseconds since the Unix epoch: the clock of expiry times.
pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as u64)
        .unwrap_or(0)
}

/// Bytes a key's record takes on the data tier (header, key, value, padding) plus its index
/// entry: what MEMORY USAGE reports. `part` counts one of another key's parts, whose key is
/// the owner's digest and the part's number whatever the owner's key.
pub fn stored_bytes(key_len: usize, value_len: usize, part: bool) -> u64 {
    let key_len = if part { digest::PART_KEY_BYTES } else { key_len };
    log::record::record_bytes(key_len, value_len) as u64 + index::entry::ENTRY_BYTES
}
