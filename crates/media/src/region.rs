//! Byte-addressable regions: anonymous memory (dram), a tmpfs file (shmem) and a mapped file made
//! durable by cache-line flushes under MAP_SYNC or by msync (pmem).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::{MmapMut, MmapOptions, MmapRaw};

use crate::flush::{cache_flush_instruction, write_back_lines, CacheFlushInstruction};
use crate::medium::{assert_in_range, assert_u64_aligned, DurabilityPath, Medium, MediumInfo, Tier};
use crate::MediaError;

/// Writes of at least this many bytes to a pmem file in the msync fallback go through pwrite
/// instead of stores into the mapping. A store dirties its page through the page table, so every
/// msync must write-protect the page again (a TLB shootdown on every core) and the next store
/// faults it back (ext4 page_mkwrite): together about 40% of server CPU under durable messaging.
/// pwrite dirties the page-cache page alone, which the mapping shares, so reads see it at once.
/// Smaller writes (index entries, single small records) stay stores: a syscall each would cost
/// more than the faults they share per page.
const PWRITE_BYTES_MIN: usize = 4096;

/// Reads of at least this many bytes from a file region go through pread instead of loads from
/// the mapping: pread keeps the file's sequential readahead even while the mapping is advised
/// random (`expect_scattered_reads`), and copies without mapping the pages (full scans,
/// rebuilds and defragmentation read whole write blocks).
const PREAD_BYTES_MIN: usize = 64 * 1024;

/// What mapping a pmem file really got on this machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PmemMapping {
    MapSync(CacheFlushInstruction),
    MsyncFallback,
}

enum Mapping {
    /// Kept only to own the mapping; accessed through `MmapRegion::base`.
    Anonymous(#[allow(dead_code)] MmapMut),
    File { map: MmapRaw, file: File },
    /// A MAP_SYNC mapping made with libc (memmap2 cannot pass MAP_SYNC); unmapped on drop.
    MapSync { address: *mut libc::c_void, len_bytes: usize, file: File },
}

impl Mapping {
    /// The file behind a file mapping.
    fn file(&self) -> Option<&File> {
        match self {
            Mapping::Anonymous(_) => None,
            Mapping::File { file, .. } | Mapping::MapSync { file, .. } => Some(file),
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if let Mapping::MapSync { address, len_bytes, .. } = *self {
            // SAFETY: the mapping was created by `map_sync` with exactly this address and length,
            // and `MmapRegion` hands out no reference that outlives it.
            unsafe { libc::munmap(address, len_bytes) };
        }
    }
}

pub struct MmapRegion {
    mapping: Mapping,
    base: *mut u8,
    len_bytes: u64,
    info: MediumInfo,
    pmem: Option<PmemMapping>,
}

// SAFETY: the region is a plain byte mapping; the `Medium` contract makes callers serialise
// overlapping accesses, and `store_u64` is an atomic store.
unsafe impl Send for MmapRegion {}
// SAFETY: see `Send`.
unsafe impl Sync for MmapRegion {}

impl MmapRegion {
    /// Anonymous memory reserved lazily: pages cost RAM only once written. Transparent huge
    /// pages are requested: random reads over a large index or record space are dominated by TLB
    /// misses on 4 KiB pages.
    pub fn anonymous(len_bytes: u64) -> Result<MmapRegion, MediaError> {
        let mut map = MmapOptions::new()
            .len(len_bytes as usize)
            .map_anon()
            .map_err(|error| MediaError::from_io("anonymous region", error))?;
        // Advice only: where THP is off the mapping works the same with small pages.
        let _ = map.advise(memmap2::Advice::HugePage);
        let base = map.as_mut_ptr();
        let info = MediumInfo { tier: Tier::Dram, path: None, durability: DurabilityPath::Volatile };
        Ok(MmapRegion { mapping: Mapping::Anonymous(map), base, len_bytes, info, pmem: None })
    }

    /// A file mapping for the shmem or pmem tier; the file is created sparse at `len_bytes`.
    pub fn file(path: &Path, tier: Tier, len_bytes: u64) -> Result<MmapRegion, MediaError> {
        assert!(matches!(tier, Tier::Shmem | Tier::Pmem), "file regions are shmem or pmem");
        let what = path.display().to_string();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|error| MediaError::from_io(&what, error))?;
        let current_len = file.metadata().map_err(|error| MediaError::from_io(&what, error))?.len();
        if current_len < len_bytes {
            // Reserve the space now: a store into a mapped hole on a full filesystem kills the
            // process with SIGBUS, where an error here is reported and survived.
            // SAFETY: posix_fallocate on a descriptor this function owns; no memory is involved.
            let status = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len_bytes as libc::off_t) };
            if status != 0 {
                return Err(MediaError::from_io(&what, std::io::Error::from_raw_os_error(status)));
            }
        }
        let instruction = cache_flush_instruction();
        if tier == Tier::Pmem && instruction != CacheFlushInstruction::Unavailable {
            if let Some(address) = Self::map_sync(&file, len_bytes) {
                let mapping = Mapping::MapSync { address, len_bytes: len_bytes as usize, file };
                let info = MediumInfo {
                    tier,
                    path: Some(path.to_path_buf()),
                    durability: DurabilityPath::MapSyncCacheFlush,
                };
                let pmem = Some(PmemMapping::MapSync(instruction));
                return Ok(MmapRegion { mapping, base: address as *mut u8, len_bytes, info, pmem });
            }
            tracing::info!(file = %what, "pmem: MAP_SYNC not supported here (no DAX); using the msync fallback");
        }
        let map = MmapOptions::new()
            .len(len_bytes as usize)
            .map_raw(&file)
            .map_err(|error| MediaError::from_io(&what, error))?;
        let (durability, pmem) = match tier {
            Tier::Pmem => (DurabilityPath::MsyncFallback, Some(PmemMapping::MsyncFallback)),
            _ => (DurabilityPath::SharedMemory, None),
        };
        let base = map.as_mut_ptr();
        let info = MediumInfo { tier, path: Some(path.to_path_buf()), durability };
        Ok(MmapRegion { mapping: Mapping::File { map, file }, base, len_bytes, info, pmem })
    }

    /// Tries MAP_SHARED_VALIDATE|MAP_SYNC, which only a DAX filesystem accepts (others answer
    /// EOPNOTSUPP or EINVAL, and the caller falls back to an ordinary mapping plus msync).
    fn map_sync(file: &File, len_bytes: u64) -> Option<*mut libc::c_void> {
        const MAP_SHARED_VALIDATE: libc::c_int = 0x03;
        const MAP_SYNC: libc::c_int = 0x80000;
        // SAFETY: a fresh mapping request with a null hint; the result is checked, and on success
        // it is owned by `Mapping::MapSync`, which unmaps it exactly once.
        let address = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len_bytes as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                MAP_SHARED_VALIDATE | MAP_SYNC,
                file.as_raw_fd(),
                0,
            )
        };
        (address != libc::MAP_FAILED).then_some(address)
    }

    pub fn pmem_mapping(&self) -> Option<PmemMapping> {
        self.pmem
    }

    fn msync(&self, offset: u64, len: u64) -> Result<(), MediaError> {
        let Mapping::File { map, .. } = &self.mapping else { return Ok(()) };
        let page = crate::PAGE_BYTES;
        let start = offset / page * page;
        let end = (offset + len).div_ceil(page) * page;
        let end = end.min(self.len_bytes);
        map.flush_range(start as usize, (end - start) as usize)
            .map_err(|error| MediaError::from_io(self.describe(), error))
    }

    fn describe(&self) -> String {
        self.info.path.as_ref().map_or_else(|| "anonymous region".to_string(), |path| path.display().to_string())
    }

    fn atomic_at(&self, offset: u64) -> &AtomicU64 {
        assert_in_range(self.len_bytes, offset, 8);
        assert_u64_aligned(offset);
        // SAFETY: in range and 8-aligned (mappings are page-aligned), and the mapping lives as
        // long as `self`; AtomicU64 has the layout of u64.
        unsafe { &*(self.base.add(offset as usize) as *const AtomicU64) }
    }
}

impl Medium for MmapRegion {
    fn info(&self) -> &MediumInfo {
        &self.info
    }

    fn len_bytes(&self) -> u64 {
        self.len_bytes
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MediaError> {
        assert_in_range(self.len_bytes, offset, buf.len() as u64);
        if let Some(file) = self.mapping.file().filter(|_| buf.len() >= PREAD_BYTES_MIN) {
            return file.read_exact_at(buf, offset).map_err(|error| MediaError::from_io(self.describe(), error));
        }
        // SAFETY: in range of the live mapping; the Medium contract excludes concurrent writes to
        // this range.
        unsafe {
            let source = self.base.add(offset as usize);
            prefetch_lines(source, buf.len());
            std::ptr::copy_nonoverlapping(source, buf.as_mut_ptr(), buf.len());
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), MediaError> {
        assert_in_range(self.len_bytes, offset, data.len() as u64);
        if let (Some(PmemMapping::MsyncFallback), Mapping::File { file, .. }) = (self.pmem, &self.mapping) {
            if data.len() >= PWRITE_BYTES_MIN {
                return file.write_all_at(data, offset).map_err(|error| MediaError::from_io(self.describe(), error));
            }
        }
        // SAFETY: in range of the live, writable mapping; the Medium contract excludes concurrent
        // access to this range.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.add(offset as usize), data.len()) };
        Ok(())
    }

    fn store_u64(&self, offset: u64, value: u64) -> Result<(), MediaError> {
        self.atomic_at(offset).store(value.to_le(), Ordering::Release);
        Ok(())
    }

    fn prefetch(&self, offset: u64, len: u64) {
        let Some(end) = offset.checked_add(len).filter(|&end| end <= self.len_bytes) else { return };
        if len > 0 {
            // Only the address is formed (in range of the live mapping); nothing is dereferenced.
            prefetch_line_range(self.base.wrapping_add(offset as usize), (end - offset) as usize);
        }
    }

    /// While scattered, page faults on the mapping read only the page they need. Without the
    /// advice each fault reads ahead the device's readahead window (8 MiB on this machine's
    /// disk): the record log's start, reading every write block's header, zero-filled a whole
    /// fallocated 16 GiB data file into the page cache (17 s and 16 GiB of RAM).
    fn expect_scattered_reads(&self, scattered: bool) {
        if self.mapping.file().is_none() {
            return;
        }
        let advice = if scattered { libc::MADV_RANDOM } else { libc::MADV_NORMAL };
        // SAFETY: madvise only changes the kernel's paging policy for this live mapping, which
        // starts at `base` and spans `len_bytes`; no memory is read or written.
        let status = unsafe { libc::madvise(self.base.cast(), self.len_bytes as usize, advice) };
        if status != 0 {
            // Advice only: without it the mapping works the same, with readahead.
            tracing::debug!(error = %std::io::Error::last_os_error(), advice, "madvise refused");
        }
    }

    fn persist(&self, offset: u64, len: u64) -> Result<(), MediaError> {
        assert_in_range(self.len_bytes, offset, len);
        match self.pmem {
            Some(PmemMapping::MapSync(instruction)) => {
                // SAFETY: the range was checked against the live mapping above.
                unsafe { write_back_lines(instruction, self.base.add(offset as usize), len as usize) };
                Ok(())
            }
            Some(PmemMapping::MsyncFallback) => self.msync(offset, len),
            None => Ok(()),
        }
    }
}

/// Asks for every cache line of a multi-line read at once, so that their misses overlap instead
/// of following one another (a random record read is bound by memory latency).
#[inline]
fn prefetch_lines(start: *const u8, len: usize) {
    if len > LINE_BYTES {
        prefetch_line_range(start, len);
    }
}

const LINE_BYTES: usize = 64;
/// Longer ranges are left to the hardware prefetcher (it follows sequential reads).
const PREFETCH_BYTES_MAX: usize = 4096;

/// Asks for the cache line holding `address` (a hint: any address is allowed, a stale or
/// unmapped one costs nothing). For DRAM structures whose next lookup is known before the lock
/// that guards them is taken; the only `unsafe` it needs lives here, with the media's.
#[inline]
pub fn prefetch_address(address: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch is a hint that never faults, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(address as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

/// Prefetches every cache line of `[start, start + len)`, for ranges up to PREFETCH_BYTES_MAX
/// (a hint, like `prefetch_address`).
#[inline]
pub fn prefetch_line_range(start: *const u8, len: usize) {
    if len > PREFETCH_BYTES_MAX {
        return;
    }
    let mut line = start as usize & !(LINE_BYTES - 1);
    let end = start as usize + len;
    while line < end {
        prefetch_address(line as *const u8);
        line += LINE_BYTES;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exercise(region: &MmapRegion) {
        region.write_at(100, b"hello").unwrap();
        let mut buf = [0u8; 5];
        region.read_at(100, &mut buf).unwrap();
        assert_eq!(&buf, b"hello");
        region.store_u64(4096, 0xdead_beef).unwrap();
        let mut word = [0u8; 8];
        region.read_at(4096, &mut word).unwrap();
        assert_eq!(u64::from_le_bytes(word), 0xdead_beef);
        // Large enough to take the pwrite path of the msync fallback; unaligned on purpose.
        let large: Vec<u8> = (0..PWRITE_BYTES_MIN + 1000).map(|i| i as u8).collect();
        region.write_at(10_001, &large).unwrap();
        let mut back = vec![0u8; large.len()];
        region.read_at(10_001, &mut back).unwrap();
        assert_eq!(back, large);
        region.persist(0, 20_000).unwrap();
        // A read large enough to take the pread path of file regions sees the stores above.
        let mut whole = vec![0u8; PREAD_BYTES_MIN + 4096];
        region.read_at(0, &mut whole).unwrap();
        assert_eq!(&whole[100..105], b"hello");
        assert_eq!(u64::from_le_bytes(whole[4096..4104].try_into().unwrap()), 0xdead_beef);
        assert_eq!(&whole[10_001..10_001 + large.len()], &large[..]);
    }

    /// Pages of `region` resident in the page cache, by mincore.
    fn resident_pages(region: &MmapRegion) -> usize {
        let page_bytes = 4096;
        let mut residency = vec![0u8; (region.len_bytes as usize).div_ceil(page_bytes)];
        // SAFETY: `base` and `len_bytes` describe the live mapping; mincore writes one byte per
        // page into a vector of exactly that many bytes.
        let status = unsafe { libc::mincore(region.base.cast(), region.len_bytes as usize, residency.as_mut_ptr()) };
        assert_eq!(status, 0, "mincore: {}", std::io::Error::last_os_error());
        residency.iter().filter(|&&page| page & 1 == 1).count()
    }

    #[test]
    fn scattered_small_reads_of_a_fresh_file_do_not_read_the_file_ahead() {
        let dir = tempfile::tempdir().unwrap();
        let stride_bytes = 8 << 20;
        let region = MmapRegion::file(&dir.path().join("region"), Tier::Pmem, 32 * stride_bytes).unwrap();
        region.expect_scattered_reads(true);
        let mut header = [0u8; 64];
        for offset in (0..region.len_bytes).step_by(stride_bytes as usize) {
            region.read_at(offset, &mut header).unwrap();
            assert_eq!(header, [0u8; 64], "a fresh file reads as zeroes");
        }
        region.expect_scattered_reads(false);
        // One page per read (the kernel may map a few neighbours already cached), where each
        // fault used to read ahead the disk's readahead window (8 MiB on the build machine).
        assert!(resident_pages(&region) <= 32 * 16, "{} pages resident", resident_pages(&region));
    }

    #[test]
    fn anonymous_region_reads_what_was_written() {
        let region = MmapRegion::anonymous(1 << 20).unwrap();
        exercise(&region);
        assert_eq!(region.info().durability, DurabilityPath::Volatile);
    }

    #[test]
    fn pmem_file_reports_its_durability_path_and_keeps_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("region");
        {
            let region = MmapRegion::file(&path, Tier::Pmem, 1 << 20).unwrap();
            exercise(&region);
            // ext4 and tmpfs have no DAX: the fallback must be detected, not assumed.
            assert!(matches!(
                region.info().durability,
                DurabilityPath::MsyncFallback | DurabilityPath::MapSyncCacheFlush
            ));
        }
        let region = MmapRegion::file(&path, Tier::Pmem, 1 << 20).unwrap();
        let mut word = [0u8; 8];
        region.read_at(4096, &mut word).unwrap();
        assert_eq!(u64::from_le_bytes(word), 0xdead_beef);
        let mut large = vec![0u8; PWRITE_BYTES_MIN + 1000];
        region.read_at(10_001, &mut large).unwrap();
        assert!(large.iter().enumerate().all(|(i, &byte)| byte == i as u8), "a pwritten range survives a reopen");
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn access_past_the_end_is_a_programmer_error() {
        let region = MmapRegion::anonymous(4096).unwrap();
        region.write_at(4090, b"too long").unwrap();
    }
}
