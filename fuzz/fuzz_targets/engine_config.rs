#![no_main]
//! Fuzzes the configuration parser with arbitrary text: it must accept or reject, never panic.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    if let Ok(text) = std::str::from_utf8(bytes) {
        hybridkv_engine::fuzzing::config(text);
    }
});
