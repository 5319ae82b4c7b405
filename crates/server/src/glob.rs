//! Redis's glob matching (KEYS, SCAN MATCH, HSCAN MATCH): `*`, `?`, `[abc]`, `[^a-z]`, `\x`.

/// Recursion depth at which a pattern is declared not to match (Redis uses the same guard
/// against patterns built to exhaust the stack).
const NESTING_MAX: usize = 1000;

pub fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    // KEYS and SCAN treat a lone "*" as "everything", the empty key included; the matcher
    // itself (as Redis's stringmatchlen) would not match "" against "*".
    if pattern == b"*" {
        return true;
    }
    let mut give_up = false;
    match_from(pattern, text, &mut give_up, 0)
}

/// `give_up` is set once a `*` tried every suffix of the text: a later `*` cannot do better, which
/// keeps patterns like `*a*a*a*b` linear-ish instead of exponential (Redis's skipLongerMatches).
fn match_from(pattern: &[u8], text: &[u8], give_up: &mut bool, nesting: usize) -> bool {
    if nesting > NESTING_MAX {
        return false;
    }
    let (mut p, mut t) = (0, 0);
    while p < pattern.len() && t < text.len() {
        match pattern[p] {
            b'*' => {
                while p + 1 < pattern.len() && pattern[p + 1] == b'*' {
                    p += 1;
                }
                if p + 1 == pattern.len() {
                    return true;
                }
                while t < text.len() {
                    if match_from(&pattern[p + 1..], &text[t..], give_up, nesting + 1) {
                        return true;
                    }
                    if *give_up {
                        return false;
                    }
                    t += 1;
                }
                *give_up = true;
                return false;
            }
            b'?' => t += 1,
            b'[' => {
                let (matched, class_end) = match_class(pattern, p + 1, text[t]);
                if !matched {
                    return false;
                }
                p = class_end;
                t += 1;
            }
            mut literal => {
                if literal == b'\\' && p + 1 < pattern.len() {
                    p += 1;
                    literal = pattern[p];
                }
                if literal != text[t] {
                    return false;
                }
                t += 1;
            }
        }
        p += 1;
        if t == text.len() {
            while p < pattern.len() && pattern[p] == b'*' {
                p += 1;
            }
        }
    }
    p == pattern.len() && t == text.len()
}

/// Matches `byte` against the class starting after '['; returns whether it matched and the
/// position of the closing ']' (or of the last pattern byte when the class is unterminated).
fn match_class(pattern: &[u8], mut p: usize, byte: u8) -> (bool, usize) {
    let negated = pattern.get(p) == Some(&b'^');
    if negated {
        p += 1;
    }
    let mut matched = false;
    loop {
        match pattern.get(p) {
            None => {
                p -= 1;
                break;
            }
            Some(b']') => break,
            Some(b'\\') if p + 1 < pattern.len() => {
                p += 1;
                matched |= pattern[p] == byte;
            }
            Some(&start) if p + 2 < pattern.len() && pattern[p + 1] == b'-' => {
                let end = pattern[p + 2];
                let (low, high) = if start <= end { (start, end) } else { (end, start) };
                matched |= (low..=high).contains(&byte);
                p += 2;
            }
            Some(&literal) => matched |= literal == byte,
        }
        p += 1;
    }
    (matched != negated, p)
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn matches_like_redis() {
        let cases: &[(&str, &str, bool)] = &[
            ("*", "", true),
            ("*", "anything", true),
            ("h?llo", "hello", true),
            ("h?llo", "hllo", false),
            ("h*llo", "heeeello", true),
            ("h[ae]llo", "hallo", true),
            ("h[ae]llo", "hillo", false),
            ("h[^e]llo", "hallo", true),
            ("h[^e]llo", "hello", false),
            ("h[a-b]llo", "hbllo", true),
            ("h[b-a]llo", "hallo", true),
            ("h\\*llo", "h*llo", true),
            ("h\\*llo", "hello", false),
            ("user:*:name", "user:42:name", true),
            ("user:*:name", "user:42:age", false),
            ("a*", "", false),
            ("", "", true),
            ("*a*a*a*a*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false),
        ];
        for (pattern, text, expected) in cases {
            assert_eq!(glob_match(pattern.as_bytes(), text.as_bytes()), *expected, "{pattern} vs {text}");
        }
    }
}
