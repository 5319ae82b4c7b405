//! Pub/Sub: the channels, patterns and shard channels clients subscribe to, and each
//! subscriber's mailbox of notices (messages and subscription confirmations) not yet sent.
//!
//! Ordering: a subscription change and its confirmation happen under the registry's write lock,
//! and a publication delivers under its read lock, so a subscriber's mailbox holds the
//! confirmation of SUBSCRIBE before every message published after it, and every message
//! published before UNSUBSCRIBE ahead of its confirmation. The connection sends a command's
//! mailbox notices before the command's own reply (`Mailbox::take_into`), so a client that
//! publishes to a channel it listens to gets the message before PUBLISH's count, as in Redis.
//!
//! Nothing here is persistent: messages go to the clients connected now, as in Redis.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use hybridkv_resp::{encode, ProtocolVersion, Reply};
use parking_lot::{Mutex, RwLock};
use tokio::sync::Notify;

use crate::glob::glob_match;
use crate::shared::ClientHandle;

/// Bytes of notices a subscriber may have waiting (Redis's hard `client-output-buffer-limit`
/// for pubsub clients, 32 MiB): past it the subscriber is disconnected, so a client that stops
/// reading never grows the server's memory.
pub const PUBSUB_BACKLOG_BYTES_MAX: usize = 32 * 1024 * 1024;
/// What a waiting notice is charged beyond its channel, pattern and payload bytes.
const NOTICE_OVERHEAD_BYTES: usize = 64;

/// The three independent name spaces of Pub/Sub.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Channel,
    Pattern,
    /// Redis 7's shard channels (SSUBSCRIBE, SPUBLISH): standalone, a name space of their own.
    Shard,
}

const KINDS: [Kind; 3] = [Kind::Channel, Kind::Pattern, Kind::Shard];

impl Kind {
    fn slot(self) -> usize {
        self as usize
    }

    fn subscribed_word(self) -> &'static str {
        match self {
            Kind::Channel => "subscribe",
            Kind::Pattern => "psubscribe",
            Kind::Shard => "ssubscribe",
        }
    }

    fn unsubscribed_word(self) -> &'static str {
        match self {
            Kind::Channel => "unsubscribe",
            Kind::Pattern => "punsubscribe",
            Kind::Shard => "sunsubscribe",
        }
    }
}

/// Something a client is told outside the replies to its commands, encoded when it is sent
/// (HELLO may change the protocol meanwhile).
pub enum Notice {
    Message { shard: bool, channel: Bytes, payload: Bytes },
    PatternMessage { pattern: Bytes, channel: Bytes, payload: Bytes },
    /// `[word, name or nil, count]`: a subscription's confirmation.
    Confirmation { word: &'static str, name: Option<Bytes>, count: usize },
    /// CLIENT TRACKING: these keys (None: every key) may have changed. Sent after the reply of
    /// the command the receiver runs (`Mailbox::take_all_into`); to a RESP2 receiver only when
    /// it is a REDIRECT target (as a message of its subscription).
    Invalidation { keys: Option<Vec<Bytes>>, redirected: bool },
    /// CLIENT TRACKING: the REDIRECT target left (RESP3 only, as in Redis).
    RedirectBroken { target: u64 },
}

impl Notice {
    fn charged_bytes(&self) -> usize {
        NOTICE_OVERHEAD_BYTES
            + match self {
                Notice::Message { channel, payload, .. } => channel.len() + payload.len(),
                Notice::PatternMessage { pattern, channel, payload } => pattern.len() + channel.len() + payload.len(),
                Notice::Confirmation { name, .. } => name.as_ref().map_or(0, Bytes::len),
                Notice::Invalidation { keys, .. } => keys.iter().flatten().map(Bytes::len).sum(),
                Notice::RedirectBroken { .. } => 0,
            }
    }

    /// Invalidations wait for the reply of the command their receiver runs.
    fn follows_replies(&self) -> bool {
        matches!(self, Notice::Invalidation { .. } | Notice::RedirectBroken { .. })
    }

    /// A push in RESP3, an array in RESP2 (None: not sent in this protocol).
    fn reply(&self, protocol: ProtocolVersion) -> Option<Reply> {
        let word = |text: &'static str| Reply::Bulk(Bytes::from_static(text.as_bytes()));
        let resp3 = protocol == ProtocolVersion::Resp3;
        Some(Reply::Push(match self {
            Notice::Message { shard, channel, payload } => {
                vec![word(if *shard { "smessage" } else { "message" }), Reply::Bulk(channel.clone()), Reply::Bulk(payload.clone())]
            }
            Notice::PatternMessage { pattern, channel, payload } => {
                vec![word("pmessage"), Reply::Bulk(pattern.clone()), Reply::Bulk(channel.clone()), Reply::Bulk(payload.clone())]
            }
            Notice::Confirmation { word: text, name, count } => {
                vec![word(text), name.clone().map_or(Reply::Null, Reply::Bulk), Reply::Integer(*count as i64)]
            }
            Notice::Invalidation { keys, redirected } => {
                let keys = keys.as_ref().map_or(Reply::Null, |keys| Reply::Array(keys.iter().cloned().map(Reply::Bulk).collect()));
                match (resp3, redirected) {
                    (true, _) => vec![word("invalidate"), keys],
                    // A RESP2 REDIRECT target reads it as a message of its subscription.
                    (false, true) => vec![word("message"), word(crate::tracking::INVALIDATION_CHANNEL), keys],
                    (false, false) => return None,
                }
            }
            Notice::RedirectBroken { target } if resp3 => vec![word("tracking-redir-broken"), Reply::Integer(*target as i64)],
            Notice::RedirectBroken { .. } => return None,
        }))
    }
}

#[derive(Default)]
struct Backlog {
    notices: VecDeque<Notice>,
    /// Notices sent only after the reply of the command running (`Notice::follows_replies`).
    after_replies: VecDeque<Notice>,
    bytes: usize,
    /// Set once the backlog passed PUBSUB_BACKLOG_BYTES_MAX: the client is being disconnected
    /// and gets nothing more.
    overflowed: bool,
}

/// A subscriber's notices, filled by publishers and emptied by its connection.
pub struct Mailbox {
    client: Arc<ClientHandle>,
    backlog: Mutex<Backlog>,
    /// Notified after each notice: wakes the connection while it waits for requests.
    pub arrived: Notify,
}

impl Mailbox {
    fn new(client: Arc<ClientHandle>) -> Mailbox {
        Mailbox { client, backlog: Mutex::new(Backlog::default()), arrived: Notify::new() }
    }

    /// Queues `notice`, or disconnects the client when its backlog would pass the limit.
    pub fn post(&self, notice: Notice) {
        let mut backlog = self.backlog.lock();
        if backlog.overflowed {
            return;
        }
        let bytes = notice.charged_bytes();
        if backlog.bytes + bytes > PUBSUB_BACKLOG_BYTES_MAX {
            backlog.overflowed = true;
            backlog.notices.clear();
            backlog.after_replies.clear();
            backlog.bytes = 0;
            drop(backlog);
            tracing::warn!(client = self.client.id, bytes = PUBSUB_BACKLOG_BYTES_MAX, "a subscriber fell too far behind and is disconnected");
            self.client.killed.store(true, Ordering::Relaxed);
            self.client.kill.notify_one();
            return;
        }
        backlog.bytes += bytes;
        if notice.follows_replies() {
            backlog.after_replies.push_back(notice);
        } else {
            backlog.notices.push_back(notice);
        }
        drop(backlog);
        self.arrived.notify_one();
    }

    /// Moves the waiting notices that may precede a reply to `output`, encoded for `protocol`.
    pub fn take_into(&self, output: &mut BytesMut, protocol: ProtocolVersion) {
        let notices = {
            let mut backlog = self.backlog.lock();
            backlog.bytes -= backlog.notices.iter().map(Notice::charged_bytes).sum::<usize>();
            std::mem::take(&mut backlog.notices)
        };
        encode_notices(notices, protocol, output);
    }

    /// Moves every waiting notice to `output`: between commands, or while the client waits.
    pub fn take_all_into(&self, output: &mut BytesMut, protocol: ProtocolVersion) {
        let (notices, after_replies) = {
            let mut backlog = self.backlog.lock();
            backlog.bytes = 0;
            (std::mem::take(&mut backlog.notices), std::mem::take(&mut backlog.after_replies))
        };
        encode_notices(notices.into_iter().chain(after_replies), protocol, output);
    }
}

fn encode_notices(notices: impl IntoIterator<Item = Notice>, protocol: ProtocolVersion, output: &mut BytesMut) {
    for reply in notices.into_iter().filter_map(|notice| notice.reply(protocol)) {
        encode(&reply, protocol, output);
    }
}

/// Who listens to each name, per kind: client id → its mailbox.
type Listeners = HashMap<Bytes, HashMap<u64, Arc<Mailbox>>>;

/// Every subscription of every client.
#[derive(Default)]
pub struct PubSub {
    registry: RwLock<[Listeners; 3]>,
}

impl PubSub {
    /// Delivers `payload` to the subscribers of `channel` (and, for a channel, of every matching
    /// pattern, once per pattern); returns how many deliveries that was (PUBLISH's reply).
    pub fn publish(&self, kind: Kind, channel: &Bytes, payload: &Bytes) -> usize {
        assert!(kind != Kind::Pattern, "messages are published to channels");
        let registry = self.registry.read();
        let mut receivers = 0;
        for mailbox in registry[kind.slot()].get(channel).into_iter().flat_map(HashMap::values) {
            mailbox.post(Notice::Message { shard: kind == Kind::Shard, channel: channel.clone(), payload: payload.clone() });
            receivers += 1;
        }
        if kind == Kind::Channel {
            for (pattern, listeners) in &registry[Kind::Pattern.slot()] {
                if !glob_match(pattern, channel) {
                    continue;
                }
                for mailbox in listeners.values() {
                    mailbox.post(Notice::PatternMessage { pattern: pattern.clone(), channel: channel.clone(), payload: payload.clone() });
                    receivers += 1;
                }
            }
        }
        receivers
    }

    /// Names of `kind` with at least one subscriber, matching `pattern` when given (PUBSUB
    /// CHANNELS, SHARDCHANNELS).
    pub fn names(&self, kind: Kind, pattern: Option<&[u8]>) -> Vec<Bytes> {
        let registry = self.registry.read();
        registry[kind.slot()].keys().filter(|name| pattern.is_none_or(|pattern| glob_match(pattern, name))).cloned().collect()
    }

    /// The mailbox of `client` when it is subscribed to `name`.
    pub fn listener(&self, kind: Kind, name: &[u8], client: u64) -> Option<Arc<Mailbox>> {
        self.registry.read()[kind.slot()].get(name)?.get(&client).cloned()
    }

    /// Subscribers of one name (PUBSUB NUMSUB, SHARDNUMSUB).
    pub fn subscribers(&self, kind: Kind, name: &[u8]) -> usize {
        self.registry.read()[kind.slot()].get(name).map_or(0, HashMap::len)
    }

    /// Names of `kind` with at least one subscriber (INFO's pubsub_channels, pubsub_patterns,
    /// pubsubshard_channels; PUBSUB NUMPAT).
    pub fn count(&self, kind: Kind) -> usize {
        self.registry.read()[kind.slot()].len()
    }
}

/// One client's subscriptions, kept by its session; dropping it unsubscribes everything.
pub struct ClientSubscriptions {
    pubsub: Arc<PubSub>,
    mailbox: Arc<Mailbox>,
    names: [HashSet<Bytes>; 3],
}

impl ClientSubscriptions {
    pub fn new(pubsub: Arc<PubSub>, client: Arc<ClientHandle>) -> ClientSubscriptions {
        ClientSubscriptions { pubsub, mailbox: Arc::new(Mailbox::new(client)), names: Default::default() }
    }

    pub fn mailbox(&self) -> &Arc<Mailbox> {
        &self.mailbox
    }

    /// The count a confirmation of `kind` reports: channels and patterns together, shard
    /// channels apart (as Redis 7.0).
    fn confirmation_count(&self, kind: Kind) -> usize {
        match kind {
            Kind::Shard => self.names[Kind::Shard.slot()].len(),
            Kind::Channel | Kind::Pattern => self.names[Kind::Channel.slot()].len() + self.names[Kind::Pattern.slot()].len(),
        }
    }

    /// Subscriptions of every kind: while any, a RESP2 client may only (un)subscribe, PING,
    /// QUIT and RESET.
    pub fn total(&self) -> usize {
        self.names.iter().map(HashSet::len).sum()
    }

    /// The client's subscriptions of `kind` (CLIENT LIST's sub, psub, ssub).
    pub fn count(&self, kind: Kind) -> usize {
        self.names[kind.slot()].len()
    }

    /// Subscribes to `names` (again for those already subscribed), confirming each in order.
    pub fn subscribe(&mut self, kind: Kind, names: &[Bytes]) {
        let mut registry = self.pubsub.registry.write();
        for name in names {
            if self.names[kind.slot()].insert(name.clone()) {
                registry[kind.slot()].entry(name.clone()).or_default().insert(self.mailbox.client.id, Arc::clone(&self.mailbox));
            }
            let count = self.confirmation_count(kind);
            self.mailbox.post(Notice::Confirmation { word: kind.subscribed_word(), name: Some(name.clone()), count });
        }
        self.show_counts();
    }

    /// Unsubscribes from `names`, or from every name of `kind` when none is given, confirming
    /// each (a lone confirmation naming nil when there was nothing to leave).
    pub fn unsubscribe(&mut self, kind: Kind, names: &[Bytes]) {
        let mut registry = self.pubsub.registry.write();
        let leaving: Vec<Bytes> = if names.is_empty() { self.names[kind.slot()].iter().cloned().collect() } else { names.to_vec() };
        if leaving.is_empty() {
            let count = self.confirmation_count(kind);
            self.mailbox.post(Notice::Confirmation { word: kind.unsubscribed_word(), name: None, count });
        }
        for name in leaving {
            if self.names[kind.slot()].remove(&name) {
                remove_listener(&mut registry[kind.slot()], &name, self.mailbox.client.id);
            }
            let count = self.confirmation_count(kind);
            self.mailbox.post(Notice::Confirmation { word: kind.unsubscribed_word(), name: Some(name), count });
        }
        self.show_counts();
    }

    /// Leaves every subscription without confirmations (RESET, the end of the connection).
    pub fn leave_all(&mut self) {
        let mut registry = self.pubsub.registry.write();
        for kind in KINDS {
            for name in std::mem::take(&mut self.names[kind.slot()]) {
                remove_listener(&mut registry[kind.slot()], &name, self.mailbox.client.id);
            }
        }
        self.show_counts();
    }

    /// Publishes the counts CLIENT LIST shows.
    fn show_counts(&self) {
        let counts = KINDS.map(|kind| self.count(kind));
        self.mailbox.client.show_subscriptions(counts);
    }
}

impl Drop for ClientSubscriptions {
    fn drop(&mut self) {
        self.leave_all();
    }
}

fn remove_listener(listeners: &mut Listeners, name: &Bytes, client: u64) {
    if let Some(clients) = listeners.get_mut(name) {
        clients.remove(&client);
        if clients.is_empty() {
            listeners.remove(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(id: u64) -> Arc<ClientHandle> {
        Arc::new(ClientHandle::for_tests(id))
    }

    fn names(words: &[&str]) -> Vec<Bytes> {
        words.iter().map(|word| Bytes::copy_from_slice(word.as_bytes())).collect()
    }

    fn sent(subscriptions: &ClientSubscriptions) -> String {
        let mut output = BytesMut::new();
        subscriptions.mailbox().take_into(&mut output, ProtocolVersion::Resp2);
        String::from_utf8_lossy(&output).replace("\r\n", " ")
    }

    #[test]
    fn confirmations_count_channels_and_patterns_together_and_shard_channels_apart() {
        let pubsub = Arc::new(PubSub::default());
        let mut subscriptions = ClientSubscriptions::new(Arc::clone(&pubsub), client(1));
        subscriptions.subscribe(Kind::Channel, &names(&["a", "a", "b"]));
        subscriptions.subscribe(Kind::Pattern, &names(&["a*"]));
        subscriptions.subscribe(Kind::Shard, &names(&["s"]));
        assert_eq!(
            sent(&subscriptions),
            "*3 $9 subscribe $1 a :1 *3 $9 subscribe $1 a :1 *3 $9 subscribe $1 b :2 *3 $10 psubscribe $2 a* :3 *3 $10 ssubscribe $1 s :1 "
        );
        subscriptions.unsubscribe(Kind::Channel, &names(&["zz", "a"]));
        assert_eq!(sent(&subscriptions), "*3 $11 unsubscribe $2 zz :3 *3 $11 unsubscribe $1 a :2 ");
        subscriptions.unsubscribe(Kind::Channel, &[]);
        subscriptions.unsubscribe(Kind::Channel, &[]);
        assert_eq!(sent(&subscriptions), "*3 $11 unsubscribe $1 b :1 *3 $11 unsubscribe $-1 :1 ", "the pattern still counts");
        assert_eq!((subscriptions.total(), pubsub.count(Kind::Channel), pubsub.count(Kind::Pattern), pubsub.count(Kind::Shard)), (2, 0, 1, 1));
        drop(subscriptions);
        assert_eq!((pubsub.count(Kind::Pattern), pubsub.count(Kind::Shard)), (0, 0), "a connection's end leaves everything");
    }

    #[test]
    fn a_publication_reaches_each_channel_subscriber_and_each_matching_pattern() {
        let pubsub = Arc::new(PubSub::default());
        let mut first = ClientSubscriptions::new(Arc::clone(&pubsub), client(1));
        let mut second = ClientSubscriptions::new(Arc::clone(&pubsub), client(2));
        first.subscribe(Kind::Channel, &names(&["news"]));
        first.subscribe(Kind::Pattern, &names(&["n*", "*s", "x*"]));
        second.subscribe(Kind::Shard, &names(&["news"]));
        sent(&first);
        sent(&second);
        assert_eq!(pubsub.publish(Kind::Channel, &Bytes::from("news"), &Bytes::from("hi")), 3);
        let received = sent(&first);
        assert!(received.starts_with("*3 $7 message $4 news $2 hi "), "{received}");
        assert!(received.contains("*4 $8 pmessage $2 n* $4 news $2 hi ") && received.contains("*4 $8 pmessage $2 *s $4 news $2 hi "), "{received}");
        assert_eq!(sent(&second), "", "shard channels are their own name space");
        assert_eq!(pubsub.publish(Kind::Shard, &Bytes::from("news"), &Bytes::from("s")), 1);
        assert_eq!(sent(&second), "*3 $8 smessage $4 news $1 s ");
        assert_eq!(pubsub.subscribers(Kind::Channel, b"news"), 1);
        let mut channels = pubsub.names(Kind::Pattern, Some(b"*s"));
        channels.sort();
        assert_eq!(channels, names(&["*s"]));
    }

    #[test]
    fn a_subscriber_past_the_backlog_limit_is_disconnected_and_gets_nothing_more() {
        let pubsub = Arc::new(PubSub::default());
        let handle = client(7);
        let mut subscriptions = ClientSubscriptions::new(Arc::clone(&pubsub), Arc::clone(&handle));
        subscriptions.subscribe(Kind::Channel, &names(&["c"]));
        let payload = Bytes::from(vec![b'x'; 1024 * 1024]);
        let channel = Bytes::from("c");
        for _ in 0..PUBSUB_BACKLOG_BYTES_MAX / payload.len() - 1 {
            pubsub.publish(Kind::Channel, &channel, &payload);
        }
        assert!(!handle.killed.load(Ordering::Relaxed));
        pubsub.publish(Kind::Channel, &channel, &payload);
        assert!(handle.killed.load(Ordering::Relaxed));
        assert_eq!(sent(&subscriptions), "", "the backlog is dropped with the client");
        pubsub.publish(Kind::Channel, &channel, &payload);
        assert_eq!(sent(&subscriptions), "");
    }

    #[test]
    fn notices_are_encoded_for_the_protocol_of_the_moment_they_are_sent() {
        let pubsub = Arc::new(PubSub::default());
        let mut subscriptions = ClientSubscriptions::new(Arc::clone(&pubsub), client(1));
        subscriptions.unsubscribe(Kind::Pattern, &[]);
        let mut output = BytesMut::new();
        subscriptions.mailbox().take_into(&mut output, ProtocolVersion::Resp3);
        assert_eq!(&output[..], b">3\r\n$12\r\npunsubscribe\r\n_\r\n:0\r\n");
    }
}
