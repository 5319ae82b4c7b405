//! Transparent huge pages (THP) for the process's anonymous memory, as `hybridkv serve
//! --huge-pages` chooses (docs/design/server.md, "Huge pages").
//!
//! The allocator (mimalloc, `crates/hybridkv/src/main.rs`) advises `MADV_HUGEPAGE` on its arenas
//! and by default returns freed memory to the kernel in 64 KiB pieces. Where THP backs that
//! memory, the kernel's khugepaged later collapses a 2 MiB range with holes back into one huge
//! page (by default up to 511 of its 512 small pages may be empty), making the freed pieces
//! resident again: under a steady load the resident memory then grows in steps with no
//! allocation behind it (docs/RELIABILITY.md, "Soak"). So either THP is off for the process, or
//! the allocator gives memory back only in whole huge pages, which leaves no holes to collapse.

use std::io;

use libmimalloc_sys::mi_option_t;

/// The mimalloc version whose option numbers are below (v3.3.2, as libmimalloc-sys 0.1.49
/// builds it): options are positions in a C enum of `mimalloc.h`, which another version may
/// number differently.
const MIMALLOC_VERSION_OF_OPTION_NUMBERS: i32 = 30302;
/// `mi_option_minimal_purge_size`, in KiB: freed memory goes back to the kernel only in runs of
/// at least this size.
const MIMALLOC_OPTION_MINIMAL_PURGE_SIZE: mi_option_t = 44;
/// Where the kernel tells the size of a transparent huge page, in bytes.
const HUGE_PAGE_BYTES_PATH: &str = "/sys/kernel/mm/transparent_hugepage/hpage_pmd_size";
/// The system's THP mode for anonymous memory: `always`, `madvise` or `never`, the one in force
/// in brackets.
const HUGE_PAGE_MODE_PATH: &str = "/sys/kernel/mm/transparent_hugepage/enabled";
const KIB: u64 = 1024;

/// Lets the allocator's huge pages stay whole: from now on it gives freed memory back to the
/// kernel only in runs of at least one transparent huge page. Returns the huge page's size in
/// bytes. Fails, changing nothing, when the kernel has no transparent huge pages or they are set
/// to `never`, or the linked mimalloc is not the version whose option numbers this module knows.
/// Call it before starting other threads: mimalloc stores an option with plain writes.
pub fn return_heap_memory_in_whole_huge_pages() -> io::Result<u64> {
    // SAFETY: mi_version only returns a constant of the linked library.
    let version = unsafe { libmimalloc_sys::mi_version() };
    if version != MIMALLOC_VERSION_OF_OPTION_NUMBERS {
        return Err(io::Error::other(format!(
            "mimalloc {version} is linked; its option numbers are known for {MIMALLOC_VERSION_OF_OPTION_NUMBERS} only"
        )));
    }
    let modes = std::fs::read_to_string(HUGE_PAGE_MODE_PATH)?;
    if modes.contains("[never]") {
        return Err(io::Error::other(format!("{HUGE_PAGE_MODE_PATH} is set to never")));
    }
    let text = std::fs::read_to_string(HUGE_PAGE_BYTES_PATH)?;
    let huge_page_bytes: u64 = text.trim().parse().map_err(|_| io::Error::other(format!("{HUGE_PAGE_BYTES_PATH}: not a size: {text:?}")))?;
    if huge_page_bytes == 0 || !huge_page_bytes.is_multiple_of(KIB) {
        return Err(io::Error::other(format!("{HUGE_PAGE_BYTES_PATH}: unexpected huge page size {huge_page_bytes}")));
    }
    let kib = (huge_page_bytes / KIB) as libc::c_long;
    // SAFETY: mi_option_set writes an integer into the allocator's own option table and reads no
    // memory of ours; the option number matches the linked version (checked above), and the
    // caller has not started other threads that could read the option meanwhile.
    unsafe { libmimalloc_sys::mi_option_set(MIMALLOC_OPTION_MINIMAL_PURGE_SIZE, kib) };
    // SAFETY: reads the same option back from the allocator's table.
    let set = unsafe { libmimalloc_sys::mi_option_get(MIMALLOC_OPTION_MINIMAL_PURGE_SIZE) };
    assert_eq!(set, kib, "mimalloc keeps the minimal purge size it was given");
    Ok(huge_page_bytes)
}

/// Turns transparent huge pages off for this whole process (`PR_SET_THP_DISABLE`): page faults
/// and khugepaged then use small pages only, whatever the system's THP setting
/// (`/sys/kernel/mm/transparent_hugepage/enabled`) and any `MADV_HUGEPAGE` advice. Inherited by
/// children. Huge pages that already back memory stay until that memory is freed.
pub fn disable_transparent_huge_pages() -> io::Result<()> {
    // SAFETY: PR_SET_THP_DISABLE takes plain integer arguments and touches no memory of ours. They
    // are passed as full words: prctl is variadic, and the kernel rejects unused ones not zero.
    let status = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong) };
    if status != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether transparent huge pages are off for this process (`PR_GET_THP_DISABLE`).
pub fn transparent_huge_pages_disabled() -> io::Result<bool> {
    // SAFETY: PR_GET_THP_DISABLE takes no pointer; the flag is the return value.
    let status = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong) };
    if status < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(status == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_linked_mimalloc_numbers_its_options_as_this_module_expects() {
        // SAFETY: as in return_heap_memory_in_whole_huge_pages.
        let version = unsafe { libmimalloc_sys::mi_version() };
        assert_eq!(version, MIMALLOC_VERSION_OF_OPTION_NUMBERS, "re-read the option numbers from the new mimalloc.h");
        let never = std::fs::read_to_string(HUGE_PAGE_MODE_PATH).expect("THP mode").contains("[never]");
        // Other tests run on other threads, but this process allocates with the system allocator:
        // nothing else reads mimalloc's options.
        match return_heap_memory_in_whole_huge_pages() {
            Ok(huge_page_bytes) => {
                assert!(!never, "refused when the system's setting is never");
                assert!(huge_page_bytes >= 2 << 20, "a huge page is at least 2 MiB on x86_64");
            }
            Err(error) => assert!(never, "{error}"),
        }
    }

    #[test]
    fn disabling_is_reported_by_the_kernel() {
        disable_transparent_huge_pages().expect("PR_SET_THP_DISABLE");
        assert!(transparent_huge_pages_disabled().expect("PR_GET_THP_DISABLE"));
    }
}
