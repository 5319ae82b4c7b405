//! Record storage: the record format, write blocks and the append-only record log.

pub(crate) mod block;
pub(crate) mod block_walk;
pub(crate) mod location;
pub(crate) mod record;
pub(crate) mod record_log;

pub(crate) use block::{BlockHeader, BLOCK_HEADER_BYTES};
pub(crate) use location::Location;
pub(crate) use record::{RecordView, RECORD_HEADER_BYTES};
pub(crate) use record_log::{
    is_blank_block_start, position, position_offset, position_seq, walk_records, Appended, DeviceReadOutcome, FlushWork, NewRecord, RecordLog, Walked,
    Writer,
    BLOCKS_RESERVED_FOR_DEFRAG, BLOCKS_RESERVED_FOR_DELETIONS, BLOCK_START_BYTES,
};
