//! The hybridkv binary: `hybridkv serve` runs the RESP server on the storage engine, `hybridkv
//! bench` the load generator.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use hybridkv_engine::{default_shmem_dir, parse_size_bytes, Config, Database, Durability, Tier};
use hybridkv_server::{EngineCallMode, ServerConfig};

/// Request buffers, replies and records are many short-lived allocations across threads:
/// mimalloc's thread-local free lists serve them several times cheaper than glibc's malloc
/// (docs/design/server.md). It advises transparent huge pages on its arenas; `serve --huge-pages`
/// decides whether the process uses them (`apply_huge_pages`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "hybridkv", version, about = "A Redis-protocol key-value database that places its index, records and journal on the memory tier you choose")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the Redis protocol (RESP2/RESP3) on a TCP port.
    Serve(ServeArgs),
    /// Benchmark a server with the reference workloads, alone or against Redis; `bench report`
    /// regenerates bench/RESULTS.md.
    Bench(hybridkv_bench::BenchArgs),
}

#[derive(Args)]
struct ServeArgs {
    /// TOML configuration file with one [[namespace]] table per database number; the flags below
    /// override its first namespace (database 0).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on. A non-loopback address needs --requirepass (or --protected-mode no).
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    #[arg(long, default_value_t = 6379)]
    port: u16,
    /// Directory of the pmem and ssd files (default ./hybridkv-data, or the config file's data_dir).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Directory of shmem-tier files (default: a folder under /dev/shm named after --dir).
    #[arg(long, value_name = "DIR")]
    shmem_dir: Option<PathBuf>,
    /// Tier of database 0's primary index: dram (rebuilt at every start), shmem (survives a
    /// process crash, not a reboot), pmem (survives power loss). Default pmem.
    #[arg(long, value_name = "dram|shmem|pmem")]
    index: Option<String>,
    /// Tier of database 0's records: dram (with a journal), pmem, ssd. Default ssd.
    #[arg(long, value_name = "dram|pmem|ssd")]
    data: Option<String>,
    /// Tier of the journal that makes records in DRAM durable. Default ssd.
    #[arg(long, value_name = "pmem|ssd")]
    journal: Option<String>,
    /// always: a write is acknowledged once durable (group commit); periodic: durable within
    /// --periodic-ms; none: left to the operating system. Default always.
    #[arg(long, value_name = "always|periodic|none")]
    durability: Option<String>,
    /// Milliseconds between flushes with --durability periodic.
    #[arg(long, value_name = "MS")]
    periodic_ms: Option<u64>,
    /// Size of database 0's index region, e.g. 1GiB.
    #[arg(long, value_name = "SIZE")]
    index_bytes: Option<String>,
    /// Size of database 0's data tier (its memory budget: writes beyond it get -OOM), e.g. 4GiB.
    #[arg(long, value_name = "SIZE")]
    data_bytes: Option<String>,
    /// Largest value database 0 accepts, e.g. 4MiB (at most half a write block).
    #[arg(long, value_name = "SIZE")]
    value_bytes_max: Option<String>,
    /// DRAM record cache of database 0 in front of records on ssd or pmem, e.g. 64MiB (0: none).
    /// Records on ssd bypass the page cache, so this budget is what bounds their DRAM use. Records
    /// on pmem without DAX (the msync fallback) are read from the page cache and get no cache.
    #[arg(long, value_name = "SIZE")]
    cache: Option<String>,
    /// Database numbers SELECT takes (default 16, as Redis's `databases`, or the config file's
    /// `databases`). Numbers past the config file's namespaces are opened on first SELECT, with
    /// database 0's placement, sizes and durability, and reopened at every start after that;
    /// each opened one adds its own budgets (data, index, cache).
    #[arg(long, value_name = "N")]
    databases: Option<usize>,
    /// Password clients must give with AUTH (or HELLO ... AUTH default PASSWORD).
    #[arg(long, value_name = "SECRET")]
    requirepass: Option<String>,
    /// Serve Prometheus metrics over HTTP on this port (same address as --bind).
    #[arg(long, value_name = "N")]
    metrics_port: Option<u16>,
    /// Refuse a non-loopback --bind without --requirepass (yes) or allow it (no).
    #[arg(long, default_value = "yes", value_name = "yes|no")]
    protected_mode: String,
    /// Connections served at once; more are refused with an error.
    #[arg(long, default_value_t = hybridkv_server::MAX_CLIENTS_DEFAULT)]
    maxclients: usize,
    /// Largest bulk string in a request, e.g. 512MiB (Redis's proto-max-bulk-len).
    #[arg(long, value_name = "SIZE")]
    proto_max_bulk_len: Option<String>,
    /// Largest unprocessed input per client before it is disconnected, e.g. 1GiB.
    #[arg(long, value_name = "SIZE")]
    client_query_buffer_limit: Option<String>,
    /// Where engine calls run: inline (on the network threads; only administrative commands
    /// are handed off) or block-in-place (every batch handed off). See docs/design/server.md
    /// for the measurement behind the default.
    #[arg(long, default_value = "inline")]
    engine_calls: String,
    /// Network worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
    /// Transparent huge pages for the server's heap (record cache, buffers, pending entries).
    /// on: fewer TLB misses (a quarter less CPU per pipelined command measured here), and freed
    /// memory goes back to the kernel only in whole huge pages; off: small pages only. See
    /// docs/design/server.md, "Huge pages".
    #[arg(long, value_enum, default_value_t = HugePages::On)]
    huge_pages: HugePages,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum HugePages {
    On,
    Off,
}

fn size_flag(value: &Option<String>, flag: &str) -> Result<Option<u64>, String> {
    value.as_deref().map(|text| parse_size_bytes(text).ok_or_else(|| format!("--{flag}: cannot read size '{text}'"))).transpose()
}

fn tier_flag(value: &Option<String>, flag: &str) -> Result<Option<Tier>, String> {
    value.as_deref().map(|text| Tier::parse(text).ok_or_else(|| format!("--{flag}: unknown tier '{text}'"))).transpose()
}

/// The engine configuration: the file (or the embedded default), with flags overriding database 0.
fn engine_config(args: &ServeArgs) -> Result<Config, String> {
    let mut config = match &args.config {
        Some(path) => Config::from_file(path).map_err(|error| error.to_string())?,
        None => Config::single(args.dir.as_deref().unwrap_or(std::path::Path::new("./hybridkv-data"))),
    };
    if let Some(dir) = &args.dir {
        config.data_dir = dir.clone();
        config.shmem_dir = default_shmem_dir(dir);
    }
    if let Some(shmem_dir) = &args.shmem_dir {
        config.shmem_dir = shmem_dir.clone();
    }
    if let Some(databases) = args.databases {
        config.databases = databases;
    }
    let namespace = &mut config.namespaces[0];
    if let Some(tier) = tier_flag(&args.index, "index")? {
        namespace.index = tier;
    }
    if let Some(tier) = tier_flag(&args.data, "data")? {
        namespace.data = tier;
    }
    if let Some(tier) = tier_flag(&args.journal, "journal")? {
        namespace.journal = tier;
    }
    if let Some(text) = &args.durability {
        namespace.durability = Durability::parse(text).ok_or_else(|| format!("--durability: unknown mode '{text}'"))?;
    }
    if let Some(milliseconds) = args.periodic_ms {
        namespace.periodic_ms = milliseconds;
    }
    if let Some(bytes) = size_flag(&args.index_bytes, "index-bytes")? {
        namespace.index_bytes = bytes;
    }
    if let Some(bytes) = size_flag(&args.data_bytes, "data-bytes")? {
        namespace.data_bytes = bytes;
    }
    if let Some(bytes) = size_flag(&args.value_bytes_max, "value-bytes-max")? {
        namespace.value_bytes_max = bytes;
    }
    if let Some(bytes) = size_flag(&args.cache, "cache")? {
        namespace.cache_bytes = bytes;
    }
    config.validate().map_err(|error| error.to_string())?;
    std::fs::create_dir_all(&config.data_dir).map_err(|error| format!("cannot create {}: {error}", config.data_dir.display()))?;
    Ok(config)
}

fn server_config(args: &ServeArgs, config: &Config) -> Result<ServerConfig, String> {
    let mut server = ServerConfig::new(args.bind, args.port);
    server.requirepass = args.requirepass.clone().filter(|password| !password.is_empty());
    server.protected_mode = match args.protected_mode.as_str() {
        "yes" => true,
        "no" => false,
        other => return Err(format!("--protected-mode: expected yes or no, got '{other}'")),
    };
    server.max_clients = args.maxclients;
    server.metrics_port = args.metrics_port;
    server.engine_call_mode = EngineCallMode::parse(&args.engine_calls)
        .ok_or_else(|| format!("--engine-calls: expected inline or block-in-place, got '{}'", args.engine_calls))?;
    if let Some(bytes) = size_flag(&args.proto_max_bulk_len, "proto-max-bulk-len")? {
        server.bulk_bytes_max = bytes as usize;
    }
    if let Some(bytes) = size_flag(&args.client_query_buffer_limit, "client-query-buffer-limit")? {
        server.query_buffer_bytes_max = bytes as usize;
    }
    server.dir = config.data_dir.display().to_string();
    server.check_exposure()?;
    Ok(server)
}

/// Says at start what each namespace's media really give (DAX or the msync fallback) and how
/// the restart went.
fn log_startup(database: &Database) {
    for report in database.restart_reports() {
        tracing::info!(
            namespace = %report.namespace,
            restart = report.kind.name(),
            elapsed_ms = report.elapsed_ms,
            records_replayed = report.records_replayed,
            "namespace opened"
        );
    }
    for (number, namespace) in database.namespaces() {
        let stats = namespace.stats();
        tracing::info!(
            database = number,
            namespace = %stats.name,
            durability = stats.durability.name(),
            index = %format!("{} ({})", stats.index.tier.name(), stats.index.durability),
            data = %format!("{} ({})", stats.data.tier.name(), stats.data.durability),
            journal = %stats.journal.as_ref().map_or("none".to_string(), |journal| format!("{} ({})", journal.tier.name(), journal.durability)),
            "placement"
        );
    }
}

/// Huge pages on: the allocator must give memory back in whole huge pages, or khugepaged makes
/// what it gave back resident again and RSS creeps up under a steady load (docs/RELIABILITY.md,
/// "Soak"); where it cannot, they are turned off. Only memory and speed are at stake, so a
/// kernel that refuses is reported and the server runs on.
fn apply_huge_pages(choice: HugePages) {
    if choice == HugePages::On {
        match hybridkv_media::return_heap_memory_in_whole_huge_pages() {
            Ok(huge_page_bytes) => {
                tracing::info!(huge_page_bytes, "transparent huge pages on: the heap gives memory back in whole huge pages");
                return;
            }
            Err(error) => tracing::warn!(%error, "transparent huge pages turned off: the heap cannot keep them whole"),
        }
    }
    if let Err(error) = hybridkv_media::disable_transparent_huge_pages() {
        tracing::warn!(%error, "cannot turn transparent huge pages off: resident memory may grow as khugepaged collapses freed memory");
    }
}

fn serve(args: ServeArgs) -> Result<(), String> {
    // First, while this is the only thread.
    apply_huge_pages(args.huge_pages);
    let config = engine_config(&args)?;
    let server = server_config(&args, &config)?;
    let database = Database::open(config).map_err(|error| format!("cannot open the database: {error}"))?;
    log_startup(&database);
    hybridkv_server::run(server, database, args.threads).map_err(|error| error.to_string())
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve(args),
        Command::Bench(args) => hybridkv_bench::run(args).map_err(|error| error.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("hybridkv: {message}");
            ExitCode::FAILURE
        }
    }
}
