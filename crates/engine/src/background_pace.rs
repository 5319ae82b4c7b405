//! Background threads (the committers and the maintenance thread) give the core back every
//! `BACKGROUND_BURST_MAX` of work, so that network workers and clients sharing the cores do not
//! wait behind a long burst (docs/design/commit.md, "Background work in short bursts").
//!
//! The scheduler lets a thread it has picked run until its time slice ends (a 4 ms tick here)
//! unless it sleeps: a publication of a whole write block (about 4 ms of work), a round of
//! defragmentation or the periodic flush's publication (tens of milliseconds) held one of two
//! cores that long, and the clients whose requests waited behind it made the 99th percentile.
//! `pace` yields only while the calling thread is marked (`mark_background`): a network worker
//! that runs a flush itself must not give its core away (its connections would wait with it),
//! nor a committer whose flush writers wait for (durability `always`, writes held back) or that
//! must catch up with a backlog. No background thread paces once a quarter of the data tier's
//! blocks are in use (`Namespace::background_may_pace`): paced regardless, defragmentation fell
//! behind the writers of big hashes, and publication behind overwrites that filled a small tier.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// Work a background thread does before it lets other runnable threads go first.
pub(crate) const BACKGROUND_BURST_MAX: Duration = Duration::from_micros(250);

thread_local! {
    /// On a background thread: when its current burst of work began.
    static BURST_STARTED: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Marks the calling thread's work from now on as background work, whose burst begins now, or
/// as work others wait for, which `pace` does not hold up. Called again after each wait, so
/// that time asleep does not count as work.
pub(crate) fn mark_background(background: bool) {
    BURST_STARTED.set(background.then(Instant::now));
}

/// Called by background work at points where it holds no lock: on a thread marked background
/// whose burst has lasted `BACKGROUND_BURST_MAX`, yields the core to any runnable thread and
/// starts a new burst. Does nothing on other threads.
pub(crate) fn pace() {
    let Some(started) = BURST_STARTED.get() else { return };
    if started.elapsed() >= BACKGROUND_BURST_MAX {
        std::thread::yield_now();
        mark_background(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_marked_threads_have_bursts() {
        std::thread::spawn(|| {
            pace();
            assert!(BURST_STARTED.get().is_none(), "an unmarked thread is left alone");
            mark_background(true);
            let started = BURST_STARTED.get().expect("marked");
            std::thread::sleep(BACKGROUND_BURST_MAX * 2);
            pace();
            assert!(BURST_STARTED.get().expect("still marked") > started, "a long burst ends at a pace point");
            mark_background(false);
            pace();
            assert!(BURST_STARTED.get().is_none(), "unmarked again");
        })
        .join()
        .unwrap();
    }
}
