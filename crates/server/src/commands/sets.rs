//! Set commands: SADD SREM SISMEMBER SMISMEMBER SMEMBERS SCARD SPOP SRANDMEMBER SMOVE SINTER
//! SINTERCARD SINTERSTORE SUNION SUNIONSTORE SDIFF SDIFFSTORE SSCAN, with Redis 7.0's replies,
//! errors and keyspace events. A set is laid out as a hash whose members are fields with empty
//! values (`crate::hash_layout`), so a member costs the same to add, remove or test whatever the
//! set's size. Writes keep the key's expiry; the STORE commands replace the destination, expiry
//! included, as Redis does.

use std::collections::HashSet;

use bytes::Bytes;
use hybridkv_resp::Reply;

use super::hashes::{parse_random_count, random_fields, remove_fields, save, scan_fields, store_fields};
use super::{is, parse_integer, parse_integer_at_least, NUMKEYS_NOT_POSITIVE, SYNTAX_ERROR};
use crate::command::{fail, Call, CommandError, CommandResult};
use crate::hash_layout::OpenHash;
use crate::keyspace_events::{GENERIC, SET};
use crate::values::Collection;

/// A set of integers stays an intset in Redis 7.0 while it has at most this many members
/// (set-max-intset-entries).
pub(super) const INTSET_MEMBERS_MAX: usize = 512;

/// The members as integers when Redis 7.0 would keep them as an intset: at most
/// INTSET_MEMBERS_MAX, every one an integer.
pub(super) fn intset_numbers(members: &[(Bytes, Bytes)]) -> Option<Vec<i64>> {
    if members.len() > INTSET_MEMBERS_MAX {
        return None;
    }
    members.iter().map(|(member, _)| parse_integer(member).ok()).collect()
}

/// Orders `members` as Redis lists an intset, ascending, when they would make one; otherwise
/// they keep their order.
fn order_like_an_intset(members: &mut Vec<(Bytes, Bytes)>) {
    let Some(numbers) = intset_numbers(members) else { return };
    let mut numbered: Vec<(i64, (Bytes, Bytes))> = numbers.into_iter().zip(std::mem::take(members)).collect();
    numbered.sort_unstable_by_key(|(number, _)| *number);
    *members = numbered.into_iter().map(|(_, member)| member).collect();
}

/// Keeps a small set of integers in ascending order, as Redis's intset lists them (SMEMBERS,
/// SSCAN, and SINTER over it, answer in that order).
fn keep_intset_order(set: &mut OpenHash) {
    set.join_buckets_made_in_memory();
    if let Some(members) = set.small_fields_mut() {
        order_like_an_intset(members);
    }
}

fn open(call: &mut Call<'_>, key: &Bytes) -> Result<Option<OpenHash>, CommandError> {
    OpenHash::open(call.store, key, Collection::Set)
}

fn members_reply(members: impl IntoIterator<Item = Bytes>) -> Reply {
    Reply::Set(members.into_iter().map(Reply::Bulk).collect())
}

/// SADD key member [member ...]: how many members were new. A set that gained none is not
/// rewritten (no new version for WATCH, no event), as in Redis.
pub fn sadd(call: &mut Call<'_>) -> CommandResult {
    let key = call.args[1].clone();
    let mut set = OpenHash::open_or_new(call.store, &key, Collection::Set)?;
    let mut added = 0;
    for member in &call.args[2..] {
        if set.get(call.store, member)?.is_none() {
            set.set(call.store, member.clone(), Bytes::new())?;
            added += 1;
        }
    }
    if added > 0 {
        keep_intset_order(&mut set);
        save(call, set)?;
        call.notify(SET, "sadd", &key);
    }
    Ok(Reply::Integer(added))
}

pub fn srem(call: &mut Call<'_>) -> CommandResult {
    remove_fields(call, Collection::Set, SET, "srem").map(Reply::Integer)
}

pub fn sismember(call: &mut Call<'_>) -> CommandResult {
    let key = call.args[1].clone();
    let found = match open(call, &key)? {
        Some(mut set) => set.get(call.store, &call.args[2])?.is_some(),
        None => false,
    };
    Ok(Reply::Integer(i64::from(found)))
}

pub fn smismember(call: &mut Call<'_>) -> CommandResult {
    let key = call.args[1].clone();
    let mut set = open(call, &key)?;
    let mut found = Vec::with_capacity(call.args.len() - 2);
    for member in &call.args[2..] {
        let present = match &mut set {
            Some(set) => set.get(call.store, member)?.is_some(),
            None => false,
        };
        found.push(Reply::Integer(i64::from(present)));
    }
    Ok(Reply::Array(found))
}

pub fn scard(call: &mut Call<'_>) -> CommandResult {
    let key = call.args[1].clone();
    Ok(Reply::Integer(open(call, &key)?.map_or(0, |set| set.len() as i64)))
}

pub fn smembers(call: &mut Call<'_>) -> CommandResult {
    let key = call.args[1].clone();
    let members = match open(call, &key)? {
        Some(set) => set.into_fields(call.store)?,
        None => Vec::new(),
    };
    Ok(members_reply(members.into_iter().map(|(member, _)| member)))
}

pub fn sscan(call: &mut Call<'_>) -> CommandResult {
    scan_fields(call, Collection::Set)
}

/// SRANDMEMBER key [count]: one member (nil for a missing key), or `count` of them: distinct
/// for a positive count, possibly repeated for a negative one.
pub fn srandmember(call: &mut Call<'_>) -> CommandResult {
    if call.args.len() > 3 {
        return fail(SYNTAX_ERROR);
    }
    let Some(count) = call.args.get(2) else {
        return Ok(random_fields(call, Collection::Set, 1)?.pop().map_or(Reply::Null, |(member, _)| Reply::Bulk(member)));
    };
    let count = parse_random_count(count)?;
    Ok(Reply::Array(random_fields(call, Collection::Set, count)?.into_iter().map(|(member, _)| Reply::Bulk(member)).collect()))
}

/// SPOP key [count]: removes and answers one random member (nil for a missing key), or up to
/// `count` distinct ones as a set. Redis announces `spop` once, then `del` when the set emptied.
pub fn spop(call: &mut Call<'_>) -> CommandResult {
    let count = match call.args.len() {
        2 => None,
        3 => Some(parse_integer_at_least(&call.args[2], 0, "ERR value is out of range, must be positive")?),
        _ => return fail(SYNTAX_ERROR),
    };
    let key = call.args[1].clone();
    let Some(set) = open(call, &key)? else {
        return Ok(if count.is_some() { members_reply([]) } else { Reply::Null });
    };
    if count == Some(0) {
        return Ok(members_reply([]));
    }
    let picks = usize::try_from(count.unwrap_or(1)).unwrap_or(usize::MAX);
    let popped: Vec<Bytes> = set.random_fields(call.store, picks, true, &mut rand::thread_rng())?.into_iter().map(|(member, _)| member).collect();
    let mut set = open(call, &key)?.expect("the set was just read");
    for member in &popped {
        set.remove(call.store, member)?;
    }
    let emptied = set.len() == 0;
    save(call, set)?;
    call.notify(SET, "spop", &key);
    if emptied {
        call.notify(GENERIC, "del", &key);
    }
    Ok(match count {
        Some(_) => members_reply(popped),
        None => popped.into_iter().next().map_or(Reply::Null, Reply::Bulk),
    })
}

/// SMOVE source destination member, in Redis's order: a missing source answers 0 before the
/// destination's type is checked; moving within one set changes nothing.
pub fn smove(call: &mut Call<'_>) -> CommandResult {
    let (source_key, target_key, member) = (call.args[1].clone(), call.args[2].clone(), call.args[3].clone());
    let Some(mut source) = open(call, &source_key)? else { return Ok(Reply::Integer(0)) };
    let target = open(call, &target_key)?;
    if source_key == target_key {
        return Ok(Reply::Integer(i64::from(source.get(call.store, &member)?.is_some())));
    }
    if !source.remove(call.store, &member)? {
        return Ok(Reply::Integer(0));
    }
    let emptied = source.len() == 0;
    save(call, source)?;
    call.notify(SET, "srem", &source_key);
    if emptied {
        call.notify(GENERIC, "del", &source_key);
    }
    let mut target = match target {
        Some(target) => target,
        None => OpenHash::open_or_new(call.store, &target_key, Collection::Set)?,
    };
    if target.get(call.store, &member)?.is_none() {
        target.set(call.store, member, Bytes::new())?;
        keep_intset_order(&mut target);
        save(call, target)?;
        call.notify(SET, "sadd", &target_key);
    }
    Ok(Reply::Integer(1))
}

/// The sets of `keys`, in order (None for a missing key), every type checked first as Redis
/// does: WRONGTYPE for any key that holds another type, wherever it is.
fn open_all(call: &mut Call<'_>, keys: &[Bytes]) -> Result<Vec<Option<OpenHash>>, CommandError> {
    keys.iter().map(|key| open(call, key)).collect()
}

/// The members every set holds (none when a key is missing), at most `limit` of them (0: no
/// limit). The smallest set's members are tested against the others, one bucket read each.
fn intersection(call: &mut Call<'_>, keys: &[Bytes], limit: usize) -> Result<Vec<Bytes>, CommandError> {
    let Some(mut sets) = open_all(call, keys)?.into_iter().collect::<Option<Vec<_>>>() else { return Ok(Vec::new()) };
    sets.sort_by_key(|set| set.len());
    let smallest = sets.remove(0);
    let mut common = Vec::new();
    for (member, _) in smallest.into_fields(call.store)? {
        if limit != 0 && common.len() == limit {
            break;
        }
        if in_every(call, &mut sets, &member)? {
            common.push(member);
        }
    }
    Ok(common)
}

fn in_every(call: &mut Call<'_>, sets: &mut [OpenHash], member: &[u8]) -> Result<bool, CommandError> {
    for set in sets {
        if set.get(call.store, member)?.is_none() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The members of any of the sets, each once, in the order first met.
fn union(call: &mut Call<'_>, keys: &[Bytes]) -> Result<Vec<Bytes>, CommandError> {
    let mut seen = HashSet::new();
    let mut members = Vec::new();
    for set in open_all(call, keys)?.into_iter().flatten() {
        for (member, _) in set.into_fields(call.store)? {
            if seen.insert(member.clone()) {
                members.push(member);
            }
        }
    }
    Ok(members)
}

/// The members of the first set that no other set holds.
fn difference(call: &mut Call<'_>, keys: &[Bytes]) -> Result<Vec<Bytes>, CommandError> {
    let mut sets = open_all(call, keys)?;
    let Some(first) = sets.remove(0) else { return Ok(Vec::new()) };
    let mut others: Vec<OpenHash> = sets.into_iter().flatten().collect();
    let mut members = Vec::new();
    for (member, _) in first.into_fields(call.store)? {
        if !in_any(call, &mut others, &member)? {
            members.push(member);
        }
    }
    Ok(members)
}

fn in_any(call: &mut Call<'_>, sets: &mut [OpenHash], member: &[u8]) -> Result<bool, CommandError> {
    for set in sets {
        if set.get(call.store, member)?.is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Writes `members` as the set at `target` in place of whatever it held (`store_fields`).
fn store_members(call: &mut Call<'_>, target: &Bytes, members: Vec<Bytes>, event: &'static str) -> CommandResult {
    let mut fields = members.into_iter().map(|member| (member, Bytes::new())).collect();
    order_like_an_intset(&mut fields);
    store_fields(call, target, Collection::Set, fields, SET, event)
}

pub fn sinter(call: &mut Call<'_>) -> CommandResult {
    let keys = &call.args[1..];
    Ok(members_reply(intersection(call, keys, 0)?))
}

pub fn sunion(call: &mut Call<'_>) -> CommandResult {
    let keys = &call.args[1..];
    Ok(members_reply(union(call, keys)?))
}

pub fn sdiff(call: &mut Call<'_>) -> CommandResult {
    let keys = &call.args[1..];
    Ok(members_reply(difference(call, keys)?))
}

pub fn sinterstore(call: &mut Call<'_>) -> CommandResult {
    let (target, keys) = (call.args[1].clone(), &call.args[2..]);
    let members = intersection(call, keys, 0)?;
    store_members(call, &target, members, "sinterstore")
}

pub fn sunionstore(call: &mut Call<'_>) -> CommandResult {
    let (target, keys) = (call.args[1].clone(), &call.args[2..]);
    let members = union(call, keys)?;
    store_members(call, &target, members, "sunionstore")
}

pub fn sdiffstore(call: &mut Call<'_>) -> CommandResult {
    let (target, keys) = (call.args[1].clone(), &call.args[2..]);
    let members = difference(call, keys)?;
    store_members(call, &target, members, "sdiffstore")
}

/// SINTERCARD numkeys key [key ...] [LIMIT limit]: the intersection's size, counting stops at
/// the limit (0: none). Checked in Redis 7.0's order and with its texts.
pub fn sintercard(call: &mut Call<'_>) -> CommandResult {
    let key_count = parse_integer_at_least(&call.args[1], 1, NUMKEYS_NOT_POSITIVE)? as u64;
    let after_numkeys = call.args.len() as u64 - 2;
    if key_count > after_numkeys {
        return fail("ERR Number of keys can't be greater than number of args");
    }
    let keys_end = 2 + key_count as usize;
    let limit = parse_limit(&call.args[keys_end..])?;
    let keys = &call.args[2..keys_end];
    Ok(Reply::Integer(intersection(call, keys, limit)?.len() as i64))
}

/// SINTERCARD's options: `LIMIT n` (the last one counts).
fn parse_limit(options: &[Bytes]) -> Result<usize, CommandError> {
    let mut limit = 0;
    let mut options = options.iter();
    while let Some(option) = options.next() {
        let Some(value) = options.next().filter(|_| is(option, "LIMIT")) else { return fail(SYNTAX_ERROR) };
        limit = usize::try_from(parse_integer_at_least(value, 0, "ERR LIMIT can't be negative")?).unwrap_or(usize::MAX);
    }
    Ok(limit)
}
