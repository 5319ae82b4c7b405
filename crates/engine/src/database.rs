//! A database: the namespaces of one configuration, opened and recovered together, with a lock
//! on the data directory so that two processes never share media. Database numbers past the
//! configured namespaces open on demand, with the first namespace's placement. Which namespace
//! serves which number is the `numbering` (SWAPDB exchanges two).

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::sync::{Arc, OnceLock};

use hybridkv_media::{FsProvider, MediaProvider};
use parking_lot::Mutex;

use crate::config::{on_demand_number_of, Config, NAMESPACES_MAX};
use crate::error::{EngineError, Result};
use crate::namespace::Namespace;
use crate::numbering::Numbering;
use crate::recovery::RestartReport;

pub struct Database {
    /// One slot per home (the number a namespace was created for, `numbering`); a slot is
    /// empty until its namespace is opened (configured namespaces at once, on-demand ones when
    /// first selected or found on the media at start).
    namespaces: Vec<OnceLock<Arc<Namespace>>>,
    numbering: Numbering,
    reports: Mutex<Vec<RestartReport>>,
    /// Serializes opening on demand and swaps, so that one home's media are opened once and
    /// a swap never races an open of the numbers it exchanges.
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

    /// Opens with any media provider (the simulated one in tests). The namespaces that serve
    /// a database number are opened and recovered: the configured ones, and on-demand ones whose
    /// media exist (selected before), so that their keys count, list and flush from the start.
    pub fn open_with(config: Config, provider: Arc<dyn MediaProvider>) -> Result<Database> {
        config.validate()?;
        let database = Database {
            namespaces: (0..NAMESPACES_MAX).map(|_| OnceLock::new()).collect(),
            numbering: Numbering::open(provider.as_ref())?,
            reports: Mutex::new(Vec::with_capacity(config.namespaces.len())),
            opening: Mutex::new(()),
            config,
            provider,
            _directory_lock: None,
        };
        let mut left = database.on_demand_homes_with_media()?;
        left.extend(0..database.config.namespaces.len());
        for number in 0..database.config.databases {
            let home = database.numbering.home(number);
            if left.remove(&home) {
                database.open_home(home)?;
            }
        }
        for home in left {
            // A start with fewer databases than before: the media stay as they are.
            tracing::warn!(database = home, databases = database.config.databases, "media of the namespace created for this database are left unopened: it serves a number past the last one (after SWAPDB, maybe another than its own), so its keys are out of reach until databases is raised");
        }
        Ok(database)
    }

    /// The homes of on-demand namespaces that left media behind (selected before): files named
    /// `db<n>.…` on the tiers of database 0's placement, which they share, not those of a
    /// configured namespace that happens to be named so.
    fn on_demand_homes_with_media(&self) -> Result<BTreeSet<usize>> {
        let first = &self.config.namespaces[0];
        let configured = |name: &str| self.config.namespaces.iter().any(|namespace| name.split_once('.').is_some_and(|(owner, _)| owner == namespace.name));
        let mut homes = BTreeSet::new();
        for tier in [first.index, first.data, first.journal] {
            let names = self.provider.list("db", tier)?;
            homes.extend(names.iter().filter(|name| !configured(name)).filter_map(|name| on_demand_number_of(name)));
        }
        homes.retain(|home| (self.config.namespaces.len()..NAMESPACES_MAX).contains(home));
        Ok(homes)
    }

    /// Database numbers SELECT takes (`Config::databases`).
    pub fn database_count(&self) -> usize {
        self.config.databases
    }

    /// The home of the namespace serving database `number`: an identity of that namespace
    /// below `NAMESPACES_MAX` that stays when SWAPDB moves it to another number.
    pub fn home(&self, number: usize) -> usize {
        assert!(number < self.database_count(), "database {number}");
        self.numbering.home(number)
    }

    /// The database number the namespace of `home` serves now (SWAPDB changes it).
    pub fn number_of_home(&self, home: usize) -> Option<usize> {
        (0..self.database_count()).find(|&number| self.numbering.home(number) == home)
    }

    /// The opened namespaces with their database numbers, in order.
    pub fn namespaces(&self) -> impl Iterator<Item = (usize, &Arc<Namespace>)> {
        (0..self.database_count()).filter_map(|number| Some((number, self.namespace(number)?)))
    }

    /// Database `number`'s namespace when it is open.
    pub fn namespace(&self, number: usize) -> Option<&Arc<Namespace>> {
        Some(self.namespace_and_home(number)?.1)
    }

    /// Database `number`'s home and namespace (when open), read together: a SWAPDB that runs
    /// meanwhile cannot pair one namespace with another's home.
    pub fn namespace_and_home(&self, number: usize) -> Option<(usize, &Arc<Namespace>)> {
        let home = (number < self.database_count()).then(|| self.numbering.home(number))?;
        Some((home, self.namespaces[home].get()?))
    }

    /// Database `number`'s namespace, opened (created when new) if it is not yet. Errors for a
    /// number past `database_count` or media that cannot be opened; a failed open leaves the
    /// number unopened, to be tried again.
    pub fn open_namespace(&self, number: usize) -> Result<&Arc<Namespace>> {
        if number >= self.database_count() {
            return Err(EngineError::Config(format!("database {number} is past the last one ({})", self.database_count() - 1)));
        }
        if let Some(namespace) = self.namespace(number) {
            return Ok(namespace);
        }
        let _opening = self.opening.lock();
        self.open_home(self.numbering.home(number))
    }

    /// The namespace created for `home`, opened if it is not yet. Callers hold `opening`, or
    /// are `open_with`, before anyone else can.
    fn open_home(&self, home: usize) -> Result<&Arc<Namespace>> {
        let slot = &self.namespaces[home];
        if let Some(namespace) = slot.get() {
            return Ok(namespace);
        }
        let config = match self.config.namespaces.get(home) {
            Some(configured) => configured.clone(),
            None => self.config.on_demand_namespace(home)?,
        };
        let (namespace, report) = Namespace::open(config, self.provider.clone())?;
        namespace.start_committers();
        if self.config.background_maintenance {
            namespace.start_maintenance();
        }
        self.reports.lock().push(report);
        assert!(slot.set(namespace).is_ok(), "home {home} opened twice");
        Ok(slot.get().expect("just set"))
    }

    /// SWAPDB: database `first` is served by `second`'s namespace and the other way round,
    /// for every session at once and after every restart (durable before it returns). Both
    /// namespaces are opened first; a number swapped with itself is left as it is, unopened if
    /// it was. A command that already found its namespace finishes there.
    pub fn swap(&self, first: usize, second: usize) -> Result<()> {
        if first == second && first < self.database_count() {
            return Ok(());
        }
        for number in [first, second] {
            self.open_namespace(number)?;
        }
        let _opening = self.opening.lock();
        self.numbering.swap(self.provider.as_ref(), first, second)
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
