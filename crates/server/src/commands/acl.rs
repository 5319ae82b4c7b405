//! ACL: the users this server knows (`crate::users`) as Redis's ACL command shows and changes
//! them.

use hybridkv_resp::Reply;
use rand::RngCore;

use super::{is, lookup, parse_integer, subcommand_help, unknown_subcommand, NOT_INTEGER};
use crate::command::{fail, wrong_arity, Call, CommandResult};
use crate::users::{LogEntry, SetUserError, User, DEFAULT_USER, USERS_MAX};

/// ACL LOG's entries without a count.
const ACL_LOG_COUNT_DEFAULT: usize = 10;
/// ACL GENPASS's bits without an argument, and the most it gives.
const GENPASS_BITS_DEFAULT: u64 = 256;
const GENPASS_BITS_MAX: u64 = 4096;
/// Redis's ACL categories, as ACL CAT lists them.
const CATEGORIES: &[&str] = &[
    "keyspace", "read", "write", "set", "sortedset", "list", "hash", "string", "bitmap", "hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow", "blocking",
    "dangerous", "connection", "transaction", "scripting",
];
const NO_ACL_FILE: &str = "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.";

pub fn acl(call: &mut Call<'_>) -> CommandResult {
    let subcommand = String::from_utf8_lossy(&call.args[1]).to_ascii_lowercase();
    match subcommand.as_str() {
        "whoami" => Ok(Reply::Bulk(call.session.client.user.lock().clone())),
        "users" => Ok(Reply::Array(call.shared.users.names().into_iter().map(Reply::Bulk).collect())),
        "list" => Ok(Reply::Array(call.shared.users.describe_all().into_iter().map(Reply::bulk).collect())),
        "getuser" => Ok(call.shared.users.get(&call.args[2]).map_or(Reply::Null, |user| user_details(&user))),
        "setuser" => set_user(call),
        "deluser" => delete_users(call),
        "dryrun" => dry_run(call),
        "cat" => categories(call),
        "genpass" => generate_password(call),
        "log" => log(call),
        "save" | "load" => fail(NO_ACL_FILE),
        "help" => Ok(subcommand_help("acl")),
        _ => Err(unknown_subcommand("acl", &call.args[1])),
    }
}

/// ACL GETUSER: flags, password digests, and the all-or-nothing rules of each kind.
fn user_details(user: &User) -> Reply {
    let text = |value: &str| Reply::bulk_text(value);
    Reply::Map(vec![
        (text("flags"), Reply::Array(user.flags().into_iter().map(text).collect())),
        (text("passwords"), Reply::Array(user.password_hashes().into_iter().map(Reply::bulk).collect())),
        (text("commands"), text(user.commands_rule())),
        (text("keys"), text(user.keys_rule())),
        (text("channels"), text(user.channels_rule())),
        (text("selectors"), Reply::Array(Vec::new())),
    ])
}

fn set_user(call: &mut Call<'_>) -> CommandResult {
    let name = call.args[2].clone();
    if name.iter().any(|&byte| byte == b' ' || byte == 0) {
        return fail("ERR Usernames can't contain spaces or null characters");
    }
    let had_channels = call.shared.users.get(&name).is_some_and(|user| user.permissions().all_channels);
    match call.shared.users.set_user(&name, &call.args[3..]) {
        Ok(()) => {
            // A user that lost its channels loses its subscribers, as in Redis.
            if had_channels && !call.shared.users.get(&name).is_some_and(|user| user.permissions().all_channels) {
                call.shared.clients.kill_where(|client| *client.user.lock() == name && client.is_subscriber());
            }
            call.session.refresh_permissions(&call.shared.users);
            Ok(Reply::ok())
        }
        Err(SetUserError::Rule { rule, error }) => fail(format!("ERR Error in ACL SETUSER modifier '{}': {}", String::from_utf8_lossy(&rule), error.text())),
        Err(SetUserError::TooManyUsers) => fail(format!("ERR this server holds at most {USERS_MAX} ACL users")),
    }
}

/// ACL DELUSER: the clients authenticated as a deleted user are disconnected, as in Redis.
fn delete_users(call: &mut Call<'_>) -> CommandResult {
    let names = &call.args[2..];
    if names.iter().any(|name| name.as_ref() == DEFAULT_USER.as_bytes()) {
        return fail("ERR The 'default' user cannot be removed");
    }
    let deleted = call.shared.users.delete(names);
    call.shared.clients.kill_where(|client| names.contains(&*client.user.lock()));
    call.session.refresh_permissions(&call.shared.users);
    Ok(Reply::Integer(deleted as i64))
}

/// ACL DRYRUN user command [arg ...]: OK when the user may run it, else why not.
fn dry_run(call: &mut Call<'_>) -> CommandResult {
    let Some(user) = call.shared.users.get(&call.args[2]) else {
        return fail(format!("ERR User '{}' not found", String::from_utf8_lossy(&call.args[2])));
    };
    let args = &call.args[3..];
    let Some(spec) = lookup(&args[0]) else {
        return fail(format!("ERR Command '{}' not found", String::from_utf8_lossy(&args[0])));
    };
    if !spec.arity_ok(args.len()) {
        return Err(wrong_arity(spec.name));
    }
    match user.permissions().check(spec, args) {
        Ok(()) => Ok(Reply::ok()),
        Err(denial) => Ok(Reply::bulk(denial.dry_run_text())),
    }
}

/// ACL CAT: Redis's categories. This server grants all commands or none, so it keeps no
/// command's categories: naming one is refused rather than answered with a wrong list.
fn categories(call: &mut Call<'_>) -> CommandResult {
    match call.args.get(2) {
        None => Ok(Reply::Array(CATEGORIES.iter().map(|category| Reply::bulk_text(category)).collect())),
        Some(category) if CATEGORIES.iter().any(|known| is(category, known)) => {
            fail("ERR this server grants a user all commands or none and does not list the commands of a category")
        }
        Some(category) => fail(format!("ERR Unknown category '{}'", String::from_utf8_lossy(category))),
    }
}

/// ACL GENPASS [bits]: that many random bits (256 by default) as hex, rounded up to whole digits.
fn generate_password(call: &mut Call<'_>) -> CommandResult {
    let bits = match call.args.get(2) {
        None => GENPASS_BITS_DEFAULT,
        Some(bits) => match parse_integer(bits) {
            Ok(bits) if (1..=GENPASS_BITS_MAX as i64).contains(&bits) => bits as u64,
            Err(_) => return fail(NOT_INTEGER),
            Ok(_) => return fail("ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096"),
        },
    };
    let digits = bits.div_ceil(4) as usize;
    let mut random = vec![0u8; digits.div_ceil(2)];
    rand::thread_rng().fill_bytes(&mut random);
    let mut hex: String = random.iter().map(|byte| format!("{byte:02x}")).collect();
    hex.truncate(digits);
    Ok(Reply::bulk(hex))
}

/// ACL LOG [count | RESET].
fn log(call: &mut Call<'_>) -> CommandResult {
    let log = &call.shared.users.log;
    let count = match call.args.get(2) {
        None => ACL_LOG_COUNT_DEFAULT,
        Some(argument) if is(argument, "reset") => {
            log.reset();
            return Ok(Reply::ok());
        }
        Some(argument) => match parse_integer(argument) {
            Ok(count) => usize::try_from(count).unwrap_or(0),
            Err(_) => return fail(NOT_INTEGER),
        },
    };
    Ok(Reply::Array(log.newest(count).iter().map(log_entry).collect()))
}

fn log_entry(entry: &LogEntry) -> Reply {
    let text = |value: &str| Reply::bulk_text(value);
    Reply::Map(vec![
        (text("count"), Reply::Integer(entry.count as i64)),
        (text("reason"), text(entry.reason)),
        (text("context"), text(entry.context)),
        (text("object"), Reply::Bulk(entry.object.clone())),
        (text("username"), Reply::Bulk(entry.username.clone())),
        (text("age-seconds"), Reply::Double(entry.updated.elapsed().as_secs_f64())),
        (text("client-info"), Reply::bulk(entry.client_info.clone())),
    ])
}
