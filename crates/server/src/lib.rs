//! The RESP server: listener, sessions, command table and commands, on top of the storage engine.
//!
//! Reading order: `config` → `server` (listener, shutdown) → `session` (one connection: decode,
//! execute, reply) → `command` (dispatch, the store a command runs on) → `commands/` (handlers)
//! → `watch` (WATCH's keys and the writes that touch them) → `values` (how Redis types are stored in engine values) → `hash_layout` (a hash over one
//! record or a root and buckets) → `info` (INFO and metrics) → `command_stats` and `slowlog` (what
//! INFO commandstats/errorstats and SLOWLOG report) → `monitor` (MONITOR's feed) → `pause` (CLIENT
//! PAUSE's hold on sessions) → `pubsub` (subscriptions and subscribers' mailboxes) →
//! `keyspace_events` (notify-keyspace-events) → `tracking` (CLIENT TRACKING's invalidations).

mod blocked_keys;
mod combining;
mod command;
mod command_stats;
mod commands;
mod config;
/// Entry points for the fuzz targets in fuzz/ (not an API).
#[doc(hidden)]
pub mod fuzzing;
mod geohash;
mod glob;
mod group_store;
mod hash_layout;
mod hyperloglog;
mod info;
mod keyspace_events;
mod list_layout;
mod long_double;
#[cfg(test)]
mod memory_store;
mod monitor;
mod pause;
mod pubsub;
mod script_cache;
mod second_space;
mod server;
mod session;
mod shared;
mod slowlog;
mod sorted_set_layout;
mod stream_layout;
mod tracking;
mod users;
mod values;
mod watch;

pub use config::{EngineCallMode, ServerConfig, MAX_CLIENTS_DEFAULT, MULTI_QUEUED_COMMANDS_MAX_DEFAULT, QUERY_BUFFER_BYTES_MAX_DEFAULT};
pub use server::{close_database, run, serve, RunError, ServerError};
