//! The load generator: many connections, each sending batches of `pipeline` operations and
//! reading their replies, closed-loop or at a fixed rate, with a warm-up that is not counted and
//! a measurement bounded by a duration or an operation count. Latencies go to HdrHistograms.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use hdrhistogram::Histogram;
use tokio::time::Instant;

use crate::connection::Connection;
use crate::error::{BenchError, BenchResult};
use crate::protocol::Reply;

/// Histogram range: 1 µs (below loopback's round trip) to 60 s, in nanoseconds, 3 significant digits.
const LATENCY_NANOSECONDS_MIN: u64 = 1_000;
const LATENCY_NANOSECONDS_MAX: u64 = 60_000_000_000;
const LATENCY_SIGNIFICANT_DIGITS: u8 = 3;
/// No measurement runs longer than this, whatever --ops asks: every load is bounded in time.
pub const MEASURE_SECONDS_MAX: u64 = 3_600;

/// Produces the commands of one operation (a GET, a SET, a MULTI…EXEC transaction) at a time.
pub trait OperationSource: Send + 'static {
    /// Appends one operation's commands to `output`; returns how many replies they produce.
    fn next_operation(&mut self, output: &mut BytesMut) -> usize;
}

#[derive(Clone, Copy, Debug)]
pub enum MeasureLimit {
    Duration(Duration),
    Operations(u64),
}

#[derive(Clone, Debug)]
pub struct LoadSpec {
    pub address: String,
    pub connections: u64,
    pub pipeline: u64,
    /// Offered operations per second over all connections; `None` is closed-loop.
    pub rate_per_second: Option<f64>,
    pub warmup: Duration,
    pub limit: MeasureLimit,
}

pub struct LoadOutcome {
    pub operations: u64,
    pub errors: u64,
    pub misses: u64,
    pub first_error: Option<String>,
    pub elapsed: Duration,
    pub latency_nanoseconds: Histogram<u64>,
}

impl LoadOutcome {
    pub fn operations_per_second(&self) -> f64 {
        self.operations as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

pub fn new_latency_histogram() -> Histogram<u64> {
    // The bounds are constants that hdrhistogram accepts, so this cannot fail at run time.
    Histogram::new_with_bounds(LATENCY_NANOSECONDS_MIN, LATENCY_NANOSECONDS_MAX, LATENCY_SIGNIFICANT_DIGITS).expect("valid histogram bounds")
}

/// The shared schedule of one load: when the warm-up ends and when the measurement does.
struct Plan {
    warmup_end: Instant,
    measure_end: Instant,
    operations_target: Option<u64>,
    measured_operations: AtomicU64,
    batch_interval: Option<Duration>,
    pipeline: u64,
}

impl Plan {
    fn finished(&self, now: Instant) -> bool {
        let counted = self.measured_operations.load(Ordering::Relaxed);
        now >= self.measure_end || self.operations_target.is_some_and(|target| counted >= target)
    }
}

/// Runs the load; `make_source(connection_number)` gives each connection its own operations.
pub async fn run_load<F>(spec: &LoadSpec, make_source: F) -> BenchResult<LoadOutcome>
where
    F: Fn(u64) -> Box<dyn OperationSource>,
{
    validate(spec)?;
    let mut connections = Vec::new();
    for _ in 0..spec.connections {
        connections.push(Connection::open(&spec.address).await?);
    }
    let plan = Arc::new(plan_for(spec));
    let mut tasks = Vec::new();
    for (number, connection) in (0..spec.connections).zip(connections) {
        let first_send = stagger(&plan, number, spec.connections);
        tasks.push(tokio::spawn(drive_connection(connection, make_source(number), plan.clone(), first_send)));
    }
    let mut outcome = LoadOutcome {
        operations: 0,
        errors: 0,
        misses: 0,
        first_error: None,
        elapsed: Duration::ZERO,
        latency_nanoseconds: new_latency_histogram(),
    };
    let mut last_completion = plan.warmup_end;
    for task in tasks {
        let part = task.await.map_err(|join| BenchError::Verification(format!("a load task failed: {join}")))??;
        merge(&mut outcome, &part)?;
        last_completion = last_completion.max(part.last_completion);
    }
    outcome.elapsed = last_completion.saturating_duration_since(plan.warmup_end);
    Ok(outcome)
}

fn validate(spec: &LoadSpec) -> BenchResult<()> {
    if let Some(rate) = spec.rate_per_second {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(BenchError::InvalidArgument(format!("--rate {rate} must be a positive number of operations per second")));
        }
    }
    if spec.connections == 0 || spec.pipeline == 0 {
        return Err(BenchError::InvalidArgument("connections and pipeline must be at least 1".into()));
    }
    Ok(())
}

fn plan_for(spec: &LoadSpec) -> Plan {
    let warmup_end = Instant::now() + spec.warmup;
    let (measure_end, operations_target) = match spec.limit {
        MeasureLimit::Duration(duration) => (warmup_end + duration.min(Duration::from_secs(MEASURE_SECONDS_MAX)), None),
        MeasureLimit::Operations(count) => (warmup_end + Duration::from_secs(MEASURE_SECONDS_MAX), Some(count)),
    };
    // Each connection sends one batch of `pipeline` operations per interval to make up the rate.
    let batch_interval = spec
        .rate_per_second
        .map(|rate| Duration::from_secs_f64((spec.connections * spec.pipeline) as f64 / rate));
    Plan { warmup_end, measure_end, operations_target, measured_operations: AtomicU64::new(0), batch_interval, pipeline: spec.pipeline }
}

/// Spreads the connections' first sends over one interval so a fixed rate does not start as a burst.
fn stagger(plan: &Plan, number: u64, connections: u64) -> Instant {
    let offset = plan.batch_interval.map_or(Duration::ZERO, |interval| interval.mul_f64(number as f64 / connections as f64));
    Instant::now() + offset
}

struct ConnectionOutcome {
    operations: u64,
    errors: u64,
    misses: u64,
    first_error: Option<String>,
    last_completion: Instant,
    latency_nanoseconds: Histogram<u64>,
}

async fn drive_connection(
    mut connection: Connection,
    mut source: Box<dyn OperationSource>,
    plan: Arc<Plan>,
    mut next_send: Instant,
) -> BenchResult<ConnectionOutcome> {
    let mut outcome = ConnectionOutcome {
        operations: 0,
        errors: 0,
        misses: 0,
        first_error: None,
        last_completion: plan.warmup_end,
        latency_nanoseconds: new_latency_histogram(),
    };
    let mut replies_per_operation = Vec::with_capacity(plan.pipeline as usize);
    loop {
        let scheduled = match plan.batch_interval {
            Some(interval) => {
                tokio::time::sleep_until(next_send).await;
                let scheduled = next_send;
                next_send += interval;
                scheduled
            }
            None => Instant::now(),
        };
        if plan.finished(scheduled) {
            return Ok(outcome);
        }
        replies_per_operation.clear();
        for _ in 0..plan.pipeline {
            replies_per_operation.push(source.next_operation(connection.output_buffer()));
        }
        connection.send().await?;
        let measured = scheduled >= plan.warmup_end;
        for &replies in &replies_per_operation {
            let mut tally = ReplyTally::default();
            for _ in 0..replies {
                tally.add(&connection.read_reply().await?);
            }
            if measured {
                record_operation(&mut outcome, &plan, tally, scheduled);
            }
        }
    }
}

fn record_operation(outcome: &mut ConnectionOutcome, plan: &Plan, tally: ReplyTally, scheduled: Instant) {
    let now = Instant::now();
    let latency = now.saturating_duration_since(scheduled).as_nanos();
    let latency = u64::try_from(latency).unwrap_or(u64::MAX).clamp(LATENCY_NANOSECONDS_MIN, LATENCY_NANOSECONDS_MAX);
    // In range by the clamp above, so recording cannot fail.
    let _ = outcome.latency_nanoseconds.record(latency);
    outcome.operations += 1;
    outcome.errors += tally.errors;
    outcome.misses += tally.misses;
    if outcome.first_error.is_none() {
        outcome.first_error = tally.first_error;
    }
    outcome.last_completion = now;
    plan.measured_operations.fetch_add(1, Ordering::Relaxed);
}

fn merge(total: &mut LoadOutcome, part: &ConnectionOutcome) -> BenchResult<()> {
    total.operations += part.operations;
    total.errors += part.errors;
    total.misses += part.misses;
    if total.first_error.is_none() {
        total.first_error.clone_from(&part.first_error);
    }
    total.latency_nanoseconds.add(&part.latency_nanoseconds).map_err(|error| BenchError::Verification(format!("merging latency histograms: {error}")))
}

/// What one operation's replies say: error replies (also inside EXEC's array), aborted
/// transactions, and nil bulk replies (a GET of a missing key).
#[derive(Default)]
pub struct ReplyTally {
    pub errors: u64,
    pub misses: u64,
    pub first_error: Option<String>,
}

impl ReplyTally {
    pub fn add(&mut self, reply: &Reply) {
        match reply {
            Reply::Error(text) => self.error(text.clone()),
            Reply::Array(None) => self.error("EXEC returned nil: the transaction was aborted".into()),
            Reply::Array(Some(elements)) => elements.iter().for_each(|element| self.add(element)),
            Reply::Bulk(None) => self.misses += 1,
            Reply::Simple(_) | Reply::Integer(_) | Reply::Bulk(Some(_)) => {}
        }
    }

    fn error(&mut self, text: String) {
        self.errors += 1;
        self.first_error.get_or_insert(text);
    }
}
