//! INCRBYFLOAT's and HINCRBYFLOAT's numbers as Redis computes them: C `long double`, which on
//! x86-64 Linux is the x87 80-bit format (a 64-bit significand), read like `strtold` and written
//! like `printf("%.17Lf")` without trailing zeros. In f64 the same additions give other digits
//! once a result needs more than 53 bits: `INCRBYFLOAT` of 3 on 9223372036854775807 is
//! 9223372036854775810 in Redis and 9223372036854780000 in f64, and an increment of
//! 1.23456789012345678 keeps its 18 digits there. The arithmetic is rustc_apfloat's software
//! x87 type; the text in and out is checked and written here.

use rustc_apfloat::ieee::{Double, X87DoubleExtended};
use rustc_apfloat::{Float, FloatConvert, Round, Status};

/// Redis refuses a float text this long or longer (`MAX_LONG_DOUBLE_CHARS`, the buffer its
/// `string2ld` copies into).
pub const FLOAT_TEXT_BYTES_MAX: usize = 5 * 1024 - 1;
/// Digits after the point that Redis prints (`%.17Lf`), before it strips trailing zeros.
const FRACTION_DIGITS: u32 = 17;
const FRACTION_SCALE: u128 = 10u128.pow(FRACTION_DIGITS);
/// x87 extended: 64-bit significand with an explicit integer bit, 15-bit exponent biased by
/// 16383, sign in bit 79.
const SIGNIFICAND_BITS: i32 = 64;
const EXPONENT_BIAS: i32 = 16383;
const EXPONENT_MASK: u128 = 0x7fff;
const SIGN_BIT: u32 = 79;
/// Decimal limbs of the big integers printed for values of 2^64 and more.
const LIMB_BASE: u64 = 1_000_000_000;
const LIMB_DIGITS: usize = 9;
/// The largest doubling step of one limb (LIMB_BASE × 2^29 fits in a u64).
const LIMB_SHIFT_MAX: u32 = 29;

#[derive(Clone, Copy, Debug)]
pub struct LongDouble(X87DoubleExtended);

impl LongDouble {
    pub const ZERO: LongDouble = LongDouble(X87DoubleExtended::ZERO);

    /// The number `text` spells, as Redis's `string2ld` reads it: all of the text is a decimal
    /// or hexadecimal float or an infinity (no spaces, nothing after it), not NaN, not so large
    /// that it overflows nor so small that it underflows to zero.
    pub fn parse(text: &[u8]) -> Option<LongDouble> {
        if text.is_empty() || text.len() > FLOAT_TEXT_BYTES_MAX {
            return None;
        }
        let text = std::str::from_utf8(text).ok()?;
        let (sign, body) = match text.as_bytes()[0] {
            b'-' => ("-", &text[1..]),
            b'+' => ("", &text[1..]),
            _ => ("", text),
        };
        if body.eq_ignore_ascii_case("inf") || body.eq_ignore_ascii_case("infinity") {
            let infinity = X87DoubleExtended::INFINITY;
            return Some(LongDouble(if sign == "-" { -infinity } else { infinity }));
        }
        let spelled = if let Some(hex) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
            hex_float(hex)?
        } else {
            decimal_float(body)?.to_string()
        };
        let parsed = X87DoubleExtended::from_str_r(&format!("{sign}{spelled}"), Round::NearestTiesToEven).ok()?;
        let value = parsed.value;
        let out_of_range = parsed.status.contains(Status::OVERFLOW) || value.is_infinite() || value.is_nan();
        let underflowed_to_zero = value.is_zero() && parsed.status.contains(Status::UNDERFLOW);
        (!out_of_range && !underflowed_to_zero).then_some(LongDouble(value))
    }

    /// A double's exact value (a long double holds every double).
    pub fn from_f64(value: f64) -> LongDouble {
        let mut loses_info = false;
        let converted: X87DoubleExtended = Double::from_bits(u128::from(value.to_bits())).convert(&mut loses_info).value;
        assert!(!loses_info, "the x87 format holds every double");
        LongDouble(converted)
    }

    /// The sum, rounded to nearest as the x87 unit does.
    pub fn add(self, other: LongDouble) -> LongDouble {
        LongDouble(self.0.add_r(other.0, Round::NearestTiesToEven).value)
    }

    pub fn is_finite(self) -> bool {
        self.0.is_finite()
    }

    /// Redis's text of a finite value: `%.17Lf`, trailing zeros and point removed, "-0" as "0".
    pub fn to_redis_text(self) -> String {
        assert!(self.is_finite(), "only finite values are written");
        let bits = self.0.to_bits();
        let negative = (bits >> SIGN_BIT) & 1 == 1;
        let significand = bits as u64;
        // A denormal (exponent field 0) has the smallest normal exponent, without integer bit.
        let exponent = ((bits >> SIGNIFICAND_BITS) & EXPONENT_MASK) as i32;
        let power_of_two = exponent.max(1) - EXPONENT_BIAS - (SIGNIFICAND_BITS - 1);
        let (integer, fraction) = if power_of_two >= 0 {
            (shifted_decimal(significand, power_of_two as u32), 0)
        } else {
            let (integer, fraction) = fixed_point(significand, power_of_two.unsigned_abs());
            (integer.to_string(), fraction)
        };
        let mut text = format!("{integer}.{fraction:0width$}", width = FRACTION_DIGITS as usize);
        let kept = text.trim_end_matches('0').trim_end_matches('.').len();
        text.truncate(kept);
        if negative && text != "0" {
            text.insert(0, '-');
        }
        text
    }
}

pub const TWO_TO_63: f64 = 9_223_372_036_854_775_808.0;

/// A double converted to a signed 64-bit integer as x86-64 converts it (cvttsd2si, and llrint
/// of an integral value): truncated when it fits, else (NaN too) the "integer indefinite"
/// i64::MIN.
pub fn c_signed(value: f64) -> i64 {
    if (-TWO_TO_63..TWO_TO_63).contains(&value) { value as i64 } else { i64::MIN }
}

/// A double read from a whole text as C's `strtod` reads it (Redis's scores and range ends):
/// its value rounded to nearest, and strtod's range error (ERANGE: it overflowed to an
/// infinity, or underflowed to zero, from digits that were not all zeros).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CDouble {
    pub value: f64,
    pub out_of_range: bool,
}

/// `text` as strtod reads it when the whole text is a number: an optional sign, then decimal
/// digits with an optional exponent, a hexadecimal float after `0x` (binary exponent optional),
/// an infinity or NaN; None for anything else (no spaces: callers strip what they allow).
pub fn parse_c_double(text: &str) -> Option<CDouble> {
    let body = text.strip_prefix(['-', '+']).unwrap_or(text);
    let Some(hex) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) else {
        let value: f64 = text.parse().ok()?;
        let mantissa = body.split(['e', 'E']).next().unwrap_or_default();
        let overflowed = value.is_infinite() && !body.to_ascii_lowercase().starts_with("inf");
        let underflowed = value == 0.0 && mantissa.bytes().any(|byte| (b'1'..=b'9').contains(&byte));
        return Some(CDouble { value, out_of_range: overflowed || underflowed });
    };
    let sign = if text.starts_with('-') { "-" } else { "" };
    let parsed = Double::from_str_r(&format!("{sign}{}", hex_float(hex)?), Round::NearestTiesToEven).ok()?;
    let value = f64::from_bits(parsed.value.to_bits() as u64);
    let out_of_range = parsed.status.contains(Status::OVERFLOW) || (value == 0.0 && parsed.status.contains(Status::UNDERFLOW));
    Some(CDouble { value, out_of_range })
}

/// `digits` of a decimal float as strtold reads one: digits with at most one point and at least
/// one digit, then an optional exponent with at least one digit.
fn decimal_float(body: &str) -> Option<&str> {
    let (mantissa, exponent) = body.split_once(['e', 'E']).map_or((body, None), |(mantissa, exponent)| (mantissa, Some(exponent)));
    let digits_with_point = |text: &str, radix: u32| {
        let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
        let all_digits = |part: &str| part.chars().all(|c| c.is_digit(radix));
        all_digits(whole) && all_digits(fraction) && !(whole.is_empty() && fraction.is_empty())
    };
    let exponent_ok = exponent.is_none_or(exponent_digits);
    (digits_with_point(mantissa, 10) && exponent_ok).then_some(body)
}

/// A hexadecimal float (after "0x") in the form rustc_apfloat reads, which requires the binary
/// exponent that strtold makes optional.
fn hex_float(hex: &str) -> Option<String> {
    let (mantissa, exponent) = hex.split_once(['p', 'P']).map_or((hex, None), |(mantissa, exponent)| (mantissa, Some(exponent)));
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_hex = |part: &str| part.chars().all(|c| c.is_ascii_hexdigit());
    let mantissa_ok = all_hex(whole) && all_hex(fraction) && !(whole.is_empty() && fraction.is_empty());
    let exponent_ok = exponent.is_none_or(exponent_digits);
    (mantissa_ok && exponent_ok).then(|| format!("0x{mantissa}p{}", exponent.unwrap_or("0")))
}

fn exponent_digits(exponent: &str) -> bool {
    let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
    !digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit())
}

/// The integer part and the first 17 decimals (rounded to nearest, ties to even, as glibc's
/// printf does) of `significand` / 2^`shift`.
fn fixed_point(significand: u64, shift: u32) -> (u64, u128) {
    let (integer, fraction_bits) = if shift >= 64 { (0, significand) } else { (significand >> shift, significand & ((1u64 << shift) - 1)) };
    // Below 2^121: a 64-bit fraction times 10^17.
    let scaled = u128::from(fraction_bits) * FRACTION_SCALE;
    if shift >= 128 {
        // scaled / 2^shift is under a quarter: rounds to 0.
        return (integer, 0);
    }
    let (quotient, remainder, half) = (scaled >> shift, scaled & ((1u128 << shift) - 1), 1u128 << (shift - 1));
    let rounded = quotient + u128::from(remainder > half || (remainder == half && quotient % 2 == 1));
    if rounded == FRACTION_SCALE {
        (integer + 1, 0)
    } else {
        (integer, rounded)
    }
}

/// The decimal digits of `significand` × 2^`shift` (up to about 4,950 digits).
fn shifted_decimal(significand: u64, shift: u32) -> String {
    let mut limbs = vec![significand % LIMB_BASE, significand / LIMB_BASE % LIMB_BASE, significand / LIMB_BASE / LIMB_BASE];
    let mut left = shift;
    while left > 0 {
        let step = left.min(LIMB_SHIFT_MAX);
        let mut carry = 0u64;
        for limb in &mut limbs {
            let product = (*limb << step) + carry;
            *limb = product % LIMB_BASE;
            carry = product / LIMB_BASE;
        }
        while carry > 0 {
            limbs.push(carry % LIMB_BASE);
            carry /= LIMB_BASE;
        }
        left -= step;
    }
    while limbs.len() > 1 && limbs.last() == Some(&0) {
        limbs.pop();
    }
    let mut text = limbs.last().expect("at least one limb").to_string();
    for limb in limbs.iter().rev().skip(1) {
        text.push_str(&format!("{limb:0LIMB_DIGITS$}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(a: &str, b: &str) -> String {
        LongDouble::parse(a.as_bytes()).unwrap().add(LongDouble::parse(b.as_bytes()).unwrap()).to_redis_text()
    }

    /// Expected texts: what redis-server 7.0 on x86-64 answered to SET k A, INCRBYFLOAT k B.
    #[test]
    fn sums_read_as_redis_writes_them() {
        assert_eq!(sum("10.50", "0.1"), "10.6");
        assert_eq!(sum("0.1", "0.2"), "0.3");
        assert_eq!(sum("5.0e3", "2.0e2"), "5200");
        assert_eq!(sum("10.6", "-5"), "5.6");
        assert_eq!(sum("9223372036854775807", "3"), "9223372036854775810");
        assert_eq!(sum("-9223372036854775808", "1e2"), "-9223372036854775708");
        assert_eq!(sum("0", "1.23456789012345678"), "1.23456789012345678");
        assert_eq!(sum("3.0e20", "0"), "300000000000000000000");
        assert_eq!(sum("0.5", "-0.5"), "0");
        assert_eq!(sum("-0.000000000000000001", "0"), "0");
        assert_eq!(sum("0.000000000000000005", "0"), "0", "the nearest long double is under 5e-18");
        assert_eq!(sum("0x10", "0"), "16");
        assert_eq!(sum("1e30", "0"), "1000000000000000000024696061952");
        assert_eq!(sum("1e-4940", "0"), "0");
    }

    #[test]
    fn texts_are_read_as_string2ld_reads_them() {
        for good in ["1", "-1", "+1", "1.", ".5", "5.e3", "1E+5", "0x1p4", "0x.8", "007", "1e-4940"] {
            assert!(LongDouble::parse(good.as_bytes()).is_some(), "{good}");
        }
        for bad in ["", " 1", "1 ", "abc", "1e", "1e+", ".", "-", "nan", "NaN", "1e5000", "1e-5000", "0x", "1.2.3", "--1", "0xg"] {
            assert!(LongDouble::parse(bad.as_bytes()).is_none(), "{bad:?}");
        }
        assert!(!LongDouble::parse(b"-Infinity").unwrap().is_finite());
        assert!(LongDouble::parse(b"1e4000").unwrap().is_finite(), "long double reaches about 1.19e4932");
        assert!(LongDouble::parse(&vec![b'1'; FLOAT_TEXT_BYTES_MAX + 1]).is_none());
    }

    #[test]
    fn huge_values_print_every_digit() {
        let text = LongDouble::parse(b"1e4000").unwrap().to_redis_text();
        assert_eq!(text.len(), 4000);
        assert!(text.starts_with("999999999999999999996546387309"), "{}", &text[..30]);
    }
}
