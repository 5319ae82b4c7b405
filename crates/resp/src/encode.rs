//! Replies and their encoding in RESP2 and RESP3.
//!
//! A command builds one `Reply`; the connection's protocol version (chosen by HELLO) decides the
//! bytes. RESP3-only types degrade in RESP2 as Redis does: map → flat array, set → array,
//! double → bulk string, boolean → integer 0/1, verbatim → bulk string, push → array, and null →
//! `$-1` (or `*-1` for `NullArray`).

use std::borrow::Cow;

use bytes::{BufMut, Bytes, BytesMut};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtocolVersion {
    Resp2,
    Resp3,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// `+text`; must not contain CR or LF.
    Simple(Cow<'static, str>),
    /// `-text` (text starts with the error code, e.g. "ERR ..." or "WRONGTYPE ..."); CR/LF are
    /// replaced by spaces when encoded, as Redis does.
    Error(Cow<'static, str>),
    Integer(i64),
    Bulk(Bytes),
    /// A missing value: `$-1` in RESP2, `_` in RESP3.
    Null,
    /// A missing aggregate (EXEC aborted by WATCH): `*-1` in RESP2, `_` in RESP3.
    NullArray,
    Array(Vec<Reply>),
    Map(Vec<(Reply, Reply)>),
    Set(Vec<Reply>),
    Double(f64),
    /// A double already written as text (Redis's human form of a long double, GEOPOS):
    /// `,text` in RESP3, a bulk string in RESP2.
    DoubleText(String),
    Boolean(bool),
    /// Text with a three-letter format ("txt", "mkd").
    Verbatim { format: [u8; 3], text: Bytes },
    Push(Vec<Reply>),
}

impl Reply {
    pub fn ok() -> Reply {
        Reply::Simple(Cow::Borrowed("OK"))
    }

    pub fn simple(text: &'static str) -> Reply {
        Reply::Simple(Cow::Borrowed(text))
    }

    /// An error reply from its full text, code included ("ERR syntax error").
    pub fn error(text: impl Into<Cow<'static, str>>) -> Reply {
        Reply::Error(text.into())
    }

    pub fn bulk(bytes: impl Into<Bytes>) -> Reply {
        Reply::Bulk(bytes.into())
    }

    pub fn bulk_text(text: &str) -> Reply {
        Reply::Bulk(Bytes::copy_from_slice(text.as_bytes()))
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }
}

/// Redis 7.0's formatting of doubles for replies (`%.17g`): 17 significant digits without
/// trailing zeros, in exponent form under 1e-4 or from 1e17 on; "inf" / "-inf" / "nan" for the
/// special values, "-0" for negative zero.
pub fn format_double(value: f64) -> String {
    format_g(value, 17)
}

/// C's `%.<precision>g` (1 ≤ precision ≤ 17): `precision` significant digits without trailing
/// zeros, in exponent form under 1e-4 or from 10^precision on.
pub fn format_g(value: f64, precision: usize) -> String {
    assert!((1..=17).contains(&precision), "precision {precision} out of %g's range here");
    if value.is_nan() {
        return "nan".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    // The exponent %g decides by is the one of the value rounded to `precision` digits.
    let scientific = format!("{value:.*e}", precision - 1);
    let (mantissa, exponent) = scientific.split_once('e').expect("exponent form has an 'e'");
    let exponent: i32 = exponent.parse().expect("a decimal exponent");
    if exponent < -4 || exponent >= precision as i32 {
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{}e{sign}{:02}", without_fraction_zeros(mantissa), exponent.unsigned_abs());
    }
    let fixed = format!("{value:.*}", (precision as i32 - 1 - exponent) as usize);
    without_fraction_zeros(&fixed).to_string()
}

fn without_fraction_zeros(number: &str) -> &str {
    if number.contains('.') { number.trim_end_matches('0').trim_end_matches('.') } else { number }
}

/// Appends the encoding of `reply` to `output`.
pub fn encode(reply: &Reply, version: ProtocolVersion, output: &mut BytesMut) {
    let resp3 = version == ProtocolVersion::Resp3;
    match reply {
        Reply::Simple(text) => line(output, b'+', text.as_bytes()),
        Reply::Error(text) => encode_error(text, output),
        Reply::Integer(value) => line(output, b':', itoa(*value).as_bytes()),
        Reply::Bulk(bytes) => bulk(output, b'$', None, bytes),
        Reply::Null if resp3 => output.put_slice(b"_\r\n"),
        Reply::Null => output.put_slice(b"$-1\r\n"),
        Reply::NullArray if resp3 => output.put_slice(b"_\r\n"),
        Reply::NullArray => output.put_slice(b"*-1\r\n"),
        Reply::Array(items) => aggregate(output, b'*', items, version),
        Reply::Set(items) => aggregate(output, if resp3 { b'~' } else { b'*' }, items, version),
        Reply::Push(items) => aggregate(output, if resp3 { b'>' } else { b'*' }, items, version),
        Reply::Map(pairs) => {
            let count = if resp3 { pairs.len() } else { pairs.len() * 2 };
            line(output, if resp3 { b'%' } else { b'*' }, itoa(count as i64).as_bytes());
            for (key, value) in pairs {
                encode(key, version, output);
                encode(value, version, output);
            }
        }
        Reply::Double(value) if resp3 => line(output, b',', format_double(*value).as_bytes()),
        Reply::Double(value) => bulk(output, b'$', None, format_double(*value).as_bytes()),
        Reply::DoubleText(text) if resp3 => line(output, b',', text.as_bytes()),
        Reply::DoubleText(text) => bulk(output, b'$', None, text.as_bytes()),
        Reply::Boolean(value) if resp3 => output.put_slice(if *value { b"#t\r\n" } else { b"#f\r\n" }),
        Reply::Boolean(value) => line(output, b':', if *value { b"1" } else { b"0" }),
        Reply::Verbatim { format, text } if resp3 => bulk(output, b'=', Some(format), text),
        Reply::Verbatim { text, .. } => bulk(output, b'$', None, text),
    }
}

fn encode_error(text: &str, output: &mut BytesMut) {
    output.put_u8(b'-');
    output.extend(text.bytes().map(|byte| if byte == b'\r' || byte == b'\n' { b' ' } else { byte }));
    output.put_slice(b"\r\n");
}

fn line(output: &mut BytesMut, prefix: u8, body: &[u8]) {
    output.reserve(body.len() + 3);
    output.put_u8(prefix);
    output.put_slice(body);
    output.put_slice(b"\r\n");
}

fn bulk(output: &mut BytesMut, prefix: u8, format: Option<&[u8; 3]>, body: &[u8]) {
    let length = body.len() + format.map_or(0, |_| 4);
    output.reserve(length + 16);
    output.put_u8(prefix);
    output.put_slice(itoa(length as i64).as_bytes());
    output.put_slice(b"\r\n");
    if let Some(format) = format {
        output.put_slice(format);
        output.put_u8(b':');
    }
    output.put_slice(body);
    output.put_slice(b"\r\n");
}

fn aggregate(output: &mut BytesMut, prefix: u8, items: &[Reply], version: ProtocolVersion) {
    line(output, prefix, itoa(items.len() as i64).as_bytes());
    for item in items {
        encode(item, version, output);
    }
}

/// Decimal text of an integer without a heap allocation.
fn itoa(value: i64) -> IntegerText {
    let mut text = IntegerText { digits: [0; 20], start: 20 };
    let mut magnitude = value.unsigned_abs();
    loop {
        text.start -= 1;
        text.digits[text.start] = b'0' + (magnitude % 10) as u8;
        magnitude /= 10;
        if magnitude == 0 {
            break;
        }
    }
    if value < 0 {
        text.start -= 1;
        text.digits[text.start] = b'-';
    }
    text
}

/// Up to 20 bytes: i64::MIN is 19 digits and a sign.
struct IntegerText {
    digits: [u8; 20],
    start: usize,
}

impl IntegerText {
    fn as_bytes(&self) -> &[u8] {
        &self.digits[self.start..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(reply: &Reply, version: ProtocolVersion) -> String {
        let mut output = BytesMut::new();
        encode(reply, version, &mut output);
        String::from_utf8(output.to_vec()).unwrap()
    }

    fn both(reply: &Reply) -> (String, String) {
        (encoded(reply, ProtocolVersion::Resp2), encoded(reply, ProtocolVersion::Resp3))
    }

    #[test]
    fn encodes_scalars() {
        assert_eq!(both(&Reply::ok()).0, "+OK\r\n");
        assert_eq!(both(&Reply::error("ERR bad\r\nthing")).0, "-ERR bad  thing\r\n");
        assert_eq!(both(&Reply::Integer(i64::MIN)).0, ":-9223372036854775808\r\n");
        assert_eq!(both(&Reply::Integer(0)).0, ":0\r\n");
        assert_eq!(both(&Reply::bulk_text("hé")).1, "$3\r\nhé\r\n");
        assert_eq!(both(&Reply::bulk_text("")).0, "$0\r\n\r\n");
    }

    #[test]
    fn encodes_nulls_per_version() {
        assert_eq!(both(&Reply::Null), ("$-1\r\n".into(), "_\r\n".into()));
        assert_eq!(both(&Reply::NullArray), ("*-1\r\n".into(), "_\r\n".into()));
    }

    #[test]
    fn degrades_resp3_types_in_resp2() {
        let map = Reply::Map(vec![(Reply::bulk_text("a"), Reply::Integer(1))]);
        assert_eq!(both(&map), ("*2\r\n$1\r\na\r\n:1\r\n".into(), "%1\r\n$1\r\na\r\n:1\r\n".into()));
        let set = Reply::Set(vec![Reply::Integer(7)]);
        assert_eq!(both(&set), ("*1\r\n:7\r\n".into(), "~1\r\n:7\r\n".into()));
        assert_eq!(both(&Reply::Double(1.5)), ("$3\r\n1.5\r\n".into(), ",1.5\r\n".into()));
        assert_eq!(both(&Reply::Double(f64::INFINITY)).1, ",inf\r\n");
        assert_eq!(both(&Reply::DoubleText("13.5".into())), ("$4\r\n13.5\r\n".into(), ",13.5\r\n".into()));
        assert_eq!(both(&Reply::Boolean(true)), (":1\r\n".into(), "#t\r\n".into()));
        let verbatim = Reply::Verbatim { format: *b"txt", text: Bytes::from_static(b"hi") };
        assert_eq!(both(&verbatim), ("$2\r\nhi\r\n".into(), "=6\r\ntxt:hi\r\n".into()));
        let push = Reply::Push(vec![Reply::bulk_text("x")]);
        assert_eq!(both(&push), ("*1\r\n$1\r\nx\r\n".into(), ">1\r\n$1\r\nx\r\n".into()));
    }

    #[test]
    fn doubles_are_formatted_as_redis_7_0_formats_them_with_17_digits() {
        for (value, text) in [
            (1.5, "1.5"),
            (1.1, "1.1000000000000001"),
            (5.0, "5"),
            (-0.0, "-0"),
            (0.0, "0"),
            (1e17, "1e+17"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (12345678901234567.0, "12345678901234568"),
            (0.0001, "0.0001"),
            (0.00001, "1.0000000000000001e-05"),
            (-2.5e-300, "-2.5e-300"),
            (f64::NEG_INFINITY, "-inf"),
            (0.1 + 0.2, "0.30000000000000004"),
        ] {
            assert_eq!(format_double(value), text, "{value:e}");
        }
    }

    #[test]
    fn encodes_nested_arrays() {
        let nested = Reply::Array(vec![Reply::Array(vec![]), Reply::Null]);
        assert_eq!(both(&nested).0, "*2\r\n*0\r\n$-1\r\n");
    }
}
