//! `hybridkv-loadgen`: the same as `hybridkv bench`, as a binary of the bench crate (handy while
//! developing the load generator without rebuilding the server).

use std::process::ExitCode;

use clap::Parser;

#[derive(Parser)]
#[command(name = "hybridkv-loadgen", about = "RESP load generator: the workloads of `hybridkv bench`")]
struct Cli {
    #[command(flatten)]
    bench: hybridkv_bench::BenchArgs,
}

fn main() -> ExitCode {
    match hybridkv_bench::run(Cli::parse().bench) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
