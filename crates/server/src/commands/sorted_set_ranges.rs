//! The ranges of the sorted-set commands: ranks, score ranges and lexicographic ranges as
//! Redis 7.0 parses them, and which members of a set (in Redis's order) a range selects, walked
//! as Redis walks a listpack.

use std::cmp::Ordering;

use bytes::Bytes;

use super::parse_integer;
use crate::long_double::parse_c_double;
use crate::sorted_set_layout::Scored;
use crate::command::{fail, CommandError};

const NOT_FLOAT_RANGE: &str = "ERR min or max is not a float";
const NOT_LEX_RANGE: &str = "ERR min or max not valid string range item";

/// C's isspace.
pub(super) fn is_c_space(character: char) -> bool {
    matches!(character, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// One end of a score range: `(` makes it exclusive.
#[derive(Clone, Copy)]
pub(super) struct ScoreBound {
    value: f64,
    exclusive: bool,
}

/// An end of a score range as Redis's zslParseRange reads it (C's strtod over the whole text:
/// leading spaces and infinities allowed, an empty text is 0, NaN refused).
fn parse_score_bound(text: &[u8]) -> Option<ScoreBound> {
    let (text, exclusive) = match text.strip_prefix(b"(") {
        Some(rest) => (rest, true),
        None => (text, false),
    };
    if text.is_empty() {
        return Some(ScoreBound { value: 0.0, exclusive });
    }
    let value = parse_c_double(std::str::from_utf8(text).ok()?.trim_start_matches(is_c_space))?.value;
    (!value.is_nan()).then_some(ScoreBound { value, exclusive })
}

/// One end of a lexicographic range: `-` and `+` are the smallest and largest strings.
#[derive(Clone)]
pub(super) enum LexBound {
    Smallest,
    Largest,
    Inclusive(Bytes),
    Exclusive(Bytes),
}

fn parse_lex_bound(text: &Bytes) -> Option<LexBound> {
    match text.first()? {
        b'-' if text.len() == 1 => Some(LexBound::Smallest),
        b'+' if text.len() == 1 => Some(LexBound::Largest),
        b'[' => Some(LexBound::Inclusive(text.slice(1..))),
        b'(' => Some(LexBound::Exclusive(text.slice(1..))),
        _ => None,
    }
}

impl LexBound {
    /// The bound's string in the order Smallest < every string < Largest, and whether the
    /// bound excludes it (the two infinities do, as in Redis).
    fn position(&self) -> (u8, &[u8], bool) {
        match self {
            LexBound::Smallest => (0, b"", true),
            LexBound::Inclusive(text) => (1, text, false),
            LexBound::Exclusive(text) => (1, text, true),
            LexBound::Largest => (2, b"", true),
        }
    }

    fn below_or_at(&self, member: &[u8]) -> bool {
        match self {
            LexBound::Smallest => true,
            LexBound::Largest => false,
            LexBound::Inclusive(text) => member >= text.as_ref(),
            LexBound::Exclusive(text) => member > text.as_ref(),
        }
    }

    fn above_or_at(&self, member: &[u8]) -> bool {
        match self {
            LexBound::Smallest => false,
            LexBound::Largest => true,
            LexBound::Inclusive(text) => member <= text.as_ref(),
            LexBound::Exclusive(text) => member < text.as_ref(),
        }
    }
}

/// Which members a range command covers.
pub(super) enum Range {
    /// Ranks, negative from the end, as given.
    Rank(i64, i64),
    Score(ScoreBound, ScoreBound),
    Lex(LexBound, LexBound),
}

impl Range {
    /// The scores from `min` up to `max`, `max` excluded.
    pub(super) fn from_up_to(min: f64, max: f64) -> Range {
        Range::Score(ScoreBound { value: min, exclusive: false }, ScoreBound { value: max, exclusive: true })
    }

    /// Redis's test for a range no member can be in (min above max, or equal and one excluded).
    pub(super) fn is_empty(&self) -> bool {
        match self {
            Range::Rank(..) => false,
            Range::Score(min, max) => min.value > max.value || (min.value == max.value && (min.exclusive || max.exclusive)),
            Range::Lex(min, max) => {
                let ((min_class, min_text, min_excluded), (max_class, max_text, max_excluded)) = (min.position(), max.position());
                match (min_class, min_text).cmp(&(max_class, max_text)) {
                    Ordering::Greater => true,
                    Ordering::Equal => min_excluded || max_excluded,
                    Ordering::Less => false,
                }
            }
        }
    }

    /// Whether `entry` is at or past the range's low end.
    pub(super) fn past_min(&self, (member, score): &Scored) -> bool {
        match self {
            Range::Rank(..) => unreachable!("ranks are not compared"),
            Range::Score(min, _) => if min.exclusive { *score > min.value } else { *score >= min.value },
            Range::Lex(min, _) => min.below_or_at(member),
        }
    }

    /// Whether `entry` is at or before the range's high end.
    pub(super) fn before_max(&self, (member, score): &Scored) -> bool {
        match self {
            Range::Rank(..) => unreachable!("ranks are not compared"),
            Range::Score(_, max) => if max.exclusive { *score < max.value } else { *score <= max.value },
            Range::Lex(_, max) => max.above_or_at(member),
        }
    }
}

/// Parses a range command's two ends, with Redis's error for each kind.
pub(super) fn parse_range(kind: RangeKind, min: &Bytes, max: &Bytes) -> Result<Range, CommandError> {
    match kind {
        RangeKind::Rank => Ok(Range::Rank(parse_integer(min)?, parse_integer(max)?)),
        RangeKind::Score => match (parse_score_bound(min), parse_score_bound(max)) {
            (Some(min), Some(max)) => Ok(Range::Score(min, max)),
            _ => fail(NOT_FLOAT_RANGE),
        },
        RangeKind::Lex => match (parse_lex_bound(min), parse_lex_bound(max)) {
            (Some(min), Some(max)) => Ok(Range::Lex(min, max)),
            _ => fail(NOT_LEX_RANGE),
        },
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum RangeKind {
    Rank,
    Score,
    Lex,
}

/// OFFSET and COUNT of a LIMIT (count negative: no limit).
#[derive(Clone, Copy)]
pub(super) struct Limit {
    pub offset: i64,
    pub count: i64,
}

pub(super) const NO_LIMIT: Limit = Limit { offset: 0, count: -1 };

/// The indices into `members` (in Redis's order) that the range selects, in reply order.
///
/// Ranks are clamped as Redis does. Score and lex ranges are walked as Redis walks a listpack:
/// nothing when the last member is under the range or the first over it; otherwise from the
/// first member (last, for REV) at or past the range's start, the first `offset`
/// members are skipped unchecked, then members are taken while they are within the range's
/// other end. Members in order make that the members in range; a lex range over members of
/// different scores answers what Redis's listpack answers.
pub(super) fn select(members: &[Scored], range: &Range, reverse: bool, limit: Limit) -> Vec<usize> {
    let len = members.len() as i64;
    if let Range::Rank(start, stop) = *range {
        let Some((start, stop)) = clamp_ranks(start, stop, len) else { return Vec::new() };
        let ranks = start as usize..=stop as usize;
        return if reverse { ranks.map(|rank| members.len() - 1 - rank).collect() } else { ranks.collect() };
    }
    if range.is_empty() || limit.offset < 0 || (limit.offset > 0 && limit.offset >= len) {
        return Vec::new();
    }
    // Redis's zzlIsInRange: nothing when the last member is under the range or the first over it.
    match (members.first(), members.last()) {
        (Some(first), Some(last)) if range.past_min(last) && range.before_max(first) => {}
        _ => return Vec::new(),
    }
    let order: Vec<usize> = if reverse { (0..members.len()).rev().collect() } else { (0..members.len()).collect() };
    let reached_start = |at: usize| if reverse { range.before_max(&members[at]) } else { range.past_min(&members[at]) };
    let within_end = |at: usize| if reverse { range.past_min(&members[at]) } else { range.before_max(&members[at]) };
    let Some(first) = order.iter().position(|&at| reached_start(at)) else { return Vec::new() };
    if !within_end(order[first]) {
        return Vec::new();
    }
    let count = usize::try_from(limit.count).unwrap_or(usize::MAX);
    order[first..].iter().skip(limit.offset as usize).copied().take_while(|&at| within_end(at)).take(count).collect()
}

/// Ranks `start..=stop` (negative from the end) within a set of `len`, as Redis clamps them;
/// None when they select nothing.
pub(super) fn clamp_ranks(start: i64, stop: i64, len: i64) -> Option<(i64, i64)> {
    let start = if start < 0 { (len + start).max(0) } else { start };
    let stop = if stop < 0 { len + stop } else { stop };
    if start > stop || start >= len {
        return None;
    }
    Some((start, stop.min(len - 1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_ends_parse_as_strtod_reads_them() {
        let bound = |text: &str| parse_score_bound(text.as_bytes()).map(|bound| (bound.value, bound.exclusive));
        assert_eq!(bound("(5"), Some((5.0, true)));
        assert_eq!(bound(" 5"), Some((5.0, false)));
        assert_eq!(bound(""), Some((0.0, false)));
        assert_eq!(bound("("), Some((0.0, true)));
        assert_eq!(bound("1e400"), Some((f64::INFINITY, false)));
        assert_eq!(bound("5 "), None);
        assert_eq!(bound(" "), None);
        assert_eq!(bound("nan"), None);
        assert!(parse_lex_bound(&Bytes::from_static(b"+a")).is_none());
        assert!(parse_lex_bound(&Bytes::from_static(b"a")).is_none());
        assert!(matches!(parse_lex_bound(&Bytes::from_static(b"(a")), Some(LexBound::Exclusive(_))));
    }

    fn members(pairs: &[(&str, f64)]) -> Vec<Scored> {
        pairs.iter().map(|(member, score)| (Bytes::copy_from_slice(member.as_bytes()), *score)).collect()
    }

    fn names(members: &[Scored], selected: Vec<usize>) -> Vec<String> {
        selected.into_iter().map(|at| String::from_utf8(members[at].0.to_vec()).unwrap()).collect()
    }

    #[test]
    fn ranges_select_like_redis() {
        let set = members(&[("a", 1.0), ("b", 2.0), ("c", 2.0), ("d", 3.0)]);
        let score = |min: &str, max: &str| parse_range(RangeKind::Score, &Bytes::copy_from_slice(min.as_bytes()), &Bytes::copy_from_slice(max.as_bytes())).ok().unwrap();
        assert_eq!(names(&set, select(&set, &score("(1", "3"), false, NO_LIMIT)), ["b", "c", "d"]);
        assert_eq!(names(&set, select(&set, &score("-inf", "+inf"), true, Limit { offset: 1, count: 2 })), ["c", "b"]);
        assert_eq!(names(&set, select(&set, &score("2", "(2"), false, NO_LIMIT)), Vec::<String>::new());
        assert_eq!(names(&set, select(&set, &score("0", "9"), false, Limit { offset: -1, count: 2 })), Vec::<String>::new());
        assert_eq!(names(&set, select(&set, &Range::Rank(-2, 100), false, NO_LIMIT)), ["c", "d"]);
        assert_eq!(names(&set, select(&set, &Range::Rank(0, 0), true, NO_LIMIT)), ["d"]);
        assert_eq!(names(&set, select(&set, &Range::Rank(3, 1), false, NO_LIMIT)), Vec::<String>::new());
        let lex = |min: &[u8], max: &[u8]| Range::Lex(parse_lex_bound(&Bytes::copy_from_slice(min)).unwrap(), parse_lex_bound(&Bytes::copy_from_slice(max)).unwrap());
        let same = members(&[("a", 0.0), ("b", 0.0), ("c", 0.0)]);
        assert_eq!(names(&same, select(&same, &lex(b"[b", b"+"), false, NO_LIMIT)), ["b", "c"]);
        assert_eq!(names(&same, select(&same, &lex(b"(c", b"-"), true, NO_LIMIT)), Vec::<String>::new());
        assert_eq!(names(&same, select(&same, &lex(b"+", b"-"), true, NO_LIMIT)), Vec::<String>::new());
        assert!(lex(b"-", b"-").is_empty() && lex(b"[a", b"(a").is_empty() && !lex(b"[a", b"[a").is_empty());
        // Members of different scores: Redis's listpack walk, not a filter.
        let mixed = members(&[("b", 1.0), ("a", 2.0), ("c", 3.0)]);
        assert!(select(&mixed, &lex(b"[a", b"[a"), false, Limit { offset: 1, count: -1 }).is_empty(), "the first member is over the range");
        assert_eq!(names(&mixed, select(&mixed, &lex(b"[a", b"[b"), false, NO_LIMIT)), ["b", "a"]);
    }
}
