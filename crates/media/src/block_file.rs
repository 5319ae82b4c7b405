//! Block files for the ssd tier: page-aligned writes (O_DIRECT where the filesystem allows it),
//! fdatasync for durability, positioned reads.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use parking_lot::Mutex;

use crate::aligned::AlignedBuffer;
use crate::device_reads::DeviceReadQueue;
use crate::medium::{assert_in_range, DurabilityPath, Medium, MediumInfo, Tier, PAGE_BYTES};
use crate::MediaError;

/// O_DIRECT transfers of at least this many bytes from or to unaligned memory (whole write
/// blocks read by defragmentation, scans and recovery; the pages a flush writes out) go through
/// one bounce buffer the file keeps, instead of a fresh one each time: a fresh multi-MiB buffer is
/// new memory that the kernel must fault in and zero (about 6% of the server's CPU under a
/// pipelined SET load). The kept buffer is at most a power of two above the largest such transfer.
const KEPT_BOUNCE_BYTES_MIN: usize = 1 << 20;

pub struct BlockFile {
    /// Declared before `file`: dropping it waits for reads in flight on the file's descriptor.
    device_reads: Option<DeviceReadQueue>,
    file: File,
    len_bytes: u64,
    info: MediumInfo,
    direct_io: bool,
    kept_bounce: Mutex<Option<AlignedBuffer>>,
}

/// Whether `bytes` start on a page boundary, as O_DIRECT requires of the memory side.
fn in_aligned_memory(bytes: &[u8]) -> bool {
    bytes.as_ptr().align_offset(PAGE_BYTES as usize) == 0
}

impl BlockFile {
    /// Opens (creating sparse when missing) a block file of `len_bytes`, a multiple of the page.
    /// `prefer_direct_io` asks for O_DIRECT; a filesystem that refuses it (tmpfs) gets buffered
    /// I/O, and `info().durability` says which.
    pub fn open(path: &Path, len_bytes: u64, prefer_direct_io: bool) -> Result<BlockFile, MediaError> {
        assert!(len_bytes.is_multiple_of(PAGE_BYTES), "block file length must be a multiple of {PAGE_BYTES}");
        let what = path.display().to_string();
        let open = |direct: bool| {
            let mut options = OpenOptions::new();
            options.read(true).write(true).create(true).truncate(false);
            if direct {
                options.custom_flags(libc::O_DIRECT);
            }
            options.open(path)
        };
        let (file, direct_io) = match prefer_direct_io.then(|| open(true)) {
            Some(Ok(file)) => (file, true),
            Some(Err(error)) if error.raw_os_error() == Some(libc::EINVAL) => {
                tracing::info!(file = %what, "ssd: O_DIRECT refused by the filesystem; using buffered I/O");
                (open(false).map_err(|error| MediaError::from_io(&what, error))?, false)
            }
            Some(Err(error)) => return Err(MediaError::from_io(&what, error)),
            None => (open(false).map_err(|error| MediaError::from_io(&what, error))?, false),
        };
        let current_len = file.metadata().map_err(|error| MediaError::from_io(&what, error))?.len();
        if current_len < len_bytes {
            file.set_len(len_bytes).map_err(|error| MediaError::from_io(&what, error))?;
        }
        let info = MediumInfo {
            tier: Tier::Ssd,
            path: Some(path.to_path_buf()),
            durability: DurabilityPath::Fdatasync { direct_io },
        };
        let device_reads = direct_io.then(|| Self::open_device_reads(&file, len_bytes, &what)).flatten();
        Ok(BlockFile { device_reads, file, len_bytes, info, direct_io, kept_bounce: Mutex::new(None) })
    }

    /// A queue for reads that do not block their caller, when the kernel gives us io_uring.
    fn open_device_reads(file: &File, len_bytes: u64, what: &str) -> Option<DeviceReadQueue> {
        match DeviceReadQueue::new(file.as_raw_fd(), len_bytes, what.to_string()) {
            Ok(queue) => Some(queue),
            Err(error) => {
                tracing::info!(file = %what, %error, "ssd: io_uring unavailable; cache misses are read by blocking calls");
                None
            }
        }
    }

    pub fn direct_io(&self) -> bool {
        self.direct_io
    }

    fn describe(&self) -> String {
        self.info.path.as_ref().map(|path| path.display().to_string()).unwrap_or_default()
    }

    /// Runs `transfer` on a page-aligned buffer of `len_bytes`: the kept one for large transfers
    /// when no other transfer is using it, a fresh one otherwise.
    fn with_bounce<R>(&self, len_bytes: usize, transfer: impl FnOnce(&mut [u8]) -> R) -> R {
        if len_bytes >= KEPT_BOUNCE_BYTES_MIN {
            if let Some(mut kept) = self.kept_bounce.try_lock() {
                if kept.as_ref().is_none_or(|buffer| buffer.as_slice().len() < len_bytes) {
                    *kept = Some(AlignedBuffer::zeroed(len_bytes.next_power_of_two()));
                }
                let buffer = kept.as_mut().expect("set above");
                return transfer(&mut buffer.as_mut_slice()[..len_bytes]);
            }
        }
        transfer(AlignedBuffer::zeroed(len_bytes).as_mut_slice())
    }

    fn read_exact(&self, offset: u64, buf: &mut [u8]) -> Result<(), MediaError> {
        self.file.read_exact_at(buf, offset).map_err(|error| MediaError::from_io(self.describe(), error))
    }
}

impl Medium for BlockFile {
    fn info(&self) -> &MediumInfo {
        &self.info
    }

    fn len_bytes(&self) -> u64 {
        self.len_bytes
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MediaError> {
        assert_in_range(self.len_bytes, offset, buf.len() as u64);
        if buf.is_empty() {
            return Ok(());
        }
        let aligned = offset.is_multiple_of(PAGE_BYTES) && (buf.len() as u64).is_multiple_of(PAGE_BYTES) && in_aligned_memory(buf);
        if !self.direct_io || aligned {
            return self.read_exact(offset, buf);
        }
        // O_DIRECT needs aligned offset, length and memory: read the covering pages.
        let first = offset / PAGE_BYTES * PAGE_BYTES;
        let end = (offset + buf.len() as u64).div_ceil(PAGE_BYTES) * PAGE_BYTES;
        let skip = (offset - first) as usize;
        self.with_bounce((end - first) as usize, |bounce| {
            self.read_exact(first, bounce)?;
            buf.copy_from_slice(&bounce[skip..skip + buf.len()]);
            Ok(())
        })
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), MediaError> {
        assert_in_range(self.len_bytes, offset, data.len() as u64);
        assert!(
            offset.is_multiple_of(PAGE_BYTES) && (data.len() as u64).is_multiple_of(PAGE_BYTES),
            "block file writes are whole pages: offset {offset}, len {}",
            data.len()
        );
        let result = if self.direct_io && !in_aligned_memory(data) {
            self.with_bounce(data.len(), |bounce| {
                bounce.copy_from_slice(data);
                self.file.write_all_at(bounce, offset)
            })
        } else {
            self.file.write_all_at(data, offset)
        };
        result.map_err(|error| MediaError::from_io(self.describe(), error))
    }

    fn store_u64(&self, _offset: u64, _value: u64) -> Result<(), MediaError> {
        unreachable!("block files are written in whole pages; 8-byte publication is for regions")
    }

    fn persist(&self, _offset: u64, _len: u64) -> Result<(), MediaError> {
        self.file.sync_data().map_err(|error| MediaError::from_io(self.describe(), error))
    }

    fn write_alignment_bytes(&self) -> u64 {
        PAGE_BYTES
    }

    fn device_reads(&self) -> Option<&DeviceReadQueue> {
        self.device_reads.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_writes_and_unaligned_reads_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blocks");
        let file = BlockFile::open(&path, 64 * PAGE_BYTES, true).unwrap();
        let mut page = vec![0u8; 2 * PAGE_BYTES as usize];
        page[4000..4010].copy_from_slice(b"0123456789");
        file.write_at(PAGE_BYTES, &page).unwrap();
        file.persist(0, 0).unwrap();
        let mut buf = [0u8; 10];
        file.read_at(PAGE_BYTES + 4000, &mut buf).unwrap();
        assert_eq!(&buf, b"0123456789");
    }

    /// A page-aligned read into page-aligned memory goes to the file directly: no bounce buffer
    /// is taken, not even one kept from before.
    #[test]
    fn aligned_reads_into_aligned_memory_skip_the_bounce_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let file = BlockFile::open(&dir.path().join("blocks"), 1024 * PAGE_BYTES, true).unwrap();
        let len = 300 * PAGE_BYTES as usize;
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let mut memory = vec![0u8; len + PAGE_BYTES as usize];
        let shift = memory.as_ptr().align_offset(PAGE_BYTES as usize);
        memory[shift..shift + len].copy_from_slice(&data);
        file.write_at(4 * PAGE_BYTES, &memory[shift..shift + len]).unwrap();
        memory.fill(0);
        file.read_at(4 * PAGE_BYTES, &mut memory[shift..shift + len]).unwrap();
        assert_eq!(memory[shift..shift + len], data[..]);
        assert!(file.kept_bounce.lock().as_ref().is_none_or(|kept| kept.as_slice().len() < len), "read without the bounce buffer");
    }

    /// Large transfers go through the kept bounce buffer: one that grows, then is reused for a
    /// smaller transfer, must never leak one transfer's bytes into another.
    #[test]
    fn large_transfers_through_the_kept_bounce_buffer_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let file = BlockFile::open(&dir.path().join("blocks"), 1024 * PAGE_BYTES, true).unwrap();
        let pattern = |len: usize, seed: u8| (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect::<Vec<u8>>();
        for (pages, seed) in [(300usize, 1u8), (700, 2), (260, 3)] {
            let len = pages * PAGE_BYTES as usize;
            // One byte in, so that the data is not page-aligned and needs the bounce buffer.
            let mut unaligned = vec![0u8; len + 1];
            unaligned[1..].copy_from_slice(&pattern(len, seed));
            file.write_at(8 * PAGE_BYTES, &unaligned[1..]).unwrap();
            let mut back = vec![0u8; len - 100];
            file.read_at(8 * PAGE_BYTES + 50, &mut back).unwrap();
            assert_eq!(back, pattern(len, seed)[50..len - 50], "{pages} pages");
        }
    }

    #[test]
    #[should_panic(expected = "whole pages")]
    fn unaligned_write_is_a_programmer_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = BlockFile::open(&dir.path().join("blocks"), 4 * PAGE_BYTES, false).unwrap();
        file.write_at(10, b"x").unwrap();
    }
}
