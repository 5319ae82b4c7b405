//! DUMP and RESTORE: a key's value as Redis's serialized payload (`hybridkv_resp::encode_dump`),
//! so that values move between hybridkv and Redis (redis-cli, migration tools) both ways.

use bytes::Bytes;
use hybridkv_engine::{now_unix_ms, EXPIRY_UNIX_MS_MAX};
use hybridkv_resp::{decode_dump, encode_dump, DumpLimits, DumpValue, Reply};

use super::{hashes, lists, sorted_sets};
use super::{is, parse_integer, SYNTAX_ERROR};
use crate::command::{fail, Call, CommandError, CommandResult};
use crate::hash_layout::OpenHash;
use crate::list_layout::End;
use crate::keyspace_events::GENERIC;
use crate::values::{encode_string, Collection, Stored};

const BUSY_KEY: &str = "BUSYKEY Target key name already exists.";
/// Fields of a restored hash (members of a set) at most: what RESTORE builds in memory before
/// writing is about 70 bytes a field beyond the payload's own bytes (a hash this big restores
/// in several seconds).
const RESTORE_ELEMENTS_MAX: usize = 4 * 1024 * 1024;
/// Redis's LFU counter is a byte.
const RESTORE_FREQ_MAX: i64 = 255;

const DUMP_OF_STREAM: &str = "ERR hybridkv cannot DUMP a stream (Redis's stream payload is not written yet)";

/// DUMP key: the payload, or nil for a missing key. A bucketed hash, set or sorted set lists its
/// fields in bucket order.
pub fn dump(call: &mut Call<'_>) -> CommandResult {
    let key = call.args[1].clone();
    let Some(value) = call.store.get(&key)? else { return Ok(Reply::Null) };
    let collection = match Stored::decode(value.bytes)? {
        Stored::String(bytes) => return Ok(Reply::Bulk(Bytes::from(encode_dump(&DumpValue::String(bytes))))),
        Stored::List(_) | Stored::ChunkedList(_) => {
            let mut list = lists::open(call, &key)?.expect("the key was just read");
            let elements = list.range(call.store, 0, list.len() - 1)?;
            return Ok(Reply::Bulk(Bytes::from(encode_dump(&DumpValue::List(elements)))));
        }
        Stored::Small(collection, _) | Stored::Bucketed(collection, _) => collection,
        Stored::Stream(_) => return fail(DUMP_OF_STREAM),
    };
    let fields = OpenHash::open(call.store, &key, collection)?.expect("the key was just read").into_fields(call.store)?;
    let value = match collection {
        Collection::Hash => DumpValue::Hash(fields),
        Collection::Set => DumpValue::Set(fields.into_iter().map(|(member, _)| member).collect()),
        Collection::SortedSet => DumpValue::SortedSet(crate::sorted_set_layout::scored(fields)?),
    };
    Ok(Reply::Bulk(Bytes::from(encode_dump(&value))))
}

/// RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency], checked in
/// Redis's order: options, an existing key, the TTL, the payload. IDLETIME and FREQ are checked
/// and otherwise ignored (hybridkv keeps no access times or frequencies). A TTL already past
/// restores nothing (and REPLACE still deletes the old key), as in Redis.
pub fn restore(call: &mut Call<'_>) -> CommandResult {
    let (replace, absolute_ttl) = restore_options(&call.args[4..])?;
    let key = call.args[1].clone();
    if !replace && call.store.get(&key)?.is_some() {
        return fail(BUSY_KEY);
    }
    let ttl = parse_integer(&call.args[2])?;
    if ttl < 0 {
        return fail("ERR Invalid TTL value, must be >= 0");
    }
    let limits = DumpLimits {
        string_bytes_max: usize::try_from(call.namespace.config().value_bytes_max).unwrap_or(usize::MAX),
        elements_max: RESTORE_ELEMENTS_MAX,
    };
    let value = match decode_dump(&call.args[3], limits) {
        Ok(DumpValue::Hash(fields)) if fields.is_empty() => return fail("ERR Bad data format"),
        Ok(value) => value,
        Err(error) => return fail(format!("ERR {error}")),
    };
    let expiry_unix_ms = match (ttl, absolute_ttl) {
        (0, _) => 0,
        (at, true) => at as u64,
        (relative, false) => now_unix_ms().saturating_add(relative as u64),
    };
    if expiry_unix_ms > EXPIRY_UNIX_MS_MAX {
        return fail("ERR invalid expire time in 'restore' command");
    }
    let replaced = replace && call.store.delete(&key)?;
    if expiry_unix_ms != 0 && expiry_unix_ms <= now_unix_ms() {
        if replaced {
            call.notify(GENERIC, "del", &key);
        }
        return Ok(Reply::ok());
    }
    match value {
        DumpValue::String(bytes) => call.store.put(&key, &encode_string(&bytes), expiry_unix_ms)?,
        DumpValue::Hash(fields) => restore_fields(call, &key, Collection::Hash, fields)?,
        DumpValue::Set(members) => {
            let fields = members.into_iter().map(|member| (member, Bytes::new())).collect();
            restore_fields(call, &key, Collection::Set, fields)?
        }
        DumpValue::List(elements) => restore_list(call, &key, elements)?,
        DumpValue::SortedSet(members) => restore_sorted_set(call, &key, members)?,
    }
    if expiry_unix_ms != 0 {
        // A hash, set or list was written without expiry: its record takes it, keeping its parts.
        let written = call.store.get(&key)?.expect("the value was just written");
        if written.expiry_unix_ms != expiry_unix_ms {
            call.store.put_keeping_parts(&key, &written.bytes, expiry_unix_ms)?;
        }
    }
    call.notify(GENERIC, "restore", &key);
    Ok(Reply::ok())
}

/// RESTORE's REPLACE and ABSTTL; IDLETIME and FREQ are checked (not both) and ignored.
fn restore_options(options: &[Bytes]) -> Result<(bool, bool), CommandError> {
    let (mut replace, mut absolute_ttl, mut idle_given, mut frequency_given) = (false, false, false, false);
    let mut position = 0;
    while let Some(option) = options.get(position) {
        let value = options.get(position + 1);
        if is(option, "REPLACE") {
            replace = true;
        } else if is(option, "ABSTTL") {
            absolute_ttl = true;
        } else if let Some(value) = value.filter(|_| is(option, "IDLETIME") && !frequency_given) {
            if parse_integer(value)? < 0 {
                return fail("ERR Invalid IDLETIME value, must be >= 0");
            }
            (idle_given, position) = (true, position + 1);
        } else if let Some(value) = value.filter(|_| is(option, "FREQ") && !idle_given) {
            if !(0..=RESTORE_FREQ_MAX).contains(&parse_integer(value)?) {
                return fail("ERR Invalid FREQ value, must be >= 0 and <= 255");
            }
            (frequency_given, position) = (true, position + 1);
        } else {
            return fail(SYNTAX_ERROR);
        }
        position += 1;
    }
    Ok((replace, absolute_ttl))
}

/// Writes a restored hash or set under `key` (absent now) through the hash layout, without
/// expiry. A field given twice is a bad payload, as in Redis; the command's transaction commits
/// the record and its buckets as one batch.
fn restore_fields(call: &mut Call<'_>, key: &Bytes, collection: Collection, fields: Vec<(Bytes, Bytes)>) -> Result<(), CommandError> {
    let mut distinct = std::collections::HashSet::with_capacity(fields.len());
    if !fields.iter().all(|(field, _)| distinct.insert(field)) {
        return fail("ERR Bad data format");
    }
    hashes::save(call, OpenHash::with_distinct_fields(key, collection, fields))?;
    Ok(())
}

/// Writes a restored sorted set under `key` (absent now), without expiry; a member twice is a
/// bad format, as in Redis.
fn restore_sorted_set(call: &mut Call<'_>, key: &Bytes, members: Vec<(Bytes, f64)>) -> Result<(), CommandError> {
    let mut distinct = std::collections::HashSet::with_capacity(members.len());
    if !members.iter().all(|(member, _)| distinct.insert(member)) {
        return fail("ERR Bad data format");
    }
    sorted_sets::restore(call, key, members)
}

/// Writes a restored list under `key` (absent now) through the list layout, without expiry.
fn restore_list(call: &mut Call<'_>, key: &Bytes, elements: Vec<Bytes>) -> Result<(), CommandError> {
    let mut list = lists::open_or_new(call, key)?;
    for element in elements {
        list.push(call.store, End::Tail, element)?;
    }
    list.save(call.store)
}
