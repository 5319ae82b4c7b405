//! Best-fit allocation of table extents inside the index region. Lives in DRAM only: at attach
//! it is rebuilt from the partition directory (whatever no table uses is free).
//!
//! Free extents are kept by offset (to coalesce on release) and by length (to find the smallest
//! that fits in O(log n)): tables grow thousands of times during a rebuild, and the old tables
//! they leave behind are many small holes that a first-fit scan would walk one by one.

use std::collections::{BTreeMap, BTreeSet};

pub(crate) const EXTENT_ALIGN_BYTES: u64 = 64;

pub(crate) struct ExtentAllocator {
    /// Free extents: offset → length, never adjacent (coalesced).
    free: BTreeMap<u64, u64>,
    /// The same extents as (length, offset).
    free_by_length: BTreeSet<(u64, u64)>,
    used_bytes: u64,
}

impl ExtentAllocator {
    /// All of `[start, end)` free except the `used` extents (which must not overlap). Each is
    /// taken rounded up to `EXTENT_ALIGN_BYTES`, as `allocate` handed it out, so that every free
    /// extent starts aligned.
    pub(crate) fn with_used(start: u64, end: u64, used: &mut [(u64, u64)]) -> Option<ExtentAllocator> {
        used.sort_unstable();
        let mut allocator = ExtentAllocator { free: BTreeMap::new(), free_by_length: BTreeSet::new(), used_bytes: 0 };
        let mut cursor = start;
        for &(offset, len) in used.iter() {
            let len = len.next_multiple_of(EXTENT_ALIGN_BYTES);
            if offset < cursor || offset + len > end {
                return None;
            }
            if offset > cursor {
                allocator.insert_free(cursor, offset - cursor);
            }
            cursor = offset + len;
            allocator.used_bytes += len;
        }
        if cursor < end {
            allocator.insert_free(cursor, end - cursor);
        }
        Some(allocator)
    }

    fn insert_free(&mut self, offset: u64, len: u64) {
        self.free.insert(offset, len);
        self.free_by_length.insert((len, offset));
    }

    fn remove_free(&mut self, offset: u64, len: u64) {
        self.free.remove(&offset);
        self.free_by_length.remove(&(len, offset));
    }

    pub(crate) fn allocate(&mut self, len: u64) -> Option<u64> {
        let len = len.next_multiple_of(EXTENT_ALIGN_BYTES);
        let &(available, offset) = self.free_by_length.range((len, 0)..).next()?;
        self.remove_free(offset, available);
        if available > len {
            self.insert_free(offset + len, available - len);
        }
        self.used_bytes += len;
        Some(offset)
    }

    pub(crate) fn release(&mut self, offset: u64, len: u64) {
        let mut offset = offset;
        let mut len = len.next_multiple_of(EXTENT_ALIGN_BYTES);
        self.used_bytes -= len;
        if let Some((&next, &next_len)) = self.free.range(offset + len..).next() {
            if next == offset + len {
                self.remove_free(next, next_len);
                len += next_len;
            }
        }
        if let Some((&previous, &previous_len)) = self.free.range(..offset).next_back() {
            assert!(previous + previous_len <= offset, "double free of an index extent");
            if previous + previous_len == offset {
                self.remove_free(previous, previous_len);
                offset = previous;
                len += previous_len;
            }
        }
        self.insert_free(offset, len);
    }

    pub(crate) fn used_bytes(&self) -> u64 {
        self.used_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn released_extents_coalesce_and_are_reused() {
        let mut allocator = ExtentAllocator::with_used(0, 1024, &mut []).unwrap();
        let a = allocator.allocate(100).unwrap();
        let b = allocator.allocate(100).unwrap();
        assert_eq!((a, b), (0, 128));
        allocator.release(a, 100);
        allocator.release(b, 100);
        assert_eq!(allocator.allocate(1024), Some(0));
        assert_eq!(allocator.allocate(1), None);
    }

    #[test]
    fn the_smallest_free_extent_that_fits_is_taken() {
        let mut allocator = ExtentAllocator::with_used(0, 4096, &mut [(256, 64), (576, 64)]).unwrap();
        // Free: [0, 256), [320, 576), [640, 4096).
        assert_eq!(allocator.allocate(512), Some(640));
        assert_eq!(allocator.allocate(200), Some(0));
        assert_eq!(allocator.allocate(256), Some(320));
        assert_eq!(allocator.allocate(64), Some(1152));
        assert_eq!(allocator.used_bytes(), 64 + 64 + 512 + 256 + 256 + 64);
    }

    #[test]
    fn extents_after_used_ones_of_unaligned_length_start_aligned() {
        // A table of 39 slots of 32 bytes (1,248 bytes) was allocated 1,280.
        let mut allocator = ExtentAllocator::with_used(0, 4096, &mut [(0, 1248), (2048, 64)]).unwrap();
        assert_eq!(allocator.allocate(512), Some(1280));
        allocator.release(0, 1248);
        assert_eq!(allocator.used_bytes(), 512 + 64);
    }

    #[test]
    fn overlapping_used_extents_are_rejected() {
        assert!(ExtentAllocator::with_used(0, 1024, &mut [(0, 128), (64, 64)]).is_none());
        assert!(ExtentAllocator::with_used(0, 1024, &mut [(1000, 64)]).is_none());
    }
}
