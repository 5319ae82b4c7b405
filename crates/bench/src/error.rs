//! The benchmark's errors: one enum, each variant says what failed and how to fix it when we know.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("protocol error from {address}: {detail}")]
    Protocol { address: String, detail: String },
    #[error("server replied with an error to {command}: {message}")]
    ServerError { command: String, message: String },
    #[error("{0}")]
    Verification(String),
    #[error("redis-server not found ({searched}); install it with `apt-get install -y redis-server` (Debian/Ubuntu), or pass --redis-server PATH")]
    RedisServerMissing { searched: String },
    #[error("hybridkv binary not found at {}; build it with `cargo build --release -p hybridkv`, or pass --hybridkv-binary PATH", .0.display())]
    HybridkvMissing(PathBuf),
    #[error("{server} did not answer PING within {seconds} s; last lines of its log:\n{log_tail}")]
    ServerStart { server: String, seconds: u64, log_tail: String },
    #[error("{server} exited early ({status}); last lines of its log:\n{log_tail}")]
    ServerExited { server: String, status: String, log_tail: String },
    #[error("results: {0}")]
    Results(String),
    #[error("plot {}: {detail}", .path.display())]
    Plot { path: PathBuf, detail: String },
}

impl BenchError {
    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> BenchError {
        let context = context.into();
        move |source| BenchError::Io { context, source }
    }
}

pub type BenchResult<T> = Result<T, BenchError>;
