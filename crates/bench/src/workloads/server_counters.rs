//! hybridkv's per-namespace INFO counters (`ns_<name>_<counter>`), summed over namespaces and
//! read when the warm-up ends and again after the load, so that what they report covers the
//! measurement only. Redis has none of them: the reading is then empty, not an error.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::connection::Connection;
use crate::error::{BenchError, BenchResult};
use crate::loadgen::LoadOutcome;

/// The counters of one INFO section at one instant; `None` where the server has no such field.
pub struct CounterReading {
    sums: Vec<Option<u64>>,
    pub read_at: Instant,
}

impl CounterReading {
    /// How much counter `position` (of the names asked for) grew from `earlier` to `self`.
    pub fn growth_since(&self, earlier: &CounterReading, position: usize) -> Option<u64> {
        Some(self.sums[position]?.saturating_sub(earlier.sums[position]?))
    }

    pub fn seconds_since(&self, earlier: &CounterReading) -> f64 {
        self.read_at.duration_since(earlier.read_at).as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

/// Which counters to read: an INFO section and the field-name suffixes within it.
#[derive(Clone, Copy)]
pub struct CounterSet {
    pub section: &'static str,
    pub suffixes: &'static [&'static str],
}

impl CounterSet {
    pub async fn read(self, address: &str) -> BenchResult<CounterReading> {
        let text = Connection::open(address).await?.info(self.section).await?;
        Ok(CounterReading { sums: self.suffixes.iter().map(|suffix| sum_fields(&text, suffix)).collect(), read_at: Instant::now() })
    }

    /// Runs `load`, reading the counters once `warmup` has passed and again after the load.
    pub async fn around_load<L>(self, address: &str, warmup: Duration, load: L) -> BenchResult<(LoadOutcome, CounterReading, CounterReading)>
    where
        L: Future<Output = BenchResult<LoadOutcome>>,
    {
        let start_address = address.to_string();
        let at_start = tokio::spawn(async move {
            tokio::time::sleep(warmup).await;
            self.read(&start_address).await
        });
        let outcome = load.await?;
        let at_end = self.read(address).await?;
        let at_start = at_start.await.map_err(|join| BenchError::Verification(join.to_string()))??;
        Ok((outcome, at_start, at_end))
    }
}

fn sum_fields(info: &str, suffix: &str) -> Option<u64> {
    let values: Vec<u64> = info
        .lines()
        .filter_map(|line| line.trim_end().split_once(':'))
        .filter(|(name, _)| name.starts_with("ns_") && name.ends_with(suffix))
        .filter_map(|(_, value)| value.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_summed_over_namespaces_and_missing_ones_are_none() {
        let info = "# Persistence\r\nns_0_journal_writes:5\r\nns_1_journal_writes:7\r\nns_0_journal_writes_per_sec:1.0\r\nns_0_flushes:x\r\naof_enabled:1\r\n";
        assert_eq!(sum_fields(info, "_journal_writes"), Some(12));
        assert_eq!(sum_fields(info, "_flushes"), None);
        assert_eq!(sum_fields(info, "_cache_hits"), None);
    }
}
