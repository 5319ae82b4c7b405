//! Transactions: MULTI EXEC DISCARD WATCH UNWATCH.
//!
//! EXEC runs every queued command that reads or writes keys inside ONE engine transaction over
//! the union of their keys and the watched keys: the watched versions are compared under the
//! same locks the commands run under, and all the writes commit as one atomic, durable batch.
//! The queued session and server commands (INFO, CONFIG, CLIENT…: `AFTER_TRANSACTION`) run
//! once it has committed, in their queued order, and their replies take their places.

use std::sync::Arc;

use hybridkv_engine::{EngineError, Transaction};
use hybridkv_resp::Reply;

use crate::command::{engine_error_reply, fail, run, run_in_transaction, Call, CommandResult, KeyStore, AFTER_TRANSACTION, WHOLE_KEYSPACE};
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

/// Whether a watched key of another database changed (checked outside the transaction: EXEC's
/// transaction covers the current database only).
fn other_database_changed(call: &Call<'_>, watched: &[WatchedKey]) -> Result<bool, EngineError> {
    for key in watched.iter().filter(|watched| watched.database != call.session.database) {
        let Some(namespace) = call.shared.database.namespace(key.database) else { continue };
        if namespace.get(&key.key)?.map(|value| value.version) != key.version {
            return Ok(true);
        }
    }
    Ok(false)
}

pub fn exec(call: &mut Call<'_>) -> CommandResult {
    let Some(multi) = call.session.multi.take() else { return fail("ERR EXEC without MULTI") };
    // Counted as watching until this function returns, after the versions were compared.
    let watched_set = call.session.watched.take();
    let watched = watched_set.keys();
    if multi.failed {
        return fail("EXECABORT Transaction discarded because of previous errors.");
    }
    if other_database_changed(call, watched)? {
        return Ok(Reply::NullArray);
    }
    let database = call.session.database;
    let mut keys: Vec<&[u8]> = watched.iter().filter(|watched| watched.database == database).map(|watched| watched.key.as_ref()).collect();
    for (spec, args) in &multi.queued {
        keys.extend(spec.keys.keys(args));
    }
    let namespace = Arc::clone(call.namespace);
    let (session, shared) = (&mut *call.session, call.shared);
    let whole_keyspace = multi.queued.iter().any(|(spec, _)| spec.has(WHOLE_KEYSPACE));
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
        for (spec, args) in &multi.queued {
            if spec.has(AFTER_TRANSACTION) {
                replies.push(None);
                continue;
            }
            let mut queued_call = Call { args: args.as_slice(), session, shared, namespace: &namespace, store: transaction };
            let reply = run_in_transaction(spec.handler, &mut queued_call)?.unwrap_or_else(|error| error.into_reply());
            replies.push(Some(reply));
        }
        shared.watches.touch(database, transaction.changed_keys());
        Ok(Some(replies))
    };
    let outcome = if whole_keyspace { namespace.transaction_over_all(body) } else { namespace.transaction_deferred(&keys, body) };
    let replies = match outcome {
        Ok((None, _)) => return Ok(Reply::NullArray),
        Ok((Some(replies), ticket)) => {
            if let Some(ticket) = ticket {
                call.session.hold_reply_until_durable(&namespace, ticket);
            }
            replies
        }
        Err(error) => return Ok(exec_failed(&error)),
    };
    // The session and server commands run now, in their queued order, outside the locks.
    let queued = multi.queued.iter().zip(replies);
    let replies = queued.map(|((spec, args), reply)| reply.unwrap_or_else(|| run(spec, args, call.session, call.shared))).collect();
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

