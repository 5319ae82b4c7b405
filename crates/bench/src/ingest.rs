//! The ingest phase: records 0..count written with pipelined commands over a few connections,
//! with a progress bar on a terminal.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use indicatif::{ProgressBar, ProgressStyle};

use crate::connection::Connection;
use crate::data::key_name;
use crate::protocol::encode_command;
use crate::error::{BenchError, BenchResult};
use crate::loadgen::ReplyTally;

/// Enough connections to keep a 2-core server busy while it persists; more only adds switching.
const INGEST_CONNECTIONS: u64 = 4;
/// Records per pipelined batch: large enough to amortise round trips, small enough to bound the
/// output buffer (256 × ~2 KB messaging records = 512 KB).
const INGEST_BATCH_RECORDS: u64 = 256;

/// Appends the command(s) that store record `number`; returns how many replies they produce.
pub type RecordEncoder = Arc<dyn Fn(u64, &mut BytesMut) -> usize + Send + Sync>;

/// Encodes `SET key:<number> <value_of(number)>`.
pub fn set_records(value_of: impl Fn(u64) -> Vec<u8> + Send + Sync + 'static) -> RecordEncoder {
    Arc::new(move |number, output: &mut BytesMut| {
        encode_command(&[b"SET".as_slice(), key_name(number).as_bytes(), &value_of(number)], output);
        1
    })
}

/// Writes records `0..count`; returns how long it took.
pub async fn ingest(address: &str, count: u64, label: &str, encode: RecordEncoder) -> BenchResult<Duration> {
    let started = Instant::now();
    let progress = ProgressBar::new(count);
    progress.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} records, {per_sec}, eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    progress.set_message(format!("ingest {label}"));
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..INGEST_CONNECTIONS.min(count.max(1)) {
        let connection = Connection::open(address).await?;
        tasks.push(tokio::spawn(ingest_on(connection, count, next.clone(), encode.clone(), progress.clone())));
    }
    for task in tasks {
        task.await.map_err(|join| BenchError::Verification(format!("an ingest task failed: {join}")))??;
    }
    progress.finish_and_clear();
    Ok(started.elapsed())
}

async fn ingest_on(mut connection: Connection, count: u64, next: Arc<AtomicU64>, encode: RecordEncoder, progress: ProgressBar) -> BenchResult<()> {
    loop {
        let first = next.fetch_add(INGEST_BATCH_RECORDS, Ordering::Relaxed);
        if first >= count {
            return Ok(());
        }
        let end = (first + INGEST_BATCH_RECORDS).min(count);
        let mut replies = 0;
        for number in first..end {
            replies += encode(number, connection.output_buffer());
        }
        connection.send().await?;
        let mut tally = ReplyTally::default();
        for _ in 0..replies {
            tally.add(&connection.read_reply().await?);
        }
        if let Some(error) = tally.first_error {
            return Err(BenchError::ServerError { command: "ingest".into(), message: error });
        }
        progress.inc(end - first);
    }
}
