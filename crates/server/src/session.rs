//! One client connection: read bytes, decode every complete request, execute them in order,
//! write the replies (pipelining), until the client leaves, is killed, breaks the protocol or the
//! server shuts down.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use hybridkv_engine::{CommitTicket, Namespace, SubmitReads};
use hybridkv_resp::{encode, DecodeLimits, ProtocolError, ProtocolVersion, Reply, RequestDecoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::command::{
    self, engine_error_reply, unknown_command, wrong_arity, CommandSpec, ADMIN, BEFORE_AUTH, BLIND_WRITE, BLOCKS_ON_KEYS, CROSSES_DATABASES, GROUPED_ARGUMENT_BYTES_MAX, KEEPS_VALUE_OPEN,
    GROUPED_WRITES_MAX, IN_MULTI, READONLY, READS_KEYS_BY_PATTERN, TRANSACTION_CONTROL, WRITE,
};
use crate::combining::{Answer, Combiner, Entered};
use crate::commands;
use crate::config::{EngineCallMode, READ_CHUNK_BYTES, REPLY_FLUSH_BYTES};
use crate::monitor::MONITOR_BACKLOG_LINES;
use crate::pause::PauseHold;
use crate::shared::{Blocking, ClientHandle, Shared};
use crate::keyspace_events::KeyEvent;
use crate::pubsub::{ClientSubscriptions, Mailbox, PubSub};
use crate::tracking::TrackingSession;
use crate::users::{Denial, LogContext, Permissions, Users};
use crate::watch::{WatchRegistry, WatchedKeys};

/// How often a monitor's or subscriber's connection whose write does not progress looks
/// whether it fell too far behind (a client that stopped reading would hold the write for ever).
const STALLED_WRITE_CHECK_INTERVAL: Duration = Duration::from_millis(100);
/// Requests decoded ahead before they are executed as one batch (one engine-call hand-off).
const BATCH_COMMANDS_MAX: usize = 1024;
/// Largest single read reserved for a pending large argument; the buffer grows past it as bytes
/// arrive, but a client announcing a huge bulk cannot make us allocate it up front.
const READ_RESERVE_BYTES_MAX: usize = 1024 * 1024;
/// Keys of one batch of requests whose records are loaded into the cache ahead of the batch.
const LOAD_AHEAD_KEYS_MAX: usize = 1024;
/// Keys of a run of pipelined reads prefetched together (`prefetch_read_run`): as many as the
/// engine overlaps in one group of `get_many`.
const READ_RUN_PREFETCH_KEYS_MAX: usize = 16;

/// Bytes to reserve before the next read: a pending large argument gets room for what it still
/// needs, capped by READ_RESERVE_BYTES_MAX and by what is already buffered, so the buffer grows
/// with the bytes that arrive (doubling) and a client that announces a huge bulk and dribbles it
/// holds memory in proportion to what it sent, not a megabyte per connection.
fn read_reserve_bytes(bulk_bytes_wanted: usize, buffered_bytes: usize) -> usize {
    bulk_bytes_wanted.min(READ_RESERVE_BYTES_MAX).min(buffered_bytes).max(READ_CHUNK_BYTES)
}

pub struct MultiState {
    pub queued: Vec<(&'static CommandSpec, Vec<Bytes>)>,
    /// A command failed to queue: EXEC must answer EXECABORT.
    pub failed: bool,
}

/// Per-connection protocol state that commands read and change.
/// CLIENT REPLY ON, OFF or SKIP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyMode {
    On,
    Off,
    /// This many more replies are dropped: SKIP's own, then the next command's.
    Skip(u8),
}

pub struct SessionState {
    pub client: Arc<ClientHandle>,
    pub database: usize,
    pub protocol: ProtocolVersion,
    pub authenticated: bool,
    /// What the client's ACL user may run, as of `permissions_epoch` (`Users::epoch`): reread
    /// when the users change (`refresh_permissions`).
    pub permissions: Permissions,
    permissions_epoch: u64,
    pub multi: Option<MultiState>,
    pub watched: WatchedKeys,
    pub close_after_reply: bool,
    /// MONITOR ran: the connection streams commands once the replies before are sent.
    pub enters_monitor_mode: bool,
    /// The command's reply is not sent (SHUTDOWN closes the connection without one, as Redis).
    pub suppress_reply: bool,
    /// CLIENT REPLY: whether replies are sent.
    pub replies: ReplyMode,
    /// What must be durable before the replies gathered so far may be sent: per namespace, the
    /// ticket of its latest write (it covers the earlier ones).
    pub pending_commits: Vec<(Arc<Namespace>, CommitTicket)>,
    /// Writes that registered a ticket, counted so the session knows which replies depend on one.
    pub commits_registered: u64,
    /// Set by a command that blocks its client (WAIT, WAITAOF asking for replicas): its reply
    /// is held back that long (EXEC drops it: nothing blocks inside a transaction, as in Redis).
    pub reply_delay: Option<ReplyDelay>,
    /// Set by a blocking list pop that found its lists empty (and registered its client in
    /// `Shared::blocked_keys`): the connection waits for a write to the keys, then runs the
    /// command again. Never set inside EXEC.
    pub key_wait: Option<KeyWait>,
    /// The deadline of a blocking pop run again after a wake: its timeout counts from the first
    /// run, not from each.
    pub retry_delay: Option<ReplyDelay>,
    /// The registration of a blocking pop run again after a wake, kept through that run: a pop
    /// that blocks again keeps its place in its keys' queues; one that ends takes it off them.
    kept_registration: Option<KeysRegistration>,
    /// EXEC is running its queued commands (nothing blocks there, as in Redis).
    pub in_exec: bool,
    /// A script is running the command (`redis.call`): XREAD refuses BLOCK, as in Redis.
    pub in_script: bool,
    /// Pub/Sub: the channels and patterns the client listens to and its mailbox, from its first
    /// (un)subscription on.
    pub pubsub: Option<ClientSubscriptions>,
    /// The command's reply went to the mailbox (subscription confirmations): its returned
    /// reply is not sent.
    pub reply_in_mailbox: bool,
    /// Keyspace notifications of the writes of the command running, published once they
    /// committed (`Call::notify`).
    pub key_events: Vec<KeyEvent>,
    /// CLIENT TRACKING, while on.
    pub tracking: Option<TrackingSession>,
    /// CLIENT CACHING YES or NO, for the next command.
    pub caching: Option<bool>,
}

/// How long a blocking command's reply is held back. The client's later requests run only
/// after it, as a blocked Redis client's do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyDelay {
    Until(Instant),
    /// A timeout of 0: until the client disconnects or is killed, or the server shuts down.
    Forever,
}

/// What a blocking list pop waits for: a write to one of `keys` of `database` before `delay`
/// ends, else `timeout_reply` is its reply.
pub struct KeyWait {
    pub database: usize,
    pub keys: Vec<Bytes>,
    pub delay: ReplyDelay,
    pub timeout_reply: Reply,
    /// The command to run again after a wake: its own arguments, or XREAD's with `$` replaced
    /// by the ID it stood for when the command first ran.
    pub arguments: Vec<Bytes>,
}

impl ReplyDelay {
    /// The delay of a blocking command's timeout in milliseconds, 0 meaning no timeout.
    pub fn of_timeout_ms(timeout_ms: u64) -> ReplyDelay {
        match timeout_ms {
            0 => ReplyDelay::Forever,
            // A deadline past what `Instant` holds is as good as none.
            _ => Instant::now().checked_add(Duration::from_millis(timeout_ms)).map_or(ReplyDelay::Forever, ReplyDelay::Until),
        }
    }
}

impl SessionState {
    pub fn new(client: Arc<ClientHandle>, password_required: bool, watches: Arc<WatchRegistry>) -> SessionState {
        SessionState {
            client,
            database: 0,
            protocol: ProtocolVersion::Resp2,
            authenticated: !password_required,
            permissions: Permissions::default(),
            // No epoch: the first command reads the permissions.
            permissions_epoch: u64::MAX,
            multi: None,
            watched: WatchedKeys::new(watches),
            close_after_reply: false,
            enters_monitor_mode: false,
            suppress_reply: false,
            replies: ReplyMode::On,
            pending_commits: Vec::new(),
            commits_registered: 0,
            reply_delay: None,
            key_wait: None,
            retry_delay: None,
            kept_registration: None,
            in_exec: false,
            in_script: false,
            pubsub: None,
            reply_in_mailbox: false,
            key_events: Vec::new(),
            tracking: None,
            caching: None,
        }
    }

    /// Rereads the permissions of the client's user if the users changed since they were read
    /// (a user deleted meanwhile may run nothing; ACL DELUSER disconnects its clients anyway).
    pub fn refresh_permissions(&mut self, users: &Users) {
        let epoch = users.epoch();
        if epoch != self.permissions_epoch {
            let user = self.client.user.lock().clone();
            self.permissions = users.get(&user).map_or_else(Permissions::default, |user| user.permissions());
            self.permissions_epoch = epoch;
        }
    }

    /// Whether the permissions are as of the users' latest change.
    fn permissions_current(&self, users: &Users) -> bool {
        self.permissions_epoch == users.epoch()
    }

    /// The client is now `user`'s (AUTH, HELLO AUTH, RESET).
    pub fn become_user(&mut self, user: Bytes, authenticated: bool, users: &Users) {
        *self.client.user.lock() = user;
        self.authenticated = authenticated;
        self.permissions_epoch = u64::MAX;
        self.refresh_permissions(users);
    }

    /// CLIENT TRACKING OFF (and RESET): nothing more is remembered or invalidated for it.
    pub fn stop_tracking(&mut self) {
        self.tracking = None;
        self.caching = None;
        self.client.show_tracking(None);
    }

    /// The session's subscriptions and mailbox, created the first time Pub/Sub or CLIENT
    /// TRACKING needs them and kept for the connection.
    pub fn subscriptions(&mut self, pubsub: &Arc<PubSub>) -> &mut ClientSubscriptions {
        let client = &self.client;
        self.pubsub.get_or_insert_with(|| ClientSubscriptions::new(Arc::clone(pubsub), Arc::clone(client)))
    }

    /// Subscribed to any channel, pattern or shard channel.
    pub fn is_subscriber(&self) -> bool {
        self.pubsub.as_ref().is_some_and(|subscriptions| subscriptions.total() > 0)
    }

    /// Moves the notices waiting in the session's mailbox, if it has one, that may precede a
    /// reply to `output`.
    fn take_notices(&self, output: &mut BytesMut) {
        if let Some(subscriptions) = &self.pubsub {
            subscriptions.mailbox().take_into(output, self.protocol);
        }
    }

    /// Moves every notice waiting in the session's mailbox to `output`: after a batch's
    /// replies, or while the client waits (invalidations wait for the replies before them).
    fn take_all_notices(&self, output: &mut BytesMut) {
        if let Some(subscriptions) = &self.pubsub {
            subscriptions.mailbox().take_all_into(output, self.protocol);
        }
    }

    /// The reply of the write that returned `ticket` is sent only once the ticket is durable.
    pub fn hold_reply_until_durable(&mut self, namespace: &Arc<Namespace>, ticket: CommitTicket) {
        self.commits_registered += 1;
        match self.pending_commits.iter_mut().find(|(held, _)| Arc::ptr_eq(held, namespace)) {
            Some((_, held)) => *held = held.covering(ticket),
            None => self.pending_commits.push((namespace.clone(), ticket)),
        }
    }

    /// Makes `number` (an opened database) the session's database.
    pub fn select(&mut self, number: usize) {
        self.database = number;
        self.client.database.store(number, Ordering::Relaxed);
    }

    /// Whether the command running is a blocking pop run again after a wake: it was counted
    /// (INFO commandstats, total_commands_processed), logged (SLOWLOG) and shown (MONITOR) when it
    /// first ran, as Redis counts a blocked command once.
    pub fn is_rerun_after_wake(&self) -> bool {
        self.kept_registration.is_some()
    }

    /// Whether the reply of the command that just ran is sent (CLIENT REPLY, SHUTDOWN); counts
    /// a skipped reply off.
    fn takes_reply(&mut self) -> bool {
        match self.replies {
            _ if self.suppress_reply => false,
            ReplyMode::On => true,
            ReplyMode::Off => false,
            ReplyMode::Skip(replies) => {
                self.replies = if replies > 1 { ReplyMode::Skip(replies - 1) } else { ReplyMode::On };
                false
            }
        }
    }

    fn fail_multi(&mut self) {
        if let Some(multi) = &mut self.multi {
            multi.failed = true;
        }
    }
}

/// Checks and runs (or queues, inside MULTI) one request.
pub fn execute(args: Vec<Bytes>, session: &mut SessionState, shared: &Shared) -> Reply {
    let reply = check_and_run(args, session, shared);
    shared.keyspace_events.publish_queued(&shared.pubsub, &mut session.key_events);
    let resp = if session.protocol == ProtocolVersion::Resp3 { 3 } else { 2 };
    session.client.show_session(session.multi.as_ref().map(|multi| multi.queued.len()), resp);
    reply
}

fn check_and_run(args: Vec<Bytes>, session: &mut SessionState, shared: &Shared) -> Reply {
    if !session.is_rerun_after_wake() {
        shared.stats.commands_processed.add(1);
    }
    let Some(spec) = commands::lookup(&args[0]) else {
        session.fail_multi();
        let reply = unknown_command(&args);
        shared.command_stats.record_error_reply(error_text(&reply));
        return reply;
    };
    // CLIENT LIST's cmd=: `command|subcommand` for a command with subcommands, as in Redis 7.
    *session.client.last_command.lock() = commands::full_name(spec, &args);
    session.refresh_permissions(&shared.users);
    if let Some(refusal) = refusal(spec, &args, session, shared).or_else(|| refusal_while_subscribed(spec, &args, session)) {
        shared.command_stats.record_rejection(commands::stat_row(spec, &args), error_text(&refusal));
        return refusal;
    }
    remember_tracked_reads(spec, &args, session, shared);
    if session.multi.is_some() && !spec.has(TRANSACTION_CONTROL) {
        return queue(spec, args, session, shared);
    }
    command::run_measured(spec, &args, session, shared)
}

/// Why a request of a known command is refused before it runs or is queued (Redis counts these
/// as the command's rejected calls), if it is.
/// A denial of the user's permissions goes to ACL LOG.
fn refusal(spec: &'static CommandSpec, args: &[Bytes], session: &mut SessionState, shared: &Shared) -> Option<Reply> {
    let refusal = match request_refusal(spec, args, session.authenticated) {
        Some(refusal) => refusal,
        None => {
            let denial = denial(spec, args, session)?;
            let context = if session.multi.is_some() { LogContext::Multi } else { LogContext::TopLevel };
            shared.users.log.record_denial(&denial, context, &session.client);
            Reply::error(denial.error_text())
        }
    };
    if spec.name == "exec" {
        // Redis discards the transaction of an EXEC it refuses, and says why.
        session.multi = None;
        session.watched.clear();
        let text = error_text(&refusal);
        return Some(Reply::error(format!("EXECABORT Transaction discarded because of: {}", text.strip_prefix("ERR ").unwrap_or(text))));
    }
    // Outside MULTI (where NOAUTH is answered: MULTI needs AUTH first) this does nothing.
    session.fail_multi();
    Some(refusal)
}

/// `refusal` without its logging.
fn refusal_reason(spec: &'static CommandSpec, args: &[Bytes], session: &SessionState) -> Option<Reply> {
    request_refusal(spec, args, session.authenticated).or_else(|| denial(spec, args, session).map(|denial| Reply::error(denial.error_text())))
}

/// What the session's ACL user may not do of this request, if anything.
fn denial(spec: &'static CommandSpec, args: &[Bytes], session: &SessionState) -> Option<Denial> {
    session.permissions.check(spec, args).err()
}

/// A refusal of the request itself, whoever sends it: arity, subcommand, authentication.
fn request_refusal(spec: &CommandSpec, args: &[Bytes], authenticated: bool) -> Option<Reply> {
    if !spec.arity_ok(args.len()) {
        return Some(wrong_arity(spec.name).into_reply());
    }
    if let Err(error) = commands::check_subcommand(spec, args) {
        return Some(error.into_reply());
    }
    if !authenticated && !spec.has(BEFORE_AUTH) {
        return Some(Reply::error("NOAUTH Authentication required."));
    }
    None
}

/// CLIENT TRACKING: the keys of a read are remembered for the client before it reads them
/// (queued in MULTI: before EXEC reads them), so a write after the read finds them; CLIENT
/// CACHING's choice applies to this command only.
fn remember_tracked_reads(spec: &CommandSpec, args: &[Bytes], session: &mut SessionState, shared: &Shared) {
    let caching = session.caching.take();
    let Some(tracking) = &session.tracking else { return };
    if !spec.has(READONLY) || !tracking.tracks_reads(caching) {
        return;
    }
    let keys = spec.keys.keys(args);
    if !keys.is_empty() {
        shared.tracking.remember(session.client.id, &keys, &shared.pubsub, &shared.clients);
    }
}

/// Commands a RESP2 client may send while it is subscribed to anything: the replies it reads
/// then are Pub/Sub notices.
const ALLOWED_WHILE_SUBSCRIBED: &[&str] = &["subscribe", "psubscribe", "ssubscribe", "unsubscribe", "punsubscribe", "sunsubscribe", "ping", "quit", "reset"];

/// Redis's refusal of other commands from a subscribed RESP2 client (after the arity and
/// subcommand checks, as Redis orders them).
fn refusal_while_subscribed(spec: &'static CommandSpec, args: &[Bytes], session: &SessionState) -> Option<Reply> {
    if !session.is_subscriber() || session.protocol != ProtocolVersion::Resp2 || ALLOWED_WHILE_SUBSCRIBED.contains(&spec.name) {
        return None;
    }
    let name = commands::stat_row(spec, args).map_or(spec.name, |row| commands::stat_row_names()[row].as_str());
    Some(Reply::error(format!(
        "ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
    )))
}

/// Whether CLIENT PAUSE holds this request back, as Redis postpones a command: once it is known
/// to run or be queued (unknown commands and refusals are answered at once); a write pause holds
/// writes, queued ones included, and the EXEC of a transaction that queued one.
fn held_by_pause(args: &[Bytes], session: &SessionState, shared: &Shared) -> Option<PauseHold> {
    if !shared.pause.is_set() {
        return None;
    }
    let spec = commands::lookup(&args[0])?;
    if refusal_reason(spec, args, session).is_some() {
        return None;
    }
    let writes = match spec.name {
        "exec" => session.multi.as_ref().is_some_and(|multi| multi.queued.iter().any(|(queued, _)| queued.has(WRITE))),
        _ => spec.has(WRITE),
    };
    shared.pause.holds(writes)
}

/// The text of an error reply ("" for any other reply).
fn error_text(reply: &Reply) -> &str {
    match reply {
        Reply::Error(text) => text,
        _ => "",
    }
}

/// The spec of a command that may open or join a write group (`command::run_grouped`): a
/// known single-key write that `execute` would run directly (valid arity and subcommand, not
/// refused to a subscriber), from an authenticated client outside MULTI; not a script, which
/// reaches only the keys it declares (in a group, its transaction would hold the other writes'
/// keys too).
fn groupable_write(args: &[Bytes], session: &SessionState, users: &Users) -> Option<&'static CommandSpec> {
    if session.multi.is_some() || !session.authenticated || session.replies != ReplyMode::On || !session.permissions_current(users) {
        return None;
    }
    let spec = commands::lookup(&args[0])?;
    let script = spec.group == "scripting";
    let single_key_write = spec.keys.only_key(args).is_some() && spec.has(WRITE) && !spec.has(CROSSES_DATABASES | BLOCKS_ON_KEYS | READS_KEYS_BY_PATTERN) && !script;
    let refused = || refusal_reason(spec, args, session).or_else(|| refusal_while_subscribed(spec, args, session)).is_some();
    (single_key_write && !refused()).then_some(spec)
}

pub(crate) fn argument_bytes(args: &[Bytes]) -> usize {
    args.iter().map(Bytes::len).sum()
}

/// The group `first` opens with the single-key writes pending after it, to any keys (up to
/// `GROUPED_WRITES_MAX` commands and `GROUPED_ARGUMENT_BYTES_MAX` bytes); `first` back when no
/// other command joins it.
fn take_write_group(
    first: Vec<Bytes>,
    pending: &mut VecDeque<Vec<Bytes>>,
    session: &SessionState,
    users: &Users,
) -> Result<Vec<command::ReadyCommand>, Vec<Bytes>> {
    if pending.is_empty() {
        return Err(first);
    }
    let Some(spec) = groupable_write(&first, session, users) else { return Err(first) };
    let mut bytes = argument_bytes(&first);
    let joins = |next: &Vec<Bytes>, bytes: usize| {
        let joining = groupable_write(next, session, users)?;
        (bytes + argument_bytes(next) <= GROUPED_ARGUMENT_BYTES_MAX).then_some(joining)
    };
    let mut joined = Vec::new();
    while joined.len() + 1 < GROUPED_WRITES_MAX {
        let Some(joining) = pending.front().and_then(|next| joins(next, bytes)) else { break };
        let args = pending.pop_front().expect("looked at above");
        bytes += argument_bytes(&args);
        joined.push((joining, args));
    }
    if joined.is_empty() {
        return Err(first);
    }
    joined.insert(0, (spec, first));
    Ok(joined)
}

/// Marks the reply written to `output` from `reply_start` on as one to hold until the writes
/// it acknowledges are durable, if its command registered some.
fn mark_durable_reply(state: &SessionState, output: &BytesMut, spans: &mut Vec<Range<usize>>, reply_start: usize, commits_before: u64) {
    // A reply that is not sent (CLIENT REPLY OFF) is not replaced by a failed wait's error either.
    if state.commits_registered != commits_before && output.len() > reply_start {
        spans.push(reply_start..output.len());
    }
}

/// The slot where a single-key write meets other clients' writes to its key
/// (`crate::combining`), if it may: one whose command keeps its value open, that a pipelined
/// group could hold and that blocks no worker, its client's last pending request, from a
/// client that tracks no keys.
fn single_write_slot(args: &[Bytes], pending: &VecDeque<Vec<Bytes>>, state: &SessionState, shared: &Shared) -> Option<(&'static CommandSpec, usize)> {
    let keeps_open = commands::lookup(&args[0]).is_some_and(|spec| spec.has(KEEPS_VALUE_OPEN));
    if !keeps_open || !pending.is_empty() || state.tracking.is_some() || may_block(args, shared) {
        return None;
    }
    let spec = groupable_write(args, state, &shared.users)?;
    Some((spec, Combiner::slot_of(state.database, spec.keys.only_key(args)?)))
}

/// The slot where a pipelined group meets other clients' writes, if it may: its keys share
/// one slot, it ends its client's pending requests, and the client tracks no keys. Any
/// single-key writes: a group pays one meeting for all of its writes, and every round spares
/// the lock's hand-overs between the groups it holds (`redis-benchmark -P 16 -t sadd`: 287–311k
/// requests/s when only writes that keep their value open met, 498–505k with every group).
fn group_slot(group: &[command::ReadyCommand], pending: &VecDeque<Vec<Bytes>>, state: &SessionState) -> Option<usize> {
    if !pending.is_empty() || state.tracking.is_some() {
        return None;
    }
    let slot_of = |(spec, args): &command::ReadyCommand| spec.keys.only_key(args).map(|key| Combiner::slot_of(state.database, key));
    let first = slot_of(group.first()?)?;
    group.iter().all(|write| slot_of(write) == Some(first)).then_some(first)
}

/// Enters writes into their slot, lending the session if they queue.
fn enter_slot(slot: usize, writes: Vec<command::ReadyCommand>, state: &mut SessionState, shared: &Shared, spare_state: &mut Option<SessionState>) -> Entered {
    let (client, watches) = (Arc::clone(&state.client), Arc::clone(&shared.watches));
    let stand_in = || spare_state.take().unwrap_or_else(|| SessionState::new(client, false, watches));
    shared.combiner.enter(slot, writes, state, stand_in)
}

/// Runs a write group in one transaction, or its commands one at a time when that fails (see
/// `command::run_grouped`).
fn execute_group(group: Vec<command::ReadyCommand>, session: &mut SessionState, shared: &Shared) -> Vec<Reply> {
    let owners = vec![0; group.len()];
    if let Some(replies) = run_group_accounted(&group, &owners, &mut [&mut *session], shared) {
        return replies;
    }
    group.into_iter().map(|(_, args)| execute(args, session, shared)).collect()
}

/// Runs a write group in one transaction (`command::run_grouped`, command `i` in
/// `sessions[owners[i]]`) and accounts for each command in its session as `execute` would:
/// keyspace events published, counts, statistics (each with an equal share of the group's
/// time), the monitors' feed. None when the transaction failed: nothing was written.
pub(crate) fn run_group_accounted(group: &[command::ReadyCommand], owners: &[usize], sessions: &mut [&mut SessionState], shared: &Shared) -> Option<Vec<Reply>> {
    let started = Instant::now();
    let replies = command::run_grouped(group, owners, sessions, shared)?;
    for session in sessions.iter_mut() {
        shared.keyspace_events.publish_queued(&shared.pubsub, &mut session.key_events);
    }
    shared.stats.commands_processed.add(group.len() as u64);
    let share = started.elapsed() / group.len() as u32;
    for (((spec, args), reply), &owner) in group.iter().zip(&replies).zip(owners) {
        let session = &*sessions[owner];
        *session.client.last_command.lock() = spec.name;
        command::account(spec, args, share, reply, session, shared);
    }
    Some(replies)
}

fn queue(spec: &'static CommandSpec, args: Vec<Bytes>, session: &mut SessionState, shared: &Shared) -> Reply {
    let limit = shared.config.multi_queued_commands_max;
    let Some(multi) = &mut session.multi else { unreachable!("queue is only called inside MULTI") };
    let refusal = if spec.group == "pubsub" && !spec.has(IN_MULTI) {
        // Redis queues them, and EXEC's reply then holds more replies than commands.
        Some(Reply::error(format!("ERR {} inside MULTI is not allowed", spec.name.to_ascii_uppercase())))
    } else if !spec.has(IN_MULTI) {
        Some(Reply::error("ERR Command not allowed inside a transaction"))
    } else if multi.queued.len() >= limit {
        Some(Reply::error(format!("ERR MULTI queue is full ({limit} commands): EXEC commits them as one batch")))
    } else {
        None
    };
    if let Some(refusal) = refusal {
        multi.failed = true;
        shared.command_stats.record_rejection(commands::stat_row(spec, &args), error_text(&refusal));
        return refusal;
    }
    if spec.name == "select" {
        // Opened now, on a thread that may block (`may_block`), not in EXEC, which only
        // switches; an error is EXEC's to answer.
        let _ = commands::selectable_database(shared, &args[1]);
    }
    multi.queued.push((spec, args));
    Reply::simple("QUEUED")
}

/// Prefetches the keys of the run of read-only commands that `first` starts (up to
/// `READ_RUN_PREFETCH_KEYS_MAX` keys), so that their memory misses overlap while they run one by
/// one; returns how many commands the run covers (at least 1).
fn prefetch_read_run(first: &[Bytes], pending: &VecDeque<Vec<Bytes>>, session: &SessionState, shared: &Shared) -> usize {
    fn read_keys(args: &[Bytes]) -> Option<Vec<&[u8]>> {
        let spec = commands::lookup(&args[0])?;
        (spec.has(READONLY) && spec.arity_ok(args.len())).then(|| spec.keys.keys(args))
    }
    if pending.is_empty() || session.multi.is_some() || !session.authenticated {
        return 1;
    }
    let mut keys = Vec::new();
    let mut commands = 0;
    for args in std::iter::once(first).chain(pending.iter().map(Vec::as_slice)) {
        match read_keys(args) {
            Some(more) if keys.len() + more.len() <= READ_RUN_PREFETCH_KEYS_MAX => keys.extend(more),
            _ => break,
        }
        commands += 1;
    }
    if keys.len() > 1 {
        if let Some(namespace) = shared.database.namespace(session.database) {
            namespace.prefetch_reads(&keys);
        }
    }
    commands.max(1)
}

/// Whether a request may wait on the engine (a checkpoint, a whole-keyspace operation, opening
/// a database's media on its first SELECT, MOVE's flush). A write's durability is awaited asynchronously, so
/// writes do not count.
fn may_block(args: &[Bytes], shared: &Shared) -> bool {
    commands::lookup(&args[0]).is_some_and(|spec| {
        spec.has(ADMIN | CROSSES_DATABASES) || spec.name == "select" && selects_an_unopened_database(args, shared)
    })
}

fn selects_an_unopened_database(args: &[Bytes], shared: &Shared) -> bool {
    let number = || std::str::from_utf8(args.get(1)?).ok()?.parse::<usize>().ok();
    number().is_some_and(|number| number < shared.database.database_count() && shared.database.namespace(number).is_none())
}

/// The keys whose values the pending requests will read, up to the first transaction-control
/// command (after MULTI, commands are queued, not run) and at most LOAD_AHEAD_KEYS_MAX.
fn keys_read_by(pending: &VecDeque<Vec<Bytes>>) -> Vec<&[u8]> {
    let mut keys = Vec::new();
    for args in pending {
        let Some(spec) = commands::lookup(&args[0]) else { continue };
        if spec.has(TRANSACTION_CONTROL) || keys.len() >= LOAD_AHEAD_KEYS_MAX {
            break;
        }
        if !spec.has(BLIND_WRITE) {
            keys.extend(spec.keys.keys(args));
        }
    }
    keys.truncate(LOAD_AHEAD_KEYS_MAX);
    keys
}

struct Connection {
    stream: TcpStream,
    shared: Arc<Shared>,
    input: BytesMut,
    output: BytesMut,
    decoder: RequestDecoder,
    pending: VecDeque<Vec<Bytes>>,
    protocol_error: Option<ProtocolError>,
    state: SessionState,
    /// Byte ranges of `output` holding replies of writes that wait for durability: if the wait
    /// fails they are replaced by the error, never sent as acknowledgements.
    durable_reply_spans: Vec<Range<usize>>,
    /// The reply of a blocking command, sent once its delay is over (`sit_out`).
    delayed_reply: Option<DelayedReply>,
    /// CLIENT PAUSE holds the first pending request back (`wait_out_pause`).
    pause_hold: Option<PauseHold>,
    /// A blocking command waiting for its keys.
    key_wait: Option<BlockedPop>,
    /// A write queued, with the session, behind another client's write to its key
    /// (`crate::combining`); `state` is a stand-in meanwhile.
    combined_wait: Option<CombinedWait>,
    /// The stand-in a lent session leaves behind, kept for the next lending.
    spare_state: Option<SessionState>,
}

/// A write waiting at its slot for its answer (`combining::Answer`).
struct CombinedWait {
    slot: usize,
    answer: tokio::sync::oneshot::Receiver<Answer>,
    /// The connection leads the slot: it serves it before it waits.
    leads: bool,
    /// Where its reply goes in `output`, and the session's registered commits before it ran.
    reply_start: usize,
    commits_before: u64,
}

/// A blocking command whose keys had nothing for it: what it waits for (and the command to
/// run again), and its registration when it was kept from the wait before.
struct BlockedPop {
    wait: KeyWait,
    registration: Option<KeysRegistration>,
}

struct DelayedReply {
    delay: ReplyDelay,
    reply: Reply,
    /// False when CLIENT REPLY drops it: the wait still happens.
    sent: bool,
    /// The command registered writes to wait for (WAITAOF 1 …): if that wait fails, the
    /// reply is the error.
    held_for_durability: bool,
}

/// Marks a client blocked or postponed (CLIENT LIST's flag `b`; CLIENT UNBLOCK ends a blocked
/// one's wait) and counts it in INFO's `blocked_clients` while it lives.
struct BlockedClient<'a> {
    client: &'a ClientHandle,
    blocked_clients: &'a AtomicU64,
}

impl<'a> BlockedClient<'a> {
    fn new(client: &'a ClientHandle, blocked_clients: &'a AtomicU64, state: Blocking) -> BlockedClient<'a> {
        client.set_blocking(state);
        blocked_clients.fetch_add(1, Ordering::Relaxed);
        BlockedClient { client, blocked_clients }
    }
}

impl Drop for BlockedClient<'_> {
    fn drop(&mut self) {
        self.blocked_clients.fetch_sub(1, Ordering::Relaxed);
        self.client.set_blocking(Blocking::NotBlocked);
    }
}

/// How a blocking command's wait ended.
enum WaitEnd {
    /// The delay passed, or CLIENT UNBLOCK … TIMEOUT: the command's reply is due.
    ReplyDue,
    UnblockedWithError,
    /// The client left or was killed, or the server is shutting down: no reply.
    ConnectionEnds,
}

/// How a blocking pop's wait for its keys ended.
enum KeyWaitEnd {
    /// One of the keys was written: the pop runs again, still registered.
    Written(KeysRegistration),
    Wait(WaitEnd),
}

/// A blocked client's place on `Shared::blocked_keys`, taken off when dropped however its wait
/// ends (which wakes the client next in line for each key: `BlockedKeys::unregister`).
struct KeysRegistration {
    shared: Arc<Shared>,
    database: usize,
    keys: Vec<Bytes>,
    client_id: u64,
}

impl Drop for KeysRegistration {
    fn drop(&mut self) {
        self.shared.blocked_keys.unregister(self.database, &self.keys, self.client_id);
    }
}

/// Unregisters its client when dropped: when the connection ends, and also when its task
/// panics, so that a failed connection never keeps a client slot (maxclients) for good.
struct Registration {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.shared.clients.unregister(self.id);
    }
}

pub async fn serve_connection(stream: TcpStream, shared: Arc<Shared>, client: Arc<ClientHandle>) {
    let _registration = Registration { shared: shared.clone(), id: client.id };
    let _ = stream.set_nodelay(true);
    let password_required = !shared.users.default_needs_no_password();
    let mut connection = Connection {
        stream,
        shared: shared.clone(),
        input: BytesMut::with_capacity(READ_CHUNK_BYTES),
        output: BytesMut::new(),
        decoder: RequestDecoder::new(),
        pending: VecDeque::new(),
        protocol_error: None,
        state: SessionState::new(client.clone(), password_required, Arc::clone(&shared.watches)),
        durable_reply_spans: Vec::new(),
        delayed_reply: None,
        pause_hold: None,
        key_wait: None,
        combined_wait: None,
        spare_state: None,
    };
    if let Err(error) = connection.run().await {
        tracing::debug!(client = client.id, %error, "connection ended with an I/O error");
    }
}

impl Connection {
    async fn run(&mut self) -> std::io::Result<()> {
        let client = self.state.client.clone();
        let mut shutdown = self.shared.shutdown.subscribe();
        // One future for the connection's life, not one per read: each new one registers with
        // the Notify and the watch (a lock each) when it waits and unregisters when dropped.
        let stop = async {
            tokio::select! {
                _ = client.kill.notified() => {}
                _ = shutdown.changed() => {}
            }
        };
        tokio::pin!(stop);
        let mut stop_signalled = false;
        loop {
            self.decode_requests();
            if !self.pending.is_empty() {
                self.load_records_ahead().await;
                self.execute_pending();
                if let Some(wait) = self.combined_wait.take() {
                    self.take_combined_answer(wait).await?;
                }
                let durability_failure = self.flush_replies().await?;
                if let Some(delayed) = self.delayed_reply.take() {
                    let reply = match self.sit_out(delayed.delay, stop.as_mut(), &mut stop_signalled).await? {
                        WaitEnd::ConnectionEnds => return Ok(()),
                        WaitEnd::UnblockedWithError => self.shared.command_stats.error_reply("UNBLOCKED client unblocked via CLIENT UNBLOCK"),
                        WaitEnd::ReplyDue => match durability_failure {
                            Some(failure) if delayed.held_for_durability => failure,
                            _ => delayed.reply,
                        },
                    };
                    if delayed.sent {
                        encode(&reply, self.state.protocol, &mut self.output);
                        self.flush().await?;
                    }
                }
                if let Some(BlockedPop { wait, registration }) = self.key_wait.take() {
                    let registration = registration.unwrap_or_else(|| KeysRegistration {
                        shared: Arc::clone(&self.shared),
                        database: wait.database,
                        keys: wait.keys.clone(),
                        client_id: self.state.client.id,
                    });
                    let reply = match self.wait_for_keys(&wait, registration, stop.as_mut(), &mut stop_signalled).await? {
                        KeyWaitEnd::Written(registration) => {
                            self.state.retry_delay = Some(wait.delay);
                            self.state.kept_registration = Some(registration);
                            self.pending.push_front(wait.arguments);
                            continue;
                        }
                        KeyWaitEnd::Wait(WaitEnd::ConnectionEnds) => return Ok(()),
                        KeyWaitEnd::Wait(WaitEnd::UnblockedWithError) => self.shared.command_stats.error_reply("UNBLOCKED client unblocked via CLIENT UNBLOCK"),
                        KeyWaitEnd::Wait(WaitEnd::ReplyDue) => wait.timeout_reply,
                    };
                    if self.state.takes_reply() {
                        encode(&reply, self.state.protocol, &mut self.output);
                        self.flush().await?;
                    }
                }
                if let Some(hold) = self.pause_hold.take() {
                    if !self.wait_out_pause(hold, stop.as_mut(), &mut stop_signalled).await? {
                        return Ok(());
                    }
                }
                if self.state.close_after_reply {
                    return Ok(());
                }
                if std::mem::take(&mut self.state.enters_monitor_mode) {
                    self.state.client.monitoring.store(true, Ordering::Relaxed);
                    let goes_on = self.monitor(stop.as_mut(), &mut stop_signalled).await?;
                    self.state.client.monitoring.store(false, Ordering::Relaxed);
                    if !goes_on {
                        return Ok(());
                    }
                }
                continue;
            }
            if let Some(error) = self.protocol_error.take() {
                return self.end_with_protocol_error(error).await;
            }
            if self.shared.is_shutting_down() || self.state.client.killed.load(Ordering::Relaxed) {
                return Ok(());
            }
            if self.input.len() > self.shared.config.query_buffer_bytes_max {
                let limit = self.shared.config.query_buffer_bytes_max;
                let reply = self.shared.command_stats.error_reply(format!("ERR query buffer exceeds client-query-buffer-limit of {limit} bytes"));
                encode(&reply, self.state.protocol, &mut self.output);
                return self.flush().await;
            }
            self.input.reserve(read_reserve_bytes(self.decoder.bulk_bytes_wanted(&self.input), self.input.len()));
            let mailbox = self.state.pubsub.as_ref().map(|subscriptions| Arc::clone(subscriptions.mailbox()));
            let read = tokio::select! {
                read = self.stream.read_buf(&mut self.input) => read?,
                // Then `killed` or the shutdown flag is set: the loop ends before it reads again.
                _ = &mut stop, if !stop_signalled => {
                    stop_signalled = true;
                    continue;
                }
                () = notices_arrived(mailbox.as_deref()), if mailbox.is_some() => {
                    self.state.take_all_notices(&mut self.output);
                    self.flush().await?;
                    continue;
                }
            };
            if read == 0 {
                if self.decoder.is_mid_request(&self.input) {
                    tracing::debug!(client = self.state.client.id, "client disconnected in the middle of a request");
                }
                return Ok(());
            }
            self.shared.stats.net_input_bytes.add(read as u64);
            *self.state.client.last_active.lock() = Instant::now();
        }
    }

    /// Moves complete requests from the input buffer to `pending`. Before AUTH one request at a
    /// time, because AUTH lifts the decoder's stricter unauthenticated limits for what follows.
    fn decode_requests(&mut self) {
        let batch_max = if self.state.authenticated { BATCH_COMMANDS_MAX } else { 1 };
        while self.protocol_error.is_none() && self.pending.len() < batch_max {
            let limits = DecodeLimits {
                bulk_bytes_max: self.shared.config.bulk_bytes_max,
                arguments_max: self.shared.config.arguments_max,
                authenticated: self.state.authenticated,
            };
            match self.decoder.decode(&mut self.input, &limits) {
                Ok(Some(arguments)) => self.pending.push_back(arguments),
                Ok(None) => break,
                Err(error) => self.protocol_error = Some(error),
            }
        }
    }

    /// When the pending requests would read records from the disk (records on ssd that the
    /// cache does not hold), reads them into the cache first, through the namespace's device
    /// read queue or on a blocking thread: a network worker serves many connections and must not
    /// stall them all for one device read.
    async fn load_records_ahead(&mut self) {
        if self.shared.config.engine_call_mode != EngineCallMode::Inline || !self.state.authenticated || self.state.multi.is_some() {
            return;
        }
        let Some((home, namespace)) = self.shared.database.namespace_and_home(self.state.database) else { return };
        // Gathering the keys costs a command lookup per request: not while the gate is shut.
        if !namespace.checks_load_ahead() {
            return;
        }
        let keys = keys_read_by(&self.pending);
        if keys.is_empty() {
            return;
        }
        // Starting the loads looks the keys up once; asking `reads_would_wait` first would
        // look them up twice whenever a record is missing.
        if self.shared.device_reads_driven[home].load(Ordering::Relaxed) {
            if let Some(load) = namespace.start_loading_into_cache(&keys, SubmitReads::Later) {
                if load.waits_for_device_reads() {
                    self.shared.device_read_submissions[home].notify_one();
                }
                return load.await;
            }
        } else if !namespace.reads_would_wait(&keys) {
            return;
        }
        let keys: Vec<Vec<u8>> = keys.into_iter().map(<[u8]>::to_vec).collect();
        let namespace = namespace.clone();
        // Loading is only a head start: if it fails, the commands read (and report) themselves.
        let _ = tokio::task::spawn_blocking(move || namespace.load_into_cache(&keys)).await;
    }

    /// Waits for the answer to a write queued at its slot (`crate::combining`), serving the
    /// slot first while the connection leads it (after a yield, so that the connections this
    /// worker polls meanwhile queue their writes), and takes the session back with the reply.
    async fn take_combined_answer(&mut self, mut wait: CombinedWait) -> std::io::Result<()> {
        loop {
            if wait.leads {
                tokio::task::yield_now().await;
                let serve = || self.shared.combiner.serve(wait.slot, &self.shared);
                match self.shared.config.engine_call_mode {
                    EngineCallMode::Inline => serve(),
                    EngineCallMode::BlockInPlace => tokio::task::block_in_place(serve),
                }
            }
            let Ok(answer) = (&mut wait.answer).await else {
                // Only a leader that panicked drops a write unanswered; the session went with it.
                return Err(std::io::Error::other("a write queued behind another client's lost its session"));
            };
            match answer {
                Answer::Ran { session, replies } => {
                    self.put_combined_replies(session, replies, &wait);
                    return Ok(());
                }
                Answer::Lead { session, writes } => {
                    wait.answer = self.shared.combiner.lead_queued(wait.slot, writes, session);
                    wait.leads = true;
                }
            }
        }
    }

    /// Takes the session back from its writes' round and puts the replies in the output, as
    /// `execute_pending` would have.
    fn put_combined_replies(&mut self, session: SessionState, replies: Vec<Reply>, wait: &CombinedWait) {
        self.spare_state = Some(std::mem::replace(&mut self.state, session));
        let state = &mut self.state;
        // Notices before the replies, as `execute_pending` puts them.
        state.take_notices(&mut self.output);
        for reply in replies {
            if state.takes_reply() && !std::mem::take(&mut state.reply_in_mailbox) {
                encode(&reply, state.protocol, &mut self.output);
            }
        }
        mark_durable_reply(state, &self.output, &mut self.durable_reply_spans, wait.reply_start, wait.commits_before);
        state.take_all_notices(&mut self.output);
    }

    /// Executes pending requests in order until they are done, the reply buffer is full enough
    /// to send, or a command closes the connection.
    fn execute_pending(&mut self) {
        let blocking = match self.shared.config.engine_call_mode {
            EngineCallMode::Inline => self.pending.iter().any(|args| may_block(args, &self.shared)),
            EngineCallMode::BlockInPlace => true,
        };
        let Connection { pending, state, shared, output, durable_reply_spans, delayed_reply, pause_hold, key_wait, combined_wait, spare_state, .. } = self;
        let mut work = move || {
            let mut reads_prefetched = 0;
            while let Some(arguments) = pending.pop_front() {
                if let Some(hold) = held_by_pause(&arguments, state, shared) {
                    pending.push_front(arguments);
                    *pause_hold = Some(hold);
                    break;
                }
                if reads_prefetched == 0 {
                    reads_prefetched = prefetch_read_run(&arguments, pending, state, shared);
                }
                reads_prefetched = reads_prefetched.saturating_sub(1);
                let (reply_start, commits_before) = (output.len(), state.commits_registered);
                match take_write_group(arguments, pending, state, &shared.users) {
                    Ok(group) => {
                        let replies = match group_slot(&group, pending, state) {
                            None => execute_group(group, state, shared),
                            Some(slot) => match enter_slot(slot, group, state, shared, spare_state) {
                                Entered::Lead(group) => {
                                    let replies = execute_group(group, state, shared);
                                    shared.combiner.serve(slot, shared);
                                    replies
                                }
                                Entered::Queued { answer, leads } => {
                                    *combined_wait = Some(CombinedWait { slot, answer, leads, reply_start, commits_before });
                                    break;
                                }
                            },
                        };
                        for reply in replies {
                            encode(&reply, state.protocol, output);
                        }
                    }
                    Err(arguments) => {
                        let (arguments, leading) = match single_write_slot(&arguments, pending, state, shared) {
                            None => (arguments, None),
                            Some((spec, slot)) => match enter_slot(slot, vec![(spec, arguments)], state, shared, spare_state) {
                                Entered::Lead(mut writes) => (writes.pop().expect("the one write").1, Some(slot)),
                                Entered::Queued { answer, leads } => {
                                    *combined_wait = Some(CombinedWait { slot, answer, leads, reply_start, commits_before });
                                    break;
                                }
                            },
                        };
                        let reply = execute(arguments, state, shared);
                        if let Some(slot) = leading {
                            shared.combiner.serve(slot, shared);
                        }
                        state.retry_delay = None;
                        // Registered again under the same keys, a pop that blocks again keeps the
                        // registration (and its place); one that ended drops it here.
                        let registration = state.kept_registration.take();
                        if let Some(wait) = state.key_wait.take() {
                            state.take_notices(output);
                            *key_wait = Some(BlockedPop { wait, registration });
                            break;
                        }
                        drop(registration);
                        let sent = state.takes_reply() && !std::mem::take(&mut state.reply_in_mailbox);
                        // Notices before the reply: a message a command published to its own
                        // client, the confirmations it sent itself.
                        state.take_notices(output);
                        if let Some(delay) = state.reply_delay.take() {
                            let held_for_durability = state.commits_registered != commits_before;
                            *delayed_reply = Some(DelayedReply { delay, reply, sent, held_for_durability });
                            break;
                        }
                        if sent {
                            encode(&reply, state.protocol, output);
                        }
                    }
                }
                mark_durable_reply(state, output, durable_reply_spans, reply_start, commits_before);
                if state.close_after_reply || state.enters_monitor_mode || output.len() >= REPLY_FLUSH_BYTES {
                    break;
                }
            }
            state.take_all_notices(output);
        };
        if blocking {
            tokio::task::block_in_place(work);
        } else {
            work();
        }
    }

    /// Streams the commands the server runs until the client sends QUIT or RESET (returned to the
    /// request loop, which runs them: true) or the connection ends (false). Meanwhile PING is
    /// answered, MONITOR ignored, and anything else refused, as Redis answers a monitor.
    async fn monitor(
        &mut self,
        mut stop: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
        stop_signalled: &mut bool,
    ) -> std::io::Result<bool> {
        let shared = Arc::clone(&self.shared);
        let mut subscription = shared.monitors.subscribe();
        loop {
            if self.answer_requests_while_monitoring() {
                return Ok(true);
            }
            if let Some(error) = self.protocol_error.take() {
                self.end_with_protocol_error(error).await?;
                return Ok(false);
            }
            let lines = &subscription.lines;
            if !self.write_output_unless(|| lines.len() >= MONITOR_BACKLOG_LINES).await? {
                return Ok(self.fell_behind());
            }
            if *stop_signalled || shared.is_shutting_down() || self.state.client.killed.load(Ordering::Relaxed) {
                return Ok(false);
            }
            self.input.reserve(READ_CHUNK_BYTES);
            let query_buffer_bytes_max = shared.config.query_buffer_bytes_max;
            tokio::select! {
                line = subscription.lines.recv() => match line {
                    Ok(line) => self.output.extend_from_slice(&line),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => return Ok(self.fell_behind()),
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(false),
                },
                read = self.stream.read_buf(&mut self.input), if self.input.len() <= query_buffer_bytes_max => {
                    let read = read?;
                    if read == 0 {
                        return Ok(false);
                    }
                    shared.stats.net_input_bytes.add(read as u64);
                    self.decode_requests();
                }
                _ = &mut stop, if !*stop_signalled => *stop_signalled = true,
            }
            // Lines that are already waiting go out in the same write.
            while self.output.len() < REPLY_FLUSH_BYTES {
                let Ok(line) = subscription.lines.try_recv() else { break };
                self.output.extend_from_slice(&line);
            }
        }
    }

    /// Answers the requests a monitoring connection sent: PING, MONITOR (ignored) and Redis's
    /// refusal for the rest. True when QUIT or RESET came, left pending for the request loop.
    fn answer_requests_while_monitoring(&mut self) -> bool {
        while let Some(arguments) = self.pending.pop_front() {
            let name = String::from_utf8_lossy(&arguments[0]).to_ascii_lowercase();
            match name.as_str() {
                "quit" | "reset" => {
                    self.pending.push_front(arguments);
                    return true;
                }
                "monitor" => {}
                "ping" => {
                    let reply = execute(arguments, &mut self.state, &self.shared);
                    encode(&reply, self.state.protocol, &mut self.output);
                }
                _ => {
                    let reply = self.shared.command_stats.error_reply("ERR Replica can't interact with the keyspace");
                    encode(&reply, self.state.protocol, &mut self.output);
                }
            }
        }
        false
    }

    /// Answers a request the decoder could not read; the connection ends after it, as in Redis.
    async fn end_with_protocol_error(&mut self, error: ProtocolError) -> std::io::Result<()> {
        self.shared.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
        let reply = self.shared.command_stats.error_reply(format!("ERR {error}"));
        encode(&reply, self.state.protocol, &mut self.output);
        self.flush().await
    }

    /// Logs a monitoring client dropped for its backlog; false: the connection ends.
    fn fell_behind(&self) -> bool {
        tracing::warn!(client = self.state.client.id, lines = MONITOR_BACKLOG_LINES, "a monitoring client fell too far behind and is disconnected");
        false
    }

    /// Sends the gathered output of a monitor or subscriber; false when `fell_behind` became
    /// true while the write did not progress.
    async fn write_output_unless(&mut self, fell_behind: impl Fn() -> bool) -> std::io::Result<bool> {
        let write = self.stream.write_all(&self.output);
        tokio::pin!(write);
        loop {
            tokio::select! {
                written = &mut write => break written?,
                _ = tokio::time::sleep(STALLED_WRITE_CHECK_INTERVAL) => {
                    if fell_behind() {
                        return Ok(false);
                    }
                }
            }
        }
        self.shared.stats.net_output_bytes.add(self.output.len() as u64);
        self.output.clear();
        Ok(true)
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        self.flush_replies().await.map(drop)
    }

    /// Sends the gathered replies once the writes they acknowledge are durable; returns the
    /// error that replaced them when that failed.
    async fn flush_replies(&mut self) -> std::io::Result<Option<Reply>> {
        let durability_failure = self.await_durability().await;
        if self.output.is_empty() {
            return Ok(durability_failure);
        }
        if self.state.pubsub.is_some() {
            // A subscriber that stopped reading is disconnected once its mailbox overflows.
            let client = Arc::clone(&self.state.client);
            if !self.write_output_unless(|| client.killed.load(Ordering::Relaxed)).await? {
                return Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "a subscriber fell too far behind"));
            }
        } else {
            self.stream.write_all(&self.output).await?;
            self.shared.stats.net_output_bytes.add(self.output.len() as u64);
            self.output.clear();
        }
        Ok(durability_failure)
    }

    /// Holds a blocking command's reply back for its delay, or until CLIENT UNBLOCK.
    async fn sit_out(
        &mut self,
        delay: ReplyDelay,
        stop: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
        stop_signalled: &mut bool,
    ) -> std::io::Result<WaitEnd> {
        let (shared, client) = (Arc::clone(&self.shared), Arc::clone(&self.state.client));
        let _blocked = BlockedClient::new(&client, &shared.stats.blocked_clients, Blocking::Blocked);
        let delay_over = sleep_until(match delay {
            ReplyDelay::Until(deadline) => Some(deadline),
            ReplyDelay::Forever => None,
        });
        tokio::pin!(delay_over);
        let ended = async {
            loop {
                match client.blocking() {
                    Blocking::UnblockedAsTimeout => return WaitEnd::ReplyDue,
                    Blocking::UnblockedWithError => return WaitEnd::UnblockedWithError,
                    Blocking::Blocked | Blocking::Postponed | Blocking::NotBlocked => {}
                }
                tokio::select! {
                    _ = &mut delay_over => return WaitEnd::ReplyDue,
                    // A wake left over from an earlier wait only makes the loop look again.
                    _ = client.unblocked.notified() => {}
                }
            }
        };
        Ok(self.read_while(ended, stop, stop_signalled).await?.unwrap_or(WaitEnd::ConnectionEnds))
    }

    /// Waits until a write to one of a blocking pop's keys wakes it (the pop runs again, still
    /// registered: Written), its timeout, CLIENT UNBLOCK, or the end of the connection (the
    /// registration is dropped).
    async fn wait_for_keys(
        &mut self,
        wait: &KeyWait,
        registration: KeysRegistration,
        stop: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
        stop_signalled: &mut bool,
    ) -> std::io::Result<KeyWaitEnd> {
        let (shared, client) = (Arc::clone(&self.shared), Arc::clone(&self.state.client));
        let _blocked = BlockedClient::new(&client, &shared.stats.blocked_clients, Blocking::Blocked);
        let delay_over = sleep_until(match wait.delay {
            ReplyDelay::Until(deadline) => Some(deadline),
            ReplyDelay::Forever => None,
        });
        let ended = async {
            tokio::select! {
                _ = delay_over => KeyWaitEnd::Wait(WaitEnd::ReplyDue),
                // A key written, or CLIENT UNBLOCK: the state tells which.
                _ = client.unblocked.notified() => match client.blocking() {
                    Blocking::UnblockedAsTimeout => KeyWaitEnd::Wait(WaitEnd::ReplyDue),
                    Blocking::UnblockedWithError => KeyWaitEnd::Wait(WaitEnd::UnblockedWithError),
                    Blocking::Blocked | Blocking::Postponed | Blocking::NotBlocked => KeyWaitEnd::Written(registration),
                },
            }
        };
        Ok(self.read_while(ended, stop, stop_signalled).await?.unwrap_or(KeyWaitEnd::Wait(WaitEnd::ConnectionEnds)))
    }

    /// Waits while CLIENT PAUSE holds the first pending request back, until the pause changes
    /// or ends (the request is then asked about again); false when the connection ends.
    async fn wait_out_pause(
        &mut self,
        hold: PauseHold,
        stop: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
        stop_signalled: &mut bool,
    ) -> std::io::Result<bool> {
        let (shared, client) = (Arc::clone(&self.shared), Arc::clone(&self.state.client));
        let _postponed = BlockedClient::new(&client, &shared.stats.blocked_clients, Blocking::Postponed);
        let mut changes = shared.pause.changes();
        if *changes.borrow_and_update() != hold.generation {
            return Ok(true);
        }
        let ended = async {
            tokio::select! {
                _ = sleep_until(hold.end) => {}
                _ = changes.changed() => {}
            }
        };
        Ok(self.read_while(ended, stop, stop_signalled).await?.is_some())
    }

    /// Runs `wait` to its end, reading meanwhile (up to the query buffer limit) so that a
    /// client that leaves is seen; None when the connection ends first (the client left or
    /// was killed, or the server is shutting down).
    async fn read_while<T>(
        &mut self,
        wait: impl std::future::Future<Output = T>,
        mut stop: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
        stop_signalled: &mut bool,
    ) -> std::io::Result<Option<T>> {
        tokio::pin!(wait);
        let query_buffer_bytes_max = self.shared.config.query_buffer_bytes_max;
        loop {
            if *stop_signalled || self.shared.is_shutting_down() || self.state.client.killed.load(Ordering::Relaxed) {
                return Ok(None);
            }
            self.input.reserve(READ_CHUNK_BYTES);
            tokio::select! {
                ended = &mut wait => return Ok(Some(ended)),
                read = self.stream.read_buf(&mut self.input), if self.input.len() <= query_buffer_bytes_max => {
                    let read = read?;
                    if read == 0 {
                        return Ok(None);
                    }
                    self.shared.stats.net_input_bytes.add(read as u64);
                }
                _ = &mut stop, if !*stop_signalled => *stop_signalled = true,
            }
        }
    }

    /// Waits until the writes whose replies are gathered are durable (group commit runs on the
    /// engine's committer threads; this task only sleeps). When that fails, their replies become
    /// the error, which is returned: a write is acknowledged only once it is durable.
    async fn await_durability(&mut self) -> Option<Reply> {
        let mut durability_failure = None;
        for (namespace, ticket) in std::mem::take(&mut self.state.pending_commits) {
            let (sender, receiver) = tokio::sync::oneshot::channel();
            namespace.on_durable(ticket, Box::new(move |result| drop(sender.send(result))));
            let failure = match receiver.await {
                Ok(Ok(())) => continue,
                Ok(Err(error)) => engine_error_reply(&error),
                Err(_) => Reply::error("ERR the server stopped before the write was durable"),
            };
            let spans = std::mem::take(&mut self.durable_reply_spans);
            for _ in &spans {
                self.shared.command_stats.record_error_reply(error_text(&failure));
            }
            self.output = replace_spans(&self.output, &spans, &failure, self.state.protocol);
            durability_failure = Some(failure);
        }
        self.durable_reply_spans.clear();
        durability_failure
    }
}

/// Completes when a notice arrives in `mailbox`, never without one.
async fn notices_arrived(mailbox: Option<&Mailbox>) {
    match mailbox {
        Some(mailbox) => mailbox.arrived.notified().await,
        None => std::future::pending().await,
    }
}

/// Completes at `deadline`, never when there is none.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)).await,
        None => std::future::pending().await,
    }
}

/// `output` with the replies at `spans` (ordered, disjoint) replaced by `failure`.
fn replace_spans(output: &[u8], spans: &[Range<usize>], failure: &Reply, protocol: ProtocolVersion) -> BytesMut {
    let mut rebuilt = BytesMut::with_capacity(output.len());
    let mut copied = 0;
    for span in spans {
        assert!(copied <= span.start && span.end <= output.len(), "reply spans are ordered and inside the output");
        rebuilt.extend_from_slice(&output[copied..span.start]);
        encode(failure, protocol, &mut rebuilt);
        copied = span.end;
    }
    rebuilt.extend_from_slice(&output[copied..]);
    rebuilt
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_writes_replies_become_the_error_and_reads_stand() {
        let output = b"+OK\r\n$1\r\nv\r\n:2\r\n";
        let failure = Reply::error("ERR flush failed");
        let rebuilt = replace_spans(output, &[0..5, 12..16], &failure, ProtocolVersion::Resp2);
        assert_eq!(&rebuilt[..], b"-ERR flush failed\r\n$1\r\nv\r\n-ERR flush failed\r\n");
        assert_eq!(&replace_spans(output, &[], &failure, ProtocolVersion::Resp2)[..], &output[..]);
    }

    #[test]
    fn read_reserve_grows_with_the_bytes_that_arrived_not_with_the_announced_length() {
        assert_eq!(read_reserve_bytes(0, 0), READ_CHUNK_BYTES);
        assert_eq!(read_reserve_bytes(100_000_000, 300), READ_CHUNK_BYTES);
        assert_eq!(read_reserve_bytes(100_000_000, 200_000), 200_000);
        assert_eq!(read_reserve_bytes(100_000_000, 50_000_000), READ_RESERVE_BYTES_MAX);
        assert_eq!(read_reserve_bytes(40_000, 200_000), 40_000);
    }
}
