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
//! | 6   | list (chunked) | element count (u64 LE), chunk count (u32 LE), then per chunk in list order: part (u32 LE), elements (u32 LE), element bytes (u32 LE) |
//! | 7   | sorted set | as tag 1: each member is a field whose value is its score (f64, 8 bytes LE) |
//! | 8   | sorted set (bucketed) | as tag 2                                                  |
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
//! A small list is one tag-5 record; a bigger one a tag-6 root plus chunks of consecutive
//! elements stored as the key's parts, each a tag-5 record (`crate::list_layout`). "Element
//! bytes" is the sum of the chunk's encoded elements (their length prefixes included).

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
    ChunkedList(ListRoot),
}

impl Stored {
    /// Decodes engine bytes; the string case takes a zero-copy slice after the tag.
    pub fn decode(bytes: Vec<u8>) -> Result<Stored, CorruptValue> {
        let bytes = Bytes::from(bytes);
        match bytes.first() {
            Some(&TAG_STRING) => Ok(Stored::String(bytes.slice(1..))),
            Some(&TAG_HASH) => HashRecord::decode(&bytes[1..]).map(|record| Stored::Small(Collection::Hash, record)),
            Some(&TAG_SET) => HashRecord::decode(&bytes[1..]).map(|record| Stored::Small(Collection::Set, record)),
            Some(&TAG_HASH_ROOT) => HashRoot::decode(&bytes[1..]).map(|root| Stored::Bucketed(Collection::Hash, root)),
            Some(&TAG_SET_ROOT) => HashRoot::decode(&bytes[1..]).map(|root| Stored::Bucketed(Collection::Set, root)),
            Some(&TAG_ZSET) => HashRecord::decode(&bytes[1..]).map(|record| Stored::Small(Collection::SortedSet, record)),
            Some(&TAG_ZSET_ROOT) => HashRoot::decode(&bytes[1..]).map(|root| Stored::Bucketed(Collection::SortedSet, root)),
            Some(&TAG_LIST) => decode_list_body(&bytes).map(Stored::List),
            Some(&TAG_LIST_ROOT) => ListRoot::decode(&bytes[1..]).map(Stored::ChunkedList),
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
        Some(&TAG_LIST | &TAG_LIST_ROOT) => "list",
        Some(&TAG_ZSET | &TAG_ZSET_ROOT) => "zset",
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
    pub fn decode_bucket(bytes: &[u8]) -> Result<HashRecord, CorruptValue> {
        match bytes.split_first() {
            Some((&TAG_HASH, body)) => HashRecord::decode(body),
            _ => Err(CorruptValue("hash bucket without the hash tag")),
        }
    }

    pub fn get(&self, field: &[u8]) -> Option<&Bytes> {
        self.fields.iter().find(|(name, _)| name.as_ref() == field).map(|(_, value)| value)
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
            write_length(&mut bytes, field.len());
            bytes.extend_from_slice(field);
            write_length(&mut bytes, value.len());
            bytes.extend_from_slice(value);
        }
        bytes
    }

    fn decode(mut body: &[u8]) -> Result<HashRecord, CorruptValue> {
        let count = read_length(&mut body)?;
        // Each field takes at least two length bytes: a corrupt count cannot make us allocate more.
        let mut fields = Vec::with_capacity(count.min(body.len() / 2));
        for _ in 0..count {
            let field = read_bytes(&mut body)?;
            let value = read_bytes(&mut body)?;
            fields.push((field, value));
        }
        if !body.is_empty() {
            return Err(CorruptValue("bytes after the last hash field"));
        }
        Ok(HashRecord { fields })
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
        write_length(&mut bytes, element.len());
        bytes.extend_from_slice(element);
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

fn check_list_chunk_tag(record: &Bytes) -> Result<(), CorruptValue> {
    match record.first() {
        Some(&TAG_LIST) => Ok(()),
        _ => Err(CorruptValue("list chunk without the list tag")),
    }
}

/// The elements of a tag-5 record (`record` with its tag), as slices of it: one buffer for the
/// chunk, not one per element (a sorted set's index reads a chunk at every probe of a search).
fn decode_list_body(record: &Bytes) -> Result<Vec<Bytes>, CorruptValue> {
    let mut elements = Vec::new();
    walk_list_body(record, |element| elements.push(record.slice(element)))?;
    Ok(elements)
}

/// Visits the byte range of each element of a tag-5 record in order; answers their count.
fn walk_list_body(record: &[u8], mut visit: impl FnMut(std::ops::Range<usize>)) -> Result<usize, CorruptValue> {
    let mut body = &record[1..];
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

/// One chunk as the root of a chunked list lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkEntry {
    /// The part that holds the chunk.
    pub part: u32,
    pub elements: u32,
    /// The chunk's encoded elements (`element_entry_bytes` summed).
    pub element_bytes: u32,
}

/// The root record of a chunked list (tag 6): its chunks in list order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListRoot {
    pub len: u64,
    pub chunks: Vec<ChunkEntry>,
}

const LIST_ROOT_HEADER_BYTES: usize = 12;
const CHUNK_ENTRY_BYTES: usize = 12;

impl ListRoot {
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(1 + LIST_ROOT_HEADER_BYTES + self.chunks.len() * CHUNK_ENTRY_BYTES);
        bytes.push(TAG_LIST_ROOT);
        bytes.extend_from_slice(&self.len.to_le_bytes());
        bytes.extend_from_slice(&(self.chunks.len() as u32).to_le_bytes());
        for chunk in &self.chunks {
            for number in [chunk.part, chunk.elements, chunk.element_bytes] {
                bytes.extend_from_slice(&number.to_le_bytes());
            }
        }
        bytes
    }

    fn decode(body: &[u8]) -> Result<ListRoot, CorruptValue> {
        let u32_at = |offset: usize| u32::from_le_bytes(body[offset..offset + 4].try_into().expect("4 bytes"));
        if body.len() < LIST_ROOT_HEADER_BYTES {
            return Err(CorruptValue("list root too short"));
        }
        let len = u64::from_le_bytes(body[..8].try_into().expect("8 bytes"));
        let count = u32_at(8) as usize;
        if body.len() != LIST_ROOT_HEADER_BYTES + count * CHUNK_ENTRY_BYTES || count == 0 {
            return Err(CorruptValue("list root of the wrong length"));
        }
        let chunks: Vec<ChunkEntry> = (0..count)
            .map(|number| LIST_ROOT_HEADER_BYTES + number * CHUNK_ENTRY_BYTES)
            .map(|offset| ChunkEntry { part: u32_at(offset), elements: u32_at(offset + 4), element_bytes: u32_at(offset + 8) })
            .collect();
        if chunks.iter().map(|chunk| u64::from(chunk.elements)).sum::<u64>() != len || chunks.iter().any(|chunk| chunk.elements == 0) {
            return Err(CorruptValue("list root counts disagree"));
        }
        Ok(ListRoot { len, chunks })
    }
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

fn read_length(body: &mut &[u8]) -> Result<usize, CorruptValue> {
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
    let length = read_length(body)?;
    if length > body.len() {
        return Err(CorruptValue("truncated hash field"));
    }
    let (taken, rest) = body.split_at(length);
    *body = rest;
    Ok(Bytes::copy_from_slice(taken))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_set_is_told_from_a_hash_by_its_tags_alone() {
        let mut members = HashRecord::default();
        members.set(Bytes::from_static(b"m"), Bytes::new());
        let Stored::Small(Collection::Set, decoded) = Stored::decode(members.encode(Collection::Set)).unwrap() else { panic!("not a set") };
        assert_eq!(decoded, members);
        let root = HashRoot { field_count: 1, bucket_count: 1, field_bytes: 3, salt: 7 };
        assert!(matches!(Stored::decode(root.encode(Collection::Set)).unwrap(), Stored::Bucketed(Collection::Set, _)));
        assert_eq!(type_name_of(&members.encode(Collection::Set)), "set");
        assert_eq!(type_name_of(&root.encode(Collection::Set)), "set");
        assert_eq!(HashRecord::decode_bucket(&members.encode_bucket()).unwrap(), members);
        assert!(HashRecord::decode_bucket(&members.encode(Collection::Set)).is_err(), "a key's record is not a bucket");
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
        let root = ListRoot { len: 5, chunks: vec![ChunkEntry { part: 1, elements: 2, element_bytes: 9 }, ChunkEntry { part: 0, elements: 3, element_bytes: 4 }] };
        let Stored::ChunkedList(decoded) = Stored::decode(root.encode()).unwrap() else { panic!("not a list root") };
        assert_eq!(decoded, root);
        assert_eq!(type_name_of(&root.encode()), "list");
        let mut wrong = root.encode();
        wrong[1] = 6;
        assert!(Stored::decode(wrong).is_err(), "counts that disagree");
        assert!(Stored::decode(root.encode()[..20].to_vec()).is_err());
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
