//! DUMP and RESTORE payloads: one value in Redis's RDB object encoding, then the RDB version
//! (u16 LE) and a CRC-64 (Redis's Jones polynomial, u64 LE) of everything before it, so that
//! values move between hybridkv and Redis in both directions.
//!
//! Written: a string as RDB type 0 with a plain length-prefixed body, a hash as type 4 (field,
//! value pairs), a set as type 2 (members, as Redis writes a hashtable-encoded set), a list as
//! type 18 (a quicklist, as Redis 7.0 writes one: listpack nodes of at most 8 KiB, an element
//! larger than that alone in its node, one of 1 GiB or more in a PLAIN node), version 10 (Redis
//! 7.0's). Read: those, plus what Redis writes for strings, hashes, sets and lists from version
//! 6 on: integer-encoded and LZF-compressed strings, hashes as a listpack (type 16, Redis 7) or
//! a ziplist (type 13, Redis 6), sets as an intset (type 11) or a listpack (type 20, Redis 7.2),
//! lists as a quicklist of ziplists (type 14, Redis 6) or a plain count of strings (type 1).
//! A set must have members, all distinct, and a list elements, as Redis requires: encoding an
//! empty set or list gives a payload that neither Redis nor `decode_dump` restores. Other types
//! (sorted sets, streams, …) are refused: hybridkv has no such values.
//!
//! Length encoding (the two high bits of the first byte): `00` a 6-bit length, `01` a 14-bit
//! big-endian length, `10000000` a u32 BE, `10000001` a u64 BE follows, `11` a special string:
//! 0 an i8, 1 an i16 LE, 2 an i32 LE, 3 LZF (compressed length, original length, then the
//! compressed bytes).

use bytes::Bytes;
use crc::{Crc, CRC_64_REDIS};

/// The RDB version DUMP writes: Redis 7.0's, which every Redis from 7.0 on restores.
pub const DUMP_RDB_VERSION_WRITTEN: u16 = 10;
/// The newest RDB version RESTORE takes (Redis 7.4's): its string and hash encodings are those
/// read here; a newer version may have changed them.
pub const DUMP_RDB_VERSION_READ_MAX: u16 = 12;

/// What a payload may make RESTORE build, so that a small payload cannot make it allocate much
/// more than it holds: an LZF-compressed string decompresses to at most `string_bytes_max`
/// bytes, a hash has at most `elements_max` fields, a set at most `elements_max` members, a list
/// at most `elements_max` elements. Plain strings are bounded by the payload.
#[derive(Clone, Copy, Debug)]
pub struct DumpLimits {
    pub string_bytes_max: usize,
    pub elements_max: usize,
}

/// LZF expands at most 88-fold (a 3-byte back reference copies up to 264 bytes): a header
/// claiming more is refused before anything is allocated for it.
const LZF_EXPANSION_MAX: usize = 88;
const FOOTER_BYTES: usize = 2 + 8;
const TYPE_STRING: u8 = 0;
const TYPE_LIST: u8 = 1;
const TYPE_SET: u8 = 2;
const TYPE_ZSET: u8 = 3;
const TYPE_HASH: u8 = 4;
const TYPE_ZSET_2: u8 = 5;
const TYPE_SET_INTSET: u8 = 11;
const TYPE_ZSET_ZIPLIST: u8 = 12;
const TYPE_HASH_ZIPLIST: u8 = 13;
const TYPE_LIST_QUICKLIST: u8 = 14;
const TYPE_HASH_LISTPACK: u8 = 16;
const TYPE_ZSET_LISTPACK: u8 = 17;
const TYPE_LIST_QUICKLIST_2: u8 = 18;
const TYPE_SET_LISTPACK: u8 = 20;
/// A type 18 node's container: one element as it is.
const NODE_PLAIN: u64 = 1;
/// A type 18 node's container: a listpack of elements.
const NODE_PACKED: u64 = 2;
/// Redis's default list-max-listpack-size -2: a node's listpack grows to at most 8 KiB; an
/// element too large for that is alone in its node.
const NODE_LISTPACK_BYTES_MAX: usize = 8 << 10;
/// Redis 7.0's packed_threshold: an element this long goes in a PLAIN node. Below it, a
/// listpack holding it stays well under its u32 size field.
const PLAIN_ELEMENT_BYTES_MIN: usize = 1 << 30;
/// A listpack's entry count when it holds more than a u16 counts (a node written here holds at
/// most 4,092: 8 KiB of 2-byte entries, or one larger element).
const LISTPACK_COUNT_UNKNOWN: u16 = u16::MAX;
const LENGTH_6_BITS: u8 = 0;
const LENGTH_14_BITS: u8 = 1;
const LENGTH_WIDE: u8 = 2;
const LENGTH_32_BITS: u8 = 0x80;
const LENGTH_64_BITS: u8 = 0x81;
const SPECIAL_INT8: u8 = 0;
const SPECIAL_INT16: u8 = 1;
const SPECIAL_INT32: u8 = 2;
const SPECIAL_LZF: u8 = 3;
/// The end marker of a listpack and of a ziplist.
const AGGREGATE_END: u8 = 0xFF;
const LISTPACK_HEADER_BYTES: usize = 6;
const ZIPLIST_HEADER_BYTES: usize = 10;
/// An intset's header: the bytes per integer (u32 LE), then the integer count (u32 LE).
const INTSET_HEADER_BYTES: usize = 8;

static CRC64: Crc<u64> = Crc::<u64>::new(&CRC_64_REDIS);

/// Type 3's score lengths that stand for NaN and the infinities.
const ZSET_SCORE_NAN: u8 = 253;
const ZSET_SCORE_INFINITY: u8 = 254;
const ZSET_SCORE_NEGATIVE_INFINITY: u8 = 255;

/// A value as a DUMP payload carries it.
#[derive(Clone, Debug, PartialEq)]
pub enum DumpValue {
    String(Bytes),
    /// Fields in the payload's order.
    Hash(Vec<(Bytes, Bytes)>),
    /// Members in the payload's order (an intset's ascending order).
    Set(Vec<Bytes>),
    /// Elements in list order, head first.
    List(Vec<Bytes>),
    /// Members and scores in the payload's order.
    SortedSet(Vec<(Bytes, f64)>),
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DumpError {
    /// Too short for the footer, a version past DUMP_RDB_VERSION_READ_MAX, or a checksum that
    /// does not match (Redis's `DUMP payload version or checksum are wrong`).
    #[error("DUMP payload version or checksum are wrong")]
    VersionOrChecksum,
    /// The body is not a string, hash, set, list or sorted set in an encoding read here, a
    /// set, list or sorted set is empty, a set or sorted set repeats a member, or a score is
    /// NaN or not a number (Redis's `Bad data format`).
    #[error("Bad data format")]
    BadFormat,
    /// Past a `DumpLimits` bound: how much of what, and the limit.
    #[error("the payload holds {size} {what}, over the limit of {limit}")]
    OverLimit { what: &'static str, size: u64, limit: usize },
}

/// The DUMP payload of `value`.
pub fn encode_dump(value: &DumpValue) -> Vec<u8> {
    let mut payload = Vec::new();
    match value {
        DumpValue::String(bytes) => {
            payload.push(TYPE_STRING);
            put_string(&mut payload, bytes);
        }
        DumpValue::Hash(fields) => {
            payload.push(TYPE_HASH);
            put_length(&mut payload, fields.len() as u64);
            for (field, value) in fields {
                put_string(&mut payload, field);
                put_string(&mut payload, value);
            }
        }
        DumpValue::Set(members) => {
            payload.push(TYPE_SET);
            put_length(&mut payload, members.len() as u64);
            for member in members {
                put_string(&mut payload, member);
            }
        }
        DumpValue::List(elements) => {
            payload.push(TYPE_LIST_QUICKLIST_2);
            put_quicklist(&mut payload, elements, PLAIN_ELEMENT_BYTES_MIN);
        }
        DumpValue::SortedSet(members) => {
            payload.push(TYPE_ZSET_2);
            put_length(&mut payload, members.len() as u64);
            for (member, score) in members {
                put_string(&mut payload, member);
                payload.extend_from_slice(&score.to_le_bytes());
            }
        }
    }
    payload.extend_from_slice(&DUMP_RDB_VERSION_WRITTEN.to_le_bytes());
    let checksum = CRC64.checksum(&payload);
    payload.extend_from_slice(&checksum.to_le_bytes());
    payload
}

/// The value of a DUMP payload, its footer checked first.
pub fn decode_dump(payload: &[u8], limits: DumpLimits) -> Result<DumpValue, DumpError> {
    let body_end = payload.len().checked_sub(FOOTER_BYTES).ok_or(DumpError::VersionOrChecksum)?;
    let version = u16::from_le_bytes([payload[body_end], payload[body_end + 1]]);
    let checksum = u64::from_le_bytes(payload[body_end + 2..].try_into().expect("8 bytes"));
    if version > DUMP_RDB_VERSION_READ_MAX || CRC64.checksum(&payload[..body_end + 2]) != checksum {
        return Err(DumpError::VersionOrChecksum);
    }
    let mut body = Reader { bytes: &payload[..body_end], string_bytes_max: limits.string_bytes_max };
    let value = match body.byte()? {
        TYPE_STRING => DumpValue::String(Bytes::from(body.string()?)),
        TYPE_HASH => DumpValue::Hash(hash_fields(&mut body, limits)?),
        TYPE_HASH_LISTPACK => DumpValue::Hash(pairs(listpack_entries(&body.string()?, limits.string_bytes_max)?)?),
        TYPE_HASH_ZIPLIST => DumpValue::Hash(pairs(ziplist_entries(&body.string()?, limits.string_bytes_max)?)?),
        TYPE_SET => DumpValue::Set(counted_strings(&mut body, "members in a set", limits)?),
        TYPE_SET_INTSET => DumpValue::Set(intset_members(&body.string()?, limits)?),
        TYPE_SET_LISTPACK => DumpValue::Set(listpack_entries(&body.string()?, limits.string_bytes_max)?.into_iter().map(Bytes::from).collect()),
        TYPE_LIST => DumpValue::List(counted_strings(&mut body, "elements in a list", limits)?),
        TYPE_LIST_QUICKLIST => DumpValue::List(quicklist_elements(&mut body, limits, ziplist_node)?),
        TYPE_LIST_QUICKLIST_2 => DumpValue::List(quicklist_elements(&mut body, limits, quicklist_2_node)?),
        TYPE_ZSET => DumpValue::SortedSet(scored_members(&mut body, limits, text_score)?),
        TYPE_ZSET_2 => DumpValue::SortedSet(scored_members(&mut body, limits, |body| Ok(f64::from_le_bytes(body.array()?)))?),
        TYPE_ZSET_ZIPLIST => DumpValue::SortedSet(scored_pairs(ziplist_entries(&body.string()?, limits.string_bytes_max)?)?),
        TYPE_ZSET_LISTPACK => DumpValue::SortedSet(scored_pairs(listpack_entries(&body.string()?, limits.string_bytes_max)?)?),
        _ => return Err(DumpError::BadFormat),
    };
    match &value {
        DumpValue::String(_) => {}
        DumpValue::Hash(fields) => check_elements(fields.len() as u64, "fields in a hash", limits)?,
        DumpValue::Set(members) => check_set(members, limits)?,
        DumpValue::List(elements) => check_list(elements, limits)?,
        DumpValue::SortedSet(members) => check_sorted_set(members, limits)?,
    }
    Ok(value)
}

/// Refuses `count` elements past `limits.elements_max`; called on a declared count before
/// anything is allocated for it, and again on what an aggregate held.
fn check_elements(count: u64, what: &'static str, limits: DumpLimits) -> Result<(), DumpError> {
    match count > limits.elements_max as u64 {
        true => Err(DumpError::OverLimit { what, size: count, limit: limits.elements_max }),
        false => Ok(()),
    }
}

/// A set as Redis restores one: within the limit, not empty, no member twice.
fn check_set(members: &[Bytes], limits: DumpLimits) -> Result<(), DumpError> {
    check_elements(members.len() as u64, "members in a set", limits)?;
    let mut seen = std::collections::HashSet::with_capacity(members.len());
    match !members.is_empty() && members.iter().all(|member| seen.insert(member)) {
        true => Ok(()),
        false => Err(DumpError::BadFormat),
    }
}

/// A sorted set as Redis restores one: within the limit, not empty, no member twice, no NaN.
fn check_sorted_set(members: &[(Bytes, f64)], limits: DumpLimits) -> Result<(), DumpError> {
    check_elements(members.len() as u64, "members in a sorted set", limits)?;
    let mut seen = std::collections::HashSet::with_capacity(members.len());
    match !members.is_empty() && members.iter().all(|(member, score)| !score.is_nan() && seen.insert(member)) {
        true => Ok(()),
        false => Err(DumpError::BadFormat),
    }
}

/// Type 3's and 5's count, then each member as a string and its score as `score` reads it.
fn scored_members(body: &mut Reader<'_>, limits: DumpLimits, score: fn(&mut Reader<'_>) -> Result<f64, DumpError>) -> Result<Vec<(Bytes, f64)>, DumpError> {
    let count = body.length()?;
    check_elements(count, "members in a sorted set", limits)?;
    let mut members = Vec::new();
    for _ in 0..count {
        let member = Bytes::from(body.string()?);
        members.push((member, score(body)?));
    }
    Ok(members)
}

/// Type 3's score: a length byte (or one of the special values), then the score as text.
fn text_score(body: &mut Reader<'_>) -> Result<f64, DumpError> {
    match body.byte()? {
        ZSET_SCORE_NAN => Ok(f64::NAN),
        ZSET_SCORE_INFINITY => Ok(f64::INFINITY),
        ZSET_SCORE_NEGATIVE_INFINITY => Ok(f64::NEG_INFINITY),
        length => parse_text_score(body.take(usize::from(length))?),
    }
}

fn parse_text_score(text: &[u8]) -> Result<f64, DumpError> {
    std::str::from_utf8(text).ok().and_then(|text| text.parse().ok()).ok_or(DumpError::BadFormat)
}

/// Members and scores from a ziplist's or listpack's entries, which alternate.
fn scored_pairs(entries: Vec<Vec<u8>>) -> Result<Vec<(Bytes, f64)>, DumpError> {
    pairs(entries)?.into_iter().map(|(member, score)| Ok((member, parse_text_score(&score)?))).collect()
}

/// A list as Redis restores one: within the limit, not empty.
fn check_list(elements: &[Bytes], limits: DumpLimits) -> Result<(), DumpError> {
    check_elements(elements.len() as u64, "elements in a list", limits)?;
    match elements.is_empty() {
        true => Err(DumpError::BadFormat),
        false => Ok(()),
    }
}

/// Type 4's count, then each field and its value as strings.
fn hash_fields(body: &mut Reader<'_>, limits: DumpLimits) -> Result<Vec<(Bytes, Bytes)>, DumpError> {
    let count = body.length()?;
    check_elements(count, "fields in a hash", limits)?;
    let mut fields = Vec::new();
    for _ in 0..count {
        let field = Bytes::from(body.string()?);
        fields.push((field, Bytes::from(body.string()?)));
    }
    Ok(fields)
}

/// A count of `what`, then each as a string: type 2's members, type 1's elements.
fn counted_strings(body: &mut Reader<'_>, what: &'static str, limits: DumpLimits) -> Result<Vec<Bytes>, DumpError> {
    let count = body.length()?;
    check_elements(count, what, limits)?;
    (0..count).map(|_| body.string().map(Bytes::from)).collect()
}

/// Reads one quicklist node's elements.
type NodeReader = fn(&mut Reader<'_>) -> Result<Vec<Vec<u8>>, DumpError>;

/// Type 14's or 18's node count, then each node as `node` reads it. A listpack or ziplist with
/// no entries is skipped, as Redis skips it. The node count is not held to `elements_max`:
/// nothing is allocated for it, and each node takes bytes of the payload. The elements are held
/// to it before each node's join them.
fn quicklist_elements(body: &mut Reader<'_>, limits: DumpLimits, node: NodeReader) -> Result<Vec<Bytes>, DumpError> {
    let nodes = body.length()?;
    let mut elements = Vec::new();
    for _ in 0..nodes {
        let entries = node(body)?;
        check_elements((elements.len() + entries.len()) as u64, "elements in a list", limits)?;
        elements.extend(entries.into_iter().map(Bytes::from));
    }
    Ok(elements)
}

/// A type 14 node: a ziplist.
fn ziplist_node(body: &mut Reader<'_>) -> Result<Vec<Vec<u8>>, DumpError> {
    ziplist_entries(&node_bytes(body)?, body.string_bytes_max)
}

/// A type 18 node: its container, then a listpack (PACKED) or a single element (PLAIN).
fn quicklist_2_node(body: &mut Reader<'_>) -> Result<Vec<Vec<u8>>, DumpError> {
    let container = body.length()?;
    if container != NODE_PACKED && container != NODE_PLAIN {
        return Err(DumpError::BadFormat);
    }
    let node = node_bytes(body)?;
    match container {
        NODE_PACKED => listpack_entries(&node, body.string_bytes_max),
        _ => Ok(vec![node]),
    }
}

/// A quicklist node's string, which Redis refuses empty (even a PLAIN node's element).
fn node_bytes(body: &mut Reader<'_>) -> Result<Vec<u8>, DumpError> {
    let node = body.string()?;
    match node.is_empty() {
        true => Err(DumpError::BadFormat),
        false => Ok(node),
    }
}

/// An intset's integers in decimal. Refused as Redis's intsetValidateIntegrity refuses them: a
/// width other than 2, 4 or 8 bytes, a count that does not fill the string exactly, or integers
/// not strictly ascending. Redis checks the order only with `sanitize-dump-payload yes`; it is
/// always checked here, since out of order is also how an intset would repeat a member.
fn intset_members(intset: &[u8], limits: DumpLimits) -> Result<Vec<Bytes>, DumpError> {
    let header = intset.get(..INTSET_HEADER_BYTES).ok_or(DumpError::BadFormat)?;
    let width = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
    let count = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
    check_elements(u64::from(count), "members in a set", limits)?;
    let integers = &intset[INTSET_HEADER_BYTES..];
    if !matches!(width, 2 | 4 | 8) || integers.len() as u64 != u64::from(count) * width as u64 {
        return Err(DumpError::BadFormat);
    }
    let values: Vec<i64> = integers.chunks_exact(width).map(intset_integer).collect();
    if !values.windows(2).all(|pair| pair[0] < pair[1]) {
        return Err(DumpError::BadFormat);
    }
    Ok(values.iter().map(|value| Bytes::from(value.to_string())).collect())
}

/// A signed little-endian integer of 2, 4 or 8 bytes.
fn intset_integer(bytes: &[u8]) -> i64 {
    match bytes.len() {
        2 => i64::from(i16::from_le_bytes(bytes.try_into().expect("2 bytes"))),
        4 => i64::from(i32::from_le_bytes(bytes.try_into().expect("4 bytes"))),
        _ => i64::from_le_bytes(bytes.try_into().expect("8 bytes")),
    }
}

fn put_length(payload: &mut Vec<u8>, length: u64) {
    if length < 1 << 6 {
        payload.push(length as u8);
    } else if length < 1 << 14 {
        payload.extend_from_slice(&((length as u16) | (u16::from(LENGTH_14_BITS) << 14)).to_be_bytes());
    } else if let Ok(length) = u32::try_from(length) {
        payload.push(LENGTH_32_BITS);
        payload.extend_from_slice(&length.to_be_bytes());
    } else {
        payload.push(LENGTH_64_BITS);
        payload.extend_from_slice(&length.to_be_bytes());
    }
}

fn put_string(payload: &mut Vec<u8>, bytes: &[u8]) {
    put_length(payload, bytes.len() as u64);
    payload.extend_from_slice(bytes);
}

/// Type 18's node count, then each node's container and string. An element of
/// `plain_bytes_min` or more is written PLAIN, every other node PACKED; `plain_bytes_min` is
/// over NODE_LISTPACK_BYTES_MAX, so that such an element is alone in its node.
fn put_quicklist(payload: &mut Vec<u8>, elements: &[Bytes], plain_bytes_min: usize) {
    debug_assert!(plain_bytes_min > NODE_LISTPACK_BYTES_MAX);
    let nodes = quicklist_nodes(elements);
    put_length(payload, nodes.len() as u64);
    for node in nodes {
        match node {
            [element] if element.len() >= plain_bytes_min => {
                put_length(payload, NODE_PLAIN);
                put_string(payload, element);
            }
            _ => {
                put_length(payload, NODE_PACKED);
                put_string(payload, &listpack_of(node));
            }
        }
    }
}

/// `elements` cut into runs whose listpack is at most NODE_LISTPACK_BYTES_MAX, as Redis fills
/// its nodes; an element larger than that makes a run of its own.
fn quicklist_nodes(elements: &[Bytes]) -> Vec<&[Bytes]> {
    let mut nodes = Vec::new();
    let (mut start, mut node_bytes) = (0, LISTPACK_HEADER_BYTES + 1);
    for (index, element) in elements.iter().enumerate() {
        let entry_bytes = listpack_string_entry_bytes(element.len());
        if index > start && node_bytes + entry_bytes > NODE_LISTPACK_BYTES_MAX {
            nodes.push(&elements[start..index]);
            (start, node_bytes) = (index, LISTPACK_HEADER_BYTES + 1);
        }
        node_bytes += entry_bytes;
    }
    if start < elements.len() {
        nodes.push(&elements[start..]);
    }
    nodes
}

/// A listpack of `elements`, each a string entry. Redis writes an element that reads as an
/// integer as an integer entry; a string entry restores the same bytes, and also keeps an
/// element such as `007` as it is.
fn listpack_of(elements: &[Bytes]) -> Vec<u8> {
    let mut listpack = vec![0; LISTPACK_HEADER_BYTES];
    for element in elements {
        put_listpack_string(&mut listpack, element);
    }
    listpack.push(AGGREGATE_END);
    let total = u32::try_from(listpack.len()).expect("an element of PLAIN_ELEMENT_BYTES_MIN or more is not packed");
    listpack[..4].copy_from_slice(&total.to_le_bytes());
    let count = u16::try_from(elements.len()).unwrap_or(LISTPACK_COUNT_UNKNOWN);
    listpack[4..6].copy_from_slice(&count.to_le_bytes());
    listpack
}

/// Bytes of the listpack string entry of `length` bytes: its header, the bytes and the
/// back-length.
fn listpack_string_entry_bytes(length: usize) -> usize {
    let header = match length {
        0..64 => 1,
        64..4096 => 2,
        _ => 5,
    };
    header + length + listpack_backlen_bytes(header + length)
}

/// A string entry: a 6-bit, 12-bit or 32-bit length, the bytes, then the back-length.
fn put_listpack_string(listpack: &mut Vec<u8>, bytes: &[u8]) {
    let start = listpack.len();
    let length = bytes.len();
    match length {
        0..64 => listpack.push(0x80 | length as u8),
        64..4096 => listpack.extend_from_slice(&[0xE0 | (length >> 8) as u8, length as u8]),
        _ => {
            listpack.push(0xF0);
            listpack.extend_from_slice(&u32::try_from(length).expect("a packed element is under 4 GiB").to_le_bytes());
        }
    }
    listpack.extend_from_slice(bytes);
    put_listpack_backlen(listpack, listpack.len() - start);
}

/// An entry's length, 7 bits a byte, most significant first: every byte but the first has its
/// high bit set, so that a reader walking back from the next entry knows where it stops.
fn put_listpack_backlen(listpack: &mut Vec<u8>, entry_bytes: usize) {
    let bytes = listpack_backlen_bytes(entry_bytes);
    for position in (0..bytes).rev() {
        let group = (entry_bytes >> (7 * position)) as u8 & 0x7F;
        listpack.push(if position + 1 == bytes { group } else { group | 0x80 });
    }
}

/// Fields and values from an aggregate's entries, which alternate.
fn pairs(entries: Vec<Vec<u8>>) -> Result<Vec<(Bytes, Bytes)>, DumpError> {
    if !entries.len().is_multiple_of(2) {
        return Err(DumpError::BadFormat);
    }
    let mut entries = entries.into_iter().map(Bytes::from);
    let mut fields = Vec::new();
    while let (Some(field), Some(value)) = (entries.next(), entries.next()) {
        fields.push((field, value));
    }
    Ok(fields)
}

/// Reads the body front to back; running out of bytes is a bad format.
struct Reader<'a> {
    bytes: &'a [u8],
    /// DumpLimits::string_bytes_max, for LZF strings.
    string_bytes_max: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, count: usize) -> Result<&'a [u8], DumpError> {
        if count > self.bytes.len() {
            return Err(DumpError::BadFormat);
        }
        let (taken, rest) = self.bytes.split_at(count);
        self.bytes = rest;
        Ok(taken)
    }

    fn byte(&mut self) -> Result<u8, DumpError> {
        Ok(self.take(1)?[0])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DumpError> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }

    /// A length, or the special encoding of a string (`Err(Ok(kind))`).
    fn length_or_special(&mut self) -> Result<Result<u64, u8>, DumpError> {
        let first = self.byte()?;
        Ok(match first >> 6 {
            LENGTH_6_BITS => Ok(u64::from(first & 0x3F)),
            LENGTH_14_BITS => Ok(u64::from(first & 0x3F) << 8 | u64::from(self.byte()?)),
            LENGTH_WIDE => match first {
                LENGTH_32_BITS => Ok(u64::from(u32::from_be_bytes(self.array()?))),
                LENGTH_64_BITS => Ok(u64::from_be_bytes(self.array()?)),
                _ => return Err(DumpError::BadFormat),
            },
            _ => Err(first & 0x3F),
        })
    }

    fn length(&mut self) -> Result<u64, DumpError> {
        self.length_or_special()?.map_err(|_| DumpError::BadFormat)
    }


    fn string(&mut self) -> Result<Vec<u8>, DumpError> {
        match self.length_or_special()? {
            Ok(length) => {
                let length = usize::try_from(length).map_err(|_| DumpError::BadFormat)?;
                Ok(self.take(length)?.to_vec())
            }
            Err(SPECIAL_INT8) => Ok(i8::from_le_bytes(self.array()?).to_string().into_bytes()),
            Err(SPECIAL_INT16) => Ok(i16::from_le_bytes(self.array()?).to_string().into_bytes()),
            Err(SPECIAL_INT32) => Ok(i32::from_le_bytes(self.array()?).to_string().into_bytes()),
            Err(SPECIAL_LZF) => {
                let compressed_length = usize::try_from(self.length()?).map_err(|_| DumpError::BadFormat)?;
                let length = self.length()?;
                if length > self.string_bytes_max as u64 {
                    return Err(DumpError::OverLimit { what: "bytes in a compressed string", size: length, limit: self.string_bytes_max });
                }
                let length = length as usize;
                if length > compressed_length.saturating_mul(LZF_EXPANSION_MAX) {
                    return Err(DumpError::BadFormat);
                }
                let decompressed = lzf::decompress(self.take(compressed_length)?, length).map_err(|_| DumpError::BadFormat)?;
                if decompressed.len() != length {
                    return Err(DumpError::BadFormat);
                }
                Ok(decompressed)
            }
            Err(_) => Err(DumpError::BadFormat),
        }
    }
}

/// A reader of a listpack's or ziplist's entries, after a header of `header_bytes` whose first
/// field (u32 LE) is the aggregate's size, which must be its length.
fn aggregate_entries(aggregate: &[u8], header_bytes: usize, string_bytes_max: usize) -> Result<Reader<'_>, DumpError> {
    let total = aggregate.get(..4).map(|bytes| u32::from_le_bytes(bytes.try_into().expect("4 bytes")) as usize);
    if total != Some(aggregate.len()) || aggregate.len() <= header_bytes {
        return Err(DumpError::BadFormat);
    }
    Ok(Reader { bytes: &aggregate[header_bytes..], string_bytes_max })
}

/// A listpack's entries as strings (integers in decimal): a 6-byte header (total bytes u32 LE,
/// entry count u16 LE), entries each followed by their length as a back-length, then 0xFF.
fn listpack_entries(listpack: &[u8], string_bytes_max: usize) -> Result<Vec<Vec<u8>>, DumpError> {
    let mut reader = aggregate_entries(listpack, LISTPACK_HEADER_BYTES, string_bytes_max)?;
    let mut entries = Vec::new();
    loop {
        let before = reader.bytes.len();
        let encoding = reader.byte()?;
        if encoding == AGGREGATE_END {
            break;
        }
        entries.push(listpack_entry(&mut reader, encoding)?);
        let entry_bytes = before - reader.bytes.len();
        reader.take(listpack_backlen_bytes(entry_bytes))?;
    }
    if !reader.bytes.is_empty() {
        return Err(DumpError::BadFormat);
    }
    Ok(entries)
}

fn listpack_entry(reader: &mut Reader<'_>, encoding: u8) -> Result<Vec<u8>, DumpError> {
    let integer = |value: i64| Ok(value.to_string().into_bytes());
    match encoding {
        0x00..=0x7F => integer(i64::from(encoding)),
        0x80..=0xBF => Ok(reader.take(usize::from(encoding & 0x3F))?.to_vec()),
        0xC0..=0xDF => {
            let raw = (u16::from(encoding & 0x1F) << 8) | u16::from(reader.byte()?);
            // A 13-bit two's complement integer.
            integer(i64::from(((raw << 3) as i16) >> 3))
        }
        0xE0..=0xEF => {
            let length = (usize::from(encoding & 0x0F) << 8) | usize::from(reader.byte()?);
            Ok(reader.take(length)?.to_vec())
        }
        0xF0 => {
            let length = u32::from_le_bytes(reader.array()?) as usize;
            Ok(reader.take(length)?.to_vec())
        }
        0xF1 => integer(i64::from(i16::from_le_bytes(reader.array()?))),
        0xF2 => integer(sign_extend_24(reader.array()?)),
        0xF3 => integer(i64::from(i32::from_le_bytes(reader.array()?))),
        0xF4 => integer(i64::from_le_bytes(reader.array()?)),
        _ => Err(DumpError::BadFormat),
    }
}

/// Bytes of a listpack back-length for an entry of `entry_bytes`: 7 bits per byte, with
/// Redis's lpEncodeBacklen bounds, whose limits 2^14-1, 2^21-1 and 2^28-1 already take one
/// byte more (an entry of exactly 16,383 bytes has a 3-byte back-length).
fn listpack_backlen_bytes(entry_bytes: usize) -> usize {
    match entry_bytes {
        0..=127 => 1,
        128..16_383 => 2,
        16_383..2_097_151 => 3,
        2_097_151..268_435_455 => 4,
        _ => 5,
    }
}

fn sign_extend_24(bytes: [u8; 3]) -> i64 {
    i64::from(i32::from_le_bytes([0, bytes[0], bytes[1], bytes[2]]) >> 8)
}

/// A ziplist's entries as strings (integers in decimal): a 10-byte header (total bytes u32 LE,
/// tail offset u32 LE, entry count u16 LE), entries each led by the previous entry's length
/// (one byte, or 0xFE and a u32 LE) and an encoding, then 0xFF.
fn ziplist_entries(ziplist: &[u8], string_bytes_max: usize) -> Result<Vec<Vec<u8>>, DumpError> {
    let mut reader = aggregate_entries(ziplist, ZIPLIST_HEADER_BYTES, string_bytes_max)?;
    let mut entries = Vec::new();
    loop {
        let previous_length = reader.byte()?;
        if previous_length == AGGREGATE_END {
            break;
        }
        if previous_length == 0xFE {
            reader.take(4)?;
        }
        let encoding = reader.byte()?;
        entries.push(ziplist_entry(&mut reader, encoding)?);
    }
    if !reader.bytes.is_empty() {
        return Err(DumpError::BadFormat);
    }
    Ok(entries)
}

fn ziplist_entry(reader: &mut Reader<'_>, encoding: u8) -> Result<Vec<u8>, DumpError> {
    let integer = |value: i64| Ok(value.to_string().into_bytes());
    match encoding >> 6 {
        0 => return Ok(reader.take(usize::from(encoding & 0x3F))?.to_vec()),
        1 => {
            let length = (usize::from(encoding & 0x3F) << 8) | usize::from(reader.byte()?);
            return Ok(reader.take(length)?.to_vec());
        }
        2 if encoding == 0x80 => {
            let length = u32::from_be_bytes(reader.array()?) as usize;
            return Ok(reader.take(length)?.to_vec());
        }
        _ => {}
    }
    match encoding {
        0xC0 => integer(i64::from(i16::from_le_bytes(reader.array()?))),
        0xD0 => integer(i64::from(i32::from_le_bytes(reader.array()?))),
        0xE0 => integer(i64::from_le_bytes(reader.array()?)),
        0xF0 => integer(sign_extend_24(reader.array()?)),
        0xFE => integer(i64::from(i8::from_le_bytes(reader.array()?))),
        // An immediate 0..=12, stored as 1..=13 in the low four bits.
        0xF1..=0xFD => integer(i64::from(encoding & 0x0F) - 1),
        _ => Err(DumpError::BadFormat),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: DumpLimits = DumpLimits { string_bytes_max: 1 << 20, elements_max: 1000 };

    fn decode(payload: &[u8]) -> Result<DumpValue, DumpError> {
        decode_dump(payload, LIMITS)
    }

    #[test]
    fn limits_bound_decompressed_strings_hash_fields_and_set_members() {
        let original = vec![b'z'; 2 << 20];
        let compressed = lzf::compress(&original).unwrap();
        let mut body = vec![0x00, 0xC3];
        put_length(&mut body, compressed.len() as u64);
        put_length(&mut body, original.len() as u64);
        body.extend_from_slice(&compressed);
        let over = DumpError::OverLimit { what: "bytes in a compressed string", size: 2 << 20, limit: 1 << 20 };
        assert_eq!(decode(&payload(&body, 10)), Err(over));
        let wide = DumpValue::Hash((0..1001).map(|number| (Bytes::from(number.to_string()), Bytes::new())).collect());
        assert_eq!(decode(&encode_dump(&wide)), Err(DumpError::OverLimit { what: "fields in a hash", size: 1001, limit: 1000 }));
        let wide = DumpValue::Set((0..1001).map(|number| Bytes::from(number.to_string())).collect());
        assert_eq!(decode(&encode_dump(&wide)), Err(DumpError::OverLimit { what: "members in a set", size: 1001, limit: 1000 }));
    }

    #[test]
    fn sorted_sets_round_trip_and_read_every_encoding_redis_writes() {
        let members = vec![(Bytes::from_static(b"a"), -0.0), (Bytes::from_static(b"b"), f64::INFINITY), (Bytes::from_static(b"c"), 1.1)];
        let value = DumpValue::SortedSet(members.clone());
        assert_eq!(decode(&encode_dump(&value)), Ok(value.clone()));
        let mut type_3 = vec![TYPE_ZSET];
        put_length(&mut type_3, 3);
        for (member, score) in [(&b"a"[..], &b"-0"[..]), (b"b", &[ZSET_SCORE_INFINITY][..]), (b"c", b"1.1000000000000001")] {
            put_string(&mut type_3, member);
            if score.len() > 1 {
                type_3.push(score.len() as u8);
            }
            type_3.extend_from_slice(score);
        }
        assert_eq!(decode(&payload(&type_3, 10)), Ok(value));
        let entries: Vec<Vec<u8>> = [&b"a"[..], b"5", b"b", b"-1.5"].iter().map(|text| [&[0x80 | text.len() as u8][..], text].concat()).collect();
        let mut type_17 = vec![TYPE_ZSET_LISTPACK];
        put_string(&mut type_17, &listpack(&entries));
        assert_eq!(decode(&payload(&type_17, 10)), Ok(DumpValue::SortedSet(vec![(Bytes::from_static(b"a"), 5.0), (Bytes::from_static(b"b"), -1.5)])));
        let twice = DumpValue::SortedSet(vec![(Bytes::from_static(b"a"), 1.0), (Bytes::from_static(b"a"), 2.0)]);
        assert_eq!(decode(&encode_dump(&twice)), Err(DumpError::BadFormat));
        let not_a_number = DumpValue::SortedSet(vec![(Bytes::from_static(b"a"), f64::NAN)]);
        assert_eq!(decode(&encode_dump(&not_a_number)), Err(DumpError::BadFormat));
        assert_eq!(decode(&encode_dump(&DumpValue::SortedSet(Vec::new()))), Err(DumpError::BadFormat));
    }

    #[test]
    fn declared_set_counts_over_the_limit_are_refused_before_reading_members() {
        let over = DumpError::OverLimit { what: "members in a set", size: u64::from(u32::MAX), limit: 1000 };
        let mut body = vec![TYPE_SET];
        put_length(&mut body, u64::from(u32::MAX));
        assert_eq!(decode(&payload(&body, 10)), Err(over.clone()), "a type 2 count with no members after it");
        assert_eq!(decode(&payload(&intset_body(8, u32::MAX, &[]), 10)), Err(over), "an intset count past its bytes");
    }

    /// A payload around `body` with a valid footer of `version`.
    fn payload(body: &[u8], version: u16) -> Vec<u8> {
        let mut payload = body.to_vec();
        payload.extend_from_slice(&version.to_le_bytes());
        let checksum = CRC64.checksum(&payload);
        payload.extend_from_slice(&checksum.to_le_bytes());
        payload
    }

    fn set(members: &[&str]) -> DumpValue {
        DumpValue::Set(members.iter().map(|member| Bytes::from(member.to_string())).collect())
    }

    /// The type 11 body of an intset of `width`-byte integers that claims `count` of them.
    fn intset_body(width: u32, count: u32, integers: &[i64]) -> Vec<u8> {
        let mut intset = [width.to_le_bytes(), count.to_le_bytes()].concat();
        for integer in integers {
            intset.extend_from_slice(&integer.to_le_bytes()[..width as usize]);
        }
        let mut body = vec![TYPE_SET_INTSET];
        put_string(&mut body, &intset);
        body
    }

    /// A listpack of `entries`, each already encoded and shorter than 128 bytes (a one-byte
    /// back-length).
    fn listpack(entries: &[Vec<u8>]) -> Vec<u8> {
        let mut listpack = vec![0; LISTPACK_HEADER_BYTES];
        for entry in entries {
            listpack.extend_from_slice(entry);
            listpack.push(entry.len() as u8);
        }
        listpack.push(AGGREGATE_END);
        let total = listpack.len() as u32;
        listpack[..4].copy_from_slice(&total.to_le_bytes());
        listpack[4..6].copy_from_slice(&(entries.len() as u16).to_le_bytes());
        listpack
    }

    /// A listpack string entry of fewer than 64 bytes.
    fn listpack_string(text: &str) -> Vec<u8> {
        [vec![0x80 | text.len() as u8], text.as_bytes().to_vec()].concat()
    }

    fn listpack_set_body(entries: &[Vec<u8>]) -> Vec<u8> {
        let mut body = vec![TYPE_SET_LISTPACK];
        put_string(&mut body, &listpack(entries));
        body
    }

    fn hash(pairs: &[(&str, &str)]) -> DumpValue {
        DumpValue::Hash(pairs.iter().map(|(field, value)| (Bytes::from(field.to_string()), Bytes::from(value.to_string()))).collect())
    }

    #[test]
    fn redis_7_payloads_decode() {
        // DUMP of SET k hello, SET n 12345 and HSET h f v, from redis-server 7.0.15: their
        // checksums check Redis's CRC-64.
        let hello = [0x00, 0x05, 0x68, 0x65, 0x6c, 0x6c, 0x6f, 0x0a, 0x00, 0x63, 0x72, 0xdf, 0x76, 0x65, 0x34, 0x20, 0x0a];
        assert_eq!(decode(&hello), Ok(DumpValue::String(Bytes::from_static(b"hello"))));
        let number = [0x00, 0xc1, 0x39, 0x30, 0x0a, 0x00, 0x9d, 0x94, 0xea, 0x27, 0x93, 0xfc, 0x08, 0xb9];
        assert_eq!(decode(&number), Ok(DumpValue::String(Bytes::from_static(b"12345"))));
        let small_hash = [
            0x10, 0x0d, 0x0d, 0x00, 0x00, 0x00, 0x02, 0x00, 0x81, 0x66, 0x02, 0x81, 0x76, 0x02, 0xff, 0x0a, 0x00, 0x20, 0xf1, 0x3d, 0x44, 0x23, 0x54,
            0x08, 0x9d,
        ];
        assert_eq!(decode(&small_hash), Ok(hash(&[("f", "v")])));
        assert_eq!(encode_dump(&DumpValue::String(Bytes::from_static(b"hello"))), hello, "DUMP writes what Redis 7.0 writes");
    }

    /// DUMP of SADD strings apple banana cherry from redis-server 7.0.15: a hashtable set, type 2.
    const REDIS_7_0_HASHTABLE_SET: [u8; 32] = [
        0x02, 0x03, 0x06, 0x62, 0x61, 0x6e, 0x61, 0x6e, 0x61, 0x06, 0x63, 0x68, 0x65, 0x72, 0x72, 0x79, 0x05, 0x61, 0x70, 0x70, 0x6c, 0x65, 0x0a,
        0x00, 0x4b, 0xc7, 0x88, 0x6f, 0x9b, 0x38, 0x12, 0xb9,
    ];
    /// DUMP of SADD tiny 3 -5 1 100 from redis-server 7.0.15: an intset of 2-byte integers.
    const REDIS_7_0_INTSET_16: [u8; 28] = [
        0x0b, 0x10, 0x02, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0xfb, 0xff, 0x01, 0x00, 0x03, 0x00, 0x64, 0x00, 0x0a, 0x00, 0x64, 0xcf, 0x24,
        0x59, 0xeb, 0x17, 0xba, 0x34,
    ];

    #[test]
    fn redis_7_set_payloads_decode() {
        // Each from redis-server 7.0.15, which LZF-compresses an intset string past 20 bytes.
        assert_eq!(decode(&REDIS_7_0_HASHTABLE_SET), Ok(set(&["banana", "cherry", "apple"])));
        assert_eq!(decode(&REDIS_7_0_INTSET_16), Ok(set(&["-5", "1", "3", "100"])));
        // SADD mid 100000 -7: an intset of 4-byte integers.
        let intset_32 = [
            0x0b, 0x10, 0x04, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0xf9, 0xff, 0xff, 0xff, 0xa0, 0x86, 0x01, 0x00, 0x0a, 0x00, 0x5f, 0x12,
            0x72, 0x5b, 0x91, 0x70, 0x7f, 0xfb,
        ];
        assert_eq!(decode(&intset_32), Ok(set(&["-7", "100000"])));
        // SADD small 1 2 3 -5 100000 5000000000: 8-byte integers, compressed.
        let small = [
            0x0b, 0xc3, 0x2c, 0x38, 0x04, 0x08, 0x00, 0x00, 0x00, 0x06, 0x20, 0x03, 0x01, 0xfb, 0xff, 0x80, 0x00, 0x00, 0x01, 0x20, 0x0b, 0x40,
            0x00, 0x00, 0x02, 0x40, 0x04, 0x20, 0x00, 0x00, 0x03, 0x20, 0x03, 0x40, 0x00, 0x01, 0xa0, 0x86, 0xa0, 0x19, 0x02, 0xf2, 0x05, 0x2a,
            0x20, 0x09, 0x00, 0x00, 0x0a, 0x00, 0xf3, 0x71, 0xb8, 0xfb, 0x92, 0x00, 0x10, 0x0d,
        ];
        assert_eq!(decode(&small), Ok(set(&["-5", "1", "2", "3", "100000", "5000000000"])));
        // SADD wide -9223372036854775808 9223372036854775807 0: 8-byte extremes, compressed.
        let wide = [
            0x0b, 0xc3, 0x16, 0x20, 0x04, 0x08, 0x00, 0x00, 0x00, 0x03, 0x20, 0x03, 0xa0, 0x00, 0x00, 0x80, 0xa0, 0x07, 0x01, 0x00, 0xff, 0x60,
            0x00, 0x01, 0xff, 0x7f, 0x0a, 0x00, 0x5a, 0xd4, 0x7b, 0x37, 0x3d, 0x83, 0x2c, 0x0a,
        ];
        assert_eq!(decode(&wide), Ok(set(&["-9223372036854775808", "0", "9223372036854775807"])));
    }

    #[test]
    fn sets_are_written_as_redis_7_0_writes_a_hashtable_set() {
        assert_eq!(encode_dump(&set(&["banana", "cherry", "apple"])), REDIS_7_0_HASHTABLE_SET);
    }

    #[test]
    fn listpack_sets_of_redis_7_2_decode() {
        // SADD s a 7 -300 bb as Redis 7.2 writes it: a 7-bit and a 13-bit integer among strings.
        let entries = [listpack_string("a"), vec![0x07], vec![0xDE, 0xD4], listpack_string("bb")];
        assert_eq!(decode(&payload(&listpack_set_body(&entries), 11)), Ok(set(&["a", "7", "-300", "bb"])));
    }

    #[test]
    fn damaged_sets_are_refused() {
        let refused = |body: &[u8], why: &str| assert_eq!(decode(&payload(body, 11)), Err(DumpError::BadFormat), "{why}");
        refused(&intset_body(3, 2, &[1, 2]), "a 3-byte intset width");
        refused(&intset_body(0, 0, &[]), "a 0-byte intset width");
        refused(&intset_body(2, 3, &[1, 2]), "an intset count past its bytes");
        refused(&intset_body(2, 1, &[1, 2]), "an intset count short of its bytes");
        refused(&intset_body(4, 3, &[1, 5, 3]), "an unsorted intset");
        refused(&intset_body(8, 2, &[4, 4]), "a repeated intset integer");
        refused(&intset_body(2, 0, &[]), "an empty intset");
        refused(&[TYPE_SET_INTSET, 0x04, 2, 0, 0, 0], "an intset shorter than its header");
        refused(&[TYPE_SET, 0x00], "an empty type 2 set");
        refused(&[TYPE_SET, 0x02, 0x01, b'x', 0x01, b'x'], "a repeated type 2 member");
        refused(&[TYPE_SET, 0x02, 0x01, b'x'], "a type 2 set short of its count");
        refused(&listpack_set_body(&[]), "an empty listpack set");
        refused(&listpack_set_body(&[vec![0x05], listpack_string("5")]), "an integer and its decimal text");
    }

    #[test]
    fn what_dump_writes_reads_back_and_carries_redis_7_0s_version() {
        let long = "x".repeat(20_000);
        for value in [
            DumpValue::String(Bytes::from_static(b"")),
            DumpValue::String(Bytes::from(vec![0u8, 255, 13, 10])),
            DumpValue::String(Bytes::from(long.clone())),
            hash(&[]),
            hash(&[("f", "v"), ("", "empty field"), ("long", &long)]),
            set(&["m"]),
            set(&["", "12", "-3", &long]),
            list(&["e"]),
            list(&["", "12", "-3", "007", "", &long, "tail"]),
        ] {
            let payload = encode_dump(&value);
            assert_eq!(u16::from_le_bytes([payload[payload.len() - 10], payload[payload.len() - 9]]), DUMP_RDB_VERSION_WRITTEN);
            assert_eq!(decode(&payload), Ok(value));
        }
    }

    #[test]
    fn integer_and_lzf_strings_decode() {
        assert_eq!(decode(&payload(&[0x00, 0xC0, 0xF9], 10)), Ok(DumpValue::String(Bytes::from_static(b"-7"))));
        assert_eq!(decode(&payload(&[0x00, 0xC2, 0x00, 0x00, 0x00, 0x80], 10)), Ok(DumpValue::String(Bytes::from(i32::MIN.to_string()))));
        let original = "abcabcabcabcabcabcabcabcabcabcabcabc".repeat(10);
        let compressed = lzf::compress(original.as_bytes()).unwrap();
        let mut body = vec![0x00, 0xC3];
        put_length(&mut body, compressed.len() as u64);
        put_length(&mut body, original.len() as u64);
        body.extend_from_slice(&compressed);
        assert_eq!(decode(&payload(&body, 10)), Ok(DumpValue::String(Bytes::from(original.clone()))));
        let mut lying = vec![0x00, 0xC3];
        put_length(&mut lying, compressed.len() as u64);
        put_length(&mut lying, original.len() as u64 + 1);
        lying.extend_from_slice(&compressed);
        assert_eq!(decode(&payload(&lying, 10)), Err(DumpError::BadFormat), "the original length must match");
    }

    #[test]
    fn listpack_integers_of_every_width_decode() {
        // 7-bit 5, 13-bit -100, 16-bit 1000, 24-bit -100000, 32-bit 100000000, 64-bit i64::MIN,
        // 12-bit string of 70 bytes.
        let text = "t".repeat(70);
        let mut entries: Vec<Vec<u8>> = vec![vec![0x05], vec![0xDF, 0x9C], vec![0xF1, 0xE8, 0x03], vec![0xF2, 0x60, 0x79, 0xFE]];
        entries.push([vec![0xF3], 100_000_000i32.to_le_bytes().to_vec()].concat());
        entries.push([vec![0xF4], i64::MIN.to_le_bytes().to_vec()].concat());
        entries.push([vec![0xE0, 70], text.as_bytes().to_vec()].concat());
        entries.push(vec![0x80]);
        let listpack = listpack(&entries);
        let expected: Vec<Vec<u8>> = ["5", "-100", "1000", "-100000", "100000000", &i64::MIN.to_string(), &text, ""].iter().map(|text| text.as_bytes().to_vec()).collect();
        assert_eq!(listpack_entries(&listpack, usize::MAX), Ok(expected));
    }

    #[test]
    fn ziplist_entries_decode() {
        // Redis 6's HSET h f v n 12 m -300: strings, an immediate and a 16-bit integer.
        let mut entries = vec![0x00, 0x01, b'f', 0x03, 0x01, b'v', 0x03, 0x01, b'n', 0x03, 0xFD, 0x02, 0x01, b'm', 0x03, 0xC0];
        entries.extend_from_slice(&(-300i16).to_le_bytes());
        let mut body = vec![TYPE_HASH_ZIPLIST];
        put_string(&mut body, &ziplist(&entries));
        assert_eq!(decode(&payload(&body, 9)), Ok(hash(&[("f", "v"), ("n", "12"), ("m", "-300")])));
    }

    /// A ziplist of `entries`, already encoded (each led by its previous entry's length); the
    /// tail offset and count, which the reader does not use, are left 0.
    fn ziplist(entries: &[u8]) -> Vec<u8> {
        let mut ziplist = vec![0; ZIPLIST_HEADER_BYTES];
        ziplist.extend_from_slice(entries);
        ziplist.push(AGGREGATE_END);
        let total = ziplist.len() as u32;
        ziplist[..4].copy_from_slice(&total.to_le_bytes());
        ziplist
    }

    /// What the fuzz target `resp_dump` checks, over seeded mutations of valid bodies (the
    /// footer recomputed, so decoding gets past the checksum): no panic, and whatever decodes
    /// survives a round trip.
    #[test]
    fn mutated_bodies_never_panic_and_what_decodes_round_trips() {
        let original = "lzf lzf lzf ".repeat(20);
        let compressed = lzf::compress(original.as_bytes()).unwrap();
        let mut lzf_body = vec![0x00, 0xC3];
        put_length(&mut lzf_body, compressed.len() as u64);
        put_length(&mut lzf_body, original.len() as u64);
        lzf_body.extend_from_slice(&compressed);
        let seeds: Vec<Vec<u8>> = [
            payload(&lzf_body, DUMP_RDB_VERSION_WRITTEN),
            encode_dump(&DumpValue::String(Bytes::from("seed ".repeat(30)))),
            encode_dump(&hash(&[("f", "v"), ("g", "12")])),
            vec![0x10, 0x0d, 0x0d, 0x00, 0x00, 0x00, 0x02, 0x00, 0x81, 0x66, 0x02, 0x81, 0x76, 0x02, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            encode_dump(&set(&["m", "12", "n"])),
            REDIS_7_0_INTSET_16.to_vec(),
            payload(&listpack_set_body(&[listpack_string("a"), vec![0x07]]), DUMP_RDB_VERSION_WRITTEN),
            encode_dump(&list(&["a", "", "12", &"l".repeat(70)])),
            REDIS_7_0_SHORT_LIST.to_vec(),
            REDIS_7_0_PLAIN_NODE_LIST.to_vec(),
            payload(&[vec![TYPE_LIST_QUICKLIST, 0x01, 14], ziplist(&[0x00, 0x01, b'a'])].concat(), DUMP_RDB_VERSION_WRITTEN),
            payload(&[TYPE_LIST, 0x02, 0x01, b'x', 0xC0, 0xFB], DUMP_RDB_VERSION_WRITTEN),
        ]
        .into_iter()
        .map(|payload| payload[..payload.len() - FOOTER_BYTES].to_vec())
        .collect();
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..40_000 {
            let mut body = seeds[round % seeds.len()].clone();
            for _ in 0..1 + next() % 4 {
                let position = (next() as usize) % body.len();
                match next() % 3 {
                    0 => body[position] = next() as u8,
                    1 => body.truncate(position.max(1)),
                    _ => body.insert(position, next() as u8),
                }
            }
            if let Ok(value) = decode(&payload(&body, DUMP_RDB_VERSION_WRITTEN)) {
                assert_eq!(decode(&encode_dump(&value)), Ok(value));
            }
        }
    }

    #[test]
    fn damaged_or_foreign_payloads_are_refused() {
        let good = encode_dump(&DumpValue::String(Bytes::from_static(b"value")));
        assert_eq!(decode(&good[..5]), Err(DumpError::VersionOrChecksum));
        let mut flipped = good.clone();
        flipped[2] ^= 1;
        assert_eq!(decode(&flipped), Err(DumpError::VersionOrChecksum));
        assert_eq!(decode(&payload(&[0x00, 0x01, b'x'], DUMP_RDB_VERSION_READ_MAX + 1)), Err(DumpError::VersionOrChecksum));
        assert_eq!(decode(&payload(&[0x05, 0x01, 0x01, b'x'], 10)), Err(DumpError::BadFormat), "a sorted set");
        assert_eq!(decode(&payload(&[0x00, 0x05, b'x'], 10)), Err(DumpError::BadFormat), "shorter than its length");
        assert_eq!(decode(&payload(&[0x04, 0x01, 0x01, b'f'], 10)), Err(DumpError::BadFormat), "a field without a value");
    }

    fn list(elements: &[&str]) -> DumpValue {
        DumpValue::List(elements.iter().map(|element| Bytes::from(element.to_string())).collect())
    }

    /// The bytes of `text`, hexadecimal digits in pairs.
    fn hex(text: &str) -> Vec<u8> {
        (0..text.len()).step_by(2).map(|at| u8::from_str_radix(&text[at..at + 2], 16).expect("hex digits")).collect()
    }

    /// A type 18 body of these (container, node string) nodes.
    fn quicklist_2_body(nodes: &[(u64, Vec<u8>)]) -> Vec<u8> {
        let mut body = vec![TYPE_LIST_QUICKLIST_2];
        put_length(&mut body, nodes.len() as u64);
        for (container, node) in nodes {
            put_length(&mut body, *container);
            put_string(&mut body, node);
        }
        body
    }

    /// The (container, node string) nodes of a type 18 payload, LZF strings decompressed.
    fn quicklist_2_nodes(payload: &[u8]) -> Vec<(u64, Vec<u8>)> {
        let mut body = Reader { bytes: &payload[..payload.len() - FOOTER_BYTES], string_bytes_max: usize::MAX };
        assert_eq!(body.byte(), Ok(TYPE_LIST_QUICKLIST_2));
        let count = body.length().unwrap();
        (0..count).map(|_| (body.length().unwrap(), body.string().unwrap())).collect()
    }

    /// DUMP of RPUSH l a 1 -5 300 70000 5000000000 "" from redis-server 7.0.15: type 18, one
    /// PACKED node holding a string, 7-bit, 13-bit, 16-bit, 24-bit and 64-bit integers and an
    /// empty string.
    const REDIS_7_0_SHORT_LIST: [u8; 49] = [
        0x12, 0x01, 0x02, 0x23, 0x23, 0x00, 0x00, 0x00, 0x07, 0x00, 0x81, 0x61, 0x02, 0x01, 0x01, 0xdf, 0xfb, 0x02, 0xc1, 0x2c, 0x02, 0xf2, 0x70,
        0x11, 0x01, 0x04, 0xf4, 0x00, 0xf2, 0x05, 0x2a, 0x01, 0x00, 0x00, 0x00, 0x09, 0x80, 0x01, 0xff, 0x0a, 0x00, 0x00, 0xae, 0x91, 0x1b, 0x6d,
        0x38, 0x18, 0xde,
    ];
    /// DUMP of RPUSH pair a bc from redis-server 7.0.15: a listpack too short for Redis to
    /// compress, of two string entries.
    const REDIS_7_0_PAIR_LIST: [u8; 28] = [
        0x12, 0x01, 0x02, 0x0e, 0x0e, 0x00, 0x00, 0x00, 0x02, 0x00, 0x81, 0x61, 0x02, 0x82, 0x62, 0x63, 0x03, 0xff, 0x0a, 0x00, 0x9a, 0x61, 0x3c,
        0x3e, 0xe8, 0x2f, 0xb4, 0x1b,
    ];
    /// DUMP of RPUSH plain head <"p" x 120> tail from redis-server 7.0.15 after DEBUG
    /// QUICKLIST-PACKED-THRESHOLD 100: the long element in a PLAIN node between two PACKED.
    const REDIS_7_0_PLAIN_NODE_LIST: [u8; 56] = [
        0x12, 0x03, 0x02, 0x0d, 0x0d, 0x00, 0x00, 0x00, 0x01, 0x00, 0x84, 0x68, 0x65, 0x61, 0x64, 0x05, 0xff, 0x01, 0xc3, 0x09, 0x40, 0x78, 0x01,
        0x70, 0x70, 0xe0, 0x6b, 0x00, 0x01, 0x70, 0x70, 0x02, 0x0d, 0x0d, 0x00, 0x00, 0x00, 0x01, 0x00, 0x84, 0x74, 0x61, 0x69, 0x6c, 0x05, 0xff,
        0x0a, 0x00, 0xa0, 0xdc, 0xb3, 0x3b, 0xed, 0x83, 0xee, 0x1c,
    ];
    /// DUMP of RPUSH big <"y" x 10000> from redis-server 7.0.15: one PACKED node over 8 KiB
    /// holding the element alone (a 32-bit string entry), LZF-compressed.
    const REDIS_7_0_BIG_ELEMENT_LIST: &str = "\
        120102c34083671e071e2700000100f01020060079e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff\
        00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0\
        ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0de00024e95ff0a00c133cd4e3984b055";
    /// DUMP of RPUSH edge <"e" x 16378> f from redis-server 7.0.15: an entry of 16,383 bytes,
    /// whose back-length takes 3 bytes, alone in its node, then a node of "f".
    const REDIS_7_0_BACKLEN_EDGE_LIST: &str = "\
        120202c340cf80000040090b094000000100f0fa3f000065e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff\
        00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0\
        ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00\
        e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e0ff00e000000300ffffff020a0a000000\
        0100816602ff0a00176ec5e2382b66b1";
    /// DUMP of RPUSH long with 2000 elements, the i-th the 30 digits of i % 10 (zero-padded,
    /// so strings), from redis-server 7.0.15: 8 PACKED nodes, LZF-compressed.
    const REDIS_7_0_LONG_LIST: &str = "\
        120802c340e75fe707e71f0000ff009e30e01400001fe0151f0031e0161f0032e0161f0033e0161f0034e0161f0035e0161f0036e0161f00\
        37e0161f0038e0161f0039e0161fe1ff3fe00f00e1ff3fe00f00e2ff7fe00f00e3ffbfe00f00e4ffffe00f00e6ff3fe00f00e7ff7fe00f00\
        e8ffbfe00f00e9ffffe00f00ebff3fe01000eb165fe1ff3fe01000e1ff3fe00e00ecff7fe00f00ecff7fe00f00ecff7fe00f00ecff7fe00f\
        00ecff7fe00f00ecff7fe00f00ecff7fe00f00ecff7fe00f00ebff3fe01000ebff3fe00e00ebff3fe00f00ebff3fe00f00ebff3fe00f00eb\
        ff3fe00f00ebff3fe00f0002341fff02c340e85fe707e71f0000ff009e30e0130001351fe0151f0036e0161f0037e0161f0038e0161f0039\
        e0161f0030e0161f0031e0161f0032e0161f0033e0161f0034e0161fe1ff3fe00f00e1ff3fe00f00e2ff7fe00f00e3ffbfe00f00e4ffffe0\
        1000e516bfe1ff3fe01000e1ff3fe00e00e8ffbfe00f00e9ffffe00f00ebff3fe00f00ecff7fe00f00ecff7fe00f00ecff7fe00f00ecff7f\
        e00f00ecff7fe00f00ebff3fe01000ebff3fe00e00ebff3fe00f00ebff3fe00f00ebff3fe00f00ebff3fe00f00ebff3fe00f00ebff3fe00f\
        00ebff3fe00f00ebff3fe00f00ebff3fe01000ebff3fe00e0002391fff02c340e75fe707e71f0000ff009e30e01400001fe0151f0031e016\
        1f0032e0161f0033e0161f0034e0161f0035e0161f0036e0161f0037e0161f0038e0161f0039e0161fe1ff3fe00f00e1ff3fe00f00e2ff7f\
        e00f00e3ffbfe00f00e4ffffe00f00e6ff3fe00f00e7ff7fe00f00e8ffbfe00f00e9ffffe00f00ebff3fe01000eb165fe1ff3fe01000e1ff\
        3fe00e00ecff7fe00f00ecff7fe00f00ecff7fe00f00ecff7fe00f00ecff7fe00f00ecff7fe00f00ecff7fe00f00ecff7fe00f00ebff3fe0\
        1000ebff3fe00e00ebff3fe00f00ebff3fe00f00ebff3fe00f00ebff3fe00f00ebff3fe00f0002341fff02c340e85fe707e71f0000ff009e\
        30e0130001351fe0151f0036e0161f0037e0161f0038e0161f0039e0161f0030e0161f0031e0161f0032e0161f0033e0161f0034e0161fe1\
        ff3fe00f00e1ff3fe00f00e2ff7fe00f00e3ffbfe00f00e4ffffe01000e516bfe1ff3fe01000e1ff3fe00e00e8ffbfe00f00e9ffffe00f00\
        ebff3fe00f00ecff7fe00f00ecff7fe00f00ecff7fe00f00ecff7fe00f00ecff7fe00f00ebff3fe01000ebff3fe00e00ebff3fe00f00ebff\
        3fe00f00ebff3fe00f00ebff3fe00f00ebff3fe00f00ebff3fe00f00ebff3fe00f00ebff3fe00f00ebff3fe01000ebff3fe00e0002391fff\
        02c340e75fe707e71f0000ff009e30e01400001fe0151f0031e0161f0032e0161f0033e0161f0034e0161f0035e0161f0036e0161f0037e0\
        161f0038e0161f0039e0161fe1ff3fe00f00e1ff3fe00f00e2ff7fe00f00e3ffbfe00f00e4ffffe00f00e6ff3fe00f00e7ff7fe00f00e8ff\
        bfe00f00e9ffffe00f00ebff3fe01000eb165fe1ff3fe01000e1ff3fe00e00ecff7fe00f00ecff7fe00f00ecff7fe00f00ecff7fe00f00ec\
        ff7fe00f00ecff7fe00f00ecff7fe00f00ecff7fe00f00ebff3fe01000ebff3fe00e00ebff3fe00f00ebff3fe00f00ebff3fe00f00ebff3f\
        e00f00ebff3fe00f0002341fff02c340e85fe707e71f0000ff009e30e0130001351fe0151f0036e0161f0037e0161f0038e0161f0039e016\
        1f0030e0161f0031e0161f0032e0161f0033e0161f0034e0161fe1ff3fe00f00e1ff3fe00f00e2ff7fe00f00e3ffbfe00f00e4ffffe01000\
        e516bfe1ff3fe01000e1ff3fe00e00e8ffbfe00f00e9ffffe00f00ebff3fe00f00ecff7fe00f00ecff7fe00f00ecff7fe00f00ecff7fe00f\
        00ecff7fe00f00ebff3fe01000ebff3fe00e00ebff3fe00f00ebff3fe00f00ebff3fe00f00ebff3fe00f00ebff3fe00f00ebff3fe00f00eb\
        ff3fe00f00ebff3fe00f00ebff3fe01000ebff3fe00e0002391fff02c340e75fe707e71f0000ff009e30e01400001fe0151f0031e0161f00\
        32e0161f0033e0161f0034e0161f0035e0161f0036e0161f0037e0161f0038e0161f0039e0161fe1ff3fe00f00e1ff3fe00f00e2ff7fe00f\
        00e3ffbfe00f00e4ffffe00f00e6ff3fe00f00e7ff7fe00f00e8ffbfe00f00e9ffffe00f00ebff3fe01000eb165fe1ff3fe01000e1ff3fe0\
        0e00ecff7fe00f00ecff7fe00f00ecff7fe00f00ecff7fe00f00ecff7fe00f00ecff7fe00f00ecff7fe00f00ecff7fe00f00ebff3fe01000\
        ebff3fe00e00ebff3fe00f00ebff3fe00f00ebff3fe00f00ebff3fe00f00ebff3fe00f0002341fff02c340cc5ae707e71a0000d7009e30e0\
        130001351fe0151f0036e0161f0037e0161f0038e0161f0039e0161f0030e0161f0031e0161f0032e0161f0033e0161f0034e0161fe1ff3f\
        e00f00e1ff3fe00f00e2ff7fe00f00e3ffbfe00f00e4ffffe01000e516bfe1ff3fe01000e1ff3fe00e00e8ffbfe00f00e9ffffe00f00ebff\
        3fe00f00ecff7fe00f00ecff7fe00f00ecff7fe00f00ecff7fe00f00ecff7fe00f00ebff3fe01000ebff3fe00e00ebff3fe00f00ebff3fe0\
        0f00ebff3fe00f00ebff3fe00f00ebff3fe00f00eb983f011fff0a00fee0cc42f41577f8";

    fn long_list_elements() -> Vec<Bytes> {
        (0..2000).map(|index| Bytes::from(format!("{:030}", index % 10))).collect()
    }

    #[test]
    fn redis_7_list_payloads_decode() {
        assert_eq!(decode(&REDIS_7_0_SHORT_LIST), Ok(list(&["a", "1", "-5", "300", "70000", "5000000000", ""])));
        assert_eq!(decode(&REDIS_7_0_PAIR_LIST), Ok(list(&["a", "bc"])));
        assert_eq!(decode(&REDIS_7_0_PLAIN_NODE_LIST), Ok(list(&["head", &"p".repeat(120), "tail"])));
        assert_eq!(decode(&hex(REDIS_7_0_BIG_ELEMENT_LIST)), Ok(list(&[&"y".repeat(10_000)])));
        assert_eq!(decode(&hex(REDIS_7_0_BACKLEN_EDGE_LIST)), Ok(list(&[&"e".repeat(16_378), "f"])));
        let long = hex(REDIS_7_0_LONG_LIST);
        assert_eq!(quicklist_2_nodes(&long).len(), 8);
        let limits = DumpLimits { elements_max: 2000, ..LIMITS };
        assert_eq!(decode_dump(&long, limits), Ok(DumpValue::List(long_list_elements())));
    }

    #[test]
    fn lists_are_written_as_redis_7_0_writes_them() {
        assert_eq!(encode_dump(&list(&["a", "bc"])), REDIS_7_0_PAIR_LIST);
        // Redis compresses these nodes; uncompressed, they are what DUMP writes for the same
        // elements, node for node, since Redis too writes these elements as string entries.
        for (redis, elements) in [
            (hex(REDIS_7_0_BIG_ELEMENT_LIST), list(&[&"y".repeat(10_000)])),
            (hex(REDIS_7_0_BACKLEN_EDGE_LIST), list(&[&"e".repeat(16_378), "f"])),
            (hex(REDIS_7_0_LONG_LIST), DumpValue::List(long_list_elements())),
        ] {
            assert_eq!(quicklist_2_nodes(&encode_dump(&elements)), quicklist_2_nodes(&redis));
        }
    }

    #[test]
    fn written_nodes_hold_at_most_8_kib_and_a_larger_element_alone() {
        let elements: Vec<Bytes> = (0..2000).map(|index| Bytes::from(format!("element {index:022}"))).collect();
        let nodes = quicklist_2_nodes(&encode_dump(&DumpValue::List(elements.clone())));
        assert!(nodes.len() > 1);
        for (index, (container, listpack)) in nodes.iter().enumerate() {
            assert_eq!(*container, NODE_PACKED);
            assert!(listpack.len() <= NODE_LISTPACK_BYTES_MAX, "node {index} holds {} bytes", listpack.len());
            let full = listpack.len() + listpack_string_entry_bytes(30) > NODE_LISTPACK_BYTES_MAX;
            assert!(full || index + 1 == nodes.len(), "node {index} is cut before it is full");
            let count = u16::from_le_bytes([listpack[4], listpack[5]]) as usize;
            assert_eq!(listpack_entries(listpack, usize::MAX).map(|entries| entries.len()), Ok(count));
        }
        let big = list(&["head", &"b".repeat(10_000), "tail"]);
        let containers: Vec<u64> = quicklist_2_nodes(&encode_dump(&big)).into_iter().map(|(container, _)| container).collect();
        assert_eq!(containers, [NODE_PACKED; 3], "an element under 1 GiB is packed, alone, as Redis 7.0 packs it");
    }

    #[test]
    fn elements_past_the_plain_threshold_are_written_in_plain_nodes() {
        let DumpValue::List(elements) = list(&["head", &"p".repeat(9_000), "mid", &"q".repeat(10_000)]) else { unreachable!() };
        let mut body = vec![TYPE_LIST_QUICKLIST_2];
        put_quicklist(&mut body, &elements, 9_000);
        let payload = payload(&body, DUMP_RDB_VERSION_WRITTEN);
        let nodes = quicklist_2_nodes(&payload);
        let containers: Vec<u64> = nodes.iter().map(|(container, _)| *container).collect();
        assert_eq!(containers, [NODE_PACKED, NODE_PLAIN, NODE_PACKED, NODE_PLAIN]);
        assert_eq!(nodes[3].1, elements[3]);
        assert_eq!(decode(&payload), Ok(DumpValue::List(elements)));
    }

    #[test]
    fn lists_with_entries_of_every_width_round_trip() {
        // String entries with 6-, 12- and 32-bit lengths, entries whose back-length takes 1 to 4
        // bytes, each at its bounds (entries of 128, 16,383 and 2,097,151 bytes take one byte
        // more), and elements that fill a node's 8 KiB exactly or by one byte too many.
        let lengths = [0, 1, 63, 64, 125, 126, 4095, 4096, 8178, 8179, 10_000, 16_377, 16_378, 2_097_145, 2_097_146];
        let element = |length: usize| Bytes::from((0..length).map(|at| (at * 7 + length) as u8).collect::<Vec<u8>>());
        let value = DumpValue::List(lengths.into_iter().map(element).collect());
        let limits = DumpLimits { string_bytes_max: 4 << 20, elements_max: 1000 };
        assert_eq!(decode_dump(&encode_dump(&value), limits), Ok(value));
        let distinct = DumpValue::List((0..2000).map(|index| Bytes::from(format!("{index:030}"))).collect());
        assert_eq!(decode_dump(&encode_dump(&distinct), DumpLimits { elements_max: 2000, ..LIMITS }), Ok(distinct));
    }

    #[test]
    fn redis_6_quicklists_and_type_1_lists_decode() {
        // Two ziplist nodes: "a", the immediate 12 and the 16-bit -300, then "b".
        let mut first = vec![0x00, 0x01, b'a', 0x03, 0xFD, 0x02, 0xC0];
        first.extend_from_slice(&(-300i16).to_le_bytes());
        let mut body = vec![TYPE_LIST_QUICKLIST, 0x02];
        put_string(&mut body, &ziplist(&first));
        put_string(&mut body, &ziplist(&[0x00, 0x01, b'b']));
        assert_eq!(decode(&payload(&body, 9)), Ok(list(&["a", "12", "-300", "b"])));
        // A count, then strings: plain, an i8 and an i16.
        let body = [TYPE_LIST, 0x03, 0x01, b'x', 0xC0, 0xFB, 0xC1, 0xE8, 0x03];
        assert_eq!(decode(&payload(&body, 9)), Ok(list(&["x", "-5", "1000"])));
    }

    #[test]
    fn empty_listpack_and_ziplist_nodes_are_skipped_as_redis_skips_them() {
        // redis-server 7.0.15 restores these, with or without sanitize-dump-payload, to [a].
        let body = quicklist_2_body(&[(NODE_PACKED, listpack(&[])), (NODE_PACKED, listpack(&[listpack_string("a")]))]);
        assert_eq!(decode(&payload(&body, 10)), Ok(list(&["a"])));
        let mut body = vec![TYPE_LIST_QUICKLIST, 0x02];
        put_string(&mut body, &ziplist(&[]));
        put_string(&mut body, &ziplist(&[0x00, 0x01, b'a']));
        assert_eq!(decode(&payload(&body, 9)), Ok(list(&["a"])));
    }

    #[test]
    fn damaged_lists_are_refused() {
        let refused = |body: &[u8], why: &str| assert_eq!(decode(&payload(body, 10)), Err(DumpError::BadFormat), "{why}");
        let a = || listpack(&[listpack_string("a")]);
        refused(&[TYPE_LIST_QUICKLIST_2, 0x00], "a quicklist without nodes");
        refused(&quicklist_2_body(&[(NODE_PACKED, listpack(&[]))]), "a quicklist of an empty listpack only");
        refused(&quicklist_2_body(&[(NODE_PACKED, Vec::new()), (NODE_PACKED, a())]), "an empty PACKED node string");
        refused(&quicklist_2_body(&[(NODE_PLAIN, Vec::new()), (NODE_PACKED, a())]), "an empty PLAIN node");
        refused(&quicklist_2_body(&[(0, a())]), "container 0");
        refused(&quicklist_2_body(&[(3, a())]), "container 3");
        refused(&quicklist_2_body(&[(NODE_PACKED, b"not a listpack".to_vec())]), "a PACKED node that is no listpack");
        refused(&[TYPE_LIST_QUICKLIST_2, 0x02, 0x02, 0x01, b'x'], "fewer nodes than counted");
        refused(&[TYPE_LIST_QUICKLIST_2, 0x80, 0xFF, 0xFF, 0xFF, 0xFF], "a node count far past the payload");
        refused(&[TYPE_LIST_QUICKLIST, 0x00], "a Redis 6 quicklist without nodes");
        refused(&[TYPE_LIST_QUICKLIST, 0x01, 0x00], "an empty ziplist node string");
        refused(&[TYPE_LIST, 0x00], "an empty type 1 list");
        refused(&[TYPE_LIST, 0x02, 0x01, b'x'], "a type 1 list short of its count");
        let body = &REDIS_7_0_SHORT_LIST[..REDIS_7_0_SHORT_LIST.len() - FOOTER_BYTES];
        for end in 1..body.len() {
            refused(&body[..end], &format!("the short list cut to {end} bytes"));
        }
    }

    #[test]
    fn lists_over_the_limit_are_refused_before_their_elements_are_read() {
        let over = |size: u64| Err(DumpError::OverLimit { what: "elements in a list", size, limit: 1000 });
        let wide = DumpValue::List((0..1001).map(|number| Bytes::from(number.to_string())).collect());
        assert_eq!(decode(&encode_dump(&wide)), over(1001));
        let mut body = vec![TYPE_LIST];
        put_length(&mut body, u64::from(u32::MAX));
        assert_eq!(decode(&payload(&body, 10)), over(u64::from(u32::MAX)), "a type 1 count with no elements after it");
        // Two nodes of 600: refused at the second, before its elements join the first's.
        let node = listpack(&vec![vec![0x01]; 600]);
        let body = quicklist_2_body(&[(NODE_PACKED, node.clone()), (NODE_PACKED, node)]);
        assert_eq!(decode(&payload(&body, 10)), over(1200));
    }
}
