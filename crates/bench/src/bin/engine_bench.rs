//! In-process benchmark of the storage engine (no network): get and put ops/s per placement for
//! 440-byte values, and restart time (warm, after kill -9, cold) for a number of keys.
//!
//! Prints markdown tables; `--results FILE` appends them, with the command line, to FILE.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
use hybridkv_bench::zipfian::{Zipfian, ZIPFIAN_THETA_DEFAULT};
use hybridkv_engine::{Config, Database, Durability, NamespaceConfig, RestartKind, Tier, MIB};
use rand::{Rng, SeedableRng};

#[derive(Parser, Debug)]
#[command(about = "In-process benchmark of the hybridkv storage engine")]
struct Args {
    /// Directory for pmem and ssd files (ext4 here); shmem files go under /dev/shm.
    #[arg(long, default_value = "/tmp/hybridkv-engine-bench")]
    dir: PathBuf,
    /// Keys loaded for the get/put measurement of each placement.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    #[arg(long, default_value_t = 440)]
    value_bytes: usize,
    /// Seconds of random gets per placement (single gets, then as long of batched gets).
    #[arg(long, default_value_t = 3.0)]
    get_seconds: f64,
    /// Keys per `get_many` call in the batched-get measurement.
    #[arg(long, default_value_t = 16)]
    get_batch_keys: usize,
    /// Key counts for the restart measurement (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1000000")]
    restart_keys: Vec<u64>,
    /// Skip the restart measurement.
    #[arg(long)]
    no_restart: bool,
    /// Also measure what one memory miss costs here (a chain of dependent loads over
    /// 512 MiB, small pages and huge pages): the ceiling it puts on single gets per core.
    #[arg(long)]
    memory_latency: bool,
    /// Also measure what touching fresh memory costs here: 1 GiB of new anonymous memory written
    /// one byte per 4 KiB page, timed per 2 MiB, with small pages and with huge pages (on a VM
    /// whose host backs guest memory on first use, each first touch is a fault to the host).
    #[arg(long)]
    first_touch: bool,
    /// Also measure what a device read costs the CPU here: random 4 KiB reads of a file opened
    /// with O_DIRECT through the device read queue (io_uring), 1, 4 and 16 per submission.
    #[arg(long)]
    device_read_cost: bool,
    /// Skip the get/put measurement.
    #[arg(long)]
    no_throughput: bool,
    /// Also run the cache study: an analytical pass (SCAN + GET with a filter and an aggregate)
    /// COLD and WARM for cache budgets of 1/8, 1/2 and 1× the data, and the full block scan.
    #[arg(long)]
    cache_scan: bool,
    /// Keys of the cache study.
    #[arg(long, default_value_t = 1_000_000)]
    cache_scan_keys: u64,
    /// Also run mix-70-30 (64-byte values) under a zipfian (0.99) key choice with 4× more data than
    /// cache, against the same with index and records in DRAM.
    #[arg(long)]
    zipf: bool,
    #[arg(long, default_value_t = 4_000_000)]
    zipf_keys: u64,
    /// Seconds measured per zipfian run (after as long a warm-up).
    #[arg(long, default_value_t = 10.0)]
    zipf_seconds: f64,
    /// Client threads of the zipfian runs (device reads of cache misses overlap across them).
    #[arg(long, default_value_t = 16)]
    zipf_threads: usize,
    /// Placements of the zipfian runs as INDEX/DATA (comma-separated); the first is the reference
    /// of the ratio column. Records off DRAM get a cache of 1/4 of the data, records in DRAM none
    /// (nor records on pmem on the msync fallback: the namespace runs without one there).
    #[arg(long, value_delimiter = ',', default_value = "dram/dram,pmem/ssd", value_parser = placement_arg)]
    zipf_placements: Vec<String>,
    /// Also measure the process's anonymous resident memory (RssAnon) after loading
    /// --cache-rss-keys keys of 64 bytes (index pmem, data ssd) and running the zipfian mix for
    /// --zipf-seconds, with a record cache of this many MiB (0: none). One budget per process, so
    /// that memory freed by another run does not count.
    #[arg(long)]
    cache_rss_mib: Option<u64>,
    #[arg(long, default_value_t = 1_000_000)]
    cache_rss_keys: u64,
    /// Where the cache study writes its plot (SVG).
    #[arg(long, default_value = "bench/results/cache-scan.svg")]
    plot: PathBuf,
    /// Placements as INDEX/DATA (comma-separated); default: all nine.
    #[arg(long, value_delimiter = ',', value_parser = placement_arg)]
    placements: Vec<String>,
    /// Keys the after-kill loader adds after its load (new keys: overwrites would let
    /// defragmentation checkpoint), just before it is killed: a log tail for the after-kill start
    /// to re-apply (when no checkpoint intervenes; the table says how many records were).
    #[arg(long, default_value_t = 0)]
    restart_tail_keys: u64,
    /// Restart placements as INDEX/DATA (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "pmem/ssd,shmem/pmem,pmem/dram", value_parser = placement_arg)]
    restart_placements: Vec<String>,
    /// Append the tables and the command line to this markdown file.
    #[arg(long)]
    results: Option<PathBuf>,
    /// Internal: load keys into DIR then wait to be killed (the after-kill measurement).
    #[arg(long, hide = true)]
    child_load: Option<String>,
}

/// A placement argument, INDEX/DATA, checked when the arguments are parsed: a namespace
/// refuses any other, and the benchmark would find out only once it came to that placement.
fn placement_arg(text: &str) -> Result<String, String> {
    let (index, data) = text.split_once('/').ok_or_else(|| format!("{text:?} is not INDEX/DATA"))?;
    let index_tier = Tier::parse(index).filter(|tier| matches!(tier, Tier::Dram | Tier::Shmem | Tier::Pmem));
    index_tier.ok_or_else(|| format!("{text:?}: the index goes on dram, shmem or pmem"))?;
    let data_tier = Tier::parse(data).filter(|tier| matches!(tier, Tier::Dram | Tier::Pmem | Tier::Ssd));
    data_tier.ok_or_else(|| format!("{text:?}: records go on dram, pmem or ssd"))?;
    Ok(text.to_string())
}

fn parse_placement(text: &str) -> (Tier, Tier) {
    let (index, data) = text.split_once('/').expect("placements are INDEX/DATA");
    (Tier::parse(index).expect("index tier"), Tier::parse(data).expect("data tier"))
}

fn namespace_config(index: Tier, data: Tier, keys: u64, value_bytes: usize, durability: Durability) -> NamespaceConfig {
    let mut config = NamespaceConfig::new("bench");
    config.index = index;
    config.data = data;
    config.journal = Tier::Ssd;
    config.durability = durability;
    let record_bytes = (40 + 16 + value_bytes as u64).next_multiple_of(8);
    config.data_bytes = ((keys * record_bytes * 2) / (64 * MIB) + 2) * 64 * MIB;
    config.index_bytes = (keys * 72 / MIB + 64) * MIB;
    config.checkpoint_interval_bytes = 256 * MIB;
    config.journal_segment_bytes = 64 * MIB;
    config
}

fn config_in(dir: &Path, namespace: NamespaceConfig) -> Config {
    let tag = dir.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    Config {
        data_dir: dir.to_path_buf(),
        shmem_dir: PathBuf::from(format!("/dev/shm/hybridkv-bench-{tag}")),
        direct_io: false,
        background_maintenance: true,
        databases: 1,
        namespaces: vec![namespace],
    }
}

fn fresh_dir(base: &Path, name: &str) -> PathBuf {
    let dir = base.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let tag = dir.file_name().unwrap().to_string_lossy().into_owned();
    let _ = std::fs::remove_dir_all(format!("/dev/shm/hybridkv-bench-{tag}"));
    std::fs::create_dir_all(&dir).expect("bench directory");
    dir
}

/// "key:" and 12 decimal digits, without allocating (the get loop measures the engine).
fn key(number: u64) -> [u8; 16] {
    let mut key = *b"key:000000000000";
    let mut rest = number;
    for position in (4..16).rev() {
        key[position] = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    key
}

fn load(database: &Database, keys: std::ops::Range<u64>, value_bytes: usize) -> f64 {
    let namespace = database.namespace(0).unwrap();
    let value = vec![b'v'; value_bytes];
    let started = Instant::now();
    let count = keys.end - keys.start;
    for number in keys {
        namespace.put(&key(number), &value, 0).expect("put");
    }
    count as f64 / started.elapsed().as_secs_f64()
}

fn random_gets(database: &Database, keys: u64, seconds: f64) -> f64 {
    let namespace = database.namespace(0).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let started = Instant::now();
    let mut done = 0u64;
    while started.elapsed().as_secs_f64() < seconds {
        for _ in 0..1000 {
            let found = namespace.get(&key(rng.gen_range(0..keys))).expect("get");
            assert!(found.is_some(), "every loaded key is found");
        }
        done += 1000;
    }
    done as f64 / started.elapsed().as_secs_f64()
}

/// Random keys read with `get_many`, `batch_keys` per call; keys read per second.
fn random_batched_gets(database: &Database, keys: u64, seconds: f64, batch_keys: usize) -> f64 {
    let namespace = database.namespace(0).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    let mut batch = vec![[0u8; 16]; batch_keys];
    let started = Instant::now();
    let mut done = 0u64;
    while started.elapsed().as_secs_f64() < seconds {
        for _ in 0..(1000 / batch_keys).max(1) {
            for slot in batch.iter_mut() {
                *slot = key(rng.gen_range(0..keys));
            }
            let names: Vec<&[u8]> = batch.iter().map(|name| name.as_slice()).collect();
            let found = namespace.get_many(&names).expect("get_many");
            assert!(found.iter().all(Option::is_some), "every loaded key is found");
            done += batch_keys as u64;
        }
    }
    done as f64 / started.elapsed().as_secs_f64()
}

fn throughput_table(args: &Args) -> String {
    let placements: Vec<(Tier, Tier)> = if args.placements.is_empty() {
        [Tier::Dram, Tier::Shmem, Tier::Pmem]
            .iter()
            .flat_map(|&index| [Tier::Dram, Tier::Pmem, Tier::Ssd].map(|data| (index, data)))
            .collect()
    } else {
        args.placements.iter().map(|text| parse_placement(text)).collect()
    };
    let mut table = format!(
        "Single get = one `get` call per key; batched get = `get_many` of {} random keys per call (memory misses of a batch overlapped), counted in keys read. Both on 1 thread.\n\n| index | data | put ops/s (1 thread, durability none) | single get ops/s | batched get keys/s | index bytes/key |\n|---|---|---|---|---|---|\n",
        args.get_batch_keys
    );
    let mut baseline_get = None;
    for (index, data) in placements {
        let dir = fresh_dir(&args.dir, &format!("tp-{index}-{data}"));
        let config = config_in(&dir, namespace_config(index, data, args.keys, args.value_bytes, Durability::None));
        let database = Database::open(config).expect("open");
        let puts = load(&database, 0..args.keys, args.value_bytes);
        database.checkpoint().expect("checkpoint");
        let gets = random_gets(&database, args.keys, args.get_seconds);
        let batched = random_batched_gets(&database, args.keys, args.get_seconds, args.get_batch_keys);
        let stats = database.namespace(0).unwrap().stats();
        let per_key = stats.index.used_bytes as f64 / args.keys as f64;
        let ratio = *baseline_get.get_or_insert(gets);
        table.push_str(&format!(
            "| {index} | {data} | {puts:.0} | {gets:.0} ({:.2}× dram/dram) | {batched:.0} | {per_key:.1} |\n",
            gets / ratio
        ));
        eprintln!("{index}/{data}: put {puts:.0}/s get {gets:.0}/s batched get {batched:.0}/s");
        database.close().expect("close");
        let _ = std::fs::remove_dir_all(&dir);
    }
    table
}

/// Opens the database and checks a sample of keys: the restart is over when they are served.
/// Returns the seconds, the kind of start and the records it replayed.
fn timed_open(config: &Config, keys: u64) -> (f64, RestartKind, u64) {
    let started = Instant::now();
    let database = Database::open(config.clone()).expect("reopen");
    let namespace = database.namespace(0).unwrap();
    for number in (0..keys).step_by((keys / 1000).max(1) as usize) {
        assert!(namespace.get(&key(number)).expect("get").is_some(), "key {number} missing after restart");
    }
    let seconds = started.elapsed().as_secs_f64();
    let report = database.restart_reports()[0].clone();
    database.close().expect("close");
    (seconds, report.kind, report.records_replayed)
}

fn restart_rows(args: &Args, keys: u64, placement: &str) -> String {
    let (index, data) = parse_placement(placement);
    let dir = fresh_dir(&args.dir, &format!("rs-{index}-{data}-{keys}"));
    let executable = std::env::current_exe().expect("own path");
    let mut child = std::process::Command::new(executable)
        .arg("--dir")
        .arg(&dir)
        .arg("--value-bytes")
        .arg(args.value_bytes.to_string())
        .arg("--restart-tail-keys")
        .arg(args.restart_tail_keys.to_string())
        .arg("--child-load")
        .arg(format!("{placement}:{keys}"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawning the loader");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.as_mut().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), "loaded", "the loader failed");
    // SAFETY: kill(2) on the child's own pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().expect("reaping the loader");
    let config = config_in(&dir, namespace_config(index, data, keys, args.value_bytes, Durability::Periodic));
    let (after_kill, kill_kind, tail_records) = timed_open(&config, keys);
    let (warm, warm_kind, _) = timed_open(&config, keys);
    let mut cold_config = config.clone();
    cold_config.namespaces[0].index = Tier::Dram;
    let (cold, cold_kind, _) = timed_open(&cold_config, keys);
    let _ = std::fs::remove_dir_all(&dir);
    let tag = dir.file_name().unwrap().to_string_lossy().into_owned();
    let _ = std::fs::remove_dir_all(format!("/dev/shm/hybridkv-bench-{tag}"));
    eprintln!("{placement} {keys}: after-kill {after_kill:.3}s warm {warm:.3}s cold {cold:.3}s");
    format!(
        "| {keys} | {index} | {data} | {warm:.3} ({}) | {after_kill:.3} ({}, {tail_records} records replayed) | {cold:.3} ({}) | {:.0} |\n",
        warm_kind.name(),
        kill_kind.name(),
        cold_kind.name(),
        keys as f64 / cold
    )
}

fn child_load(args: &Args, spec: &str) -> ! {
    let (placement, keys) = spec.split_once(':').expect("placement:keys");
    let (index, data) = parse_placement(placement);
    let keys: u64 = keys.parse().expect("key count");
    let config = config_in(&args.dir, namespace_config(index, data, keys, args.value_bytes, Durability::Periodic));
    let database = Database::open(config).expect("open");
    load(&database, 0..keys, args.value_bytes);
    load(&database, keys..keys + args.restart_tail_keys, args.value_bytes);
    // Everything durable (as an acknowledged `always` write would be), then killed mid-life:
    // the index is not marked clean and the log tail since the last checkpoint is replayed.
    let namespace = database.namespace(0).unwrap();
    namespace.put(b"sync-marker", b"1", 0).expect("put");
    std::thread::sleep(Duration::from_millis(1500));
    println!("loaded");
    std::io::stdout().flush().unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

fn main() {
    tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter("warn").init();
    let args = Args::parse();
    if let Some(spec) = &args.child_load {
        child_load(&args, spec);
    }
    std::fs::create_dir_all(&args.dir).expect("bench directory");
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let mut report = format!("### Engine, in process ({})\n\n```\n{command}\n```\n\n", today());
    if !args.no_throughput {
        report.push_str(&throughput_table(&args));
    }
    if args.memory_latency {
        report.push_str(&memory_latency_table());
    }
    if args.first_touch {
        report.push_str(&first_touch_table());
    }
    if args.device_read_cost {
        report.push_str(&device_read_cost_table(&args.dir));
    }
    if args.cache_scan {
        report.push_str(&cache_scan_table(&args));
    }
    if args.zipf {
        report.push_str(&zipf_table(&args));
    }
    if let Some(cache_mib) = args.cache_rss_mib {
        report.push_str(&cache_rss_row(&args, cache_mib));
    }
    if !args.no_restart {
        report.push_str("\nRestart: seconds until a sample of 1,000 keys is served (kind in parentheses; after kill -9, also the records of the log tail written since the last checkpoint, which the start re-applied); cold rate in records/s.\n\n");
        report.push_str("| keys | index | data | warm s | after kill -9 s | cold s | cold records/s |\n|---|---|---|---|---|---|---|\n");
        for &keys in &args.restart_keys {
            for placement in &args.restart_placements {
                report.push_str(&restart_rows(&args, keys, placement));
            }
        }
    }
    println!("{report}");
    if let Some(path) = &args.results {
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).expect("results file");
        writeln!(file, "{report}").expect("writing results");
    }
}

/// The two kinds of pages the memory measurements compare: the table's name, and whether the
/// memory is advised `MADV_HUGEPAGE` (else `MADV_NOHUGEPAGE`).
const PAGE_KINDS: [(&str, bool); 2] = [("small (4 KiB)", false), ("huge (2 MiB, MADV_HUGEPAGE)", true)];

fn fresh_anonymous_memory(len_bytes: usize, huge_pages: bool) -> memmap2::MmapMut {
    let memory = memmap2::MmapOptions::new().len(len_bytes).map_anon().expect("anonymous memory");
    memory.advise(if huge_pages { memmap2::Advice::HugePage } else { memmap2::Advice::NoHugePage }).expect("madvise");
    memory
}

/// Memory chased by `--memory-latency`: far beyond the CPU caches, as the index and records of
/// the get measurement are.
const LATENCY_CHASE_BYTES: usize = 512 << 20;
const CACHE_LINE_BYTES: usize = 64;
const LATENCY_CHASE_LOADS: u64 = 20_000_000;

/// Nanoseconds per load of a chain of dependent loads, each from a random cache line of
/// LATENCY_CHASE_BYTES: each load reads the number of the next line, so no two loads overlap,
/// and each costs one memory miss (and, with small pages, mostly a TLB miss too).
fn dependent_load_ns(huge_pages: bool) -> f64 {
    let lines = LATENCY_CHASE_BYTES / CACHE_LINE_BYTES;
    let mut memory = fresh_anonymous_memory(LATENCY_CHASE_BYTES, huge_pages);
    // Sattolo's algorithm: a single cycle through every line, so the chain never closes early.
    let mut next_line: Vec<u32> = (0..lines as u32).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    for line in (1..lines).rev() {
        next_line.swap(line, rng.gen_range(0..line));
    }
    for (line, next) in next_line.iter().enumerate() {
        memory[line * CACHE_LINE_BYTES..][..4].copy_from_slice(&next.to_le_bytes());
    }
    let mut line = 0usize;
    let started = Instant::now();
    for _ in 0..LATENCY_CHASE_LOADS {
        let at = line * CACHE_LINE_BYTES;
        line = u32::from_le_bytes(memory[at..at + 4].try_into().expect("4 bytes")) as usize;
    }
    let elapsed = started.elapsed();
    std::hint::black_box(line);
    elapsed.as_nanos() as f64 / LATENCY_CHASE_LOADS as f64
}

/// `header` (a markdown table's text, title and separator rows) and a row per kind of page: its
/// name and the cells `row` gives for it.
fn table_per_page_kind(header: String, row: impl Fn(bool) -> String) -> String {
    let mut table = header;
    for (name, huge_pages) in PAGE_KINDS {
        table.push_str(&format!("| {name} | {} |\n", row(huge_pages)));
    }
    table
}

fn memory_latency_table() -> String {
    let header = format!(
        "\nMemory latency: a chain of {LATENCY_CHASE_LOADS} dependent loads, each from a random 64-byte line of {} MiB of anonymous memory. A single get with index and records in memory makes at least two such loads one after the other (the key's index slot, then the record it names), so one core serves at most 1 / (2 × latency) single gets per second, before any other work.\n\n| pages | ns per dependent load | single gets/s per core at most |\n|---|---|---|\n",
        LATENCY_CHASE_BYTES >> 20
    );
    table_per_page_kind(header, |huge_pages| {
        let nanoseconds = dependent_load_ns(huge_pages);
        format!("{nanoseconds:.1} | {:.0}", 1e9 / (2.0 * nanoseconds))
    })
}

/// Fresh memory touched by `--first-touch`, and the step it is timed by (a huge page).
const FIRST_TOUCH_BYTES: usize = 1 << 30;
const FIRST_TOUCH_STEP_BYTES: usize = 2 << 20;
const SMALL_PAGE_BYTES: usize = 4096;

/// Milliseconds to touch each FIRST_TOUCH_STEP_BYTES of fresh anonymous memory (one byte per
/// small page, so every page faults once), in order: with huge pages, one fault per step.
fn first_touch_step_ms(huge_pages: bool) -> Vec<f64> {
    let mut memory = fresh_anonymous_memory(FIRST_TOUCH_BYTES, huge_pages);
    memory
        .chunks_mut(FIRST_TOUCH_STEP_BYTES)
        .map(|step| {
            let started = Instant::now();
            for page in step.chunks_mut(SMALL_PAGE_BYTES) {
                page[0] = 1;
            }
            std::hint::black_box(&step[0]);
            started.elapsed().as_secs_f64() * 1e3
        })
        .collect()
}

fn first_touch_table() -> String {
    let header = format!(
        "\nFirst touch: {} MiB of fresh anonymous memory written one byte per 4 KiB page, timed per 2 MiB (a huge page). Each first touch faults; a huge page is one fault for all 2 MiB, so its cost is one stall for whichever thread takes it.\n\n| pages | ms per 2 MiB, mean | ms per 2 MiB, max |\n|---|---|---|\n",
        FIRST_TOUCH_BYTES >> 20
    );
    table_per_page_kind(header, |huge_pages| {
        let steps = first_touch_step_ms(huge_pages);
        let mean = steps.iter().sum::<f64>() / steps.len() as f64;
        let max = steps.iter().copied().fold(0.0, f64::max);
        format!("{mean:.3} | {max:.3}")
    })
}

/// The file `--device-read-cost` reads from, and the reads per batch size.
const DEVICE_READ_FILE_BYTES: u64 = 256 << 20;
const DEVICE_READS_MEASURED: usize = 8_000;

/// This process's user and system CPU time so far, in microseconds.
fn process_cpu_us() -> f64 {
    // SAFETY: getrusage fills the zeroed struct we pass and keeps no pointer to it.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let microseconds = |time: libc::timeval| time.tv_sec as f64 * 1e6 + time.tv_usec as f64;
    microseconds(usage.ru_utime) + microseconds(usage.ru_stime)
}

/// Microseconds of wall time and of this process's CPU per read, reading DEVICE_READS_MEASURED
/// random pages of `file` in submissions of `batch` reads, each batch awaited before the next.
fn device_read_cost(queue: &hybridkv_media::DeviceReadQueue, batch: usize) -> (f64, f64) {
    use std::os::fd::AsRawFd;
    let pages = DEVICE_READ_FILE_BYTES / hybridkv_media::PAGE_BYTES;
    let mut rng = rand::rngs::StdRng::seed_from_u64(batch as u64);
    let (started, cpu_started) = (Instant::now(), process_cpu_us());
    let mut completed = Vec::new();
    for _ in 0..DEVICE_READS_MEASURED / batch {
        let reads: Vec<hybridkv_media::DeviceRead> = (0..batch as u64)
            .map(|token| hybridkv_media::DeviceRead { offset: rng.gen_range(0..pages) * hybridkv_media::PAGE_BYTES, len: 4096, token })
            .collect();
        assert_eq!(queue.start(&reads), batch, "the queue takes a batch");
        completed.clear();
        while completed.len() < batch {
            let mut poll = libc::pollfd { fd: queue.completion_fd().as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd, waited for at most 5 s.
            unsafe { libc::poll(&mut poll, 1, 5000) };
            queue.take_completed(&mut completed);
        }
        assert!(completed.iter().all(|read| read.result.is_ok()), "device reads succeed");
    }
    let reads = (DEVICE_READS_MEASURED / batch * batch) as f64;
    (started.elapsed().as_secs_f64() * 1e6 / reads, (process_cpu_us() - cpu_started) / reads)
}

fn device_read_cost_table(dir: &Path) -> String {
    use hybridkv_media::Medium;
    let path = dir.join("device-read-cost");
    let file = hybridkv_media::BlockFile::open(&path, DEVICE_READ_FILE_BYTES, true).expect("the block file");
    let Some(queue) = file.device_reads() else {
        return "\nDevice read cost: no device read queue here (O_DIRECT or io_uring refused).\n".to_string();
    };
    let chunk = vec![7u8; 8 << 20];
    for offset in (0..DEVICE_READ_FILE_BYTES).step_by(chunk.len()) {
        file.write_at(offset, &chunk).expect("filling the file");
    }
    file.persist(0, DEVICE_READ_FILE_BYTES).expect("syncing the file");
    let mut table = format!(
        "\nDevice read cost: {DEVICE_READS_MEASURED} random 4 KiB reads of a {} MiB file opened with O_DIRECT, through the device read queue (io_uring), in submissions of 1, 4 and 16 reads, each awaited (poll on the completion eventfd) before the next; CPU is this process's user and system time (getrusage).\n\n| reads per submission | wall µs per read | CPU µs per read |\n|---|---|---|\n",
        DEVICE_READ_FILE_BYTES >> 20
    );
    for batch in [1, 4, 16] {
        let (wall, cpu) = device_read_cost(queue, batch);
        table.push_str(&format!("| {batch} | {wall:.1} | {cpu:.1} |\n"));
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    table
}

fn today() -> String {
    let output = std::process::Command::new("date").arg("-u").arg("+%Y-%m-%d %H:%M UTC").output();
    output.map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string()).unwrap_or_default()
}

/// The benchmarks' measure of the data per record, which cache budgets are fractions of: the
/// record plus 96 bytes (the cache's flat per-entry charge before it charged its maps and queues
/// as allocated), kept so that budgets stay comparable across runs. The cache now charges more
/// per entry, so a budget of 1/4 of this data holds somewhat fewer than 1/4 of the records.
fn cached_record_bytes(value_bytes: usize) -> u64 {
    const RECORD_HEADER_BYTES: u64 = 40;
    const KEY_BYTES: u64 = 16;
    const DATA_BYTES_PER_RECORD_EXTRA: u64 = 96;
    (RECORD_HEADER_BYTES + KEY_BYTES + value_bytes as u64).next_multiple_of(8) + DATA_BYTES_PER_RECORD_EXTRA
}

/// One analytical pass: every key by SCAN, its value by GET, a filter and an aggregate.
fn analytical_pass(database: &Database) -> (f64, u64) {
    let namespace = database.namespace(0).unwrap();
    let started = Instant::now();
    let (mut cursor, mut matched_bytes) = (0, 0u64);
    loop {
        let page = namespace.scan(cursor, 1000).expect("scan");
        for key in &page.keys {
            let value = namespace.get(key).expect("get").expect("scanned keys exist");
            if key.last() == Some(&b'7') {
                matched_bytes += value.bytes.len() as u64;
            }
        }
        cursor = page.next_cursor;
        if cursor == 0 {
            return (started.elapsed().as_secs_f64(), matched_bytes);
        }
    }
}

fn cache_scan_table(args: &Args) -> String {
    let keys = args.cache_scan_keys;
    let data_bytes = keys * cached_record_bytes(args.value_bytes);
    let dir = fresh_dir(&args.dir, "cache-scan");
    let mut namespace = namespace_config(Tier::Pmem, Tier::Ssd, keys, args.value_bytes, Durability::Periodic);
    namespace.cache_bytes = data_bytes / 8;
    let mut config = config_in(&dir, namespace);
    config.direct_io = true;
    let database = Database::open(config.clone()).expect("open");
    load(&database, 0..keys, args.value_bytes);
    database.close().expect("close");
    let mut table = format!(
        "\nCache study: {keys} keys of {} bytes on ssd (O_DIRECT), index in pmem; \"data\" = {data_bytes} bytes (record + {} bytes each). The cache is S3-FIFO in up to 64 shards (one per 4 MiB) under one byte budget. An analytical pass = SCAN every key, GET its value, filter, aggregate. COLD = cache emptied; WARM = the pass repeated at once. Full scan = whole-block sequential reads, no cache.\n\n| cache / data | cache bytes | COLD s | WARM s | WARM speed-up | WARM hit ratio | full scan s |\n|---|---|---|---|---|---|---|\n",
        args.value_bytes,
        cached_record_bytes(args.value_bytes) - (40 + 16 + args.value_bytes as u64).next_multiple_of(8)
    );
    let mut points = Vec::new();
    for (label, fraction) in [("1/8", 0.125), ("1/2", 0.5), ("1", 1.0), ("1.25", 1.25)] {
        config.namespaces[0].cache_bytes = (data_bytes as f64 * fraction) as u64;
        let database = Database::open(config.clone()).expect("reopen");
        database.clear_caches();
        let (cold, cold_matched) = analytical_pass(&database);
        let before = database.namespace(0).unwrap().stats().cache.unwrap();
        let (warm, warm_matched) = analytical_pass(&database);
        assert_eq!(cold_matched, warm_matched, "both passes aggregate the same data");
        let after = database.namespace(0).unwrap().stats().cache.unwrap();
        let hit_ratio = (after.hits - before.hits) as f64 / ((after.hits + after.misses) - (before.hits + before.misses)).max(1) as f64;
        let started = Instant::now();
        let scanned = database.namespace(0).unwrap().scan_records(|_, _| true).expect("full scan");
        assert_eq!(scanned.records_visited, keys);
        let full = started.elapsed().as_secs_f64();
        eprintln!("cache {label}: cold {cold:.2}s warm {warm:.2}s full {full:.2}s");
        table.push_str(&format!(
            "| {label} | {} | {cold:.2} | {warm:.2} | {:.1}× | {:.0}% | {full:.2} |\n",
            config.namespaces[0].cache_bytes,
            cold / warm,
            hit_ratio * 100.0
        ));
        points.push((fraction, cold, warm));
        database.close().expect("close");
    }
    let _ = std::fs::remove_dir_all(&dir);
    match write_scan_plot(&args.plot, &points) {
        Ok(()) => table.push_str(&format!("\n![elapsed time against cache size]({})\n", plot_link(&args.plot))),
        Err(error) => eprintln!("plot not written: {error}"),
    }
    table
}

/// The plot's path as seen from bench/RESULTS.md.
fn plot_link(plot: &Path) -> String {
    plot.strip_prefix("bench").map_or_else(|_| plot.display().to_string(), |rest| rest.display().to_string())
}

/// A line chart of COLD and WARM elapsed time against the cache fraction, as SVG.
fn write_scan_plot(path: &Path, points: &[(f64, f64, f64)]) -> std::io::Result<()> {
    const WIDTH: f64 = 560.0;
    const HEIGHT: f64 = 320.0;
    const MARGIN: f64 = 50.0;
    let y_max = points.iter().map(|&(_, cold, warm)| cold.max(warm)).fold(0.0, f64::max) * 1.1;
    let x_max = points.iter().map(|&(fraction, _, _)| fraction).fold(0.0, f64::max);
    let x = |fraction: f64| MARGIN + fraction / x_max * (WIDTH - 2.0 * MARGIN);
    let y = |seconds: f64| HEIGHT - MARGIN - seconds / y_max * (HEIGHT - 2.0 * MARGIN);
    let line = |pick: fn(&(f64, f64, f64)) -> f64| {
        points.iter().map(|point| format!("{:.1},{:.1}", x(point.0), y(pick(point)))).collect::<Vec<_>>().join(" ")
    };
    let mut svg = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{HEIGHT}' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n<line x1='{MARGIN}' y1='{b}' x2='{r}' y2='{b}' stroke='black'/>\n<line x1='{MARGIN}' y1='{MARGIN}' x2='{MARGIN}' y2='{b}' stroke='black'/>\n<text x='{cx}' y='{t}' text-anchor='middle'>cache size / data size</text>\n<text x='12' y='{MARGIN}'>s</text>\n",
        b = HEIGHT - MARGIN,
        r = WIDTH - MARGIN,
        cx = WIDTH / 2.0,
        t = HEIGHT - 12.0
    );
    svg.push_str(&format!("<polyline points='{}' fill='none' stroke='#1f77b4' stroke-width='2'/>\n", line(|p| p.1)));
    svg.push_str(&format!("<polyline points='{}' fill='none' stroke='#d62728' stroke-width='2'/>\n", line(|p| p.2)));
    for &(fraction, cold, warm) in points {
        svg.push_str(&format!("<text x='{:.1}' y='{:.1}' text-anchor='middle'>{fraction}</text>\n", x(fraction), HEIGHT - MARGIN + 16.0));
        svg.push_str(&format!("<text x='{:.1}' y='{:.1}' fill='#1f77b4'>{cold:.2}</text>\n", x(fraction) + 4.0, y(cold) - 4.0));
        svg.push_str(&format!("<text x='{:.1}' y='{:.1}' fill='#d62728'>{warm:.2}</text>\n", x(fraction) + 4.0, y(warm) + 14.0));
    }
    svg.push_str(&format!("<text x='{}' y='20' fill='#1f77b4'>COLD</text><text x='{}' y='20' fill='#d62728'>WARM</text>\n</svg>\n", WIDTH - 160.0, WIDTH - 100.0));
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, svg)
}

/// Closed-loop 70% reads / 30% writes of 64-byte values with zipfian keys, from `threads`
/// threads; ops/s.
fn mixed_zipfian(database: &Database, zipfian: &Zipfian, seconds: f64, threads: usize) -> f64 {
    let namespace = database.namespace(0).unwrap();
    let started = Instant::now();
    let done: u64 = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|thread| {
                scope.spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(9 + thread as u64);
                    let value = vec![b'z'; 64];
                    let mut done = 0u64;
                    while started.elapsed().as_secs_f64() < seconds {
                        for _ in 0..100 {
                            let key = key(zipfian.sample(&mut rng));
                            if rng.gen_range(0..10) < 7 {
                                namespace.get(&key).expect("get");
                            } else {
                                namespace.put(&key, &value, 0).expect("put");
                            }
                        }
                        done += 100;
                    }
                    done
                })
            })
            .collect();
        workers.into_iter().map(|worker| worker.join().expect("worker")).sum()
    });
    done as f64 / started.elapsed().as_secs_f64()
}

fn zipf_table(args: &Args) -> String {
    const VALUE_BYTES: usize = 64;
    let keys = args.zipf_keys;
    let zipfian = Zipfian::new(keys, ZIPFIAN_THETA_DEFAULT);
    let data_bytes = keys * cached_record_bytes(VALUE_BYTES);
    let mut table = format!(
        "\nmix-70-30, in process, {} threads: {keys} keys of {VALUE_BYTES} bytes, zipfian 0.99, durability periodic; cache budget 1/4 of the data (record + 96 bytes each); {:.0} s warm-up then {:.0} s measured. Hit ratio = record-cache hits / lookups of the gets measured (misses read the device).\n\n| placement | cache bytes | ops/s | ratio to all in DRAM | cache hit ratio |\n|---|---|---|---|---|\n",
        args.zipf_threads, args.zipf_seconds, args.zipf_seconds
    );
    let mut baseline = None;
    for placement in &args.zipf_placements {
        let (index, data) = parse_placement(placement);
        let cache_bytes = if data == Tier::Dram { 0 } else { data_bytes / 4 };
        let dir = fresh_dir(&args.dir, &format!("zipf-{index}-{data}"));
        let mut namespace = namespace_config(index, data, keys, VALUE_BYTES, Durability::Periodic);
        namespace.cache_bytes = cache_bytes;
        let mut config = config_in(&dir, namespace);
        config.direct_io = true;
        let database = Database::open(config).expect("open");
        let load_rate = load(&database, 0..keys, VALUE_BYTES);
        eprintln!("zipf {index}/{data}: loaded at {load_rate:.0} puts/s; warm-up then measurement");
        mixed_zipfian(&database, &zipfian, args.zipf_seconds, args.zipf_threads);
        let before = database.namespace(0).unwrap().stats().cache;
        let ops = mixed_zipfian(&database, &zipfian, args.zipf_seconds, args.zipf_threads);
        let after = database.namespace(0).unwrap().stats().cache;
        let hit_ratio = match (before, after) {
            (Some(before), Some(after)) => {
                let lookups = (after.hits + after.misses) - (before.hits + before.misses);
                format!("{:.1}%", (after.hits - before.hits) as f64 * 100.0 / lookups.max(1) as f64)
            }
            _ => "no cache".to_string(),
        };
        let reference = *baseline.get_or_insert(ops);
        eprintln!("zipf {index}/{data}: {ops:.0} ops/s, cache hit ratio {hit_ratio}");
        table.push_str(&format!("| index {index}, data {data} | {cache_bytes} | {ops:.0} | {:.2} | {hit_ratio} |\n", ops / reference));
        database.close().expect("close");
        let _ = std::fs::remove_dir_all(&dir);
    }
    table
}

/// RssAnon of this process, in bytes.
fn anonymous_resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status.lines().find(|line| line.starts_with("RssAnon:")).expect("RssAnon line");
    line.split_whitespace().nth(1).and_then(|kib| kib.parse::<u64>().ok()).expect("RssAnon in kB") * 1024
}

fn cache_rss_row(args: &Args, cache_mib: u64) -> String {
    const VALUE_BYTES: usize = 64;
    let keys = args.cache_rss_keys;
    let dir = fresh_dir(&args.dir, "cache-rss");
    let mut namespace = namespace_config(Tier::Pmem, Tier::Ssd, keys, VALUE_BYTES, Durability::Periodic);
    namespace.cache_bytes = cache_mib * MIB;
    let mut config = config_in(&dir, namespace);
    config.direct_io = true;
    let started = anonymous_resident_bytes();
    let database = Database::open(config).expect("open");
    load(&database, 0..keys, VALUE_BYTES);
    let loaded = anonymous_resident_bytes();
    mixed_zipfian(&database, &Zipfian::new(keys, ZIPFIAN_THETA_DEFAULT), args.zipf_seconds, args.zipf_threads);
    let ran = anonymous_resident_bytes();
    let cache = database.namespace(0).unwrap().stats().cache;
    let used = cache.map_or(0, |cache| cache.used_bytes);
    database.close().expect("close");
    let _ = std::fs::remove_dir_all(&dir);
    let mib = |bytes: u64| bytes as f64 / MIB as f64;
    eprintln!("cache {cache_mib} MiB: RssAnon {:.1} -> {:.1} -> {:.1} MiB, cache charged {:.1} MiB", mib(started), mib(loaded), mib(ran), mib(used));
    format!(
        "\nRecord cache memory: {keys} keys of {VALUE_BYTES} bytes, index pmem, data ssd (O_DIRECT), zipfian 0.99 mix-70-30 for {:.0} s on {} threads; RssAnon of the process (the pmem index is a file mapping, not counted).\n\n| cache budget MiB | RssAnon at open MiB | after load MiB | after the mix MiB | cache charged MiB |\n|---|---|---|---|---|\n| {cache_mib} | {:.1} | {:.1} | {:.1} | {:.1} |\n",
        args.zipf_seconds,
        args.zipf_threads,
        mib(started),
        mib(loaded),
        mib(ran),
        mib(used)
    )
}
