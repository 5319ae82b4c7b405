//! Pub/Sub commands: (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PUBLISH, SPUBLISH and PUBSUB. The
//! subscriptions and delivery are `crate::pubsub`'s; the connection sends a subscriber's notices.

use bytes::Bytes;
use hybridkv_resp::Reply;

use super::{subcommand_help, unknown_subcommand};
use crate::command::{Call, CommandResult};
use crate::pubsub::Kind;

/// The confirmations went to the session's mailbox, ahead of any message published after them;
/// the returned reply is not sent.
fn confirmed(call: &mut Call<'_>) -> CommandResult {
    call.session.reply_in_mailbox = true;
    Ok(Reply::ok())
}

fn subscribe_to(call: &mut Call<'_>, kind: Kind) -> CommandResult {
    let names = call.args[1..].to_vec();
    call.session.subscriptions(&call.shared.pubsub).subscribe(kind, &names);
    confirmed(call)
}

fn unsubscribe_from(call: &mut Call<'_>, kind: Kind) -> CommandResult {
    let names = call.args[1..].to_vec();
    call.session.subscriptions(&call.shared.pubsub).unsubscribe(kind, &names);
    confirmed(call)
}

pub fn subscribe(call: &mut Call<'_>) -> CommandResult {
    subscribe_to(call, Kind::Channel)
}

pub fn psubscribe(call: &mut Call<'_>) -> CommandResult {
    subscribe_to(call, Kind::Pattern)
}

pub fn ssubscribe(call: &mut Call<'_>) -> CommandResult {
    subscribe_to(call, Kind::Shard)
}

pub fn unsubscribe(call: &mut Call<'_>) -> CommandResult {
    unsubscribe_from(call, Kind::Channel)
}

pub fn punsubscribe(call: &mut Call<'_>) -> CommandResult {
    unsubscribe_from(call, Kind::Pattern)
}

pub fn sunsubscribe(call: &mut Call<'_>) -> CommandResult {
    unsubscribe_from(call, Kind::Shard)
}

pub fn publish(call: &mut Call<'_>) -> CommandResult {
    Ok(Reply::Integer(call.shared.pubsub.publish(Kind::Channel, &call.args[1], &call.args[2]) as i64))
}

pub fn spublish(call: &mut Call<'_>) -> CommandResult {
    Ok(Reply::Integer(call.shared.pubsub.publish(Kind::Shard, &call.args[1], &call.args[2]) as i64))
}

/// PUBSUB CHANNELS | NUMSUB | NUMPAT | SHARDCHANNELS | SHARDNUMSUB | HELP.
pub fn pubsub(call: &mut Call<'_>) -> CommandResult {
    let subcommand = call.args[1].clone();
    let pubsub = &call.shared.pubsub;
    match String::from_utf8_lossy(&subcommand).to_ascii_lowercase().as_str() {
        "channels" => names(call, Kind::Channel),
        "shardchannels" => names(call, Kind::Shard),
        "numsub" => Ok(subscriber_counts(call, Kind::Channel)),
        "shardnumsub" => Ok(subscriber_counts(call, Kind::Shard)),
        "numpat" => Ok(Reply::Integer(pubsub.count(Kind::Pattern) as i64)),
        "help" => Ok(subcommand_help("pubsub")),
        _ => Err(unknown_subcommand("pubsub", &subcommand)),
    }
}

/// The names with subscribers, matching the optional pattern (Redis answers its old error to
/// more arguments).
fn names(call: &mut Call<'_>, kind: Kind) -> CommandResult {
    if call.args.len() > 3 {
        return Err(super::subcommand_syntax_error("pubsub", &call.args[1]));
    }
    let pattern = call.args.get(2).map(Bytes::as_ref);
    Ok(Reply::Array(call.shared.pubsub.names(kind, pattern).into_iter().map(Reply::Bulk).collect()))
}

/// Each named channel and its subscribers (patterns not counted), flat as in Redis.
fn subscriber_counts(call: &mut Call<'_>, kind: Kind) -> Reply {
    let pubsub = &call.shared.pubsub;
    let counts = call.args[2..].iter().flat_map(|name| [Reply::Bulk(name.clone()), Reply::Integer(pubsub.subscribers(kind, name) as i64)]);
    Reply::Array(counts.collect())
}
