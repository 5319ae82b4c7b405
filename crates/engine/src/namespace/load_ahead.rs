//! Loading records into the record cache ahead of the reads that need them, for callers that
//! must not wait for the disk on their own thread (the server's network workers, each of which
//! serves many connections): they ask `reads_would_wait` and, when it says so, run
//! `load_into_cache` on a thread that may block, then read from the cache.
//!
//! The check costs an index lookup and a cache probe per key, about 7% of server CPU under
//! pipelined INCR when every record was cached anyway. `LoadAheadGate` skips it while the cache
//! misses less than `LOAD_AHEAD_MISS_PER_MILLE_MIN` of its reads: the rare miss is then read on
//! the worker, and counted, so a rising miss rate turns the check back on within a window.
//!
//! Where the block file has a device read queue (io_uring), `start_loading_into_cache` does the
//! same without a thread: it starts the device reads and returns a `CacheLoad` future; the
//! caller watches `device_read_completions` and calls `finish_device_reads`, which verifies the
//! records, admits them and wakes the futures whose reads are all done. With
//! `SubmitReads::Later` the reads wait for the caller's `submit_device_reads`, so that the
//! misses of several connections share one submission (one doorbell, fewer interrupts).

use std::collections::HashMap;
use std::future::Future;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLockReadGuard};
use std::task::{Context, Poll, Waker};

use hybridkv_media::{CompletedRead, DeviceReadCounts, DeviceReadQueue, Tier};
use parking_lot::Mutex;

use super::Namespace;
use crate::cache::{CacheCounters, CacheKey, RecordCache};
use crate::index::{Entry, Partition};
use crate::log::{DeviceReadOutcome, Location};

/// Cache reads (hits and misses) per window over which the gate measures the miss rate.
pub const LOAD_AHEAD_WINDOW_READS: u64 = 4096;
/// Misses per 1,000 cache reads at or above which batches check for records to load ahead.
pub const LOAD_AHEAD_MISS_PER_MILLE_MIN: u64 = 5;
/// Threads one batch's records are loaded on at most (device reads in flight at once), and the
/// fewest keys worth another thread (starting one costs tens of microseconds, a read about 100).
pub const LOAD_AHEAD_THREADS_MAX: usize = 8;
pub const LOAD_AHEAD_KEYS_PER_THREAD_MIN: usize = 16;

/// When `start_loading_into_cache` submits its device reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitReads {
    /// Before it returns.
    Now,
    /// With the next `submit_device_reads` (or with the reads queued after them, once
    /// `DEVICE_READS_QUEUED_MAX` wait): the caller must see that one follows soon, or the
    /// `CacheLoad` waits for it.
    Later,
}

/// Whether batches should check for records to load ahead, from the cache's miss rate over the
/// last complete window. A hint shared by all workers: racing updates only move a window edge.
pub(crate) struct LoadAheadGate {
    window_start_hits: AtomicU64,
    window_start_misses: AtomicU64,
    checking: AtomicBool,
}

impl Default for LoadAheadGate {
    /// Checking: a fresh or restarted server starts with a cold cache.
    fn default() -> LoadAheadGate {
        LoadAheadGate { window_start_hits: AtomicU64::new(0), window_start_misses: AtomicU64::new(0), checking: AtomicBool::new(true) }
    }
}

impl LoadAheadGate {
    fn should_check(&self, counters: &CacheCounters) -> bool {
        let (hits, misses) = (counters.hits.get(), counters.misses.get());
        let window_misses = misses.saturating_sub(self.window_start_misses.load(Ordering::Relaxed));
        let window_reads = hits.saturating_sub(self.window_start_hits.load(Ordering::Relaxed)) + window_misses;
        if window_reads >= LOAD_AHEAD_WINDOW_READS {
            self.checking.store(window_misses * 1000 >= window_reads * LOAD_AHEAD_MISS_PER_MILLE_MIN, Ordering::Relaxed);
            self.window_start_hits.store(hits, Ordering::Relaxed);
            self.window_start_misses.store(misses, Ordering::Relaxed);
        }
        self.checking.load(Ordering::Relaxed)
    }
}

/// The device reads a namespace has started and not yet finished, by token.
#[derive(Default)]
pub(crate) struct DeviceLoads {
    next_token: AtomicU64,
    started: Mutex<HashMap<u64, StartedLoad>>,
}

struct StartedLoad {
    location: Location,
    cache_key: CacheKey,
    waiter: Arc<LoadWaiter>,
}

/// What a `CacheLoad` waits for: its reads not yet finished, and the task to wake after the last.
#[derive(Default)]
struct LoadWaiter {
    remaining: AtomicUsize,
    waker: Mutex<Option<Waker>>,
}

impl LoadWaiter {
    fn finish_one(&self) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            if let Some(waker) = self.waker.lock().take() {
                waker.wake();
            }
        }
    }
}

/// Ready when every device read of a `start_loading_into_cache` call has finished (its record
/// admitted to the cache, or skipped: the command that reads it reports any error). Without a
/// waiter, no read was started: ready at once.
pub struct CacheLoad {
    waiter: Option<Arc<LoadWaiter>>,
}

impl CacheLoad {
    /// Whether device reads were started (or queued) for it: false when it is ready at once.
    pub fn waits_for_device_reads(&self) -> bool {
        self.waiter.is_some()
    }
}

impl Future for CacheLoad {
    type Output = ();

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<()> {
        let Some(waiter) = &self.waiter else { return Poll::Ready(()) };
        if waiter.remaining.load(Ordering::Acquire) == 0 {
            return Poll::Ready(());
        }
        *waiter.waker.lock() = Some(context.waker().clone());
        // A read finished between the check and the store found no waker: look again.
        if waiter.remaining.load(Ordering::Acquire) == 0 {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

impl Namespace {
    /// Whether reading a record of this namespace can wait for a device: records on ssd behind
    /// the record cache. Records in DRAM or pmem are read at memory speed.
    pub fn reads_may_wait(&self) -> bool {
        self.cache.is_some() && self.config.data == Tier::Ssd
    }

    /// Whether batches should look for records to load ahead at all: reads may wait, and the
    /// cache misses enough (`LoadAheadGate`). When not, `reads_would_wait` answers false without
    /// looking, and a caller need not even gather the keys of its batch.
    pub fn checks_load_ahead(&self) -> bool {
        self.cache.as_ref().is_some_and(|cache| self.reads_may_wait() && self.load_ahead_gate.should_check(&cache.counters))
    }

    /// Whether reading any of `keys` now would read the device: an indexed record the cache does
    /// not hold. A hint (a record may be evicted or written right after), never an error:
    /// invalid keys count as not waiting, the read that follows reports them. False without
    /// looking while the cache hardly misses (`checks_load_ahead`).
    pub fn reads_would_wait(&self, keys: &[&[u8]]) -> bool {
        let Some(cache) = self.cache.as_ref().filter(|_| self.checks_load_ahead()) else { return false };
        keys.iter().any(|key| {
            self.with_live_entry(key, |_, entry| !cache.contains(self.cache_key(entry.digest, entry.location)))
            .unwrap_or(false)
        })
    }

    /// Reads the records of `keys` into the record cache. Absent, expired, invalid and damaged
    /// keys are skipped: the command that reads them next reports what is wrong. Each record
    /// read from the device counts as a cache miss, and its later read as a hit (which does not
    /// count as a reuse for the eviction policy). A large batch (an MGET of a scan) is split over
    /// up to LOAD_AHEAD_THREADS_MAX threads, so that its device reads overlap: one at a time, a
    /// COLD pass over 200,000 records on ssd read 8,000 records/s.
    pub fn load_into_cache(&self, keys: &[Vec<u8>]) {
        let Some(cache) = self.cache.as_ref().filter(|_| self.reads_may_wait()) else { return };
        let threads = (keys.len() / LOAD_AHEAD_KEYS_PER_THREAD_MIN).clamp(1, LOAD_AHEAD_THREADS_MAX);
        if threads == 1 {
            return self.load_keys_into(cache, keys);
        }
        std::thread::scope(|scope| {
            for part in keys.chunks(keys.len().div_ceil(threads)) {
                let spawned = std::thread::Builder::new().name("hybridkv-load".into()).spawn_scoped(scope, || self.load_keys_into(cache, part));
                // Without a thread (a resource limit), this one loads the part itself.
                if spawned.is_err() {
                    self.load_keys_into(cache, part);
                }
            }
        });
    }

    fn load_keys_into(&self, cache: &RecordCache, keys: &[Vec<u8>]) {
        for key in keys {
            // A key moved while its record was read is read by the command itself; a record the
            // cache holds already is left alone (its command's read is the hit).
            self.with_live_entry(key, |partition, entry| {
                let cache_key = self.cache_key(entry.digest, entry.location);
                if !cache.contains(cache_key) {
                    drop(self.read_medium_releasing(cache, partition, entry, cache_key, true));
                }
            });
        }
    }

    /// Starts reading the records of `keys` that the cache lacks without waiting for the device,
    /// and returns a future that is ready once they are all in the cache (or skipped). None when
    /// this namespace has no device read queue: the caller then runs `load_into_cache` on a
    /// thread that may block; so also when the queue has no room for as many reads as `keys`
    /// (`DEVICE_READS_IN_FLIGHT_MAX` reached by many clients missing at once). The caller must
    /// watch `device_read_completions` and call `finish_device_reads` when it is readable, or
    /// the future is never ready. Records in memory (the active block) are loaded at once; reads
    /// that find the queue full after all (another thread took the room) or whose submission
    /// fails are skipped: their commands read them. `submit` says when the reads are submitted.
    pub fn start_loading_into_cache(&self, keys: &[&[u8]], submit: SubmitReads) -> Option<CacheLoad> {
        let cache = self.cache.as_ref().filter(|_| self.reads_may_wait())?;
        let queue = self.log.medium().device_reads()?;
        let mut planned = Vec::new();
        for key in keys {
            let planned_read = self.with_live_entry(key, |partition, entry| {
                let cache_key = self.cache_key(entry.digest, entry.location);
                if cache.contains(cache_key) {
                    return None;
                }
                let token = self.device_loads.next_token.fetch_add(1, Ordering::Relaxed);
                match self.log.device_read_of(entry.location, token) {
                    Ok(Some(read)) => Some((read, entry.location, cache_key)),
                    Ok(None) => {
                        drop(self.read_medium_releasing(cache, partition, entry, cache_key, true));
                        None
                    }
                    Err(_) => None,
                }
            });
            planned.extend(planned_read.flatten());
        }
        if planned.is_empty() {
            return Some(CacheLoad { waiter: None });
        }
        if planned.len() > queue.room() {
            return None;
        }
        let waiter = Arc::new(LoadWaiter::default());
        waiter.remaining.store(planned.len(), Ordering::Relaxed);
        let mut reads = Vec::with_capacity(planned.len());
        let mut started_loads = self.device_loads.started.lock();
        for (read, location, cache_key) in planned {
            reads.push(read);
            // Registered before the read starts: it may finish before `start` returns.
            started_loads.insert(read.token, StartedLoad { location, cache_key, waiter: waiter.clone() });
        }
        drop(started_loads);
        let started = queue.queue(&reads);
        if submit == SubmitReads::Now {
            queue.submit_queued();
        }
        for read in &reads[started..] {
            if let Some(load) = self.device_loads.started.lock().remove(&read.token) {
                load.waiter.finish_one();
            }
        }
        Some(CacheLoad { waiter: Some(waiter) })
    }

    /// Submits the device reads that `start_loading_into_cache` queued with `SubmitReads::Later`.
    pub fn submit_device_reads(&self) {
        if let Some(queue) = self.log.medium().device_reads() {
            queue.submit_queued();
        }
    }

    /// Submissions and reads of the device read queue so far; None without one.
    pub fn device_read_counts(&self) -> Option<DeviceReadCounts> {
        self.log.medium().device_reads().map(DeviceReadQueue::counts)
    }

    /// A descriptor (the caller's own copy) that becomes readable when device reads started by
    /// `start_loading_into_cache` have completed; None without a device read queue.
    pub fn device_read_completions(&self) -> Option<std::io::Result<OwnedFd>> {
        self.cache.as_ref().filter(|_| self.reads_may_wait())?;
        Some(self.log.medium().device_reads()?.completion_fd().try_clone_to_owned())
    }

    /// Takes the completed device reads, without waiting: verifies each record, admits it to
    /// the cache as loaded ahead, and wakes the `CacheLoad`s whose reads are all done.
    pub fn finish_device_reads(&self) {
        let (Some(cache), Some(queue)) = (self.cache.as_ref(), self.log.medium().device_reads()) else { return };
        let mut completed = Vec::new();
        queue.take_completed(&mut completed);
        for CompletedRead { token, result } in completed {
            // A read whose submission reported an error may still complete: nobody waits for it.
            let Some(load) = self.device_loads.started.lock().remove(&token) else { continue };
            let outcome = result.map_err(Into::into).and_then(|bytes| self.log.finish_device_read(load.location, load.cache_key.block_seq, bytes));
            match self.counted(outcome) {
                Ok(DeviceReadOutcome::Record(record)) => cache.insert_ahead(load.cache_key, &record),
                Ok(DeviceReadOutcome::Longer { record_bytes }) => {
                    if self.read_whole_record(queue, record_bytes, &load) {
                        continue;
                    }
                }
                Ok(DeviceReadOutcome::Gone) | Err(_) => {}
            }
            load.waiter.finish_one();
        }
    }

    /// Starts the read of the whole record of `load` (`record_bytes` long; its first read was
    /// shorter), for the same waiter: false when it cannot start (too long for one device read,
    /// or no room), and the command reads the record itself.
    fn read_whole_record(&self, queue: &DeviceReadQueue, record_bytes: usize, load: &StartedLoad) -> bool {
        let token = self.device_loads.next_token.fetch_add(1, Ordering::Relaxed);
        let Some(read) = self.log.device_read_of_whole(load.location, record_bytes, token) else { return false };
        let again = StartedLoad { location: load.location, cache_key: load.cache_key, waiter: load.waiter.clone() };
        // Registered before the read starts, as in `start_loading_into_cache`.
        self.device_loads.started.lock().insert(token, again);
        if queue.start(&[read]) == 1 {
            return true;
        }
        self.device_loads.started.lock().remove(&token);
        false
    }

    /// `visit` of the key's entry and its partition's read lock; None when the key is invalid or
    /// absent, or its index lookup fails. An expired key whose record is still indexed is
    /// visited too: only its record tells that it has expired, so the command reads it as well.
    fn with_live_entry<T>(&self, key: &[u8], visit: impl FnOnce(RwLockReadGuard<'_, Partition>, &Entry) -> T) -> Option<T> {
        Self::check_key(key).ok()?;
        let digest = self.digest(key);
        let partition = self.index.partition(self.index.partition_of(digest)).read();
        let entry = self.index.lookup(&partition, digest).ok()??;
        Some(visit(partition, &entry))
    }
}
