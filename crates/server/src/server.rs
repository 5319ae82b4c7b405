//! The listener: accepts connections (up to maxclients), serves each on its own task, samples
//! ops/s, serves Prometheus metrics, and on SIGTERM / SIGINT / SHUTDOWN stops accepting, lets
//! connections finish their commands in flight and hands the database back to be closed.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hybridkv_engine::{Database, EngineError, Namespace};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::config::{ServerConfig, SHUTDOWN_DRAIN_MS_MAX};
use crate::keyspace_events::{KeyEvent, EXPIRED};
use crate::shared::Shared;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    #[error("{0}")]
    Exposure(String),
    #[error("cannot listen on {address}: {source}")]
    Listen { address: SocketAddr, source: std::io::Error },
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
}

/// How often INFO's instantaneous_ops_per_sec is recomputed.
const OPS_SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// Serves until shutdown is requested; returns the database for the caller to close (a clean
/// close needs every connection gone, which `close_database` checks).
pub async fn serve(config: ServerConfig, database: Arc<Database>) -> Result<Arc<Database>, ServerError> {
    config.check_exposure().map_err(ServerError::Exposure)?;
    let address = SocketAddr::new(config.bind, config.port);
    let listener = TcpListener::bind(address).await.map_err(|source| ServerError::Listen { address, source })?;
    let metrics_listener = match config.metrics_port {
        Some(port) => {
            let address = SocketAddr::new(config.bind, port);
            Some(TcpListener::bind(address).await.map_err(|source| ServerError::Listen { address, source })?)
        }
        None => None,
    };
    let shared = Arc::new(Shared::new(database.clone(), config));
    let mut helpers: Vec<JoinHandle<()>> = vec![tokio::spawn(sample_ops_per_second(shared.clone()))];
    if let Some(metrics_listener) = metrics_listener {
        helpers.push(tokio::spawn(serve_metrics(metrics_listener, shared.clone())));
    }
    helpers.push(tokio::spawn(shutdown_on_signals(shared.clone()).await?));
    for (number, namespace) in shared.database.namespaces() {
        let home = shared.database.home(number);
        helpers.extend(drive_device_reads(&shared, home, namespace));
        announce_expiries(&shared, home, namespace);
    }
    tracing::info!(%address, "ready to accept connections");
    accept_until_shutdown(&listener, &shared).await;
    drop(listener);
    drain_connections(&shared).await;
    helpers.append(&mut shared.device_read_tasks.lock());
    for helper in helpers {
        helper.abort();
        let _ = helper.await;
    }
    Ok(database)
}

async fn accept_until_shutdown(listener: &TcpListener, shared: &Arc<Shared>) {
    let mut shutdown = shared.shutdown.subscribe();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => accept(stream, peer, shared).await,
                Err(error) => {
                    // Out of descriptors and similar: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            _ = shutdown.changed() => return,
        }
    }
}

async fn accept(mut stream: TcpStream, peer: SocketAddr, shared: &Arc<Shared>) {
    shared.stats.connections_received.fetch_add(1, Ordering::Relaxed);
    let local = stream.local_addr().unwrap_or(peer);
    let max_clients = shared.max_clients.load(Ordering::Relaxed);
    match shared.clients.register(peer, local, max_clients) {
        Some(client) => {
            tokio::spawn(crate::session::serve_connection(stream, shared.clone(), client));
        }
        None => {
            shared.stats.rejected_connections.fetch_add(1, Ordering::Relaxed);
            // Best effort: the client learns why before the connection closes.
            let _ = stream.write_all(b"-ERR max number of clients reached\r\n").await;
        }
    }
}

/// Waits (bounded) for every connection to finish the commands it has in flight.
async fn drain_connections(shared: &Shared) {
    let deadline = Instant::now() + Duration::from_millis(SHUTDOWN_DRAIN_MS_MAX);
    while shared.clients.count() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let remaining = shared.clients.count();
    if remaining > 0 {
        tracing::warn!(remaining, "connections still open after the shutdown drain period");
    }
}

/// Installs the handlers now (so a signal right after start is not missed), then waits.
async fn shutdown_on_signals(shared: Arc<Shared>) -> Result<impl std::future::Future<Output = ()>, ServerError> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate()).map_err(ServerError::Signals)?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(ServerError::Signals)?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = interrupt.recv() => tracing::info!("SIGINT: shutting down"),
        }
        shared.request_shutdown();
    })
}

/// Database `number`'s namespace, opened if it is not yet (an on-demand database selected for
/// the first time), with its device read tasks.
pub fn open_database(shared: &Shared, number: usize) -> Result<&Arc<Namespace>, EngineError> {
    if let Some(namespace) = shared.database.namespace(number) {
        return Ok(namespace);
    }
    let mut tasks = shared.device_read_tasks.lock();
    let home = shared.database.home(number);
    let opened_before = shared.database.namespace(number).is_some();
    let namespace = shared.database.open_namespace(number)?;
    if !opened_before {
        tracing::info!(database = number, namespace = namespace.name(), "opened on demand");
        tasks.extend(drive_device_reads(shared, home, namespace));
        announce_expiries(shared, home, namespace);
    }
    Ok(namespace)
}

/// For each key the namespace of `home` deletes because it expired: CLIENT TRACKING's
/// invalidation, and the keyspace notification `expired` in the database the namespace serves
/// then. The listener holds the database weakly: the database holds the namespace, which holds
/// the listener.
fn announce_expiries(shared: &Shared, home: usize, namespace: &Namespace) {
    let (pubsub, events, database) = (Arc::clone(&shared.pubsub), Arc::clone(&shared.keyspace_events), Arc::downgrade(&shared.database));
    let (tracking, clients) = (Arc::clone(&shared.tracking), Arc::clone(&shared.clients));
    namespace.listen_for_expiries(Box::new(move |key| {
        tracking.invalidate(0, std::iter::once(key), &pubsub, &clients);
        if !events.wants(EXPIRED) {
            return;
        }
        let Some(number) = database.upgrade().and_then(|database| database.number_of_home(home)) else { return };
        events.publish(&pubsub, &KeyEvent { class: EXPIRED, event: "expired", database: number, key: Bytes::copy_from_slice(key) });
    }));
}

/// SWAPDB: both databases opened (with their device read tasks), then exchanged while no
/// database opens, so that `open_database` sees one numbering throughout. A database swapped
/// with itself is left as it is.
pub fn swap_databases(shared: &Shared, first: usize, second: usize) -> Result<(), EngineError> {
    if first == second {
        return shared.database.swap(first, second);
    }
    open_database(shared, first)?;
    open_database(shared, second)?;
    let _tasks = shared.device_read_tasks.lock();
    shared.database.swap(first, second)
}

/// Two tasks per namespace with a device read queue. One submits the reads sessions queue:
/// woken by the first, it yields once, so that the worker first runs its other ready sessions
/// (tokio wakes a yielding task once the worker's run queue is empty or at its next I/O poll),
/// and their misses go in the same submission. The other, whenever reads complete, finishes
/// them (records into the cache, waiting sessions woken). Marks the namespaces they serve in
/// `device_reads_driven`; the others load on blocking threads.
fn drive_device_reads(shared: &Shared, home: usize, namespace: &Arc<Namespace>) -> Vec<JoinHandle<()>> {
    let Some(fd) = namespace.device_read_completions() else { return Vec::new() };
    // Deprecated because an `AsRawFd` type may change or close its descriptor while
    // registered; an `OwnedFd` owned by the `AsyncFd` cannot.
    #[allow(deprecated)]
    let completions = match fd.and_then(|fd| AsyncFd::with_interest(fd, Interest::READABLE)) {
        Ok(completions) => completions,
        Err(error) => {
            tracing::warn!(namespace = namespace.name(), %error, "cannot watch device read completions; cache misses load on blocking threads");
            return Vec::new();
        }
    };
    shared.device_reads_driven[home].store(true, Ordering::Relaxed);
    let (submitter, submissions) = (namespace.clone(), shared.device_read_submissions[home].clone());
    let submit = tokio::spawn(async move {
        loop {
            submissions.notified().await;
            tokio::task::yield_now().await;
            submitter.submit_device_reads();
        }
    });
    let namespace = namespace.clone();
    let finish = tokio::spawn(async move {
        loop {
            let Ok(mut ready) = completions.readable().await else { return };
            namespace.finish_device_reads();
            ready.clear_ready();
        }
    });
    vec![submit, finish]
}

async fn sample_ops_per_second(shared: Arc<Shared>) {
    let mut previous = (Instant::now(), shared.stats.commands_processed.get());
    loop {
        tokio::time::sleep(OPS_SAMPLE_INTERVAL).await;
        let now = (Instant::now(), shared.stats.commands_processed.get());
        let seconds = now.0.duration_since(previous.0).as_secs_f64();
        let rate = now.1.saturating_sub(previous.1) as f64 / seconds.max(1e-9);
        shared.stats.ops_per_second.store(rate.round() as u64, Ordering::Relaxed);
        previous = now;
    }
}

/// Bytes of an HTTP request read before answering: the path does not matter, every request gets
/// the metrics page.
const METRICS_REQUEST_BYTES_MAX: usize = 8 * 1024;

async fn serve_metrics(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else { continue };
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut request = vec![0u8; METRICS_REQUEST_BYTES_MAX];
            let _ = stream.read(&mut request).await;
            let body = tokio::task::block_in_place(|| crate::info::prometheus_text(&shared));
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(body.as_bytes()).await;
        });
    }
}

/// Clean close when this is the last reference (every connection ended); otherwise a checkpoint,
/// so everything is durable even though the stop is not marked clean.
pub fn close_database(mut database: Arc<Database>) -> Result<(), hybridkv_engine::EngineError> {
    // A connection task drops its reference just after it unregisters: allow it a moment.
    for _ in 0..CLOSE_WAIT_ROUNDS {
        match Arc::try_unwrap(database) {
            Ok(database) => return database.close(),
            Err(shared) => database = shared,
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    tracing::warn!("connections still hold the database: checkpointing instead of a clean close");
    database.checkpoint()
}

/// Rounds of 10 ms that `close_database` waits for the last connection to let go.
const CLOSE_WAIT_ROUNDS: usize = 100;

/// Threads of the runtime's blocking pool, where connections load records the cache lost from
/// the ssd before their commands run (`Connection::load_records_ahead`). Enough to keep this many
/// device reads in flight; past it, loads queue. Unbounded (tokio's default is 512), 1,000 clients
/// missing the cache at once grew the pool to 225 threads and the resident memory with them
/// (each thread keeps its own allocator heap): docs/RELIABILITY.md, "Soak".
const BLOCKING_THREADS_MAX: usize = 16;

/// Builds the multi-threaded runtime (`worker_threads`, default one per core), serves until
/// shutdown, then closes the database cleanly.
pub fn run(config: ServerConfig, database: Database, worker_threads: Option<usize>) -> Result<(), RunError> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all().thread_name("hybridkv-worker").max_blocking_threads(BLOCKING_THREADS_MAX);
    if let Some(threads) = worker_threads {
        builder.worker_threads(threads.max(1));
    }
    let runtime = builder.build().map_err(RunError::Runtime)?;
    let database = runtime.block_on(serve(config, Arc::new(database)))?;
    // Connection tasks still parked in the runtime hold the database: drop them first.
    runtime.shutdown_timeout(Duration::from_millis(SHUTDOWN_DRAIN_MS_MAX));
    close_database(database)?;
    tracing::info!("database closed cleanly");
    Ok(())
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error("closing the database: {0}")]
    Close(#[from] hybridkv_engine::EngineError),
}
