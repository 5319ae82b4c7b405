//! Benchmarks of hybridkv: the in-process engine benchmark (`src/bin/engine_bench.rs`) and the
//! RESP load generator behind `hybridkv bench` (this library).
//!
//! Reading order: `args` (what a run is asked to do) → `session` (single, --compare, --matrix;
//! starts servers through `servers`) → `workloads` (one module per workload, built on `ingest`
//! and `loadgen`, which talk RESP through `connection` and `protocol`) → `record` (the JSON),
//! `markdown`, `plots` and `report` (bench/RESULTS.md). `zipfian` is the skewed key choice shared
//! with the engine benchmark.

mod args;
mod connection;
mod data;
mod error;
mod ingest;
mod loadgen;
mod markdown;
mod plots;
mod protocol;
mod record;
mod report;
mod servers;
mod session;
mod workloads;
pub mod zipfian;

pub use args::{BenchAction, BenchArgs, ReportArgs, RunArgs, Workload};
pub use error::BenchError;
pub use record::RunRecord;

use session::Session;

/// Runs `hybridkv bench`: a workload (writing its JSON result, printing its markdown summary and
/// drawing its plots), or `report`.
pub fn run(args: BenchArgs) -> Result<(), BenchError> {
    match &args.action {
        Some(BenchAction::Report(report_args)) => report::regenerate(report_args),
        None => run_workload(&args.run).map(|_| ()),
    }
}

/// Runs one workload as asked and returns what was recorded.
pub fn run_workload(args: &RunArgs) -> Result<RunRecord, BenchError> {
    let session = Session::new(args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(BenchError::io("starting the tokio runtime"))?;
    let record = runtime.block_on(session.run())?;
    let path = record::save(&record, &args.results_dir)?;
    let plots = if args.no_plots {
        Vec::new()
    } else {
        plots::draw(&record, &path).unwrap_or_else(|error| {
            eprintln!("warning: plots skipped: {error}");
            Vec::new()
        })
    };
    // Plot links in the summary are made relative to the terminal's directory, like the JSON path.
    let directory = path.parent().unwrap_or(std::path::Path::new("."));
    let plots: Vec<String> = plots.iter().map(|name| directory.join(name).display().to_string()).collect();
    println!("{}", markdown::render_run(&record, &plots));
    println!("result: {}", path.display());
    Ok(record)
}
