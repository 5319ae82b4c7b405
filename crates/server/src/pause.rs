//! CLIENT PAUSE and UNPAUSE: the server holds clients' commands back until a deadline, all of
//! them or only writes, as Redis does while an operator fails over to another server.
//!
//! Sessions ask `ClientPause::holds` before each command (one relaxed load while no pause is
//! set); a held session waits on `ClientPause::changes` or the deadline, whichever comes first,
//! and asks again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::watch;

/// What a pause holds back. The order is strictness: a second pause never relaxes the first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PauseMode {
    /// Commands that write (and EXEC of a transaction that queued one); reads go on.
    Writes,
    /// Every command of every client, CLIENT UNPAUSE included.
    All,
}

/// A session's command is held back until `end` (None: until CLIENT UNPAUSE), or until the
/// pause changes after `generation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PauseHold {
    pub end: Option<Instant>,
    pub generation: u64,
}

#[derive(Clone, Copy)]
struct Pause {
    mode: PauseMode,
    end: Option<Instant>,
}

pub struct ClientPause {
    /// A pause is set (perhaps already past its end): the one thing sessions read per command.
    active: AtomicBool,
    pause: Mutex<Option<Pause>>,
    /// Counts changes of the pause (set, extended, lifted, ended); held sessions wait on it.
    changes: watch::Sender<u64>,
}

impl Default for ClientPause {
    fn default() -> ClientPause {
        ClientPause { active: AtomicBool::new(false), pause: Mutex::new(None), changes: watch::Sender::new(0) }
    }
}

impl ClientPause {
    /// CLIENT PAUSE: as Redis, a pause already in force keeps the stricter mode and the later end.
    pub fn pause(&self, mode: PauseMode, end: Option<Instant>) {
        let mut pause = self.pause.lock();
        let current = pause.filter(|current| !has_ended(current.end, Instant::now()));
        *pause = Some(match current {
            None => Pause { mode, end },
            Some(current) => Pause { mode: mode.max(current.mode), end: later(end, current.end) },
        });
        self.active.store(true, Ordering::Release);
        self.changes.send_modify(|generation| *generation += 1);
    }

    /// CLIENT UNPAUSE: held sessions go on.
    pub fn unpause(&self) {
        let mut pause = self.pause.lock();
        self.lift(&mut pause);
    }

    /// A pause may hold commands back: sessions ask `holds` only then.
    pub fn is_set(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// Whether a command is held back now, `writes` telling whether it writes.
    pub fn holds(&self, writes: bool) -> Option<PauseHold> {
        if !self.is_set() {
            return None;
        }
        let mut pause = self.pause.lock();
        let current = (*pause)?;
        if has_ended(current.end, Instant::now()) {
            self.lift(&mut pause);
            return None;
        }
        let held = current.mode == PauseMode::All || writes;
        held.then(|| PauseHold { end: current.end, generation: *self.changes.borrow() })
    }

    /// A receiver that sees every change after it was made.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn lift(&self, pause: &mut Option<Pause>) {
        if pause.take().is_some() {
            self.active.store(false, Ordering::Release);
            self.changes.send_modify(|generation| *generation += 1);
        }
    }
}

fn has_ended(end: Option<Instant>, now: Instant) -> bool {
    end.is_some_and(|end| end <= now)
}

fn later(first: Option<Instant>, second: Option<Instant>) -> Option<Instant> {
    Some(first?.max(second?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn in_ms(ms: u64) -> Option<Instant> {
        Some(Instant::now() + Duration::from_millis(ms))
    }

    #[test]
    fn nothing_is_held_until_a_pause_and_after_unpause() {
        let pause = ClientPause::default();
        assert_eq!(pause.holds(true), None);
        pause.pause(PauseMode::All, in_ms(60_000));
        assert!(pause.holds(false).is_some() && pause.holds(true).is_some());
        pause.unpause();
        assert_eq!(pause.holds(true), None);
    }

    #[test]
    fn a_write_pause_holds_writes_only() {
        let pause = ClientPause::default();
        pause.pause(PauseMode::Writes, in_ms(60_000));
        assert_eq!(pause.holds(false), None);
        assert!(pause.holds(true).is_some());
    }

    #[test]
    fn a_second_pause_keeps_the_stricter_mode_and_the_later_end() {
        let pause = ClientPause::default();
        let end = in_ms(60_000);
        pause.pause(PauseMode::All, end);
        pause.pause(PauseMode::Writes, in_ms(10));
        assert_eq!(pause.holds(false).map(|hold| hold.end), Some(end));
        pause.pause(PauseMode::Writes, None);
        assert_eq!(pause.holds(false).map(|hold| hold.end), Some(None));
    }

    #[test]
    fn an_ended_pause_holds_nothing_and_a_new_one_starts_afresh() {
        let pause = ClientPause::default();
        pause.pause(PauseMode::All, Some(Instant::now()));
        assert_eq!(pause.holds(true), None);
        pause.pause(PauseMode::All, Some(Instant::now()));
        pause.pause(PauseMode::Writes, in_ms(60_000));
        assert_eq!(pause.holds(false), None, "the ended ALL pause does not make the new one stricter");
    }

    #[test]
    fn every_change_is_seen_by_a_receiver_taken_before_it() {
        let pause = ClientPause::default();
        pause.pause(PauseMode::All, in_ms(60_000));
        let hold = pause.holds(false).expect("held");
        let mut changes = pause.changes();
        assert_eq!(*changes.borrow_and_update(), hold.generation);
        pause.unpause();
        assert!(changes.has_changed().unwrap());
        assert_ne!(*changes.borrow_and_update(), hold.generation);
    }
}
