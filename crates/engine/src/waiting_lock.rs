//! A readers-writer lock whose waiters spin briefly and then sleep, never calling `sched_yield`.
//!
//! parking_lot's locks spin a few rounds and then call `sched_yield` up to seven times before
//! they sleep. On a machine with fewer cores than runnable threads (the server's two network
//! workers, its committers and its maintenance thread, and a client on the same two cores), a
//! yield hands the core to another runnable thread for the rest of its time slice, and every
//! connection the yielding worker serves waits with it. Fifty clients writing fields of one
//! hash (one key, so one index partition) made 145,000–210,000 such yields per 300,000 HSETs.
//! Here a waiter retries `SPIN_ATTEMPTS` times, a spin-loop pause apart (a few microseconds:
//! critical sections are shorter than that unless their holder lost its core), and then sleeps
//! on the standard library's futex lock until the holder wakes it. Measured: docs/design/
//! commit.md, "Waiting for a partition lock".

use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError, TryLockResult};

/// Attempts to take a lock, a spin-loop pause apart, before a waiter sleeps.
const SPIN_ATTEMPTS: u32 = 256;

/// Tries `attempt` up to `SPIN_ATTEMPTS` times; None when the lock stayed taken.
fn spin<G>(attempt: impl Fn() -> TryLockResult<G>) -> Option<G> {
    for _ in 0..SPIN_ATTEMPTS {
        if let Some(guard) = taken(attempt()) {
            return Some(guard);
        }
        std::hint::spin_loop();
    }
    None
}

/// The guard of a successful attempt, poisoned or not; None when the lock was taken.
fn taken<G>(attempt: TryLockResult<G>) -> Option<G> {
    match attempt {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// `std::sync::RwLock` without poisoning: a panic while the lock is held is a programmer error
/// that has already been reported, and what the lock guards is checked by assertions, not by
/// poison flags.
#[derive(Debug, Default)]
pub(crate) struct WaitingRwLock<T>(RwLock<T>);

impl<T> WaitingRwLock<T> {
    pub(crate) fn new(value: T) -> WaitingRwLock<T> {
        WaitingRwLock(RwLock::new(value))
    }

    pub(crate) fn read(&self) -> RwLockReadGuard<'_, T> {
        spin(|| self.0.try_read()).unwrap_or_else(|| self.0.read().unwrap_or_else(PoisonError::into_inner))
    }

    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, T> {
        spin(|| self.0.try_write()).unwrap_or_else(|| self.0.write().unwrap_or_else(PoisonError::into_inner))
    }

    /// The read lock if it can be had at once (no writer holds it or waits for it).
    pub(crate) fn try_read(&self) -> Option<RwLockReadGuard<'_, T>> {
        taken(self.0.try_read())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[test]
    fn try_read_fails_only_while_a_writer_holds_the_lock() {
        let lock = WaitingRwLock::new(5);
        {
            let _reader = lock.read();
            assert_eq!(lock.try_read().as_deref(), Some(&5), "readers share the lock");
        }
        let mut writer = lock.write();
        *writer = 6;
        assert!(lock.try_read().is_none());
        drop(writer);
        assert_eq!(*lock.read(), 6);
    }

    #[test]
    fn a_waiter_past_its_spins_sleeps_until_the_holder_lets_go() {
        let lock = Arc::new(WaitingRwLock::new(0u32));
        let writer = lock.write();
        let waiting = Arc::clone(&lock);
        let reader = std::thread::spawn(move || *waiting.read());
        std::thread::sleep(Duration::from_millis(50));
        assert!(!reader.is_finished(), "the reader waits while the writer holds the lock");
        let mut writer = writer;
        *writer = 7;
        drop(writer);
        assert_eq!(reader.join().unwrap(), 7);
    }

    #[test]
    fn a_lock_held_by_a_thread_that_panicked_is_still_usable() {
        let lock = Arc::new(WaitingRwLock::new(1));
        let held = Arc::clone(&lock);
        let panicked = std::thread::spawn(move || {
            let _guard = held.write();
            panic!("while holding the lock");
        })
        .join();
        assert!(panicked.is_err());
        *lock.write() += 1;
        assert_eq!(*lock.read(), 2);
        assert!(lock.try_read().is_some());
    }
}
