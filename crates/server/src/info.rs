//! INFO sections and the same figures in Prometheus text format.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use hybridkv_engine::{NamespaceStats, TierUsage};
use hybridkv_media::{cpu_times, CpuOf};

use crate::command_stats::{CommandCounts, LATENCY_PERCENTILES_REPORTED};
use crate::pubsub::Kind;
use crate::shared::Shared;

/// The Redis version whose commands and replies hybridkv follows (clients gate features on it).
pub const REDIS_COMPATIBLE_VERSION: &str = "7.0.0";

pub const SECTIONS: &[&str] =
    &["server", "clients", "memory", "persistence", "stats", "replication", "cpu", "modules", "commandstats", "errorstats", "latencystats", "cluster", "keyspace"];
/// Sections that INFO without arguments (or `default`) leaves out, as Redis does.
const NOT_DEFAULT_SECTIONS: &[&str] = &["commandstats", "latencystats"];

/// INFO's text for the requested sections (none or "default": all but NOT_DEFAULT_SECTIONS;
/// "all"/"everything": all).
pub fn info_text(shared: &Shared, requested: &[String]) -> String {
    let all = requested.iter().any(|section| matches!(section.as_str(), "all" | "everything"));
    let default = requested.is_empty() || requested.iter().any(|section| section == "default");
    let wanted = |section: &str| all || (default && !NOT_DEFAULT_SECTIONS.contains(&section)) || requested.iter().any(|wanted| wanted == section);
    let (numbers, stats): (Vec<usize>, Vec<NamespaceStats>) =
        shared.database.namespaces().map(|(number, namespace)| (number, namespace.stats())).unzip();
    let mut text = String::new();
    for section in SECTIONS {
        if !wanted(section) {
            continue;
        }
        if !text.is_empty() {
            text.push_str("\r\n");
        }
        let _ = match *section {
            "server" => server_section(shared, &mut text),
            "clients" => clients_section(shared, &mut text),
            "memory" => memory_section(&stats, &mut text),
            "persistence" => persistence_section(shared, &stats, &mut text),
            "stats" => stats_section(shared, &stats, &mut text),
            "replication" => replication_section(shared, &mut text),
            "cpu" => cpu_section(&mut text),
            "commandstats" => shared.command_stats.write_commandstats(&mut text),
            "errorstats" => shared.command_stats.write_errorstats(&mut text),
            "latencystats" => shared.command_stats.write_latencystats(&mut text),
            "cluster" => writeln!(text, "# Cluster\r\ncluster_enabled:0\r"),
            // No modules can be loaded: the section is there, empty, as in Redis without any.
            "modules" => writeln!(text, "# Modules\r"),
            _ => keyspace_section(&numbers, &stats, &mut text),
        };
    }
    text
}

fn server_section(shared: &Shared, text: &mut String) -> std::fmt::Result {
    let uptime = shared.started.elapsed().as_secs();
    writeln!(text, "# Server\r")?;
    writeln!(text, "redis_version:{REDIS_COMPATIBLE_VERSION}\r")?;
    writeln!(text, "hybridkv_version:{}\r", env!("CARGO_PKG_VERSION"))?;
    writeln!(text, "redis_mode:standalone\r")?;
    writeln!(text, "os:{} {}\r", std::env::consts::OS, std::env::consts::ARCH)?;
    writeln!(text, "process_id:{}\r", std::process::id())?;
    writeln!(text, "run_id:{}\r", shared.run_id)?;
    writeln!(text, "tcp_port:{}\r", shared.config.port)?;
    writeln!(text, "uptime_in_seconds:{uptime}\r")?;
    writeln!(text, "uptime_in_days:{}\r", uptime / 86_400)?;
    writeln!(text, "executable_threads:{}\r", std::thread::available_parallelism().map_or(1, |count| count.get()))?;
    writeln!(text, "engine_call_mode:{:?}\r", shared.config.engine_call_mode)
}

/// A primary without replicas, as Redis describes one (the replication ID is the run ID: there is
/// no replication history to name).
fn replication_section(shared: &Shared, text: &mut String) -> std::fmt::Result {
    writeln!(text, "# Replication\r")?;
    writeln!(text, "role:master\r")?;
    writeln!(text, "connected_slaves:0\r")?;
    writeln!(text, "master_failover_state:no-failover\r")?;
    writeln!(text, "master_replid:{}\r", shared.run_id)?;
    writeln!(text, "master_replid2:{}\r", "0".repeat(40))?;
    writeln!(text, "master_repl_offset:0\r")?;
    writeln!(text, "second_repl_offset:-1\r")?;
    writeln!(text, "repl_backlog_active:0\r")?;
    writeln!(text, "repl_backlog_size:0\r")?;
    writeln!(text, "repl_backlog_first_byte_offset:0\r")?;
    writeln!(text, "repl_backlog_histlen:0\r")
}

/// CPU seconds of the process (every thread) and of its waited-for children, as Redis prints them.
fn cpu_section(text: &mut String) -> std::fmt::Result {
    writeln!(text, "# CPU\r")?;
    for (of, suffix) in [(CpuOf::ThisProcess, ""), (CpuOf::Children, "_children")] {
        let times = cpu_times(of).unwrap_or_default();
        writeln!(text, "used_cpu_sys{suffix}:{}.{:06}\r", times.system.as_secs(), times.system.subsec_micros())?;
        writeln!(text, "used_cpu_user{suffix}:{}.{:06}\r", times.user.as_secs(), times.user.subsec_micros())?;
    }
    Ok(())
}

fn clients_section(shared: &Shared, text: &mut String) -> std::fmt::Result {
    writeln!(text, "# Clients\r")?;
    writeln!(text, "connected_clients:{}\r", shared.clients.count())?;
    writeln!(text, "blocked_clients:{}\r", shared.stats.blocked_clients.load(Ordering::Relaxed))?;
    writeln!(text, "tracking_clients:{}\r", shared.tracking.counts().clients)?;
    writeln!(text, "maxclients:{}\r", shared.max_clients.load(Ordering::Relaxed))
}

fn tier_line(text: &mut String, prefix: &str, usage: &TierUsage) -> std::fmt::Result {
    writeln!(text, "{prefix}_tier:{}\r", usage.tier.name())?;
    writeln!(text, "{prefix}_used_bytes:{}\r", usage.used_bytes)?;
    writeln!(text, "{prefix}_capacity_bytes:{}\r", usage.capacity_bytes)
}

fn memory_section(stats: &[NamespaceStats], text: &mut String) -> std::fmt::Result {
    writeln!(text, "# Memory\r")?;
    let used: u64 = stats.iter().map(|stats| stats.index.used_bytes + stats.data.used_bytes).sum();
    writeln!(text, "used_memory:{used}\r")?;
    writeln!(text, "maxmemory:0\r")?;
    // The kernel's word for this process: `--huge-pages off`, or a fallback from on.
    let huge_pages = match hybridkv_media::transparent_huge_pages_disabled() {
        Ok(true) => "off",
        Ok(false) => "on",
        Err(_) => "unknown",
    };
    writeln!(text, "transparent_huge_pages:{huge_pages}\r")?;
    for namespace in stats {
        let prefix = format!("ns_{}", namespace.name);
        tier_line(text, &format!("{prefix}_index"), &namespace.index)?;
        tier_line(text, &format!("{prefix}_data"), &namespace.data)?;
        if let Some(journal) = &namespace.journal {
            tier_line(text, &format!("{prefix}_journal"), journal)?;
        }
        if let Some(cache) = &namespace.cache {
            writeln!(text, "{prefix}_cache_used_bytes:{}\r", cache.used_bytes)?;
            writeln!(text, "{prefix}_cache_capacity_bytes:{}\r", cache.capacity_bytes)?;
            writeln!(text, "{prefix}_cache_hits:{}\r", cache.hits)?;
            writeln!(text, "{prefix}_cache_misses:{}\r", cache.misses)?;
            writeln!(text, "{prefix}_cache_evictions:{}\r", cache.evictions)?;
            writeln!(text, "{prefix}_cache_entries:{}\r", cache.entries)?;
            if let Some(reads) = &namespace.device_reads {
                // Reads per submission: how many cache misses shared one doorbell.
                writeln!(text, "{prefix}_device_read_submissions:{}\r", reads.submissions)?;
                writeln!(text, "{prefix}_device_reads:{}\r", reads.reads)?;
            }
        } else if namespace.cache_bypassed {
            writeln!(text, "{prefix}_cache:off (pmem on the msync fallback is read from the page cache)\r")?;
        }
    }
    Ok(())
}

fn persistence_section(shared: &Shared, stats: &[NamespaceStats], text: &mut String) -> std::fmt::Result {
    let uptime_seconds = shared.started.elapsed().as_secs_f64().max(1.0);
    writeln!(text, "# Persistence\r")?;
    writeln!(text, "loading:0\r")?;
    writeln!(text, "rdb_bgsave_in_progress:{}\r", u8::from(shared.background_save.load(Ordering::Relaxed)))?;
    writeln!(text, "rdb_last_save_time:{}\r", shared.database.last_checkpoint_unix_ms() / 1000)?;
    for report in shared.database.restart_reports() {
        let prefix = format!("ns_{}_restart", report.namespace);
        writeln!(text, "{prefix}:{}\r", report.kind.name())?;
        writeln!(text, "{prefix}_elapsed_ms:{}\r", report.elapsed_ms)?;
        writeln!(text, "{prefix}_records_replayed:{}\r", report.records_replayed)?;
    }
    for namespace in stats {
        let prefix = format!("ns_{}", namespace.name);
        writeln!(text, "{prefix}_durability:{}\r", namespace.durability.name())?;
        writeln!(text, "{prefix}_index_media:{}\r", namespace.index.durability)?;
        writeln!(text, "{prefix}_data_media:{}\r", namespace.data.durability)?;
        if let Some(journal) = &namespace.journal {
            writeln!(text, "{prefix}_journal_media:{}\r", journal.durability)?;
        }
        writeln!(text, "{prefix}_flushes:{}\r", namespace.flushes)?;
        writeln!(text, "{prefix}_flushes_per_sec:{:.1}\r", namespace.flushes as f64 / uptime_seconds)?;
        writeln!(text, "{prefix}_journal_writes:{}\r", namespace.journal_writes)?;
        writeln!(text, "{prefix}_journal_writes_per_sec:{:.1}\r", namespace.journal_writes as f64 / uptime_seconds)?;
        writeln!(text, "{prefix}_log_bytes_written:{}\r", namespace.log_bytes_written)?;
        writeln!(text, "{prefix}_rotations_waited_for_write_out:{}\r", namespace.rotations_waited_for_write_out)?;
        writeln!(text, "{prefix}_writes_held_for_backlog:{}\r", namespace.writes_held_for_backlog)?;
        writeln!(text, "{prefix}_writes_held_for_space:{}\r", namespace.writes_held_for_space)?;
        writeln!(text, "{prefix}_records_awaiting_publication:{}\r", namespace.records_awaiting_publication)?;
        writeln!(text, "{prefix}_defrag_blocks_waiting:{}\r", namespace.defrag_blocks_waiting)?;
        writeln!(text, "{prefix}_last_checkpoint_unix_ms:{}\r", namespace.last_checkpoint_unix_ms)?;
    }
    Ok(())
}

fn stats_section(shared: &Shared, stats: &[NamespaceStats], text: &mut String) -> std::fmt::Result {
    let counters = &shared.stats;
    let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
    writeln!(text, "# Stats\r")?;
    writeln!(text, "total_connections_received:{}\r", load(&counters.connections_received))?;
    writeln!(text, "total_commands_processed:{}\r", counters.commands_processed.get())?;
    writeln!(text, "instantaneous_ops_per_sec:{}\r", load(&counters.ops_per_second))?;
    writeln!(text, "total_net_input_bytes:{}\r", counters.net_input_bytes.get())?;
    writeln!(text, "total_net_output_bytes:{}\r", counters.net_output_bytes.get())?;
    writeln!(text, "rejected_connections:{}\r", load(&counters.rejected_connections))?;
    writeln!(text, "total_error_replies:{}\r", shared.command_stats.error_replies())?;
    writeln!(text, "total_error_replies_protocol:{}\r", load(&counters.protocol_errors))?;
    writeln!(text, "expired_keys:{}\r", stats.iter().map(|stats| stats.expired_keys).sum::<u64>())?;
    // Keys are never evicted: the record caches evict copies, the records stay on their tier.
    writeln!(text, "evicted_keys:0\r")?;
    writeln!(text, "keyspace_hits:{}\r", stats.iter().map(|stats| stats.hits).sum::<u64>())?;
    writeln!(text, "keyspace_misses:{}\r", stats.iter().map(|stats| stats.misses).sum::<u64>())?;
    writeln!(text, "pubsub_channels:{}\r", shared.pubsub.count(Kind::Channel))?;
    writeln!(text, "pubsub_patterns:{}\r", shared.pubsub.count(Kind::Pattern))?;
    writeln!(text, "pubsubshard_channels:{}\r", shared.pubsub.count(Kind::Shard))?;
    let tracking = shared.tracking.counts();
    writeln!(text, "tracking_total_keys:{}\r", tracking.keys)?;
    writeln!(text, "tracking_total_items:{}\r", tracking.items)?;
    writeln!(text, "tracking_total_prefixes:{}\r", tracking.prefixes)?;
    writeln!(text, "engine_writes:{}\r", stats.iter().map(|stats| stats.writes).sum::<u64>())?;
    writeln!(text, "combined_writes:{}\r", load(&counters.combined_writes))?;
    writeln!(text, "combined_write_rounds:{}\r", load(&counters.combined_write_rounds))?;
    writeln!(text, "defragmented_blocks:{}\r", stats.iter().map(|stats| stats.defragmented_blocks).sum::<u64>())?;
    writeln!(text, "corrupt_records:{}\r", stats.iter().map(|stats| stats.corrupt_records).sum::<u64>())
}

/// One line per opened database that holds keys; `numbers[i]` is the database number of `stats[i]`.
fn keyspace_section(numbers: &[usize], stats: &[NamespaceStats], text: &mut String) -> std::fmt::Result {
    writeln!(text, "# Keyspace\r")?;
    for (number, namespace) in numbers.iter().zip(stats).filter(|(_, namespace)| namespace.keys > 0) {
        let NamespaceStats { keys, expiring_keys, average_ttl_ms, name, .. } = namespace;
        writeln!(text, "db{number}:keys={keys},expires={expiring_keys},avg_ttl={average_ttl_ms},namespace={name}\r")?;
    }
    Ok(())
}

/// Prometheus exposition text (version 0.0.4) of the same figures.
pub fn prometheus_text(shared: &Shared) -> String {
    let mut text = String::new();
    let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
    let counters = &shared.stats;
    let server_metrics: [(&str, &str, u64); 13] = [
        ("hybridkv_connected_clients", "gauge", shared.clients.count() as u64),
        ("hybridkv_pubsub_channels", "gauge", shared.pubsub.count(Kind::Channel) as u64),
        ("hybridkv_pubsub_patterns", "gauge", shared.pubsub.count(Kind::Pattern) as u64),
        ("hybridkv_pubsub_shard_channels", "gauge", shared.pubsub.count(Kind::Shard) as u64),
        ("hybridkv_error_replies_total", "counter", shared.command_stats.error_replies()),
        ("hybridkv_blocked_clients", "gauge", load(&counters.blocked_clients)),
        ("hybridkv_commands_processed_total", "counter", counters.commands_processed.get()),
        ("hybridkv_connections_received_total", "counter", load(&counters.connections_received)),
        ("hybridkv_rejected_connections_total", "counter", load(&counters.rejected_connections)),
        ("hybridkv_ops_per_second", "gauge", load(&counters.ops_per_second)),
        ("hybridkv_combined_writes_total", "counter", load(&counters.combined_writes)),
        ("hybridkv_combined_write_rounds_total", "counter", load(&counters.combined_write_rounds)),
        ("hybridkv_uptime_seconds", "gauge", shared.started.elapsed().as_secs()),
    ];
    for (name, kind, value) in server_metrics {
        let _ = writeln!(text, "# TYPE {name} {kind}\n{name} {value}");
    }
    let cpu = cpu_times(CpuOf::ThisProcess).unwrap_or_default();
    let _ = writeln!(
        text,
        "# TYPE hybridkv_cpu_seconds_total counter\nhybridkv_cpu_seconds_total{{mode=\"system\"}} {:.6}\nhybridkv_cpu_seconds_total{{mode=\"user\"}} {:.6}",
        cpu.system.as_secs_f64(),
        cpu.user.as_secs_f64()
    );
    let _ = command_metrics(shared, &mut text);
    for stats in shared.database.namespaces().map(|(_, namespace)| namespace.stats()) {
        let _ = namespace_metrics(&stats, &mut text);
    }
    text
}

/// INFO commandstats and errorstats as labelled counters, latencystats as gauges per quantile.
fn command_metrics(shared: &Shared, text: &mut String) -> std::fmt::Result {
    let used = shared.command_stats.used_commands();
    type ValueOf = fn(&CommandCounts) -> u64;
    let metrics: [(&str, ValueOf); 4] = [
        ("hybridkv_command_calls_total", |counts| counts.calls),
        ("hybridkv_command_microseconds_total", |counts| counts.microseconds),
        ("hybridkv_command_rejected_calls_total", |counts| counts.rejected),
        ("hybridkv_command_failed_calls_total", |counts| counts.failed),
    ];
    for (name, value_of) in metrics {
        writeln!(text, "# TYPE {name} counter")?;
        for (command, counts) in &used {
            writeln!(text, "{name}{{command=\"{command}\"}} {}", value_of(counts))?;
        }
    }
    writeln!(text, "# TYPE hybridkv_command_latency_microseconds gauge")?;
    for (command, microseconds) in shared.command_stats.latency_percentiles() {
        for (percentile, value) in LATENCY_PERCENTILES_REPORTED.iter().zip(microseconds) {
            // 99.9 / 100 prints as 0.9990000000000001.
            let quantile = format!("{:.6}", percentile / 100.0);
            let quantile = quantile.trim_end_matches('0');
            writeln!(text, "hybridkv_command_latency_microseconds{{command=\"{command}\",quantile=\"{quantile}\"}} {value:.3}")?;
        }
    }
    writeln!(text, "# TYPE hybridkv_error_replies_by_prefix_total counter")?;
    for (prefix, count) in shared.command_stats.error_counts() {
        writeln!(text, "hybridkv_error_replies_by_prefix_total{{prefix=\"{prefix}\"}} {count}")?;
    }
    Ok(())
}

fn namespace_metrics(stats: &NamespaceStats, text: &mut String) -> std::fmt::Result {
    let labels = format!("namespace=\"{}\"", stats.name);
    let mut values: Vec<(&str, u64)> = vec![
        ("keys", stats.keys),
        ("keys_with_expiry", stats.expiring_keys),
        ("average_ttl_ms", stats.average_ttl_ms),
        ("expired_keys_total", stats.expired_keys),
        ("gets_total", stats.gets),
        ("hits_total", stats.hits),
        ("misses_total", stats.misses),
        ("writes_total", stats.writes),
        ("flushes_total", stats.flushes),
        ("journal_writes_total", stats.journal_writes),
        ("log_bytes_written_total", stats.log_bytes_written),
        ("rotations_waited_for_write_out_total", stats.rotations_waited_for_write_out),
        ("writes_held_for_backlog_total", stats.writes_held_for_backlog),
        ("writes_held_for_space_total", stats.writes_held_for_space),
        ("records_awaiting_publication", stats.records_awaiting_publication),
        ("defragmented_blocks_total", stats.defragmented_blocks),
        ("defrag_blocks_waiting", stats.defrag_blocks_waiting),
    ];
    if let Some(cache) = &stats.cache {
        values.extend([
            ("cache_used_bytes", cache.used_bytes),
            ("cache_capacity_bytes", cache.capacity_bytes),
            ("cache_entries", cache.entries),
            ("cache_hits_total", cache.hits),
            ("cache_misses_total", cache.misses),
            ("cache_evictions_total", cache.evictions),
        ]);
    }
    for (name, value) in values {
        writeln!(text, "hybridkv_{name}{{{labels}}} {value}")?;
    }
    let mut tiers = vec![("index", &stats.index), ("data", &stats.data)];
    if let Some(journal) = &stats.journal {
        tiers.push(("journal", journal));
    }
    for (role, usage) in tiers {
        let tier_labels = format!("{labels},role=\"{role}\",tier=\"{}\",media=\"{}\"", usage.tier.name(), usage.durability);
        writeln!(text, "hybridkv_tier_used_bytes{{{tier_labels}}} {}", usage.used_bytes)?;
        writeln!(text, "hybridkv_tier_capacity_bytes{{{tier_labels}}} {}", usage.capacity_bytes)?;
    }
    Ok(())
}
