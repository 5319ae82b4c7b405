//! Hash commands: HSET HMSET HGET HMGET HGETALL HDEL HEXISTS HLEN HKEYS HVALS HINCRBY
//! HINCRBYFLOAT HSETNX HSTRLEN HSCAN HRANDFIELD, over the layouts of `crate::hash_layout` (one record, or a
//! root and buckets). Every write keeps the key's expiry.

use bytes::Bytes;
use hybridkv_resp::{ProtocolVersion, Reply};

use super::keys::{parse_cursor, parse_scan_options};
use super::sorted_sets;
use super::{is, parse_float, parse_integer, NOT_FINITE, SYNTAX_ERROR};
use crate::command::{fail, wrong_arity, Call, CommandError, CommandResult};
use crate::glob::glob_match;
use crate::hash_layout::{HashLimits, OpenHash, Saved};
use crate::values::{decode_score, Collection};
use crate::keyspace_events::{GENERIC, HASH};
use crate::long_double::LongDouble;

pub(super) fn limits(call: &Call<'_>) -> HashLimits {
    HashLimits::new(call.namespace.config().value_bytes_max, call.store.parts_per_key_max())
}

fn open_or_new(call: &mut Call<'_>) -> Result<OpenHash, CommandError> {
    OpenHash::open_or_new(call.store, &call.args[1], Collection::Hash)
}

pub(super) fn save(call: &mut Call<'_>, hash: OpenHash) -> Result<Saved, CommandError> {
    let limits = limits(call);
    hash.save(call.store, &limits, call.shared.watches.any())
}

/// HSET and HMSET: field/value pairs after the key.
fn set_fields(call: &mut Call<'_>, name: &str) -> Result<i64, CommandError> {
    if !call.args.len().is_multiple_of(2) {
        return Err(wrong_arity(name));
    }
    let mut hash = open_or_new(call)?;
    let mut added = 0;
    for pair in call.args[2..].chunks(2) {
        added += i64::from(hash.set(call.store, pair[0].clone(), pair[1].clone())?);
    }
    save(call, hash)?;
    call.notify(HASH, "hset", &call.args[1]);
    Ok(added)
}

pub fn hset(call: &mut Call<'_>) -> CommandResult {
    set_fields(call, "hset").map(Reply::Integer)
}

pub fn hmset(call: &mut Call<'_>) -> CommandResult {
    set_fields(call, "hmset").map(|_| Reply::ok())
}

pub fn hsetnx(call: &mut Call<'_>) -> CommandResult {
    let mut hash = open_or_new(call)?;
    if hash.get(call.store, &call.args[2])?.is_some() {
        return Ok(Reply::Integer(0));
    }
    hash.set(call.store, call.args[2].clone(), call.args[3].clone())?;
    save(call, hash)?;
    call.notify(HASH, "hset", &call.args[1]);
    Ok(Reply::Integer(1))
}

fn field_value(call: &mut Call<'_>) -> Result<Option<Bytes>, CommandError> {
    match OpenHash::open(call.store, &call.args[1], Collection::Hash)? {
        Some(mut hash) => hash.get(call.store, &call.args[2]),
        None => Ok(None),
    }
}

pub fn hget(call: &mut Call<'_>) -> CommandResult {
    Ok(field_value(call)?.map_or(Reply::Null, Reply::Bulk))
}

pub fn hmget(call: &mut Call<'_>) -> CommandResult {
    let mut hash = OpenHash::open(call.store, &call.args[1], Collection::Hash)?;
    let mut values = Vec::with_capacity(call.args.len() - 2);
    for field in &call.args[2..] {
        let value = match &mut hash {
            Some(hash) => hash.get(call.store, field)?,
            None => None,
        };
        values.push(value.map_or(Reply::Null, Reply::Bulk));
    }
    Ok(Reply::Array(values))
}

fn all_fields(call: &mut Call<'_>) -> Result<Vec<(Bytes, Bytes)>, CommandError> {
    match OpenHash::open(call.store, &call.args[1], Collection::Hash)? {
        Some(hash) => hash.into_fields(call.store),
        None => Ok(Vec::new()),
    }
}

pub fn hgetall(call: &mut Call<'_>) -> CommandResult {
    Ok(Reply::Map(all_fields(call)?.into_iter().map(|(field, value)| (Reply::Bulk(field), Reply::Bulk(value))).collect()))
}

pub fn hkeys(call: &mut Call<'_>) -> CommandResult {
    Ok(Reply::Array(all_fields(call)?.into_iter().map(|(field, _)| Reply::Bulk(field)).collect()))
}

pub fn hvals(call: &mut Call<'_>) -> CommandResult {
    Ok(Reply::Array(all_fields(call)?.into_iter().map(|(_, value)| Reply::Bulk(value)).collect()))
}

pub fn hlen(call: &mut Call<'_>) -> CommandResult {
    Ok(Reply::Integer(OpenHash::open(call.store, &call.args[1], Collection::Hash)?.map_or(0, |hash| hash.len() as i64)))
}

pub fn hexists(call: &mut Call<'_>) -> CommandResult {
    Ok(Reply::Integer(i64::from(field_value(call)?.is_some())))
}

pub fn hstrlen(call: &mut Call<'_>) -> CommandResult {
    Ok(Reply::Integer(field_value(call)?.map_or(0, |value| value.len() as i64)))
}

pub fn hdel(call: &mut Call<'_>) -> CommandResult {
    remove_fields(call, Collection::Hash, HASH, "hdel").map(Reply::Integer)
}

/// HDEL and SREM: removes the fields (members) after the key, announces `event` when any was
/// there and `del` when none is left; answers how many were removed.
pub(super) fn remove_fields(call: &mut Call<'_>, collection: Collection, class: u32, event: &'static str) -> Result<i64, CommandError> {
    let Some(mut hash) = OpenHash::open(call.store, &call.args[1], collection)? else { return Ok(0) };
    let mut removed = 0;
    for field in &call.args[2..] {
        removed += i64::from(hash.remove(call.store, field)?);
    }
    let emptied = hash.len() == 0;
    save(call, hash)?;
    if removed > 0 {
        call.notify(class, event, &call.args[1]);
    }
    if emptied {
        call.notify(GENERIC, "del", &call.args[1]);
    }
    Ok(removed)
}

/// Replaces a field's value with `next(current)` (None when the field is missing); returns the
/// new value's text.
fn update_field<T>(
    call: &mut Call<'_>,
    event: &'static str,
    next: impl FnOnce(Option<&Bytes>) -> Result<(T, String), CommandError>,
) -> Result<(T, String), CommandError> {
    let mut hash = open_or_new(call)?;
    let current = hash.get(call.store, &call.args[2])?;
    let (result, text) = next(current.as_ref())?;
    hash.set(call.store, call.args[2].clone(), Bytes::from(text.clone()))?;
    save(call, hash)?;
    call.notify(HASH, event, &call.args[1]);
    Ok((result, text))
}

pub fn hincrby(call: &mut Call<'_>) -> CommandResult {
    let delta = parse_integer(&call.args[3])?;
    let (next, _) = update_field(call, "hincrby", |current| {
        let current = match current {
            Some(value) => parse_integer(value).or_else(|_| fail("ERR hash value is not an integer"))?,
            None => 0,
        };
        let Some(next) = current.checked_add(delta) else { return fail("ERR increment or decrement would overflow") };
        Ok((next, next.to_string()))
    })?;
    Ok(Reply::Integer(next))
}

pub fn hincrbyfloat(call: &mut Call<'_>) -> CommandResult {
    let delta = parse_float(&call.args[3])?;
    if !delta.is_finite() {
        return fail("ERR value is NaN or Infinity");
    }
    let ((), text) = update_field(call, "hincrbyfloat", |current| {
        let current = match current {
            Some(value) => parse_float(value).or_else(|_| fail("ERR hash value is not a float"))?,
            None => LongDouble::ZERO,
        };
        let next = current.add(delta);
        if !next.is_finite() {
            return fail(NOT_FINITE);
        }
        Ok(((), next.to_redis_text()))
    })?;
    Ok(Reply::bulk_text(&text))
}

/// Repeated picks (a negative count) one HRANDFIELD or SRANDMEMBER makes at most: the reply
/// holds every one.
pub const RANDOM_FIELD_REPEATED_PICKS_MAX: u64 = 1 << 20;

/// HRANDFIELD's and SRANDMEMBER's count, parsed as Redis does (any integer but i64::MIN).
pub(super) fn parse_random_count(count: &[u8]) -> Result<i64, CommandError> {
    let count = parse_integer(count)?;
    if count == i64::MIN {
        return fail(format!("ERR value is out of range, value must between {} and {}", -i64::MAX, i64::MAX));
    }
    Ok(count)
}

/// Picks `count` fields of the key's hash or set at random: distinct ones for a positive count,
/// `-count` that may repeat for a negative one (at most `RANDOM_FIELD_REPEATED_PICKS_MAX`).
pub(super) fn random_fields(call: &mut Call<'_>, collection: Collection, count: i64) -> Result<Vec<(Bytes, Bytes)>, CommandError> {
    let repeated = count < 0;
    if repeated && count.unsigned_abs() > RANDOM_FIELD_REPEATED_PICKS_MAX {
        let command = String::from_utf8_lossy(&call.args[0]).to_ascii_uppercase();
        return fail(format!("ERR {command} picks at most {RANDOM_FIELD_REPEATED_PICKS_MAX} elements with repetition (a negative count)"));
    }
    let Some(hash) = OpenHash::open(call.store, &call.args[1], collection)? else { return Ok(Vec::new()) };
    let picks = usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX);
    hash.random_fields(call.store, picks, !repeated, &mut rand::thread_rng())
}

/// Puts distinct random picks in the order a type lists them (ZRANDMEMBER's).
pub(super) type DistinctOrder = fn(&mut Vec<(Bytes, Bytes)>) -> Result<(), CommandError>;

/// HRANDFIELD key [count [WITHVALUES]].
pub fn hrandfield(call: &mut Call<'_>) -> CommandResult {
    random_command(call, Collection::Hash, "WITHVALUES", |value| Ok(Reply::Bulk(value)), None)
}

/// HRANDFIELD and ZRANDMEMBER key [count [`option`]]: Redis's checks in Redis's order (the
/// count, the option, then the key). A positive count picks distinct fields, a negative one
/// picks that many that may repeat (at most `RANDOM_FIELD_REPEATED_PICKS_MAX`), and
/// `order_distinct`, when given, orders distinct picks; with the option, each field's value as
/// `value_reply` answers it.
pub(super) fn random_command(
    call: &mut Call<'_>,
    collection: Collection,
    option: &str,
    value_reply: impl Fn(Bytes) -> Result<Reply, CommandError>,
    order_distinct: Option<DistinctOrder>,
) -> CommandResult {
    let Some(count) = call.args.get(2) else {
        return Ok(random_fields(call, collection, 1)?.pop().map_or(Reply::Null, |(field, _)| Reply::Bulk(field)));
    };
    let count = parse_random_count(count)?;
    let with_values = match call.args.get(3) {
        None => false,
        Some(given) if call.args.len() == 4 && is(given, option) => true,
        Some(_) => return fail(SYNTAX_ERROR),
    };
    if with_values && count.unsigned_abs() > i64::MAX as u64 / 2 {
        return fail("ERR value is out of range");
    }
    let mut picked = random_fields(call, collection, count)?;
    if let Some(order) = order_distinct.filter(|_| count > 0) {
        order(&mut picked)?;
    }
    let mut replies = Vec::with_capacity(picked.len() * 2);
    for (field, value) in picked {
        match (with_values, call.session.protocol) {
            (false, _) => replies.push(Reply::Bulk(field)),
            (true, ProtocolVersion::Resp2) => replies.extend([Reply::Bulk(field), value_reply(value)?]),
            (true, _) => replies.push(Reply::Array(vec![Reply::Bulk(field), value_reply(value)?])),
        }
    }
    Ok(Reply::Array(replies))
}

/// HSCAN: a small hash answers every field with cursor 0; a bucketed one is walked bucket by
/// bucket with a cursor (`OpenHash::scan`), COUNT fields or a little more per call.
pub fn hscan(call: &mut Call<'_>) -> CommandResult {
    scan_fields(call, Collection::Hash)
}

/// HSCAN, SSCAN (which lists members only, and takes no NOVALUES) and ZSCAN (members and their
/// scores as text).
pub(super) fn scan_fields(call: &mut Call<'_>, collection: Collection) -> CommandResult {
    let cursor = parse_cursor(&call.args[2])?;
    let is_hash = collection == Collection::Hash;
    let options = parse_scan_options(&call.args[3..], false, is_hash)?;
    let Some(hash) = OpenHash::open(call.store, &call.args[1], collection)? else {
        return Ok(Reply::Array(vec![Reply::bulk_text("0"), Reply::Array(Vec::new())]));
    };
    let len = hash.len();
    let page = hash.scan(call.store, cursor, options.count)?;
    let mut items = Vec::new();
    for (field, value) in page.fields {
        if options.pattern.as_ref().is_some_and(|pattern| !glob_match(pattern, &field)) {
            continue;
        }
        let in_listpack = sorted_sets::fits_listpack(len, field.len());
        items.push(Reply::Bulk(field));
        match collection {
            Collection::Hash if !options.no_values => items.push(Reply::Bulk(value)),
            Collection::SortedSet => items.push(Reply::bulk_text(&sorted_sets::scanned_score_text(decode_score(&value)?, in_listpack))),
            _ => {}
        }
    }
    Ok(Reply::Array(vec![Reply::bulk_text(&page.next_cursor.to_string()), Reply::Array(items)]))
}

/// Writes `fields` (distinct, in the order the record keeps) as the hash or set at `target` in
/// place of whatever it held (`replace_key`).
pub(super) fn store_fields(call: &mut Call<'_>, target: &Bytes, collection: Collection, fields: Vec<(Bytes, Bytes)>, class: u32, event: &'static str) -> CommandResult {
    let size = fields.len();
    replace_key(call, target, size, class, event, |call| save(call, OpenHash::with_distinct_fields(target, collection, fields)).map(drop))
}

/// The STORE commands' end: deletes `target` (its parts and expiry with it), then, for a result
/// of `size` members, `write`s it as a new value and announces `event` of `class`; an empty
/// result leaves the key deleted (`del` announced if it existed). Answers the size.
pub(super) fn replace_key(
    call: &mut Call<'_>,
    target: &Bytes,
    size: usize,
    class: u32,
    event: &'static str,
    write: impl FnOnce(&mut Call<'_>) -> Result<(), CommandError>,
) -> CommandResult {
    let deleted = call.store.delete(target)?;
    if size == 0 {
        if deleted {
            call.notify(GENERIC, "del", target);
        }
        return Ok(Reply::Integer(0));
    }
    write(call)?;
    call.notify(class, event, target);
    Ok(Reply::Integer(size as i64))
}
