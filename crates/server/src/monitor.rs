//! MONITOR: every command the server runs, as one line each to the clients that asked, in
//! Redis's format (`+<unix seconds>.<µs> [<db> <ip:port>] "arg" …`).
//!
//! Commands are fed after they ran (a transaction's commands, then EXEC), as Redis 7.0 does;
//! refused ones are not, nor the administrative commands Redis hides. While no client monitors,
//! feeding costs one atomic load per command.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::sync::broadcast;

use crate::slowlog::is_secret;

/// Lines a monitoring client may fall behind by: past it, it is disconnected (Redis closes a
/// monitor past its output buffer limit), so a slow monitor never grows the server's memory.
pub const MONITOR_BACKLOG_LINES: usize = 10_000;
/// Commands and subcommands Redis 7.0 does not show to monitors: those it flags `admin`, of
/// those hybridkv has (a subcommand as `command|subcommand`; their HELP is shown).
const HIDDEN_COMMANDS: &[&str] = &[
    "save", "bgsave", "bgrewriteaof", "shutdown", "monitor",
    "config|get", "config|set", "config|resetstat", "config|rewrite",
    "slowlog|get", "slowlog|len", "slowlog|reset",
    "latency|doctor", "latency|graph", "latency|history", "latency|latest", "latency|reset", "latency|histogram",
    "client|kill", "client|list", "client|pause", "client|unpause", "client|unblock", "client|no-evict",
];

/// Whether a monitor must not see `command` (a known command's name) run with `args`.
fn is_hidden(command: &str, args: &[Bytes]) -> bool {
    HIDDEN_COMMANDS.contains(&command)
        || args.get(1).is_some_and(|subcommand| {
            let subcommand = String::from_utf8_lossy(subcommand).to_ascii_lowercase();
            HIDDEN_COMMANDS.contains(&format!("{command}|{subcommand}").as_str())
        })
}

pub struct Monitors {
    watching: AtomicUsize,
    lines: broadcast::Sender<Bytes>,
}

impl Default for Monitors {
    fn default() -> Monitors {
        Monitors { watching: AtomicUsize::new(0), lines: broadcast::channel(MONITOR_BACKLOG_LINES).0 }
    }
}

/// A monitoring client's feed; it counts as watching until dropped.
pub struct Subscription<'a> {
    monitors: &'a Monitors,
    pub lines: broadcast::Receiver<Bytes>,
}

impl Drop for Subscription<'_> {
    fn drop(&mut self) {
        self.monitors.watching.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Monitors {
    pub fn subscribe(&self) -> Subscription<'_> {
        self.watching.fetch_add(1, Ordering::Relaxed);
        Subscription { monitors: self, lines: self.lines.subscribe() }
    }

    /// Shows a command that ran to every monitoring client.
    pub fn feed(&self, command: &str, database: usize, address: &SocketAddr, args: &[Bytes]) {
        if self.watching.load(Ordering::Relaxed) == 0 || is_hidden(command, args) {
            return;
        }
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        // Nobody listening any more (the last monitor just left) is not an error.
        let _ = self.lines.send(line(now.as_secs(), now.subsec_micros(), database, address, args));
    }
}

/// One encoded line (a RESP simple string).
fn line(seconds: u64, micros: u32, database: usize, address: &SocketAddr, args: &[Bytes]) -> Bytes {
    let mut text = format!("+{seconds}.{micros:06} [{database} {address}]").into_bytes();
    for (position, argument) in args.iter().enumerate() {
        text.push(b' ');
        if is_secret(args, position) {
            text.extend_from_slice(b"\"(redacted)\"");
        } else {
            quote(argument, &mut text);
        }
    }
    text.extend_from_slice(b"\r\n");
    Bytes::from(text)
}

/// Redis's `sdscatrepr`: in double quotes, escapes for quotes, backslashes and control bytes.
fn quote(argument: &[u8], text: &mut Vec<u8>) {
    text.push(b'"');
    for &byte in argument {
        match byte {
            b'\\' | b'"' => text.extend_from_slice(&[b'\\', byte]),
            b'\n' => text.extend_from_slice(b"\\n"),
            b'\r' => text.extend_from_slice(b"\\r"),
            b'\t' => text.extend_from_slice(b"\\t"),
            0x07 => text.extend_from_slice(b"\\a"),
            0x08 => text.extend_from_slice(b"\\b"),
            b' '..=b'~' => text.push(byte),
            _ => text.extend_from_slice(format!("\\x{byte:02x}").as_bytes()),
        }
    }
    text.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_quote_and_redact_as_redis() {
        let address: SocketAddr = "127.0.0.1:4321".parse().unwrap();
        let args = [Bytes::from("set"), Bytes::from("k"), Bytes::from(&b"a b\"c\\\x01\n\xff"[..])];
        assert_eq!(&line(1_700_000_000, 42, 2, &address, &args)[..], &b"+1700000000.000042 [2 127.0.0.1:4321] \"set\" \"k\" \"a b\\\"c\\\\\\x01\\n\\xff\"\r\n"[..]);
        let auth = [Bytes::from("AUTH"), Bytes::from("secret")];
        assert!(line(1, 0, 0, &address, &auth).ends_with(b"\"AUTH\" \"(redacted)\"\r\n"));
    }

    #[test]
    fn only_subscribed_clients_receive_and_hidden_commands_are_not_fed() {
        let monitors = Monitors::default();
        let address: SocketAddr = "127.0.0.1:1".parse().unwrap();
        monitors.feed("get", 0, &address, &[Bytes::from("get")]);
        let mut subscription = monitors.subscribe();
        monitors.feed("config", 0, &address, &[Bytes::from("CONFIG"), Bytes::from("Get"), Bytes::from("x")]);
        monitors.feed("client", 0, &address, &[Bytes::from("CLIENT"), Bytes::from("LIST")]);
        monitors.feed("bgrewriteaof", 0, &address, &[Bytes::from("BGREWRITEAOF")]);
        monitors.feed("client", 0, &address, &[Bytes::from("CLIENT"), Bytes::from("ID")]);
        monitors.feed("ping", 0, &address, &[Bytes::from("PING")]);
        assert!(subscription.lines.try_recv().unwrap().ends_with(b"\"CLIENT\" \"ID\"\r\n"));
        assert!(subscription.lines.try_recv().unwrap().ends_with(b"\"PING\"\r\n"));
        assert!(subscription.lines.try_recv().is_err(), "nothing before subscribing; CONFIG GET, CLIENT LIST and BGREWRITEAOF hidden");
        drop(subscription);
        assert_eq!(monitors.watching.load(Ordering::Relaxed), 0);
    }
}
