//! Clients blocked in BLPOP, BRPOP, BLMOVE, BRPOPLPUSH and BLMPOP, by the keys they wait for.
//!
//! A blocking pop that finds every list empty registers its client here for its keys while it
//! still holds the keys' partition locks, then its connection waits (`Connection::wait_for_keys`)
//! until a write to one of them wakes it, and runs the command again. Every write reaches
//! `wake` through `Shared::keys_written`, under the same partition locks, so a write either ran
//! before the pop looked at the lists or finds the registration: no wake is lost.
//!
//! The clients waiting for a key are served first come, first served, as in Redis: a write wakes
//! only the first client in the key's queue, which runs its command again still registered (it
//! may find the list emptied by another client and block anew, keeping its place). A client that
//! leaves a queue, served or not (the pop done, a timeout, CLIENT UNBLOCK, a closed connection),
//! wakes the client now first, which looks in its turn: elements pushed together go to the
//! waiting clients one after the other in the order they blocked, and a wake is never lost with
//! a client that left. Unlike Redis, a client served through another of its keys may take an
//! element before the first client in that key's queue has looked.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::shared::ClientHandle;

/// The clients waiting for each key of one database.
/// The clients waiting for each key of one database, in the order they blocked.
type WaitersByKey = HashMap<Bytes, Vec<Arc<ClientHandle>>>;

#[derive(Default)]
pub struct BlockedKeys {
    /// Registrations (client × key): while 0, `wake` is one atomic load.
    registered: AtomicUsize,
    /// Per database, per key, the clients waiting for it.
    by_key: Mutex<HashMap<usize, WaitersByKey>>,
}

impl BlockedKeys {
    /// Puts the client at the end of each key's queue, or leaves it where it is when it is
    /// already there (a pop run again after a wake that blocks again).
    pub fn register(&self, database: usize, keys: &[Bytes], client: &Arc<ClientHandle>) {
        let mut by_key = self.by_key.lock();
        let keys_of_database = by_key.entry(database).or_default();
        for key in keys {
            let waiting = keys_of_database.entry(key.clone()).or_default();
            if !waiting.iter().any(|waiter| waiter.id == client.id) {
                waiting.push(Arc::clone(client));
                self.registered.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Takes the client off its keys' queues; where it was first, the client now first is
    /// woken to look in its turn.
    pub fn unregister(&self, database: usize, keys: &[Bytes], client_id: u64) {
        let mut by_key = self.by_key.lock();
        let Some(keys_of_database) = by_key.get_mut(&database) else { return };
        for key in keys {
            let Some(waiting) = keys_of_database.get_mut(key) else { continue };
            let Some(place) = waiting.iter().position(|client| client.id == client_id) else { continue };
            waiting.remove(place);
            self.registered.fetch_sub(1, Ordering::Relaxed);
            match waiting.first() {
                Some(next) if place == 0 => next.unblocked.notify_one(),
                Some(_) => {}
                None => drop(keys_of_database.remove(key)),
            }
        }
    }

    /// Wakes the first client waiting for each of `keys` of `database` (it looks again).
    pub fn wake<'k>(&self, database: usize, keys: impl Iterator<Item = &'k [u8]>) {
        if self.registered.load(Ordering::Relaxed) == 0 {
            return;
        }
        let by_key = self.by_key.lock();
        let Some(keys_of_database) = by_key.get(&database) else { return };
        for key in keys {
            if let Some(first) = keys_of_database.get(key).and_then(|waiting| waiting.first()) {
                first.unblocked.notify_one();
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
    fn a_write_wakes_the_first_client_of_its_keys_and_the_first_leaving_wakes_the_next() {
        let blocked = BlockedKeys::default();
        let clients: Vec<Arc<ClientHandle>> = (1..=3).map(|id| Arc::new(ClientHandle::for_tests(id))).collect();
        let notified = |expected: [bool; 3]| assert_eq!(clients.iter().map(|client| notified_now(client)).collect::<Vec<_>>(), expected);
        blocked.register(0, &keys(&["a", "b"]), &clients[0]);
        blocked.register(0, &keys(&["b"]), &clients[1]);
        blocked.register(0, &keys(&["b"]), &clients[2]);
        blocked.wake(1, [&b"a"[..]].into_iter());
        blocked.wake(0, [&b"c"[..]].into_iter());
        notified([false, false, false]);
        blocked.wake(0, [&b"b"[..]].into_iter());
        notified([true, false, false]);
        // Registered again after a wake (the pop blocks again), a client keeps its place.
        blocked.register(0, &keys(&["a", "b"]), &clients[0]);
        assert_eq!(blocked.registered.load(Ordering::Relaxed), 4);
        // A wake before the wait starts is kept (no lost wake-up between registering and waiting).
        blocked.wake(0, [&b"b"[..]].into_iter());
        notified([true, false, false]);
        // Leaving from behind wakes nobody; leaving from the front wakes the next in line.
        blocked.unregister(0, &keys(&["b"]), 3);
        notified([false, false, false]);
        blocked.unregister(0, &keys(&["a", "b"]), 1);
        notified([false, true, false]);
        blocked.wake_all();
        notified([false, true, false]);
        blocked.unregister(0, &keys(&["b"]), 2);
        assert_eq!(blocked.registered.load(Ordering::Relaxed), 0);
        assert!(blocked.by_key.lock().get(&0).is_none_or(HashMap::is_empty));
    }
}
