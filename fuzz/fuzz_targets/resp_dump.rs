//! Feeds arbitrary bytes to the DUMP payload decoder (RESTORE's), with the footer as given and
//! again with a valid footer computed over them, so that the body's decoding is reached: it must
//! never panic, and whatever it accepts must encode to a payload that decodes to the same value.
#![no_main]

use hybridkv_resp::{decode_dump, encode_dump, DumpLimits, DUMP_RDB_VERSION_WRITTEN};

const LIMITS: DumpLimits = DumpLimits { string_bytes_max: 1 << 20, elements_max: 1 << 16 };
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = decode_dump(data, LIMITS);
    let mut payload = data.to_vec();
    payload.extend_from_slice(&DUMP_RDB_VERSION_WRITTEN.to_le_bytes());
    let checksum = crc::Crc::<u64>::new(&crc::CRC_64_REDIS).checksum(&payload);
    payload.extend_from_slice(&checksum.to_le_bytes());
    if let Ok(value) = decode_dump(&payload, LIMITS) {
        assert_eq!(decode_dump(&encode_dump(&value), LIMITS), Ok(value));
    }
});
