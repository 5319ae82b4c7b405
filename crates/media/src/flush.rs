//! CPU cache-line write-back for persistent-memory mappings opened with MAP_SYNC.

pub const CACHE_LINE_BYTES: usize = 64;

/// The best cache-line write-back instruction this CPU offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheFlushInstruction {
    /// Writes the line back and keeps it cached.
    Clwb,
    /// Writes the line back and evicts it; weakly ordered.
    Clflushopt,
    /// Writes the line back and evicts it; strongly ordered (every x86-64 has it).
    Clflush,
    /// Not an x86-64 CPU: persistent-memory mappings fall back to msync.
    Unavailable,
}

pub fn cache_flush_instruction() -> CacheFlushInstruction {
    #[cfg(target_arch = "x86_64")]
    {
        // cpuid leaf 7 sub-leaf 0 exists on every x86-64 CPU that Rust targets.
        let leaf7 = core::arch::x86_64::__cpuid_count(7, 0);
        const CLFLUSHOPT_BIT: u32 = 1 << 23;
        const CLWB_BIT: u32 = 1 << 24;
        if leaf7.ebx & CLWB_BIT != 0 {
            CacheFlushInstruction::Clwb
        } else if leaf7.ebx & CLFLUSHOPT_BIT != 0 {
            CacheFlushInstruction::Clflushopt
        } else {
            CacheFlushInstruction::Clflush
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        CacheFlushInstruction::Unavailable
    }
}

/// Writes back every cache line overlapping `[start, start + len)` and fences, so the stores
/// before this call reach the persistence domain before any store after it.
///
/// # Safety
/// `start..start + len` must lie inside one live mapping owned by the caller.
pub(crate) unsafe fn write_back_lines(instruction: CacheFlushInstruction, start: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let first_line = (start as usize) & !(CACHE_LINE_BYTES - 1);
        let end = start as usize + len;
        let mut line = first_line;
        while line < end {
            // SAFETY: `line` lies in the caller's mapping (contract above); the flush
            // instructions only write back cache contents and never fault on mapped memory.
            unsafe {
                match instruction {
                    CacheFlushInstruction::Clwb => {
                        core::arch::asm!("clwb [{0}]", in(reg) line, options(nostack, preserves_flags))
                    }
                    CacheFlushInstruction::Clflushopt => {
                        core::arch::asm!("clflushopt [{0}]", in(reg) line, options(nostack, preserves_flags))
                    }
                    CacheFlushInstruction::Clflush | CacheFlushInstruction::Unavailable => {
                        core::arch::x86_64::_mm_clflush(line as *const u8)
                    }
                }
            }
            line += CACHE_LINE_BYTES;
        }
        // SAFETY: sfence has no memory operands.
        unsafe { core::arch::x86_64::_mm_sfence() };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (instruction, start, len);
        unreachable!("MAP_SYNC mappings are only used on x86-64");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_back_runs_on_ordinary_memory() {
        let buffer = vec![7u8; 4096];
        let instruction = cache_flush_instruction();
        assert_ne!(instruction, CacheFlushInstruction::Unavailable);
        // SAFETY: the range is exactly the live buffer.
        unsafe { write_back_lines(instruction, buffer.as_ptr().wrapping_add(3), 1000) };
        assert!(buffer.iter().all(|&byte| byte == 7));
    }
}
