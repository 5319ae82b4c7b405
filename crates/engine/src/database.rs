//! A database: the namespaces of one configuration, opened and recovered together, with a lock
//! on the data directory so that two processes never share media.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::sync::Arc;

use hybridkv_media::{FsProvider, MediaProvider};

use crate::config::Config;
use crate::error::{EngineError, Result};
use crate::namespace::Namespace;
use crate::recovery::RestartReport;

pub struct Database {
    namespaces: Vec<Arc<Namespace>>,
    reports: Vec<RestartReport>,
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

    /// Opens with any media provider (the simulated one in tests).
    pub fn open_with(config: Config, provider: Arc<dyn MediaProvider>) -> Result<Database> {
        config.validate()?;
        let mut namespaces = Vec::with_capacity(config.namespaces.len());
        let mut reports = Vec::with_capacity(config.namespaces.len());
        for namespace_config in config.namespaces {
            let (namespace, report) = Namespace::open(namespace_config, provider.clone())?;
            namespace.start_committers();
            if config.background_maintenance {
                namespace.start_maintenance();
            }
            namespaces.push(namespace);
            reports.push(report);
        }
        Ok(Database { namespaces, reports, _directory_lock: None })
    }

    pub fn namespaces(&self) -> &[Arc<Namespace>] {
        &self.namespaces
    }

    pub fn namespace(&self, number: usize) -> Option<&Arc<Namespace>> {
        self.namespaces.get(number)
    }

    pub fn restart_reports(&self) -> Vec<RestartReport> {
        self.reports.clone()
    }

    /// Everything written so far made durable, and every index checkpointed.
    pub fn checkpoint(&self) -> Result<()> {
        self.namespaces.iter().try_for_each(|namespace| namespace.checkpoint(false))
    }

    /// One round of background work for every namespace, on the caller's thread (for
    /// deterministic tests that run without background threads).
    pub fn run_maintenance_once(&self) -> Result<()> {
        self.namespaces.iter().try_for_each(|namespace| namespace.maintain_once())
    }

    /// Empties every namespace's record cache (a COLD start without restarting).
    pub fn clear_caches(&self) {
        self.namespaces.iter().for_each(|namespace| namespace.clear_cache());
    }

    pub fn last_checkpoint_unix_ms(&self) -> u64 {
        self.namespaces.iter().map(|namespace| namespace.stats().last_checkpoint_unix_ms).min().unwrap_or(0)
    }

    /// Clean shutdown: durable, checkpointed and marked clean, so the next start is warm.
    pub fn close(self) -> Result<()> {
        self.namespaces.iter().try_for_each(|namespace| namespace.close())
    }
}

impl Drop for Database {
    /// Without `close`, nothing is marked clean: the next start recovers as after a crash.
    fn drop(&mut self) {
        for namespace in &self.namespaces {
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
