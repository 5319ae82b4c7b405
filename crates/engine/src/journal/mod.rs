//! Records in DRAM, made durable by a redo journal on pmem or ssd plus checkpoint images that
//! bound replay. `JournaledMemory` is a `Medium`: the record log above it cannot tell it from a
//! persistent region.

pub(crate) mod format;
mod journaled_memory;

pub(crate) use journaled_memory::JournaledMemory;
