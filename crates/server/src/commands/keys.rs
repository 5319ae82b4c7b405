//! Key commands: DEL UNLINK EXISTS TYPE EXPIRE PEXPIRE EXPIREAT PEXPIREAT TTL PTTL PERSIST RENAME
//! RENAMENX COPY MOVE KEYS SCAN RANDOMKEY EXPIRETIME PEXPIRETIME TOUCH OBJECT.

use std::sync::Arc;

use bytes::Bytes;
use hybridkv_engine::{now_unix_ms, CommitTicket, EngineError, KeySnapshot, Namespace, EXPIRY_UNIX_MS_MAX};
use hybridkv_resp::Reply;

use super::sets::{intset_numbers, INTSET_MEMBERS_MAX};
use super::sorted_sets;
use super::{is, parse_integer, subcommand_help, unknown_subcommand, SYNTAX_ERROR};
use crate::command::{fail, run_over_keys, Call, CommandError, CommandResult, Over, DB_INDEX_OUT_OF_RANGE};
use crate::glob::glob_match;
use crate::keyspace_events::GENERIC;
use crate::hash_layout::OpenHash;
use crate::shared::Shared;
use crate::values::{type_name_of, Collection, Stored};

/// Keys asked of the engine per page when a command walks the whole keyspace (KEYS).
const KEYS_PAGE_HINT: usize = 1024;
/// SCAN's default COUNT, as Redis.
const SCAN_COUNT_DEFAULT: usize = 10;

pub fn del(call: &mut Call<'_>) -> CommandResult {
    let mut deleted = 0;
    for key in &call.args[1..] {
        if call.store.delete(key)? {
            deleted += 1;
            call.notify(GENERIC, "del", key);
        }
    }
    Ok(Reply::Integer(deleted))
}

pub fn exists(call: &mut Call<'_>) -> CommandResult {
    let mut found = 0;
    for key in &call.args[1..] {
        found += i64::from(call.store.get(key)?.is_some());
    }
    Ok(Reply::Integer(found))
}

/// Strings up to this many bytes Redis keeps in one allocation with their header ("embstr").
const EMBSTR_BYTES_MAX: usize = 44;
/// Integers Redis shares among all keys (their REFCOUNT is `SHARED_REFCOUNT`).
const SHARED_INTEGERS_END: i64 = 10_000;
const SHARED_REFCOUNT: i64 = i32::MAX as i64;
/// A hash stays a listpack in Redis while it has at most this many fields (hash-max-listpack-entries,
/// built-in default; the redis.conf Redis ships sets 128)…
const LISTPACK_FIELDS_MAX: usize = 512;
/// …and every field name and value is at most this many bytes (hash-max-listpack-value).
const LISTPACK_ELEMENT_BYTES_MAX: usize = 64;

/// OBJECT ENCODING | REFCOUNT | FREQ | IDLETIME key, and HELP. The encoding and the reference
/// count are what Redis would answer for the value as it is now (Redis also remembers history: a
/// string changed by APPEND or SETRANGE stays "raw", a hash that outgrew a listpack stays a
/// "hashtable"). Access times and frequencies are not kept.
pub fn object(call: &mut Call<'_>) -> CommandResult {
    let subcommand = call.args[1].clone();
    if is(&subcommand, "HELP") {
        return Ok(subcommand_help("object"));
    }
    let Some(value) = call.store.get(&call.args[2])? else { return Ok(Reply::Null) };
    let stored = Stored::decode(value.bytes)?;
    if is(&subcommand, "ENCODING") {
        let encoding = match &stored {
            Stored::Bucketed(collection, _) => bucketed_encoding(call, *collection)?,
            _ => Some(redis_encoding(&stored)),
        };
        return Ok(encoding.map_or(Reply::Null, Reply::bulk_text));
    }
    if is(&subcommand, "REFCOUNT") {
        let shared = matches!(&stored, Stored::String(text) if parse_integer(text).is_ok_and(|number| (0..SHARED_INTEGERS_END).contains(&number)));
        return Ok(Reply::Integer(if shared { SHARED_REFCOUNT } else { 1 }));
    }
    if is(&subcommand, "FREQ") {
        return fail("ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.");
    }
    if is(&subcommand, "IDLETIME") {
        return fail("ERR hybridkv keeps no access times: OBJECT IDLETIME is not supported");
    }
    Err(unknown_subcommand("object", &subcommand))
}

/// Redis's encoding of a value like `stored`: "int", "embstr" or "raw" for strings, "listpack" or
/// "hashtable" for a hash of one record, "intset" or "hashtable" for a set of one record (a
/// bucketed one: `bucketed_encoding`).
fn redis_encoding(stored: &Stored) -> &'static str {
    match stored {
        Stored::String(text) if parse_integer(text).is_ok() => "int",
        Stored::String(text) if text.len() <= EMBSTR_BYTES_MAX => "embstr",
        Stored::String(_) => "raw",
        Stored::Small(collection, record) => fields_encoding(*collection, &record.fields),
        Stored::Bucketed(..) => "hashtable",
        // Redis 7.0 keeps every list as a quicklist (7.2 added listpack lists).
        Stored::List(_) | Stored::ChunkedList(_) => "quicklist",
        Stored::Stream(_) => "stream",
    }
}

fn fields_encoding(collection: Collection, fields: &[(Bytes, Bytes)]) -> &'static str {
    match collection {
        Collection::Hash => hash_encoding(fields),
        Collection::Set => set_encoding(fields),
        Collection::SortedSet => sorted_set_encoding(fields),
    }
}

/// "listpack" for at most 128 members of at most 64 bytes, else "skiplist".
fn sorted_set_encoding(members: &[(Bytes, Bytes)]) -> &'static str {
    let longest = members.iter().map(|(member, _)| member.len()).max().unwrap_or(0);
    if sorted_sets::fits_listpack(members.len() as u64, longest) { "listpack" } else { "skiplist" }
}

/// "intset" for at most 512 members that are all integers as Redis parses them, else "hashtable"
/// (Redis 7.0; 7.2 added listpack sets).
fn set_encoding(members: &[(Bytes, Bytes)]) -> &'static str {
    if intset_numbers(members).is_some() { "intset" } else { "hashtable" }
}

/// "listpack" for at most 512 fields of at most 64 bytes, as Redis keeps them, else "hashtable".
fn hash_encoding(fields: &[(Bytes, Bytes)]) -> &'static str {
    let small = |(name, value): &(Bytes, Bytes)| name.len().max(value.len()) <= LISTPACK_ELEMENT_BYTES_MAX;
    if fields.len() <= LISTPACK_FIELDS_MAX && fields.iter().all(small) { "listpack" } else { "hashtable" }
}

/// The encoding of a bucketed hash or set (over 8 KiB of fields, up to 66 KiB as a listpack):
/// its fields are read only when the root counts at most 512 of them (LISTPACK_FIELDS_MAX,
/// INTSET_MEMBERS_MAX), so the read is bounded. It is not a transaction: a hash rewritten
/// meanwhile may be judged on a mix (None: it was deleted meanwhile).
fn bucketed_encoding(call: &mut Call<'_>, collection: Collection) -> Result<Option<&'static str>, CommandError> {
    const _: () = assert!(LISTPACK_FIELDS_MAX == INTSET_MEMBERS_MAX);
    let key = call.args[2].clone();
    let Some(hash) = OpenHash::open(call.store, &key, collection)? else { return Ok(None) };
    if hash.len() > LISTPACK_FIELDS_MAX as u64 {
        return Ok(Some(if collection == Collection::SortedSet { "skiplist" } else { "hashtable" }));
    }
    Ok(Some(fields_encoding(collection, &hash.into_fields(call.store)?)))
}

pub fn type_(call: &mut Call<'_>) -> CommandResult {
    let name = call.store.get(&call.args[1])?.map_or("none", |value| type_name_of(&value.bytes));
    Ok(Reply::simple(name))
}

/// EXPIRE's conditions (Redis 7): NX, XX, GT, LT.
#[derive(Default)]
struct ExpireConditions {
    no_expiry: bool,
    has_expiry: bool,
    greater: bool,
    less: bool,
}

fn parse_expire_conditions(options: &[Bytes]) -> Result<ExpireConditions, CommandError> {
    let mut conditions = ExpireConditions::default();
    for option in options {
        match option.to_ascii_uppercase().as_slice() {
            b"NX" => conditions.no_expiry = true,
            b"XX" => conditions.has_expiry = true,
            b"GT" => conditions.greater = true,
            b"LT" => conditions.less = true,
            _ => return fail(format!("ERR Unsupported option {}", String::from_utf8_lossy(option))),
        }
    }
    if conditions.no_expiry && (conditions.has_expiry || conditions.greater || conditions.less) {
        return fail("ERR NX and XX, GT or LT options at the same time are not compatible");
    }
    if conditions.greater && conditions.less {
        return fail("ERR GT and LT options at the same time are not compatible");
    }
    Ok(conditions)
}

impl ExpireConditions {
    /// Whether the new expiry may replace `current` (0 = none, which counts as infinite).
    fn allow(&self, current: u64, new: u64) -> bool {
        !((self.no_expiry && current != 0)
            || (self.has_expiry && current == 0)
            || (self.greater && (current == 0 || new <= current))
            || (self.less && current != 0 && new >= current))
    }
}

/// EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT: `unit_ms` per unit of the argument, `absolute` for *AT.
fn expire_generic(call: &mut Call<'_>, unit_ms: i64, absolute: bool, command: &str) -> CommandResult {
    let amount = parse_integer(&call.args[2])?;
    let conditions = parse_expire_conditions(&call.args[3..])?;
    let invalid = || fail(format!("ERR invalid expire time in '{command}' command"));
    let Some(mut at) = amount.checked_mul(unit_ms) else { return invalid() };
    if !absolute {
        let Some(sum) = at.checked_add(now_unix_ms() as i64) else { return invalid() };
        at = sum;
    }
    if at > EXPIRY_UNIX_MS_MAX as i64 {
        return invalid();
    }
    let key = &call.args[1];
    let Some(value) = call.store.get(key)? else { return Ok(Reply::Integer(0)) };
    let at = at.max(0) as u64;
    if !conditions.allow(value.expiry_unix_ms, at.max(1)) {
        return Ok(Reply::Integer(0));
    }
    if at <= now_unix_ms() {
        call.store.delete(key)?;
        call.notify(GENERIC, "del", key);
    } else {
        call.store.put_keeping_parts(key, &value.bytes, at)?;
        call.notify(GENERIC, "expire", key);
    }
    Ok(Reply::Integer(1))
}

pub fn expire(call: &mut Call<'_>) -> CommandResult {
    expire_generic(call, 1000, false, "expire")
}

pub fn pexpire(call: &mut Call<'_>) -> CommandResult {
    expire_generic(call, 1, false, "pexpire")
}

pub fn expireat(call: &mut Call<'_>) -> CommandResult {
    expire_generic(call, 1000, true, "expireat")
}

pub fn pexpireat(call: &mut Call<'_>) -> CommandResult {
    expire_generic(call, 1, true, "pexpireat")
}

/// The key's expiry: None when absent, Some(0) when it has none.
fn expiry_of(call: &mut Call<'_>) -> Result<Option<u64>, CommandError> {
    Ok(call.store.get(&call.args[1])?.map(|value| value.expiry_unix_ms))
}

/// TTL and PTTL: -2 missing, -1 no expiry, else the time left (TTL rounds to the nearest second).
fn time_to_live(call: &mut Call<'_>, in_seconds: bool) -> CommandResult {
    Ok(Reply::Integer(match expiry_of(call)? {
        None => -2,
        Some(0) => -1,
        Some(at) => {
            let left_ms = at.saturating_sub(now_unix_ms()) as i64;
            if in_seconds { (left_ms + 500) / 1000 } else { left_ms }
        }
    }))
}

pub fn ttl(call: &mut Call<'_>) -> CommandResult {
    time_to_live(call, true)
}

pub fn pttl(call: &mut Call<'_>) -> CommandResult {
    time_to_live(call, false)
}

fn expire_time(call: &mut Call<'_>, in_seconds: bool) -> CommandResult {
    Ok(Reply::Integer(match expiry_of(call)? {
        None => -2,
        Some(0) => -1,
        Some(at) if in_seconds => (at / 1000) as i64,
        Some(at) => at as i64,
    }))
}

pub fn expiretime(call: &mut Call<'_>) -> CommandResult {
    expire_time(call, true)
}

pub fn pexpiretime(call: &mut Call<'_>) -> CommandResult {
    expire_time(call, false)
}

pub fn persist(call: &mut Call<'_>) -> CommandResult {
    let key = &call.args[1];
    match call.store.get(key)? {
        Some(value) if value.expiry_unix_ms != 0 => {
            call.store.put_keeping_parts(key, &value.bytes, 0)?;
            call.notify(GENERIC, "persist", key);
            Ok(Reply::Integer(1))
        }
        _ => Ok(Reply::Integer(0)),
    }
}

/// RENAME and RENAMENX: the value moves with its expiry and its parts (a bucketed hash's
/// buckets).
fn rename_generic(call: &mut Call<'_>, only_if_new: bool) -> CommandResult {
    let (source, target) = (&call.args[1], &call.args[2]);
    if call.store.get(source)?.is_none() {
        return fail("ERR no such key");
    }
    let done = |renamed: bool| if only_if_new { Reply::Integer(i64::from(renamed)) } else { Reply::ok() };
    // Renaming a key onto itself: RENAME answers OK, RENAMENX 0 (as Redis).
    if source == target {
        return Ok(done(false));
    }
    if only_if_new && call.store.get(target)?.is_some() {
        return Ok(done(false));
    }
    call.store.rename(source, target)?;
    call.notify(GENERIC, "rename_from", source);
    call.notify(GENERIC, "rename_to", target);
    Ok(done(true))
}

pub fn rename(call: &mut Call<'_>) -> CommandResult {
    rename_generic(call, false)
}

pub fn renamenx(call: &mut Call<'_>) -> CommandResult {
    rename_generic(call, true)
}

/// COPY source destination [DB destination-db] [REPLACE]: the value with its expiry and parts.
/// Outside EXEC it takes its own locks (flag `CROSSES_DATABASES`): within the current database
/// it runs again in a transaction over its two keys; to another database it reads the source,
/// then writes the target, one namespace at a time (`copy_to_another_database`). Inside EXEC,
/// whose transaction covers the current database only, a copy to another one is refused.
pub fn copy(call: &mut Call<'_>) -> CommandResult {
    let (database, replace) = copy_options(call)?;
    let current = call.session.database;
    if !call.store.is_transaction() {
        if database != current {
            return copy_to_another_database(call, database, replace);
        }
        let keys = [&call.args[1][..], &call.args[2][..]];
        return run_over_keys(copy, Over::Keys(&keys), call.args, call.session, call.shared, call.namespace);
    }
    let (source, target) = (&call.args[1], &call.args[2]);
    if call.store.get(source)?.is_none() {
        return Ok(Reply::Integer(0));
    }
    if database != current {
        return fail("ERR COPY to another database is not supported inside MULTI (a transaction covers one database)");
    }
    if !replace && call.store.get(target)?.is_some() {
        return Ok(Reply::Integer(0));
    }
    let copied = call.store.copy(source, target)?;
    if copied {
        call.notify(GENERIC, "copy_to", target);
    }
    Ok(Reply::Integer(i64::from(copied)))
}

/// COPY's target database and REPLACE, checked as Redis checks them.
fn copy_options(call: &Call<'_>) -> Result<(usize, bool), CommandError> {
    let (source, target) = (&call.args[1], &call.args[2]);
    let mut replace = false;
    let mut database = call.session.database;
    let mut options = call.args[3..].iter();
    while let Some(option) = options.next() {
        match options.as_slice().first() {
            Some(number) if is(option, "DB") => {
                database = usize::try_from(parse_integer(number)?).or_else(|_| fail(DB_INDEX_OUT_OF_RANGE))?;
                options.next();
            }
            _ if is(option, "REPLACE") => replace = true,
            _ => return fail(SYNTAX_ERROR),
        }
    }
    if database >= call.shared.database.database_count() {
        return fail(DB_INDEX_OUT_OF_RANGE);
    }
    if source == target && database == call.session.database {
        return fail("ERR source and destination objects are the same");
    }
    Ok((database, replace))
}

/// COPY to another database: the source read whole (`Transaction::snapshot`) under its own
/// namespace's lock, then written under the target's, never both held at once (two crossing
/// copies would wait for each other). The copy is the source as it was when read.
fn copy_to_another_database(call: &mut Call<'_>, database: usize, replace: bool) -> CommandResult {
    let (source, target) = (call.args[1].clone(), call.args[2].clone());
    let target_namespace = Arc::clone(crate::server::open_database(call.shared, database)?);
    let Some(snapshot) = call.namespace.transaction(&[&source], |t| t.snapshot(&source, "copy"))? else {
        return Ok(Reply::Integer(0));
    };
    let (copied, ticket) = write_snapshot(call.shared, &target_namespace, database, &target, &snapshot, replace)?;
    if let Some(ticket) = ticket {
        call.session.hold_reply_until_durable(&target_namespace, ticket);
    }
    if copied {
        call.notify_in(database, GENERIC, "copy_to", &target);
    }
    Ok(Reply::Integer(i64::from(copied)))
}

/// Writes `snapshot` under `key` of database `number` (`namespace`) in one batch, unless the key
/// is there and `replace` is false; true when written. COPY … DB and MOVE.
fn write_snapshot(
    shared: &Shared,
    namespace: &Namespace,
    number: usize,
    key: &[u8],
    snapshot: &KeySnapshot,
    replace: bool,
) -> Result<(bool, Option<CommitTicket>), EngineError> {
    namespace.transaction_deferred(&[key], |t| {
        if !replace && t.get(key)?.is_some() {
            return Ok(false);
        }
        t.put_snapshot(key, snapshot)?;
        shared.keys_written(number, 0, || t.changed_keys());
        Ok(true)
    })
}

/// Attempts MOVE makes before it gives up on a key that keeps changing while it is copied.
const MOVE_ATTEMPTS_MAX: usize = 8;

/// MOVE key db: the key, with its expiry and parts, to another database that does not hold it.
/// Two namespaces share no batch, so the key is copied to the target and made durable there,
/// then the original is deleted if it is still the version copied (else the copy is taken back
/// and the move starts over): a crash in between leaves the key in both databases, never in
/// neither, and no lock of one namespace is held while waiting for the other's.
pub fn move_key(call: &mut Call<'_>) -> CommandResult {
    let key = call.args[1].clone();
    let number = i32::try_from(parse_integer(&call.args[2])?)
        .or_else(|_| fail("ERR value is out of range, value must between -2147483648 and 2147483647"))?;
    let Some(number) = usize::try_from(number).ok().filter(|number| *number < call.shared.database.database_count()) else {
        return fail(DB_INDEX_OUT_OF_RANGE);
    };
    if number == call.session.database {
        return fail("ERR source and destination objects are the same");
    }
    let target = Arc::clone(crate::server::open_database(call.shared, number)?);
    for _ in 0..MOVE_ATTEMPTS_MAX {
        if let Some(moved) = move_once(call, &target, number, &key)? {
            if moved {
                call.notify(GENERIC, "move_from", &key);
                call.notify_in(number, GENERIC, "move_to", &key);
            }
            return Ok(Reply::Integer(i64::from(moved)));
        }
    }
    fail(format!("ERR MOVE gave up after {MOVE_ATTEMPTS_MAX} attempts: the key kept changing while it was copied"))
}

/// One attempt of MOVE: Some(whether the key moved), or None when the original changed after it
/// was copied (the copy is taken back unless it changed too).
fn move_once(call: &mut Call<'_>, target: &Arc<Namespace>, target_number: usize, key: &[u8]) -> Result<Option<bool>, CommandError> {
    let (source, source_number, shared) = (Arc::clone(call.namespace), call.session.database, call.shared);
    let Some(snapshot) = source.transaction(&[key], |t| t.snapshot(key, "move"))? else { return Ok(Some(false)) };
    // The copy's own ticket is not kept: `sync` below makes it durable before anything else.
    let (copied, _) = write_snapshot(call.shared, target, target_number, key, &snapshot, false)?;
    if !copied {
        return Ok(Some(false));
    }
    target.sync()?;
    let (deleted, ticket) = source.transaction_deferred(&[key], |t| {
        if t.get(key)?.map(|value| value.version) != Some(snapshot.value.version) {
            return Ok(false);
        }
        t.delete(key)?;
        shared.keys_written(source_number, 0, || t.changed_keys());
        Ok(true)
    })?;
    if let Some(ticket) = ticket {
        call.session.hold_reply_until_durable(&source, ticket);
    }
    if deleted {
        return Ok(Some(true));
    }
    let (_, ticket) = target.transaction_deferred(&[key], |t| {
        let still_the_copy = t.get(key)?.is_some_and(|value| value.bytes == snapshot.value.bytes && value.expiry_unix_ms == snapshot.value.expiry_unix_ms);
        if still_the_copy {
            t.delete(key)?;
            shared.keys_written(target_number, 0, || t.changed_keys());
        }
        Ok(())
    })?;
    if let Some(ticket) = ticket {
        call.session.hold_reply_until_durable(target, ticket);
    }
    Ok(None)
}

pub fn keys(call: &mut Call<'_>) -> CommandResult {
    let pattern = call.args[1].clone();
    let mut matched = Vec::new();
    let mut cursor = 0;
    loop {
        let page = call.store.scan(cursor, KEYS_PAGE_HINT)?;
        matched.extend(page.keys.into_iter().filter(|key| glob_match(&pattern, key)).map(|key| Reply::Bulk(Bytes::from(key))));
        if page.next_cursor == 0 {
            return Ok(Reply::Array(matched));
        }
        cursor = page.next_cursor;
    }
}

/// SCAN's and HSCAN's options.
pub struct ScanOptions {
    pub pattern: Option<Bytes>,
    pub count: usize,
    pub type_name: Option<String>,
    pub no_values: bool,
}

/// Parses `MATCH p`, `COUNT n`, and (when allowed) `TYPE t` or `NOVALUES`.
pub fn parse_scan_options(options: &[Bytes], allow_type: bool, allow_no_values: bool) -> Result<ScanOptions, CommandError> {
    let mut parsed = ScanOptions { pattern: None, count: SCAN_COUNT_DEFAULT, type_name: None, no_values: false };
    let mut position = 0;
    while position < options.len() {
        let option = &options[position];
        let argument = options.get(position + 1);
        match argument {
            Some(count) if is(option, "COUNT") => {
                let count = parse_integer(count)?;
                if count < 1 {
                    return fail(SYNTAX_ERROR);
                }
                parsed.count = count as usize;
            }
            Some(pattern) if is(option, "MATCH") => parsed.pattern = Some(pattern.clone()),
            Some(name) if allow_type && is(option, "TYPE") => {
                parsed.type_name = Some(String::from_utf8_lossy(name).to_ascii_lowercase());
            }
            _ if allow_no_values && is(option, "NOVALUES") => {
                parsed.no_values = true;
                position += 1;
                continue;
            }
            _ => return fail(SYNTAX_ERROR),
        }
        position += 2;
    }
    Ok(parsed)
}

pub fn parse_cursor(text: &[u8]) -> Result<u64, CommandError> {
    std::str::from_utf8(text).ok().and_then(|text| text.parse::<u64>().ok()).map_or_else(|| fail("ERR invalid cursor"), Ok)
}

pub fn scan(call: &mut Call<'_>) -> CommandResult {
    let cursor = parse_cursor(&call.args[1])?;
    let options = parse_scan_options(&call.args[2..], true, false)?;
    let page = call.store.scan(cursor, options.count)?;
    let mut keys = Vec::with_capacity(page.keys.len());
    for key in page.keys {
        if options.pattern.as_ref().is_some_and(|pattern| !glob_match(pattern, &key)) {
            continue;
        }
        if let Some(wanted) = &options.type_name {
            let actual = call.store.get(&key)?.map_or("none", |value| type_name_of(&value.bytes));
            if actual != wanted {
                continue;
            }
        }
        keys.push(Reply::Bulk(Bytes::from(key)));
    }
    Ok(Reply::Array(vec![Reply::bulk_text(&page.next_cursor.to_string()), Reply::Array(keys)]))
}

pub fn randomkey(call: &mut Call<'_>) -> CommandResult {
    Ok(call.store.random_key()?.map_or(Reply::Null, |key| Reply::Bulk(Bytes::from(key))))
}
