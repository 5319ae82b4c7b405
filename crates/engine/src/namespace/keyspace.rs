//! What INFO keyspace tells of a namespace: how many keys it holds as reads see them and how
//! many of those have an expiry (DBSIZE, `keys`, `expires`), and an estimate of their average
//! time to live (`avg_ttl`). The counts follow every change of a key's entry: a write when it is
//! appended (its entry pending), a write withdrawn after a failed flush, a key dropped by
//! defragmentation; at open they start from the index partitions' durable counts. Expired keys
//! count until they are reclaimed, as in Redis; reclaimed ones are counted (INFO stats'
//! `expired_keys`). The average comes from the records the expiry sweep reads, weighted as
//! Redis weighs its expire cycle's samples.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::index::Entry;

/// A sweep's average counts for 1/N of the estimate, the one before it for the rest (Redis's
/// weighting of its expire cycle's samples).
const AVERAGE_TTL_SAMPLE_WEIGHT_INVERSE: u64 = 50;

#[derive(Default)]
pub(crate) struct KeyspaceStats {
    keys: AtomicI64,
    expiring: AtomicI64,
    average_ttl_ms: AtomicU64,
    /// Keys deleted because they had expired (by the sweep or by defragmentation) since open.
    expired: AtomicU64,
}

impl KeyspaceStats {
    /// Counts a key's entry changing from `before` to `after` (None: no key).
    pub(crate) fn change(&self, before: Option<&Entry>, after: Option<&Entry>) {
        let keys = i64::from(after.is_some()) - i64::from(before.is_some());
        let expiring = i64::from(after.is_some_and(|entry| entry.expires)) - i64::from(before.is_some_and(|entry| entry.expires));
        if keys != 0 {
            self.keys.fetch_add(keys, Ordering::Relaxed);
        }
        if expiring != 0 {
            self.expiring.fetch_add(expiring, Ordering::Relaxed);
        }
    }

    /// Counts a key deleted because it had expired (its deletion committed).
    pub(crate) fn note_expired(&self) {
        self.expired.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn expired(&self) -> u64 {
        self.expired.load(Ordering::Relaxed)
    }

    /// CONFIG RESETSTAT.
    pub(crate) fn reset_expired(&self) {
        self.expired.store(0, Ordering::Relaxed);
    }

    /// Starts again from counts taken from the index (at open). They come from the media, so
    /// they are bounded here rather than asserted: keys with an expiry are keys.
    pub(crate) fn reset(&self, keys: u64, expiring: u64) {
        self.keys.store(keys as i64, Ordering::Relaxed);
        self.expiring.store(expiring.min(keys) as i64, Ordering::Relaxed);
    }

    pub(crate) fn keys(&self) -> u64 {
        self.keys.load(Ordering::Relaxed).max(0) as u64
    }

    pub(crate) fn expiring(&self) -> u64 {
        self.expiring.load(Ordering::Relaxed).max(0) as u64
    }

    /// Takes in the times to live, summed, of `samples` unexpired keys a sweep read. Only the
    /// sweep calls it, so the read-modify-write needs no lock.
    pub(crate) fn sample_ttls(&self, ttl_sum_ms: u64, samples: u64) {
        if self.expiring() == 0 {
            self.average_ttl_ms.store(0, Ordering::Relaxed);
            return;
        }
        if samples == 0 {
            return;
        }
        let sampled = ttl_sum_ms / samples;
        let before = self.average_ttl_ms.load(Ordering::Relaxed);
        let weight = AVERAGE_TTL_SAMPLE_WEIGHT_INVERSE;
        let average = if before == 0 { sampled } else { before / weight * (weight - 1) + sampled / weight };
        self.average_ttl_ms.store(average, Ordering::Relaxed);
    }

    /// The estimate of the keys' average time to live, ms; 0 when no key has an expiry or none
    /// was sampled yet.
    pub(crate) fn average_ttl_ms(&self) -> u64 {
        if self.expiring() == 0 { 0 } else { self.average_ttl_ms.load(Ordering::Relaxed) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::Digest;
    use crate::log::Location;

    fn entry(expiry_unix_ms: u64) -> Entry {
        Entry::new(Digest::of(0, b"k"), Location::new(1, 64, 64), false, expiry_unix_ms)
    }

    #[test]
    fn counts_follow_a_key_gaining_and_losing_its_expiry() {
        let counts = KeyspaceStats::default();
        counts.change(None, Some(&entry(0)));
        assert_eq!((counts.keys(), counts.expiring()), (1, 0));
        counts.change(Some(&entry(0)), Some(&entry(5)));
        assert_eq!((counts.keys(), counts.expiring()), (1, 1));
        counts.change(Some(&entry(5)), Some(&entry(7)));
        assert_eq!((counts.keys(), counts.expiring()), (1, 1));
        counts.change(Some(&entry(7)), None);
        assert_eq!((counts.keys(), counts.expiring()), (0, 0));
        counts.reset(10, 4);
        assert_eq!((counts.keys(), counts.expiring()), (10, 4));
    }

    #[test]
    fn the_average_ttl_starts_from_the_first_samples_then_moves_by_a_fiftieth() {
        let stats = KeyspaceStats::default();
        stats.sample_ttls(3_000, 3);
        assert_eq!(stats.average_ttl_ms(), 0, "no key has an expiry");
        stats.reset(5, 5);
        stats.sample_ttls(0, 0);
        assert_eq!(stats.average_ttl_ms(), 0, "nothing sampled yet");
        stats.sample_ttls(3_000, 3);
        assert_eq!(stats.average_ttl_ms(), 1_000);
        stats.sample_ttls(6_000, 2);
        assert_eq!(stats.average_ttl_ms(), 1_000 / 50 * 49 + 3_000 / 50);
        stats.reset(5, 0);
        assert_eq!(stats.average_ttl_ms(), 0, "the keys lost their expiries");
    }
}
