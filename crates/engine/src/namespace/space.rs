//! Acknowledgements held while the data tier runs short of free blocks that defragmentation
//! could free, so that writers slow to the pace at which it frees them instead of filling the
//! tier. A sustained stream of overwrites (redis-benchmark MSET, 10 values of 440 bytes a
//! command, about 390 MB/s of records against about 250 MB/s reclaimed) filled a 4 GiB tier
//! that held 100 MB of live records in 35 s, and every write then failed with `-OOM`.
//!
//! Space is *short* when fewer than 1/SPACE_HOLD_FREE_FRACTION of the blocks (or fewer than
//! SPACE_HOLD_FREE_BLOCKS_MIN) are free while dead records fill at least half of the used blocks
//! (what defragmentation can give back). Writers read the free blocks as they are (an atomic
//! the log keeps); whether the space is *reclaimable* the maintenance thread decides at each
//! tick and after each block it defragments (`note_space`, which sums the blocks' live bytes).
//! A write that stores a value while space is short gets a ticket marked `held_for_space`: its
//! acknowledgement waits until space is no longer short or SPACE_HOLD_MS_MAX have passed; the
//! write itself is applied and visible at once, as any write. Each connection then writes at
//! most one batch per hold. A tier that live records fill is never short in this sense (no dead
//! records to free): it answers `-OOM` as before, without delay.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::commit::{CommitTicket, DurableCallback};
use super::maintenance::FREE_BLOCKS_LOW_FRACTION;
use super::Namespace;
use crate::log::{position_seq, BLOCKS_RESERVED_FOR_DEFRAG, BLOCKS_RESERVED_FOR_DELETIONS};

/// Space is short under 1/N of the blocks free: where defragmentation runs at every tick...
const SPACE_HOLD_FREE_FRACTION: usize = FREE_BLOCKS_LOW_FRACTION;
/// ...or under this many (two above the blocks kept for defragmentation and deletions), or
/// under half of the blocks, whichever is fewer (a tier of a few blocks).
const SPACE_HOLD_FREE_BLOCKS_MIN: usize = BLOCKS_RESERVED_FOR_DEFRAG + BLOCKS_RESERVED_FOR_DELETIONS + 2;
/// The longest an acknowledgement is held for space.
pub(crate) const SPACE_HOLD_MS_MAX: u64 = 100;
/// How often a blocked writer (`wait_durable`) looks at the space again.
const SPACE_POLL_INTERVAL: Duration = Duration::from_millis(5);

/// An acknowledgement held for space: once released it waits for `position` as any ticket. At
/// most one per connection (a session awaits its ticket before it reads more requests), so
/// `maxclients` bounds them.
pub(crate) struct SpaceWaiter {
    since: Instant,
    position: u64,
    callback: DurableCallback,
}

impl Namespace {
    /// Whether writes appended now are held: few blocks free, and dead records to free.
    pub(crate) fn holds_writes_for_space(&self) -> bool {
        self.few_blocks_free() && self.space_reclaimable.load(Ordering::Relaxed)
    }

    fn few_blocks_free(&self) -> bool {
        self.fewer_blocks_free_than(SPACE_HOLD_FREE_FRACTION)
    }

    /// Under 1/`fraction` of the blocks free, or under SPACE_HOLD_FREE_BLOCKS_MIN (at most half
    /// of them).
    fn fewer_blocks_free_than(&self, fraction: usize) -> bool {
        let (free, total) = (self.log.free_block_count(), self.log.block_count());
        free * fraction < total || free < SPACE_HOLD_FREE_BLOCKS_MIN.min(total / 2)
    }

    /// Decides whether dead records fill at least half of the used blocks, then releases the
    /// held acknowledgements that may go: all of them once space is not short, else those held
    /// for SPACE_HOLD_MS_MAX. Called by the maintenance thread. The decision reads every
    /// block's live bytes, so it is taken only under twice the free blocks that make space
    /// short: early enough that it stands when writers fill the rest within a tick.
    pub(crate) fn note_space(&self) {
        let reclaimable = self.fewer_blocks_free_than(SPACE_HOLD_FREE_FRACTION / 2) && self.dead_bytes_fill_half_the_used_blocks();
        self.space_reclaimable.store(reclaimable, Ordering::Relaxed);
        self.release_space_waiters(!self.holds_writes_for_space());
    }

    /// Dead bytes are counted in sealed blocks wholly before the published position only: a
    /// record counts as live in its block once published, so a block written since the last
    /// flush looks emptier than it is (as defragmentation judges blocks).
    fn dead_bytes_fill_half_the_used_blocks(&self) -> bool {
        if !self.accounting_ready.load(Ordering::Relaxed) {
            return false;
        }
        // Free slots read sequence 0; the active block holds the published position, so no
        // block at or after it is counted.
        let published_seq = position_seq(self.commit.lock().durable_position);
        let block_bytes = self.log.block_bytes();
        let dead_bytes: u64 = (0..self.log.block_count() as u32)
            .filter(|&slot| (1..published_seq).contains(&self.log.block_seq(slot)))
            .map(|slot| block_bytes.saturating_sub(self.log.live_bytes(slot)))
            .sum();
        dead_bytes * 2 >= self.log.used_bytes()
    }

    /// Releases the held acknowledgements (all, or those held long enough) to wait for their
    /// positions, outside the waiters' lock.
    pub(crate) fn release_space_waiters(&self, all: bool) {
        let released: Vec<SpaceWaiter> = {
            let mut waiters = self.space_waiters.lock();
            let limit = Duration::from_millis(SPACE_HOLD_MS_MAX);
            let (released, held) = std::mem::take(&mut *waiters).into_iter().partition(|waiter| all || waiter.since.elapsed() >= limit);
            *waiters = held;
            released
        };
        for waiter in released {
            self.on_durable(CommitTicket { position: waiter.position, held_for_space: false }, waiter.callback);
        }
    }

    /// Holds `callback` until space is no longer short (None), or gives it back when it is not.
    pub(crate) fn hold_for_space(&self, position: u64, callback: DurableCallback) -> Option<DurableCallback> {
        let mut waiters = self.space_waiters.lock();
        if !self.holds_writes_for_space() {
            return Some(callback);
        }
        waiters.push(SpaceWaiter { since: Instant::now(), position, callback });
        None
    }

    /// Blocks the calling thread as `hold_for_space` holds a callback.
    pub(crate) fn wait_for_space(&self) {
        let start = Instant::now();
        while self.holds_writes_for_space() && start.elapsed() < Duration::from_millis(SPACE_HOLD_MS_MAX) {
            std::thread::sleep(SPACE_POLL_INTERVAL);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::sync::Arc;

    use super::*;
    use crate::config::Durability;
    use crate::namespace::tests::small_config;
    use crate::Database;
    use hybridkv_media::sim::SimStore;
    use hybridkv_media::Tier;

    /// Records on ssd (1 MiB blocks, 8 of them), durability `periodic`, no background threads.
    fn periodic_database() -> (SimStore, Database) {
        let store = SimStore::new(3);
        let mut config = small_config(Tier::Dram, Tier::Ssd);
        config.namespaces[0].durability = Durability::Periodic;
        let database = Database::open_with(config, Arc::new(store.clone())).unwrap();
        (store, database)
    }

    /// Fills a few blocks with live records, so that few are free, and says that dead records
    /// fill the rest (as `note_space` would once overwrites made them dead).
    fn make_space_short(namespace: &Namespace) {
        for number in 0..4200u32 {
            namespace.put(&number.to_le_bytes(), &[7u8; 1000], 0).unwrap();
        }
        namespace.space_reclaimable.store(true, Ordering::Relaxed);
        assert!(namespace.holds_writes_for_space());
    }

    fn put(namespace: &Namespace, key: &[u8]) -> Option<CommitTicket> {
        namespace.transaction_deferred(&[key], |transaction| transaction.put(key, b"value", 0)).unwrap().1
    }

    #[test]
    fn writes_while_space_is_short_are_acknowledged_once_it_is_not() {
        let (_store, database) = periodic_database();
        let namespace = database.namespace(0).unwrap();
        assert_eq!(put(namespace, b"before"), None, "periodic durability, space not short: no ticket");
        make_space_short(namespace);
        let ticket = put(namespace, b"held").expect("a write while space is short is held");
        assert!(ticket.held_for_space);
        assert_eq!(namespace.get(b"held").unwrap().unwrap().bytes, b"value", "visible while held");
        assert_eq!(namespace.stats().writes_held_for_space, 1);
        let (sender, acknowledged) = mpsc::channel();
        namespace.on_durable(ticket, Box::new(move |result| sender.send(result.is_ok()).unwrap()));
        namespace.release_space_waiters(false);
        assert!(acknowledged.try_recv().is_err(), "held: space is still short and the hold is young");
        namespace.space_reclaimable.store(false, Ordering::Relaxed);
        namespace.release_space_waiters(!namespace.holds_writes_for_space());
        assert_eq!(acknowledged.recv_timeout(Duration::from_secs(5)), Ok(true));
    }

    #[test]
    fn a_hold_ends_after_its_longest_time_while_space_stays_short() {
        let (_store, database) = periodic_database();
        let namespace = database.namespace(0).unwrap();
        make_space_short(namespace);
        let ticket = put(namespace, b"held").unwrap();
        let (sender, acknowledged) = mpsc::channel();
        namespace.on_durable(ticket, Box::new(move |result| sender.send(result.is_ok()).unwrap()));
        std::thread::sleep(Duration::from_millis(SPACE_HOLD_MS_MAX));
        namespace.release_space_waiters(false);
        assert_eq!(acknowledged.recv_timeout(Duration::from_secs(5)), Ok(true));
        // A blocking writer waits as long, then goes on.
        let start = Instant::now();
        namespace.wait_durable(put(namespace, b"blocking").unwrap()).unwrap();
        assert!(start.elapsed() >= Duration::from_millis(SPACE_HOLD_MS_MAX));
    }

    #[test]
    fn a_tier_of_live_records_is_not_short_of_space_to_free() {
        let (_store, database) = periodic_database();
        let namespace = database.namespace(0).unwrap();
        namespace.accounting_ready.store(true, Ordering::Relaxed);
        let value = vec![7u8; 1000];
        let mut number = 0u32;
        // Distinct keys until the tier refuses: every record stays live.
        while namespace.put(&number.to_le_bytes(), &value, 0).is_ok() {
            number += 1;
        }
        // Records count as live in their blocks once published.
        database.checkpoint().unwrap();
        assert!(namespace.log.free_block_count() < SPACE_HOLD_FREE_BLOCKS_MIN.min(namespace.log.block_count() / 2));
        namespace.note_space();
        assert!(!namespace.holds_writes_for_space(), "nothing for defragmentation to free: refuse, do not hold");
        // Overwrite most of them: dead records now fill the used blocks.
        for overwritten in 0..number * 3 / 4 {
            if namespace.delete(&overwritten.to_le_bytes()).is_err() {
                break;
            }
        }
        database.checkpoint().unwrap();
        namespace.note_space();
        assert!(namespace.holds_writes_for_space(), "dead records to free and few free blocks: hold");
    }
}
