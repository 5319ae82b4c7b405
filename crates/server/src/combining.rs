//! Single-key writes of different clients to one key, run in one transaction.
//!
//! Fifty clients writing one list without pipelining each took the key's partition lock, opened
//! the list (its top, end directory and end chunk), rewrote and appended them, while the other
//! worker slept on the lock. Now a write that finds another client's write to its key running
//! queues itself, with its session, at the key's slot and its connection's task yields; the
//! running write's connection (the slot's *leader*) then runs what queued meanwhile in rounds,
//! each one transaction as a pipelined group is (`command::run_grouped`: the list opened and
//! saved once), and gives each write its reply and its session back. No worker waits for
//! another.
//!
//! Writes of connections served by the same worker never overlap, so they would meet only
//! through the other worker. A slot where writes met lately is *hot*: its next leader queues
//! its own write too and yields before it serves, so that the connections its worker polls
//! meanwhile queue theirs, and the first round holds them all. A slot goes cold after
//! `WARM_LEADS` such leaders whose first round held their write alone: writes to keys that
//! never meet (SET of random keys) run directly, as before, with no lending and no yield.
//!
//! Invariants: a slot is led by at most one connection, which serves it until no write waits
//! there or hands it to the first waiting one (`Answer::Lead`); every queued write gets an
//! answer with its session, unless its connection is gone. The writes of one client never
//! overtake each other: a connection queues only its last pending request and reads no more
//! until the answer.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;
use hybridkv_resp::Reply;
use tokio::sync::oneshot;

use crate::command::{ReadyCommand, GROUPED_ARGUMENT_BYTES_MAX};
use crate::session::{argument_bytes, execute, run_group_accounted, SessionState};
use crate::shared::Shared;

/// Slots writes meet in, chosen by database and key: writes to one key always meet; writes to
/// keys that share a slot may too (they run in one transaction then, as a pipelined group's).
const SLOTS: usize = 1024;
/// Writes one round runs in one transaction at most, and their argument bytes at most (so
/// that its batch stays far below a write block), unless one client's group alone is more.
/// 256 writes (sixteen pipelined groups of sixteen) gained over 64: the groups behind a round
/// wait for it, not for the lock one at a time.
pub const COMBINED_WRITES_MAX: usize = 256;
pub const COMBINED_ARGUMENT_BYTES_MAX: usize = 4 * GROUPED_ARGUMENT_BYTES_MAX;
/// Rounds a leader runs for others before it hands the slot on, so that its own client's next
/// requests do not wait long.
pub const LEADER_ROUNDS_MAX: usize = 4;
/// Leaders of a slot where writes met that yield for others before the slot goes cold, if none
/// comes: one alone was too few (requests arrive in waves; a wave's first write ran alone).
const WARM_LEADS: u8 = 4;

/// Where writes to the same key meet.
pub struct Combiner {
    slots: Box<[Mutex<Slot>]>,
}

#[derive(Default)]
struct Slot {
    led: bool,
    /// Leaders that may still wait in vain before the slot goes cold: `WARM_LEADS` when
    /// writes meet, one less at each leader whose first round holds its write alone.
    warmth: u8,
    waiting: VecDeque<Waiter>,
}

/// One client's writes at a slot: a single write, or a pipelined group whose keys all have the
/// slot.
struct Waiter {
    writes: Vec<ReadyCommand>,
    session: SessionState,
    answer: oneshot::Sender<Answer>,
}

/// What a connection whose writes waited at a slot gets back, with its session.
pub enum Answer {
    /// The writes ran: their replies, in order.
    Ran { session: SessionState, replies: Vec<Reply> },
    /// The slot's leader handed the slot on: the connection queues its writes first and
    /// serves the slot (`Combiner::lead_queued`).
    Lead { session: SessionState, writes: Vec<ReadyCommand> },
}

/// How writes entered their slot.
pub enum Entered {
    /// No other write was running at this cold slot: the caller runs its writes (given
    /// back), then serves the slot.
    Lead(Vec<ReadyCommand>),
    /// Queued with the session: the answer brings both back. When `leads`, the caller leads
    /// the (hot) slot: it yields, then serves it, its own write in the first round.
    Queued { answer: oneshot::Receiver<Answer>, leads: bool },
}

impl Default for Combiner {
    fn default() -> Combiner {
        Combiner { slots: (0..SLOTS).map(|_| Mutex::new(Slot::default())).collect() }
    }
}

impl Combiner {
    pub fn slot_of(database: usize, key: &[u8]) -> usize {
        (xxhash_rust::xxh3::xxh3_64_with_seed(key, database as u64) % SLOTS as u64) as usize
    }

    /// Leads `slot` when no write runs there, or queues these writes with the session, which
    /// `stand_in` replaces until the answer brings it back (at a warm slot, both).
    pub fn enter(&self, slot: usize, writes: Vec<ReadyCommand>, session: &mut SessionState, stand_in: impl FnOnce() -> SessionState) -> Entered {
        assert!(!writes.is_empty());
        let mut guard = self.slots[slot].lock();
        let leads = !guard.led;
        if leads && guard.warmth == 0 {
            guard.led = true;
            return Entered::Lead(writes);
        }
        if !leads {
            guard.warmth = WARM_LEADS;
        }
        guard.led = true;
        let (answer, receiver) = oneshot::channel();
        let session = std::mem::replace(session, stand_in());
        guard.waiting.push_back(Waiter { writes, session, answer });
        Entered::Queued { answer: receiver, leads }
    }

    /// Queues the writes of a connection the slot was handed to (`Answer::Lead`) first in
    /// line; the caller then serves the slot.
    pub fn lead_queued(&self, slot: usize, writes: Vec<ReadyCommand>, session: SessionState) -> oneshot::Receiver<Answer> {
        let mut guard = self.slots[slot].lock();
        assert!(guard.led, "a handed slot stays led");
        let (answer, receiver) = oneshot::channel();
        guard.waiting.push_front(Waiter { writes, session, answer });
        receiver
    }

    /// Runs the writes waiting at `slot`, which the caller leads, in rounds of one transaction
    /// each, then lets the slot go, or after `LEADER_ROUNDS_MAX` rounds hands it on.
    pub fn serve(&self, slot: usize, shared: &Shared) {
        for round_number in 0..LEADER_ROUNDS_MAX {
            let round = self.take_round(slot, round_number == 0);
            if round.is_empty() {
                return;
            }
            run_round(round, shared);
        }
        self.hand_over(slot);
    }

    /// The writes of the next round, first come first; none when nothing waits, and the slot
    /// is let go then. A `first` round of one write with none behind it cools the slot: its
    /// leader may have waited for others in vain.
    fn take_round(&self, slot: usize, first_round: bool) -> Vec<Waiter> {
        let mut guard = self.slots[slot].lock();
        assert!(guard.led, "only the leader serves a slot");
        let Some(first) = guard.waiting.front() else {
            guard.led = false;
            return Vec::new();
        };
        let database = first.session.database;
        let (mut round, mut writes, mut bytes) = (Vec::new(), 0, 0);
        while let Some(next) = guard.waiting.front() {
            let next_bytes: usize = next.writes.iter().map(|(_, args)| argument_bytes(args)).sum();
            let next_writes = next.writes.len();
            let joins = next.session.database == database && writes + next_writes <= COMBINED_WRITES_MAX && bytes + next_bytes <= COMBINED_ARGUMENT_BYTES_MAX;
            if !round.is_empty() && !joins {
                break;
            }
            (writes, bytes) = (writes + next_writes, bytes + next_bytes);
            round.push(guard.waiting.pop_front().expect("looked at above"));
        }
        if first_round && round.len() == 1 && guard.waiting.is_empty() {
            guard.warmth = guard.warmth.saturating_sub(1);
        }
        round
    }

    /// Makes the first waiting write's connection the slot's leader; lets the slot go when none
    /// waits (or none of their connections is left).
    fn hand_over(&self, slot: usize) {
        let mut guard = self.slots[slot].lock();
        while let Some(Waiter { writes, session, answer }) = guard.waiting.pop_front() {
            if answer.send(Answer::Lead { session, writes }).is_ok() {
                return;
            }
        }
        guard.led = false;
    }
}

/// Runs a round's writes in one transaction, or one at a time when that fails (as a pipelined
/// group's), and answers each client.
fn run_round(round: Vec<Waiter>, shared: &Shared) {
    let mut writes: Vec<ReadyCommand> = Vec::new();
    let (mut owners, mut sessions, mut answers) = (Vec::new(), Vec::with_capacity(round.len()), Vec::with_capacity(round.len()));
    let mut counts = Vec::with_capacity(round.len());
    for (owner, waiter) in round.into_iter().enumerate() {
        counts.push(waiter.writes.len());
        owners.extend(std::iter::repeat_n(owner, waiter.writes.len()));
        writes.extend(waiter.writes);
        sessions.push(waiter.session);
        answers.push(waiter.answer);
    }
    shared.stats.combined_writes.fetch_add(writes.len() as u64, Ordering::Relaxed);
    shared.stats.combined_write_rounds.fetch_add(1, Ordering::Relaxed);
    let mut session_refs: Vec<&mut SessionState> = sessions.iter_mut().collect();
    let grouped = run_group_accounted(&writes, &owners, &mut session_refs, shared);
    drop(session_refs);
    let mut replies = grouped.unwrap_or_else(|| writes.into_iter().zip(&owners).map(|((_, args), &owner)| execute(args, &mut sessions[owner], shared)).collect()).into_iter();
    for ((session, count), answer) in sessions.into_iter().zip(counts).zip(answers) {
        let replies = replies.by_ref().take(count).collect();
        // A connection gone meanwhile drops its session with the answer.
        let _ = answer.send(Answer::Ran { session, replies });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;

    use super::*;
    use crate::command::CommandSpec;
    use crate::shared::ClientHandle;
    use crate::watch::WatchRegistry;

    fn session(id: u64) -> SessionState {
        SessionState::new(Arc::new(ClientHandle::for_tests(id)), false, Arc::new(WatchRegistry::default()))
    }

    fn lpush() -> &'static CommandSpec {
        crate::commands::lookup(b"lpush").expect("a known command")
    }

    fn push(element: &str) -> Vec<ReadyCommand> {
        vec![(lpush(), ["LPUSH", "list", element].iter().map(|word| Bytes::copy_from_slice(word.as_bytes())).collect())]
    }

    /// Enters a push from a session of client `id`; the session left behind is a stand-in
    /// when the push was queued.
    fn enter(combiner: &Combiner, slot: usize, id: u64) -> Entered {
        let mut lent = session(id);
        combiner.enter(slot, push(&id.to_string()), &mut lent, || session(0))
    }

    fn queued(entered: Entered) -> (oneshot::Receiver<Answer>, bool) {
        match entered {
            Entered::Queued { answer, leads } => (answer, leads),
            Entered::Lead(_) => panic!("led, not queued"),
        }
    }

    #[test]
    fn a_cold_slot_is_led_directly_and_writes_behind_its_leader_queue_and_warm_it() {
        let combiner = Combiner::default();
        let slot = Combiner::slot_of(0, b"list");
        assert!(matches!(enter(&combiner, slot, 1), Entered::Lead(_)), "nothing runs there: the write runs directly");
        let (_second, leads) = queued(enter(&combiner, slot, 2));
        assert!(!leads);
        let (_third, leads) = queued(enter(&combiner, slot, 3));
        assert!(!leads);
        let round = combiner.take_round(slot, true);
        assert_eq!(round.iter().map(|waiter| waiter.session.client.id).collect::<Vec<_>>(), [2, 3], "first come first");
        assert!(combiner.take_round(slot, false).is_empty());
        let slot_state = combiner.slots[slot].lock();
        assert!(!slot_state.led, "an empty queue lets the slot go");
        assert_eq!(slot_state.warmth, WARM_LEADS, "writes met: the slot is warm");
    }

    #[test]
    fn a_warm_slot_cools_after_leaders_that_wait_in_vain() {
        let combiner = Combiner::default();
        let slot = Combiner::slot_of(3, b"list");
        combiner.slots[slot].lock().warmth = WARM_LEADS;
        for _ in 0..WARM_LEADS {
            let (_answer, leads) = queued(enter(&combiner, slot, 1));
            assert!(leads, "a warm slot's leader queues its own write and serves it");
            assert_eq!(combiner.take_round(slot, true).len(), 1);
            assert!(combiner.take_round(slot, false).is_empty());
        }
        assert_eq!(combiner.slots[slot].lock().warmth, 0);
        assert!(matches!(enter(&combiner, slot, 1), Entered::Lead(_)), "cold again: the write runs directly");
    }

    #[test]
    fn a_round_stops_at_its_limits_and_at_another_database() {
        let combiner = Combiner::default();
        let slot = 7;
        assert!(matches!(enter(&combiner, slot, 1), Entered::Lead(_)));
        let mut answers = Vec::new();
        for id in 0..COMBINED_WRITES_MAX as u64 + 2 {
            answers.push(queued(enter(&combiner, slot, 100 + id)).0);
        }
        let mut other_database = session(999);
        other_database.database = 1;
        let _other = queued(combiner.enter(slot, push("x"), &mut other_database, || session(0)));
        assert_eq!(combiner.take_round(slot, true).len(), COMBINED_WRITES_MAX);
        assert_eq!(combiner.take_round(slot, false).len(), 2, "the rest of the first database's writes");
        let last = combiner.take_round(slot, false);
        assert_eq!(last.len(), 1);
        assert_eq!(last[0].session.database, 1, "a round runs in one database");
        let mut big = session(5);
        let big_args = vec![Bytes::from_static(b"LPUSH"), Bytes::from_static(b"list"), Bytes::from(vec![b'x'; COMBINED_ARGUMENT_BYTES_MAX])];
        let _big = queued(combiner.enter(slot, vec![(lpush(), big_args)], &mut big, || session(0)));
        let _small = queued(enter(&combiner, slot, 6));
        assert_eq!(combiner.take_round(slot, false).len(), 1, "a write past the round's bytes waits for the next");
        assert_eq!(combiner.take_round(slot, false).len(), 1);
        let group: Vec<ReadyCommand> = (0..COMBINED_WRITES_MAX - 1).flat_map(|number| push(&number.to_string())).collect();
        let _group = queued(combiner.enter(slot, group, &mut session(7), || session(0)));
        let _two = queued(combiner.enter(slot, [push("a"), push("b")].concat(), &mut session(8), || session(0)));
        assert_eq!(combiner.take_round(slot, false).len(), 1, "writes are counted, not clients: a group of 63 and two more pass 64");
        assert_eq!(combiner.take_round(slot, false).len(), 1);
    }

    #[test]
    fn a_slot_handed_on_goes_to_the_first_waiting_write_whose_connection_is_left() {
        let combiner = Combiner::default();
        let slot = 11;
        assert!(matches!(enter(&combiner, slot, 1), Entered::Lead(_)));
        let (gone, _) = queued(enter(&combiner, slot, 2));
        let (mut next, _) = queued(enter(&combiner, slot, 3));
        let (mut after, _) = queued(enter(&combiner, slot, 4));
        drop(gone);
        combiner.hand_over(slot);
        match next.try_recv() {
            Ok(Answer::Lead { session, writes }) => {
                assert_eq!(session.client.id, 3, "its own session comes back");
                assert_eq!(writes[0].1[2], "3");
                let mut own = combiner.lead_queued(slot, writes, session);
                let round = combiner.take_round(slot, true);
                assert_eq!(round.iter().map(|waiter| waiter.session.client.id).collect::<Vec<_>>(), [3, 4], "the new leader's write first");
                assert!(own.try_recv().is_err(), "answered once its round ran");
            }
            _ => panic!("the next connection leads"),
        }
        assert!(after.try_recv().is_err());
        assert!(combiner.slots[slot].lock().led, "still led, by the new leader");
    }
}
