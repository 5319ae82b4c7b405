//! The simulated medium: keeps written bytes apart from durable ones, cuts power (dropping what
//! was not made durable and tearing unflushed writes at 8 bytes for regions and 4 KiB for block
//! files, in any order), simulates a process crash, and injects I/O errors and ENOSPC.
//!
//! At a power cut each chunk written since it was last made durable independently ends up with
//! any of the values it held since then: its durable value, the last one written, or one written
//! in between (a cache line or a device cache evicted early, then overwritten) — like PMDK's
//! pmreorder, any subset of unflushed stores, in any order, may have reached the media.
//!
//! A power cut during a `persist` (`SimStore::cut_power_at` on a persist) makes none of its range
//! durable by itself: every dirty chunk of the range then fares like any other unflushed chunk, so
//! any subset of them ends up durable — what msync's write-back of dirty pages in no promised
//! order, or a cache-line flush loop cut midway, can leave.
//!
//! Pmem regions report, per seed, either the simulated path (persisting a range flushes exactly
//! that range, as MAP_SYNC cache-line flushes do) or the msync fallback (`DurabilityPath::
//! MsyncFallback`), so that both ways the engine persists a region are exercised; the simulated
//! media behave the same either way (msync's page granularity is subsumed by 8-byte tearing).
//!
//! A crash is simulated in three steps: `freeze` (every later operation fails, as if the process
//! were gone), dropping whatever used the media, then `crash_process` or `power_cut` ("reboot").

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::medium::{assert_in_range, assert_u64_aligned, DurabilityPath, Medium, MediumInfo, Tier, PAGE_BYTES};
use crate::provider::{MediaProvider, OpenedMedium};
use crate::MediaError;

/// Failure atomicity of stores to a byte-addressable region.
pub const REGION_TEAR_BYTES: u64 = 8;
/// Failure atomicity of a block-file write.
pub const BLOCK_TEAR_BYTES: u64 = PAGE_BYTES;
/// Salt of the seed that chooses the pmem regions' reported durability path, kept apart from the
/// store's random stream so that the choice does not shift the rest of a seed's run.
const PMEM_PATH_SEED_SALT: u64 = 0x6d73_796e_635f_6662;
/// Values a chunk held between two flushes that a power cut may still leave on the media, besides
/// its durable and its last value (older ones are forgotten, bounding the simulation's memory).
pub const EARLIER_VALUES_KEPT_MAX: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    Eio,
    NoSpace,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultOn {
    Write,
    Persist,
    Any,
}

/// An injected fault: operation number `at_op` (counted over all media of the store) and, when
/// `repeat`, every later matching operation fails with `kind` until `clear_faults`.
#[derive(Clone, Copy, Debug)]
pub struct FaultPlan {
    pub at_op: u64,
    pub kind: FaultKind,
    pub on: FaultOn,
    pub repeat: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Operation {
    Write,
    Persist,
}

struct Control {
    operations: u64,
    /// Power cuts so far: the simulated machine's boot id.
    boots: u64,
    cut_at_op: Option<u64>,
    frozen: bool,
    fault: Option<FaultPlan>,
    rng: StdRng,
}

enum Verdict {
    Proceed,
    Fail(MediaError),
    /// Power is cut during this operation: apply a random part of it, then fail.
    CutDuring,
}

struct Shared {
    /// What pmem regions report as their durability path (see the module's documentation).
    pmem_durability: DurabilityPath,
    control: Mutex<Control>,
    media: Mutex<HashMap<(Tier, String), Arc<SimMedium>>>,
    /// `read_at` calls on ssd media so far: what a start costs in device reads.
    ssd_reads: AtomicU64,
}

impl Shared {
    fn admit(&self, operation: Operation, what: &str) -> Verdict {
        let mut control = self.control.lock();
        if control.frozen {
            return Verdict::Fail(MediaError::PowerLost);
        }
        control.operations += 1;
        let number = control.operations;
        if control.cut_at_op == Some(number) {
            control.frozen = true;
            return Verdict::CutDuring;
        }
        let Some(plan) = control.fault else { return Verdict::Proceed };
        let matches = match plan.on {
            FaultOn::Any => true,
            FaultOn::Write => operation == Operation::Write,
            FaultOn::Persist => operation == Operation::Persist,
        };
        let due = if plan.repeat { number >= plan.at_op } else { number == plan.at_op };
        if !(matches && due) {
            return Verdict::Proceed;
        }
        let what = format!("simulated {what}");
        Verdict::Fail(match plan.kind {
            FaultKind::NoSpace => MediaError::NoSpace { what },
            FaultKind::Eio => MediaError::Io { what, source: std::io::Error::from_raw_os_error(libc::EIO) },
        })
    }

    fn random_bool(&self) -> bool {
        self.control.lock().rng.gen_bool(0.5)
    }

    fn random_below(&self, bound: usize) -> usize {
        self.control.lock().rng.gen_range(0..bound)
    }
}

/// A set of named simulated media sharing one operation counter, fault plan and power supply.
#[derive(Clone)]
pub struct SimStore {
    shared: Arc<Shared>,
}

impl SimStore {
    pub fn new(seed: u64) -> SimStore {
        let control = Control {
            operations: 0,
            boots: 0,
            cut_at_op: None,
            frozen: false,
            fault: None,
            rng: StdRng::seed_from_u64(seed),
        };
        let msync_fallback = StdRng::seed_from_u64(seed ^ PMEM_PATH_SEED_SALT).gen_bool(0.5);
        let pmem_durability = if msync_fallback { DurabilityPath::MsyncFallback } else { DurabilityPath::Simulated };
        SimStore {
            shared: Arc::new(Shared {
                pmem_durability,
                control: Mutex::new(control),
                media: Mutex::new(HashMap::new()),
                ssd_reads: AtomicU64::new(0),
            }),
        }
    }

    /// The durability path pmem regions of this store report: `MsyncFallback` for half of the
    /// seeds, `Simulated` (range flushes, like MAP_SYNC) for the others.
    pub fn pmem_durability(&self) -> DurabilityPath {
        self.shared.pmem_durability
    }

    /// Reads of ssd media so far (each would be a device read).
    pub fn ssd_reads(&self) -> u64 {
        self.shared.ssd_reads.load(Ordering::Relaxed)
    }

    /// Operations (writes, 8-byte stores, persists) counted so far.
    pub fn operations(&self) -> u64 {
        self.shared.control.lock().operations
    }

    /// Cuts power during operation number `at_op`: that write lands partly, and from then on
    /// every operation fails with `PowerLost` until `power_cut` reboots.
    pub fn cut_power_at(&self, at_op: u64) {
        self.shared.control.lock().cut_at_op = Some(at_op);
    }

    pub fn inject(&self, plan: FaultPlan) {
        self.shared.control.lock().fault = Some(plan);
    }

    pub fn clear_faults(&self) {
        self.shared.control.lock().fault = None;
    }

    /// Makes every later operation fail, as if the process had died at this instant.
    pub fn freeze(&self) {
        self.shared.control.lock().frozen = true;
    }

    pub fn is_frozen(&self) -> bool {
        self.shared.control.lock().frozen
    }

    /// Restart after a process crash: anonymous memory is gone, everything written elsewhere
    /// (page cache, tmpfs, mappings) survives; the boot id stays.
    pub fn crash_process(&self) {
        self.shared.media.lock().retain(|(tier, _), _| tier.survives_process_crash());
        self.thaw();
    }

    /// Reboot after a power cut: dram and shmem are gone; on pmem and ssd each unflushed chunk
    /// independently either reached the media or did not; the boot id changes.
    pub fn power_cut(&self) {
        let mut media = self.shared.media.lock();
        media.retain(|(tier, _), _| tier.survives_power_cut());
        for medium in media.values() {
            medium.lose_unflushed(&self.shared);
        }
        drop(media);
        self.shared.control.lock().boots += 1;
        self.thaw();
    }

    fn thaw(&self) {
        let mut control = self.shared.control.lock();
        control.frozen = false;
        control.cut_at_op = None;
    }

    /// Names of every stored medium, sorted.
    pub fn list_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.shared.media.lock().keys().map(|(_, name)| name.clone()).collect();
        names.sort();
        names
    }

    /// Flips the byte at `offset` of a stored medium, in both its written and durable images.
    pub fn corrupt(&self, name: &str, tier: Tier, offset: u64) -> bool {
        self.flip_bits(name, tier, offset, 0xff)
    }

    /// XORs `mask` into the byte at `offset` of a stored medium, in both its written and durable
    /// images (damage at rest); false when there is no such medium.
    pub fn flip_bits(&self, name: &str, tier: Tier, offset: u64, mask: u8) -> bool {
        let media = self.shared.media.lock();
        let Some(medium) = media.get(&(tier, name.to_string())) else { return false };
        let mut bytes = medium.bytes.lock();
        let index = offset as usize;
        bytes.written[index] ^= mask;
        bytes.durable[index] ^= mask;
        true
    }

    /// The name, tier and current bytes of every stored medium (to choose where to damage).
    pub fn images(&self) -> Vec<(String, Tier, Vec<u8>)> {
        let media = self.shared.media.lock();
        let mut images: Vec<_> =
            media.iter().map(|((tier, name), medium)| (name.clone(), *tier, medium.bytes.lock().written.clone())).collect();
        images.sort_by(|a, b| a.0.cmp(&b.0));
        images
    }
}

struct Bytes {
    written: Vec<u8>,
    durable: Vec<u8>,
    /// One bit per tear-granularity chunk written since it was last made durable.
    dirty_chunks: ChunkSet,
    /// Values a dirty chunk held before its last write (media that survive a power cut only).
    earlier_values: HashMap<u64, Vec<Vec<u8>>>,
}

impl Bytes {
    fn chunk_range(&self, chunk: u64, tear_bytes: u64) -> std::ops::Range<usize> {
        let start = (chunk * tear_bytes) as usize;
        start..(start + tear_bytes as usize).min(self.written.len())
    }

    /// Before `chunk` is overwritten while dirty: remembers its value, which may reach the media.
    fn remember_earlier_value(&mut self, chunk: u64, tear_bytes: u64) {
        if !self.dirty_chunks.contains(chunk) {
            return;
        }
        let value = self.written[self.chunk_range(chunk, tear_bytes)].to_vec();
        let values = self.earlier_values.entry(chunk).or_default();
        if values.len() == EARLIER_VALUES_KEPT_MAX {
            values.remove(0);
        }
        values.push(value);
    }
}

/// A bit set of chunk numbers.
struct ChunkSet {
    words: Vec<u64>,
}

impl ChunkSet {
    fn new(chunks: u64) -> ChunkSet {
        ChunkSet { words: vec![0; chunks.div_ceil(64) as usize] }
    }

    fn insert(&mut self, chunk: u64) {
        self.words[(chunk / 64) as usize] |= 1 << (chunk % 64);
    }

    fn contains(&self, chunk: u64) -> bool {
        self.words[(chunk / 64) as usize] & (1 << (chunk % 64)) != 0
    }

    /// Removes and returns the members in `range`, in order.
    fn take_range(&mut self, range: std::ops::Range<u64>) -> Vec<u64> {
        let mut taken = Vec::new();
        let end = range.end.min(self.words.len() as u64 * 64);
        let mut chunk = range.start;
        while chunk < end {
            let word = &mut self.words[(chunk / 64) as usize];
            if *word == 0 && chunk.is_multiple_of(64) {
                chunk += 64;
                continue;
            }
            let bit = 1 << (chunk % 64);
            if *word & bit != 0 {
                *word &= !bit;
                taken.push(chunk);
            }
            chunk += 1;
        }
        taken
    }
}

pub struct SimMedium {
    info: MediumInfo,
    len_bytes: u64,
    tear_bytes: u64,
    shared: std::sync::Weak<Shared>,
    bytes: Mutex<Bytes>,
}

impl SimMedium {
    fn shared(&self) -> Arc<Shared> {
        self.shared.upgrade().expect("simulated medium outlived its store")
    }

    fn chunks(&self, offset: u64, len: u64) -> std::ops::Range<u64> {
        offset / self.tear_bytes..(offset + len).div_ceil(self.tear_bytes)
    }

    fn apply_write(&self, offset: u64, data: &[u8], shared: Option<&Shared>) {
        let mut bytes = self.bytes.lock();
        for chunk in self.chunks(offset, data.len() as u64) {
            // A write cut by power lands chunk by chunk, each independently.
            if shared.is_some_and(|shared| shared.random_bool()) {
                continue;
            }
            let chunk_start = (chunk * self.tear_bytes).max(offset);
            let chunk_end = ((chunk + 1) * self.tear_bytes).min(offset + data.len() as u64);
            let source = &data[(chunk_start - offset) as usize..(chunk_end - offset) as usize];
            if self.info.tier.survives_power_cut() {
                bytes.remember_earlier_value(chunk, self.tear_bytes);
            }
            bytes.written[chunk_start as usize..chunk_end as usize].copy_from_slice(source);
            bytes.dirty_chunks.insert(chunk);
        }
    }

    /// Each dirty chunk keeps its durable value, its last value or one of its earlier values.
    fn lose_unflushed(&self, shared: &Shared) {
        let mut guard = self.bytes.lock();
        let mut earlier_values = std::mem::take(&mut guard.earlier_values);
        for chunk in guard.dirty_chunks.take_range(0..u64::MAX) {
            let range = guard.chunk_range(chunk, self.tear_bytes);
            let earlier = earlier_values.remove(&chunk).unwrap_or_default();
            // 0: nothing reached the media; 1..=earlier: that earlier value; above: the last one.
            let choice = shared.random_below(earlier.len() + 2);
            let Bytes { written, durable, .. } = &mut *guard;
            match choice {
                0 => {}
                choice if choice <= earlier.len() => durable[range].copy_from_slice(&earlier[choice - 1]),
                _ => durable[range.clone()].copy_from_slice(&written[range]),
            }
        }
        let Bytes { written, durable, .. } = &mut *guard;
        written.copy_from_slice(durable);
    }

    fn verdict(&self, operation: Operation) -> Result<bool, MediaError> {
        let name = self.info.path.as_ref().map(|path| path.display().to_string()).unwrap_or_default();
        match self.shared().admit(operation, &name) {
            Verdict::Proceed => Ok(false),
            Verdict::Fail(error) => Err(error),
            Verdict::CutDuring => Ok(true),
        }
    }
}

impl Medium for SimMedium {
    fn info(&self) -> &MediumInfo {
        &self.info
    }

    fn len_bytes(&self) -> u64 {
        self.len_bytes
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MediaError> {
        assert_in_range(self.len_bytes, offset, buf.len() as u64);
        if self.info.tier == Tier::Ssd {
            self.shared().ssd_reads.fetch_add(1, Ordering::Relaxed);
        }
        let bytes = self.bytes.lock();
        buf.copy_from_slice(&bytes.written[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), MediaError> {
        assert_in_range(self.len_bytes, offset, data.len() as u64);
        if self.info.tier == Tier::Ssd {
            assert!(
                offset.is_multiple_of(PAGE_BYTES) && (data.len() as u64).is_multiple_of(PAGE_BYTES),
                "block file writes are whole pages: offset {offset}, len {}",
                data.len()
            );
        }
        if self.verdict(Operation::Write)? {
            self.apply_write(offset, data, Some(&self.shared()));
            return Err(MediaError::PowerLost);
        }
        self.apply_write(offset, data, None);
        Ok(())
    }

    fn store_u64(&self, offset: u64, value: u64) -> Result<(), MediaError> {
        assert_u64_aligned(offset);
        assert!(self.info.tier != Tier::Ssd, "8-byte publication is for regions");
        // An aligned 8-byte store is one tear chunk: it lands whole or not at all.
        if self.verdict(Operation::Write)? {
            return Err(MediaError::PowerLost);
        }
        self.apply_write(offset, &value.to_le_bytes(), None);
        Ok(())
    }

    fn persist(&self, offset: u64, len: u64) -> Result<(), MediaError> {
        assert_in_range(self.len_bytes, offset, len);
        if self.verdict(Operation::Persist)? {
            return Err(MediaError::PowerLost);
        }
        if !self.info.tier.survives_power_cut() {
            return Ok(());
        }
        let mut guard = self.bytes.lock();
        // A block-file fdatasync makes the whole file durable; a region flush only its range.
        let range = if self.info.tier == Tier::Ssd { 0..u64::MAX } else { self.chunks(offset, len) };
        for chunk in guard.dirty_chunks.take_range(range) {
            let range = guard.chunk_range(chunk, self.tear_bytes);
            guard.earlier_values.remove(&chunk);
            let Bytes { written, durable, .. } = &mut *guard;
            durable[range.clone()].copy_from_slice(&written[range]);
        }
        Ok(())
    }

    fn write_alignment_bytes(&self) -> u64 {
        if self.info.tier == Tier::Ssd {
            PAGE_BYTES
        } else {
            1
        }
    }
}

impl MediaProvider for SimStore {
    fn boot_id(&self) -> u64 {
        self.shared.control.lock().boots
    }

    fn open(&self, name: &str, tier: Tier, len_bytes: u64) -> Result<OpenedMedium, MediaError> {
        let mut media = self.shared.media.lock();
        let key = (tier, name.to_string());
        if let Some(existing) = media.get(&key) {
            if existing.len_bytes >= len_bytes {
                return Ok(OpenedMedium { medium: existing.clone(), existed: true });
            }
        }
        let tear_bytes = if tier == Tier::Ssd { BLOCK_TEAR_BYTES } else { REGION_TEAR_BYTES };
        let durability = if tier == Tier::Pmem { self.shared.pmem_durability } else { DurabilityPath::Simulated };
        let medium = Arc::new(SimMedium {
            info: MediumInfo {
                tier,
                path: Some(format!("sim:{tier}/{name}").into()),
                durability,
            },
            len_bytes,
            tear_bytes,
            shared: Arc::downgrade(&self.shared),
            bytes: Mutex::new(Bytes {
                written: vec![0; len_bytes as usize],
                durable: vec![0; len_bytes as usize],
                dirty_chunks: ChunkSet::new(len_bytes.div_ceil(tear_bytes)),
                earlier_values: HashMap::new(),
            }),
        });
        // Dram is anonymous: it is never found again.
        if tier != Tier::Dram {
            media.insert(key, medium.clone());
        }
        Ok(OpenedMedium { medium, existed: false })
    }

    fn remove(&self, name: &str, tier: Tier) -> Result<(), MediaError> {
        if self.shared.control.lock().frozen {
            return Err(MediaError::PowerLost);
        }
        self.shared.media.lock().remove(&(tier, name.to_string()));
        Ok(())
    }

    fn list(&self, prefix: &str, tier: Tier) -> Result<Vec<String>, MediaError> {
        let media = self.shared.media.lock();
        let mut names: Vec<String> = media
            .keys()
            .filter(|(medium_tier, name)| *medium_tier == tier && name.starts_with(prefix))
            .map(|(_, name)| name.clone())
            .collect();
        names.sort();
        Ok(names)
    }

    fn sync_names(&self, _tier: Tier) -> Result<(), MediaError> {
        // Creation and removal are durable at once in the simulation.
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_id_changes_with_a_power_cut_only() {
        let store = SimStore::new(1);
        let first = store.boot_id();
        store.crash_process();
        assert_eq!(store.boot_id(), first);
        store.power_cut();
        assert_ne!(store.boot_id(), first);
    }

    #[test]
    fn power_cut_keeps_persisted_bytes_and_drops_or_tears_the_rest() {
        let store = SimStore::new(7);
        let medium = store.open("region", Tier::Pmem, 4096).unwrap().medium;
        medium.write_at(0, &[1u8; 64]).unwrap();
        medium.persist(0, 64).unwrap();
        medium.write_at(64, &[2u8; 512]).unwrap();
        store.freeze();
        assert!(matches!(medium.write_at(0, &[9]), Err(MediaError::PowerLost)));
        store.power_cut();
        let medium = store.open("region", Tier::Pmem, 4096).unwrap().medium;
        let mut buf = vec![0u8; 576];
        medium.read_at(0, &mut buf).unwrap();
        assert!(buf[..64].iter().all(|&byte| byte == 1));
        // Unflushed 8-byte chunks each landed whole or not at all.
        for chunk in buf[64..].chunks(8) {
            assert!(chunk.iter().all(|&byte| byte == 2) || chunk.iter().all(|&byte| byte == 0));
        }
    }

    #[test]
    fn power_cut_leaves_any_value_an_unflushed_chunk_held_and_nothing_else() {
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..64 {
            let store = SimStore::new(seed);
            let medium = store.open("region", Tier::Pmem, 64).unwrap().medium;
            medium.store_u64(0, 1).unwrap();
            medium.persist(0, 8).unwrap();
            for value in 2..=4 {
                medium.store_u64(0, value).unwrap();
            }
            store.freeze();
            store.power_cut();
            let mut word = [0u8; 8];
            store.open("region", Tier::Pmem, 64).unwrap().medium.read_at(0, &mut word).unwrap();
            seen.insert(u64::from_le_bytes(word));
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![1, 2, 3, 4], "durable, earlier and last values");
    }

    #[test]
    fn a_cut_inside_a_persist_leaves_any_subset_of_its_range_durable() {
        const CHUNKS: u64 = 4;
        let mut subsets = std::collections::BTreeSet::new();
        for seed in 0..256 {
            let store = SimStore::new(seed);
            let medium = store.open("region", Tier::Pmem, 4096).unwrap().medium;
            for chunk in 0..CHUNKS {
                medium.store_u64(chunk * REGION_TEAR_BYTES, 1).unwrap();
            }
            store.cut_power_at(store.operations() + 1);
            assert!(matches!(medium.persist(0, CHUNKS * REGION_TEAR_BYTES), Err(MediaError::PowerLost)));
            store.power_cut();
            let medium = store.open("region", Tier::Pmem, 4096).unwrap().medium;
            let mut words = [0u8; (CHUNKS * REGION_TEAR_BYTES) as usize];
            medium.read_at(0, &mut words).unwrap();
            let landed: Vec<bool> = words.chunks(8).map(|word| word[0] == 1).collect();
            subsets.insert(landed);
        }
        assert_eq!(subsets.len(), 1 << CHUNKS, "every subset of the persisted range's chunks is reachable");
    }

    #[test]
    fn pmem_regions_report_the_msync_fallback_for_some_seeds_only() {
        let paths: std::collections::BTreeSet<String> = (0..32)
            .map(|seed| {
                let store = SimStore::new(seed);
                let pmem = store.open("region", Tier::Pmem, 64).unwrap().medium.info().durability;
                assert_eq!(pmem, store.pmem_durability());
                assert_eq!(store.open("shared", Tier::Shmem, 64).unwrap().medium.info().durability, DurabilityPath::Simulated);
                pmem.to_string()
            })
            .collect();
        assert_eq!(paths.len(), 2, "both paths among 32 seeds: {paths:?}");
    }

    #[test]
    fn a_flush_forgets_earlier_values() {
        for seed in 0..16 {
            let store = SimStore::new(seed);
            let medium = store.open("blocks", Tier::Ssd, 4 * PAGE_BYTES).unwrap().medium;
            medium.write_at(0, &[1u8; PAGE_BYTES as usize]).unwrap();
            medium.write_at(0, &[2u8; PAGE_BYTES as usize]).unwrap();
            medium.persist(0, PAGE_BYTES).unwrap();
            store.freeze();
            store.power_cut();
            let mut page = vec![0u8; PAGE_BYTES as usize];
            store.open("blocks", Tier::Ssd, 4 * PAGE_BYTES).unwrap().medium.read_at(0, &mut page).unwrap();
            assert!(page.iter().all(|&byte| byte == 2), "seed {seed}: a synced page is its last value");
        }
    }

    #[test]
    fn process_crash_keeps_shmem_and_drops_dram() {
        let store = SimStore::new(1);
        store.open("volatile", Tier::Dram, 64).unwrap().medium.write_at(0, &[1]).unwrap();
        store.open("shared", Tier::Shmem, 64).unwrap().medium.write_at(0, &[1]).unwrap();
        store.freeze();
        store.crash_process();
        let shared = store.open("shared", Tier::Shmem, 64).unwrap();
        assert!(shared.existed);
        let mut byte = [0u8];
        shared.medium.read_at(0, &mut byte).unwrap();
        assert_eq!(byte, [1]);
        assert!(!store.open("volatile", Tier::Dram, 64).unwrap().existed);
    }

    #[test]
    fn injected_faults_fail_the_chosen_operation() {
        let store = SimStore::new(3);
        let medium = store.open("blocks", Tier::Ssd, 8 * PAGE_BYTES).unwrap().medium;
        let next = store.operations() + 2;
        store.inject(FaultPlan { at_op: next, kind: FaultKind::NoSpace, on: FaultOn::Any, repeat: false });
        medium.write_at(0, &[0u8; 4096]).unwrap();
        assert!(medium.persist(0, 4096).unwrap_err().is_no_space());
        medium.persist(0, 4096).unwrap();
    }

    #[test]
    fn cut_during_a_block_write_tears_it_at_page_granularity() {
        let store = SimStore::new(11);
        let medium = store.open("blocks", Tier::Ssd, 64 * PAGE_BYTES).unwrap().medium;
        store.cut_power_at(store.operations() + 1);
        assert!(medium.write_at(0, &vec![5u8; 16 * PAGE_BYTES as usize]).is_err());
        store.power_cut();
        let medium = store.open("blocks", Tier::Ssd, 64 * PAGE_BYTES).unwrap().medium;
        let mut buf = vec![0u8; 16 * PAGE_BYTES as usize];
        medium.read_at(0, &mut buf).unwrap();
        for page in buf.chunks(PAGE_BYTES as usize) {
            assert!(page.iter().all(|&byte| byte == 5) || page.iter().all(|&byte| byte == 0));
        }
    }
}
