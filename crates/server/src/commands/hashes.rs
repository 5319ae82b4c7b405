//! Hash commands (a record with named bins): HSET HMSET HGET HMGET HGETALL HDEL HEXISTS HLEN HKEYS
//! HVALS HINCRBY HINCRBYFLOAT HSETNX HSTRLEN HSCAN. Every write rewrites the record and keeps the
//! key's expiry.

use hybridkv_resp::Reply;

use super::keys::{parse_cursor, parse_scan_options};
use super::{format_float, parse_float, parse_integer, read_hash, value_bytes_max};
use crate::command::{fail, wrong_arity, Call, CommandError, CommandResult};
use crate::glob::glob_match;
use crate::values::HashRecord;

/// Stores the record, or deletes the key when its last field went (as Redis).
fn store_hash(call: &mut Call<'_>, hash: &HashRecord, expiry: u64) -> Result<(), CommandError> {
    let key = &call.args[1];
    if hash.fields.is_empty() {
        call.store.delete(key)?;
        return Ok(());
    }
    let encoded = hash.encode();
    if encoded.len() as u64 > value_bytes_max(call) + 1 {
        return fail(format!(
            "ERR hash would be {} bytes, over the namespace's value limit of {} bytes",
            encoded.len(),
            value_bytes_max(call) + 1
        ));
    }
    call.store.put(key, &encoded, expiry)?;
    Ok(())
}

fn existing_hash(call: &mut Call<'_>) -> Result<(HashRecord, u64), CommandError> {
    Ok(read_hash(call.store, &call.args[1])?.unwrap_or_default())
}

/// HSET and HMSET: field/value pairs after the key.
fn set_fields(call: &mut Call<'_>, name: &str) -> Result<i64, CommandError> {
    if call.args.len() % 2 != 0 {
        return Err(wrong_arity(name));
    }
    let (mut hash, expiry) = existing_hash(call)?;
    let mut added = 0;
    for pair in call.args[2..].chunks(2) {
        added += i64::from(hash.set(pair[0].clone(), pair[1].clone()));
    }
    store_hash(call, &hash, expiry)?;
    Ok(added)
}

pub fn hset(call: &mut Call<'_>) -> CommandResult {
    set_fields(call, "hset").map(Reply::Integer)
}

pub fn hmset(call: &mut Call<'_>) -> CommandResult {
    set_fields(call, "hmset").map(|_| Reply::ok())
}

pub fn hsetnx(call: &mut Call<'_>) -> CommandResult {
    let (mut hash, expiry) = existing_hash(call)?;
    if hash.get(&call.args[2]).is_some() {
        return Ok(Reply::Integer(0));
    }
    hash.set(call.args[2].clone(), call.args[3].clone());
    store_hash(call, &hash, expiry)?;
    Ok(Reply::Integer(1))
}

fn field_value(call: &mut Call<'_>, field: &[u8]) -> Result<Option<bytes::Bytes>, CommandError> {
    Ok(read_hash(call.store, &call.args[1])?.and_then(|(hash, _)| hash.get(field).cloned()))
}

pub fn hget(call: &mut Call<'_>) -> CommandResult {
    let field = call.args[2].clone();
    Ok(field_value(call, &field)?.map_or(Reply::Null, Reply::Bulk))
}

pub fn hmget(call: &mut Call<'_>) -> CommandResult {
    let (hash, _) = existing_hash(call)?;
    Ok(Reply::Array(call.args[2..].iter().map(|field| hash.get(field).cloned().map_or(Reply::Null, Reply::Bulk)).collect()))
}

pub fn hgetall(call: &mut Call<'_>) -> CommandResult {
    let (hash, _) = existing_hash(call)?;
    Ok(Reply::Map(hash.fields.into_iter().map(|(field, value)| (Reply::Bulk(field), Reply::Bulk(value))).collect()))
}

pub fn hkeys(call: &mut Call<'_>) -> CommandResult {
    let (hash, _) = existing_hash(call)?;
    Ok(Reply::Array(hash.fields.into_iter().map(|(field, _)| Reply::Bulk(field)).collect()))
}

pub fn hvals(call: &mut Call<'_>) -> CommandResult {
    let (hash, _) = existing_hash(call)?;
    Ok(Reply::Array(hash.fields.into_iter().map(|(_, value)| Reply::Bulk(value)).collect()))
}

pub fn hlen(call: &mut Call<'_>) -> CommandResult {
    Ok(Reply::Integer(existing_hash(call)?.0.fields.len() as i64))
}

pub fn hexists(call: &mut Call<'_>) -> CommandResult {
    let field = call.args[2].clone();
    Ok(Reply::Integer(i64::from(field_value(call, &field)?.is_some())))
}

pub fn hstrlen(call: &mut Call<'_>) -> CommandResult {
    let field = call.args[2].clone();
    Ok(Reply::Integer(field_value(call, &field)?.map_or(0, |value| value.len() as i64)))
}

pub fn hdel(call: &mut Call<'_>) -> CommandResult {
    let Some((mut hash, expiry)) = read_hash(call.store, &call.args[1])? else { return Ok(Reply::Integer(0)) };
    let removed = call.args[2..].iter().filter(|field| hash.remove(field)).count();
    if removed > 0 {
        store_hash(call, &hash, expiry)?;
    }
    Ok(Reply::Integer(removed as i64))
}

pub fn hincrby(call: &mut Call<'_>) -> CommandResult {
    let delta = parse_integer(&call.args[3])?;
    let (mut hash, expiry) = existing_hash(call)?;
    let current = match hash.get(&call.args[2]) {
        Some(value) => parse_integer(value).or_else(|_| fail("ERR hash value is not an integer"))?,
        None => 0,
    };
    let Some(next) = current.checked_add(delta) else { return fail("ERR increment or decrement would overflow") };
    hash.set(call.args[2].clone(), next.to_string().into());
    store_hash(call, &hash, expiry)?;
    Ok(Reply::Integer(next))
}

pub fn hincrbyfloat(call: &mut Call<'_>) -> CommandResult {
    let delta = parse_float(&call.args[3])?;
    let (mut hash, expiry) = existing_hash(call)?;
    let current = match hash.get(&call.args[2]) {
        Some(value) => parse_float(value).or_else(|_| fail("ERR hash value is not a float"))?,
        None => 0.0,
    };
    let next = current + delta;
    if !next.is_finite() {
        return fail("ERR increment would produce NaN or Infinity");
    }
    let text = format_float(next);
    hash.set(call.args[2].clone(), text.clone().into());
    store_hash(call, &hash, expiry)?;
    Ok(Reply::bulk_text(&text))
}

/// The whole hash is one record, so one call returns every matching field and cursor 0.
pub fn hscan(call: &mut Call<'_>) -> CommandResult {
    parse_cursor(&call.args[2])?;
    let options = parse_scan_options(&call.args[3..], false, true)?;
    let (hash, _) = existing_hash(call)?;
    let mut items = Vec::new();
    for (field, value) in hash.fields {
        if options.pattern.as_ref().is_some_and(|pattern| !glob_match(pattern, &field)) {
            continue;
        }
        items.push(Reply::Bulk(field));
        if !options.no_values {
            items.push(Reply::Bulk(value));
        }
    }
    Ok(Reply::Array(vec![Reply::bulk_text("0"), Reply::Array(items)]))
}
