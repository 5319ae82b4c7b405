//! The record format: every record in a write block carries a checksum, its key, its value, a
//! generation, an expiry, its log sequence number and flags.
//!
//! | offset | size | field                                                      |
//! |-------:|-----:|------------------------------------------------------------|
//! | 0      | 4    | crc32c of bytes 4 .. RECORD_HEADER_BYTES + key + value      |
//! | 4      | 4    | value length                                               |
//! | 8      | 2    | key length                                                 |
//! | 10     | 1    | flags: 1 tombstone, 2 batch member, 4 batch end, 8 part    |
//! | 11     | 1    | reserved, 0                                                |
//! | 12     | 4    | low 32 bits of the write block's sequence number           |
//! | 16     | 8    | log sequence number (LSN), never 0                         |
//! | 24     | 8    | expiry, Unix ms, 0 = none                                  |
//! | 32     | 4    | generation                                                 |
//! | 36     | 4    | batch length (records in the batch, on the batch end)      |
//! | 40     | k    | key                                                        |
//! | 40 + k | v    | value                                                      |
//!
//! followed by zero padding to RECORD_ALIGN_BYTES. Little-endian throughout.

pub(crate) const CHECKSUM_OFFSET: usize = 0;
pub(crate) const VALUE_LEN_OFFSET: usize = CHECKSUM_OFFSET + 4;
pub(crate) const KEY_LEN_OFFSET: usize = VALUE_LEN_OFFSET + 4;
pub(crate) const FLAGS_OFFSET: usize = KEY_LEN_OFFSET + 2;
pub(crate) const RESERVED_OFFSET: usize = FLAGS_OFFSET + 1;
pub(crate) const BLOCK_SEQ_OFFSET: usize = RESERVED_OFFSET + 1;
pub(crate) const LSN_OFFSET: usize = BLOCK_SEQ_OFFSET + 4;
pub(crate) const EXPIRY_OFFSET: usize = LSN_OFFSET + 8;
pub(crate) const GENERATION_OFFSET: usize = EXPIRY_OFFSET + 8;
pub(crate) const BATCH_LEN_OFFSET: usize = GENERATION_OFFSET + 4;
pub(crate) const RECORD_HEADER_BYTES: usize = BATCH_LEN_OFFSET + 4;
pub(crate) const RECORD_ALIGN_BYTES: usize = 8;

const _: () = assert!(RECORD_HEADER_BYTES == 40);
const _: () = assert!(RECORD_HEADER_BYTES.is_multiple_of(RECORD_ALIGN_BYTES));

pub(crate) const FLAG_TOMBSTONE: u8 = 1;
pub(crate) const FLAG_BATCH_MEMBER: u8 = 2;
pub(crate) const FLAG_BATCH_END: u8 = 4;
/// A part of another key's value (see `crate::digest::part_key`), never a key of its own.
pub(crate) const FLAG_PART: u8 = 8;
const FLAGS_KNOWN: u8 = FLAG_TOMBSTONE | FLAG_BATCH_MEMBER | FLAG_BATCH_END | FLAG_PART;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecordHeader {
    pub(crate) value_len: u32,
    pub(crate) key_len: u16,
    pub(crate) flags: u8,
    pub(crate) block_seq_low: u32,
    pub(crate) lsn: u64,
    pub(crate) expiry_unix_ms: u64,
    pub(crate) generation: u32,
    pub(crate) batch_len: u32,
}

impl RecordHeader {
    pub(crate) fn is_tombstone(&self) -> bool {
        self.flags & FLAG_TOMBSTONE != 0
    }

    pub(crate) fn is_batch_member(&self) -> bool {
        self.flags & FLAG_BATCH_MEMBER != 0
    }

    pub(crate) fn is_part(&self) -> bool {
        self.flags & FLAG_PART != 0
    }

    pub(crate) fn is_batch_end(&self) -> bool {
        self.flags & FLAG_BATCH_END != 0
    }

    pub(crate) fn record_bytes(&self) -> usize {
        record_bytes(self.key_len as usize, self.value_len as usize)
    }
}

/// Bytes a record occupies in a block, padding included.
pub(crate) fn record_bytes(key_len: usize, value_len: usize) -> usize {
    (RECORD_HEADER_BYTES + key_len + value_len).next_multiple_of(RECORD_ALIGN_BYTES)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// Fewer bytes than a header: the end of the written part of a block.
    Truncated,
    /// A length or flag no encoder writes: garbage, a torn write or the end of the block.
    Malformed,
    /// Left over from an earlier use of the block.
    WrongBlock,
    Checksum,
}

/// A verified record borrowed from a byte buffer.
#[derive(Clone, Debug)]
pub(crate) struct RecordView<'bytes> {
    pub(crate) header: RecordHeader,
    pub(crate) key: &'bytes [u8],
    pub(crate) value: &'bytes [u8],
}

pub(crate) fn encode(header: &RecordHeader, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
    assert_eq!(header.key_len as usize, key.len());
    assert_eq!(header.value_len as usize, value.len());
    assert!(header.lsn != 0, "LSN 0 marks unwritten space");
    assert!(header.flags & !FLAGS_KNOWN == 0);
    let start = out.len();
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&header.value_len.to_le_bytes());
    out.extend_from_slice(&header.key_len.to_le_bytes());
    out.push(header.flags);
    out.push(0);
    out.extend_from_slice(&header.block_seq_low.to_le_bytes());
    out.extend_from_slice(&header.lsn.to_le_bytes());
    out.extend_from_slice(&header.expiry_unix_ms.to_le_bytes());
    out.extend_from_slice(&header.generation.to_le_bytes());
    out.extend_from_slice(&header.batch_len.to_le_bytes());
    debug_assert_eq!(out.len() - start, RECORD_HEADER_BYTES);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    let checksum = crate::checksum::crc32c(&out[start + VALUE_LEN_OFFSET..]);
    out[start..start + 4].copy_from_slice(&checksum.to_le_bytes());
    out.resize(start + record_bytes(key.len(), value.len()), 0);
}

fn u16_at(bytes: &[u8], offset: usize) -> u16 {
    u16::from_le_bytes(bytes[offset..offset + 2].try_into().expect("2 bytes"))
}

pub(crate) fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("4 bytes"))
}

pub(crate) fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(bytes[offset..offset + 8].try_into().expect("8 bytes"))
}

/// Parses a header without verifying the checksum; checks what can be checked from the header
/// alone so that a caller can size its read safely.
pub(crate) fn decode_header(bytes: &[u8]) -> Result<RecordHeader, DecodeError> {
    if bytes.len() < RECORD_HEADER_BYTES {
        return Err(DecodeError::Truncated);
    }
    let header = RecordHeader {
        value_len: u32_at(bytes, VALUE_LEN_OFFSET),
        key_len: u16_at(bytes, KEY_LEN_OFFSET),
        flags: bytes[FLAGS_OFFSET],
        block_seq_low: u32_at(bytes, BLOCK_SEQ_OFFSET),
        lsn: u64_at(bytes, LSN_OFFSET),
        expiry_unix_ms: u64_at(bytes, EXPIRY_OFFSET),
        generation: u32_at(bytes, GENERATION_OFFSET),
        batch_len: u32_at(bytes, BATCH_LEN_OFFSET),
    };
    let tombstone_with_value = header.is_tombstone() && header.value_len != 0;
    if header.lsn == 0
        || header.flags & !FLAGS_KNOWN != 0
        || bytes[RESERVED_OFFSET] != 0
        || tombstone_with_value
        || header.is_batch_end() && !header.is_batch_member()
        || header.is_part() && header.key_len as usize != crate::digest::PART_KEY_BYTES
    {
        return Err(DecodeError::Malformed);
    }
    Ok(header)
}

/// Verifies and borrows the record at the start of `bytes`, which must belong to the block whose
/// sequence number has these low 32 bits.
pub(crate) fn decode(bytes: &[u8], block_seq_low: u32) -> Result<RecordView<'_>, DecodeError> {
    let header = decode_header(bytes)?;
    if header.block_seq_low != block_seq_low {
        return Err(DecodeError::WrongBlock);
    }
    let body_end = RECORD_HEADER_BYTES + header.key_len as usize + header.value_len as usize;
    if bytes.len() < body_end {
        return Err(DecodeError::Truncated);
    }
    let stored = u32_at(bytes, CHECKSUM_OFFSET);
    if crate::checksum::crc32c(&bytes[VALUE_LEN_OFFSET..body_end]) != stored {
        return Err(DecodeError::Checksum);
    }
    let key_end = RECORD_HEADER_BYTES + header.key_len as usize;
    Ok(RecordView { header, key: &bytes[RECORD_HEADER_BYTES..key_end], value: &bytes[key_end..body_end] })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(key: &[u8], value: &[u8]) -> RecordHeader {
        RecordHeader {
            value_len: value.len() as u32,
            key_len: key.len() as u16,
            flags: 0,
            block_seq_low: 9,
            lsn: 42,
            expiry_unix_ms: 1234,
            generation: 3,
            batch_len: 0,
        }
    }

    #[test]
    fn encoded_records_decode_to_the_same_fields() {
        let mut out = Vec::new();
        encode(&header(b"key", b"value"), b"key", b"value", &mut out);
        assert_eq!(out.len(), record_bytes(3, 5));
        assert_eq!(out.len() % RECORD_ALIGN_BYTES, 0);
        let view = decode(&out, 9).unwrap();
        assert_eq!((view.key, view.value), (&b"key"[..], &b"value"[..]));
        assert_eq!(view.header, header(b"key", b"value"));
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let mut out = Vec::new();
        encode(&header(b"k", b"some value"), b"k", b"some value", &mut out);
        let used = RECORD_HEADER_BYTES + 1 + 10;
        for bit in 0..used * 8 {
            let mut damaged = out.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&damaged, 9).is_err(), "bit {bit} not detected");
        }
    }

    #[test]
    fn leftovers_of_another_block_and_zeroes_are_rejected() {
        let mut out = Vec::new();
        encode(&header(b"k", b"v"), b"k", b"v", &mut out);
        assert_eq!(decode(&out, 10).unwrap_err(), DecodeError::WrongBlock);
        assert_eq!(decode(&[0u8; 64], 0).unwrap_err(), DecodeError::Malformed);
        assert_eq!(decode(&out[..20], 9).unwrap_err(), DecodeError::Truncated);
    }
}
