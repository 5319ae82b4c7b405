//! Feeds arbitrary bytes, split into arbitrary reads, to the request decoder: it must never panic,
//! every command it returns has at least one argument within the limits, and it never returns a
//! command after an error (the connection is closed then).
#![no_main]

use bytes::BytesMut;
use hybridkv_resp::{DecodeLimits, RequestDecoder};
use libfuzzer_sys::fuzz_target;

const BULK_BYTES_MAX: usize = 1024;
const ARGUMENTS_MAX: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Some((&split_seed, input)) = data.split_first() else { return };
    let limits = DecodeLimits { bulk_bytes_max: BULK_BYTES_MAX, arguments_max: ARGUMENTS_MAX, authenticated: split_seed & 1 == 0 };
    let read_bytes = 1 + usize::from(split_seed >> 1);
    let mut decoder = RequestDecoder::new();
    let mut buffer = BytesMut::new();
    for read in input.chunks(read_bytes) {
        buffer.extend_from_slice(read);
        loop {
            match decoder.decode(&mut buffer, &limits) {
                Ok(Some(arguments)) => {
                    assert!(!arguments.is_empty() && arguments.len() <= ARGUMENTS_MAX);
                    assert!(arguments.iter().all(|argument| argument.len() <= BULK_BYTES_MAX.max(input.len())));
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
});
