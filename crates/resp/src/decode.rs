//! Incremental decoding of client requests.
//!
//! A request is either a RESP multibulk (`*<count>\r\n` then `<count>` times `$<len>\r\n<bytes>\r\n`)
//! or an inline command (one line of space-separated, optionally quoted words). The decoder keeps
//! the part of a multibulk already parsed, so a large request arriving in many reads is parsed once
//! (not re-scanned from its start on every read), and takes each argument out of the buffer without
//! copying it (`BytesMut::split_to`).
//!
//! Errors carry Redis's exact texts; after one the connection is expected to be closed, as Redis
//! does, because the decoder cannot know where the next request starts.

use bytes::{Buf, Bytes, BytesMut};

use crate::inline::split_inline_arguments;

/// Largest bulk string accepted by default (Redis's proto-max-bulk-len default is 512 MiB).
pub const BULK_BYTES_MAX_DEFAULT: usize = 512 * 1024 * 1024;
/// Most arguments per command accepted by default.
pub const ARGUMENTS_MAX_DEFAULT: usize = 1024 * 1024;
/// Longest inline command, and longest `*<count>` / `$<len>` line (Redis's PROTO_INLINE_MAX_SIZE).
pub const INLINE_BYTES_MAX: usize = 64 * 1024;
/// Before AUTH, a client may send at most this many arguments per command (as Redis).
pub const UNAUTHENTICATED_ARGUMENTS_MAX: usize = 10;
/// Before AUTH, a client may send bulk strings of at most this many bytes (as Redis).
pub const UNAUTHENTICATED_BULK_BYTES_MAX: usize = 16 * 1024;

/// The limits a decoder enforces; the server may change them between calls (after AUTH).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeLimits {
    pub bulk_bytes_max: usize,
    pub arguments_max: usize,
    /// When false, the stricter UNAUTHENTICATED_* limits apply, with their own errors.
    pub authenticated: bool,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        DecodeLimits { bulk_bytes_max: BULK_BYTES_MAX_DEFAULT, arguments_max: ARGUMENTS_MAX_DEFAULT, authenticated: true }
    }
}

/// A malformed request. Display gives Redis's reply text (without the "ERR " prefix).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    #[error("Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    #[error("Protocol error: invalid bulk length")]
    InvalidBulkLength,
    #[error("Protocol error: expected '$', got '{}'", char::from(*.0))]
    ExpectedBulk(u8),
    #[error("Protocol error: too big inline request")]
    TooBigInlineRequest,
    #[error("Protocol error: too big mbulk count string")]
    TooBigMultibulkCount,
    #[error("Protocol error: too big bulk count string")]
    TooBigBulkCount,
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    #[error("Protocol error: unauthenticated multibulk length")]
    UnauthenticatedMultibulkLength,
    #[error("Protocol error: unauthenticated bulk length")]
    UnauthenticatedBulkLength,
    /// Redis has no limit here; ours applies the same arguments_max to inline commands.
    #[error("Protocol error: too many arguments in inline request")]
    TooManyInlineArguments,
}

/// Where the decoder is inside a multibulk request.
#[derive(Debug, Default)]
enum State {
    #[default]
    BetweenRequests,
    Multibulk {
        arguments_remaining: usize,
        arguments: Vec<Bytes>,
        /// Length of the bulk whose `$<len>` line was read but whose bytes have not all arrived.
        bulk_bytes: Option<usize>,
    },
}

/// Upper bound of arguments preallocated from a client-supplied count, so a lying `*1000000` does
/// not allocate before the arguments arrive.
const ARGUMENTS_PREALLOCATED_MAX: usize = 1024;

#[derive(Debug, Default)]
pub struct RequestDecoder {
    state: State,
}

impl RequestDecoder {
    pub fn new() -> RequestDecoder {
        RequestDecoder::default()
    }

    /// Takes one complete request out of `buffer`: `Ok(Some(arguments))`, or `Ok(None)` when more
    /// bytes are needed (the bytes of a partial request may already have been consumed into the
    /// decoder's state). Empty requests (`*0`, blank lines) are skipped, as Redis does.
    pub fn decode(&mut self, buffer: &mut BytesMut, limits: &DecodeLimits) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        loop {
            if let State::Multibulk { .. } = self.state {
                return self.continue_multibulk(buffer, limits);
            }
            let Some(&first) = buffer.first() else { return Ok(None) };
            if first == b'*' {
                if !self.start_multibulk(buffer, limits)? {
                    return Ok(None);
                }
            } else {
                match decode_inline(buffer, limits)? {
                    InlineLine::Incomplete => return Ok(None),
                    InlineLine::Empty => continue,
                    InlineLine::Arguments(arguments) => return Ok(Some(arguments)),
                }
            }
        }
    }

    /// Bytes the decoder still needs for the bulk it is reading (0 when unknown): a hint for
    /// sizing the next read of a large argument.
    pub fn bulk_bytes_wanted(&self, buffer: &BytesMut) -> usize {
        match self.state {
            State::Multibulk { bulk_bytes: Some(bytes), .. } => (bytes + 2).saturating_sub(buffer.len()),
            _ => 0,
        }
    }

    /// Whether a request has been partly read (a client closing now disconnects mid-command).
    pub fn is_mid_request(&self, buffer: &BytesMut) -> bool {
        matches!(self.state, State::Multibulk { .. }) || !buffer.is_empty()
    }

    /// Reads a `*<count>\r\n` line. Returns false when the line is not complete yet.
    fn start_multibulk(&mut self, buffer: &mut BytesMut, limits: &DecodeLimits) -> Result<bool, ProtocolError> {
        let Some(count) = read_length_line(buffer, ProtocolError::TooBigMultibulkCount)? else { return Ok(false) };
        let count = count.ok_or(ProtocolError::InvalidMultibulkLength)?;
        if !limits.authenticated && count > UNAUTHENTICATED_ARGUMENTS_MAX as i64 {
            return Err(ProtocolError::UnauthenticatedMultibulkLength);
        }
        if count > limits.arguments_max as i64 {
            return Err(ProtocolError::InvalidMultibulkLength);
        }
        if count > 0 {
            let count = count as usize;
            self.state = State::Multibulk {
                arguments_remaining: count,
                arguments: Vec::with_capacity(count.min(ARGUMENTS_PREALLOCATED_MAX)),
                bulk_bytes: None,
            };
        }
        Ok(true)
    }

    fn continue_multibulk(&mut self, buffer: &mut BytesMut, limits: &DecodeLimits) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        let State::Multibulk { arguments_remaining, arguments, bulk_bytes } = &mut self.state else {
            unreachable!("continue_multibulk is only called inside a multibulk");
        };
        while *arguments_remaining > 0 {
            let length = match *bulk_bytes {
                Some(length) => length,
                None => match read_bulk_header(buffer, limits)? {
                    Some(length) => {
                        *bulk_bytes = Some(length);
                        length
                    }
                    None => return Ok(None),
                },
            };
            if buffer.len() < length + 2 {
                return Ok(None);
            }
            arguments.push(buffer.split_to(length).freeze());
            // As Redis, the two bytes after the data are taken as the CRLF without checking them.
            buffer.advance(2);
            *bulk_bytes = None;
            *arguments_remaining -= 1;
        }
        let State::Multibulk { arguments, .. } = std::mem::take(&mut self.state) else { unreachable!() };
        Ok(Some(arguments))
    }
}

/// Reads a `$<len>\r\n` line; `Ok(None)` when incomplete.
fn read_bulk_header(buffer: &mut BytesMut, limits: &DecodeLimits) -> Result<Option<usize>, ProtocolError> {
    let Some(&first) = buffer.first() else { return Ok(None) };
    if first != b'$' {
        return Err(ProtocolError::ExpectedBulk(first));
    }
    let Some(length) = read_length_line(buffer, ProtocolError::TooBigBulkCount)? else { return Ok(None) };
    let length = length.filter(|&length| length >= 0).ok_or(ProtocolError::InvalidBulkLength)? as u64;
    if !limits.authenticated && length > UNAUTHENTICATED_BULK_BYTES_MAX as u64 {
        return Err(ProtocolError::UnauthenticatedBulkLength);
    }
    if length > limits.bulk_bytes_max as u64 {
        return Err(ProtocolError::InvalidBulkLength);
    }
    Ok(Some(length as usize))
}

/// Reads a line `<prefix><integer>\r\n` (as Redis: up to the first '\r', with one more byte for
/// the '\n'). `Ok(None)`: incomplete; `Ok(Some(None))`: complete but not an integer.
fn read_length_line(buffer: &mut BytesMut, too_long: ProtocolError) -> Result<Option<Option<i64>>, ProtocolError> {
    let Some(carriage_return) = buffer.iter().position(|&byte| byte == b'\r') else {
        return if buffer.len() > INLINE_BYTES_MAX { Err(too_long) } else { Ok(None) };
    };
    if carriage_return > INLINE_BYTES_MAX {
        return Err(too_long);
    }
    if carriage_return + 1 >= buffer.len() {
        return Ok(None);
    }
    let number = parse_decimal_i64(&buffer[1..carriage_return]);
    buffer.advance(carriage_return + 2);
    Ok(Some(number))
}

/// Redis's string2ll: an optional '-', no '+', no leading zeros, no spaces, no overflow.
pub(crate) fn parse_decimal_i64(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let valid_start = match digits {
        [b'0'] => !negative,
        [b'1'..=b'9', ..] => true,
        _ => false,
    };
    if !valid_start {
        return None;
    }
    let mut magnitude: u64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        magnitude = magnitude.checked_mul(10)?.checked_add(u64::from(digit - b'0'))?;
    }
    if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

enum InlineLine {
    Incomplete,
    Empty,
    Arguments(Vec<Bytes>),
}

fn decode_inline(buffer: &mut BytesMut, limits: &DecodeLimits) -> Result<InlineLine, ProtocolError> {
    let Some(newline) = buffer.iter().position(|&byte| byte == b'\n') else {
        return if buffer.len() > INLINE_BYTES_MAX { Err(ProtocolError::TooBigInlineRequest) } else { Ok(InlineLine::Incomplete) };
    };
    if newline > INLINE_BYTES_MAX {
        return Err(ProtocolError::TooBigInlineRequest);
    }
    let line = buffer.split_to(newline + 1);
    let line = line.strip_suffix(b"\n").and_then(|line| line.strip_suffix(b"\r").or(Some(line))).unwrap_or(&line);
    let arguments = split_inline_arguments(line).ok_or(ProtocolError::UnbalancedQuotes)?;
    if arguments.is_empty() {
        return Ok(InlineLine::Empty);
    }
    let arguments_max = if limits.authenticated { limits.arguments_max } else { UNAUTHENTICATED_ARGUMENTS_MAX };
    if arguments.len() > arguments_max {
        return Err(ProtocolError::TooManyInlineArguments);
    }
    Ok(InlineLine::Arguments(arguments.into_iter().map(Bytes::from).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(input: &[u8], limits: DecodeLimits) -> Result<Vec<Vec<Vec<u8>>>, ProtocolError> {
        let mut decoder = RequestDecoder::new();
        let mut buffer = BytesMut::from(input);
        let mut commands = Vec::new();
        while let Some(arguments) = decoder.decode(&mut buffer, &limits)? {
            commands.push(arguments.iter().map(|argument| argument.to_vec()).collect());
        }
        Ok(commands)
    }

    fn words(list: &[&str]) -> Vec<Vec<u8>> {
        list.iter().map(|word| word.as_bytes().to_vec()).collect()
    }

    #[test]
    fn decodes_pipelined_multibulk_and_inline_commands() {
        let input = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n";
        let commands = decode_all(input, DecodeLimits::default()).unwrap();
        assert_eq!(commands, vec![words(&["GET", "k"]), words(&["PING"]), words(&["SET", "k", ""])]);
    }

    #[test]
    fn decodes_byte_by_byte_with_binary_payloads() {
        let input = b"*2\r\n$4\r\nECHO\r\n$5\r\na\r\n\x00b\r\n";
        let mut decoder = RequestDecoder::new();
        let mut buffer = BytesMut::new();
        let limits = DecodeLimits::default();
        for (position, &byte) in input.iter().enumerate() {
            buffer.extend_from_slice(&[byte]);
            let decoded = decoder.decode(&mut buffer, &limits).unwrap();
            if position + 1 < input.len() {
                assert!(decoded.is_none(), "complete too early at byte {position}");
                assert!(decoder.is_mid_request(&buffer));
            } else {
                assert_eq!(decoded.unwrap(), vec![Bytes::from_static(b"ECHO"), Bytes::from_static(b"a\r\n\x00b")]);
                assert!(!decoder.is_mid_request(&buffer));
            }
        }
    }

    #[test]
    fn skips_empty_requests() {
        let commands = decode_all(b"*0\r\n*-1\r\n\r\n   \r\nPING\n", DecodeLimits::default()).unwrap();
        assert_eq!(commands, vec![words(&["PING"])]);
    }

    #[test]
    fn reports_bulk_bytes_wanted() {
        let mut decoder = RequestDecoder::new();
        let mut buffer = BytesMut::from(&b"*1\r\n$100\r\nabc"[..]);
        assert!(decoder.decode(&mut buffer, &DecodeLimits::default()).unwrap().is_none());
        assert_eq!(decoder.bulk_bytes_wanted(&buffer), 99);
    }

    #[test]
    fn protocol_errors_have_redis_texts() {
        let limits = DecodeLimits::default();
        let cases: &[(&[u8], &str)] = &[
            (b"*abc\r\n", "Protocol error: invalid multibulk length"),
            (b"*2\r\nxyz\r\n", "Protocol error: expected '$', got 'x'"),
            (b"*1\r\n$-5\r\n", "Protocol error: invalid bulk length"),
            (b"*1\r\n$01\r\n", "Protocol error: invalid bulk length"),
            (b"*1\r\n$999999999999\r\n", "Protocol error: invalid bulk length"),
            (b"*99999999999999999999999\r\n", "Protocol error: invalid multibulk length"),
            (b"SET \"k v\n", "Protocol error: unbalanced quotes in request"),
        ];
        for (input, text) in cases {
            let error = decode_all(input, limits).unwrap_err();
            assert_eq!(error.to_string(), *text, "input {:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn enforces_configured_limits() {
        let limits = DecodeLimits { bulk_bytes_max: 8, arguments_max: 3, authenticated: true };
        assert_eq!(decode_all(b"*4\r\n", limits), Err(ProtocolError::InvalidMultibulkLength));
        assert_eq!(decode_all(b"*1\r\n$9\r\n", limits), Err(ProtocolError::InvalidBulkLength));
        assert!(decode_all(b"*1\r\n$8\r\n12345678\r\n", limits).is_ok());
        let before_auth = DecodeLimits { authenticated: false, ..DecodeLimits::default() };
        assert_eq!(decode_all(b"*11\r\n", before_auth), Err(ProtocolError::UnauthenticatedMultibulkLength));
        assert_eq!(decode_all(b"*1\r\n$16385\r\n", before_auth), Err(ProtocolError::UnauthenticatedBulkLength));
        assert_eq!(decode_all(b"a b c d\r\n", limits), Err(ProtocolError::TooManyInlineArguments));
        assert!(decode_all(b"a b c\r\n", limits).is_ok());
    }

    #[test]
    fn bounds_lines_without_terminator() {
        let limits = DecodeLimits::default();
        let long_inline = vec![b'a'; INLINE_BYTES_MAX + 1];
        assert_eq!(decode_all(&long_inline, limits), Err(ProtocolError::TooBigInlineRequest));
        let mut long_count = b"*".to_vec();
        long_count.extend(std::iter::repeat_n(b'1', INLINE_BYTES_MAX + 1));
        assert_eq!(decode_all(&long_count, limits), Err(ProtocolError::TooBigMultibulkCount));
        let mut long_bulk = b"*1\r\n$".to_vec();
        long_bulk.extend(std::iter::repeat_n(b'1', INLINE_BYTES_MAX + 1));
        assert_eq!(decode_all(&long_bulk, limits), Err(ProtocolError::TooBigBulkCount));
    }

    #[test]
    fn parses_integers_like_redis() {
        assert_eq!(parse_decimal_i64(b"0"), Some(0));
        assert_eq!(parse_decimal_i64(b"-12"), Some(-12));
        assert_eq!(parse_decimal_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_decimal_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [&b""[..], b"-", b"+1", b"01", b"-0", b"1 ", b"9223372036854775808", b"1a"] {
            assert_eq!(parse_decimal_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    /// Random and mutated inputs (seeded, bounded) never panic and never grow the decoder beyond
    /// what it was given; a stand-in for the cargo-fuzz target where libFuzzer is not available.
    #[test]
    fn random_inputs_never_panic() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        const ALPHABET: &[u8] = b"*$\r\n0123456789-abc \"'\\x";
        let limits = DecodeLimits { bulk_bytes_max: 64, arguments_max: 16, authenticated: true };
        for _ in 0..20_000 {
            let length = (next() % 64) as usize;
            let input: Vec<u8> = (0..length).map(|_| ALPHABET[(next() % ALPHABET.len() as u64) as usize]).collect();
            let mut decoder = RequestDecoder::new();
            let mut buffer = BytesMut::new();
            for chunk in input.chunks(1 + (next() % 8) as usize) {
                buffer.extend_from_slice(chunk);
                match decoder.decode(&mut buffer, &limits) {
                    Ok(Some(arguments)) => assert!(!arguments.is_empty() && arguments.len() <= 16),
                    Ok(None) => {}
                    Err(_) => break,
                }
            }
        }
    }
}
