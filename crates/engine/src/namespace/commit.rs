//! Group commit: flushes that make appended records durable and then publish their index
//! entries, shared by every writer waiting at the time.
//!
//! Up to `FLUSHES_IN_FLIGHT_MAX` flushes run at once: while one waits for its sync, the next
//! takes and writes out what was appended meanwhile. Flushes take their work one at a time
//! (`taking`), so tickets follow log order, and publish in ticket order, so index entries are
//! still published in log order and the durable position only grows.
//!
//! Writers wait either by blocking (`wait_durable_with`) or by leaving a callback
//! (`on_durable`): committer threads flush for the callbacks, so a server can await durability
//! without a thread per waiting client.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::MutexGuard;

use super::write::PENDING_RECORDS_EARLY_FLUSH;
use super::Namespace;
use crate::background_pace;
use crate::error::Result;

/// Flushes under way at once (each one sync in flight).
pub(crate) const FLUSHES_IN_FLIGHT_MAX: usize = 2;
/// How long an idle committer sleeps before it looks at the stop flag again.
const COMMITTER_IDLE_WAIT: Duration = Duration::from_millis(100);

/// Called once the position it waits for is durable, or with the error that prevents it.
pub type DurableCallback = Box<dyn FnOnce(Result<()>) + Send>;

/// What a writer waits for before it may acknowledge: a position to be durable, and space, when
/// the write was held for it (`space.rs`). Returned by `Namespace::transaction_deferred`,
/// redeemed by `wait_durable` or `on_durable`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a write is durable only once its ticket is redeemed"]
pub struct CommitTicket {
    pub(crate) position: u64,
    pub(crate) held_for_space: bool,
}

impl CommitTicket {
    /// A ticket that waits for everything `self` and `later` wait for (positions only grow).
    pub fn covering(self, later: CommitTicket) -> CommitTicket {
        CommitTicket { position: self.position.max(later.position), held_for_space: self.held_for_space || later.held_for_space }
    }
}

pub(crate) struct CommitState {
    /// Everything before it is flushed (durable when the namespace syncs) and published.
    pub(crate) durable_position: u64,
    /// Everything before it is taken by a flush, finished or under way.
    taken_position: u64,
    /// A flush is taking its work: the next one waits, so tickets follow log order.
    taking: bool,
    flushes_in_flight: usize,
    next_ticket: u64,
    /// Flushes publish in ticket order: the last ticket published.
    published_ticket: u64,
    /// Callbacks waiting for a position, and the largest position any of them waits for.
    waiters: Vec<(u64, DurableCallback)>,
    waiters_target_max: u64,
}

impl CommitState {
    pub(crate) fn new() -> CommitState {
        CommitState {
            durable_position: 0,
            taken_position: 0,
            taking: false,
            flushes_in_flight: 0,
            next_ticket: 1,
            published_ticket: 0,
            waiters: Vec::new(),
            waiters_target_max: 0,
        }
    }

    /// Whether a new flush may start now and would cover more than the flushes under way.
    fn may_start_flush(&self, target: u64) -> bool {
        !self.taking && self.flushes_in_flight < FLUSHES_IN_FLIGHT_MAX && self.taken_position < target
    }
}

impl Namespace {
    /// Returns once every record before `target` is flushed (made durable when `persist`) and
    /// published, flushing if the flushes under way do not cover it (group commit).
    pub(crate) fn wait_durable_with(&self, target: u64, persist: bool) -> Result<()> {
        let mut commit = self.commit.lock();
        loop {
            if commit.durable_position >= target {
                return Ok(());
            }
            self.check_writable()?;
            if commit.may_start_flush(target) {
                let flushed;
                (commit, flushed) = self.run_flush(commit, persist);
                // The writer whose flush failed learns why; the others, that writes are refused.
                flushed?;
                continue;
            }
            self.committed.wait(&mut commit);
        }
    }

    /// Blocks until every write appended so far is durable and published, flushing now whatever
    /// the durability mode (MOVE makes its copy durable before it deletes the original). The
    /// caller holds none of this namespace's partition locks: publication takes them.
    pub fn sync(&self) -> Result<()> {
        self.wait_durable_with(self.log.append_position(), true)
    }

    /// A ticket for every write appended so far, whatever the durability mode: redeemed with
    /// `on_durable`, it has a committer flush them now rather than at the next periodic flush
    /// (the server's WAITAOF), without blocking the caller.
    pub fn ticket_for_appended(&self) -> CommitTicket {
        CommitTicket { position: self.log.append_position(), held_for_space: false }
    }

    /// Whether every write appended so far is durable and published.
    pub fn appended_is_durable(&self) -> bool {
        let appended = self.log.append_position();
        self.commit.lock().durable_position >= appended
    }

    /// Blocks until the ticket's writes are durable (and space is no longer short, or the
    /// longest hold has passed, for a write held for space).
    pub fn wait_durable(&self, ticket: CommitTicket) -> Result<()> {
        if ticket.held_for_space {
            self.wait_for_space();
        }
        self.wait_durable_with(ticket.position, true)
    }

    /// Calls `callback` once the ticket's writes are durable (at once when they already are),
    /// on a committer thread: the caller does not block.
    pub fn on_durable(&self, ticket: CommitTicket, callback: DurableCallback) {
        let callback = match ticket.held_for_space {
            true => match self.hold_for_space(ticket.position, callback) {
                Some(callback) => callback,
                None => return,
            },
            false => callback,
        };
        let mut commit = self.commit.lock();
        if commit.durable_position >= ticket.position {
            drop(commit);
            return callback(Ok(()));
        }
        if let Err(error) = self.check_writable() {
            drop(commit);
            return callback(Err(error));
        }
        commit.waiters_target_max = commit.waiters_target_max.max(ticket.position);
        commit.waiters.push((ticket.position, callback));
        // A flush under way looks at the waiters again when it ends; wake an idle committer
        // only when it could start a flush now (each wake is a futex call and a context switch).
        if commit.may_start_flush(ticket.position) {
            self.committed.notify_one();
        }
    }

    /// One flush, started under the commit lock (which it releases while it works): takes the
    /// work, makes it durable, waits for its turn, publishes, then wakes and calls back waiters.
    fn run_flush<'a>(
        &'a self,
        mut commit: MutexGuard<'a, CommitState>,
        persist: bool,
    ) -> (MutexGuard<'a, CommitState>, Result<()>) {
        let ticket = commit.next_ticket;
        commit.next_ticket += 1;
        commit.flushes_in_flight += 1;
        commit.taking = true;
        let (work, written) = MutexGuard::unlocked(&mut commit, || self.log.take_flush_work());
        commit.taking = false;
        commit.taken_position = commit.taken_position.max(work.upto_position);
        self.committed.notify_all();
        let synced = MutexGuard::unlocked(&mut commit, || {
            written.and_then(|()| if persist { self.log.persist(&work) } else { Ok(()) })
        });
        while commit.published_ticket + 1 != ticket {
            self.committed.wait(&mut commit);
        }
        let result = MutexGuard::unlocked(&mut commit, || {
            let published = self.publish_flush_work(&work, synced, persist);
            self.log.recycle_publications(work.publications);
            published
        });
        commit.published_ticket = ticket;
        commit.flushes_in_flight -= 1;
        if let Ok(upto) = result {
            commit.durable_position = commit.durable_position.max(upto);
        }
        let result = result.map(|_| ());
        let ready = take_ready_waiters(&mut commit, self.check_writable().is_err());
        self.committed.notify_all();
        if !ready.is_empty() {
            MutexGuard::unlocked(&mut commit, || {
                for callback in ready {
                    callback(self.check_writable());
                }
            });
        }
        (commit, result)
    }

    /// Wakes a committer when an append sealed a block with pages still to write out (buffered
    /// media): its flush writes them on the committer's thread, off the append lock and off
    /// the thread that appended. The notice is given under the commit lock, under which an
    /// idle committer checks for sealed pages before it waits, so no wake is lost (once per
    /// block; callers hold no partition, log or commit lock).
    pub(crate) fn wake_committer_after_seal(&self) {
        if self.log.take_seal_notice() && self.background_write_out.load(Ordering::Relaxed) {
            let _commit = self.commit.lock();
            self.committed.notify_one();
        }
    }

    /// Wakes a committer because PENDING_RECORDS_EARLY_FLUSH records wait for publication; once
    /// until a committer starts a flush (each wake is a futex call and a context switch). Under
    /// the commit lock, as `wake_committer_after_seal`, so no wake is lost.
    pub(crate) fn wake_committer_for_backlog(&self) {
        if self.background_write_out.load(Ordering::Relaxed) && !self.backlog_wake_sent.swap(true, Ordering::Relaxed) {
            let _commit = self.commit.lock();
            self.committed.notify_one();
        }
    }

    /// Whether a committer should flush now: a sealed block's pages wait to be written out, or
    /// enough records wait for publication that writers would soon have to wait for them.
    fn flush_wanted_without_waiters(&self) -> bool {
        self.background_write_out.load(Ordering::Relaxed)
            && (self.log.sealed_pages_waiting() || self.log_backlog() >= PENDING_RECORDS_EARLY_FLUSH)
    }

    /// Starts the committer threads (stopped with the maintenance thread, `stop_maintenance`).
    pub(crate) fn start_committers(self: &Arc<Self>) {
        let committers = (0..FLUSHES_IN_FLIGHT_MAX).map(|number| {
            let weak = Arc::downgrade(self);
            std::thread::Builder::new()
                .name(format!("hkv-commit{number}-{}", self.config.name))
                .spawn(move || committer_loop(weak))
                .expect("spawning a committer thread")
        });
        self.background_threads.lock().extend(committers);
    }
}

/// The waiters whose position is now durable, or all of them when the namespace is poisoned.
fn take_ready_waiters(commit: &mut CommitState, poisoned: bool) -> Vec<DurableCallback> {
    let durable = commit.durable_position;
    let (ready, waiting): (Vec<_>, Vec<_>) =
        std::mem::take(&mut commit.waiters).into_iter().partition(|(target, _)| poisoned || *target <= durable);
    commit.waiters = waiting;
    if commit.waiters.is_empty() {
        commit.waiters_target_max = 0;
    }
    ready.into_iter().map(|(_, callback)| callback).collect()
}

/// Flushes whenever a callback waits for a position no flush under way covers, a sealed
/// block's pages wait to be written out, or PENDING_RECORDS_EARLY_FLUSH records wait for
/// publication; ends when the namespace stops or is dropped.
fn committer_loop(namespace: Weak<Namespace>) {
    loop {
        let Some(namespace) = namespace.upgrade() else { return };
        if namespace.stopping.load(Ordering::Relaxed) {
            return;
        }
        let mut commit = namespace.commit.lock();
        // A sealed block's pages or many unpublished records wait: a flush of everything.
        let target = if namespace.flush_wanted_without_waiters() { u64::MAX } else { commit.waiters_target_max };
        if commit.may_start_flush(target) && namespace.check_writable().is_ok() {
            // A flush for a sealed block's pages alone gives way to foreground threads while
            // most of the tier is free; one that writers wait for, or that must catch up with a
            // backlog before writers have to wait for it, does not (docs/design/commit.md,
            // "Background work in short bursts").
            let catching_up = namespace.log_backlog() >= PENDING_RECORDS_EARLY_FLUSH;
            background_pace::mark_background(commit.waiters.is_empty() && !catching_up && namespace.background_may_pace());
            namespace.backlog_wake_sent.store(false, Ordering::Relaxed);
            // A failure poisons the namespace and fails the callbacks; nothing more to do here
            // but to let the commit lock go.
            drop(namespace.run_flush(commit, true));
            continue;
        }
        namespace.committed.wait_for(&mut commit, COMMITTER_IDLE_WAIT);
    }
}
