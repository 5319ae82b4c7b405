//! Lua scripting: EVAL EVALSHA EVAL_RO EVALSHA_RO and SCRIPT (LOAD EXISTS FLUSH KILL), as Redis
//! 7.0 runs scripts: Lua 5.1 (mlua, built from its vendored sources), the KEYS and ARGV tables,
//! `redis.call`, `redis.pcall`, `redis.error_reply`, `redis.status_reply`, `redis.sha1hex` and
//! `redis.log`, the `cjson`, `bit` and `cmsgpack` libraries (`super::lua_libraries`), replies converted both
//! ways as Redis converts them (the script sees RESP2 replies), globals and libraries
//! read-only, and Redis's error texts (`… script: <sha>, on @user_script:<line>.`). Each worker
//! thread runs its scripts in one Lua state (`ScriptState`), as Redis runs all scripts in one.
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

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hybridkv_engine::EngineError;
use hybridkv_resp::{format_double, ProtocolVersion, Reply};
use mlua::{Function, HookTriggers, Lua, LuaOptions, LuaString, MultiValue, StdLib, Table, Value, VmState};

use super::{check_subcommand, is, lookup, parse_integer, subcommand_help, unknown_subcommand};
use crate::command::{fail, Call, CommandError, CommandResult, CommandSpec, AFTER_TRANSACTION, BLOCKS_ON_KEYS, CROSSES_DATABASES, IN_MULTI, TRANSACTION_CONTROL, WHOLE_KEYSPACE, WRITE};
use crate::info::REDIS_COMPATIBLE_VERSION;
use crate::long_double::c_signed;
use crate::script_cache::sha1_hex;
use crate::users::LogContext;

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

/// Scripts one worker's Lua state keeps compiled; past them it is built anew.
const COMPILED_SCRIPTS_MAX: usize = 1024;
/// Names of the base library Redis takes out of scripts' reach (and coroutines, which would run
/// outside the time limit's hook).
const REMOVED_GLOBALS: &[&str] = &["dofile", "loadfile", "coroutine", "getfenv", "setfenv", "newproxy", "print", "module", "require"];
/// The registry names of the `redis` table as built (scripts see a read-only view of it) and of
/// the function giving a compiled script the protected environment.
const REDIS_TABLE: &str = "hybridkv_redis";
const PROTECT: &str = "hybridkv_protect";

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
    let (sha, text) = if by_sha {
        let text = call.shared.scripts.get(&args[1]).map_or_else(|| fail(NO_SCRIPT), Ok)?;
        // Found: a SHA-1 in hexadecimal, in any case.
        (String::from_utf8_lossy(&args[1]).to_ascii_lowercase(), text)
    } else {
        // A full cache only stops keeping scripts; EVAL still runs them.
        let sha = call.shared.scripts.insert(args[1].clone()).unwrap_or_else(|_| sha1_hex(&args[1]));
        (sha, args[1].clone())
    };
    let (keys, arguments) = args[3..].split_at(key_count as usize);
    let protocol = std::mem::replace(&mut call.session.protocol, ProtocolVersion::Resp2);
    let in_script = std::mem::replace(&mut call.session.in_script, true);
    let outcome = run_lua(call, &sha, &text, keys, arguments, read_only);
    (call.session.protocol, call.session.in_script) = (protocol, in_script);
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

thread_local! {
    /// This worker thread's Lua state, reused by the scripts it runs.
    static STATE: RefCell<Option<ScriptState>> = const { RefCell::new(None) };
}

/// A Lua state scripts share, as Redis's scripts share one: whatever a script could change for
/// the next one is read-only (the globals, the libraries, the `redis` table, the string
/// metatable; `rawset` and `setmetatable` refuse them; `loadstring` and `load` give what they
/// compile the protected environment), so each script starts as in a fresh state.
struct ScriptState {
    lua: Lua,
    /// When the running script's time is up.
    deadline: Rc<Cell<Instant>>,
    /// The script cache's generation (SCRIPT FLUSH) the state was built in.
    generation: u64,
    /// Scripts compiled here, by SHA-1, with the protected environment.
    compiled: HashMap<String, Function>,
}

/// Runs a script's text (whose SHA-1 is `sha`) in this worker's Lua state (built anew after SCRIPT FLUSH, past
/// `COMPILED_SCRIPTS_MAX` scripts, or when its memory stays high) with KEYS and ARGV set and
/// the `redis` functions bound to this command's store.
fn run_lua(call: &mut Call<'_>, sha: &str, text: &[u8], keys: &[Bytes], arguments: &[Bytes], read_only: bool) -> CommandResult {
    let generation = call.shared.scripts.generation();
    STATE.with(|slot| {
        let mut slot = slot.borrow_mut();
        if slot.as_ref().is_none_or(|state| state.generation != generation) {
            let state = ScriptState::new(generation).map_err(|error| CommandError::Redis(format!("ERR cannot start a Lua state: {error}").into()))?;
            *slot = Some(state);
        }
        let state = slot.as_mut().expect("built above");
        let outcome = state.run(call, sha, text, keys, arguments, read_only);
        if !state.fit_for_reuse() {
            *slot = None;
        }
        outcome
    })
}

impl ScriptState {
    /// A Lua state with Redis's libraries for scripts (base without file access, table,
    /// string, math), the `redis` table's pure functions, the time and memory limits, and its
    /// globals protected.
    fn new(generation: u64) -> mlua::Result<ScriptState> {
        let lua = Lua::new_with(StdLib::TABLE | StdLib::STRING | StdLib::MATH, LuaOptions::default())?;
        lua.set_memory_limit(SCRIPT_MEMORY_BYTES_MAX)?;
        let deadline = Rc::new(Cell::new(Instant::now()));
        let hook_deadline = Rc::clone(&deadline);
        lua.set_hook(HookTriggers::new().every_nth_instruction(INSTRUCTIONS_PER_TIME_CHECK), move |_, debug| {
            if Instant::now() > hook_deadline.get() {
                let line = debug.current_line().map_or_else(|| "?".to_string(), |line| line.to_string());
                return Err(mlua::Error::RuntimeError(time_limit_message(&line)));
            }
            Ok(VmState::Continue)
        })?;
        let globals = lua.globals();
        let redis = redis_table(&lua)?;
        globals.raw_set("redis", redis.clone())?;
        for (name, library) in super::lua_libraries::libraries(&lua)? {
            globals.raw_set(name, library)?;
        }
        lua.set_named_registry_value(REDIS_TABLE, redis)?;
        let past_deadline = Rc::clone(&deadline);
        let past_time = lua.create_function(move |_, ()| Ok(Instant::now() > past_deadline.get()))?;
        let protect: Function = protect_globals(&lua, past_time)?;
        lua.set_named_registry_value(PROTECT, protect)?;
        // After the protection took the functions it wraps.
        for removed in REMOVED_GLOBALS {
            globals.raw_set(*removed, Value::Nil)?;
        }
        Ok(ScriptState { lua, deadline, generation, compiled: HashMap::new() })
    }

    /// Whether the next script may run in this state: not past `COMPILED_SCRIPTS_MAX` scripts,
    /// and under half the memory limit once garbage is collected.
    fn fit_for_reuse(&mut self) -> bool {
        if self.compiled.len() >= COMPILED_SCRIPTS_MAX {
            return false;
        }
        if self.lua.used_memory() > SCRIPT_MEMORY_BYTES_MAX / 2 && self.lua.gc_collect().is_err() {
            return false;
        }
        self.lua.used_memory() <= SCRIPT_MEMORY_BYTES_MAX / 2
    }

    /// The script compiled with the protected environment, compiled the first time.
    fn compiled(&mut self, sha: &str, text: &[u8]) -> Result<Function, CommandError> {
        if let Some(function) = self.compiled.get(sha) {
            return Ok(function.clone());
        }
        let compiled = self.lua.load(text).set_name(CHUNK_NAME).into_function();
        let function = match compiled {
            Ok(function) => function,
            Err(error) => return fail(format!("ERR Error compiling script (new function): {}", lua_message(&error))),
        };
        let protect: Function = self.lua.named_registry_value(PROTECT).map_err(|error| CommandError::Redis(format!("ERR {error}").into()))?;
        let function: Function = protect.call(function).map_err(|error| CommandError::Redis(format!("ERR {error}").into()))?;
        self.compiled.insert(sha.to_string(), function.clone());
        Ok(function)
    }

    fn run(&mut self, call: &mut Call<'_>, sha: &str, text: &[u8], keys: &[Bytes], arguments: &[Bytes], read_only: bool) -> CommandResult {
        let function = self.compiled(sha, text)?;
        self.deadline.set(Instant::now() + Duration::from_millis(SCRIPT_RUN_MS_MAX));
        let lua = &self.lua;
        let engine_failure: RefCell<Option<EngineError>> = RefCell::new(None);
        let call = RefCell::new(call);
        let declared_nothing = keys.is_empty() && arguments.is_empty();
        let outcome = lua.scope(|scope| {
            let globals = lua.globals();
            globals.raw_set("KEYS", lua.create_sequence_from(keys.iter().map(|key| lua.create_string(key)).collect::<mlua::Result<Vec<_>>>()?)?)?;
            globals.raw_set("ARGV", lua.create_sequence_from(arguments.iter().map(|argument| lua.create_string(argument)).collect::<mlua::Result<Vec<_>>>()?)?)?;
            let redis: Table = lua.named_registry_value(REDIS_TABLE)?;
            let (call, engine_failure) = (&call, &engine_failure);
            let context = Nested { declared_nothing, read_only };
            for (name, raises) in [("call", true), ("pcall", false)] {
                let run = scope.create_function(move |lua, words: MultiValue| command_from_script(lua, &mut call.borrow_mut(), words, context, raises, engine_failure))?;
                redis.raw_set(name, run)?;
            }
            redis.raw_set("setresp", scope.create_function(move |lua, arguments: MultiValue| set_protocol(lua, &mut call.borrow_mut(), arguments))?)?;
            let value = function.call::<Value>(())?;
            Ok(reply_of(&value, 0, call.borrow().session.protocol == ProtocolVersion::Resp3))
        });
        // The script's tables go with it (the functions bound to its store went with the scope).
        let globals = lua.globals();
        let _ = globals.raw_set("KEYS", Value::Nil).and_then(|()| globals.raw_set("ARGV", Value::Nil));
        if let Some(error) = engine_failure.into_inner() {
            return Err(CommandError::Engine(error));
        }
        outcome.map_err(|error| script_error(&error, sha))
    }
}

/// The `redis` table's functions that need no store, and its constants.
fn redis_table(lua: &Lua) -> mlua::Result<Table> {
    let redis = lua.create_table()?;
    redis.set("error_reply", lua.create_function(|lua, text: LuaString| reply_table(lua, "err", text))?)?;
    redis.set("status_reply", lua.create_function(|lua, text: LuaString| reply_table(lua, "ok", text))?)?;
    redis.set("sha1hex", lua.create_function(|_, text: LuaString| Ok(sha1_hex(&text.as_bytes())))?)?;
    // Logging, and replication controls older scripts call (there are no replicas: the whole
    // script's effects are one batch).
    redis.set("log", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
    redis.set("replicate_commands", lua.create_function(|_, _: MultiValue| Ok(true))?)?;
    redis.set("set_repl", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
    // No debugger: a breakpoint is never taken, a debug message goes nowhere.
    redis.set("breakpoint", lua.create_function(|_, _: MultiValue| Ok(false))?)?;
    redis.set("debug", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
    // Every command is allowed to every client (no ACL users): a known command passes.
    redis.set("acl_check_cmd", lua.create_function(|lua, words: MultiValue| {
        let args = command_arguments(lua, words).map_err(|error| command_failure(lua, error))?;
        match lookup(&args[0]) {
            Some(_) => Ok(true),
            None => Err(command_failure(lua, CommandError::Redis("ERR Invalid command passed to redis.acl_check_cmd()".into()))),
        }
    })?)?;
    redis.set("REDIS_VERSION", REDIS_COMPATIBLE_VERSION)?;
    let version_number = REDIS_COMPATIBLE_VERSION.split('.').map(|part| part.parse::<u32>().expect("a numeric version")).fold(0, |number, part| number << 8 | part);
    redis.set("REDIS_VERSION_NUM", version_number)?;
    for (number, level) in ["LOG_DEBUG", "LOG_VERBOSE", "LOG_NOTICE", "LOG_WARNING"].into_iter().enumerate() {
        redis.set(level, number)?;
    }
    for (flag, number) in [("REPL_NONE", 0), ("REPL_AOF", 1), ("REPL_SLAVE", 2), ("REPL_REPLICA", 2), ("REPL_ALL", 3)] {
        redis.set(flag, number)?;
    }
    Ok(redis)
}

/// `{field = text}`: how a script spells an error or status reply.
fn reply_table(lua: &Lua, field: &str, text: LuaString) -> mlua::Result<Table> {
    let table = lua.create_table()?;
    table.set(field, text)?;
    Ok(table)
}

/// Makes what scripts share read-only, with Redis's errors (for reading an unset global, for
/// changing a read-only table): scripts run in an environment whose reads go to the globals and
/// whose writes fail; the libraries and `redis` are read-only views; `rawset`, `rawget`,
/// `setmetatable`, `next` and `pairs` see through the views without changing what they show;
/// the string metatable is hidden behind a view; `loadstring` and `load` give what they compile
/// the environment. Makes `pcall` and `xpcall` raise the time limit's error once the script is
/// past its time, whatever they caught, so a script cannot go on by catching that error in a
/// loop. Answers the function that gives a compiled script the environment.
fn protect_globals(lua: &Lua, past_time: Function) -> mlua::Result<Function> {
    lua.load(
        r#"local G, past_time, message = ...
        local raw_rawset, raw_rawget, raw_setmetatable, raw_getmetatable = rawset, rawget, setmetatable, getmetatable
        local raw_next, raw_pairs, raw_setfenv, raw_loadstring, raw_load = next, pairs, setfenv, loadstring, load
        local raw_pcall, raw_xpcall, raise, text_of = pcall, xpcall, error, tostring
        local real_of = {}
        -- As Redis: a write through a read-only table names the script's line; rawset,
        -- setmetatable and the table functions (C functions there) name none.
        local function refuse() raise("Attempt to modify a readonly table", 2) end
        local function refuse_call() raise("Attempt to modify a readonly table", 0) end
        -- What getmetatable shows of a read-only table: an empty read-only table.
        local hidden = {}
        raw_setmetatable(hidden, {__newindex = refuse, __metatable = hidden})
        real_of[hidden] = {}
        local function view(real, index)
            local shown = {}
            raw_setmetatable(shown, {__index = index or real, __newindex = refuse, __metatable = hidden})
            real_of[shown] = real
            return shown
        end
        local real_table = G.table
        for _, name in ipairs({"insert", "remove", "sort"}) do
            local raw = real_table[name]
            real_table[name] = function(t, ...)
                if real_of[t] then refuse_call() end
                return raw(t, ...)
            end
        end
        for _, name in ipairs({"string", "table", "math", "redis", "cjson", "bit", "cmsgpack"}) do
            G[name] = view(G[name])
        end
        local string_metatable = raw_getmetatable("")
        string_metatable.__metatable = view(string_metatable)
        local environment = view(G, G)
        G._G = environment
        raw_setmetatable(G, {__index = function(_, name)
            raise("Script attempted to access nonexistent global variable '" .. text_of(name) .. "'", 2)
        end})
        local function unless_past_time(...)
            if past_time() then raise(message, 0) end
            return ...
        end
        -- As Redis's pcall: a failed redis.call (an error the runtime raised, seen here as
        -- a userdata) is caught as its error text, an error table as its err field.
        local raw_type = type
        local function caught(ok, ...)
            if ok then return ok, ... end
            local failure = ...
            if raw_type(failure) == "userdata" then
                failure = (text_of(failure):gsub("\nstack traceback:.*", ""))
            elseif raw_type(failure) == "table" and raw_rawget(failure, "err") ~= nil then
                failure = raw_rawget(failure, "err")
            end
            return false, failure
        end
        G.pcall = function(...) return unless_past_time(caught(raw_pcall(...))) end
        G.xpcall = function(...) return unless_past_time(raw_xpcall(...)) end
        G.rawset = function(t, k, v)
            if real_of[t] then refuse_call() end
            return raw_rawset(t, k, v)
        end
        G.rawget = function(t, k) return raw_rawget(real_of[t] or t, k) end
        G.setmetatable = function(t, m)
            if real_of[t] then refuse_call() end
            return raw_setmetatable(t, m)
        end
        local function next_of(t, k) return raw_next(real_of[t] or t, k) end
        G.next = next_of
        G.pairs = function(t)
            if real_of[t] then return next_of, t, nil end
            return raw_pairs(t)
        end
        local function in_environment(f, ...)
            if f then raw_setfenv(f, environment) end
            return f, ...
        end
        G.loadstring = function(...) return in_environment(raw_loadstring(...)) end
        G.load = function(...) return in_environment(raw_load(...)) end
        return function(f) raw_setfenv(f, environment) return f end"#,
    )
    .set_name("=protection")
    .call((lua.globals(), past_time, time_limit_message("?")))
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
        Ok(reply) => lua_value_of(lua, reply, call.session.protocol == ProtocolVersion::Resp3),
        Err(CommandError::Engine(error)) => {
            *engine_failure.borrow_mut() = Some(error);
            Err(mlua::Error::external(Stop::Engine))
        }
        Err(error) if raises => Err(command_failure(lua, error)),
        Err(CommandError::Redis(text)) => reply_table(lua, "err", lua.create_string(text.as_bytes())?).map(Value::Table),
    }
}

/// A failure raised as `redis.call` raises a failed command's: its text as the error, with
/// the script's line.
fn command_failure(lua: &Lua, error: CommandError) -> mlua::Error {
    let text = match error {
        CommandError::Redis(text) => text.into_owned(),
        CommandError::Engine(error) => format!("ERR {error}"),
    };
    let line = lua.inspect_stack(1, |debug| debug.current_line()).flatten();
    mlua::Error::external(Stop::CommandFailed { text, line })
}

/// `redis.setresp(2 | 3)`: the protocol of the replies the script's next commands get (RESP2
/// by default; RESP3's maps, sets, doubles and nulls then arrive as Redis gives them).
fn set_protocol(lua: &Lua, call: &mut Call<'_>, arguments: MultiValue) -> mlua::Result<()> {
    let failure = |text: &str| command_failure(lua, CommandError::Redis(text.to_string().into()));
    let [version] = <[Value; 1]>::try_from(arguments.into_iter().collect::<Vec<_>>()).map_err(|_| failure("ERR redis.setresp() requires one argument."))?;
    call.session.protocol = match version.as_f64().or_else(|| version.as_i64().map(|number| number as f64)) {
        Some(2.0) => ProtocolVersion::Resp2,
        Some(3.0) => ProtocolVersion::Resp3,
        _ => return Err(failure("ERR RESP version must be 2 or 3.")),
    };
    Ok(())
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
    check_allowed_in_scripts(spec)?;
    check_permitted(call, spec, args)?;
    check_allowed_here(spec, args, context)?;
    let mut nested = Call { args, session: &mut *call.session, shared: call.shared, namespace: call.namespace, store: &mut *call.store };
    match (spec.handler)(&mut nested) {
        Err(CommandError::Engine(EngineError::UndeclaredKey)) => fail(UNDECLARED_KEY),
        other => other,
    }
}

const UNDECLARED_KEY: &str = "ERR Script attempted to access a key not declared in KEYS (hybridkv runs a script as one transaction over the keys it declares)";

/// The script's user's ACL permissions, checked for each command it runs, as at the top level
/// (a denial goes to ACL LOG with the context `lua`).
fn check_permitted(call: &mut Call<'_>, spec: &'static CommandSpec, args: &[Bytes]) -> Result<(), CommandError> {
    let Err(denial) = call.session.permissions.check(spec, args) else { return Ok(()) };
    call.shared.users.log.record_denial(&denial, LogContext::Script, &call.session.client);
    fail(denial.script_error_text())
}

/// Redis's refusal of the commands no script may run.
fn check_allowed_in_scripts(spec: &CommandSpec) -> Result<(), CommandError> {
    let refused_flags = TRANSACTION_CONTROL | BLOCKS_ON_KEYS | CROSSES_DATABASES | WHOLE_KEYSPACE | AFTER_TRANSACTION;
    if !spec.has(IN_MULTI) || spec.has(refused_flags) || REFUSED_IN_SCRIPTS.contains(&spec.name) {
        return fail(NOT_ALLOWED);
    }
    Ok(())
}

/// Redis's refusals of commands in this script (and hybridkv's: commands on undeclared keys),
/// checked after the user's permissions, as Redis checks them.
fn check_allowed_here(spec: &CommandSpec, args: &[Bytes], context: Nested) -> Result<(), CommandError> {
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
/// arrays as tables; RESP3-only types as RESP2 would write them. After `redis.setresp(3)`
/// (`resp3`), Redis's RESP3 conversion: nil as nil, booleans as booleans, doubles as
/// `{double = n}`, maps as `{map = {key = value}}`, sets as `{set = {member = true}}`.
fn lua_value_of(lua: &Lua, reply: Reply, resp3: bool) -> mlua::Result<Value> {
    Ok(match reply {
        Reply::Simple(text) => Value::Table(reply_table(lua, "ok", lua.create_string(text.as_bytes())?)?),
        Reply::Error(text) => Value::Table(reply_table(lua, "err", lua.create_string(text.as_bytes())?)?),
        Reply::Integer(number) => Value::Number(number as f64),
        Reply::Boolean(truth) if resp3 => Value::Boolean(truth),
        Reply::Boolean(truth) => Value::Number(f64::from(u8::from(truth))),
        Reply::Bulk(bytes) | Reply::Verbatim { text: bytes, .. } => Value::String(lua.create_string(&bytes)?),
        Reply::Double(number) if resp3 => Value::Table(lua.create_table_from([("double", number)])?),
        Reply::DoubleText(text) if resp3 => Value::Table(lua.create_table_from([("double", text.parse::<f64>().unwrap_or(f64::NAN))])?),
        Reply::Double(number) => Value::String(lua.create_string(format_double(number))?),
        Reply::DoubleText(text) => Value::String(lua.create_string(text)?),
        Reply::Null | Reply::NullArray if resp3 => Value::Nil,
        Reply::Null | Reply::NullArray => Value::Boolean(false),
        Reply::Map(pairs) if resp3 => {
            let map = lua.create_table()?;
            for (key, value) in pairs {
                map.raw_set(lua_value_of(lua, key, resp3)?, lua_value_of(lua, value, resp3)?)?;
            }
            Value::Table(lua.create_table_from([("map", map)])?)
        }
        Reply::Set(members) if resp3 => {
            let set = lua.create_table()?;
            for member in members {
                set.raw_set(lua_value_of(lua, member, resp3)?, true)?;
            }
            Value::Table(lua.create_table_from([("set", set)])?)
        }
        Reply::Array(items) | Reply::Set(items) | Reply::Push(items) => Value::Table(lua_sequence(lua, items, resp3)?),
        Reply::Map(pairs) => Value::Table(lua_sequence(lua, pairs.into_iter().flat_map(|(key, value)| [key, value]).collect(), resp3)?),
    })
}

fn lua_sequence(lua: &Lua, items: Vec<Reply>, resp3: bool) -> mlua::Result<Table> {
    let table = lua.create_table_with_capacity(items.len(), 0)?;
    for (at, item) in items.into_iter().enumerate() {
        table.raw_set(at + 1, lua_value_of(lua, item, resp3)?)?;
    }
    Ok(table)
}

/// A script's result as a reply (Redis's Lua to RESP conversion): strings as bulk strings,
/// numbers as integers (truncated), true as 1, false and nil as nil (booleans as booleans once
/// the script called `redis.setresp(3)`: `resp3`), `{err = …}`, `{ok = …}`, `{double = …}`,
/// `{big_number = …}`, `{map = …}` and `{set = …}` as those replies, other tables as arrays up
/// to their first nil.
fn reply_of(value: &Value, depth: usize, resp3: bool) -> Reply {
    match value {
        Value::Boolean(truth) if resp3 => Reply::Boolean(*truth),
        Value::String(text) => Reply::Bulk(Bytes::copy_from_slice(&text.as_bytes())),
        Value::Integer(number) => Reply::Integer(*number),
        // Truncated as Redis's C cast does (an infinity or NaN becomes i64::MIN).
        Value::Number(number) => Reply::Integer(c_signed(*number)),
        Value::Boolean(true) => Reply::Integer(1),
        Value::Table(_) if depth >= REPLY_DEPTH_MAX => Reply::error("ERR reached lua stack limit"),
        Value::Table(table) => table_reply(table, depth, resp3),
        _ => Reply::Null,
    }
}

fn table_reply(table: &Table, depth: usize, resp3: bool) -> Reply {
    if let Ok(Value::String(text)) = table.raw_get::<Value>("err") {
        return Reply::error(String::from_utf8_lossy(&text.as_bytes()).into_owned());
    }
    if let Ok(Value::String(text)) = table.raw_get::<Value>("ok") {
        return Reply::Simple(String::from_utf8_lossy(&text.as_bytes()).replace(['\r', '\n'], " ").into());
    }
    if let Ok(Value::Number(number)) = table.raw_get::<Value>("double") {
        return Reply::Double(number);
    }
    if let Ok(Value::String(text)) = table.raw_get::<Value>("big_number") {
        return Reply::Bulk(Bytes::copy_from_slice(&text.as_bytes()));
    }
    if let Ok(Value::Table(map)) = table.raw_get::<Value>("map") {
        let pairs = map.pairs::<Value, Value>().filter_map(Result::ok);
        return Reply::Map(pairs.map(|(key, value)| (reply_of(&key, depth + 1, resp3), reply_of(&value, depth + 1, resp3))).collect());
    }
    if let Ok(Value::Table(set)) = table.raw_get::<Value>("set") {
        return Reply::Set(set.pairs::<Value, Value>().filter_map(Result::ok).map(|(member, _)| reply_of(&member, depth + 1, resp3)).collect());
    }
    let mut items = Vec::new();
    for index in 1.. {
        match table.raw_get::<Value>(index) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(item) => items.push(reply_of(&item, depth + 1, resp3)),
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
    // The line the message starts with, else (an error raised without a position) the
    // script's line in the traceback, as Redis's error handler reports it.
    let full = error.to_string();
    let line = message.strip_prefix("user_script:").or_else(|| full.split_once("\tuser_script:").map(|(_, rest)| rest));
    let line = line.and_then(|rest| rest.split(':').next()).and_then(|line| line.parse().ok());
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
