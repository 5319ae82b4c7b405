//! SLOWLOG: the most recent commands that ran longer than `slowlog-log-slower-than`
//! microseconds, as Redis keeps them (newest first, at most `slowlog-max-len`, each with a
//! bounded copy of its arguments and secrets redacted).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use parking_lot::Mutex;

/// Redis's defaults: commands of 10 ms or more, the last 128 of them.
pub const SLOWLOG_THRESHOLD_MICROSECONDS_DEFAULT: i64 = 10_000;
pub const SLOWLOG_ENTRIES_DEFAULT: usize = 128;
/// `slowlog-max-len` at most (Redis takes any count): an entry holds up to about
/// SLOWLOG_ARGUMENTS_MAX × SLOWLOG_ARGUMENT_BYTES_MAX bytes (4 KiB), so the log stays under
/// 400 MiB whatever a client sets.
pub const SLOWLOG_ENTRIES_MAX: usize = 100_000;
/// Arguments kept per entry (Redis's SLOWLOG_ENTRY_MAX_ARGC): past it the last one kept says how
/// many more there were.
pub const SLOWLOG_ARGUMENTS_MAX: usize = 32;
/// Bytes kept per argument (Redis's SLOWLOG_ENTRY_MAX_STRING), then how many more there were.
pub const SLOWLOG_ARGUMENT_BYTES_MAX: usize = 128;

pub struct SlowEntry {
    pub id: u64,
    pub unix_seconds: u64,
    pub microseconds: u64,
    pub arguments: Vec<Bytes>,
    /// The client's `ip:port`.
    pub peer: String,
    pub client_name: String,
}

pub struct SlowLog {
    /// Negative: nothing is logged; 0: every command.
    threshold_microseconds: AtomicI64,
    entries_max: AtomicUsize,
    next_id: AtomicU64,
    /// Newest first.
    entries: Mutex<VecDeque<SlowEntry>>,
}

impl Default for SlowLog {
    fn default() -> SlowLog {
        SlowLog {
            threshold_microseconds: AtomicI64::new(SLOWLOG_THRESHOLD_MICROSECONDS_DEFAULT),
            entries_max: AtomicUsize::new(SLOWLOG_ENTRIES_DEFAULT),
            next_id: AtomicU64::new(0),
            entries: Mutex::new(VecDeque::new()),
        }
    }
}

impl SlowLog {
    pub fn threshold_microseconds(&self) -> i64 {
        self.threshold_microseconds.load(Ordering::Relaxed)
    }

    pub fn set_threshold_microseconds(&self, threshold: i64) {
        assert!(threshold >= -1, "checked by CONFIG SET");
        self.threshold_microseconds.store(threshold, Ordering::Relaxed);
    }

    pub fn entries_max(&self) -> usize {
        self.entries_max.load(Ordering::Relaxed)
    }

    /// Takes effect at once: the oldest entries past the new length go.
    pub fn set_entries_max(&self, entries_max: usize) {
        assert!(entries_max <= SLOWLOG_ENTRIES_MAX, "checked by CONFIG SET");
        self.entries_max.store(entries_max, Ordering::Relaxed);
        self.entries.lock().truncate(entries_max);
    }

    /// Whether a command that ran for `elapsed` goes into the log (one atomic load for the
    /// commands that do not).
    pub fn is_slow(&self, elapsed: Duration) -> bool {
        let threshold = self.threshold_microseconds();
        threshold >= 0 && elapsed.as_micros() >= threshold as u128
    }

    /// Logs a command that `is_slow`.
    pub fn push(&self, arguments: &[Bytes], elapsed: Duration, peer: String, client_name: String) {
        let entry = SlowEntry {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            unix_seconds: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs()),
            microseconds: u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
            arguments: kept_arguments(arguments),
            peer,
            client_name,
        };
        let entries_max = self.entries_max();
        let mut entries = self.entries.lock();
        entries.push_front(entry);
        entries.truncate(entries_max);
    }

    /// Applies `visit` to the newest `count` entries (all of them when `count` is None).
    pub fn newest<T>(&self, count: Option<usize>, visit: impl FnMut(&SlowEntry) -> T) -> Vec<T> {
        let entries = self.entries.lock();
        entries.iter().take(count.unwrap_or(usize::MAX)).map(visit).collect()
    }

    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    pub fn reset(&self) {
        self.entries.lock().clear();
    }
}

/// The arguments an entry keeps: secrets redacted, at most SLOWLOG_ARGUMENTS_MAX of them and
/// SLOWLOG_ARGUMENT_BYTES_MAX bytes of each, saying what was left out.
fn kept_arguments(arguments: &[Bytes]) -> Vec<Bytes> {
    let kept_count = if arguments.len() > SLOWLOG_ARGUMENTS_MAX { SLOWLOG_ARGUMENTS_MAX - 1 } else { arguments.len() };
    let mut kept: Vec<Bytes> = arguments[..kept_count]
        .iter()
        .enumerate()
        .map(|(position, argument)| {
            if is_secret(arguments, position) {
                Bytes::from_static(b"(redacted)")
            } else if argument.len() > SLOWLOG_ARGUMENT_BYTES_MAX {
                let mut shortened = argument[..SLOWLOG_ARGUMENT_BYTES_MAX].to_vec();
                shortened.extend_from_slice(format!("... ({} more bytes)", argument.len() - SLOWLOG_ARGUMENT_BYTES_MAX).as_bytes());
                Bytes::from(shortened)
            } else {
                argument.clone()
            }
        })
        .collect();
    if kept_count < arguments.len() {
        kept.push(Bytes::from(format!("... ({} more arguments)", arguments.len() - kept_count)));
    }
    kept
}

/// Whether the argument at `position` is a password, which Redis writes as `(redacted)`: AUTH's
/// arguments, HELLO's after AUTH, ACL SETUSER's rules, and CONFIG SET requirepass's value.
pub(crate) fn is_secret(arguments: &[Bytes], position: usize) -> bool {
    let is = |at: usize, word: &str| arguments.get(at).is_some_and(|argument| argument.eq_ignore_ascii_case(word.as_bytes()));
    if is(0, "auth") {
        return position > 0;
    }
    if is(0, "acl") && is(1, "setuser") {
        return position > 2;
    }
    if is(0, "hello") {
        // HELLO [protover [AUTH username password] [SETNAME name]]: options in pairs after AUTH's.
        let mut at = 2;
        while at < arguments.len() {
            if is(at, "auth") {
                return position == at + 1 || position == at + 2;
            }
            at += 2;
        }
        return false;
    }
    is(0, "config") && is(1, "set") && position >= 3 && position % 2 == 1 && is(position - 1, "requirepass")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<Bytes> {
        text.split(' ').map(|word| Bytes::copy_from_slice(word.as_bytes())).collect()
    }

    fn kept(text: &str) -> Vec<String> {
        kept_arguments(&words(text)).iter().map(|argument| String::from_utf8_lossy(argument).into_owned()).collect()
    }

    #[test]
    fn entries_keep_32_arguments_of_128_bytes_at_most_as_redis() {
        let many: Vec<String> = (1..=34).map(|number| format!("a{number}")).collect();
        let kept_many = kept(&format!("del {}", many.join(" ")));
        assert_eq!(kept_many.len(), SLOWLOG_ARGUMENTS_MAX);
        assert_eq!((kept_many[30].as_str(), kept_many[31].as_str()), ("a30", "... (4 more arguments)"));
        assert_eq!(kept(&format!("set k {}", "x".repeat(200)))[2], format!("{}... (72 more bytes)", "x".repeat(128)));
        assert_eq!(kept(&format!("set k {}", "x".repeat(128)))[2], "x".repeat(128), "exactly at the limit");
        assert_eq!(kept(&many[..32].join(" ")).len(), 32, "exactly 32 arguments are all kept");
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(kept("AUTH secret"), ["AUTH", "(redacted)"]);
        assert_eq!(kept("auth user secret"), ["auth", "(redacted)", "(redacted)"]);
        assert_eq!(kept("HELLO 3 AUTH user secret SETNAME n"), ["HELLO", "3", "AUTH", "(redacted)", "(redacted)", "SETNAME", "n"]);
        assert_eq!(kept("HELLO 3 SETNAME auth"), ["HELLO", "3", "SETNAME", "auth"]);
        assert_eq!(kept("config set maxclients 5 requirepass pw"), ["config", "set", "maxclients", "5", "requirepass", "(redacted)"]);
        assert_eq!(kept("config get requirepass"), ["config", "get", "requirepass"]);
        assert_eq!(kept("acl setuser alice on >pw"), ["acl", "setuser", "alice", "(redacted)", "(redacted)"]);
    }

    #[test]
    fn the_log_keeps_the_newest_entries_up_to_its_length() {
        let log = SlowLog::default();
        assert!(log.is_slow(Duration::from_millis(10)) && !log.is_slow(Duration::from_micros(9_999)));
        log.set_threshold_microseconds(-1);
        assert!(!log.is_slow(Duration::from_secs(100)));
        log.set_entries_max(3);
        for number in 0..5 {
            log.push(&words(&format!("get k{number}")), Duration::from_micros(number), "127.0.0.1:1".into(), String::new());
        }
        let newest = log.newest(None, |entry| (entry.id, entry.microseconds, entry.arguments[1].clone()));
        assert_eq!(newest, vec![(4, 4, Bytes::from("k4")), (3, 3, Bytes::from("k3")), (2, 2, Bytes::from("k2"))]);
        assert_eq!(log.newest(Some(1), |entry| entry.id), vec![4]);
        log.set_entries_max(1);
        assert_eq!(log.len(), 1);
        log.reset();
        assert_eq!(log.len(), 0);
        log.push(&words("get k"), Duration::ZERO, "127.0.0.1:1".into(), String::new());
        assert_eq!(log.newest(None, |entry| entry.id), vec![5], "ids go on after a reset");
    }
}
