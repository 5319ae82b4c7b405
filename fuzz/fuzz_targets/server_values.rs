//! Feeds arbitrary bytes to every decoder of the values the server stores (type records, list
//! chunks, hash buckets, sorted-set scores and order entries, HyperLogLogs): none may panic, and
//! what decodes must re-encode consistently (`hybridkv_server::fuzzing`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hybridkv_server::fuzzing::decode_stored_values(data);
});
