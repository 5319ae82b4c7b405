#![no_main]
//! Fuzzes the engine's journal decoder with arbitrary bytes: it must accept or reject, never panic.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| hybridkv_engine::fuzzing::journal(bytes));
