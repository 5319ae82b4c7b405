use std::fmt;
use std::path::PathBuf;

use crate::{DeviceReadQueue, MediaError};

/// Granularity of block-file I/O and of torn block writes.
pub const PAGE_BYTES: u64 = 4096;

/// The memory tiers an operator can place a structure on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    /// Anonymous memory: survives nothing.
    Dram,
    /// A memory-mapped file in /dev/shm: survives a process crash, not a reboot.
    Shmem,
    /// A memory-mapped file made durable by cache-line flushes (DAX) or msync (fallback).
    Pmem,
    /// A block file written in aligned pages and made durable with fdatasync.
    Ssd,
}

impl Tier {
    pub fn name(self) -> &'static str {
        match self {
            Tier::Dram => "dram",
            Tier::Shmem => "shmem",
            Tier::Pmem => "pmem",
            Tier::Ssd => "ssd",
        }
    }

    pub fn parse(text: &str) -> Option<Tier> {
        match text {
            "dram" => Some(Tier::Dram),
            "shmem" => Some(Tier::Shmem),
            "pmem" => Some(Tier::Pmem),
            "ssd" => Some(Tier::Ssd),
            _ => None,
        }
    }

    /// Whether bytes on this tier survive the death of the process that wrote them.
    pub fn survives_process_crash(self) -> bool {
        !matches!(self, Tier::Dram)
    }

    /// Whether bytes made durable on this tier survive a power cut.
    pub fn survives_power_cut(self) -> bool {
        matches!(self, Tier::Pmem | Tier::Ssd)
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.name())
    }
}

/// How `persist` really makes bytes durable on a medium: reported in logs and INFO so that the
/// server never claims a durability the medium does not give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DurabilityPath {
    /// Anonymous memory: `persist` is a no-op and nothing survives.
    Volatile,
    /// tmpfs mapping: `persist` is a no-op; survives process crash only.
    SharedMemory,
    /// DAX mapping opened with MAP_SYNC: CPU cache-line flushes plus a store fence.
    MapSyncCacheFlush,
    /// Ordinary file mapping (no DAX): msync of the dirty range.
    MsyncFallback,
    /// Block file: fdatasync, with O_DIRECT writes when `direct_io`.
    Fdatasync { direct_io: bool },
    /// The simulated medium of the tests.
    Simulated,
}

impl fmt::Display for DurabilityPath {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            DurabilityPath::Volatile => "volatile (anonymous memory)",
            DurabilityPath::SharedMemory => "shared memory (survives process crash, not power loss)",
            DurabilityPath::MapSyncCacheFlush => "DAX with MAP_SYNC (cache-line flush + sfence)",
            DurabilityPath::MsyncFallback => "msync fallback (no DAX: MAP_SYNC unsupported)",
            DurabilityPath::Fdatasync { direct_io: true } => "fdatasync with O_DIRECT writes",
            DurabilityPath::Fdatasync { direct_io: false } => "fdatasync (buffered writes)",
            DurabilityPath::Simulated => "simulated",
        };
        formatter.write_str(text)
    }
}

#[derive(Clone, Debug)]
pub struct MediumInfo {
    pub tier: Tier,
    pub path: Option<PathBuf>,
    pub durability: DurabilityPath,
}

/// A fixed-length byte space on one tier.
///
/// Concurrency contract: callers never write the same byte range from two threads at once, and
/// never read a range while another thread writes it (the engine's locks guarantee this); the
/// aligned 8-byte `store_u64` is atomic: never torn by a crash or seen half-done by a reader.
pub trait Medium: Send + Sync {
    fn info(&self) -> &MediumInfo;
    fn len_bytes(&self) -> u64;
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MediaError>;
    /// Writes bytes; they are visible to reads at once and durable only after `persist`.
    /// Block files require `write_alignment_bytes()` alignment of offset and length.
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), MediaError>;
    /// Atomic aligned 8-byte store: never torn, by a crash or by a concurrent reader.
    fn store_u64(&self, offset: u64, value: u64) -> Result<(), MediaError>;
    /// Makes every byte written in `[offset, offset + len)` durable before returning.
    fn persist(&self, offset: u64, len: u64) -> Result<(), MediaError>;
    /// Hands writes that the medium still buffers inside the process to the operating system,
    /// without waiting for durability (what durability `none` relies on to survive a process
    /// crash). Media that write through at once need nothing here.
    fn write_back(&self) -> Result<(), MediaError> {
        Ok(())
    }
    fn write_alignment_bytes(&self) -> u64 {
        1
    }
    /// A hint that `[offset, offset + len)` will be read soon: memory media start loading its
    /// cache lines without waiting for them, so that the misses of several reads overlap.
    /// Never fails, whatever the range; media that cannot prefetch ignore it.
    fn prefetch(&self, _offset: u64, _len: u64) {}
    /// A hint that the small reads that follow land far apart (`true`: reading ahead around
    /// each would only waste I/O and memory), or no longer do (`false`, the default). Large
    /// reads read ahead either way. Media without readahead ignore it.
    fn expect_scattered_reads(&self, _scattered: bool) {}
    /// Reads that can be started without blocking the caller and taken when done, on media
    /// whose reads wait for a device (an O_DIRECT block file with io_uring); None on media read
    /// at memory speed or only by blocking calls.
    fn device_reads(&self) -> Option<&DeviceReadQueue> {
        None
    }
}

/// Checks the arguments of a media access: a violation is a bug in the caller.
pub(crate) fn assert_in_range(medium_len: u64, offset: u64, len: u64) {
    assert!(
        offset.checked_add(len).is_some_and(|end| end <= medium_len),
        "media access out of range: offset {offset} + len {len} > {medium_len}"
    );
}

pub(crate) fn assert_u64_aligned(offset: u64) {
    assert!(offset.is_multiple_of(8), "8-byte access at unaligned offset {offset}");
}
