//! Key names and record values. Values are derived from the key's number so that the restart
//! and scan workloads can check what the server returns.

/// Aerospike's and the brief's object size for the three mixes.
pub const MIX_VALUE_BYTES: usize = 440;
/// The 70/30 mix's record size (Aerospike on PMem 200).
pub const SMALL_VALUE_BYTES: usize = 64;
/// Scan records: their fields, then padding, like a row with a few more columns.
pub const SCAN_RECORD_BYTES: usize = 256;
/// Value size of the restart workload: between the two mixes.
pub const RESTART_VALUE_BYTES: usize = 100;

pub fn key_name(number: u64) -> String {
    format!("key:{number:012}")
}

/// The value stored under `key_name(number)` at ingest: the number, then filler letters that
/// depend on it, `length` bytes in all (at least the number's 12 digits).
pub fn record_value(number: u64, length: usize) -> Vec<u8> {
    let mut value = format!("{number:012}").into_bytes();
    let offset = (number % 26) as u8;
    let filler_length = length.saturating_sub(value.len());
    value.extend((0..filler_length).map(|position| b'a' + (offset + (position % 26) as u8) % 26));
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_have_the_asked_length_and_name_their_key() {
        let value = record_value(42, MIX_VALUE_BYTES);
        assert_eq!(value.len(), MIX_VALUE_BYTES);
        assert!(value.starts_with(b"000000000042"));
        assert_ne!(record_value(43, SMALL_VALUE_BYTES), record_value(42, SMALL_VALUE_BYTES));
        assert_eq!(key_name(7), "key:000000000007");
    }
}
