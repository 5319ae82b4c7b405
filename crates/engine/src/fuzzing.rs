//! Entry points for the fuzz targets in `fuzz/`: every decoder of bytes that come from media, fed
//! arbitrary input. Each must return (accepting or rejecting the input), never panic.

use std::sync::Arc;

use hybridkv_media::sim::SimStore;
use hybridkv_media::{MediaProvider, Tier, PAGE_BYTES};

use crate::config::INDEX_BYTES_MIN;
use crate::digest::Digest;
use crate::index::{Index, PARTITION_COUNT};
use crate::journal::format;
use crate::log::block_walk::BlockWalk;
use crate::log::{record, walk_records, BlockHeader};

/// Walks arbitrary bytes as the records of a block.
pub fn records(bytes: &[u8]) {
    let seq = bytes.first().copied().unwrap_or(0) as u64;
    for past_damage in [false, true] {
        let walked = walk_records(bytes, seq, past_damage, |_, view| {
            assert!(view.key.len() == view.header.key_len as usize);
        });
        assert!(walked.end <= bytes.len() as u64 && walked.skipped_bytes <= walked.end);
    }
    assert_windowed_walk_agrees(bytes, seq);
    let _ = record::decode(bytes, seq as u32);
    let _ = BlockHeader::decode(bytes, 0, 1 << 20, 0);
}

/// A walk a page at a time visits what the walk over the whole image does.
fn assert_windowed_walk_agrees(bytes: &[u8], seq: u64) {
    let mut whole = Vec::new();
    let whole_walked = walk_records(bytes, seq, true, |offset, view| whole.push((offset, view.header.lsn)));
    let mut windowed = Vec::new();
    let mut buffer = Vec::new();
    let walk = BlockWalk {
        records_start: 0,
        block_bytes: bytes.len() as u64,
        seq,
        window_bytes: PAGE_BYTES,
        buffer: &mut buffer,
        read: |offset: u64, out: &mut [u8]| {
            out.copy_from_slice(&bytes[offset as usize..offset as usize + out.len()]);
            Ok(())
        },
    };
    let walked = walk
        .run(|_| (), |offset, view, ()| {
            windowed.push((offset, view.header.lsn));
            Ok(true)
        })
        .expect("reads from memory succeed");
    assert_eq!((windowed, walked), (whole, whole_walked), "a windowed walk differs from the whole image's");
}

/// Decodes arbitrary bytes as journal segment headers, entries and image headers.
pub fn journal(bytes: &[u8]) {
    let _ = format::decode_segment_header(bytes);
    let _ = format::decode_image_header(bytes);
    let parsed = format::parse_segment(bytes, 0);
    let mut previous_end = format::SEGMENT_HEADER_BYTES;
    for entry in &parsed.entries {
        assert!(entry.start >= previous_end && entry.end() <= bytes.len(), "entries in order, inside the segment");
        assert_eq!(entry.data(bytes).len(), entry.frame.data_len);
        previous_end = entry.end();
    }
}

/// Loads arbitrary bytes as the start of an index region (header slots, directory, tables) and,
/// when it is accepted, verifies its tables and looks keys up in every 97th partition.
pub fn index_region(bytes: &[u8]) {
    let store = SimStore::new(0);
    let medium = store.open("index", Tier::Pmem, INDEX_BYTES_MIN).expect("simulated medium").medium;
    let len = bytes.len().min(INDEX_BYTES_MIN as usize);
    medium.write_at(0, &bytes[..len]).expect("simulated write");
    let fingerprint = bytes.get(24..32).map_or(0, |word| u64::from_le_bytes(word.try_into().expect("8 bytes")));
    let Ok(Ok(index)) = Index::attach(Arc::clone(&medium), fingerprint, "fuzz", 0) else { return };
    // Checksums (arbitrary tables almost never match them) and counts of interrupted changes,
    // then lookups, which check or refuse their tables.
    let _ = index.interrupted_changes();
    let _ = index.check_unchecked_tables();
    for number in (0..PARTITION_COUNT).step_by(97) {
        let partition = index.partition(number).read();
        let _ = index.lookup(&partition, Digest((number as u128) << 116));
        let _ = index.entries(&partition);
    }
}

/// Parses arbitrary text as a configuration file.
pub fn config(text: &str) {
    let _ = crate::config::Config::from_toml(text);
}
