//! BITFIELD and BITFIELD_RO: signed integers of 1 to 64 bits and unsigned ones of 1 to 63 bits at
//! any bit offset of a string, read, set and incremented with Redis 7.0's overflow rules (WRAP,
//! SAT, FAIL) and its order of argument checks.

use hybridkv_resp::Reply;

use super::bits::{bit_at, BIT_OFFSET_END};
use super::{is, parse_integer, read_string, strings::check_string_size, NOT_INTEGER, SYNTAX_ERROR};
use crate::command::{fail, Call, CommandError, CommandResult};
use crate::keyspace_events::STRING;
use crate::values::encode_string;

const INVALID_TYPE: &str = "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Overflow {
    Wrap,
    Saturate,
    Fail,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operation {
    Get,
    Set(i64),
    IncrementBy(i64),
}

/// An integer field: its sign, width and first bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Field {
    signed: bool,
    bits: u32,
    offset: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FieldOperation {
    operation: Operation,
    field: Field,
    overflow: Overflow,
}

/// `i1`…`i64` or `u1`…`u63` (the letter in lower case, as Redis reads it).
fn parse_type(text: &[u8]) -> Result<(bool, u32), CommandError> {
    let signed = match text.first() {
        Some(b'i') => true,
        Some(b'u') => false,
        _ => return fail(INVALID_TYPE),
    };
    let bits_max = if signed { 64 } else { 63 };
    match parse_integer(&text[1..]) {
        Ok(bits) if (1..=bits_max).contains(&bits) => Ok((signed, bits as u32)),
        _ => fail(INVALID_TYPE),
    }
}

/// A field's first bit: a bit offset, or `#n` for the n-th field of this width.
fn parse_field_offset(text: &[u8], bits: u32) -> Result<u64, CommandError> {
    let (digits, unit) = match text.strip_prefix(b"#") {
        Some(digits) => (digits, i64::from(bits)),
        None => (text, 1),
    };
    let offset = parse_integer(digits).ok().and_then(|offset| offset.checked_mul(unit)).and_then(|offset| u64::try_from(offset).ok());
    offset.filter(|offset| *offset < BIT_OFFSET_END).map_or_else(|| fail("ERR bit offset is not an integer or out of range"), Ok)
}

/// The operations of `BITFIELD key op…`, each with the OVERFLOW in force where it appears.
fn parse_operations(args: &[bytes::Bytes]) -> Result<Vec<FieldOperation>, CommandError> {
    let mut operations = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut at = 2;
    while at < args.len() {
        let remaining = args.len() - at - 1;
        let name = &args[at];
        if is(name, "overflow") && remaining >= 1 {
            overflow = match &args[at + 1] {
                kind if is(kind, "wrap") => Overflow::Wrap,
                kind if is(kind, "sat") => Overflow::Saturate,
                kind if is(kind, "fail") => Overflow::Fail,
                _ => return fail("ERR Invalid OVERFLOW type specified"),
            };
            at += 2;
            continue;
        }
        let writes = is(name, "set") || is(name, "incrby");
        if !(is(name, "get") && remaining >= 2 || writes && remaining >= 3) {
            return fail(SYNTAX_ERROR);
        }
        let (signed, bits) = parse_type(&args[at + 1])?;
        let offset = parse_field_offset(&args[at + 2], bits)?;
        let operation = if !writes {
            Operation::Get
        } else {
            let value = parse_integer(&args[at + 3]).or_else(|_| fail(NOT_INTEGER))?;
            if is(name, "set") { Operation::Set(value) } else { Operation::IncrementBy(value) }
        };
        operations.push(FieldOperation { operation, field: Field { signed, bits, offset }, overflow });
        at += if writes { 4 } else { 3 };
    }
    Ok(operations)
}

/// The field's bits as an unsigned number (bits past the string's end read as zeros).
fn read_unsigned(value: &[u8], field: Field) -> u64 {
    (0..u64::from(field.bits)).fold(0, |number, bit| (number << 1) | u64::from(bit_at(value, field.offset + bit)))
}

/// The field's bits, sign-extended when the field is signed, as Redis replies with them.
fn read_field(value: &[u8], field: Field) -> i64 {
    let number = read_unsigned(value, field);
    if field.signed && field.bits < 64 && number & (1 << (field.bits - 1)) != 0 {
        (number | (u64::MAX << field.bits)) as i64
    } else {
        number as i64
    }
}

/// Writes the low `field.bits` bits of `number`; `value` holds the whole field.
fn write_field(value: &mut [u8], field: Field, number: u64) {
    for bit in 0..u64::from(field.bits) {
        let offset = field.offset + bit;
        let mask = 1u8 << (7 - offset % 8);
        let byte = &mut value[(offset / 8) as usize];
        if number >> (u64::from(field.bits) - 1 - bit) & 1 == 1 {
            *byte |= mask;
        } else {
            *byte &= !mask;
        }
    }
}

/// `value + increment` in an unsigned field: the number to store, or None when it overflows
/// under FAIL. Redis's arithmetic, wrapping casts included.
fn add_unsigned(value: u64, increment: i64, bits: u32, overflow: Overflow) -> Option<u64> {
    let max = (1u64 << bits) - 1;
    let wrapped = value.wrapping_add(increment as u64) & max;
    let above = value > max || (increment > 0 && increment > max.wrapping_sub(value) as i64);
    let below = !above && increment < 0 && increment < value.wrapping_neg() as i64;
    match (above, below, overflow) {
        (false, false, _) => Some(value.wrapping_add(increment as u64)),
        (_, _, Overflow::Fail) => None,
        (_, _, Overflow::Wrap) => Some(wrapped),
        (true, _, Overflow::Saturate) => Some(max),
        (_, true, Overflow::Saturate) => Some(0),
    }
}

/// `value + increment` in a signed field, as `add_unsigned`.
fn add_signed(value: i64, increment: i64, bits: u32, overflow: Overflow) -> Option<i64> {
    let max = if bits == 64 { i64::MAX } else { (1i64 << (bits - 1)) - 1 };
    let min = -max - 1;
    let (increment_max, increment_min) = (max.wrapping_sub(value), min.wrapping_sub(value));
    let above = value > max || (bits != 64 && increment > increment_max) || (value >= 0 && increment > 0 && increment > increment_max);
    let below = !above && (value < min || (bits != 64 && increment < increment_min) || (value < 0 && increment < 0 && increment < increment_min));
    match (above, below, overflow) {
        (false, false, _) => Some(value.wrapping_add(increment)),
        (_, _, Overflow::Fail) => None,
        (_, _, Overflow::Wrap) => {
            let sum = (value as u64).wrapping_add(increment as u64);
            if bits == 64 {
                return Some(sum as i64);
            }
            let high = u64::MAX << bits;
            Some(if sum & (1 << (bits - 1)) != 0 { sum | high } else { sum & !high } as i64)
        }
        (true, _, Overflow::Saturate) => Some(max),
        (_, true, Overflow::Saturate) => Some(min),
    }
}

/// Runs one SET or INCRBY on `value`: its reply (the old value for SET, the new one for
/// INCRBY, nil when FAIL refused it).
fn apply_write(value: &mut [u8], operation: FieldOperation) -> Reply {
    let FieldOperation { operation, field, overflow } = operation;
    let old = read_field(value, field);
    let (stored, reply) = match (operation, field.signed) {
        (Operation::Set(number), true) => (add_signed(number, 0, field.bits, overflow).map(|new| new as u64), old),
        (Operation::Set(number), false) => (add_unsigned(number as u64, 0, field.bits, overflow), old),
        (Operation::IncrementBy(increment), true) => {
            let new = add_signed(old, increment, field.bits, overflow);
            (new.map(|new| new as u64), new.unwrap_or_default())
        }
        (Operation::IncrementBy(increment), false) => {
            let new = add_unsigned(old as u64, increment, field.bits, overflow);
            (new, new.unwrap_or_default() as i64)
        }
        (Operation::Get, _) => unreachable!("GET does not write"),
    };
    match stored {
        Some(stored) => {
            write_field(value, field, stored);
            Reply::Integer(reply)
        }
        None => Reply::Null,
    }
}

/// BITFIELD key [GET type offset] [SET type offset value] [INCRBY type offset increment]
/// [OVERFLOW WRAP|SAT|FAIL]…: one reply per GET, SET and INCRBY. When any sets or increments,
/// the string grows with zero bytes to hold every field written and is rewritten (even when a
/// FAIL refused every write: Redis also counts the key modified then).
pub fn bitfield(call: &mut Call<'_>) -> CommandResult {
    let operations = parse_operations(call.args)?;
    let write_end = operations.iter().filter(|operation| operation.operation != Operation::Get).map(|operation| operation.field.offset + u64::from(operation.field.bits)).max();
    let key = &call.args[1];
    let (value, expiry) = read_string(call.store, key)?.unwrap_or_default();
    let Some(write_end) = write_end else { return Ok(read_fields(&value, &operations)) };
    let bytes = write_end.div_ceil(8);
    check_string_size(call, bytes)?;
    let mut value = value.to_vec();
    if (value.len() as u64) < bytes {
        value.resize(bytes as usize, 0);
    }
    let mut changes = 0;
    let replies = operations
        .iter()
        .map(|operation| match operation.operation {
            Operation::Get => Reply::Integer(read_field(&value, operation.field)),
            Operation::Set(_) | Operation::IncrementBy(_) => {
                let reply = apply_write(&mut value, *operation);
                changes += usize::from(!matches!(reply, Reply::Null));
                reply
            }
        })
        .collect();
    call.store.put(key, &encode_string(&value), expiry)?;
    // As Redis: announced when a write was applied, not when OVERFLOW FAIL refused them all.
    if changes > 0 {
        call.notify(STRING, "setbit", key);
    }
    Ok(Reply::Array(replies))
}

/// BITFIELD_RO key [GET type offset]…
pub fn bitfield_ro(call: &mut Call<'_>) -> CommandResult {
    let operations = parse_operations(call.args)?;
    if operations.iter().any(|operation| operation.operation != Operation::Get) {
        return fail("ERR BITFIELD_RO only supports the GET subcommand");
    }
    let value = read_string(call.store, &call.args[1])?.map(|(value, _)| value).unwrap_or_default();
    Ok(read_fields(&value, &operations))
}

fn read_fields(value: &[u8], operations: &[FieldOperation]) -> Reply {
    Reply::Array(operations.iter().map(|operation| Reply::Integer(read_field(value, operation.field))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(signed: bool, bits: u32, offset: u64) -> Field {
        Field { signed, bits, offset }
    }

    #[test]
    fn fields_are_read_and_written_most_significant_bit_first() {
        let mut value = vec![0u8; 3];
        write_field(&mut value, field(false, 8, 4), 0xab);
        assert_eq!(value, [0x0a, 0xb0, 0x00]);
        assert_eq!(read_field(&value, field(false, 8, 4)), 0xab);
        assert_eq!(read_field(&value, field(true, 8, 4)), -85, "sign-extended");
        assert_eq!(read_field(&value, field(false, 16, 16)), 0, "past the end reads zeros");
        assert_eq!(read_field(&[0xff; 8], field(true, 64, 0)), -1);
        assert_eq!(read_field(&[0xff; 8], field(false, 63, 0)), i64::MAX);
    }

    #[test]
    fn unsigned_overflow_wraps_saturates_or_fails() {
        assert_eq!(add_unsigned(250, 10, 8, Overflow::Wrap), Some(4));
        assert_eq!(add_unsigned(250, 10, 8, Overflow::Saturate), Some(255));
        assert_eq!(add_unsigned(250, 10, 8, Overflow::Fail), None);
        assert_eq!(add_unsigned(5, -10, 8, Overflow::Wrap), Some(251));
        assert_eq!(add_unsigned(5, -10, 8, Overflow::Saturate), Some(0));
        assert_eq!(add_unsigned(5, -5, 8, Overflow::Fail), Some(0));
        assert_eq!(add_unsigned(-1i64 as u64, 0, 8, Overflow::Saturate), Some(255), "SET of a negative number");
        assert_eq!(add_unsigned(300, 0, 8, Overflow::Wrap), Some(44));
    }

    #[test]
    fn signed_overflow_wraps_saturates_or_fails() {
        assert_eq!(add_signed(120, 10, 8, Overflow::Wrap), Some(-126));
        assert_eq!(add_signed(120, 10, 8, Overflow::Saturate), Some(127));
        assert_eq!(add_signed(-120, -10, 8, Overflow::Saturate), Some(-128));
        assert_eq!(add_signed(-120, -10, 8, Overflow::Fail), None);
        assert_eq!(add_signed(i64::MAX, 1, 64, Overflow::Wrap), Some(i64::MIN));
        assert_eq!(add_signed(i64::MAX, 1, 64, Overflow::Saturate), Some(i64::MAX));
        assert_eq!(add_signed(-5, i64::MAX, 64, Overflow::Fail), Some(i64::MAX - 5));
        assert_eq!(add_signed(200, 0, 8, Overflow::Wrap), Some(-56), "SET past the field's range");
    }

    #[test]
    fn types_and_offsets_parse_as_redis_reads_them() {
        assert_eq!(parse_type(b"i64").unwrap(), (true, 64));
        assert_eq!(parse_type(b"u63").unwrap(), (false, 63));
        for bad in [&b"u64"[..], b"i65", b"i0", b"I8", b"i", b"i08", b"x8", b""] {
            assert!(parse_type(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(parse_field_offset(b"#3", 8).unwrap(), 24);
        assert_eq!(parse_field_offset(b"100", 8).unwrap(), 100);
        assert!(parse_field_offset(b"-1", 8).is_err());
        assert!(parse_field_offset(b"#", 8).is_err());
        assert!(parse_field_offset(b"#9223372036854775807", 8).is_err(), "the product overflows");
        assert!(parse_field_offset(b"4294967296", 8).is_err(), "past 512 MiB");
    }
}
