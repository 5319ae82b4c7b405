//! In-process benchmark of the storage engine (no network): get and put ops/s per placement for
//! 440-byte values, and restart time (warm, after kill -9, cold) for a number of keys.
//!
//! Prints markdown tables; `--results FILE` appends them, with the command line, to FILE.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
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
    /// Seconds of random gets per placement.
    #[arg(long, default_value_t = 3.0)]
    get_seconds: f64,
    /// Key counts for the restart measurement (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1000000")]
    restart_keys: Vec<u64>,
    /// Skip the restart measurement.
    #[arg(long)]
    no_restart: bool,
    /// Skip the get/put measurement.
    #[arg(long)]
    no_throughput: bool,
    /// Placements as INDEX/DATA (comma-separated); default: all nine.
    #[arg(long, value_delimiter = ',')]
    placements: Vec<String>,
    /// Restart placements as INDEX/DATA (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "pmem/ssd,shmem/pmem,pmem/dram")]
    restart_placements: Vec<String>,
    /// Append the tables and the command line to this markdown file.
    #[arg(long)]
    results: Option<PathBuf>,
    /// Internal: load keys into DIR then wait to be killed (the after-kill measurement).
    #[arg(long, hide = true)]
    child_load: Option<String>,
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
    config.data_bytes = ((keys * record_bytes * 3 / 2) / (64 * MIB) + 2) * 64 * MIB;
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

fn load(database: &Database, keys: u64, value_bytes: usize) -> f64 {
    let namespace = database.namespace(0).unwrap();
    let value = vec![b'v'; value_bytes];
    let started = Instant::now();
    for number in 0..keys {
        namespace.put(&key(number), &value, 0).expect("put");
    }
    keys as f64 / started.elapsed().as_secs_f64()
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
        "| index | data | put ops/s (1 thread, durability none) | get ops/s (1 thread) | index bytes/key |\n|---|---|---|---|---|\n"
    );
    let mut baseline_get = None;
    for (index, data) in placements {
        let dir = fresh_dir(&args.dir, &format!("tp-{index}-{data}"));
        let config = config_in(&dir, namespace_config(index, data, args.keys, args.value_bytes, Durability::None));
        let database = Database::open(config).expect("open");
        let puts = load(&database, args.keys, args.value_bytes);
        database.checkpoint().expect("checkpoint");
        let gets = random_gets(&database, args.keys, args.get_seconds);
        let stats = database.namespace(0).unwrap().stats();
        let per_key = stats.index.used_bytes as f64 / args.keys as f64;
        let ratio = *baseline_get.get_or_insert(gets);
        table.push_str(&format!(
            "| {index} | {data} | {puts:.0} | {gets:.0} ({:.2}× dram/dram) | {per_key:.1} |\n",
            gets / ratio
        ));
        eprintln!("{index}/{data}: put {puts:.0}/s get {gets:.0}/s");
        database.close().expect("close");
        let _ = std::fs::remove_dir_all(&dir);
    }
    table
}

/// Opens the database and checks a sample of keys: the restart is over when they are served.
fn timed_open(config: &Config, keys: u64) -> (f64, RestartKind) {
    let started = Instant::now();
    let database = Database::open(config.clone()).expect("reopen");
    let namespace = database.namespace(0).unwrap();
    for number in (0..keys).step_by((keys / 1000).max(1) as usize) {
        assert!(namespace.get(&key(number)).expect("get").is_some(), "key {number} missing after restart");
    }
    let seconds = started.elapsed().as_secs_f64();
    let kind = database.restart_reports()[0].kind;
    database.close().expect("close");
    (seconds, kind)
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
    let (after_kill, kill_kind) = timed_open(&config, keys);
    let (warm, warm_kind) = timed_open(&config, keys);
    let mut cold_config = config.clone();
    cold_config.namespaces[0].index = Tier::Dram;
    let (cold, cold_kind) = timed_open(&cold_config, keys);
    let _ = std::fs::remove_dir_all(&dir);
    let tag = dir.file_name().unwrap().to_string_lossy().into_owned();
    let _ = std::fs::remove_dir_all(format!("/dev/shm/hybridkv-bench-{tag}"));
    eprintln!("{placement} {keys}: after-kill {after_kill:.3}s warm {warm:.3}s cold {cold:.3}s");
    format!(
        "| {keys} | {index} | {data} | {warm:.3} ({}) | {after_kill:.3} ({}) | {cold:.3} ({}) | {:.0} |\n",
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
    load(&database, keys, args.value_bytes);
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
    if !args.no_restart {
        report.push_str("\nRestart: seconds until a sample of 1,000 keys is served (kind in parentheses); cold rate in records/s.\n\n");
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

fn today() -> String {
    let output = std::process::Command::new("date").arg("-u").arg("+%Y-%m-%d %H:%M UTC").output();
    output.map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string()).unwrap_or_default()
}
