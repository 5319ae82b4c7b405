//! List commands: LPUSH RPUSH LPUSHX RPUSHX LPOP RPOP LLEN LINDEX LSET LRANGE LTRIM LREM
//! LINSERT LPOS LMOVE RPOPLPUSH LMPOP and the blocking BLPOP BRPOP BLMOVE BRPOPLPUSH BLMPOP, with Redis 7.0's replies, errors (checked in its order)
//! and keyspace events, over the layouts of `crate::list_layout` (one record, or a root and
//! chunks). Writes keep the key's expiry.

use bytes::Bytes;
use hybridkv_resp::Reply;

use super::{is, parse_integer, parse_integer_at_least, NUMKEYS_NOT_POSITIVE, SYNTAX_ERROR};
use crate::command::{fail, Call, CommandError, CommandResult};
use crate::keyspace_events::{GENERIC, LIST};
use crate::list_layout::{End, ListLimits, OpenList};
use crate::long_double::{parse_c_double, LongDouble};
use crate::session::{KeyWait, ReplyDelay};

const MUST_BE_POSITIVE: &str = "ERR value is out of range, must be positive";

fn limits(call: &Call<'_>) -> ListLimits {
    ListLimits::plain(call.namespace.config().value_bytes_max, call.store.parts_per_key_max())
}

pub(super) fn open(call: &mut Call<'_>, key: &Bytes) -> Result<Option<OpenList>, CommandError> {
    let limits = limits(call);
    OpenList::open(call.store, key, limits)
}

/// `open` for a push or pop, which ends with `save_or_keep` (`OpenList::open_kept`).
fn open_kept(call: &mut Call<'_>, key: &Bytes) -> Result<Option<OpenList>, CommandError> {
    let limits = limits(call);
    OpenList::open_kept(call.store, key, limits)
}

pub(super) fn open_or_new(call: &mut Call<'_>, key: &Bytes) -> Result<OpenList, CommandError> {
    let limits = limits(call);
    OpenList::open_or_new(call.store, key, limits)
}

fn push_event(end: End) -> &'static str {
    match end {
        End::Head => "lpush",
        End::Tail => "rpush",
    }
}

fn pop_event(end: End) -> &'static str {
    match end {
        End::Head => "lpop",
        End::Tail => "rpop",
    }
}

/// LEFT or RIGHT (LMOVE, LMPOP).
fn parse_end(word: &[u8]) -> Result<End, CommandError> {
    match () {
        _ if is(word, "LEFT") => Ok(End::Head),
        _ if is(word, "RIGHT") => Ok(End::Tail),
        _ => fail(SYNTAX_ERROR),
    }
}

/// LPUSH, RPUSH and their X forms (`only_existing`): the elements after the key, one at a time.
fn push(call: &mut Call<'_>, end: End, only_existing: bool) -> CommandResult {
    let key = call.args[1].clone();
    let mut list = match open_kept(call, &key)? {
        Some(list) => list,
        None if only_existing => return Ok(Reply::Integer(0)),
        None => open_or_new(call, &key)?,
    };
    for element in &call.args[2..] {
        list.push(call.store, end, element.clone())?;
    }
    let len = list.len();
    list.save_or_keep(call.store)?;
    call.notify(LIST, push_event(end), &key);
    Ok(Reply::Integer(len as i64))
}

pub fn lpush(call: &mut Call<'_>) -> CommandResult {
    push(call, End::Head, false)
}

pub fn rpush(call: &mut Call<'_>) -> CommandResult {
    push(call, End::Tail, false)
}

pub fn lpushx(call: &mut Call<'_>) -> CommandResult {
    push(call, End::Head, true)
}

pub fn rpushx(call: &mut Call<'_>) -> CommandResult {
    push(call, End::Tail, true)
}

/// Pops up to `count` elements from `end` of `key`'s list and saves it, announcing the pop
/// and, when the list emptied, `del`.
fn pop_saved(call: &mut Call<'_>, key: &Bytes, mut list: OpenList, end: End, count: u64) -> Result<Vec<Bytes>, CommandError> {
    let mut popped = Vec::with_capacity(count.min(list.len()) as usize);
    while (popped.len() as u64) < count {
        let Some(element) = list.pop(call.store, end)? else { break };
        popped.push(element);
    }
    let emptied = list.len() == 0;
    list.save_or_keep(call.store)?;
    call.notify(LIST, pop_event(end), key);
    if emptied {
        call.notify(GENERIC, "del", key);
    }
    Ok(popped)
}

/// LPOP and RPOP key [count]: one element (nil for a missing key), or an array of up to
/// `count` (a null array for a missing key).
fn pop(call: &mut Call<'_>, end: End) -> CommandResult {
    let name = if end == End::Head { "lpop" } else { "rpop" };
    let count = match call.args.len() {
        2 => None,
        3 => Some(parse_integer_at_least(&call.args[2], 0, MUST_BE_POSITIVE)? as u64),
        _ => return Err(crate::command::wrong_arity(name)),
    };
    let key = call.args[1].clone();
    let Some(list) = open_kept(call, &key)? else {
        return Ok(if count.is_some() { Reply::NullArray } else { Reply::Null });
    };
    match count {
        Some(0) => {
            list.save_or_keep(call.store)?;
            Ok(Reply::Array(Vec::new()))
        }
        Some(count) => Ok(Reply::Array(pop_saved(call, &key, list, end, count)?.into_iter().map(Reply::Bulk).collect())),
        None => Ok(pop_saved(call, &key, list, end, 1)?.pop().map_or(Reply::Null, Reply::Bulk)),
    }
}

pub fn lpop(call: &mut Call<'_>) -> CommandResult {
    pop(call, End::Head)
}

pub fn rpop(call: &mut Call<'_>) -> CommandResult {
    pop(call, End::Tail)
}

pub fn llen(call: &mut Call<'_>) -> CommandResult {
    let key = call.args[1].clone();
    Ok(Reply::Integer(open(call, &key)?.map_or(0, |list| list.len() as i64)))
}

/// A Redis index (negative from the end) as a position in a list of `len`, if inside it.
fn position(index: i64, len: u64) -> Option<u64> {
    let position = if index < 0 { len as i128 + i128::from(index) } else { i128::from(index) };
    (0..len as i128).contains(&position).then_some(position as u64)
}

/// LINDEX and LSET look the key up before they parse the index (Redis 7.0's order).
pub fn lindex(call: &mut Call<'_>) -> CommandResult {
    let key = call.args[1].clone();
    let Some(mut list) = open(call, &key)? else { return Ok(Reply::Null) };
    let index = parse_integer(&call.args[2])?;
    match position(index, list.len()) {
        Some(at) => Ok(Reply::Bulk(list.get(call.store, at)?)),
        None => Ok(Reply::Null),
    }
}

pub fn lset(call: &mut Call<'_>) -> CommandResult {
    let key = call.args[1].clone();
    let Some(mut list) = open(call, &key)? else { return fail("ERR no such key") };
    let index = parse_integer(&call.args[2])?;
    let Some(at) = position(index, list.len()) else { return fail("ERR index out of range") };
    list.set(call.store, at, call.args[3].clone())?;
    list.save(call.store)?;
    call.notify(LIST, "lset", &key);
    Ok(Reply::ok())
}

/// Redis's start and stop (inclusive, negative from the end) as `start..end` within `len`;
/// None when the range is empty.
fn span(start: i64, stop: i64, len: u64) -> Option<(u64, u64)> {
    let len = len as i128;
    let from_end = |index: i64| if index < 0 { len + i128::from(index) } else { i128::from(index) };
    let (start, stop) = (from_end(start).max(0), from_end(stop));
    if start > stop || start >= len {
        return None;
    }
    Some((start as u64, (stop.min(len - 1) + 1) as u64))
}

pub fn lrange(call: &mut Call<'_>) -> CommandResult {
    let (start, stop) = (parse_integer(&call.args[2])?, parse_integer(&call.args[3])?);
    let key = call.args[1].clone();
    let Some(mut list) = open(call, &key)? else { return Ok(Reply::Array(Vec::new())) };
    let Some((from, to)) = span(start, stop, list.len()) else { return Ok(Reply::Array(Vec::new())) };
    Ok(Reply::Array(list.range(call.store, from, to - 1)?.into_iter().map(Reply::Bulk).collect()))
}

/// LTRIM: always a write in Redis (event and WATCH), even when it keeps every element.
pub fn ltrim(call: &mut Call<'_>) -> CommandResult {
    let (start, stop) = (parse_integer(&call.args[2])?, parse_integer(&call.args[3])?);
    let key = call.args[1].clone();
    let Some(mut list) = open(call, &key)? else { return Ok(Reply::ok()) };
    let (from, to) = span(start, stop, list.len()).unwrap_or((0, 0));
    list.keep_range(call.store, from, to)?;
    list.touch();
    let emptied = list.len() == 0;
    list.save(call.store)?;
    call.notify(LIST, "ltrim", &key);
    if emptied {
        call.notify(GENERIC, "del", &key);
    }
    Ok(Reply::ok())
}

/// LREM key count element: up to |count| from the head (positive) or the tail (negative), all
/// for 0.
pub fn lrem(call: &mut Call<'_>) -> CommandResult {
    let count = parse_integer(&call.args[2])?;
    let key = call.args[1].clone();
    let Some(mut list) = open(call, &key)? else { return Ok(Reply::Integer(0)) };
    let end = if count < 0 { End::Tail } else { End::Head };
    let removed = list.remove_equal(call.store, &call.args[3], end, count.unsigned_abs())?;
    let emptied = list.len() == 0;
    list.save(call.store)?;
    if removed > 0 {
        call.notify(LIST, "lrem", &key);
        if emptied {
            call.notify(GENERIC, "del", &key);
        }
    }
    Ok(Reply::Integer(removed as i64))
}

/// LINSERT key BEFORE|AFTER pivot element: the new length, -1 without the pivot, 0 for a
/// missing key.
pub fn linsert(call: &mut Call<'_>) -> CommandResult {
    let after = match &call.args[2] {
        word if is(word, "AFTER") => true,
        word if is(word, "BEFORE") => false,
        _ => return fail(SYNTAX_ERROR),
    };
    let key = call.args[1].clone();
    let Some(mut list) = open(call, &key)? else { return Ok(Reply::Integer(0)) };
    if !list.insert_at_pivot(call.store, &call.args[3], call.args[4].clone(), after)? {
        return Ok(Reply::Integer(-1));
    }
    let len = list.len();
    list.save(call.store)?;
    call.notify(LIST, "linsert", &key);
    Ok(Reply::Integer(len as i64))
}

/// LPOS's options: RANK (not 0; negative searches from the tail), COUNT (0: every match) and
/// MAXLEN (0: the whole list).
struct PositionOptions {
    rank: i64,
    count: Option<u64>,
    max_compared: u64,
}

fn parse_position_options(options: &[Bytes]) -> Result<PositionOptions, CommandError> {
    let mut parsed = PositionOptions { rank: 1, count: None, max_compared: 0 };
    let mut options = options.iter();
    while let Some(option) = options.next() {
        let Some(value) = options.next() else { return fail(SYNTAX_ERROR) };
        if is(option, "RANK") {
            parsed.rank = parse_integer(value)?;
            if parsed.rank == 0 {
                return fail("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list");
            }
            if parsed.rank == i64::MIN {
                return fail("ERR value is out of range");
            }
        } else if is(option, "COUNT") {
            parsed.count = Some(parse_integer_at_least(value, 0, "ERR COUNT can't be negative")? as u64);
        } else if is(option, "MAXLEN") {
            parsed.max_compared = parse_integer_at_least(value, 0, "ERR MAXLEN can't be negative")? as u64;
        } else {
            return fail(SYNTAX_ERROR);
        }
    }
    Ok(parsed)
}

/// LPOS key element [RANK rank] [COUNT count] [MAXLEN len]: the index of the rank-th match,
/// or with COUNT an array of the indices of up to `count` matches from there.
pub fn lpos(call: &mut Call<'_>) -> CommandResult {
    let options = parse_position_options(&call.args[3..])?;
    let key = call.args[1].clone();
    let Some(mut list) = open(call, &key)? else {
        return Ok(if options.count.is_some() { Reply::Array(Vec::new()) } else { Reply::Null });
    };
    let end = if options.rank < 0 { End::Tail } else { End::Head };
    let (skip, wanted) = (options.rank.unsigned_abs() - 1, options.count.map_or(1, |count| if count == 0 { u64::MAX } else { count }));
    let (mut compared, mut matches, mut found) = (0, 0, Vec::new());
    let wanted_element = call.args[2].clone();
    list.scan(call.store, end, |index, element| {
        if options.max_compared != 0 && compared == options.max_compared {
            return false;
        }
        compared += 1;
        if *element == wanted_element {
            matches += 1;
            if matches > skip {
                found.push(Reply::Integer(index as i64));
            }
        }
        (found.len() as u64) < wanted
    })?;
    Ok(match options.count {
        Some(_) => Reply::Array(found),
        None => found.pop().unwrap_or(Reply::Null),
    })
}

/// Pops from `from` of the source and pushes to `to` of the destination (the same list
/// rotates), in Redis's order of checks and events: a missing source answers nil before the
/// destination's type is looked at; `lpush`/`rpush` on the destination, then the pop and
/// `del` on the source.
fn move_element(call: &mut Call<'_>, from: End, to: End) -> CommandResult {
    let (source_key, target_key) = (call.args[1].clone(), call.args[2].clone());
    let Some(mut source) = open(call, &source_key)? else { return Ok(Reply::Null) };
    if source_key == target_key {
        let element = source.pop(call.store, from)?.expect("a stored list is not empty");
        source.push(call.store, to, element.clone())?;
        source.save(call.store)?;
        call.notify(LIST, push_event(to), &target_key);
        call.notify(LIST, pop_event(from), &source_key);
        return Ok(Reply::Bulk(element));
    }
    let mut target = open_or_new(call, &target_key)?;
    let element = source.pop(call.store, from)?.expect("a stored list is not empty");
    target.push(call.store, to, element.clone())?;
    target.save(call.store)?;
    call.notify(LIST, push_event(to), &target_key);
    let emptied = source.len() == 0;
    source.save(call.store)?;
    call.notify(LIST, pop_event(from), &source_key);
    if emptied {
        call.notify(GENERIC, "del", &source_key);
    }
    Ok(Reply::Bulk(element))
}

pub fn lmove(call: &mut Call<'_>) -> CommandResult {
    let (from, to) = (parse_end(&call.args[3])?, parse_end(&call.args[4])?);
    move_element(call, from, to)
}

pub fn rpoplpush(call: &mut Call<'_>) -> CommandResult {
    move_element(call, End::Tail, End::Head)
}

/// LMPOP's and BLMPOP's (ZMPOP's and BZMPOP's) arguments from numkeys on: the keys, which end
/// (`End`, or a sorted set's MIN or MAX) and how many.
pub(super) struct MultiPop<W> {
    pub keys: Vec<Bytes>,
    pub end: W,
    pub count: u64,
}

pub(super) fn parse_multi_pop<W>(args: &[Bytes], parse_end: impl Fn(&[u8]) -> Result<W, CommandError>) -> Result<MultiPop<W>, CommandError> {
    let key_count = parse_integer_at_least(&args[0], 1, NUMKEYS_NOT_POSITIVE)? as u64;
    let Some(end_at) = key_count.checked_add(1).filter(|&at| at < args.len() as u64).map(|at| at as usize) else {
        return fail(SYNTAX_ERROR);
    };
    let end = parse_end(&args[end_at])?;
    let count = match &args[end_at + 1..] {
        [] => 1,
        [option, value] if is(option, "COUNT") => parse_integer_at_least(value, 1, "ERR count should be greater than 0")? as u64,
        _ => return fail(SYNTAX_ERROR),
    };
    Ok(MultiPop { keys: args[1..end_at].to_vec(), end, count })
}

/// Pops from the first non-empty list of the keys: its key and the elements, or None when
/// every list is empty. A key of another type is WRONGTYPE only when met before a list with
/// elements (Redis 7.0's order).
fn multi_pop(call: &mut Call<'_>, pop: &MultiPop<End>) -> Result<Option<(Bytes, Vec<Bytes>)>, CommandError> {
    for key in &pop.keys {
        if let Some(list) = open(call, key)? {
            return Ok(Some((key.clone(), pop_saved(call, key, list, pop.end, pop.count)?)));
        }
    }
    Ok(None)
}

/// LMPOP's and BLMPOP's reply: [key, elements].
fn key_and_elements((key, elements): (Bytes, Vec<Bytes>)) -> Reply {
    Reply::Array(vec![Reply::Bulk(key), Reply::Array(elements.into_iter().map(Reply::Bulk).collect())])
}

/// LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count]: a null array when every list is empty.
pub fn lmpop(call: &mut Call<'_>) -> CommandResult {
    let pop = parse_multi_pop(&call.args[1..], parse_end)?;
    Ok(multi_pop(call, &pop)?.map_or(Reply::NullArray, key_and_elements))
}

/// A blocking pop's timeout in seconds (a float, 0: none) as Redis parses it. Run again after a
/// wake, the command keeps its first deadline.
pub(super) fn parse_timeout(call: &mut Call<'_>, text: &[u8]) -> Result<ReplyDelay, CommandError> {
    let seconds = LongDouble::parse(text).and_then(|_| Some(parse_c_double(std::str::from_utf8(text).ok()?)?.value));
    let Some(seconds) = seconds.filter(|seconds| !seconds.is_nan()) else { return fail("ERR timeout is not a float or out of range") };
    let milliseconds = seconds * 1000.0;
    if milliseconds < 0.0 {
        return fail("ERR timeout is negative");
    }
    Ok(call.session.retry_delay.take().unwrap_or_else(|| ReplyDelay::of_timeout_ms(milliseconds.min(u64::MAX as f64) as u64)))
}

/// Every list of a blocking pop was empty: outside EXEC the client waits for a write to one
/// of `keys` (registered now, under the keys' locks, so that no write is missed) and the
/// command runs again; inside EXEC the answer is `timeout_reply` at once, as in Redis.
pub(super) fn block(call: &mut Call<'_>, keys: Vec<Bytes>, delay: ReplyDelay, timeout_reply: Reply) -> CommandResult {
    let arguments = call.args.to_vec();
    block_to_run(call, keys, delay, timeout_reply, arguments)
}

/// `block`, running `arguments` after a wake instead of the command's own.
pub(super) fn block_to_run(call: &mut Call<'_>, keys: Vec<Bytes>, delay: ReplyDelay, timeout_reply: Reply, arguments: Vec<Bytes>) -> CommandResult {
    if !call.session.in_exec {
        let database = call.session.database;
        call.shared.blocked_keys.register(database, &keys, &call.session.client);
        call.session.key_wait = Some(KeyWait { database, keys, delay, timeout_reply: timeout_reply.clone(), arguments });
    }
    Ok(timeout_reply)
}

/// BLPOP and BRPOP key [key ...] timeout: [key, element] from the first non-empty list.
fn blocking_pop(call: &mut Call<'_>, end: End) -> CommandResult {
    let last = call.args.len() - 1;
    let delay = parse_timeout(call, &call.args[last].clone())?;
    let pop = MultiPop { keys: call.args[1..last].to_vec(), end, count: 1 };
    match multi_pop(call, &pop)? {
        Some((key, mut elements)) => Ok(Reply::Array(vec![Reply::Bulk(key), Reply::Bulk(elements.pop().expect("one element popped"))])),
        None => block(call, pop.keys, delay, Reply::NullArray),
    }
}

pub fn blpop(call: &mut Call<'_>) -> CommandResult {
    blocking_pop(call, End::Head)
}

pub fn brpop(call: &mut Call<'_>) -> CommandResult {
    blocking_pop(call, End::Tail)
}

/// BLMPOP timeout numkeys key [key ...] LEFT|RIGHT [COUNT count].
pub fn blmpop(call: &mut Call<'_>) -> CommandResult {
    let pop = parse_multi_pop(&call.args[2..], parse_end)?;
    let delay = parse_timeout(call, &call.args[1].clone())?;
    match multi_pop(call, &pop)? {
        Some(popped) => Ok(key_and_elements(popped)),
        None => block(call, pop.keys, delay, Reply::NullArray),
    }
}

/// BLMOVE and BRPOPLPUSH: LMOVE once the source has elements (a missing source is what
/// `move_element` answers nil for).
fn blocking_move(call: &mut Call<'_>, from: End, to: End, timeout: &Bytes) -> CommandResult {
    let delay = parse_timeout(call, timeout)?;
    match move_element(call, from, to)? {
        Reply::Null => block(call, vec![call.args[1].clone()], delay, Reply::Null),
        moved => Ok(moved),
    }
}

pub fn blmove(call: &mut Call<'_>) -> CommandResult {
    let (from, to) = (parse_end(&call.args[3])?, parse_end(&call.args[4])?);
    let timeout = call.args[5].clone();
    blocking_move(call, from, to, &timeout)
}

pub fn brpoplpush(call: &mut Call<'_>) -> CommandResult {
    let timeout = call.args[3].clone();
    blocking_move(call, End::Tail, End::Head, &timeout)
}
