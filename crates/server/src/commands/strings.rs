//! String commands: GET SET SETNX SETEX PSETEX MGET MSET MSETNX GETSET GETDEL GETEX APPEND STRLEN
//! GETRANGE SETRANGE INCR DECR INCRBY DECRBY INCRBYFLOAT.

use bytes::Bytes;
use hybridkv_engine::{now_unix_ms, EXPIRY_UNIX_MS_MAX};
use hybridkv_resp::Reply;

use super::{is, parse_float, parse_integer, read_string, value_bytes_max, NOT_FINITE, NOT_INTEGER, SYNTAX_ERROR};
use crate::command::{fail, Call, CommandResult};
use crate::keyspace_events::{GENERIC, STRING};
use crate::long_double::LongDouble;
use crate::values::{encode_string, Stored};

fn bulk_or_null(value: Option<Bytes>) -> Reply {
    value.map_or(Reply::Null, Reply::Bulk)
}

pub fn get(call: &mut Call<'_>) -> CommandResult {
    Ok(bulk_or_null(read_string(call.store, &call.args[1])?.map(|(value, _)| value)))
}

/// What SET's and GETEX's options asked for.
#[derive(Default)]
struct ExpiryOptions {
    only_if_absent: bool,
    only_if_present: bool,
    return_old: bool,
    keep_ttl: bool,
    persist: bool,
    /// The expiry option and its argument, as given: Redis checks the argument only after the
    /// whole option syntax (SET), or after the key's type (GETEX).
    expiry: Option<(Bytes, Bytes)>,
}

impl ExpiryOptions {
    /// The absolute expiry the options ask for, checked (`parse_expiry`).
    fn expire_at_unix_ms(&self, command: &str) -> Result<Option<u64>, crate::command::CommandError> {
        self.expiry.as_ref().map(|(unit, amount)| parse_expiry(unit, amount, command)).transpose()
    }
}

/// Parses `EX s | PX ms | EXAT s | PXAT ms` given the option name and its argument.
fn parse_expiry(unit: &[u8], amount: &[u8], command: &str) -> Result<u64, crate::command::CommandError> {
    let amount = parse_integer(amount)?;
    let invalid = || fail(format!("ERR invalid expire time in '{command}' command"));
    if amount <= 0 {
        return invalid();
    }
    let seconds = is(unit, "EX") || is(unit, "EXAT");
    let Some(milliseconds) = (if seconds { amount.checked_mul(1000) } else { Some(amount) }) else { return invalid() };
    let relative = is(unit, "EX") || is(unit, "PX");
    let at = if relative { milliseconds.checked_add(now_unix_ms() as i64) } else { Some(milliseconds) };
    match at {
        Some(at) if at as u64 <= EXPIRY_UNIX_MS_MAX => Ok(at as u64),
        _ => invalid(),
    }
}

/// Redis's option grammar for SET (`for_set`) and GETEX: conflicting options are a syntax error.
fn parse_expiry_options(args: &[Bytes], start: usize, for_set: bool) -> Result<ExpiryOptions, crate::command::CommandError> {
    let mut options = ExpiryOptions::default();
    let mut position = start;
    while position < args.len() {
        let option = args[position].as_ref();
        let has_expiry = options.expiry.is_some() || options.keep_ttl || options.persist;
        let is_expiry_unit = ["EX", "PX", "EXAT", "PXAT"].iter().any(|unit| is(option, unit));
        if for_set && is(option, "NX") && !options.only_if_present {
            options.only_if_absent = true;
        } else if for_set && is(option, "XX") && !options.only_if_absent {
            options.only_if_present = true;
        } else if for_set && is(option, "GET") {
            options.return_old = true;
        } else if for_set && is(option, "KEEPTTL") && !has_expiry {
            options.keep_ttl = true;
        } else if !for_set && is(option, "PERSIST") && !has_expiry {
            options.persist = true;
        } else if is_expiry_unit && !has_expiry && position + 1 < args.len() {
            options.expiry = Some((args[position].clone(), args[position + 1].clone()));
            position += 1;
        } else {
            return fail(SYNTAX_ERROR);
        }
        position += 1;
    }
    Ok(options)
}

pub fn set(call: &mut Call<'_>) -> CommandResult {
    let options = parse_expiry_options(call.args, 3, true)?;
    let expire_at_unix_ms = options.expire_at_unix_ms("set")?;
    let key = &call.args[1];
    let old = if options.return_old { read_string(call.store, key)? } else { None };
    // Whether the key exists (and its expiry) matters only to NX, XX, GET and KEEPTTL.
    let needs_current = options.only_if_absent || options.only_if_present || options.keep_ttl;
    let current = match &old {
        Some((_, expiry)) => Some(*expiry),
        None if needs_current => call.store.get(key)?.map(|value| value.expiry_unix_ms),
        None => None,
    };
    let refused = (options.only_if_absent && current.is_some()) || (options.only_if_present && current.is_none());
    let old_reply = || bulk_or_null(old.clone().map(|(value, _)| value));
    if refused {
        return Ok(if options.return_old { old_reply() } else { Reply::Null });
    }
    let expiry = match expire_at_unix_ms {
        Some(at) => at,
        None if options.keep_ttl => current.unwrap_or(0),
        None => 0,
    };
    call.store.put(key, &encode_string(&call.args[2]), expiry)?;
    call.notify(STRING, "set", key);
    if expire_at_unix_ms.is_some() {
        call.notify(GENERIC, "expire", key);
    }
    Ok(if options.return_old { old_reply() } else { Reply::ok() })
}

pub fn setnx(call: &mut Call<'_>) -> CommandResult {
    let key = &call.args[1];
    if call.store.get(key)?.is_some() {
        return Ok(Reply::Integer(0));
    }
    call.store.put(key, &encode_string(&call.args[2]), 0)?;
    call.notify(STRING, "set", key);
    Ok(Reply::Integer(1))
}

fn set_with_expiry(call: &mut Call<'_>, unit: &str, command: &str) -> CommandResult {
    let at = parse_expiry(unit.as_bytes(), &call.args[2], command)?;
    call.store.put(&call.args[1], &encode_string(&call.args[3]), at)?;
    call.notify(STRING, "set", &call.args[1]);
    call.notify(GENERIC, "expire", &call.args[1]);
    Ok(Reply::ok())
}

pub fn setex(call: &mut Call<'_>) -> CommandResult {
    set_with_expiry(call, "EX", "setex")
}

pub fn psetex(call: &mut Call<'_>) -> CommandResult {
    set_with_expiry(call, "PX", "psetex")
}

pub fn mget(call: &mut Call<'_>) -> CommandResult {
    let keys: Vec<&[u8]> = call.args[1..].iter().map(|key| key.as_ref()).collect();
    let values = call.store.get_many(&keys).into_iter().map(|found| {
        // As Redis: a key of another type reads as missing here, not as an error.
        let string = found.ok().flatten().and_then(|value| match Stored::decode(value.bytes) {
            Ok(Stored::String(string)) => Some(string),
            _ => None,
        });
        bulk_or_null(string)
    });
    Ok(Reply::Array(values.collect()))
}

fn put_pairs(call: &mut Call<'_>) -> Result<(), crate::command::CommandError> {
    for pair in call.args[1..].chunks(2) {
        call.store.put(&pair[0], &encode_string(&pair[1]), 0)?;
        call.notify(STRING, "set", &pair[0]);
    }
    Ok(())
}

pub fn mset(call: &mut Call<'_>) -> CommandResult {
    if call.args.len().is_multiple_of(2) {
        return Err(crate::command::wrong_arity("mset"));
    }
    put_pairs(call)?;
    Ok(Reply::ok())
}

pub fn msetnx(call: &mut Call<'_>) -> CommandResult {
    if call.args.len().is_multiple_of(2) {
        return Err(crate::command::wrong_arity("msetnx"));
    }
    for pair in call.args[1..].chunks(2) {
        if call.store.get(&pair[0])?.is_some() {
            return Ok(Reply::Integer(0));
        }
    }
    put_pairs(call)?;
    Ok(Reply::Integer(1))
}

pub fn getset(call: &mut Call<'_>) -> CommandResult {
    let old = read_string(call.store, &call.args[1])?;
    call.store.put(&call.args[1], &encode_string(&call.args[2]), 0)?;
    call.notify(STRING, "set", &call.args[1]);
    Ok(bulk_or_null(old.map(|(value, _)| value)))
}

pub fn getdel(call: &mut Call<'_>) -> CommandResult {
    let old = read_string(call.store, &call.args[1])?;
    if old.is_some() {
        call.store.delete(&call.args[1])?;
        call.notify(GENERIC, "del", &call.args[1]);
    }
    Ok(bulk_or_null(old.map(|(value, _)| value)))
}

pub fn getex(call: &mut Call<'_>) -> CommandResult {
    let options = parse_expiry_options(call.args, 2, false)?;
    let key = &call.args[1];
    let Some((value, expiry)) = read_string(call.store, key)? else { return Ok(Reply::Null) };
    let new_expiry = match options.expire_at_unix_ms("getex")? {
        Some(at) => Some(at),
        None if options.persist && expiry != 0 => Some(0),
        None => None,
    };
    match new_expiry {
        Some(at) if at != 0 && at <= now_unix_ms() => {
            call.store.delete(key)?;
            call.notify(GENERIC, "del", key);
        }
        Some(at) => {
            call.store.put(key, &encode_string(&value), at)?;
            call.notify(GENERIC, if at == 0 { "persist" } else { "expire" }, key);
        }
        None => {}
    }
    Ok(Reply::Bulk(value))
}

/// Fails with Redis's error when a string would grow past the namespace's value limit.
pub(super) fn check_string_size(call: &Call<'_>, length: u64) -> Result<(), crate::command::CommandError> {
    if length > value_bytes_max(call) {
        return fail("ERR string exceeds maximum allowed size (proto-max-bulk-len)");
    }
    Ok(())
}

pub fn append(call: &mut Call<'_>) -> CommandResult {
    let key = &call.args[1];
    let (mut value, expiry) = match read_string(call.store, key)? {
        Some((value, expiry)) => (value.to_vec(), expiry),
        None => (Vec::new(), 0),
    };
    check_string_size(call, (value.len() + call.args[2].len()) as u64)?;
    value.extend_from_slice(&call.args[2]);
    call.store.put(key, &encode_string(&value), expiry)?;
    call.notify(STRING, "append", key);
    Ok(Reply::Integer(value.len() as i64))
}

pub fn strlen(call: &mut Call<'_>) -> CommandResult {
    let length = read_string(call.store, &call.args[1])?.map_or(0, |(value, _)| value.len());
    Ok(Reply::Integer(length as i64))
}

pub fn getrange(call: &mut Call<'_>) -> CommandResult {
    let (start, end) = (parse_integer(&call.args[2])?, parse_integer(&call.args[3])?);
    let value = read_string(call.store, &call.args[1])?.map(|(value, _)| value).unwrap_or_default();
    Ok(Reply::Bulk(byte_range(&value, start, end)))
}

/// Redis's GETRANGE index arithmetic: negative offsets count from the end, then clamp.
fn byte_range(value: &Bytes, start: i64, end: i64) -> Bytes {
    let length = value.len() as i64;
    if (start < 0 && end < 0 && start > end) || length == 0 {
        return Bytes::new();
    }
    let start = if start < 0 { (length + start).max(0) } else { start };
    let end = if end < 0 { (length + end).max(0) } else { end.min(length - 1) };
    if start > end {
        return Bytes::new();
    }
    value.slice(start as usize..=end as usize)
}

pub fn setrange(call: &mut Call<'_>) -> CommandResult {
    let offset = parse_integer(&call.args[2])?;
    if offset < 0 {
        return fail("ERR offset is out of range");
    }
    let key = &call.args[1];
    let patch = &call.args[3];
    let existing = read_string(call.store, key)?;
    if patch.is_empty() {
        return Ok(Reply::Integer(existing.map_or(0, |(value, _)| value.len() as i64)));
    }
    check_string_size(call, offset as u64 + patch.len() as u64)?;
    let (mut value, expiry) = existing.map(|(value, expiry)| (value.to_vec(), expiry)).unwrap_or_default();
    let end = offset as usize + patch.len();
    if value.len() < end {
        value.resize(end, 0);
    }
    value[offset as usize..end].copy_from_slice(patch);
    call.store.put(key, &encode_string(&value), expiry)?;
    call.notify(STRING, "setrange", key);
    Ok(Reply::Integer(value.len() as i64))
}

/// INCR and friends: the stored string must be a 64-bit integer; the key keeps its expiry.
fn increment_by(call: &mut Call<'_>, delta: i64) -> CommandResult {
    let key = &call.args[1];
    let (current, expiry) = match read_string(call.store, key)? {
        Some((value, expiry)) => (parse_integer(&value).or_else(|_| fail(NOT_INTEGER))?, expiry),
        None => (0, 0),
    };
    let Some(next) = current.checked_add(delta) else { return fail("ERR increment or decrement would overflow") };
    call.store.put(key, &encode_string(next.to_string().as_bytes()), expiry)?;
    call.notify(STRING, "incrby", key);
    Ok(Reply::Integer(next))
}

pub fn incr(call: &mut Call<'_>) -> CommandResult {
    increment_by(call, 1)
}

pub fn decr(call: &mut Call<'_>) -> CommandResult {
    increment_by(call, -1)
}

pub fn incrby(call: &mut Call<'_>) -> CommandResult {
    let delta = parse_integer(&call.args[2])?;
    increment_by(call, delta)
}

pub fn decrby(call: &mut Call<'_>) -> CommandResult {
    let delta = parse_integer(&call.args[2])?;
    let Some(negated) = delta.checked_neg() else { return fail("ERR decrement would overflow") };
    increment_by(call, negated)
}

pub fn incrbyfloat(call: &mut Call<'_>) -> CommandResult {
    let key = &call.args[1];
    // Redis's order: the key's type, then its value, then the increment.
    let (current, expiry) = match read_string(call.store, key)? {
        Some((value, expiry)) => (parse_float(&value)?, expiry),
        None => (LongDouble::ZERO, 0),
    };
    let increment = parse_float(&call.args[2])?;
    let next = current.add(increment);
    if !next.is_finite() {
        return fail(NOT_FINITE);
    }
    let text = next.to_redis_text();
    call.store.put(key, &encode_string(text.as_bytes()), expiry)?;
    call.notify(STRING, "incrbyfloat", key);
    Ok(Reply::bulk_text(&text))
}

#[cfg(test)]
mod tests {
    use super::byte_range;
    use bytes::Bytes;

    #[test]
    fn getrange_index_arithmetic_matches_redis() {
        let value = Bytes::from_static(b"This is a string");
        let range = |start, end| String::from_utf8(byte_range(&value, start, end).to_vec()).unwrap();
        assert_eq!(range(0, 3), "This");
        assert_eq!(range(-3, -1), "ing");
        assert_eq!(range(0, -1), "This is a string");
        assert_eq!(range(10, 100), "string");
        assert_eq!(range(5, 3), "");
        assert_eq!(range(-1, -5), "");
        assert_eq!(range(-100, 2), "Thi");
    }
}
