//! How a list is laid over engine records, so that a push or pop costs about the same whatever
//! the list's size.
//!
//! A small list is one record (tag 5, `values`). Once its elements would pass
//! `SMALL_LIST_BYTES_MAX` it becomes a B-tree of two levels under a top record (tag 9): the top
//! lists directories (part, element count, element bytes), each directory (tag 10) lists up to
//! `OpenList::directory_chunks_most` chunks (part, element count, element bytes), and each chunk (tag 5)
//! holds consecutive elements; directories and chunks are the key's engine parts (a part lives
//! and dies with its key, as a hash's buckets do). A push or pop reads and writes the top, the
//! directory and the chunk at that end; an index (LINDEX, LSET) is found from the top's and one
//! directory's counts and reads one chunk; LRANGE reads the chunks it covers. Commands that
//! search (LREM, LINSERT, LPOS) read chunks in turn and write back only those they changed.
//! Directories are read the first time a command needs one of their chunks.
//!
//! A chunked list becomes one record again under a quarter of the small limit.
//!
//! Chunks aim at `chunk_bytes_target`: 1 KiB for a plain list, 4 KiB for a stream's entries
//! and an order index, growing with the list up to 64 KiB so that the list holds about
//! `chunks_target` chunks. A push starts a new chunk when the end one is full;
//! `save` splits a chunk that outgrew the target (LINSERT, LSET) and merges changed neighbours
//! that fit in one; a changed chunk left under a quarter of the target also takes in a stored
//! neighbour of its directory that fits, so removals here and there leave no swarm of small
//! chunks. Directories are resized the same way, by chunk count: split in equal pieces past
//! that maximum, a changed one under a quarter of it merged with a neighbour that fits.
//!
//! Part numbers stay dense (the engine finds a key's parts from 0 up), but a part freed by a
//! dropped chunk or directory is not deleted unless it is the last: its stale record stays, the
//! top lists it as free and a new chunk or directory takes it. Past `FREE_PARTS_MAX` free parts,
//! `save` reads every directory and moves the highest-numbered chunks and directories into the
//! lowest free parts, then deletes the free parts left at the end.
//!
//! Every change rewrites the top (a new version for WATCH) in the command's one engine batch
//! with the directories and chunks it changed: a crash keeps all of a command's changes or none.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::ops::Range;

use bytes::Bytes;

use crate::command::{fail, CommandError, KeyStore};
use crate::commands::WRONGTYPE;
use crate::group_store::{self, Kept};
use crate::values::{
    decode_list_chunk, decode_list_directory, element_entry_bytes, encode_list, encode_list_directory, list_chunk_element_ranges, list_chunk_last, list_chunk_spliced, list_directory_bytes, ChunkEntry, Separator,
    CorruptValue, DirectoryEntry, ListIndex, ListTop, Stored,
};

/// A list whose elements would pass this many bytes (or half the namespace's value limit, if
/// lower) is stored as a top, directories and chunks.
pub const SMALL_LIST_BYTES_MAX: u64 = 8 * 1024;
/// The chunk target of a stream's entries and a sorted set's order index while they are small.
pub const CHUNK_BYTES_TARGET_MIN: u64 = 4 * 1024;
pub const CHUNK_BYTES_TARGET_MAX: u64 = 64 * 1024;
/// Chunks a stream's entries or an order index aim at before their chunks grow past
/// `CHUNK_BYTES_TARGET_MIN`.
pub const CHUNKS_TARGET: u64 = 8 * 1024;
/// A plain list's chunk target while it is small, and the chunks it aims at before its chunks
/// grow: smaller chunks than the other lists' (every pop, push and LRANGE of a group decodes
/// and rewrites its end chunk: 1 KiB chunks made pipelined LPUSH 25% and LRANGE_100 2.5 times
/// faster than 4 KiB ones on a 2-million-element list), and chunks that grow sooner, so that a
/// list pushed one element at a time still reaches about 1 GB in the 32,767 parts of 8 MiB
/// write blocks (8,192 chunks of 1 KiB would have left it at about 160 MB).
pub const PLAIN_LIST_CHUNK_BYTES_MIN: u64 = 1024;
pub const PLAIN_LIST_CHUNKS_TARGET: u64 = 4 * 1024;
/// Average elements a small list's chunk holds at least (`ListLimits::small_chunk_bytes`).
const ELEMENTS_PER_SMALL_CHUNK: u64 = 4;
/// A changed chunk under this fraction of the target takes in a stored neighbour that fits.
const SMALL_CHUNK_FRACTION: u64 = 4;
/// Chunks one directory lists at most (its record is 5 + 12 bytes a chunk, rewritten by every
/// change to one of its chunks); fewer when the namespace's value limit is smaller, and fewer
/// in a list of fewer chunks (`OpenList::directory_chunks_most`).
pub const DIRECTORY_CHUNKS_MAX: usize = 256;
/// Chunks a directory may list in any list, however few chunks it has.
const DIRECTORY_CHUNKS_MIN: usize = 32;
/// A changed directory under this fraction of its maximum takes in a neighbour that fits.
const SMALL_DIRECTORY_FRACTION: usize = 4;
/// Free parts the top may list before `save` moves chunks and directories into them.
pub const FREE_PARTS_MAX: usize = 32;
/// Chunk and directory bytes one `save` may move into free parts (at least one part is moved).
const MOVED_BYTES_MAX: u64 = 256 * 1024;

/// The limits of one namespace's lists.
#[derive(Clone, Copy, Debug)]
pub struct ListLimits {
    /// Largest record the namespace stores.
    pub value_bytes_max: u64,
    /// Parts one list may have (the engine's parts per key): chunks, directories, free parts.
    pub chunks_max: u32,
    /// The chunk target while the list is small (`PLAIN_LIST_CHUNK_BYTES_MIN` or
    /// `CHUNK_BYTES_TARGET_MIN`).
    pub chunk_bytes_min: u64,
    /// Chunks the list aims at before its chunks grow past `chunk_bytes_min`:
    /// `PLAIN_LIST_CHUNKS_TARGET` for a list, `CHUNKS_TARGET` for a stream's entries; fewer for
    /// a sorted set's order index, which must hold what its hash holds within `chunks_max`.
    pub chunks_target: u64,
    /// Chunks a directory lists at most (`DIRECTORY_CHUNKS_MAX`, fewer in tests), if its
    /// record fits the value limit.
    pub directory_chunks_max: usize,
    /// Write each chunk's and directory's last-element separator (tags 13 and 14), for a list
    /// kept in byte order and searched (`partition_point_at_least`).
    pub separators: bool,
}

impl ListLimits {
    /// The limits of a list of a namespace's values, a stream's entries for one.
    pub fn new(value_bytes_max: u64, chunks_max: u32) -> ListLimits {
        ListLimits {
            value_bytes_max,
            chunks_max,
            chunk_bytes_min: CHUNK_BYTES_TARGET_MIN,
            chunks_target: CHUNKS_TARGET,
            directory_chunks_max: DIRECTORY_CHUNKS_MAX,
            separators: false,
        }
    }

    /// A plain list's limits in a namespace (LPUSH and the other list commands).
    pub fn plain(value_bytes_max: u64, chunks_max: u32) -> ListLimits {
        ListLimits { chunk_bytes_min: PLAIN_LIST_CHUNK_BYTES_MIN, chunks_target: PLAIN_LIST_CHUNKS_TARGET, ..ListLimits::new(value_bytes_max, chunks_max) }
    }

    /// The limits of a list kept in byte order: with separators.
    pub fn searched(self) -> ListLimits {
        ListLimits { separators: true, ..self }
    }

    fn small_bytes_max(&self) -> u64 {
        SMALL_LIST_BYTES_MAX.min(self.value_bytes_max / 2)
    }

    /// The bytes a chunk aims at in a list of `elements` elements taking `list_bytes`.
    fn chunk_bytes_target(&self, list_bytes: u64, elements: u64) -> u64 {
        (list_bytes / self.chunks_target.max(1)).clamp(self.small_chunk_bytes(list_bytes, elements), CHUNK_BYTES_TARGET_MAX).min(self.value_bytes_max / 2).max(1)
    }

    /// The chunk target of a small list: `chunk_bytes_min`, raised for long elements to hold
    /// `ELEMENTS_PER_SMALL_CHUNK` of the average one (to the next power of two: elements a bit
    /// longer than the average still fit that many), up to `CHUNK_BYTES_TARGET_MIN` (chunks of
    /// one or two long elements would use the key's parts up four times sooner).
    fn small_chunk_bytes(&self, list_bytes: u64, elements: u64) -> u64 {
        let holding_a_few = (list_bytes / elements.max(1) * ELEMENTS_PER_SMALL_CHUNK).next_power_of_two();
        holding_a_few.clamp(self.chunk_bytes_min, self.chunk_bytes_min.max(CHUNK_BYTES_TARGET_MIN))
    }

    fn directory_chunks_max(&self) -> usize {
        let fitting = (1..=self.directory_chunks_max).rev().find(|&chunks| list_directory_bytes(chunks, self.separators) <= self.value_bytes_max);
        fitting.unwrap_or(1).max(2)
    }
}

/// Whether `part` is among `free_parts`, which are kept highest first: a binary search, where
/// `contains` over hundreds of free parts for each of a big list's thousands of chunks was a
/// third of the server's CPU under pipelined LPOP (every save past `FREE_PARTS_MAX` free parts
/// reads every directory).
fn is_free_part(free_parts: &[u32], part: u32) -> bool {
    debug_assert!(free_parts.is_sorted_by(|a, b| a > b), "free parts are kept highest first");
    free_parts.binary_search_by(|free| part.cmp(free)).is_ok()
}

/// Which end of a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Head,
    Tail,
}

/// A chunk's record as stored (or spliced) and its elements' byte ranges in it.
type StoredChunk = (Bytes, Vec<Range<usize>>);

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
    /// Its record while it is not decoded: as read (a search compares only a chunk's last
    /// element, `last_element`, until it has found the one chunk it searches), or as an
    /// insertion or removal left it (`dirty`; `splice_stored`), to be written as it is unless
    /// `save` must split or merge the chunk.
    record: Option<Bytes>,
    /// The byte ranges of `record`'s elements, once a search or a splice found them (None
    /// whenever `record` is): the several searches and splices of one ZADD walk the record's
    /// lengths once.
    record_ranges: Option<Vec<Range<usize>>>,
    /// Its last element's separator as its directory lists it, or as read; None when not known.
    /// Elements change only in a loaded chunk, whose separator is taken from its elements.
    separator: Option<Separator>,
    dirty: bool,
}

impl Chunk {
    fn in_memory(elements: VecDeque<Bytes>) -> Chunk {
        let element_bytes = elements.iter().map(|element| element_entry_bytes(element)).sum();
        Chunk { part: None, len: elements.len() as u32, element_bytes, stored_bytes: 0, elements: Some(elements), record: None, record_ranges: None, separator: None, dirty: true }
    }

    fn stored(entry: &ChunkEntry) -> Chunk {
        let element_bytes = u64::from(entry.element_bytes);
        Chunk {
            part: Some(entry.part),
            len: entry.elements,
            element_bytes,
            stored_bytes: element_bytes,
            elements: None,
            record: None,
            record_ranges: None,
            separator: entry.separator,
            dirty: false,
        }
    }

    /// Its last element's separator: from its elements when loaded, else as listed or read.
    fn last_separator(&self) -> Option<Separator> {
        match &self.elements {
            Some(elements) => elements.back().map(|last| Separator::of(last)),
            None => self.separator,
        }
    }
}

struct Directory {
    /// The part that holds it; None while it exists only in memory.
    part: Option<u32>,
    len: u64,
    element_bytes: u64,
    /// In list order, read from its part the first time one is needed; none is empty outside a
    /// method.
    chunks: Option<VecDeque<Chunk>>,
    /// Its last element's separator as the top lists it; None when not known. Used only while
    /// its chunks are not loaded: they are the truth once they are.
    separator: Option<Separator>,
    dirty: bool,
}

impl Directory {
    fn in_memory(chunks: VecDeque<Chunk>) -> Directory {
        let (len, element_bytes) = (chunks.iter().map(|chunk| u64::from(chunk.len)).sum(), chunks.iter().map(|chunk| chunk.element_bytes).sum());
        Directory { part: None, len, element_bytes, chunks: Some(chunks), separator: None, dirty: true }
    }

    fn last_separator(&self) -> Option<Separator> {
        match &self.chunks {
            Some(chunks) => chunks.back().and_then(Chunk::last_separator),
            None => self.separator,
        }
    }

    fn loaded(&mut self) -> &mut VecDeque<Chunk> {
        self.chunks.as_mut().expect("the directory was loaded")
    }
}

/// A chunk's place: its directory's index, then its index in the directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct At {
    directory: usize,
    chunk: usize,
}

/// A list as one command sees it: read lazily, changed in memory, written back by `save`.
pub struct OpenList {
    key: Bytes,
    expiry_unix_ms: u64,
    limits: ListLimits,
    /// In list order; none is empty outside a method.
    directories: VecDeque<Directory>,
    len: u64,
    element_bytes: u64,
    /// The key's parts are 0..part_count (0: the list was one record, or new).
    part_count: u32,
    /// Parts holding neither a directory nor a chunk, as the top lists them.
    free_parts: Vec<u32>,
    /// Parts this command has seen in use (the directories, and the chunks of the directories
    /// it read): those no longer used when it saves are freed.
    seen_parts: Vec<u32>,
    changed: bool,
}

impl OpenList {
    /// The key's list; None when the key is missing, WRONGTYPE when it holds another type.
    pub fn open(store: &mut dyn KeyStore, key: &Bytes, limits: ListLimits) -> Result<Option<OpenList>, CommandError> {
        let Some(value) = store.get(key)? else { return Ok(None) };
        let mut list = OpenList::empty(key, limits);
        list.expiry_unix_ms = value.expiry_unix_ms;
        match Stored::decode(value.bytes)? {
            // Not a part: written (and cut to the target) if the list is saved as chunks.
            Stored::List(elements) => list.directories.push_back(Directory::in_memory(VecDeque::from([Chunk::in_memory(elements.into())]))),
            Stored::ChunkedList(ListIndex::Directories(top)) => {
                list.part_count = top.part_count;
                list.free_parts = top.free_parts;
                list.seen_parts = top.directories.iter().map(|entry| entry.part).collect();
                let directories = top.directories.iter().map(|entry| Directory {
                    part: Some(entry.part),
                    len: entry.elements,
                    element_bytes: entry.element_bytes,
                    chunks: None,
                    separator: entry.separator,
                    dirty: false,
                });
                list.directories = directories.collect();
            }
            // Chunks without directories, as earlier versions stored them: directories made
            // here get parts (past the chunks') when the list is saved.
            Stored::ChunkedList(ListIndex::Chunks(root)) => {
                list.part_count = root.chunks.len() as u32;
                list.seen_parts = root.chunks.iter().map(|entry| entry.part).collect();
                let directory_chunks_max = limits.directory_chunks_max();
                for entries in root.chunks.chunks(directory_chunks_max) {
                    list.directories.push_back(Directory::in_memory(entries.iter().map(Chunk::stored).collect()));
                }
            }
            _ => return fail(WRONGTYPE),
        }
        list.drop_empty_chunks();
        list.len = list.directories.iter().map(|directory| directory.len).sum();
        list.element_bytes = list.directories.iter().map(|directory| directory.element_bytes).sum();
        Ok(Some(list))
    }

    /// `open`, taking the list an earlier push or pop of a pipelined group kept open
    /// (`save_or_keep`). The caller must end with `save_or_keep` or `save`: the kept changes
    /// live only in this list (a group whose command drops it runs again one command at a time).
    pub fn open_kept(store: &mut dyn KeyStore, key: &Bytes, limits: ListLimits) -> Result<Option<OpenList>, CommandError> {
        let wanted = |kept| match kept {
            Kept::List(list) => Ok(*list),
            other => Err(other),
        };
        group_store::open_kept(store, key, wanted, |store| OpenList::open(store, key, limits))
    }

    /// The key's list, or a new empty one when the key is missing.
    pub fn open_or_new(store: &mut dyn KeyStore, key: &Bytes, limits: ListLimits) -> Result<OpenList, CommandError> {
        Ok(OpenList::open(store, key, limits)?.unwrap_or_else(|| OpenList::empty(key, limits)))
    }

    fn empty(key: &Bytes, limits: ListLimits) -> OpenList {
        OpenList {
            key: key.clone(),
            expiry_unix_ms: 0,
            limits,
            directories: VecDeque::new(),
            len: 0,
            element_bytes: 0,
            part_count: 0,
            free_parts: Vec::new(),
            seen_parts: Vec::new(),
            changed: false,
        }
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The records holding elements (chunks), and the list's records in all (with its top and
    /// directories), as stored when it was opened or as `save` would lay out a small list.
    pub fn record_counts(&self) -> (u64, u64) {
        if self.part_count == 0 {
            let records = u64::from(self.len > 0);
            return (records, records);
        }
        let parts_in_use = u64::from(self.part_count) - self.free_parts.len() as u64;
        (parts_in_use - self.directories.len() as u64, parts_in_use + 1)
    }

    /// Marks the list changed though no element changed (LTRIM that keeps everything: Redis
    /// still counts it a write, for WATCH).
    pub fn touch(&mut self) {
        self.changed = true;
    }

    /// Directory `directory`'s chunks, read from its part the first time.
    fn chunks_of(&mut self, store: &mut dyn KeyStore, directory: usize) -> Result<&mut VecDeque<Chunk>, CommandError> {
        let loaded = &mut self.directories[directory];
        if loaded.chunks.is_none() {
            let part = loaded.part.expect("a directory not in memory is stored");
            let record = store.get_part(&self.key, part)?.ok_or(CorruptValue("list directory missing"))?;
            let entries = decode_list_directory(&record)?;
            let len: u64 = entries.iter().map(|entry| u64::from(entry.elements)).sum();
            let element_bytes: u64 = entries.iter().map(|entry| u64::from(entry.element_bytes)).sum();
            if (len, element_bytes) != (loaded.len, loaded.element_bytes) {
                return Err(CorruptValue("list directory disagrees with its top").into());
            }
            if entries.iter().any(|entry| is_free_part(&self.free_parts, entry.part)) {
                return Err(CorruptValue("a list part is both free and a chunk").into());
            }
            if let (Some(listed), Some(last)) = (loaded.separator, entries.last().and_then(|entry| entry.separator)) {
                if listed != last {
                    return Err(CorruptValue("list directory's last element disagrees with its top").into());
                }
            }
            self.seen_parts.extend(entries.iter().map(|entry| entry.part));
            loaded.chunks = Some(entries.iter().map(Chunk::stored).collect());
        }
        Ok(self.directories[directory].loaded())
    }

    /// Chunk `at`'s elements, reading its directory and its record the first time.
    fn elements_of(&mut self, store: &mut dyn KeyStore, at: At) -> Result<&mut VecDeque<Bytes>, CommandError> {
        self.chunks_of(store, at.directory)?;
        let chunk = &mut self.directories[at.directory].loaded()[at.chunk];
        load(store, &self.key, chunk)
    }

    /// Records a change of `elements` elements and `element_bytes` bytes (each may be
    /// negative) in chunk `at` (loaded), its directory and the list.
    fn count_change(&mut self, at: At, elements: i64, element_bytes: i64) {
        let directory = &mut self.directories[at.directory];
        let chunk = &mut directory.loaded()[at.chunk];
        chunk.len = chunk.len.checked_add_signed(elements as i32).expect("a chunk's count stays in range");
        chunk.element_bytes = chunk.element_bytes.checked_add_signed(element_bytes).expect("a chunk's bytes stay in range");
        chunk.dirty = true;
        directory.len = directory.len.checked_add_signed(elements).expect("a directory's count stays in range");
        directory.element_bytes = directory.element_bytes.checked_add_signed(element_bytes).expect("a directory's bytes stay in range");
        directory.dirty = true;
        self.len = self.len.checked_add_signed(elements).expect("the list's count stays in range");
        self.element_bytes = self.element_bytes.checked_add_signed(element_bytes).expect("the list's bytes stay in range");
        self.changed = true;
    }

    /// Drops chunk `at` once empty, and its directory once that has no chunk left.
    fn drop_if_empty(&mut self, at: At) {
        let directory = &mut self.directories[at.directory];
        let chunks = directory.loaded();
        if chunks[at.chunk].len == 0 {
            chunks.remove(at.chunk);
            if chunks.is_empty() {
                self.directories.remove(at.directory);
            }
        }
    }

    pub fn push(&mut self, store: &mut dyn KeyStore, end: End, element: Bytes) -> Result<(), CommandError> {
        let entry_bytes = element_entry_bytes(&element);
        let target = self.limits.chunk_bytes_target(self.element_bytes + entry_bytes, self.len + 1);
        if self.directories.is_empty() {
            self.directories.push_back(Directory::in_memory(VecDeque::new()));
        }
        let directory = end_index(self.directories.len(), end).expect("there is a directory");
        let chunks = self.chunks_of(store, directory)?;
        let full = end_index(chunks.len(), end).is_none_or(|chunk| chunks[chunk].element_bytes + entry_bytes > target);
        if full {
            let chunk = Chunk::in_memory(VecDeque::new());
            match end {
                End::Head => chunks.push_front(chunk),
                End::Tail => chunks.push_back(chunk),
            }
        }
        let at = At { directory, chunk: end_index(chunks.len(), end).expect("a chunk was just added") };
        let elements = self.elements_of(store, at)?;
        match end {
            End::Head => elements.push_front(element),
            End::Tail => elements.push_back(element),
        }
        self.count_change(at, 1, entry_bytes as i64);
        Ok(())
    }

    pub fn pop(&mut self, store: &mut dyn KeyStore, end: End) -> Result<Option<Bytes>, CommandError> {
        let Some(directory) = end_index(self.directories.len(), end) else { return Ok(None) };
        let chunks = self.chunks_of(store, directory)?;
        let at = At { directory, chunk: end_index(chunks.len(), end).expect("no directory is empty") };
        let elements = self.elements_of(store, at)?;
        let element = match end {
            End::Head => elements.pop_front(),
            End::Tail => elements.pop_back(),
        };
        let element = element.ok_or(CorruptValue("list chunk emptier than its directory says"))?;
        self.count_change(at, -1, -(element_entry_bytes(&element) as i64));
        self.drop_if_empty(at);
        Ok(Some(element))
    }

    /// The chunk holding element `index` (< len) and the element's place in it.
    fn locate(&mut self, store: &mut dyn KeyStore, index: u64) -> Result<(At, usize), CommandError> {
        assert!(index < self.len, "index {index} past a list of {}", self.len);
        let mut before = 0;
        let directory = self.directories.iter().position(|directory| {
            before += directory.len;
            index < before
        });
        let directory = directory.expect("the directories' counts add up to len");
        let mut before = before - self.directories[directory].len;
        for (chunk, entry) in self.chunks_of(store, directory)?.iter().enumerate() {
            if index < before + u64::from(entry.len) {
                return Ok((At { directory, chunk }, (index - before) as usize));
            }
            before += u64::from(entry.len);
        }
        unreachable!("a directory's chunks add up to its count")
    }

    /// The chunk at `end`, if any (its directory read).
    fn first(&mut self, store: &mut dyn KeyStore, end: End) -> Result<Option<At>, CommandError> {
        let Some(directory) = end_index(self.directories.len(), end) else { return Ok(None) };
        let chunks = self.chunks_of(store, directory)?.len();
        Ok(Some(At { directory, chunk: end_index(chunks, end).expect("no directory is empty") }))
    }

    /// The chunk after `at` going away from `end`, if any (its directory read).
    fn step(&mut self, store: &mut dyn KeyStore, at: At, end: End) -> Result<Option<At>, CommandError> {
        let chunks = self.chunks_of(store, at.directory)?.len();
        let directory = match end {
            End::Head if at.chunk + 1 < chunks => return Ok(Some(At { chunk: at.chunk + 1, ..at })),
            End::Tail if at.chunk > 0 => return Ok(Some(At { chunk: at.chunk - 1, ..at })),
            End::Head if at.directory + 1 < self.directories.len() => at.directory + 1,
            End::Tail if at.directory > 0 => at.directory - 1,
            _ => return Ok(None),
        };
        let chunks = self.chunks_of(store, directory)?.len();
        Ok(Some(At { directory, chunk: end_index(chunks, end).expect("no directory is empty") }))
    }

    /// Element `index` (< len).
    pub fn get(&mut self, store: &mut dyn KeyStore, index: u64) -> Result<Bytes, CommandError> {
        let (at, offset) = self.locate(store, index)?;
        let elements = self.elements_of(store, at)?;
        Ok(elements.get(offset).cloned().ok_or(CorruptValue("list chunk shorter than its directory says"))?)
    }

    /// The first index whose element `reached` holds for (len when none), `reached` being
    /// false then true along the list: a binary search over the directories by their last
    /// elements, then over one directory's chunks by theirs, then within one chunk, so it
    /// reads about log2(chunks) chunks and decodes no element's position twice.
    pub fn partition_point(&mut self, store: &mut dyn KeyStore, reached: impl Fn(&Bytes) -> Result<bool, CommandError>) -> Result<u64, CommandError> {
        self.search(store, &reached, None)
    }

    /// The first rank whose element is at least `target` as bytes (`len` when none is), in a
    /// list kept in byte order: a probe of a directory or chunk whose separator decides it
    /// reads nothing (`Separator::at_least`), so a search reads about one directory and one
    /// chunk where each probe read a chunk.
    pub fn partition_point_at_least(&mut self, store: &mut dyn KeyStore, target: &[u8]) -> Result<u64, CommandError> {
        self.search(store, &|element: &Bytes| Ok(element.as_ref() >= target), Some(target))
    }

    /// Binary search for the first rank `reached` holds for, over the directories' last
    /// elements, then the chunks', then the elements of one chunk. With a `target`, `reached`
    /// must hold exactly for the elements at least `target` as bytes (it may also check them),
    /// and separators decide the probes they can.
    pub fn search(&mut self, store: &mut dyn KeyStore, reached: &dyn Fn(&Bytes) -> Result<bool, CommandError>, target: Option<&[u8]>) -> Result<u64, CommandError> {
        let decided = |separator: Option<Separator>| target.zip(separator).and_then(|(target, separator)| separator.at_least(target));
        let directory = self.partition_point_of(self.directories.len(), |list, directory| {
            if let Some(reached) = decided(list.directories[directory].last_separator()) {
                return Ok(reached);
            }
            let last = list.chunks_of(store, directory)?.len() - 1;
            reached(&list.last_element(store, At { directory, chunk: last })?)
        })?;
        if directory == self.directories.len() {
            return Ok(self.len);
        }
        let chunk_count = self.chunks_of(store, directory)?.len();
        let chunk = self.partition_point_of(chunk_count, |list, chunk| {
            if let Some(reached) = decided(list.directories[directory].loaded()[chunk].last_separator()) {
                return Ok(reached);
            }
            reached(&list.last_element(store, At { directory, chunk })?)
        })?;
        let mut before: u64 = self.directories.iter().take(directory).map(|directory| directory.len).sum();
        before += self.directories[directory].loaded().iter().take(chunk).map(|chunk| u64::from(chunk.len)).sum::<u64>();
        if chunk == chunk_count {
            return Ok(before);
        }
        let at = At { directory, chunk };
        if let Some((record, ranges)) = self.undecoded_record(store, at)? {
            let offset = self.partition_point_of(ranges.len(), |_, offset| reached(&record.slice(ranges[offset].clone())));
            self.directories[at.directory].loaded()[at.chunk].record_ranges = Some(ranges);
            return Ok(before + offset? as u64);
        }
        let elements = self.elements_of(store, at)?.len();
        let offset = self.partition_point_of(elements, |list, offset| reached(&list.elements_of(store, at)?[offset]))?;
        Ok(before + offset as u64)
    }

    /// Chunk `at`'s record and its elements' byte ranges in it (taken from the chunk: the caller
    /// gives them back, or the new ones), read if need be, when the chunk is not decoded; None
    /// when it is.
    fn undecoded_record(&mut self, store: &mut dyn KeyStore, at: At) -> Result<Option<StoredChunk>, CommandError> {
        self.chunks_of(store, at.directory)?;
        let chunk = &mut self.directories[at.directory].loaded()[at.chunk];
        if chunk.elements.is_some() {
            return Ok(None);
        }
        if chunk.record.is_none() {
            chunk.record = Some(read_record(store, &self.key, chunk)?);
        }
        let record = chunk.record.clone().expect("read above");
        let ranges = match chunk.record_ranges.take() {
            Some(ranges) => ranges,
            None => list_chunk_element_ranges(&record)?,
        };
        if ranges.len() != chunk.len as usize {
            return Err(CorruptValue("list chunk disagrees with its directory").into());
        }
        Ok(Some((record, ranges)))
    }

    /// Inserts `inserted` before element `offset` of chunk `at`, or removes that element when
    /// `inserted` is None, in the chunk's record, which is not decoded (`undecoded_record`
    /// answered `record` and `ranges`): a sorted set's write changes one entry of a chunk or
    /// two, which decoding and re-encoding whole took a fifth of the server's CPU. Answers the
    /// element removed.
    fn splice_stored(&mut self, at: At, (record, ranges): StoredChunk, offset: usize, inserted: Option<&[u8]>) -> Option<Bytes> {
        let (spliced, spliced_ranges) = list_chunk_spliced(&record, &ranges, offset, inserted);
        let spliced = Bytes::from(spliced);
        let removed = inserted.is_none().then(|| record.slice(ranges[offset].clone()));
        let chunk = &mut self.directories[at.directory].loaded()[at.chunk];
        let last_changed = offset + 1 >= ranges.len();
        if self.limits.separators && (last_changed || chunk.separator.is_none()) {
            chunk.separator = spliced_ranges.last().map(|last| Separator::of(&spliced[last.clone()]));
        }
        chunk.record = Some(spliced);
        chunk.record_ranges = Some(spliced_ranges);
        let (elements, changed) = match inserted {
            Some(element) => (1, element),
            None => (-1, &record[ranges[offset].clone()]),
        };
        self.count_change(at, elements, elements * element_entry_bytes(changed) as i64);
        removed
    }

    /// The first of `count` items that `reached` holds for (count when none).
    fn partition_point_of(&mut self, count: usize, mut reached: impl FnMut(&mut OpenList, usize) -> Result<bool, CommandError>) -> Result<usize, CommandError> {
        let (mut low, mut high) = (0, count);
        while low < high {
            let middle = low + (high - low) / 2;
            if reached(self, middle)? {
                high = middle;
            } else {
                low = middle + 1;
            }
        }
        Ok(low)
    }

    /// Chunk `at`'s last element, decoding no other when the chunk is not loaded yet (its
    /// record is kept for `load`).
    fn last_element(&mut self, store: &mut dyn KeyStore, at: At) -> Result<Bytes, CommandError> {
        self.chunks_of(store, at.directory)?;
        let chunk = &mut self.directories[at.directory].loaded()[at.chunk];
        if let Some(elements) = &chunk.elements {
            return Ok(elements.back().expect("no chunk is empty outside a method").clone());
        }
        if chunk.record.is_none() {
            chunk.record = Some(read_record(store, &self.key, chunk)?);
        }
        let (count, last) = list_chunk_last(chunk.record.as_ref().expect("read above"))?;
        match last {
            Some(last) if count == chunk.len as usize && chunk.separator.is_none_or(|separator| separator == Separator::of(&last)) => {
                chunk.separator = Some(Separator::of(&last));
                Ok(last)
            }
            _ => Err(CorruptValue("list chunk disagrees with its directory").into()),
        }
    }

    /// How many of the first `count` elements fill whole chunks: what can go from the head
    /// without rewriting a chunk (XTRIM's `~`, as Redis drops only whole nodes). Directories
    /// that fit whole are not read.
    pub fn head_elements_in_whole_chunks(&mut self, store: &mut dyn KeyStore, count: u64) -> Result<u64, CommandError> {
        let mut taken = 0;
        for directory in 0..self.directories.len() {
            let directory_len = self.directories[directory].len;
            if taken + directory_len <= count {
                taken += directory_len;
                continue;
            }
            for chunk in self.chunks_of(store, directory)?.iter() {
                if taken + u64::from(chunk.len) > count {
                    break;
                }
                taken += u64::from(chunk.len);
            }
            break;
        }
        Ok(taken)
    }

    /// Replaces element `index` (< len).
    pub fn set(&mut self, store: &mut dyn KeyStore, index: u64, element: Bytes) -> Result<(), CommandError> {
        let (at, offset) = self.locate(store, index)?;
        self.edit_chunk(store, at, |elements| elements[offset] = element)
    }

    /// Elements `start..=stop` (stop < len).
    pub fn range(&mut self, store: &mut dyn KeyStore, start: u64, stop: u64) -> Result<Vec<Bytes>, CommandError> {
        let (mut at, mut offset) = self.locate(store, start)?;
        let mut wanted = (stop - start + 1) as usize;
        let mut elements = Vec::with_capacity(wanted.min(1 << 20));
        loop {
            let chunk = self.elements_of(store, at)?;
            let taken: Vec<Bytes> = chunk.iter().skip(offset).take(wanted).cloned().collect();
            wanted -= taken.len();
            elements.extend(taken);
            offset = 0;
            match self.step(store, at, End::Head)? {
                Some(next) if wanted > 0 => at = next,
                _ => break,
            }
        }
        assert_eq!(wanted, 0, "the range is within the list");
        Ok(elements)
    }

    /// Keeps elements `start..end` (end ≤ len) only: whole chunks outside are dropped unread.
    pub fn keep_range(&mut self, store: &mut dyn KeyStore, start: u64, end: u64) -> Result<(), CommandError> {
        self.remove_range(store, end, self.len)?;
        self.remove_range(store, 0, start)
    }

    /// Removes elements `start..end` (start ≤ end ≤ len): whole chunks inside are dropped
    /// unread (their directories are read), and at most the two chunks at the ends are
    /// rewritten.
    pub fn remove_range(&mut self, store: &mut dyn KeyStore, start: u64, end: u64) -> Result<(), CommandError> {
        assert!(start <= end && end <= self.len, "range {start}..{end} past a list of {}", self.len);
        let mut remaining = end - start;
        if remaining == 0 {
            return Ok(());
        }
        let (mut at, mut offset) = self.locate(store, start)?;
        while remaining > 0 {
            let chunk = &self.chunks_of(store, at.directory)?[at.chunk];
            let (chunk_len, chunk_bytes) = (u64::from(chunk.len), chunk.element_bytes);
            let taken = (chunk_len - offset as u64).min(remaining);
            remaining -= taken;
            if taken == chunk_len {
                self.count_change(at, -(chunk_len as i64), -(chunk_bytes as i64));
                let directories = self.directories.len();
                self.drop_if_empty(at);
                // The next chunk took this one's place, unless the directory ended.
                if self.directories.len() == directories && at.chunk == self.directories[at.directory].loaded().len() {
                    at = At { directory: at.directory + 1, chunk: 0 };
                } else if self.directories.len() < directories {
                    at = At { directory: at.directory, chunk: 0 };
                }
                continue;
            }
            self.edit_chunk(store, at, |elements| drop(elements.drain(offset..offset + taken as usize)))?;
            offset = 0;
            if remaining > 0 {
                at = self.step(store, at, End::Head)?.expect("the range is within the list");
            }
        }
        Ok(())
    }

    /// Visits the elements from `end` on with their indices until `visit` answers false.
    pub fn scan(&mut self, store: &mut dyn KeyStore, end: End, mut visit: impl FnMut(u64, &Bytes) -> bool) -> Result<(), CommandError> {
        let mut before = 0;
        let mut after = self.len;
        let mut cursor = self.first(store, end)?;
        while let Some(at) = cursor {
            cursor = self.step(store, at, end)?;
            let chunk = self.elements_of(store, at)?;
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

    /// Removes up to `limit` elements equal to `element` (0: all), visiting from `end`; answers
    /// how many. Only the chunks that lost elements are rewritten.
    pub fn remove_equal(&mut self, store: &mut dyn KeyStore, element: &[u8], end: End, limit: u64) -> Result<u64, CommandError> {
        let mut removed = 0;
        let mut cursor = self.first(store, end)?;
        while let Some(at) = cursor.filter(|_| limit == 0 || removed < limit) {
            cursor = self.step(store, at, end)?;
            let chunk = self.elements_of(store, at)?;
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
        self.drop_empty_chunks();
        Ok(removed)
    }

    /// Drops the empty chunks of the directories read, then the empty directories.
    fn drop_empty_chunks(&mut self) {
        for chunks in self.directories.iter_mut().filter_map(|directory| directory.chunks.as_mut()) {
            chunks.retain(|chunk| chunk.len > 0);
        }
        self.directories.retain(|directory| directory.len > 0);
    }

    /// Inserts `element` at `index` (≤ len): it becomes element `index`.
    pub fn insert(&mut self, store: &mut dyn KeyStore, index: u64, element: Bytes) -> Result<(), CommandError> {
        assert!(index <= self.len, "index {index} past a list of {}", self.len);
        // At either end, a push: a new chunk once the end one is full. Inserted into the end
        // chunk instead, a sorted set whose members come in descending order split its first
        // chunk in halves again and again and left half-full chunks behind, running out of
        // parts at half the members its hash holds.
        if index == self.len {
            return self.push(store, End::Tail, element);
        }
        if index == 0 {
            return self.push(store, End::Head, element);
        }
        let (at, offset) = self.locate(store, index)?;
        match self.undecoded_record(store, at)? {
            Some(stored) => {
                self.splice_stored(at, stored, offset, Some(&element));
                Ok(())
            }
            None => self.edit_chunk(store, at, |elements| elements.insert(offset, element)),
        }
    }

    /// Removes and answers element `index` (< len).
    pub fn remove(&mut self, store: &mut dyn KeyStore, index: u64) -> Result<Bytes, CommandError> {
        let (at, offset) = self.locate(store, index)?;
        let removed = match self.undecoded_record(store, at)? {
            Some(stored) => self.splice_stored(at, stored, offset, None),
            None => self.edit_chunk(store, at, |elements| elements.remove(offset))?,
        };
        self.drop_if_empty(at);
        Ok(removed.ok_or(CorruptValue("list chunk shorter than its directory says"))?)
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
        let (at, offset) = self.locate(store, index)?;
        self.edit_chunk(store, at, |elements| elements.insert(offset + usize::from(after), element))?;
        Ok(true)
    }

    /// Applies `change` to chunk `at`'s elements and recounts it (bounded by the chunk's size).
    fn edit_chunk<R>(&mut self, store: &mut dyn KeyStore, at: At, change: impl FnOnce(&mut VecDeque<Bytes>) -> R) -> Result<R, CommandError> {
        let elements = self.elements_of(store, at)?;
        let result = change(elements);
        let (len, element_bytes) = (elements.len() as i64, elements.iter().map(|element| element_entry_bytes(element)).sum::<u64>() as i64);
        let chunk = &self.directories[at.directory].loaded()[at.chunk];
        let (before_len, before_bytes) = (i64::from(chunk.len), chunk.element_bytes as i64);
        self.count_change(at, len - before_len, element_bytes - before_bytes);
        Ok(result)
    }

    /// Writes the changes back, keeping the key's expiry: deletes the key when no element is
    /// left (as Redis), one record while the list is small, else the top and the directories
    /// and chunks that changed. Every check is made before the first write.
    pub fn save(mut self, store: &mut dyn KeyStore) -> Result<(), CommandError> {
        if !self.changed {
            return Ok(());
        }
        self.drop_empty_chunks();
        if self.len == 0 {
            store.delete(&self.key)?;
            return Ok(());
        }
        // A chunked list becomes one record again only under a quarter of the small limit, so
        // a queue hovering at the limit does not rewrite itself whole at every push and pop.
        let small_bytes_max = if self.part_count > 0 { self.limits.small_bytes_max() / 4 } else { self.limits.small_bytes_max() };
        if self.element_bytes <= small_bytes_max {
            let elements = self.all_elements(store)?;
            // `put` drops the parts: the key is one record again.
            store.put(&self.key, &encode_list(elements.iter()), self.expiry_unix_ms)?;
            return Ok(());
        }
        let target = self.limits.chunk_bytes_target(self.element_bytes, self.len);
        for directory in 0..self.directories.len() {
            if self.directories[directory].dirty {
                self.resize_chunks(store, directory, target)?;
            }
        }
        self.resize_directories(store)?;
        let deletions = self.assign_parts(store)?;
        let writes = self.encoded_writes()?;
        for (part, encoded) in writes {
            store.put_part(&self.key, part, encoded)?;
        }
        for part in deletions {
            store.delete_part(&self.key, part)?;
        }
        store.put_keeping_parts(&self.key, &self.top().encode(), self.expiry_unix_ms)?;
        Ok(())
    }

    /// `save`, or, in a pipelined group, keeps the list open for the group's next command on
    /// its key (`KeyStore::keep`), which saves it before anything else touches the key. A
    /// list left empty is saved now: its key is deleted, as the next command must see.
    pub fn save_or_keep(self, store: &mut dyn KeyStore) -> Result<(), CommandError> {
        if !self.changed || self.len == 0 {
            return self.save(store);
        }
        group_store::keep_or_save(store, Kept::List(Box::new(self)))
    }

    fn all_elements(&mut self, store: &mut dyn KeyStore) -> Result<Vec<Bytes>, CommandError> {
        let mut all = Vec::with_capacity(self.len.min(1 << 20) as usize);
        let mut cursor = self.first(store, End::Head)?;
        while let Some(at) = cursor {
            all.extend(self.elements_of(store, at)?.iter().cloned());
            cursor = self.step(store, at, End::Head)?;
        }
        Ok(all)
    }

    /// Splits directory `directory`'s chunks that grew past the target and merges changed
    /// neighbours that fit in one; a changed chunk left under a quarter of the target first
    /// takes in a stored neighbour that fits with it. Other chunks stay where they are (a write
    /// to a big list changes one or two).
    fn resize_chunks(&mut self, store: &mut dyn KeyStore, directory: usize, target: u64) -> Result<(), CommandError> {
        let key = self.key.clone();
        let chunks = self.chunks_of(store, directory)?;
        // Only the chunks the command changed take in a neighbour: a neighbour taken in does
        // not take in the next, or a list of small chunks would be rewritten whole at once.
        let small_changed: Vec<usize> = (0..chunks.len()).filter(|&at| chunks[at].dirty && chunks[at].element_bytes < target / SMALL_CHUNK_FRACTION).collect();
        for at in small_changed {
            change_stored_neighbour_that_fits(store, &key, chunks, at, target)?;
        }
        let mut at = 0;
        while at < chunks.len() {
            if !chunks[at].dirty {
                at += 1;
                continue;
            }
            let fits_previous = at > 0 && chunks[at - 1].dirty && chunks[at - 1].element_bytes + chunks[at].element_bytes <= target;
            if fits_previous {
                load(store, &key, &mut chunks[at - 1])?;
            }
            if fits_previous || needs_split(&chunks[at], target) {
                load(store, &key, &mut chunks[at])?;
            }
            let chunk = chunks.remove(at).expect("at is in range");
            if fits_previous {
                let previous = &mut chunks[at - 1];
                previous.elements.as_mut().expect("a dirty chunk is loaded").extend(chunk.elements.expect("a dirty chunk is loaded"));
                (previous.len, previous.element_bytes) = (previous.len + chunk.len, previous.element_bytes + chunk.element_bytes);
                continue;
            }
            for piece in split_chunk(chunk, target) {
                chunks.insert(at, piece);
                at += 1;
            }
        }
        Ok(())
    }

    /// Chunks a directory lists at most in a list of this size: about the square root of twice
    /// its chunks, so that the top (20 bytes a directory) and a directory (12 bytes a chunk),
    /// both decoded and rewritten by every push and pop, stay about as long as each other;
    /// within `DIRECTORY_CHUNKS_MIN` and the limits' maximum. It grows with the list, as the
    /// chunk target does; directories past it are split when next changed.
    fn directory_chunks_most(&self) -> usize {
        let chunks = self.element_bytes / self.limits.chunk_bytes_target(self.element_bytes, self.len);
        let balanced = ((2 * chunks) as f64).sqrt() as usize;
        balanced.max(DIRECTORY_CHUNKS_MIN).min(self.limits.directory_chunks_max())
    }

    /// Splits the directories that list more than their maximum in equal pieces, then merges
    /// a changed directory under a quarter of it with a neighbour that fits (read if need be;
    /// a neighbour taken in does not take in the next).
    fn resize_directories(&mut self, store: &mut dyn KeyStore) -> Result<(), CommandError> {
        let most = self.directory_chunks_most();
        let mut at = 0;
        while at < self.directories.len() {
            let count = self.directories[at].chunks.as_ref().map_or(0, VecDeque::len);
            if count <= most {
                at += 1;
                continue;
            }
            let growing_end = self.growing_end(at);
            let directory = self.directories.remove(at).expect("at is in range");
            let mut chunks = directory.chunks.expect("counted above");
            let mut part = directory.part;
            for piece_chunks in directory_piece_sizes(count, most, growing_end) {
                let rest = chunks.split_off(piece_chunks);
                let mut piece = Directory::in_memory(chunks);
                piece.part = part.take();
                self.directories.insert(at, piece);
                at += 1;
                chunks = rest;
            }
        }
        let mut at = 0;
        while at < self.directories.len() {
            let small = |directory: &Directory| directory.dirty && directory.chunks.as_ref().is_some_and(|chunks| chunks.len() < most / SMALL_DIRECTORY_FRACTION);
            if small(&self.directories[at]) {
                if let Some(other) = self.neighbour_that_fits(store, at, most)? {
                    let (first, second) = (at.min(other), at.max(other));
                    let taken = self.directories.remove(second).expect("second is in range");
                    let kept = &mut self.directories[first];
                    kept.loaded().extend(taken.chunks.expect("read by neighbour_that_fits"));
                    (kept.len, kept.element_bytes, kept.dirty) = (kept.len + taken.len, kept.element_bytes + taken.element_bytes, true);
                    at = first;
                }
            }
            at += 1;
        }
        Ok(())
    }

    /// The end of the list directory `at` grows at: its first or last directory when only its
    /// chunk at that end of the list changed (pushes to that end), else None.
    fn growing_end(&self, at: usize) -> Option<End> {
        let chunks = self.directories[at].chunks.as_ref()?;
        let (first_dirty, last_dirty) = (chunks.front()?.dirty, chunks.back()?.dirty);
        if at == 0 && first_dirty && !last_dirty {
            Some(End::Head)
        } else if at + 1 == self.directories.len() && last_dirty && !first_dirty {
            Some(End::Tail)
        } else {
            None
        }
    }

    /// The neighbour (previous first) of directory `at` whose chunks fit with its own within
    /// `most`, read.
    fn neighbour_that_fits(&mut self, store: &mut dyn KeyStore, at: usize, most: usize) -> Result<Option<usize>, CommandError> {
        let count = self.directories[at].loaded().len();
        let directories = self.directories.len();
        for other in [at.checked_sub(1), Some(at + 1)].into_iter().flatten().filter(|&other| other < directories) {
            if self.chunks_of(store, other)?.len() + count <= most {
                return Ok(Some(other));
            }
        }
        Ok(None)
    }

    /// Gives every new chunk and directory a part: a free one (the lowest first), else one past
    /// the key's parts; frees the parts no longer used; answers the free parts at the end of
    /// the key's parts, to delete. Past `FREE_PARTS_MAX` free parts, moves the
    /// highest-numbered chunks and directories into the lowest free parts first.
    fn assign_parts(&mut self, store: &mut dyn KeyStore) -> Result<Vec<u32>, CommandError> {
        self.free_unused_parts();
        self.free_parts.sort_unstable_by(|a, b| b.cmp(a));
        let mut missing = 0;
        for directory in &mut self.directories {
            let unnumbered = directory.chunks.iter_mut().flatten().map(|chunk| &mut chunk.part).chain([&mut directory.part]);
            for part in unnumbered.filter(|part| part.is_none()) {
                directory.dirty = true;
                *part = match self.free_parts.pop() {
                    Some(free) => Some(free),
                    None => {
                        self.part_count += 1;
                        missing += u32::from(self.part_count > self.limits.chunks_max);
                        Some(self.part_count - 1)
                    }
                };
            }
        }
        if missing > 0 {
            return fail(format!(
                "ERR list would need {} parts (chunks of at most {} bytes and their directories), over the limit of {} parts for one list",
                self.part_count,
                self.limits.chunk_bytes_target(self.element_bytes, self.len),
                self.limits.chunks_max
            ));
        }
        let mut deletions = self.trim_free_parts();
        if self.free_parts.len() > FREE_PARTS_MAX {
            self.move_into_free_parts(store)?;
            deletions.extend(self.trim_free_parts());
        }
        Ok(deletions)
    }

    /// Adds to the free parts those seen in use that no chunk or directory uses any more.
    /// Before parts are assigned, every part in use was seen, so equal counts mean none was
    /// freed (the common case, checked without sorting).
    fn free_unused_parts(&mut self) {
        if self.parts_in_use().count() == self.seen_parts.len() {
            return;
        }
        let mut in_use: Vec<u32> = self.parts_in_use().map(|(part, _)| part).collect();
        in_use.sort_unstable();
        self.seen_parts.sort_unstable();
        let mut used = in_use.iter().peekable();
        for &part in &self.seen_parts {
            while used.next_if(|&&other| other < part).is_some() {}
            if used.next_if_eq(&&part).is_none() {
                self.free_parts.push(part);
            }
        }
        debug_assert!(used.next().is_none(), "every part in use was seen");
    }

    /// Every part a directory read or a directory uses, with its place (a chunk's, or a
    /// directory's with `usize::MAX` for a chunk index).
    fn parts_in_use(&self) -> impl Iterator<Item = (u32, At)> + '_ {
        self.directories.iter().enumerate().flat_map(|(directory, entry)| {
            let chunks = entry.chunks.iter().flatten().enumerate().filter_map(move |(chunk, stored)| Some((stored.part?, At { directory, chunk })));
            entry.part.map(|part| (part, At { directory, chunk: usize::MAX })).into_iter().chain(chunks)
        })
    }

    /// Takes the free parts at the end of the key's parts off it; answers them.
    fn trim_free_parts(&mut self) -> Vec<u32> {
        debug_assert!(self.free_parts.is_sorted_by(|a, b| a > b), "free parts are kept highest first");
        let at_end = self.free_parts.iter().zip((0..self.part_count).rev()).take_while(|(&free, last)| free == *last).count();
        self.part_count -= at_end as u32;
        self.free_parts.drain(..at_end).collect()
    }

    /// Reads every directory and moves the highest-numbered chunks and directories into the
    /// lowest free parts, up to `MOVED_BYTES_MAX` (at least one), so that the free parts end
    /// up at the end of the key's parts.
    fn move_into_free_parts(&mut self, store: &mut dyn KeyStore) -> Result<(), CommandError> {
        for directory in 0..self.directories.len() {
            self.chunks_of(store, directory)?;
        }
        // Each move takes a free part, so at most that many of the highest parts move: only
        // those are kept (a heap of the highest seen), where sorting every part (tens of
        // thousands in a big list) at each pass took a quarter of the server's CPU under
        // pipelined LPOP, and collecting them all a tenth.
        let movable = self.free_parts.len() + 1;
        let mut highest = BinaryHeap::with_capacity(movable + 1);
        for (part, at) in self.parts_in_use() {
            if highest.len() < movable || highest.peek().is_some_and(|&Reverse((lowest_kept, _, _))| part > lowest_kept) {
                highest.push(Reverse((part, at.directory, at.chunk)));
                if highest.len() > movable {
                    highest.pop();
                }
            }
        }
        // Sorted by `Reverse`: the highest part first.
        let used: Vec<(u32, At)> = highest.into_sorted_vec().into_iter().map(|Reverse((part, directory, chunk))| (part, At { directory, chunk })).collect();
        let mut moved_bytes = 0;
        for (part, at) in used {
            let Some(&lowest_free) = self.free_parts.last() else { break };
            let bytes = match at.chunk {
                usize::MAX => list_directory_bytes(self.directories[at.directory].loaded().len(), self.limits.separators),
                _ => self.directories[at.directory].loaded()[at.chunk].element_bytes,
            };
            if lowest_free > part || moved_bytes > 0 && moved_bytes + bytes > MOVED_BYTES_MAX {
                break;
            }
            moved_bytes += bytes;
            if at.chunk != usize::MAX {
                self.elements_of(store, at)?;
            }
            let directory = &mut self.directories[at.directory];
            directory.dirty = true;
            match at.chunk {
                usize::MAX => directory.part = Some(lowest_free),
                chunk => {
                    let moved = &mut directory.loaded()[chunk];
                    (moved.part, moved.dirty) = (Some(lowest_free), true);
                }
            }
            self.free_parts.pop();
            let place = self.free_parts.partition_point(|&free| free > part);
            self.free_parts.insert(place, part);
        }
        Ok(())
    }

    /// The records to write: the changed chunks, then the changed directories, each checked
    /// against the value limit (as is the top).
    fn encoded_writes(&mut self) -> Result<Vec<(u32, Vec<u8>)>, CommandError> {
        let mut writes = Vec::new();
        for directory in self.directories.iter_mut().filter(|directory| directory.dirty) {
            let chunks = directory.loaded();
            for chunk in chunks.iter_mut().filter(|chunk| chunk.dirty) {
                // A spliced record is taken, not copied: `save` writes each chunk once, last.
                chunk.record_ranges = None;
                let encoded = match (&chunk.elements, chunk.record.take()) {
                    (Some(elements), _) => encode_list(elements.iter()),
                    (None, Some(record)) => Vec::from(record),
                    (None, None) => unreachable!("a dirty chunk is decoded or holds its record"),
                };
                writes.push((chunk.part.expect("numbered by assign_parts"), encoded));
            }
            let entries: Vec<ChunkEntry> = chunks.iter().map(|chunk| chunk_entry(chunk, self.limits.separators)).collect();
            writes.push((directory.part.expect("numbered by assign_parts"), encode_list_directory(&entries, self.limits.separators)));
        }
        let top_bytes = ListTop::encoded_bytes(self.free_parts.len(), self.directories.len(), self.limits.separators);
        let largest = writes.iter().map(|(_, encoded)| encoded.len() as u64).chain([top_bytes]).max().expect("the top at least");
        if largest > self.limits.value_bytes_max {
            return fail(format!(
                "ERR a record of this list would be {largest} bytes, over the namespace's value limit of {} bytes",
                self.limits.value_bytes_max
            ));
        }
        Ok(writes)
    }

    fn top(&self) -> ListTop {
        let separated = self.limits.separators;
        let directories = self.directories.iter().map(|directory| DirectoryEntry {
            part: directory.part.expect("numbered before the top is written"),
            elements: directory.len,
            element_bytes: directory.element_bytes,
            separator: if separated { directory.last_separator() } else { None },
        });
        ListTop { len: self.len, part_count: self.part_count, free_parts: self.free_parts.clone(), directories: directories.collect(), separated }
    }
}

/// The index of the chunk or directory at `end` of `count` (None when there is none).
fn end_index(count: usize, end: End) -> Option<usize> {
    match end {
        End::Head => (count > 0).then_some(0),
        End::Tail => count.checked_sub(1),
    }
}

/// Its entry in its directory; the separator only for a list that writes them (`separated`).
fn chunk_entry(chunk: &Chunk, separated: bool) -> ChunkEntry {
    ChunkEntry {
        part: chunk.part.expect("numbered by assign_parts"),
        elements: chunk.len,
        element_bytes: u32::try_from(chunk.element_bytes).expect("a chunk is under the value limit"),
        separator: if separated { chunk.last_separator() } else { None },
    }
}

/// Loads and marks changed the stored neighbour (previous first) that fits with the changed
/// chunk `at` within `target`, so that `resize_chunks` merges the two: chunks that lose
/// elements here and there (a sorted set's order index under ZREM) do not stay small, each
/// costing its directory entry and a probe of every search.
fn change_stored_neighbour_that_fits(store: &mut dyn KeyStore, key: &[u8], chunks: &mut VecDeque<Chunk>, at: usize, target: u64) -> Result<(), CommandError> {
    let bytes = chunks[at].element_bytes;
    let fits = |chunk: &Chunk| !chunk.dirty && chunk.element_bytes + bytes <= target;
    let neighbour = [at.checked_sub(1), Some(at + 1)].into_iter().flatten().find(|&other| chunks.get(other).is_some_and(fits));
    if let Some(other) = neighbour {
        load(store, key, &mut chunks[other])?;
        chunks[other].dirty = true;
    }
    Ok(())
}

/// A loaded chunk that grew past `target` cut into as few chunks of equal size as keep each
/// within `target` element bytes (at least one element each). Equal pieces leave room on both
/// sides: a chunk that grows by one element at a time in its middle (a sorted set's order
/// index) is split in halves, not into a full chunk and a one-element one at every growth.
/// The chunk counts, in list order, of the fewest directories of at most `most` chunks that
/// `count` chunks split into: equal pieces, except for a directory growing at an end of the
/// list, whose pieces are full but the one at that end. Pushes to one end then leave full
/// directories behind them, so the top lists about half as many as equal halves would.
fn directory_piece_sizes(count: usize, most: usize, growing_end: Option<End>) -> Vec<usize> {
    assert!(most > 0 && count > most, "{count} chunks need no split at most {most}");
    let pieces = count.div_ceil(most);
    let remainder = count - (pieces - 1) * most;
    let sizes: Vec<usize> = match growing_end {
        Some(End::Head) => std::iter::once(remainder).chain(std::iter::repeat_n(most, pieces - 1)).collect(),
        Some(End::Tail) => std::iter::repeat_n(most, pieces - 1).chain(std::iter::once(remainder)).collect(),
        None => {
            let piece = count.div_ceil(pieces);
            (0..pieces).map(|number| piece.min(count - number * piece)).collect()
        }
    };
    debug_assert!(sizes.iter().sum::<usize>() == count && sizes.iter().all(|&size| size > 0 && size <= most));
    sizes
}

/// Whether `split_chunk` cuts the chunk: it grew past `target` (only a chunk that grew is
/// split, so removing elements never needs more chunks).
fn needs_split(chunk: &Chunk, target: u64) -> bool {
    chunk.element_bytes > target && chunk.element_bytes > chunk.stored_bytes
}

fn split_chunk(chunk: Chunk, target: u64) -> Vec<Chunk> {
    if !needs_split(&chunk, target) {
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
        chunk.record_ranges = None;
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

fn read_record(store: &mut dyn KeyStore, key: &[u8], chunk: &Chunk) -> Result<Bytes, CommandError> {
    let part = chunk.part.expect("a chunk not in memory is stored");
    Ok(Bytes::from(store.get_part(key, part)?.ok_or(CorruptValue("list chunk missing"))?))
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::memory_store::MemoryStore;
    use crate::values::list_directory_is_separated;

    #[test]
    fn a_part_is_found_among_the_free_parts_kept_highest_first() {
        let free_parts = [90, 41, 40, 7, 0];
        for part in 0..100 {
            assert_eq!(is_free_part(&free_parts, part), free_parts.contains(&part), "part {part}");
        }
        assert!(!is_free_part(&[], 3));
    }

    const LIMITS: ListLimits = ListLimits { value_bytes_max: 1 << 20, chunks_max: 4096, chunk_bytes_min: CHUNK_BYTES_TARGET_MIN, chunks_target: CHUNKS_TARGET, directory_chunks_max: DIRECTORY_CHUNKS_MAX, separators: false };
    /// Directories of at most 4 chunks, so that small lists have many.
    const SMALL_DIRECTORIES: ListLimits = ListLimits { directory_chunks_max: 4, ..LIMITS };

    #[test]
    fn a_plain_list_aims_at_small_chunks_that_still_hold_a_few_long_elements() {
        let plain = ListLimits::plain(1 << 20, 32_767);
        let kib = 1024;
        assert_eq!(plain.chunk_bytes_target(4 * 1000, 1000), kib, "short elements: 1 KiB");
        assert_eq!(plain.chunk_bytes_target(300 * 10, 10), 2 * kib, "300-byte elements: four fit");
        assert_eq!(plain.chunk_bytes_target(1008 * 10, 10), 4 * kib, "long elements: at most the others' minimum");
        assert_eq!(plain.chunk_bytes_target(64 << 20, 1 << 24), 16 * kib, "a big list: its bytes / 4,096");
        assert_eq!(plain.chunk_bytes_target(1 << 32, 1 << 30), CHUNK_BYTES_TARGET_MAX);
        let entries = ListLimits::new(1 << 20, 32_767);
        assert_eq!(entries.chunk_bytes_target(4 * 1000, 1000), CHUNK_BYTES_TARGET_MIN, "a stream's entries keep 4 KiB");
        assert_eq!(entries.chunk_bytes_target(64 << 20, 1 << 24), 8 * kib, "and / 8,192");
    }

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

    /// The stored list is well formed: its parts are exactly 0..part count, each a directory,
    /// a chunk or a free part (at most `FREE_PARTS_MAX`), and every directory and chunk holds
    /// what the record above it says.
    fn assert_well_formed(store: &MemoryStore, limits: ListLimits) {
        let Some(value) = store.keys.get(b"list".as_slice()) else {
            assert!(store.parts.is_empty(), "parts left without their key");
            return;
        };
        let top = match Stored::decode(value.bytes.clone()).unwrap() {
            Stored::List(elements) => {
                assert!(!elements.is_empty());
                assert!(store.parts.is_empty(), "a small list keeps no parts");
                return;
            }
            Stored::ChunkedList(ListIndex::Directories(top)) => top,
            _ => panic!("not a list as this version writes it"),
        };
        let parts: Vec<u32> = store.parts.keys().map(|(_, part)| *part).collect();
        assert_eq!(parts, (0..top.part_count).collect::<Vec<_>>(), "parts are dense");
        assert!(top.free_parts.len() <= FREE_PARTS_MAX, "{} free parts", top.free_parts.len());
        let part = |number: u32| Bytes::from(store.parts[&(b"list".to_vec(), number)].clone());
        assert_eq!(top.separated, limits.separators, "the top's format");
        let mut used = top.free_parts.clone();
        for directory in &top.directories {
            used.push(directory.part);
            let record = part(directory.part);
            assert_eq!(list_directory_is_separated(&record), limits.separators, "a directory's format");
            let entries = decode_list_directory(&record).unwrap();
            let last_chunk = decode_list_chunk(&part(entries.last().unwrap().part)).unwrap();
            if let Some(separator) = directory.separator {
                assert_eq!(separator, Separator::of(last_chunk.last().unwrap()), "a directory's separator");
            }
            assert!(entries.len() <= limits.directory_chunks_max());
            assert_eq!(entries.iter().map(|entry| u64::from(entry.elements)).sum::<u64>(), directory.elements);
            assert_eq!(entries.iter().map(|entry| u64::from(entry.element_bytes)).sum::<u64>(), directory.element_bytes);
            for entry in entries {
                used.push(entry.part);
                let elements = decode_list_chunk(&part(entry.part)).unwrap();
                assert_eq!(elements.len() as u32, entry.elements);
                if let Some(separator) = entry.separator {
                    assert_eq!(separator, Separator::of(elements.last().unwrap()), "a chunk's separator");
                }
                assert!(!limits.separators || entry.separator.is_some(), "a list written with separators knows every chunk's");
                assert_eq!(elements.iter().map(|element| element_entry_bytes(element)).sum::<u64>(), u64::from(entry.element_bytes));
            }
        }
        used.sort_unstable();
        assert_eq!(used, parts, "each part is a directory, a chunk or free, once");
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
            assert!(store.parts.len() > 4, "the list is chunked");
            assert_eq!(list.partition_point(&mut store, |element| Ok(element.as_ref() >= target.as_bytes())).unwrap(), expected, "probe {probe}");
            assert_eq!(list.range(&mut store, 0, list.len() - 1).unwrap(), elements);
            assert_eq!(list.partition_point(&mut store, |element| Ok(element.as_ref() >= target.as_bytes())).unwrap(), expected, "probe {probe}");
        }
        let mut list = open(&mut store);
        let refused = list.partition_point(&mut store, |_| Err(CorruptValue("refused").into()));
        assert!(refused.is_err(), "the predicate's error is the search's");
    }

    #[test]
    fn a_search_of_a_list_with_separators_reads_one_directory_and_one_chunk() {
        // Elements of 8 bytes: their separators decide every probe. Elements of 24 bytes whose
        // first 16 are equal: none does, and the search reads the probed chunks as without.
        for (width, reads_most) in [(8, 2), (24, 40)] {
            let limits = ListLimits { separators: true, ..SMALL_DIRECTORIES };
            let mut store = MemoryStore::default();
            let mut list = OpenList::open_or_new(&mut store, &key(), limits).unwrap();
            let elements: Vec<Bytes> = (0..3000u32).map(|number| Bytes::from(format!("{:0width$}", number * 2))).collect();
            for element in &elements {
                list.push(&mut store, End::Tail, element.clone()).unwrap();
            }
            list.save(&mut store).unwrap();
            assert_well_formed(&store, limits);
            for probe in [0u32, 1, 777, 3001, 5998, 5999, 9000] {
                let target = format!("{probe:0width$}");
                let expected = elements.partition_point(|element| element.as_ref() < target.as_bytes()) as u64;
                let mut list = OpenList::open(&mut store, &key(), limits).unwrap().unwrap();
                let reads_before = store.part_reads;
                assert_eq!(list.partition_point_at_least(&mut store, target.as_bytes()).unwrap(), expected, "probe {probe}");
                let reads = store.part_reads - reads_before;
                assert!(reads <= reads_most, "width {width}, probe {probe}: {reads} records read");
                assert!(width == 8 || reads > 2, "width {width}, probe {probe}: {reads} records read");
            }
        }
    }

    #[test]
    fn a_list_written_without_separators_is_searched_right_while_it_gains_them() {
        // A sorted set's order index written before separators existed: tags 9 and 10, then
        // edited with separators on. Unknown separators are read around, never trusted.
        let old = SMALL_DIRECTORIES;
        let new = ListLimits { separators: true, ..SMALL_DIRECTORIES };
        let mut store = MemoryStore::default();
        let mut model: Vec<Bytes> = (0..2000u32).map(|number| Bytes::from(format!("{:08}", number * 3))).collect();
        let mut list = OpenList::open_or_new(&mut store, &key(), old).unwrap();
        for element in &model {
            list.push(&mut store, End::Tail, element.clone()).unwrap();
        }
        list.save(&mut store).unwrap();
        let mut random = rand::rngs::StdRng::seed_from_u64(46);
        for _ in 0..300 {
            let element = Bytes::from(format!("{:08}", random.gen_range(0..7000u32)));
            let mut list = OpenList::open(&mut store, &key(), new).unwrap().unwrap();
            let rank = list.partition_point_at_least(&mut store, &element).unwrap();
            assert_eq!(rank, model.partition_point(|other| other < &element) as u64);
            list.insert(&mut store, rank, element.clone()).unwrap();
            model.insert(rank as usize, element);
            list.save(&mut store).unwrap();
        }
        let Stored::ChunkedList(ListIndex::Directories(top)) = Stored::decode(store.keys[&key().to_vec()].bytes.clone()).unwrap() else { panic!("a top") };
        assert!(top.separated && top.directories.iter().any(|directory| directory.separator.is_some()));
        assert_eq!(contents(&mut store), model);
    }

    #[test]
    fn random_commands_keep_the_list_as_a_model_deque_and_its_parts_dense() {
        random_commands_keep_the_list_as_a_model_deque(LIMITS, 7);
        random_commands_keep_the_list_as_a_model_deque(SMALL_DIRECTORIES, 8);
        random_commands_keep_the_list_as_a_model_deque(ListLimits { separators: true, ..SMALL_DIRECTORIES }, 9);
    }

    fn random_commands_keep_the_list_as_a_model_deque(limits: ListLimits, seed: u64) {
        let mut random = rand::rngs::StdRng::seed_from_u64(seed);
        let mut store = MemoryStore::default();
        let mut model: VecDeque<Bytes> = VecDeque::new();
        for step in 0..3000 {
            let mut list = OpenList::open_or_new(&mut store, &key(), limits).unwrap();
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
                // A few per command: a chunk changed in its record is changed again, or read.
                9 => {
                    for _ in 0..random.gen_range(1..4) {
                        let index = random.gen_range(0..=model.len());
                        list.insert(&mut store, index as u64, element.clone()).unwrap();
                        model.insert(index, element.clone());
                    }
                    let index = random.gen_range(0..model.len());
                    assert_eq!(list.get(&mut store, index as u64).unwrap(), model[index]);
                }
                10 if !model.is_empty() => {
                    for _ in 0..random.gen_range(1..4).min(model.len()) {
                        let index = random.gen_range(0..model.len());
                        assert_eq!(Some(list.remove(&mut store, index as u64).unwrap()), model.remove(index));
                    }
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
            assert_well_formed(&store, limits);
            if step % 50 == 0 {
                assert_eq!(contents(&mut store), Vec::from(model.clone()), "step {step}");
            }
        }
        assert_eq!(contents(&mut store), Vec::from(model));
    }

    #[test]
    fn a_push_or_pop_writes_the_top_one_directory_and_one_chunk_whatever_the_size() {
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
            assert!(store.part_writes - parts_before <= 5, "{}", store.part_writes - parts_before);
            assert_eq!(store.key_writes - keys_before, 2);
        }
        let mut list = open(&mut store);
        assert_eq!(list.get(&mut store, 31_337).unwrap().as_ref(), b"element:31337");
        assert_well_formed(&store, LIMITS);
    }

    #[test]
    fn the_bytes_a_push_or_pop_writes_do_not_grow_with_the_list() {
        // 70,000 elements of 440 bytes (31 MB, about 7,500 chunks): a one-level root listing
        // every chunk would be 90 KB, rewritten by every push and pop.
        let limits = ListLimits { chunks_max: 1 << 16, ..LIMITS };
        let mut store = MemoryStore::default();
        let element = Bytes::from(vec![b'x'; 440]);
        let mut list = OpenList::open_or_new(&mut store, &key(), limits).unwrap();
        for _ in 0..70_000 {
            list.push(&mut store, End::Head, element.clone()).unwrap();
        }
        list.save(&mut store).unwrap();
        let mut most = 0;
        for step in 0..2_000 {
            let before = store.bytes_written;
            let mut list = OpenList::open(&mut store, &key(), limits).unwrap().unwrap();
            match step % 4 {
                0 => list.push(&mut store, End::Head, element.clone()).unwrap(),
                1 => list.push(&mut store, End::Tail, element.clone()).unwrap(),
                2 => drop(list.pop(&mut store, End::Head).unwrap()),
                _ => drop(list.pop(&mut store, End::Tail).unwrap()),
            }
            list.save(&mut store).unwrap();
            most = most.max(store.bytes_written - before);
        }
        // The top (about 40 directories), one directory (at most 256 chunks) and one or two
        // chunks (4 KiB each).
        assert!(most <= 16 * 1024, "{most} bytes written by one push or pop");
        assert_well_formed(&store, limits);
    }

    #[test]
    fn a_list_drained_from_its_oldest_end_keeps_few_free_parts() {
        // A list pushed at its tail has its lowest-numbered chunks at its head: pops there leave
        // free parts low down, filled by moving the highest-numbered chunks and directories,
        // so the key's parts shrink with the list.
        let mut store = MemoryStore::default();
        let element = Bytes::from(vec![b'y'; 300]);
        push_one_per_command(&mut store, SMALL_DIRECTORIES, &element, 3_000);
        let parts_when_full = store.parts.len();
        for step in 0..2_900 {
            let mut list = OpenList::open(&mut store, &key(), SMALL_DIRECTORIES).unwrap().unwrap();
            list.pop(&mut store, End::Head).unwrap();
            list.save(&mut store).unwrap();
            if step % 100 == 0 {
                assert_well_formed(&store, SMALL_DIRECTORIES);
            }
        }
        assert_well_formed(&store, SMALL_DIRECTORIES);
        assert!(store.parts.len() * 4 < parts_when_full, "{} parts of {parts_when_full} left", store.parts.len());
        assert_eq!(contents(&mut store), vec![element; 100]);
    }

    #[test]
    fn a_list_written_by_an_earlier_version_is_read_and_rewritten_with_directories() {
        let mut store = MemoryStore::default();
        let chunks: Vec<Vec<Bytes>> = (0..10u32).map(|chunk| (0..50u32).map(|number| Bytes::from(format!("{chunk}:{number:0>100}"))).collect()).collect();
        let mut entries = Vec::new();
        // Parts in an order other than the list's, as the old layout allowed.
        for (chunk, elements) in chunks.iter().enumerate() {
            let part = (chunk as u32 * 3) % 10;
            store.parts.insert((key().to_vec(), part), encode_list(elements.iter()));
            let element_bytes = elements.iter().map(|element| element_entry_bytes(element)).sum::<u64>() as u32;
            entries.push(ChunkEntry { part, elements: elements.len() as u32, element_bytes, separator: None });
        }
        let root = crate::values::ListRoot { len: 500, chunks: entries };
        store.keys.insert(key().to_vec(), hybridkv_engine::Value { bytes: root.encode(), expiry_unix_ms: 77, version: 0 });
        let all: Vec<Bytes> = chunks.concat();
        assert_eq!(contents(&mut store), all);
        let mut list = OpenList::open(&mut store, &key(), SMALL_DIRECTORIES).unwrap().unwrap();
        assert_eq!(list.get(&mut store, 321).unwrap(), all[321]);
        list.push(&mut store, End::Tail, Bytes::from_static(b"last")).unwrap();
        list.save(&mut store).unwrap();
        assert_well_formed(&store, SMALL_DIRECTORIES);
        assert_eq!(store.keys[b"list".as_slice()].expiry_unix_ms, 77);
        let mut expected = all;
        expected.push(Bytes::from_static(b"last"));
        assert_eq!(contents(&mut store), expected);
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
    fn directories_hold_about_the_square_root_of_twice_the_chunks() {
        let mut store = MemoryStore::default();
        let mut list = open(&mut store);
        // 3,000 chunks of 4 KiB: directories of at most sqrt(6000) = 77 chunks, not 256.
        for number in 0..3_000 * 40 {
            list.push(&mut store, End::Tail, Bytes::from(format!("{number:0>100}"))).unwrap();
        }
        list.save(&mut store).unwrap();
        let Stored::ChunkedList(ListIndex::Directories(top)) = Stored::decode(store.keys[&key().to_vec()].bytes.clone()).unwrap() else { panic!("a top") };
        let chunk_count = top.part_count as usize - top.directories.len();
        assert!((2_900..=3_100).contains(&chunk_count), "{chunk_count} chunks");
        let most = ((2 * chunk_count) as f64).sqrt() as usize;
        for directory in &top.directories {
            let entries = decode_list_directory(&store.parts[&(key().to_vec(), directory.part)]).unwrap();
            assert!(entries.len() <= most, "{} chunks in a directory", entries.len());
        }
        assert!(top.directories.len() >= chunk_count / most, "{} directories", top.directories.len());
        assert_well_formed(&store, LIMITS);
    }

    #[test]
    fn pushes_to_one_end_leave_full_directories_behind_them() {
        // Equal halves left directories of 16 to 32 chunks behind a growing end, and a top
        // twice as long as needed, decoded and rewritten by every push.
        for end in [End::Head, End::Tail] {
            let mut store = MemoryStore::default();
            for number in 0..1_500 {
                let mut list = OpenList::open_or_new(&mut store, &key(), LIMITS).unwrap();
                list.push(&mut store, end, Bytes::from(format!("{number:0>4000}"))).unwrap();
                list.save(&mut store).unwrap();
            }
            let Stored::ChunkedList(ListIndex::Directories(top)) = Stored::decode(store.keys[&key().to_vec()].bytes.clone()).unwrap() else { panic!("a top") };
            let growing = match end {
                End::Head => 0,
                End::Tail => top.directories.len() - 1,
            };
            assert!(top.directories.len() > 10, "{} directories", top.directories.len());
            for (at, directory) in top.directories.iter().enumerate().filter(|&(at, _)| at != growing) {
                let chunks = decode_list_directory(&store.parts[&(key().to_vec(), directory.part)]).unwrap().len();
                assert!(chunks >= DIRECTORY_CHUNKS_MIN, "{end:?}: directory {at} of {} holds {chunks} chunks", top.directories.len());
            }
            assert_well_formed(&store, LIMITS);
        }
    }

    /// A measurement, not a check (docs/design/server.md, "Lists"): the time per push and the
    /// top's directories, by 100,000 pushes of 440 bytes to one end, a save per push.
    #[test]
    #[ignore]
    fn pushes_one_at_a_time_to_a_big_list() {
        let limits = ListLimits::new(4 << 20, 32_767);
        let mut store = MemoryStore::default();
        let element = Bytes::from(vec![b'x'; 440]);
        let mut started = std::time::Instant::now();
        for number in 1..=600_000u32 {
            let mut list = OpenList::open_or_new(&mut store, &key(), limits).unwrap();
            list.push(&mut store, End::Head, element.clone()).unwrap();
            list.save(&mut store).unwrap();
            if number % 100_000 == 0 {
                let Stored::ChunkedList(ListIndex::Directories(top)) = Stored::decode(store.keys[&key().to_vec()].bytes.clone()).unwrap() else { panic!("a top") };
                let per_push = started.elapsed().as_secs_f64() * 1e6 / 100_000.0;
                println!("{number} pushes: {per_push:.2} µs a push, {} directories, {} parts, {} free", top.directories.len(), top.part_count, top.free_parts.len());
                started = std::time::Instant::now();
            }
        }
    }

    #[test]
    fn directories_split_in_equal_pieces_unless_growing_at_an_end() {
        assert_eq!(directory_piece_sizes(33, 32, None), [17, 16]);
        assert_eq!(directory_piece_sizes(33, 32, Some(End::Head)), [1, 32]);
        assert_eq!(directory_piece_sizes(33, 32, Some(End::Tail)), [32, 1]);
        assert_eq!(directory_piece_sizes(70, 32, None), [24, 24, 22]);
        assert_eq!(directory_piece_sizes(70, 32, Some(End::Head)), [6, 32, 32]);
    }

    #[test]
    fn a_pop_next_to_many_small_chunks_merges_one_neighbour_not_all_of_them() {
        // A list that grew one push at a time keeps the small chunks it made while the target
        // was small: popping through them must not take in neighbour after neighbour.
        let limits = ListLimits { chunks_target: 16, ..LIMITS };
        let mut store = MemoryStore::default();
        push_one_per_command(&mut store, limits, &Bytes::from(vec![b'x'; 440]), 2_400);
        let chunks_after_growth = store.parts.len();
        assert!(chunks_after_growth > 30, "{chunks_after_growth} chunks");
        for _ in 0..1_200 {
            let before = store.bytes_written;
            let mut list = OpenList::open(&mut store, &key(), limits).unwrap().unwrap();
            list.pop(&mut store, End::Head).unwrap();
            list.save(&mut store).unwrap();
            // Its chunk and a neighbour, their directory and the top, and what is moved into
            // free parts; not the 1 MB list.
            let written = (store.bytes_written - before) as u64;
            assert!(written <= MOVED_BYTES_MAX + 3 * CHUNK_BYTES_TARGET_MAX, "{written} bytes written by one pop");
        }
        assert_well_formed(&store, limits);
    }

    #[test]
    fn removing_elements_never_needs_more_parts_than_the_list_has() {
        let limits = ListLimits { chunks_max: 20, ..SMALL_DIRECTORIES };
        let mut store = MemoryStore::default();
        let element = Bytes::from(vec![b'x'; 1000]);
        let mut pushed = 0;
        loop {
            let mut list = OpenList::open_or_new(&mut store, &key(), limits).unwrap();
            list.push(&mut store, End::Tail, element.clone()).unwrap();
            if list.save(&mut store).is_err() {
                break;
            }
            pushed += 1;
            assert!(pushed < 1000, "a push past the limit is refused");
        }
        assert_well_formed(&store, limits);
        assert_eq!(store.parts.len(), 20, "refused at the limit");
        assert_eq!(contents(&mut store).len(), pushed);
        for end in [End::Head, End::Tail, End::Head] {
            let mut list = OpenList::open(&mut store, &key(), limits).unwrap().unwrap();
            list.pop(&mut store, end).unwrap();
            list.save(&mut store).unwrap();
            assert_well_formed(&store, limits);
        }
    }
}
