//! The Redis protocol codec, and nothing else: no I/O, no engine, so it can be fuzzed and reused by
//! load generators.
//!
//! - `decode`: an incremental decoder of client requests (RESP multibulk arrays of bulk strings,
//!   and inline commands) with Redis's protocol error texts and explicit limits.
//! - `encode`: the `Reply` a command produces, written for RESP2 or RESP3.
//! - `dump`: DUMP and RESTORE payloads (Redis's RDB encoding of one string, hash, set or list).

mod decode;
mod dump;
mod encode;
mod inline;

pub use decode::{
    DecodeLimits, ProtocolError, RequestDecoder, ARGUMENTS_MAX_DEFAULT, BULK_BYTES_MAX_DEFAULT, INLINE_BYTES_MAX,
    UNAUTHENTICATED_ARGUMENTS_MAX, UNAUTHENTICATED_BULK_BYTES_MAX,
};
pub use dump::{decode_dump, encode_dump, DumpError, DumpLimits, DumpValue, DUMP_RDB_VERSION_READ_MAX, DUMP_RDB_VERSION_WRITTEN};
pub use encode::{encode, format_double, format_g, ProtocolVersion, Reply};
pub use inline::split_inline_arguments;
