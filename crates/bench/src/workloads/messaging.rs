//! The messaging workload (IRIS HL7 "T4"): per inbound message, the message and its 4
//! transformations are stored in one MULTI/EXEC, on one connection per inbound stream.

use std::sync::Arc;

use bytes::BytesMut;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::server_counters::{CounterReading, CounterSet};
use super::{load_spec, Target, WorkloadOutcome};
use crate::error::BenchResult;
use crate::loadgen::{run_load, OperationSource};
use crate::protocol::encode_command;
use crate::record::Settings;

/// Inbound message sizes: the brief's HL7-like 1–2 KB texts.
const MESSAGE_BYTES_MIN: usize = 1024;
const MESSAGE_BYTES_MAX: usize = 2048;
/// Distinct inbound messages generated before the load. The server's work is storing 5 objects
/// durably; transforming every message anew would spend the 2 shared cores on the client.
const MESSAGE_POOL_SIZE: usize = 64;
pub const OUTBOUND_PER_INBOUND: usize = 4;
/// MULTI, one SET per stored object, EXEC.
const REPLIES_PER_MESSAGE: usize = 2 + 1 + OUTBOUND_PER_INBOUND;
const SEGMENT_SEPARATOR: char = '\r';

/// One inbound message and its outbound transformations.
struct MessageSet {
    inbound: Vec<u8>,
    outbound: [Vec<u8>; OUTBOUND_PER_INBOUND],
}

pub async fn run(settings: &Settings, target: &mut Target) -> BenchResult<WorkloadOutcome> {
    let mut random = StdRng::seed_from_u64(settings.seed);
    let pool: Arc<Vec<MessageSet>> = Arc::new((0..MESSAGE_POOL_SIZE).map(|number| transform(hl7_message(number, &mut random))).collect());
    let spec = load_spec(settings, &target.address);
    let (load, counters_at_start, counters_at_end) = JOURNAL_COUNTERS
        .around_load(&target.address, spec.warmup, run_load(&spec, |stream| Box::new(MessageStream { stream, sequence: 0, pool: pool.clone() }) as Box<dyn OperationSource>))
        .await?;
    let mut outcome = WorkloadOutcome::default();
    outcome.add_load(&load);
    let messages_per_second = load.operations_per_second();
    outcome.set("inbound_messages_per_second", messages_per_second);
    outcome.set("objects_per_second", messages_per_second * (1 + OUTBOUND_PER_INBOUND) as f64);
    add_counter_rates(&mut outcome, &counters_at_start, &counters_at_end);
    Ok(outcome)
}

/// hybridkv's journal writes and flushes (group commits), summed over namespaces.
const JOURNAL_COUNTERS: CounterSet = CounterSet { section: "persistence", suffixes: &["_journal_writes", "_flushes"] };

fn add_counter_rates(outcome: &mut WorkloadOutcome, start: &CounterReading, end: &CounterReading) {
    let seconds = end.seconds_since(start);
    match (end.growth_since(start, 0), end.growth_since(start, 1)) {
        (Some(journal_writes), Some(flushes)) => {
            outcome.set("journal_writes_per_second", journal_writes as f64 / seconds);
            outcome.set("flushes_per_second", flushes as f64 / seconds);
        }
        _ => outcome.notes.push("journal writes/s not reported: the server's INFO has no *_journal_writes / *_flushes fields (Redis has none)".into()),
    }
}

struct MessageStream {
    stream: u64,
    sequence: u64,
    pool: Arc<Vec<MessageSet>>,
}

impl OperationSource for MessageStream {
    fn next_operation(&mut self, output: &mut BytesMut) -> usize {
        let set = &self.pool[(self.stream as usize + self.sequence as usize) % self.pool.len()];
        let key = format!("msg:{:03}:{:010}", self.stream, self.sequence);
        self.sequence += 1;
        encode_command(&["MULTI"], output);
        encode_command(&[b"SET".as_slice(), format!("{key}:in").as_bytes(), &set.inbound], output);
        for (number, message) in set.outbound.iter().enumerate() {
            encode_command(&[b"SET".as_slice(), format!("{key}:out{number}").as_bytes(), message], output);
        }
        encode_command(&["EXEC"], output);
        REPLIES_PER_MESSAGE
    }
}

/// An HL7 v2-like ADT/ORU text: header, patient, visit, order, then observations until it is
/// between 1 and 2 KB long.
fn hl7_message(number: usize, random: &mut StdRng) -> String {
    let length = random.gen_range(MESSAGE_BYTES_MIN..=MESSAGE_BYTES_MAX);
    let mut segments = vec![
        format!("MSH|^~\\&|LAB|HOSPITAL|EHR|HOSPITAL|20261122090000||ORU^R01|MSG{number:08}|P|2.5"),
        format!("PID|1||{:08}^^^HOSP^MR||DOE^JANE^Q||19700101|F|||1 MAIN ST^^SPRINGFIELD^IL^62701", random.gen_range(0..100_000_000u32)),
        "PV1|1|I|WARD^101^A|||||||MED".to_string(),
        format!("OBR|1|ORD{number:06}|FIL{number:06}|CBC^COMPLETE BLOOD COUNT|||20261122080000"),
    ];
    let mut observation = 1;
    while segments.iter().map(|segment| segment.len() + 1).sum::<usize>() < length {
        segments.push(format!("OBX|{observation}|NM|TEST{observation}^Analyte {observation}||{}.{}|mg/dL|0-100|N|||F", random.gen_range(0..200), random.gen_range(0..10)));
        observation += 1;
    }
    let mut text = segments.join(&SEGMENT_SEPARATOR.to_string());
    text.truncate(length);
    text
}

/// The 4 outbound messages: for the records system (upper-cased, newline-separated), for research
/// (patient identity redacted), for the results feed (header and observations only), and a
/// field-per-line form for an interface that does not parse HL7.
fn transform(inbound: String) -> MessageSet {
    let segments: Vec<&str> = inbound.split(SEGMENT_SEPARATOR).collect();
    let records_system = segments.join("\n").to_uppercase();
    let research = segments.iter().map(|segment| redact_patient(segment)).collect::<Vec<_>>().join("\r");
    let results_feed = segments.iter().filter(|segment| segment.starts_with("MSH") || segment.starts_with("OBX")).copied().collect::<Vec<_>>().join("\r");
    let flat = segments
        .iter()
        .flat_map(|segment| {
            let mut fields = segment.split('|');
            let name = fields.next().unwrap_or_default().to_string();
            fields.enumerate().map(move |(position, value)| format!("{name}.{}={value}", position + 1))
        })
        .collect::<Vec<_>>()
        .join("\n");
    MessageSet { inbound: inbound.into_bytes(), outbound: [records_system, research, results_feed, flat].map(String::into_bytes) }
}

fn redact_patient(segment: &str) -> String {
    if !segment.starts_with("PID") {
        return segment.to_string();
    }
    segment.split('|').enumerate().map(|(position, field)| if (3..=5).contains(&position) { "REDACTED" } else { field }).collect::<Vec<_>>().join("|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_1_to_2_kilobytes_with_4_distinct_transforms() {
        let mut random = StdRng::seed_from_u64(7);
        for number in 0..20 {
            let set = transform(hl7_message(number, &mut random));
            assert!((MESSAGE_BYTES_MIN..=MESSAGE_BYTES_MAX).contains(&set.inbound.len()));
            assert!(set.inbound.starts_with(b"MSH|"));
            for (first, second) in [(0, 1), (1, 2), (2, 3), (0, 3)] {
                assert_ne!(set.outbound[first], set.outbound[second]);
            }
            assert!(!String::from_utf8_lossy(&set.outbound[1]).contains("DOE^JANE"));
        }
    }
}
