//! PFADD, PFCOUNT and PFMERGE over HyperLogLog string values (`crate::hyperloglog`), with Redis
//! 7.0's replies, errors and keyspace events (`pfadd`, also for PFMERGE).

use bytes::Bytes;
use hybridkv_resp::Reply;

use super::read_string;
use crate::command::{fail, Call, CommandError, CommandResult, KeyStore};
use crate::hyperloglog::{cardinality, merge_into, register_of, Hll, HllError, REGISTERS};
use crate::keyspace_events::STRING;
use crate::values::encode_string;

fn refused<T>(error: HllError) -> Result<T, CommandError> {
    fail(match error {
        HllError::NotHll => "WRONGTYPE Key is not a valid HyperLogLog string value.",
        HllError::Corrupt => "INVALIDOBJ Corrupted HLL object detected",
    })
}

/// The key's HLL and expiry; WRONGTYPE when it holds another type or a string that is not one.
fn read_hll(store: &mut dyn KeyStore, key: &[u8]) -> Result<Option<(Hll, u64)>, CommandError> {
    let Some((value, expiry)) = read_string(store, key)? else { return Ok(None) };
    Ok(Some((Hll::parse(&value).or_else(refused)?, expiry)))
}

fn write_hll(call: &mut Call<'_>, key: &Bytes, hll: Hll, expiry: u64) -> Result<(), CommandError> {
    call.store.put(key, &encode_string(&hll.into_bytes()), expiry)?;
    Ok(())
}

/// The registers of `keys` merged (missing keys count as empty), and whether one was dense.
fn merged_registers(call: &mut Call<'_>, keys: &[Bytes]) -> Result<(Vec<u8>, bool), CommandError> {
    let mut registers = vec![0; REGISTERS];
    let mut any_dense = false;
    for key in keys {
        let Some((hll, _)) = read_hll(call.store, key)? else { continue };
        any_dense |= hll.is_dense();
        merge_into(&mut registers, &hll.registers().or_else(refused)?);
    }
    Ok((registers, any_dense))
}

/// PFADD key [element ...]: 1 when a register changed or the key was created, else 0.
pub fn pfadd(call: &mut Call<'_>) -> CommandResult {
    let key = call.args[1].clone();
    let (mut hll, expiry, mut updated) = match read_hll(call.store, &key)? {
        Some((hll, expiry)) => (hll, expiry, false),
        None => (Hll::new(), 0, true),
    };
    for element in &call.args[2..] {
        let (index, value) = register_of(element);
        updated |= hll.raise(index, value).or_else(refused)?;
    }
    if updated {
        hll.mark_cache_stale();
        write_hll(call, &key, hll, expiry)?;
        call.notify(STRING, "pfadd", &key);
    }
    Ok(Reply::Integer(i64::from(updated)))
}

/// PFCOUNT key [key ...]: the estimated cardinality of the union. Of one key, the cached
/// cardinality when it is valid. Unlike Redis, a cardinality computed is not written back into
/// the value: PFCOUNT stays a read (it keeps working when the namespace is out of space, and
/// does not log a 12 KiB record per count); the value keeps its stale mark instead.
pub fn pfcount(call: &mut Call<'_>) -> CommandResult {
    if let [key] = &call.args[1..] {
        let Some((hll, _)) = read_hll(call.store, key)? else { return Ok(Reply::Integer(0)) };
        let count = match hll.cached_cardinality() {
            Some(cached) => cached,
            None => cardinality(&hll.registers().or_else(refused)?),
        };
        return Ok(Reply::Integer(count as i64));
    }
    let (registers, _) = merged_registers(call, &call.args[1..])?;
    Ok(Reply::Integer(cardinality(&registers) as i64))
}

/// PFMERGE destkey [sourcekey ...]: the destination (one of the inputs) becomes the union,
/// dense when an input was.
pub fn pfmerge(call: &mut Call<'_>) -> CommandResult {
    let (registers, any_dense) = merged_registers(call, &call.args[1..])?;
    let key = call.args[1].clone();
    let (mut target, expiry) = read_hll(call.store, &key)?.unwrap_or_else(|| (Hll::new(), 0));
    if any_dense {
        target.make_dense().or_else(refused)?;
    }
    for (index, value) in registers.into_iter().enumerate().filter(|(_, value)| *value > 0) {
        target.raise(index, value).or_else(refused)?;
    }
    target.mark_cache_stale();
    write_hll(call, &key, target, expiry)?;
    call.notify(STRING, "pfadd", &key);
    Ok(Reply::ok())
}
