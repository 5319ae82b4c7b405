//! The harness's servers: hybridkv or redis-server started on a free loopback port in a temporary
//! directory, stopped cleanly or with SIGKILL, and started again on the same files.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use crate::args::{Durability, JournalTier, Placement, StopMode};
use crate::connection::Connection;
use crate::error::{BenchError, BenchResult};
use crate::protocol::Reply;

/// Loading 10 M keys from an append-only file takes Redis tens of seconds here; an hour is a hang.
const SERVER_READY_SECONDS_MAX: u64 = 3_600;
/// Poll interval while waiting for PING: short, because restart times are measured with it.
const READY_POLL_INTERVAL_MILLISECONDS: u64 = 1;
/// A clean stop longer than this is treated as a hang and finished with SIGKILL.
const SERVER_STOP_SECONDS_MAX: u64 = 120;
const LOG_TAIL_LINES: usize = 20;

#[derive(Clone, Debug)]
pub enum ServerSpec {
    Hybridkv {
        binary: PathBuf,
        placement: Placement,
        journal: Option<JournalTier>,
        durability: Durability,
        cache: Option<String>,
        data_bytes: Option<String>,
    },
    Redis { binary: PathBuf, persistence: RedisPersistence },
}

/// What a Redis instance writes: an append-only file with an fsync policy, or nothing (then only
/// an explicit SAVE writes an RDB snapshot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedisPersistence {
    AppendOnly { fsync: &'static str },
    SnapshotOnSave,
}

impl RedisPersistence {
    /// The Redis setting equivalent to a hybridkv durability (BRIEF.md: always ≙ appendfsync
    /// always, periodic ≙ everysec, none ≙ no AOF).
    pub fn matching(durability: Durability) -> RedisPersistence {
        match durability {
            Durability::Always => RedisPersistence::AppendOnly { fsync: "always" },
            Durability::Periodic => RedisPersistence::AppendOnly { fsync: "everysec" },
            Durability::None => RedisPersistence::SnapshotOnSave,
        }
    }
}

impl ServerSpec {
    pub fn label(&self) -> String {
        match self {
            ServerSpec::Hybridkv { placement, durability, cache, .. } => {
                let cache = cache.as_ref().map_or_else(String::new, |size| format!(" cache {size}"));
                format!("hybridkv {placement} durability {}{cache}", durability.name())
            }
            ServerSpec::Redis { persistence: RedisPersistence::AppendOnly { fsync }, .. } => format!("redis appendfsync {fsync}"),
            ServerSpec::Redis { persistence: RedisPersistence::SnapshotOnSave, .. } => "redis without AOF (RDB by SAVE)".to_string(),
        }
    }

    pub fn target_name(&self) -> &'static str {
        match self {
            ServerSpec::Hybridkv { .. } => "hybridkv",
            ServerSpec::Redis { .. } => "redis",
        }
    }

    fn arguments(&self, port: u16, directories: &ServerDirectories) -> Vec<String> {
        let port = port.to_string();
        let directory = directories.files.path().display().to_string();
        let shmem_directory = directories.shmem.path().display().to_string();
        match self {
            ServerSpec::Hybridkv { placement, journal, durability, cache, data_bytes, .. } => {
                let mut arguments = vec!["serve", "--port", &port, "--dir", &directory, "--shmem-dir", &shmem_directory];
                arguments.extend(["--index", placement.index, "--data", placement.data]);
                arguments.extend(["--durability", durability.name()]);
                if let Some(journal) = journal {
                    arguments.extend(["--journal", journal.name()]);
                }
                if let Some(size) = cache {
                    arguments.extend(["--cache", size]);
                }
                if let Some(size) = data_bytes {
                    arguments.extend(["--data-bytes", size]);
                }
                arguments.into_iter().map(String::from).collect()
            }
            ServerSpec::Redis { persistence, .. } => redis_arguments(&port, &directory, *persistence),
        }
    }

    fn binary(&self) -> &Path {
        match self {
            ServerSpec::Hybridkv { binary, .. } | ServerSpec::Redis { binary, .. } => binary,
        }
    }
}

fn redis_arguments(port: &str, directory: &str, persistence: RedisPersistence) -> Vec<String> {
    let mut arguments = vec!["--port", port, "--bind", "127.0.0.1", "--dir", directory, "--daemonize", "no", "--save", ""];
    match persistence {
        RedisPersistence::AppendOnly { fsync } => arguments.extend(["--appendonly", "yes", "--appendfsync", fsync]),
        RedisPersistence::SnapshotOnSave => arguments.extend(["--appendonly", "no"]),
    }
    arguments.into_iter().map(String::from).collect()
}

/// The redis-server to start: the one asked for, or the first on PATH.
pub fn find_redis_server(asked: Option<&Path>) -> BenchResult<PathBuf> {
    if let Some(path) = asked {
        return if path.is_file() { Ok(path.to_path_buf()) } else { Err(BenchError::RedisServerMissing { searched: path.display().to_string() }) };
    }
    let path_variable = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path_variable)
        .map(|directory| directory.join("redis-server"))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| BenchError::RedisServerMissing { searched: "PATH".into() })
}

pub fn check_hybridkv_binary(path: &Path) -> BenchResult<()> {
    if path.is_file() { Ok(()) } else { Err(BenchError::HybridkvMissing(path.to_path_buf())) }
}

/// The server's files: pmem/ssd files (and Redis's) on disk, shmem files on /dev/shm. Both are
/// removed when dropped, so no run leaves files behind.
struct ServerDirectories {
    files: tempfile::TempDir,
    shmem: tempfile::TempDir,
}

/// Where the shmem tier lives on Linux (tmpfs).
const SHMEM_PARENT_DIRECTORY: &str = "/dev/shm";

impl ServerDirectories {
    fn create() -> BenchResult<ServerDirectories> {
        let builder = || {
            let mut builder = tempfile::Builder::new();
            builder.prefix("hybridkv-bench-");
            builder
        };
        let files = builder().tempdir().map_err(BenchError::io("creating the server's temporary directory"))?;
        let shmem = builder().tempdir_in(SHMEM_PARENT_DIRECTORY).map_err(BenchError::io(format!("creating a directory in {SHMEM_PARENT_DIRECTORY}")))?;
        Ok(ServerDirectories { files, shmem })
    }
}

pub struct ManagedServer {
    spec: ServerSpec,
    port: u16,
    directories: ServerDirectories,
    child: Option<Child>,
}

impl ManagedServer {
    pub async fn start(spec: ServerSpec) -> BenchResult<ManagedServer> {
        let mut server = ManagedServer { spec, port: free_port()?, directories: ServerDirectories::create()?, child: None };
        server.start_again().await?;
        Ok(server)
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn spec(&self) -> &ServerSpec {
        &self.spec
    }

    /// Starts the process on the existing files; returns the time until it answered PING.
    pub async fn start_again(&mut self) -> BenchResult<Duration> {
        let log = File::options().create(true).append(true).open(self.log_path()).map_err(BenchError::io("opening the server log"))?;
        let log_for_stderr = log.try_clone().map_err(BenchError::io("opening the server log"))?;
        let started = Instant::now();
        let child = Command::new(self.spec.binary())
            .args(self.spec.arguments(self.port, &self.directories))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_for_stderr)
            .spawn()
            .map_err(BenchError::io(format!("starting {}", self.spec.binary().display())))?;
        self.child = Some(child);
        self.wait_ready().await?;
        Ok(started.elapsed())
    }

    async fn wait_ready(&mut self) -> BenchResult<()> {
        let deadline = Instant::now() + Duration::from_secs(SERVER_READY_SECONDS_MAX);
        while Instant::now() < deadline {
            self.check_running()?;
            if answers_ping(&self.address()).await {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(READY_POLL_INTERVAL_MILLISECONDS)).await;
        }
        Err(BenchError::ServerStart { server: self.spec.label(), seconds: SERVER_READY_SECONDS_MAX, log_tail: self.log_tail() })
    }

    fn check_running(&mut self) -> BenchResult<()> {
        let Some(child) = self.child.as_mut() else { return Ok(()) };
        match child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => {
                self.child = None;
                Err(BenchError::ServerExited { server: self.spec.label(), status: status.to_string(), log_tail: self.log_tail() })
            }
            Err(error) => Err(BenchError::Io { context: "checking the server process".into(), source: error }),
        }
    }

    pub async fn stop(&mut self, mode: StopMode) -> BenchResult<()> {
        let Some(mut child) = self.child.take() else { return Ok(()) };
        let signal = match mode {
            StopMode::Clean => libc::SIGTERM,
            StopMode::Kill => libc::SIGKILL,
        };
        send_signal(&child, signal);
        let deadline = Instant::now() + Duration::from_secs(SERVER_STOP_SECONDS_MAX);
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return Ok(()),
                Ok(None) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(5)).await,
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(BenchError::Verification(format!("{} did not stop within {SERVER_STOP_SECONDS_MAX} s; killed it", self.spec.label())));
                }
            }
        }
    }

    fn log_path(&self) -> PathBuf {
        self.directories.files.path().join("server.log")
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }
}

impl Drop for ManagedServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn send_signal(child: &Child, signal: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(child.id()) else { return };
    // SAFETY: kill(2) on the pid of our own child, which has not been reaped (we hold its Child).
    unsafe {
        libc::kill(pid, signal);
    }
}

/// A port the kernel reports free now; the server binds it a moment later (a race we accept:
/// a clash shows as the server exiting with "address in use").
fn free_port() -> BenchResult<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(BenchError::io("finding a free port"))?;
    let port = listener.local_addr().map_err(BenchError::io("finding a free port"))?.port();
    Ok(port)
}

/// True once the server replies PONG (Redis replies -LOADING while it reads its files).
pub async fn answers_ping(address: &str) -> bool {
    let Ok(mut connection) = Connection::open(address).await else { return false };
    matches!(connection.command(&["PING"]).await, Ok(Reply::Simple(text)) if text == "PONG")
}
