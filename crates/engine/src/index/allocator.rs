//! First-fit allocation of table extents inside the index region. Lives in DRAM only: at attach
//! it is rebuilt from the partition directory (whatever no table uses is free).

use std::collections::BTreeMap;

pub(crate) const EXTENT_ALIGN_BYTES: u64 = 64;

pub(crate) struct ExtentAllocator {
    /// Free extents: offset → length, never adjacent (coalesced).
    free: BTreeMap<u64, u64>,
    used_bytes: u64,
}

impl ExtentAllocator {
    /// All of `[start, end)` free except the `used` extents (which must not overlap).
    pub(crate) fn with_used(start: u64, end: u64, used: &mut [(u64, u64)]) -> Option<ExtentAllocator> {
        used.sort_unstable();
        let mut free = BTreeMap::new();
        let mut cursor = start;
        let mut used_bytes = 0;
        for &(offset, len) in used.iter() {
            if offset < cursor || offset + len > end {
                return None;
            }
            if offset > cursor {
                free.insert(cursor, offset - cursor);
            }
            cursor = offset + len;
            used_bytes += len;
        }
        if cursor < end {
            free.insert(cursor, end - cursor);
        }
        Some(ExtentAllocator { free, used_bytes })
    }

    pub(crate) fn allocate(&mut self, len: u64) -> Option<u64> {
        let len = len.next_multiple_of(EXTENT_ALIGN_BYTES);
        let (&offset, &available) = self.free.iter().find(|(_, &available)| available >= len)?;
        self.free.remove(&offset);
        if available > len {
            self.free.insert(offset + len, available - len);
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
                self.free.remove(&next);
                len += next_len;
            }
        }
        if let Some((&previous, &previous_len)) = self.free.range(..offset).next_back() {
            assert!(previous + previous_len <= offset, "double free of an index extent");
            if previous + previous_len == offset {
                self.free.remove(&previous);
                offset = previous;
                len += previous_len;
            }
        }
        self.free.insert(offset, len);
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
    fn overlapping_used_extents_are_rejected() {
        assert!(ExtentAllocator::with_used(0, 1024, &mut [(0, 128), (64, 64)]).is_none());
        assert!(ExtentAllocator::with_used(0, 1024, &mut [(1000, 64)]).is_none());
    }
}
