//! Walking a write block's records a window at a time. Defragmentation, live-byte audits and full
//! scans read a block in windows of `BLOCK_WALK_WINDOW_BYTES` instead of whole, so the memory
//! they hold is bounded by the window (for a moment by the largest record, which is read whole),
//! not by the write block size. A windowed walk visits the same records and reports the same
//! `Walked` as `walk_records` over the whole image with `past_damage` (a test and the `records`
//! fuzz target check this).
//!
//! Each record is handed to `ahead` as soon as it is read and to `visit` `WALK_LOOKAHEAD_RECORDS`
//! records later: the callers look every record's key up in the index, a memory miss each when
//! waited for alone, and `ahead` starts loading those index slots.

use std::collections::VecDeque;

use hybridkv_media::PAGE_BYTES;

use crate::error::Result;
use crate::log::record::{self, decode_header, u32_at, DecodeError, RecordView, BLOCK_SEQ_OFFSET, RECORD_ALIGN_BYTES, RECORD_HEADER_BYTES};
use crate::log::record_log::Walked;

/// Bytes of a block a windowed walk reads at a time (a record longer than this is read whole).
pub(crate) const BLOCK_WALK_WINDOW_BYTES: u64 = 1 << 20;
/// Records between a record's `ahead` and its `visit`.
pub(crate) const WALK_LOOKAHEAD_RECORDS: usize = 8;

const _: () = assert!(BLOCK_WALK_WINDOW_BYTES.is_multiple_of(PAGE_BYTES) && BLOCK_WALK_WINDOW_BYTES >= PAGE_BYTES);

/// Reads `len` bytes from `first_byte` to `end` (rounded out to whole pages, but not past `end`)
/// into a page-aligned window of `buffer`, as a block file with direct I/O needs; returns where in
/// `buffer` the byte at `first_byte` is and where the bytes read end.
pub(crate) fn read_page_window(
    buffer: &mut Vec<u8>,
    first_byte: u64,
    end: u64,
    read: &mut impl FnMut(u64, &mut [u8]) -> Result<()>,
) -> Result<(usize, usize)> {
    assert!(first_byte <= end, "a window starts inside what it reads");
    let first_page = first_byte / PAGE_BYTES * PAGE_BYTES;
    let window_bytes = (end - first_page) as usize;
    buffer.resize(window_bytes + PAGE_BYTES as usize, 0);
    let shift = buffer.as_ptr().align_offset(PAGE_BYTES as usize);
    assert!(shift < PAGE_BYTES as usize);
    read(first_page, &mut buffer[shift..shift + window_bytes])?;
    Ok((shift + (first_byte - first_page) as usize, shift + window_bytes))
}

/// The buffer a window of `window_bytes` from any offset takes: the page the window starts in is
/// read whole, and the page-aligned part of the buffer starts up to a page into it.
pub(crate) fn window_buffer_bytes(window_bytes: u64) -> usize {
    (window_bytes + 2 * PAGE_BYTES) as usize
}

/// A walk over the records of one block between `records_start` and `block_bytes`, reading
/// through `read(offset, out)` into `buffer`.
pub(crate) struct BlockWalk<'b, R> {
    pub(crate) records_start: u64,
    pub(crate) block_bytes: u64,
    pub(crate) seq: u64,
    pub(crate) window_bytes: u64,
    pub(crate) buffer: &'b mut Vec<u8>,
    pub(crate) read: R,
}

/// Where a walk is, in block offsets.
struct Cursor {
    /// The next byte not walked yet.
    at: u64,
    /// The start of the invalid record being skipped, while looking for the next valid one.
    damaged_since: Option<u64>,
    skipped_bytes: u64,
}

enum WindowEnd {
    /// The next window must hold this many bytes from the cursor.
    NeedsMore(u64),
    BlockEnd,
    Stopped,
}

impl<R: FnMut(u64, &mut [u8]) -> Result<()>> BlockWalk<'_, R> {
    /// Walks the block; `visit(offset after records_start, record, what ahead returned)` returns
    /// false to stop the walk.
    pub(crate) fn run<T>(
        mut self,
        mut ahead: impl FnMut(&RecordView<'_>) -> T,
        mut visit: impl FnMut(u64, &RecordView<'_>, T) -> Result<bool>,
    ) -> Result<Walked> {
        assert!(self.window_bytes.is_multiple_of(PAGE_BYTES) && self.window_bytes > 0);
        let mut cursor = Cursor { at: self.records_start, damaged_since: None, skipped_bytes: 0 };
        let mut wanted = self.window_bytes;
        let walked = loop {
            if cursor.at + RECORD_HEADER_BYTES as u64 > self.block_bytes {
                break self.walked(&cursor);
            }
            // Whole pages: a block file with direct I/O reads them straight into the buffer.
            let end = self.block_bytes.min((cursor.at + wanted).next_multiple_of(PAGE_BYTES));
            let (start, image_end) = read_page_window(self.buffer, cursor.at, end, &mut self.read)?;
            let last = end == self.block_bytes;
            match walk_window(&self.buffer[start..image_end], last, self.records_start, self.seq, &mut cursor, &mut ahead, &mut visit)? {
                WindowEnd::NeedsMore(bytes) => wanted = bytes.max(self.window_bytes),
                WindowEnd::BlockEnd | WindowEnd::Stopped => break self.walked(&cursor),
            }
        };
        // A record longer than the window grew the buffer: the walk keeps no more than a window.
        let kept_bytes = window_buffer_bytes(self.window_bytes);
        if self.buffer.capacity() > kept_bytes {
            self.buffer.clear();
            self.buffer.shrink_to(kept_bytes);
        }
        Ok(walked)
    }

    fn walked(&self, cursor: &Cursor) -> Walked {
        Walked { end: cursor.damaged_since.unwrap_or(cursor.at) - self.records_start, skipped_bytes: cursor.skipped_bytes }
    }
}

/// Walks the records of one window (whose first byte is at the cursor), `last` when it ends at
/// the block's end, and moves the cursor past what it walked.
fn walk_window<T>(
    image: &[u8],
    last: bool,
    records_start: u64,
    seq: u64,
    cursor: &mut Cursor,
    ahead: &mut impl FnMut(&RecordView<'_>) -> T,
    visit: &mut impl FnMut(u64, &RecordView<'_>, T) -> Result<bool>,
) -> Result<WindowEnd> {
    let seq_low = seq as u32;
    let mut waiting: VecDeque<(usize, RecordView<'_>, T)> = VecDeque::with_capacity(WALK_LOOKAHEAD_RECORDS + 1);
    let mut offset = 0usize;
    let mut stopped = false;
    let window_at = cursor.at;
    let mut visit_first = |waiting: &mut VecDeque<(usize, RecordView<'_>, T)>| -> Result<bool> {
        let (at, view, ahead_value) = waiting.pop_front().expect("a record waits");
        visit(window_at + at as u64 - records_start, &view, ahead_value)
    };
    let end = loop {
        if offset + RECORD_HEADER_BYTES > image.len() {
            break if last { WindowEnd::BlockEnd } else { WindowEnd::NeedsMore(RECORD_HEADER_BYTES as u64) };
        }
        if cursor.damaged_since.is_some() {
            // Looking for the next valid record: the cheap filter first (zeroes and an earlier
            // use's leftovers fail it).
            if u32_at(image, offset + BLOCK_SEQ_OFFSET) == seq_low {
                match record::decode(&image[offset..], seq_low) {
                    Ok(_) => {
                        let damaged_since = cursor.damaged_since.take().expect("skipping damage");
                        cursor.skipped_bytes += cursor.at + offset as u64 - damaged_since;
                        continue;
                    }
                    Err(DecodeError::Truncated) if !last => break WindowEnd::NeedsMore(header_record_bytes(&image[offset..])),
                    Err(_) => {}
                }
            }
            offset += RECORD_ALIGN_BYTES;
            continue;
        }
        match record::decode(&image[offset..], seq_low) {
            Ok(view) if view.header.record_bytes() <= image.len() - offset => {
                let size = view.header.record_bytes();
                let ahead_value = ahead(&view);
                waiting.push_back((offset, view, ahead_value));
                offset += size;
                if waiting.len() > WALK_LOOKAHEAD_RECORDS && !visit_first(&mut waiting)? {
                    stopped = true;
                    break WindowEnd::Stopped;
                }
            }
            Ok(view) if !last => break WindowEnd::NeedsMore(view.header.record_bytes() as u64),
            Err(DecodeError::Truncated) if !last => break WindowEnd::NeedsMore(header_record_bytes(&image[offset..])),
            // A record ends with its padding: one whose padding runs past the block is cut short.
            Ok(_) => break WindowEnd::BlockEnd,
            Err(_) => {
                cursor.damaged_since = Some(cursor.at + offset as u64);
                offset += RECORD_ALIGN_BYTES;
            }
        }
    };
    while !stopped && !waiting.is_empty() {
        stopped = !visit_first(&mut waiting)?;
    }
    if let WindowEnd::NeedsMore(bytes) = end {
        assert!(offset > 0 || bytes > image.len() as u64, "a window that needs more makes progress");
    }
    cursor.at += offset as u64;
    Ok(if stopped { WindowEnd::Stopped } else { end })
}

/// The length of the record whose header (valid, of this block: `decode` found only its body
/// cut off) starts `bytes`.
fn header_record_bytes(bytes: &[u8]) -> u64 {
    decode_header(bytes).expect("a record cut off by its window has a valid header").record_bytes() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::record::{encode, RecordHeader};
    use crate::log::walk_records;

    const SEQ: u64 = 9;

    fn image_with_records(sizes: &[usize]) -> (Vec<u8>, Vec<usize>) {
        let mut image = Vec::new();
        let mut starts = Vec::new();
        for (n, &value_bytes) in sizes.iter().enumerate() {
            starts.push(image.len());
            let key = format!("key-{n}");
            let value = vec![n as u8; value_bytes];
            let header = RecordHeader {
                value_len: value.len() as u32,
                key_len: key.len() as u16,
                flags: 0,
                block_seq_low: SEQ as u32,
                lsn: n as u64 + 1,
                expiry_unix_ms: 0,
                generation: 1,
                batch_len: 0,
            };
            encode(&header, key.as_bytes(), &value, &mut image);
            image.resize(image.len().next_multiple_of(RECORD_ALIGN_BYTES), 0);
        }
        (image, starts)
    }

    /// The windowed walk's visits and result over `image`, read in windows of `window_bytes`
    /// through `buffer`.
    fn walk_in_windows(image: &[u8], window_bytes: u64, stop_after: usize, buffer: &mut Vec<u8>) -> (Vec<(u64, u64)>, Walked) {
        walk_measuring_reads(image, window_bytes, stop_after, buffer).0
    }

    /// As `walk_in_windows`, with the longest read.
    fn walk_measuring_reads(image: &[u8], window_bytes: u64, stop_after: usize, buffer: &mut Vec<u8>) -> ((Vec<(u64, u64)>, Walked), usize) {
        let mut visits = Vec::new();
        let mut longest_read = 0;
        let walk = BlockWalk {
            records_start: 0,
            block_bytes: image.len() as u64,
            seq: SEQ,
            window_bytes,
            buffer,
            read: |offset: u64, out: &mut [u8]| {
                longest_read = longest_read.max(out.len());
                out.copy_from_slice(&image[offset as usize..offset as usize + out.len()]);
                Ok(())
            },
        };
        let walked = walk
            .run(|view| view.header.lsn, |offset, view, lsn| {
                assert_eq!(view.header.lsn, lsn, "ahead and visit see the same record");
                visits.push((offset, lsn));
                Ok(visits.len() < stop_after)
            })
            .unwrap();
        ((visits, walked), longest_read)
    }

    fn walk_whole(image: &[u8]) -> (Vec<(u64, u64)>, Walked) {
        let mut visits = Vec::new();
        let walked = walk_records(image, SEQ, true, |offset, view| visits.push((offset, view.header.lsn)));
        (visits, walked)
    }

    #[test]
    fn windows_visit_what_the_whole_image_does_past_damage_and_long_records() {
        let sizes: Vec<usize> = (0..300).map(|n| if n % 97 == 5 { 3 * PAGE_BYTES as usize } else { 40 + n * 7 % 500 }).collect();
        let (clean, starts) = image_with_records(&sizes);
        let mut damaged = clean.clone();
        damaged[starts[10] + 3] ^= 1; // a checksum
        damaged[starts[11] + 50] ^= 1; // a body, so two records in a row are skipped
        damaged[starts[200] + BLOCK_SEQ_OFFSET] ^= 1; // a record of another block
        let mut cut = clean.clone();
        cut.truncate(starts[250] + 30); // a record torn at the block's end
        let mut zero_tail = clean.clone();
        zero_tail.truncate(starts[280]);
        zero_tail.resize(zero_tail.len() + 3000, 0);
        for image in [&clean, &damaged, &cut, &zero_tail] {
            let whole = walk_whole(image);
            for window_bytes in [PAGE_BYTES, 2 * PAGE_BYTES, 5 * PAGE_BYTES, 1 << 20] {
                let mut buffer = Vec::new();
                assert_eq!(walk_in_windows(image, window_bytes, usize::MAX, &mut buffer), whole, "window of {window_bytes} bytes");
                assert!(buffer.capacity() <= window_buffer_bytes(window_bytes), "a walk keeps at most a window");
            }
        }
        assert!(walk_whole(&damaged).1.skipped_bytes > 0 && walk_whole(&damaged).0.len() == 297);
    }

    #[test]
    fn a_visit_that_returns_false_stops_the_walk() {
        let (image, _) = image_with_records(&[100; 200]);
        let (visits, _) = walk_in_windows(&image, PAGE_BYTES, 25, &mut Vec::new());
        assert_eq!(visits.len(), 25);
        assert_eq!(visits, walk_whole(&image).0[..25]);
    }

    #[test]
    fn walks_of_records_shorter_than_the_window_reuse_one_buffer() {
        let (image, _) = image_with_records(&[700; 400]);
        let mut buffer = Vec::new();
        let (_, longest_read) = walk_measuring_reads(&image, 2 * PAGE_BYTES, usize::MAX, &mut buffer);
        assert!(longest_read.is_multiple_of(PAGE_BYTES as usize), "windows are whole pages");
        // Each read goes to a page-aligned place up to a page into the buffer.
        assert!(buffer.capacity() >= longest_read + PAGE_BYTES as usize, "the next walk's windows fit the buffer kept");
    }
}
