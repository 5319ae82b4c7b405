//! Server commands: DBSIZE FLUSHDB FLUSHALL INFO CONFIG COMMAND TIME SHUTDOWN SAVE BGSAVE
//! BGREWRITEAOF LASTSAVE MEMORY SLOWLOG LATENCY.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use hybridkv_engine::{Durability, SECOND_PART_SPACE};
use hybridkv_resp::Reply;

use super::{is, parse_integer, subcommand_help, unknown_subcommand, SYNTAX_ERROR, TABLE};
use crate::command_stats::LATENCY_PERCENTILES_REPORTED;
use crate::command::{fail, wrong_arity, Call, CommandError, CommandResult, CommandSpec, NoKeys, ADMIN, READONLY, WRITE};
use crate::glob::glob_match;
use crate::keyspace_events;
use crate::hash_layout::buckets_per_share;
use crate::shared::Shared;
use crate::slowlog::{SlowEntry, SLOWLOG_ENTRIES_MAX};
use crate::values::Stored;

pub fn dbsize(call: &mut Call<'_>) -> CommandResult {
    Ok(Reply::Integer(call.store.key_count()? as i64))
}

/// FLUSHDB/FLUSHALL take an optional ASYNC or SYNC; both run synchronously here.
fn check_flush_mode(call: &Call<'_>) -> Result<(), CommandError> {
    match call.args.get(1) {
        None => Ok(()),
        Some(mode) if call.args.len() == 2 && (is(mode, "ASYNC") || is(mode, "SYNC")) => Ok(()),
        Some(_) => fail(SYNTAX_ERROR),
    }
}

pub fn flushdb(call: &mut Call<'_>) -> CommandResult {
    check_flush_mode(call)?;
    call.store.delete_every_key()?;
    call.shared.every_key_written();
    Ok(Reply::ok())
}

pub fn flushall(call: &mut Call<'_>) -> CommandResult {
    check_flush_mode(call)?;
    for (_, namespace) in call.shared.database.namespaces() {
        namespace.clear()?;
    }
    call.shared.every_key_written();
    Ok(Reply::ok())
}

pub fn info(call: &mut Call<'_>) -> CommandResult {
    let sections: Vec<String> = call.args[1..].iter().map(|section| String::from_utf8_lossy(section).to_ascii_lowercase()).collect();
    let text = crate::info::info_text(call.shared, &sections);
    Ok(Reply::Verbatim { format: *b"txt", text: Bytes::from(text) })
}

/// ROLE: a primary with no replicas and no replication offset.
pub fn role(_call: &mut Call<'_>) -> CommandResult {
    Ok(Reply::Array(vec![Reply::bulk_text("master"), Reply::Integer(0), Reply::Array(Vec::new())]))
}

/// CLUSTER, READONLY, READWRITE and ASKING: Redis's answer when it runs without cluster
/// support, which hybridkv has none of (so a cluster client learns why it cannot go on).
pub fn cluster_disabled(_call: &mut Call<'_>) -> CommandResult {
    fail("ERR This instance has cluster support disabled")
}

pub fn time(_call: &mut Call<'_>) -> CommandResult {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Ok(Reply::Array(vec![Reply::bulk_text(&now.as_secs().to_string()), Reply::bulk_text(&now.subsec_micros().to_string())]))
}

pub fn save(call: &mut Call<'_>) -> CommandResult {
    call.shared.database.checkpoint()?;
    Ok(Reply::ok())
}

pub fn bgsave(call: &mut Call<'_>) -> CommandResult {
    if !start_background_checkpoint(call.shared)? {
        return fail("ERR Background save already in progress");
    }
    Ok(Reply::simple("Background saving started"))
}

/// BGREWRITEAOF: what compacts the journal here is a checkpoint (segments it covers are
/// deleted), so it starts one, as BGSAVE does.
pub fn bgrewriteaof(call: &mut Call<'_>) -> CommandResult {
    if !start_background_checkpoint(call.shared)? {
        return fail("ERR Background append only file rewriting already in progress");
    }
    Ok(Reply::simple("Background append only file rewriting started"))
}

/// Starts a checkpoint of every namespace on its own thread; false when one is running.
fn start_background_checkpoint(shared: &Shared) -> Result<bool, CommandError> {
    if shared.background_save.swap(true, Ordering::AcqRel) {
        return Ok(false);
    }
    let database = Arc::clone(&shared.database);
    let in_progress = Arc::clone(&shared.background_save);
    let spawned = std::thread::Builder::new().name("hybridkv-bgsave".into()).spawn(move || {
        if let Err(error) = database.checkpoint() {
            tracing::error!(%error, "background checkpoint failed");
        }
        in_progress.store(false, Ordering::Release);
    });
    if let Err(error) = spawned {
        shared.background_save.store(false, Ordering::Release);
        return fail(format!("ERR cannot start a background checkpoint: {error}"));
    }
    Ok(true)
}

/// MEMORY PURGE: Redis releases allocator pages; hybridkv empties its record caches, which is
/// what a COLD measurement needs.
pub fn memory(call: &mut Call<'_>) -> CommandResult {
    if is(&call.args[1], "HELP") {
        return Ok(subcommand_help("memory"));
    }
    if is(&call.args[1], "USAGE") {
        return memory_usage(call);
    }
    if !is(&call.args[1], "PURGE") {
        return Err(unknown_subcommand("memory", &call.args[1]));
    }
    call.shared.database.clear_caches();
    Ok(Reply::Simple("OK".into()))
}

/// Buckets of a bucketed hash MEMORY USAGE reads when not told (Redis samples as many elements).
const MEMORY_USAGE_SAMPLES_DEFAULT: u64 = 5;

/// MEMORY USAGE key [SAMPLES count]: the bytes the key's records and index entries take
/// (`hybridkv_engine::stored_bytes`); for a bucketed hash or set (a chunked list, a stream's groups), `count` of its buckets (its parts) (0: all) are
/// read and the others counted as their average, as Redis samples an aggregate's elements; so
/// are the parts of a list in the key's second space (a sorted set's order index, a stream's
/// entries).
fn memory_usage(call: &mut Call<'_>) -> CommandResult {
    let key = call.args[2].clone();
    let samples = memory_usage_samples(&call.args[3..])?;
    let Some(value) = call.store.get(&key)? else { return Ok(Reply::Null) };
    let mut bytes = hybridkv_engine::stored_bytes(key.len(), value.bytes.len(), false);
    let parts = match Stored::decode(value.bytes)? {
        Stored::Bucketed(_, root) => root.bucket_count,
        Stored::ChunkedList(index) => index.part_count(),
        Stored::Stream(root) => root.groups.len() as u32,
        _ => 0,
    };
    if parts > 0 {
        bytes += sampled_parts_bytes(call, &key, 0, parts, samples, |number| buckets_per_share(number, parts))?;
    }
    bytes += second_space_bytes(call, &key, samples)?;
    Ok(Reply::Integer(i64::try_from(bytes).unwrap_or(i64::MAX)))
}

/// The bytes of the list in the key's second part space (a sorted set's order index, a
/// stream's entries): its top or one record, and `samples` of its other parts (0: all) spread
/// evenly over them, averaged and counted for every part.
fn second_space_bytes(call: &mut Call<'_>, key: &[u8], samples: u64) -> Result<u64, CommandError> {
    let Some(top) = call.store.get_part(key, SECOND_PART_SPACE)? else { return Ok(0) };
    let top_bytes = hybridkv_engine::stored_bytes(0, top.len(), true);
    let part_count = match Stored::decode(top)? {
        Stored::ChunkedList(index) => index.part_count(),
        _ => 0,
    };
    let parts_bytes = sampled_parts_bytes(call, key, SECOND_PART_SPACE + 1, part_count, samples, |_| u64::from(part_count))?;
    Ok(top_bytes + parts_bytes)
}

/// SAMPLES' count as Redis parses it: a non-negative integer, 0 for every element; the last
/// SAMPLES given counts.
fn memory_usage_samples(options: &[Bytes]) -> Result<u64, CommandError> {
    let mut samples = MEMORY_USAGE_SAMPLES_DEFAULT;
    let mut options = options.iter();
    while let Some(option) = options.next() {
        let Some(count) = options.next().filter(|_| is(option, "SAMPLES")) else { return fail(SYNTAX_ERROR) };
        samples = match parse_integer(count)? {
            0 => u64::MAX,
            count => u64::try_from(count).or_else(|_| fail(SYNTAX_ERROR))?,
        };
    }
    Ok(samples)
}

/// The bytes of `samples` of the `count` parts from `first_part` on, spread evenly over them,
/// each scaled to the whole by `weight(its number among them)`, averaged: for a hash's buckets
/// its share of the field hashes, for a list's parts their count.
fn sampled_parts_bytes(call: &mut Call<'_>, key: &[u8], first_part: u32, count: u32, samples: u64, weight: impl Fn(u32) -> u64) -> Result<u64, CommandError> {
    let read = samples.min(u64::from(count));
    let mut scaled_bytes = 0;
    for sample in 0..read {
        let number = (sample * u64::from(count) / read) as u32;
        if let Some(part) = call.store.get_part(key, first_part + number)? {
            scaled_bytes += hybridkv_engine::stored_bytes(0, part.len(), true) * weight(number);
        }
    }
    Ok(scaled_bytes.checked_div(read).unwrap_or(0))
}

pub fn lastsave(call: &mut Call<'_>) -> CommandResult {
    Ok(Reply::Integer((call.shared.database.last_checkpoint_unix_ms() / 1000) as i64))
}

pub fn shutdown(call: &mut Call<'_>) -> CommandResult {
    for option in &call.args[1..] {
        if is(option, "ABORT") {
            return fail("ERR No shutdown in progress.");
        }
        if !["NOSAVE", "SAVE", "NOW", "FORCE"].iter().any(|known| is(option, known)) {
            return fail(SYNTAX_ERROR);
        }
    }
    // As Redis: no reply on success, the connection just closes; the listener then stops
    // accepting, connections finish, and the database is made durable and closed cleanly.
    call.shared.request_shutdown();
    call.session.close_after_reply = true;
    call.session.suppress_reply = true;
    Ok(Reply::ok())
}

/// SLOWLOG GET [count] | LEN | RESET | HELP.
pub fn slowlog(call: &mut Call<'_>) -> CommandResult {
    let log = &call.shared.slowlog;
    let subcommand = String::from_utf8_lossy(&call.args[1]).to_ascii_lowercase();
    match subcommand.as_str() {
        "get" if call.args.len() > 3 => Err(super::subcommand_syntax_error("slowlog", &call.args[1])),
        "get" => {
            let count = match call.args.get(2) {
                None => Some(SLOWLOG_GET_COUNT_DEFAULT),
                Some(count) => match parse_integer(count) {
                    Ok(-1) => None,
                    Ok(count) if count >= 0 => Some(usize::try_from(count).unwrap_or(usize::MAX)),
                    _ => return fail("ERR count should be greater than or equal to -1"),
                },
            };
            Ok(Reply::Array(log.newest(count, slowlog_entry)))
        }
        "len" => Ok(Reply::Integer(log.len() as i64)),
        "reset" => {
            log.reset();
            Ok(Reply::ok())
        }
        "help" => Ok(subcommand_help("slowlog")),
        _ => Err(unknown_subcommand("slowlog", &call.args[1])),
    }
}

/// What LATENCY DOCTOR answers: there is no latency monitor (Redis's is off by default too).
const LATENCY_DOCTOR_REPORT: &str = "Latency monitoring is not available in hybridkv (as in a Redis instance whose \
latency-monitor-threshold is 0): no events are sampled. INFO latencystats and LATENCY HISTOGRAM report each command's latencies.\n";

/// LATENCY DOCTOR | GRAPH | HISTORY | LATEST | RESET | HISTOGRAM | HELP: the latency
/// monitor's subcommands answer as Redis's do with the monitor off; HISTOGRAM reports the
/// per-command latency tracking INFO latencystats draws on.
pub fn latency(call: &mut Call<'_>) -> CommandResult {
    let subcommand = String::from_utf8_lossy(&call.args[1]).to_ascii_lowercase();
    match subcommand.as_str() {
        "doctor" => Ok(Reply::Verbatim { format: *b"txt", text: Bytes::from_static(LATENCY_DOCTOR_REPORT.as_bytes()) }),
        "graph" => fail(format!("ERR No samples available for event '{}'", String::from_utf8_lossy(&call.args[2]))),
        "history" | "latest" => Ok(Reply::Array(Vec::new())),
        "reset" => Ok(Reply::Integer(0)),
        "histogram" => Ok(latency_histogram(call)),
        "help" => Ok(subcommand_help("latency")),
        _ => Err(unknown_subcommand("latency", &call.args[1])),
    }
}

/// LATENCY HISTOGRAM [command ...]: {command: {calls, histogram_usec: {bound: calls up to it}}}.
fn latency_histogram(call: &Call<'_>) -> Reply {
    let wanted: Vec<String> = call.args[2..].iter().map(|name| String::from_utf8_lossy(name).to_ascii_lowercase()).collect();
    let distributions = call.shared.command_stats.latency_distributions((!wanted.is_empty()).then_some(wanted.as_slice()));
    let integer = |value: u64| Reply::Integer(i64::try_from(value).unwrap_or(i64::MAX));
    Reply::Map(
        distributions
            .into_iter()
            .map(|distribution| {
                let steps = distribution.steps.iter().map(|&(bound, calls)| (integer(bound), integer(calls))).collect();
                let fields = vec![
                    (Reply::bulk_text("calls"), integer(distribution.calls)),
                    (Reply::bulk_text("histogram_usec"), Reply::Map(steps)),
                ];
                (Reply::bulk_text(distribution.name), Reply::Map(fields))
            })
            .collect(),
    )
}

/// Entries SLOWLOG GET answers without a count (Redis's 10).
const SLOWLOG_GET_COUNT_DEFAULT: usize = 10;

fn slowlog_entry(entry: &SlowEntry) -> Reply {
    Reply::Array(vec![
        Reply::Integer(entry.id as i64),
        Reply::Integer(entry.unix_seconds as i64),
        Reply::Integer(i64::try_from(entry.microseconds).unwrap_or(i64::MAX)),
        Reply::Array(entry.arguments.iter().cloned().map(Reply::Bulk).collect()),
        Reply::bulk_text(&entry.peer),
        Reply::bulk_text(&entry.client_name),
    ])
}

/// CONFIG GET's parameters and their current values.
fn config_values(call: &Call<'_>) -> Vec<(&'static str, String)> {
    let config = &call.shared.config;
    let namespace = call.shared.database.namespace(0).map(|namespace| namespace.config().clone());
    let durability = namespace.as_ref().map_or(Durability::Always, |namespace| namespace.durability);
    vec![
        ("bind", config.bind.to_string()),
        ("port", config.port.to_string()),
        ("dir", config.dir.clone()),
        ("requirepass", call.shared.requirepass.read().clone().unwrap_or_default()),
        ("protected-mode", if config.protected_mode { "yes" } else { "no" }.into()),
        ("maxclients", call.shared.max_clients.load(Ordering::Relaxed).to_string()),
        ("proto-max-bulk-len", config.bulk_bytes_max.to_string()),
        ("client-query-buffer-limit", config.query_buffer_bytes_max.to_string()),
        ("databases", call.shared.database.database_count().to_string()),
        ("appendonly", if durability == Durability::None { "no" } else { "yes" }.into()),
        (
            "appendfsync",
            match durability {
                Durability::Always => "always",
                Durability::Periodic => "everysec",
                Durability::None => "no",
            }
            .into(),
        ),
        ("save", String::new()),
        ("maxmemory", "0".into()),
        ("timeout", "0".into()),
        ("durability", durability.name().into()),
        ("value-bytes-max", namespace.map_or(0, |namespace| namespace.value_bytes_max).to_string()),
        ("slowlog-log-slower-than", call.shared.slowlog.threshold_microseconds().to_string()),
        ("slowlog-max-len", call.shared.slowlog.entries_max().to_string()),
        ("latency-monitor-threshold", "0".into()),
        ("latency-tracking", if call.shared.command_stats.latency_tracking() { "yes" } else { "no" }.into()),
        ("latency-tracking-info-percentiles", LATENCY_PERCENTILES_REPORTED.map(|percentile| percentile.to_string()).join(" ")),
        ("notify-keyspace-events", keyspace_events::classes_text(call.shared.keyspace_events.classes())),
    ]
}

pub fn config(call: &mut Call<'_>) -> CommandResult {
    let subcommand = String::from_utf8_lossy(&call.args[1]).to_ascii_lowercase();
    match subcommand.as_str() {
        "get" => {
            let values = config_values(call);
            let matching = values.into_iter().filter(|(name, _)| call.args[2..].iter().any(|pattern| glob_match(&pattern.to_ascii_lowercase(), name.as_bytes())));
            Ok(Reply::Map(matching.map(|(name, value)| (Reply::bulk_text(name), Reply::bulk_text(&value))).collect()))
        }
        "set" if call.args.len().is_multiple_of(2) => config_set(call),
        "resetstat" => {
            call.shared.stats.reset();
            call.shared.command_stats.reset();
            call.shared.database.reset_statistics();
            Ok(Reply::ok())
        }
        "rewrite" => fail("ERR The server is running without a config file"),
        "help" => Ok(subcommand_help("config")),
        "set" => Err(wrong_arity("config|set")),
        _ => Err(unknown_subcommand("config", &call.args[1])),
    }
}

/// What CONFIG SET may change at run time.
enum Setting {
    MaxClients(usize),
    RequirePass(Option<String>),
    SlowlogThresholdMicroseconds(i64),
    SlowlogEntriesMax(usize),
    LatencyTracking(bool),
    KeyspaceEvents(u32),
}

/// CONFIG SET parameter value [parameter value ...]: every pair is checked before any is
/// applied, so a refused CONFIG SET changes nothing (as in Redis).
fn config_set(call: &mut Call<'_>) -> CommandResult {
    let mut settings = Vec::new();
    for (position, pair) in call.args[2..].chunks(2).enumerate() {
        let name = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
        if call.args[2..2 + 2 * position].chunks(2).any(|earlier| earlier[0].eq_ignore_ascii_case(name.as_bytes())) {
            return fail(format!("ERR CONFIG SET failed (possibly related to argument '{name}') - duplicate parameter"));
        }
        settings.push(setting(call, &name, &pair[1])?);
    }
    for setting in settings {
        match setting {
            Setting::MaxClients(count) => call.shared.max_clients.store(count, Ordering::Relaxed),
            Setting::RequirePass(password) => {
                call.shared.users.set_default_password(password.as_deref());
                *call.shared.requirepass.write() = password;
            }
            Setting::SlowlogThresholdMicroseconds(threshold) => call.shared.slowlog.set_threshold_microseconds(threshold),
            Setting::SlowlogEntriesMax(entries) => call.shared.slowlog.set_entries_max(entries),
            Setting::LatencyTracking(enabled) => call.shared.command_stats.set_latency_tracking(enabled),
            Setting::KeyspaceEvents(classes) => call.shared.keyspace_events.set_classes(classes),
        }
    }
    Ok(Reply::ok())
}

fn setting(call: &Call<'_>, name: &str, value: &[u8]) -> Result<Setting, CommandError> {
    let integer_between = |low: i64, high: i64| match parse_integer(value) {
        Ok(number) if (low..=high).contains(&number) => Ok(number),
        Ok(_) => fail(format!("ERR CONFIG SET failed (possibly related to argument '{name}') - argument must be between {low} and {high} inclusive")),
        Err(_) => fail(format!("ERR CONFIG SET failed (possibly related to argument '{name}') - argument couldn't be parsed into an integer")),
    };
    match name {
        "maxclients" => Ok(Setting::MaxClients(integer_between(1, i64::from(u32::MAX))? as usize)),
        "requirepass" => Ok(Setting::RequirePass((!value.is_empty()).then(|| String::from_utf8_lossy(value).into_owned()))),
        "slowlog-log-slower-than" => Ok(Setting::SlowlogThresholdMicroseconds(integer_between(-1, i64::MAX)?)),
        "slowlog-max-len" => Ok(Setting::SlowlogEntriesMax(integer_between(0, SLOWLOG_ENTRIES_MAX as i64)? as usize)),
        "latency-tracking" => match value.to_ascii_lowercase().as_slice() {
            b"yes" => Ok(Setting::LatencyTracking(true)),
            b"no" => Ok(Setting::LatencyTracking(false)),
            _ => fail(format!("ERR CONFIG SET failed (possibly related to argument '{name}') - argument must be 'yes' or 'no'")),
        },
        "notify-keyspace-events" => match keyspace_events::parse_classes(value) {
            Some(classes) if classes & keyspace_events::UNSUPPORTED != 0 => {
                fail(format!("ERR CONFIG SET failed (possibly related to argument '{name}') - the event classes 'n' (new key) and 'm' (key miss) are not supported"))
            }
            Some(classes) => Ok(Setting::KeyspaceEvents(classes)),
            None => fail(format!("ERR CONFIG SET failed (possibly related to argument '{name}') - Invalid event class character. Use 'Ag$lshzxeKEtmdn'.")),
        },
        _ if config_values(call).iter().any(|(known, _)| *known == name) => {
            fail(format!("ERR CONFIG SET failed (possibly related to argument '{name}') - can't set immutable config"))
        }
        _ => fail(format!("ERR Unknown option or number of arguments for CONFIG SET - '{name}'")),
    }
}

/// A command or a subcommand (`container|sub`) as COMMAND INFO and DOCS describe it.
struct Described {
    name: String,
    arity: i32,
    summary: &'static str,
    /// The command's spec (a subcommand's container's): flags, keys, group.
    spec: &'static CommandSpec,
}

impl Described {
    fn of_command(spec: &'static CommandSpec) -> Described {
        Described { name: spec.name.to_string(), arity: spec.arity, summary: spec.summary, spec }
    }

    /// The command or `container|sub` subcommand `name` names (any case), if it is one.
    fn named(name: &[u8]) -> Option<Described> {
        let text = String::from_utf8_lossy(name).to_ascii_lowercase();
        let Some((container, sub)) = text.split_once('|') else { return super::lookup(name).map(Described::of_command) };
        let spec = super::lookup(container.as_bytes())?;
        let known = super::subcommands_of(spec.name).iter().find(|known| known.name == sub)?;
        Some(Described { name: format!("{}|{}", spec.name, known.name), arity: known.arity, summary: known.summary, spec })
    }

    /// One COMMAND INFO entry (the 10 fields of Redis 7).
    fn info(&self) -> Reply {
        let spec = self.spec;
        let mut flags = Vec::new();
        if spec.has(WRITE) {
            flags.push(Reply::simple("write"));
        } else if spec.has(READONLY) {
            flags.push(Reply::simple("readonly"));
        }
        if spec.has(ADMIN) {
            flags.push(Reply::simple("admin"));
        }
        if spec.keys.keys_move() {
            flags.push(Reply::simple("movablekeys"));
        }
        let (first, last, step) = spec.keys.advertised_positions();
        Reply::Array(vec![
            Reply::bulk_text(&self.name),
            Reply::Integer(i64::from(self.arity)),
            Reply::Set(flags),
            Reply::Integer(first),
            Reply::Integer(last),
            Reply::Integer(step),
            Reply::Set(vec![Reply::bulk_text(&format!("@{}", spec.group))]),
            Reply::Array(Vec::new()),
            Reply::Array(Vec::new()),
            Reply::Array(Vec::new()),
        ])
    }

    fn docs(&self) -> Reply {
        Reply::Map(vec![
            (Reply::bulk_text("summary"), Reply::bulk_text(self.summary)),
            (Reply::bulk_text("since"), Reply::bulk_text("1.0.0")),
            (Reply::bulk_text("group"), Reply::bulk_text(self.spec.group)),
        ])
    }
}

/// What `names` name (None for an unknown name), or every command when none are named.
fn named_commands(names: &[Bytes]) -> Vec<(Bytes, Option<Described>)> {
    if names.is_empty() {
        return TABLE.iter().map(|spec| (Bytes::from_static(spec.name.as_bytes()), Some(Described::of_command(spec)))).collect();
    }
    names.iter().map(|name| (name.clone(), Described::named(name))).collect()
}

/// COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern]: every command and
/// `container|sub` subcommand, as Redis 7 lists them; PATTERN matches the names in any case,
/// ACLCAT the category COMMAND INFO gives (the command's group), MODULE nothing (no modules).
fn command_list(filter: &[Bytes]) -> CommandResult {
    let names = super::stat_row_names().iter().map(String::as_str);
    let listed: Vec<&str> = match filter {
        [] => names.collect(),
        [by, kind, _] if is(by, "FILTERBY") && is(kind, "MODULE") => Vec::new(),
        [by, kind, category] if is(by, "FILTERBY") && is(kind, "ACLCAT") => {
            names.filter(|name| Described::named(name.as_bytes()).is_some_and(|described| is(category, described.spec.group))).collect()
        }
        [by, kind, pattern] if is(by, "FILTERBY") && is(kind, "PATTERN") => {
            let pattern = pattern.to_ascii_lowercase();
            names.filter(|name| glob_match(&pattern, name.as_bytes())).collect()
        }
        _ => return fail(SYNTAX_ERROR),
    };
    Ok(Reply::Array(listed.into_iter().map(Reply::bulk_text).collect()))
}

pub fn command(call: &mut Call<'_>) -> CommandResult {
    let Some(subcommand) = call.args.get(1) else {
        return Ok(Reply::Array(TABLE.iter().map(|spec| Described::of_command(spec).info()).collect()));
    };
    let subcommand = String::from_utf8_lossy(subcommand).to_ascii_lowercase();
    match subcommand.as_str() {
        "count" => Ok(Reply::Integer(TABLE.len() as i64)),
        "list" => command_list(&call.args[2..]),
        "info" => Ok(Reply::Array(named_commands(&call.args[2..]).into_iter().map(|(_, described)| described.map_or(Reply::Null, |described| described.info())).collect())),
        "docs" => Ok(Reply::Map(
            named_commands(&call.args[2..])
                .into_iter()
                .filter_map(|(name, described)| described.map(|described| (Reply::Bulk(name), described.docs())))
                .collect(),
        )),
        "getkeys" => {
            let Some(spec) = super::lookup(&call.args[2]) else { return fail("ERR Invalid command specified") };
            if !spec.arity_ok(call.args.len() - 2) {
                return fail("ERR Invalid number of arguments specified for command");
            }
            match spec.keys.named_keys(&call.args[2..]) {
                Ok(keys) => Ok(Reply::Array(keys.into_iter().map(|key| Reply::Bulk(Bytes::copy_from_slice(key))).collect())),
                Err(NoKeys::InvalidArguments) => fail("ERR Invalid arguments specified for command"),
                Err(NoKeys::NoKeyArguments) => fail("ERR The command has no key arguments"),
            }
        }
        "help" => Ok(subcommand_help("command")),
        _ => Err(unknown_subcommand("command", &call.args[1])),
    }
}
