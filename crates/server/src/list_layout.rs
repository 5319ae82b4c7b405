//! How a list is laid over engine records, so that a push or pop costs the same whatever the
//! list's size.
//!
//! A small list is one record (tag 5, `values`). Once its elements would pass
//! `SMALL_LIST_BYTES_MAX` it becomes a root record (tag 6: the element count and, in list order,
//! each chunk's part number, element count and element bytes) plus chunks of consecutive
//! elements stored as the key's engine parts 0..chunk count (a part lives and dies with its key,
//! as a hash's buckets do). A push or pop reads and writes the root and the chunk at that end;
//! an index (LINDEX, LSET) is found from the root's counts and reads one chunk; LRANGE reads the
//! chunks it covers. Commands that search (LREM, LINSERT, LPOS) read chunks in turn and write
//! back only those they changed.
//!
//! A chunked list becomes one record again under a quarter of the small limit.
//!
//! Chunks aim at `chunk_bytes_target`: 4 KiB, growing with the list up to 64 KiB so that the
//! root lists about `CHUNKS_TARGET` chunks. A push starts a new chunk when the end one is full;
//! `save` splits a chunk that outgrew the target (LINSERT, LSET) and merges changed neighbours
//! that fit in one; a changed chunk left under a quarter of the target also takes in a stored
//! neighbour that fits, so removals here and there leave no swarm of small chunks. Part numbers stay dense (the engine finds parts from 0 up): `save` gives the
//! numbers freed by removed chunks to new chunks or to the chunks numbered past the new count.
//!
//! Every change rewrites the root (a new version for WATCH) in the command's one engine batch
//! with the chunks it changed: a crash keeps all of a command's changes or none.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::command::{fail, CommandError, KeyStore};
use crate::commands::WRONGTYPE;
use crate::values::{decode_list_chunk, element_entry_bytes, encode_list, list_chunk_last, ChunkEntry, CorruptValue, ListRoot, Stored};

/// A list whose elements would pass this many bytes (or half the namespace's value limit, if
/// lower) is stored as a root and chunks.
pub const SMALL_LIST_BYTES_MAX: u64 = 8 * 1024;
pub const CHUNK_BYTES_TARGET_MIN: u64 = 4 * 1024;
pub const CHUNK_BYTES_TARGET_MAX: u64 = 64 * 1024;
/// Chunks a list aims at before its chunks grow past `CHUNK_BYTES_TARGET_MIN`: the root holds
/// 12 bytes per chunk and is rewritten by every change.
pub const CHUNKS_TARGET: u64 = 1024;
/// A changed chunk under this fraction of the target takes in a stored neighbour that fits.
const SMALL_CHUNK_FRACTION: u64 = 4;

/// The limits of one namespace's lists.
#[derive(Clone, Copy, Debug)]
pub struct ListLimits {
    /// Largest record the namespace stores.
    pub value_bytes_max: u64,
    /// Chunks one list may have (the engine's parts per key).
    pub chunks_max: u32,
    /// Chunks the list aims at before its chunks grow past `CHUNK_BYTES_TARGET_MIN`:
    /// `CHUNKS_TARGET` for a list; fewer for a sorted set's order index, which must hold what
    /// its hash holds within `chunks_max`.
    pub chunks_target: u64,
}

impl ListLimits {
    /// A list's limits in a namespace.
    pub fn new(value_bytes_max: u64, chunks_max: u32) -> ListLimits {
        ListLimits { value_bytes_max, chunks_max, chunks_target: CHUNKS_TARGET }
    }

    fn small_bytes_max(&self) -> u64 {
        SMALL_LIST_BYTES_MAX.min(self.value_bytes_max / 2)
    }

    fn chunk_bytes_target(&self, list_bytes: u64) -> u64 {
        (list_bytes / self.chunks_target.max(1)).clamp(CHUNK_BYTES_TARGET_MIN, CHUNK_BYTES_TARGET_MAX).min(self.value_bytes_max / 2).max(1)
    }
}

/// Which end of a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Head,
    Tail,
}

struct Chunk {
    /// The part that holds it; None while it exists only in memory (new, or a small list's).
    part: Option<u32>,
    len: u32,
    element_bytes: u64,
    /// Its element bytes as stored (0 when it is not): only a chunk that grew is split, so
    /// removing elements never needs more chunks.
    stored_bytes: u64,
    /// Read from its part the first time it is needed.
    elements: Option<VecDeque<Bytes>>,
    /// Its record as read but not decoded yet: a search compares only a chunk's last element
    /// (`last_element`) until it has found the one chunk it decodes.
    record: Option<Bytes>,
    dirty: bool,
}

impl Chunk {
    fn in_memory(elements: VecDeque<Bytes>) -> Chunk {
        let element_bytes = elements.iter().map(|element| element_entry_bytes(element)).sum();
        Chunk { part: None, len: elements.len() as u32, element_bytes, stored_bytes: 0, elements: Some(elements), record: None, dirty: true }
    }
}

/// A list as one command sees it: read lazily, changed in memory, written back by `save`.
pub struct OpenList {
    key: Bytes,
    expiry_unix_ms: u64,
    limits: ListLimits,
    /// In list order; none is empty outside a method.
    chunks: VecDeque<Chunk>,
    len: u64,
    element_bytes: u64,
    /// Parts the list had when opened (0: it was one record, or new).
    stored_parts: u32,
    changed: bool,
}

impl OpenList {
    /// The key's list; None when the key is missing, WRONGTYPE when it holds another type.
    pub fn open(store: &mut dyn KeyStore, key: &Bytes, limits: ListLimits) -> Result<Option<OpenList>, CommandError> {
        let Some(value) = store.get(key)? else { return Ok(None) };
        let (chunks, stored_parts) = match Stored::decode(value.bytes)? {
            // Not a part: written (and cut to the target) if the list is saved as chunks.
            Stored::List(elements) => (VecDeque::from([Chunk::in_memory(elements.into())]), 0),
            Stored::ChunkedList(root) => {
                let parts = root.chunks.len() as u32;
                let chunks = root.chunks.iter().map(|entry| Chunk {
                    part: Some(entry.part),
                    len: entry.elements,
                    element_bytes: u64::from(entry.element_bytes),
                    stored_bytes: u64::from(entry.element_bytes),
                    elements: None,
                    record: None,
                    dirty: false,
                });
                (chunks.collect(), parts)
            }
            _ => return fail(WRONGTYPE),
        };
        let mut list = OpenList { key: key.clone(), expiry_unix_ms: value.expiry_unix_ms, limits, chunks, len: 0, element_bytes: 0, stored_parts, changed: false };
        list.chunks.retain(|chunk| chunk.len > 0);
        list.len = list.chunks.iter().map(|chunk| u64::from(chunk.len)).sum();
        list.element_bytes = list.chunks.iter().map(|chunk| chunk.element_bytes).sum();
        Ok(Some(list))
    }

    /// The key's list, or a new empty one when the key is missing.
    pub fn open_or_new(store: &mut dyn KeyStore, key: &Bytes, limits: ListLimits) -> Result<OpenList, CommandError> {
        Ok(OpenList::open(store, key, limits)?.unwrap_or_else(|| OpenList {
            key: key.clone(),
            expiry_unix_ms: 0,
            limits,
            chunks: VecDeque::new(),
            len: 0,
            element_bytes: 0,
            stored_parts: 0,
            changed: false,
        }))
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    /// Marks the list changed though no element changed (LTRIM that keeps everything: Redis
    /// still counts it a write, for WATCH).
    pub fn touch(&mut self) {
        self.changed = true;
    }

    pub fn push(&mut self, store: &mut dyn KeyStore, end: End, element: Bytes) -> Result<(), CommandError> {
        let entry_bytes = element_entry_bytes(&element);
        let target = self.limits.chunk_bytes_target(self.element_bytes + entry_bytes);
        let at = self.end_index(end);
        let full = at.is_none_or(|at| self.chunks[at].element_bytes + entry_bytes > target);
        if full {
            let chunk = Chunk::in_memory(VecDeque::new());
            match end {
                End::Head => self.chunks.push_front(chunk),
                End::Tail => self.chunks.push_back(chunk),
            }
        }
        let at = self.end_index(end).expect("a chunk was just added");
        let chunk = &mut self.chunks[at];
        let elements = load(store, &self.key, chunk)?;
        match end {
            End::Head => elements.push_front(element),
            End::Tail => elements.push_back(element),
        }
        chunk.len += 1;
        chunk.element_bytes += entry_bytes;
        chunk.dirty = true;
        self.len += 1;
        self.element_bytes += entry_bytes;
        self.changed = true;
        Ok(())
    }

    pub fn pop(&mut self, store: &mut dyn KeyStore, end: End) -> Result<Option<Bytes>, CommandError> {
        let Some(at) = self.end_index(end) else { return Ok(None) };
        let chunk = &mut self.chunks[at];
        let elements = load(store, &self.key, chunk)?;
        let element = match end {
            End::Head => elements.pop_front(),
            End::Tail => elements.pop_back(),
        };
        let element = element.ok_or(CorruptValue("list chunk emptier than its root says"))?;
        let entry_bytes = element_entry_bytes(&element);
        chunk.len -= 1;
        chunk.element_bytes -= entry_bytes;
        chunk.dirty = true;
        self.len -= 1;
        self.element_bytes -= entry_bytes;
        self.changed = true;
        if chunk.len == 0 {
            self.chunks.remove(at);
        }
        Ok(Some(element))
    }

    fn end_index(&self, end: End) -> Option<usize> {
        match end {
            End::Head => (!self.chunks.is_empty()).then_some(0),
            End::Tail => self.chunks.len().checked_sub(1),
        }
    }

    /// The chunk holding element `index` (< len) and the element's place in it.
    fn locate(&self, index: u64) -> (usize, usize) {
        assert!(index < self.len, "index {index} past a list of {}", self.len);
        let mut before = 0;
        for (at, chunk) in self.chunks.iter().enumerate() {
            if index < before + u64::from(chunk.len) {
                return (at, (index - before) as usize);
            }
            before += u64::from(chunk.len);
        }
        unreachable!("the chunks' counts add up to len")
    }

    /// Element `index` (< len).
    pub fn get(&mut self, store: &mut dyn KeyStore, index: u64) -> Result<Bytes, CommandError> {
        let (at, offset) = self.locate(index);
        let elements = load(store, &self.key, &mut self.chunks[at])?;
        Ok(elements.get(offset).cloned().ok_or(CorruptValue("list chunk shorter than its root says"))?)
    }

    /// The first index whose element `reached` holds for (len when none), `reached` being
    /// false then true along the list: a binary search over the chunks by their last
    /// elements, then within one chunk, so it reads about log2(chunks) chunks and decodes no
    /// element's position twice.
    pub fn partition_point(&mut self, store: &mut dyn KeyStore, reached: impl Fn(&Bytes) -> Result<bool, CommandError>) -> Result<u64, CommandError> {
        let (mut low, mut high) = (0, self.chunks.len());
        while low < high {
            let middle = low + (high - low) / 2;
            if reached(&last_element(store, &self.key, &mut self.chunks[middle])?)? {
                high = middle;
            } else {
                low = middle + 1;
            }
        }
        let Some(chunk) = self.chunks.get_mut(low) else { return Ok(self.len) };
        let elements = load(store, &self.key, chunk)?;
        let (mut offset, mut end) = (0, elements.len());
        while offset < end {
            let middle = offset + (end - offset) / 2;
            if reached(&elements[middle])? {
                end = middle;
            } else {
                offset = middle + 1;
            }
        }
        let before: u64 = self.chunks.iter().take(low).map(|chunk| u64::from(chunk.len)).sum();
        Ok(before + offset as u64)
    }

    /// Replaces element `index` (< len).
    pub fn set(&mut self, store: &mut dyn KeyStore, index: u64, element: Bytes) -> Result<(), CommandError> {
        let (at, offset) = self.locate(index);
        self.edit_chunk(store, at, |elements| elements[offset] = element)
    }

    /// Elements `start..=stop` (stop < len).
    pub fn range(&mut self, store: &mut dyn KeyStore, start: u64, stop: u64) -> Result<Vec<Bytes>, CommandError> {
        let (mut at, mut offset) = self.locate(start);
        let mut wanted = (stop - start + 1) as usize;
        let mut elements = Vec::with_capacity(wanted.min(1 << 20));
        while wanted > 0 {
            let chunk = load(store, &self.key, &mut self.chunks[at])?;
            let taken: Vec<Bytes> = chunk.iter().skip(offset).take(wanted).cloned().collect();
            wanted -= taken.len();
            elements.extend(taken);
            (at, offset) = (at + 1, 0);
        }
        Ok(elements)
    }

    /// Keeps elements `start..end` (end ≤ len) only: whole chunks outside are dropped unread.
    pub fn keep_range(&mut self, store: &mut dyn KeyStore, start: u64, end: u64) -> Result<(), CommandError> {
        self.remove_range(store, end, self.len)?;
        self.remove_range(store, 0, start)
    }

    /// Removes elements `start..end` (start ≤ end ≤ len): whole chunks inside are dropped
    /// unread, and at most the two chunks at the ends are rewritten.
    pub fn remove_range(&mut self, store: &mut dyn KeyStore, start: u64, end: u64) -> Result<(), CommandError> {
        assert!(start <= end && end <= self.len, "range {start}..{end} past a list of {}", self.len);
        let mut remaining = end - start;
        if remaining == 0 {
            return Ok(());
        }
        let (mut at, mut offset) = self.locate(start);
        while remaining > 0 {
            let chunk_len = u64::from(self.chunks[at].len);
            if offset == 0 && chunk_len <= remaining {
                let chunk = self.chunks.remove(at).expect("at is in range");
                self.len -= chunk_len;
                self.element_bytes -= chunk.element_bytes;
                self.changed = true;
                remaining -= chunk_len;
                continue;
            }
            let taken = (chunk_len - offset as u64).min(remaining);
            self.edit_chunk(store, at, |elements| drop(elements.drain(offset..offset + taken as usize)))?;
            remaining -= taken;
            (at, offset) = (at + 1, 0);
        }
        Ok(())
    }

    /// Visits the elements from `end` on with their indices until `visit` answers false.
    pub fn scan(&mut self, store: &mut dyn KeyStore, end: End, mut visit: impl FnMut(u64, &Bytes) -> bool) -> Result<(), CommandError> {
        let order = self.chunk_order(end);
        let mut before = 0;
        let mut after = self.len;
        for at in order {
            let chunk = load(store, &self.key, &mut self.chunks[at])?;
            let first_index = match end {
                End::Head => before,
                End::Tail => after - chunk.len() as u64,
            };
            let visited = match end {
                End::Head => chunk.iter().enumerate().all(|(offset, element)| visit(first_index + offset as u64, element)),
                End::Tail => chunk.iter().enumerate().rev().all(|(offset, element)| visit(first_index + offset as u64, element)),
            };
            if !visited {
                return Ok(());
            }
            before += chunk.len() as u64;
            after -= chunk.len() as u64;
        }
        Ok(())
    }

    /// The chunks' indices from `end` on.
    fn chunk_order(&self, end: End) -> Vec<usize> {
        match end {
            End::Head => (0..self.chunks.len()).collect(),
            End::Tail => (0..self.chunks.len()).rev().collect(),
        }
    }

    /// Removes up to `limit` elements equal to `element` (0: all), visiting from `end`; answers
    /// how many. Only the chunks that lost elements are rewritten.
    pub fn remove_equal(&mut self, store: &mut dyn KeyStore, element: &[u8], end: End, limit: u64) -> Result<u64, CommandError> {
        let mut removed = 0;
        let order = self.chunk_order(end);
        for at in order {
            if limit != 0 && removed == limit {
                break;
            }
            let chunk = load(store, &self.key, &mut self.chunks[at])?;
            let mut found: Vec<usize> = chunk.iter().enumerate().filter(|(_, candidate)| candidate.as_ref() == element).map(|(offset, _)| offset).collect();
            if end == End::Tail {
                found.reverse();
            }
            if limit != 0 {
                found.truncate((limit - removed) as usize);
            }
            if found.is_empty() {
                continue;
            }
            removed += found.len() as u64;
            found.sort_unstable();
            self.edit_chunk(store, at, |elements| {
                for offset in found.into_iter().rev() {
                    elements.remove(offset);
                }
            })?;
        }
        self.chunks.retain(|chunk| chunk.len > 0);
        Ok(removed)
    }

    /// Inserts `element` at `index` (≤ len): it becomes element `index`.
    pub fn insert(&mut self, store: &mut dyn KeyStore, index: u64, element: Bytes) -> Result<(), CommandError> {
        assert!(index <= self.len, "index {index} past a list of {}", self.len);
        if index == self.len {
            return self.push(store, End::Tail, element);
        }
        let (at, offset) = self.locate(index);
        self.edit_chunk(store, at, |elements| elements.insert(offset, element))
    }

    /// Removes and answers element `index` (< len).
    pub fn remove(&mut self, store: &mut dyn KeyStore, index: u64) -> Result<Bytes, CommandError> {
        let (at, offset) = self.locate(index);
        let removed = self.edit_chunk(store, at, |elements| elements.remove(offset))?;
        if self.chunks[at].len == 0 {
            self.chunks.remove(at);
        }
        Ok(removed.ok_or(CorruptValue("list chunk shorter than its root says"))?)
    }

    /// Inserts `element` before or after the first element equal to `pivot`; false when there
    /// is none.
    pub fn insert_at_pivot(&mut self, store: &mut dyn KeyStore, pivot: &[u8], element: Bytes, after: bool) -> Result<bool, CommandError> {
        let mut found = None;
        self.scan(store, End::Head, |index, candidate| {
            found = (candidate.as_ref() == pivot).then_some(index);
            found.is_none()
        })?;
        let Some(index) = found else { return Ok(false) };
        let (at, offset) = self.locate(index);
        self.edit_chunk(store, at, |elements| elements.insert(offset + usize::from(after), element))?;
        Ok(true)
    }

    /// Applies `change` to chunk `at`'s elements and recounts it (bounded by the chunk's size).
    fn edit_chunk<R>(&mut self, store: &mut dyn KeyStore, at: usize, change: impl FnOnce(&mut VecDeque<Bytes>) -> R) -> Result<R, CommandError> {
        let chunk = &mut self.chunks[at];
        let elements = load(store, &self.key, chunk)?;
        let result = change(elements);
        let (len, element_bytes) = (elements.len() as u32, elements.iter().map(|element| element_entry_bytes(element)).sum::<u64>());
        self.len = self.len - u64::from(chunk.len) + u64::from(len);
        self.element_bytes = self.element_bytes - chunk.element_bytes + element_bytes;
        (chunk.len, chunk.element_bytes, chunk.dirty) = (len, element_bytes, true);
        self.changed = true;
        Ok(result)
    }

    /// Writes the changes back, keeping the key's expiry: deletes the key when no element is
    /// left (as Redis), one record while the list is small, else a root and its chunks. Every
    /// check is made before the first write.
    pub fn save(mut self, store: &mut dyn KeyStore) -> Result<(), CommandError> {
        if !self.changed {
            return Ok(());
        }
        self.chunks.retain(|chunk| chunk.len > 0);
        if self.len == 0 {
            store.delete(&self.key)?;
            return Ok(());
        }
        // A chunked list becomes one record again only under a quarter of the small limit, so
        // a queue hovering at the limit does not rewrite itself whole at every push and pop.
        let small_bytes_max = if self.stored_parts > 0 { self.limits.small_bytes_max() / 4 } else { self.limits.small_bytes_max() };
        if self.element_bytes <= small_bytes_max {
            let elements = self.all_elements(store)?;
            // `put` drops the chunks: the key is one record again.
            store.put(&self.key, &encode_list(elements.iter()), self.expiry_unix_ms)?;
            return Ok(());
        }
        self.resize_chunks(store)?;
        self.number_parts(store)?;
        let mut writes = Vec::new();
        for chunk in self.chunks.iter().filter(|chunk| chunk.dirty) {
            let encoded = encode_list(chunk.elements.as_ref().expect("a dirty chunk is loaded").iter());
            if encoded.len() as u64 > self.limits.value_bytes_max {
                return fail(format!(
                    "ERR a chunk of this list would be {} bytes, over the namespace's value limit of {} bytes",
                    encoded.len(),
                    self.limits.value_bytes_max
                ));
            }
            writes.push((chunk.part.expect("numbered above"), encoded));
        }
        for (part, encoded) in writes {
            store.put_part(&self.key, part, &encoded)?;
        }
        for part in (self.chunks.len() as u32..self.stored_parts).rev() {
            store.delete_part(&self.key, part)?;
        }
        store.put_keeping_parts(&self.key, &self.root().encode(), self.expiry_unix_ms)?;
        Ok(())
    }

    fn all_elements(&mut self, store: &mut dyn KeyStore) -> Result<Vec<Bytes>, CommandError> {
        let mut all = Vec::with_capacity(self.len.min(1 << 20) as usize);
        for chunk in &mut self.chunks {
            all.extend(load(store, &self.key, chunk)?.iter().cloned());
        }
        Ok(all)
    }

    /// Splits the chunks that grew past the target and merges changed neighbours that fit in
    /// one; a changed chunk left under a quarter of the target first takes in a stored
    /// neighbour that fits with it. Other chunks stay where they are (a write to a big list
    /// changes one or two).
    fn resize_chunks(&mut self, store: &mut dyn KeyStore) -> Result<(), CommandError> {
        let target = self.limits.chunk_bytes_target(self.element_bytes);
        // Only the chunks the command changed take in a neighbour: a neighbour taken in does
        // not take in the next, or a list of small chunks would be rewritten whole at once.
        let small_changed: Vec<usize> = (0..self.chunks.len()).filter(|&at| self.chunks[at].dirty && self.chunks[at].element_bytes < target / SMALL_CHUNK_FRACTION).collect();
        for at in small_changed {
            self.change_stored_neighbour_that_fits(store, at, target)?;
        }
        let mut at = 0;
        while at < self.chunks.len() {
            if !self.chunks[at].dirty {
                at += 1;
                continue;
            }
            let fits_previous = at > 0 && self.chunks[at - 1].dirty && self.chunks[at - 1].element_bytes + self.chunks[at].element_bytes <= target;
            let chunk = self.chunks.remove(at).expect("at is in range");
            if fits_previous {
                let previous = &mut self.chunks[at - 1];
                previous.elements.as_mut().expect("a dirty chunk is loaded").extend(chunk.elements.expect("a dirty chunk is loaded"));
                (previous.len, previous.element_bytes) = (previous.len + chunk.len, previous.element_bytes + chunk.element_bytes);
                continue;
            }
            for piece in split_chunk(chunk, target) {
                self.chunks.insert(at, piece);
                at += 1;
            }
        }
        Ok(())
    }

    /// Loads and marks changed the stored neighbour (previous first) that fits with the changed
    /// chunk `at` within `target`, so that `resize_chunks` merges the two: chunks that lose
    /// elements here and there (a sorted set's order index under ZREM) do not stay small, each
    /// costing its root entry and a probe of every search.
    fn change_stored_neighbour_that_fits(&mut self, store: &mut dyn KeyStore, at: usize, target: u64) -> Result<(), CommandError> {
        let bytes = self.chunks[at].element_bytes;
        let fits = |chunk: &Chunk| !chunk.dirty && chunk.element_bytes + bytes <= target;
        let neighbour = [at.checked_sub(1), Some(at + 1)].into_iter().flatten().find(|&other| self.chunks.get(other).is_some_and(fits));
        if let Some(other) = neighbour {
            load(store, &self.key, &mut self.chunks[other])?;
            self.chunks[other].dirty = true;
        }
        Ok(())
    }

    /// Gives every chunk a part in 0..chunk count: chunks already stored there keep theirs;
    /// new chunks and those numbered past the count take the numbers left free (and are
    /// rewritten).
    fn number_parts(&mut self, store: &mut dyn KeyStore) -> Result<(), CommandError> {
        let count = self.chunks.len();
        if count > self.limits.chunks_max as usize {
            return fail(format!(
                "ERR list would need {count} chunks of at most {} bytes, over the limit of {} chunks for one list",
                self.limits.chunk_bytes_target(self.element_bytes),
                self.limits.chunks_max
            ));
        }
        let mut taken = vec![false; count];
        for chunk in &mut self.chunks {
            match chunk.part.filter(|&part| (part as usize) < count && !taken[part as usize]) {
                Some(part) => taken[part as usize] = true,
                None => {
                    load(store, &self.key, chunk)?;
                    (chunk.part, chunk.dirty) = (None, true);
                }
            }
        }
        let mut free = (0..count as u32).filter(|&part| !taken[part as usize]);
        for chunk in self.chunks.iter_mut().filter(|chunk| chunk.part.is_none()) {
            chunk.part = Some(free.next().expect("as many free numbers as unnumbered chunks"));
        }
        Ok(())
    }

    fn root(&self) -> ListRoot {
        let chunks = self.chunks.iter().map(|chunk| ChunkEntry {
            part: chunk.part.expect("numbered before the root is written"),
            elements: chunk.len,
            element_bytes: u32::try_from(chunk.element_bytes).expect("a chunk is under the value limit"),
        });
        ListRoot { len: self.len, chunks: chunks.collect() }
    }
}

/// A loaded chunk that grew past `target` cut into as few chunks of equal size as keep each
/// within `target` element bytes (at least one element each). Equal pieces leave room on both
/// sides: a chunk that grows by one element at a time in its middle (a sorted set's order
/// index) is split in halves, not into a full chunk and a one-element one at every growth.
fn split_chunk(chunk: Chunk, target: u64) -> Vec<Chunk> {
    if chunk.element_bytes <= target || chunk.element_bytes <= chunk.stored_bytes {
        return vec![chunk];
    }
    let piece_bytes = chunk.element_bytes.div_ceil(chunk.element_bytes.div_ceil(target));
    let mut pieces = Vec::new();
    let mut current = VecDeque::new();
    let mut current_bytes = 0;
    for element in chunk.elements.expect("loaded before splitting") {
        let entry_bytes = element_entry_bytes(&element);
        if !current.is_empty() && current_bytes + entry_bytes > piece_bytes {
            pieces.push(Chunk::in_memory(std::mem::take(&mut current)));
            current_bytes = 0;
        }
        current_bytes += entry_bytes;
        current.push_back(element);
    }
    // Pieces cut at element boundaries may leave a small remainder: it joins the piece before
    // it when both fit in the target.
    match pieces.last_mut() {
        Some(previous) if previous.element_bytes + current_bytes <= target => {
            let elements = previous.elements.take().expect("made in memory").into_iter().chain(current).collect();
            *previous = Chunk::in_memory(elements);
        }
        _ => pieces.push(Chunk::in_memory(current)),
    }
    // The first piece may stay in the chunk's part.
    pieces[0].part = chunk.part;
    pieces
}

/// The chunk's elements, read from its part the first time.
fn load<'a>(store: &mut dyn KeyStore, key: &[u8], chunk: &'a mut Chunk) -> Result<&'a mut VecDeque<Bytes>, CommandError> {
    if chunk.elements.is_none() {
        let record = match chunk.record.take() {
            Some(record) => record,
            None => read_record(store, key, chunk)?,
        };
        let elements = decode_list_chunk(&record)?;
        if elements.len() != chunk.len as usize {
            return Err(CorruptValue("list chunk disagrees with its root").into());
        }
        chunk.elements = Some(elements.into());
    }
    Ok(chunk.elements.as_mut().expect("loaded above"))
}

/// The chunk's last element, decoding no other when the chunk is not loaded yet (its record
/// is kept for `load`).
fn last_element(store: &mut dyn KeyStore, key: &[u8], chunk: &mut Chunk) -> Result<Bytes, CommandError> {
    if let Some(elements) = &chunk.elements {
        return Ok(elements.back().expect("no chunk is empty outside a method").clone());
    }
    if chunk.record.is_none() {
        chunk.record = Some(read_record(store, key, chunk)?);
    }
    let (count, last) = list_chunk_last(chunk.record.as_ref().expect("read above"))?;
    match last {
        Some(last) if count == chunk.len as usize => Ok(last),
        _ => Err(CorruptValue("list chunk disagrees with its root").into()),
    }
}

fn read_record(store: &mut dyn KeyStore, key: &[u8], chunk: &Chunk) -> Result<Bytes, CommandError> {
    let part = chunk.part.expect("a chunk not in memory is stored");
    Ok(Bytes::from(store.get_part(key, part)?.ok_or(CorruptValue("list chunk missing"))?))
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::memory_store::MemoryStore;

    const LIMITS: ListLimits = ListLimits { value_bytes_max: 1 << 20, chunks_max: 4096, chunks_target: CHUNKS_TARGET };

    fn key() -> Bytes {
        Bytes::from_static(b"list")
    }

    fn open(store: &mut MemoryStore) -> OpenList {
        OpenList::open_or_new(store, &key(), LIMITS).unwrap()
    }

    fn contents(store: &mut MemoryStore) -> Vec<Bytes> {
        match OpenList::open(store, &key(), LIMITS).unwrap() {
            Some(mut list) if list.len() > 0 => {
                let len = list.len();
                list.range(store, 0, len - 1).unwrap()
            }
            _ => Vec::new(),
        }
    }

    /// The stored list is well formed: parts 0..chunk count exactly, each as its root says.
    fn assert_well_formed(store: &MemoryStore) {
        let Some(value) = store.keys.get(b"list".as_slice()) else {
            assert!(store.parts.is_empty(), "parts left without their key");
            return;
        };
        match Stored::decode(value.bytes.clone()).unwrap() {
            Stored::List(elements) => {
                assert!(!elements.is_empty());
                assert!(store.parts.is_empty(), "a small list keeps no parts");
            }
            Stored::ChunkedList(root) => {
                let parts: Vec<u32> = store.parts.keys().map(|(_, part)| *part).collect();
                assert_eq!(parts, (0..root.chunks.len() as u32).collect::<Vec<_>>(), "parts are dense");
                for entry in &root.chunks {
                    let elements = decode_list_chunk(&Bytes::from(store.parts[&(b"list".to_vec(), entry.part)].clone())).unwrap();
                    assert_eq!(elements.len() as u32, entry.elements);
                    assert_eq!(elements.iter().map(|element| element_entry_bytes(element)).sum::<u64>(), u64::from(entry.element_bytes));
                }
            }
            _ => panic!("not a list"),
        }
    }

    #[test]
    fn partition_point_finds_the_first_reached_index_across_chunks_loaded_or_not() {
        let mut store = MemoryStore::default();
        let mut list = open(&mut store);
        let elements: Vec<Bytes> = (0..3000u32).map(|number| Bytes::from(format!("{:08}", number * 2))).collect();
        for element in &elements {
            list.push(&mut store, End::Tail, element.clone()).unwrap();
        }
        list.save(&mut store).unwrap();
        for probe in [0u32, 1, 2, 777, 1999, 3000, 5997, 5998, 5999, 6000, 9000] {
            let target = format!("{probe:08}");
            let expected = elements.partition_point(|element| element.as_ref() < target.as_bytes()) as u64;
            // Freshly opened (chunks read by their last element only) and after a full read.
            let mut list = open(&mut store);
            assert!(list.chunks.len() > 4, "the list is chunked");
            assert_eq!(list.partition_point(&mut store, |element| Ok(element.as_ref() >= target.as_bytes())).unwrap(), expected, "probe {probe}");
            assert_eq!(list.range(&mut store, 0, list.len() - 1).unwrap(), elements);
            assert_eq!(list.partition_point(&mut store, |element| Ok(element.as_ref() >= target.as_bytes())).unwrap(), expected, "probe {probe}");
        }
        let mut list = open(&mut store);
        let refused = list.partition_point(&mut store, |_| Err(CorruptValue("refused").into()));
        assert!(refused.is_err(), "the predicate's error is the search's");
    }

    #[test]
    fn random_commands_keep_the_list_as_a_model_deque_and_its_parts_dense() {
        let mut random = rand::rngs::StdRng::seed_from_u64(7);
        let mut store = MemoryStore::default();
        let mut model: VecDeque<Bytes> = VecDeque::new();
        for step in 0..3000 {
            let mut list = open(&mut store);
            let element = Bytes::from(vec![b'a' + random.gen_range(0..4u8); random.gen_range(0..600)]);
            let end = if random.gen_bool(0.5) { End::Head } else { End::Tail };
            match random.gen_range(0..12) {
                0..=3 => {
                    for _ in 0..random.gen_range(1..40) {
                        list.push(&mut store, end, element.clone()).unwrap();
                        match end {
                            End::Head => model.push_front(element.clone()),
                            End::Tail => model.push_back(element.clone()),
                        }
                    }
                }
                4 | 5 => {
                    for _ in 0..random.gen_range(1..30) {
                        let expected = if end == End::Head { model.pop_front() } else { model.pop_back() };
                        assert_eq!(list.pop(&mut store, end).unwrap(), expected);
                    }
                }
                6 if !model.is_empty() => {
                    let index = random.gen_range(0..model.len());
                    list.set(&mut store, index as u64, element.clone()).unwrap();
                    model[index] = element;
                }
                7 if !model.is_empty() => {
                    let (start, end) = (random.gen_range(0..model.len()), random.gen_range(0..=model.len()));
                    let end = end.max(start);
                    if random.gen_bool(0.5) {
                        list.keep_range(&mut store, start as u64, end as u64).unwrap();
                        model = model.range(start..end).cloned().collect();
                    } else {
                        list.remove_range(&mut store, start as u64, end as u64).unwrap();
                        model.drain(start..end);
                    }
                }
                8 => {
                    let limit = random.gen_range(0..3);
                    let removed = list.remove_equal(&mut store, &element, end, limit).unwrap();
                    let mut left = if limit == 0 { usize::MAX } else { limit as usize };
                    let mut kept: Vec<Bytes> = Vec::new();
                    let ordered: Vec<Bytes> = if end == End::Head { model.iter().cloned().collect() } else { model.iter().rev().cloned().collect() };
                    for candidate in ordered {
                        if candidate == element && left > 0 {
                            left -= 1;
                        } else {
                            kept.push(candidate);
                        }
                    }
                    if end == End::Tail {
                        kept.reverse();
                    }
                    assert_eq!(removed as usize, model.len() - kept.len());
                    model = kept.into();
                }
                9 => {
                    let index = random.gen_range(0..=model.len());
                    list.insert(&mut store, index as u64, element.clone()).unwrap();
                    model.insert(index, element);
                }
                10 if !model.is_empty() => {
                    let index = random.gen_range(0..model.len());
                    assert_eq!(Some(list.remove(&mut store, index as u64).unwrap()), model.remove(index));
                }
                _ => {
                    let pivot = model.get(random.gen_range(0..model.len().max(1))).cloned().unwrap_or_default();
                    let after = random.gen_bool(0.5);
                    if list.insert_at_pivot(&mut store, &pivot, element.clone(), after).unwrap() {
                        let at = model.iter().position(|candidate| *candidate == pivot).unwrap();
                        model.insert(at + usize::from(after), element);
                    }
                }
            }
            assert_eq!(list.len(), model.len() as u64, "step {step}");
            list.save(&mut store).unwrap();
            assert_well_formed(&store);
            if step % 50 == 0 {
                assert_eq!(contents(&mut store), Vec::from(model.clone()), "step {step}");
            }
        }
        assert_eq!(contents(&mut store), Vec::from(model));
    }

    #[test]
    fn a_push_or_pop_writes_the_root_and_one_chunk_whatever_the_size() {
        let mut store = MemoryStore::default();
        let mut list = open(&mut store);
        for number in 0..50_000u32 {
            list.push(&mut store, End::Tail, Bytes::from(format!("element:{number}"))).unwrap();
        }
        list.save(&mut store).unwrap();
        assert!(store.parts.len() > 100);
        for end in [End::Head, End::Tail] {
            let (parts_before, keys_before) = (store.part_writes, store.key_writes);
            let mut list = open(&mut store);
            list.push(&mut store, end, Bytes::from_static(b"new")).unwrap();
            list.save(&mut store).unwrap();
            let mut list = open(&mut store);
            list.pop(&mut store, end).unwrap();
            list.save(&mut store).unwrap();
            assert!(store.part_writes - parts_before <= 3, "{}", store.part_writes - parts_before);
            assert_eq!(store.key_writes - keys_before, 2);
        }
        let mut list = open(&mut store);
        assert_eq!(list.get(&mut store, 31_337).unwrap().as_ref(), b"element:31337");
    }

    /// Pushes `element` at the tail `count` times, one command each, as clients fill a list:
    /// small, then chunked.
    fn push_one_per_command(store: &mut MemoryStore, limits: ListLimits, element: &Bytes, count: usize) {
        for _ in 0..count {
            let mut list = OpenList::open_or_new(store, &key(), limits).unwrap();
            list.push(store, End::Tail, element.clone()).unwrap();
            list.save(store).unwrap();
        }
    }

    #[test]
    fn a_pop_next_to_many_small_chunks_merges_one_neighbour_not_all_of_them() {
        // A list that grew one push at a time keeps the small chunks it made while the target
        // was small: popping through them must not take in neighbour after neighbour.
        let limits = ListLimits { value_bytes_max: 1 << 20, chunks_max: 4096, chunks_target: 16 };
        let mut store = MemoryStore::default();
        push_one_per_command(&mut store, limits, &Bytes::from(vec![b'x'; 440]), 2_400);
        let chunks_after_growth = store.parts.len();
        assert!(chunks_after_growth > 30, "{chunks_after_growth} chunks");
        for _ in 0..1_200 {
            let before = store.part_writes;
            let mut list = OpenList::open(&mut store, &key(), limits).unwrap().unwrap();
            list.pop(&mut store, End::Head).unwrap();
            list.save(&mut store).unwrap();
            assert!(store.part_writes - before <= 3, "{} parts written by one pop", store.part_writes - before);
        }
        assert_well_formed(&store);
    }

    #[test]
    fn removing_elements_never_needs_more_chunks_than_the_list_has() {
        let limits = ListLimits::new(1 << 20, 20);
        let mut store = MemoryStore::default();
        let element = Bytes::from(vec![b'x'; 1000]);
        push_one_per_command(&mut store, limits, &element, 80);
        let mut list = OpenList::open(&mut store, &key(), limits).unwrap().unwrap();
        for _ in 0..4 {
            list.push(&mut store, End::Tail, element.clone()).unwrap();
        }
        assert!(list.save(&mut store).is_err(), "a 21st chunk is refused");
        for end in [End::Head, End::Tail, End::Head] {
            let mut list = OpenList::open(&mut store, &key(), limits).unwrap().unwrap();
            list.pop(&mut store, end).unwrap();
            list.save(&mut store).unwrap();
            assert_well_formed(&store);
        }
    }
}
