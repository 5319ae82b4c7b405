//! Opening named media on a tier: the real filesystem provider and (in `sim`) the simulated one.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::{BlockFile, MediaError, Medium, MmapRegion, Tier};

pub struct OpenedMedium {
    pub medium: Arc<dyn Medium>,
    /// False when the medium was created by this call (or is anonymous memory).
    pub existed: bool,
}

/// Opens, lists and removes the named media of one database.
pub trait MediaProvider: Send + Sync {
    /// Opens `name` on `tier`, creating it (zeroed, `len_bytes` long) when it does not exist.
    fn open(&self, name: &str, tier: Tier, len_bytes: u64) -> Result<OpenedMedium, MediaError>;
    fn remove(&self, name: &str, tier: Tier) -> Result<(), MediaError>;
    /// Names on `tier` starting with `prefix`, sorted.
    fn list(&self, prefix: &str, tier: Tier) -> Result<Vec<String>, MediaError>;
    /// Makes creations and removals of names on `tier` durable.
    fn sync_names(&self, tier: Tier) -> Result<(), MediaError>;
    /// Identifies the current boot of the machine: it changes when power is lost or the machine
    /// restarts, not when only the process does. Region stores of one boot that were not made
    /// durable are all still there in the same boot (the page cache and mappings outlive a
    /// process); across boots they may have been lost or torn.
    fn boot_id(&self) -> u64;
}

/// Media as files: pmem and ssd under `data_dir`, shmem under `shmem_dir` (a tmpfs).
pub struct FsProvider {
    data_dir: PathBuf,
    shmem_dir: PathBuf,
    prefer_direct_io: bool,
}

impl FsProvider {
    pub fn new(data_dir: &Path, shmem_dir: &Path, prefer_direct_io: bool) -> Result<FsProvider, MediaError> {
        for dir in [data_dir, shmem_dir] {
            fs::create_dir_all(dir).map_err(|error| MediaError::from_io(dir.display().to_string(), error))?;
        }
        Ok(FsProvider {
            data_dir: data_dir.to_path_buf(),
            shmem_dir: shmem_dir.to_path_buf(),
            prefer_direct_io,
        })
    }

    fn dir_of(&self, tier: Tier) -> &Path {
        match tier {
            Tier::Shmem => &self.shmem_dir,
            _ => &self.data_dir,
        }
    }

    fn path_of(&self, name: &str, tier: Tier) -> PathBuf {
        assert!(!name.contains('/') && !name.is_empty(), "media names are plain file names: {name:?}");
        self.dir_of(tier).join(name)
    }
}

impl MediaProvider for FsProvider {
    fn open(&self, name: &str, tier: Tier, len_bytes: u64) -> Result<OpenedMedium, MediaError> {
        if tier == Tier::Dram {
            let medium: Arc<dyn Medium> = Arc::new(MmapRegion::anonymous(len_bytes)?);
            return Ok(OpenedMedium { medium, existed: false });
        }
        let path = self.path_of(name, tier);
        let existed = path.exists();
        let medium: Arc<dyn Medium> = match tier {
            Tier::Ssd => Arc::new(BlockFile::open(&path, len_bytes, self.prefer_direct_io)?),
            _ => Arc::new(MmapRegion::file(&path, tier, len_bytes)?),
        };
        Ok(OpenedMedium { medium, existed })
    }

    fn remove(&self, name: &str, tier: Tier) -> Result<(), MediaError> {
        if tier == Tier::Dram {
            return Ok(());
        }
        let path = self.path_of(name, tier);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(MediaError::from_io(path.display().to_string(), error)),
        }
    }

    fn list(&self, prefix: &str, tier: Tier) -> Result<Vec<String>, MediaError> {
        if tier == Tier::Dram {
            return Ok(Vec::new());
        }
        let dir = self.dir_of(tier);
        let entries = fs::read_dir(dir).map_err(|error| MediaError::from_io(dir.display().to_string(), error))?;
        let mut names: Vec<String> = entries
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter(|name| name.starts_with(prefix))
            .collect();
        names.sort();
        Ok(names)
    }

    fn sync_names(&self, tier: Tier) -> Result<(), MediaError> {
        if tier == Tier::Dram {
            return Ok(());
        }
        let dir = self.dir_of(tier);
        let handle = fs::File::open(dir).map_err(|error| MediaError::from_io(dir.display().to_string(), error))?;
        handle.sync_all().map_err(|error| MediaError::from_io(dir.display().to_string(), error))
    }

    /// A hash of the kernel's boot id.
    fn boot_id(&self) -> u64 {
        let text = fs::read_to_string(BOOT_ID_PATH).unwrap_or_default();
        xxhash_rust::xxh3::xxh3_64(text.trim().as_bytes())
    }
}

/// The kernel's random identifier of the current boot.
const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";
