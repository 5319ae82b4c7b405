//! The server's own settings (the engine's are in `hybridkv_engine::Config`). Every limit has its
//! unit in its name and a default chosen to match Redis where Redis has one.

use std::net::IpAddr;

/// Redis's default maxclients.
pub const MAX_CLIENTS_DEFAULT: usize = 10_000;
/// Redis's default client-query-buffer-limit (1 GiB).
pub const QUERY_BUFFER_BYTES_MAX_DEFAULT: usize = 1024 * 1024 * 1024;
/// Commands a client may queue between MULTI and EXEC: EXEC commits them as one engine batch,
/// which must fit in one write block, so an unbounded queue could never commit.
pub const MULTI_QUEUED_COMMANDS_MAX_DEFAULT: usize = 10_000;
/// Reply bytes gathered before they are written to the socket; bounds a pipelined client's
/// output buffer to this plus one reply.
pub const REPLY_FLUSH_BYTES: usize = 64 * 1024;
/// Bytes asked of the socket per read when no large argument is pending.
pub const READ_CHUNK_BYTES: usize = 16 * 1024;
/// How long SIGTERM/SHUTDOWN waits for connections to finish their commands in flight.
pub const SHUTDOWN_DRAIN_MS_MAX: u64 = 5_000;

/// Where the engine calls of a batch of commands run; docs/design/server.md has the measurement
/// that chose the default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineCallMode {
    /// On the runtime worker itself. Writes never block there (a write's durability is awaited
    /// asynchronously, see `session`); only administrative commands, which may wait for a
    /// checkpoint, are handed off through `tokio::task::block_in_place`.
    Inline,
    /// Every batch through `block_in_place`, which hands the worker's other connections to
    /// another thread for the duration (kept for comparison).
    BlockInPlace,
}

impl EngineCallMode {
    pub fn parse(text: &str) -> Option<EngineCallMode> {
        match text {
            "inline" => Some(EngineCallMode::Inline),
            "block-in-place" => Some(EngineCallMode::BlockInPlace),
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub bind: IpAddr,
    pub port: u16,
    pub requirepass: Option<String>,
    /// Refuse to listen on a non-loopback address without a password (Redis's protected mode).
    pub protected_mode: bool,
    pub max_clients: usize,
    pub query_buffer_bytes_max: usize,
    pub bulk_bytes_max: usize,
    pub arguments_max: usize,
    pub multi_queued_commands_max: usize,
    pub metrics_port: Option<u16>,
    pub engine_call_mode: EngineCallMode,
    /// Shown by INFO and CONFIG GET dir.
    pub dir: String,
}

impl ServerConfig {
    pub fn new(bind: IpAddr, port: u16) -> ServerConfig {
        ServerConfig {
            bind,
            port,
            requirepass: None,
            protected_mode: true,
            max_clients: MAX_CLIENTS_DEFAULT,
            query_buffer_bytes_max: QUERY_BUFFER_BYTES_MAX_DEFAULT,
            bulk_bytes_max: hybridkv_resp::BULK_BYTES_MAX_DEFAULT,
            arguments_max: hybridkv_resp::ARGUMENTS_MAX_DEFAULT,
            multi_queued_commands_max: MULTI_QUEUED_COMMANDS_MAX_DEFAULT,
            metrics_port: None,
            engine_call_mode: EngineCallMode::Inline,
            dir: String::from("."),
        }
    }

    /// The protected-mode check: a clear refusal instead of an open database on the network.
    pub fn check_exposure(&self) -> Result<(), String> {
        if self.protected_mode && self.requirepass.is_none() && !self.bind.is_loopback() {
            return Err(format!(
                "refusing to listen on non-loopback address {} without --requirepass; pass --protected-mode no to do it anyway",
                self.bind
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protected_mode_refuses_open_non_loopback() {
        let mut config = ServerConfig::new("0.0.0.0".parse().unwrap(), 6379);
        assert!(config.check_exposure().is_err());
        config.requirepass = Some("secret".into());
        assert!(config.check_exposure().is_ok());
        config.requirepass = None;
        config.protected_mode = false;
        assert!(config.check_exposure().is_ok());
        assert!(ServerConfig::new("127.0.0.1".parse().unwrap(), 6379).check_exposure().is_ok());
    }
}
