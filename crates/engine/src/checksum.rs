//! CRC-32C (Castagnoli), the checksum of every persistent block, record and journal frame.
//!
//! crc-fast folds the input with carry-less multiplication (PCLMULQDQ, or VPCLMULQDQ where the
//! CPU has it), where a loop of SSE4.2 `crc32` instructions waits for each 8-byte step: measured
//! here, 10 ns against 23 ns for a 476-byte record and 29 ns against 108 ns for a 2.6 KiB one
//! (the same values; the formats do not change). Every read verifies its record, so this is
//! on the path of every get.

/// The CRC-32C of `bytes`.
#[inline]
pub(crate) fn crc32c(bytes: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(bytes)
}

/// The CRC-32C of `first` followed by `second`.
pub(crate) fn crc32c_of_two(first: &[u8], second: &[u8]) -> u32 {
    let mut digest = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
    digest.update(first);
    digest.update(second);
    digest.finalize() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_crc32c_check_value() {
        // The catalogue's check value: CRC-32C of the ASCII digits 1 to 9.
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn of_two_is_of_their_concatenation() {
        let bytes: Vec<u8> = (0..3000u32).map(|i| (i * 31 + 7) as u8).collect();
        for split in [0, 1, 8, 476, 2999, 3000] {
            assert_eq!(crc32c_of_two(&bytes[..split], &bytes[split..]), crc32c(&bytes));
        }
    }
}
