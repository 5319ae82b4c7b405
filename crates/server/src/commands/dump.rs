//! DUMP and RESTORE: a key's value as Redis's serialized payload (`hybridkv_resp::encode_dump`),
//! so that values move between hybridkv and Redis (redis-cli, migration tools) both ways.

use bytes::Bytes;
use hybridkv_engine::{now_unix_ms, EXPIRY_UNIX_MS_MAX};
use hybridkv_resp::{decode_dump, encode_dump, DumpLimits, DumpValue, Reply};

use super::hashes;
use super::{is, parse_integer, SYNTAX_ERROR};
use crate::command::{fail, Call, CommandError, CommandResult};
use crate::hash_layout::OpenHash;
use crate::keyspace_events::GENERIC;
use crate::values::{encode_string, Stored};

const BUSY_KEY: &str = "BUSYKEY Target key name already exists.";
/// Fields of a restored hash at most: what RESTORE builds in memory before writing is about 70
/// bytes a field beyond the payload's own bytes (a hash this big restores in several seconds).
const RESTORE_HASH_FIELDS_MAX: usize = 4 * 1024 * 1024;
/// Fields of a restored hash set between two saves (`restore_hash`).
const RESTORE_FIELDS_PER_SAVE: usize = 64;
/// Redis's LFU counter is a byte.
const RESTORE_FREQ_MAX: i64 = 255;

/// DUMP key: the payload, or nil for a missing key. A bucketed hash lists its fields in bucket
/// order.
pub fn dump(call: &mut Call<'_>) -> CommandResult {
    let key = call.args[1].clone();
    let Some(value) = call.store.get(&key)? else { return Ok(Reply::Null) };
    let value = match Stored::decode(value.bytes)? {
        Stored::String(bytes) => DumpValue::String(bytes),
        Stored::Hash(_) | Stored::BucketedHash(_) => {
            let hash = OpenHash::open(call.store, &key)?.expect("the key was just read");
            DumpValue::Hash(hash.into_fields(call.store)?)
        }
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
        hash_fields_max: RESTORE_HASH_FIELDS_MAX,
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
        DumpValue::Hash(fields) => restore_hash(call, &key, fields, expiry_unix_ms)?,
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

/// Writes a restored hash under `key` (absent now) through the hash layout, then its expiry. A
/// field given twice is a bad payload, as in Redis. The fields go in RESTORE_FIELDS_PER_SAVE at
/// a time, so that a big hash turns into buckets early instead of searching one ever longer
/// record for each field; the command's transaction commits them as one batch.
fn restore_hash(call: &mut Call<'_>, key: &Bytes, fields: Vec<(Bytes, Bytes)>, expiry_unix_ms: u64) -> Result<(), CommandError> {
    let mut distinct = std::collections::HashSet::with_capacity(fields.len());
    if !fields.iter().all(|(field, _)| distinct.insert(field)) {
        return fail("ERR Bad data format");
    }
    for chunk in fields.chunks(RESTORE_FIELDS_PER_SAVE) {
        let mut hash = OpenHash::open_or_new(call.store, key)?;
        for (field, value) in chunk {
            hash.set(call.store, field.clone(), value.clone())?;
        }
        hashes::save(call, hash)?;
    }
    if expiry_unix_ms != 0 {
        let root = call.store.get(key)?.expect("the hash was just written");
        call.store.put_keeping_parts(key, &root.bytes, expiry_unix_ms)?;
    }
    Ok(())
}
