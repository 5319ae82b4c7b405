//! Stream commands: XADD XLEN XRANGE XREVRANGE XDEL XTRIM XREAD XSETID, consumer groups
//! (XGROUP XREADGROUP XACK XPENDING XCLAIM XAUTOCLAIM) and XINFO, with Redis 7.0's replies,
//! errors (checked in its order) and keyspace events, over `crate::stream_layout`. XREAD and
//! XREADGROUP block as the list pops do. Writes keep the key's expiry.

use bytes::Bytes;
use hybridkv_engine::now_unix_ms;
use hybridkv_resp::{ProtocolVersion, Reply};

use super::lists::block_to_run;
use super::sorted_set_ranges::is_c_space;
use super::{is, parse_integer, subcommand_help, subcommand_syntax_error, unknown_subcommand, SYNTAX_ERROR, WRONGTYPE};
use crate::command::{fail, wrong_arity, Call, CommandError, CommandResult};
use crate::keyspace_events::STREAM;
use crate::list_layout::{End, ListLimits};
use crate::session::ReplyDelay;
use crate::stream_layout::{OpenStream, StreamEntry, Trim, TrimTo};
use crate::values::{ConsumerGroup, Pending, StreamId, STREAM_ID_BYTES};

const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";
const NO_SUCH_KEY: &str = "ERR no such key";
/// Longest ID text Redis parses (its buffer of 128 bytes with the terminating zero).
const ID_TEXT_BYTES_MAX: usize = 127;
/// Redis's stream-node-max-entries: an approximate trim without LIMIT removes at most 100
/// times this many entries.
const NODE_ENTRIES_MAX: u64 = 100;
/// XINFO STREAM FULL's entries when COUNT is not given.
const INFO_FULL_COUNT_DEFAULT: u64 = 10;

fn limits(call: &Call<'_>) -> ListLimits {
    ListLimits::new(call.namespace.config().value_bytes_max, call.store.parts_per_key_max() - 1).searched()
}

fn open(call: &mut Call<'_>, key: &Bytes) -> Result<Option<OpenStream>, CommandError> {
    let limits = limits(call);
    OpenStream::open(call.store, key, limits)
}

/// Redis's string2ull: an integer as string2ll reads it, else what C's strtoull reads whole
/// (leading spaces, a sign, leading zeros; a negative number wraps around).
fn parse_unsigned(text: &[u8]) -> Option<u64> {
    if let Ok(number) = parse_integer(text) {
        return u64::try_from(number).ok();
    }
    let text = std::str::from_utf8(text).ok()?.trim_start_matches(is_c_space);
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let magnitude: u64 = digits.parse().ok()?;
    Some(if negative { magnitude.wrapping_neg() } else { magnitude })
}

/// An ID as Redis's streamGenericParseIDOrReply reads it: `-`, `+` (unless `strict`),
/// `ms-seq`, or `ms` with `missing_seq`; with `auto_seq`, also `ms-*` (answered with a false
/// second value: the sequence is to be chosen).
fn parse_id_generic(text: &[u8], missing_seq: u64, strict: bool, auto_seq: bool) -> Result<(StreamId, bool), CommandError> {
    if text.len() > ID_TEXT_BYTES_MAX || strict && (text == b"-" || text == b"+") {
        return fail(INVALID_ID);
    }
    match text {
        b"-" => return Ok((StreamId::ZERO, true)),
        b"+" => return Ok((StreamId::MAX, true)),
        _ => {}
    }
    let (ms_text, seq_text) = match text.iter().position(|&byte| byte == b'-') {
        Some(dash) => (&text[..dash], Some(&text[dash + 1..])),
        None => (text, None),
    };
    let Some(ms) = parse_unsigned(ms_text) else { return fail(INVALID_ID) };
    let (seq, seq_given) = match seq_text {
        Some(b"*") if auto_seq => (0, false),
        Some(seq_text) => (parse_unsigned(seq_text).map_or_else(|| fail(INVALID_ID), Ok)?, true),
        None => (missing_seq, true),
    };
    Ok((StreamId { ms, seq }, seq_given))
}

/// An ID that cannot be `-` or `+` (XDEL, XSETID, MINID, XREAD); `ms` alone is `ms-0`.
fn parse_strict_id(text: &[u8]) -> Result<StreamId, CommandError> {
    Ok(parse_id_generic(text, 0, true, false)?.0)
}

/// A range end of XRANGE and XREVRANGE: `(` before an ID excludes it (answered as the next or
/// previous ID: `exclude_toward`); `ms` alone takes `missing_seq`.
fn parse_interval_id(text: &[u8], missing_seq: u64, exclude_toward: End) -> Result<StreamId, CommandError> {
    let Some(excluded) = text.strip_prefix(b"(").filter(|_| text.len() > 1) else { return Ok(parse_id_generic(text, missing_seq, false, false)?.0) };
    let id = parse_id_generic(excluded, missing_seq, true, false)?.0;
    match exclude_toward {
        End::Tail => id.next().map_or_else(|| fail("ERR invalid start ID for the interval"), Ok),
        End::Head => id.previous().map_or_else(|| fail("ERR invalid end ID for the interval"), Ok),
    }
}

fn id_reply(id: StreamId) -> Reply {
    Reply::Bulk(Bytes::from(id.to_string()))
}

fn entry_reply((id, fields): StreamEntry) -> Reply {
    Reply::Array(vec![id_reply(id), Reply::Array(fields.into_iter().map(Reply::Bulk).collect())])
}

fn entries_reply(entries: Vec<StreamEntry>) -> Reply {
    Reply::Array(entries.into_iter().map(entry_reply).collect())
}

/// The ID XADD asked for: a whole one, or milliseconds with the sequence to choose (`ms-*`).
#[derive(Clone, Copy)]
enum RequestedId {
    Whole(StreamId),
    Milliseconds(u64),
}

/// XADD's and XTRIM's options.
struct AddOrTrim {
    trim: Option<Trim>,
    no_mkstream: bool,
    /// None: `*`, or no ID at all (then the arguments are too few).
    id: Option<RequestedId>,
}

/// The value of MAXLEN or MINID after its optional `~` or `=`: its position, and whether it
/// is approximate.
fn trim_value_at(args: &[Bytes], option_at: usize) -> (usize, bool) {
    let more = args.len() - 1 - option_at;
    match args[option_at + 1].as_ref() {
        b"~" if more >= 2 => (option_at + 2, true),
        b"=" if more >= 2 => (option_at + 2, false),
        _ => (option_at + 1, false),
    }
}

/// Redis's streamParseAddOrTrimArgsOrReply: the options from argument 2 on, and the position
/// of XADD's ID (the arguments' end when there is none).
fn parse_add_or_trim(args: &[Bytes], xadd: bool) -> Result<(AddOrTrim, usize), CommandError> {
    let mut options = AddOrTrim { trim: None, no_mkstream: false, id: None };
    let (mut strategy, mut approximate, mut limit, mut limit_given) = (None, false, 0, false);
    let mut at = 2;
    while at < args.len() {
        let (option, more) = (&args[at], args.len() - 1 - at);
        if xadd && option.as_ref() == b"*" {
            break;
        } else if (is(option, "MAXLEN") || is(option, "MINID")) && more > 0 {
            if strategy.is_some() {
                return fail("ERR syntax error, MAXLEN and MINID options at the same time are not compatible");
            }
            let value_at;
            (value_at, approximate) = trim_value_at(args, at);
            strategy = Some(match is(option, "MAXLEN") {
                true => match parse_integer(&args[value_at])? {
                    length if length < 0 => return fail("ERR The MAXLEN argument must be >= 0."),
                    length => TrimTo::MaxLen(length as u64),
                },
                false => TrimTo::MinId(parse_strict_id(&args[value_at])?),
            });
            at = value_at;
        } else if is(option, "LIMIT") && more > 0 {
            limit = parse_integer(&args[at + 1])?;
            if limit < 0 {
                return fail("ERR The LIMIT argument must be >= 0.");
            }
            (limit_given, at) = (true, at + 1);
        } else if xadd && is(option, "NOMKSTREAM") {
            options.no_mkstream = true;
        } else if xadd {
            options.id = Some(match parse_id_generic(option, 0, true, true)? {
                (id, true) => RequestedId::Whole(id),
                (id, false) => RequestedId::Milliseconds(id.ms),
            });
            break;
        } else {
            return fail(SYNTAX_ERROR);
        }
        at += 1;
    }
    if limit != 0 && strategy.is_none() {
        return fail("ERR syntax error, LIMIT cannot be used without specifying a trimming strategy");
    }
    if !xadd && strategy.is_none() {
        return fail("ERR syntax error, XTRIM must be called with a trimming strategy");
    }
    if limit_given && !approximate {
        return fail("ERR syntax error, LIMIT cannot be used without the special ~ option");
    }
    let Some(to) = strategy else { return Ok((options, at)) };
    let limit = match (limit_given, approximate) {
        (true, _) => limit as u64,
        (false, true) => NODE_ENTRIES_MAX * NODE_ENTRIES_MAX,
        (false, false) => 0,
    };
    options.trim = Some(Trim { to, approximate, limit });
    Ok((options, at))
}

/// The ID of an entry added after `last` (not `StreamId::MAX`): `requested`, or for `*` the
/// time now (or just after `last`); None when it would not be greater than `last`.
fn new_id(last: StreamId, requested: Option<RequestedId>) -> Option<StreamId> {
    let id = match requested {
        None => {
            let now_ms = now_unix_ms();
            if now_ms > last.ms { StreamId { ms: now_ms, seq: 0 } } else { last.next()? }
        }
        Some(RequestedId::Whole(id)) => id,
        Some(RequestedId::Milliseconds(ms)) if ms == last.ms => last.next().filter(|next| next.ms == ms)?,
        Some(RequestedId::Milliseconds(ms)) => StreamId { ms, seq: 0 },
    };
    (id > last).then_some(id)
}

/// XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT count]] *|id field value [field value ...]
pub fn xadd(call: &mut Call<'_>) -> CommandResult {
    let args = call.args;
    let (options, id_at) = parse_add_or_trim(args, true)?;
    let fields = args.get(id_at + 1..).unwrap_or_default();
    if fields.len() < 2 || fields.len() % 2 == 1 {
        return Err(wrong_arity("xadd"));
    }
    if let Some(RequestedId::Whole(StreamId::ZERO)) = options.id {
        return fail("ERR The ID specified in XADD must be greater than 0-0");
    }
    let key = args[1].clone();
    let limits = limits(call);
    let kept = OpenStream::open_kept(call.store, &key, limits)?;
    let mut stream = match kept {
        Some(stream) => stream,
        None if options.no_mkstream => return Ok(Reply::Null),
        None => OpenStream::new(call.store, &key, limits)?,
    };
    if stream.root().last_id == StreamId::MAX {
        return fail("ERR The stream has exhausted the last possible ID, unable to add more items");
    }
    let Some(id) = new_id(stream.root().last_id, options.id) else {
        return fail("ERR The ID specified in XADD is equal or smaller than the target stream top item");
    };
    let entry_bytes = STREAM_ID_BYTES as u64 + fields.iter().map(|item| item.len() as u64 + 5).sum::<u64>();
    if entry_bytes > call.namespace.config().value_bytes_max / 2 {
        return fail("ERR Elements are too large to be stored");
    }
    stream.append(call.store, id, fields)?;
    let trimmed = match options.trim {
        Some(trim) => stream.trim(call.store, trim)?,
        None => 0,
    };
    stream.save_or_keep(call.store)?;
    call.notify(STREAM, "xadd", &key);
    if trimmed > 0 {
        call.notify(STREAM, "xtrim", &key);
    }
    Ok(id_reply(id))
}

/// XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT count]: the entries removed.
pub fn xtrim(call: &mut Call<'_>) -> CommandResult {
    let (options, end) = parse_add_or_trim(call.args, false)?;
    if end < call.args.len() {
        return fail(SYNTAX_ERROR);
    }
    let key = call.args[1].clone();
    let Some(mut stream) = open(call, &key)? else { return Ok(Reply::Integer(0)) };
    let trimmed = stream.trim(call.store, options.trim.expect("XTRIM has a strategy"))?;
    stream.save(call.store)?;
    if trimmed > 0 {
        call.notify(STREAM, "xtrim", &key);
    }
    Ok(Reply::Integer(trimmed as i64))
}

pub fn xlen(call: &mut Call<'_>) -> CommandResult {
    let key = call.args[1].clone();
    Ok(Reply::Integer(open(call, &key)?.map_or(0, |stream| stream.len() as i64)))
}

/// XRANGE key start end [COUNT count] and XREVRANGE key end start [COUNT count].
fn range(call: &mut Call<'_>, reverse: bool) -> CommandResult {
    let (start_text, end_text) = if reverse { (&call.args[3], &call.args[2]) } else { (&call.args[2], &call.args[3]) };
    let start = parse_interval_id(start_text, 0, End::Tail)?;
    let end = parse_interval_id(end_text, u64::MAX, End::Head)?;
    let mut count = None;
    let mut options = call.args[4..].iter();
    while let Some(option) = options.next() {
        match options.len() {
            1.. if is(option, "COUNT") => count = Some(parse_integer(options.next().expect("one more"))?.max(0) as u64),
            _ => return fail(SYNTAX_ERROR),
        }
    }
    let key = call.args[1].clone();
    let Some(mut stream) = open(call, &key)? else { return Ok(Reply::Array(Vec::new())) };
    match count {
        Some(0) => Ok(Reply::NullArray),
        count => Ok(entries_reply(stream.range(call.store, start, end, count.unwrap_or(0), reverse)?)),
    }
}

pub fn xrange(call: &mut Call<'_>) -> CommandResult {
    range(call, false)
}

pub fn xrevrange(call: &mut Call<'_>) -> CommandResult {
    range(call, true)
}

/// XDEL key id [id ...]: every ID is checked (once the key is found, as Redis 7.0 does) before
/// anything is deleted.
pub fn xdel(call: &mut Call<'_>) -> CommandResult {
    let key = call.args[1].clone();
    let Some(mut stream) = open(call, &key)? else { return Ok(Reply::Integer(0)) };
    let ids = call.args[2..].iter().map(|text| parse_strict_id(text)).collect::<Result<Vec<_>, _>>()?;
    let mut deleted = 0;
    for id in ids {
        deleted += i64::from(stream.delete(call.store, id)?);
    }
    stream.save(call.store)?;
    if deleted > 0 {
        call.notify(STREAM, "xdel", &key);
    }
    Ok(Reply::Integer(deleted))
}

/// XSETID key last-id [ENTRIESADDED entries-added] [MAXDELETEDID max-deleted-id].
pub fn xsetid(call: &mut Call<'_>) -> CommandResult {
    let id = parse_strict_id(&call.args[2])?;
    let (mut entries_added, mut max_deleted_id) = (None, StreamId::ZERO);
    let mut options = call.args[3..].chunks(2);
    for pair in options.by_ref() {
        match pair {
            [option, value] if is(option, "ENTRIESADDED") => match parse_integer(value)? {
                added if added < 0 => return fail("ERR entries_added must be positive"),
                added => entries_added = Some(added as u64),
            },
            [option, value] if is(option, "MAXDELETEDID") => {
                max_deleted_id = parse_strict_id(value)?;
                if id < max_deleted_id {
                    return fail("ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id");
                }
            }
            _ => return fail(SYNTAX_ERROR),
        }
    }
    let key = call.args[1].clone();
    let Some(mut stream) = open(call, &key)? else { return fail(NO_SUCH_KEY) };
    if let Some((last, _)) = stream.edge_entry(call.store, End::Tail)? {
        if id < last {
            return fail("ERR The ID specified in XSETID is smaller than the target stream top item");
        }
        if entries_added.is_some_and(|added| added < stream.len()) {
            return fail("ERR The entries_added specified in XSETID is smaller than the target stream length");
        }
    }
    let root = stream.root_mut();
    root.last_id = id;
    root.entries_added = entries_added.unwrap_or(root.entries_added);
    if max_deleted_id != StreamId::ZERO {
        root.max_deleted_id = max_deleted_id;
    }
    stream.save(call.store)?;
    call.notify(STREAM, "xsetid", &key);
    Ok(Reply::ok())
}

/// XREAD's and XREADGROUP's options and streams.
struct Read {
    count: u64,
    /// BLOCK's milliseconds (0: no limit).
    block_ms: Option<u64>,
    /// Where the keys start among the arguments; the IDs follow them.
    keys_at: usize,
    stream_count: usize,
    /// XREADGROUP's group and consumer.
    group: Option<(Bytes, Bytes)>,
    no_ack: bool,
}

/// The arguments of XREAD, or of XREADGROUP (`grouped`), as Redis's xreadCommand parses them.
fn parse_read(args: &[Bytes], grouped: bool) -> Result<Read, CommandError> {
    let mut read = Read { count: 0, block_ms: None, keys_at: 0, stream_count: 0, group: None, no_ack: false };
    let mut at = 1;
    while at < args.len() {
        let (option, more) = (&args[at], args.len() - 1 - at);
        if is(option, "BLOCK") && more > 0 {
            at += 1;
            read.block_ms = Some(match parse_integer(&args[at]).or_else(|_| fail("ERR timeout is not an integer or out of range"))? {
                timeout if timeout < 0 => return fail("ERR timeout is negative"),
                timeout if timeout.checked_add(now_unix_ms() as i64).is_none() => return fail("ERR timeout is out of range"),
                timeout => timeout as u64,
            });
        } else if is(option, "COUNT") && more > 0 {
            at += 1;
            read.count = parse_integer(&args[at])?.max(0) as u64;
        } else if is(option, "STREAMS") && more > 0 {
            if more % 2 != 0 {
                // Redis 7.0 names XREAD and `$` for XREADGROUP too.
                return fail("ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.");
            }
            (read.keys_at, read.stream_count) = (at + 1, more / 2);
            break;
        } else if is(option, "GROUP") && more >= 2 {
            if !grouped {
                return fail("ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.");
            }
            read.group = Some((args[at + 1].clone(), args[at + 2].clone()));
            at += 2;
        } else if is(option, "NOACK") {
            if !grouped {
                return fail("ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.");
            }
            read.no_ack = true;
        } else {
            return fail(SYNTAX_ERROR);
        }
        at += 1;
    }
    if read.keys_at == 0 {
        return fail(SYNTAX_ERROR);
    }
    if grouped && read.group.is_none() {
        return fail("ERR Missing GROUP option for XREADGROUP");
    }
    Ok(read)
}

/// Where a read starts in one stream: after an ID, or at a group's new entries (`>`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum ReadFrom {
    After(StreamId),
    New,
}

/// XREAD [COUNT count] [BLOCK milliseconds] STREAMS key [key ...] id [id ...]: the entries
/// after each ID (`$`: the stream's last ID now), per stream that has some; with BLOCK and
/// none, the client waits for a write to one of the keys (the command runs again with each `$`
/// replaced by the ID it stood for).
pub fn xread(call: &mut Call<'_>) -> CommandResult {
    read_streams(call, false)
}

/// XREADGROUP GROUP group consumer [COUNT count] [BLOCK milliseconds] [NOACK] STREAMS key
/// [key ...] id [id ...]: with `>`, the entries no consumer of the group was given yet (then
/// pending for this consumer unless NOACK); with an ID, this consumer's pending entries after
/// it (nil fields for an entry deleted since). BLOCK waits as XREAD's, for `>` only.
pub fn xreadgroup(call: &mut Call<'_>) -> CommandResult {
    read_streams(call, true)
}

fn read_streams(call: &mut Call<'_>, grouped: bool) -> CommandResult {
    let args = call.args;
    let read = parse_read(args, grouped)?;
    if read.block_ms.is_some() && call.session.in_script {
        return fail(format!("ERR {} command is not allowed with BLOCK option from scripts", String::from_utf8_lossy(&args[0])));
    }
    let keys = &args[read.keys_at..read.keys_at + read.stream_count];
    let id_texts = &args[read.keys_at + read.stream_count..];
    let mut streams = Vec::with_capacity(keys.len());
    let mut starts = Vec::with_capacity(keys.len());
    // Run again after a wake, the command answers as Redis serves a blocked client: XREAD
    // ignores a key that no longer holds a stream, XREADGROUP fails.
    let rerun = call.session.is_rerun_after_wake();
    for (key, id_text) in keys.iter().zip(id_texts) {
        let stream = match open(call, key) {
            Err(CommandError::Redis(text)) if rerun && text == WRONGTYPE => None,
            opened => opened?,
        };
        if let (Some((group, _)), true) = (&read.group, rerun) {
            let Some(stream) = &stream else { return fail("UNBLOCKED the stream key no longer exists") };
            if !stream.group_names().contains(group) {
                return fail("NOGROUP the consumer group this client was blocked on no longer exists");
            }
        }
        if let Some((group, _)) = &read.group {
            if !stream.as_ref().is_some_and(|stream| stream.group_names().contains(group)) {
                return fail(format!(
                    "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                    String::from_utf8_lossy(key),
                    String::from_utf8_lossy(group)
                ));
            }
        }
        starts.push(match (id_text.as_ref(), grouped) {
            (b"$", false) => ReadFrom::After(stream.as_ref().map_or(StreamId::ZERO, |stream| stream.root().last_id)),
            (b"$", true) => return fail("ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set."),
            (b">", false) => return fail("ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option."),
            (b">", true) => ReadFrom::New,
            _ => ReadFrom::After(parse_strict_id(id_text)?),
        });
        streams.push(stream);
    }
    let mut served = Vec::new();
    for ((key, stream), from) in keys.iter().zip(streams).zip(&starts) {
        let Some(stream) = stream else { continue };
        let entries = match &read.group {
            Some((group, consumer)) => read_group(call, key, stream, group, consumer, *from, &read)?,
            None => read_after(call, stream, *from, read.count)?,
        };
        if let Some(entries) = entries {
            served.push((Reply::Bulk(key.clone()), entries));
        }
    }
    if !served.is_empty() {
        return Ok(match call.session.protocol {
            ProtocolVersion::Resp3 => Reply::Map(served),
            _ => Reply::Array(served.into_iter().map(|(key, entries)| Reply::Array(vec![key, entries])).collect()),
        });
    }
    let Some(block_ms) = read.block_ms else { return Ok(Reply::NullArray) };
    let delay = call.session.retry_delay.take().unwrap_or_else(|| ReplyDelay::of_timeout_ms(block_ms));
    let mut arguments = args.to_vec();
    for (number, from) in starts.iter().enumerate() {
        if let ReadFrom::After(id) = from {
            arguments[read.keys_at + read.stream_count + number] = Bytes::from(id.to_string());
        }
    }
    block_to_run(call, keys.to_vec(), delay, Reply::NullArray, arguments)
}

/// XREAD's entries of one stream after `from`, when it has any.
fn read_after(call: &mut Call<'_>, mut stream: OpenStream, from: ReadFrom, count: u64) -> Result<Option<Reply>, CommandError> {
    let ReadFrom::After(after) = from else { unreachable!("XREAD reads after an ID") };
    let Some(start) = after.next() else { return Ok(None) };
    let entries = stream.range(call.store, start, StreamId::MAX, count, false)?;
    Ok((!entries.is_empty()).then(|| entries_reply(entries)))
}

/// XREADGROUP's entries of one stream: a consumer's pending entries after an ID (always
/// answered, even when none), or the group's new entries when the stream has some.
fn read_group(call: &mut Call<'_>, key: &Bytes, mut stream: OpenStream, name: &Bytes, consumer: &Bytes, from: ReadFrom, read: &Read) -> Result<Option<Reply>, CommandError> {
    let mut group = stream.take_group(call.store, name)?.expect("the group was checked");
    let has_new = match from {
        ReadFrom::New => stream.edge_entry(call.store, End::Tail)?.is_some_and(|(last, _)| last > group.last_id),
        ReadFrom::After(_) => true,
    };
    if !has_new {
        return Ok(None);
    }
    let now_ms = now_unix_ms();
    if group.see_consumer(consumer, now_ms) {
        call.notify(STREAM, "xgroup-createconsumer", key);
    }
    let reply = match from {
        ReadFrom::New => entries_reply(stream.deliver_new(call.store, &mut group, consumer, read.count, read.no_ack, now_ms)?),
        ReadFrom::After(after) => {
            let Some(start) = after.next() else { return Ok(Some(Reply::Array(Vec::new()))) };
            let delivered = stream.deliver_pending(call.store, &mut group, consumer, start, read.count, now_ms)?;
            let entry = |(id, fields): (StreamId, Option<Vec<Bytes>>)| match fields {
                Some(fields) => entry_reply((id, fields)),
                None => Reply::Array(vec![id_reply(id), Reply::NullArray]),
            };
            Reply::Array(delivered.into_iter().map(entry).collect())
        }
    };
    stream.put_group(name, group);
    stream.save(call.store)?;
    Ok(Some(reply))
}

/// A map reply of named fields (an array of names and values in RESP2).
fn fields_reply(fields: Vec<(&'static str, Reply)>) -> Reply {
    Reply::Map(fields.into_iter().map(|(name, value)| (Reply::bulk_text(name), value)).collect())
}

/// XINFO STREAM key [FULL [COUNT count]], GROUPS key, CONSUMERS key group, and HELP.
pub fn xinfo(call: &mut Call<'_>) -> CommandResult {
    let subcommand = call.args[1].clone();
    if is(&subcommand, "HELP") {
        return Ok(subcommand_help("xinfo"));
    }
    let key = call.args[2].clone();
    if is(&subcommand, "STREAM") {
        let full_count = match &call.args[3..] {
            [] => None,
            [full] if is(full, "FULL") => Some(INFO_FULL_COUNT_DEFAULT),
            [full, count_word, count] if is(full, "FULL") && is(count_word, "COUNT") => Some(match parse_integer(count)? {
                count if count < 0 => INFO_FULL_COUNT_DEFAULT,
                count => count as u64,
            }),
            _ => return Err(subcommand_syntax_error("xinfo", &subcommand)),
        };
        let Some(stream) = open(call, &key)? else { return fail(NO_SUCH_KEY) };
        return stream_info(call, stream, full_count);
    }
    if !is(&subcommand, "GROUPS") && !is(&subcommand, "CONSUMERS") {
        return Err(unknown_subcommand("xinfo", &subcommand));
    }
    let Some(mut stream) = open(call, &key)? else { return fail(NO_SUCH_KEY) };
    if is(&subcommand, "GROUPS") {
        let mut groups = Vec::new();
        for name in names_in_order(&stream) {
            let group = stream.group(call.store, &name)?.expect("a group the stream names").clone();
            groups.push(group_info(call, &mut stream, name, &group)?);
        }
        return Ok(Reply::Array(groups));
    }
    let name = call.args[3].clone();
    let Some(group) = stream.group(call.store, &name)? else { return Err(no_group(&key, &name)) };
    let now_ms = now_unix_ms() as i64;
    let consumers = group.consumers.iter().map(|consumer| {
        fields_reply(vec![
            ("name", Reply::Bulk(consumer.name.clone())),
            ("pending", Reply::Integer(group.pending_of(&consumer.name) as i64)),
            ("idle", Reply::Integer((now_ms - consumer.seen_ms as i64).max(0))),
        ])
    });
    Ok(Reply::Array(consumers.collect()))
}

/// The stream's groups by name, as Redis lists them.
fn names_in_order(stream: &OpenStream) -> Vec<Bytes> {
    let mut names = stream.group_names().to_vec();
    names.sort_unstable();
    names
}

/// XINFO GROUPS's map for one group.
fn group_info(call: &mut Call<'_>, stream: &mut OpenStream, name: Bytes, group: &ConsumerGroup) -> CommandResult {
    let lag = stream.lag(call.store, group)?;
    Ok(fields_reply(vec![
        ("name", Reply::Bulk(name)),
        ("consumers", Reply::Integer(group.consumers.len() as i64)),
        ("pending", Reply::Integer(group.pending.len() as i64)),
        ("last-delivered-id", id_reply(group.last_id)),
        ("entries-read", group.entries_read.map_or(Reply::Null, |read| Reply::Integer(read as i64))),
        ("lag", lag.map_or(Reply::Null, Reply::Integer)),
    ]))
}

/// XINFO STREAM's reply: the counters, the first and last entries or (FULL) the first
/// `full_count` entries (0: all) and every group with its pending entries and consumers.
fn stream_info(call: &mut Call<'_>, mut stream: OpenStream, full_count: Option<u64>) -> CommandResult {
    let root = stream.root().clone();
    let (chunks, records) = stream.records();
    let first = stream.edge_entry(call.store, End::Head)?;
    let mut fields = vec![
        ("length", Reply::Integer(root.length as i64)),
        ("radix-tree-keys", Reply::Integer(chunks as i64)),
        ("radix-tree-nodes", Reply::Integer(records as i64)),
        ("last-generated-id", id_reply(root.last_id)),
        ("max-deleted-entry-id", id_reply(root.max_deleted_id)),
        ("entries-added", Reply::Integer(root.entries_added as i64)),
        ("recorded-first-entry-id", id_reply(first.as_ref().map_or(StreamId::ZERO, |(id, _)| *id))),
    ];
    let Some(count) = full_count else {
        let last = stream.edge_entry(call.store, End::Tail)?;
        fields.push(("groups", Reply::Integer(root.groups.len() as i64)));
        fields.push(("first-entry", first.map_or(Reply::Null, entry_reply)));
        fields.push(("last-entry", last.map_or(Reply::Null, entry_reply)));
        return Ok(fields_reply(fields));
    };
    fields.push(("entries", entries_reply(stream.range(call.store, StreamId::ZERO, StreamId::MAX, count, false)?)));
    let mut groups = Vec::new();
    for name in names_in_order(&stream) {
        let group = stream.group(call.store, &name)?.expect("a group the stream names").clone();
        let lag = stream.lag(call.store, &group)?;
        groups.push(full_group_info(name, &group, lag, count));
    }
    fields.push(("groups", Reply::Array(groups)));
    Ok(fields_reply(fields))
}

/// XINFO STREAM FULL's map for one group: its counters, up to `count` pending entries (0: all)
/// and its consumers with theirs.
fn full_group_info(name: Bytes, group: &ConsumerGroup, lag: Option<i64>, count: u64) -> Reply {
    let limit = if count == 0 { usize::MAX } else { count as usize };
    let pending = group.pending.iter().take(limit).map(|(id, pending)| {
        Reply::Array(vec![id_reply(*id), Reply::Bulk(pending.consumer.clone()), Reply::Integer(pending.delivered_ms as i64), Reply::Integer(pending.deliveries as i64)])
    });
    let consumers = group.consumers.iter().map(|consumer| {
        let owned = group.pending.iter().filter(|(_, pending)| pending.consumer == consumer.name);
        let owned_pending = owned.clone().take(limit).map(|(id, pending)| Reply::Array(vec![id_reply(*id), Reply::Integer(pending.delivered_ms as i64), Reply::Integer(pending.deliveries as i64)]));
        fields_reply(vec![
            ("name", Reply::Bulk(consumer.name.clone())),
            ("seen-time", Reply::Integer(consumer.seen_ms as i64)),
            ("pel-count", Reply::Integer(owned.count() as i64)),
            ("pending", Reply::Array(owned_pending.collect())),
        ])
    });
    fields_reply(vec![
        ("name", Reply::Bulk(name)),
        ("last-delivered-id", id_reply(group.last_id)),
        ("entries-read", group.entries_read.map_or(Reply::Null, |read| Reply::Integer(read as i64))),
        ("lag", lag.map_or(Reply::Null, Reply::Integer)),
        ("pel-count", Reply::Integer(group.pending.len() as i64)),
        ("pending", Reply::Array(pending.collect())),
        ("consumers", Reply::Array(consumers.collect())),
    ])
}

/// `NOGROUP` for a command reading a group of a key (XPENDING, XCLAIM, XAUTOCLAIM).
fn no_key_or_group(key: &[u8], group: &[u8], context: &str) -> CommandError {
    CommandError::Redis(format!("NOGROUP No such key '{}' or consumer group '{}'{context}", String::from_utf8_lossy(key), String::from_utf8_lossy(group)).into())
}

/// `NOGROUP` for XGROUP and XINFO naming a group the stream lacks.
fn no_group(key: &[u8], group: &[u8]) -> CommandError {
    CommandError::Redis(format!("NOGROUP No such consumer group '{}' for key name '{}'", String::from_utf8_lossy(group), String::from_utf8_lossy(key)).into())
}

/// ENTRIESREAD's value: at least 0, or -1 for unknown.
fn parse_entries_read(text: &[u8]) -> Result<Option<u64>, CommandError> {
    match parse_integer(text)? {
        -1 => Ok(None),
        read if read < 0 => fail("ERR value for ENTRIESREAD must be positive or -1"),
        read => Ok(Some(read as u64)),
    }
}

/// XGROUP CREATE key group id|$ [MKSTREAM] [ENTRIESREAD n], SETID key group id|$
/// [ENTRIESREAD n], DESTROY key group, CREATECONSUMER key group consumer, DELCONSUMER key group
/// consumer, and HELP.
pub fn xgroup(call: &mut Call<'_>) -> CommandResult {
    let args = call.args;
    let subcommand = args[1].to_ascii_uppercase();
    if subcommand == b"HELP" {
        return Ok(subcommand_help("xgroup"));
    }
    let (key, name) = (args[2].clone(), args[3].clone());
    let (mut make_stream, mut entries_read) = (false, None);
    if subcommand == b"CREATE" {
        let mut options = args[5..].iter();
        while let Some(option) = options.next() {
            match options.len() {
                _ if is(option, "MKSTREAM") => make_stream = true,
                1.. if is(option, "ENTRIESREAD") => entries_read = parse_entries_read(options.next().expect("one more"))?,
                _ => return Err(subcommand_syntax_error("xgroup", &args[1])),
            }
        }
    }
    let mut stream = match open(call, &key)? {
        Some(stream) => stream,
        None if make_stream => {
            let limits = limits(call);
            OpenStream::new(call.store, &key, limits)?
        }
        None => return fail("ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically."),
    };
    let group = stream.take_group(call.store, &name)?;
    if group.is_none() && matches!(subcommand.as_slice(), b"SETID" | b"CREATECONSUMER" | b"DELCONSUMER") {
        return Err(no_group(&key, &name));
    }
    let id_of = |text: &[u8], stream: &OpenStream, strict: bool| -> Result<StreamId, CommandError> {
        match text {
            b"$" => Ok(stream.root().last_id),
            _ => Ok(parse_id_generic(text, 0, strict, false)?.0),
        }
    };
    let (reply, event) = match (subcommand.as_slice(), group) {
        (b"CREATE", existing) if args.len() <= 8 => {
            let id = id_of(&args[4], &stream, true)?;
            if let Some(existing) = existing {
                stream.put_group(&name, existing);
                return fail("BUSYGROUP Consumer Group name already exists");
            }
            assert!(stream.create_group(name, ConsumerGroup::starting_at(id, entries_read)), "no group of that name");
            (Reply::ok(), "xgroup-create")
        }
        (b"SETID", Some(mut group)) if args.len() == 5 || args.len() == 7 => {
            let id = id_of(&args[4], &stream, false)?;
            let entries_read = match &args[5..] {
                [] => None,
                [option, value] if is(option, "ENTRIESREAD") => parse_entries_read(value)?,
                _ => return Err(subcommand_syntax_error("xgroup", &args[1])),
            };
            (group.last_id, group.entries_read) = (id, entries_read);
            stream.put_group(&name, group);
            (Reply::ok(), "xgroup-setid")
        }
        (b"DESTROY", group) if args.len() == 4 => match group {
            Some(group) => {
                stream.put_group(&name, group);
                stream.destroy_group(call.store, &name)?;
                (Reply::Integer(1), "xgroup-destroy")
            }
            None => return Ok(Reply::Integer(0)),
        },
        (b"CREATECONSUMER", Some(mut group)) if args.len() == 5 => {
            let created = group.add_consumer(&args[4], now_unix_ms());
            stream.put_group(&name, group);
            if !created {
                return Ok(Reply::Integer(0));
            }
            (Reply::Integer(1), "xgroup-createconsumer")
        }
        (b"DELCONSUMER", Some(mut group)) if args.len() == 5 => {
            let Some(pending) = group.remove_consumer(&args[4]) else { return Ok(Reply::Integer(0)) };
            stream.put_group(&name, group);
            (Reply::Integer(pending as i64), "xgroup-delconsumer")
        }
        _ => return Err(subcommand_syntax_error("xgroup", &args[1])),
    };
    stream.save(call.store)?;
    call.notify(STREAM, event, &key);
    Ok(reply)
}

/// The key's stream and its group `name` taken out to change; `NOGROUP` (`context` after the
/// names) when either is missing.
fn open_group(call: &mut Call<'_>, key: &Bytes, name: &[u8], context: &str) -> Result<(OpenStream, ConsumerGroup), CommandError> {
    let Some(mut stream) = open(call, key)? else { return Err(no_key_or_group(key, name, context)) };
    match stream.take_group(call.store, name)? {
        Some(group) => Ok((stream, group)),
        None => Err(no_key_or_group(key, name, context)),
    }
}

/// XACK key group id [id ...]: the entries taken off the group's pending entries (the IDs are
/// checked once the key and group are found, as Redis 7.0 does).
pub fn xack(call: &mut Call<'_>) -> CommandResult {
    let (key, name) = (call.args[1].clone(), call.args[2].clone());
    let Some(mut stream) = open(call, &key)? else { return Ok(Reply::Integer(0)) };
    let Some(mut group) = stream.take_group(call.store, &name)? else { return Ok(Reply::Integer(0)) };
    let ids = call.args[3..].iter().map(|text| parse_strict_id(text)).collect::<Result<Vec<_>, _>>()?;
    let acknowledged = ids.iter().filter(|id| group.pending.remove(id).is_some()).count();
    if acknowledged > 0 {
        stream.put_group(&name, group);
        stream.save(call.store)?;
    }
    Ok(Reply::Integer(acknowledged as i64))
}

/// XPENDING key group [[IDLE min-idle-time] start end count [consumer]]: a summary of the
/// group's pending entries, or those in a range with their consumer, idle time and deliveries.
pub fn xpending(call: &mut Call<'_>) -> CommandResult {
    let args = call.args;
    if args.len() != 3 && !(6..=9).contains(&args.len()) {
        return fail(SYNTAX_ERROR);
    }
    let mut range = None;
    if args.len() >= 6 {
        let mut at = 3;
        let mut idle_min_ms = 0;
        if is(&args[3], "IDLE") {
            idle_min_ms = parse_integer(&args[4])?;
            if args.len() < 8 {
                return fail(SYNTAX_ERROR);
            }
            at += 2;
        }
        let count = parse_integer(&args[at + 2])?.max(0) as usize;
        let start = parse_interval_id(&args[at], 0, End::Tail)?;
        let end = parse_interval_id(&args[at + 1], u64::MAX, End::Head)?;
        range = Some((idle_min_ms, start, end, count, args.get(at + 3)));
    }
    let (key, name) = (args[1].clone(), args[2].clone());
    let (_, group) = open_group(call, &key, &name, "")?;
    let Some((idle_min_ms, start, end, count, consumer)) = range else { return Ok(pending_summary(&group)) };
    if consumer.is_some_and(|consumer| group.consumer(consumer).is_none()) {
        return Ok(Reply::Array(Vec::new()));
    }
    let now_ms = now_unix_ms() as i64;
    let pending = group
        .pending
        .range(start..=end.max(start))
        .filter(|(id, pending)| **id <= end && consumer.is_none_or(|consumer| pending.consumer == consumer))
        .filter(|(_, pending)| idle_min_ms == 0 || now_ms - pending.delivered_ms as i64 >= idle_min_ms)
        .take(count)
        .map(|(id, pending)| {
            let idle_ms = (now_ms - pending.delivered_ms as i64).max(0);
            Reply::Array(vec![id_reply(*id), Reply::Bulk(pending.consumer.clone()), Reply::Integer(idle_ms), Reply::Integer(pending.deliveries as i64)])
        });
    Ok(Reply::Array(pending.collect()))
}

/// XPENDING's summary: the count, the first and last IDs, and each consumer's count.
fn pending_summary(group: &ConsumerGroup) -> Reply {
    let (Some((first, _)), Some((last, _))) = (group.pending.first_key_value(), group.pending.last_key_value()) else {
        return Reply::Array(vec![Reply::Integer(0), Reply::Null, Reply::Null, Reply::NullArray]);
    };
    let consumers = group.consumers.iter().map(|consumer| (consumer, group.pending_of(&consumer.name))).filter(|(_, count)| *count > 0);
    let consumers = consumers.map(|(consumer, count)| Reply::Array(vec![Reply::Bulk(consumer.name.clone()), Reply::Bulk(Bytes::from(count.to_string()))]));
    Reply::Array(vec![Reply::Integer(group.pending.len() as i64), id_reply(*first), id_reply(*last), Reply::Array(consumers.collect())])
}

/// XCLAIM's options after its IDs.
struct ClaimOptions {
    force: bool,
    just_id: bool,
    /// The delivery time to set (Unix ms), from IDLE or TIME.
    delivered_ms: Option<i64>,
    retry_count: Option<i64>,
    last_id: StreamId,
}

fn parse_claim_options(options: &[Bytes], now_ms: i64) -> Result<ClaimOptions, CommandError> {
    let mut claim = ClaimOptions { force: false, just_id: false, delivered_ms: None, retry_count: None, last_id: StreamId::ZERO };
    let mut options = options.iter();
    while let Some(option) = options.next() {
        let has_value = options.len() > 0;
        let value = |text: Option<&Bytes>, error: &'static str| parse_integer(text.expect("checked")).or_else(|_| fail(error));
        match () {
            _ if is(option, "FORCE") => claim.force = true,
            _ if is(option, "JUSTID") => claim.just_id = true,
            _ if is(option, "IDLE") && has_value => claim.delivered_ms = Some(now_ms - value(options.next(), "ERR Invalid IDLE option argument for XCLAIM")?),
            _ if is(option, "TIME") && has_value => claim.delivered_ms = Some(value(options.next(), "ERR Invalid TIME option argument for XCLAIM")?),
            _ if is(option, "RETRYCOUNT") && has_value => claim.retry_count = Some(value(options.next(), "ERR Invalid RETRYCOUNT option argument for XCLAIM")?),
            _ if is(option, "LASTID") && has_value => claim.last_id = parse_strict_id(options.next().expect("checked"))?,
            _ => return fail(format!("ERR Unrecognized XCLAIM option '{}'", String::from_utf8_lossy(option))),
        }
    }
    Ok(claim)
}

/// What a claim does to each pending entry it takes.
struct Claim<'a> {
    consumer: &'a Bytes,
    delivered_ms: u64,
    deliveries: Deliveries,
    /// Answer the IDs alone.
    just_id: bool,
}

/// Gives pending entry `id` to the claim's consumer (created if needed) as XCLAIM and
/// XAUTOCLAIM do, and answers the entry (or its ID).
fn claim_entry(stream: &mut OpenStream, call: &mut Call<'_>, group: &mut ConsumerGroup, id: StreamId, claim: &Claim<'_>) -> Result<Reply, CommandError> {
    if group.see_consumer(claim.consumer, now_unix_ms()) {
        call.notify(STREAM, "xgroup-createconsumer", &call.args[1].clone());
    }
    let pending = group.pending.get_mut(&id).expect("a pending entry is claimed");
    pending.consumer = claim.consumer.clone();
    pending.delivered_ms = claim.delivered_ms;
    match claim.deliveries {
        Deliveries::Set(count) => pending.deliveries = count,
        Deliveries::Add => pending.deliveries += 1,
        Deliveries::Keep => {}
    }
    if claim.just_id {
        return Ok(id_reply(id));
    }
    Ok(stream.entry(call.store, id)?.map_or(Reply::Null, entry_reply))
}

/// How a claim changes an entry's delivery count.
#[derive(Clone, Copy)]
enum Deliveries {
    Set(u64),
    Add,
    Keep,
}

/// XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME unix-ms] [RETRYCOUNT
/// count] [FORCE] [JUSTID] [LASTID id]: gives the pending entries idle at least that long to
/// the consumer; pending entries whose stream entry was deleted are dropped.
pub fn xclaim(call: &mut Call<'_>) -> CommandResult {
    let args = call.args;
    let (key, name, consumer) = (args[1].clone(), args[2].clone(), args[3].clone());
    let (mut stream, mut group) = open_group(call, &key, &name, "")?;
    let idle_min_ms = parse_integer(&args[4]).or_else(|_| fail("ERR Invalid min-idle-time argument for XCLAIM"))?.max(0);
    let ids: Vec<StreamId> = args[5..].iter().map_while(|text| parse_strict_id(text).ok()).collect();
    let now_ms = now_unix_ms() as i64;
    let options = parse_claim_options(&args[5 + ids.len()..], now_ms)?;
    let mut changed = false;
    if options.last_id > group.last_id {
        (group.last_id, changed) = (options.last_id, true);
    }
    let deliveries = match options.retry_count {
        Some(count) if count >= 0 => Deliveries::Set(count as u64),
        _ if options.just_id => Deliveries::Keep,
        _ => Deliveries::Add,
    };
    let delivered_ms = options.delivered_ms.filter(|&time| (0..=now_ms).contains(&time)).unwrap_or(now_ms) as u64;
    let claim = Claim { consumer: &consumer, delivered_ms, deliveries, just_id: options.just_id };
    let mut claimed = Vec::new();
    for id in ids {
        if stream.entry(call.store, id)?.is_none() {
            changed |= group.pending.remove(&id).is_some();
            continue;
        }
        let forced = options.force && !group.pending.contains_key(&id);
        if forced {
            group.pending.insert(id, Pending { consumer: consumer.clone(), delivered_ms: 0, deliveries: 0 });
        }
        let Some(pending) = group.pending.get(&id) else { continue };
        if !forced && idle_min_ms > 0 && now_ms - (pending.delivered_ms as i64) < idle_min_ms {
            continue;
        }
        claimed.push(claim_entry(&mut stream, call, &mut group, id, &claim)?);
        changed = true;
    }
    if changed {
        stream.put_group(&name, group);
        stream.save(call.store)?;
    }
    Ok(Reply::Array(claimed))
}

/// XAUTOCLAIM's attempts per entry it may claim.
const AUTOCLAIM_ATTEMPTS_PER_COUNT: u64 = 10;
const AUTOCLAIM_COUNT_DEFAULT: u64 = 100;

/// XAUTOCLAIM key group consumer min-idle-time start [COUNT count] [JUSTID]: claims up to
/// `count` pending entries from `start` on idle at least that long; answers the ID to go on
/// from (0-0 at the end), the entries claimed and the IDs of pending entries dropped because
/// their stream entry was deleted.
pub fn xautoclaim(call: &mut Call<'_>) -> CommandResult {
    let args = call.args;
    let idle_min_ms = parse_integer(&args[4]).or_else(|_| fail("ERR Invalid min-idle-time argument for XAUTOCLAIM"))?.max(0);
    let start = parse_interval_id(&args[5], 0, End::Tail)?;
    let (mut count, mut just_id) = (AUTOCLAIM_COUNT_DEFAULT, false);
    let mut options = args[6..].iter();
    while let Some(option) = options.next() {
        match options.len() {
            1.. if is(option, "COUNT") => {
                let count_max = i64::MAX / AUTOCLAIM_ATTEMPTS_PER_COUNT as i64;
                count = match parse_integer(options.next().expect("one more")) {
                    Ok(given) if (1..=count_max).contains(&given) => given as u64,
                    _ => return fail("ERR COUNT must be > 0"),
                };
            }
            _ if is(option, "JUSTID") => just_id = true,
            _ => return fail(SYNTAX_ERROR),
        }
    }
    let (key, name, consumer) = (args[1].clone(), args[2].clone(), args[3].clone());
    let (mut stream, mut group) = open_group(call, &key, &name, "")?;
    let now_ms = now_unix_ms() as i64;
    let deliveries = if just_id { Deliveries::Keep } else { Deliveries::Add };
    let claim = Claim { consumer: &consumer, delivered_ms: now_ms as u64, deliveries, just_id };
    let (mut claimed, mut deleted) = (Vec::new(), Vec::new());
    let mut attempts = count * AUTOCLAIM_ATTEMPTS_PER_COUNT;
    let mut candidates = group.pending.range(start..).map(|(id, _)| *id).collect::<Vec<_>>().into_iter().peekable();
    while attempts > 0 && count > 0 {
        let Some(id) = candidates.next() else { break };
        attempts -= 1;
        if stream.entry(call.store, id)?.is_none() {
            group.pending.remove(&id);
            deleted.push(id_reply(id));
            count -= 1;
            continue;
        }
        let delivered_ms = group.pending[&id].delivered_ms as i64;
        if idle_min_ms > 0 && now_ms - delivered_ms < idle_min_ms {
            continue;
        }
        claimed.push(claim_entry(&mut stream, call, &mut group, id, &claim)?);
        count -= 1;
    }
    let next = candidates.next().unwrap_or(StreamId::ZERO);
    if !claimed.is_empty() || !deleted.is_empty() {
        stream.put_group(&name, group);
        stream.save(call.store)?;
    }
    Ok(Reply::Array(vec![id_reply(next), Reply::Array(claimed), Reply::Array(deleted)]))
}
