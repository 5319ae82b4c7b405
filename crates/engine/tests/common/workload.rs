//! A random workload of puts, deletes and batches over a small key space, with the model of what
//! it acknowledged: shared by the power-cut, fault and corruption campaigns.

use std::collections::BTreeMap;

use hybridkv_engine::{BatchOp, Database, EngineError};
use rand::rngs::StdRng;
use rand::Rng;

use super::{key, value};

/// Keys the workload touches: few, so that versions of one key meet across blocks.
pub const WORKLOAD_KEYS: u64 = 40;
/// The expiry of values of odd length: far in the future (2100-01-01), so nothing expires, but
/// the entries of a key switch between expiring and not (a tag of the entry, rewritten before
/// its location: what a crash may tear).
pub const WORKLOAD_EXPIRY_UNIX_MS: u64 = 4_102_444_800_000;

/// The expiry the workload writes with `value`: a function of the value, so the model needs none.
pub fn expiry_of(value: &[u8]) -> u64 {
    if value.len() % 2 == 1 { WORKLOAD_EXPIRY_UNIX_MS } else { 0 }
}

pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;
/// The writes of one operation: (key, new value or deletion); several make a batch.
pub type Operation = Vec<(Vec<u8>, Option<Vec<u8>>)>;

pub fn random_operation(rng: &mut StdRng) -> Operation {
    let write = |rng: &mut StdRng| {
        let number = rng.gen_range(0..WORKLOAD_KEYS);
        if rng.gen_bool(0.2) {
            (key(number), None)
        } else {
            let len = if rng.gen_bool(0.1) { rng.gen_range(2000..12_000) } else { rng.gen_range(1..600) };
            (key(number), Some(value(number, rng.gen(), len)))
        }
    };
    let count = if rng.gen_bool(0.25) { rng.gen_range(2..6) } else { 1 };
    (0..count).map(|_| write(rng)).collect()
}

pub fn apply(database: &Database, operation: &Operation) -> Result<(), EngineError> {
    let namespace = database.namespace(0).unwrap();
    if operation.len() == 1 {
        let (key, value) = &operation[0];
        return match value {
            Some(value) => namespace.put(key, value, expiry_of(value)),
            None => namespace.delete(key).map(|_| ()),
        };
    }
    let operations = operation
        .iter()
        .map(|(key, value)| match value {
            Some(value) => BatchOp::Put { key: key.clone(), value: value.clone(), expiry_unix_ms: expiry_of(value) },
            None => BatchOp::Delete { key: key.clone() },
        })
        .collect();
    namespace.apply_batch(operations)
}

pub fn applied(model: &Model, operation: &Operation) -> Model {
    let mut after = model.clone();
    for (key, value) in operation {
        match value {
            Some(value) => after.insert(key.clone(), value.clone()),
            None => after.remove(key),
        };
    }
    after
}

/// Every key of the workload, and every key a scan finds, as get serves it; checks that scan
/// and the key count agree with get.
pub fn state_of(database: &Database, context: &str) -> Model {
    let namespace = database.namespace(0).unwrap();
    let mut scanned = Vec::new();
    let mut cursor = 0;
    loop {
        let page = namespace.scan(cursor, 100).unwrap();
        scanned.extend(page.keys);
        cursor = page.next_cursor;
        if cursor == 0 {
            break;
        }
    }
    scanned.sort();
    let mut state = Model::new();
    let workload_keys: Vec<Vec<u8>> = (0..WORKLOAD_KEYS).map(key).collect();
    for key in workload_keys.iter().cloned().chain(scanned.iter().cloned()) {
        let found = namespace.get(&key).unwrap_or_else(|error| panic!("{context}: get failed: {error}"));
        if let Some(found) = found {
            if workload_keys.contains(&key) {
                assert_eq!(found.expiry_unix_ms, expiry_of(&found.bytes), "{context}: expiry of {}", String::from_utf8_lossy(&key));
            }
            state.insert(key, found.bytes);
        }
    }
    let report = &database.restart_reports()[0];
    assert_eq!(scanned, state.keys().cloned().collect::<Vec<_>>(), "{context}: scan and get disagree after {report:?}");
    assert_eq!(namespace.key_count(), state.len() as u64, "{context}: key count disagrees after {report:?}");
    state
}

/// Keys whose value in `state` differs from `model`, for failure messages.
pub fn differences(model: &Model, state: &Model) -> Vec<String> {
    let keys: std::collections::BTreeSet<&Vec<u8>> = model.keys().chain(state.keys()).collect();
    keys.into_iter()
        .filter(|key| model.get(*key) != state.get(*key))
        .map(|key| String::from_utf8_lossy(key).into_owned())
        .collect()
}

/// Reads a number from the environment, or `default`.
pub fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |text| text.parse().unwrap_or_else(|_| panic!("{name}: not a number: {text}")))
}
