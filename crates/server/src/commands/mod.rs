//! The command table and the helpers command handlers share (argument parsing, typed reads).

mod acl;
mod admin;
mod bitfield;
mod bits;
mod connection;
mod dump;
mod geo;
mod hashes;
mod hyperloglog;
mod keys;
mod lcs;
mod lists;
mod lua_libraries;
mod pubsub;
mod scripting;
mod sets;
mod sort;
mod sorted_set_ranges;
mod sorted_sets;
mod streams;
mod strings;
mod tracking;
mod tx;
mod waits;

pub use connection::selectable_database;
pub use sort::reaches_other_keys;

use std::sync::OnceLock;

use bytes::Bytes;
use hybridkv_resp::Reply;

use crate::command::{arity_allows, fail, wrong_arity, Call, CommandError, CommandSpec, KeySpec, KeyStore, MovableKeys, ADMIN, AFTER_TRANSACTION, BEFORE_AUTH, BLIND_WRITE, BLOCKS_ON_KEYS, CROSSES_DATABASES, IN_MULTI, KEEPS_VALUE_OPEN, READONLY, READS_KEYS_BY_PATTERN, READS_PARTS, TRANSACTION_CONTROL, WHOLE_KEYSPACE, WRITE};
use crate::long_double::LongDouble;
use crate::values::Stored;

pub const SYNTAX_ERROR: &str = "ERR syntax error";
pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
pub const NOT_FLOAT: &str = "ERR value is not a valid float";
pub const NUMKEYS_NOT_POSITIVE: &str = "ERR numkeys should be greater than 0";
pub const NOT_FINITE: &str = "ERR increment would produce NaN or Infinity";
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

const READ: u16 = READONLY | IN_MULTI;
const READ_PARTS: u16 = READ | READS_PARTS;
const LISTS_KEYS: u16 = READ | WHOLE_KEYSPACE;
const WRITES: u16 = WRITE | IN_MULTI;
const BLIND_WRITES: u16 = WRITES | BLIND_WRITE;
const KEEPING_WRITES: u16 = WRITES | KEEPS_VALUE_OPEN;
const BLOCKING_WRITES: u16 = WRITES | BLOCKS_ON_KEYS;
const SESSION_OR_SERVER: u16 = IN_MULTI | AFTER_TRANSACTION;
const PAIRS: KeySpec = KeySpec { first: 1, last: -1, step: 2, after_streams: false, movable: None };
const TWO: KeySpec = KeySpec { first: 1, last: 2, step: 1, after_streams: false, movable: None };
/// SINTERCARD's, LMPOP's, ZMPOP's and ZUNION's keys follow their count (the options after them are taken for keys too: a
/// transaction over a few more keys than needed).
const AFTER_COUNT: KeySpec = KeySpec { first: 2, last: -1, step: 1, after_streams: false, movable: Some(MovableKeys::Counted { count_at: 1, destination: false, keys_optional: false }) };
/// ZUNIONSTORE's, ZINTERSTORE's and ZDIFFSTORE's: a destination, then keys after their count
/// (every argument is taken for a key: a transaction over a few more keys than needed).
const DESTINATION_THEN_COUNT: KeySpec = KeySpec { movable: Some(MovableKeys::Counted { count_at: 2, destination: true, keys_optional: false }), ..KeySpec::ALL };
/// SORT's key, and the one it stores into (which, with the keys its patterns make, SORT
/// reaches over every partition: `READS_KEYS_BY_PATTERN`).
const SORTED_AND_STORED: KeySpec = KeySpec { movable: Some(MovableKeys::Sort), ..KeySpec::ONE };
const SORTED_READ_ONLY: KeySpec = KeySpec { movable: Some(MovableKeys::SortReadOnly), ..KeySpec::ONE };
/// GEORADIUS's STORE key may be any argument after its source: every argument is taken for a
/// key (a transaction over a few more keys than needed).
const STORE_IN_OPTIONS: KeySpec = KeySpec { movable: Some(MovableKeys::GeoRadius), ..KeySpec::ALL };
/// EVAL's keys follow its script and their count; its arguments after them are taken for keys
/// too (a transaction over a few more keys than needed).
const AFTER_NUMKEYS: KeySpec = KeySpec { first: 3, last: -1, step: 1, after_streams: false, movable: Some(MovableKeys::Counted { count_at: 2, destination: false, keys_optional: true }) };
/// XINFO's key follows its subcommand.
const SUBCOMMAND_KEY: KeySpec = KeySpec { first: 2, last: 2, step: 1, after_streams: false, movable: None };
/// BLPOP's and BRPOP's keys come before their timeout.
const LAST_IS_TIMEOUT: KeySpec = KeySpec { first: 1, last: -2, step: 1, after_streams: false, movable: None };
/// BLMPOP's keys follow its timeout and their count (with its options, as for SINTERCARD).
const AFTER_TIMEOUT_AND_COUNT: KeySpec = KeySpec { first: 3, last: -1, step: 1, after_streams: false, movable: Some(MovableKeys::Counted { count_at: 2, destination: false, keys_optional: false }) };
/// OBJECT's and MEMORY USAGE's key follows the subcommand; they run after any transaction and
/// lock nothing themselves, so the server takes no keys from them (COMMAND GETKEYS names it).
const OBJECT_KEY: KeySpec = KeySpec { movable: Some(MovableKeys::AfterSubcommand(&["encoding", "freq", "idletime", "refcount"])), ..KeySpec::NONE };
const MEMORY_USAGE_KEY: KeySpec = KeySpec { movable: Some(MovableKeys::AfterSubcommand(&["usage"])), ..KeySpec::NONE };

macro_rules! command {
    ($name:literal, $arity:expr, $keys:expr, $flags:expr, $group:literal, $summary:literal, $handler:path) => {
        CommandSpec { name: $name, arity: $arity, keys: $keys, flags: $flags, group: $group, summary: $summary, handler: $handler }
    };
}

#[rustfmt::skip]
pub static TABLE: &[CommandSpec] = &[
    command!("ping", -1, KeySpec::NONE, IN_MULTI, "connection", "Returns the server's liveliness response.", connection::ping),
    command!("echo", 2, KeySpec::NONE, IN_MULTI, "connection", "Returns the given string.", connection::echo),
    command!("quit", -1, KeySpec::NONE, BEFORE_AUTH | TRANSACTION_CONTROL, "connection", "Closes the connection.", connection::quit),
    command!("hello", -1, KeySpec::NONE, BEFORE_AUTH, "connection", "Handshakes with the server (protocol version, AUTH, SETNAME).", connection::hello),
    command!("auth", -2, KeySpec::NONE, BEFORE_AUTH, "connection", "Authenticates the connection.", connection::auth),
    command!("reset", 1, KeySpec::NONE, BEFORE_AUTH | TRANSACTION_CONTROL, "connection", "Resets the connection: no transaction or watched keys, database 0, RESP2, no name, not authenticated where a password is required.", connection::reset),
    command!("select", 2, KeySpec::NONE, IN_MULTI, "connection", "Changes the selected database (namespace); inside MULTI, for the commands queued after it.", connection::select),
    command!("client", -2, KeySpec::NONE, SESSION_OR_SERVER, "connection", "Client connection commands (ID SETNAME GETNAME SETINFO LIST INFO KILL UNBLOCK PAUSE UNPAUSE REPLY TRACKING…).", connection::client),
    command!("dbsize", 1, KeySpec::NONE, READ, "server", "Returns the number of keys in the database.", admin::dbsize),
    command!("flushdb", -1, KeySpec::NONE, WRITE | IN_MULTI | WHOLE_KEYSPACE, "server", "Removes all keys from the current database.", admin::flushdb),
    command!("flushall", -1, KeySpec::NONE, WRITE, "server", "Removes all keys from all databases.", admin::flushall),
    command!("swapdb", 3, KeySpec::NONE, WRITE | CROSSES_DATABASES, "server", "Swaps two databases, for every client and across restarts (not inside MULTI).", connection::swapdb),
    command!("info", -1, KeySpec::NONE, SESSION_OR_SERVER, "server", "Returns information and statistics about the server.", admin::info),
    command!("acl", -2, KeySpec::NONE, ADMIN | SESSION_OR_SERVER, "server", "Users: who may authenticate and what they may run (all commands, keys and channels, or none of a kind).", acl::acl),
    command!("config", -2, KeySpec::NONE, ADMIN | SESSION_OR_SERVER, "server", "Configuration commands (GET SET RESETSTAT).", admin::config),
    command!("command", -1, KeySpec::NONE, SESSION_OR_SERVER, "server", "Returns detailed information about commands.", admin::command),
    command!("monitor", 1, KeySpec::NONE, 0, "server", "Streams every command the server runs (PING, QUIT and RESET still answer; RESET stops the stream).", connection::monitor),
    command!("latency", -2, KeySpec::NONE, SESSION_OR_SERVER, "server", "Per-command latency distributions (HISTOGRAM); the latency monitor's subcommands answer as with it off.", admin::latency),
    command!("cluster", -2, KeySpec::NONE, SESSION_OR_SERVER, "cluster", "Answers that cluster support is disabled (hybridkv runs standalone).", admin::cluster_disabled),
    command!("readonly", 1, KeySpec::NONE, SESSION_OR_SERVER, "cluster", "Answers that cluster support is disabled.", admin::cluster_disabled),
    command!("readwrite", 1, KeySpec::NONE, SESSION_OR_SERVER, "cluster", "Answers that cluster support is disabled.", admin::cluster_disabled),
    command!("asking", 1, KeySpec::NONE, SESSION_OR_SERVER, "cluster", "Answers that cluster support is disabled.", admin::cluster_disabled),
    command!("slowlog", -2, KeySpec::NONE, SESSION_OR_SERVER, "server", "The commands that ran longer than slowlog-log-slower-than microseconds (GET LEN RESET).", admin::slowlog),
    command!("role", 1, KeySpec::NONE, IN_MULTI, "server", "Returns the replication role: a primary without replicas.", admin::role),
    command!("time", 1, KeySpec::NONE, IN_MULTI, "server", "Returns the server time.", admin::time),
    command!("shutdown", -1, KeySpec::NONE, ADMIN, "server", "Makes everything durable, closes the database cleanly and exits.", admin::shutdown),
    command!("save", 1, KeySpec::NONE, ADMIN, "server", "Checkpoints every namespace synchronously.", admin::save),
    command!("bgsave", -1, KeySpec::NONE, ADMIN, "server", "Checkpoints every namespace in the background.", admin::bgsave),
    command!("bgrewriteaof", 1, KeySpec::NONE, ADMIN, "server", "Checkpoints every namespace in the background (a checkpoint is what compacts the journal).", admin::bgrewriteaof),
    command!("wait", 3, KeySpec::NONE, SESSION_OR_SERVER, "generic", "Returns the number of replicas that acknowledged the client's writes: 0, hybridkv has none (blocks for the timeout when asked for more, as Redis).", waits::wait),
    command!("waitaof", 4, KeySpec::NONE, SESSION_OR_SERVER, "generic", "Waits until every write so far is durable (numlocal 1; flushes now under periodic); replicas: none.", waits::waitaof),
    command!("lastsave", 1, KeySpec::NONE, SESSION_OR_SERVER, "server", "Returns the Unix time of the last checkpoint.", admin::lastsave),
    command!("object", -2, OBJECT_KEY, READONLY | SESSION_OR_SERVER, "keyspace", "Inspects a key: ENCODING and REFCOUNT as Redis would answer for its value.", keys::object),
    command!("memory", -2, MEMORY_USAGE_KEY, ADMIN | SESSION_OR_SERVER, "server", "MEMORY USAGE reports a key's stored bytes; MEMORY PURGE empties the record caches (a COLD start without restarting).", admin::memory),
    command!("get", 2, KeySpec::ONE, READ, "string", "Returns the string value of a key.", strings::get),
    command!("set", -3, KeySpec::ONE, BLIND_WRITES, "string", "Sets the string value of a key (EX PX EXAT PXAT NX XX GET KEEPTTL).", strings::set),
    command!("setnx", 3, KeySpec::ONE, WRITES, "string", "Sets a key only when it does not exist.", strings::setnx),
    command!("setex", 4, KeySpec::ONE, BLIND_WRITES, "string", "Sets a key with an expiry in seconds.", strings::setex),
    command!("psetex", 4, KeySpec::ONE, BLIND_WRITES, "string", "Sets a key with an expiry in milliseconds.", strings::psetex),
    command!("mget", -2, KeySpec::ALL, READ, "string", "Returns the values of keys.", strings::mget),
    command!("mset", -3, PAIRS, BLIND_WRITES, "string", "Sets several keys atomically.", strings::mset),
    command!("msetnx", -3, PAIRS, WRITES, "string", "Sets several keys only when none exists.", strings::msetnx),
    command!("getset", 3, KeySpec::ONE, WRITES, "string", "Sets a key and returns its previous value.", strings::getset),
    command!("getdel", 2, KeySpec::ONE, WRITES, "string", "Returns a key's value and deletes it.", strings::getdel),
    command!("getex", -2, KeySpec::ONE, WRITES, "string", "Returns a key's value and changes its expiry.", strings::getex),
    command!("append", 3, KeySpec::ONE, WRITES, "string", "Appends to a key's value.", strings::append),
    command!("strlen", 2, KeySpec::ONE, READ, "string", "Returns the length of a string.", strings::strlen),
    command!("getrange", 4, KeySpec::ONE, READ, "string", "Returns a substring.", strings::getrange),
    command!("substr", 4, KeySpec::ONE, READ, "string", "Returns a substring (GETRANGE's old name).", strings::getrange),
    command!("setrange", 4, KeySpec::ONE, WRITES, "string", "Overwrites part of a string at an offset.", strings::setrange),
    command!("pfadd", -2, KeySpec::ONE, WRITES, "hyperloglog", "Adds elements to a HyperLogLog key, creating it if needed.", hyperloglog::pfadd),
    command!("pfcount", -2, KeySpec::ALL, READ, "hyperloglog", "Returns the approximated cardinality of the union of HyperLogLog keys.", hyperloglog::pfcount),
    command!("pfmerge", -2, KeySpec::ALL, WRITES, "hyperloglog", "Merges HyperLogLog keys into the first.", hyperloglog::pfmerge),
    command!("lcs", -3, TWO, READ, "string", "Returns the longest common subsequence of two strings (LEN, IDX with MINMATCHLEN and WITHMATCHLEN).", lcs::lcs),
    command!("incr", 2, KeySpec::ONE, WRITES, "string", "Increments an integer by one.", strings::incr),
    command!("decr", 2, KeySpec::ONE, WRITES, "string", "Decrements an integer by one.", strings::decr),
    command!("incrby", 3, KeySpec::ONE, WRITES, "string", "Increments an integer.", strings::incrby),
    command!("decrby", 3, KeySpec::ONE, WRITES, "string", "Decrements an integer.", strings::decrby),
    command!("incrbyfloat", 3, KeySpec::ONE, WRITES, "string", "Increments a floating point number.", strings::incrbyfloat),
    command!("getbit", 3, KeySpec::ONE, READ, "bitmap", "Returns a bit of a string (0 past its end).", bits::getbit),
    command!("setbit", 4, KeySpec::ONE, WRITES, "bitmap", "Sets or clears a bit of a string, growing it with zero bytes; returns the bit's previous value.", bits::setbit),
    command!("bitcount", -2, KeySpec::ONE, READ, "bitmap", "Counts the set bits of a string or of a range of it (BYTE or BIT).", bits::bitcount),
    command!("bitpos", -3, KeySpec::ONE, READ, "bitmap", "Returns the first set or clear bit of a string or of a range of it (BYTE or BIT).", bits::bitpos),
    command!("bitfield", -2, KeySpec::ONE, WRITES, "bitmap", "Reads, sets and increments integers of 1 to 64 bits at any offset of a string (GET SET INCRBY, OVERFLOW WRAP|SAT|FAIL).", bitfield::bitfield),
    command!("bitfield_ro", -2, KeySpec::ONE, READ, "bitmap", "BITFIELD with GET only.", bitfield::bitfield_ro),
    command!("bitop", -4, KeySpec { first: 2, last: -1, step: 1, after_streams: false, movable: None }, WRITES, "bitmap", "Combines strings bit by bit (AND OR XOR NOT) into a destination key.", bits::bitop),
    command!("del", -2, KeySpec::ALL, WRITES, "keyspace", "Deletes keys.", keys::del),
    command!("unlink", -2, KeySpec::ALL, WRITES, "keyspace", "Deletes keys.", keys::del),
    command!("exists", -2, KeySpec::ALL, READ, "keyspace", "Counts the keys that exist.", keys::exists),
    command!("touch", -2, KeySpec::ALL, READ, "keyspace", "Counts the keys that exist (Redis also updates their last access time, which hybridkv does not keep).", keys::exists),
    command!("type", 2, KeySpec::ONE, READ, "keyspace", "Returns the type of a key.", keys::type_),
    command!("dump", 2, KeySpec::ONE, READ_PARTS, "keyspace", "Returns a key's value serialized as Redis does (a string or a hash), for RESTORE here or in Redis.", dump::dump),
    command!("restore", -4, KeySpec::ONE, WRITES, "keyspace", "Creates a key from a DUMP payload of hybridkv or Redis (a string or a hash).", dump::restore),
    command!("expire", -3, KeySpec::ONE, WRITES, "keyspace", "Sets an expiry in seconds (NX XX GT LT).", keys::expire),
    command!("pexpire", -3, KeySpec::ONE, WRITES, "keyspace", "Sets an expiry in milliseconds.", keys::pexpire),
    command!("expireat", -3, KeySpec::ONE, WRITES, "keyspace", "Sets an expiry as a Unix time in seconds.", keys::expireat),
    command!("pexpireat", -3, KeySpec::ONE, WRITES, "keyspace", "Sets an expiry as a Unix time in milliseconds.", keys::pexpireat),
    command!("ttl", 2, KeySpec::ONE, READ, "keyspace", "Returns the time to live in seconds.", keys::ttl),
    command!("pttl", 2, KeySpec::ONE, READ, "keyspace", "Returns the time to live in milliseconds.", keys::pttl),
    command!("expiretime", 2, KeySpec::ONE, READ, "keyspace", "Returns the expiry as a Unix time in seconds.", keys::expiretime),
    command!("pexpiretime", 2, KeySpec::ONE, READ, "keyspace", "Returns the expiry as a Unix time in milliseconds.", keys::pexpiretime),
    command!("persist", 2, KeySpec::ONE, WRITES, "keyspace", "Removes a key's expiry.", keys::persist),
    command!("rename", 3, TWO, WRITES, "keyspace", "Renames a key.", keys::rename),
    command!("renamenx", 3, TWO, WRITES, "keyspace", "Renames a key when the new name is free.", keys::renamenx),
    command!("move", 3, KeySpec::ONE, WRITE | CROSSES_DATABASES, "keyspace", "Moves a key to another database (not inside MULTI).", keys::move_key),
    command!("copy", -3, TWO, WRITES | CROSSES_DATABASES, "keyspace", "Copies a key's value, expiry and fields to another key (DB REPLACE).", keys::copy),
    command!("keys", 2, KeySpec::NONE, LISTS_KEYS, "keyspace", "Returns the keys matching a pattern.", keys::keys),
    command!("scan", -2, KeySpec::NONE, LISTS_KEYS, "keyspace", "Iterates over keys (MATCH COUNT TYPE).", keys::scan),
    command!("randomkey", 1, KeySpec::NONE, LISTS_KEYS, "keyspace", "Returns a random key.", keys::randomkey),
    command!("hset", -4, KeySpec::ONE, WRITES, "hash", "Sets fields of a hash.", hashes::hset),
    command!("hmset", -4, KeySpec::ONE, WRITES, "hash", "Sets fields of a hash.", hashes::hmset),
    command!("hsetnx", 4, KeySpec::ONE, WRITES, "hash", "Sets a field only when it does not exist.", hashes::hsetnx),
    command!("hget", 3, KeySpec::ONE, READ_PARTS, "hash", "Returns a field's value.", hashes::hget),
    command!("hmget", -3, KeySpec::ONE, READ_PARTS, "hash", "Returns the values of fields.", hashes::hmget),
    command!("hgetall", 2, KeySpec::ONE, READ_PARTS, "hash", "Returns all fields and values.", hashes::hgetall),
    command!("hdel", -3, KeySpec::ONE, WRITES, "hash", "Deletes fields.", hashes::hdel),
    command!("hexists", 3, KeySpec::ONE, READ_PARTS, "hash", "Whether a field exists.", hashes::hexists),
    command!("hlen", 2, KeySpec::ONE, READ_PARTS, "hash", "Returns the number of fields.", hashes::hlen),
    command!("hkeys", 2, KeySpec::ONE, READ_PARTS, "hash", "Returns all field names.", hashes::hkeys),
    command!("hvals", 2, KeySpec::ONE, READ_PARTS, "hash", "Returns all values.", hashes::hvals),
    command!("hincrby", 4, KeySpec::ONE, WRITES, "hash", "Increments an integer field.", hashes::hincrby),
    command!("hincrbyfloat", 4, KeySpec::ONE, WRITES, "hash", "Increments a floating point field.", hashes::hincrbyfloat),
    command!("hstrlen", 3, KeySpec::ONE, READ_PARTS, "hash", "Returns the length of a field's value.", hashes::hstrlen),
    command!("hscan", -3, KeySpec::ONE, READ_PARTS, "hash", "Iterates over fields (MATCH COUNT NOVALUES).", hashes::hscan),
    command!("hrandfield", -2, KeySpec::ONE, READ_PARTS, "hash", "Returns random fields (count: distinct if positive, repeating if negative; WITHVALUES).", hashes::hrandfield),
    command!("lpush", -3, KeySpec::ONE, KEEPING_WRITES, "list", "Prepends elements to a list.", lists::lpush),
    command!("rpush", -3, KeySpec::ONE, KEEPING_WRITES, "list", "Appends elements to a list.", lists::rpush),
    command!("lpushx", -3, KeySpec::ONE, KEEPING_WRITES, "list", "Prepends elements to a list that exists.", lists::lpushx),
    command!("rpushx", -3, KeySpec::ONE, KEEPING_WRITES, "list", "Appends elements to a list that exists.", lists::rpushx),
    command!("lpop", -2, KeySpec::ONE, KEEPING_WRITES, "list", "Removes and returns the first elements of a list.", lists::lpop),
    command!("rpop", -2, KeySpec::ONE, KEEPING_WRITES, "list", "Removes and returns the last elements of a list.", lists::rpop),
    command!("llen", 2, KeySpec::ONE, READ_PARTS, "list", "Returns the length of a list.", lists::llen),
    command!("lindex", 3, KeySpec::ONE, READ_PARTS, "list", "Returns an element by its index.", lists::lindex),
    command!("lset", 4, KeySpec::ONE, WRITES, "list", "Sets an element by its index.", lists::lset),
    command!("lrange", 4, KeySpec::ONE, READ_PARTS, "list", "Returns a range of elements.", lists::lrange),
    command!("ltrim", 4, KeySpec::ONE, WRITES, "list", "Keeps only a range of elements.", lists::ltrim),
    command!("lrem", 4, KeySpec::ONE, WRITES, "list", "Removes elements equal to a value.", lists::lrem),
    command!("linsert", 5, KeySpec::ONE, WRITES, "list", "Inserts an element before or after another.", lists::linsert),
    command!("lpos", -3, KeySpec::ONE, READ_PARTS, "list", "Returns the indices of matching elements (RANK COUNT MAXLEN).", lists::lpos),
    command!("lmove", 5, TWO, WRITES, "list", "Pops an element from one list and pushes it to another.", lists::lmove),
    command!("rpoplpush", 3, TWO, WRITES, "list", "Pops the last element of a list and pushes it to the head of another.", lists::rpoplpush),
    command!("lmpop", -4, AFTER_COUNT, WRITES, "list", "Pops elements from the first non-empty list of several (COUNT).", lists::lmpop),
    command!("blpop", -3, LAST_IS_TIMEOUT, BLOCKING_WRITES, "list", "Pops the first element of the first non-empty list, waiting for one up to the timeout (seconds, 0: no limit).", lists::blpop),
    command!("brpop", -3, LAST_IS_TIMEOUT, BLOCKING_WRITES, "list", "Pops the last element of the first non-empty list, waiting for one up to the timeout.", lists::brpop),
    command!("blmove", 6, TWO, BLOCKING_WRITES, "list", "LMOVE, waiting for the source to have an element up to the timeout.", lists::blmove),
    command!("brpoplpush", 4, TWO, BLOCKING_WRITES, "list", "RPOPLPUSH, waiting for the source to have an element up to the timeout.", lists::brpoplpush),
    command!("blmpop", -5, AFTER_TIMEOUT_AND_COUNT, BLOCKING_WRITES, "list", "LMPOP, waiting for one of the lists to have elements up to the timeout.", lists::blmpop),
    command!("sort", -2, SORTED_AND_STORED, WRITES | READS_PARTS | READS_KEYS_BY_PATTERN, "generic", "Sorts a list, set or sorted set as numbers or ALPHA, BY other keys' values, with LIMIT, GET patterns and STORE.", sort::sort),
    command!("sort_ro", -2, SORTED_READ_ONLY, READ_PARTS | READS_KEYS_BY_PATTERN, "generic", "SORT without STORE.", sort::sort_ro),
    command!("xadd", -5, KeySpec::ONE, KEEPING_WRITES, "stream", "Appends an entry to a stream, creating it if needed (NOMKSTREAM; MAXLEN|MINID [=|~] threshold [LIMIT count] trims it).", streams::xadd),
    command!("xlen", 2, KeySpec::ONE, READ_PARTS, "stream", "Returns the number of entries in a stream.", streams::xlen),
    command!("xrange", -4, KeySpec::ONE, READ_PARTS, "stream", "Returns the entries with IDs in a range (COUNT), oldest first.", streams::xrange),
    command!("xrevrange", -4, KeySpec::ONE, READ_PARTS, "stream", "Returns the entries with IDs in a range (COUNT), newest first.", streams::xrevrange),
    command!("xdel", -3, KeySpec::ONE, WRITES, "stream", "Deletes entries by ID; returns how many there were.", streams::xdel),
    command!("xtrim", -4, KeySpec::ONE, WRITES, "stream", "Removes the oldest entries (MAXLEN|MINID [=|~] threshold [LIMIT count]).", streams::xtrim),
    command!("xread", -4, KeySpec::STREAMS, READ_PARTS, "stream", "Returns the entries after the given IDs of one or more streams ($: the last now); BLOCK waits for one up to the timeout (ms, 0: no limit).", streams::xread),
    command!("xsetid", -3, KeySpec::ONE, WRITES, "stream", "Sets a stream's last ID (ENTRIESADDED MAXDELETEDID).", streams::xsetid),
    command!("xinfo", -2, SUBCOMMAND_KEY, READ_PARTS, "stream", "Information about a stream, its groups or a group's consumers (STREAM [FULL [COUNT count]], GROUPS, CONSUMERS).", streams::xinfo),
    command!("xgroup", -2, SUBCOMMAND_KEY, WRITES, "stream", "Manages a stream's consumer groups (CREATE SETID DESTROY CREATECONSUMER DELCONSUMER).", streams::xgroup),
    command!("xreadgroup", -7, KeySpec::STREAMS, WRITES, "stream", "Reads entries for a consumer of a group: new ones (>, pending until XACK unless NOACK) or its pending ones after an ID; BLOCK waits for new ones.", streams::xreadgroup),
    command!("xack", -4, KeySpec::ONE, WRITES, "stream", "Acknowledges pending entries of a group.", streams::xack),
    command!("xpending", -3, KeySpec::ONE, READ_PARTS, "stream", "A group's pending entries: a summary, or a range (IDLE, consumer).", streams::xpending),
    command!("xclaim", -6, KeySpec::ONE, WRITES, "stream", "Gives pending entries idle long enough to another consumer (IDLE TIME RETRYCOUNT FORCE JUSTID LASTID).", streams::xclaim),
    command!("xautoclaim", -6, KeySpec::ONE, WRITES, "stream", "Claims pending entries idle long enough from a start ID on (COUNT JUSTID); answers the ID to go on from.", streams::xautoclaim),
    command!("sadd", -3, KeySpec::ONE, WRITES, "set", "Adds members to a set.", sets::sadd),
    command!("srem", -3, KeySpec::ONE, WRITES, "set", "Removes members from a set.", sets::srem),
    command!("sismember", 3, KeySpec::ONE, READ_PARTS, "set", "Whether a member is in a set.", sets::sismember),
    command!("smismember", -3, KeySpec::ONE, READ_PARTS, "set", "Whether each member is in a set.", sets::smismember),
    command!("smembers", 2, KeySpec::ONE, READ_PARTS, "set", "Returns all members of a set.", sets::smembers),
    command!("scard", 2, KeySpec::ONE, READ_PARTS, "set", "Returns the number of members of a set.", sets::scard),
    command!("spop", -2, KeySpec::ONE, WRITES, "set", "Removes and returns random members.", sets::spop),
    command!("srandmember", -2, KeySpec::ONE, READ_PARTS, "set", "Returns random members (count: distinct if positive, repeating if negative).", sets::srandmember),
    command!("smove", 4, TWO, WRITES, "set", "Moves a member from one set to another.", sets::smove),
    command!("sinter", -2, KeySpec::ALL, READ_PARTS, "set", "Returns the intersection of sets.", sets::sinter),
    command!("sintercard", -3, AFTER_COUNT, READ_PARTS, "set", "Returns the size of the intersection of sets (LIMIT).", sets::sintercard),
    command!("sinterstore", -3, KeySpec::ALL, WRITES, "set", "Stores the intersection of sets in a key.", sets::sinterstore),
    command!("sunion", -2, KeySpec::ALL, READ_PARTS, "set", "Returns the union of sets.", sets::sunion),
    command!("sunionstore", -3, KeySpec::ALL, WRITES, "set", "Stores the union of sets in a key.", sets::sunionstore),
    command!("sdiff", -2, KeySpec::ALL, READ_PARTS, "set", "Returns the members of the first set not in the others.", sets::sdiff),
    command!("sdiffstore", -3, KeySpec::ALL, WRITES, "set", "Stores the difference of sets in a key.", sets::sdiffstore),
    command!("sscan", -3, KeySpec::ONE, READ_PARTS, "set", "Iterates over members (MATCH COUNT).", sets::sscan),
    command!("zadd", -4, KeySpec::ONE, KEEPING_WRITES, "sorted_set", "Adds members with scores, or updates their scores (NX XX GT LT CH INCR).", sorted_sets::zadd),
    command!("zincrby", 4, KeySpec::ONE, KEEPING_WRITES, "sorted_set", "Increments a member's score.", sorted_sets::zincrby),
    command!("zrem", -3, KeySpec::ONE, KEEPING_WRITES, "sorted_set", "Removes members.", sorted_sets::zrem),
    command!("zcard", 2, KeySpec::ONE, READ_PARTS, "sorted_set", "Returns the number of members.", sorted_sets::zcard),
    command!("zscore", 3, KeySpec::ONE, READ_PARTS, "sorted_set", "Returns a member's score.", sorted_sets::zscore),
    command!("zmscore", -3, KeySpec::ONE, READ_PARTS, "sorted_set", "Returns the scores of members.", sorted_sets::zmscore),
    command!("zcount", 4, KeySpec::ONE, READ_PARTS, "sorted_set", "Counts the members with scores in a range.", sorted_sets::zcount),
    command!("zlexcount", 4, KeySpec::ONE, READ_PARTS, "sorted_set", "Counts the members in a lexicographic range.", sorted_sets::zlexcount),
    command!("zrank", 3, KeySpec::ONE, READ_PARTS, "sorted_set", "Returns a member's rank, from the lowest score.", sorted_sets::zrank),
    command!("zrevrank", 3, KeySpec::ONE, READ_PARTS, "sorted_set", "Returns a member's rank, from the highest score.", sorted_sets::zrevrank),
    command!("zrange", -4, KeySpec::ONE, READ_PARTS, "sorted_set", "Returns members by rank, score or lexicographic range (BYSCORE BYLEX REV LIMIT WITHSCORES).", sorted_sets::zrange),
    command!("zrangestore", -5, TWO, WRITES, "sorted_set", "Stores the members of a ZRANGE in a key.", sorted_sets::zrangestore),
    command!("zrevrange", -4, KeySpec::ONE, READ_PARTS, "sorted_set", "Returns members by rank, from the highest score.", sorted_sets::zrevrange),
    command!("zrangebyscore", -4, KeySpec::ONE, READ_PARTS, "sorted_set", "Returns members with scores in a range (WITHSCORES LIMIT).", sorted_sets::zrangebyscore),
    command!("zrevrangebyscore", -4, KeySpec::ONE, READ_PARTS, "sorted_set", "Returns members with scores in a range, from the highest.", sorted_sets::zrevrangebyscore),
    command!("zrangebylex", -4, KeySpec::ONE, READ_PARTS, "sorted_set", "Returns members in a lexicographic range (LIMIT).", sorted_sets::zrangebylex),
    command!("zrevrangebylex", -4, KeySpec::ONE, READ_PARTS, "sorted_set", "Returns members in a lexicographic range, from the largest.", sorted_sets::zrevrangebylex),
    command!("zremrangebyrank", 4, KeySpec::ONE, KEEPING_WRITES, "sorted_set", "Removes the members in a range of ranks.", sorted_sets::zremrangebyrank),
    command!("zremrangebyscore", 4, KeySpec::ONE, KEEPING_WRITES, "sorted_set", "Removes the members with scores in a range.", sorted_sets::zremrangebyscore),
    command!("zremrangebylex", 4, KeySpec::ONE, KEEPING_WRITES, "sorted_set", "Removes the members in a lexicographic range.", sorted_sets::zremrangebylex),
    command!("zpopmin", -2, KeySpec::ONE, KEEPING_WRITES, "sorted_set", "Removes and returns the members with the lowest scores.", sorted_sets::zpopmin),
    command!("zpopmax", -2, KeySpec::ONE, KEEPING_WRITES, "sorted_set", "Removes and returns the members with the highest scores.", sorted_sets::zpopmax),
    command!("zmpop", -4, AFTER_COUNT, WRITES, "sorted_set", "Pops members from the first non-empty sorted set (MIN MAX COUNT).", sorted_sets::zmpop),
    command!("bzpopmin", -3, LAST_IS_TIMEOUT, BLOCKING_WRITES, "sorted_set", "ZPOPMIN of the first non-empty sorted set, waiting for one up to the timeout (seconds, 0: no limit).", sorted_sets::bzpopmin),
    command!("bzpopmax", -3, LAST_IS_TIMEOUT, BLOCKING_WRITES, "sorted_set", "ZPOPMAX of the first non-empty sorted set, waiting for one up to the timeout.", sorted_sets::bzpopmax),
    command!("bzmpop", -5, AFTER_TIMEOUT_AND_COUNT, BLOCKING_WRITES, "sorted_set", "ZMPOP, waiting for one of the sorted sets to have members up to the timeout.", sorted_sets::bzmpop),
    command!("zrandmember", -2, KeySpec::ONE, READ_PARTS, "sorted_set", "Returns random members (count: distinct if positive, repeating if negative; WITHSCORES).", sorted_sets::zrandmember),
    command!("zscan", -3, KeySpec::ONE, READ_PARTS, "sorted_set", "Iterates over members and scores (MATCH COUNT).", sorted_sets::zscan),
    command!("zunion", -3, AFTER_COUNT, READ_PARTS, "sorted_set", "Returns the union of sorted sets and sets (WEIGHTS AGGREGATE WITHSCORES).", sorted_sets::zunion),
    command!("zinter", -3, AFTER_COUNT, READ_PARTS, "sorted_set", "Returns the intersection of sorted sets and sets (WEIGHTS AGGREGATE WITHSCORES).", sorted_sets::zinter),
    command!("zdiff", -3, AFTER_COUNT, READ_PARTS, "sorted_set", "Returns the members of the first sorted set not in the others (WITHSCORES).", sorted_sets::zdiff),
    command!("zunionstore", -4, DESTINATION_THEN_COUNT, WRITES, "sorted_set", "Stores the union of sorted sets and sets in a key (WEIGHTS AGGREGATE).", sorted_sets::zunionstore),
    command!("zinterstore", -4, DESTINATION_THEN_COUNT, WRITES, "sorted_set", "Stores the intersection of sorted sets and sets in a key (WEIGHTS AGGREGATE).", sorted_sets::zinterstore),
    command!("zdiffstore", -4, DESTINATION_THEN_COUNT, WRITES, "sorted_set", "Stores the difference of sorted sets in a key.", sorted_sets::zdiffstore),
    command!("zintercard", -3, AFTER_COUNT, READ_PARTS, "sorted_set", "Returns the size of the intersection of sorted sets and sets (LIMIT).", sorted_sets::zintercard),
    command!("geoadd", -5, KeySpec::ONE, WRITES, "geo", "Adds members at positions to a sorted set, or moves them (NX XX CH).", geo::geoadd),
    command!("geopos", -2, KeySpec::ONE, READ_PARTS, "geo", "Returns members' longitudes and latitudes.", geo::geopos),
    command!("geodist", -4, KeySpec::ONE, READ_PARTS, "geo", "Returns the distance between two members (M KM FT MI).", geo::geodist),
    command!("geohash", -2, KeySpec::ONE, READ_PARTS, "geo", "Returns members' positions as standard geohash strings.", geo::geohash),
    command!("geosearch", -7, KeySpec::ONE, READ_PARTS, "geo", "Returns the members within a radius or a box around a member or a position (ASC DESC COUNT ANY WITHCOORD WITHDIST WITHHASH).", geo::geosearch),
    command!("geosearchstore", -8, TWO, WRITES, "geo", "Stores the members a GEOSEARCH finds, with their positions or distances (STOREDIST), in a key.", geo::geosearchstore),
    command!("georadius", -6, STORE_IN_OPTIONS, WRITES, "geo", "Returns (or STOREs) the members within a radius of a position (deprecated: GEOSEARCH).", geo::georadius),
    command!("georadius_ro", -6, KeySpec::ONE, READ_PARTS, "geo", "GEORADIUS without STORE.", geo::georadius_ro),
    command!("georadiusbymember", -5, STORE_IN_OPTIONS, WRITES, "geo", "Returns (or STOREs) the members within a radius of a member (deprecated: GEOSEARCH).", geo::georadiusbymember),
    command!("georadiusbymember_ro", -5, KeySpec::ONE, READ_PARTS, "geo", "GEORADIUSBYMEMBER without STORE.", geo::georadiusbymember_ro),
    command!("eval", -3, AFTER_NUMKEYS, WRITES, "scripting", "Runs a Lua script as one command over the keys it declares.", scripting::eval),
    command!("evalsha", -3, AFTER_NUMKEYS, WRITES, "scripting", "Runs a cached Lua script by its SHA-1.", scripting::evalsha),
    command!("eval_ro", -3, AFTER_NUMKEYS, READ_PARTS, "scripting", "Runs a Lua script that may only read.", scripting::eval_ro),
    command!("evalsha_ro", -3, AFTER_NUMKEYS, READ_PARTS, "scripting", "Runs a cached Lua script that may only read.", scripting::evalsha_ro),
    command!("script", -2, KeySpec::NONE, SESSION_OR_SERVER, "scripting", "Script cache commands (LOAD EXISTS FLUSH KILL).", scripting::script),
    command!("subscribe", -2, KeySpec::NONE, 0, "pubsub", "Listens for messages published to channels (not inside MULTI).", pubsub::subscribe),
    command!("psubscribe", -2, KeySpec::NONE, 0, "pubsub", "Listens for messages published to channels matching glob patterns (not inside MULTI).", pubsub::psubscribe),
    command!("ssubscribe", -2, KeySpec::NONE, 0, "pubsub", "Listens for messages published to shard channels (not inside MULTI).", pubsub::ssubscribe),
    command!("unsubscribe", -1, KeySpec::NONE, 0, "pubsub", "Stops listening to channels, or to all of them.", pubsub::unsubscribe),
    command!("punsubscribe", -1, KeySpec::NONE, 0, "pubsub", "Stops listening to patterns, or to all of them.", pubsub::punsubscribe),
    command!("sunsubscribe", -1, KeySpec::NONE, 0, "pubsub", "Stops listening to shard channels, or to all of them.", pubsub::sunsubscribe),
    command!("publish", 3, KeySpec::NONE, SESSION_OR_SERVER, "pubsub", "Posts a message to a channel; returns how many subscriptions received it.", pubsub::publish),
    command!("spublish", 3, KeySpec::NONE, SESSION_OR_SERVER, "pubsub", "Posts a message to a shard channel.", pubsub::spublish),
    command!("pubsub", -2, KeySpec::NONE, SESSION_OR_SERVER, "pubsub", "Inspects Pub/Sub (CHANNELS NUMSUB NUMPAT SHARDCHANNELS SHARDNUMSUB).", pubsub::pubsub),
    command!("multi", 1, KeySpec::NONE, TRANSACTION_CONTROL, "transactions", "Starts a transaction.", tx::multi),
    command!("exec", 1, KeySpec::NONE, TRANSACTION_CONTROL | WRITE, "transactions", "Executes the queued commands atomically and durably as one batch.", tx::exec),
    command!("discard", 1, KeySpec::NONE, TRANSACTION_CONTROL, "transactions", "Discards the queued commands.", tx::discard),
    command!("watch", -2, KeySpec::ALL, TRANSACTION_CONTROL, "transactions", "Makes the next EXEC conditional on keys not changing.", tx::watch),
    command!("unwatch", 1, KeySpec::NONE, TRANSACTION_CONTROL, "transactions", "Forgets the watched keys.", tx::unwatch),
];

/// One subcommand: its name, Redis's arity (counting the command and the subcommand, as
/// `CommandSpec::arity` does), its arguments and what it does (HELP lists them).
struct Subcommand {
    name: &'static str,
    arity: i32,
    arguments: &'static str,
    summary: &'static str,
}

const fn subcommand(name: &'static str, arity: i32, arguments: &'static str, summary: &'static str) -> Subcommand {
    Subcommand { name, arity, arguments, summary }
}

/// The subcommands of the commands that have them. `check_subcommand` applies it before a
/// command runs or is queued in MULTI, so an unknown subcommand or a wrong argument count fails
/// the transaction at once, as in Redis; the handlers dispatch only on names listed here, and
/// `subcommand_help` answers HELP from it.
#[rustfmt::skip]
static SUBCOMMANDS: &[(&str, &[Subcommand])] = &[
    ("client", &[
        subcommand("id", 2, "", "Return the ID of the current connection."),
        subcommand("getname", 2, "", "Return the name of the current connection."),
        subcommand("setname", 3, "<name>", "Assign the name <name> to the current connection."),
        subcommand("setinfo", 4, "<LIB-NAME|LIB-VER> <value>", "Set the client library's name or version."),
        subcommand("list", -2, "[TYPE <normal|master|replica|pubsub>] [ID <id> [<id> ...]]", "Return information about client connections (every client here is of type normal)."),
        subcommand("info", 2, "", "Return information about the current client connection."),
        subcommand("kill", -3, "<ip:port> | <filter> <value> ...", "Kill connections by address, or by ID, ADDR and SKIPME filters."),
        subcommand("unblock", -3, "<clientid> [TIMEOUT|ERROR]", "Unblock a client blocked in WAIT or WAITAOF: it answers as if timed out, or with an error."),
        subcommand("pause", -3, "<timeout> [WRITE|ALL]", "Suspend all, or just write, clients for <timeout> milliseconds."),
        subcommand("unpause", 2, "", "Stop the current client pause, resuming traffic."),
        subcommand("reply", 3, "<ON|OFF|SKIP>", "Control the replies sent to the current connection: all, none, or none for the next command."),
        subcommand("tracking", -3, "<ON|OFF> [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]] [OPTIN] [OPTOUT] [NOLOOP]", "Control server assisted client side caching."),
        subcommand("trackinginfo", 2, "", "Report tracking status for the current connection."),
        subcommand("getredir", 2, "", "Return the client ID we are redirecting to when tracking is enabled."),
        subcommand("caching", 3, "<YES|NO>", "Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes."),
        subcommand("no-evict", 3, "<ON|OFF>", "Accepted for compatibility; changes nothing."),
        subcommand("no-touch", 3, "<ON|OFF>", "Accepted for compatibility; changes nothing."),
        subcommand("help", 2, "", "Print this help."),
    ]),
    ("script", &[
        subcommand("load", 3, "<script>", "Load a script into the scripts cache without executing it."),
        subcommand("exists", -3, "<sha1> [<sha1> ...]", "Return information about the existence of the scripts in the script cache."),
        subcommand("flush", -2, "[ASYNC|SYNC]", "Flush the Lua scripts cache."),
        subcommand("kill", 2, "", "Kill the currently executing Lua script (none ever is: scripts run within their command)."),
        subcommand("help", 2, "", "Print this help."),
    ]),
    ("config", &[
        subcommand("get", -3, "<pattern> ...", "Return parameters matching the glob-like <pattern> and their values."),
        subcommand("set", -4, "<directive> <value> ...", "Set the configuration <directive> to <value> (maxclients, requirepass, slowlog-log-slower-than, slowlog-max-len)."),
        subcommand("resetstat", 2, "", "Reset statistics reported by the INFO command."),
        subcommand("rewrite", 2, "", "Rewrite the configuration file (the server has none to rewrite)."),
        subcommand("help", 2, "", "Print this help."),
    ]),
    ("command", &[
        subcommand("count", 2, "", "Return the number of commands in this server."),
        subcommand("list", -2, "[FILTERBY (MODULE <module-name>|ACLCAT <category>|PATTERN <pattern>)]", "Return the names of all commands and subcommands, or those of a category (the group COMMAND INFO gives) or matching a pattern."),
        subcommand("info", -2, "[<command-name> ...]", "Return details about the named commands, or all of them."),
        subcommand("docs", -2, "[<command-name> ...]", "Return documentation about the named commands, or all of them."),
        subcommand("getkeys", -4, "<full-command>", "Return the keys in a full command."),
        subcommand("help", 2, "", "Print this help."),
    ]),
    ("object", &[
        subcommand("encoding", 3, "<key>", "Return the kind of internal representation Redis would use for the key's value."),
        subcommand("freq", 3, "<key>", "Not tracked: no LFU maxmemory policy (as Redis without one)."),
        subcommand("idletime", 3, "<key>", "Not tracked: hybridkv keeps no access times."),
        subcommand("refcount", 3, "<key>", "Return the number of references of the value (Redis's shared small integers included)."),
        subcommand("help", 2, "", "Print this help."),
    ]),
    ("acl", &[
        subcommand("cat", -2, "[<category>]", "List all command categories (this server grants all commands or none: it lists no category's commands)."),
        subcommand("deluser", -3, "<username> [<username> ...]", "Delete a list of users."),
        subcommand("dryrun", -4, "<username> <command> [<arg> ...]", "Returns whether the user can execute the given command without executing the command."),
        subcommand("getuser", 3, "<username>", "Get the user's details."),
        subcommand("genpass", -2, "[<bits>]", "Generate a secure 256-bit user password. The optional `bits` argument can\nbe used to specify a different size."),
        subcommand("list", 2, "", "Show users details in config file format."),
        subcommand("load", 2, "", "Reload users from the ACL file (there is none: users live in memory)."),
        subcommand("log", -2, "[<count> | RESET]", "Show the ACL log entries."),
        subcommand("save", 2, "", "Save the current config to the ACL file (there is none: users live in memory)."),
        subcommand("setuser", -3, "<username> <attribute> [<attribute> ...]", "Create or modify a user with the specified attributes (on, off, >password, <password,\n#hash, !hash, nopass, resetpass, +@all, -@all, ~*, resetkeys, &*, resetchannels, reset)."),
        subcommand("users", 2, "", "List all the registered usernames."),
        subcommand("whoami", 2, "", "Return the current connection username."),
        subcommand("help", 2, "", "Prints this help."),
    ]),
    ("slowlog", &[
        subcommand("get", -2, "[<count>]", "Return top <count> entries from the slowlog (default: 10, -1 mean all). Entries are made of: id, timestamp, time in microseconds, arguments array, client IP and port, client name."),
        subcommand("len", 2, "", "Return the length of the slowlog."),
        subcommand("reset", 2, "", "Reset the slowlog."),
        subcommand("help", 2, "", "Prints this help."),
    ]),
    ("latency", &[
        subcommand("doctor", 2, "", "Return a human readable latency analysis report."),
        subcommand("graph", 3, "<event>", "Return an ASCII latency graph for the <event> class (there is no latency monitor: none has samples)."),
        subcommand("history", 3, "<event>", "Return time-latency samples for the <event> class (none: there is no latency monitor)."),
        subcommand("latest", 2, "", "Return the latest latency samples for all events (none: there is no latency monitor)."),
        subcommand("reset", -2, "[<event> ...]", "Reset latency data of one or more <event> classes (there is none to reset)."),
        subcommand("histogram", -2, "[<command> ...]", "Return a cumulative distribution of latencies in the format of a histogram for the specified command names, or all of them."),
        subcommand("help", 2, "", "Prints this help."),
    ]),
    ("pubsub", &[
        subcommand("channels", -2, "[<pattern>]", "Return the currently active channels matching a <pattern> (default: '*')."),
        subcommand("numpat", 2, "", "Return number of subscriptions to patterns."),
        subcommand("numsub", -2, "[<channel> ...]", "Return the number of subscribers for the specified channels, excluding pattern subscriptions(default: no channels)."),
        subcommand("shardchannels", -2, "[<pattern>]", "Return the currently active shard level channels matching a <pattern> (default: '*')."),
        subcommand("shardnumsub", -2, "[<shardchannel> ...]", "Return the number of subscribers for the specified shard level channel(s)"),
        subcommand("help", 2, "", "Prints this help."),
    ]),
    ("xinfo", &[
        subcommand("consumers", 4, "<key> <groupname>", "Show consumers of <groupname>."),
        subcommand("groups", 3, "<key>", "Show the stream consumer groups."),
        subcommand("stream", -3, "<key> [FULL [COUNT <count>]", "Show information about the stream."),
        subcommand("help", 2, "", "Prints this help."),
    ]),
    ("xgroup", &[
        subcommand("create", -5, "<key> <groupname> <id|$> [option]", "Create a new consumer group. Options are:\n* MKSTREAM\n  Create the empty stream if it does not exist.\n* ENTRIESREAD entries_read\n  Set the group's entries_read counter (internal use)."),
        subcommand("createconsumer", 5, "<key> <groupname> <consumer>", "Create a new consumer in the specified group."),
        subcommand("delconsumer", 5, "<key> <groupname> <consumer>", "Remove the specified consumer."),
        subcommand("destroy", 4, "<key> <groupname>", "Remove the specified group."),
        subcommand("setid", -5, "<key> <groupname> <id|$> [ENTRIESREAD entries_read]", "Set the current group ID and entries_read counter."),
        subcommand("help", 2, "", "Prints this help."),
    ]),
    ("memory", &[
        subcommand("purge", 2, "", "Empty the record caches (a COLD start without a restart)."),
        subcommand("usage", -3, "<key> [SAMPLES <count>]", "Bytes the key's records and index entries take (a big hash's buckets sampled)."),
        subcommand("help", 2, "", "Print this help."),
    ]),
];

fn subcommands_of(command: &str) -> &'static [Subcommand] {
    SUBCOMMANDS.iter().find(|(name, _)| *name == command).map_or(&[], |(_, subcommands)| subcommands)
}

/// The reply to `<command> HELP`: each subcommand with its arguments, then what it does.
pub fn subcommand_help(command: &str) -> Reply {
    let mut lines = vec![Reply::Simple(format!("{} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:", command.to_ascii_uppercase()).into())];
    for subcommand in subcommands_of(command) {
        let usage = format!("{} {}", subcommand.name.to_ascii_uppercase(), subcommand.arguments);
        lines.push(Reply::Simple(usage.trim_end().to_string().into()));
        lines.extend(subcommand.summary.lines().map(|line| Reply::Simple(format!("    {line}").into())));
    }
    Reply::Array(lines)
}

/// Redis's error for a subcommand `command` does not have.
pub fn unknown_subcommand(command: &str, subcommand: &[u8]) -> CommandError {
    CommandError::Redis(format!("ERR unknown subcommand '{}'. Try {} HELP.", String::from_utf8_lossy(subcommand), command.to_ascii_uppercase()).into())
}

/// Redis's addReplySubcommandSyntaxError: a known subcommand of `command` with arguments it
/// does not take.
pub fn subcommand_syntax_error(command: &str, subcommand: &[u8]) -> CommandError {
    CommandError::Redis(format!("ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP.", String::from_utf8_lossy(subcommand), command.to_ascii_uppercase()).into())
}

/// Whether `args` name a subcommand of `spec` with an argument count it takes (commands without
/// subcommands, and COMMAND without one, always pass).
pub fn check_subcommand(spec: &CommandSpec, args: &[Bytes]) -> Result<(), CommandError> {
    let subcommands = subcommands_of(spec.name);
    let Some(subcommand) = args.get(1).filter(|_| !subcommands.is_empty()) else { return Ok(()) };
    let Some(known) = subcommands.iter().find(|known| subcommand.eq_ignore_ascii_case(known.name.as_bytes())) else {
        return Err(unknown_subcommand(spec.name, subcommand));
    };
    if !arity_allows(known.arity, args.len()) {
        return Err(wrong_arity(&format!("{}|{}", spec.name, known.name)));
    }
    Ok(())
}

/// The command's name as Redis reports it (CLIENT LIST's cmd=, ACL denials):
/// `command|subcommand` for a known subcommand.
pub fn full_name(spec: &'static CommandSpec, args: &[Bytes]) -> &'static str {
    stat_row(spec, args).map_or(spec.name, |row| stat_row_names()[row].as_str())
}

/// Where INFO commandstats counts a request of `spec`: the command's row (its place in TABLE),
/// or, for a known subcommand, the subcommand's row after every command's (Redis counts
/// `config|get` apart from `config|set`). None for an unknown subcommand, which Redis counts
/// under no command. Rows are below `stat_row_names().len()`.
pub fn stat_row(spec: &'static CommandSpec, args: &[Bytes]) -> Option<usize> {
    let command_row = (spec as *const CommandSpec as usize - TABLE.as_ptr() as usize) / std::mem::size_of::<CommandSpec>();
    assert!(std::ptr::eq(&TABLE[command_row], spec), "a spec of the command table");
    let Some(subcommand) = args.get(1) else { return Some(command_row) };
    let mut row = TABLE.len();
    for (command, subcommands) in SUBCOMMANDS {
        if *command == spec.name {
            let position = subcommands.iter().position(|known| subcommand.eq_ignore_ascii_case(known.name.as_bytes()));
            return position.map(|position| row + position);
        }
        row += subcommands.len();
    }
    Some(command_row)
}

/// The name of each `stat_row`: a command's, or `command|subcommand`.
pub fn stat_row_names() -> &'static [String] {
    static NAMES: OnceLock<Vec<String>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let commands = TABLE.iter().map(|spec| spec.name.to_string());
        let subcommands = SUBCOMMANDS.iter().flat_map(|(command, subcommands)| subcommands.iter().map(move |known| format!("{command}|{}", known.name)));
        commands.chain(subcommands).collect()
    })
}

/// Longest command name in the table (georadiusbymember_ro); longer names cannot match.
const COMMAND_NAME_BYTES_MAX: usize = 24;
/// A name's code: its first 16 bytes and the next 8, each as one number.
type NameCode = (u128, u64);

/// Slots of the table `lookup` probes: a power of two at least four times the commands, so
/// that a probe mostly meets its command or an empty slot first.
const LOOKUP_SLOTS: usize = 1024;

/// The spec of a command name, case-insensitively: the name's code, then an open-addressed
/// table probed from the code's mixed bits (it runs a few times for every request: a binary
/// search over the table took 4% of the workers' CPU under pipelined INCR, and a map with the
/// default SipHash more; see docs/design/server.md).
pub fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
    static SLOTS: OnceLock<Vec<Option<(NameCode, &'static CommandSpec)>>> = OnceLock::new();
    let slots = SLOTS.get_or_init(|| {
        assert!(TABLE.len() * 4 <= LOOKUP_SLOTS, "{} commands want more than {LOOKUP_SLOTS} lookup slots", TABLE.len());
        let mut slots = vec![None; LOOKUP_SLOTS];
        for spec in TABLE {
            let code = name_code(spec.name.as_bytes()).expect("a valid name");
            let free = (first_slot(code)..).map(|slot| slot % LOOKUP_SLOTS).find(|&slot| slots[slot].is_none()).expect("room");
            slots[free] = Some((code, spec));
        }
        slots
    });
    let code = name_code(name)?;
    for slot in (first_slot(code)..).map(|slot| slot % LOOKUP_SLOTS) {
        match slots[slot] {
            Some((held, spec)) if held == code => return Some(spec),
            Some(_) => continue,
            None => return None,
        }
    }
    unreachable!("the table has empty slots")
}

/// Where a probe for `code` starts: its bits folded and mixed (Fibonacci hashing).
fn first_slot(code: NameCode) -> usize {
    let folded = (code.0 as u64) ^ ((code.0 >> 64) as u64).rotate_left(23) ^ code.1.rotate_left(41);
    (folded.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (u64::BITS - LOOKUP_SLOTS.trailing_zeros())) as usize
}

/// A command name lowercased and zero-padded to COMMAND_NAME_BYTES_MAX bytes, as numbers;
/// None for a name no command has (too long, or with a zero byte, which padding would hide).
fn name_code(name: &[u8]) -> Option<NameCode> {
    if name.len() > COMMAND_NAME_BYTES_MAX || name.contains(&0) {
        return None;
    }
    let mut lowered = [0u8; COMMAND_NAME_BYTES_MAX];
    lowered[..name.len()].copy_from_slice(name);
    lowered.make_ascii_lowercase();
    let (head, tail) = lowered.split_at(16);
    Some((u128::from_le_bytes(head.try_into().expect("16 bytes")), u64::from_le_bytes(tail.try_into().expect("8 bytes"))))
}

/// Case-insensitive comparison of an argument with an option name.
pub fn is(argument: &[u8], option: &str) -> bool {
    argument.eq_ignore_ascii_case(option.as_bytes())
}

/// A 64-bit integer with Redis's strict rules (no spaces, no '+', no leading zeros).
pub fn parse_integer(text: &[u8]) -> Result<i64, CommandError> {
    std::str::from_utf8(text)
        .ok()
        .filter(|text| {
            let digits = text.strip_prefix('-').unwrap_or(text);
            !digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit()) && (digits == "0" || !digits.starts_with('0')) && *text != "-0"
        })
        .and_then(|text| text.parse::<i64>().ok())
        .map_or_else(|| fail(NOT_INTEGER), Ok)
}

/// An integer of at least `least`; anything else (not an integer, or smaller) answers `error`,
/// as Redis's getRangeLongFromObjectOrReply does with its message (counts, numkeys, LIMIT).
pub fn parse_integer_at_least(text: &[u8], least: i64, error: &'static str) -> Result<i64, CommandError> {
    match parse_integer(text) {
        Ok(value) if value >= least => Ok(value),
        _ => fail(error),
    }
}

/// A float as Redis's string2ld reads it (see `LongDouble::parse`).
pub fn parse_float(text: &[u8]) -> Result<LongDouble, CommandError> {
    LongDouble::parse(text).map_or_else(|| fail(NOT_FLOAT), Ok)
}

/// Largest string a namespace stores: its value limit less the type tag byte.
pub fn value_bytes_max(call: &Call<'_>) -> u64 {
    call.namespace.config().value_bytes_max.saturating_sub(1)
}

/// The key's decoded value and expiry.
pub fn read_stored(store: &mut dyn KeyStore, key: &[u8]) -> Result<Option<(Stored, u64)>, CommandError> {
    match store.get(key)? {
        Some(value) => Ok(Some((Stored::decode(value.bytes)?, value.expiry_unix_ms))),
        None => Ok(None),
    }
}

/// The key's string and expiry; WRONGTYPE when it holds another type.
pub fn read_string(store: &mut dyn KeyStore, key: &[u8]) -> Result<Option<(Bytes, u64)>, CommandError> {
    match read_stored(store, key)? {
        Some((Stored::String(value), expiry)) => Ok(Some((value, expiry))),
        Some(_) => fail(WRONGTYPE),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<Bytes> {
        text.split(' ').map(|word| Bytes::copy_from_slice(word.as_bytes())).collect()
    }

    fn subcommand_error(text: &str) -> Option<String> {
        let args = words(text);
        let spec = lookup(&args[0]).expect("a known command");
        match check_subcommand(spec, &args) {
            Ok(()) => None,
            Err(CommandError::Redis(text)) => Some(text.into_owned()),
            Err(other) => panic!("{other:?}"),
        }
    }

    #[test]
    fn subcommands_are_checked_by_name_and_argument_count_as_redis_does() {
        assert_eq!(subcommand_error("client GetName"), None);
        assert_eq!(subcommand_error("CLIENT GETNAME extra").as_deref(), Some("ERR wrong number of arguments for 'client|getname' command"));
        assert_eq!(subcommand_error("CLIENT NOSUCH").as_deref(), Some("ERR unknown subcommand 'NOSUCH'. Try CLIENT HELP."));
        assert_eq!(subcommand_error("CONFIG GET").as_deref(), Some("ERR wrong number of arguments for 'config|get' command"));
        assert_eq!(subcommand_error("CONFIG GET a b c"), None, "at least three");
        assert_eq!(subcommand_error("COMMAND"), None, "COMMAND alone lists every command");
        assert_eq!(subcommand_error("COMMAND GETKEYS GET").as_deref(), Some("ERR wrong number of arguments for 'command|getkeys' command"));
        assert_eq!(subcommand_error("GET key"), None, "no subcommands");
        for (command, subcommands) in SUBCOMMANDS {
            assert!(lookup(command.as_bytes()).is_some(), "{command} is in the command table");
            assert!(subcommands.iter().all(|known| known.name == known.name.to_ascii_lowercase() && known.arity.abs() >= 2), "{command}");
            assert!(subcommands.iter().any(|known| known.name == "help"), "{command} HELP");
        }
    }

    #[test]
    fn every_command_is_found_case_insensitively() {
        for spec in TABLE {
            assert!(spec.name.len() <= COMMAND_NAME_BYTES_MAX, "{}", spec.name);
            assert!(std::ptr::eq(lookup(spec.name.to_ascii_uppercase().as_bytes()).unwrap(), spec));
        }
        assert!(lookup(b"nosuchcommand").is_none());
        assert!(lookup(b"\xff\xfe").is_none());
        assert!(lookup(b"get\0").is_none());
        assert!(lookup(b"").is_none());
        assert!(lookup(b"incrbyfloatxxxxxx").is_none());
    }

    #[test]
    fn lookup_probes_few_slots() {
        // Where each command lands from its first slot if inserted in table order: a long run
        // would make every lookup of the names behind it slower.
        let mut taken = vec![false; LOOKUP_SLOTS];
        let mut longest = 0;
        for spec in TABLE {
            let first = first_slot(name_code(spec.name.as_bytes()).unwrap());
            let distance = (0..LOOKUP_SLOTS).find(|step| !taken[(first + step) % LOOKUP_SLOTS]).unwrap();
            taken[(first + distance) % LOOKUP_SLOTS] = true;
            longest = longest.max(distance);
        }
        assert!(longest <= 4, "a command sits {longest} slots past its first");
    }

    #[test]
    fn every_command_and_subcommand_has_its_own_stat_row() {
        let names = stat_row_names();
        let row_of = |text: &str| {
            let args = words(text);
            stat_row(lookup(&args[0]).expect("a known command"), &args).expect("a row")
        };
        assert_eq!(names[row_of("GET key")], "get");
        assert_eq!(names[row_of("config GET maxclients")], "config|get");
        assert_eq!(names[row_of("CONFIG set maxclients 5")], "config|set");
        assert_eq!(names[row_of("memory usage k")], "memory|usage");
        assert_eq!(names[row_of("COMMAND")], "command");
        assert_eq!(names[row_of("set key value")], "set", "an argument is not a subcommand");
        let unknown = words("CONFIG NOSUCH");
        assert_eq!(stat_row(lookup(&unknown[0]).unwrap(), &unknown), None);
        for spec in TABLE {
            assert_eq!(names[row_of(spec.name)], spec.name);
        }
        let distinct: std::collections::HashSet<&String> = names.iter().collect();
        assert_eq!(distinct.len(), names.len());
    }

    #[test]
    fn integers_parse_like_redis() {
        assert_eq!(parse_integer(b"-42").unwrap(), -42);
        for bad in [&b"+1"[..], b" 1", b"01", b"1.0", b"", b"-0", b"99999999999999999999"] {
            assert!(parse_integer(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
