//! One client connection: read bytes, decode every complete request, execute them in order,
//! write the replies (pipelining), until the client leaves, is killed, breaks the protocol or the
//! server shuts down.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use hybridkv_resp::{encode, DecodeLimits, ProtocolError, ProtocolVersion, Reply, RequestDecoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::command::{self, unknown_command, wrong_arity, CommandSpec, ADMIN, BEFORE_AUTH, IN_MULTI, TRANSACTION_CONTROL, WRITE};
use crate::commands;
use crate::config::{EngineCallMode, READ_CHUNK_BYTES, REPLY_FLUSH_BYTES};
use crate::shared::{ClientHandle, Shared};

/// Requests decoded ahead before they are executed as one batch (one engine-call hand-off).
const BATCH_COMMANDS_MAX: usize = 1024;
/// Largest single read reserved for a pending large argument; the buffer grows past it as bytes
/// arrive, but a client announcing a huge bulk cannot make us allocate it up front.
const READ_RESERVE_BYTES_MAX: usize = 1024 * 1024;

/// Bytes to reserve before the next read: a pending large argument gets room for what it still
/// needs, capped by READ_RESERVE_BYTES_MAX and by what is already buffered, so the buffer grows
/// with the bytes that arrive (doubling) and a client that announces a huge bulk and dribbles it
/// holds memory in proportion to what it sent, not a megabyte per connection.
fn read_reserve_bytes(bulk_bytes_wanted: usize, buffered_bytes: usize) -> usize {
    bulk_bytes_wanted.min(READ_RESERVE_BYTES_MAX).min(buffered_bytes).max(READ_CHUNK_BYTES)
}

pub struct MultiState {
    pub queued: Vec<(&'static CommandSpec, Vec<Bytes>)>,
    /// A command failed to queue: EXEC must answer EXECABORT.
    pub failed: bool,
}

pub struct WatchedKey {
    pub database: usize,
    pub key: Bytes,
    /// The key's version when WATCH ran; None when it was absent.
    pub version: Option<u64>,
}

/// Per-connection protocol state that commands read and change.
pub struct SessionState {
    pub client: Arc<ClientHandle>,
    pub database: usize,
    pub protocol: ProtocolVersion,
    pub authenticated: bool,
    pub multi: Option<MultiState>,
    pub watched: Vec<WatchedKey>,
    pub close_after_reply: bool,
    /// The command's reply is not sent (SHUTDOWN closes the connection without one, as Redis).
    pub suppress_reply: bool,
}

impl SessionState {
    pub fn new(client: Arc<ClientHandle>, password_required: bool) -> SessionState {
        SessionState {
            client,
            database: 0,
            protocol: ProtocolVersion::Resp2,
            authenticated: !password_required,
            multi: None,
            watched: Vec::new(),
            close_after_reply: false,
            suppress_reply: false,
        }
    }

    fn fail_multi(&mut self) {
        if let Some(multi) = &mut self.multi {
            multi.failed = true;
        }
    }
}

/// Checks and runs (or queues, inside MULTI) one request.
pub fn execute(args: Vec<Bytes>, session: &mut SessionState, shared: &Shared) -> Reply {
    shared.stats.commands_processed.fetch_add(1, Ordering::Relaxed);
    let Some(spec) = commands::lookup(&args[0]) else {
        session.fail_multi();
        return unknown_command(&args);
    };
    *session.client.last_command.lock() = spec.name;
    if !spec.arity_ok(args.len()) {
        session.fail_multi();
        return wrong_arity(spec.name).into_reply();
    }
    if !session.authenticated && !spec.has(BEFORE_AUTH) {
        return Reply::error("NOAUTH Authentication required.");
    }
    if session.multi.is_some() && !spec.has(TRANSACTION_CONTROL) {
        return queue(spec, args, session, shared);
    }
    command::run(spec, &args, session, shared)
}

fn queue(spec: &'static CommandSpec, args: Vec<Bytes>, session: &mut SessionState, shared: &Shared) -> Reply {
    let limit = shared.config.multi_queued_commands_max;
    let Some(multi) = &mut session.multi else { unreachable!("queue is only called inside MULTI") };
    if !spec.has(IN_MULTI) {
        multi.failed = true;
        return Reply::error("ERR Command not allowed inside a transaction");
    }
    if multi.queued.len() >= limit {
        multi.failed = true;
        return Reply::error(format!("ERR MULTI queue is full ({limit} commands): EXEC commits them as one batch"));
    }
    multi.queued.push((spec, args));
    Reply::simple("QUEUED")
}

/// Whether a request may wait on the engine (a write's group-commit flush, a checkpoint).
fn may_block(args: &[Bytes]) -> bool {
    commands::lookup(&args[0]).is_none_or(|spec| spec.has(WRITE) || spec.has(ADMIN))
}

struct Connection {
    stream: TcpStream,
    shared: Arc<Shared>,
    input: BytesMut,
    output: BytesMut,
    decoder: RequestDecoder,
    pending: VecDeque<Vec<Bytes>>,
    protocol_error: Option<ProtocolError>,
    state: SessionState,
}

pub async fn serve_connection(stream: TcpStream, shared: Arc<Shared>, client: Arc<ClientHandle>) {
    let _ = stream.set_nodelay(true);
    let password_required = shared.requirepass.read().is_some();
    let mut connection = Connection {
        stream,
        shared: shared.clone(),
        input: BytesMut::with_capacity(READ_CHUNK_BYTES),
        output: BytesMut::new(),
        decoder: RequestDecoder::new(),
        pending: VecDeque::new(),
        protocol_error: None,
        state: SessionState::new(client.clone(), password_required),
    };
    if let Err(error) = connection.run().await {
        tracing::debug!(client = client.id, %error, "connection ended with an I/O error");
    }
    shared.clients.unregister(client.id);
}

impl Connection {
    async fn run(&mut self) -> std::io::Result<()> {
        let mut shutdown = self.shared.shutdown.subscribe();
        loop {
            self.decode_requests();
            if !self.pending.is_empty() {
                self.execute_pending();
                self.flush().await?;
                if self.state.close_after_reply {
                    return Ok(());
                }
                continue;
            }
            if let Some(error) = self.protocol_error.take() {
                self.shared.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
                encode(&Reply::error(format!("ERR {error}")), self.state.protocol, &mut self.output);
                return self.flush().await;
            }
            if self.shared.is_shutting_down() || self.state.client.killed.load(Ordering::Relaxed) {
                return Ok(());
            }
            if self.input.len() > self.shared.config.query_buffer_bytes_max {
                let limit = self.shared.config.query_buffer_bytes_max;
                let reply = Reply::error(format!("ERR query buffer exceeds client-query-buffer-limit of {limit} bytes"));
                encode(&reply, self.state.protocol, &mut self.output);
                return self.flush().await;
            }
            self.input.reserve(read_reserve_bytes(self.decoder.bulk_bytes_wanted(&self.input), self.input.len()));
            let read = tokio::select! {
                read = self.stream.read_buf(&mut self.input) => read?,
                _ = self.state.client.kill.notified() => return Ok(()),
                _ = shutdown.changed() => continue,
            };
            if read == 0 {
                if self.decoder.is_mid_request(&self.input) {
                    tracing::debug!(client = self.state.client.id, "client disconnected in the middle of a request");
                }
                return Ok(());
            }
            self.shared.stats.net_input_bytes.fetch_add(read as u64, Ordering::Relaxed);
            *self.state.client.last_active.lock() = Instant::now();
        }
    }

    /// Moves complete requests from the input buffer to `pending`. Before AUTH one request at a
    /// time, because AUTH lifts the decoder's stricter unauthenticated limits for what follows.
    fn decode_requests(&mut self) {
        let batch_max = if self.state.authenticated { BATCH_COMMANDS_MAX } else { 1 };
        while self.protocol_error.is_none() && self.pending.len() < batch_max {
            let limits = DecodeLimits {
                bulk_bytes_max: self.shared.config.bulk_bytes_max,
                arguments_max: self.shared.config.arguments_max,
                authenticated: self.state.authenticated,
            };
            match self.decoder.decode(&mut self.input, &limits) {
                Ok(Some(arguments)) => self.pending.push_back(arguments),
                Ok(None) => break,
                Err(error) => self.protocol_error = Some(error),
            }
        }
    }

    /// Executes pending requests in order until they are done, the reply buffer is full enough
    /// to send, or a command closes the connection.
    fn execute_pending(&mut self) {
        let mode = self.shared.config.engine_call_mode;
        let blocking = match mode {
            EngineCallMode::Inline => false,
            EngineCallMode::BlockInPlace => true,
            EngineCallMode::WritesBlockInPlace => self.pending.iter().any(|args| may_block(args)),
        };
        let Connection { pending, state, shared, output, .. } = self;
        let mut work = move || {
            while let Some(arguments) = pending.pop_front() {
                let reply = execute(arguments, state, shared);
                if !state.suppress_reply {
                    encode(&reply, state.protocol, output);
                }
                if state.close_after_reply || output.len() >= REPLY_FLUSH_BYTES {
                    break;
                }
            }
        };
        if blocking {
            tokio::task::block_in_place(work);
        } else {
            work();
        }
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        if self.output.is_empty() {
            return Ok(());
        }
        self.stream.write_all(&self.output).await?;
        self.shared.stats.net_output_bytes.fetch_add(self.output.len() as u64, Ordering::Relaxed);
        self.output.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_reserve_grows_with_the_bytes_that_arrived_not_with_the_announced_length() {
        assert_eq!(read_reserve_bytes(0, 0), READ_CHUNK_BYTES);
        assert_eq!(read_reserve_bytes(100_000_000, 300), READ_CHUNK_BYTES);
        assert_eq!(read_reserve_bytes(100_000_000, 200_000), 200_000);
        assert_eq!(read_reserve_bytes(100_000_000, 50_000_000), READ_RESERVE_BYTES_MAX);
        assert_eq!(read_reserve_bytes(40_000, 200_000), 40_000);
    }
}
