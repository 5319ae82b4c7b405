//! Keyspace notifications (`notify-keyspace-events`): Pub/Sub messages about writes, as Redis
//! publishes them: `__keyspace@<db>__:<key>` with the event as message (class K) and
//! `__keyevent@<db>__:<event>` with the key as message (class E).
//!
//! Commands queue their events in the session (`Call::notify`) while they run; the session
//! publishes them once the command's writes committed (`publish_queued`), and drops those of a
//! transaction the engine aborted, so no event announces a write that did not happen.

use std::sync::atomic::{AtomicU32, Ordering};

use bytes::Bytes;

use crate::pubsub::{Kind, PubSub};

pub const GENERIC: u32 = 1 << 0;
pub const STRING: u32 = 1 << 1;
pub const LIST: u32 = 1 << 2;
pub const SET: u32 = 1 << 3;
pub const HASH: u32 = 1 << 4;
pub const ZSET: u32 = 1 << 5;
pub const EXPIRED: u32 = 1 << 6;
pub const EVICTED: u32 = 1 << 7;
pub const STREAM: u32 = 1 << 8;
pub const MODULE: u32 = 1 << 9;
pub const NEW_KEY: u32 = 1 << 10;
pub const KEYSPACE: u32 = 1 << 11;
pub const KEYEVENT: u32 = 1 << 12;
pub const KEY_MISS: u32 = 1 << 13;
/// `A`: every class of event but new keys and misses.
const ALL: u32 = GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// The classes in Redis's order of its configuration text, after `A`.
const CLASS_LETTERS: [(u32, char); 11] = [
    (GENERIC, 'g'),
    (STRING, '$'),
    (LIST, 'l'),
    (SET, 's'),
    (HASH, 'h'),
    (ZSET, 'z'),
    (EXPIRED, 'x'),
    (EVICTED, 'e'),
    (STREAM, 't'),
    (MODULE, 'd'),
    (NEW_KEY, 'n'),
];

/// Redis's parse of the configuration text; None for a character it does not know.
pub fn parse_classes(text: &[u8]) -> Option<u32> {
    text.iter().try_fold(0, |classes, &letter| {
        let class = match letter {
            b'A' => ALL,
            b'K' => KEYSPACE,
            b'E' => KEYEVENT,
            b'm' => KEY_MISS,
            _ => CLASS_LETTERS.iter().find(|(_, known)| *known as u8 == letter)?.0,
        };
        Some(classes | class)
    })
}

/// Redis's text of the configuration (CONFIG GET): `A` or the classes one by one, then K, E, m.
/// Like Redis 7.0, `n` is not shown after `A`.
pub fn classes_text(classes: u32) -> String {
    let mut text = String::new();
    if classes & ALL == ALL {
        text.push('A');
    } else {
        text.extend(CLASS_LETTERS.iter().filter(|(class, _)| classes & class != 0).map(|(_, letter)| letter));
    }
    text.extend([(KEYSPACE, 'K'), (KEYEVENT, 'E'), (KEY_MISS, 'm')].iter().filter(|(class, _)| classes & class != 0).map(|(_, letter)| letter));
    text
}

/// One write's notification, queued until its command's writes commit.
pub struct KeyEvent {
    pub class: u32,
    pub event: &'static str,
    pub database: usize,
    pub key: Bytes,
}

/// Classes Redis has that nothing here publishes: new keys and read misses would need every
/// write to learn whether its key existed and every read to report its misses. Refused, so
/// that no client waits for events that never come. (Evictions, streams and modules are
/// accepted: none of those exist here, so none is missed.)
pub const UNSUPPORTED: u32 = NEW_KEY | KEY_MISS;

/// The configured classes (0 by default: nothing is published, as in Redis).
#[derive(Default)]
pub struct KeyspaceEvents {
    classes: AtomicU32,
}

impl KeyspaceEvents {
    pub fn classes(&self) -> u32 {
        self.classes.load(Ordering::Relaxed)
    }

    pub fn set_classes(&self, classes: u32) {
        self.classes.store(classes, Ordering::Relaxed);
    }

    /// Whether an event of `class` is published: its class is on, and K or E.
    pub fn wants(&self, class: u32) -> bool {
        let classes = self.classes();
        classes & class != 0 && classes & (KEYSPACE | KEYEVENT) != 0
    }

    /// Publishes `event` as the configuration asks (it may have changed since it was queued).
    pub fn publish(&self, pubsub: &PubSub, event: &KeyEvent) {
        if !self.wants(event.class) {
            return;
        }
        let classes = self.classes();
        let database = event.database;
        if classes & KEYSPACE != 0 {
            let mut channel = format!("__keyspace@{database}__:").into_bytes();
            channel.extend_from_slice(&event.key);
            pubsub.publish(Kind::Channel, &Bytes::from(channel), &Bytes::from_static(event.event.as_bytes()));
        }
        if classes & KEYEVENT != 0 {
            let channel = Bytes::from(format!("__keyevent@{database}__:{}", event.event));
            pubsub.publish(Kind::Channel, &channel, &event.key);
        }
    }

    /// Publishes and forgets the events a command queued.
    pub fn publish_queued(&self, pubsub: &PubSub, events: &mut Vec<KeyEvent>) {
        if events.is_empty() {
            return;
        }
        for event in events.drain(..) {
            self.publish(pubsub, &event);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_text_reads_and_prints_as_redis_7_0() {
        let text = |given: &str| classes_text(parse_classes(given.as_bytes()).expect("valid"));
        assert_eq!(text("KEA"), "AKE");
        assert_eq!(text("Eg$x"), "g$xE");
        assert_eq!(classes_text(ALL | NEW_KEY | KEYSPACE | KEYEVENT | KEY_MISS), "AKEm", "Redis 7.0 drops n after A");
        assert_eq!(classes_text(NEW_KEY | KEYSPACE), "nK");
        assert_eq!(parse_classes(b"KEAmn"), Some(ALL | NEW_KEY | KEYSPACE | KEYEVENT | KEY_MISS));
        assert_eq!(text(""), "");
        assert_eq!(text("g$lshzxetd"), "A");
        assert_eq!(parse_classes(b"KQ"), None);
        assert_eq!(parse_classes(b"K A"), None);
    }

    #[test]
    fn events_are_published_only_with_k_or_e_and_their_class() {
        let events = KeyspaceEvents::default();
        assert!(!events.wants(STRING), "off by default");
        events.set_classes(parse_classes(b"$").unwrap());
        assert!(!events.wants(STRING), "neither K nor E");
        events.set_classes(parse_classes(b"K$").unwrap());
        assert!(events.wants(STRING) && !events.wants(GENERIC));
    }
}
