//! Transparent huge pages (THP) for the process's anonymous memory: off for the server.
//!
//! The allocator (mimalloc, `crates/hybridkv/src/main.rs`) returns freed memory to the kernel in
//! 64 KiB pieces. Where THP may back that memory, the kernel's khugepaged later collapses a 2 MiB
//! range with holes back into one huge page (by default up to 511 of its 512 small pages may be
//! empty), making the freed pieces resident again: under a steady load the resident memory then
//! grows in steps with no allocation behind it (docs/RELIABILITY.md, "Soak").

use std::io;

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
    fn disabling_is_reported_by_the_kernel() {
        disable_transparent_huge_pages().expect("PR_SET_THP_DISABLE");
        assert!(transparent_huge_pages_disabled().expect("PR_GET_THP_DISABLE"));
    }
}
