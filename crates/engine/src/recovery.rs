//! Start-up: decide between a warm attach, an attach after a crash, and a cold rebuild, then do
//! it. See docs/design/recovery.md for the protocol and its invariants.
//!
//! - Warm: the index header says "clean"; it reflects every record before its consistent
//!   position, which is the end of the log. Nothing is read but the header and directory: each
//!   partition's counts are in its directory entry, and each table is checked against its
//!   checksum when first used (or by the background sweep); a mismatch refuses that partition
//!   and makes the next start a cold rebuild.
//! - After a crash: the header is valid but not clean. Records from the consistent position on
//!   (the log tail, bounded by the checkpoint interval) are re-applied in log order, each only if
//!   it is newer (by LSN) than what the index holds. After a process crash (same machine boot)
//!   every store to the index survived, so only partitions whose change was interrupted are
//!   repaired and recounted; after a power cut entries the tail may have torn are repaired in
//!   every partition the tail touched. The tables are not checked: the tail changed some after
//!   the checkpoint that wrote their checksums, and damage in the tail hides which.
//! - Cold: no usable index (in DRAM, missing, damaged, another configuration, or a machine restart
//!   after an unclean stop with durability other than `always`): every block is scanned, in
//!   parallel, and the newest version of each key (by LSN, tombstones included) wins.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hybridkv_media::{Medium, OpenedMedium, Tier};
use parking_lot::Mutex;

use crate::config::{Durability, NamespaceConfig};
use crate::digest::{Digest, DigestMap};
use crate::error::Result;
use crate::index::{for_each_prefetching, Entry, Index};
use crate::journal::JournaledMemory;
use crate::log::{position_offset, position_seq, walk_records, BlockHeader, Location, RecordLog, Walked, BLOCK_HEADER_BYTES};
use crate::namespace::{fingerprint_of, Namespace, OpenCheckpoint};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartKind {
    /// Nothing stored yet.
    Fresh,
    /// Clean shutdown: the index was attached as it was.
    Warm,
    /// Unclean stop: the index was attached and the log tail re-applied.
    AfterCrash,
    /// The index was rebuilt by scanning every write block.
    Cold,
}

impl RestartKind {
    pub fn name(self) -> &'static str {
        match self {
            RestartKind::Fresh => "fresh",
            RestartKind::Warm => "warm",
            RestartKind::AfterCrash => "after-crash",
            RestartKind::Cold => "cold",
        }
    }
}

#[derive(Clone, Debug)]
pub struct RestartReport {
    pub namespace: String,
    pub kind: RestartKind,
    /// Why a cold rebuild was needed, when it was.
    pub reason: String,
    pub elapsed_ms: u64,
    pub records_replayed: u64,
    pub blocks_scanned: u64,
}

/// How often a cold rebuild logs its progress.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);
/// How many records ahead of the one being applied a replay loads the index slot: enough to
/// overlap that many memory misses, few enough that the slots are still cached when reached.
const REPLAY_PREFETCH_DISTANCE_RECORDS: usize = 16;

enum Decision {
    Attach(Box<Index>, RestartKind),
    Rebuild(String),
}

struct Recovered {
    digest: Digest,
    location: Location,
    lsn: u64,
    tombstone: bool,
    part: bool,
    /// The record's expiry field (the entry tags whether there is one).
    expiry_unix_ms: u64,
    record_bytes: usize,
}

/// Tombstones met during a cold rebuild (digest → newest deleting LSN), one map per index
/// partition: a map is locked only by a thread holding its partition's write lock, so the
/// parallel scan never contends on it.
type Tombstones = Box<[Mutex<DigestMap<u64>>]>;

/// How replayed records are applied: by a cold rebuild (tombstones met before the records they
/// delete are kept apart; every entry is the rebuild's own) or by a tail replay (how far entries
/// are trusted depends on how the process stopped; the partitions it changes are noted in
/// `touched`).
struct ApplyMode<'a> {
    tombstones: Option<&'a Tombstones>,
    trust: EntryTrust<'a>,
    touched: Option<&'a mut BTreeSet<usize>>,
}

/// Buffers a replay thread reuses from block to block (a block image is megabytes).
#[derive(Default)]
struct ReplayBuffers {
    image: Vec<u8>,
    /// Members of the batch being walked.
    batch: Vec<Recovered>,
    /// The records of the block to apply, in log order.
    applicable: Vec<Recovered>,
}

#[derive(Default)]
struct Progress {
    blocks: AtomicUsize,
    records: AtomicU64,
    max_lsn: AtomicU64,
}

pub(crate) fn open_namespace(
    config: NamespaceConfig,
    data: Arc<dyn Medium>,
    index_medium: OpenedMedium,
    journal: Option<Arc<JournaledMemory>>,
    boot_id: u64,
) -> Result<(Arc<Namespace>, RestartReport)> {
    let started = Instant::now();
    let fingerprint = fingerprint_of(&config);
    let (log, in_use) = RecordLog::open(data, config.write_block_bytes, fingerprint)?;
    let medium = index_medium.medium.clone();
    let decision = decide(&config, index_medium.existed, medium, fingerprint, &in_use, log.set_aside_slots(), boot_id)?;
    let (index, kind, reason) = match decision {
        Decision::Attach(index, kind) => (*index, kind, String::new()),
        Decision::Rebuild(reason) => {
            let index = Index::create(index_medium.medium, fingerprint, &config.name, boot_id)?;
            let kind = if in_use.is_empty() { RestartKind::Fresh } else { RestartKind::Cold };
            (index, kind, reason)
        }
    };
    let consistent_position = index.header().consistent_position;
    let header_next_lsn = index.header().next_lsn;
    // Every store of the stopped process to the index region is still there: nothing was torn.
    let same_boot = index.header().boot_id == boot_id;
    let namespace = Namespace::assemble(config, index, log, journal);
    let progress = Progress::default();
    match kind {
        RestartKind::Warm | RestartKind::AfterCrash => {
            let tail = Tail { in_use: &in_use, consistent_position, clean: kind == RestartKind::Warm, same_boot };
            namespace.replay_tail(&tail, &progress)?
        }
        RestartKind::Cold => {
            tracing::info!(namespace = %namespace.config.name, reason = %reason, blocks = in_use.len(), "cold start: rebuilding the index");
            namespace.rebuild(&in_use, &progress)?;
            namespace.log.start_new_block()?;
        }
        RestartKind::Fresh => namespace.log.start_new_block()?,
    }
    let records = progress.records.load(Ordering::Relaxed);
    if records > 0 {
        // Re-applied records may have reached the log's medium only in the page cache: make them
        // durable before the index checkpoint below claims them.
        namespace.log.medium().persist(0, namespace.log.medium().len_bytes())?;
    }
    namespace.log.set_next_lsn(header_next_lsn.max(progress.max_lsn.load(Ordering::Relaxed) + 1));
    // After a process crash the first checkpoint, which makes every table the tail touched
    // durable (possibly the whole index), is left to the background: until it is taken a
    // crash replays the same tail again.
    let checkpoint = if kind == RestartKind::AfterCrash && same_boot { OpenCheckpoint::InBackground } else { OpenCheckpoint::Now };
    namespace.finish_open(kind != RestartKind::Warm && kind != RestartKind::AfterCrash, checkpoint)?;
    let report = RestartReport {
        namespace: namespace.config.name.clone(),
        kind,
        reason,
        elapsed_ms: started.elapsed().as_millis() as u64,
        records_replayed: records,
        blocks_scanned: progress.blocks.load(Ordering::Relaxed) as u64,
    };
    tracing::info!(namespace = %report.namespace, kind = report.kind.name(), elapsed_ms = report.elapsed_ms, records = report.records_replayed, "namespace open");
    Ok((Arc::new(namespace), report))
}

fn decide(
    config: &NamespaceConfig,
    existed: bool,
    medium: Arc<dyn Medium>,
    fingerprint: u64,
    in_use: &[BlockHeader],
    set_aside_slots: u64,
    boot_id: u64,
) -> Result<Decision> {
    if config.index == Tier::Dram {
        return Ok(Decision::Rebuild("the index is in DRAM".into()));
    }
    if !existed {
        return Ok(Decision::Rebuild("no index region".into()));
    }
    let index = match Index::attach(medium, fingerprint, &config.name, boot_id)? {
        Ok(index) => index,
        Err(reason) => return Ok(Decision::Rebuild(reason)),
    };
    let header = index.header();
    let newest_seq = in_use.last().map_or(0, |block| block.seq);
    // A block set aside (damaged header) may be the newest: the index is then kept, and reads of
    // its records report them damaged.
    if position_seq(header.consistent_position) > newest_seq && set_aside_slots == 0 {
        return Ok(Decision::Rebuild("the index is ahead of the record log".into()));
    }
    if !header.clean && header.boot_id != boot_id && config.durability != Durability::Always {
        return Ok(Decision::Rebuild(
            "the machine restarted after an unclean stop and durability is not 'always': the index may point past the durable log".into(),
        ));
    }
    // After a clean stop no change can have been under way (tables are checked when first used).
    if header.clean && !index.interrupted_changes()?.is_empty() {
        return Ok(Decision::Rebuild("index partition counts damaged".into()));
    }
    Ok(Decision::Attach(Box::new(index), if header.clean { RestartKind::Warm } else { RestartKind::AfterCrash }))
}

/// Which index entries replay may trust to name a valid record of their own key, so that log
/// order alone tells whether the entry's record or the one replayed is the newer version of the
/// key (versions of one key lie in log order: see `supersedes`). An entry not trusted is checked
/// by reading the record it names: a random read per replayed record, which on ssd data made an
/// after-kill start replay about 54,000 records/s (600,000 in 11.2 s).
#[derive(Clone, Copy)]
enum EntryTrust<'a> {
    /// A cold rebuild: every entry was put by the rebuild itself, from a valid record.
    All,
    /// After a process crash no store was torn and every record an entry names was written out,
    /// except where a change the crash interrupted left a partition's entries half done.
    AllBut(&'a BTreeSet<usize>),
    /// After a power cut any entry may be torn, or name a record that never became durable.
    None,
}

impl EntryTrust<'_> {
    fn trusts(self, partition: usize) -> bool {
        match self {
            EntryTrust::All => true,
            EntryTrust::AllBut(interrupted) => !interrupted.contains(&partition),
            EntryTrust::None => false,
        }
    }
}

/// The log tail a warm or after-crash start re-applies.
struct Tail<'a> {
    in_use: &'a [BlockHeader],
    consistent_position: u64,
    /// A clean stop: the last block is resumed rather than left.
    clean: bool,
    /// Only the process stopped since the index was last written (see `MediaProvider::boot_id`).
    same_boot: bool,
}

impl Namespace {
    /// Re-applies the log from the consistent position on; resumes the last block after a clean
    /// stop, starts a new one otherwise (the last block's tail may hold torn records).
    fn replay_tail(&self, tail: &Tail, progress: &Progress) -> Result<()> {
        let first_seq = position_seq(tail.consistent_position);
        let interrupted: BTreeSet<usize> = self.index.interrupted_changes()?.into_iter().collect();
        let trust = if tail.same_boot { EntryTrust::AllBut(&interrupted) } else { EntryTrust::None };
        let mut touched = BTreeSet::new();
        let mut last_end = None;
        let mut buffers = ReplayBuffers::default();
        let mut mode = ApplyMode { tombstones: None, trust, touched: Some(&mut touched) };
        for block in tail.in_use.iter().filter(|block| block.seq >= first_seq) {
            let from = if block.seq == first_seq {
                position_offset(tail.consistent_position).max(BLOCK_HEADER_BYTES as u64)
            } else {
                BLOCK_HEADER_BYTES as u64
            };
            let end = self.replay_block(block, from, &mut mode, progress, &mut buffers)?;
            last_end = Some((block, end));
        }
        // After a power cut an entry written after the checkpoint may be torn (its location
        // stored, its digest or the tags in its high digest word not): any entry pointing into
        // the tail must point at a valid record of its own key, and take its tags from it. After
        // a process crash every store survived: only a change the crash interrupted may have
        // left an entry or the partition's counts half done.
        let repaired: BTreeSet<usize> =
            if tail.same_boot { interrupted } else { touched.iter().copied().chain(interrupted).collect() };
        for &number in &repaired {
            let mut partition = self.index.partition(number).write();
            self.index.repair(&mut partition, |entry| self.repaired_entry(entry, first_seq), |entry| self.log_order(entry.location))?;
        }
        // Entries the tail touched may exist only in memory that survived the process (not
        // durable): the next checkpoint writes them whether or not replay changed them.
        for number in touched.into_iter().chain(repaired) {
            self.index.mark_dirty(number);
        }
        match last_end {
            Some((block, end)) if tail.clean => self.log.resume_block(block, end)?,
            _ => self.log.start_new_block()?,
        }
        Ok(())
    }

    /// Scans every block in parallel into the (empty) index.
    fn rebuild(&self, in_use: &[BlockHeader], progress: &Progress) -> Result<()> {
        let started = Instant::now();
        let next = AtomicUsize::new(0);
        let tombstones: Tombstones = (0..crate::index::PARTITION_COUNT).map(|_| Mutex::new(DigestMap::default())).collect();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(in_use.len()).max(1);
        let results: Vec<Result<()>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|worker| {
                    let (next, tombstones) = (&next, &tombstones);
                    scope.spawn(move || -> Result<()> {
                        let mut last_report = Instant::now();
                        let mut buffers = ReplayBuffers::default();
                        let mut mode = ApplyMode { tombstones: Some(tombstones), trust: EntryTrust::All, touched: None };
                        loop {
                            let position = next.fetch_add(1, Ordering::Relaxed);
                            let Some(block) = in_use.get(position) else { return Ok(()) };
                            self.replay_block(block, BLOCK_HEADER_BYTES as u64, &mut mode, progress, &mut buffers)?;
                            if worker == 0 && last_report.elapsed() >= PROGRESS_INTERVAL {
                                last_report = Instant::now();
                                tracing::info!(
                                    namespace = %self.config.name,
                                    blocks = progress.blocks.load(Ordering::Relaxed),
                                    of = in_use.len(),
                                    records = progress.records.load(Ordering::Relaxed),
                                    "rebuilding index"
                                );
                            }
                        }
                    })
                })
                .collect();
            workers.into_iter().map(|worker| worker.join().expect("rebuild worker panicked")).collect()
        });
        results.into_iter().collect::<Result<Vec<()>>>()?;
        self.apply_late_tombstones(tombstones)?;
        let records = progress.records.load(Ordering::Relaxed);
        let seconds = started.elapsed().as_secs_f64().max(1e-9);
        tracing::info!(
            namespace = %self.config.name,
            records,
            blocks = in_use.len(),
            seconds = format!("{seconds:.3}"),
            records_per_second = format!("{:.0}", records as f64 / seconds),
            "index rebuilt"
        );
        Ok(())
    }

    /// Tombstones met before an older version of their key (blocks are scanned in any order).
    fn apply_late_tombstones(&self, tombstones: Tombstones) -> Result<()> {
        for (digest, lsn) in tombstones.into_vec().into_iter().flat_map(Mutex::into_inner) {
            let number = self.index.partition_of(digest);
            let mut partition = self.index.partition(number).write();
            let Some(current) = self.index.table_lookup(&partition, digest)? else { continue };
            if self.lsn_at(current.location) < lsn {
                self.index.table_remove(&mut partition, number, digest)?;
                drop(partition);
                self.forget_live_bytes(current.location);
            }
        }
        Ok(())
    }

    /// Applies the valid records of one block from `from` on; a batch applies only whole.
    /// Returns the offset after the last valid record.
    fn replay_block(
        &self,
        block: &BlockHeader,
        from: u64,
        mode: &mut ApplyMode<'_>,
        progress: &Progress,
        buffers: &mut ReplayBuffers,
    ) -> Result<u64> {
        let image_start = self.log.read_block_from(block.slot, from, &mut buffers.image)?;
        let (walked, max_lsn) = self.applicable_records(block, from, image_start, buffers);
        let records = self.apply_all(&buffers.applicable, mode)?;
        // Counted per block: shared counters bumped per record would bounce between the threads.
        progress.records.fetch_add(records, Ordering::Relaxed);
        progress.max_lsn.fetch_max(max_lsn, Ordering::Relaxed);
        if walked.skipped_bytes > 0 {
            tracing::error!(
                namespace = %self.config.name,
                slot = block.slot,
                skipped_bytes = walked.skipped_bytes,
                "invalid records between valid ones skipped (damage, or a write torn by a crash)"
            );
        }
        progress.blocks.fetch_add(1, Ordering::Relaxed);
        Ok(from + walked.end)
    }

    /// Walks the block image in `buffers` (from `image_start`, the byte at `from`) into
    /// `buffers.applicable`, in log order: every record outside a batch, and the members of every
    /// complete batch. Returns the walk and the largest LSN seen (applicable or not).
    fn applicable_records(&self, block: &BlockHeader, from: u64, image_start: usize, buffers: &mut ReplayBuffers) -> (Walked, u64) {
        let ReplayBuffers { image, batch, applicable } = buffers;
        batch.clear();
        applicable.clear();
        let mut max_lsn = 0u64;
        // With `always` every record before the last acknowledged one is durable: an invalid one
        // among valid ones is damage, and the records after it are replayed. With other
        // durabilities it is where the durable part of the log ends.
        let past_damage = self.config.durability == Durability::Always;
        let mut expected_offset = 0;
        let walked = walk_records(&image[image_start..], block.seq, past_damage, |offset, view| {
            if offset != expected_offset {
                // Records were skipped: a batch in progress lost members.
                batch.clear();
            }
            expected_offset = offset + view.header.record_bytes() as u64;
            max_lsn = max_lsn.max(view.header.lsn);
            let record = Recovered {
                digest: self.record_digest(view),
                location: Namespace::location_of(block.slot, from + offset, view),
                lsn: view.header.lsn,
                tombstone: view.header.is_tombstone(),
                part: view.header.is_part(),
                expiry_unix_ms: view.header.expiry_unix_ms,
                record_bytes: view.header.record_bytes(),
            };
            if !view.header.is_batch_member() {
                // A batch interrupted by a record of its own kind never got its end: torn.
                batch.clear();
                applicable.push(record);
                return;
            }
            batch.push(record);
            if view.header.is_batch_end() {
                if batch.len() == view.header.batch_len as usize {
                    applicable.append(batch);
                }
                batch.clear();
            }
        });
        (walked, max_lsn)
    }

    /// Applies `records` in order, loading the index slot of the record
    /// REPLAY_PREFETCH_DISTANCE_RECORDS ahead meanwhile. Returns how many were applied.
    fn apply_all(&self, records: &[Recovered], mode: &mut ApplyMode<'_>) -> Result<u64> {
        let prefetch = |record: &&Recovered| self.index.prefetch_entry(record.digest);
        for_each_prefetching(records.iter(), REPLAY_PREFETCH_DISTANCE_RECORDS, prefetch, |record| {
            if let Some(touched) = mode.touched.as_deref_mut() {
                touched.insert(self.index.partition_of(record.digest));
            }
            self.apply_recovered(record, mode.tombstones, mode.trust)
        })?;
        Ok(records.len() as u64)
    }

    /// Applies one recovered record if it is newer than what the index holds for its key.
    fn apply_recovered(&self, record: &Recovered, tombstones: Option<&Tombstones>, trust: EntryTrust<'_>) -> Result<()> {
        let number = self.index.partition_of(record.digest);
        let mut partition = self.index.partition(number).write();
        if let Some(current) = self.index.table_lookup(&partition, record.digest)? {
            // The entry already names this record (the usual case after a process crash): no
            // record needs reading.
            if current.location == record.location || self.is_newer(current.location, record, trust, number) {
                return Ok(());
            }
        }
        if let Some(tombstones) = tombstones {
            let mut tombstones = tombstones[number].lock();
            if record.tombstone {
                let newest = tombstones.entry(record.digest).or_insert(record.lsn);
                *newest = (*newest).max(record.lsn);
            } else if tombstones.get(&record.digest).is_some_and(|&deleted| deleted > record.lsn) {
                return Ok(());
            }
        }
        let mut replaced = Vec::new();
        if record.tombstone {
            // After a power cut a key may have two entries (see `Index::repair`): the tombstone
            // removes every one older than itself; a newer one stays, and wins the repair.
            while let Some(old) = self.index.table_remove(&mut partition, number, record.digest)? {
                replaced.push(old.location);
                match self.index.table_lookup(&partition, record.digest)? {
                    Some(next) if !self.is_newer(next.location, record, trust, number) => {}
                    _ => break,
                }
            }
        } else {
            let entry = Entry::new(record.digest, record.location, record.part, record.expiry_unix_ms);
            replaced.extend(self.index.table_put(&mut partition, number, entry)?.map(|old| old.location));
        }
        drop(partition);
        for location in replaced {
            self.forget_live_bytes(location);
        }
        self.log.add_live_bytes(record.location.slot(), record.record_bytes);
        Ok(())
    }

    /// Whether the record an entry names at `current` (not `record`'s location) is a newer
    /// version of the key than `record`: by log order where `trust` allows, else by reading it.
    fn is_newer(&self, current: Location, record: &Recovered, trust: EntryTrust<'_>, partition: usize) -> bool {
        match self.log_order(current) {
            Some(current_order) if trust.trusts(partition) => {
                current_order > self.log_order(record.location).expect("a replayed block is in use")
            }
            _ => self.supersedes(current, record),
        }
    }

    /// An entry of a partition the log tail touched, as it must be, or None when it is torn
    /// beyond repair. A store torn by the crash may have left the location of a valid record
    /// without its digest (it points at another key's record: dropped) or without its tags
    /// (taken from the record: part, has an expiry). That holds for entries naming records older
    /// than the checkpoint at block `first_seq` too: a slot freed and taken again after it can
    /// keep the old location under a digest torn between the two keys (found by the power-cut
    /// campaign, seed 1008579), which names no record. An unreadable record older than the
    /// checkpoint, or with `always` any unreadable one (it was durable before its entry was
    /// stored), is damaged: the entry stays so that reads report it rather than forget the key.
    fn repaired_entry(&self, entry: &Entry, first_seq: u64) -> Option<Entry> {
        let seq = self.log.block_seq(entry.location.slot());
        let before_checkpoint = seq != 0 && seq < first_seq;
        let mut buffer = Vec::new();
        match self.log.read_verified(entry.location, &mut buffer) {
            Ok(view) => (self.record_digest(&view) == entry.digest)
                .then(|| Entry::new(entry.digest, entry.location, view.header.is_part(), view.header.expiry_unix_ms)),
            Err(_) => (before_checkpoint || self.config.durability == Durability::Always).then_some(*entry),
        }
    }

    /// Whether the record the index holds at `current` is newer than `record`. An unreadable one
    /// is older (a record lost to the crash, durability other than `always`) — except with
    /// `always`, where every indexed record was durable before its entry: an unreadable one is
    /// damaged, and it stays (reported on read) rather than let an older version of its key come
    /// back. The versions of one key lie in log order (a move happens only while the index
    /// points at the record moved, before any newer version exists); a damaged record whose
    /// block header is damaged too has no known place in it and stays.
    ///
    /// A valid record of another key at `current` does not supersede: a power cut that tore an
    /// entry written into a deleted slot can leave the slot's old digest (this key's, deleted
    /// earlier) beside the new location (another key's record, often another part of the same
    /// key), and the entry must then be rewritten for this record rather than kept.
    fn supersedes(&self, current: Location, record: &Recovered) -> bool {
        let lsn = match self.valid_record_at(current) {
            Some((_, digest)) if digest != record.digest => return false,
            Some((lsn, _)) => lsn,
            None => 0,
        };
        if lsn != 0 || self.config.durability != Durability::Always {
            return lsn >= record.lsn;
        }
        self.log_order(current).is_none_or(|order| Some(order) > self.log_order(record.location))
    }

    /// Where a location lies in the log, in log order; None when its slot holds no block in use.
    fn log_order(&self, location: Location) -> Option<(u64, u64)> {
        let seq = self.log.block_seq(location.slot());
        (seq != 0).then_some((seq, location.offset()))
    }

    /// The LSN of the valid record at `location`, or 0 when it is not valid (anything beats it).
    pub(crate) fn lsn_at(&self, location: Location) -> u64 {
        self.valid_record_at(location).map_or(0, |(lsn, _)| lsn)
    }

    /// The LSN and key digest of the valid record at `location`; None when it is not valid.
    fn valid_record_at(&self, location: Location) -> Option<(u64, Digest)> {
        let mut buffer = Vec::new();
        self.log.read_verified(location, &mut buffer).ok().map(|view| (view.header.lsn, self.record_digest(&view)))
    }
}
