//! What the fuzz target `server_values` (fuzz/fuzz_targets/server_values.rs) drives, and a unit
//! test runs over random inputs: every decoder of the values the server stores, over arbitrary
//! bytes. None may panic; a list chunk or directory, hash bucket, stream root, stream entry or
//! consumer group that decodes re-encodes to bytes that decode the same; a list chunk or hash
//! bucket changed in its record (spliced) decodes to what it decoded to, changed; an HLL whose
//! registers decode is raised as the registers say; any score
//! decodes to an indexable GEO position.

use bytes::Bytes;

use crate::geohash;
use crate::hyperloglog::{Hll, REGISTERS};
use crate::sorted_set_layout::decode_order_entry;
use crate::values::{
    decode_list_chunk, decode_list_directory, list_directory_is_separated, decode_score, decode_stream_entry, encode_list, encode_list_directory, encode_stream_entry, list_chunk_element_ranges, list_chunk_last,
    list_chunk_spliced, ConsumerGroup, HashRecord, Stored,
};

pub fn decode_stored_values(data: &[u8]) {
    let _ = Stored::decode(data.to_vec());
    let _ = decode_score(data);
    let record = Bytes::copy_from_slice(data);
    let _ = decode_order_entry(&record);
    assert_eq!(list_chunk_element_ranges(data).is_ok(), decode_list_chunk(&record).is_ok());
    if let Ok(elements) = decode_list_chunk(&record) {
        assert_eq!(list_chunk_last(&record).ok(), Some((elements.len(), elements.last().cloned())));
        splice_list_chunk(&record, &elements);
        let again = Bytes::from(encode_list(elements.iter()));
        assert_eq!(decode_list_chunk(&again).ok(), Some(elements));
    }
    if let Ok(directory) = decode_list_directory(data) {
        assert_eq!(decode_list_directory(&encode_list_directory(&directory, list_directory_is_separated(data))).ok(), Some(directory));
    }
    assert_eq!(HashRecord::bucket_spliced(&record, b"field", None).is_ok(), HashRecord::decode_bucket(&record).is_ok());
    if let Ok(bucket) = HashRecord::decode_bucket(&record) {
        splice_bucket(&record, &bucket);
        // A decoded bucket may name a field twice (the decoder does not refuse it): the scan finds the first.
        for (field, _) in &bucket.fields {
            let first = bucket.fields.iter().find(|(name, _)| name == field).map(|(_, value)| value);
            assert_eq!(HashRecord::find_in_bucket(&record, field).ok().flatten().as_ref(), first);
        }
        assert_eq!(HashRecord::decode_bucket(&bucket.encode_bucket().into()).ok(), Some(bucket));
    }
    if let Ok(Stored::Stream(root)) = Stored::decode(data.to_vec()) {
        assert!(matches!(Stored::decode(root.encode()), Ok(Stored::Stream(again)) if again == root));
    }
    if let Ok((id, fields)) = decode_stream_entry(&record) {
        assert_eq!(decode_stream_entry(&encode_stream_entry(id, &fields)).ok(), Some((id, fields)));
    }
    if let Ok(group) = ConsumerGroup::decode(data) {
        assert_eq!(ConsumerGroup::decode(&group.encode()).ok(), Some(group));
    }
    raise_hll_register(data);
    decode_position(data);
}

/// A chunk that decodes to `elements`, changed in its record, decodes to them changed (an
/// insertion and a removal at places its length chooses).
fn splice_list_chunk(record: &Bytes, elements: &[Bytes]) {
    let ranges = list_chunk_element_ranges(record).expect("a chunk that decodes has its ranges");
    assert!(ranges.iter().zip(elements).all(|(range, element)| record[range.clone()] == element[..]) && ranges.len() == elements.len());
    let at = record.len() % (elements.len() + 1);
    let mut expected = elements.to_vec();
    expected.insert(at, Bytes::from_static(b"spliced"));
    let (spliced, spliced_ranges) = list_chunk_spliced(record, &ranges, at, Some(b"spliced"));
    assert_eq!(list_chunk_element_ranges(&spliced).ok(), Some(spliced_ranges));
    assert_eq!(decode_list_chunk(&Bytes::from(spliced)).ok(), Some(expected));
    if !elements.is_empty() {
        let at = record.len() % elements.len();
        let mut expected = elements.to_vec();
        expected.remove(at);
        let (spliced, spliced_ranges) = list_chunk_spliced(record, &ranges, at, None);
        assert_eq!(list_chunk_element_ranges(&spliced).ok(), Some(spliced_ranges));
        assert_eq!(decode_list_chunk(&Bytes::from(spliced)).ok(), Some(expected));
    }
}

/// A bucket changed in its record decodes to the bucket changed: a field set (its first, or a
/// new one), and removed when it is there once (a decoded removal takes every copy).
fn splice_bucket(record: &Bytes, bucket: &HashRecord) {
    let field = bucket.fields.first().map_or_else(|| Bytes::from_static(b"new field"), |(field, _)| field.clone());
    let (set, old) = HashRecord::bucket_spliced(record, &field, Some(b"value")).expect("a bucket that decodes is spliced");
    let mut expected = bucket.clone();
    expected.set(field.clone(), Bytes::from_static(b"value"));
    assert_eq!(HashRecord::decode_bucket(&Bytes::from(set.expect("a set changes its bucket"))).ok(), Some(expected));
    assert_eq!(old.as_ref(), bucket.get(&field));
    if bucket.fields.iter().filter(|(name, _)| *name == field).count() == 1 {
        let (removed, _) = HashRecord::bucket_spliced(record, &field, None).expect("spliced above");
        let mut expected = bucket.clone();
        expected.remove(&field);
        assert_eq!(HashRecord::decode_bucket(&Bytes::from(removed.expect("the field was there"))).ok(), Some(expected));
    }
}

/// Reads the data's first 8 bytes as a sorted-set score and decodes it as GEO commands do: any
/// score (a member added by ZADD) is a position within the indexable limits.
fn decode_position(data: &[u8]) {
    let Some(bytes) = data.get(..8) else { return };
    let score = f64::from_le_bytes(bytes.try_into().expect("8 bytes"));
    let (longitude, latitude) = geohash::position_of(score);
    assert!(geohash::is_indexable(longitude, latitude), "{score} decodes to {longitude},{latitude}");
    assert_eq!(geohash::standard_geohash(score).len(), 11);
}

/// Parses `data` as an HLL and raises a register the data's first bytes choose.
fn raise_hll_register(data: &[u8]) {
    let Ok(mut hll) = Hll::parse(data) else { return };
    let choice = data.get(5..8).map_or(0, |bytes| usize::from(bytes[0]) | usize::from(bytes[1]) << 8 | usize::from(bytes[2]) << 16);
    let (index, value) = (choice % REGISTERS, (choice >> 14) as u8 % 63 + 1);
    let Ok(before) = hll.registers() else {
        let _ = hll.raise(index, value);
        return;
    };
    let raised = hll.raise(index, value).expect("an HLL whose registers decode can be raised");
    let mut expected = before;
    assert_eq!(raised, value > expected[index]);
    expected[index] = expected[index].max(value);
    assert_eq!(hll.registers().expect("still decodes"), expected);
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};

    use super::*;

    /// A deterministic run of the fuzz target's body: random bytes, and random mutations of
    /// valid values (HLL headers, list chunks, hash buckets) so that the decoders get past their tags.
    #[test]
    fn random_and_mutated_values_never_panic_a_decoder() {
        let mut random = rand::rngs::StdRng::seed_from_u64(17);
        let bucket = HashRecord { fields: vec![(Bytes::from_static(b"f"), Bytes::from_static(b"v")), (Bytes::from_static(b"gh"), Bytes::new())] };
        let mut seeds: Vec<Vec<u8>> = vec![Hll::new().into_bytes(), encode_list([Bytes::from_static(b"a"), Bytes::from_static(b"bc")].iter()), bucket.encode_bucket()];
        let mut dense = Hll::new();
        dense.make_dense().unwrap();
        seeds.push(dense.into_bytes());
        for _ in 0..20_000 {
            let mut data = match random.gen_bool(0.3) {
                true => (0..random.gen_range(0..64)).map(|_| random.gen()).collect(),
                false => seeds[random.gen_range(0..seeds.len())].clone(),
            };
            for _ in 0..random.gen_range(0..4) {
                if data.is_empty() {
                    break;
                }
                let at = random.gen_range(0..data.len());
                match random.gen_range(0..3) {
                    0 => data[at] = random.gen(),
                    1 => data.truncate(at),
                    _ => data.insert(at, random.gen()),
                }
            }
            decode_stored_values(&data);
        }
    }
}
