//! HyperLogLog values byte for byte as Redis 7.0 keeps them (its hyperloglog.c), so that GET,
//! DUMP and RESTORE move them between hybridkv and Redis and PFCOUNT answers the same numbers.
//!
//! An HLL is a string value: a 16-byte header (`HYLL`, the encoding, three unused bytes, the
//! cached cardinality as 8 bytes little-endian whose top bit marks it stale), then 16,384 6-bit
//! registers, either dense (12,288 bytes, register `i` at bit `6·i`, least significant bit
//! first) or sparse: run-length opcodes, `ZERO` (00xxxxxx: 1–64 zero registers), `XZERO`
//! (01xxxxxx yyyyyyyy: 1–16,384 zero registers) and `VAL` (1vvvvvxx: 1–4 registers of value
//! 1–32). A new HLL is sparse; it turns dense when an edit would pass `SPARSE_BYTES_MAX` or
//! store a value over 32, as Redis does with its default `hll-sparse-max-bytes`.
//!
//! An element goes to register `hash & (REGISTERS - 1)` of its 64-bit MurmurHash64A (seed
//! `HASH_SEED`), with value 1 + the trailing zero bits of the hash's other 50 bits (at most 51).
//! The cardinality is Ertl's estimator over the registers' histogram, computed as Redis computes
//! it in doubles.

const MAGIC: &[u8; 4] = b"HYLL";
pub const HEADER_BYTES: usize = 16;
const ENCODING_AT: usize = 4;
const CARDINALITY_AT: usize = 8;
/// The top bit of the cached cardinality's last byte: set while the cache is stale.
const STALE_CACHE_BIT: u8 = 0x80;
const ENCODING_DENSE: u8 = 0;
const ENCODING_SPARSE: u8 = 1;
/// Bits of the hash that choose the register.
const INDEX_BITS: u32 = 14;
pub const REGISTERS: usize = 1 << INDEX_BITS;
/// Bits of the hash whose trailing zeros are counted.
const COUNTED_BITS: u32 = 64 - INDEX_BITS;
const REGISTER_BITS: usize = 6;
const REGISTER_MAX: u8 = (1 << REGISTER_BITS) - 1;
pub const DENSE_BYTES: usize = HEADER_BYTES + (REGISTERS * REGISTER_BITS).div_ceil(8);
const HASH_SEED: u64 = 0xadc8_3b19;
/// Redis's default `hll-sparse-max-bytes`: a sparse HLL that an edit would make longer (its
/// whole value, header included) becomes dense.
const SPARSE_BYTES_MAX: usize = 3000;
const SPARSE_VALUE_MAX: u8 = 32;
const SPARSE_VALUE_RUN_MAX: usize = 4;
const SPARSE_ZERO_RUN_MAX: usize = 64;
const SPARSE_XZERO_RUN_MAX: usize = REGISTERS;
const XZERO_BIT: u8 = 0x40;
const VALUE_BIT: u8 = 0x80;
/// Redis's HLL_ALPHA_INF, 0.5 / ln 2.
const ALPHA_INFINITY: f64 = 0.721_347_520_444_481_7;
/// Opcodes of one sparse edit, at most: a run before, the new value, a run after.
const SPARSE_EDIT_OPCODES_MAX: usize = 5;

/// Why a string value is not an HLL Redis would take.
#[derive(Debug, PartialEq, Eq)]
pub enum HllError {
    /// Not an HLL at all: `WRONGTYPE Key is not a valid HyperLogLog string value.`
    NotHll,
    /// An HLL header over registers that do not add up: `INVALIDOBJ Corrupted HLL object detected`.
    Corrupt,
}

/// One sparse opcode, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Opcode {
    Zero(usize),
    Value(u8, usize),
}

impl Opcode {
    fn run(self) -> usize {
        match self {
            Opcode::Zero(run) | Opcode::Value(_, run) => run,
        }
    }
}

/// Decodes the opcode at `at` of a sparse body: the opcode and its length in bytes.
fn opcode_at(body: &[u8], at: usize) -> Result<(Opcode, usize), HllError> {
    let byte = body[at];
    match byte {
        _ if byte & VALUE_BIT != 0 => Ok((Opcode::Value(((byte >> 2) & 0x1f) + 1, usize::from(byte & 0x3) + 1), 1)),
        _ if byte & XZERO_BIT != 0 => {
            let low = *body.get(at + 1).ok_or(HllError::Corrupt)?;
            Ok((Opcode::Zero(((usize::from(byte & 0x3f) << 8) | usize::from(low)) + 1), 2))
        }
        _ => Ok((Opcode::Zero(usize::from(byte & 0x3f) + 1), 1)),
    }
}

/// Appends the opcodes of `run` zero registers as Redis writes one: ZERO up to 64, else XZERO.
fn push_zeros(opcodes: &mut Vec<u8>, run: usize) {
    debug_assert!((1..=SPARSE_XZERO_RUN_MAX).contains(&run));
    if run > SPARSE_ZERO_RUN_MAX {
        let stored = run - 1;
        opcodes.extend_from_slice(&[(stored >> 8) as u8 | XZERO_BIT, (stored & 0xff) as u8]);
    } else {
        opcodes.push((run - 1) as u8);
    }
}

fn value_opcode(value: u8, run: usize) -> u8 {
    debug_assert!((1..=SPARSE_VALUE_MAX).contains(&value) && (1..=SPARSE_VALUE_RUN_MAX).contains(&run));
    ((value - 1) << 2) | (run - 1) as u8 | VALUE_BIT
}

/// An element's register and the value it offers (1 + trailing zeros of the counted bits).
pub fn register_of(element: &[u8]) -> (usize, u8) {
    let hash = murmur2::murmur64a(element, HASH_SEED);
    let index = (hash & (REGISTERS as u64 - 1)) as usize;
    let counted = (hash >> INDEX_BITS) | (1 << COUNTED_BITS);
    (index, counted.trailing_zeros() as u8 + 1)
}

/// An HLL string value, checked as Redis's isHLLObjectOrReply checks one.
pub struct Hll {
    bytes: Vec<u8>,
}

impl Hll {
    /// A new, empty HLL: sparse, one XZERO of every register, a valid cached cardinality of 0.
    pub fn new() -> Hll {
        let mut bytes = vec![0; HEADER_BYTES];
        bytes[..MAGIC.len()].copy_from_slice(MAGIC);
        bytes[ENCODING_AT] = ENCODING_SPARSE;
        push_zeros(&mut bytes, REGISTERS);
        Hll { bytes }
    }

    pub fn parse(value: &[u8]) -> Result<Hll, HllError> {
        let well_formed = value.len() >= HEADER_BYTES
            && value.starts_with(MAGIC)
            && value[ENCODING_AT] <= ENCODING_SPARSE
            && (value[ENCODING_AT] == ENCODING_SPARSE || value.len() == DENSE_BYTES);
        match well_formed {
            true => Ok(Hll { bytes: value.to_vec() }),
            false => Err(HllError::NotHll),
        }
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    pub fn is_dense(&self) -> bool {
        self.bytes[ENCODING_AT] == ENCODING_DENSE
    }

    /// The cached cardinality, when it is not stale.
    pub fn cached_cardinality(&self) -> Option<u64> {
        let cache: [u8; 8] = self.bytes[CARDINALITY_AT..HEADER_BYTES].try_into().expect("8 bytes");
        (cache[7] & STALE_CACHE_BIT == 0).then(|| u64::from_le_bytes(cache))
    }

    pub fn mark_cache_stale(&mut self) {
        self.bytes[HEADER_BYTES - 1] |= STALE_CACHE_BIT;
    }

    /// Every register's value, checking that a sparse body covers exactly the registers.
    pub fn registers(&self) -> Result<Vec<u8>, HllError> {
        let body = &self.bytes[HEADER_BYTES..];
        if self.is_dense() {
            return Ok((0..REGISTERS).map(|index| dense_register(body, index)).collect());
        }
        let mut registers = Vec::with_capacity(REGISTERS);
        let mut at = 0;
        while at < body.len() {
            let (opcode, length) = opcode_at(body, at)?;
            if registers.len() + opcode.run() > REGISTERS {
                return Err(HllError::Corrupt);
            }
            let value = match opcode {
                Opcode::Zero(_) => 0,
                Opcode::Value(value, _) => value,
            };
            registers.resize(registers.len() + opcode.run(), value);
            at += length;
        }
        match registers.len() {
            REGISTERS => Ok(registers),
            _ => Err(HllError::Corrupt),
        }
    }

    /// Raises register `index` to `value` if it is lower: true when it changed. A sparse HLL is
    /// edited as Redis's hllSparseSet edits it, or made dense first when it must be.
    pub fn raise(&mut self, index: usize, value: u8) -> Result<bool, HllError> {
        assert!(index < REGISTERS && (1..=REGISTER_MAX).contains(&value), "register {index} value {value}");
        if self.is_dense() {
            return Ok(raise_dense(&mut self.bytes[HEADER_BYTES..], index, value));
        }
        if value > SPARSE_VALUE_MAX {
            return self.raise_after_densifying(index, value);
        }
        self.raise_sparse(index, value)
    }

    fn raise_after_densifying(&mut self, index: usize, value: u8) -> Result<bool, HllError> {
        self.make_dense()?;
        let raised = raise_dense(&mut self.bytes[HEADER_BYTES..], index, value);
        assert!(raised, "a register the sparse form could not hold was raised");
        Ok(raised)
    }

    /// Rewrites a sparse HLL as dense, keeping its header (and so its cached cardinality).
    pub fn make_dense(&mut self) -> Result<(), HllError> {
        if self.is_dense() {
            return Ok(());
        }
        let registers = self.registers()?;
        self.bytes.truncate(HEADER_BYTES);
        self.bytes.resize(DENSE_BYTES, 0);
        self.bytes[ENCODING_AT] = ENCODING_DENSE;
        for (index, value) in registers.into_iter().enumerate().filter(|(_, value)| *value > 0) {
            raise_dense(&mut self.bytes[HEADER_BYTES..], index, value);
        }
        Ok(())
    }

    /// Redis's hllSparseSet for a value of at most 32: the opcode covering `index` is replaced
    /// by up to three (the run before, the value, the run after), then VAL neighbours of equal
    /// value are merged, scanning five opcodes from the one before.
    fn raise_sparse(&mut self, index: usize, value: u8) -> Result<bool, HllError> {
        let body = &self.bytes[HEADER_BYTES..];
        let (mut at, mut first, mut previous) = (0, 0, None);
        let (opcode, length) = loop {
            if at >= body.len() {
                return Err(HllError::Corrupt);
            }
            let (opcode, length) = opcode_at(body, at)?;
            if index < first + opcode.run() {
                break (opcode, length);
            }
            (previous, at, first) = (Some(at), at + length, first + opcode.run());
        };
        let mut replacement = Vec::with_capacity(SPARSE_EDIT_OPCODES_MAX);
        match opcode {
            Opcode::Value(current, _) if current >= value => return Ok(false),
            Opcode::Value(_, 1) | Opcode::Zero(1) if length == 1 => replacement.push(value_opcode(value, 1)),
            Opcode::Zero(run) => {
                if index != first {
                    push_zeros(&mut replacement, index - first);
                }
                replacement.push(value_opcode(value, 1));
                if index != first + run - 1 {
                    push_zeros(&mut replacement, first + run - 1 - index);
                }
            }
            Opcode::Value(current, run) => {
                if index != first {
                    replacement.push(value_opcode(current, index - first));
                }
                replacement.push(value_opcode(value, 1));
                if index != first + run - 1 {
                    replacement.push(value_opcode(current, first + run - 1 - index));
                }
            }
        }
        let start = HEADER_BYTES + at;
        if replacement.len() > length && self.bytes.len() + replacement.len() - length > SPARSE_BYTES_MAX {
            return self.raise_after_densifying(index, value);
        }
        self.bytes.splice(start..start + length, replacement);
        self.merge_equal_values_from(HEADER_BYTES + previous.unwrap_or(0));
        Ok(true)
    }

    /// Merges adjacent VAL opcodes of one value whose runs fit one opcode, over at most five
    /// opcodes from `start` (Redis's step 4 of hllSparseSet).
    fn merge_equal_values_from(&mut self, start: usize) {
        let mut at = start;
        let mut scans_left = SPARSE_EDIT_OPCODES_MAX;
        while at < self.bytes.len() && scans_left > 0 {
            scans_left -= 1;
            let byte = self.bytes[at];
            if byte & VALUE_BIT == 0 {
                at += if byte & XZERO_BIT != 0 { 2 } else { 1 };
                continue;
            }
            if let Some(&next) = self.bytes.get(at + 1).filter(|next| **next & VALUE_BIT != 0) {
                let (value, run) = (((byte >> 2) & 0x1f) + 1, usize::from(byte & 0x3) + 1);
                let (next_value, next_run) = (((next >> 2) & 0x1f) + 1, usize::from(next & 0x3) + 1);
                if value == next_value && run + next_run <= SPARSE_VALUE_RUN_MAX {
                    self.bytes[at + 1] = value_opcode(value, run + next_run);
                    self.bytes.remove(at);
                    continue;
                }
            }
            at += 1;
        }
    }
}

fn dense_register(body: &[u8], index: usize) -> u8 {
    let (byte, shift) = (index * REGISTER_BITS / 8, index * REGISTER_BITS % 8);
    let low = u16::from(body[byte]);
    let high = u16::from(body.get(byte + 1).copied().unwrap_or(0));
    (((low | high << 8) >> shift) as u8) & REGISTER_MAX
}

fn raise_dense(body: &mut [u8], index: usize, value: u8) -> bool {
    if dense_register(body, index) >= value {
        return false;
    }
    let (byte, shift) = (index * REGISTER_BITS / 8, index * REGISTER_BITS % 8);
    let bits = u16::from(value) << shift;
    let mask = !(u16::from(REGISTER_MAX) << shift);
    body[byte] = (u16::from(body[byte]) & mask | bits) as u8;
    if let Some(high) = body.get_mut(byte + 1) {
        *high = ((u16::from(*high) << 8 & mask | bits) >> 8) as u8;
    }
    true
}

/// Raises each of `registers` to the matching value of `other` (PFCOUNT and PFMERGE of
/// several keys).
pub fn merge_into(registers: &mut [u8], other: &[u8]) {
    for (register, value) in registers.iter_mut().zip(other) {
        *register = (*register).max(*value);
    }
}

/// The estimated cardinality of registers, as Redis's hllCount computes it (Ertl's estimator).
pub fn cardinality(registers: &[u8]) -> u64 {
    let mut histogram = [0u32; 64];
    for &value in registers {
        histogram[usize::from(value)] += 1;
    }
    let m = REGISTERS as f64;
    let q = COUNTED_BITS as usize;
    let mut z = m * tau((m - f64::from(histogram[q + 1])) / m);
    for count in histogram[1..=q].iter().rev() {
        z += f64::from(*count);
        z *= 0.5;
    }
    z += m * sigma(f64::from(histogram[0]) / m);
    (ALPHA_INFINITY * m * m / z).round() as u64
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let (mut y, mut z) = (1.0, x);
    loop {
        x *= x;
        let before = z;
        z += x * y;
        y += y;
        if z == before {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let (mut y, mut z) = (1.0, 1.0 - x);
    loop {
        x = x.sqrt();
        let before = z;
        y *= 0.5;
        z -= (1.0 - x) * (1.0 - x) * y;
        if z == before {
            return z / 3.0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn added(elements: impl Iterator<Item = String>) -> Hll {
        let mut hll = Hll::new();
        for element in elements {
            let (index, value) = register_of(element.as_bytes());
            hll.raise(index, value).unwrap();
        }
        hll
    }

    #[test]
    fn a_new_hll_is_sparse_empty_and_counts_zero() {
        let hll = Hll::new();
        assert_eq!(hll.bytes, b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\0\x7f\xff");
        assert_eq!(hll.cached_cardinality(), Some(0));
        assert_eq!(cardinality(&hll.registers().unwrap()), 0);
    }

    #[test]
    fn sparse_and_dense_forms_hold_the_same_registers_and_estimate_within_two_percent() {
        for count in [1usize, 10, 300, 5_000, 100_000] {
            let hll = added((0..count).map(|number| format!("element:{number}")));
            let registers = hll.registers().unwrap();
            let mut dense = Hll::parse(&hll.bytes).unwrap();
            dense.make_dense().unwrap();
            assert_eq!(dense.bytes.len(), DENSE_BYTES);
            assert_eq!(dense.registers().unwrap(), registers, "{count} elements");
            let estimate = cardinality(&registers) as f64;
            assert!((estimate - count as f64).abs() <= (count as f64 * 0.02).max(1.0), "{count} elements estimated {estimate}");
        }
    }

    #[test]
    fn a_sparse_hll_turns_dense_past_its_byte_limit_with_the_same_registers() {
        let mut hll = Hll::new();
        let mut model = vec![0u8; REGISTERS];
        for number in 0..3_000 {
            let (index, value) = register_of(format!("m{number}").as_bytes());
            assert_eq!(hll.raise(index, value).unwrap(), value > model[index]);
            model[index] = model[index].max(value);
            assert!(hll.is_dense() || hll.bytes.len() <= SPARSE_BYTES_MAX);
        }
        assert!(hll.is_dense(), "3,000 elements need more than 3,000 sparse bytes");
        assert_eq!(hll.registers().unwrap(), model);
    }

    #[test]
    fn a_value_over_32_makes_a_sparse_hll_dense_keeping_its_header() {
        let mut hll = added((0..20).map(|number| format!("x{number}")));
        hll.mark_cache_stale();
        let registers = hll.registers().unwrap();
        assert!(hll.raise(5, 40).unwrap());
        assert!(hll.is_dense() && hll.cached_cardinality().is_none(), "dense, the cache still stale");
        let mut expected = registers;
        expected[5] = 40;
        assert_eq!(hll.registers().unwrap(), expected);
        assert!(!hll.raise(5, 40).unwrap() && !hll.raise(5, 3).unwrap());
    }

    #[test]
    fn malformed_values_are_refused_as_redis_refuses_them() {
        assert_eq!(Hll::parse(b"HYLL").err(), Some(HllError::NotHll));
        assert_eq!(Hll::parse(b"HYLX\x01\0\0\0\0\0\0\0\0\0\0\0\x7f\xff").err(), Some(HllError::NotHll));
        assert_eq!(Hll::parse(b"HYLL\x00\0\0\0\0\0\0\0\0\0\0\0\x7f\xff").err(), Some(HllError::NotHll), "dense of the wrong size");
        assert_eq!(Hll::parse(b"HYLL\x02\0\0\0\0\0\0\0\0\0\0\0\x7f\xff").err(), Some(HllError::NotHll));
        let short = Hll::parse(b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\0\x7f\xfe").unwrap();
        assert_eq!(short.registers().err(), Some(HllError::Corrupt), "runs short of the registers");
        let mut truncated = Hll::parse(b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\0\x7f").unwrap();
        assert_eq!(truncated.registers().err(), Some(HllError::Corrupt));
        assert_eq!(truncated.raise(5, 3).err(), Some(HllError::Corrupt));
    }
}
