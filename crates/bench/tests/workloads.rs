//! Every workload runs for about a second against a small server the harness starts, and what it
//! records must be sane. This keeps the benchmarks working; it measures nothing.
//!
//! Needs target/release/hybridkv (scripts/test-all.sh builds it first; HYBRIDKV_BINARY overrides
//! the path) and, for the Redis comparison, redis-server on PATH. A test whose server is missing
//! says so and passes without running.

use std::path::PathBuf;

use clap::Parser;
use hybridkv_bench::{BenchArgs, BenchError, RunRecord, Workload};

const SMALL_KEYS: &str = "2000";
const WARMUP: &str = "200ms";
const MEASURE: &str = "700ms";

/// Later arguments override earlier ones, so a test can lengthen the default short durations.
#[derive(Parser)]
#[command(args_override_self = true)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

fn hybridkv_binary() -> Option<PathBuf> {
    let path = std::env::var_os("HYBRIDKV_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/hybridkv"));
    if path.is_file() {
        Some(path)
    } else {
        eprintln!("SKIPPED: no hybridkv binary at {} (run `cargo build --release -p hybridkv`)", path.display());
        None
    }
}

fn redis_available() -> bool {
    let found = std::process::Command::new("redis-server").arg("--version").output().is_ok_and(|output| output.status.success());
    if !found {
        eprintln!("SKIPPED: redis-server is not installed (apt-get install -y redis-server)");
    }
    found
}

/// Runs `hybridkv bench` with small, short settings plus `extra` arguments.
fn run(binary: &std::path::Path, results: &tempfile::TempDir, extra: &[&str]) -> Result<RunRecord, BenchError> {
    let mut arguments = vec!["bench", "--keys", SMALL_KEYS, "--warmup", WARMUP, "--duration", MEASURE, "--no-plots"];
    let binary_text = binary.display().to_string();
    let results_text = results.path().display().to_string();
    arguments.extend(["--hybridkv-binary", &binary_text, "--results-dir", &results_text]);
    arguments.extend(extra);
    let cli = Cli::try_parse_from(arguments).map_err(|error| BenchError::InvalidArgument(error.to_string()))?;
    hybridkv_bench::run_workload(&cli.bench.run)
}

fn metric(record: &RunRecord, index: usize, name: &str) -> f64 {
    let measurement = &record.measurements[index];
    *measurement.metrics.get(name).unwrap_or_else(|| panic!("{} has no {name}: {:?}", measurement.server, measurement.metrics))
}

#[test]
fn key_value_mixes_complete_without_errors() {
    let Some(binary) = hybridkv_binary() else { return };
    let results = tempfile::tempdir().unwrap();
    for workload in [Workload::Mix5050, Workload::ReadOnly, Workload::WriteOnly, Workload::Mix7030] {
        let record = run(&binary, &results, &["--workload", workload.name(), "--connections", "8", "--pipeline", "4"]).unwrap();
        assert_eq!(record.workload, workload);
        assert!(metric(&record, 0, "ops_per_second") > 0.0, "{workload}");
        assert_eq!(metric(&record, 0, "errors"), 0.0, "{workload}: {:?}", record.measurements[0].notes);
        assert_eq!(metric(&record, 0, "misses"), 0.0, "{workload}: every key was ingested first");
        let latency = record.measurements[0].latency.as_ref().unwrap();
        assert!(latency.p50_us > 0.0 && latency.p50_us <= latency.p99_us && latency.p99_us <= latency.max_us);
    }
    let written = std::fs::read_dir(results.path()).unwrap().filter(|entry| entry.as_ref().unwrap().path().extension().is_some_and(|e| e == "json")).count();
    assert_eq!(written, 4, "one JSON file per run");
}

#[test]
fn fixed_rate_load_offers_about_the_asked_rate() {
    let Some(binary) = hybridkv_binary() else { return };
    let results = tempfile::tempdir().unwrap();
    let record = run(&binary, &results, &["--workload", "read-only", "--connections", "4", "--rate", "2000", "--duration", "1s"]).unwrap();
    let throughput = metric(&record, 0, "ops_per_second");
    // Closed loop would reach tens of thousands; a busy CI machine may fall short of the rate.
    assert!((200.0..=2_600.0).contains(&throughput), "offered 2000 ops/s, measured {throughput}");
}

#[test]
fn messaging_stores_five_objects_per_message_and_reads_journal_counters() {
    let Some(binary) = hybridkv_binary() else { return };
    let results = tempfile::tempdir().unwrap();
    let record = run(&binary, &results, &["--workload", "messaging", "--connections", "16", "--durability", "always"]).unwrap();
    let messages = metric(&record, 0, "inbound_messages_per_second");
    assert!(messages > 0.0);
    assert!((metric(&record, 0, "objects_per_second") - 5.0 * messages).abs() < 1e-6 * messages.max(1.0));
    assert_eq!(metric(&record, 0, "errors"), 0.0, "{:?}", record.measurements[0].notes);
    assert!(metric(&record, 0, "journal_writes_per_second") >= 0.0, "hybridkv's INFO has journal counters");
}

#[test]
fn scan_aggregates_every_record_cold_then_warm() {
    let Some(binary) = hybridkv_binary() else { return };
    let results = tempfile::tempdir().unwrap();
    let record = run(&binary, &results, &["--workload", "scan"]).unwrap();
    assert_eq!(metric(&record, 0, "records"), 2000.0);
    assert_eq!(metric(&record, 0, "matched_records"), 500.0, "one record in four is in the filtered region");
    assert!(metric(&record, 0, "cold_seconds") > 0.0 && metric(&record, 0, "warm_seconds") > 0.0);
}

#[test]
fn restart_serves_every_key_after_a_clean_stop_and_a_kill() {
    let Some(binary) = hybridkv_binary() else { return };
    let results = tempfile::tempdir().unwrap();
    for stop in ["clean", "kill"] {
        let record = run(&binary, &results, &["--workload", "restart", "--stop", stop, "--durability", "always"]).unwrap();
        assert_eq!(metric(&record, 0, "keys_verified"), 2000.0, "stop {stop}: {:?}", record.measurements[0].notes);
        assert!(metric(&record, 0, "ready_seconds") <= metric(&record, 0, "served_seconds"));
    }
}

#[test]
fn restart_is_refused_against_a_server_it_cannot_restart() {
    let results = tempfile::tempdir().unwrap();
    let error = run(std::path::Path::new("/nonexistent"), &results, &["--workload", "restart", "--addr", "127.0.0.1:1"]).unwrap_err();
    assert!(error.to_string().contains("--addr"), "{error}");
}

#[test]
fn compare_alternates_targets_and_reports_the_median_ratio() {
    let Some(binary) = hybridkv_binary() else { return };
    if !redis_available() {
        return;
    }
    let results = tempfile::tempdir().unwrap();
    let record = run(&binary, &results, &["--workload", "mix-50-50", "--compare", "redis", "--connections", "8"]).unwrap();
    let targets: Vec<&str> = record.measurements.iter().map(|measurement| measurement.target.as_str()).collect();
    assert_eq!(targets, ["hybridkv", "redis", "hybridkv", "redis", "hybridkv", "redis"]);
    assert_eq!(record.rounds.len(), 3);
    let median = record.median_ratios["ops_per_second"];
    let mut ratios: Vec<f64> = record.rounds.iter().map(|round| round.ratios["ops_per_second"]).collect();
    ratios.sort_by(f64::total_cmp);
    assert_eq!(median, ratios[1]);
}

#[test]
fn matrix_covers_nine_placements_and_report_keeps_other_sections() {
    let Some(binary) = hybridkv_binary() else { return };
    let results = tempfile::tempdir().unwrap();
    let record = run(&binary, &results, &["--workload", "write-only", "--matrix", "--connections", "4", "--warmup", "100ms", "--duration", "300ms"]).unwrap();
    assert_eq!(record.measurements.len(), 9);
    for measurement in &record.measurements {
        assert!(measurement.metrics.get("ops_per_second").is_some_and(|&value| value > 0.0), "{}: {:?}", measurement.server, measurement.notes);
    }
    std::fs::write(results.path().join("engine.md"), "engine fragment 12345\n").unwrap();
    let output = results.path().join("RESULTS.md");
    std::fs::write(&output, "# Benchmark results\n\n## Storage engine\nkept as is\n").unwrap();
    let results_text = results.path().display().to_string();
    let output_text = output.display().to_string();
    let report = Cli::try_parse_from(["bench", "report", "--results-dir", &results_text, "--output", &output_text]).unwrap();
    hybridkv_bench::run(report.bench).unwrap();
    let text = std::fs::read_to_string(&output).unwrap();
    assert!(text.contains("## Storage engine\nkept as is"));
    assert!(text.contains("engine fragment 12345"));
    assert!(text.contains("| index pmem, data ssd |"));
    assert!(text.contains("write-only-throughput.png"), "plots are drawn and linked");
}

#[test]
fn placements_compare_under_zipfian_keys_with_the_cache_hit_ratio() {
    let Some(binary) = hybridkv_binary() else { return };
    let results = tempfile::tempdir().unwrap();
    let arguments = ["--workload", "mix-70-30", "--distribution", "zipfian", "--compare", "placement", "--placement", "pmem/ssd", "--cache", "64KiB", "--connections", "4"];
    let record = run(&binary, &results, &arguments).unwrap();
    let placements: Vec<&str> = record.measurements.iter().map(|measurement| measurement.placement.as_deref().unwrap()).collect();
    assert_eq!(placements, ["pmem/ssd", "dram/dram", "pmem/ssd", "dram/dram", "pmem/ssd", "dram/dram"]);
    assert_eq!(record.settings.baseline_placement.as_deref(), Some("dram/dram"));
    assert!(record.median_ratios["ops_per_second"] > 0.0);
    for (index, measurement) in record.measurements.iter().enumerate() {
        assert_eq!(metric(&record, index, "errors"), 0.0, "{}: {:?}", measurement.server, measurement.notes);
        let hit_percent = measurement.metrics.get("cache_hit_percent");
        match measurement.placement.as_deref() {
            // 2,000 records of 64 bytes do not fit in 64 KiB: some gets miss, the hot ones hit.
            Some("pmem/ssd") => assert!(hit_percent.is_some_and(|&percent| percent > 0.0 && percent < 100.0), "{}: {hit_percent:?}", measurement.server),
            _ => assert_eq!(hit_percent, None, "records in DRAM have no record cache"),
        }
    }
}
