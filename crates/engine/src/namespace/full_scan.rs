//! The full scan: every live record, read from the write blocks in whole-block sequential reads
//! rather than by following the index, and never through the record cache, so that an analytical
//! pass neither pays a random read per record nor evicts the hot set.
//!
//! Guarantees: a key present and unchanged for the whole scan is visited exactly once; a key
//! written during the scan is visited at least once if it is present for the whole scan (once per
//! version seen live), and may or may not be visited otherwise. Defragmentation waits while a full
//! scan runs, so moves never make a record appear twice.

use std::sync::atomic::Ordering;

use super::{Namespace, Value};
use crate::error::Result;
use crate::digest::Digest;
use crate::log::{Location, RecordView, BLOCK_HEADER_BYTES};

/// Rounds of catching up with blocks started while the scan ran.
const CATCH_UP_ROUNDS_MAX: usize = 16;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FullScanReport {
    pub records_visited: u64,
    pub blocks_read: u64,
    /// Record bytes of the blocks read: whole blocks, and the last one up to where its walk ended
    /// (a few records past the one at which the visitor stopped the scan, if it did).
    pub bytes_read: u64,
}

struct ScanGuard<'a>(&'a Namespace);

impl Drop for ScanGuard<'_> {
    fn drop(&mut self) {
        self.0.full_scans_running.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Namespace {
    /// Calls `visit(key, value)` for every live, unexpired key (parts are not keys: they are
    /// read through their key with `Transaction::get_part`); `visit` returns false to stop.
    pub fn scan_records(&self, mut visit: impl FnMut(&[u8], &Value) -> bool) -> Result<FullScanReport> {
        self.full_scans_running.fetch_add(1, Ordering::AcqRel);
        let _guard = ScanGuard(self);
        // Wait out a defragmentation already under way.
        drop(self.defrag_running.lock());
        let mut report = FullScanReport::default();
        let mut scanned_up_to_seq = 0;
        let mut window = Vec::new();
        let block_record_bytes = self.log.block_bytes() - BLOCK_HEADER_BYTES as u64;
        for _ in 0..CATCH_UP_ROUNDS_MAX {
            let mut blocks = self.log.sealed_blocks();
            blocks.push(self.log.active_block());
            blocks.retain(|&(_, seq)| seq > scanned_up_to_seq);
            blocks.sort_by_key(|&(_, seq)| seq);
            if blocks.is_empty() {
                break;
            }
            for (slot, seq) in blocks {
                report.blocks_read += 1;
                let mut stopped = false;
                let walked = self.walk_block_prefetching(slot, seq, &mut window, |offset, view, digest| {
                    let location = Namespace::location_of(slot, BLOCK_HEADER_BYTES as u64 + offset, view);
                    if let Some(value) = self.live_value(view, digest, location) {
                        report.records_visited += 1;
                        stopped = !visit(view.key, &value);
                    }
                    Ok(!stopped)
                })?;
                if stopped {
                    report.bytes_read += walked.end;
                    return Ok(report);
                }
                report.bytes_read += block_record_bytes;
                scanned_up_to_seq = seq;
            }
        }
        Ok(report)
    }

    /// The record's value when the index still points at it and it has not expired.
    fn live_value(&self, view: &RecordView<'_>, digest: Digest, location: Location) -> Option<Value> {
        if view.header.is_tombstone() || view.header.is_part() {
            return None;
        }
        let partition = self.index.partition(self.index.partition_of(digest)).read();
        let entry = self.index.lookup(&partition, digest).ok()??;
        let value = (entry.location == location).then(|| Value {
            bytes: view.value.to_vec(),
            expiry_unix_ms: view.header.expiry_unix_ms,
            version: view.header.lsn,
        });
        value.filter(|value| !value.has_expired_now())
    }
}
