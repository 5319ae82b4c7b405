//! WAIT and WAITAOF: a client asks for its writes to be acknowledged by replicas (hybridkv has
//! none, so never) or made durable locally (`WAITAOF 1 …`: what a client of a `periodic`
//! namespace uses to have one write durable before it goes on).

use hybridkv_engine::Durability;
use hybridkv_resp::Reply;

use super::parse_integer;
use crate::command::{fail, Call, CommandError, CommandResult};
use crate::session::ReplyDelay;

/// Redis's reply to WAITAOF's numlocal when the append-only file is off: here, when the
/// session's database has durability `none` (CONFIG GET appendonly answers "no" for it).
const LOCAL_WAIT_WITHOUT_DURABILITY: &str = "ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled.";

/// A blocking command's timeout in milliseconds, as Redis reads it (0: no timeout).
pub(super) fn parse_timeout_ms(text: &[u8]) -> Result<u64, CommandError> {
    let timeout_ms = parse_integer(text).or_else(|_| fail("ERR timeout is not an integer or out of range"))?;
    u64::try_from(timeout_ms).or_else(|_| fail("ERR timeout is negative"))
}

/// Holds the reply back for the timeout: replicas are asked for, and none will ever answer.
fn wait_for_replicas_that_never_answer(call: &mut Call<'_>, replicas: i64, timeout_ms: u64) {
    if replicas > 0 {
        call.session.reply_delay = Some(ReplyDelay::of_timeout_ms(timeout_ms));
    }
}

/// WAIT numreplicas timeout: the number of replicas that acknowledged the client's writes, 0.
/// As a Redis primary without replicas: at once when asked for none, else after the timeout.
pub fn wait(call: &mut Call<'_>) -> CommandResult {
    let replicas = parse_integer(&call.args[1])?;
    let timeout_ms = parse_timeout_ms(&call.args[2])?;
    wait_for_replicas_that_never_answer(call, replicas, timeout_ms);
    Ok(Reply::Integer(0))
}

/// WAITAOF numlocal numreplicas timeout: [local, replicas]. With numlocal 1 the reply is sent
/// once every write appended so far to any database with a durability other than `none` (the
/// client's own among them; Redis's one append-only file covers every database too) is durable:
/// each such namespace is flushed now, not at its next periodic flush, and a failed flush answers
/// its error. With numlocal 0, `local` says whether that was already so.
pub fn waitaof(call: &mut Call<'_>) -> CommandResult {
    let local = parse_integer(&call.args[1])?;
    if !(0..=1).contains(&local) {
        return fail("ERR value is out of range, value must between 0 and 1");
    }
    let replicas = parse_integer(&call.args[2]).ok().filter(|replicas| *replicas >= 0);
    let Some(replicas) = replicas else { return fail("ERR value is out of range, must be positive") };
    let timeout_ms = parse_timeout_ms(&call.args[3])?;
    let durable_database = call.namespace.config().durability != Durability::None;
    if local == 1 && !durable_database {
        return fail(LOCAL_WAIT_WITHOUT_DURABILITY);
    }
    let durable_namespaces = || call.shared.database.namespaces().filter(|(_, namespace)| namespace.config().durability != Durability::None);
    let acknowledged_locally = if local == 1 {
        let tickets: Vec<_> = durable_namespaces().map(|(_, namespace)| (namespace.clone(), namespace.ticket_for_appended())).collect();
        for (namespace, ticket) in tickets {
            call.session.hold_reply_until_durable(&namespace, ticket);
        }
        true
    } else {
        durable_database && durable_namespaces().all(|(_, namespace)| namespace.appended_is_durable())
    };
    wait_for_replicas_that_never_answer(call, replicas, timeout_ms);
    Ok(Reply::Array(vec![Reply::Integer(i64::from(acknowledged_locally)), Reply::Integer(0)]))
}
