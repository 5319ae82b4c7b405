//! A page-aligned heap buffer: the memory side of an O_DIRECT transfer must start on a page.

use std::alloc::{alloc_zeroed, dealloc, Layout};

use crate::medium::PAGE_BYTES;

/// A zero-initialised, page-aligned heap buffer of a whole number of pages.
pub struct AlignedBuffer {
    pointer: *mut u8,
    layout: Layout,
}

impl AlignedBuffer {
    pub fn zeroed(len_bytes: usize) -> AlignedBuffer {
        assert!(len_bytes > 0 && len_bytes.is_multiple_of(PAGE_BYTES as usize));
        let layout = Layout::from_size_align(len_bytes, PAGE_BYTES as usize).expect("page-aligned layout");
        // SAFETY: the layout has a non-zero size.
        let pointer = unsafe { alloc_zeroed(layout) };
        assert!(!pointer.is_null(), "allocation of {len_bytes} bytes failed");
        AlignedBuffer { pointer, layout }
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the allocation is live, initialised (zeroed) and exactly `layout.size()` long.
        unsafe { std::slice::from_raw_parts(self.pointer, self.layout.size()) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.pointer, self.layout.size()) }
    }
}

// SAFETY: the buffer owns its allocation alone (like a `Box<[u8]>`), so moving it to another
// thread moves the only access to it.
unsafe impl Send for AlignedBuffer {}

// SAFETY: a shared reference gives only `as_slice` (reads); writing needs `&mut self`, which
// excludes every other reference, as for a `Box<[u8]>`.
unsafe impl Sync for AlignedBuffer {}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this very layout.
        unsafe { dealloc(self.pointer, self.layout) };
    }
}
