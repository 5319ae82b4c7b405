//! SORT and SORT_RO: the elements of a list, set or sorted set, sorted as numbers or (ALPHA) as
//! bytes, by themselves or by other keys' values (BY pattern), cut by LIMIT, each answered as
//! itself or as other keys' values (GET pattern), or stored as a list (STORE), as Redis 7.0's
//! sort.c answers them. A command with BY, GET or STORE may reach keys its arguments do not
//! name, so it runs in a transaction over every partition (`reaches_other_keys`, flag
//! `READS_KEYS_BY_PATTERN`); in a script it reaches only the keys the script declared.

use std::cmp::Ordering;

use bytes::Bytes;
use hybridkv_resp::Reply;

use super::sorted_set_ranges::is_c_space;
use super::{is, lists, parse_integer, sorted_sets, SYNTAX_ERROR, WRONGTYPE};
use crate::command::{fail, Call, CommandError, CommandResult};
use crate::hash_layout::OpenHash;
use crate::keyspace_events::{GENERIC, LIST};
use crate::list_layout::End;
use crate::long_double::parse_c_double;
use crate::values::{type_name_of, Collection, Stored};

/// Whether a SORT's arguments may make it read or write keys they do not name (BY, GET,
/// STORE): then it runs over every partition. Any argument spelled so counts (a key or a
/// pattern named "by" too): a few more commands lock everything than need to.
pub fn reaches_other_keys(args: &[Bytes]) -> bool {
    args.iter().skip(2).any(|argument| is(argument, "BY") || is(argument, "GET") || is(argument, "STORE"))
}

struct SortOptions {
    descending: bool,
    alpha: bool,
    /// LIMIT's offset and count (count < 0: to the end).
    limit: (i64, i64),
    store: Option<Bytes>,
    by: Option<Bytes>,
    /// BY a pattern without `*`: the elements keep their order.
    dont_sort: bool,
    gets: Vec<Bytes>,
}

fn parse(args: &[Bytes], read_only: bool) -> Result<SortOptions, CommandError> {
    let mut options = SortOptions { descending: false, alpha: false, limit: (0, -1), store: None, by: None, dont_sort: false, gets: Vec::new() };
    let mut at = 2;
    while at < args.len() {
        let (option, left) = (&args[at], args.len() - at - 1);
        match () {
            _ if is(option, "ASC") => options.descending = false,
            _ if is(option, "DESC") => options.descending = true,
            _ if is(option, "ALPHA") => options.alpha = true,
            _ if is(option, "LIMIT") && left >= 2 => {
                options.limit = (parse_integer(&args[at + 1])?, parse_integer(&args[at + 2])?);
                at += 2;
            }
            _ if !read_only && is(option, "STORE") && left >= 1 => {
                options.store = Some(args[at + 1].clone());
                at += 1;
            }
            _ if is(option, "BY") && left >= 1 => {
                options.dont_sort = !args[at + 1].contains(&b'*');
                options.by = Some(args[at + 1].clone());
                at += 1;
            }
            _ if is(option, "GET") && left >= 1 => {
                options.gets.push(args[at + 1].clone());
                at += 1;
            }
            _ => return fail(SYNTAX_ERROR),
        }
        at += 1;
    }
    Ok(options)
}

/// SORT key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC|DESC] [ALPHA] [STORE destination]
pub fn sort(call: &mut Call<'_>) -> CommandResult {
    run_sort(call, false)
}

/// SORT_RO: SORT without STORE.
pub fn sort_ro(call: &mut Call<'_>) -> CommandResult {
    run_sort(call, true)
}

/// What the sorted key holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SortedKind {
    List,
    Set,
    SortedSet,
}

fn run_sort(call: &mut Call<'_>, read_only: bool) -> CommandResult {
    let mut options = parse(call.args, read_only)?;
    let key = call.args[1].clone();
    let sorted = match call.store.get(&key)?.map(|value| type_name_of(&value.bytes)) {
        None | Some("list") => SortedKind::List,
        Some("set") => SortedKind::Set,
        Some("zset") => SortedKind::SortedSet,
        Some(_) => return fail(WRONGTYPE),
    };
    // A set has no order of its own: sorted when its order would be stored or seen by a script.
    if options.dont_sort && sorted == SortedKind::Set && (options.store.is_some() || call.session.in_script) {
        (options.dont_sort, options.alpha, options.by) = (false, true, None);
    }
    let mut elements = elements_of(call, &key, sorted)?;
    let (start, end) = limits(options.limit, elements.len() as i64);
    let range = if start <= end { start as usize..end as usize + 1 } else { 0..0 };
    let selected = if options.dont_sort {
        if options.descending && sorted != SortedKind::Set {
            elements.reverse();
        }
        elements.get(range).map(<[Bytes]>::to_vec).unwrap_or_default()
    } else {
        let mut keyed = sort_keys(call, &options, elements)?;
        keyed.sort_by(|a, b| compare(a, b, &options));
        keyed.into_iter().map(|(element, _)| element).collect::<Vec<_>>().get(range).map(<[Bytes]>::to_vec).unwrap_or_default()
    };
    match options.store.clone() {
        Some(destination) => store(call, &options, &destination, &selected),
        None => answer(call, &options, selected),
    }
}

/// Redis's LIMIT arithmetic over `len` elements: the first and last positions (last < first:
/// none).
fn limits((offset, count): (i64, i64), len: i64) -> (i64, i64) {
    let start = offset.max(0);
    let mut end = if count < 0 { len - 1 } else { start.saturating_add(count - 1) };
    if start >= len {
        return (len - 1, len - 2);
    }
    end = end.min(len - 1);
    (start, end)
}

/// The key's elements: a list's in order, a set's members, a sorted set's members by score.
fn elements_of(call: &mut Call<'_>, key: &Bytes, sorted: SortedKind) -> Result<Vec<Bytes>, CommandError> {
    match sorted {
        SortedKind::List => match lists::open(call, key)? {
            Some(mut list) if list.len() > 0 => {
                let last = list.len() - 1;
                list.range(call.store, 0, last)
            }
            _ => Ok(Vec::new()),
        },
        SortedKind::Set => {
            let members = OpenHash::open(call.store, key, Collection::Set)?.expect("the key holds a set");
            Ok(members.into_fields(call.store)?.into_iter().map(|(member, _)| member).collect())
        }
        SortedKind::SortedSet => {
            let mut set = sorted_sets::open(call, key)?.expect("the key holds a sorted set");
            let len = set.len();
            Ok(set.members_at(call.store, 0..len)?.into_iter().map(|(member, _)| member).collect())
        }
    }
}

/// What an element is sorted by: a number, or (ALPHA) bytes, None when BY found no value.
enum SortKey {
    Number(f64),
    Text(Option<Bytes>),
}

/// Each element with what it sorts by: itself, or its BY pattern's value.
fn sort_keys(call: &mut Call<'_>, options: &SortOptions, elements: Vec<Bytes>) -> Result<Vec<(Bytes, SortKey)>, CommandError> {
    let mut keyed = Vec::with_capacity(elements.len());
    let mut not_a_number = false;
    for element in elements {
        let by = match &options.by {
            Some(pattern) => lookup_by_pattern(call, pattern, &element)?,
            None => Some(element.clone()),
        };
        let key = match (options.alpha, by) {
            (true, by) => SortKey::Text(by.filter(|_| options.by.is_some())),
            (false, None) => SortKey::Number(0.0),
            (false, Some(value)) => SortKey::Number(parse_sort_number(&value).unwrap_or_else(|| {
                not_a_number = true;
                0.0
            })),
        };
        keyed.push((element, key));
    }
    if not_a_number {
        return fail("ERR One or more scores can't be converted into double");
    }
    Ok(keyed)
}

/// A value as Redis's SORT reads a number: C's strtod over the whole text (leading spaces, hex,
/// inf), no NaN, no overflow or underflow; an empty text is 0.
fn parse_sort_number(value: &[u8]) -> Option<f64> {
    if value.is_empty() {
        return Some(0.0);
    }
    let text = std::str::from_utf8(value).ok()?.trim_start_matches(is_c_space);
    let parsed = parse_c_double(text)?;
    (!parsed.value.is_nan() && !parsed.out_of_range).then_some(parsed.value)
}

/// Redis's sortCompare: numbers, ties broken by the elements' bytes; ALPHA by the BY values
/// (a missing one first) or by the elements; DESC reverses it all.
fn compare(a: &(Bytes, SortKey), b: &(Bytes, SortKey), options: &SortOptions) -> Ordering {
    let order = match (&a.1, &b.1) {
        (SortKey::Number(x), SortKey::Number(y)) => x.partial_cmp(y).unwrap_or(Ordering::Equal).then_with(|| a.0.cmp(&b.0)),
        (SortKey::Text(x), SortKey::Text(y)) if options.by.is_some() => x.cmp(y),
        _ => a.0.cmp(&b.0),
    };
    if options.descending { order.reverse() } else { order }
}

/// The value a pattern names for an element, as Redis's lookupKeyByPattern finds it: `#` is the
/// element; the first `*` is replaced by it; `key->field` reads a hash's field, else the key
/// must hold a string. None when the pattern has no `*`, or the key or field is missing or of
/// another type.
fn lookup_by_pattern(call: &mut Call<'_>, pattern: &[u8], element: &Bytes) -> Result<Option<Bytes>, CommandError> {
    if pattern == b"#" {
        return Ok(Some(element.clone()));
    }
    let Some(star) = pattern.iter().position(|&byte| byte == b'*') else { return Ok(None) };
    let arrow = pattern[star + 1..].windows(2).position(|pair| pair == b"->").map(|at| star + 1 + at).filter(|&at| at + 2 < pattern.len());
    let key_end = arrow.unwrap_or(pattern.len());
    let key = [&pattern[..star], element.as_ref(), &pattern[star + 1..key_end]].concat();
    let Some(value) = call.store.get(&key)? else { return Ok(None) };
    match (arrow, type_name_of(&value.bytes)) {
        (None, "string") => match Stored::decode(value.bytes)? {
            Stored::String(text) => Ok(Some(text)),
            _ => unreachable!("a string's tag"),
        },
        (Some(arrow), "hash") => {
            let mut hash = OpenHash::open(call.store, &Bytes::from(key), Collection::Hash)?.expect("the key holds a hash");
            hash.get(call.store, &pattern[arrow + 2..])
        }
        _ => Ok(None),
    }
}

/// The reply: each element, or per element each GET pattern's value (nil when missing).
fn answer(call: &mut Call<'_>, options: &SortOptions, selected: Vec<Bytes>) -> CommandResult {
    if options.gets.is_empty() {
        return Ok(Reply::Array(selected.into_iter().map(Reply::Bulk).collect()));
    }
    let mut replies = Vec::with_capacity(selected.len() * options.gets.len());
    for element in &selected {
        for pattern in &options.gets {
            replies.push(lookup_by_pattern(call, pattern, element)?.map_or(Reply::Null, Reply::Bulk));
        }
    }
    Ok(Reply::Array(replies))
}

/// STORE: the result (GET values, "" when missing) replaces the destination as a list without
/// expiry, or deletes it when empty; answers its length.
fn store(call: &mut Call<'_>, options: &SortOptions, destination: &Bytes, selected: &[Bytes]) -> CommandResult {
    let mut stored = Vec::with_capacity(selected.len() * options.gets.len().max(1));
    for element in selected {
        if options.gets.is_empty() {
            stored.push(element.clone());
        }
        for pattern in &options.gets {
            stored.push(lookup_by_pattern(call, pattern, element)?.unwrap_or_default());
        }
    }
    if stored.is_empty() {
        if call.store.delete(destination)? {
            call.notify(GENERIC, "del", destination);
        }
        return Ok(Reply::Integer(0));
    }
    call.store.delete(destination)?;
    let mut list = lists::open_or_new(call, destination)?;
    for element in &stored {
        list.push(call.store, End::Tail, element.clone())?;
    }
    list.save(call.store)?;
    call.notify(LIST, "sortstore", destination);
    Ok(Reply::Integer(stored.len() as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_follow_redis_arithmetic() {
        assert_eq!(limits((0, -1), 10), (0, 9));
        assert_eq!(limits((-5, 3), 10), (0, 2));
        assert_eq!(limits((8, 5), 10), (8, 9));
        assert_eq!(limits((10, 1), 10), (9, 8), "past the end: nothing");
        assert_eq!(limits((0, 0), 10), (0, -1));
        assert_eq!(limits((0, -1), 0), (-1, -2));
        assert_eq!(limits((3, i64::MAX), 10), (3, 9));
    }

    #[test]
    fn numbers_are_read_as_c_strtod_reads_them() {
        for (text, number) in [("", 0.0), ("  7", 7.0), ("0x10", 16.0), ("-1.5e1", -15.0), ("inf", f64::INFINITY)] {
            assert_eq!(parse_sort_number(text.as_bytes()), Some(number), "{text:?}");
        }
        for text in ["7 ", "nan", "1e400", "1e-400", "abc", " ", "1,5"] {
            assert_eq!(parse_sort_number(text.as_bytes()), None, "{text:?}");
        }
    }

    #[test]
    fn only_by_get_and_store_reach_other_keys() {
        let words = |text: &str| text.split(' ').map(|word| Bytes::copy_from_slice(word.as_bytes())).collect::<Vec<_>>();
        assert!(!reaches_other_keys(&words("SORT by LIMIT 0 1 ALPHA DESC")), "the key may be called by");
        assert!(reaches_other_keys(&words("SORT k by w_*")));
        assert!(reaches_other_keys(&words("SORT k GET #")));
        assert!(reaches_other_keys(&words("SORT k STORE d")));
    }
}
