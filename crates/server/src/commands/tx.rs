//! Transactions: MULTI EXEC DISCARD WATCH UNWATCH.
//!
//! EXEC runs every queued command that reads or writes keys inside ONE engine transaction over
//! the union of their keys and the watched keys: the watched versions are compared under the
//! same locks the commands run under, and all the writes commit as one atomic, durable batch.
//! They must all run in one database (a SELECT queued before them may choose it).
//! The queued session and server commands (INFO, CONFIG, CLIENT…: `AFTER_TRANSACTION`) run
//! once it has committed, in their queued order, and their replies take their places.

use std::time::Instant;

use bytes::Bytes;
use hybridkv_engine::{EngineError, Transaction};
use hybridkv_resp::Reply;

use super::selectable_database;
use crate::command::{
    account, engine_error_reply, fail, run_in_transaction, run_measured, Call, CommandError, CommandResult, CommandSpec, KeyStore, AFTER_TRANSACTION, DB_INDEX_OUT_OF_RANGE,
    READONLY, READS_KEYS_BY_PATTERN, WHOLE_KEYSPACE, WRITE,
};
use crate::session::MultiState;
use crate::watch::{WatchedKey, WATCHED_KEYS_PER_SESSION_MAX};

pub fn multi(call: &mut Call<'_>) -> CommandResult {
    if call.session.multi.is_some() {
        return fail("ERR MULTI calls can not be nested");
    }
    call.session.multi = Some(MultiState { queued: Vec::new(), failed: false });
    Ok(Reply::ok())
}

pub fn discard(call: &mut Call<'_>) -> CommandResult {
    if call.session.multi.take().is_none() {
        return fail("ERR DISCARD without MULTI");
    }
    call.session.watched.clear();
    Ok(Reply::ok())
}

pub fn watch(call: &mut Call<'_>) -> CommandResult {
    if call.session.multi.is_some() {
        return fail("ERR WATCH inside MULTI is not allowed");
    }
    let watched = call.session.watched.keys().len();
    if watched + call.args.len() - 1 > WATCHED_KEYS_PER_SESSION_MAX {
        return fail(format!(
            "ERR this connection watches {watched} keys and may watch at most {WATCHED_KEYS_PER_SESSION_MAX}: EXEC, DISCARD or UNWATCH first"
        ));
    }
    let database = call.session.database;
    for key in &call.args[1..] {
        let namespace = call.namespace;
        call.session.watched.watch(database, key, || namespace.get(key).map(|value| value.map(|value| value.version)))?;
    }
    Ok(Reply::ok())
}

pub fn unwatch(call: &mut Call<'_>) -> CommandResult {
    call.session.watched.clear();
    Ok(Reply::ok())
}

/// Whether a watched key of another database than `database` changed (checked outside the
/// transaction: EXEC's transaction covers one database).
fn other_database_changed(call: &Call<'_>, watched: &[WatchedKey], database: usize) -> Result<bool, EngineError> {
    for key in watched.iter().filter(|watched| watched.database != database) {
        let Some(namespace) = call.shared.database.namespace(key.database) else { continue };
        if namespace.get(&key.key)?.map(|value| value.version) != key.version {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The databases of a queued transaction: a SELECT inside MULTI changes the database of the
/// commands queued after it, and the session's once EXEC has run them, as in Redis.
struct Databases {
    /// The database each queued command runs in.
    of_command: Vec<usize>,
    /// Each queued SELECT's reply (OK, or its error: the database stays as it was).
    select_replies: Vec<Option<Reply>>,
    /// Where the commands that read or write keys run: EXEC's one transaction covers it.
    of_keys: usize,
}

/// Plans the databases of `queued`, or refuses a transaction whose key commands would run in
/// more than one database: its writes could not commit as one batch.
fn plan_databases(call: &Call<'_>, queued: &[(&CommandSpec, Vec<Bytes>)]) -> Result<Databases, CommandError> {
    let mut current = call.session.database;
    let mut of_keys = None;
    let (mut of_command, mut select_replies) = (Vec::with_capacity(queued.len()), Vec::with_capacity(queued.len()));
    for (spec, args) in queued {
        let mut select_reply = None;
        if spec.name == "select" {
            select_reply = Some(selectable_database(call.shared, &args[1]).map_or_else(CommandError::into_reply, |number| {
                current = number;
                Reply::ok()
            }));
        } else if spec.has(READONLY | WRITE) && !spec.has(AFTER_TRANSACTION) {
            if of_keys.is_some_and(|database| database != current) {
                return fail("ERR a transaction's commands may read and write keys of one database only: EXEC commits them as one batch of one database (transaction not executed)");
            }
            of_keys = Some(current);
        }
        of_command.push(current);
        select_replies.push(select_reply);
    }
    Ok(Databases { of_command, select_replies, of_keys: of_keys.unwrap_or(call.session.database) })
}

pub fn exec(call: &mut Call<'_>) -> CommandResult {
    let Some(multi) = call.session.multi.take() else { return fail("ERR EXEC without MULTI") };
    // Counted as watching until this function returns, after the versions were compared.
    let watched_set = call.session.watched.take();
    let watched = watched_set.keys();
    if multi.failed {
        return fail("EXECABORT Transaction discarded because of previous errors.");
    }
    let databases = plan_databases(call, &multi.queued)?;
    let database = databases.of_keys;
    if other_database_changed(call, watched, database)? {
        return Ok(Reply::NullArray);
    }
    let mut keys: Vec<&[u8]> = watched.iter().filter(|watched| watched.database == database).map(|watched| watched.key.as_ref()).collect();
    for (spec, args) in &multi.queued {
        keys.extend(spec.keys.keys(args));
    }
    let Some(namespace) = call.shared.database.namespace(database).cloned() else { return fail(DB_INDEX_OUT_OF_RANGE) };
    let (session, shared) = (&mut *call.session, call.shared);
    let selected_before = session.database;
    // The key commands see the database they were queued for (COPY … DB compares with it).
    session.select(database);
    let whole_keyspace = multi.queued.iter().any(|(spec, args)| spec.has(WHOLE_KEYSPACE) || spec.has(READS_KEYS_BY_PATTERN) && super::reaches_other_keys(args));
    let events_before = session.key_events.len();
    let touched = || watched_set.touched();
    let body = |transaction: &mut Transaction<'_>| {
        // A write since WATCH set the flag under the lock this body holds now (`crate::watch`).
        if touched() {
            return Ok(None);
        }
        for key in watched.iter().filter(|watched| watched.database == database) {
            if KeyStore::get(transaction, &key.key)?.map(|value| value.version) != key.version {
                return Ok(None);
            }
        }
        let mut replies = Vec::with_capacity(multi.queued.len());
        session.in_exec = true;
        for ((spec, args), select_reply) in multi.queued.iter().zip(&databases.select_replies) {
            if select_reply.is_some() {
                replies.push(select_reply.clone());
                continue;
            }
            if spec.has(AFTER_TRANSACTION) {
                replies.push(None);
                continue;
            }
            let started = Instant::now();
            let mut queued_call = Call { args: args.as_slice(), session, shared, namespace: &namespace, store: transaction };
            let reply = run_in_transaction(spec.handler, &mut queued_call)?.unwrap_or_else(|error| error.into_reply());
            account(spec, args, started.elapsed(), &reply, session, shared);
            replies.push(Some(reply));
        }
        shared.keys_written(database, session.client.id, || transaction.changed_keys());
        Ok(Some(replies))
    };
    let outcome = if whole_keyspace { namespace.transaction_over_all(body) } else { namespace.transaction_deferred(&keys, body) };
    // Set by the body (a failed body may leave it set).
    call.session.in_exec = false;
    let replies = match outcome {
        Ok((Some(replies), ticket)) => {
            if let Some(ticket) = ticket {
                call.session.hold_reply_until_durable(&namespace, ticket);
            }
            // Before the messages the queued PUBLISHes send, as Redis orders them.
            call.shared.keyspace_events.publish_queued(&call.shared.pubsub, &mut call.session.key_events);
            replies
        }
        not_run => {
            call.session.key_events.truncate(events_before);
            call.session.select(selected_before);
            return Ok(not_run.map_or_else(|error| exec_failed(&error), |_| Reply::NullArray));
        }
    };
    // The session and server commands run now, in their queued order and database, outside
    // the locks.
    let queued = multi.queued.iter().zip(&databases.of_command).zip(replies);
    let replies = queued
        .map(|(((spec, args), database), reply)| {
            reply.unwrap_or_else(|| {
                call.session.select(*database);
                run_measured(spec, args, call.session, call.shared)
            })
        })
        .collect();
    // The session's database once EXEC has run: the last command's (the last SELECT's).
    call.session.select(databases.of_command.last().copied().unwrap_or(selected_before));
    // Nothing blocks inside a transaction (Redis answers WAIT there at once).
    call.session.reply_delay = None;
    Ok(Reply::Array(replies))
}

/// An engine error aborts the whole transaction (nothing was written): EXEC answers with it.
fn exec_failed(error: &EngineError) -> Reply {
    match engine_error_reply(error) {
        Reply::Error(text) => Reply::error(format!("{text} (transaction not executed)")),
        other => other,
    }
}

