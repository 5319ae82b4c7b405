//! LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]: the longest common subsequence of
//! two strings, by Redis 7.0's dynamic programming table and walk (so that, of several longest
//! subsequences, it answers the one Redis answers), its checks in Redis's order.

use hybridkv_resp::Reply;

use super::{is, parse_integer, read_stored, SYNTAX_ERROR};
use crate::command::{fail, Call, CommandResult};
use crate::values::Stored;

/// Bytes of the table LCS builds ((len1 + 1) × (len2 + 1) cells of 4 bytes), at most: two
/// strings of about 4 KiB. Redis allows up to proto-max-bulk-len (512 MiB) per command; here a
/// client cannot make a worker allocate more than this for one request.
pub const LCS_TABLE_BYTES_MAX: u64 = 64 * 1024 * 1024;

struct LcsOptions {
    length_only: bool,
    indexes: bool,
    with_match_length: bool,
    min_match_length: u64,
}

fn parse_options(args: &[bytes::Bytes]) -> Result<LcsOptions, crate::command::CommandError> {
    let mut options = LcsOptions { length_only: false, indexes: false, with_match_length: false, min_match_length: 0 };
    let mut at = 3;
    while at < args.len() {
        let option = &args[at];
        if is(option, "IDX") {
            options.indexes = true;
        } else if is(option, "LEN") {
            options.length_only = true;
        } else if is(option, "WITHMATCHLEN") {
            options.with_match_length = true;
        } else if is(option, "MINMATCHLEN") && at + 1 < args.len() {
            options.min_match_length = parse_integer(&args[at + 1])?.max(0) as u64;
            at += 1;
        } else {
            return fail(SYNTAX_ERROR);
        }
        at += 1;
    }
    if options.length_only && options.indexes {
        return fail("ERR If you want both the length and indexes, please just use IDX.");
    }
    Ok(options)
}

/// `table[i][j]`: the length of the LCS of a[..i] and b[..j], row by row.
struct LcsTable {
    columns: usize,
    cells: Vec<u32>,
}

impl LcsTable {
    fn build(a: &[u8], b: &[u8]) -> LcsTable {
        let columns = b.len() + 1;
        let mut cells = vec![0u32; (a.len() + 1) * columns];
        for i in 1..=a.len() {
            for j in 1..=b.len() {
                cells[i * columns + j] =
                    if a[i - 1] == b[j - 1] { cells[(i - 1) * columns + j - 1] + 1 } else { cells[(i - 1) * columns + j].max(cells[i * columns + j - 1]) };
            }
        }
        LcsTable { columns, cells }
    }

    fn at(&self, i: usize, j: usize) -> u32 {
        self.cells[i * self.columns + j]
    }
}

/// One run of matching bytes: first and last index in each string.
#[derive(Debug, PartialEq, Eq)]
struct MatchRange {
    a: (usize, usize),
    b: (usize, usize),
}

/// Walks the table back from its end as Redis does: the subsequence, and its runs of
/// contiguous matches from the last to the first.
fn walk(a: &[u8], b: &[u8], table: &LcsTable) -> (Vec<u8>, Vec<MatchRange>) {
    let mut subsequence = Vec::with_capacity(table.at(a.len(), b.len()) as usize);
    let mut ranges = Vec::new();
    let mut current: Option<MatchRange> = None;
    let (mut i, mut j) = (a.len(), b.len());
    while i > 0 && j > 0 {
        let mut range_ends = false;
        if a[i - 1] == b[j - 1] {
            subsequence.push(a[i - 1]);
            match &mut current {
                None => current = Some(MatchRange { a: (i - 1, i - 1), b: (j - 1, j - 1) }),
                Some(range) if range.a.0 == i && range.b.0 == j => {
                    range.a.0 -= 1;
                    range.b.0 -= 1;
                }
                Some(_) => range_ends = true,
            }
            if current.as_ref().is_some_and(|range| range.a.0 == 0 || range.b.0 == 0) {
                range_ends = true;
            }
            i -= 1;
            j -= 1;
        } else {
            if table.at(i - 1, j) > table.at(i, j - 1) {
                i -= 1;
            } else {
                j -= 1;
            }
            range_ends = current.is_some();
        }
        if range_ends {
            ranges.extend(current.take());
        }
    }
    subsequence.reverse();
    (subsequence, ranges)
}

pub fn lcs(call: &mut Call<'_>) -> CommandResult {
    let mut strings = Vec::with_capacity(2);
    for key in &call.args[1..3] {
        match read_stored(call.store, key)? {
            Some((Stored::String(value), _)) => strings.push(value),
            Some(_) => return fail("ERR The specified keys must contain string values"),
            None => strings.push(bytes::Bytes::new()),
        }
    }
    let options = parse_options(call.args)?;
    let (a, b) = (&strings[0], &strings[1]);
    let table_bytes = (a.len() as u64 + 1) * (b.len() as u64 + 1) * 4;
    if table_bytes > LCS_TABLE_BYTES_MAX {
        return fail(format!("ERR Insufficient memory, transient memory for LCS would be {table_bytes} bytes, over the limit of {LCS_TABLE_BYTES_MAX}"));
    }
    let table = LcsTable::build(a, b);
    let length = i64::from(table.at(a.len(), b.len()));
    if options.length_only {
        return Ok(Reply::Integer(length));
    }
    let (subsequence, ranges) = walk(a, b, &table);
    if !options.indexes {
        return Ok(Reply::Bulk(subsequence.into()));
    }
    let matches = ranges
        .iter()
        .filter(|range| (range.a.1 - range.a.0 + 1) as u64 >= options.min_match_length)
        .map(|range| {
            let pair = |(first, last): (usize, usize)| Reply::Array(vec![Reply::Integer(first as i64), Reply::Integer(last as i64)]);
            let mut entry = vec![pair(range.a), pair(range.b)];
            if options.with_match_length {
                entry.push(Reply::Integer((range.a.1 - range.a.0 + 1) as i64));
            }
            Reply::Array(entry)
        })
        .collect();
    Ok(Reply::Map(vec![(Reply::bulk_text("matches"), Reply::Array(matches)), (Reply::bulk_text("len"), Reply::Integer(length))]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subsequence_and_its_runs_are_redis_s() {
        let (a, b) = (&b"ohmytext"[..], &b"mynewtext"[..]);
        let table = LcsTable::build(a, b);
        assert_eq!(table.at(a.len(), b.len()), 6);
        let (subsequence, ranges) = walk(a, b, &table);
        assert_eq!(subsequence, b"mytext");
        assert_eq!(ranges, vec![MatchRange { a: (4, 7), b: (5, 8) }, MatchRange { a: (2, 3), b: (0, 1) }]);
        let (empty, none) = walk(b"", b"abc", &LcsTable::build(b"", b"abc"));
        assert!(empty.is_empty() && none.is_empty());
    }
}
