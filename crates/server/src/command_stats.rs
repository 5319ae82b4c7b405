//! Per-command and per-error statistics: INFO commandstats and errorstats, `total_error_replies`.
//!
//! Every request adds to its command's row, so the counters are striped as `StripedCounter`
//! is: each thread adds to its own table of rows (one cache line per row) and INFO sums the
//! tables. Error replies are rarer: they take one mutex for their prefix's count.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

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
}

pub struct CommandStats {
    /// `COUNTER_STRIPES` tables of `names.len()` rows.
    stripes: Box<[Box<[Row]>]>,
    names: &'static [String],
    error_replies: StripedCounter,
    error_prefixes: Mutex<ErrorPrefixes>,
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
        }
    }

    fn row(&self, row: usize) -> &Row {
        assert!(row < self.names.len(), "a stat row of the command table");
        &self.stripes[thread_stripe()][row]
    }

    /// A command ran for `elapsed`; `error` is its error reply, if it answered one.
    pub fn record_call(&self, row: usize, elapsed: Duration, error: Option<&str>) {
        let counters = self.row(row);
        counters.calls.fetch_add(1, Ordering::Relaxed);
        counters.nanoseconds.fetch_add(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
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

    /// INFO errorstats, as Redis writes it.
    pub fn write_errorstats(&self, text: &mut String) -> std::fmt::Result {
        writeln!(text, "# Errorstats\r")?;
        for (prefix, count) in self.error_counts() {
            writeln!(text, "errorstat_{prefix}:count={count}\r")?;
        }
        Ok(())
    }
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
