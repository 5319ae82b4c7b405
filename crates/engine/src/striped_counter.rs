//! A statistics counter that many threads add to without contending for one cache line.
//!
//! Every request added to a few process-wide counters (commands, hits, writes, bytes in and
//! out): with one `AtomicU64` each, the two workers took turns owning each counter's cache line,
//! a cross-core transfer per add. Here each thread adds to its own stripe, and a reader sums
//! the stripes: adds stay on the adding core, reads (INFO, metrics, the load-ahead gate) pay.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Stripes per counter: at least the threads that add to counters at once here (a worker per
/// core, the committers, the maintenance thread); threads beyond it share stripes, which stays
/// correct and only costs speed.
pub const COUNTER_STRIPES: usize = 8;

/// Two cache lines: x86's adjacent-line prefetcher moves lines in pairs, so stripes 64 bytes
/// apart would still be fetched together.
#[repr(align(128))]
#[derive(Default)]
struct Stripe(AtomicU64);

static NEXT_THREAD_STRIPE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's stripe, handed out round-robin at its first add.
    static THREAD_STRIPE: usize = NEXT_THREAD_STRIPE.fetch_add(1, Ordering::Relaxed) % COUNTER_STRIPES;
}

#[derive(Default)]
pub struct StripedCounter {
    stripes: [Stripe; COUNTER_STRIPES],
}

/// The calling thread's stripe (below `COUNTER_STRIPES`): a table of counters kept once per
/// stripe, each thread adding to its own copy, is striped as these counters are.
pub fn thread_stripe() -> usize {
    THREAD_STRIPE.with(|stripe| *stripe)
}

impl StripedCounter {
    pub fn add(&self, amount: u64) {
        self.stripes[thread_stripe()].0.fetch_add(amount, Ordering::Relaxed);
    }

    /// The sum of every add so far (adds racing with the read may or may not be in it).
    pub fn get(&self) -> u64 {
        self.stripes
            .iter()
            .map(|stripe| stripe.0.load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }

    /// Sets the counter to zero (CONFIG RESETSTAT); adds racing with it may survive it.
    pub fn reset(&self) {
        for stripe in &self.stripes {
            stripe.0.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_from_many_threads_all_count() {
        let counter = StripedCounter::default();
        std::thread::scope(|scope| {
            for _ in 0..COUNTER_STRIPES + 3 {
                scope.spawn(|| (0..1000).for_each(|_| counter.add(2)));
            }
        });
        assert_eq!(counter.get(), 2 * 1000 * (COUNTER_STRIPES as u64 + 3));
        counter.reset();
        assert_eq!(counter.get(), 0);
    }

    #[test]
    fn stripes_do_not_share_cache_lines() {
        assert_eq!(std::mem::size_of::<Stripe>(), 128);
        assert_eq!(std::mem::size_of::<StripedCounter>(), 128 * COUNTER_STRIPES);
    }
}
