//! One client connection: commands are queued into a buffer, sent in one write (a pipeline), and
//! their replies read back in order.

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::{BenchError, BenchResult};
use crate::protocol::{encode_command, parse_reply, Reply};

/// Bytes asked of the socket per read; a pipeline of 440-byte GET replies fits a few dozen.
const READ_CHUNK_BYTES: usize = 64 * 1024;

pub struct Connection {
    stream: TcpStream,
    address: String,
    input: BytesMut,
    output: BytesMut,
}

impl Connection {
    pub async fn open(address: &str) -> BenchResult<Connection> {
        let stream = TcpStream::connect(address).await.map_err(BenchError::io(format!("connecting to {address}")))?;
        // Pipelines are sent in one write; Nagle's algorithm would only delay the last partial segment.
        stream.set_nodelay(true).map_err(BenchError::io("setting TCP_NODELAY"))?;
        Ok(Connection {
            stream,
            address: address.to_string(),
            input: BytesMut::with_capacity(READ_CHUNK_BYTES),
            output: BytesMut::with_capacity(READ_CHUNK_BYTES),
        })
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    pub fn queue<A: AsRef<[u8]>>(&mut self, arguments: &[A]) {
        encode_command(arguments, &mut self.output);
    }

    /// The buffer commands are encoded into, for callers that build commands themselves.
    pub fn output_buffer(&mut self) -> &mut BytesMut {
        &mut self.output
    }

    pub async fn send(&mut self) -> BenchResult<()> {
        let result = self.stream.write_all(&self.output).await;
        self.output.clear();
        result.map_err(BenchError::io(format!("writing to {}", self.address)))
    }

    pub async fn read_reply(&mut self) -> BenchResult<Reply> {
        loop {
            let parsed = parse_reply(&self.input).map_err(|detail| BenchError::Protocol { address: self.address.clone(), detail })?;
            if let Some((reply, used)) = parsed {
                self.input.advance(used);
                return Ok(reply);
            }
            self.input.reserve(READ_CHUNK_BYTES);
            let read = self.stream.read_buf(&mut self.input).await.map_err(BenchError::io(format!("reading from {}", self.address)))?;
            if read == 0 {
                return Err(BenchError::Protocol { address: self.address.clone(), detail: "connection closed by the server".into() });
            }
        }
    }

    /// Sends one command and returns its reply; an error reply becomes `BenchError::ServerError`.
    pub async fn command<A: AsRef<[u8]>>(&mut self, arguments: &[A]) -> BenchResult<Reply> {
        self.queue(arguments);
        self.send().await?;
        let reply = self.read_reply().await?;
        match reply {
            Reply::Error(message) => Err(BenchError::ServerError { command: command_name(arguments), message }),
            reply => Ok(reply),
        }
    }

    /// The text of INFO `section`, as `field:value` lines.
    pub async fn info(&mut self, section: &str) -> BenchResult<String> {
        match self.command(&["INFO", section]).await? {
            Reply::Bulk(Some(text)) => Ok(String::from_utf8_lossy(&text).into_owned()),
            other => Err(BenchError::Protocol { address: self.address.clone(), detail: format!("INFO replied {other:?}") }),
        }
    }
}

pub fn command_name<A: AsRef<[u8]>>(arguments: &[A]) -> String {
    arguments.first().map(|name| String::from_utf8_lossy(name.as_ref()).into_owned()).unwrap_or_default()
}
