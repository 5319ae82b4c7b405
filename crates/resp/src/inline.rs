//! Splitting an inline command line into arguments, with the quoting rules of Redis's
//! `sdssplitargs` (what redis-cli and telnet users rely on).

/// Splits `line` into words. Double quotes allow `\n \r \t \b \a \\ \" \xHH` escapes; single
/// quotes allow `\'`. A closing quote must be followed by a space or the end of the line.
/// Returns None for unbalanced quotes (Redis: "unbalanced quotes in request").
pub fn split_inline_arguments(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut arguments = Vec::new();
    let mut position = 0;
    loop {
        while position < line.len() && is_space(line[position]) {
            position += 1;
        }
        if position >= line.len() {
            return Some(arguments);
        }
        let (word, next) = read_word(line, position)?;
        arguments.push(word);
        position = next;
    }
}

fn is_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c')
}

/// Reads one word starting at `start`; returns it and the position after it.
fn read_word(line: &[u8], start: usize) -> Option<(Vec<u8>, usize)> {
    let mut word = Vec::new();
    let mut position = start;
    while position < line.len() && !is_space(line[position]) {
        match line[position] {
            b'"' => position = read_double_quoted(line, position + 1, &mut word)?,
            b'\'' => position = read_single_quoted(line, position + 1, &mut word)?,
            byte => {
                word.push(byte);
                position += 1;
            }
        }
    }
    Some((word, position))
}

/// Reads up to and including the closing double quote; returns the position after it.
fn read_double_quoted(line: &[u8], mut position: usize, word: &mut Vec<u8>) -> Option<usize> {
    loop {
        match *line.get(position)? {
            b'\\' if position + 3 < line.len()
                && line[position + 1] == b'x'
                && line[position + 2].is_ascii_hexdigit()
                && line[position + 3].is_ascii_hexdigit() =>
            {
                word.push(hex_value(line[position + 2]) * 16 + hex_value(line[position + 3]));
                position += 4;
            }
            b'\\' if position + 1 < line.len() => {
                word.push(match line[position + 1] {
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'b' => 0x08,
                    b'a' => 0x07,
                    other => other,
                });
                position += 2;
            }
            b'"' => return closing_quote_end(line, position),
            byte => {
                word.push(byte);
                position += 1;
            }
        }
    }
}

fn read_single_quoted(line: &[u8], mut position: usize, word: &mut Vec<u8>) -> Option<usize> {
    loop {
        match *line.get(position)? {
            b'\\' if line.get(position + 1) == Some(&b'\'') => {
                word.push(b'\'');
                position += 2;
            }
            b'\'' => return closing_quote_end(line, position),
            byte => {
                word.push(byte);
                position += 1;
            }
        }
    }
}

/// A closing quote must end the word: followed by a space or the end of the line.
fn closing_quote_end(line: &[u8], quote: usize) -> Option<usize> {
    match line.get(quote + 1) {
        None => Some(quote + 1),
        Some(&byte) if is_space(byte) => Some(quote + 1),
        Some(_) => None,
    }
}

fn hex_value(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        _ => digit - b'A' + 10,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(line: &str) -> Option<Vec<String>> {
        split_inline_arguments(line.as_bytes())
            .map(|words| words.into_iter().map(|word| String::from_utf8_lossy(&word).into_owned()).collect())
    }

    #[test]
    fn splits_plain_and_quoted_words() {
        assert_eq!(split("  set  key   value "), Some(vec!["set".into(), "key".into(), "value".into()]));
        assert_eq!(split(r#"set "a b" 'c d'"#), Some(vec!["set".into(), "a b".into(), "c d".into()]));
        assert_eq!(split(r#"echo "\x41\n\"" 'it\'s'"#), Some(vec!["echo".into(), "A\n\"".into(), "it's".into()]));
        assert_eq!(split(""), Some(vec![]));
    }

    #[test]
    fn rejects_unbalanced_quotes() {
        assert_eq!(split(r#"set "abc"#), None);
        assert_eq!(split("set 'abc"), None);
        assert_eq!(split(r#"set "abc"def"#), None, "a closing quote must be followed by a space");
    }
}
