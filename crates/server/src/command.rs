//! The command table's types and the dispatcher: arity and authentication checks, MULTI
//! queueing, and the choice of store a command runs against (a transaction over its keys when it
//! writes, the namespace directly when it only reads).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hybridkv_engine::{EngineError, Namespace, ScanPage, Transaction, Value};
use hybridkv_resp::Reply;

use crate::group_store::{GroupStore, Kept};
use crate::keyspace_events::KeyEvent;
use crate::session::SessionState;
use crate::shared::Shared;
use crate::values::CorruptValue;

/// A command's failure: a Redis error reply (full text with its code), or an engine error.
#[derive(Debug)]
pub enum CommandError {
    Redis(Cow<'static, str>),
    Engine(EngineError),
}

impl From<EngineError> for CommandError {
    fn from(error: EngineError) -> Self {
        CommandError::Engine(error)
    }
}

impl From<CorruptValue> for CommandError {
    fn from(error: CorruptValue) -> Self {
        CommandError::Redis(Cow::Owned(format!("ERR {error}")))
    }
}

pub type CommandResult = Result<Reply, CommandError>;

/// A Redis error reply as a `CommandError` (text includes the code: "ERR syntax error").
pub fn fail<T>(text: impl Into<Cow<'static, str>>) -> Result<T, CommandError> {
    Err(CommandError::Redis(text.into()))
}

pub fn engine_error_reply(error: &EngineError) -> Reply {
    let code = if error.is_out_of_space() { "OOM" } else { "ERR" };
    Reply::error(format!("{code} {error}"))
}

impl CommandError {
    pub fn into_reply(self) -> Reply {
        match self {
            CommandError::Redis(text) => Reply::Error(text),
            CommandError::Engine(error) => engine_error_reply(&error),
        }
    }
}

/// Reads and writes of keys, either straight on the namespace or inside a transaction.
/// A key may be split into parts (see `Transaction::get_part`): `put` and `delete` drop them,
/// `put_keeping_parts`, `rename` and `copy` keep them.
pub trait KeyStore {
    fn get(&mut self, key: &[u8]) -> Result<Option<Value>, EngineError>;
    fn put(&mut self, key: &[u8], value: &[u8], expiry_unix_ms: u64) -> Result<(), EngineError>;
    fn put_keeping_parts(&mut self, key: &[u8], value: &[u8], expiry_unix_ms: u64) -> Result<(), EngineError>;
    fn delete(&mut self, key: &[u8]) -> Result<bool, EngineError>;
    fn rename(&mut self, source: &[u8], target: &[u8]) -> Result<bool, EngineError>;
    /// Writes `source`'s value, expiry and parts under `target` (two different keys).
    fn copy(&mut self, source: &[u8], target: &[u8]) -> Result<bool, EngineError>;
    fn get_part(&mut self, key: &[u8], number: u32) -> Result<Option<Vec<u8>>, EngineError>;
    fn put_part(&mut self, key: &[u8], number: u32, value: Vec<u8>) -> Result<(), EngineError>;
    fn delete_part(&mut self, key: &[u8], number: u32) -> Result<(), EngineError>;
    /// Parts one key may have.
    fn parts_per_key_max(&self) -> u32;
    /// Keys in the namespace, as this store sees them (a transaction counts its own writes).
    fn key_count(&mut self) -> Result<u64, EngineError>;
    /// A page of keys from `cursor` on (`Namespace::scan`), as this store sees them.
    fn scan(&mut self, cursor: u64, count_hint: usize) -> Result<ScanPage, EngineError>;
    /// Any key, as this store sees them.
    fn random_key(&mut self) -> Result<Option<Vec<u8>>, EngineError>;
    /// Deletes every key (FLUSHDB): inside a transaction, in its one batch, bounded by a write
    /// block (`Transaction::delete_every_key`); on the namespace, in batches (`Namespace::clear`).
    fn delete_every_key(&mut self) -> Result<(), EngineError>;
    /// Whether this store is a transaction over the command's keys (run by `run` or EXEC), not
    /// the namespace itself.
    fn is_transaction(&self) -> bool;

    /// What `get` answers for each key, in order.
    fn get_many(&mut self, keys: &[&[u8]]) -> Vec<Result<Option<Value>, EngineError>> {
        keys.iter().map(|key| self.get(key)).collect()
    }

    /// Keeps `value`, changed and not saved, for the next command of a pipelined group
    /// (`GroupStore`), which saves it before anything else reads or writes its key; gives it
    /// back to be saved now when this store keeps none.
    fn keep(&mut self, value: Kept) -> Option<Kept> {
        Some(value)
    }

    /// The value an earlier command of the group kept under `key`.
    fn take_kept(&mut self, _key: &[u8]) -> Option<Kept> {
        None
    }
}

impl KeyStore for Transaction<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<Value>, EngineError> {
        Transaction::get(self, key)
    }
    fn put(&mut self, key: &[u8], value: &[u8], expiry_unix_ms: u64) -> Result<(), EngineError> {
        Transaction::put(self, key, value, expiry_unix_ms)
    }
    fn put_keeping_parts(&mut self, key: &[u8], value: &[u8], expiry_unix_ms: u64) -> Result<(), EngineError> {
        Transaction::put_keeping_parts(self, key, value, expiry_unix_ms)
    }
    fn delete(&mut self, key: &[u8]) -> Result<bool, EngineError> {
        Transaction::delete(self, key)
    }
    fn rename(&mut self, source: &[u8], target: &[u8]) -> Result<bool, EngineError> {
        Transaction::rename(self, source, target)
    }
    fn copy(&mut self, source: &[u8], target: &[u8]) -> Result<bool, EngineError> {
        Transaction::copy(self, source, target)
    }
    fn get_part(&mut self, key: &[u8], number: u32) -> Result<Option<Vec<u8>>, EngineError> {
        Transaction::get_part(self, key, number)
    }
    fn put_part(&mut self, key: &[u8], number: u32, value: Vec<u8>) -> Result<(), EngineError> {
        Transaction::put_part(self, key, number, value)
    }
    fn delete_part(&mut self, key: &[u8], number: u32) -> Result<(), EngineError> {
        Transaction::delete_part(self, key, number)
    }
    fn parts_per_key_max(&self) -> u32 {
        Transaction::parts_per_key_max(self)
    }
    fn key_count(&mut self) -> Result<u64, EngineError> {
        Transaction::key_count(self)
    }
    fn scan(&mut self, cursor: u64, count_hint: usize) -> Result<ScanPage, EngineError> {
        Transaction::scan(self, cursor, count_hint)
    }
    fn random_key(&mut self) -> Result<Option<Vec<u8>>, EngineError> {
        Transaction::random_key(self)
    }
    fn delete_every_key(&mut self) -> Result<(), EngineError> {
        Transaction::delete_every_key(self)
    }
    fn is_transaction(&self) -> bool {
        true
    }
}

/// The namespace itself, for commands that only read (each call is its own atomic step; the
/// commands that read several records of one key run in a transaction instead, see
/// `READS_PARTS`).
pub struct DirectStore<'a>(pub &'a Namespace);

impl DirectStore<'_> {
    fn one_key<T>(&self, key: &[u8], body: impl FnOnce(&mut Transaction<'_>) -> Result<T, EngineError>) -> Result<T, EngineError> {
        self.0.transaction(&[key], body)
    }
}

impl KeyStore for DirectStore<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<Value>, EngineError> {
        self.0.get(key)
    }
    fn put(&mut self, key: &[u8], value: &[u8], expiry_unix_ms: u64) -> Result<(), EngineError> {
        self.0.put(key, value, expiry_unix_ms)
    }
    fn put_keeping_parts(&mut self, key: &[u8], value: &[u8], expiry_unix_ms: u64) -> Result<(), EngineError> {
        self.one_key(key, |transaction| transaction.put_keeping_parts(key, value, expiry_unix_ms))
    }
    fn delete(&mut self, key: &[u8]) -> Result<bool, EngineError> {
        self.0.delete(key)
    }
    fn rename(&mut self, source: &[u8], target: &[u8]) -> Result<bool, EngineError> {
        self.0.transaction(&[source, target], |transaction| transaction.rename(source, target))
    }
    fn copy(&mut self, source: &[u8], target: &[u8]) -> Result<bool, EngineError> {
        self.0.transaction(&[source, target], |transaction| transaction.copy(source, target))
    }
    fn get_part(&mut self, key: &[u8], number: u32) -> Result<Option<Vec<u8>>, EngineError> {
        self.one_key(key, |transaction| transaction.get_part(key, number))
    }
    fn put_part(&mut self, key: &[u8], number: u32, value: Vec<u8>) -> Result<(), EngineError> {
        self.one_key(key, |transaction| transaction.put_part(key, number, value))
    }
    fn delete_part(&mut self, key: &[u8], number: u32) -> Result<(), EngineError> {
        self.one_key(key, |transaction| transaction.delete_part(key, number))
    }
    fn parts_per_key_max(&self) -> u32 {
        self.0.parts_per_key_max()
    }
    fn key_count(&mut self) -> Result<u64, EngineError> {
        Ok(self.0.key_count())
    }
    fn scan(&mut self, cursor: u64, count_hint: usize) -> Result<ScanPage, EngineError> {
        self.0.scan(cursor, count_hint)
    }
    fn random_key(&mut self) -> Result<Option<Vec<u8>>, EngineError> {
        self.0.random_key()
    }
    fn delete_every_key(&mut self) -> Result<(), EngineError> {
        self.0.clear()
    }
    fn is_transaction(&self) -> bool {
        false
    }

    /// One batched engine read whose memory misses overlap; key by key when a key is invalid
    /// (the batched read refuses the whole call for one bad key).
    fn get_many(&mut self, keys: &[&[u8]]) -> Vec<Result<Option<Value>, EngineError>> {
        match self.0.get_many(keys) {
            Ok(values) => values.into_iter().map(Ok).collect(),
            Err(_) => keys.iter().map(|key| self.0.get(key)).collect(),
        }
    }
}

/// Everything a command handler may use.
pub struct Call<'a> {
    pub args: &'a [Bytes],
    pub session: &'a mut SessionState,
    pub shared: &'a Shared,
    pub namespace: &'a Arc<Namespace>,
    pub store: &'a mut dyn KeyStore,
}

impl Call<'_> {
    /// Queues a keyspace notification of `event` on `key` of the session's database, if the
    /// configuration asks for its class; it is published once the command's writes committed.
    pub fn notify(&mut self, class: u32, event: &'static str, key: &[u8]) {
        self.notify_in(self.session.database, class, event, key);
    }

    /// `notify` for a key of database `database` (MOVE, COPY … DB).
    pub fn notify_in(&mut self, database: usize, class: u32, event: &'static str, key: &[u8]) {
        if self.shared.keyspace_events.wants(class) {
            self.session.key_events.push(KeyEvent { class, event, database, key: Bytes::copy_from_slice(key) });
        }
    }
}

pub type Handler = fn(&mut Call<'_>) -> CommandResult;

/// Which arguments are keys: positions `first..=last` (negative `last` counts from the end)
/// every `step`; `first == 0` means no keys, unless `after_streams`. These are the keys the
/// server locks, a superset of the keys when they move with the arguments (`movable`).
#[derive(Clone, Copy, Debug)]
pub struct KeySpec {
    pub first: usize,
    pub last: isize,
    pub step: usize,
    /// XREAD's and XREADGROUP's keys: the first half of the arguments after the word STREAMS
    /// (Redis's "movable keys"; COMMAND INFO shows 0, 0, 0).
    pub after_streams: bool,
    /// Which of the positions above Redis names as keys (COMMAND GETKEYS, COMMAND INFO's
    /// "movablekeys"), when that depends on the arguments.
    pub movable: Option<MovableKeys>,
}

/// Where Redis finds the keys of a command whose keys move with its arguments.
#[derive(Clone, Copy, Debug)]
pub enum MovableKeys {
    /// A count at `count_at`, then that many keys, after a destination key at position 1 when
    /// `destination` (ZUNIONSTORE). A count under 1 or past the arguments names no key, which
    /// GETKEYS refuses unless `keys_optional` (EVAL).
    Counted { count_at: usize, destination: bool, keys_optional: bool },
    /// SORT: the key at position 1, and the argument after the last STORE, skipping the
    /// arguments of LIMIT (2), GET and BY (1).
    Sort,
    /// SORT_RO: the key at position 1 only (Redis flags it as SORT, whose BY and GET reach
    /// keys made from patterns).
    SortReadOnly,
    /// GEORADIUS and GEORADIUSBYMEMBER: the key at position 1, and the argument after the last
    /// STORE or STOREDIST from position 5 on.
    GeoRadius,
    /// OBJECT and MEMORY: the argument after one of these subcommands (any case).
    AfterSubcommand(&'static [&'static str]),
}

/// Why `KeySpec::named_keys` names no keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoKeys {
    /// The arguments do not place the keys (a bad count): Redis's "Invalid arguments".
    InvalidArguments,
    /// The command takes no key here.
    NoKeyArguments,
}

impl KeySpec {
    pub const NONE: KeySpec = KeySpec { first: 0, last: 0, step: 0, after_streams: false, movable: None };
    pub const ONE: KeySpec = KeySpec { first: 1, last: 1, step: 1, after_streams: false, movable: None };
    pub const ALL: KeySpec = KeySpec { first: 1, last: -1, step: 1, after_streams: false, movable: None };

    pub const STREAMS: KeySpec = KeySpec { first: 0, last: 0, step: 0, after_streams: true, movable: None };

    /// The keys Redis names in these arguments (COMMAND GETKEYS): `keys`, or for a command
    /// whose keys move, only those its arguments place. Empty (not an error) for EVAL with no
    /// keys.
    pub fn named_keys<'a>(&self, args: &'a [Bytes]) -> Result<Vec<&'a [u8]>, NoKeys> {
        let keys = match self.movable {
            None => self.keys(args),
            Some(MovableKeys::Counted { count_at, destination, keys_optional }) => match counted_keys(args, count_at) {
                Some(keys) => [&args[1..2], keys].iter().skip(usize::from(!destination)).flat_map(|keys| keys.iter().map(|key| key.as_ref())).collect(),
                None if keys_optional => return Ok(Vec::new()),
                None => return Err(NoKeys::InvalidArguments),
            },
            Some(MovableKeys::Sort) => key_and_stored(args, &SORT_OPTIONS),
            Some(MovableKeys::SortReadOnly) => KeySpec::ONE.keys(args),
            Some(MovableKeys::GeoRadius) => key_and_stored(args, &GEORADIUS_OPTIONS),
            Some(MovableKeys::AfterSubcommand(subcommands)) => match args.get(1..3) {
                Some([subcommand, key]) if subcommands.iter().any(|name| subcommand.eq_ignore_ascii_case(name.as_bytes())) => vec![key.as_ref()],
                _ => Vec::new(),
            },
        };
        if keys.is_empty() {
            return Err(NoKeys::NoKeyArguments);
        }
        Ok(keys)
    }

    /// COMMAND INFO's first key, last key and step: for keys that move, Redis's fixed part (the
    /// key at position 1 when there always is one, else none).
    pub fn advertised_positions(&self) -> (i64, i64, i64) {
        match self.movable {
            Some(MovableKeys::Counted { destination: false, .. }) => (0, 0, 0),
            Some(MovableKeys::Counted { destination: true, .. } | MovableKeys::Sort | MovableKeys::SortReadOnly | MovableKeys::GeoRadius) => (1, 1, 1),
            Some(MovableKeys::AfterSubcommand(_)) | None => (self.first as i64, self.last as i64, self.step as i64),
        }
    }

    /// Whether COMMAND INFO flags the command "movablekeys".
    pub fn keys_move(&self) -> bool {
        self.after_streams || matches!(self.movable, Some(MovableKeys::Counted { .. } | MovableKeys::Sort | MovableKeys::SortReadOnly | MovableKeys::GeoRadius))
    }

    pub fn keys<'a>(&self, args: &'a [Bytes]) -> Vec<&'a [u8]> {
        if self.after_streams {
            return streams_keys(args);
        }
        let Some((first, last)) = self.key_positions(args.len()) else { return Vec::new() };
        (first..=last).step_by(self.step.max(1)).map(|position| args[position].as_ref()).collect()
    }

    /// The key, when the arguments name exactly one (without building the list); None for
    /// keys after STREAMS, whose commands are never grouped.
    pub fn only_key<'a>(&self, args: &'a [Bytes]) -> Option<&'a [u8]> {
        if self.after_streams {
            return None;
        }
        let (first, last) = self.key_positions(args.len())?;
        (first <= last && last - first < self.step.max(1)).then(|| args[first].as_ref())
    }

    /// The positions of the first and last key among `len` arguments.
    fn key_positions(&self, len: usize) -> Option<(usize, usize)> {
        if self.first == 0 || len <= self.first {
            return None;
        }
        let last = if self.last < 0 { len as isize + self.last } else { self.last };
        Some((self.first, (last.max(0) as usize).min(len - 1)))
    }
}

/// The keys after a count at `count_at`, when the count is at least 1 and that many arguments
/// follow it. The count is read as Redis reads it there, with C's atoi: leading spaces, a sign,
/// then the digits up to the first other byte (`2abc` is 2, `x` is 0).
fn counted_keys(args: &[Bytes], count_at: usize) -> Option<&[Bytes]> {
    let text = args.get(count_at)?.trim_ascii_start();
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, text),
    };
    let count = digits.iter().take_while(|byte| byte.is_ascii_digit()).fold(0usize, |count, digit| count.saturating_mul(10).saturating_add(usize::from(digit - b'0')));
    let keys = args.get(count_at + 1..)?;
    (!negative && count >= 1 && count <= keys.len()).then(|| &keys[..count])
}

/// Where a command names the key it stores into among its options (SORT, GEORADIUS).
struct StoreOptions {
    /// Where the options start.
    from: usize,
    /// The words followed by the key stored into; the last one given wins.
    stores: &'static [&'static [u8]],
    /// Whether the key after such a word is passed over (GEORADIUS) or read as a word too
    /// (SORT, as Redis's sortGetKeys does).
    store_skips_its_key: bool,
    /// Other words and how many arguments after them to pass over.
    skips: &'static [(&'static [u8], usize)],
}

const SORT_OPTIONS: StoreOptions = StoreOptions { from: 2, stores: &[b"STORE"], store_skips_its_key: false, skips: &[(b"LIMIT", 2), (b"GET", 1), (b"BY", 1)] };
const GEORADIUS_OPTIONS: StoreOptions = StoreOptions { from: 5, stores: &[b"STORE", b"STOREDIST"], store_skips_its_key: true, skips: &[] };

/// The key at position 1, then the key the options store into, if any (a store word with
/// nothing after it names none).
fn key_and_stored<'a>(args: &'a [Bytes], options: &StoreOptions) -> Vec<&'a [u8]> {
    let mut keys: Vec<&[u8]> = args.get(1).map(|key| key.as_ref()).into_iter().collect();
    let mut stored = None;
    let mut at = options.from;
    while let Some(word) = args.get(at) {
        let named = |names: &[&[u8]]| names.iter().any(|name| word.eq_ignore_ascii_case(name));
        if let Some((_, passed)) = options.skips.iter().find(|(name, _)| named(&[name])) {
            at += passed;
        } else if named(options.stores) && at + 1 < args.len() {
            stored = Some(args[at + 1].as_ref());
            at += usize::from(options.store_skips_its_key);
        }
        at += 1;
    }
    keys.extend(stored);
    keys
}

/// The keys of XREAD and XREADGROUP: the first half of the arguments after the word STREAMS,
/// found past the options before it as the commands parse them (COUNT and BLOCK take a value,
/// GROUP two), so that a group or consumer named STREAMS is not taken for the word.
fn streams_keys(args: &[Bytes]) -> Vec<&[u8]> {
    let mut at = 1;
    while let Some(argument) = args.get(at) {
        let values = match argument.to_ascii_uppercase().as_slice() {
            b"STREAMS" => {
                let rest = &args[at + 1..];
                return rest[..rest.len() / 2].iter().map(|key| key.as_ref()).collect();
            }
            b"COUNT" | b"BLOCK" => 1,
            b"GROUP" => 2,
            _ => 0,
        };
        at += 1 + values;
    }
    Vec::new()
}

/// The command writes keys: it runs inside a transaction over its keys.
pub const WRITE: u16 = 1;
/// Served before AUTH.
pub const BEFORE_AUTH: u16 = 2;
/// May be queued in MULTI. Commands that span databases (FLUSHALL, MOVE) cannot run inside
/// EXEC's transaction, which covers one; SELECT can, as long as every command that reads or
/// writes keys runs in one database (`commands::tx`).
pub const IN_MULTI: u16 = 4;
/// Runs even inside MULTI instead of being queued (EXEC, DISCARD, MULTI, WATCH, QUIT).
pub const TRANSACTION_CONTROL: u16 = 8;
/// Reads the keyspace (counts as read-only for COMMAND INFO flags).
pub const READONLY: u16 = 16;
/// Server administration (COMMAND INFO flag "admin").
pub const ADMIN: u16 = 32;
/// Writes its keys without reading their values first: nothing to load into the cache ahead.
pub const BLIND_WRITE: u16 = 64;
/// Reads a key's parts as well as its record: runs in a transaction over its key (writing
/// nothing), so that it never sees the record of one write with the parts of another.
pub const READS_PARTS: u16 = 128;
/// Lists keys (KEYS, SCAN, RANDOMKEY): inside EXEC, the transaction holds every partition.
pub const WHOLE_KEYSPACE: u16 = 256;
/// Reads or changes the session or the server, never a key (INFO, CONFIG, CLIENT…): may be
/// queued in MULTI, and EXEC runs it after its transaction has committed, outside every
/// partition lock (such a command may take them itself, and EXEC's body holds them).
pub const AFTER_TRANSACTION: u16 = 512;
/// May write a key of another database (MOVE, COPY … DB): runs its own transactions, one
/// namespace at a time, never inside another command's (so never grouped), and may wait for a
/// flush. Refused in MULTI unless also `IN_MULTI` (COPY, which inside EXEC copies within the
/// current database only).
pub const CROSSES_DATABASES: u16 = 1024;
/// May block its client until a key is written (BLPOP…): never grouped with other writes, and
/// its connection keeps its arguments to run it again (`SessionState::key_wait`).
pub const BLOCKS_ON_KEYS: u16 = 2048;
/// May read or write keys its arguments do not name (SORT with BY, GET or STORE: keys made
/// from patterns): then it runs over every partition, in EXEC too, and is never grouped
/// (`commands::reaches_other_keys`).
pub const READS_KEYS_BY_PATTERN: u16 = 4096;
/// Leaves its key's value open for the next write of its group (`group_store::Kept`: lists'
/// pushes and pops, XADD, the sorted-set writes that keep the set), so that writes of one key
/// share the decoding of its value: such a write sent alone meets other clients' writes to
/// its key and runs in one transaction with them (`crate::combining`). Others sent alone gain
/// too little there to pay the meeting (pipelined groups meet whatever their writes).
pub const KEEPS_VALUE_OPEN: u16 = 8192;

pub struct CommandSpec {
    pub name: &'static str,
    /// Redis convention: N = exactly N arguments with the name, -N = at least N.
    pub arity: i32,
    pub keys: KeySpec,
    pub flags: u16,
    pub group: &'static str,
    pub summary: &'static str,
    pub handler: Handler,
}

impl CommandSpec {
    pub fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }

    pub fn arity_ok(&self, argument_count: usize) -> bool {
        arity_allows(self.arity, argument_count)
    }
}

/// Whether a command (or subcommand) of `arity` takes `argument_count` arguments, its name
/// included: exactly N for N, at least N for -N.
pub fn arity_allows(arity: i32, argument_count: usize) -> bool {
    let count = argument_count as i64;
    let arity = i64::from(arity);
    if arity >= 0 { count == arity } else { count >= -arity }
}

/// Redis's reply to SELECT, COPY … DB and a session on a database that has no namespace.
pub const DB_INDEX_OUT_OF_RANGE: &str = "ERR DB index is out of range";

pub fn wrong_arity(name: &str) -> CommandError {
    CommandError::Redis(Cow::Owned(format!("ERR wrong number of arguments for '{name}' command")))
}

/// Redis's reply to an unknown command, quoting at most 128 bytes of the name and each argument.
pub fn unknown_command(args: &[Bytes]) -> Reply {
    let quoted = |argument: &Bytes| String::from_utf8_lossy(&argument[..argument.len().min(128)]).into_owned();
    let mut text = format!("ERR unknown command '{}', with args beginning with: ", quoted(&args[0]));
    for argument in &args[1..] {
        text.push_str(&format!("'{}' ", quoted(argument)));
    }
    Reply::error(text)
}

/// Runs one command (already checked) on the session's namespace and returns its reply.
pub fn run(spec: &CommandSpec, args: &[Bytes], session: &mut SessionState, shared: &Shared) -> Reply {
    let Some(namespace) = shared.database.namespace(session.database) else {
        return Reply::error(DB_INDEX_OUT_OF_RANGE);
    };
    let namespace = namespace.clone();
    let keys = spec.keys.keys(args);
    let result = if spec.has(READS_KEYS_BY_PATTERN) && crate::commands::reaches_other_keys(args) {
        run_over_keys(spec.handler, Over::EveryPartition, args, session, shared, &namespace)
    } else if spec.has(WRITE | READS_PARTS) && !keys.is_empty() && !spec.has(CROSSES_DATABASES) {
        run_over_keys(spec.handler, Over::Keys(&keys), args, session, shared, &namespace)
    } else {
        let mut store = DirectStore(&namespace);
        (spec.handler)(&mut Call { args, session, shared, namespace: &namespace, store: &mut store })
    };
    result.unwrap_or_else(CommandError::into_reply)
}

/// Runs a command as `run` does, and counts it (`account`).
pub fn run_measured(spec: &'static CommandSpec, args: &[Bytes], session: &mut SessionState, shared: &Shared) -> Reply {
    let started = Instant::now();
    let reply = run(spec, args, session, shared);
    account(spec, args, started.elapsed(), &reply, session, shared);
    reply
}

/// Counts a command that ran for `elapsed` and answered `reply` in INFO commandstats (and
/// errorstats), logs it when slow and shows it to monitors. EXEC is never logged, its commands
/// are (as in Redis). A blocking pop run again after a wake was accounted for when it first ran.
pub fn account(spec: &'static CommandSpec, args: &[Bytes], elapsed: Duration, reply: &Reply, session: &SessionState, shared: &Shared) {
    if session.is_rerun_after_wake() {
        return;
    }
    let error = match reply {
        Reply::Error(text) => Some(text.as_ref()),
        _ => None,
    };
    let row = crate::commands::stat_row(spec, args).expect("a command that ran has a known subcommand");
    shared.command_stats.record_call(row, elapsed, error);
    if shared.slowlog.is_slow(elapsed) && spec.name != "exec" {
        let client_name = session.client.name.lock().clone().unwrap_or_default();
        shared.slowlog.push(args, elapsed, session.client.address.to_string(), client_name);
    }
    shared.monitors.feed(spec.name, session.database, &session.client.address, args);
}

/// The partitions a command's transaction holds.
pub enum Over<'k> {
    /// Those of these keys.
    Keys(&'k [&'k [u8]]),
    /// Every one: the command may reach keys its arguments do not name.
    EveryPartition,
}

/// Runs `handler` in a transaction over `over` of the session's namespace: its writes commit
/// as one batch, watchers of what it changed hear of it, and its reply waits for their
/// durability.
pub fn run_over_keys(handler: Handler, over: Over<'_>, args: &[Bytes], session: &mut SessionState, shared: &Shared, namespace: &Arc<Namespace>) -> CommandResult {
    let (database, writer) = (session.database, session.client.id);
    let events_before = session.key_events.len();
    let body = |transaction: &mut Transaction<'_>| {
        let mut call = Call { args, session, shared, namespace, store: transaction };
        let result = run_in_transaction(handler, &mut call);
        shared.keys_written(database, writer, || transaction.changed_keys());
        result
    };
    let outcome = match over {
        Over::Keys(keys) => namespace.transaction_deferred(keys, body),
        Over::EveryPartition => namespace.transaction_over_all(body),
    };
    match outcome {
        Ok((result, ticket)) => {
            if let Some(ticket) = ticket {
                session.hold_reply_until_durable(namespace, ticket);
            }
            result
        }
        Err(error) => {
            session.key_events.truncate(events_before);
            Err(CommandError::Engine(error))
        }
    }
}

/// Pipelined single-key writes of one client that run in one engine transaction at most
/// (`run_grouped`).
pub const GROUPED_WRITES_MAX: usize = 16;
/// Argument bytes of such a group at most: its batch stays far below a write block.
pub const GROUPED_ARGUMENT_BYTES_MAX: usize = 64 * 1024;

/// A command ready to run: its spec (known, arity checked) and its arguments.
pub type ReadyCommand = (&'static CommandSpec, Vec<Bytes>);

/// Runs `commands`, single-key writes that `execute` would run directly, in one transaction
/// over their keys: one lock per partition and one append for the lot (a key's repeated records
/// collapse to its last), instead of one each. Command `i` runs in `sessions[owners[i]]`: one
/// client's pipelined group, or the writes of several clients to one key (`combining`); the
/// sessions share a database, and when there are several none tracks keys (so invalidating
/// for one writer is invalidating for each). Returns their replies in order, or None when the
/// transaction failed with an engine error: nothing was written then, and the caller runs them
/// one at a time, each meeting its own outcome as it would have alone.
pub fn run_grouped(commands: &[ReadyCommand], owners: &[usize], sessions: &mut [&mut SessionState], shared: &Shared) -> Option<Vec<Reply>> {
    assert_eq!(commands.len(), owners.len());
    let (database, writer) = (sessions[0].database, sessions[0].client.id);
    assert!(sessions.iter().all(|session| session.database == database), "a group runs in one database");
    assert!(sessions.len() == 1 || sessions.iter().all(|session| session.tracking.is_none()), "clients that track keys are not combined");
    let namespace = shared.database.namespace(database)?.clone();
    let keys: Vec<&[u8]> = commands.iter().flat_map(|(spec, args)| spec.keys.keys(args)).collect();
    let events_before: Vec<usize> = sessions.iter().map(|session| session.key_events.len()).collect();
    let outcome = namespace.transaction_deferred(&keys, |transaction| {
        let mut results = Vec::with_capacity(commands.len());
        let mut store = GroupStore::new(transaction);
        for ((spec, args), &owner) in commands.iter().zip(owners) {
            let mut call = Call { args, session: &mut *sessions[owner], shared, namespace: &namespace, store: &mut store };
            results.push(run_in_transaction(spec.handler, &mut call)?);
            store.check_nothing_dropped()?;
        }
        store.save_kept()?;
        shared.keys_written(database, writer, || transaction.changed_keys());
        Ok(results)
    });
    let Ok((results, ticket)) = outcome else {
        for (session, events_before) in sessions.iter_mut().zip(events_before) {
            session.key_events.truncate(events_before);
        }
        return None;
    };
    if let Some(ticket) = ticket {
        for session in sessions.iter_mut() {
            session.hold_reply_until_durable(&namespace, ticket);
        }
    }
    Some(results.into_iter().map(|result| result.unwrap_or_else(CommandError::into_reply)).collect())
}

/// Runs a handler inside a transaction body: an engine error aborts the transaction (nothing is
/// written), a Redis error is the command's reply. Handlers check their arguments and types
/// before their first write, so a Redis error never follows a buffered write.
pub fn run_in_transaction(handler: Handler, call: &mut Call<'_>) -> Result<CommandResult, EngineError> {
    match handler(call) {
        Err(CommandError::Engine(error)) => Err(error),
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arguments(words: &[&str]) -> Vec<Bytes> {
        words.iter().map(|word| Bytes::copy_from_slice(word.as_bytes())).collect()
    }

    #[test]
    fn key_specs_pick_key_positions() {
        let mset = arguments(&["MSET", "a", "1", "b", "2"]);
        assert_eq!(KeySpec { first: 1, last: -1, step: 2, after_streams: false, movable: None }.keys(&mset), vec![&b"a"[..], b"b"]);
        assert_eq!(KeySpec::ONE.keys(&mset), vec![&b"a"[..]]);
        assert_eq!(KeySpec::ALL.keys(&arguments(&["DEL", "x", "y"])), vec![&b"x"[..], b"y"]);
        assert!(KeySpec::NONE.keys(&mset).is_empty());
        assert!(KeySpec::ONE.keys(&arguments(&["GET"])).is_empty());
        assert_eq!(KeySpec::STREAMS.keys(&arguments(&["XREAD", "COUNT", "1", "STREAMS", "a", "b", "0", "$"])), vec![&b"a"[..], b"b"]);
        assert_eq!(KeySpec::STREAMS.keys(&arguments(&["XREADGROUP", "GROUP", "streams", "STREAMS", "NOACK", "streams", "k", ">"])), vec![&b"k"[..]]);
        assert!(KeySpec::STREAMS.keys(&arguments(&["XREAD", "COUNT", "STREAMS"])).is_empty());
        assert_eq!(KeySpec::STREAMS.only_key(&arguments(&["XREAD", "STREAMS", "a", "0"])), None, "never grouped");
        assert_eq!(KeySpec::ONE.only_key(&mset), Some(&b"a"[..]));
        assert_eq!(KeySpec { first: 1, last: -1, step: 2, after_streams: false, movable: None }.only_key(&mset), None, "two keys");
        assert_eq!(KeySpec { first: 1, last: -1, step: 2, after_streams: false, movable: None }.only_key(&arguments(&["MSET", "a", "1"])), Some(&b"a"[..]));
        assert_eq!(KeySpec::ALL.only_key(&arguments(&["DEL"])), None);
    }

    #[test]
    fn keys_that_move_are_named_as_redis_names_them() {
        let counted = KeySpec { movable: Some(MovableKeys::Counted { count_at: 2, destination: true, keys_optional: false }), ..KeySpec::ALL };
        assert_eq!(counted.named_keys(&arguments(&["ZUNIONSTORE", "d", "2", "a", "b", "WEIGHTS", "1", "2"])), Ok(vec![&b"d"[..], b"a", b"b"]));
        assert_eq!(counted.named_keys(&arguments(&["ZUNIONSTORE", "d", "3", "a", "b"])), Err(NoKeys::InvalidArguments));
        assert_eq!(counted.named_keys(&arguments(&["ZUNIONSTORE", "d", "0", "a"])), Err(NoKeys::InvalidArguments));
        let eval = KeySpec { movable: Some(MovableKeys::Counted { count_at: 2, destination: false, keys_optional: true }), ..KeySpec::ALL };
        assert_eq!(eval.named_keys(&arguments(&["EVAL", "s", " 1x", "k", "a"])), Ok(vec![&b"k"[..]]), "read as atoi reads it");
        assert_eq!(eval.named_keys(&arguments(&["EVAL", "s", "-1", "k"])), Ok(vec![]));
        let sort = KeySpec { movable: Some(MovableKeys::Sort), ..KeySpec::ONE };
        assert_eq!(sort.named_keys(&arguments(&["SORT", "l", "BY", "store", "LIMIT", "0", "1", "STORE", "d", "STORE"])), Ok(vec![&b"l"[..], b"d"]));
        let radius = KeySpec { movable: Some(MovableKeys::GeoRadius), ..KeySpec::ALL };
        assert_eq!(radius.named_keys(&arguments(&["GEORADIUS", "g", "0", "0", "1", "km", "STORE", "store", "d"])), Ok(vec![&b"g"[..], b"store"]));
        assert_eq!(radius.named_keys(&arguments(&["GEORADIUS", "g", "0", "0", "1", "km", "STORE", "a", "STOREDIST", "b"])), Ok(vec![&b"g"[..], b"b"]));
        let object = KeySpec { movable: Some(MovableKeys::AfterSubcommand(&["freq"])), ..KeySpec::NONE };
        assert_eq!(object.named_keys(&arguments(&["OBJECT", "FREQ", "k"])), Ok(vec![&b"k"[..]]));
        assert_eq!(object.named_keys(&arguments(&["OBJECT", "HELP"])), Err(NoKeys::NoKeyArguments));
        assert!(object.keys(&arguments(&["OBJECT", "FREQ", "k"])).is_empty(), "the server locks no key for it");
        assert_eq!((counted.advertised_positions(), counted.keys_move()), ((1, 1, 1), true));
        assert_eq!((eval.advertised_positions(), KeySpec::ALL.keys_move()), ((0, 0, 0), false));
    }

    #[test]
    fn unknown_command_text_matches_redis() {
        let Reply::Error(text) = unknown_command(&arguments(&["foo", "a", "b"])) else { panic!() };
        assert_eq!(text, "ERR unknown command 'foo', with args beginning with: 'a' 'b' ");
    }
}
