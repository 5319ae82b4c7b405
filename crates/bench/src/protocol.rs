//! The client side of RESP2: commands are written as arrays of bulk strings, replies are parsed
//! incrementally. (`hybridkv-resp` is the server side: it decodes requests and encodes replies.)

use bytes::{BufMut, BytesMut};

/// Replies nest only for arrays (EXEC, SCAN); deeper nesting than this is a broken server.
const REPLY_NESTING_DEPTH_MAX: usize = 8;
/// Redis's proto-max-bulk-len default; a longer length is a broken stream, not a value.
const BULK_BYTES_MAX: usize = 512 * 1024 * 1024;
/// An array longer than this (SCAN and MGET batches are far smaller) is a broken stream.
const ARRAY_ELEMENTS_MAX: usize = 16 * 1024 * 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Integer(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

/// Appends `arguments` as one RESP command.
pub fn encode_command<A: AsRef<[u8]>>(arguments: &[A], output: &mut BytesMut) {
    write_header(b'*', arguments.len(), output);
    for argument in arguments {
        let argument = argument.as_ref();
        write_header(b'$', argument.len(), output);
        output.put_slice(argument);
        output.put_slice(b"\r\n");
    }
}

fn write_header(kind: u8, length: usize, output: &mut BytesMut) {
    output.put_u8(kind);
    output.put_slice(length.to_string().as_bytes());
    output.put_slice(b"\r\n");
}

/// Parses one reply from the front of `input`: `Ok(None)` while it is incomplete, otherwise the
/// reply and the bytes it took.
pub fn parse_reply(input: &[u8]) -> Result<Option<(Reply, usize)>, String> {
    parse_at(input, 0, 0)
}

fn parse_at(input: &[u8], start: usize, depth: usize) -> Result<Option<(Reply, usize)>, String> {
    if depth > REPLY_NESTING_DEPTH_MAX {
        return Err(format!("replies nested deeper than {REPLY_NESTING_DEPTH_MAX}"));
    }
    let Some((line, after_line)) = read_line(input, start) else { return Ok(None) };
    let Some((&kind, body)) = line.split_first() else { return Err("empty reply line".into()) };
    let text = || String::from_utf8_lossy(body).into_owned();
    match kind {
        b'+' => Ok(Some((Reply::Simple(text()), after_line))),
        b'-' => Ok(Some((Reply::Error(text()), after_line))),
        b':' => Ok(Some((Reply::Integer(parse_integer(body)?), after_line))),
        b'$' => parse_bulk(input, parse_integer(body)?, after_line),
        b'*' => parse_array(input, parse_integer(body)?, after_line, depth),
        other => Err(format!("unexpected reply type byte {:?}", other as char)),
    }
}

fn parse_bulk(input: &[u8], length: i64, start: usize) -> Result<Option<(Reply, usize)>, String> {
    if length < 0 {
        return Ok(Some((Reply::Bulk(None), start)));
    }
    let length = usize::try_from(length).map_err(|_| "bulk length overflows".to_string())?;
    if length > BULK_BYTES_MAX {
        return Err(format!("bulk length {length} exceeds {BULK_BYTES_MAX} bytes"));
    }
    let end = start + length;
    let Some(terminator) = input.get(end..end + 2) else { return Ok(None) };
    if terminator != b"\r\n" {
        return Err("bulk string not terminated by CRLF".into());
    }
    Ok(Some((Reply::Bulk(Some(input[start..end].to_vec())), end + 2)))
}

fn parse_array(input: &[u8], length: i64, start: usize, depth: usize) -> Result<Option<(Reply, usize)>, String> {
    if length < 0 {
        return Ok(Some((Reply::Array(None), start)));
    }
    let length = usize::try_from(length).map_err(|_| "array length overflows".to_string())?;
    if length > ARRAY_ELEMENTS_MAX {
        return Err(format!("array of {length} elements exceeds {ARRAY_ELEMENTS_MAX}"));
    }
    let mut elements = Vec::with_capacity(length);
    let mut position = start;
    for _ in 0..length {
        let Some((element, next)) = parse_at(input, position, depth + 1)? else { return Ok(None) };
        elements.push(element);
        position = next;
    }
    Ok(Some((Reply::Array(Some(elements)), position)))
}

/// The line starting at `start` without its CRLF, and the position after the CRLF.
fn read_line(input: &[u8], start: usize) -> Option<(&[u8], usize)> {
    let rest = input.get(start..)?;
    let newline = rest.windows(2).position(|pair| pair == b"\r\n")?;
    Some((&rest[..newline], start + newline + 2))
}

fn parse_integer(text: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| format!("not an integer: {:?}", String::from_utf8_lossy(text)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_commands_as_bulk_arrays() {
        let mut output = BytesMut::new();
        encode_command(&["SET", "k", "value"], &mut output);
        assert_eq!(&output[..], b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n");
    }

    #[test]
    fn parses_every_reply_type() {
        let input = b"*5\r\n+OK\r\n-ERR no\r\n:42\r\n$3\r\nabc\r\n$-1\r\n";
        let (reply, used) = parse_reply(input).unwrap().unwrap();
        assert_eq!(used, input.len());
        let expected = vec![
            Reply::Simple("OK".into()),
            Reply::Error("ERR no".into()),
            Reply::Integer(42),
            Reply::Bulk(Some(b"abc".to_vec())),
            Reply::Bulk(None),
        ];
        assert_eq!(reply, Reply::Array(Some(expected)));
    }

    #[test]
    fn waits_for_incomplete_replies() {
        let input = b"*2\r\n$3\r\nabc\r\n$3\r\nde";
        for end in 0..input.len() {
            assert_eq!(parse_reply(&input[..end]).unwrap(), None, "prefix of {end} bytes");
        }
    }

    #[test]
    fn rejects_broken_streams() {
        assert!(parse_reply(b"?x\r\n").is_err());
        assert!(parse_reply(b":12a\r\n").is_err());
        assert!(parse_reply(b"$3\r\nabcd\r\n").is_err());
        let nested = "*1\r\n".repeat(REPLY_NESTING_DEPTH_MAX + 2) + ":1\r\n";
        assert!(parse_reply(nested.as_bytes()).is_err());
    }
}
