//! Device reads that do not block their caller: an io_uring submission queue in front of a block
//! file opened with O_DIRECT. A caller starts reads and goes on with other work; when the
//! completion descriptor (an eventfd the ring signals) becomes readable, it takes the completed
//! reads. The server's network workers use it so that a record-cache miss costs one system call
//! on the worker, not a hand-off to a blocking thread and back (docs/design/cache.md).
//!
//! Reads may also be queued and submitted later, together (`queue`, then `submit_queued`): on a
//! virtual machine the device's doorbell and its completion interrupt cost tens of microseconds
//! of CPU each, and reads submitted together share them.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use io_uring::{opcode, types, IoUring};
use parking_lot::Mutex;

use crate::aligned::AlignedBuffer;
use crate::medium::{assert_in_range, PAGE_BYTES};
use crate::MediaError;

/// Submission queue entries of a ring: the most reads one call can submit at once.
pub const DEVICE_READ_QUEUE_ENTRIES: u32 = 256;
/// Reads in flight at once, at most (the completion queue holds twice the submission entries,
/// so completions are never dropped).
pub const DEVICE_READS_IN_FLIGHT_MAX: usize = 2 * DEVICE_READ_QUEUE_ENTRIES as usize;
/// Reads queued and not yet submitted at most: the call to `queue` that reaches this many
/// submits them itself, so a submission carries at most this many and none waits for more.
pub const DEVICE_READS_QUEUED_MAX: usize = 32;
/// The longest single read a caller may start.
pub const DEVICE_READ_BYTES_MAX: usize = 1 << 20;
/// Bytes of reads in flight at once, at most: each holds a buffer of its length until it is
/// taken, so this bounds the memory of reads that many clients start together.
pub const DEVICE_READ_BYTES_IN_FLIGHT_MAX: usize = 32 << 20;

/// One read to start: `len` bytes at `offset` of the file, named by the caller's `token`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceRead {
    pub offset: u64,
    pub len: usize,
    pub token: u64,
}

/// A finished read: the `len` bytes asked for, or what went wrong.
#[derive(Debug)]
pub struct CompletedRead {
    pub token: u64,
    pub result: Result<Vec<u8>, MediaError>,
}

/// A read the kernel may be writing into: its buffer must live, unmoved, until its completion.
struct InFlight {
    request: DeviceRead,
    buffer: AlignedBuffer,
    /// Bytes between the page-aligned start of the transfer and `request.offset`.
    skip: usize,
    /// Its submission failed and the caller was told so; the kernel may still run it (the
    /// entry stays in the submission queue), so the slot is freed only at its completion.
    failure_reported: bool,
}

struct Ring {
    ring: IoUring,
    /// Slot `i` holds the read whose submission carries user data `i`.
    slots: Vec<Option<InFlight>>,
    free_slots: Vec<usize>,
    /// The buffer bytes of the reads in `slots`.
    bytes_in_flight: usize,
    /// Slots of the reads in the submission queue that no submission has carried yet.
    queued: Vec<usize>,
    /// Reads whose submission failed, handed out by the next `take_completed`.
    failed: Vec<CompletedRead>,
    counts: DeviceReadCounts,
}

/// What a queue has submitted so far (the server's INFO): reads per submission is how many
/// reads shared each doorbell.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceReadCounts {
    pub submissions: u64,
    pub reads: u64,
}

impl Ring {
    /// Reads whose slots hold buffers: queued, submitted, or failed and not yet completed.
    fn in_flight(&self) -> usize {
        self.slots.len() - self.free_slots.len()
    }
}

pub struct DeviceReadQueue {
    ring: Mutex<Ring>,
    /// Signalled by the kernel whenever reads complete.
    completions: OwnedFd,
    /// The block file's descriptor: the file outlives the queue (a field dropped after it).
    fd: RawFd,
    file_len_bytes: u64,
    what: String,
}

impl DeviceReadQueue {
    /// A queue for the O_DIRECT file `fd` of `file_len_bytes`, or the reason there is none
    /// (io_uring refused by the kernel or a sandbox): callers then read by blocking calls.
    pub(crate) fn new(fd: RawFd, file_len_bytes: u64, what: String) -> io::Result<DeviceReadQueue> {
        // SUBMIT_ALL: a submission carries every queued entry even if one of them fails, so
        // none is left behind for a later call that may never come.
        let ring = IoUring::builder().setup_submit_all().build(DEVICE_READ_QUEUE_ENTRIES)?;
        // SAFETY: eventfd takes no pointers; a non-negative result is a new descriptor we own.
        let event_fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if event_fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `event_fd` was just created above and nothing else owns it.
        let completions = unsafe { OwnedFd::from_raw_fd(event_fd) };
        ring.submitter().register_eventfd(completions.as_raw_fd())?;
        let ring = Ring { ring, slots: Vec::new(), free_slots: Vec::new(), bytes_in_flight: 0, queued: Vec::new(), failed: Vec::new(), counts: DeviceReadCounts::default() };
        Ok(DeviceReadQueue { ring: Mutex::new(ring), completions, fd, file_len_bytes, what })
    }

    /// Readable when reads have completed since the last `take_completed`.
    pub fn completion_fd(&self) -> BorrowedFd<'_> {
        self.completions.as_fd()
    }

    pub fn in_flight(&self) -> usize {
        let ring = self.ring.lock();
        ring.in_flight()
    }

    /// How many more reads `queue` would take now (another thread may take them first).
    pub fn room(&self) -> usize {
        DEVICE_READS_IN_FLIGHT_MAX - self.in_flight()
    }

    pub fn counts(&self) -> DeviceReadCounts {
        self.ring.lock().counts
    }

    /// Starts the reads of `reads` in order, submitted at once, and returns how many it started
    /// (see `queue`).
    pub fn start(&self, reads: &[DeviceRead]) -> usize {
        let started = self.queue(reads);
        self.submit_queued();
        started
    }

    /// Queues the reads of `reads` in order for the next submission, without waiting for them,
    /// and returns how many it queued: fewer than asked when `DEVICE_READS_IN_FLIGHT_MAX` or
    /// `DEVICE_READ_BYTES_IN_FLIGHT_MAX` would be passed (the caller reads the rest itself).
    /// The caller must see that `submit_queued` is called soon; a call that brings the queued
    /// reads to `DEVICE_READS_QUEUED_MAX` submits them itself. Every queued read completes
    /// through `take_completed`, with its bytes or an error (its submission failed).
    pub fn queue(&self, reads: &[DeviceRead]) -> usize {
        let mut ring = self.ring.lock();
        let mut queued = 0;
        for request in reads {
            assert!(request.len > 0 && request.len <= DEVICE_READ_BYTES_MAX, "device read of {} bytes", request.len);
            assert_in_range(self.file_len_bytes, request.offset, request.len as u64);
            if !self.push(&mut ring, request) {
                break;
            }
            queued += 1;
            if ring.queued.len() == DEVICE_READS_QUEUED_MAX {
                self.submit(&mut ring);
            }
        }
        queued
    }

    /// Submits the reads queued so far, if any, in one system call.
    pub fn submit_queued(&self) {
        let mut ring = self.ring.lock();
        if !ring.queued.is_empty() {
            self.submit(&mut ring);
        }
    }

    /// Pushes `request` to the submission queue: false when the limits leave no room for it.
    fn push(&self, ring: &mut Ring, request: &DeviceRead) -> bool {
        let first = request.offset / PAGE_BYTES * PAGE_BYTES;
        let end = (request.offset + request.len as u64).div_ceil(PAGE_BYTES) * PAGE_BYTES;
        let buffer_bytes = (end - first) as usize;
        // The submission queue is full only of entries whose submissions failed.
        let refused = ring.in_flight() == DEVICE_READS_IN_FLIGHT_MAX || ring.ring.submission().is_full();
        if refused || ring.bytes_in_flight + buffer_bytes > DEVICE_READ_BYTES_IN_FLIGHT_MAX {
            return false;
        }
        assert!(ring.queued.len() < DEVICE_READS_QUEUED_MAX, "a full batch is submitted before the next read is queued");
        ring.bytes_in_flight += buffer_bytes;
        let mut buffer = AlignedBuffer::zeroed(buffer_bytes);
        let transfer = buffer.as_mut_slice();
        let entry = opcode::Read::new(types::Fd(self.fd), transfer.as_mut_ptr(), transfer.len() as u32).offset(first);
        let slot = ring.free_slots.pop().unwrap_or_else(|| {
            ring.slots.push(None);
            ring.slots.len() - 1
        });
        let entry = entry.build().user_data(slot as u64);
        // SAFETY: the entry points into `buffer`, which the slot owns until the read's
        // completion is taken (`take_completed`, or the wait in `Drop`); moving the
        // `AlignedBuffer` into the slot moves the handle, not the heap bytes it points to.
        let pushed = unsafe { ring.ring.submission().push(&entry) };
        assert!(pushed.is_ok(), "the submission queue had room");
        ring.slots[slot] = Some(InFlight { request: *request, buffer, skip: (request.offset - first) as usize, failure_reported: false });
        ring.queued.push(slot);
        true
    }

    /// One system call for every queued read. When it fails, the kernel took none of them:
    /// they are reported failed (their callers read for themselves) and woken through the
    /// completion descriptor; their entries stay queued and their buffers live until they
    /// complete with a later submission or `Drop`'s wait.
    fn submit(&self, ring: &mut Ring) {
        assert!(!ring.queued.is_empty());
        let queued = std::mem::take(&mut ring.queued);
        match ring.ring.submit() {
            Ok(_) => {
                ring.counts.submissions += 1;
                ring.counts.reads += queued.len() as u64;
            }
            Err(error) => {
                tracing::warn!(file = %self.what, %error, reads = queued.len(), "device read submission failed");
                for slot in queued {
                    let in_flight = ring.slots[slot].as_mut().expect("a queued read holds its slot");
                    in_flight.failure_reported = true;
                    let copy = error.raw_os_error().map_or_else(|| io::Error::new(error.kind(), error.to_string()), io::Error::from_raw_os_error);
                    let result = Err(MediaError::from_io(&self.what, copy));
                    ring.failed.push(CompletedRead { token: in_flight.request.token, result });
                }
                self.signal_completions();
            }
        }
    }

    /// Makes the completion descriptor readable, as the kernel does when reads complete.
    fn signal_completions(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a local array of 8 bytes to the eventfd we own.
        unsafe { libc::write(self.completions.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }

    /// Appends the reads completed (or failed to submit) so far to `out`, without waiting.
    pub fn take_completed(&self, out: &mut Vec<CompletedRead>) {
        let mut counter = [0u8; 8];
        // SAFETY: reads 8 bytes into a local array of 8 bytes; EAGAIN (nothing signalled) is fine.
        unsafe { libc::read(self.completions.as_raw_fd(), counter.as_mut_ptr().cast(), counter.len()) };
        let mut ring = self.ring.lock();
        out.append(&mut ring.failed);
        let finished: Vec<(usize, i32)> = ring.ring.completion().map(|entry| (entry.user_data() as usize, entry.result())).collect();
        for (slot, result) in finished {
            let in_flight = ring.slots[slot].take().expect("a completion names a read in flight");
            ring.free_slots.push(slot);
            ring.bytes_in_flight -= in_flight.buffer.as_slice().len();
            if !in_flight.failure_reported {
                out.push(self.completed(in_flight, result));
            }
        }
    }

    fn completed(&self, in_flight: InFlight, result: i32) -> CompletedRead {
        let InFlight { request, buffer, skip, .. } = in_flight;
        let result = if result < 0 {
            Err(MediaError::from_io(&self.what, io::Error::from_raw_os_error(-result)))
        } else if (result as usize) < skip + request.len {
            Err(MediaError::from_io(&self.what, io::Error::from(io::ErrorKind::UnexpectedEof)))
        } else {
            Ok(buffer.as_slice()[skip..skip + request.len].to_vec())
        };
        CompletedRead { token: request.token, result }
    }
}

impl Drop for DeviceReadQueue {
    /// Waits for every read still in flight: the kernel writes into their buffers until then.
    fn drop(&mut self) {
        let ring = self.ring.get_mut();
        while ring.slots.iter().any(Option::is_some) {
            if let Err(error) = ring.ring.submit_and_wait(1) {
                if error.kind() != io::ErrorKind::Interrupted {
                    // Freeing buffers the kernel may still write would be worse than leaking them.
                    tracing::error!(file = %self.what, %error, "waiting for device reads failed; their buffers are leaked");
                    ring.slots.drain(..).flatten().for_each(|in_flight| std::mem::forget(in_flight.buffer));
                    return;
                }
            }
            let finished: Vec<usize> = ring.ring.completion().map(|entry| entry.user_data() as usize).collect();
            for slot in finished {
                ring.slots[slot] = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BlockFile, Medium};

    const FILE_PAGES: u64 = 256;

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|index| (index * 7 + index / 4096) as u8).collect()
    }

    fn patterned_file(dir: &std::path::Path) -> BlockFile {
        let file = BlockFile::open(&dir.join("blocks"), FILE_PAGES * PAGE_BYTES, true).unwrap();
        file.write_at(0, &pattern((FILE_PAGES * PAGE_BYTES) as usize)).unwrap();
        file
    }

    /// Waits on the completion descriptor until `count` reads are taken.
    fn take(queue: &DeviceReadQueue, count: usize) -> Vec<CompletedRead> {
        let mut out = Vec::new();
        while out.len() < count {
            let mut poll = libc::pollfd { fd: queue.completion_fd().as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd, for at most 5 s.
            let ready = unsafe { libc::poll(&mut poll, 1, 5000) };
            assert_eq!(ready, 1, "the completion descriptor is signalled within 5 s");
            queue.take_completed(&mut out);
        }
        out
    }

    #[test]
    fn reads_at_unaligned_offsets_return_the_bytes_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let file = patterned_file(dir.path());
        let queue = file.device_reads().expect("io_uring on the machines we test on");
        let expected = pattern((FILE_PAGES * PAGE_BYTES) as usize);
        let reads: Vec<DeviceRead> = [(0, 1), (4000, 200), (8191, 4098), (100_000, 64), ((FILE_PAGES * PAGE_BYTES) - 10, 10)]
            .iter()
            .enumerate()
            .map(|(token, &(offset, len))| DeviceRead { offset, len, token: token as u64 })
            .collect();
        assert_eq!(queue.start(&reads), reads.len());
        let mut completed = take(queue, reads.len());
        completed.sort_by_key(|read| read.token);
        for (read, done) in reads.iter().zip(completed) {
            let bytes = done.result.unwrap();
            assert_eq!(bytes, expected[read.offset as usize..read.offset as usize + read.len], "read {read:?}");
        }
        assert_eq!(queue.in_flight(), 0);
    }

    #[test]
    fn reads_beyond_the_in_flight_limit_are_not_started() {
        let dir = tempfile::tempdir().unwrap();
        let file = patterned_file(dir.path());
        let queue = file.device_reads().expect("io_uring on the machines we test on");
        let reads: Vec<DeviceRead> = (0..DEVICE_READS_IN_FLIGHT_MAX as u64 + 10)
            .map(|token| DeviceRead { offset: token % FILE_PAGES * PAGE_BYTES, len: 100, token })
            .collect();
        let started = queue.start(&reads);
        assert_eq!(queue.room(), 0);
        assert_eq!(started, DEVICE_READS_IN_FLIGHT_MAX);
        assert!(queue.in_flight() <= DEVICE_READS_IN_FLIGHT_MAX);
        let completed = take(queue, started);
        assert!(completed.iter().all(|read| read.result.is_ok()));
        assert_eq!(queue.start(&reads[started..]), 10, "the rest start once room is made");
        take(queue, 10);
    }

    #[test]
    fn reads_beyond_the_bytes_in_flight_limit_are_not_started() {
        let dir = tempfile::tempdir().unwrap();
        let file = patterned_file(dir.path());
        let queue = file.device_reads().expect("io_uring on the machines we test on");
        let reads: Vec<DeviceRead> = (0..40).map(|token| DeviceRead { offset: 0, len: DEVICE_READ_BYTES_MAX, token }).collect();
        let started = queue.start(&reads);
        assert_eq!(started, DEVICE_READ_BYTES_IN_FLIGHT_MAX / DEVICE_READ_BYTES_MAX);
        assert!(take(queue, started).iter().all(|read| read.result.as_ref().is_ok_and(|bytes| bytes.len() == DEVICE_READ_BYTES_MAX)));
        assert_eq!(queue.start(&reads[started..]), 40 - started, "the rest start once the bytes are taken");
        take(queue, 40 - started);
    }

    #[test]
    fn queued_reads_wait_for_a_submission_and_share_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = patterned_file(dir.path());
        let queue = file.device_reads().expect("io_uring on the machines we test on");
        let reads: Vec<DeviceRead> = (0..3).map(|token| DeviceRead { offset: token * PAGE_BYTES, len: 100, token }).collect();
        assert_eq!(queue.queue(&reads), 3);
        // Without a submission the kernel does not see the entries.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut out = Vec::new();
        queue.take_completed(&mut out);
        assert!(out.is_empty());
        assert_eq!(queue.counts(), DeviceReadCounts::default());
        queue.submit_queued();
        assert_eq!(queue.counts(), DeviceReadCounts { submissions: 1, reads: 3 });
        assert_eq!(take(queue, 3).len(), 3);
        queue.submit_queued();
        assert_eq!(queue.counts().submissions, 1, "nothing queued, nothing submitted");
    }

    #[test]
    fn a_full_batch_is_submitted_by_the_call_that_queues_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = patterned_file(dir.path());
        let queue = file.device_reads().expect("io_uring on the machines we test on");
        let reads: Vec<DeviceRead> = (0..DEVICE_READS_QUEUED_MAX as u64 + 5).map(|token| DeviceRead { offset: token * PAGE_BYTES, len: 100, token }).collect();
        assert_eq!(queue.queue(&reads), reads.len());
        assert_eq!(queue.counts(), DeviceReadCounts { submissions: 1, reads: DEVICE_READS_QUEUED_MAX as u64 });
        assert_eq!(take(queue, DEVICE_READS_QUEUED_MAX).len(), DEVICE_READS_QUEUED_MAX);
        queue.submit_queued();
        assert_eq!(take(queue, 5).len(), 5);
    }

    /// Dropping the file with reads in flight waits for them (their buffers stay valid).
    #[test]
    fn a_queue_dropped_with_reads_in_flight_waits_for_them() {
        let dir = tempfile::tempdir().unwrap();
        let file = patterned_file(dir.path());
        let queue = file.device_reads().expect("io_uring on the machines we test on");
        let reads: Vec<DeviceRead> = (0..64).map(|token| DeviceRead { offset: token * PAGE_BYTES, len: 4096, token }).collect();
        assert_eq!(queue.start(&reads), 64);
        assert_eq!(queue.queue(&reads[..8]), 8, "queued and never submitted: Drop submits them and waits");
        drop(file);
    }
}
