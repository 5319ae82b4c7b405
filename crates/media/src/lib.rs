//! Media layer: the only place that touches memory mappings, files and CPU cache-line flushes
//! (and the process's transparent huge pages, [`disable_transparent_huge_pages`]).
//!
//! Everything above sees media through [`Medium`] (a fixed-length byte space with an explicit
//! "make durable" call) and [`MediaProvider`] (opens named media of a tier). The simulated
//! implementation ([`sim`]) keeps written and durable bytes apart so that every layer above can be
//! tested for power cuts, torn writes and I/O errors.

mod aligned;
mod block_file;
mod device_reads;
mod error;
mod flush;
mod huge_pages;
mod medium;
mod process_cpu;
mod provider;
mod region;
pub mod sim;

pub use aligned::AlignedBuffer;
pub use block_file::BlockFile;
pub use device_reads::{CompletedRead, DeviceRead, DeviceReadCounts, DeviceReadQueue, DEVICE_READS_IN_FLIGHT_MAX, DEVICE_READS_QUEUED_MAX, DEVICE_READ_BYTES_IN_FLIGHT_MAX, DEVICE_READ_BYTES_MAX};
pub use error::MediaError;
pub use flush::{cache_flush_instruction, CacheFlushInstruction};
pub use huge_pages::{disable_transparent_huge_pages, return_heap_memory_in_whole_huge_pages, transparent_huge_pages_disabled};
pub use process_cpu::{cpu_times, CpuOf, CpuTimes};
pub use medium::{DurabilityPath, Medium, MediumInfo, Tier, PAGE_BYTES};
pub use provider::{FsProvider, MediaProvider, OpenedMedium};
pub use region::{prefetch_address, prefetch_line_range, MmapRegion, PmemMapping};
