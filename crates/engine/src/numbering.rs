//! Which namespace each database number serves: the identity until SWAPDB exchanges two, then
//! kept durably in `databases.map` (a block file in the data directory, created by the first
//! swap) so that a swap survives restarts and crashes. Byte layout and protocol: docs/design/formats.md, "Database numbering".
//!
//! A namespace's *home* is the number it was created for (its configuration's place, or the
//! `db<n>` of an on-demand namespace); its media keep that name whatever number serves it.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use hybridkv_media::{MediaProvider, Medium, Tier};
use parking_lot::Mutex;

use crate::checksum::crc32c;
use crate::config::NAMESPACES_MAX;
use crate::error::{EngineError, Result};

pub(crate) const NUMBERING_MEDIUM_NAME: &str = "databases.map";
/// One slot per page, so that each write is one aligned block write (never torn on the
/// simulated medium; a torn slot on a real device fails its checksum and the other one wins).
pub(crate) const NUMBERING_SLOT_BYTES: usize = 4096;
const NUMBERING_SLOTS: usize = 2;
const NUMBERING_MAGIC: [u8; 8] = *b"HKVDBNUM";
const NUMBERING_VERSION: u32 = 1;

const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = MAGIC_OFFSET + 8;
const ENTRIES_OFFSET: usize = VERSION_OFFSET + 4;
const SEQUENCE_OFFSET: usize = ENTRIES_OFFSET + 4;
const HOMES_OFFSET: usize = SEQUENCE_OFFSET + 8;
const CHECKSUM_OFFSET: usize = HOMES_OFFSET + NAMESPACES_MAX;
const SLOT_USED_BYTES: usize = CHECKSUM_OFFSET + 4;
const _: () = assert!(SLOT_USED_BYTES <= NUMBERING_SLOT_BYTES && NAMESPACES_MAX <= u8::MAX as usize);

/// Database number → home, for every number up to `NAMESPACES_MAX`: a permutation.
type Homes = [u8; NAMESPACES_MAX];

fn identity() -> Homes {
    std::array::from_fn(|number| number as u8)
}

fn is_permutation(homes: &Homes) -> bool {
    let mut seen = [false; NAMESPACES_MAX];
    homes.iter().all(|&home| (home as usize) < NAMESPACES_MAX && !std::mem::replace(&mut seen[home as usize], true))
}

/// The current numbering, readable without a lock; changed only by `swap`.
pub(crate) struct Numbering {
    homes: Vec<AtomicU8>,
    /// Held through a swap, so that swaps take turns.
    kept: Mutex<Kept>,
}

/// Where the numbering is kept.
struct Kept {
    /// `databases.map`, created by the first swap (until then every number serves its home).
    medium: Option<Arc<dyn Medium>>,
    /// The sequence number of the newest valid slot (the next write goes to the other slot),
    /// or the error that made it unknown: after a failed write or flush the slot may or may not
    /// become durable, so swaps are refused until restart.
    sequence: std::result::Result<u64, String>,
}

impl Numbering {
    /// Reads `databases.map`; the identity when there is none. Errors when neither slot is
    /// valid and one holds bytes, since starting with the identity then could silently undo a
    /// swap.
    pub(crate) fn open(provider: &dyn MediaProvider) -> Result<Numbering> {
        let exists = provider.list(NUMBERING_MEDIUM_NAME, Tier::Ssd)?.iter().any(|name| name == NUMBERING_MEDIUM_NAME);
        let (medium, sequence, homes) = if exists {
            let medium = open_medium(provider)?;
            let (sequence, homes) = read_newest(medium.as_ref())?;
            (Some(medium), sequence, homes)
        } else {
            (None, 0, identity())
        };
        Ok(Numbering { homes: homes.iter().map(|&home| AtomicU8::new(home)).collect(), kept: Mutex::new(Kept { medium, sequence: Ok(sequence) }) })
    }

    /// The home of database `number`.
    pub(crate) fn home(&self, number: usize) -> usize {
        self.homes[number].load(Ordering::Acquire) as usize
    }

    /// Exchanges the homes of two numbers: durable in `databases.map` (created by the first
    /// swap) before anyone sees it.
    pub(crate) fn swap(&self, provider: &dyn MediaProvider, first: usize, second: usize) -> Result<()> {
        assert!(first < NAMESPACES_MAX && second < NAMESPACES_MAX, "database numbers {first} and {second}");
        let mut kept = self.kept.lock();
        let sequence = match &kept.sequence {
            Ok(newest) => newest + 1,
            Err(reason) => return Err(EngineError::Poisoned { namespace: NUMBERING_MEDIUM_NAME.into(), reason: reason.clone() }),
        };
        let mut homes: Homes = std::array::from_fn(|number| self.home(number) as u8);
        homes.swap(first, second);
        if let Err(error) = write_slot(&mut kept.medium, provider, sequence, &homes) {
            kept.sequence = Err(error.to_string());
            return Err(error);
        }
        kept.sequence = Ok(sequence);
        self.homes[first].store(homes[first], Ordering::Release);
        self.homes[second].store(homes[second], Ordering::Release);
        Ok(())
    }
}

fn open_medium(provider: &dyn MediaProvider) -> Result<Arc<dyn Medium>> {
    Ok(provider.open(NUMBERING_MEDIUM_NAME, Tier::Ssd, (NUMBERING_SLOTS * NUMBERING_SLOT_BYTES) as u64)?.medium)
}

/// Writes and flushes slot `sequence` mod 2, creating `databases.map` (durably named) first if
/// it is missing.
fn write_slot(medium: &mut Option<Arc<dyn Medium>>, provider: &dyn MediaProvider, sequence: u64, homes: &Homes) -> Result<()> {
    let medium = match medium {
        Some(medium) => medium,
        None => {
            let created = open_medium(provider)?;
            provider.sync_names(Tier::Ssd)?;
            medium.insert(created)
        }
    };
    let offset = (sequence % NUMBERING_SLOTS as u64) * NUMBERING_SLOT_BYTES as u64;
    medium.write_at(offset, &encode_slot(sequence, homes))?;
    medium.persist(offset, NUMBERING_SLOT_BYTES as u64)?;
    Ok(())
}

/// The sequence number and homes of the newest valid slot; the identity when both slots are
/// unwritten (a crash before the first swap's write reached the device).
fn read_newest(medium: &dyn Medium) -> Result<(u64, Homes)> {
    let mut slots = Vec::with_capacity(NUMBERING_SLOTS);
    for slot in 0..NUMBERING_SLOTS {
        let mut bytes = vec![0u8; NUMBERING_SLOT_BYTES];
        medium.read_at((slot * NUMBERING_SLOT_BYTES) as u64, &mut bytes)?;
        slots.push(bytes);
    }
    // Only the fields count: damage to the zero padding of an unwritten slot is no swap.
    let unwritten = |bytes: &Vec<u8>| bytes[..SLOT_USED_BYTES].iter().all(|&byte| byte == 0);
    if let Some(newest) = slots.iter().filter_map(|bytes| decode_slot(bytes)).max_by_key(|(sequence, _)| *sequence) {
        if let Some(damaged) = slots.iter().position(|bytes| decode_slot(bytes).is_none() && !unwritten(bytes)) {
            // A swap torn by a crash (never acknowledged) or a slot damaged at rest: the two
            // look alike, and only the second, if it held the newer swap, loses anything.
            tracing::warn!(
                file = NUMBERING_MEDIUM_NAME,
                slot = damaged,
                sequence = newest.0,
                "a slot of the database numbering is damaged; the other one serves: if the damaged slot held a later SWAPDB (not one torn by a crash), that swap is undone"
            );
        }
        return Ok(newest);
    }
    if slots.iter().all(unwritten) {
        return Ok((0, identity()));
    }
    Err(EngineError::Corrupt {
        what: NUMBERING_MEDIUM_NAME.into(),
        detail: "neither slot is valid (magic, version, checksum, permutation), so which namespace serves which database number after SWAPDB is lost; removing the file makes every database number serve its own namespace again".into(),
    })
}

fn encode_slot(sequence: u64, homes: &Homes) -> Vec<u8> {
    assert!(is_permutation(homes), "a numbering is a permutation");
    let mut bytes = vec![0u8; NUMBERING_SLOT_BYTES];
    bytes[MAGIC_OFFSET..VERSION_OFFSET].copy_from_slice(&NUMBERING_MAGIC);
    bytes[VERSION_OFFSET..ENTRIES_OFFSET].copy_from_slice(&NUMBERING_VERSION.to_le_bytes());
    bytes[ENTRIES_OFFSET..SEQUENCE_OFFSET].copy_from_slice(&(NAMESPACES_MAX as u32).to_le_bytes());
    bytes[SEQUENCE_OFFSET..HOMES_OFFSET].copy_from_slice(&sequence.to_le_bytes());
    bytes[HOMES_OFFSET..CHECKSUM_OFFSET].copy_from_slice(homes);
    let checksum = crc32c(&bytes[..CHECKSUM_OFFSET]);
    bytes[CHECKSUM_OFFSET..SLOT_USED_BYTES].copy_from_slice(&checksum.to_le_bytes());
    bytes
}

/// The sequence number and homes of a valid slot.
fn decode_slot(bytes: &[u8]) -> Option<(u64, Homes)> {
    let u32_at = |offset: usize| u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("4 bytes"));
    let valid = bytes[MAGIC_OFFSET..VERSION_OFFSET] == NUMBERING_MAGIC
        && u32_at(VERSION_OFFSET) == NUMBERING_VERSION
        && u32_at(ENTRIES_OFFSET) as usize == NAMESPACES_MAX
        && u32_at(CHECKSUM_OFFSET) == crc32c(&bytes[..CHECKSUM_OFFSET]);
    let homes: Homes = bytes[HOMES_OFFSET..CHECKSUM_OFFSET].try_into().expect("NAMESPACES_MAX bytes");
    let sequence = u64::from_le_bytes(bytes[SEQUENCE_OFFSET..HOMES_OFFSET].try_into().expect("8 bytes"));
    (valid && is_permutation(&homes)).then_some((sequence, homes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hybridkv_media::sim::SimStore;

    fn swapped(provider: &dyn MediaProvider, swaps: &[(usize, usize)]) -> Numbering {
        let numbering = Numbering::open(provider).unwrap();
        for &(first, second) in swaps {
            numbering.swap(provider, first, second).unwrap();
        }
        numbering
    }

    #[test]
    fn a_new_numbering_is_the_identity_without_a_file_and_swaps_survive_reopening() {
        let provider = SimStore::new(1);
        let numbering = swapped(&provider, &[]);
        assert!((0..NAMESPACES_MAX).all(|number| numbering.home(number) == number));
        assert!(provider.list_names().is_empty(), "databases.map is created by the first swap");
        drop(swapped(&provider, &[(0, 1), (1, 5), (63, 0)]));
        let reopened = Numbering::open(&provider).unwrap();
        assert_eq!((reopened.home(0), reopened.home(1), reopened.home(5), reopened.home(63)), (63, 5, 0, 1));
        assert_eq!(reopened.home(2), 2);
    }

    #[test]
    fn a_damaged_newest_slot_leaves_the_one_before_and_two_damaged_slots_refuse_to_open() {
        let provider = SimStore::new(2);
        let numbering = swapped(&provider, &[(0, 1), (2, 3)]);
        drop(numbering);
        assert!(provider.corrupt(NUMBERING_MEDIUM_NAME, Tier::Ssd, HOMES_OFFSET as u64));
        let reopened = Numbering::open(&provider).unwrap();
        assert_eq!((reopened.home(0), reopened.home(2)), (1, 2), "slot of sequence 1 (swap 0, 1) wins");
        drop(reopened);
        assert!(provider.corrupt(NUMBERING_MEDIUM_NAME, Tier::Ssd, (NUMBERING_SLOT_BYTES + HOMES_OFFSET) as u64));
        assert!(matches!(Numbering::open(&provider), Err(EngineError::Corrupt { .. })));
    }

    #[test]
    fn unwritten_slots_are_the_identity_whatever_their_padding_holds_but_a_damaged_only_slot_refuses_to_open() {
        let provider = SimStore::new(4);
        drop(open_medium(&provider).unwrap());
        assert!(provider.corrupt(NUMBERING_MEDIUM_NAME, Tier::Ssd, SLOT_USED_BYTES as u64));
        assert_eq!(Numbering::open(&provider).unwrap().home(0), 0, "a crash before the first swap's write, then damage to padding");
        drop(swapped(&provider, &[(0, 1)]));
        assert!(provider.corrupt(NUMBERING_MEDIUM_NAME, Tier::Ssd, (NUMBERING_SLOT_BYTES + HOMES_OFFSET) as u64));
        let refused = Numbering::open(&provider).err().expect("the only swap is lost");
        assert!(refused.to_string().contains("removing the file"), "{refused}");
    }

    #[test]
    fn a_failed_flush_refuses_every_later_swap_until_reopened() {
        use hybridkv_media::sim::{FaultKind, FaultOn, FaultPlan};
        let provider = SimStore::new(3);
        let numbering = swapped(&provider, &[(0, 1)]);
        provider.inject(FaultPlan { at_op: provider.operations() + 2, kind: FaultKind::Eio, on: FaultOn::Persist, repeat: false });
        assert!(matches!(numbering.swap(&provider, 2, 3), Err(EngineError::Media(_))));
        assert_eq!(numbering.home(2), 2, "not swapped in memory");
        assert!(matches!(numbering.swap(&provider, 4, 5), Err(EngineError::Poisoned { .. })), "refused though the medium works again");
        drop(numbering);
        let reopened = swapped(&provider, &[(4, 5)]);
        assert_eq!((reopened.home(0), reopened.home(4)), (1, 5));
    }

    #[test]
    fn a_slot_with_a_valid_checksum_but_no_permutation_is_not_valid() {
        let mut homes = identity();
        homes[1] = 0;
        let mut bytes = encode_slot(1, &identity());
        bytes[HOMES_OFFSET..CHECKSUM_OFFSET].copy_from_slice(&homes);
        let checksum = crc32c(&bytes[..CHECKSUM_OFFSET]);
        bytes[CHECKSUM_OFFSET..SLOT_USED_BYTES].copy_from_slice(&checksum.to_le_bytes());
        assert_eq!(decode_slot(&bytes), None);
        assert_eq!(decode_slot(&encode_slot(7, &identity())), Some((7, identity())));
    }
}
