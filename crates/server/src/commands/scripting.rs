//! Lua scripting: EVAL EVALSHA EVAL_RO EVALSHA_RO and SCRIPT (LOAD EXISTS FLUSH KILL), as Redis
//! 7.0 runs scripts: Lua 5.1 (mlua, built from its vendored sources), the KEYS and ARGV tables,
//! `redis.call`, `redis.pcall`, `redis.error_reply`, `redis.status_reply`, `redis.sha1hex` and
//! `redis.log`, replies converted both ways as Redis converts them (the script sees RESP2
//! replies), globals read-only, and Redis's error texts (`… script: <sha>, on
//! @user_script:<line>.`).
//!
//! A script is one command: it runs in the engine transaction of its keys (EVAL's key spec takes
//! every argument after numkeys, ARGV included, so the transaction holds a few more partitions
//! than needed), so it is atomic and its writes are durable as one batch. Unlike Redis outside
//! cluster mode, a script reaches only the keys it declares (and the names in ARGV): a command
//! on another key fails with `ERR Script attempted to access a key not declared…`. Limits, each
//! ending the script with an error (its writes so far are kept, as Redis keeps those of a
//! script that fails): `SCRIPT_RUN_MS_MAX` of running time (Redis lets a script run until
//! SCRIPT KILL), `SCRIPT_MEMORY_BYTES_MAX` of Lua memory, `REPLY_DEPTH_MAX` nested tables in
//! its reply.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hybridkv_engine::EngineError;
use hybridkv_resp::{format_double, ProtocolVersion, Reply};
use mlua::{Function, HookTriggers, Lua, LuaOptions, LuaString, MultiValue, StdLib, Table, Value, VmState};

use super::{check_subcommand, is, lookup, parse_integer, subcommand_help, unknown_subcommand};
use crate::command::{fail, Call, CommandError, CommandResult, CommandSpec, AFTER_TRANSACTION, BLOCKS_ON_KEYS, CROSSES_DATABASES, IN_MULTI, TRANSACTION_CONTROL, WHOLE_KEYSPACE, WRITE};
use crate::script_cache::sha1_hex;

/// How long a script may run.
const SCRIPT_RUN_MS_MAX: u64 = 5_000;
/// Lua memory one script may hold.
const SCRIPT_MEMORY_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Lua instructions between two checks of the running time.
const INSTRUCTIONS_PER_TIME_CHECK: u32 = 10_000;
/// Tables nested in a script's reply at most (a table may hold itself).
const REPLY_DEPTH_MAX: usize = 256;
/// The chunk name Redis gives scripts: errors read `user_script:<line>: …`.
const CHUNK_NAME: &str = "@user_script";
/// Commands a script may not call, whatever their flags: they would change the session or run
/// scripts within scripts.
const REFUSED_IN_SCRIPTS: &[&str] = &["select", "eval", "evalsha", "eval_ro", "evalsha_ro", "script", "move", "swapdb"];

/// The registry name of the function telling whether the script is past its time.
const PAST_TIME: &str = "hybridkv_past_time";

const NOT_ALLOWED: &str = "ERR This Redis command is not allowed from script";
const NO_SCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";

pub fn eval(call: &mut Call<'_>) -> CommandResult {
    run_script(call, false, false)
}

pub fn evalsha(call: &mut Call<'_>) -> CommandResult {
    run_script(call, true, false)
}

pub fn eval_ro(call: &mut Call<'_>) -> CommandResult {
    run_script(call, false, true)
}

pub fn evalsha_ro(call: &mut Call<'_>) -> CommandResult {
    run_script(call, true, true)
}

/// SCRIPT LOAD script | EXISTS sha [sha ...] | FLUSH [ASYNC|SYNC] | KILL.
pub fn script(call: &mut Call<'_>) -> CommandResult {
    let args = call.args;
    let subcommand = &args[1];
    if is(subcommand, "HELP") {
        return Ok(subcommand_help("script"));
    }
    if is(subcommand, "LOAD") && args.len() == 3 {
        return match call.shared.scripts.insert(args[2].clone()) {
            Ok(sha) => Ok(Reply::bulk(sha)),
            Err(_) => fail(format!("ERR the script cache holds {} bytes of scripts already (SCRIPT FLUSH empties it)", crate::script_cache::SCRIPT_CACHE_BYTES_MAX)),
        };
    }
    if is(subcommand, "EXISTS") && args.len() >= 3 {
        return Ok(Reply::Array(args[2..].iter().map(|sha| Reply::Integer(i64::from(call.shared.scripts.get(sha).is_some()))).collect()));
    }
    if is(subcommand, "FLUSH") && args.len() <= 3 {
        if args.len() == 3 && !is(&args[2], "ASYNC") && !is(&args[2], "SYNC") {
            return fail("ERR SCRIPT FLUSH only support SYNC|ASYNC option");
        }
        call.shared.scripts.flush();
        return Ok(Reply::ok());
    }
    if is(subcommand, "KILL") && args.len() == 2 {
        // A script holds its client's worker until it ends; none is ever seen running here.
        return fail("NOTBUSY No scripts in execution right now.");
    }
    Err(unknown_subcommand("script", subcommand))
}

/// EVAL script numkeys [key ...] [arg ...] and the other three: Redis's checks of numkeys,
/// then the script (NOSCRIPT for an unknown SHA-1), run with RESP2 replies inside.
fn run_script(call: &mut Call<'_>, by_sha: bool, read_only: bool) -> CommandResult {
    let args = call.args;
    let key_count = parse_integer(&args[2])?;
    if key_count > (args.len() - 3) as i64 {
        return fail("ERR Number of keys can't be greater than number of args");
    }
    if key_count < 0 {
        return fail("ERR Number of keys can't be negative");
    }
    let text = if by_sha {
        call.shared.scripts.get(&args[1]).map_or_else(|| fail(NO_SCRIPT), Ok)?
    } else {
        // A full cache only stops keeping scripts; EVAL still runs them.
        let _ = call.shared.scripts.insert(args[1].clone());
        args[1].clone()
    };
    let (keys, arguments) = args[3..].split_at(key_count as usize);
    let protocol = std::mem::replace(&mut call.session.protocol, ProtocolVersion::Resp2);
    let outcome = run_lua(call, &text, keys, arguments, read_only);
    call.session.protocol = protocol;
    outcome
}

/// Why a script stopped, beyond what Lua reports itself.
#[derive(Debug)]
enum Stop {
    /// A command called with `redis.call` failed (its error text), at a line of the script.
    CommandFailed { text: String, line: Option<usize> },
    /// The engine failed: the command fails as a whole, nothing written.
    Engine,
}

impl std::fmt::Display for Stop {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::CommandFailed { text, .. } => formatter.write_str(text),
            Stop::Engine => formatter.write_str("engine error"),
        }
    }
}

impl std::error::Error for Stop {}

/// Runs a script's text in a fresh sandbox with KEYS and ARGV set and the `redis` functions
/// bound to this command's store.
fn run_lua(call: &mut Call<'_>, text: &[u8], keys: &[Bytes], arguments: &[Bytes], read_only: bool) -> CommandResult {
    let sha = sha1_hex(text);
    let lua = sandbox().map_err(|error| CommandError::Redis(format!("ERR cannot start a Lua state: {error}").into()))?;
    let function = match lua.load(text).set_name(CHUNK_NAME).into_function() {
        Ok(function) => function,
        Err(error) => return fail(format!("ERR Error compiling script (new function): {}", lua_message(&error))),
    };
    let engine_failure: RefCell<Option<EngineError>> = RefCell::new(None);
    let call = RefCell::new(call);
    let declared_nothing = keys.is_empty() && arguments.is_empty();
    let outcome = lua.scope(|scope| {
        let globals = lua.globals();
        globals.set("KEYS", lua.create_sequence_from(keys.iter().map(|key| lua.create_string(key)).collect::<mlua::Result<Vec<_>>>()?)?)?;
        globals.set("ARGV", lua.create_sequence_from(arguments.iter().map(|argument| lua.create_string(argument)).collect::<mlua::Result<Vec<_>>>()?)?)?;
        let redis: Table = globals.get("redis")?;
        let (call, engine_failure) = (&call, &engine_failure);
        let context = Nested { declared_nothing, read_only };
        for (name, raises) in [("call", true), ("pcall", false)] {
            let run = scope.create_function(move |lua, words: MultiValue| command_from_script(lua, &mut call.borrow_mut(), words, context, raises, engine_failure))?;
            redis.set(name, run)?;
        }
        protect_globals(&lua, lua.named_registry_value(PAST_TIME)?)?;
        let value = function.call::<Value>(())?;
        Ok(reply_of(&value, 0))
    });
    if let Some(error) = engine_failure.into_inner() {
        return Err(CommandError::Engine(error));
    }
    outcome.map_err(|error| script_error(&error, &sha))
}

/// A Lua state with Redis's libraries for scripts (base without file access, table, string,
/// math), the `redis` table's pure functions, and the time and memory limits.
fn sandbox() -> mlua::Result<Lua> {
    let lua = Lua::new_with(StdLib::TABLE | StdLib::STRING | StdLib::MATH, LuaOptions::default())?;
    lua.set_memory_limit(SCRIPT_MEMORY_BYTES_MAX)?;
    let deadline = Instant::now() + Duration::from_millis(SCRIPT_RUN_MS_MAX);
    lua.set_hook(HookTriggers::new().every_nth_instruction(INSTRUCTIONS_PER_TIME_CHECK), move |_, debug| {
        if Instant::now() > deadline {
            let line = debug.current_line().map_or_else(|| "?".to_string(), |line| line.to_string());
            return Err(mlua::Error::RuntimeError(time_limit_message(&line)));
        }
        Ok(VmState::Continue)
    })?;
    lua.set_named_registry_value(PAST_TIME, lua.create_function(move |_, ()| Ok(Instant::now() > deadline))?)?;
    let globals = lua.globals();
    // Coroutines would run outside the time limit's hook.
    for unsafe_global in ["dofile", "loadfile", "coroutine"] {
        globals.set(unsafe_global, Value::Nil)?;
    }
    let redis = lua.create_table()?;
    redis.set("error_reply", lua.create_function(|lua, text: LuaString| reply_table(lua, "err", text))?)?;
    redis.set("status_reply", lua.create_function(|lua, text: LuaString| reply_table(lua, "ok", text))?)?;
    redis.set("sha1hex", lua.create_function(|_, text: LuaString| Ok(sha1_hex(&text.as_bytes())))?)?;
    // Logging, and replication controls older scripts call (there are no replicas: the whole
    // script's effects are one batch).
    redis.set("log", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
    redis.set("replicate_commands", lua.create_function(|_, _: MultiValue| Ok(true))?)?;
    redis.set("set_repl", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
    for (number, level) in ["LOG_DEBUG", "LOG_VERBOSE", "LOG_NOTICE", "LOG_WARNING"].into_iter().enumerate() {
        redis.set(level, number)?;
    }
    for (flag, number) in [("REPL_NONE", 0), ("REPL_AOF", 1), ("REPL_SLAVE", 2), ("REPL_REPLICA", 2), ("REPL_ALL", 3)] {
        redis.set(flag, number)?;
    }
    globals.set("redis", redis)?;
    Ok(lua)
}

/// `{field = text}`: how a script spells an error or status reply.
fn reply_table(lua: &Lua, field: &str, text: LuaString) -> mlua::Result<Table> {
    let table = lua.create_table()?;
    table.set(field, text)?;
    Ok(table)
}

/// Makes the globals read-only, with Redis's errors for reading an unset one and for setting
/// one; and makes `pcall` and `xpcall` raise the time limit's error once the script is past its
/// time, whatever they caught, so a script cannot go on by catching that error in a loop.
fn protect_globals(lua: &Lua, past_time: Function) -> mlua::Result<()> {
    lua.load(
        r#"local past_time, message = ...
        local raw_pcall, raw_xpcall, raise = pcall, xpcall, error
        local function unless_past_time(...)
            if past_time() then raise(message, 0) end
            return ...
        end
        pcall = function(...) return unless_past_time(raw_pcall(...)) end
        xpcall = function(...) return unless_past_time(raw_xpcall(...)) end
        setmetatable(_G, {
            __index = function(_, name) error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2) end,
            __newindex = function() error("Attempt to modify a readonly table", 2) end,
        })"#,
    )
    .set_name("=protection")
    .call((past_time, time_limit_message("?")))
}

fn time_limit_message(line: &str) -> String {
    format!("user_script:{line}: script ran for more than {SCRIPT_RUN_MS_MAX} ms and was stopped")
}

/// What a script's commands are checked against.
#[derive(Clone, Copy)]
struct Nested {
    /// The script declared no keys and no arguments: it runs outside any transaction, so a
    /// command on a key is refused.
    declared_nothing: bool,
    read_only: bool,
}

/// `redis.call` (`raises`) and `redis.pcall`: runs a command within the script's command and
/// answers its reply as a Lua value; a failure raises (call) or is answered as `{err = text}`
/// (pcall). An engine failure stops the script whatever the function.
fn command_from_script(lua: &Lua, call: &mut Call<'_>, words: MultiValue, context: Nested, raises: bool, engine_failure: &RefCell<Option<EngineError>>) -> mlua::Result<Value> {
    let outcome = command_arguments(lua, words).and_then(|args| run_nested(call, &args, context));
    match outcome {
        Ok(reply) => lua_value_of(lua, reply),
        Err(CommandError::Engine(error)) => {
            *engine_failure.borrow_mut() = Some(error);
            Err(mlua::Error::external(Stop::Engine))
        }
        Err(CommandError::Redis(text)) if raises => {
            let line = lua.inspect_stack(1, |debug| debug.current_line()).flatten();
            Err(mlua::Error::external(Stop::CommandFailed { text: text.into_owned(), line }))
        }
        Err(CommandError::Redis(text)) => reply_table(lua, "err", lua.create_string(text.as_bytes())?).map(Value::Table),
    }
}

/// A command's words from a script: strings, or numbers as Lua writes them.
fn command_arguments(lua: &Lua, words: MultiValue) -> Result<Vec<Bytes>, CommandError> {
    if words.is_empty() {
        return fail("ERR Please specify at least one argument for this redis lib call");
    }
    words
        .into_iter()
        .map(|word| match word {
            Value::String(_) | Value::Number(_) | Value::Integer(_) => match lua.coerce_string(word) {
                Ok(Some(text)) => Ok(Bytes::copy_from_slice(&text.as_bytes())),
                _ => fail("ERR Lua redis lib command arguments must be strings or integers"),
            },
            _ => fail("ERR Lua redis lib command arguments must be strings or integers"),
        })
        .collect()
}

/// Runs one command of a script on the script's store, after Redis's checks.
fn run_nested(call: &mut Call<'_>, args: &[Bytes], context: Nested) -> CommandResult {
    let Some(spec) = lookup(&args[0]) else { return fail("ERR Unknown Redis command called from script") };
    if !spec.arity_ok(args.len()) {
        return fail("ERR Wrong number of args calling Redis command from script");
    }
    // Sessions check a subcommand's arity before its handler runs; so does a script.
    check_subcommand(spec, args)?;
    check_allowed(spec, args, context)?;
    let mut nested = Call { args, session: &mut *call.session, shared: call.shared, namespace: call.namespace, store: &mut *call.store };
    match (spec.handler)(&mut nested) {
        Err(CommandError::Engine(EngineError::UndeclaredKey)) => fail(UNDECLARED_KEY),
        other => other,
    }
}

const UNDECLARED_KEY: &str = "ERR Script attempted to access a key not declared in KEYS (hybridkv runs a script as one transaction over the keys it declares)";

/// Redis's refusals of commands in scripts (and hybridkv's: commands on undeclared keys).
fn check_allowed(spec: &CommandSpec, args: &[Bytes], context: Nested) -> Result<(), CommandError> {
    let refused_flags = TRANSACTION_CONTROL | BLOCKS_ON_KEYS | CROSSES_DATABASES | WHOLE_KEYSPACE | AFTER_TRANSACTION;
    if !spec.has(IN_MULTI) || spec.has(refused_flags) || REFUSED_IN_SCRIPTS.contains(&spec.name) {
        return fail(NOT_ALLOWED);
    }
    if context.read_only && spec.has(WRITE) {
        return fail("ERR Write commands are not allowed from read-only scripts.");
    }
    if context.declared_nothing && !spec.keys.keys(args).is_empty() {
        return fail(UNDECLARED_KEY);
    }
    Ok(())
}

/// A reply as a script sees it (Redis's RESP2 to Lua conversion): integers as numbers, bulk
/// strings as strings, nil as false, status and error replies as `{ok = …}` and `{err = …}`,
/// arrays as tables; RESP3-only types as RESP2 would write them.
fn lua_value_of(lua: &Lua, reply: Reply) -> mlua::Result<Value> {
    Ok(match reply {
        Reply::Simple(text) => Value::Table(reply_table(lua, "ok", lua.create_string(text.as_bytes())?)?),
        Reply::Error(text) => Value::Table(reply_table(lua, "err", lua.create_string(text.as_bytes())?)?),
        Reply::Integer(number) => Value::Number(number as f64),
        Reply::Boolean(truth) => Value::Number(f64::from(u8::from(truth))),
        Reply::Bulk(bytes) | Reply::Verbatim { text: bytes, .. } => Value::String(lua.create_string(&bytes)?),
        Reply::Double(number) => Value::String(lua.create_string(format_double(number))?),
        Reply::DoubleText(text) => Value::String(lua.create_string(text)?),
        Reply::Null | Reply::NullArray => Value::Boolean(false),
        Reply::Array(items) | Reply::Set(items) | Reply::Push(items) => Value::Table(lua_sequence(lua, items)?),
        Reply::Map(pairs) => Value::Table(lua_sequence(lua, pairs.into_iter().flat_map(|(key, value)| [key, value]).collect())?),
    })
}

fn lua_sequence(lua: &Lua, items: Vec<Reply>) -> mlua::Result<Table> {
    let table = lua.create_table_with_capacity(items.len(), 0)?;
    for (at, item) in items.into_iter().enumerate() {
        table.raw_set(at + 1, lua_value_of(lua, item)?)?;
    }
    Ok(table)
}

/// A script's result as a reply (Redis's Lua to RESP conversion): strings as bulk strings,
/// numbers as integers (truncated), true as 1, false and nil as nil, `{err = …}` and
/// `{ok = …}` as error and status replies, other tables as arrays up to their first nil.
fn reply_of(value: &Value, depth: usize) -> Reply {
    match value {
        Value::String(text) => Reply::Bulk(Bytes::copy_from_slice(&text.as_bytes())),
        Value::Integer(number) => Reply::Integer(*number),
        Value::Number(number) => Reply::Integer(*number as i64),
        Value::Boolean(true) => Reply::Integer(1),
        Value::Table(_) if depth >= REPLY_DEPTH_MAX => Reply::error("ERR reached lua stack limit"),
        Value::Table(table) => table_reply(table, depth),
        _ => Reply::Null,
    }
}

fn table_reply(table: &Table, depth: usize) -> Reply {
    if let Ok(Value::String(text)) = table.raw_get::<Value>("err") {
        return Reply::error(String::from_utf8_lossy(&text.as_bytes()).into_owned());
    }
    if let Ok(Value::String(text)) = table.raw_get::<Value>("ok") {
        return Reply::Simple(String::from_utf8_lossy(&text.as_bytes()).replace(['\r', '\n'], " ").into());
    }
    let mut items = Vec::new();
    for index in 1.. {
        match table.raw_get::<Value>(index) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(item) => items.push(reply_of(&item, depth + 1)),
        }
    }
    Reply::Array(items)
}

/// A Lua error's message alone (mlua adds its kind and, for callbacks, a traceback).
fn lua_message(error: &mlua::Error) -> String {
    match error {
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        mlua::Error::RuntimeError(message) => message.split("\nstack traceback:").next().unwrap_or_default().to_string(),
        mlua::Error::CallbackError { cause, .. } => lua_message(cause),
        mlua::Error::MemoryError(message) => message.clone(),
        other => other.to_string(),
    }
}

/// A script's failure as Redis answers it: the error, then ` script: <sha>, on
/// @user_script:<line>.`; a runtime error's text starts with `user_script:<line>:`, and gets the
/// `ERR` code unless it has one.
fn script_error(error: &mlua::Error, sha: &str) -> CommandError {
    if let Some(stop) = stop_of(error) {
        return match stop {
            Stop::CommandFailed { text, line } => CommandError::Redis(with_origin(text, sha, *line).into()),
            Stop::Engine => unreachable!("engine failures are answered before"),
        };
    }
    let message = lua_message(error);
    let line = message.strip_prefix("user_script:").and_then(|rest| rest.split(':').next()).and_then(|line| line.parse().ok());
    CommandError::Redis(with_origin(&format!("ERR {message}"), sha, line).into())
}

fn stop_of(error: &mlua::Error) -> Option<&Stop> {
    match error {
        mlua::Error::CallbackError { cause, .. } => stop_of(cause),
        mlua::Error::ExternalError(inner) => inner.downcast_ref::<Stop>(),
        _ => None,
    }
}

fn with_origin(text: &str, sha: &str, line: Option<usize>) -> String {
    let line = line.map_or_else(|| "?".to_string(), |line| line.to_string());
    format!("{text} script: {sha}, on @user_script:{line}.")
}
