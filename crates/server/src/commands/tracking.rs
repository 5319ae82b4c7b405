//! CLIENT TRACKING, TRACKINGINFO, GETREDIR and CACHING (client-side caching); the invalidations
//! themselves are `crate::tracking`'s.

use std::sync::Arc;

use bytes::Bytes;
use hybridkv_resp::Reply;

use super::{is, parse_integer, SYNTAX_ERROR};
use crate::command::{fail, Call, CommandError, CommandResult};
use crate::tracking::{TrackingOptions, TrackingSession};

/// CLIENT TRACKING ON|OFF [REDIRECT id] [BCAST] [PREFIX p …] [OPTIN] [OPTOUT] [NOLOOP], checked
/// as Redis 7.0 checks it. ON while on replaces the options but keeps the prefixes (a different
/// mode is refused), as Redis does.
pub fn client_tracking(call: &mut Call<'_>) -> CommandResult {
    let on = match &call.args[2] {
        switch if is(switch, "ON") => true,
        switch if is(switch, "OFF") => false,
        _ => return fail(SYNTAX_ERROR),
    };
    let given = parse_options(&call.args[3..])?;
    if !on {
        call.session.stop_tracking();
        return Ok(Reply::ok());
    }
    let current = call.session.tracking.as_ref().map(|tracking| tracking.options.clone());
    let options = merged_options(current, given, call)?;
    let own = Arc::clone(call.session.subscriptions(&call.shared.pubsub).mailbox());
    call.session.client.show_tracking(Some(&options));
    call.shared.tracking.enable(call.session.client.id, own, options.clone());
    let registry = call.shared.tracking.clone();
    match &mut call.session.tracking {
        Some(tracking) => tracking.options = options,
        None => call.session.tracking = Some(TrackingSession::new(registry, call.session.client.id, options)),
    }
    Ok(Reply::ok())
}

fn parse_options(args: &[Bytes]) -> Result<TrackingOptions, CommandError> {
    let mut options = TrackingOptions::default();
    let mut position = 0;
    while let Some(option) = args.get(position) {
        let value = args.get(position + 1);
        match value {
            Some(id) if is(option, "REDIRECT") => {
                options.redirect = Some(u64::try_from(parse_integer(id)?).unwrap_or(u64::MAX));
                position += 1;
            }
            Some(prefix) if is(option, "PREFIX") => {
                options.prefixes.push(prefix.clone());
                position += 1;
            }
            _ if is(option, "BCAST") => options.bcast = true,
            _ if is(option, "OPTIN") => options.optin = true,
            _ if is(option, "OPTOUT") => options.optout = true,
            _ if is(option, "NOLOOP") => options.noloop = true,
            _ => return fail(SYNTAX_ERROR),
        }
        position += 1;
    }
    Ok(options)
}

/// The options in force after ON `given` while `current` are (None: tracking was off).
fn merged_options(current: Option<TrackingOptions>, given: TrackingOptions, call: &Call<'_>) -> Result<TrackingOptions, CommandError> {
    if given.optin && given.optout {
        return fail("ERR You can't specify both OPTIN mode and OPTOUT mode");
    }
    if given.bcast && (given.optin || given.optout) {
        return fail("ERR OPTIN and OPTOUT are not compatible with BCAST");
    }
    if !given.bcast && !given.prefixes.is_empty() {
        return fail("ERR PREFIX option requires BCAST mode to be enabled");
    }
    if let Some(current) = &current {
        if current.bcast != given.bcast {
            return fail("ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.");
        }
        if (given.optin && current.optout) || (given.optout && current.optin) {
            return fail("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.");
        }
    }
    check_prefixes(&given.prefixes, current.as_ref().map_or(&[][..], |current| &current.prefixes))?;
    if let Some(target) = given.redirect {
        if target != call.session.client.id && call.shared.clients.find(target).is_none() {
            return fail("ERR The client ID you want redirect to does not exist");
        }
    }
    let mut prefixes = current.map(|current| current.prefixes).unwrap_or_default();
    for prefix in &given.prefixes {
        if !prefixes.contains(prefix) {
            prefixes.push(prefix.clone());
        }
    }
    // Listed in order, as Redis's radix tree lists them.
    prefixes.sort();
    Ok(TrackingOptions { prefixes, ..given })
}

/// Redis's rule: no prefix of a client may be a prefix of another of its prefixes.
fn check_prefixes(given: &[Bytes], existing: &[Bytes]) -> Result<(), CommandError> {
    let overlap = |a: &Bytes, b: &Bytes| a != b && (a.starts_with(b) || b.starts_with(a));
    for (position, prefix) in given.iter().enumerate() {
        if let Some(other) = existing.iter().find(|other| overlap(prefix, other)) {
            let (prefix, other) = (String::from_utf8_lossy(prefix), String::from_utf8_lossy(other));
            return fail(format!("ERR Prefix '{prefix}' overlaps with an existing prefix '{other}'. Prefixes for a single client must not overlap."));
        }
        if let Some(other) = given[position + 1..].iter().find(|other| overlap(prefix, other)) {
            let (prefix, other) = (String::from_utf8_lossy(prefix), String::from_utf8_lossy(other));
            return fail(format!("ERR Prefix '{prefix}' overlaps with another provided prefix '{other}'. Prefixes for a single client must not overlap."));
        }
    }
    Ok(())
}

/// CLIENT TRACKINGINFO: the flags, the REDIRECT target (-1 off, 0 none) and the prefixes.
pub fn client_trackinginfo(call: &mut Call<'_>) -> CommandResult {
    let Some(tracking) = &call.session.tracking else {
        return Ok(tracking_info(vec!["off"], -1, Vec::new()));
    };
    let options = &tracking.options;
    let mut flags = vec!["on"];
    let caching = call.session.caching;
    for (set, flag) in [
        (options.bcast, "bcast"),
        (options.optin, "optin"),
        (options.optout, "optout"),
        (caching == Some(true), "caching-yes"),
        (caching == Some(false), "caching-no"),
        (options.noloop, "noloop"),
        (call.session.client.redirect_broken(), "broken_redirect"),
    ] {
        if set {
            flags.push(flag);
        }
    }
    let redirect = options.redirect.map_or(0, |target| target as i64);
    Ok(tracking_info(flags, redirect, options.prefixes.clone()))
}

fn tracking_info(flags: Vec<&str>, redirect: i64, prefixes: Vec<Bytes>) -> Reply {
    Reply::Map(vec![
        (Reply::bulk_text("flags"), Reply::Set(flags.into_iter().map(Reply::bulk_text).collect())),
        (Reply::bulk_text("redirect"), Reply::Integer(redirect)),
        (Reply::bulk_text("prefixes"), Reply::Array(prefixes.into_iter().map(Reply::Bulk).collect())),
    ])
}

/// CLIENT GETREDIR: -1 when tracking is off, 0 without REDIRECT.
pub fn client_getredir(call: &mut Call<'_>) -> CommandResult {
    Ok(Reply::Integer(call.session.tracking.as_ref().map_or(-1, |tracking| tracking.options.redirect.map_or(0, |target| target as i64))))
}

/// CLIENT CACHING YES|NO: whether the next command's reads are tracked (OPTIN, OPTOUT).
pub fn client_caching(call: &mut Call<'_>) -> CommandResult {
    let mode = call.session.tracking.as_ref().map(|tracking| (tracking.options.optin, tracking.options.optout));
    let Some((optin, optout)) = mode.filter(|(optin, optout)| *optin || *optout) else {
        return fail("ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled");
    };
    let yes = match &call.args[2] {
        word if is(word, "YES") => true,
        word if is(word, "NO") => false,
        _ => return fail(SYNTAX_ERROR),
    };
    if yes && !optin {
        return fail("ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.");
    }
    if !yes && !optout {
        return fail("ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.");
    }
    call.session.caching = Some(yes);
    Ok(Reply::ok())
}
