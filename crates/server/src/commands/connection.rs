//! Connection commands: PING ECHO QUIT HELLO AUTH SELECT CLIENT RESET.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hybridkv_resp::{ProtocolVersion, Reply};

use super::tracking;
use super::waits::parse_timeout_ms;
use super::{is, parse_integer, subcommand_help, unknown_subcommand, NOT_INTEGER, SYNTAX_ERROR};
use crate::command::{fail, Call, CommandError, CommandResult, DB_INDEX_OUT_OF_RANGE};
use crate::info::REDIS_COMPATIBLE_VERSION;
use crate::pause::PauseMode;
use crate::session::ReplyMode;
use crate::shared::{ClientHandle, Shared};
use crate::users::DEFAULT_USER;

/// PING; a subscribed RESP2 client gets `["pong", message or ""]`, as Redis answers in the
/// shape of the notices it reads.
pub fn ping(call: &mut Call<'_>) -> CommandResult {
    if call.args.len() > 2 {
        return Err(crate::command::wrong_arity("ping"));
    }
    let message = call.args.get(1).cloned();
    if call.session.protocol == ProtocolVersion::Resp2 && call.session.is_subscriber() {
        return Ok(Reply::Array(vec![Reply::bulk_text("pong"), Reply::Bulk(message.unwrap_or_default())]));
    }
    Ok(message.map_or_else(|| Reply::simple("PONG"), Reply::Bulk))
}

pub fn echo(call: &mut Call<'_>) -> CommandResult {
    Ok(Reply::Bulk(call.args[1].clone()))
}

pub fn quit(call: &mut Call<'_>) -> CommandResult {
    call.session.close_after_reply = true;
    Ok(Reply::ok())
}

const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// Authenticates the session as `user` (the default user when None) if `password` is one of
/// its passwords (any, for a user with `nopass`); a failure goes to ACL LOG.
fn authenticate(call: &mut Call<'_>, user: Option<&Bytes>, password: &[u8]) -> Result<(), CommandError> {
    let name = user.cloned().unwrap_or_else(|| Bytes::from_static(DEFAULT_USER.as_bytes()));
    if !call.shared.users.get(&name).is_some_and(|user| user.accepts(password)) {
        call.shared.users.log.record_failed_auth(&name, &call.session.client);
        return fail(WRONGPASS);
    }
    call.session.become_user(name, true, &call.shared.users);
    Ok(())
}

pub fn auth(call: &mut Call<'_>) -> CommandResult {
    match call.args.len() {
        2 if call.shared.users.default_needs_no_password() => fail(
            "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
        ),
        2 => authenticate(call, None, &call.args[1].clone()).map(|_| Reply::ok()),
        3 => {
            let (user, password) = (call.args[1].clone(), call.args[2].clone());
            authenticate(call, Some(&user), &password).map(|_| Reply::ok())
        }
        _ => fail(SYNTAX_ERROR),
    }
}

pub fn hello(call: &mut Call<'_>) -> CommandResult {
    let mut protocol = call.session.protocol;
    if let Some(version) = call.args.get(1) {
        protocol = match parse_integer(version) {
            Ok(2) => ProtocolVersion::Resp2,
            Ok(3) => ProtocolVersion::Resp3,
            Ok(_) => return fail("NOPROTO unsupported protocol version"),
            Err(_) => return fail("ERR Protocol version is not an integer or out of range"),
        };
    }
    let mut new_name = None;
    let mut position = 2;
    while position < call.args.len() {
        let option = call.args[position].clone();
        let remaining = call.args.len() - position - 1;
        if is(&option, "AUTH") && remaining >= 2 {
            let (user, password) = (call.args[position + 1].clone(), call.args[position + 2].clone());
            authenticate(call, Some(&user), &password)?;
            position += 3;
        } else if is(&option, "SETNAME") && remaining >= 1 {
            new_name = Some(call.args[position + 1].clone());
            position += 2;
        } else {
            return fail(format!("ERR Syntax error in HELLO option '{}'", String::from_utf8_lossy(&option)));
        }
    }
    if !call.session.authenticated {
        return fail("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
    }
    if let Some(name) = new_name {
        set_client_name(call, &name)?;
    }
    call.session.protocol = protocol;
    let text = |value: &str| Reply::bulk_text(value);
    Ok(Reply::Map(vec![
        (text("server"), text("hybridkv")),
        (text("version"), text(REDIS_COMPATIBLE_VERSION)),
        (text("proto"), Reply::Integer(if protocol == ProtocolVersion::Resp3 { 3 } else { 2 })),
        (text("id"), Reply::Integer(call.session.client.id as i64)),
        (text("mode"), text("standalone")),
        (text("role"), text("master")),
        (text("modules"), Reply::Array(Vec::new())),
    ]))
}

/// MONITOR: the connection streams the commands the server runs from now on
/// (`Connection::monitor`), once its OK is sent.
pub fn monitor(call: &mut Call<'_>) -> CommandResult {
    // A monitoring connection would not send the notices; Redis lets a RESP3 subscriber monitor.
    if call.session.is_subscriber() {
        return fail("ERR MONITOR is not allowed while subscribed: UNSUBSCRIBE first");
    }
    call.session.enters_monitor_mode = true;
    Ok(Reply::ok())
}

/// RESET: the connection as a new one: no transaction, nothing watched, database 0, RESP2,
/// replies on, no name, and authenticated only where no password is required.
pub fn reset(call: &mut Call<'_>) -> CommandResult {
    if let Some(subscriptions) = &mut call.session.pubsub {
        subscriptions.leave_all();
    }
    call.session.stop_tracking();
    call.session.multi = None;
    call.session.watched.clear();
    call.session.select(0);
    call.session.protocol = ProtocolVersion::Resp2;
    call.session.replies = ReplyMode::On;
    *call.session.client.name.lock() = None;
    let authenticated = call.shared.users.default_needs_no_password();
    call.session.become_user(Bytes::from_static(DEFAULT_USER.as_bytes()), authenticated, &call.shared.users);
    Ok(Reply::simple("RESET"))
}

pub fn select(call: &mut Call<'_>) -> CommandResult {
    let number = selectable_database(call.shared, &call.args[1])?;
    call.session.select(number);
    Ok(Reply::ok())
}

/// The database SELECT's argument names, opened if it was not yet (its media are created or
/// attached: the caller may block), or SELECT's error.
pub fn selectable_database(shared: &Shared, argument: &[u8]) -> Result<usize, CommandError> {
    let number = parse_integer(argument).or_else(|_| fail(NOT_INTEGER))?;
    let Some(number) = usize::try_from(number).ok().filter(|number| *number < shared.database.database_count()) else {
        return fail(DB_INDEX_OUT_OF_RANGE);
    };
    crate::server::open_database(shared, number)?;
    Ok(number)
}

/// SWAPDB: the two databases exchange namespaces for every client at once, durably
/// (`Database::swap`). As in Redis, sessions watching a key of either database that exists in
/// either see it touched.
pub fn swapdb(call: &mut Call<'_>) -> CommandResult {
    let first = parse_db_index(&call.args[1], "ERR invalid first DB index")?;
    let second = parse_db_index(&call.args[2], "ERR invalid second DB index")?;
    let count = call.shared.database.database_count();
    let (Ok(first), Ok(second)) = (usize::try_from(first), usize::try_from(second)) else { return fail(DB_INDEX_OUT_OF_RANGE) };
    if first >= count || second >= count {
        return fail(DB_INDEX_OUT_OF_RANGE);
    }
    crate::server::swap_databases(call.shared, first, second)?;
    // Redis swaps a database with itself by doing nothing, touching no watched key.
    if first != second {
        touch_keys_watched_in_swapped(call.shared, [first, second]);
        call.shared.every_key_written();
    }
    Ok(Reply::ok())
}

/// A SWAPDB argument: an integer in C's int range, or Redis's `invalid` error.
fn parse_db_index(argument: &[u8], invalid: &'static str) -> Result<i64, CommandError> {
    parse_integer(argument).ok().filter(|number| i32::try_from(*number).is_ok()).map_or_else(|| fail(invalid), Ok)
}

/// Touches the watched keys of the swapped databases that exist in either of them (a key that
/// cannot be read counts as existing: a spurious abort is safe, a missed one is not).
fn touch_keys_watched_in_swapped(shared: &Shared, numbers: [usize; 2]) {
    if !shared.watches.any() {
        return;
    }
    let namespaces: Vec<_> = numbers.iter().filter_map(|number| shared.database.namespace(*number)).collect();
    for number in numbers {
        let watched = shared.watches.keys_of(number);
        let present = watched.iter().filter(|key| namespaces.iter().any(|namespace| !matches!(namespace.get(key), Ok(None))));
        shared.watches.touch(number, present.map(|key| key.as_ref()));
    }
}

/// Redis accepts names of printable characters without spaces ('!'..='~').
fn is_printable_word(text: &[u8]) -> bool {
    text.iter().all(|byte| (b'!'..=b'~').contains(byte))
}

fn set_client_name(call: &mut Call<'_>, name: &Bytes) -> Result<(), CommandError> {
    if !is_printable_word(name) {
        return fail("ERR Client names cannot contain spaces, newlines or special characters.");
    }
    let name = (!name.is_empty()).then(|| String::from_utf8_lossy(name).into_owned());
    *call.session.client.name.lock() = name;
    Ok(())
}

pub fn client(call: &mut Call<'_>) -> CommandResult {
    let subcommand = String::from_utf8_lossy(&call.args[1]).to_ascii_lowercase();
    match subcommand.as_str() {
        "id" => Ok(Reply::Integer(call.session.client.id as i64)),
        "getname" => Ok(call.session.client.name.lock().as_deref().map_or(Reply::Null, Reply::bulk_text)),
        "setname" => {
            let name = call.args[2].clone();
            set_client_name(call, &name).map(|_| Reply::ok())
        }
        "setinfo" => client_setinfo(call),
        "list" => client_list(call),
        "info" => Ok(Reply::Bulk(Bytes::from(call.session.client.describe()))),
        "kill" => client_kill(call),
        "unblock" => client_unblock(call),
        "pause" => client_pause(call),
        "unpause" => {
            call.shared.pause.unpause();
            Ok(Reply::ok())
        }
        "reply" => client_reply(call),
        "no-evict" | "no-touch" => Ok(Reply::ok()),
        "tracking" => tracking::client_tracking(call),
        "trackinginfo" => tracking::client_trackinginfo(call),
        "getredir" => tracking::client_getredir(call),
        "caching" => tracking::client_caching(call),
        "help" => Ok(subcommand_help("client")),
        _ => Err(unknown_subcommand("client", &call.args[1])),
    }
}

/// Which clients a CLIENT LIST or CLIENT KILL `TYPE` names: pubsub those subscribed to
/// anything, normal the others (a monitor too, as in Redis), none of master, replica or slave.
fn client_type(kind: &[u8]) -> Result<fn(&ClientHandle) -> bool, CommandError> {
    match String::from_utf8_lossy(kind).to_ascii_lowercase().as_str() {
        "normal" => Ok(|client| !client.is_subscriber()),
        "pubsub" => Ok(ClientHandle::is_subscriber),
        "master" | "replica" | "slave" => Ok(|_| false),
        _ => fail(format!("ERR Unknown client type '{}'", String::from_utf8_lossy(kind))),
    }
}

/// CLIENT LIST [TYPE normal|master|replica|slave|pubsub] [ID id ...], as Redis 7.0 parses it;
/// IDs are listed in the order given, those of no client skipped.
fn client_list(call: &mut Call<'_>) -> CommandResult {
    let clients = match &call.args[2..] {
        [] => call.shared.clients.all(),
        [option, kind] if is(option, "TYPE") => {
            let of_type = client_type(kind)?;
            call.shared.clients.all().into_iter().filter(|client| of_type(client)).collect()
        }
        [option, ids @ ..] if is(option, "ID") && !ids.is_empty() => {
            let ids = ids.iter().map(|id| parse_integer(id).or_else(|_| fail("ERR Invalid client ID"))).collect::<Result<Vec<_>, _>>()?;
            ids.into_iter().filter_map(|id| call.shared.clients.find(u64::try_from(id).ok()?)).collect()
        }
        _ => return fail(SYNTAX_ERROR),
    };
    Ok(Reply::Bulk(Bytes::from(clients.iter().map(|client| client.describe()).collect::<String>())))
}

/// CLIENT REPLY ON|OFF|SKIP: OFF and SKIP are not answered themselves (`SessionState::
/// takes_reply` drops their OK); SKIP drops the next command's reply too, and does nothing
/// while replies are off.
fn client_reply(call: &mut Call<'_>) -> CommandResult {
    let mode = &call.args[2];
    call.session.replies = match call.session.replies {
        _ if is(mode, "ON") => ReplyMode::On,
        _ if is(mode, "OFF") => ReplyMode::Off,
        ReplyMode::Off if is(mode, "SKIP") => ReplyMode::Off,
        _ if is(mode, "SKIP") => ReplyMode::Skip(2),
        _ => return fail(SYNTAX_ERROR),
    };
    Ok(Reply::ok())
}

fn client_setinfo(call: &mut Call<'_>) -> CommandResult {
    let (attribute, value) = (call.args[2].to_ascii_lowercase(), call.args[3].clone());
    let attribute = String::from_utf8_lossy(&attribute).into_owned();
    if attribute != "lib-name" && attribute != "lib-ver" {
        return fail(format!("ERR Unrecognized option '{}'", String::from_utf8_lossy(&call.args[2])));
    }
    if !is_printable_word(&value) {
        return fail(format!("ERR {attribute} cannot contain spaces, newlines or special characters."));
    }
    let value = String::from_utf8_lossy(&value).into_owned();
    let mut library = call.session.client.library.lock();
    if attribute == "lib-name" { library.0 = value } else { library.1 = value }
    Ok(Reply::ok())
}

/// Redis's answer to a CLIENT subcommand given more arguments than it takes.
fn too_many_arguments(call: &Call<'_>) -> CommandResult {
    Err(super::subcommand_syntax_error("client", &call.args[1]))
}

/// CLIENT PAUSE timeout [WRITE|ALL] (ALL when not given), checked in Redis's order: the mode,
/// then the timeout in milliseconds. A timeout past what the clock holds pauses until UNPAUSE.
fn client_pause(call: &mut Call<'_>) -> CommandResult {
    if call.args.len() > 4 {
        return too_many_arguments(call);
    }
    let mode = match call.args.get(3) {
        None => PauseMode::All,
        Some(mode) if is(mode, "ALL") => PauseMode::All,
        Some(mode) if is(mode, "WRITE") => PauseMode::Writes,
        Some(_) => return fail("ERR CLIENT PAUSE mode must be WRITE or ALL"),
    };
    let timeout_ms = parse_timeout_ms(&call.args[2])?;
    call.shared.pause.pause(mode, Instant::now().checked_add(Duration::from_millis(timeout_ms)));
    Ok(Reply::ok())
}

/// CLIENT UNBLOCK id [TIMEOUT|ERROR]: ends a blocked client's wait (WAIT, WAITAOF); 1 if it
/// was blocked. The checks come in Redis 7.0's order.
fn client_unblock(call: &mut Call<'_>) -> CommandResult {
    if call.args.len() > 4 {
        return too_many_arguments(call);
    }
    let with_error = match call.args.get(3) {
        None => false,
        Some(reason) if is(reason, "TIMEOUT") => false,
        Some(reason) if is(reason, "ERROR") => true,
        Some(_) => return fail("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR"),
    };
    let id = parse_integer(&call.args[2])?;
    let client = u64::try_from(id).ok().and_then(|id| call.shared.clients.find(id));
    Ok(Reply::Integer(i64::from(client.is_some_and(|client| client.unblock(with_error)))))
}

/// CLIENT KILL addr (old form: OK or an error), or CLIENT KILL <filter value>... (the number killed).
fn client_kill(call: &mut Call<'_>) -> CommandResult {
    let own_id = call.session.client.id;
    if call.args.len() == 3 {
        let address = String::from_utf8_lossy(&call.args[2]).into_owned();
        let killed = call.shared.clients.kill_where(|client| client.address.to_string() == address);
        return if killed > 0 { Ok(Reply::ok()) } else { fail("ERR No such client") };
    }
    if call.args.len() < 4 || !call.args.len().is_multiple_of(2) {
        return fail(SYNTAX_ERROR);
    }
    let mut id = None;
    let mut address = None;
    let mut local_address = None;
    let mut of_type: Option<fn(&ClientHandle) -> bool> = None;
    let mut skip_me = true;
    let mut user = None;
    for pair in call.args[2..].chunks(2) {
        let value = String::from_utf8_lossy(&pair[1]).into_owned();
        match pair[0].to_ascii_lowercase().as_slice() {
            b"id" => id = Some(value.parse::<u64>().or_else(|_| fail("ERR client-id should be greater than 0"))?),
            b"addr" => address = Some(value),
            b"laddr" => local_address = Some(value),
            b"type" => of_type = Some(client_type(&pair[1])?),
            b"skipme" if value.eq_ignore_ascii_case("yes") => skip_me = true,
            b"skipme" if value.eq_ignore_ascii_case("no") => skip_me = false,
            b"user" if call.shared.users.get(&pair[1]).is_some() => user = Some(pair[1].clone()),
            b"user" => return fail(format!("ERR No such user '{value}'")),
            _ => return fail(SYNTAX_ERROR),
        }
    }
    let killed = call.shared.clients.kill_where(|client| {
        id.is_none_or(|id| client.id == id)
            && address.as_ref().is_none_or(|address| client.address.to_string() == *address)
            && local_address.as_ref().is_none_or(|address| client.local_address.to_string() == *address)
            && of_type.is_none_or(|of_type| of_type(client))
            && user.as_ref().is_none_or(|user| *client.user.lock() == *user)
            && !(skip_me && client.id == own_id)
    });
    // A client that killed itself (SKIPME no) gets this reply, then the connection closes.
    if call.session.client.killed.load(Ordering::Relaxed) {
        call.session.close_after_reply = true;
    }
    Ok(Reply::Integer(killed as i64))
}
