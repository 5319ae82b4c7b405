//! The scripts EVAL ran and SCRIPT LOAD loaded, by the SHA-1 of their text, for EVALSHA: at
//! most `SCRIPT_CACHE_BYTES_MAX` bytes of script text (Redis keeps every script until SCRIPT
//! FLUSH; here a full cache refuses SCRIPT LOAD and stops keeping what EVAL runs).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;

/// Bytes of script text the cache holds at most.
pub const SCRIPT_CACHE_BYTES_MAX: usize = 64 * 1024 * 1024;

#[derive(Default)]
pub struct ScriptCache {
    scripts: Mutex<Scripts>,
    /// SCRIPT FLUSHes so far: the workers' Lua states built before the last one are built anew.
    generation: AtomicU64,
}

#[derive(Default)]
struct Scripts {
    by_sha: HashMap<String, Bytes>,
    bytes: usize,
}

/// The cache holds `SCRIPT_CACHE_BYTES_MAX` bytes already.
#[derive(Debug)]
pub struct CacheFull;

/// The lowercase hexadecimal SHA-1 of a script (its name for EVALSHA).
pub fn sha1_hex(text: &[u8]) -> String {
    sha1_smol::Sha1::from(text).digest().to_string()
}

impl ScriptCache {
    /// Keeps `text` under its SHA-1 (returned); a script kept already costs nothing more.
    pub fn insert(&self, text: Bytes) -> Result<String, CacheFull> {
        let sha = sha1_hex(&text);
        let mut scripts = self.scripts.lock();
        if scripts.by_sha.contains_key(&sha) {
            return Ok(sha);
        }
        if scripts.bytes + text.len() > SCRIPT_CACHE_BYTES_MAX {
            return Err(CacheFull);
        }
        scripts.bytes += text.len();
        scripts.by_sha.insert(sha.clone(), text);
        Ok(sha)
    }

    /// The script of a SHA-1 (any case).
    pub fn get(&self, sha: &[u8]) -> Option<Bytes> {
        let sha = std::str::from_utf8(sha).ok()?.to_ascii_lowercase();
        self.scripts.lock().by_sha.get(&sha).cloned()
    }

    pub fn flush(&self) {
        *self.scripts.lock() = Scripts::default();
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// Changes at every flush.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_are_kept_by_their_sha1_within_the_budget() {
        assert_eq!(sha1_hex(b""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        let cache = ScriptCache::default();
        let sha = cache.insert(Bytes::from_static(b"return 1")).unwrap();
        assert_eq!(sha, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
        assert_eq!(cache.get(sha.to_ascii_uppercase().as_bytes()).as_deref(), Some(&b"return 1"[..]));
        assert!(cache.insert(Bytes::from(vec![b' '; SCRIPT_CACHE_BYTES_MAX])).is_err());
        let generation = cache.generation();
        cache.flush();
        assert!(cache.get(sha.as_bytes()).is_none());
        assert_ne!(cache.generation(), generation);
    }
}
