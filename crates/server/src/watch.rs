//! WATCH: which keys each session watches, and how writes tell them (Redis's
//! `touchWatchedKey`).
//!
//! EXEC fails when a watched key was written since WATCH. Two checks together decide it:
//! - the key's version (its record's LSN) as WATCH read it, compared under the transaction's
//!   locks: any write that leaves the key present changes it, and a key that appeared or
//!   vanished changes presence;
//! - a per-session flag that writers set (`WatchRegistry::touch`) for every key they write while
//!   some session watches keys: this catches what versions cannot, a key absent at WATCH that was
//!   created and deleted again before EXEC (absent both times, no version either time).
//!
//! Ordering: a session counts as watching and registers its key before it reads the version, and
//! a writer touches from inside its transaction, holding the key's partition lock, which the
//! version read and EXEC's comparison take too. So a write that found no watcher ran wholly before
//! the version read, and a write that ran after it has set the flag before EXEC can look.
//! A write that touches a key and then fails to commit leaves the flag set: EXEC then fails
//! although nothing changed, which WATCH's callers retry like any other abort.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

/// Keys one session may watch at once (each holds a registry entry until UNWATCH, EXEC, DISCARD
/// or disconnection); a WATCH that would pass it is refused whole.
pub const WATCHED_KEYS_PER_SESSION_MAX: usize = 10_000;

/// Per database and key, the flags of the sessions watching it.
type WatchersByKey = HashMap<usize, HashMap<Bytes, Vec<Arc<AtomicBool>>>>;

/// Every session's watched keys, shared by all connections.
#[derive(Default)]
pub struct WatchRegistry {
    /// Sessions that watch keys: writers look at nothing else while it is zero.
    sessions: AtomicUsize,
    watchers: Mutex<WatchersByKey>,
}

impl WatchRegistry {
    /// Whether some session watches keys: then every write must change its key's version (a
    /// hash write rewrites its root) and touch the keys it writes.
    pub fn any(&self) -> bool {
        self.sessions.load(Ordering::SeqCst) > 0
    }

    /// Tells the sessions watching any of `keys` of `database` that it was written. Called by a
    /// write transaction's body, under its keys' partition locks.
    pub fn touch<'k>(&self, database: usize, keys: impl Iterator<Item = &'k [u8]>) {
        if !self.any() {
            return;
        }
        let watchers = self.watchers.lock();
        let Some(by_key) = watchers.get(&database) else { return };
        for key in keys {
            for flag in by_key.get(key).into_iter().flatten() {
                flag.store(true, Ordering::SeqCst);
            }
        }
    }

    /// The keys some session watches in `database`.
    pub fn keys_of(&self, database: usize) -> Vec<Bytes> {
        self.watchers.lock().get(&database).map_or_else(Vec::new, |by_key| by_key.keys().cloned().collect())
    }

    fn register(&self, database: usize, key: &Bytes, flag: &Arc<AtomicBool>) {
        self.watchers.lock().entry(database).or_default().entry(key.clone()).or_default().push(Arc::clone(flag));
    }

    fn unregister(&self, database: usize, key: &[u8], flag: &Arc<AtomicBool>) {
        let mut watchers = self.watchers.lock();
        let Some(by_key) = watchers.get_mut(&database) else { return };
        let Some(flags) = by_key.get_mut(key) else { return };
        flags.retain(|registered| !Arc::ptr_eq(registered, flag));
        if flags.is_empty() {
            by_key.remove(key);
        }
    }

    #[cfg(test)]
    fn registered_keys(&self) -> usize {
        self.watchers.lock().values().map(HashMap::len).sum()
    }
}

pub struct WatchedKey {
    pub database: usize,
    pub key: Bytes,
    /// The key's version when WATCH ran; None when it was absent.
    pub version: Option<u64>,
}

/// A session's watched keys. The session counts in the registry's sessions from before WATCH
/// reads its first version until it lets its keys go (UNWATCH, EXEC, DISCARD, disconnection).
/// EXEC takes the keys with `take`, which keeps them counted and registered until it has
/// compared them.
pub struct WatchedKeys {
    keys: Vec<WatchedKey>,
    counted: bool,
    /// Set by a write to any of `keys` since it was registered.
    touched: Arc<AtomicBool>,
    registry: Arc<WatchRegistry>,
}

impl WatchedKeys {
    pub fn new(registry: Arc<WatchRegistry>) -> WatchedKeys {
        WatchedKeys { keys: Vec::new(), counted: false, touched: Arc::new(AtomicBool::new(false)), registry }
    }

    pub fn keys(&self) -> &[WatchedKey] {
        &self.keys
    }

    /// Whether a write touched one of the keys since it was watched.
    pub fn touched(&self) -> bool {
        self.touched.load(Ordering::SeqCst)
    }

    /// Watches `key` of `database` (once: a key already watched keeps its first version), with
    /// the version `read_version` returns, which runs after the session is counted and the key
    /// registered.
    pub fn watch<E>(&mut self, database: usize, key: &Bytes, read_version: impl FnOnce() -> Result<Option<u64>, E>) -> Result<(), E> {
        if self.keys.iter().any(|watched| watched.database == database && watched.key == key) {
            return Ok(());
        }
        if !self.counted {
            self.counted = true;
            self.registry.sessions.fetch_add(1, Ordering::SeqCst);
        }
        self.registry.register(database, key, &self.touched);
        match read_version() {
            Ok(version) => {
                self.keys.push(WatchedKey { database, key: key.clone(), version });
                Ok(())
            }
            Err(error) => {
                self.registry.unregister(database, key, &self.touched);
                Err(error)
            }
        }
    }

    /// Hands the keys over, still counted and registered until the returned set is dropped;
    /// this set starts again with none.
    pub fn take(&mut self) -> WatchedKeys {
        let keys = std::mem::take(&mut self.keys);
        let counted = std::mem::replace(&mut self.counted, false);
        let touched = std::mem::replace(&mut self.touched, Arc::new(AtomicBool::new(false)));
        WatchedKeys { keys, counted, touched, registry: Arc::clone(&self.registry) }
    }

    pub fn clear(&mut self) {
        for watched in self.keys.drain(..) {
            self.registry.unregister(watched.database, &watched.key, &self.touched);
        }
        self.touched.store(false, Ordering::SeqCst);
        if std::mem::replace(&mut self.counted, false) {
            self.registry.sessions.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for WatchedKeys {
    fn drop(&mut self) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(watched: &mut WatchedKeys, key: &'static [u8]) {
        watched.watch(0, &Bytes::from_static(key), || Ok::<_, ()>(None)).unwrap();
    }

    #[test]
    fn a_session_counts_and_registers_until_its_keys_are_let_go() {
        let registry = Arc::new(WatchRegistry::default());
        let counts = || (registry.sessions.load(Ordering::SeqCst), registry.registered_keys());
        let mut watched = WatchedKeys::new(Arc::clone(&registry));
        watch(&mut watched, b"a");
        watch(&mut watched, b"b");
        watch(&mut watched, b"a");
        assert_eq!(counts(), (1, 2), "one session, counted once; a key watched twice registers once");
        let taken = watched.take();
        assert_eq!((counts(), taken.keys().len(), watched.keys().len()), ((1, 2), 2, 0), "EXEC's keys stay counted");
        drop(taken);
        assert_eq!(counts(), (0, 0));
        watch(&mut watched, b"a");
        watched.clear();
        watched.clear();
        assert_eq!(counts(), (0, 0), "UNWATCH lets go once");
        watch(&mut watched, b"a");
        drop(watched);
        assert_eq!(counts(), (0, 0), "a session that ends lets go");
    }

    #[test]
    fn a_write_touches_the_sessions_watching_its_key_in_its_database_only() {
        let registry = Arc::new(WatchRegistry::default());
        let (mut first, mut second) = (WatchedKeys::new(Arc::clone(&registry)), WatchedKeys::new(Arc::clone(&registry)));
        watch(&mut first, b"k");
        watch(&mut second, b"k");
        watch(&mut second, b"other");
        registry.touch(1, [&b"k"[..]].into_iter());
        registry.touch(0, [&b"unwatched"[..]].into_iter());
        assert!(!first.touched() && !second.touched(), "another database, another key");
        registry.touch(0, [&b"other"[..]].into_iter());
        assert!(!first.touched() && second.touched());
        let taken = second.take();
        assert!(taken.touched() && !second.touched(), "the flag goes with the keys EXEC takes");
        registry.touch(0, [&b"k"[..]].into_iter());
        assert!(first.touched());
        first.clear();
        assert!(!first.touched(), "UNWATCH forgets earlier writes");
    }

    #[test]
    fn a_failed_version_read_leaves_nothing_registered() {
        let registry = Arc::new(WatchRegistry::default());
        let mut watched = WatchedKeys::new(Arc::clone(&registry));
        assert_eq!(watched.watch(0, &Bytes::from_static(b"k"), || Err("read failed")), Err("read failed"));
        assert_eq!(registry.registered_keys(), 0);
        assert!(watched.keys().is_empty());
    }
}
