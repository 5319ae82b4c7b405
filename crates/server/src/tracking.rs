//! CLIENT TRACKING: the invalidation messages of client-side caching, as Redis 7.0 sends them.
//!
//! Default mode: the keys a tracking client reads are remembered for it (before the read, so a
//! write that lands after the read always finds the key remembered), and the first write of a
//! remembered key sends it an invalidation and forgets the key for every client. BCAST mode:
//! every write of a key under one of the client's prefixes (every key, without prefixes) sends
//! one. Invalidations go to the client itself as a RESP3 push (a RESP2 client without REDIRECT
//! gets none, as in Redis), or with REDIRECT to the client given, when it is subscribed to
//! `__redis__:invalidate`.
//!
//! Order: an invalidation is posted to the receiver's mailbox while the write holds its key's
//! lock, and the receiver sends it only after the reply of the command it is running
//! (`Mailbox::take_all_into`), so a value read before the write always reaches the client
//! before the invalidation that voids it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::pubsub::{Kind, Mailbox, Notice, PubSub};
use crate::shared::Clients;

/// Keys remembered for default-mode clients (Redis's `tracking-table-max-keys` default): past
/// it, keys are forgotten with an invalidation to the clients that may cache them.
pub const TRACKING_TABLE_KEYS_MAX: usize = 1_000_000;
/// The channel a REDIRECT target subscribes to.
pub const INVALIDATION_CHANNEL: &str = "__redis__:invalidate";

/// What CLIENT TRACKING ON asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrackingOptions {
    pub redirect: Option<u64>,
    pub bcast: bool,
    pub prefixes: Vec<Bytes>,
    pub optin: bool,
    pub optout: bool,
    pub noloop: bool,
}

struct Tracker {
    options: TrackingOptions,
    /// The client's own mailbox (pushes, and `tracking-redir-broken`).
    own: Arc<Mailbox>,
}

#[derive(Default)]
struct TrackingState {
    trackers: HashMap<u64, Tracker>,
    /// Default mode: key → the clients that may cache it.
    keys: HashMap<Bytes, HashSet<u64>>,
    /// Client-key pairs in `keys` (INFO tracking_total_items).
    items: usize,
}

/// Every tracking client and the keys remembered for them.
#[derive(Default)]
pub struct Tracking {
    /// Clients with tracking on: writers look at nothing else while it is zero.
    trackers: AtomicUsize,
    state: Mutex<TrackingState>,
}

/// INFO's tracking figures.
pub struct TrackingCounts {
    pub clients: usize,
    pub keys: usize,
    pub items: usize,
    pub prefixes: usize,
}

impl Tracking {
    /// Turns tracking on (or changes its options) for client `id`.
    pub fn enable(&self, id: u64, own: Arc<Mailbox>, options: TrackingOptions) {
        let mut state = self.state.lock();
        state.trackers.insert(id, Tracker { options, own });
        self.trackers.store(state.trackers.len(), Ordering::Relaxed);
    }

    /// Turns tracking off; the keys remembered for the client are forgotten lazily.
    pub fn disable(&self, id: u64) {
        let mut state = self.state.lock();
        state.trackers.remove(&id);
        self.trackers.store(state.trackers.len(), Ordering::Relaxed);
    }

    /// Remembers that client `id` may cache `keys` (default mode), before it reads them.
    pub fn remember(&self, id: u64, keys: &[&[u8]], pubsub: &PubSub, clients: &Clients) {
        let mut state = self.state.lock();
        for key in keys {
            if state.keys.entry(Bytes::copy_from_slice(key)).or_default().insert(id) {
                state.items += 1;
            }
        }
        while state.keys.len() > TRACKING_TABLE_KEYS_MAX {
            let Some(key) = state.keys.keys().next().cloned() else { break };
            forget_key(&mut state, &key, None, pubsub, clients);
        }
    }

    /// Sends the invalidations of keys `writer` (0 for the server itself) wrote.
    pub fn invalidate<'k>(&self, writer: u64, keys: impl Iterator<Item = &'k [u8]>, pubsub: &PubSub, clients: &Clients) {
        if self.trackers.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut state = self.state.lock();
        for key in keys {
            forget_key(&mut state, key, Some(writer), pubsub, clients);
            let broadcast_to = state
                .trackers
                .iter()
                .filter(|(id, tracker)| tracker.options.bcast && !(tracker.options.noloop && **id == writer))
                .filter(|(_, tracker)| tracker.options.prefixes.is_empty() || tracker.options.prefixes.iter().any(|prefix| key.starts_with(prefix)));
            for (id, _) in broadcast_to {
                deliver(&state, *id, Some(vec![Bytes::copy_from_slice(key)]), pubsub, clients);
            }
        }
    }

    /// Every key may have changed (FLUSHDB, FLUSHALL, SWAPDB): every tracking client is told to
    /// drop its whole cache, and nothing stays remembered.
    pub fn invalidate_everything(&self, pubsub: &PubSub, clients: &Clients) {
        if self.trackers.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut state = self.state.lock();
        state.keys.clear();
        state.items = 0;
        for id in state.trackers.keys() {
            deliver(&state, *id, None, pubsub, clients);
        }
    }

    pub fn counts(&self) -> TrackingCounts {
        let state = self.state.lock();
        TrackingCounts {
            clients: state.trackers.len(),
            keys: state.keys.len(),
            items: state.items,
            prefixes: state.trackers.values().flat_map(|tracker| &tracker.options.prefixes).collect::<HashSet<_>>().len(),
        }
    }
}

/// Forgets `key` and tells the default-mode clients that may cache it, but a NOLOOP `writer`.
fn forget_key(state: &mut TrackingState, key: &[u8], writer: Option<u64>, pubsub: &PubSub, clients: &Clients) {
    let Some(ids) = state.keys.remove(key) else { return };
    state.items -= ids.len();
    for id in ids {
        let Some(tracker) = state.trackers.get(&id) else { continue };
        if tracker.options.bcast || (tracker.options.noloop && writer == Some(id)) {
            continue;
        }
        deliver(state, id, Some(vec![Bytes::copy_from_slice(key)]), pubsub, clients);
    }
}

/// Posts an invalidation of `keys` (None: everything) for tracker `id`: to its own mailbox, or
/// to its REDIRECT target's when that one listens on INVALIDATION_CHANNEL. A tracker whose
/// target left is told once (`ClientHandle::mark_redirect_broken`), then sent nothing.
fn deliver(state: &TrackingState, id: u64, keys: Option<Vec<Bytes>>, pubsub: &PubSub, clients: &Clients) {
    let Some(tracker) = state.trackers.get(&id) else { return };
    let Some(target) = tracker.options.redirect else {
        tracker.own.post(Notice::Invalidation { keys, redirected: false });
        return;
    };
    if let Some(mailbox) = pubsub.listener(Kind::Channel, INVALIDATION_CHANNEL.as_bytes(), target) {
        mailbox.post(Notice::Invalidation { keys, redirected: true });
    } else if clients.find(target).is_none() && clients.find(id).is_some_and(|client| client.mark_redirect_broken()) {
        tracker.own.post(Notice::RedirectBroken { target });
    }
}

/// A session's tracking: turned off in the registry when dropped (CLIENT TRACKING OFF, RESET,
/// the end of the connection).
pub struct TrackingSession {
    registry: Arc<Tracking>,
    client: u64,
    pub options: TrackingOptions,
}

impl TrackingSession {
    pub fn new(registry: Arc<Tracking>, client: u64, options: TrackingOptions) -> TrackingSession {
        TrackingSession { registry, client, options }
    }

    /// Whether a read is remembered: default mode, and in OPTIN mode only after CLIENT CACHING
    /// YES, in OPTOUT mode unless after CLIENT CACHING NO.
    pub fn tracks_reads(&self, caching: Option<bool>) -> bool {
        let options = &self.options;
        !options.bcast && (!options.optin || caching == Some(true)) && (!options.optout || caching != Some(false))
    }
}

impl Drop for TrackingSession {
    fn drop(&mut self) {
        self.registry.disable(self.client);
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use hybridkv_resp::ProtocolVersion;

    use super::*;
    use crate::pubsub::ClientSubscriptions;
    use crate::shared::ClientHandle;

    struct World {
        tracking: Tracking,
        pubsub: Arc<PubSub>,
        clients: Clients,
    }

    impl World {
        fn new() -> World {
            World { tracking: Tracking::default(), pubsub: Arc::new(PubSub::default()), clients: Clients::default() }
        }

        /// A tracking client `id` with `options`; its mailbox, through which its notices are read.
        fn tracker(&self, id: u64, options: TrackingOptions) -> ClientSubscriptions {
            let subscriptions = ClientSubscriptions::new(Arc::clone(&self.pubsub), Arc::new(ClientHandle::for_tests(id)));
            self.tracking.enable(id, Arc::clone(subscriptions.mailbox()), options);
            subscriptions
        }

        fn write(&self, writer: u64, key: &str) {
            self.tracking.invalidate(writer, std::iter::once(key.as_bytes()), &self.pubsub, &self.clients);
        }
    }

    fn received(subscriptions: &ClientSubscriptions) -> String {
        let mut output = BytesMut::new();
        subscriptions.mailbox().take_into(&mut output, ProtocolVersion::Resp3);
        assert!(output.is_empty(), "invalidations wait for the replies");
        subscriptions.mailbox().take_all_into(&mut output, ProtocolVersion::Resp3);
        String::from_utf8_lossy(&output).replace("\r\n", " ")
    }

    #[test]
    fn a_remembered_key_is_invalidated_once_for_its_readers_but_a_noloop_writer() {
        let world = World::new();
        let reader = world.tracker(1, TrackingOptions::default());
        let noloop = world.tracker(2, TrackingOptions { noloop: true, ..TrackingOptions::default() });
        world.tracking.remember(1, &[b"k"], &world.pubsub, &world.clients);
        world.tracking.remember(2, &[b"k"], &world.pubsub, &world.clients);
        assert_eq!((world.tracking.counts().keys, world.tracking.counts().items), (1, 2));
        world.write(2, "k");
        assert_eq!(received(&reader), ">2 $10 invalidate *1 $1 k ");
        assert_eq!(received(&noloop), "", "its own write");
        world.write(3, "k");
        assert_eq!(received(&reader), "", "forgotten after the first invalidation");
        assert_eq!((world.tracking.counts().keys, world.tracking.counts().items), (0, 0));
    }

    #[test]
    fn broadcast_clients_hear_of_every_key_under_their_prefixes() {
        let world = World::new();
        let prefixed = world.tracker(1, TrackingOptions { bcast: true, prefixes: vec![Bytes::from("user:")], ..TrackingOptions::default() });
        let everything = world.tracker(2, TrackingOptions { bcast: true, ..TrackingOptions::default() });
        world.write(9, "user:1");
        world.write(9, "order:1");
        assert_eq!(received(&prefixed), ">2 $10 invalidate *1 $6 user:1 ");
        assert_eq!(received(&everything), ">2 $10 invalidate *1 $6 user:1 >2 $10 invalidate *1 $7 order:1 ");
        world.tracking.invalidate_everything(&world.pubsub, &world.clients);
        assert_eq!(received(&prefixed), ">2 $10 invalidate _ ");
    }

    #[test]
    fn the_table_forgets_keys_past_its_limit_with_an_invalidation_and_off_stops_them() {
        let world = World::new();
        let reader = world.tracker(1, TrackingOptions::default());
        let keys: Vec<Vec<u8>> = (0..=TRACKING_TABLE_KEYS_MAX).map(|number| number.to_string().into_bytes()).collect();
        let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        world.tracking.remember(1, &keys, &world.pubsub, &world.clients);
        assert_eq!(world.tracking.counts().keys, TRACKING_TABLE_KEYS_MAX);
        assert!(received(&reader).starts_with(">2 $10 invalidate *1 "), "the forgotten key");
        world.tracking.disable(1);
        world.write(9, "1");
        world.write(9, "2");
        assert_eq!(received(&reader), "", "tracking is off");
    }
}
