//! Bitmaps, Redis's bit operations on string values: GETBIT SETBIT BITCOUNT BITPOS BITOP (and
//! BITFIELD in `bitfield.rs`). Bit 0
//! is the most significant bit of the first byte; a string reads as followed by zero bits for
//! ever. The argument checks come in Redis 7.0's order, which decides the error a client sees.

use hybridkv_resp::Reply;

use super::{is, parse_integer, read_string, strings::check_string_size, NOT_INTEGER, SYNTAX_ERROR};
use crate::command::{fail, Call, CommandError, CommandResult};
use crate::keyspace_events::{GENERIC, STRING};
use crate::values::encode_string;

/// Bits a bitmap may address: Redis's 512 MiB bulk limit (`proto-max-bulk-len`) in bits. The
/// namespace's value limit (`check_string_size`) may be lower.
pub(super) const BIT_OFFSET_END: u64 = 512 * 1024 * 1024 * 8;

/// A bit offset as GETBIT and SETBIT read it.
fn parse_bit_offset(text: &[u8]) -> Result<u64, CommandError> {
    let offset = parse_integer(text).ok().and_then(|offset| u64::try_from(offset).ok()).filter(|offset| *offset < BIT_OFFSET_END);
    offset.map_or_else(|| fail("ERR bit offset is not an integer or out of range"), Ok)
}

pub(super) fn bit_at(value: &[u8], offset: u64) -> u8 {
    let byte = value.get((offset / 8) as usize).copied().unwrap_or(0);
    (byte >> (7 - offset % 8)) & 1
}

pub fn getbit(call: &mut Call<'_>) -> CommandResult {
    let offset = parse_bit_offset(&call.args[2])?;
    let value = read_string(call.store, &call.args[1])?.map(|(value, _)| value).unwrap_or_default();
    Ok(Reply::Integer(i64::from(bit_at(&value, offset))))
}

/// SETBIT key offset 0|1: the bit's previous value. The string grows with zero bytes to hold the
/// bit; a SETBIT that changes nothing writes nothing (and so does not disturb WATCH, as in Redis).
pub fn setbit(call: &mut Call<'_>) -> CommandResult {
    let offset = parse_bit_offset(&call.args[2])?;
    let bit = match parse_integer(&call.args[3]) {
        Ok(bit @ (0 | 1)) => bit as u8,
        _ => return fail("ERR bit is not an integer or out of range"),
    };
    let key = &call.args[1];
    let (value, expiry) = read_string(call.store, key)?.unwrap_or_default();
    let byte_at = (offset / 8) as usize;
    let previous = bit_at(&value, offset);
    if previous == bit && byte_at < value.len() {
        return Ok(Reply::Integer(i64::from(previous)));
    }
    check_string_size(call, byte_at as u64 + 1)?;
    let mut value = value.to_vec();
    if value.len() <= byte_at {
        value.resize(byte_at + 1, 0);
    }
    let mask = 1u8 << (7 - offset % 8);
    value[byte_at] = if bit == 1 { value[byte_at] | mask } else { value[byte_at] & !mask };
    call.store.put(key, &encode_string(&value), expiry)?;
    call.notify(STRING, "setbit", key);
    Ok(Reply::Integer(i64::from(previous)))
}

/// A BITCOUNT or BITPOS range in bits, first and last included, inside the string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct BitRange {
    first: u64,
    last: u64,
}

/// Redis's range arithmetic: `start` and `end` count bytes, or bits with BIT; negative ones
/// count from the end; both are clamped into the string. None for an empty range.
fn bit_range(value_bytes: usize, start: i64, end: i64, in_bits: bool) -> Option<BitRange> {
    let total = if in_bits { value_bytes as i64 * 8 } else { value_bytes as i64 };
    let from_end = |index: i64| if index < 0 { (total + index).max(0) } else { index };
    let (start, end) = (from_end(start), from_end(end).min(total - 1));
    if start > end {
        return None;
    }
    let unit = if in_bits { 1 } else { 8 };
    Some(BitRange { first: start as u64 * unit, last: end as u64 * unit + unit - 1 })
}

/// BIT or BYTE, the unit of a range (BYTE when absent).
fn parse_range_unit(option: Option<&bytes::Bytes>) -> Result<bool, CommandError> {
    match option {
        None => Ok(false),
        Some(option) if is(option, "BIT") => Ok(true),
        Some(option) if is(option, "BYTE") => Ok(false),
        Some(_) => fail(SYNTAX_ERROR),
    }
}

fn count_ones(value: &[u8], range: BitRange) -> u64 {
    let (first_byte, last_byte) = ((range.first / 8) as usize, (range.last / 8) as usize);
    let whole: u64 = value[first_byte..=last_byte].iter().map(|byte| u64::from(byte.count_ones())).sum();
    // The bits of the first and last bytes outside the range.
    let before = u64::from(value[first_byte].checked_shr(8 - (range.first % 8) as u32).unwrap_or(0).count_ones());
    let after = u64::from((value[last_byte] & ((1u16 << (7 - range.last % 8)) - 1) as u8).count_ones());
    whole - before - after
}

/// The first bit of the range that is `bit`, passing over whole bytes without one.
fn first_bit(value: &[u8], range: BitRange, bit: u8) -> Option<u64> {
    let byte_without = if bit == 1 { 0x00 } else { 0xff };
    let mut offset = range.first;
    while offset <= range.last {
        if offset.is_multiple_of(8) && offset + 7 <= range.last && value[(offset / 8) as usize] == byte_without {
            offset += 8;
        } else if bit_at(value, offset) == bit {
            return Some(offset);
        } else {
            offset += 1;
        }
    }
    None
}

/// BITCOUNT key [start end [BYTE|BIT]]: the set bits of the string or of the range.
pub fn bitcount(call: &mut Call<'_>) -> CommandResult {
    let Some((value, _)) = read_string(call.store, &call.args[1])? else { return Ok(Reply::Integer(0)) };
    let range = match call.args.len() {
        2 => bit_range(value.len(), 0, -1, false),
        4 | 5 => {
            let (start, end) = (parse_integer(&call.args[2])?, parse_integer(&call.args[3])?);
            if start < 0 && end < 0 && start > end {
                return Ok(Reply::Integer(0));
            }
            bit_range(value.len(), start, end, parse_range_unit(call.args.get(4))?)
        }
        _ => return fail(SYNTAX_ERROR),
    };
    Ok(Reply::Integer(range.map_or(0, |range| count_ones(&value, range)) as i64))
}

/// BITPOS key bit [start [end [BYTE|BIT]]]: the first bit of the range that is `bit`, or -1.
/// Looking for a 0 without an end, the bits past the string count as zeros (the answer may be
/// the string's length in bits); a missing key is all zeros.
pub fn bitpos(call: &mut Call<'_>) -> CommandResult {
    let bit = match parse_integer(&call.args[2]).or_else(|_| fail(NOT_INTEGER))? {
        bit @ (0 | 1) => bit as u8,
        _ => return fail("ERR The bit argument must be 1 or 0."),
    };
    let Some((value, _)) = read_string(call.store, &call.args[1])? else { return Ok(Reply::Integer(if bit == 1 { -1 } else { 0 })) };
    let (range, end_given) = match call.args.len() {
        3 => (bit_range(value.len(), 0, -1, false), false),
        4..=6 => {
            let start = parse_integer(&call.args[3])?;
            let in_bits = parse_range_unit(call.args.get(5))?;
            let end = call.args.get(4).map(|end| parse_integer(end)).transpose()?;
            (bit_range(value.len(), start, end.unwrap_or(-1), in_bits), end.is_some())
        }
        _ => return fail(SYNTAX_ERROR),
    };
    let Some(range) = range else { return Ok(Reply::Integer(-1)) };
    Ok(Reply::Integer(match first_bit(&value, range, bit) {
        Some(offset) => offset as i64,
        None if bit == 0 && !end_given => range.last as i64 + 1,
        None => -1,
    }))
}

/// BITOP AND|OR|XOR|NOT destkey key [key ...]: the sources combined byte by byte (a shorter or
/// missing source reads as zero bytes) into destkey, replacing whatever it held, without expiry;
/// an empty result deletes destkey. Answers the result's length.
pub fn bitop(call: &mut Call<'_>) -> CommandResult {
    let operation = &call.args[1];
    // None: NOT, which negates its one source.
    let combine: Option<fn(u8, u8) -> u8> = if is(operation, "AND") {
        Some(|left, right| left & right)
    } else if is(operation, "OR") {
        Some(|left, right| left | right)
    } else if is(operation, "XOR") {
        Some(|left, right| left ^ right)
    } else if is(operation, "NOT") {
        None
    } else {
        return fail(SYNTAX_ERROR);
    };
    let sources = &call.args[3..];
    if combine.is_none() && sources.len() != 1 {
        return fail("ERR BITOP NOT must be called with a single source key.");
    }
    let mut values = Vec::with_capacity(sources.len());
    for source in sources {
        values.push(read_string(call.store, source)?.map(|(value, _)| value).unwrap_or_default());
    }
    let length = values.iter().map(|value| value.len()).max().unwrap_or(0);
    let byte_of = |value: &bytes::Bytes, at: usize| value.get(at).copied().unwrap_or(0);
    let result: Vec<u8> = (0..length)
        .map(|at| match combine {
            None => !byte_of(&values[0], at),
            Some(combine) => values[1..].iter().fold(byte_of(&values[0], at), |combined, value| combine(combined, byte_of(value, at))),
        })
        .collect();
    let destination = &call.args[2];
    if result.is_empty() {
        if call.store.delete(destination)? {
            call.notify(GENERIC, "del", destination);
        }
    } else {
        call.store.put(destination, &encode_string(&result), 0)?;
        call.notify(STRING, "set", destination);
    }
    Ok(Reply::Integer(length as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_count_from_either_end_and_are_clamped_into_the_string() {
        assert_eq!(bit_range(3, 0, -1, false), Some(BitRange { first: 0, last: 23 }));
        assert_eq!(bit_range(3, -2, 100, false), Some(BitRange { first: 8, last: 23 }));
        assert_eq!(bit_range(3, 5, 17, true), Some(BitRange { first: 5, last: 17 }));
        assert_eq!(bit_range(3, -100, -20, true), Some(BitRange { first: 0, last: 4 }));
        assert_eq!(bit_range(3, 2, 1, false), None);
        assert_eq!(bit_range(0, 0, -1, false), None);
    }

    #[test]
    fn the_first_bit_of_a_range_is_found_past_whole_bytes_without_it() {
        let value = [0x00, 0x00, 0b0001_0000, 0xff, 0xff, 0b1110_1111];
        let range = |first, last| BitRange { first, last };
        assert_eq!(first_bit(&value, range(0, 47), 1), Some(19));
        assert_eq!(first_bit(&value, range(20, 47), 1), Some(24));
        assert_eq!(first_bit(&value, range(24, 47), 0), Some(43));
        assert_eq!(first_bit(&value, range(24, 42), 0), None);
        assert_eq!(first_bit(&value, range(0, 18), 1), None);
        for first in 0..48 {
            for last in first..48 {
                for bit in [0, 1] {
                    let expected = (first..=last).find(|offset| bit_at(&value, *offset) == bit);
                    assert_eq!(first_bit(&value, range(first, last), bit), expected, "{first}..={last} bit {bit}");
                }
            }
        }
    }

    #[test]
    fn counts_only_the_bits_inside_the_range() {
        let value = [0b1111_1111, 0b1010_1010, 0b0000_1111];
        assert_eq!(count_ones(&value, BitRange { first: 0, last: 23 }), 16);
        assert_eq!(count_ones(&value, BitRange { first: 3, last: 3 }), 1);
        assert_eq!(count_ones(&value, BitRange { first: 6, last: 9 }), 3);
        assert_eq!(count_ones(&value, BitRange { first: 9, last: 20 }), 4);
        for first in 0..24 {
            for last in first..24 {
                let expected = (first..=last).filter(|offset| bit_at(&value, *offset) == 1).count() as u64;
                assert_eq!(count_ones(&value, BitRange { first, last }), expected, "{first}..={last}");
            }
        }
    }
}
