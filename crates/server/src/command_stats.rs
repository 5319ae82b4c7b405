//! Per-command and per-error statistics: INFO commandstats, latencystats and errorstats,
//! `total_error_replies`.
//!
//! Every request adds to its command's row, so the counters are striped as `StripedCounter`
//! is: each thread adds to its own table of rows (one cache line per row) and INFO sums the
//! tables. A row's latency histogram is made on its first call in that stripe, behind a mutex
//! only INFO contends for; INFO merges the stripes'. Error replies are rarer: they take one
//! mutex for their prefix's count.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use hybridkv_engine::{thread_stripe, StripedCounter, COUNTER_STRIPES};
use hybridkv_resp::Reply;
use parking_lot::Mutex;

/// Distinct error prefixes counted at most, as Redis's ERROR_STATS_NUMBER: one more replaces
/// them all with `ERRORSTATS_DISABLED` until CONFIG RESETSTAT (Redis does the same), so a
/// client inventing error codes cannot grow the table.
pub const ERROR_PREFIXES_MAX: usize = 128;
/// The prefix counted once the table is full.
const ERROR_PREFIXES_OVERFLOW: &str = "ERRORSTATS_DISABLED";
/// Bytes of an error reply searched for the space that ends its prefix (Redis's 32): an
/// error without one within them counts as `ERR`.
const ERROR_PREFIX_BYTES_MAX: usize = 32;

/// Latencies a histogram tells apart, as Redis's (LATENCY_HISTOGRAM_MIN_VALUE/MAX_VALUE):
/// shorter ones count as the least, longer ones as the greatest.
const LATENCY_NANOSECONDS_MIN: u64 = 1;
const LATENCY_NANOSECONDS_MAX: u64 = 1_000_000_000;
/// Redis's LATENCY_HISTOGRAM_PRECISION: values within 1% share a bucket. One histogram takes
/// about 24 KiB; there is one per command used per stripe, at most `COUNTER_STRIPES` × rows.
const LATENCY_SIGNIFICANT_DIGITS: u8 = 2;
/// The percentiles INFO latencystats reports, as Redis's default
/// `latency-tracking-info-percentiles`.
pub const LATENCY_PERCENTILES_REPORTED: [f64; 3] = [50.0, 99.0, 99.9];

/// The first step of LATENCY HISTOGRAM's distribution (Redis's 1,024 ns); each next doubles.
const LATENCY_DISTRIBUTION_FIRST_STEP_NANOSECONDS: u64 = 1024;

type LatencyHistogram = Histogram<u64>;

/// One command's latencies as LATENCY HISTOGRAM answers them.
#[derive(Debug, PartialEq, Eq)]
pub struct LatencyDistribution {
    pub name: &'static str,
    pub calls: u64,
    /// (a step's bound in microseconds, the calls that took at most that long), rising.
    pub steps: Vec<(u64, u64)>,
}

fn new_latency_histogram() -> LatencyHistogram {
    Histogram::new_with_bounds(LATENCY_NANOSECONDS_MIN, LATENCY_NANOSECONDS_MAX, LATENCY_SIGNIFICANT_DIGITS)
        .expect("the bounds and precision are valid constants")
}

/// One command's (or subcommand's) counters in one stripe.
#[repr(align(64))]
#[derive(Default)]
struct Row {
    calls: AtomicU64,
    nanoseconds: AtomicU64,
    /// Refused before running: wrong arity, NOAUTH, not allowed or no room in MULTI.
    rejected: AtomicU64,
    /// Ran and answered an error.
    failed: AtomicU64,
    /// The calls' latencies in nanoseconds, from the first call on.
    latencies: Mutex<Option<Box<LatencyHistogram>>>,
}

pub struct CommandStats {
    /// `COUNTER_STRIPES` tables of `names.len()` rows.
    stripes: Box<[Box<[Row]>]>,
    names: &'static [String],
    error_replies: StripedCounter,
    error_prefixes: Mutex<ErrorPrefixes>,
    /// CONFIG SET latency-tracking: calls' latencies are recorded (and reported).
    latency_tracking: AtomicBool,
}

#[derive(Default)]
struct ErrorPrefixes {
    counts: BTreeMap<String, u64>,
    /// More than ERROR_PREFIXES_MAX prefixes were seen since the last reset.
    overflowed: bool,
}

/// One row's sums over the stripes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommandCounts {
    pub calls: u64,
    pub microseconds: u64,
    pub rejected: u64,
    pub failed: u64,
}

impl CommandStats {
    /// Counters for the rows named `names` (`commands::stat_row_names`).
    pub fn new(names: &'static [String]) -> CommandStats {
        let table = || (0..names.len()).map(|_| Row::default()).collect::<Box<[Row]>>();
        CommandStats {
            stripes: (0..COUNTER_STRIPES).map(|_| table()).collect(),
            names,
            error_replies: StripedCounter::default(),
            error_prefixes: Mutex::new(ErrorPrefixes::default()),
            latency_tracking: AtomicBool::new(true),
        }
    }

    fn row(&self, row: usize) -> &Row {
        assert!(row < self.names.len(), "a stat row of the command table");
        &self.stripes[thread_stripe()][row]
    }

    /// A command ran for `elapsed`; `error` is its error reply, if it answered one.
    pub fn record_call(&self, row: usize, elapsed: Duration, error: Option<&str>) {
        let counters = self.row(row);
        let nanoseconds = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        counters.calls.fetch_add(1, Ordering::Relaxed);
        counters.nanoseconds.fetch_add(nanoseconds, Ordering::Relaxed);
        if self.latency_tracking() {
            let mut latencies = counters.latencies.lock();
            let histogram = latencies.get_or_insert_with(|| Box::new(new_latency_histogram()));
            histogram.saturating_record(nanoseconds.clamp(LATENCY_NANOSECONDS_MIN, LATENCY_NANOSECONDS_MAX));
        }
        if let Some(text) = error {
            counters.failed.fetch_add(1, Ordering::Relaxed);
            self.record_error_reply(text);
        }
    }

    /// A request was refused before it ran, with the error `text`; `row` is its command's, if
    /// it has one.
    pub fn record_rejection(&self, row: Option<usize>, text: &str) {
        if let Some(row) = row {
            self.row(row).rejected.fetch_add(1, Ordering::Relaxed);
        }
        self.record_error_reply(text);
    }

    /// The error reply `text`, counted (`record_error_reply`): for errors the server answers
    /// outside a command (protocol errors, limits, a monitor's refusals).
    pub fn error_reply(&self, text: impl Into<Cow<'static, str>>) -> Reply {
        let text = text.into();
        self.record_error_reply(&text);
        Reply::Error(text)
    }

    /// An error reply went to a client (every one, whatever produced it).
    pub fn record_error_reply(&self, text: &str) {
        self.error_replies.add(1);
        let prefix = error_prefix(text);
        let mut prefixes = self.error_prefixes.lock();
        if prefixes.overflowed {
            return;
        }
        if let Some(count) = prefixes.counts.get_mut(prefix) {
            *count += 1;
        } else if prefixes.counts.len() < ERROR_PREFIXES_MAX {
            prefixes.counts.insert(prefix.to_string(), 1);
        } else {
            prefixes.counts.clear();
            prefixes.counts.insert(ERROR_PREFIXES_OVERFLOW.to_string(), 1);
            prefixes.overflowed = true;
        }
    }

    pub fn error_replies(&self) -> u64 {
        self.error_replies.get()
    }

    fn sums(&self, row: usize) -> CommandCounts {
        let sum = |field: fn(&Row) -> &AtomicU64| self.stripes.iter().map(|table| field(&table[row]).load(Ordering::Relaxed)).fold(0, u64::wrapping_add);
        CommandCounts {
            calls: sum(|row| &row.calls),
            microseconds: sum(|row| &row.nanoseconds) / 1000,
            rejected: sum(|row| &row.rejected),
            failed: sum(|row| &row.failed),
        }
    }

    /// Every command that was called or refused since the last reset, by name, with its sums.
    pub fn used_commands(&self) -> Vec<(&'static str, CommandCounts)> {
        let mut used: Vec<_> = (0..self.names.len())
            .map(|row| (self.names[row].as_str(), self.sums(row)))
            .filter(|(_, counts)| counts.calls + counts.rejected > 0)
            .collect();
        used.sort_unstable_by_key(|(name, _)| *name);
        used
    }

    /// Every command that ran since the last reset, by name, with its latencies over the
    /// stripes, in nanoseconds.
    fn latencies_by_command(&self) -> Vec<(&'static str, LatencyHistogram)> {
        let mut used = Vec::new();
        for (row, name) in self.names.iter().enumerate() {
            let mut merged: Option<LatencyHistogram> = None;
            for table in self.stripes.iter() {
                if let Some(histogram) = table[row].latencies.lock().as_deref() {
                    let merged = merged.get_or_insert_with(new_latency_histogram);
                    merged.add(histogram).expect("histograms of equal bounds merge");
                }
            }
            used.extend(merged.map(|merged| (name.as_str(), merged)));
        }
        used.sort_unstable_by_key(|(name, _)| *name);
        used
    }

    /// Each error prefix counted since the last reset, in byte order, with its count.
    pub fn error_counts(&self) -> Vec<(String, u64)> {
        self.error_prefixes.lock().counts.iter().map(|(prefix, count)| (prefix.clone(), *count)).collect()
    }

    /// CONFIG RESETSTAT: counts racing with it may survive it.
    pub fn reset(&self) {
        for row in self.stripes.iter().flat_map(|table| table.iter()) {
            for counter in [&row.calls, &row.nanoseconds, &row.rejected, &row.failed] {
                counter.store(0, Ordering::Relaxed);
            }
            *row.latencies.lock() = None;
        }
        self.error_replies.reset();
        *self.error_prefixes.lock() = ErrorPrefixes::default();
    }

    /// INFO commandstats, as Redis writes it.
    pub fn write_commandstats(&self, text: &mut String) -> std::fmt::Result {
        writeln!(text, "# Commandstats\r")?;
        for (name, counts) in self.used_commands() {
            let per_call = if counts.calls == 0 { 0.0 } else { counts.microseconds as f64 / counts.calls as f64 };
            writeln!(
                text,
                "cmdstat_{name}:calls={},usec={},usec_per_call={per_call:.2},rejected_calls={},failed_calls={}\r",
                counts.calls, counts.microseconds, counts.rejected, counts.failed
            )?;
        }
        Ok(())
    }

    pub fn latency_tracking(&self) -> bool {
        self.latency_tracking.load(Ordering::Relaxed)
    }

    /// Turned off, calls are no longer timed into histograms and none are reported (as Redis);
    /// those kept reappear when it is turned on again.
    pub fn set_latency_tracking(&self, enabled: bool) {
        self.latency_tracking.store(enabled, Ordering::Relaxed);
    }

    /// Every command that ran since the last reset, by name, with its latency in microseconds
    /// at each of LATENCY_PERCENTILES_REPORTED (each the highest value of its bucket); none
    /// while latency tracking is off.
    pub fn latency_percentiles(&self) -> Vec<(&'static str, [f64; LATENCY_PERCENTILES_REPORTED.len()])> {
        if !self.latency_tracking() {
            return Vec::new();
        }
        let microseconds_at = |histogram: &LatencyHistogram| LATENCY_PERCENTILES_REPORTED.map(|percentile| value_at_percentile(histogram, percentile) as f64 / 1000.0);
        self.latencies_by_command().iter().map(|(name, histogram)| (*name, microseconds_at(histogram))).collect()
    }

    /// LATENCY HISTOGRAM: for each command that ran (of `wanted`, by row name, when given), its
    /// calls and their cumulative distribution over power-of-two steps from 1,024 ns, as
    /// Redis's fillCommandCDF: (the step's bound in microseconds, the calls up to it), a step
    /// only where the count grew.
    pub fn latency_distributions(&self, wanted: Option<&[String]>) -> Vec<LatencyDistribution> {
        let mut distributions = Vec::new();
        for (name, histogram) in self.latencies_by_command() {
            if wanted.is_some_and(|wanted| !wanted.iter().any(|wanted| wanted == name)) {
                continue;
            }
            let mut steps = Vec::new();
            let mut counted = 0;
            for step in histogram.iter_log(LATENCY_DISTRIBUTION_FIRST_STEP_NANOSECONDS, 2.0) {
                counted += step.count_since_last_iteration();
                if step.count_since_last_iteration() > 0 {
                    let bound_microseconds = histogram.highest_equivalent(step.value_iterated_to() + 1) / 1000;
                    steps.push((bound_microseconds, counted));
                }
            }
            distributions.push(LatencyDistribution { name, calls: histogram.len(), steps });
        }
        distributions
    }

    /// INFO latencystats, as Redis writes it.
    pub fn write_latencystats(&self, text: &mut String) -> std::fmt::Result {
        writeln!(text, "# Latencystats\r")?;
        for (name, microseconds) in self.latency_percentiles() {
            let fields: Vec<String> =
                LATENCY_PERCENTILES_REPORTED.iter().zip(microseconds).map(|(percentile, value)| format!("p{percentile}={value:.3}")).collect();
            writeln!(text, "latency_percentiles_usec_{name}:{}\r", fields.join(","))?;
        }
        Ok(())
    }

    /// INFO errorstats, as Redis writes it.
    pub fn write_errorstats(&self, text: &mut String) -> std::fmt::Result {
        writeln!(text, "# Errorstats\r")?;
        for (prefix, count) in self.error_counts() {
            writeln!(text, "errorstat_{prefix}:count={count}\r")?;
        }
        Ok(())
    }
}

/// The value at `percentile` as Redis's hdr_value_at_percentile finds it: the highest value of
/// the bucket holding the call of rank `percentile`% of the calls, rounded to the nearest (the
/// crate's own rounds up, so that 99.9% of 1,000 calls would be the 1,000th).
fn value_at_percentile(histogram: &LatencyHistogram, percentile: f64) -> u64 {
    let rank = ((percentile / 100.0 * histogram.len() as f64 + 0.5) as u64).max(1);
    let mut counted = 0;
    for bucket in histogram.iter_recorded() {
        counted += bucket.count_at_value();
        if counted >= rank {
            return histogram.highest_equivalent(bucket.value_iterated_to());
        }
    }
    histogram.highest_equivalent(histogram.max())
}

/// An error reply's code as Redis takes it: the text before the first space within the first
/// ERROR_PREFIX_BYTES_MAX bytes, else `ERR`, which a prefix with bytes other than letters,
/// digits, `_` and `-` also counts as (INFO and Prometheus labels carry it unescaped).
fn error_prefix(text: &str) -> &str {
    let searched = &text.as_bytes()[..text.len().min(ERROR_PREFIX_BYTES_MAX)];
    match searched.iter().position(|byte| *byte == b' ') {
        Some(end) if text[..end].bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-') => &text[..end],
        _ => "ERR",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> &'static [String] {
        static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        NAMES.get_or_init(|| vec!["get".to_string(), "set".to_string(), "config|get".to_string()])
    }

    #[test]
    fn calls_rejections_and_failures_add_up_over_threads() {
        let stats = CommandStats::new(names());
        std::thread::scope(|scope| {
            for _ in 0..COUNTER_STRIPES + 2 {
                scope.spawn(|| {
                    for _ in 0..100 {
                        stats.record_call(0, Duration::from_micros(3), None);
                        stats.record_call(1, Duration::from_micros(5), Some("WRONGTYPE Operation against a key"));
                    }
                    stats.record_rejection(Some(1), "ERR wrong number of arguments for 'set' command");
                });
            }
        });
        let threads = COUNTER_STRIPES as u64 + 2;
        assert_eq!(
            stats.used_commands(),
            vec![
                ("get", CommandCounts { calls: 100 * threads, microseconds: 300 * threads, rejected: 0, failed: 0 }),
                ("set", CommandCounts { calls: 100 * threads, microseconds: 500 * threads, rejected: threads, failed: 100 * threads }),
            ],
            "config|get was never used"
        );
        assert_eq!(stats.error_replies(), 101 * threads);
        assert_eq!(stats.error_counts(), vec![("ERR".to_string(), threads), ("WRONGTYPE".to_string(), 100 * threads)]);
        let mut text = String::new();
        stats.write_commandstats(&mut text).unwrap();
        assert!(text.contains("cmdstat_get:calls=1000,usec=3000,usec_per_call=3.00,rejected_calls=0,failed_calls=0\r\n"), "{text}");
        stats.reset();
        assert!(stats.used_commands().is_empty());
        assert_eq!((stats.error_replies(), stats.error_counts().len()), (0, 0));
    }

    #[test]
    fn latency_percentiles_merge_the_stripes_and_report_microseconds() {
        let stats = CommandStats::new(names());
        let (fast, slow) = (Duration::from_micros(1), Duration::from_millis(1));
        std::thread::scope(|scope| {
            for thread in 0..COUNTER_STRIPES {
                let stats = &stats;
                scope.spawn(move || {
                    for call in 0..125 {
                        stats.record_call(0, if thread == 0 && call == 0 { slow } else { fast }, None);
                    }
                });
            }
        });
        stats.record_call(1, fast, None);
        stats.record_call(1, slow, None);
        stats.record_rejection(Some(2), "ERR wrong number of arguments for 'config|get' command");
        let mut text = String::new();
        stats.write_latencystats(&mut text).unwrap();
        // Each value is the highest of its bucket (1% wide): 1 µs reads 1.003, 1 ms 1003.519.
        // Ranks round to the nearest: the 99.9th percentile of 1,000 calls is the 999th (a
        // microsecond), the 50th of two calls the first.
        assert_eq!(
            text,
            "# Latencystats\r\n\
             latency_percentiles_usec_get:p50=1.003,p99=1.003,p99.9=1.003\r\n\
             latency_percentiles_usec_set:p50=1.003,p99=1003.519,p99.9=1003.519\r\n",
            "a command only refused has no latencies"
        );
        stats.record_call(2, Duration::ZERO, None);
        assert!(stats.latencies_by_command().iter().any(|(name, latencies)| *name == "config|get" && latencies.max() == 1), "0 counts as 1 ns");
        stats.reset();
        text.clear();
        stats.write_latencystats(&mut text).unwrap();
        assert_eq!(text, "# Latencystats\r\n");
    }

    #[test]
    fn latency_distributions_count_calls_up_to_each_doubling_step() {
        let stats = CommandStats::new(names());
        for microseconds in [1, 3, 3, 10, 1000] {
            stats.record_call(0, Duration::from_micros(microseconds), None);
        }
        stats.record_call(1, Duration::from_micros(1), None);
        let get = LatencyDistribution { name: "get", calls: 5, steps: vec![(1, 1), (4, 3), (16, 4), (1056, 5)] };
        assert_eq!(stats.latency_distributions(Some(&["get".to_string(), "nosuch".to_string()])), vec![get]);
        let all: Vec<_> = stats.latency_distributions(None).into_iter().map(|distribution| distribution.name).collect();
        assert_eq!(all, ["get", "set"]);
    }

    #[test]
    fn error_prefixes_are_the_first_word_within_32_bytes() {
        assert_eq!(error_prefix("WRONGTYPE Operation against a key"), "WRONGTYPE");
        assert_eq!(error_prefix("NOAUTH Authentication required."), "NOAUTH");
        assert_eq!(error_prefix("Protocol-error-without-any-space-in-it"), "ERR");
        assert_eq!(error_prefix(&format!("{} x", "A".repeat(40))), "ERR", "no space in the first 32 bytes");
        assert_eq!(error_prefix("a:b c"), "ERR", "INFO's separator");
        assert_eq!(error_prefix("a\"b c"), "ERR", "a quote would end a Prometheus label");
    }

    #[test]
    fn more_than_128_prefixes_stop_the_count_by_prefix_until_reset() {
        let stats = CommandStats::new(names());
        for code in 0..ERROR_PREFIXES_MAX {
            stats.record_error_reply(&format!("E{code} text"));
        }
        assert_eq!(stats.error_counts().len(), ERROR_PREFIXES_MAX);
        stats.record_error_reply("ONEMORE text");
        stats.record_error_reply("E1 text");
        assert_eq!(stats.error_counts(), vec![(ERROR_PREFIXES_OVERFLOW.to_string(), 1)]);
        assert_eq!(stats.error_replies(), ERROR_PREFIXES_MAX as u64 + 2, "the total goes on counting");
        stats.reset();
        stats.record_error_reply("E1 text");
        assert_eq!(stats.error_counts(), vec![("E1".to_string(), 1)]);
    }
}
