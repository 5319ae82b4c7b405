//! The workloads. Each takes a target (a server's address, and the server itself when the
//! harness started it) and the run's settings, and returns named metrics.

mod messaging;
mod mixes;
mod restart;
mod scan;
mod server_counters;

use std::collections::BTreeMap;

use crate::args::{StopMode, Workload};
use crate::connection::Connection;
use crate::error::{BenchError, BenchResult};
use crate::loadgen::{LoadOutcome, LoadSpec, MeasureLimit};
use crate::record::{LatencySummary, Settings};
use crate::servers::{ManagedServer, RedisPersistence, ServerSpec};

pub use mixes::value_bytes_for;

/// A server to load: its address, and the process when the harness started it.
pub struct Target {
    pub address: String,
    pub server: Option<ManagedServer>,
}

impl Target {
    pub fn name(&self) -> &'static str {
        self.server.as_ref().map_or("external", |server| server.spec().target_name())
    }

    pub fn label(&self) -> String {
        self.server.as_ref().map_or_else(|| format!("server at {}", self.address), |server| server.spec().label())
    }

    /// Stops and starts the harness's server on its files; returns the seconds until it
    /// answered PING again. A Redis without AOF is saved first (SAVE), or it would restart empty.
    pub async fn restart(&mut self, stop: StopMode) -> BenchResult<f64> {
        let Some(server) = self.server.as_mut() else {
            return Err(BenchError::InvalidArgument("this workload restarts the server: use --target, not --addr".into()));
        };
        if matches!(server.spec(), ServerSpec::Redis { persistence: RedisPersistence::SnapshotOnSave, .. }) {
            Connection::open(&self.address).await?.command(&["SAVE"]).await?;
        }
        server.stop(stop).await?;
        Ok(server.start_again().await?.as_secs_f64())
    }
}

/// What a workload measured.
#[derive(Default)]
pub struct WorkloadOutcome {
    pub metrics: BTreeMap<String, f64>,
    pub latency: Option<LatencySummary>,
    pub notes: Vec<String>,
}

impl WorkloadOutcome {
    pub fn set(&mut self, name: &str, value: f64) {
        self.metrics.insert(name.to_string(), value);
    }

    /// The load generator's figures: throughput, counts and latency.
    fn add_load(&mut self, load: &LoadOutcome) {
        self.set("ops_per_second", load.operations_per_second());
        self.set("operations", load.operations as f64);
        self.set("errors", load.errors as f64);
        self.set("misses", load.misses as f64);
        self.set("elapsed_seconds", load.elapsed.as_secs_f64());
        self.latency = Some(LatencySummary::from_histogram(&load.latency_nanoseconds));
        if let Some(error) = &load.first_error {
            self.notes.push(format!("{} error replies; the first: {error}", load.errors));
        }
    }
}

pub async fn run(workload: Workload, settings: &Settings, target: &mut Target) -> BenchResult<WorkloadOutcome> {
    match workload {
        Workload::Mix5050 | Workload::ReadOnly | Workload::WriteOnly | Workload::Mix7030 => mixes::run(workload, settings, target).await,
        Workload::Messaging => messaging::run(settings, target).await,
        Workload::Scan => scan::run(settings, target).await,
        Workload::Restart => restart::run(settings, target).await,
    }
}

fn load_spec(settings: &Settings, address: &str) -> LoadSpec {
    let limit = match settings.operations {
        Some(count) => MeasureLimit::Operations(count),
        None => MeasureLimit::Duration(std::time::Duration::from_secs_f64(settings.duration_seconds)),
    };
    LoadSpec {
        address: address.to_string(),
        connections: settings.connections,
        pipeline: settings.pipeline,
        rate_per_second: settings.rate_per_second,
        warmup: std::time::Duration::from_secs_f64(settings.warmup_seconds),
        limit,
    }
}

/// The headline figures of a workload, compared across targets, and whether more is better.
pub fn headline_metrics(workload: Workload) -> &'static [(&'static str, MoreIs)] {
    match workload {
        Workload::Mix5050 | Workload::ReadOnly | Workload::WriteOnly | Workload::Mix7030 => &[("ops_per_second", MoreIs::Better)],
        Workload::Messaging => &[("inbound_messages_per_second", MoreIs::Better)],
        Workload::Scan => &[("cold_seconds", MoreIs::Worse), ("warm_seconds", MoreIs::Worse)],
        Workload::Restart => &[("ready_seconds", MoreIs::Worse), ("served_seconds", MoreIs::Worse)],
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoreIs {
    Better,
    Worse,
}
