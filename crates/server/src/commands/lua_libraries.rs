//! The libraries Redis 7.0 gives scripts beyond Lua's own, as Redis builds them: `cjson`
//! (lua-cjson 2.1.0 with its defaults: 14 significant digits, sparse arrays refused past index
//! 10 when under half full, NaN and infinities refused when encoding and read when decoding,
//! 1,000 levels of nesting), `bit` (LuaBitOp: 32-bit operations on numbers) and `cmsgpack`
//! (lua-cmsgpack 0.4.0: MessagePack streams). Their errors are those libraries' texts, with the
//! position of the script's line as Lua's `luaL_error` gives it.

use hybridkv_resp::format_g;
use mlua::{LightUserData, Lua, LuaString, MultiValue, Table, Value};

use crate::long_double::parse_c_double;

/// Tables nested in what `cjson.encode` and `cjson.decode` take or make at most.
const JSON_DEPTH_MAX: usize = 1000;
/// Significant digits of the numbers `cjson.encode` writes.
const JSON_NUMBER_DIGITS: usize = 14;
/// Arrays up to this index are encoded as arrays however sparse.
const SPARSE_ARRAY_SAFE_INDEX: f64 = 10.0;
/// Past that index, an array whose highest index is over this many times its element count is
/// refused.
const SPARSE_ARRAY_RATIO: f64 = 2.0;

/// Tables nested in what `cmsgpack.pack` writes (deeper ones are written as nil, as
/// lua-cmsgpack does so that circular tables end).
const MSGPACK_NESTING_MAX: usize = 16;
/// Containers nested in what `cmsgpack.unpack` reads (lua-cmsgpack has no limit of its own
/// but its C stack).
const MSGPACK_DECODE_DEPTH_MAX: usize = 1000;
/// Values one `cmsgpack.unpack` answers at most (lua-cmsgpack meets Lua's C stack limit there).
const MSGPACK_VALUES_MAX: usize = 7999;

/// `cjson`, `bit` and `cmsgpack`, to be set as globals.
pub fn libraries(lua: &Lua) -> mlua::Result<[(&'static str, Table); 3]> {
    Ok([("cjson", cjson_table(lua)?), ("bit", bit_table(lua)?), ("cmsgpack", msgpack_table(lua)?)])
}

/// An error raised as `luaL_error` raises it: prefixed with the calling Lua function's place.
fn raise(lua: &Lua, message: String) -> mlua::Error {
    let place = lua.inspect_stack(1, |debug| {
        let line = debug.current_line()?;
        Some(format!("{}:{line}: ", debug.source().short_src.unwrap_or_default()))
    });
    mlua::Error::RuntimeError(format!("{}{message}", place.flatten().unwrap_or_default()))
}

fn cjson_table(lua: &Lua) -> mlua::Result<Table> {
    let cjson = lua.create_table()?;
    cjson.set("encode", lua.create_function(|lua, arguments: MultiValue| {
        let [value] = one_argument(lua, "encode", arguments)?;
        let mut json = Vec::new();
        encode_json(lua, &value, 0, &mut json)?;
        lua.create_string(json)
    })?)?;
    cjson.set("decode", lua.create_function(|lua, arguments: MultiValue| {
        let [text] = one_argument(lua, "decode", arguments)?;
        let text = string_argument(lua, "decode", Some(&text))?;
        JsonParser { lua, text: &text.as_bytes(), at: 0, depth: 0 }.decode()
    })?)?;
    cjson.set("null", Value::LightUserData(LightUserData(std::ptr::null_mut())))?;
    cjson.set("_NAME", "cjson")?;
    cjson.set("_VERSION", "2.1.0")?;
    Ok(cjson)
}

/// A string argument as `luaL_checklstring` takes one: a string, or a number as Lua writes it.
fn string_argument(lua: &Lua, function: &str, value: Option<&Value>) -> mlua::Result<LuaString> {
    match value {
        Some(Value::String(text)) => Ok(text.clone()),
        Some(number @ (Value::Number(_) | Value::Integer(_))) => Ok(lua.coerce_string(number.clone())?.expect("a number is a string")),
        other => {
            let got = other.map_or("no value", Value::type_name);
            Err(raise(lua, format!("bad argument #1 to '{function}' (string expected, got {got})")))
        }
    }
}

fn one_argument(lua: &Lua, function: &str, arguments: MultiValue) -> mlua::Result<[Value; 1]> {
    let arguments: Vec<Value> = arguments.into_iter().collect();
    <[Value; 1]>::try_from(arguments).map_err(|_| raise(lua, format!("bad argument #1 to '{function}' (expected 1 argument)")))
}

/// `cjson.encode`: Lua's value as JSON.
fn encode_json(lua: &Lua, value: &Value, depth: usize, json: &mut Vec<u8>) -> mlua::Result<()> {
    match value {
        Value::Nil => json.extend_from_slice(b"null"),
        Value::Boolean(truth) => json.extend_from_slice(if *truth { b"true" } else { b"false" }),
        Value::Integer(number) => encode_number(lua, *number as f64, json)?,
        Value::Number(number) => encode_number(lua, *number, json)?,
        Value::String(text) => encode_string(&text.as_bytes(), json),
        Value::Table(table) => {
            let depth = depth + 1;
            if depth > JSON_DEPTH_MAX {
                return Err(raise(lua, format!("Cannot serialise, excessive nesting ({depth})")));
            }
            match array_length(lua, table)? {
                Some(length) => encode_array(lua, table, length, depth, json)?,
                None => encode_object(lua, table, depth, json)?,
            }
        }
        Value::LightUserData(data) if data.0.is_null() => json.extend_from_slice(b"null"),
        other => return Err(raise(lua, format!("Cannot serialise {}: type not supported", other.type_name()))),
    }
    Ok(())
}

fn encode_number(lua: &Lua, number: f64, json: &mut Vec<u8>) -> mlua::Result<()> {
    if !number.is_finite() {
        return Err(raise(lua, "Cannot serialise number: must not be NaN or Inf".into()));
    }
    json.extend_from_slice(format_g(number, JSON_NUMBER_DIGITS).as_bytes());
    Ok(())
}

/// A string with lua-cjson's escapes: the control characters and DEL as `\uXXXX` (or `\b`,
/// `\t`, `\n`, `\f`, `\r`), `"`, `\` and `/` escaped; other bytes as they are.
fn encode_string(text: &[u8], json: &mut Vec<u8>) {
    json.push(b'"');
    for &byte in text {
        match byte {
            b'"' => json.extend_from_slice(b"\\\""),
            b'\\' => json.extend_from_slice(b"\\\\"),
            b'/' => json.extend_from_slice(b"\\/"),
            0x08 => json.extend_from_slice(b"\\b"),
            b'\t' => json.extend_from_slice(b"\\t"),
            b'\n' => json.extend_from_slice(b"\\n"),
            0x0c => json.extend_from_slice(b"\\f"),
            b'\r' => json.extend_from_slice(b"\\r"),
            0..0x20 | 0x7f => json.extend_from_slice(format!("\\u{byte:04x}").as_bytes()),
            _ => json.push(byte),
        }
    }
    json.push(b'"');
}

/// The table's highest index when every key is an integer from 1 (None: an object, including
/// the empty table); refuses an excessively sparse array as lua-cjson does.
fn array_length(lua: &Lua, table: &Table) -> mlua::Result<Option<usize>> {
    let (mut highest, mut items) = (0.0f64, 0.0f64);
    for pair in table.clone().pairs::<Value, Value>() {
        let (key, _) = pair?;
        let Some(index) = number_of(&key) else { return Ok(None) };
        if index.floor() != index || index < 1.0 {
            return Ok(None);
        }
        highest = highest.max(index);
        items += 1.0;
    }
    if highest > items * SPARSE_ARRAY_RATIO && highest > SPARSE_ARRAY_SAFE_INDEX {
        return Err(raise(lua, "Cannot serialise table: excessively sparse array".into()));
    }
    Ok((highest > 0.0).then_some(highest as usize))
}

fn encode_array(lua: &Lua, table: &Table, length: usize, depth: usize, json: &mut Vec<u8>) -> mlua::Result<()> {
    json.push(b'[');
    for index in 1..=length {
        if index > 1 {
            json.push(b',');
        }
        encode_json(lua, &table.raw_get::<Value>(index)?, depth, json)?;
    }
    json.push(b']');
    Ok(())
}

/// The table's pairs in Lua's iteration order, keys as strings (numbers written as numbers are).
fn encode_object(lua: &Lua, table: &Table, depth: usize, json: &mut Vec<u8>) -> mlua::Result<()> {
    json.push(b'{');
    for (at, pair) in table.clone().pairs::<Value, Value>().enumerate() {
        let (key, value) = pair?;
        if at > 0 {
            json.push(b',');
        }
        match key {
            Value::String(key) => encode_string(&key.as_bytes(), json),
            Value::Number(_) | Value::Integer(_) => {
                json.push(b'"');
                encode_json(lua, &key, depth, json)?;
                json.push(b'"');
            }
            other => return Err(raise(lua, format!("Cannot serialise {}: table key must be a number or string", other.type_name()))),
        }
        json.push(b':');
        encode_json(lua, &value, depth, json)?;
    }
    json.push(b'}');
    Ok(())
}

/// A token of lua-cjson's tokenizer.
enum Token {
    ObjectBegin,
    ObjectEnd,
    ArrayBegin,
    ArrayEnd,
    String(Vec<u8>),
    Number(f64),
    Boolean(bool),
    Null,
    Colon,
    Comma,
    End,
    /// What was wrong (lua-cjson's "found" text).
    Error(&'static str),
}

impl Token {
    fn name(&self) -> &'static str {
        match self {
            Token::ObjectBegin => "T_OBJ_BEGIN",
            Token::ObjectEnd => "T_OBJ_END",
            Token::ArrayBegin => "T_ARR_BEGIN",
            Token::ArrayEnd => "T_ARR_END",
            Token::String(_) => "T_STRING",
            Token::Number(_) => "T_NUMBER",
            Token::Boolean(_) => "T_BOOLEAN",
            Token::Null => "T_NULL",
            Token::Colon => "T_COLON",
            Token::Comma => "T_COMMA",
            Token::End => "T_END",
            Token::Error(found) => found,
        }
    }
}

/// `cjson.decode`'s parser: lua-cjson's tokens (a NUL byte ends the text, as the C string it
/// reads), numbers as C's strtod reads them (hexadecimal, infinities and NaN included), its
/// error texts and character positions.
struct JsonParser<'a> {
    lua: &'a Lua,
    text: &'a [u8],
    at: usize,
    depth: usize,
}

impl JsonParser<'_> {
    fn decode(mut self) -> mlua::Result<Value> {
        if self.text.len() >= 2 && (self.text[0] == 0 || self.text[1] == 0) {
            return Err(raise(self.lua, "JSON parser does not support UTF-16 or UTF-32".into()));
        }
        let (token, start) = self.next_token();
        let value = self.value(token, start)?;
        let (token, start) = self.next_token();
        if !matches!(token, Token::End) {
            return Err(self.unexpected("the end", &token, start));
        }
        Ok(value)
    }

    fn byte(&self, at: usize) -> u8 {
        self.text.get(at).copied().unwrap_or(0)
    }

    fn unexpected(&self, expected: &str, token: &Token, start: usize) -> mlua::Error {
        raise(self.lua, format!("Expected {expected} but found {} at character {}", token.name(), start + 1))
    }

    /// The next token and where it starts (an error token: where the error is).
    fn next_token(&mut self) -> (Token, usize) {
        while matches!(self.byte(self.at), b' ' | b'\t' | b'\n' | b'\r') {
            self.at += 1;
        }
        let start = self.at;
        let single = match self.byte(start) {
            0 => return (Token::End, start),
            b'{' => Token::ObjectBegin,
            b'}' => Token::ObjectEnd,
            b'[' => Token::ArrayBegin,
            b']' => Token::ArrayEnd,
            b',' => Token::Comma,
            b':' => Token::Colon,
            b'"' => return self.string_token(),
            b'-' | b'0'..=b'9' => return self.number_token(),
            _ => return self.word_token(),
        };
        self.at += 1;
        (single, start)
    }

    fn word_token(&mut self) -> (Token, usize) {
        let start = self.at;
        let rest = &self.text[start..];
        for (word, token) in [(&b"true"[..], Token::Boolean(true)), (b"false", Token::Boolean(false)), (b"null", Token::Null)] {
            if rest.starts_with(word) {
                self.at += word.len();
                return (token, start);
            }
        }
        let lowercase = |length: usize| rest.get(..length).map(|prefix| prefix.to_ascii_lowercase());
        let known_start = matches!(self.byte(start), b'f' | b'i' | b'I' | b'n' | b'N' | b't' | b'+');
        let invalid_number = self.byte(start) == b'+' || lowercase(3).is_some_and(|prefix| prefix == b"inf" || prefix == b"nan");
        if known_start && invalid_number {
            return self.number_token();
        }
        (Token::Error("invalid token"), start)
    }

    fn number_token(&mut self) -> (Token, usize) {
        let start = self.at;
        let length = c_number_length(&self.text[start..]);
        let parsed = std::str::from_utf8(&self.text[start..start + length]).ok().and_then(parse_c_double);
        match parsed {
            Some(number) if length > 0 => {
                self.at += length;
                (Token::Number(number.value), start)
            }
            _ => (Token::Error("invalid number"), start),
        }
    }

    fn string_token(&mut self) -> (Token, usize) {
        let start = self.at;
        self.at += 1;
        let mut decoded = Vec::new();
        loop {
            match self.byte(self.at) {
                b'"' => break,
                0 => return (Token::Error("unexpected end of string"), self.at),
                b'\\' => {
                    let escaped = match self.byte(self.at + 1) {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'/' => b'/',
                        b'b' => 0x08,
                        b't' => b'\t',
                        b'n' => b'\n',
                        b'f' => 0x0c,
                        b'r' => b'\r',
                        b'u' => match self.unicode_escape(&mut decoded) {
                            Some(()) => continue,
                            None => return (Token::Error("invalid unicode escape code"), self.at),
                        },
                        _ => return (Token::Error("invalid escape code"), self.at),
                    };
                    decoded.push(escaped);
                    self.at += 2;
                }
                byte => {
                    decoded.push(byte);
                    self.at += 1;
                }
            }
        }
        self.at += 1;
        (Token::String(decoded), start)
    }

    /// `\uXXXX` (a surrogate pair as two) at `at` as UTF-8; None when malformed.
    fn unicode_escape(&mut self, decoded: &mut Vec<u8>) -> Option<()> {
        let high = hex4(self.text.get(self.at + 2..self.at + 6)?)?;
        let (code_point, length) = if high & 0xF800 == 0xD800 {
            if high & 0x400 != 0 || self.text.get(self.at + 6..self.at + 8)? != b"\\u" {
                return None;
            }
            let low = hex4(self.text.get(self.at + 8..self.at + 12)?)?;
            if low & 0xFC00 != 0xDC00 {
                return None;
            }
            ((((high & 0x3FF) << 10) | (low & 0x3FF)) + 0x10000, 12)
        } else {
            (high, 6)
        };
        let mut buffer = [0u8; 4];
        decoded.extend_from_slice(char::from_u32(code_point)?.encode_utf8(&mut buffer).as_bytes());
        self.at += length;
        Some(())
    }

    fn value(&mut self, token: Token, start: usize) -> mlua::Result<Value> {
        Ok(match token {
            Token::String(text) => Value::String(self.lua.create_string(text)?),
            Token::Number(number) => Value::Number(number),
            Token::Boolean(truth) => Value::Boolean(truth),
            Token::Null => Value::LightUserData(LightUserData(std::ptr::null_mut())),
            Token::ObjectBegin => Value::Table(self.object()?),
            Token::ArrayBegin => Value::Table(self.array()?),
            other => return Err(self.unexpected("value", &other, start)),
        })
    }

    fn descend(&mut self) -> mlua::Result<()> {
        self.depth += 1;
        if self.depth > JSON_DEPTH_MAX {
            return Err(raise(self.lua, format!("Found too many nested data structures ({}) at character {}", self.depth, self.at)));
        }
        Ok(())
    }

    fn object(&mut self) -> mlua::Result<Table> {
        self.descend()?;
        let table = self.lua.create_table()?;
        let (mut token, mut start) = self.next_token();
        if matches!(token, Token::ObjectEnd) {
            self.depth -= 1;
            return Ok(table);
        }
        loop {
            let Token::String(key) = token else { return Err(self.unexpected("object key string", &token, start)) };
            let (colon, colon_start) = self.next_token();
            if !matches!(colon, Token::Colon) {
                return Err(self.unexpected("colon", &colon, colon_start));
            }
            let (value, value_start) = self.next_token();
            let value = self.value(value, value_start)?;
            table.raw_set(self.lua.create_string(key)?, value)?;
            let (after, after_start) = self.next_token();
            match after {
                Token::ObjectEnd => break,
                Token::Comma => (token, start) = self.next_token(),
                other => return Err(self.unexpected("comma or object end", &other, after_start)),
            }
        }
        self.depth -= 1;
        Ok(table)
    }

    fn array(&mut self) -> mlua::Result<Table> {
        self.descend()?;
        let table = self.lua.create_table()?;
        let (mut token, mut start) = self.next_token();
        if matches!(token, Token::ArrayEnd) {
            self.depth -= 1;
            return Ok(table);
        }
        for index in 1.. {
            let value = self.value(token, start)?;
            table.raw_set(index, value)?;
            let (after, after_start) = self.next_token();
            match after {
                Token::ArrayEnd => break,
                Token::Comma => (token, start) = self.next_token(),
                other => return Err(self.unexpected("comma or array end", &other, after_start)),
            }
        }
        self.depth -= 1;
        Ok(table)
    }
}

fn hex4(digits: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(digits).ok()?;
    (text.len() == 4 && text.bytes().all(|byte| byte.is_ascii_hexdigit())).then(|| u32::from_str_radix(text, 16).expect("four hex digits"))
}

/// How many bytes of `text` C's strtod reads as a number (0: none): a sign, then an infinity,
/// a NaN, a hexadecimal float or a decimal one (an exponent only when digits follow it).
fn c_number_length(text: &[u8]) -> usize {
    let sign = usize::from(matches!(text.first(), Some(b'+' | b'-')));
    let rest = &text[sign..];
    let lowercase = |length: usize| rest.get(..length).map(|prefix| prefix.to_ascii_lowercase());
    if lowercase(8).as_deref() == Some(b"infinity") {
        return sign + 8;
    }
    if lowercase(3).as_deref() == Some(b"inf") || lowercase(3).as_deref() == Some(b"nan") {
        return sign + 3;
    }
    let hex = lowercase(2).as_deref() == Some(b"0x");
    let (digits_start, is_digit): (usize, fn(&u8) -> bool) = if hex { (2, u8::is_ascii_hexdigit) } else { (0, u8::is_ascii_digit) };
    let whole = rest[digits_start..].iter().take_while(|byte| is_digit(byte)).count();
    let mut length = digits_start + whole;
    let mut fraction = 0;
    if rest.get(length) == Some(&b'.') {
        fraction = rest[length + 1..].iter().take_while(|byte| is_digit(byte)).count();
        if whole + fraction > 0 {
            length += 1 + fraction;
        }
    }
    if whole + fraction == 0 {
        // "0x" with no hex digit is the number 0; no digit at all is no number.
        return if hex { sign + 1 } else { 0 };
    }
    let exponent_mark = if hex { b'p' } else { b'e' };
    if rest.get(length).map(u8::to_ascii_lowercase) == Some(exponent_mark) {
        let exponent_sign = usize::from(matches!(rest.get(length + 1), Some(b'+' | b'-')));
        let digits = rest[(length + 1 + exponent_sign).min(rest.len())..].iter().take_while(|byte| byte.is_ascii_digit()).count();
        if digits > 0 {
            length += 1 + exponent_sign + digits;
        }
    }
    sign + length
}

/// A LuaBitOp function of one 32-bit value, and one of two.
type Unary = (&'static str, fn(u32) -> u32);
type Binary = (&'static str, fn(u32, u32) -> u32);

fn bit_table(lua: &Lua) -> mlua::Result<Table> {
    let bit = lua.create_table()?;
    let unary: [Unary; 3] = [("tobit", |bits| bits), ("bnot", |bits| !bits), ("bswap", u32::swap_bytes)];
    for (name, operation) in unary {
        bit.set(name, lua.create_function(move |lua, value: Value| Ok(signed(operation(bit_argument(lua, name, 1, &value)?))))?)?;
    }
    let folds: [Binary; 3] = [("band", |a, b| a & b), ("bor", |a, b| a | b), ("bxor", |a, b| a ^ b)];
    for (name, operation) in folds {
        bit.set(name, lua.create_function(move |lua, values: MultiValue| {
            let mut result = bit_argument(lua, name, 1, values.front().unwrap_or(&Value::Nil))?;
            for (at, value) in values.iter().enumerate().skip(1) {
                result = operation(result, bit_argument(lua, name, at + 1, value)?);
            }
            Ok(signed(result))
        })?)?;
    }
    let shifts: [Binary; 5] = [
        ("lshift", |bits, count| bits << count),
        ("rshift", |bits, count| bits >> count),
        ("arshift", |bits, count| ((bits as i32) >> count) as u32),
        ("rol", u32::rotate_left),
        ("ror", u32::rotate_right),
    ];
    for (name, operation) in shifts {
        bit.set(name, lua.create_function(move |lua, (value, count): (Value, Value)| {
            Ok(signed(operation(bit_argument(lua, name, 1, &value)?, bit_argument(lua, name, 2, &count)? & 31)))
        })?)?;
    }
    bit.set("tohex", lua.create_function(|lua, (value, digits): (Value, Value)| {
        let bits = bit_argument(lua, "tohex", 1, &value)?;
        let digits = if digits.is_nil() { 8 } else { signed(bit_argument(lua, "tohex", 2, &digits)?) as i32 };
        let text = if digits < 0 { format!("{bits:08X}") } else { format!("{bits:08x}") };
        Ok(text[8 - digits.unsigned_abs().min(8) as usize..].to_string())
    })?)?;
    Ok(bit)
}

/// A number as LuaBitOp reads it: rounded to an integer (ties to even) and taken modulo 2^32;
/// numeric strings as Lua converts them.
fn bit_argument(lua: &Lua, function: &str, position: usize, value: &Value) -> mlua::Result<u32> {
    let number = match value {
        Value::Number(_) | Value::Integer(_) | Value::String(_) => lua.coerce_number(value.clone())?,
        _ => None,
    };
    let Some(number) = number else {
        let got = if value.is_nil() { "no value".to_string() } else { value.type_name().to_string() };
        return Err(raise(lua, format!("bad argument #{position} to '{function}' (number expected, got {got})")));
    };
    // LuaBitOp's conversion: adding 2^52 + 2^51 leaves the rounded integer in the low bits.
    Ok((number + 6_755_399_441_055_744.0).to_bits() as u32)
}

fn signed(bits: u32) -> f64 {
    f64::from(bits as i32)
}

fn msgpack_table(lua: &Lua) -> mlua::Result<Table> {
    let cmsgpack = lua.create_table()?;
    cmsgpack.set("pack", lua.create_function(|lua, values: MultiValue| {
        if values.is_empty() {
            return Err(raise(lua, "bad argument #0 to 'pack' (MessagePack pack needs input.)".into()));
        }
        let mut packed = Vec::new();
        for value in &values {
            pack_msgpack(value, 0, &mut packed)?;
        }
        lua.create_string(packed)
    })?)?;
    cmsgpack.set("unpack", lua.create_function(|lua, arguments: MultiValue| unpack_msgpack(lua, "unpack", arguments, None))?)?;
    cmsgpack.set("unpack_one", lua.create_function(|lua, arguments: MultiValue| unpack_msgpack(lua, "unpack_one", arguments, Some(1)))?)?;
    cmsgpack.set("unpack_limit", lua.create_function(|lua, arguments: MultiValue| {
        let limit = arguments.get(1).and_then(number_of).ok_or_else(|| raise(lua, "bad argument #2 to 'unpack_limit' (number expected, got no value)".into()))?;
        let rest: MultiValue = arguments.into_iter().enumerate().filter(|(at, _)| *at != 1).map(|(_, value)| value).collect();
        unpack_msgpack(lua, "unpack_limit", rest, Some(limit as i64))
    })?)?;
    cmsgpack.set("_NAME", "cmsgpack")?;
    cmsgpack.set("_VERSION", "lua-cmsgpack 0.4.0")?;
    Ok(cmsgpack)
}

/// lua-cmsgpack's encoding: integral numbers (within i64) in the smallest integer form, other
/// numbers as a float when a float holds them exactly, else a double; strings as raw bytes;
/// a table whose keys are exactly 1..n as an array, any other as a map (in Lua's order); nil,
/// functions and tables past `MSGPACK_NESTING_MAX` as nil.
fn pack_msgpack(value: &Value, level: usize, packed: &mut Vec<u8>) -> mlua::Result<()> {
    match value {
        Value::Boolean(truth) => packed.push(if *truth { 0xc3 } else { 0xc2 }),
        Value::Integer(number) => pack_number(*number as f64, packed),
        Value::Number(number) => pack_number(*number, packed),
        Value::String(text) => pack_bytes(&text.as_bytes(), packed),
        Value::Table(table) if level < MSGPACK_NESTING_MAX => pack_table(table, level, packed)?,
        _ => packed.push(0xc0),
    }
    Ok(())
}

fn pack_number(number: f64, packed: &mut Vec<u8>) {
    let integral = number.is_finite() && (number as i64) as f64 == number && number < 9_223_372_036_854_775_808.0;
    if integral {
        return pack_integer(number as i64, packed);
    }
    if f64::from(number as f32) == number {
        packed.push(0xca);
        packed.extend_from_slice(&(number as f32).to_be_bytes());
    } else {
        packed.push(0xcb);
        packed.extend_from_slice(&number.to_be_bytes());
    }
}

fn pack_integer(number: i64, packed: &mut Vec<u8>) {
    match number {
        0..=127 => packed.push(number as u8),
        128..=0xff => packed.extend_from_slice(&[0xcc, number as u8]),
        0x100..=0xffff => packed.extend([0xcd].into_iter().chain((number as u16).to_be_bytes())),
        0x1_0000..=0xffff_ffff => packed.extend([0xce].into_iter().chain((number as u32).to_be_bytes())),
        0x1_0000_0000.. => packed.extend([0xcf].into_iter().chain((number as u64).to_be_bytes())),
        -32..=-1 => packed.push(number as u8),
        -128..=-33 => packed.extend_from_slice(&[0xd0, number as u8]),
        -32768..=-129 => packed.extend([0xd1].into_iter().chain((number as i16).to_be_bytes())),
        -2_147_483_648..=-32769 => packed.extend([0xd2].into_iter().chain((number as i32).to_be_bytes())),
        _ => packed.extend([0xd3].into_iter().chain(number.to_be_bytes())),
    }
}

fn pack_bytes(bytes: &[u8], packed: &mut Vec<u8>) {
    match bytes.len() {
        length @ 0..32 => packed.push(0xa0 | length as u8),
        length @ 32..=0xff => packed.extend_from_slice(&[0xd9, length as u8]),
        length @ 0x100..=0xffff => packed.extend([0xda].into_iter().chain((length as u16).to_be_bytes())),
        length => packed.extend([0xdb].into_iter().chain((length as u32).to_be_bytes())),
    }
    packed.extend_from_slice(bytes);
}

/// The container header of `count` entries: `fixed` (0x90 array, 0x80 map) under 16, then the
/// 16-bit and 32-bit forms.
fn pack_header(fixed: u8, wide: u8, count: usize, packed: &mut Vec<u8>) {
    match count {
        0..16 => packed.push(fixed | count as u8),
        16..=0xffff => packed.extend([wide].into_iter().chain((count as u16).to_be_bytes())),
        _ => packed.extend([wide + 1].into_iter().chain((count as u32).to_be_bytes())),
    }
}

fn pack_table(table: &Table, level: usize, packed: &mut Vec<u8>) -> mlua::Result<()> {
    let pairs: Vec<(Value, Value)> = table.clone().pairs::<Value, Value>().collect::<mlua::Result<_>>()?;
    // An array: every key a positive integer (within a C int), the highest equal to the count.
    let indices: Option<Vec<f64>> = pairs.iter().map(|(key, _)| number_of(key).filter(|&number| number > 0.0 && (number as i32) as f64 == number)).collect();
    let is_array = indices.is_some_and(|indices| indices.iter().copied().fold(0.0, f64::max) == indices.len() as f64);
    if is_array {
        pack_header(0x90, 0xdc, pairs.len(), packed);
        for position in 1..=pairs.len() {
            pack_msgpack(&table.raw_get::<Value>(position)?, level + 1, packed)?;
        }
        return Ok(());
    }
    pack_header(0x80, 0xde, pairs.len(), packed);
    for (key, value) in &pairs {
        pack_msgpack(key, level + 1, packed)?;
        pack_msgpack(value, level + 1, packed)?;
    }
    Ok(())
}

/// `cmsgpack.unpack(data)` (every value), `unpack_one(data [, offset])` and
/// `unpack_limit(data, limit [, offset])` (`limit` values, then the offset after them, -1 at
/// the end).
fn unpack_msgpack(lua: &Lua, function: &str, arguments: MultiValue, limit: Option<i64>) -> mlua::Result<MultiValue> {
    let data = string_argument(lua, function, arguments.front())?.as_bytes().to_vec();
    let offset = arguments.get(1).and_then(number_of).unwrap_or(0.0) as i64;
    let limit_value = limit.unwrap_or(0);
    if offset < 0 || limit_value < 0 {
        return Err(raise(lua, format!("Invalid request to unpack with offset of {offset} and limit of {}.", data.len())));
    }
    if offset as usize > data.len() {
        return Err(raise(lua, format!("Start offset {offset} greater than input length {}.", data.len())));
    }
    let decode_all = limit.is_none() || (limit_value == 0 && offset == 0);
    let mut reader = MsgpackReader { lua, data: &data, at: offset as usize };
    let mut values = MultiValue::new();
    while reader.at < data.len() && (decode_all || (values.len() as i64) < limit_value) {
        if values.len() >= MSGPACK_VALUES_MAX {
            return Err(raise(lua, "too many return values at once; use unpack_one or unpack_limit instead.".into()));
        }
        let value = reader.value(0).map_err(|failure| failure.raised(lua))?;
        values.push_back(value);
    }
    if !decode_all {
        let next = if reader.at == data.len() { -1 } else { reader.at as i64 };
        values.push_front(Value::Number(next as f64));
    }
    Ok(values)
}

/// A Lua number's value (mlua gives integral ones as integers).
fn number_of(value: &Value) -> Option<f64> {
    match value {
        Value::Integer(number) => Some(*number as f64),
        Value::Number(number) => Some(*number),
        _ => None,
    }
}

/// Why MessagePack input could not be read: the input's fault, or Lua's (memory).
enum UnpackError {
    Missing,
    BadFormat,
    Lua(mlua::Error),
}

impl From<mlua::Error> for UnpackError {
    fn from(error: mlua::Error) -> Self {
        UnpackError::Lua(error)
    }
}

impl UnpackError {
    /// The error a script sees, with lua-cmsgpack's texts.
    fn raised(self, lua: &Lua) -> mlua::Error {
        match self {
            UnpackError::Missing => raise(lua, "Missing bytes in input.".into()),
            UnpackError::BadFormat => raise(lua, "Bad data format in input.".into()),
            UnpackError::Lua(error) => error,
        }
    }
}

struct MsgpackReader<'a> {
    lua: &'a Lua,
    data: &'a [u8],
    at: usize,
}

impl MsgpackReader<'_> {
    fn take(&mut self, count: usize) -> Result<&[u8], UnpackError> {
        let end = self.at.checked_add(count).ok_or(UnpackError::Missing)?;
        let taken = self.data.get(self.at..end).ok_or(UnpackError::Missing)?;
        self.at = end;
        Ok(taken)
    }

    fn length(&mut self, bytes: usize) -> Result<usize, UnpackError> {
        Ok(self.take(bytes)?.iter().fold(0usize, |length, &byte| length << 8 | usize::from(byte)))
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], UnpackError> {
        Ok(self.take(N)?.try_into().expect("N bytes taken"))
    }

    fn value(&mut self, depth: usize) -> Result<Value, UnpackError> {
        let marker = self.take(1)?[0];
        let number = match marker {
            0x00..=0x7f => f64::from(marker),
            0xe0..=0xff => f64::from(marker as i8),
            0xcc => f64::from(self.take(1)?[0]),
            0xd0 => f64::from(self.take(1)?[0] as i8),
            0xcd => f64::from(u16::from_be_bytes(self.array()?)),
            0xd1 => f64::from(i16::from_be_bytes(self.array()?)),
            0xce => f64::from(u32::from_be_bytes(self.array()?)),
            0xd2 => f64::from(i32::from_be_bytes(self.array()?)),
            0xcf => u64::from_be_bytes(self.array()?) as f64,
            0xd3 => i64::from_be_bytes(self.array()?) as f64,
            0xca => f64::from(f32::from_be_bytes(self.array()?)),
            0xcb => f64::from_be_bytes(self.array()?),
            0xc0 => return Ok(Value::Nil),
            0xc2 | 0xc3 => return Ok(Value::Boolean(marker == 0xc3)),
            0xa0..=0xbf => return self.string(usize::from(marker & 0x1f)),
            0xd9..=0xdb => {
                let length = self.length(1 << (marker - 0xd9))?;
                return self.string(length);
            }
            0x90..=0x9f => return self.container(usize::from(marker & 0x0f), false, depth),
            0x80..=0x8f => return self.container(usize::from(marker & 0x0f), true, depth),
            0xdc..=0xdf => {
                let count = self.length(if marker & 1 == 0 { 2 } else { 4 })?;
                return self.container(count, marker >= 0xde, depth);
            }
            _ => return Err(UnpackError::BadFormat),
        };
        Ok(Value::Number(number))
    }

    fn string(&mut self, length: usize) -> Result<Value, UnpackError> {
        let lua = self.lua;
        let bytes = self.take(length)?;
        Ok(Value::String(lua.create_string(bytes)?))
    }

    /// An array (`map` false: entries at 1..count) or a map of `count` entries.
    fn container(&mut self, count: usize, map: bool, depth: usize) -> Result<Value, UnpackError> {
        if depth >= MSGPACK_DECODE_DEPTH_MAX {
            return Err(UnpackError::BadFormat);
        }
        let table = self.lua.create_table()?;
        for position in 1..=count {
            let key = if map { self.value(depth + 1)? } else { Value::Number(position as f64) };
            let value = self.value(depth + 1)?;
            // A nil key cannot be set (Lua's settable would raise): lua-cmsgpack raises too.
            table.set(key, value)?;
        }
        Ok(Value::Table(table))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strtod_reads_the_longest_number_it_can() {
        for (text, length) in [
            ("12", 2),
            ("-1.5e3x", 6),
            ("1e", 1),
            ("1e+", 1),
            ("0x10", 4),
            ("0x", 1),
            ("0x.8p1", 6),
            ("-", 0),
            (".5", 2),
            (".", 0),
            ("1.", 2),
            ("Infinity", 8),
            ("-inf", 4),
            ("nan", 3),
            ("+7", 2),
        ] {
            assert_eq!(c_number_length(text.as_bytes()), length, "{text}");
        }
    }

    fn lua_with_libraries() -> Lua {
        let lua = Lua::new();
        for (name, library) in libraries(&lua).unwrap() {
            lua.globals().set(name, library).unwrap();
        }
        lua
    }

    #[test]
    fn decoding_arbitrary_input_never_panics_and_what_decodes_encodes_back() {
        use rand::{Rng, SeedableRng};
        let lua = lua_with_libraries();
        let round_trip: mlua::Function = lua
            .load("return function(text) local ok, value = pcall(cjson.decode, text) if ok then return pcall(cjson.encode, value) end return false end")
            .eval()
            .unwrap();
        let alphabet = b"{}[]:,\"\\/ -+.0123456789eExXabfnrtuINl\t\n\x00\xc3\xa9";
        let mut random = rand::rngs::StdRng::seed_from_u64(11);
        for _ in 0..20_000 {
            let length = random.gen_range(0..24);
            let text: Vec<u8> = (0..length).map(|_| alphabet[random.gen_range(0..alphabet.len())]).collect();
            round_trip.call::<MultiValue>(lua.create_string(&text).unwrap()).unwrap();
        }
        let unpack: mlua::Function = lua.load("return function(data) return pcall(cmsgpack.unpack, data) end").eval().unwrap();
        for _ in 0..20_000 {
            let length = random.gen_range(0..16);
            let data: Vec<u8> = (0..length).map(|_| random.gen()).collect();
            unpack.call::<MultiValue>(lua.create_string(&data).unwrap()).unwrap();
        }
        let nested = [vec![0x91u8; 100_000], vec![0x01]].concat();
        assert!(unpack.call::<(bool, Value)>(lua.create_string(&nested).unwrap()).is_ok_and(|(unpacked, _)| !unpacked), "nesting past the limit is refused");
        let encoded: String = lua.load(r#"return cjson.encode(cjson.decode('{"a":[1,2.5,"x\\u00e9",null,true],"b":{}}'))"#).eval().unwrap();
        assert!(encoded == r#"{"a":[1,2.5,"xé",null,true],"b":{}}"# || encoded == r#"{"b":{},"a":[1,2.5,"xé",null,true]}"#, "{encoded}");
    }

    #[test]
    fn numbers_are_written_with_fourteen_significant_digits() {
        for (number, text) in [(0.1, "0.1"), (1e100, "1e+100"), (1.0 / 3.0, "0.33333333333333"), (1e14, "1e+14"), (123456789012345.0, "1.2345678901234e+14"), (3.0, "3"), (-1.5e-7, "-1.5e-07")] {
            assert_eq!(format_g(number, JSON_NUMBER_DIGITS), text);
        }
    }
}
