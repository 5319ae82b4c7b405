//! The scan workload (IRIS analytical queries): one full pass over every record with a filter
//! (region = "eu") and an aggregate (count and sum of amount), done by the client with SCAN and
//! pipelined MGET so it runs against any Redis-protocol server. COLD is the first pass right
//! after a server restart; WARM is a second pass at once. The OS page cache is not dropped
//! (neither server offers a way, and dropping it machine-wide would disturb the others here).

use std::collections::HashSet;
use std::time::Instant;

use super::{Target, WorkloadOutcome};
use crate::args::StopMode;
use crate::connection::Connection;
use crate::data::SCAN_RECORD_BYTES;
use crate::error::{BenchError, BenchResult};
use crate::ingest::{ingest, set_records};
use crate::protocol::Reply;
use crate::record::Settings;

/// Keys asked of each SCAN call, and so fetched by each MGET.
const SCAN_BATCH_KEYS: &str = "1000";
const REGIONS: [&str; 4] = ["eu", "us", "apac", "latam"];
const FILTER_REGION: &str = "eu";
const KEY_PATTERN: &str = "key:*";

/// Record `number`'s region and amount, and its stored text.
fn record_fields(number: u64) -> (&'static str, u64) {
    (REGIONS[(number % REGIONS.len() as u64) as usize], number.wrapping_mul(7_919) % 10_000)
}

fn record_text(number: u64) -> Vec<u8> {
    let (region, amount) = record_fields(number);
    let mut text = format!("region={region};amount={amount};").into_bytes();
    text.resize(SCAN_RECORD_BYTES.max(text.len()), b'.');
    text
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Aggregate {
    records: u64,
    matched: u64,
    amount_sum: u64,
}

impl Aggregate {
    fn expected(records: u64) -> Aggregate {
        let mut aggregate = Aggregate { records, ..Aggregate::default() };
        for (region, amount) in (0..records).map(record_fields) {
            if region == FILTER_REGION {
                aggregate.matched += 1;
                aggregate.amount_sum += amount;
            }
        }
        aggregate
    }

    fn add(&mut self, value: &[u8]) -> Result<(), String> {
        let text = std::str::from_utf8(value).map_err(|_| "a record is not UTF-8".to_string())?;
        let field = |name: &str| text.split(';').find_map(|part| part.strip_prefix(name)).ok_or_else(|| format!("record {text:.40} has no {name}"));
        let region = field("region=")?;
        let amount: u64 = field("amount=")?.parse().map_err(|_| format!("record {text:.40} has a bad amount"))?;
        self.records += 1;
        if region == FILTER_REGION {
            self.matched += 1;
            self.amount_sum += amount;
        }
        Ok(())
    }
}

pub async fn run(settings: &Settings, target: &mut Target) -> BenchResult<WorkloadOutcome> {
    ingest(&target.address, settings.keys, "scan", set_records(record_text)).await?;
    let mut outcome = WorkloadOutcome::default();
    if target.server.is_some() {
        outcome.set("restart_seconds", target.restart(StopMode::Clean).await?);
        outcome.notes.push("COLD: first pass right after a clean server restart; the OS page cache was not dropped".into());
    } else {
        outcome.notes.push("first pass is not COLD: the server at --addr cannot be restarted by the harness".into());
    }
    let expected = Aggregate::expected(settings.keys);
    for pass in ["cold", "warm"] {
        let started = Instant::now();
        let aggregate = full_pass(&target.address).await?;
        let seconds = started.elapsed().as_secs_f64();
        if aggregate != expected {
            return Err(BenchError::Verification(format!("{pass} scan found {aggregate:?}, expected {expected:?}")));
        }
        outcome.set(&format!("{pass}_seconds"), seconds);
        outcome.set(&format!("{pass}_records_per_second"), aggregate.records as f64 / seconds.max(f64::MIN_POSITIVE));
    }
    outcome.set("records", expected.records as f64);
    outcome.set("matched_records", expected.matched as f64);
    outcome.set("amount_sum", expected.amount_sum as f64);
    Ok(outcome)
}

/// SCAN through the key space; each batch's MGET goes out in the same write as the next SCAN.
/// Keys SCAN returns twice (Redis may, while it rehashes) are counted once.
async fn full_pass(address: &str) -> BenchResult<Aggregate> {
    let mut connection = Connection::open(address).await?;
    let mut aggregate = Aggregate::default();
    let mut seen = HashSet::new();
    connection.queue(&["SCAN", "0", "MATCH", KEY_PATTERN, "COUNT", SCAN_BATCH_KEYS]);
    connection.send().await?;
    loop {
        let reply = connection_reply(&mut connection).await?;
        let (cursor, keys) = scan_reply(address, reply)?;
        let fresh: Vec<Vec<u8>> = keys.into_iter().filter(|key| seen.insert(key.clone())).collect();
        if !fresh.is_empty() {
            let mut command: Vec<&[u8]> = vec![b"MGET"];
            command.extend(fresh.iter().map(Vec::as_slice));
            connection.queue(&command);
        }
        if cursor != "0" {
            connection.queue(&["SCAN", cursor.as_str(), "MATCH", KEY_PATTERN, "COUNT", SCAN_BATCH_KEYS]);
        }
        connection.send().await?;
        if !fresh.is_empty() {
            add_values(&mut aggregate, connection_reply(&mut connection).await?, address)?;
        }
        if cursor == "0" {
            return Ok(aggregate);
        }
    }
}

async fn connection_reply(connection: &mut Connection) -> BenchResult<Reply> {
    match connection.read_reply().await? {
        Reply::Error(message) => Err(BenchError::ServerError { command: "SCAN/MGET".into(), message }),
        reply => Ok(reply),
    }
}

fn scan_reply(address: &str, reply: Reply) -> BenchResult<(String, Vec<Vec<u8>>)> {
    let broken = |detail: &str| BenchError::Protocol { address: address.to_string(), detail: format!("SCAN reply {detail}") };
    let Reply::Array(Some(mut parts)) = reply else { return Err(broken("is not an array")) };
    let (Some(Reply::Array(Some(keys))), Some(Reply::Bulk(Some(cursor)))) = (parts.pop(), parts.pop()) else {
        return Err(broken("is not [cursor, keys]"));
    };
    let keys = keys.into_iter().filter_map(|key| if let Reply::Bulk(Some(key)) = key { Some(key) } else { None }).collect();
    Ok((String::from_utf8_lossy(&cursor).into_owned(), keys))
}

fn add_values(aggregate: &mut Aggregate, reply: Reply, address: &str) -> BenchResult<()> {
    let Reply::Array(Some(values)) = reply else {
        return Err(BenchError::Protocol { address: address.to_string(), detail: "MGET reply is not an array".into() });
    };
    for value in values {
        match value {
            Reply::Bulk(Some(value)) => aggregate.add(&value).map_err(BenchError::Verification)?,
            other => return Err(BenchError::Verification(format!("MGET returned {other:?} for a key SCAN listed"))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregate_of_stored_records_matches_the_expected_one() {
        let mut aggregate = Aggregate::default();
        for number in 0..1000 {
            aggregate.add(&record_text(number)).unwrap();
        }
        assert_eq!(aggregate, Aggregate::expected(1000));
        assert_eq!(aggregate.matched, 250);
        assert!(Aggregate::default().add(b"region=eu;").is_err());
    }
}
