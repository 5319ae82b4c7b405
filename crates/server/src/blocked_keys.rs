//! Clients blocked in BLPOP, BRPOP, BLMOVE, BRPOPLPUSH and BLMPOP, by the keys they wait for.
//!
//! A blocking pop that finds every list empty registers its client here for its keys while it
//! still holds the keys' partition locks, then its connection waits (`Connection::wait_for_keys`)
//! until a write to one of them wakes it, and runs the command again. Every write reaches
//! `wake` through `Shared::keys_written`, under the same partition locks, so a write either ran
//! before the pop looked at the lists or finds the registration: no wake is lost. A wake only
//! makes the command look again (it may find the list emptied by another client and block
//! anew), as in Redis, where the first client blocked on a key is served first; here every
//! client blocked on the key looks, and the first to take the key's lock is served.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::shared::ClientHandle;

/// The clients waiting for each key of one database.
type WaitersByKey = HashMap<Bytes, Vec<Arc<ClientHandle>>>;

#[derive(Default)]
pub struct BlockedKeys {
    /// Registrations (client × key): while 0, `wake` is one atomic load.
    registered: AtomicUsize,
    /// Per database, per key, the clients waiting for it.
    by_key: Mutex<HashMap<usize, WaitersByKey>>,
}

impl BlockedKeys {
    pub fn register(&self, database: usize, keys: &[Bytes], client: &Arc<ClientHandle>) {
        let mut by_key = self.by_key.lock();
        let keys_of_database = by_key.entry(database).or_default();
        for key in keys {
            keys_of_database.entry(key.clone()).or_default().push(Arc::clone(client));
            self.registered.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn unregister(&self, database: usize, keys: &[Bytes], client_id: u64) {
        let mut by_key = self.by_key.lock();
        let Some(keys_of_database) = by_key.get_mut(&database) else { return };
        for key in keys {
            let Some(waiting) = keys_of_database.get_mut(key) else { continue };
            let before = waiting.len();
            waiting.retain(|client| client.id != client_id);
            self.registered.fetch_sub(before - waiting.len(), Ordering::Relaxed);
            if waiting.is_empty() {
                keys_of_database.remove(key);
            }
        }
    }

    /// Wakes the clients waiting for any of `keys` of `database` (they look again).
    pub fn wake<'k>(&self, database: usize, keys: impl Iterator<Item = &'k [u8]>) {
        if self.registered.load(Ordering::Relaxed) == 0 {
            return;
        }
        let by_key = self.by_key.lock();
        let Some(keys_of_database) = by_key.get(&database) else { return };
        for key in keys {
            for client in keys_of_database.get(key).into_iter().flatten() {
                client.unblocked.notify_one();
            }
        }
    }

    /// Wakes every blocked client (SWAPDB and FLUSHALL change whole databases).
    pub fn wake_all(&self) {
        if self.registered.load(Ordering::Relaxed) == 0 {
            return;
        }
        for client in self.by_key.lock().values().flat_map(HashMap::values).flatten() {
            client.unblocked.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn notified_now(client: &ClientHandle) -> bool {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        runtime.block_on(async { tokio::time::timeout(Duration::from_millis(20), client.unblocked.notified()).await.is_ok() })
    }

    fn keys(names: &[&'static str]) -> Vec<Bytes> {
        names.iter().map(|name| Bytes::from_static(name.as_bytes())).collect()
    }

    #[test]
    fn a_write_wakes_the_clients_of_its_keys_and_database_only_while_they_are_registered() {
        let blocked = BlockedKeys::default();
        let (first, second) = (Arc::new(ClientHandle::for_tests(1)), Arc::new(ClientHandle::for_tests(2)));
        blocked.register(0, &keys(&["a", "b"]), &first);
        blocked.register(0, &keys(&["b"]), &second);
        blocked.wake(1, [&b"a"[..]].into_iter());
        blocked.wake(0, [&b"c"[..]].into_iter());
        assert!(!notified_now(&first) && !notified_now(&second), "another database, another key");
        blocked.wake(0, [&b"b"[..]].into_iter());
        assert!(notified_now(&first) && notified_now(&second));
        // A wake before the wait starts is kept (no lost wake-up between registering and waiting).
        blocked.wake(0, [&b"a"[..]].into_iter());
        assert!(notified_now(&first) && !notified_now(&second));
        blocked.unregister(0, &keys(&["a", "b"]), 1);
        blocked.wake_all();
        assert!(!notified_now(&first) && notified_now(&second));
        blocked.unregister(0, &keys(&["b"]), 2);
        assert_eq!(blocked.registered.load(Ordering::Relaxed), 0);
        assert!(blocked.by_key.lock().get(&0).is_none_or(HashMap::is_empty));
    }
}
