//! Markdown for one run (printed after it, and repeated in bench/RESULTS.md) and the
//! placement table shaped like the Aerospike reference table in BRIEF.md.

use std::fmt::Write;

use crate::args::{KeyDistribution, Placement, RedisRestartSource, StopMode, Workload};
use crate::record::{LatencySummary, Measurement, RunMode, RunRecord};
use crate::session::median;
use crate::workloads::headline_metrics;

/// The mixes of the placement table, in the reference table's column order.
pub const PLACEMENT_TABLE_WORKLOADS: [Workload; 4] = [Workload::Mix5050, Workload::ReadOnly, Workload::WriteOnly, Workload::Mix7030];

enum Column {
    Metric { name: &'static str, decimals: usize },
    Latency(fn(&LatencySummary) -> f64),
}

fn columns(workload: Workload) -> Vec<(&'static str, Column)> {
    let mut columns = workload_columns(workload);
    columns.push(("machine load (1 min)", Column::Metric { name: "machine_load_average_1m", decimals: 1 }));
    columns
}

fn workload_columns(workload: Workload) -> Vec<(&'static str, Column)> {
    let metric = |name, decimals| Column::Metric { name, decimals };
    let latencies = || {
        vec![
            ("p50 µs", Column::Latency(|latency| latency.p50_us)),
            ("p99 µs", Column::Latency(|latency| latency.p99_us)),
            ("p99.9 µs", Column::Latency(|latency| latency.p999_us)),
        ]
    };
    match workload {
        Workload::Messaging => {
            let mut columns = vec![
                ("inbound msg/s", metric("inbound_messages_per_second", 0)),
                ("objects/s", metric("objects_per_second", 0)),
                ("journal writes/s", metric("journal_writes_per_second", 0)),
                ("flushes/s", metric("flushes_per_second", 0)),
            ];
            columns.extend(latencies());
            columns.push(("errors", metric("errors", 0)));
            columns
        }
        Workload::Scan => vec![
            ("records", metric("records", 0)),
            ("matched", metric("matched_records", 0)),
            ("restart s", metric("restart_seconds", 3)),
            ("COLD s", metric("cold_seconds", 3)),
            ("WARM s", metric("warm_seconds", 3)),
            ("COLD records/s", metric("cold_records_per_second", 0)),
            ("WARM records/s", metric("warm_records_per_second", 0)),
        ],
        Workload::Restart => vec![
            ("keys", metric("keys", 0)),
            ("ready s", metric("ready_seconds", 3)),
            ("all served s", metric("served_seconds", 3)),
            ("verified", metric("keys_verified", 0)),
            ("missing", metric("keys_missing", 0)),
            ("wrong", metric("keys_wrong", 0)),
        ],
        _ => {
            let mut columns = vec![("ops/s", metric("ops_per_second", 0))];
            columns.extend(latencies());
            columns.push(("record cache hit %", metric("cache_hit_percent", 1)));
            columns.push(("errors", metric("errors", 0)));
            columns
        }
    }
}

fn cell(measurement: &Measurement, column: &Column) -> String {
    let value = match column {
        Column::Metric { name, .. } => measurement.metrics.get(*name).copied(),
        Column::Latency(pick) => measurement.latency.as_ref().map(pick),
    };
    let decimals = match column {
        Column::Metric { decimals, .. } => *decimals,
        Column::Latency(_) => 0,
    };
    value.map_or_else(|| "–".to_string(), |value| format!("{value:.decimals$}"))
}

/// The section of one run: heading, command, parameters, measurements, ratios, notes, plots.
pub fn render_run(record: &RunRecord, plots: &[String]) -> String {
    let mut text = String::new();
    let mode = match record.mode {
        RunMode::Single => "single target".to_string(),
        RunMode::Compare => "hybridkv vs Redis".to_string(),
        RunMode::ComparePlacements => format!("hybridkv {} vs {}", record.settings.placement, baseline_placement(record)),
        RunMode::Matrix => "placement matrix".to_string(),
    };
    let _ = writeln!(text, "### {} — {mode} ({})\n", record.workload, record.timestamp_utc);
    let _ = writeln!(text, "```\n{}\n```\n", record.command_line);
    let _ = writeln!(text, "{}\n", describe_settings(record));
    text.push_str(&measurement_table(record));
    text.push_str(&ratio_table(record));
    for note in record.notes.iter().chain(record.measurements.iter().flat_map(|measurement| &measurement.notes)).collect::<std::collections::BTreeSet<_>>() {
        let _ = writeln!(text, "- {note}");
    }
    for plot in plots {
        let _ = writeln!(text, "\n![{plot}]({plot})");
    }
    text
}

fn describe_settings(record: &RunRecord) -> String {
    let settings = &record.settings;
    let records = format!("{} records of {} bytes", settings.keys, settings.value_bytes);
    let run = match record.workload {
        Workload::Scan => format!("{records}; each pass over one connection (SCAN COUNT 1000, then MGET of each batch)"),
        Workload::Restart => {
            let verified = settings.verify_keys.map_or_else(|| "every key".to_string(), |count| format!("a sample of {count} keys"));
            let source = match settings.redis_restart_from {
                RedisRestartSource::Aof => "its append-only file",
                RedisRestartSource::Rdb => "an RDB snapshot taken with SAVE",
            };
            let stop = match settings.stop {
                StopMode::Clean => "clean stop (SIGTERM)",
                StopMode::Kill => "crash (kill -9)",
            };
            format!("{records}; {stop}; Redis reloads {source}; read-back of {verified} over 4 connections")
        }
        workload => {
            let limit = settings.operations.map_or_else(|| format!("{} s measured", settings.duration_seconds), |count| format!("{count} operations measured"));
            let load = settings.rate_per_second.map_or_else(|| "closed loop".to_string(), |rate| format!("fixed rate {rate} ops/s"));
            let data = if workload == Workload::Messaging {
                "inbound messages of 1–2 KB, each stored with 4 transforms".to_string()
            } else {
                format!("{records}, {} keys", settings.distribution.name())
            };
            format!("{} connections, pipeline {}, {load}, {data}, {} s warm-up, {limit}", settings.connections, settings.pipeline, settings.warmup_seconds)
        }
    };
    let cache = settings.cache.as_ref().map_or_else(String::new, |size| format!("; hybridkv record cache {size}"))
        + &settings.data_bytes.as_ref().map_or_else(String::new, |size| format!("; hybridkv data tier {size}"));
    let machine = &record.machine;
    format!(
        "{run}; durability {}{cache}. Machine: {} × {}, {:.1} GiB, kernel {}, commit {}{}.",
        settings.durability.name(),
        machine.processors,
        machine.cpu_model,
        machine.memory_bytes as f64 / (1u64 << 30) as f64,
        machine.kernel,
        machine.git_commit,
        if machine.redis_version.is_empty() { String::new() } else { format!(", {}", machine.redis_version) },
    )
}

fn measurement_table(record: &RunRecord) -> String {
    let columns = columns(record.workload);
    let mut text = String::from("| round | server |");
    let mut rule = String::from("|---|---|");
    for (header, _) in &columns {
        let _ = write!(text, " {header} |");
        rule.push_str("---|");
    }
    let _ = writeln!(text, "\n{rule}");
    for measurement in &record.measurements {
        let round = measurement.round.map_or_else(|| "–".to_string(), |round| round.to_string());
        let _ = write!(text, "| {round} | {} |", measurement.server);
        for (_, column) in &columns {
            let _ = write!(text, " {} |", cell(measurement, column));
        }
        text.push('\n');
    }
    text.push('\n');
    text
}

fn ratio_table(record: &RunRecord) -> String {
    if record.rounds.is_empty() {
        return String::new();
    }
    let names: Vec<&str> = headline_metrics(record.workload).iter().map(|(name, _)| *name).collect();
    let (ours, theirs) = match record.mode {
        RunMode::ComparePlacements => (record.settings.placement.clone(), baseline_placement(record)),
        _ => ("hybridkv".to_string(), "Redis".to_string()),
    };
    let mut text = format!(
        "Ratio {ours} ÷ {theirs} per round (for times: {theirs} ÷ {ours}), > 1 means {ours} is better:\n\n| round | {} |\n|---|{}\n",
        names.join(" | "),
        "---|".repeat(names.len())
    );
    for round in &record.rounds {
        let cells: Vec<String> = names.iter().map(|name| round.ratios.get(*name).map_or("–".into(), |ratio| format!("{ratio:.2}×"))).collect();
        let _ = writeln!(text, "| {} | {} |", round.round, cells.join(" | "));
    }
    let medians: Vec<String> = names.iter().map(|name| record.median_ratios.get(*name).map_or("–".into(), |ratio| format!("**{ratio:.2}×**"))).collect();
    let _ = writeln!(text, "| median | {} |\n", medians.join(" | "));
    text
}

/// Rows: placements (and Redis from the newest comparison), columns: the four mixes, cells: ops/s
/// from the newest matrix run (or comparison) of each mix.
pub fn placement_table(records: &[RunRecord]) -> String {
    let newest = |workload: Workload, mode: RunMode| {
        records.iter().rev().find(|record| record.workload == workload && record.mode == mode && record.settings.distribution == KeyDistribution::Uniform)
    };
    let mut text = String::from("| placement |");
    for workload in PLACEMENT_TABLE_WORKLOADS {
        let _ = write!(text, " {workload} ops/s |");
    }
    let _ = writeln!(text, "\n|---|{}", "---|".repeat(PLACEMENT_TABLE_WORKLOADS.len()));
    for placement in Placement::all() {
        let cells = PLACEMENT_TABLE_WORKLOADS.map(|workload| {
            newest(workload, RunMode::Matrix)
                .and_then(|record| record.measurements.iter().find(|measurement| measurement.placement.as_deref() == Some(&placement.to_string())))
                .and_then(|measurement| measurement.metrics.get("ops_per_second"))
                .map_or("–".to_string(), |value| format!("{value:.0}"))
        });
        let _ = writeln!(text, "| index {}, data {} | {} |", placement.index, placement.data, cells.join(" | "));
    }
    let redis_cells = PLACEMENT_TABLE_WORKLOADS.map(|workload| {
        newest(workload, RunMode::Compare).and_then(|record| median_of_target(record, "redis")).map_or("–".to_string(), |value| format!("{value:.0} (median)"))
    });
    let _ = writeln!(text, "| Redis (newest --compare run) | {} |", redis_cells.join(" | "));
    text
}

fn baseline_placement(record: &RunRecord) -> String {
    record.settings.baseline_placement.clone().unwrap_or_else(|| "the baseline placement".to_string())
}

fn median_of_target(record: &RunRecord, target: &str) -> Option<f64> {
    median(record.measurements.iter().filter(|measurement| measurement.target == target).filter_map(|measurement| measurement.metrics.get("ops_per_second").copied()).collect())
}
