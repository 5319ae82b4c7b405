//! How Redis types are stored in the engine's opaque values: one type-tag byte, then the body.
//!
//! | tag | type   | body                                                                    |
//! |-----|--------|-------------------------------------------------------------------------|
//! | 0   | string | the string's bytes                                                      |
//! | 1   | hash   | field count (LEB128), then per field: length (LEB128), field, length (LEB128), value |
//! | 2   | hash (bucketed) | field count (u64 LE), bucket count (u32 LE), field bytes (u64 LE), salt (u64 LE) |
//! | 3   | set    | as tag 1: each member is a field with an empty value                    |
//! | 4   | set (bucketed) | as tag 2                                                         |
//! | 5   | list   | element count (LEB128), then per element: length (LEB128), element         |
//! | 6   | list (chunked, as earlier versions wrote it) | element count (u64 LE), chunk count (u32 LE), then per chunk in list order: part (u32 LE), elements (u32 LE), element bytes (u32 LE) |
//! | 7   | sorted set | as tag 1: each member is a field whose value is its score (f64, 8 bytes LE) |
//! | 8   | sorted set (bucketed) | as tag 2                                                  |
//! | 9   | list (chunked) top | element count (u64 LE), part count, free part count, directory count (u32 LE each), the free parts (u32 LE each), then per directory in list order: part (u32 LE), elements (u64 LE), element bytes (u64 LE) |
//! | 10  | list directory (a part) | chunk count (u32 LE), then per chunk in list order: part (u32 LE), elements (u32 LE), element bytes (u32 LE) |
//! | 11  | stream | length (u64 LE), last ID (ms, seq: u64 LE each), max deleted ID (ms, seq), entries added (u64 LE), group count (u32 LE), then per group: name length (LEB128), name |
//! | 13  | list (chunked) top with separators | as tag 9, each directory's entry followed by the separator of its last element (17 bytes, below) |
//! | 14  | list directory with separators (a part) | as tag 10, each chunk's entry followed by the separator of its last element |
//! | 12  | stream consumer group (a part) | last delivered ID (ms, seq), entries read (u64 LE, 2^64 - 1: unknown), consumer count (u32 LE), per consumer by name: name length (LEB128), name, seen time (u64 LE ms), pending count (u32 LE), per pending entry by ID: ID (ms, seq), consumer number (u32 LE), delivery time (u64 LE ms), deliveries (u64 LE) |
//!
//! A small hash is one record with named bins (as in Aerospike): HSET rewrites the record, and
//! fields keep their insertion order, as Redis's small hashes do. A hash whose record would pass
//! `SMALL_HASH_BYTES_MAX` becomes a root record (tag 2) plus buckets, stored as the key's engine
//! parts 0..bucket count, each encoded as a tag-1 record of the fields that hash to it (linear
//! hashing, `crate::hash_layout`). "Field bytes" is the sum of the fields' encoded sizes (their
//! length prefixes included); the salt seeds the field hash.
//!
//! A set is laid out exactly as a hash whose members are fields with empty values (one byte each
//! in the record), so both share `crate::hash_layout`; only the key's own record says which type
//! it holds. Buckets carry tag 1 for both: a bucket is never read without its root.
//!
//! A sorted set is laid out as a hash too: its members are fields, their scores the values
//! (`encode_score`); a small one's record keeps its members in score order, as Redis's listpack
//! does.
//!
//! A small list is one tag-5 record; a bigger one a tag-9 top record over directories (tag 10)
//! of chunks of consecutive elements, each a tag-5 record, all stored as the key's parts
//! (`crate::list_layout`). "Element
//! bytes" is the sum of the chunk's encoded elements (their length prefixes included).
//!
//! A separator (17 bytes) is a length byte, then the first bytes of an element, zero-padded to 16:
//! the length byte is the bytes kept (0–16) plus 0x80 when the element is longer than 16 bytes,
//! or 0xFF when the element is not known (a directory written before it was read). A list whose
//! elements are kept in byte order (a sorted set's order index, a stream's entries) is written
//! with separators, so that a search decides most probes from its top and one directory instead
//! of reading the probed chunks (`Separator::at_least`); other lists are not.
//!
//! A stream is a tag-11 record of its counters over a list of its entries in the key's second
//! part space (`crate::stream_layout`); each entry is its ID (16 bytes big-endian, so entries
//! compare as bytes as their IDs do), then its fields and values as a tag-5 body.

use bytes::Bytes;

pub const TAG_STRING: u8 = 0;
pub const TAG_HASH: u8 = 1;
pub const TAG_HASH_ROOT: u8 = 2;
pub const TAG_SET: u8 = 3;
pub const TAG_SET_ROOT: u8 = 4;
pub const TAG_LIST: u8 = 5;
pub const TAG_LIST_ROOT: u8 = 6;
pub const TAG_ZSET: u8 = 7;
pub const TAG_ZSET_ROOT: u8 = 8;
pub const TAG_LIST_TOP: u8 = 9;
pub const TAG_LIST_DIRECTORY: u8 = 10;
pub const TAG_STREAM: u8 = 11;
pub const TAG_STREAM_GROUP: u8 = 12;
pub const TAG_LIST_TOP_SEPARATED: u8 = 13;
pub const TAG_LIST_DIRECTORY_SEPARATED: u8 = 14;

/// The types stored as fields (`crate::hash_layout`): a hash, a set whose members are fields
/// with empty values, and a sorted set whose members are fields with their scores as values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collection {
    Hash,
    Set,
    SortedSet,
}

impl Collection {
    fn record_tag(self) -> u8 {
        match self {
            Collection::Hash => TAG_HASH,
            Collection::Set => TAG_SET,
            Collection::SortedSet => TAG_ZSET,
        }
    }

    fn root_tag(self) -> u8 {
        match self {
            Collection::Hash => TAG_HASH_ROOT,
            Collection::Set => TAG_SET_ROOT,
            Collection::SortedSet => TAG_ZSET_ROOT,
        }
    }

    pub fn type_name(self) -> &'static str {
        match self {
            Collection::Hash => "hash",
            Collection::Set => "set",
            Collection::SortedSet => "zset",
        }
    }
}

/// A stored value that does not follow the table above.
#[derive(Debug, thiserror::Error)]
#[error("stored value is corrupt: {0}")]
pub struct CorruptValue(pub &'static str);

pub enum Stored {
    String(Bytes),
    /// A hash or set in one record.
    Small(Collection, HashRecord),
    /// The root of a hash or set whose fields are in buckets.
    Bucketed(Collection, HashRoot),
    /// A list in one record.
    List(Vec<Bytes>),
    /// The root of a list whose elements are in chunks.
    ChunkedList(ListIndex),
    /// A stream's counters (its entries are in the key's second part space).
    Stream(StreamRoot),
}

impl Stored {
    /// Decodes engine bytes; the string case takes a zero-copy slice after the tag.
    pub fn decode(bytes: Vec<u8>) -> Result<Stored, CorruptValue> {
        let bytes = Bytes::from(bytes);
        match bytes.first() {
            Some(&TAG_STRING) => Ok(Stored::String(bytes.slice(1..))),
            Some(&TAG_HASH) => HashRecord::decode(&bytes).map(|record| Stored::Small(Collection::Hash, record)),
            Some(&TAG_SET) => HashRecord::decode(&bytes).map(|record| Stored::Small(Collection::Set, record)),
            Some(&TAG_HASH_ROOT) => HashRoot::decode(&bytes[1..]).map(|root| Stored::Bucketed(Collection::Hash, root)),
            Some(&TAG_SET_ROOT) => HashRoot::decode(&bytes[1..]).map(|root| Stored::Bucketed(Collection::Set, root)),
            Some(&TAG_ZSET) => HashRecord::decode(&bytes).map(|record| Stored::Small(Collection::SortedSet, record)),
            Some(&TAG_ZSET_ROOT) => HashRoot::decode(&bytes[1..]).map(|root| Stored::Bucketed(Collection::SortedSet, root)),
            Some(&TAG_LIST) => decode_list_body(&bytes).map(Stored::List),
            Some(&TAG_LIST_ROOT) => ListRoot::decode(&bytes[1..]).map(|root| Stored::ChunkedList(ListIndex::Chunks(root))),
            Some(&TAG_LIST_TOP) => ListTop::decode(&bytes[1..], false).map(|top| Stored::ChunkedList(ListIndex::Directories(top))),
            Some(&TAG_LIST_TOP_SEPARATED) => ListTop::decode(&bytes[1..], true).map(|top| Stored::ChunkedList(ListIndex::Directories(top))),
            Some(&TAG_STREAM) => StreamRoot::decode(&bytes[1..]).map(Stored::Stream),
            Some(_) => Err(CorruptValue("unknown type tag")),
            None => Err(CorruptValue("empty value")),
        }
    }
}

/// Type name from the tag alone, without decoding the body (SCAN TYPE, TYPE).
pub fn type_name_of(bytes: &[u8]) -> &'static str {
    match bytes.first() {
        Some(&TAG_STRING) => "string",
        Some(&TAG_HASH | &TAG_HASH_ROOT) => "hash",
        Some(&TAG_SET | &TAG_SET_ROOT) => "set",
        Some(&TAG_LIST | &TAG_LIST_ROOT | &TAG_LIST_TOP | &TAG_LIST_TOP_SEPARATED) => "list",
        Some(&TAG_ZSET | &TAG_ZSET_ROOT) => "zset",
        Some(&TAG_STREAM) => "stream",
        _ => "none",
    }
}

pub fn encode_string(value: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(value.len() + 1);
    bytes.push(TAG_STRING);
    bytes.extend_from_slice(value);
    bytes
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HashRecord {
    pub fields: Vec<(Bytes, Bytes)>,
}

impl HashRecord {
    /// Decodes a bucket (a tag-1 record stored as an engine part).
    pub fn decode_bucket(record: &Bytes) -> Result<HashRecord, CorruptValue> {
        check_bucket_tag(record)?;
        HashRecord::decode(record)
    }

    pub fn get(&self, field: &[u8]) -> Option<&Bytes> {
        self.fields.iter().find(|(name, _)| name.as_ref() == field).map(|(_, value)| value)
    }

    /// The field's value in a bucket's record, found without decoding the other fields.
    pub fn find_in_bucket(record: &Bytes, field: &[u8]) -> Result<Option<Bytes>, CorruptValue> {
        check_bucket_tag(record)?;
        let mut body = &record[1..];
        for _ in 0..read_length(&mut body)? {
            let name = take_prefixed(&mut body)?;
            let value = take_prefixed(&mut body)?;
            if name == field {
                return Ok(Some(record.slice_ref(value)));
            }
        }
        Ok(None)
    }

    /// A bucket's record with `field` set to `value` (where it is, or added after the others)
    /// or removed (`value` None), copied around the change instead of decoded and re-encoded:
    /// the same bytes `set` or `remove` and `encode_bucket` would give. Answers the new record
    /// (None when nothing changes: the removal of a field that is not there) and the field's
    /// old value, a slice of `record`.
    pub fn bucket_spliced(record: &Bytes, field: &[u8], value: Option<&[u8]>) -> Result<(Option<Vec<u8>>, Option<Bytes>), CorruptValue> {
        check_bucket_tag(record)?;
        let mut body = &record[1..];
        let count = read_length(&mut body)?;
        let body_start = record.len() - body.len();
        // The field's entry start, its value's entry start, the end of its value, and the value.
        let mut found = None;
        for _ in 0..count {
            let entry_start = record.len() - body.len();
            let name = take_prefixed(&mut body)?;
            let value_start = record.len() - body.len();
            let stored_value = take_prefixed(&mut body)?;
            if found.is_none() && name == field {
                found = Some((entry_start, value_start, record.len() - body.len(), stored_value));
            }
        }
        if !body.is_empty() {
            return Err(CorruptValue("bytes after the last hash field"));
        }
        let old = found.map(|(_, _, _, stored_value)| record.slice_ref(stored_value));
        let mut bytes = Vec::with_capacity(record.len() + value.map_or(0, |value| field_entry_bytes(field, value) as usize));
        match (found, value) {
            (Some((_, value_start, end, _)), Some(value)) => {
                bytes.extend_from_slice(&record[..value_start]);
                write_prefixed(&mut bytes, value);
                bytes.extend_from_slice(&record[end..]);
            }
            (None, Some(value)) => {
                bytes.push(TAG_HASH);
                write_length(&mut bytes, count + 1);
                bytes.extend_from_slice(&record[body_start..]);
                write_prefixed(&mut bytes, field);
                write_prefixed(&mut bytes, value);
            }
            (Some((entry_start, _, end, _)), None) => {
                bytes.push(TAG_HASH);
                write_length(&mut bytes, count - 1);
                bytes.extend_from_slice(&record[body_start..entry_start]);
                bytes.extend_from_slice(&record[end..]);
            }
            (None, None) => return Ok((None, None)),
        }
        Ok((Some(bytes), old))
    }

    /// Sets a field; true when the field is new.
    pub fn set(&mut self, field: Bytes, value: Bytes) -> bool {
        match self.fields.iter_mut().find(|(name, _)| *name == field) {
            Some(slot) => {
                slot.1 = value;
                false
            }
            None => {
                self.fields.push((field, value));
                true
            }
        }
    }

    /// Removes a field; true when it was there.
    pub fn remove(&mut self, field: &[u8]) -> bool {
        let before = self.fields.len();
        self.fields.retain(|(name, _)| name.as_ref() != field);
        self.fields.len() != before
    }

    /// The key's record of a small hash or set.
    pub fn encode(&self, collection: Collection) -> Vec<u8> {
        self.encode_with_tag(collection.record_tag())
    }

    /// A bucket of a bucketed hash or set.
    pub fn encode_bucket(&self) -> Vec<u8> {
        self.encode_with_tag(TAG_HASH)
    }

    fn encode_with_tag(&self, tag: u8) -> Vec<u8> {
        let body_bytes: usize = self.fields.iter().map(|(field, value)| field.len() + value.len() + 10).sum();
        let mut bytes = Vec::with_capacity(1 + 10 + body_bytes);
        bytes.push(tag);
        write_length(&mut bytes, self.fields.len());
        for (field, value) in &self.fields {
            write_prefixed(&mut bytes, field);
            write_prefixed(&mut bytes, value);
        }
        bytes
    }

    /// Decodes the body after `record`'s tag. The fields and values are slices of `record`: one
    /// buffer per record, not two allocations per field (SADD and ZADD decode a whole bucket to
    /// find one member).
    fn decode(record: &Bytes) -> Result<HashRecord, CorruptValue> {
        let mut body = &record[1..];
        let count = read_length(&mut body)?;
        // Each field takes at least two length bytes: a corrupt count cannot make us allocate more.
        let mut fields = Vec::with_capacity(count.min(body.len() / 2));
        for _ in 0..count {
            let field = record.slice_ref(take_prefixed(&mut body)?);
            let value = record.slice_ref(take_prefixed(&mut body)?);
            fields.push((field, value));
        }
        if !body.is_empty() {
            return Err(CorruptValue("bytes after the last hash field"));
        }
        Ok(HashRecord { fields })
    }
}

fn check_bucket_tag(record: &[u8]) -> Result<(), CorruptValue> {
    match record.first() {
        Some(&TAG_HASH) => Ok(()),
        _ => Err(CorruptValue("hash bucket without the hash tag")),
    }
}

/// The root record of a bucketed hash (tag 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashRoot {
    pub field_count: u64,
    pub bucket_count: u32,
    pub field_bytes: u64,
    pub salt: u64,
}

const HASH_ROOT_BODY_BYTES: usize = 28;

impl HashRoot {
    pub fn encode(&self, collection: Collection) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(1 + HASH_ROOT_BODY_BYTES);
        bytes.push(collection.root_tag());
        bytes.extend_from_slice(&self.field_count.to_le_bytes());
        bytes.extend_from_slice(&self.bucket_count.to_le_bytes());
        bytes.extend_from_slice(&self.field_bytes.to_le_bytes());
        bytes.extend_from_slice(&self.salt.to_le_bytes());
        bytes
    }

    fn decode(body: &[u8]) -> Result<HashRoot, CorruptValue> {
        if body.len() != HASH_ROOT_BODY_BYTES {
            return Err(CorruptValue("hash root of the wrong length"));
        }
        let u64_at = |offset: usize| u64::from_le_bytes(body[offset..offset + 8].try_into().expect("8 bytes"));
        let root = HashRoot {
            field_count: u64_at(0),
            bucket_count: u32::from_le_bytes(body[8..12].try_into().expect("4 bytes")),
            field_bytes: u64_at(12),
            salt: u64_at(20),
        };
        if root.bucket_count == 0 || root.field_count == 0 {
            return Err(CorruptValue("empty hash root"));
        }
        Ok(root)
    }
}

/// A small list's record, or a chunk of a chunked list (tag 5).
pub fn encode_list<'a>(elements: impl ExactSizeIterator<Item = &'a Bytes> + Clone) -> Vec<u8> {
    let body_bytes: usize = elements.clone().map(|element| element.len() + 5).sum();
    let mut bytes = Vec::with_capacity(1 + 10 + body_bytes);
    bytes.push(TAG_LIST);
    write_length(&mut bytes, elements.len());
    for element in elements {
        write_prefixed(&mut bytes, element);
    }
    bytes
}

/// Decodes a chunk of a chunked list (a tag-5 record stored as an engine part); the elements
/// share the record's buffer.
pub fn decode_list_chunk(record: &Bytes) -> Result<Vec<Bytes>, CorruptValue> {
    check_list_chunk_tag(record)?;
    decode_list_body(record)
}

/// A chunk's element count and its last element (None when it has none), read without
/// decoding the others: a search over a sorted set's order index compares only chunks' last
/// entries until it has found the one chunk it decodes.
pub fn list_chunk_last(record: &Bytes) -> Result<(usize, Option<Bytes>), CorruptValue> {
    check_list_chunk_tag(record)?;
    let mut last = None;
    let count = walk_list_body(record, |element| last = Some(element))?;
    Ok((count, last.map(|element| record.slice(element))))
}

/// The byte range of each element of a chunk record (tag 5), in order, found by reading
/// only the length prefixes: a search within a chunk compares a few of them, and an insertion
/// or removal copies the others around the one it changes (`list_chunk_spliced`).
pub fn list_chunk_element_ranges(record: &[u8]) -> Result<Vec<std::ops::Range<usize>>, CorruptValue> {
    check_list_chunk_tag(record)?;
    let count = read_length(&mut record.get(1..).unwrap_or_default())?;
    let mut ranges = Vec::with_capacity(count.min(record.len()));
    walk_list_body(record, |element| ranges.push(element))?;
    Ok(ranges)
}

/// Chunk record `record`, whose elements lie at `ranges` (`list_chunk_element_ranges`), with
/// `inserted` put before element `index` (≤ their count; the count: at the end), or without
/// element `index` (< their count) when `inserted` is None, and the new record's element
/// ranges. The other elements are copied as they are, not decoded and re-encoded.
pub fn list_chunk_spliced(record: &[u8], ranges: &[std::ops::Range<usize>], index: usize, inserted: Option<&[u8]>) -> (Vec<u8>, Vec<std::ops::Range<usize>>) {
    let count = ranges.len();
    // Where the count's length prefix ends as written (a record from elsewhere may spend more
    // bytes on it than `write_length` does).
    let mut body = &record[1..];
    read_length(&mut body).expect("a chunk whose ranges were found");
    let body_start = record.len() - body.len();
    let entry_start = |at: usize| if at == 0 { body_start } else { ranges[at - 1].end };
    let (cut, new_count) = match inserted {
        Some(_) => {
            assert!(index <= count, "insertion at {index} past a chunk of {count}");
            (entry_start(index)..entry_start(index), count + 1)
        }
        None => {
            assert!(index < count, "removal of {index} from a chunk of {count}");
            (entry_start(index)..ranges[index].end, count - 1)
        }
    };
    let inserted_bytes = inserted.map_or(0, |element| element_entry_bytes(element) as usize);
    let mut bytes = Vec::with_capacity(record.len() + inserted_bytes + 1);
    bytes.push(TAG_LIST);
    write_length(&mut bytes, new_count);
    // Where the elements before the change moved (the count's length may change), and those
    // after it.
    let moved_before = bytes.len() as isize - body_start as isize;
    bytes.extend_from_slice(&record[body_start..cut.start]);
    let mut new_ranges = Vec::with_capacity(new_count);
    let shifted = |range: &std::ops::Range<usize>, by: isize| range.start.strict_add_signed(by)..range.end.strict_add_signed(by);
    new_ranges.extend(ranges[..index].iter().map(|range| shifted(range, moved_before)));
    if let Some(element) = inserted {
        write_prefixed(&mut bytes, element);
        new_ranges.push(bytes.len() - element.len()..bytes.len());
    }
    let moved_after = bytes.len() as isize - cut.end as isize;
    let after = if inserted.is_some() { index } else { index + 1 };
    new_ranges.extend(ranges[after..].iter().map(|range| shifted(range, moved_after)));
    bytes.extend_from_slice(&record[cut.end..]);
    (bytes, new_ranges)
}

fn check_list_chunk_tag(record: &[u8]) -> Result<(), CorruptValue> {
    match record.first() {
        Some(&TAG_LIST) => Ok(()),
        _ => Err(CorruptValue("list chunk without the list tag")),
    }
}

/// The elements of a tag-5 record (`record` with its tag), as slices of it: one buffer for the
/// chunk, not one per element (a sorted set's index reads a chunk at every probe of a search).
fn decode_list_body(record: &Bytes) -> Result<Vec<Bytes>, CorruptValue> {
    // Sized by the count the body starts with (each element takes at least its length byte, so
    // a corrupt count cannot ask for more than the record's bytes).
    let count = read_length(&mut record.get(1..).unwrap_or_default())?;
    let mut elements = Vec::with_capacity(count.min(record.len()));
    walk_list_body(record, |element| elements.push(record.slice(element)))?;
    Ok(elements)
}

/// Visits the byte range of each element of a tag-5 record in order; answers their count.
fn walk_list_body(record: &[u8], visit: impl FnMut(std::ops::Range<usize>)) -> Result<usize, CorruptValue> {
    walk_body(record, 1, visit)
}

/// Visits the byte range of each element of a tag-5 body starting at `start` of `record`.
fn walk_body(record: &[u8], start: usize, mut visit: impl FnMut(std::ops::Range<usize>)) -> Result<usize, CorruptValue> {
    let mut body = &record[start..];
    let count = read_length(&mut body)?;
    for _ in 0..count {
        let length = read_length(&mut body)?;
        if length > body.len() {
            return Err(CorruptValue("truncated list element"));
        }
        let start = record.len() - body.len();
        visit(start..start + length);
        body = &body[length..];
    }
    if !body.is_empty() {
        return Err(CorruptValue("bytes after the last list element"));
    }
    Ok(count)
}

/// Bytes one element takes in an encoded list record: its length prefix and its bytes.
pub fn element_entry_bytes(element: &[u8]) -> u64 {
    (length_bytes(element.len()) + element.len()) as u64
}

/// One chunk as a list's directory (or an earlier version's tag-6 root) lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkEntry {
    /// The part that holds the chunk.
    pub part: u32,
    pub elements: u32,
    /// The chunk's encoded elements (`element_entry_bytes` summed).
    pub element_bytes: u32,
    /// Its last element's separator; None when not known, or not written (tags 6 and 10).
    pub separator: Option<Separator>,
}

const CHUNK_ENTRY_BYTES: usize = 12;

/// The first bytes of an element, enough to order it against a search target most of the time
/// without reading the element (formats above).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Separator {
    /// Bytes kept (at most `SEPARATOR_PREFIX_BYTES`), plus `SEPARATOR_TRUNCATED`.
    length: u8,
    prefix: [u8; SEPARATOR_PREFIX_BYTES],
}

const SEPARATOR_PREFIX_BYTES: usize = 16;
pub const SEPARATOR_BYTES: usize = 1 + SEPARATOR_PREFIX_BYTES;
const SEPARATOR_TRUNCATED: u8 = 0x80;
const SEPARATOR_UNKNOWN: u8 = 0xFF;

impl Separator {
    pub fn of(element: &[u8]) -> Separator {
        let kept = element.len().min(SEPARATOR_PREFIX_BYTES);
        let mut prefix = [0; SEPARATOR_PREFIX_BYTES];
        prefix[..kept].copy_from_slice(&element[..kept]);
        let truncated = if element.len() > SEPARATOR_PREFIX_BYTES { SEPARATOR_TRUNCATED } else { 0 };
        Separator { length: kept as u8 | truncated, prefix }
    }

    fn kept(&self) -> &[u8] {
        &self.prefix[..usize::from(self.length & !SEPARATOR_TRUNCATED)]
    }

    /// Whether the element is at least `target` (as bytes), when its kept bytes decide it: a
    /// truncated element that agrees with `target` on all its kept bytes is undecided when
    /// `target` is longer than them, and greater otherwise (it extends `target`).
    pub fn at_least(&self, target: &[u8]) -> Option<bool> {
        let kept = self.kept();
        if self.length & SEPARATOR_TRUNCATED == 0 {
            return Some(kept >= target);
        }
        let common = kept.len().min(target.len());
        match kept[..common].cmp(&target[..common]) {
            std::cmp::Ordering::Less => Some(false),
            std::cmp::Ordering::Greater => Some(true),
            std::cmp::Ordering::Equal => (target.len() <= kept.len()).then_some(true),
        }
    }

    fn encode(separator: Option<Separator>, bytes: &mut Vec<u8>) {
        match separator {
            Some(separator) => {
                bytes.push(separator.length);
                bytes.extend_from_slice(&separator.prefix);
            }
            None => {
                bytes.push(SEPARATOR_UNKNOWN);
                bytes.extend_from_slice(&[0; SEPARATOR_PREFIX_BYTES]);
            }
        }
    }

    fn decode(bytes: &[u8]) -> Result<Option<Separator>, CorruptValue> {
        let (length, prefix) = (bytes[0], <[u8; SEPARATOR_PREFIX_BYTES]>::try_from(&bytes[1..SEPARATOR_BYTES]).expect("17 bytes"));
        let kept = usize::from(length & !SEPARATOR_TRUNCATED);
        match length {
            SEPARATOR_UNKNOWN if prefix == [0; SEPARATOR_PREFIX_BYTES] => Ok(None),
            _ if kept > SEPARATOR_PREFIX_BYTES || (length & SEPARATOR_TRUNCATED != 0 && kept != SEPARATOR_PREFIX_BYTES) => Err(CorruptValue("list separator of the wrong length")),
            _ if prefix[kept..].iter().any(|&byte| byte != 0) => Err(CorruptValue("list separator padded with bytes")),
            _ => Ok(Some(Separator { length, prefix })),
        }
    }
}

/// Bytes of a chunk's entry in a directory, with or without its separator.
fn chunk_entry_bytes(separated: bool) -> usize {
    CHUNK_ENTRY_BYTES + if separated { SEPARATOR_BYTES } else { 0 }
}

fn encode_chunk_entries(bytes: &mut Vec<u8>, chunks: &[ChunkEntry], separated: bool) {
    for chunk in chunks {
        for number in [chunk.part, chunk.elements, chunk.element_bytes] {
            bytes.extend_from_slice(&number.to_le_bytes());
        }
        if separated {
            Separator::encode(chunk.separator, bytes);
        }
    }
}

/// Chunk entries filling `body` exactly; none may be empty.
fn decode_chunk_entries(body: &[u8], separated: bool) -> Result<Vec<ChunkEntry>, CorruptValue> {
    let entry_bytes = chunk_entry_bytes(separated);
    if !body.len().is_multiple_of(entry_bytes) {
        return Err(CorruptValue("chunk entries of the wrong length"));
    }
    // A loop into a Vec of the right size: a fallible collect does not know the count, and
    // growing it cost a push on a big list three times this decoding.
    let mut chunks = Vec::with_capacity(body.len() / entry_bytes);
    for entry in body.chunks_exact(entry_bytes) {
        let separator = if separated { Separator::decode(&entry[CHUNK_ENTRY_BYTES..])? } else { None };
        let chunk = ChunkEntry { part: u32_at(entry, 0), elements: u32_at(entry, 4), element_bytes: u32_at(entry, 8), separator };
        if chunk.elements == 0 {
            return Err(CorruptValue("empty list chunk listed"));
        }
        chunks.push(chunk);
    }
    Ok(chunks)
}

fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(bytes[offset..offset + 8].try_into().expect("8 bytes"))
}

/// A list directory (tag 10, or 14 `separated`; a part of its list's key): chunk count (u32),
/// then per chunk in list order its entry.
pub fn encode_list_directory(chunks: &[ChunkEntry], separated: bool) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(list_directory_bytes(chunks.len(), separated) as usize);
    bytes.push(if separated { TAG_LIST_DIRECTORY_SEPARATED } else { TAG_LIST_DIRECTORY });
    bytes.extend_from_slice(&(chunks.len() as u32).to_le_bytes());
    encode_chunk_entries(&mut bytes, chunks, separated);
    bytes
}

/// Bytes of a directory record listing `chunks` chunks.
pub fn list_directory_bytes(chunks: usize, separated: bool) -> u64 {
    (1 + 4 + chunks * chunk_entry_bytes(separated)) as u64
}

/// Whether a directory record was written with separators (tag 14).
pub fn list_directory_is_separated(record: &[u8]) -> bool {
    record.first() == Some(&TAG_LIST_DIRECTORY_SEPARATED)
}

pub fn decode_list_directory(record: &[u8]) -> Result<Vec<ChunkEntry>, CorruptValue> {
    let separated = match record.first() {
        Some(&TAG_LIST_DIRECTORY) => false,
        Some(&TAG_LIST_DIRECTORY_SEPARATED) => true,
        _ => return Err(CorruptValue("list directory without its tag")),
    };
    if record.len() < 5 {
        return Err(CorruptValue("list directory too short"));
    }
    let chunks = decode_chunk_entries(&record[5..], separated)?;
    if chunks.len() != u32_at(record, 1) as usize || chunks.is_empty() {
        return Err(CorruptValue("list directory of the wrong length"));
    }
    Ok(chunks)
}

/// The index of a chunked list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListIndex {
    /// Tag 9: directories of chunks.
    Directories(ListTop),
    /// Tag 6, as earlier versions wrote it: the chunks themselves; rewritten as tag 9 by the
    /// list's next write.
    Chunks(ListRoot),
}

impl ListIndex {
    /// Parts the list's key holds (0..this).
    pub fn part_count(&self) -> u32 {
        match self {
            ListIndex::Directories(top) => top.part_count,
            ListIndex::Chunks(root) => root.chunks.len() as u32,
        }
    }
}

/// One directory as a list's top record lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirectoryEntry {
    /// The part that holds the directory record.
    pub part: u32,
    /// Elements in the directory's chunks.
    pub elements: u64,
    pub element_bytes: u64,
    /// Its last element's separator; None when not known, or not written (tag 9).
    pub separator: Option<Separator>,
}

/// The top record of a chunked list (tag 9): its directories in list order, and the parts
/// that hold neither a directory nor a chunk (their stale records keep the key's part numbers
/// dense until reused).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListTop {
    pub len: u64,
    /// The key's parts are 0..part_count: directories, chunks and free parts.
    pub part_count: u32,
    pub free_parts: Vec<u32>,
    pub directories: Vec<DirectoryEntry>,
    /// Written with the directories' separators (tag 13).
    pub separated: bool,
}

const LIST_TOP_HEADER_BYTES: usize = 20;
/// More parts than any key may have (the engine allows about 4.4 million with the largest,
/// 1 GiB, write blocks), so a top's part bitmap stays within 1 MiB.
const LIST_PARTS_MAX: u32 = 1 << 23;
const DIRECTORY_ENTRY_BYTES: usize = 20;

/// Bytes of a directory's entry in a top, with or without its separator.
fn directory_entry_bytes(separated: bool) -> usize {
    DIRECTORY_ENTRY_BYTES + if separated { SEPARATOR_BYTES } else { 0 }
}

impl ListTop {
    /// Bytes of a top record with these counts.
    pub fn encoded_bytes(free_parts: usize, directories: usize, separated: bool) -> u64 {
        (1 + LIST_TOP_HEADER_BYTES + 4 * free_parts + directory_entry_bytes(separated) * directories) as u64
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(ListTop::encoded_bytes(self.free_parts.len(), self.directories.len(), self.separated) as usize);
        bytes.push(if self.separated { TAG_LIST_TOP_SEPARATED } else { TAG_LIST_TOP });
        bytes.extend_from_slice(&self.len.to_le_bytes());
        for count in [self.part_count, self.free_parts.len() as u32, self.directories.len() as u32] {
            bytes.extend_from_slice(&count.to_le_bytes());
        }
        for part in &self.free_parts {
            bytes.extend_from_slice(&part.to_le_bytes());
        }
        for directory in &self.directories {
            bytes.extend_from_slice(&directory.part.to_le_bytes());
            bytes.extend_from_slice(&directory.elements.to_le_bytes());
            bytes.extend_from_slice(&directory.element_bytes.to_le_bytes());
            if self.separated {
                Separator::encode(directory.separator, &mut bytes);
            }
        }
        bytes
    }

    fn decode(body: &[u8], separated: bool) -> Result<ListTop, CorruptValue> {
        if body.len() < LIST_TOP_HEADER_BYTES {
            return Err(CorruptValue("list top too short"));
        }
        let (len, part_count) = (u64_at(body, 0), u32_at(body, 8));
        let (free_count, directory_count) = (u32_at(body, 12) as usize, u32_at(body, 16) as usize);
        if body.len() as u64 + 1 != ListTop::encoded_bytes(free_count, directory_count, separated) || directory_count == 0 {
            return Err(CorruptValue("list top of the wrong length"));
        }
        let free_start = LIST_TOP_HEADER_BYTES;
        let free_parts: Vec<u32> = (0..free_count).map(|number| u32_at(body, free_start + 4 * number)).collect();
        let directories_start = free_start + 4 * free_count;
        let entry_bytes = directory_entry_bytes(separated);
        let mut directories = Vec::with_capacity(directory_count);
        for entry in body[directories_start..].chunks_exact(entry_bytes) {
            let separator = if separated { Separator::decode(&entry[DIRECTORY_ENTRY_BYTES..])? } else { None };
            directories.push(DirectoryEntry { part: u32_at(entry, 0), elements: u64_at(entry, 4), element_bytes: u64_at(entry, 12), separator });
        }
        let elements = directories.iter().try_fold(0u64, |sum, directory| sum.checked_add(directory.elements));
        if elements != Some(len) || directories.iter().any(|directory| directory.elements == 0) {
            return Err(CorruptValue("list top counts disagree"));
        }
        if part_count > LIST_PARTS_MAX {
            return Err(CorruptValue("list top counts more parts than a key may have"));
        }
        if free_parts.iter().chain(directories.iter().map(|directory| &directory.part)).any(|&part| part >= part_count) {
            return Err(CorruptValue("list top names a part past its count"));
        }
        // A bit per part (at most the engine's parts per key), where sorting the parts cost a
        // push on a big list more than the rest of decoding its top.
        let mut named = vec![0u64; (part_count as usize).div_ceil(64)];
        for part in free_parts.iter().copied().chain(directories.iter().map(|directory| directory.part)) {
            let (word, bit) = (part as usize / 64, 1u64 << (part % 64));
            if named[word] & bit != 0 {
                return Err(CorruptValue("list top names a part twice"));
            }
            named[word] |= bit;
        }
        Ok(ListTop { len, part_count, free_parts, directories, separated })
    }
}

/// The root record of a chunked list as earlier versions wrote it (tag 6): its chunks in list
/// order, in parts 0..chunk count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListRoot {
    pub len: u64,
    pub chunks: Vec<ChunkEntry>,
}

const LIST_ROOT_HEADER_BYTES: usize = 12;

impl ListRoot {
    /// Lists are no longer written this way: tests write it to check that it is still read.
    #[cfg(test)]
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(1 + LIST_ROOT_HEADER_BYTES + self.chunks.len() * CHUNK_ENTRY_BYTES);
        bytes.push(TAG_LIST_ROOT);
        bytes.extend_from_slice(&self.len.to_le_bytes());
        bytes.extend_from_slice(&(self.chunks.len() as u32).to_le_bytes());
        encode_chunk_entries(&mut bytes, &self.chunks, false);
        bytes
    }

    fn decode(body: &[u8]) -> Result<ListRoot, CorruptValue> {
        if body.len() < LIST_ROOT_HEADER_BYTES {
            return Err(CorruptValue("list root too short"));
        }
        let (len, count) = (u64_at(body, 0), u32_at(body, 8) as usize);
        let chunks = decode_chunk_entries(&body[LIST_ROOT_HEADER_BYTES..], false)?;
        if chunks.len() != count || count == 0 {
            return Err(CorruptValue("list root of the wrong length"));
        }
        if chunks.iter().map(|chunk| u64::from(chunk.elements)).sum::<u64>() != len {
            return Err(CorruptValue("list root counts disagree"));
        }
        let mut parts: Vec<u32> = chunks.iter().map(|chunk| chunk.part).collect();
        parts.sort_unstable();
        if parts.iter().enumerate().any(|(number, &part)| part as usize != number) {
            return Err(CorruptValue("list root parts are not 0..chunk count"));
        }
        Ok(ListRoot { len, chunks })
    }
}

/// A stream entry's ID: milliseconds, then a sequence number; IDs order as these pairs do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

/// Bytes of an ID at the front of a stream entry.
pub const STREAM_ID_BYTES: usize = 16;

impl StreamId {
    pub const ZERO: StreamId = StreamId { ms: 0, seq: 0 };
    pub const MAX: StreamId = StreamId { ms: u64::MAX, seq: u64::MAX };

    /// Big-endian, so that IDs compare as bytes as they compare as pairs.
    pub fn to_be_bytes(self) -> [u8; STREAM_ID_BYTES] {
        let mut bytes = [0; STREAM_ID_BYTES];
        bytes[..8].copy_from_slice(&self.ms.to_be_bytes());
        bytes[8..].copy_from_slice(&self.seq.to_be_bytes());
        bytes
    }

    /// The ID at the front of a stream entry.
    pub fn of_entry(entry: &[u8]) -> Result<StreamId, CorruptValue> {
        let Some(bytes) = entry.get(..STREAM_ID_BYTES) else { return Err(CorruptValue("stream entry too short")) };
        let half = |at: usize| u64::from_be_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        Ok(StreamId { ms: half(0), seq: half(8) })
    }

    /// The next ID, None past the last.
    pub fn next(self) -> Option<StreamId> {
        match self.seq.checked_add(1) {
            Some(seq) => Some(StreamId { seq, ..self }),
            None => Some(StreamId { ms: self.ms.checked_add(1)?, seq: 0 }),
        }
    }

    /// The previous ID, None before 0-0.
    pub fn previous(self) -> Option<StreamId> {
        match self.seq.checked_sub(1) {
            Some(seq) => Some(StreamId { seq, ..self }),
            None => Some(StreamId { ms: self.ms.checked_sub(1)?, seq: u64::MAX }),
        }
    }
}

impl std::fmt::Display for StreamId {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{}-{}", self.ms, self.seq)
    }
}

/// A stream entry as its list stores it: the ID, then the fields and values (`fields`: field,
/// value, field, value…) as a tag-5 body.
pub fn encode_stream_entry(id: StreamId, fields: &[Bytes]) -> Bytes {
    let body_bytes: usize = fields.iter().map(|item| item.len() + 5).sum();
    let mut bytes = Vec::with_capacity(STREAM_ID_BYTES + 10 + body_bytes);
    bytes.extend_from_slice(&id.to_be_bytes());
    write_length(&mut bytes, fields.len());
    for item in fields {
        write_prefixed(&mut bytes, item);
    }
    Bytes::from(bytes)
}

/// A stream entry's ID and its fields and values (slices of `entry`).
pub fn decode_stream_entry(entry: &Bytes) -> Result<(StreamId, Vec<Bytes>), CorruptValue> {
    let id = StreamId::of_entry(entry)?;
    let mut items = Vec::new();
    let count = walk_body(entry, STREAM_ID_BYTES, |item| items.push(entry.slice(item)))?;
    if count == 0 || count % 2 != 0 {
        return Err(CorruptValue("stream entry without fields and values in pairs"));
    }
    Ok((id, items))
}

/// A stream's key record (tag 11): its counters and its consumer groups' names (group `n` is
/// the key's part `n`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamRoot {
    pub length: u64,
    /// The greatest ID the stream ever had (or XSETID gave it): new IDs must be greater.
    pub last_id: StreamId,
    pub max_deleted_id: StreamId,
    /// Entries ever added (XADD), as Redis counts them for consumer groups' lag.
    pub entries_added: u64,
    pub groups: Vec<Bytes>,
}

const STREAM_ROOT_HEADER_BYTES: usize = 52;

impl StreamRoot {
    pub fn encode(&self) -> Vec<u8> {
        let names: usize = self.groups.iter().map(|name| name.len() + 5).sum();
        let mut bytes = Vec::with_capacity(1 + STREAM_ROOT_HEADER_BYTES + names);
        bytes.push(TAG_STREAM);
        for number in [self.length, self.last_id.ms, self.last_id.seq, self.max_deleted_id.ms, self.max_deleted_id.seq, self.entries_added] {
            bytes.extend_from_slice(&number.to_le_bytes());
        }
        bytes.extend_from_slice(&(self.groups.len() as u32).to_le_bytes());
        for name in &self.groups {
            write_prefixed(&mut bytes, name);
        }
        bytes
    }

    fn decode(body: &[u8]) -> Result<StreamRoot, CorruptValue> {
        if body.len() < STREAM_ROOT_HEADER_BYTES {
            return Err(CorruptValue("stream root too short"));
        }
        let id_at = |offset: usize| StreamId { ms: u64_at(body, offset), seq: u64_at(body, offset + 8) };
        let group_count = u32_at(body, 48) as usize;
        let mut rest = &body[STREAM_ROOT_HEADER_BYTES..];
        // Each name takes at least its length byte: a corrupt count cannot make us allocate more.
        let mut groups = Vec::with_capacity(group_count.min(rest.len()));
        for _ in 0..group_count {
            groups.push(read_bytes(&mut rest)?);
        }
        if !rest.is_empty() {
            return Err(CorruptValue("bytes after the last stream group"));
        }
        Ok(StreamRoot { length: u64_at(body, 0), last_id: id_at(8), max_deleted_id: id_at(24), entries_added: u64_at(body, 40), groups })
    }
}

/// A consumer of a stream's group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Consumer {
    pub name: Bytes,
    /// When it last read or claimed (Unix ms).
    pub seen_ms: u64,
}

/// An entry delivered to a consumer of a group and not acknowledged yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    pub consumer: Bytes,
    /// When it was last delivered (Unix ms).
    pub delivered_ms: u64,
    pub deliveries: u64,
}

/// A stream's consumer group (tag 12, a part of the stream's key).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsumerGroup {
    /// The last ID delivered to one of its consumers.
    pub last_id: StreamId,
    /// Entries the group has read, as Redis counts them for its lag; None when unknown.
    pub entries_read: Option<u64>,
    /// By name (bytes order, as Redis lists them).
    pub consumers: Vec<Consumer>,
    /// Delivered and not acknowledged, by ID; each names one of `consumers`.
    pub pending: std::collections::BTreeMap<StreamId, Pending>,
}

/// `entries_read` as stored when unknown.
const ENTRIES_READ_UNKNOWN: u64 = u64::MAX;
const GROUP_HEADER_BYTES: usize = 28;
const PENDING_ENTRY_BYTES: usize = 36;

impl ConsumerGroup {
    pub fn encode(&self) -> Vec<u8> {
        let consumer_bytes: usize = self.consumers.iter().map(|consumer| consumer.name.len() + 13).sum();
        let mut bytes = Vec::with_capacity(1 + GROUP_HEADER_BYTES + consumer_bytes + 4 + PENDING_ENTRY_BYTES * self.pending.len());
        bytes.push(TAG_STREAM_GROUP);
        for number in [self.last_id.ms, self.last_id.seq, self.entries_read.unwrap_or(ENTRIES_READ_UNKNOWN)] {
            bytes.extend_from_slice(&number.to_le_bytes());
        }
        bytes.extend_from_slice(&(self.consumers.len() as u32).to_le_bytes());
        for consumer in &self.consumers {
            write_prefixed(&mut bytes, &consumer.name);
            bytes.extend_from_slice(&consumer.seen_ms.to_le_bytes());
        }
        bytes.extend_from_slice(&(self.pending.len() as u32).to_le_bytes());
        for (id, pending) in &self.pending {
            let consumer = self.consumers.binary_search_by(|consumer| consumer.name.cmp(&pending.consumer)).expect("a pending entry names a consumer of its group");
            for number in [id.ms, id.seq] {
                bytes.extend_from_slice(&number.to_le_bytes());
            }
            bytes.extend_from_slice(&(consumer as u32).to_le_bytes());
            bytes.extend_from_slice(&pending.delivered_ms.to_le_bytes());
            bytes.extend_from_slice(&pending.deliveries.to_le_bytes());
        }
        bytes
    }

    pub fn decode(record: &[u8]) -> Result<ConsumerGroup, CorruptValue> {
        let Some((&TAG_STREAM_GROUP, body)) = record.split_first() else { return Err(CorruptValue("stream group without its tag")) };
        if body.len() < GROUP_HEADER_BYTES {
            return Err(CorruptValue("stream group too short"));
        }
        let last_id = StreamId { ms: u64_at(body, 0), seq: u64_at(body, 8) };
        let entries_read = Some(u64_at(body, 16)).filter(|&read| read != ENTRIES_READ_UNKNOWN);
        let consumer_count = u32_at(body, 24) as usize;
        let mut rest = &body[GROUP_HEADER_BYTES..];
        let mut consumers = Vec::with_capacity(consumer_count.min(rest.len() / 9));
        for _ in 0..consumer_count {
            let name = read_bytes(&mut rest)?;
            let seen_ms = take_u64(&mut rest)?;
            consumers.push(Consumer { name, seen_ms });
        }
        if consumers.windows(2).any(|pair| pair[0].name >= pair[1].name) {
            return Err(CorruptValue("stream group consumers out of order"));
        }
        let pending_count = take_u32(&mut rest)? as usize;
        if rest.len() != pending_count * PENDING_ENTRY_BYTES {
            return Err(CorruptValue("stream group pending entries of the wrong length"));
        }
        let mut pending = std::collections::BTreeMap::new();
        for entry in rest.chunks_exact(PENDING_ENTRY_BYTES) {
            let id = StreamId { ms: u64_at(entry, 0), seq: u64_at(entry, 8) };
            let consumer = consumers.get(u32_at(entry, 16) as usize).ok_or(CorruptValue("pending entry of no consumer"))?;
            pending.insert(id, Pending { consumer: consumer.name.clone(), delivered_ms: u64_at(entry, 20), deliveries: u64_at(entry, 28) });
        }
        if pending.len() != pending_count {
            return Err(CorruptValue("stream group pending entries out of order"));
        }
        Ok(ConsumerGroup { last_id, entries_read, consumers, pending })
    }
}

fn take_u64(body: &mut &[u8]) -> Result<u64, CorruptValue> {
    let Some((number, rest)) = body.split_first_chunk::<8>() else { return Err(CorruptValue("truncated number")) };
    *body = rest;
    Ok(u64::from_le_bytes(*number))
}

fn take_u32(body: &mut &[u8]) -> Result<u32, CorruptValue> {
    let Some((number, rest)) = body.split_first_chunk::<4>() else { return Err(CorruptValue("truncated number")) };
    *body = rest;
    Ok(u32::from_le_bytes(*number))
}

/// A sorted-set member's score as its field value.
pub fn encode_score(score: f64) -> Bytes {
    debug_assert!(!score.is_nan(), "Redis never stores a NaN score");
    Bytes::copy_from_slice(&score.to_le_bytes())
}

pub fn decode_score(value: &[u8]) -> Result<f64, CorruptValue> {
    let bytes: [u8; 8] = value.try_into().map_err(|_| CorruptValue("sorted-set score of the wrong length"))?;
    let score = f64::from_le_bytes(bytes);
    if score.is_nan() {
        return Err(CorruptValue("sorted-set score is NaN"));
    }
    Ok(score)
}

/// Bytes one field takes in an encoded hash record: both length prefixes, the field, the value.
pub fn field_entry_bytes(field: &[u8], value: &[u8]) -> u64 {
    (length_bytes(field.len()) + field.len() + length_bytes(value.len()) + value.len()) as u64
}

fn length_bytes(length: usize) -> usize {
    (usize::BITS - length.leading_zeros()).max(1).div_ceil(7) as usize
}

fn write_prefixed(bytes: &mut Vec<u8>, prefixed: &[u8]) {
    write_length(bytes, prefixed.len());
    bytes.extend_from_slice(prefixed);
}

fn write_length(bytes: &mut Vec<u8>, mut length: usize) {
    loop {
        let low = (length & 0x7f) as u8;
        length >>= 7;
        if length == 0 {
            bytes.push(low);
            return;
        }
        bytes.push(low | 0x80);
    }
}

/// Reads a LEB128 length; a length under 128 (one byte, most elements' and fields') without a
/// loop or a call: walking a chunk's lengths is most of a search within it.
#[inline]
fn read_length(body: &mut &[u8]) -> Result<usize, CorruptValue> {
    match body.split_first() {
        Some((&byte, rest)) if byte & 0x80 == 0 => {
            *body = rest;
            Ok(usize::from(byte))
        }
        _ => read_long_length(body),
    }
}

fn read_long_length(body: &mut &[u8]) -> Result<usize, CorruptValue> {
    let mut length: usize = 0;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = body.split_first().ok_or(CorruptValue("truncated length"))?;
        *body = rest;
        length |= usize::from(byte & 0x7f).checked_shl(shift).ok_or(CorruptValue("length overflow"))?;
        if byte & 0x80 == 0 {
            return Ok(length);
        }
    }
    Err(CorruptValue("length too long"))
}

fn read_bytes(body: &mut &[u8]) -> Result<Bytes, CorruptValue> {
    take_prefixed(body).map(Bytes::copy_from_slice)
}

/// The length-prefixed bytes at the start of `body`, which moves past them.
fn take_prefixed<'a>(body: &mut &'a [u8]) -> Result<&'a [u8], CorruptValue> {
    let length = read_length(body)?;
    if length > body.len() {
        return Err(CorruptValue("truncated hash field"));
    }
    let (taken, rest) = body.split_at(length);
    *body = rest;
    Ok(taken)
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};

    use super::*;

    #[test]
    fn a_bucket_spliced_in_place_is_the_bucket_encoded_with_the_change() {
        let mut random = rand::rngs::StdRng::seed_from_u64(12);
        for _ in 0..300 {
            let count = random.gen_range(0..150);
            let mut bucket = HashRecord::default();
            for number in 0..count {
                bucket.set(Bytes::from(format!("field:{number}")), Bytes::from(vec![b'v'; random.gen_range(0..300)]));
            }
            let record = Bytes::from(bucket.encode_bucket());
            let field = Bytes::from(format!("field:{}", random.gen_range(0..count + 3)));
            let value = Bytes::from(vec![b'w'; random.gen_range(0..200)]);
            let mut expected = bucket.clone();
            expected.set(field.clone(), value.clone());
            let (spliced, old) = HashRecord::bucket_spliced(&record, &field, Some(&value)).unwrap();
            assert_eq!(spliced, Some(expected.encode_bucket()), "set {field:?} in {count}");
            assert_eq!(old.as_ref(), bucket.get(&field), "the old value");
            let mut expected = bucket.clone();
            let removed = expected.remove(&field);
            let (spliced, old) = HashRecord::bucket_spliced(&record, &field, None).unwrap();
            assert_eq!(spliced, removed.then(|| expected.encode_bucket()), "removal of {field:?} from {count}");
            assert_eq!(old.as_ref(), bucket.get(&field));
        }
        let mut trailing = HashRecord::default().encode_bucket();
        trailing.push(0);
        assert!(HashRecord::bucket_spliced(&Bytes::from(trailing), b"f", None).is_err(), "bytes after the last field");
    }

    #[test]
    fn a_chunk_spliced_in_place_is_the_chunk_encoded_with_the_change() {
        let mut random = rand::rngs::StdRng::seed_from_u64(11);
        for _ in 0..300 {
            let count = random.gen_range(0..200);
            let elements: Vec<Bytes> = (0..count).map(|_| Bytes::from(vec![random.gen::<u8>(); random.gen_range(0..300)])).collect();
            let record = encode_list(elements.iter());
            let ranges = list_chunk_element_ranges(&record).unwrap();
            assert_eq!(ranges.iter().map(|range| &record[range.clone()]).collect::<Vec<_>>(), elements.iter().map(|element| &element[..]).collect::<Vec<_>>());
            let inserted = Bytes::from(vec![7u8; random.gen_range(0..200)]);
            let at = random.gen_range(0..=count);
            let mut expected = elements.clone();
            expected.insert(at, inserted.clone());
            let (spliced, spliced_ranges) = list_chunk_spliced(&record, &ranges, at, Some(&inserted));
            assert_eq!(spliced, encode_list(expected.iter()), "insertion at {at} of {count}");
            assert_eq!(spliced_ranges, list_chunk_element_ranges(&spliced).unwrap(), "the ranges of the new record");
            if count > 0 {
                let at = random.gen_range(0..count);
                let mut expected = elements.clone();
                expected.remove(at);
                let (spliced, spliced_ranges) = list_chunk_spliced(&record, &ranges, at, None);
                assert_eq!(spliced, encode_list(expected.iter()), "removal of {at} of {count}");
                assert_eq!(spliced_ranges, list_chunk_element_ranges(&spliced).unwrap(), "the ranges of the new record");
            }
        }
        assert!(list_chunk_element_ranges(&encode_string(b"x")).is_err(), "not a list chunk");
    }

    #[test]
    fn hash_round_trips_in_insertion_order() {
        let mut hash = HashRecord::default();
        assert!(hash.set(Bytes::from_static(b"b"), Bytes::from(vec![7u8; 300])));
        assert!(hash.set(Bytes::from_static(b"a"), Bytes::new()));
        assert!(!hash.set(Bytes::from_static(b"b"), Bytes::from_static(b"2")));
        let Stored::Small(Collection::Hash, decoded) = Stored::decode(hash.encode(Collection::Hash)).unwrap() else { panic!("not a hash") };
        assert_eq!(decoded, hash);
        assert_eq!(decoded.fields[0].0.as_ref(), b"b");
        assert!(hash.remove(b"a") && !hash.remove(b"a"));
    }

    #[test]
    fn root_round_trips_and_entry_bytes_match_the_encoding() {
        let root = HashRoot { field_count: 20_000, bucket_count: 3000, field_bytes: 9_000_000, salt: u64::MAX - 3 };
        let Stored::Bucketed(Collection::Hash, decoded) = Stored::decode(root.encode(Collection::Hash)).unwrap() else { panic!("not a root") };
        assert_eq!(decoded, root);
        assert_eq!(type_name_of(&root.encode(Collection::Hash)), "hash");
        assert!(Stored::decode(root.encode(Collection::Hash)[..20].to_vec()).is_err());
        for (field, value) in [(0, 0), (1, 127), (128, 300), (16383, 16384)] {
            let mut hash = HashRecord::default();
            hash.set(Bytes::from(vec![1u8; field]), Bytes::from(vec![2u8; value]));
            let body_bytes = hash.encode_bucket().len() as u64 - 2;
            assert_eq!(field_entry_bytes(&vec![1u8; field], &vec![2u8; value]), body_bytes);
        }
    }

    #[test]
    fn stream_records_round_trip_and_reject_what_does_not_add_up() {
        let root = StreamRoot {
            length: 3,
            last_id: StreamId { ms: 9, seq: u64::MAX },
            max_deleted_id: StreamId { ms: 2, seq: 1 },
            entries_added: 7,
            groups: vec![Bytes::from_static(b"g1"), Bytes::new()],
        };
        assert!(matches!(Stored::decode(root.encode()), Ok(Stored::Stream(decoded)) if decoded == root));
        assert_eq!(type_name_of(&root.encode()), "stream");
        assert!(Stored::decode(root.encode()[..40].to_vec()).is_err());
        let entry = encode_stream_entry(StreamId { ms: 1, seq: 2 }, &[Bytes::from_static(b"f"), Bytes::new()]);
        assert_eq!(decode_stream_entry(&entry).unwrap(), (StreamId { ms: 1, seq: 2 }, vec![Bytes::from_static(b"f"), Bytes::new()]));
        assert!(decode_stream_entry(&encode_stream_entry(StreamId::ZERO, &[Bytes::new()])).is_err(), "fields come in pairs");
        assert!(StreamId { ms: 1, seq: 0 }.to_be_bytes() > StreamId { ms: 0, seq: u64::MAX }.to_be_bytes());
        assert_eq!((StreamId::MAX.next(), StreamId::ZERO.previous()), (None, None));
        assert_eq!(StreamId { ms: 1, seq: u64::MAX }.next(), Some(StreamId { ms: 2, seq: 0 }));

        let mut group = ConsumerGroup { last_id: StreamId { ms: 5, seq: 0 }, entries_read: None, ..ConsumerGroup::default() };
        for name in [&b"alice"[..], b"bob"] {
            group.consumers.push(Consumer { name: Bytes::copy_from_slice(name), seen_ms: 10 });
        }
        group.pending.insert(StreamId { ms: 4, seq: 1 }, Pending { consumer: Bytes::from_static(b"bob"), delivered_ms: 11, deliveries: 3 });
        assert_eq!(ConsumerGroup::decode(&group.encode()).unwrap(), group);
        group.entries_read = Some(4);
        let mut record = group.encode();
        assert_eq!(ConsumerGroup::decode(&record).unwrap(), group);
        let consumer_number_at = record.len() - 20;
        record[consumer_number_at] = 2;
        assert!(ConsumerGroup::decode(&record).is_err(), "a pending entry of no consumer");
        assert!(ConsumerGroup::decode(&group.encode()[..30]).is_err());
    }

    #[test]
    fn a_set_is_told_from_a_hash_by_its_tags_alone() {
        let mut members = HashRecord::default();
        members.set(Bytes::from_static(b"m"), Bytes::new());
        let Stored::Small(Collection::Set, decoded) = Stored::decode(members.encode(Collection::Set)).unwrap() else { panic!("not a set") };
        assert_eq!(decoded, members);
        let root = HashRoot { field_count: 1, bucket_count: 1, field_bytes: 3, salt: 7 };
        assert!(matches!(Stored::decode(root.encode(Collection::Set)).unwrap(), Stored::Bucketed(Collection::Set, _)));
        assert_eq!(type_name_of(&members.encode(Collection::Set)), "set");
        assert_eq!(type_name_of(&root.encode(Collection::Set)), "set");
        assert_eq!(HashRecord::decode_bucket(&members.encode_bucket().into()).unwrap(), members);
        assert!(HashRecord::decode_bucket(&members.encode(Collection::Set).into()).is_err(), "a key's record is not a bucket");
    }

    #[test]
    fn a_field_found_in_a_bucket_record_is_the_decoded_fields_value() {
        let mut fields = HashRecord::default();
        for (field, value) in [("a", "1"), ("bb", ""), ("c", "long value")] {
            fields.set(Bytes::from(field), Bytes::from(value));
        }
        let record = Bytes::from(fields.encode_bucket());
        for (field, value) in &fields.fields {
            assert_eq!(HashRecord::find_in_bucket(&record, field).unwrap().as_ref(), Some(value));
        }
        assert_eq!(HashRecord::find_in_bucket(&record, b"b").unwrap(), None, "a prefix of a field is not the field");
        assert!(HashRecord::find_in_bucket(&fields.encode(Collection::Set).into(), b"a").is_err(), "a key's record is not a bucket");
        assert!(HashRecord::find_in_bucket(&record.slice(..record.len() - 3), b"c").is_err(), "a truncated value");
    }

    #[test]
    fn sorted_sets_have_their_own_tags_and_scores_round_trip() {
        let mut members = HashRecord::default();
        members.set(Bytes::from_static(b"m"), encode_score(-0.0));
        let Stored::Small(Collection::SortedSet, decoded) = Stored::decode(members.encode(Collection::SortedSet)).unwrap() else { panic!("not a zset") };
        assert_eq!(decoded, members);
        let root = HashRoot { field_count: 1, bucket_count: 1, field_bytes: 11, salt: 7 };
        assert!(matches!(Stored::decode(root.encode(Collection::SortedSet)).unwrap(), Stored::Bucketed(Collection::SortedSet, _)));
        assert_eq!(type_name_of(&members.encode(Collection::SortedSet)), "zset");
        assert_eq!(type_name_of(&root.encode(Collection::SortedSet)), "zset");
        for score in [0.0, -0.0, 1.5, f64::INFINITY, f64::NEG_INFINITY, f64::MIN_POSITIVE] {
            assert_eq!(decode_score(&encode_score(score)).unwrap().to_bits(), score.to_bits());
        }
        assert!(decode_score(&f64::NAN.to_le_bytes()).is_err());
        assert!(decode_score(b"1234567").is_err());
    }

    #[test]
    fn lists_and_their_roots_round_trip() {
        let elements = vec![Bytes::from_static(b""), Bytes::from(vec![7u8; 300]), Bytes::from_static(b"x")];
        let Stored::List(decoded) = Stored::decode(encode_list(elements.iter())).unwrap() else { panic!("not a list") };
        assert_eq!(decoded, elements);
        let record = Bytes::from(encode_list(elements.iter()));
        assert_eq!(decode_list_chunk(&record).unwrap(), elements);
        assert_eq!(list_chunk_last(&record).unwrap(), (elements.len(), elements.last().cloned()));
        let body_bytes: u64 = elements.iter().map(|element| element_entry_bytes(element)).sum();
        assert_eq!(encode_list(elements.iter()).len() as u64, 2 + body_bytes);
        let root = ListRoot { len: 5, chunks: vec![ChunkEntry { part: 1, elements: 2, element_bytes: 9, separator: None }, ChunkEntry { part: 0, elements: 3, element_bytes: 4, separator: None }] };
        let Stored::ChunkedList(ListIndex::Chunks(decoded)) = Stored::decode(root.encode()).unwrap() else { panic!("not a list root") };
        assert_eq!(decoded, root);
        assert_eq!(type_name_of(&root.encode()), "list");
        let mut wrong = root.encode();
        wrong[1] = 6;
        assert!(Stored::decode(wrong).is_err(), "counts that disagree");
        assert!(Stored::decode(root.encode()[..20].to_vec()).is_err());
        let mut gap = root.clone();
        gap.chunks[0].part = 2;
        assert!(Stored::decode(gap.encode()).is_err(), "parts not 0..chunk count");
    }

    #[test]
    fn list_tops_and_directories_round_trip_and_are_checked() {
        for separated in [false, true] {
            let separator = |element: &[u8]| separated.then(|| Separator::of(element));
            let directories = vec![
                DirectoryEntry { part: 4, elements: 2, element_bytes: 9, separator: separator(b"a") },
                DirectoryEntry { part: 0, elements: 1 << 40, element_bytes: 1 << 41, separator: None },
            ];
            let top = ListTop { len: 2 + (1 << 40), part_count: 9, free_parts: vec![7, 3], directories, separated };
            let encoded = top.encode();
            assert_eq!(encoded.len() as u64, ListTop::encoded_bytes(2, 2, separated));
            let Stored::ChunkedList(ListIndex::Directories(decoded)) = Stored::decode(encoded.clone()).unwrap() else { panic!("not a list top") };
            assert_eq!(decoded, top);
            assert_eq!(ListIndex::Directories(decoded).part_count(), 9);
            assert_eq!(type_name_of(&encoded), "list");
            assert!(Stored::decode(encoded[..encoded.len() - 1].to_vec()).is_err(), "truncated");
            let mut past = top.clone();
            past.free_parts[0] = 9;
            assert!(Stored::decode(past.encode()).is_err(), "a free part past the count");
            let mut counts = top.clone();
            counts.len += 1;
            assert!(Stored::decode(counts.encode()).is_err(), "counts that disagree");
            let mut twice = top.clone();
            twice.free_parts[1] = 4;
            assert!(Stored::decode(twice.encode()).is_err(), "a part both free and a directory");
            let chunks = vec![
                ChunkEntry { part: 1, elements: 2, element_bytes: 9, separator: separator(&[9; 40]) },
                ChunkEntry { part: 2, elements: 3, element_bytes: 4, separator: separator(b"") },
            ];
            let record = encode_list_directory(&chunks, separated);
            assert_eq!(record.len() as u64, list_directory_bytes(2, separated));
            assert_eq!(list_directory_is_separated(&record), separated);
            assert_eq!(decode_list_directory(&record).unwrap(), chunks);
            assert!(decode_list_directory(&record[..record.len() - 1]).is_err());
            assert!(decode_list_directory(&encode_list_directory(&[], separated)).is_err(), "an empty directory");
            assert!(Stored::decode(record).is_err(), "a directory is not a key's value");
        }
    }

    #[test]
    fn separators_are_checked_when_decoded() {
        let chunk = |separator: Option<Separator>| encode_list_directory(&[ChunkEntry { part: 0, elements: 1, element_bytes: 2, separator }], true);
        let at = 1 + 4 + CHUNK_ENTRY_BYTES;
        let mut long = chunk(Some(Separator::of(b"abc")));
        long[at] = 17;
        assert!(decode_list_directory(&long).is_err(), "more than 16 bytes kept");
        let mut padded = chunk(Some(Separator::of(b"abc")));
        padded[at + 1 + 5] = 1;
        assert!(decode_list_directory(&padded).is_err(), "bytes past those kept");
        let mut short_truncated = chunk(Some(Separator::of(b"abc")));
        short_truncated[at] |= SEPARATOR_TRUNCATED;
        assert!(decode_list_directory(&short_truncated).is_err(), "truncated before 16 bytes");
        let mut unknown = chunk(None);
        unknown[at + 3] = 1;
        assert!(decode_list_directory(&unknown).is_err(), "an unknown separator with bytes");
    }

    #[test]
    fn a_separator_orders_its_element_against_a_target_or_says_it_cannot() {
        let mut random = rand::rngs::StdRng::seed_from_u64(46);
        let alphabet = [0u8, 1, 0x7F, 0x80, 0xFF];
        let word = |random: &mut rand::rngs::StdRng| -> Vec<u8> {
            let length = *[0, 1, 15, 16, 17, 20].get(random.gen_range(0..6)).unwrap();
            (0..length).map(|_| alphabet[random.gen_range(0..alphabet.len())]).collect()
        };
        let (mut decided, mut undecided) = (0, 0);
        for _ in 0..200_000 {
            let element = word(&mut random);
            // Half the targets share a prefix with the element, so that the undecided case
            // (the first 16 bytes equal, both longer) comes up.
            let mut target = word(&mut random);
            if random.gen_bool(0.5) {
                let shared = random.gen_range(0..=element.len());
                target = element[..shared].iter().chain(&target).copied().collect();
            }
            match Separator::of(&element).at_least(&target) {
                Some(answer) => {
                    assert_eq!(answer, element >= target, "{element:?} against {target:?}");
                    decided += 1;
                }
                None => {
                    assert!(element.len() > 16 && target.len() > 16 && element[..16] == target[..16], "{element:?} against {target:?}");
                    undecided += 1;
                }
            }
        }
        assert!(decided > 100_000 && undecided > 0, "{decided} decided, {undecided} not");
    }

    #[test]
    fn string_keeps_bytes_after_tag() {
        let Stored::String(text) = Stored::decode(encode_string(b"\x01hi")).unwrap() else { panic!("not a string") };
        assert_eq!(text.as_ref(), b"\x01hi");
        assert_eq!(type_name_of(&encode_string(b"")), "string");
    }

    #[test]
    fn rejects_corrupt_values() {
        assert!(Stored::decode(vec![]).is_err());
        assert!(Stored::decode(vec![9]).is_err());
        assert!(Stored::decode(vec![TAG_HASH, 1, 5, b'a']).is_err());
        assert!(Stored::decode(vec![TAG_HASH, 0xff, 0xff]).is_err());
        assert!(Stored::decode(vec![TAG_HASH, 0, 0]).is_err());
    }
}
