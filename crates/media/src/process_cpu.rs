//! The CPU time this process and its waited-for children used (`getrusage`), for INFO cpu.

use std::io;
use std::time::Duration;

/// CPU time in system and in user mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    pub system: Duration,
    pub user: Duration,
}

/// Which processes `getrusage` sums.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuOf {
    /// Every thread of this process.
    ThisProcess,
    /// The children this process has waited for.
    Children,
}

pub fn cpu_times(of: CpuOf) -> io::Result<CpuTimes> {
    let who = match of {
        CpuOf::ThisProcess => libc::RUSAGE_SELF,
        CpuOf::Children => libc::RUSAGE_CHILDREN,
    };
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is a writable rusage the kernel fills whole on success; it is read only then.
    let usage = unsafe {
        if libc::getrusage(who, usage.as_mut_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
        usage.assume_init()
    };
    let duration = |time: libc::timeval| Duration::new(time.tv_sec.max(0) as u64, (time.tv_usec.clamp(0, 999_999) * 1000) as u32);
    Ok(CpuTimes { system: duration(usage.ru_stime), user: duration(usage.ru_utime) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_cpu_time_grows_while_it_computes() {
        let total = |times: CpuTimes| times.user + times.system;
        let before = total(cpu_times(CpuOf::ThisProcess).unwrap());
        let started = std::time::Instant::now();
        let mut sum = 0u64;
        while total(cpu_times(CpuOf::ThisProcess).unwrap()) <= before {
            assert!(started.elapsed() < Duration::from_secs(10), "no CPU time counted in 10 s of work");
            for number in 0..100_000u64 {
                sum = std::hint::black_box(sum.wrapping_add(number));
            }
        }
        assert!(cpu_times(CpuOf::Children).is_ok());
    }
}
