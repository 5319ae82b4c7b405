//! State shared by every connection: the database, settings that CONFIG SET may change, the
//! registry of connected clients (CLIENT LIST/KILL), counters for INFO, and the shutdown signal.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use hybridkv_engine::{Database, StripedCounter, NAMESPACES_MAX};
use parking_lot::{Mutex, RwLock};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::blocked_keys::BlockedKeys;
use crate::combining::Combiner;
use crate::command_stats::CommandStats;
use crate::config::ServerConfig;
use crate::monitor::Monitors;
use crate::keyspace_events::KeyspaceEvents;
use crate::pause::ClientPause;
use crate::pubsub::PubSub;
use crate::script_cache::ScriptCache;
use crate::tracking::{Tracking, TrackingOptions};
use crate::slowlog::SlowLog;
use crate::users::{Users, DEFAULT_USER};
use crate::watch::WatchRegistry;

pub struct Shared {
    pub database: Arc<Database>,
    pub config: ServerConfig,
    /// `requirepass` as CONFIG GET shows it; the default user in `users` holds its digest.
    pub requirepass: RwLock<Option<String>>,
    /// ACL users and ACL LOG.
    pub users: Users,
    pub max_clients: AtomicUsize,
    pub clients: Arc<Clients>,
    pub stats: ServerStats,
    /// Calls, time and errors per command (INFO commandstats, errorstats).
    pub command_stats: CommandStats,
    pub slowlog: SlowLog,
    /// MONITOR's feed of the commands that ran.
    pub monitors: Monitors,
    /// Pub/Sub's subscriptions.
    pub pubsub: Arc<PubSub>,
    /// `notify-keyspace-events`: which writes are published.
    pub keyspace_events: Arc<KeyspaceEvents>,
    /// CLIENT TRACKING's clients and remembered keys.
    pub tracking: Arc<Tracking>,
    /// Becomes true once SIGTERM, SIGINT or SHUTDOWN asked the server to stop.
    pub shutdown: watch::Sender<bool>,
    /// The same flag for sessions to poll between requests: reading the watch takes its lock,
    /// an atomic write to a line every worker shares.
    shutting_down: AtomicBool,
    pub started: Instant,
    /// 40 hex characters, new on every start (INFO run_id), as Redis.
    pub run_id: String,
    /// The keys sessions watch, and the flags writes set (`crate::watch`).
    pub watches: Arc<WatchRegistry>,
    /// A BGSAVE is running.
    pub background_save: Arc<AtomicBool>,
    /// Per namespace, by its home (`Database::home`): a task takes its completed device reads
    /// (`server::drive_device_reads`), so sessions may wait for cache loads without a blocking
    /// thread.
    pub device_reads_driven: Vec<AtomicBool>,
    /// Per namespace, by its home: notified after a session queued device reads, which the namespace's
    /// submission task then submits together with those other sessions queue meanwhile.
    pub device_read_submissions: Vec<Arc<Notify>>,
    /// The tasks that drive device reads, stopped at shutdown; held while a database opens, so
    /// that a namespace gets its tasks once (`server::open_database`), and while SWAPDB
    /// exchanges two, so that an open sees one numbering.
    pub device_read_tasks: Mutex<Vec<JoinHandle<()>>>,
    /// CLIENT PAUSE's hold on commands.
    pub pause: ClientPause,
    /// Where single-key writes of different clients to one key meet (`crate::combining`).
    pub combiner: Combiner,
    /// Clients blocked in a blocking list pop, by key.
    pub blocked_keys: BlockedKeys,
    /// EVAL's and SCRIPT LOAD's scripts, for EVALSHA.
    pub scripts: ScriptCache,
}

impl Shared {
    pub fn new(database: Arc<Database>, config: ServerConfig) -> Shared {
        let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_nanos());
        let run_id = format!("{:040x}", seed ^ (u128::from(std::process::id()) << 64));
        Shared {
            requirepass: RwLock::new(config.requirepass.clone()),
            users: Users::new(config.requirepass.as_deref()),
            max_clients: AtomicUsize::new(config.max_clients),
            config,
            clients: Arc::new(Clients::default()),
            stats: ServerStats::default(),
            command_stats: CommandStats::new(crate::commands::stat_row_names()),
            slowlog: SlowLog::default(),
            monitors: Monitors::default(),
            pubsub: Arc::new(PubSub::default()),
            keyspace_events: Arc::new(KeyspaceEvents::default()),
            tracking: Arc::new(Tracking::default()),
            shutdown: watch::channel(false).0,
            shutting_down: AtomicBool::new(false),
            started: Instant::now(),
            run_id: run_id[run_id.len() - 40..].to_string(),
            watches: Arc::new(WatchRegistry::default()),
            background_save: Arc::new(AtomicBool::new(false)),
            device_reads_driven: (0..NAMESPACES_MAX).map(|_| AtomicBool::new(false)).collect(),
            device_read_submissions: (0..NAMESPACES_MAX).map(|_| Arc::new(Notify::new())).collect(),
            device_read_tasks: Mutex::new(Vec::new()),
            pause: ClientPause::default(),
            combiner: Combiner::default(),
            blocked_keys: BlockedKeys::default(),
            scripts: ScriptCache::default(),
            database,
        }
    }

    pub fn request_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
        self.shutdown.send_replace(true);
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Relaxed)
    }

    /// Tells WATCH and CLIENT TRACKING that client `writer` (0: the server) wrote the keys
    /// `keys()` yields, of `database`; called under the keys' locks.
    pub fn keys_written<'k, I: Iterator<Item = &'k [u8]>>(&self, database: usize, writer: u64, keys: impl Fn() -> I) {
        self.watches.touch(database, keys());
        self.tracking.invalidate(writer, keys(), &self.pubsub, &self.clients);
        self.blocked_keys.wake(database, keys());
    }

    /// Every key of some database may have changed (FLUSHDB, FLUSHALL, SWAPDB): tracking
    /// clients drop their whole caches.
    pub fn every_key_written(&self) {
        self.tracking.invalidate_everything(&self.pubsub, &self.clients);
        self.blocked_keys.wake_all();
    }
}

#[derive(Default)]
pub struct ServerStats {
    /// Added to by every request: striped, so the workers do not trade one cache line.
    pub commands_processed: StripedCounter,
    pub connections_received: AtomicU64,
    pub rejected_connections: AtomicU64,
    pub net_input_bytes: StripedCounter,
    pub net_output_bytes: StripedCounter,
    pub protocol_errors: AtomicU64,
    /// Commands per second over the last sampling interval (see `server::sample_ops_per_second`).
    pub ops_per_second: AtomicU64,
    /// Clients whose reply a blocking command holds back now (a gauge: RESETSTAT leaves it).
    pub blocked_clients: AtomicU64,
    /// Writes that ran in another client's transaction (`crate::combining`), and the rounds
    /// (transactions) they ran in.
    pub combined_writes: AtomicU64,
    pub combined_write_rounds: AtomicU64,
}

impl ServerStats {
    pub fn reset(&self) {
        for counter in [&self.commands_processed, &self.net_input_bytes, &self.net_output_bytes] {
            counter.reset();
        }
        for counter in [&self.connections_received, &self.rejected_connections, &self.protocol_errors, &self.combined_writes, &self.combined_write_rounds] {
            counter.store(0, Ordering::Relaxed);
        }
    }
}

/// One connected client as CLIENT LIST shows it; the session updates it, others read it.
pub struct ClientHandle {
    pub id: u64,
    pub address: SocketAddr,
    pub local_address: SocketAddr,
    pub created: Instant,
    pub name: Mutex<Option<String>>,
    /// The ACL user the client authenticated as (`default` until AUTH).
    pub user: Mutex<Bytes>,
    pub library: Mutex<(String, String)>,
    pub database: AtomicUsize,
    pub last_command: Mutex<&'static str>,
    pub last_active: Mutex<Instant>,
    pub kill: Notify,
    pub killed: AtomicBool,
    /// A `Blocking` state: whether the client waits in a blocking command, and how CLIENT
    /// UNBLOCK ended the wait.
    blocking: AtomicU8,
    /// Wakes the connection of a blocked client that CLIENT UNBLOCK unblocked.
    pub unblocked: Notify,
    /// What CLIENT LIST shows of the session, set by its connection after every request
    /// (`ClientHandle::show_session`): the RESP version, and the commands queued in MULTI or
    /// -1 outside one.
    resp: AtomicU8,
    queued: AtomicI64,
    /// In MONITOR mode (CLIENT LIST flag O).
    pub monitoring: AtomicBool,
    /// Subscriptions to channels, patterns and shard channels (CLIENT LIST's sub, psub, ssub;
    /// flag P while any), set by the client's own session.
    subscriptions: [AtomicUsize; 3],
    /// CLIENT TRACKING as CLIENT LIST shows it: `redir` (-1 off, 0 no REDIRECT, else the
    /// target) and the flags t (on), B (BCAST), R (the REDIRECT target left).
    tracking_redirect: AtomicI64,
    tracking_flags: AtomicU8,
}

const TRACKING_ON: u8 = 1;
const TRACKING_BCAST: u8 = 2;
const TRACKING_BROKEN_REDIRECT: u8 = 4;

/// Where a client stands with blocking commands (WAIT, WAITAOF): CLIENT UNBLOCK moves a blocked
/// client to an unblocked state, which its connection reads when it wakes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Blocking {
    NotBlocked = 0,
    Blocked = 1,
    /// Answer as if the timeout had passed.
    UnblockedAsTimeout = 2,
    /// Answer `-UNBLOCKED client unblocked via CLIENT UNBLOCK`.
    UnblockedWithError = 3,
    /// Held back by CLIENT PAUSE: blocked to CLIENT LIST and INFO, but CLIENT UNBLOCK does
    /// not end it (Redis 7.0.15 crashed when asked to).
    Postponed = 4,
}

impl ClientHandle {
    fn new(id: u64, address: SocketAddr, local_address: SocketAddr) -> ClientHandle {
        let now = Instant::now();
        ClientHandle {
            id,
            address,
            local_address,
            created: now,
            name: Mutex::new(None),
            user: Mutex::new(Bytes::from_static(DEFAULT_USER.as_bytes())),
            library: Mutex::new((String::new(), String::new())),
            database: AtomicUsize::new(0),
            last_command: Mutex::new("NULL"),
            last_active: Mutex::new(now),
            kill: Notify::new(),
            killed: AtomicBool::new(false),
            blocking: AtomicU8::new(Blocking::NotBlocked as u8),
            unblocked: Notify::new(),
            resp: AtomicU8::new(2),
            queued: AtomicI64::new(-1),
            monitoring: AtomicBool::new(false),
            subscriptions: Default::default(),
            tracking_redirect: AtomicI64::new(-1),
            tracking_flags: AtomicU8::new(0),
        }
    }

    #[cfg(test)]
    pub fn for_tests(id: u64) -> ClientHandle {
        let address: SocketAddr = "127.0.0.1:1".parse().expect("an address");
        ClientHandle::new(id, address, address)
    }

    pub fn blocking(&self) -> Blocking {
        match self.blocking.load(Ordering::Acquire) {
            0 => Blocking::NotBlocked,
            1 => Blocking::Blocked,
            2 => Blocking::UnblockedAsTimeout,
            3 => Blocking::UnblockedWithError,
            4 => Blocking::Postponed,
            other => unreachable!("blocking state {other} is never stored"),
        }
    }

    /// Set by the client's own connection: Blocked or Postponed when it starts to wait,
    /// NotBlocked after.
    pub fn set_blocking(&self, state: Blocking) {
        assert!(matches!(state, Blocking::Blocked | Blocking::Postponed | Blocking::NotBlocked), "CLIENT UNBLOCK sets the others");
        self.blocking.store(state as u8, Ordering::Release);
    }

    /// CLIENT UNBLOCK: ends the wait of this client if it is blocked; whether it was.
    pub fn unblock(&self, with_error: bool) -> bool {
        let unblocked = if with_error { Blocking::UnblockedWithError } else { Blocking::UnblockedAsTimeout };
        let was_blocked =
            self.blocking.compare_exchange(Blocking::Blocked as u8, unblocked as u8, Ordering::AcqRel, Ordering::Acquire).is_ok();
        if was_blocked {
            self.unblocked.notify_one();
        }
        was_blocked
    }

    /// Records what CLIENT LIST shows of the session: `queued` commands when in MULTI.
    pub fn show_session(&self, queued: Option<usize>, resp: u8) {
        self.queued.store(queued.map_or(-1, |queued| queued as i64), Ordering::Relaxed);
        self.resp.store(resp, Ordering::Relaxed);
    }

    /// Records the session's subscriptions to channels, patterns and shard channels.
    pub fn show_subscriptions(&self, counts: [usize; 3]) {
        for (shown, count) in self.subscriptions.iter().zip(counts) {
            shown.store(count, Ordering::Relaxed);
        }
    }

    /// Records the session's tracking (None: off); its REDIRECT target counts as present.
    pub fn show_tracking(&self, options: Option<&TrackingOptions>) {
        let redirect = options.map_or(-1, |options| options.redirect.map_or(0, |target| target as i64));
        self.tracking_redirect.store(redirect, Ordering::Relaxed);
        let flags = options.map_or(0, |options| TRACKING_ON | if options.bcast { TRACKING_BCAST } else { 0 });
        self.tracking_flags.store(flags, Ordering::Relaxed);
    }

    /// Marks the REDIRECT target of this tracking client gone (flag R, TRACKINGINFO's
    /// `broken_redirect`); true the first time, when the client is to be told.
    pub fn mark_redirect_broken(&self) -> bool {
        self.tracking_flags.fetch_or(TRACKING_BROKEN_REDIRECT, Ordering::Relaxed) & TRACKING_BROKEN_REDIRECT == 0
    }

    pub fn redirect_broken(&self) -> bool {
        self.tracking_flags.load(Ordering::Relaxed) & TRACKING_BROKEN_REDIRECT != 0
    }

    /// Subscribed to anything (CLIENT LIST flag P, TYPE pubsub).
    pub fn is_subscriber(&self) -> bool {
        self.subscriptions.iter().any(|count| count.load(Ordering::Relaxed) > 0)
    }

    /// CLIENT LIST's flags, in Redis's order: O (monitor), P (subscriber), x (in MULTI), b
    /// (blocked), t (tracking), R (its REDIRECT target left), B (BCAST), or N.
    fn flags(&self) -> String {
        let tracking = self.tracking_flags.load(Ordering::Relaxed);
        let flags: String = [
            (self.monitoring.load(Ordering::Relaxed), 'O'),
            (self.is_subscriber(), 'P'),
            (self.queued.load(Ordering::Relaxed) >= 0, 'x'),
            (self.blocking() != Blocking::NotBlocked, 'b'),
            (tracking & TRACKING_ON != 0, 't'),
            (tracking & TRACKING_BROKEN_REDIRECT != 0, 'R'),
            (tracking & TRACKING_BCAST != 0, 'B'),
        ]
        .iter()
        .filter_map(|(set, flag)| set.then_some(*flag))
        .collect();
        if flags.is_empty() { "N".into() } else { flags }
    }

    /// One line of CLIENT LIST / CLIENT INFO, with Redis's field names.
    pub fn describe(&self) -> String {
        let now = Instant::now();
        let library = self.library.lock();
        format!(
            "id={} addr={} laddr={} fd=0 name={} age={} idle={} flags={} db={} sub={} psub={} ssub={} multi={} qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={} user={} redir={} resp={} lib-name={} lib-ver={}\n",
            self.id,
            self.address,
            self.local_address,
            self.name.lock().as_deref().unwrap_or(""),
            now.duration_since(self.created).as_secs(),
            now.duration_since(*self.last_active.lock()).as_secs(),
            self.flags(),
            self.database.load(Ordering::Relaxed),
            self.subscriptions[0].load(Ordering::Relaxed),
            self.subscriptions[1].load(Ordering::Relaxed),
            self.subscriptions[2].load(Ordering::Relaxed),
            self.queued.load(Ordering::Relaxed),
            self.last_command.lock(),
            String::from_utf8_lossy(&self.user.lock()),
            self.tracking_redirect.load(Ordering::Relaxed),
            self.resp.load(Ordering::Relaxed),
            library.0,
            library.1,
        )
    }
}

#[derive(Default)]
pub struct Clients {
    next_id: AtomicU64,
    connected: Mutex<BTreeMap<u64, Arc<ClientHandle>>>,
}

impl Clients {
    /// Registers a client unless `max_clients` are connected already.
    pub fn register(&self, address: SocketAddr, local_address: SocketAddr, max_clients: usize) -> Option<Arc<ClientHandle>> {
        let mut connected = self.connected.lock();
        if connected.len() >= max_clients {
            return None;
        }
        let handle = Arc::new(ClientHandle::new(self.next_id.fetch_add(1, Ordering::Relaxed) + 1, address, local_address));
        connected.insert(handle.id, handle.clone());
        Some(handle)
    }

    pub fn unregister(&self, id: u64) {
        self.connected.lock().remove(&id);
    }

    pub fn count(&self) -> usize {
        self.connected.lock().len()
    }

    pub fn find(&self, id: u64) -> Option<Arc<ClientHandle>> {
        self.connected.lock().get(&id).cloned()
    }

    pub fn all(&self) -> Vec<Arc<ClientHandle>> {
        self.connected.lock().values().cloned().collect()
    }

    /// Asks every client matching `filter` to disconnect; returns how many.
    pub fn kill_where(&self, filter: impl Fn(&ClientHandle) -> bool) -> usize {
        let mut killed = 0;
        for handle in self.all() {
            if filter(&handle) {
                handle.killed.store(true, Ordering::Relaxed);
                handle.kill.notify_one();
                killed += 1;
            }
        }
        killed
    }
}
