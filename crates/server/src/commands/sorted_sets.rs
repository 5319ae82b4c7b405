//! Sorted-set commands: ZADD ZINCRBY ZREM ZCARD ZSCORE ZMSCORE ZCOUNT ZLEXCOUNT ZRANK ZREVRANK
//! ZRANGE ZRANGESTORE ZRANGEBYSCORE ZREVRANGEBYSCORE ZRANGEBYLEX ZREVRANGEBYLEX ZREVRANGE
//! ZREMRANGEBYRANK ZREMRANGEBYSCORE ZREMRANGEBYLEX ZPOPMIN ZPOPMAX ZMPOP ZRANDMEMBER ZSCAN ZUNION
//! ZINTER ZDIFF ZUNIONSTORE ZINTERSTORE ZDIFFSTORE ZINTERCARD and the blocking BZPOPMIN BZPOPMAX
//! BZMPOP, with Redis 7.0's replies, errors (checked in its order) and keyspace events.
//!
//! A sorted set is a hash of member → score plus, once bucketed, an order index
//! (`crate::sorted_set_layout`): a write, a rank or the ends of a range cost about log2(n)
//! chunk reads, and a range reads only the members it answers. A small set's record keeps its
//! members in Redis's order, so ZSCAN and ZRANDMEMBER of it answer as Redis's listpack does.
//! Writes keep the key's expiry; the STORE commands replace the destination, expiry included.

use std::cmp::Ordering;
use std::collections::HashMap;

use bytes::Bytes;
use hybridkv_resp::{format_double, ProtocolVersion, Reply};

use super::hashes::{limits as hash_limits, random_command, replace_key, scan_fields};
use super::lists::{block, parse_multi_pop, parse_timeout, MultiPop};
use super::sorted_set_ranges::{clamp_ranks, is_c_space, parse_range, select, Limit, Range, RangeKind, NO_LIMIT};
use super::{is, parse_integer, NOT_FLOAT, SYNTAX_ERROR};
use crate::command::{fail, Call, CommandError, CommandResult};
use crate::hash_layout::OpenHash;
use crate::long_double::parse_c_double;
use crate::keyspace_events::{GENERIC, ZSET};
use crate::list_layout::ListLimits;
use crate::sorted_set_layout::{by_score_then_member, order_index_limits, scored, OpenSortedSet, Scored};
use crate::values::{decode_score, encode_score, type_name_of, Collection};

fn order_limits(call: &Call<'_>) -> ListLimits {
    order_index_limits(call.namespace.config().value_bytes_max, call.store.parts_per_key_max())
}

pub(super) fn open(call: &mut Call<'_>, key: &Bytes) -> Result<Option<OpenSortedSet>, CommandError> {
    let limits = order_limits(call);
    OpenSortedSet::open(call.store, key, limits)
}

/// `open`, or the set an earlier command of a pipelined group kept open; the caller ends with
/// `save_or_keep_sorted` on every path that does not fail (a kept set holds earlier changes).
fn open_kept(call: &mut Call<'_>, key: &Bytes) -> Result<Option<OpenSortedSet>, CommandError> {
    let limits = order_limits(call);
    OpenSortedSet::open_kept(call.store, key, limits)
}

fn save_sorted(call: &mut Call<'_>, set: OpenSortedSet) -> Result<(), CommandError> {
    let limits = hash_limits(call);
    set.save(call.store, &limits, call.shared.watches.any())
}

/// `save_sorted`, or kept open for the next command of a pipelined group on its key
/// (`OpenSortedSet::save_or_keep`).
fn save_or_keep_sorted(call: &mut Call<'_>, set: OpenSortedSet) -> Result<(), CommandError> {
    let limits = hash_limits(call);
    set.save_or_keep(call.store, &limits, call.shared.watches.any())
}

/// A score as Redis's getDoubleFromObject reads it: the whole text is a float (no leading space),
/// not NaN, and neither overflows to infinity nor underflows to zero.
pub(super) fn parse_score(text: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(text).ok()?;
    if text.starts_with(is_c_space) {
        return None;
    }
    let parsed = parse_c_double(text)?;
    (!parsed.value.is_nan() && !parsed.out_of_range).then_some(parsed.value)
}

pub(super) fn parse_score_or_reply(text: &[u8], error: &'static str) -> Result<f64, CommandError> {
    parse_score(text).map_or_else(|| fail(error), Ok)
}

/// A sorted set stays a listpack in Redis 7.0 while it has at most this many members
/// (zset-max-listpack-entries)…
const LISTPACK_MEMBERS_MAX: usize = 128;
/// …of at most this many bytes each (zset-max-listpack-value).
const LISTPACK_MEMBER_BYTES_MAX: usize = 64;
/// Integral scores up to this magnitude a listpack stores as integers (Redis's double2ll).
const LISTPACK_INTEGER_SCORE_MAX: f64 = (i64::MAX / 2) as f64;

/// A score as ZSCAN lists it: the text the set holds in Redis, which is an integer's for an
/// integral score in a listpack (d2string), and `%.17g` otherwise.
pub(super) fn scanned_score_text(score: f64, in_listpack: bool) -> String {
    if in_listpack && score.fract() == 0.0 && score.abs() <= LISTPACK_INTEGER_SCORE_MAX {
        return (score as i64).to_string();
    }
    format_double(score)
}

/// Whether Redis 7.0 keeps a sorted set of `members` members, the longest of `member_bytes`, as
/// a listpack (OBJECT ENCODING, ZSCAN's score texts).
pub(super) fn fits_listpack(members: u64, member_bytes: usize) -> bool {
    members <= LISTPACK_MEMBERS_MAX as u64 && member_bytes <= LISTPACK_MEMBER_BYTES_MAX
}

fn score_reply(score: f64) -> Reply {
    Reply::Double(score)
}

/// Members, with their scores when asked: flat pairs in RESP2, [member, score] arrays in RESP3.
fn members_reply(call: &Call<'_>, members: Vec<Scored>, with_scores: bool) -> Reply {
    match (with_scores, call.session.protocol) {
        (false, _) => Reply::Array(members.into_iter().map(|(member, _)| Reply::Bulk(member)).collect()),
        (true, ProtocolVersion::Resp2) => flat_pairs(members),
        (true, _) => nested_pairs(members),
    }
}

/// [member, score, member, score, ...]
fn flat_pairs(members: Vec<Scored>) -> Reply {
    Reply::Array(members.into_iter().flat_map(|(member, score)| [Reply::Bulk(member), score_reply(score)]).collect())
}

/// [[member, score], ...]
fn nested_pairs(members: Vec<Scored>) -> Reply {
    Reply::Array(members.into_iter().map(|(member, score)| Reply::Array(vec![Reply::Bulk(member), score_reply(score)])).collect())
}

/// ZADD's options (GEOADD's NX, XX and CH too).
#[derive(Default)]
pub(super) struct AddOptions {
    pub only_new: bool,
    pub only_existing: bool,
    only_greater: bool,
    only_less: bool,
    count_changed: bool,
    increment: bool,
}

/// ZADD's options.
const ZADD_OPTIONS: &[&str] = &["NX", "XX", "GT", "LT", "CH", "INCR"];
/// GEOADD's.
pub(super) const GEOADD_OPTIONS: &[&str] = &["NX", "XX", "CH"];

/// The options among `accepted` from the third argument on, and where what follows them starts.
pub(super) fn parse_add_options(args: &[Bytes], accepted: &[&str]) -> (AddOptions, usize) {
    let mut options = AddOptions::default();
    let mut at = 2;
    while let Some(&name) = args.get(at).and_then(|word| accepted.iter().find(|name| is(word, name))) {
        let flag = match name {
            "NX" => &mut options.only_new,
            "XX" => &mut options.only_existing,
            "GT" => &mut options.only_greater,
            "LT" => &mut options.only_less,
            "CH" => &mut options.count_changed,
            "INCR" => &mut options.increment,
            _ => unreachable!("an option of ZADD_OPTIONS"),
        };
        *flag = true;
        at += 1;
    }
    (options, at)
}

fn check_add_options(options: &AddOptions, pairs: usize) -> Result<(), CommandError> {
    if options.only_new && options.only_existing {
        return fail("ERR XX and NX options at the same time are not compatible");
    }
    if (options.only_new && (options.only_greater || options.only_less)) || (options.only_greater && options.only_less) {
        return fail("ERR GT, LT, and/or NX options at the same time are not compatible");
    }
    if options.increment && pairs > 1 {
        return fail("ERR INCR option supports a single increment-element pair");
    }
    Ok(())
}

/// What adding one member did.
struct AddCounts {
    added: i64,
    updated: i64,
    /// Members not skipped by NX, XX, GT or LT, and the last one's score (INCR's reply).
    processed: i64,
    score: f64,
}

/// ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...] and ZINCRBY key
/// increment member (ZADD INCR of one pair): Redis's checks in its order (options, then every
/// score, then the key's type). A set gaining or changing nothing is not rewritten.
fn add_members(call: &mut Call<'_>, zincrby: bool) -> CommandResult {
    let args = call.args;
    let (options, first_pair) = if zincrby { (AddOptions { increment: true, ..AddOptions::default() }, 2) } else { parse_add_options(args, ZADD_OPTIONS) };
    let pairs = &args[first_pair..];
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return fail(SYNTAX_ERROR);
    }
    check_add_options(&options, pairs.len() / 2)?;
    let members = pairs.chunks(2).map(|pair| Ok((pair[1].clone(), parse_score_or_reply(&pair[0], NOT_FLOAT)?))).collect::<Result<Vec<Scored>, CommandError>>()?;
    add_scored(call, &options, members)
}

/// Adds or updates `members` (scores checked) of the sorted set at the command's key as ZADD
/// with `options` does (GEOADD's end too); event `zadd` (`zincr` for INCR). Answers as ZADD.
pub(super) fn add_scored(call: &mut Call<'_>, options: &AddOptions, members: Vec<Scored>) -> CommandResult {
    let key = call.args[1].clone();
    let mut counts = AddCounts { added: 0, updated: 0, processed: 0, score: 0.0 };
    let limits = order_limits(call);
    let set = match OpenSortedSet::open_kept(call.store, &key, limits)? {
        Some(set) => Some(set),
        None if options.only_existing => None,
        None => Some(OpenSortedSet::with_members(&key, Vec::new(), limits)),
    };
    if let Some(mut set) = set {
        for (member, score) in members {
            add_member(call, &mut set, options, member, score, &mut counts)?;
        }
        // Kept open (or saved) even when this command changed nothing: a set an earlier
        // command of the group kept holds that command's changes.
        save_or_keep_sorted(call, set)?;
        if counts.added + counts.updated > 0 {
            call.notify(ZSET, if options.increment { "zincr" } else { "zadd" }, &key);
        }
    }
    Ok(match (options.increment, counts.processed) {
        (true, 0) => Reply::Null,
        (true, _) => score_reply(counts.score),
        (false, _) => Reply::Integer(if options.count_changed { counts.added + counts.updated } else { counts.added }),
    })
}

/// Redis's zsetAdd for one member.
fn add_member(call: &mut Call<'_>, set: &mut OpenSortedSet, options: &AddOptions, member: Bytes, score: f64, counts: &mut AddCounts) -> Result<(), CommandError> {
    let Some(current) = set.score(call.store, &member)? else {
        if !options.only_existing {
            set.set_score(call.store, member, score)?;
            (counts.added, counts.processed, counts.score) = (counts.added + 1, counts.processed + 1, score);
        }
        return Ok(());
    };
    if options.only_new {
        return Ok(());
    }
    let score = if options.increment { current + score } else { score };
    if score.is_nan() {
        return fail("ERR resulting score is not a number (NaN)");
    }
    if (options.only_less && score >= current) || (options.only_greater && score <= current) {
        return Ok(());
    }
    (counts.processed, counts.score) = (counts.processed + 1, score);
    if score != current {
        set.set_score(call.store, member, score)?;
        counts.updated += 1;
    }
    Ok(())
}

pub fn zadd(call: &mut Call<'_>) -> CommandResult {
    add_members(call, false)
}

pub fn zincrby(call: &mut Call<'_>) -> CommandResult {
    add_members(call, true)
}

/// ZREM key member [member ...]: how many were removed; events `zrem`, then `del` when the set
/// emptied.
pub fn zrem(call: &mut Call<'_>) -> CommandResult {
    let key = call.args[1].clone();
    let Some(mut set) = open_kept(call, &key)? else { return Ok(Reply::Integer(0)) };
    let mut removed = 0;
    for member in &call.args[2..] {
        removed += i64::from(set.remove(call.store, member)?);
    }
    if removed == 0 {
        save_or_keep_sorted(call, set)?;
        return Ok(Reply::Integer(0));
    }
    save_and_announce(call, &key, set, "zrem")?;
    Ok(Reply::Integer(removed))
}

pub fn zcard(call: &mut Call<'_>) -> CommandResult {
    let key = call.args[1].clone();
    Ok(Reply::Integer(open(call, &key)?.map_or(0, |set| set.len() as i64)))
}

pub(super) fn score_of(call: &mut Call<'_>, set: &mut Option<OpenSortedSet>, member: &[u8]) -> Result<Option<f64>, CommandError> {
    match set {
        Some(set) => set.score(call.store, member),
        None => Ok(None),
    }
}

pub fn zscore(call: &mut Call<'_>) -> CommandResult {
    let key = call.args[1].clone();
    let mut set = open(call, &key)?;
    let member = call.args[2].clone();
    Ok(score_of(call, &mut set, &member)?.map_or(Reply::Null, score_reply))
}

pub fn zmscore(call: &mut Call<'_>) -> CommandResult {
    let key = call.args[1].clone();
    let mut set = open(call, &key)?;
    let args = call.args;
    let mut scores = Vec::with_capacity(args.len() - 2);
    for member in &args[2..] {
        scores.push(score_of(call, &mut set, member)?.map_or(Reply::Null, score_reply));
    }
    Ok(Reply::Array(scores))
}

/// ZRANK and ZREVRANK key member: the member's place in Redis's order (from the highest for
/// REV), nil when the key or the member is missing.
fn rank(call: &mut Call<'_>, reverse: bool) -> CommandResult {
    let key = call.args[1].clone();
    let mut set = open(call, &key)?;
    let member = call.args[2].clone();
    let Some(score) = score_of(call, &mut set, &member)? else { return Ok(Reply::Null) };
    let mut set = set.expect("a score was found in it");
    let target = (member, score);
    let before = set.partition_point(call.store, |other| by_score_then_member(other, &target) != Ordering::Less)? as i64;
    Ok(Reply::Integer(if reverse { set.len() as i64 - 1 - before } else { before }))
}

pub fn zrank(call: &mut Call<'_>) -> CommandResult {
    rank(call, false)
}

pub fn zrevrank(call: &mut Call<'_>) -> CommandResult {
    rank(call, true)
}

/// What a ZRANGE-family command asks for.
struct RangeQuery {
    range: Range,
    reverse: bool,
    limit: Limit,
    with_scores: bool,
}

/// The ZRANGE family's options after the key and its two ends, in Redis 7.0's zrangeGenericCommand
/// order: options first (BYSCORE, BYLEX and REV only where the command's name does not fix
/// them, WITHSCORES not for ZRANGESTORE), then the conflicts, then the two ends.
fn parse_range_query(args: &[Bytes], mut kind: Option<RangeKind>, mut reverse: Option<bool>, store: bool) -> Result<RangeQuery, CommandError> {
    let (mut with_scores, mut limit) = (false, None);
    let mut at = 3;
    while let Some(word) = args.get(at) {
        let left = args.len() - at - 1;
        match () {
            _ if !store && is(word, "WITHSCORES") => with_scores = true,
            _ if is(word, "LIMIT") && left >= 2 => {
                limit = Some(Limit { offset: parse_integer(&args[at + 1])?, count: parse_integer(&args[at + 2])? });
                at += 2;
            }
            _ if reverse.is_none() && is(word, "REV") => reverse = Some(true),
            _ if kind.is_none() && is(word, "BYLEX") => kind = Some(RangeKind::Lex),
            _ if kind.is_none() && is(word, "BYSCORE") => kind = Some(RangeKind::Score),
            _ => return fail(SYNTAX_ERROR),
        }
        at += 1;
    }
    let (kind, reverse) = (kind.unwrap_or(RangeKind::Rank), reverse.unwrap_or(false));
    if limit.is_some_and(|limit| limit.count != -1) && kind == RangeKind::Rank {
        return fail("ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX");
    }
    if with_scores && kind == RangeKind::Lex {
        return fail("ERR syntax error, WITHSCORES not supported in combination with BYLEX");
    }
    // A reversed score or lex range is given as max, min.
    let (min, max) = if reverse && kind != RangeKind::Rank { (&args[2], &args[1]) } else { (&args[1], &args[2]) };
    let range = parse_range(kind, min, max)?;
    Ok(RangeQuery { range, reverse, limit: limit.unwrap_or(NO_LIMIT), with_scores })
}

/// The members a range query selects from the set at `key` (none when it is missing).
fn range_members(call: &mut Call<'_>, key: &Bytes, query: &RangeQuery) -> Result<Vec<Scored>, CommandError> {
    let Some(mut set) = open(call, key)? else { return Ok(Vec::new()) };
    selected(call, &mut set, &query.range, query.reverse, query.limit)
}

/// The members a range selects, in reply order. A set in one record is walked as Redis walks a
/// listpack (`select`); a bucketed set's range ends are found by binary search over its order
/// index (as Redis's skiplist finds them), then only the members between are read.
fn selected(call: &mut Call<'_>, set: &mut OpenSortedSet, range: &Range, reverse: bool, limit: Limit) -> Result<Vec<Scored>, CommandError> {
    if set.is_one_record() {
        let members = set.members_at(call.store, 0..set.len())?;
        return Ok(select(&members, range, reverse, limit).into_iter().map(|at| members[at].clone()).collect());
    }
    let Some(ranks) = searched_ranks(call, set, range, reverse, limit)? else { return Ok(Vec::new()) };
    let mut members = set.members_at(call.store, ranks)?;
    if reverse {
        members.reverse();
    }
    Ok(members)
}

/// The members with scores from `min` up to `max` (excluded), in Redis's order (a GEO cell).
pub(super) fn members_scored_from_up_to(call: &mut Call<'_>, set: &mut OpenSortedSet, min: f64, max: f64) -> Result<Vec<Scored>, CommandError> {
    selected(call, set, &Range::from_up_to(min, max), false, NO_LIMIT)
}

/// The ranks (ascending) a range selects from a bucketed set; None when none.
fn searched_ranks(call: &mut Call<'_>, set: &mut OpenSortedSet, range: &Range, reverse: bool, limit: Limit) -> Result<Option<std::ops::Range<u64>>, CommandError> {
    let len = set.len();
    if let Range::Rank(start, stop) = *range {
        let Some((start, stop)) = clamp_ranks(start, stop, len as i64) else { return Ok(None) };
        let (start, end) = (start as u64, stop as u64 + 1);
        return Ok(Some(if reverse { len - end..len - start } else { start..end }));
    }
    if range.is_empty() || limit.offset < 0 {
        return Ok(None);
    }
    let (low, high) = range_ends(call, set, range)?;
    let offset = limit.offset as u64;
    let Some(span) = high.checked_sub(low).filter(|&span| offset < span) else { return Ok(None) };
    let count = u64::try_from(limit.count).unwrap_or(u64::MAX).min(span - offset);
    Ok(Some(if reverse { high - offset - count..high - offset } else { low + offset..low + offset + count }))
}

/// The first rank at or past a score or lex range's low end, and the first past its high end.
fn range_ends(call: &mut Call<'_>, set: &mut OpenSortedSet, range: &Range) -> Result<(u64, u64), CommandError> {
    let low = set.partition_point(call.store, |member| range.past_min(member))?;
    let high = set.partition_point(call.store, |member| !range.before_max(member))?;
    Ok((low, high))
}

/// The reading ZRANGE forms: key, the two ends, then options (`kind` and `reverse` fixed by the
/// older commands' names).
fn range_command(call: &mut Call<'_>, kind: Option<RangeKind>, reverse: Option<bool>) -> CommandResult {
    let query = parse_range_query(&call.args[1..], kind, reverse, false)?;
    let key = call.args[1].clone();
    let members = range_members(call, &key, &query)?;
    Ok(members_reply(call, members, query.with_scores))
}

pub fn zrange(call: &mut Call<'_>) -> CommandResult {
    range_command(call, None, None)
}

pub fn zrevrange(call: &mut Call<'_>) -> CommandResult {
    range_command(call, Some(RangeKind::Rank), Some(true))
}

pub fn zrangebyscore(call: &mut Call<'_>) -> CommandResult {
    range_command(call, Some(RangeKind::Score), Some(false))
}

pub fn zrevrangebyscore(call: &mut Call<'_>) -> CommandResult {
    range_command(call, Some(RangeKind::Score), Some(true))
}

pub fn zrangebylex(call: &mut Call<'_>) -> CommandResult {
    range_command(call, Some(RangeKind::Lex), Some(false))
}

pub fn zrevrangebylex(call: &mut Call<'_>) -> CommandResult {
    range_command(call, Some(RangeKind::Lex), Some(true))
}

/// ZRANGESTORE dst src min max [BYSCORE|BYLEX] [REV] [LIMIT offset count]: the selected members
/// replace `dst` (deleted when there are none); answers how many.
pub fn zrangestore(call: &mut Call<'_>) -> CommandResult {
    let query = parse_range_query(&call.args[2..], None, None, true)?;
    let (target, source) = (call.args[1].clone(), call.args[2].clone());
    let members = range_members(call, &source, &query)?;
    store_members(call, &target, members, "zrangestore")
}

/// Writes `members` (distinct) as the sorted set at `target` in place of whatever it held
/// (`replace_key`).
pub(super) fn store_members(call: &mut Call<'_>, target: &Bytes, members: Vec<Scored>, event: &'static str) -> CommandResult {
    replace_key(call, target, members.len(), ZSET, event, |call| restore(call, target, members))
}

/// Writes `members` (distinct, at least one) as a new sorted set at `target`, which is absent,
/// without expiry (RESTORE and the STORE commands).
pub(super) fn restore(call: &mut Call<'_>, target: &Bytes, members: Vec<Scored>) -> Result<(), CommandError> {
    let set = OpenSortedSet::with_members(target, members, order_limits(call));
    save_sorted(call, set)
}

/// ZCOUNT key min max: the members with scores in the range.
pub fn zcount(call: &mut Call<'_>) -> CommandResult {
    count_in_range(call, RangeKind::Score)
}

/// ZLEXCOUNT key min max: the members a BYLEX range selects.
pub fn zlexcount(call: &mut Call<'_>) -> CommandResult {
    count_in_range(call, RangeKind::Lex)
}

/// ZCOUNT and ZLEXCOUNT: a set in one record counts what `select` walks; a bucketed one the
/// ranks between the range's ends.
fn count_in_range(call: &mut Call<'_>, kind: RangeKind) -> CommandResult {
    let range = parse_range(kind, &call.args[2], &call.args[3])?;
    let key = call.args[1].clone();
    let Some(mut set) = open(call, &key)? else { return Ok(Reply::Integer(0)) };
    if set.is_one_record() || range.is_empty() {
        return Ok(Reply::Integer(selected(call, &mut set, &range, false, NO_LIMIT)?.len() as i64));
    }
    let (low, high) = range_ends(call, &mut set, &range)?;
    Ok(Reply::Integer(high.saturating_sub(low) as i64))
}

/// ZREMRANGEBYRANK, ZREMRANGEBYSCORE and ZREMRANGEBYLEX key min max: removes what the range
/// selects; answers how many. Events: `event`, then `del` when the set emptied.
fn remove_range(call: &mut Call<'_>, kind: RangeKind, event: &'static str) -> CommandResult {
    let range = parse_range(kind, &call.args[2], &call.args[3])?;
    let key = call.args[1].clone();
    let Some(mut set) = open_kept(call, &key)? else { return Ok(Reply::Integer(0)) };
    let removed = if set.is_one_record() {
        let doomed = selected(call, &mut set, &range, false, NO_LIMIT)?;
        for (member, _) in &doomed {
            set.remove(call.store, member)?;
        }
        doomed.len()
    } else {
        match searched_ranks(call, &mut set, &range, false, NO_LIMIT)? {
            Some(ranks) => set.remove_ranks(call.store, ranks)?.len(),
            None => 0,
        }
    };
    if removed == 0 {
        save_or_keep_sorted(call, set)?;
        return Ok(Reply::Integer(0));
    }
    save_and_announce(call, &key, set, event)?;
    Ok(Reply::Integer(removed as i64))
}

/// Saves a set that lost members (or keeps it open in a pipelined group:
/// `save_or_keep_sorted`), announcing `event` and, when it emptied, `del`.
fn save_and_announce(call: &mut Call<'_>, key: &Bytes, set: OpenSortedSet, event: &'static str) -> Result<(), CommandError> {
    let emptied = set.len() == 0;
    save_or_keep_sorted(call, set)?;
    call.notify(ZSET, event, key);
    if emptied {
        call.notify(GENERIC, "del", key);
    }
    Ok(())
}

pub fn zremrangebyrank(call: &mut Call<'_>) -> CommandResult {
    remove_range(call, RangeKind::Rank, "zremrangebyrank")
}

pub fn zremrangebyscore(call: &mut Call<'_>) -> CommandResult {
    remove_range(call, RangeKind::Score, "zremrangebyscore")
}

pub fn zremrangebylex(call: &mut Call<'_>) -> CommandResult {
    remove_range(call, RangeKind::Lex, "zremrangebylex")
}

/// Which end a pop takes from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Extreme {
    Min,
    Max,
}

fn parse_extreme(word: &[u8]) -> Result<Extreme, CommandError> {
    match () {
        _ if is(word, "MIN") => Ok(Extreme::Min),
        _ if is(word, "MAX") => Ok(Extreme::Max),
        _ => fail(SYNTAX_ERROR),
    }
}

/// Pops up to `count` members from `extreme` of the set at `key` (which exists), lowest first
/// for MIN, highest first for MAX.
fn pop_members(call: &mut Call<'_>, key: &Bytes, mut set: OpenSortedSet, extreme: Extreme, count: u64) -> Result<Vec<Scored>, CommandError> {
    let (len, count) = (set.len(), count.min(set.len()));
    let ranks = if extreme == Extreme::Min { 0..count } else { len - count..len };
    let mut members = set.remove_ranks(call.store, ranks)?;
    if extreme == Extreme::Max {
        members.reverse();
    }
    save_and_announce(call, key, set, if extreme == Extreme::Min { "zpopmin" } else { "zpopmax" })?;
    Ok(members)
}

/// ZPOPMIN and ZPOPMAX key [count]: flat [member, score, ...]; in RESP3 with a count, [member,
/// score] pairs. A missing key answers an empty array.
fn pop_command(call: &mut Call<'_>, extreme: Extreme) -> CommandResult {
    if call.args.len() > 3 {
        return fail(SYNTAX_ERROR);
    }
    let count = match call.args.get(2) {
        Some(count) => Some(super::parse_integer_at_least(count, 0, "ERR value is out of range, must be positive")? as u64),
        None => None,
    };
    let key = call.args[1].clone();
    let Some(set) = open_kept(call, &key)? else { return Ok(Reply::Array(Vec::new())) };
    if count == Some(0) {
        // Put back: an earlier command of the group may have kept it with its changes.
        save_or_keep_sorted(call, set)?;
        return Ok(Reply::Array(Vec::new()));
    }
    let popped = pop_members(call, &key, set, extreme, count.unwrap_or(1))?;
    let nested = count.is_some() && call.session.protocol != ProtocolVersion::Resp2;
    Ok(if nested { nested_pairs(popped) } else { flat_pairs(popped) })
}

pub fn zpopmin(call: &mut Call<'_>) -> CommandResult {
    pop_command(call, Extreme::Min)
}

pub fn zpopmax(call: &mut Call<'_>) -> CommandResult {
    pop_command(call, Extreme::Max)
}

/// Pops from the first existing key of `pop` (WRONGTYPE when it is not a sorted set, as Redis
/// checks only up to the first key that exists): its key and the members.
fn multi_pop(call: &mut Call<'_>, pop: &MultiPop<Extreme>) -> Result<Option<(Bytes, Vec<Scored>)>, CommandError> {
    for key in &pop.keys {
        if let Some(set) = open(call, key)? {
            return Ok(Some((key.clone(), pop_members(call, key, set, pop.end, pop.count)?)));
        }
    }
    Ok(None)
}

/// ZMPOP's and BZMPOP's reply: [key, [[member, score], ...]].
fn key_and_members((key, members): (Bytes, Vec<Scored>)) -> Reply {
    Reply::Array(vec![Reply::Bulk(key), nested_pairs(members)])
}

/// ZMPOP numkeys key [key ...] MIN|MAX [COUNT count]: a null array when every key is missing.
pub fn zmpop(call: &mut Call<'_>) -> CommandResult {
    let pop = parse_multi_pop(&call.args[1..], parse_extreme)?;
    Ok(multi_pop(call, &pop)?.map_or(Reply::NullArray, key_and_members))
}

/// BZMPOP timeout numkeys key [key ...] MIN|MAX [COUNT count].
pub fn bzmpop(call: &mut Call<'_>) -> CommandResult {
    let pop = parse_multi_pop(&call.args[2..], parse_extreme)?;
    let delay = parse_timeout(call, &call.args[1].clone())?;
    match multi_pop(call, &pop)? {
        Some(popped) => Ok(key_and_members(popped)),
        None => block(call, pop.keys, delay, Reply::NullArray),
    }
}

/// BZPOPMIN and BZPOPMAX key [key ...] timeout: [key, member, score] from the first existing set.
fn blocking_pop(call: &mut Call<'_>, extreme: Extreme) -> CommandResult {
    let last = call.args.len() - 1;
    let delay = parse_timeout(call, &call.args[last].clone())?;
    let pop = MultiPop { keys: call.args[1..last].to_vec(), end: extreme, count: 1 };
    match multi_pop(call, &pop)? {
        Some((key, mut members)) => {
            let (member, score) = members.pop().expect("a set that exists has a member");
            Ok(Reply::Array(vec![Reply::Bulk(key), Reply::Bulk(member), score_reply(score)]))
        }
        None => block(call, pop.keys, delay, Reply::NullArray),
    }
}

pub fn bzpopmin(call: &mut Call<'_>) -> CommandResult {
    blocking_pop(call, Extreme::Min)
}

pub fn bzpopmax(call: &mut Call<'_>) -> CommandResult {
    blocking_pop(call, Extreme::Max)
}

/// ZRANDMEMBER key [count [WITHSCORES]], checked as HRANDFIELD is. Distinct picks are listed
/// from the highest, as Redis lists all of a set when the count covers it (its iterator walks
/// from the tail).
pub fn zrandmember(call: &mut Call<'_>) -> CommandResult {
    random_command(call, Collection::SortedSet, "WITHSCORES", |score| Ok(score_reply(decode_score(&score)?)), Some(highest_first))
}

fn highest_first(picks: &mut Vec<(Bytes, Bytes)>) -> Result<(), CommandError> {
    let mut members = scored(std::mem::take(picks))?;
    members.sort_unstable_by(|a, b| by_score_then_member(b, a));
    *picks = members.into_iter().map(|(member, score)| (member, encode_score(score))).collect();
    Ok(())
}

/// ZSCAN key cursor [MATCH pattern] [COUNT count]: members and their scores as text.
pub fn zscan(call: &mut Call<'_>) -> CommandResult {
    scan_fields(call, Collection::SortedSet)
}

/// How ZUNION and ZINTER combine a member's weighted scores.
#[derive(Clone, Copy)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

impl Aggregate {
    /// Redis's zunionInterAggregate: a sum that is NaN (inf plus -inf) is 0.
    fn combine(self, total: f64, value: f64) -> f64 {
        match self {
            Aggregate::Sum => {
                let sum = total + value;
                if sum.is_nan() { 0.0 } else { sum }
            }
            Aggregate::Min => if value < total { value } else { total },
            Aggregate::Max => if value > total { value } else { total },
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SetOperation {
    Union,
    Inter,
    Diff,
}

/// What ZUNION, ZINTER, ZDIFF, their STORE forms and ZINTERCARD were asked.
struct Combination {
    /// One per input key (1 unless WEIGHTS).
    weights: Vec<f64>,
    aggregate: Aggregate,
    with_scores: bool,
    /// ZINTERCARD's LIMIT (0: none).
    limit: usize,
}

/// One input: its members and scores (a set's members score 1), empty for a missing key.
fn read_input(call: &mut Call<'_>, key: &Bytes) -> Result<Vec<Scored>, CommandError> {
    let collection = match call.store.get(key)?.map(|value| type_name_of(&value.bytes)) {
        None => return Ok(Vec::new()),
        Some("zset") => Collection::SortedSet,
        Some("set") => Collection::Set,
        Some(_) => return fail(super::WRONGTYPE),
    };
    let Some(set) = OpenHash::open(call.store, key, collection)? else { return Ok(Vec::new()) };
    let fields = set.into_fields(call.store)?;
    Ok(match collection {
        Collection::SortedSet => scored(fields)?,
        _ => fields.into_iter().map(|(member, _)| (member, 1.0)).collect(),
    })
}

/// The arguments from numkeys on, in Redis 7.0's order: numkeys, every key's type, then the
/// options this command takes (WEIGHTS and AGGREGATE but not for ZDIFF or ZINTERCARD,
/// WITHSCORES only when not storing, LIMIT only for ZINTERCARD).
fn parse_combination(call: &mut Call<'_>, args: &[Bytes], operation: SetOperation, store: bool, cardinality: bool) -> Result<(Combination, Vec<Vec<Scored>>), CommandError> {
    let key_count = parse_integer(&args[0])?;
    if key_count < 1 {
        let command = String::from_utf8_lossy(&call.args[0]).to_ascii_lowercase();
        return fail(format!("ERR at least 1 input key is needed for '{command}' command"));
    }
    if key_count > args.len() as i64 - 1 {
        return fail(SYNTAX_ERROR);
    }
    let keys = &args[1..=key_count as usize];
    let inputs = keys.iter().map(|key| read_input(call, key)).collect::<Result<Vec<_>, _>>()?;
    let mut combination = Combination { weights: vec![1.0; keys.len()], aggregate: Aggregate::Sum, with_scores: false, limit: 0 };
    let options = &args[1 + key_count as usize..];
    let combines = operation != SetOperation::Diff && !cardinality;
    let mut at = 0;
    while let Some(word) = options.get(at) {
        let left = options.len() - at;
        if combines && left > keys.len() && is(word, "WEIGHTS") {
            for (weight, text) in combination.weights.iter_mut().zip(&options[at + 1..]) {
                *weight = parse_score_or_reply(text, "ERR weight value is not a float")?;
            }
            at += 1 + keys.len();
        } else if combines && left >= 2 && is(word, "AGGREGATE") {
            combination.aggregate = match &options[at + 1] {
                name if is(name, "SUM") => Aggregate::Sum,
                name if is(name, "MIN") => Aggregate::Min,
                name if is(name, "MAX") => Aggregate::Max,
                _ => return fail(SYNTAX_ERROR),
            };
            at += 2;
        } else if !store && !cardinality && is(word, "WITHSCORES") {
            combination.with_scores = true;
            at += 1;
        } else if cardinality && left >= 2 && is(word, "LIMIT") {
            let limit = super::parse_integer_at_least(&options[at + 1], 0, "ERR LIMIT can't be negative")?;
            combination.limit = usize::try_from(limit).unwrap_or(usize::MAX);
            at += 2;
        } else {
            return fail(SYNTAX_ERROR);
        }
    }
    Ok((combination, inputs))
}

/// The combined members, unordered (Redis's algorithms: inputs from the smallest for union and
/// intersection, a weighted score that is NaN counts 0).
fn combine(operation: SetOperation, combination: &Combination, inputs: Vec<Vec<Scored>>) -> Vec<Scored> {
    let mut weighted: Vec<(f64, Vec<Scored>)> = combination.weights.iter().copied().zip(inputs).collect();
    if operation != SetOperation::Diff {
        weighted.sort_by_key(|(_, members)| members.len());
    }
    let weigh = |weight: f64, score: f64| {
        let product = weight * score;
        if product.is_nan() { 0.0 } else { product }
    };
    let aggregate = combination.aggregate;
    match operation {
        SetOperation::Union => {
            let mut totals: HashMap<Bytes, f64> = HashMap::new();
            let mut order = Vec::new();
            for (weight, members) in weighted {
                for (member, score) in members {
                    let score = weigh(weight, score);
                    match totals.get_mut(&member) {
                        Some(total) => *total = aggregate.combine(*total, score),
                        None => {
                            totals.insert(member.clone(), score);
                            order.push(member);
                        }
                    }
                }
            }
            order.into_iter().map(|member| {
                let score = totals[&member];
                (member, score)
            }).collect()
        }
        SetOperation::Inter => {
            let mut sources = weighted.into_iter();
            let Some((first_weight, first)) = sources.next() else { return Vec::new() };
            let others: Vec<(f64, HashMap<Bytes, f64>)> = sources.map(|(weight, members)| (weight, members.into_iter().collect())).collect();
            let mut common = Vec::new();
            'members: for (member, score) in first {
                let mut total = weigh(first_weight, score);
                for (weight, scores) in &others {
                    let Some(score) = scores.get(&member) else { continue 'members };
                    total = aggregate.combine(total, score * weight);
                }
                common.push((member, total));
                if combination.limit != 0 && common.len() == combination.limit {
                    break;
                }
            }
            common
        }
        SetOperation::Diff => {
            let mut sources = weighted.into_iter().map(|(_, members)| members);
            let first = sources.next().unwrap_or_default();
            let others: Vec<std::collections::HashSet<Bytes>> = sources.map(|members| members.into_iter().map(|(member, _)| member).collect()).collect();
            first.into_iter().filter(|(member, _)| !others.iter().any(|other| other.contains(member))).collect()
        }
    }
}

/// ZUNION, ZINTER and ZDIFF numkeys key [key ...] [options]: the members in Redis's order.
fn combination_command(call: &mut Call<'_>, operation: SetOperation) -> CommandResult {
    let args = call.args;
    let (combination, inputs) = parse_combination(call, &args[1..], operation, false, false)?;
    let mut members = combine(operation, &combination, inputs);
    members.sort_unstable_by(by_score_then_member);
    Ok(members_reply(call, members, combination.with_scores))
}

/// The STORE forms: dst numkeys key [key ...] [options], answering the stored set's size.
fn combination_store(call: &mut Call<'_>, operation: SetOperation, event: &'static str) -> CommandResult {
    let (target, args) = (call.args[1].clone(), call.args);
    let (combination, inputs) = parse_combination(call, &args[2..], operation, true, false)?;
    let members = combine(operation, &combination, inputs);
    store_members(call, &target, members, event)
}

pub fn zunion(call: &mut Call<'_>) -> CommandResult {
    combination_command(call, SetOperation::Union)
}

pub fn zinter(call: &mut Call<'_>) -> CommandResult {
    combination_command(call, SetOperation::Inter)
}

pub fn zdiff(call: &mut Call<'_>) -> CommandResult {
    combination_command(call, SetOperation::Diff)
}

pub fn zunionstore(call: &mut Call<'_>) -> CommandResult {
    combination_store(call, SetOperation::Union, "zunionstore")
}

pub fn zinterstore(call: &mut Call<'_>) -> CommandResult {
    combination_store(call, SetOperation::Inter, "zinterstore")
}

pub fn zdiffstore(call: &mut Call<'_>) -> CommandResult {
    combination_store(call, SetOperation::Diff, "zdiffstore")
}

/// ZINTERCARD numkeys key [key ...] [LIMIT limit]: the intersection's size, counting stops at
/// the limit (0: none).
pub fn zintercard(call: &mut Call<'_>) -> CommandResult {
    let args = call.args;
    let (combination, inputs) = parse_combination(call, &args[1..], SetOperation::Inter, false, true)?;
    Ok(Reply::Integer(combine(SetOperation::Inter, &combination, inputs).len() as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_parse_as_redis_reads_a_double() {
        let hex = [("0x10", 16.0), ("-0X1.8p1", -3.0), ("0x1e5", 485.0), ("0x.8", 0.5), ("+0x1p-1074", f64::from_bits(1)), ("0x1p1023", 2f64.powi(1023))];
        for (text, value) in [("1.5", 1.5), ("-3", -3.0), ("+inf", f64::INFINITY), ("-INF", f64::NEG_INFINITY), ("1e308", 1e308), (".5", 0.5), ("0e500", 0.0)].into_iter().chain(hex) {
            assert_eq!(parse_score(text.as_bytes()), Some(value), "{text}");
        }
        for text in ["", " 1", "1 ", "nan", "1e400", "1e-400", "abc", "1e", "-", "0x", "0xg", "0x1p", "0x1p99999", "0x1p-99999", "0x 1", "0x1.8p1 "] {
            assert_eq!(parse_score(text.as_bytes()), None, "{text:?}");
        }
    }

    #[test]
    fn aggregates_follow_redis_for_nan_and_infinities() {
        assert_eq!(Aggregate::Sum.combine(f64::INFINITY, f64::NEG_INFINITY), 0.0);
        assert_eq!(Aggregate::Min.combine(1.0, f64::NAN), 1.0);
        assert_eq!(Aggregate::Max.combine(1.0, 2.0), 2.0);
    }
}
