//! A database: the namespaces of one configuration, opened and recovered together, with a lock
//! on the data directory so that two processes never share media. Database numbers past the
//! configured namespaces open on demand, with the first namespace's placement.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::sync::{Arc, OnceLock};

use hybridkv_media::{FsProvider, MediaProvider};
use parking_lot::Mutex;

use crate::config::{on_demand_number_of, Config};
use crate::error::{EngineError, Result};
use crate::namespace::Namespace;
use crate::recovery::RestartReport;

pub struct Database {
    /// One slot per database number; a slot is empty until its namespace is opened (configured
    /// namespaces at once, on-demand ones when first selected or found on the media at start).
    namespaces: Vec<OnceLock<Arc<Namespace>>>,
    reports: Mutex<Vec<RestartReport>>,
    /// Serializes opening on demand, so that one number's media are opened once.
    opening: Mutex<()>,
    config: Config,
    provider: Arc<dyn MediaProvider>,
    _directory_lock: Option<File>,
}

impl Database {
    /// Opens (creating when new) and recovers every namespace of `config` on the filesystem.
    pub fn open(config: Config) -> Result<Database> {
        config.validate()?;
        let provider = FsProvider::new(&config.data_dir, &config.shmem_dir, config.direct_io)?;
        let lock = lock_directory(&config)?;
        let mut database = Database::open_with(config, Arc::new(provider))?;
        database._directory_lock = Some(lock);
        Ok(database)
    }

    /// Opens with any media provider (the simulated one in tests). On-demand databases whose
    /// media exist (selected before) are opened and recovered too, so that their
    /// keys count, list and flush from the start.
    pub fn open_with(config: Config, provider: Arc<dyn MediaProvider>) -> Result<Database> {
        config.validate()?;
        let database = Database {
            namespaces: (0..config.databases).map(|_| OnceLock::new()).collect(),
            reports: Mutex::new(Vec::with_capacity(config.namespaces.len())),
            opening: Mutex::new(()),
            config,
            provider,
            _directory_lock: None,
        };
        for number in 0..database.config.namespaces.len() {
            database.open_namespace(number)?;
        }
        for number in database.on_demand_numbers_with_media()? {
            if number < database.config.databases {
                database.open_namespace(number)?;
            } else {
                // A start with fewer databases than before: the media stay as they are.
                tracing::warn!(database = number, databases = database.config.databases, "media of a database past the last one are left unopened: its keys are out of reach until databases is raised");
            }
        }
        Ok(database)
    }

    /// The numbers of on-demand databases that left media behind (selected before): files named
    /// `db<n>.…` on the tiers of database 0's placement, which they share, not those of a
    /// configured namespace that happens to be named so.
    fn on_demand_numbers_with_media(&self) -> Result<BTreeSet<usize>> {
        let first = &self.config.namespaces[0];
        let configured = |name: &str| self.config.namespaces.iter().any(|namespace| name.split_once('.').is_some_and(|(owner, _)| owner == namespace.name));
        let mut numbers = BTreeSet::new();
        for tier in [first.index, first.data, first.journal] {
            let names = self.provider.list("db", tier)?;
            numbers.extend(names.iter().filter(|name| !configured(name)).filter_map(|name| on_demand_number_of(name)));
        }
        numbers.retain(|number| *number >= self.config.namespaces.len());
        Ok(numbers)
    }

    /// Database numbers SELECT takes (`Config::databases`).
    pub fn database_count(&self) -> usize {
        self.namespaces.len()
    }

    /// The opened namespaces with their database numbers, in order.
    pub fn namespaces(&self) -> impl Iterator<Item = (usize, &Arc<Namespace>)> {
        self.namespaces.iter().enumerate().filter_map(|(number, slot)| Some((number, slot.get()?)))
    }

    /// Database `number`'s namespace when it is open.
    pub fn namespace(&self, number: usize) -> Option<&Arc<Namespace>> {
        self.namespaces.get(number)?.get()
    }

    /// Database `number`'s namespace, opened (created when new) if it is not yet. Errors for a
    /// number past `database_count` or media that cannot be opened; a failed open leaves the
    /// number unopened, to be tried again.
    pub fn open_namespace(&self, number: usize) -> Result<&Arc<Namespace>> {
        let slot = self.namespaces.get(number).ok_or_else(|| {
            EngineError::Config(format!("database {number} is past the last one ({})", self.database_count() - 1))
        })?;
        if let Some(namespace) = slot.get() {
            return Ok(namespace);
        }
        let _opening = self.opening.lock();
        if let Some(namespace) = slot.get() {
            return Ok(namespace);
        }
        let config = match self.config.namespaces.get(number) {
            Some(configured) => configured.clone(),
            None => self.config.on_demand_namespace(number),
        };
        let (namespace, report) = Namespace::open(config, self.provider.clone())?;
        namespace.start_committers();
        if self.config.background_maintenance {
            namespace.start_maintenance();
        }
        self.reports.lock().push(report);
        assert!(slot.set(namespace).is_ok(), "database {number} opened twice");
        Ok(slot.get().expect("just set"))
    }

    /// The restart reports of the namespaces opened so far, in the order they were opened.
    pub fn restart_reports(&self) -> Vec<RestartReport> {
        self.reports.lock().clone()
    }

    /// Everything written so far made durable, and every index checkpointed.
    pub fn checkpoint(&self) -> Result<()> {
        self.namespaces().try_for_each(|(_, namespace)| namespace.checkpoint(false))
    }

    /// One round of background work for every namespace, on the caller's thread (for
    /// deterministic tests that run without background threads).
    pub fn run_maintenance_once(&self) -> Result<()> {
        self.namespaces().try_for_each(|(_, namespace)| namespace.maintain_once())
    }

    /// Sets the counters Redis's CONFIG RESETSTAT clears (hits, misses, expired keys) to zero in
    /// every namespace.
    pub fn reset_statistics(&self) {
        self.namespaces().for_each(|(_, namespace)| namespace.reset_statistics());
    }

    /// Empties every namespace's record cache (a COLD start without restarting).
    pub fn clear_caches(&self) {
        self.namespaces().for_each(|(_, namespace)| namespace.clear_cache());
    }

    pub fn last_checkpoint_unix_ms(&self) -> u64 {
        self.namespaces().map(|(_, namespace)| namespace.stats().last_checkpoint_unix_ms).min().unwrap_or(0)
    }

    /// Clean shutdown: durable, checkpointed and marked clean, so the next start is warm.
    pub fn close(self) -> Result<()> {
        self.namespaces().try_for_each(|(_, namespace)| namespace.close())
    }
}

impl Drop for Database {
    /// Without `close`, nothing is marked clean: the next start recovers as after a crash.
    fn drop(&mut self) {
        for (_, namespace) in self.namespaces() {
            namespace.stop_maintenance();
        }
    }
}

fn lock_directory(config: &Config) -> Result<File> {
    let path = config.data_dir.join("hybridkv.lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|error| EngineError::Config(format!("cannot open {}: {error}", path.display())))?;
    // SAFETY: flock on a descriptor this function owns; no memory is involved.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    if !locked {
        return Err(EngineError::Config(format!(
            "data directory {} is in use by another hybridkv process",
            config.data_dir.display()
        )));
    }
    Ok(file)
}
