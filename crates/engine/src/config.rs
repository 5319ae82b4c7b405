//! Database configuration: a TOML file with one `[[namespace]]` table per namespace, validated at
//! start with messages that name the namespace and the field.
//!
//! ```toml
//! data_dir = "./hybridkv-data"          # pmem and ssd files
//! shmem_dir = "/dev/shm/hybridkv"       # shmem files (default: derived from data_dir)
//! databases = 16                        # numbers SELECT takes (default: 16, or more namespaces)
//!
//! [[namespace]]
//! name = "default"
//! index = "pmem"            # dram | shmem | pmem
//! data = "ssd"              # dram | pmem | ssd
//! journal = "ssd"           # pmem | ssd, used when data = "dram"
//! durability = "always"     # always | periodic | none
//! periodic_ms = 1000
//! index_bytes = "1GiB"
//! data_bytes = "4GiB"
//! write_block_bytes = "8MiB"
//! cache_bytes = "256MiB"    # DRAM record cache for data on ssd or (DAX) pmem
//! ```

use std::path::{Path, PathBuf};

use hybridkv_media::Tier;
use serde::Deserialize;

use crate::error::{EngineError, Result};

pub const KIB: u64 = 1024;
pub const MIB: u64 = 1024 * KIB;
pub const GIB: u64 = 1024 * MIB;

/// Namespaces per database; SELECT takes numbers below this.
pub const NAMESPACES_MAX: usize = 64;
/// Database numbers when the configuration does not say, as in Redis (`databases 16`).
pub const DATABASES_DEFAULT: usize = 16;
pub const WRITE_BLOCK_BYTES_MIN: u64 = 64 * KIB;
pub const WRITE_BLOCK_BYTES_MAX: u64 = GIB;
pub const INDEX_BYTES_MIN: u64 = 4 * MIB;
pub const JOURNAL_SEGMENT_BYTES_MIN: u64 = 256 * KIB;
/// Largest key a record can carry (its length field is 16 bits).
pub const KEY_BYTES_MAX: usize = 16 * 1024;
pub const PERIODIC_MS_MAX: u64 = 60_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// A write is acknowledged once its bytes are durable; concurrent writers share one flush.
    Always,
    /// Durable within `periodic_ms`.
    Periodic,
    /// Left to the operating system.
    None,
}

impl Durability {
    pub fn parse(text: &str) -> Option<Durability> {
        match text {
            "always" => Some(Durability::Always),
            "periodic" => Some(Durability::Periodic),
            "none" => Some(Durability::None),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Durability::Always => "always",
            Durability::Periodic => "periodic",
            Durability::None => "none",
        }
    }
}

#[derive(Clone, Debug)]
pub struct NamespaceConfig {
    pub name: String,
    pub index: Tier,
    pub data: Tier,
    pub journal: Tier,
    pub durability: Durability,
    pub periodic_ms: u64,
    pub index_bytes: u64,
    pub data_bytes: u64,
    pub write_block_bytes: u64,
    pub journal_segment_bytes: u64,
    /// Log bytes written after which a checkpoint is taken, bounding replay at restart.
    pub checkpoint_interval_bytes: u64,
    /// Records written after which a checkpoint is taken (whichever of the two comes first):
    /// replay after a crash costs about one index insertion per record, so small records are
    /// bounded by their count, large ones by their bytes.
    pub checkpoint_interval_records: u64,
    /// A sealed write block whose live bytes fall under this percentage is defragmented.
    pub defrag_low_water_percent: u8,
    /// Largest value accepted; at most a write block minus record overhead.
    pub value_bytes_max: u64,
    /// DRAM record cache in front of records on ssd or pmem (0: none). Records in DRAM need none,
    /// nor do records on pmem on the msync fallback (they are read from the page cache).
    pub cache_bytes: u64,
}

impl NamespaceConfig {
    /// The embedded default: index in pmem, data on ssd, durability always.
    pub fn new(name: &str) -> NamespaceConfig {
        NamespaceConfig {
            name: name.to_string(),
            index: Tier::Pmem,
            data: Tier::Ssd,
            journal: Tier::Ssd,
            durability: Durability::Always,
            periodic_ms: 1000,
            index_bytes: GIB,
            data_bytes: 4 * GIB,
            write_block_bytes: 8 * MIB,
            journal_segment_bytes: 64 * MIB,
            checkpoint_interval_bytes: GIB,
            checkpoint_interval_records: 1_000_000,
            defrag_low_water_percent: 50,
            value_bytes_max: 4 * MIB,
            cache_bytes: 256 * MIB,
        }
    }

    pub fn validate(&self) -> Result<()> {
        let fail = |message: String| Err(EngineError::Config(format!("namespace '{}': {message}", self.name)));
        if self.name.is_empty() || !self.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            return fail("name must be non-empty letters, digits, '_' or '-'".into());
        }
        if self.index == Tier::Ssd {
            return fail("index must be dram, shmem or pmem (an index is byte-addressable)".into());
        }
        if self.data == Tier::Shmem {
            return fail("data must be dram, pmem or ssd".into());
        }
        if !matches!(self.journal, Tier::Pmem | Tier::Ssd) {
            return fail("journal must be pmem or ssd".into());
        }
        if !self.write_block_bytes.is_power_of_two()
            || !(WRITE_BLOCK_BYTES_MIN..=WRITE_BLOCK_BYTES_MAX).contains(&self.write_block_bytes)
        {
            return fail(format!(
                "write_block_bytes must be a power of two between {WRITE_BLOCK_BYTES_MIN} and {WRITE_BLOCK_BYTES_MAX}"
            ));
        }
        if self.data_bytes < 4 * self.write_block_bytes {
            return fail("data_bytes must hold at least 4 write blocks".into());
        }
        if self.data_bytes / self.write_block_bytes > u32::MAX as u64 / 2 {
            return fail("data_bytes / write_block_bytes is too many blocks".into());
        }
        if self.index_bytes < INDEX_BYTES_MIN {
            return fail(format!("index_bytes must be at least {INDEX_BYTES_MIN}"));
        }
        if self.journal_segment_bytes < JOURNAL_SEGMENT_BYTES_MIN || !self.journal_segment_bytes.is_multiple_of(4096) {
            return fail(format!("journal_segment_bytes must be a multiple of 4096, at least {JOURNAL_SEGMENT_BYTES_MIN}"));
        }
        if self.periodic_ms == 0 || self.periodic_ms > PERIODIC_MS_MAX {
            return fail(format!("periodic_ms must be between 1 and {PERIODIC_MS_MAX}"));
        }
        if !(1..=95).contains(&self.defrag_low_water_percent) {
            return fail("defrag_low_water_percent must be between 1 and 95".into());
        }
        if self.value_bytes_max == 0 || self.value_bytes_max > self.write_block_bytes / 2 {
            return fail("value_bytes_max must be between 1 and half a write block".into());
        }
        if self.checkpoint_interval_bytes < self.write_block_bytes {
            return fail("checkpoint_interval_bytes must be at least one write block".into());
        }
        if self.checkpoint_interval_records == 0 {
            return fail("checkpoint_interval_records must be at least 1".into());
        }
        Ok(())
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    pub data_dir: PathBuf,
    pub shmem_dir: PathBuf,
    /// O_DIRECT on ssd files (buffered I/O where the filesystem refuses it), so that the record
    /// cache budget, not the page cache, bounds the DRAM that records use.
    pub direct_io: bool,
    /// Run each namespace's background thread (flushes, checkpoints, defragmentation, expiry).
    /// Deterministic tests turn it off and call `Database::run_maintenance_once` instead.
    pub background_maintenance: bool,
    /// The configured namespaces, database numbers 0, 1, … in order.
    pub namespaces: Vec<NamespaceConfig>,
    /// Database numbers SELECT takes: the configured namespaces, then numbers whose namespace is
    /// opened on demand (`Config::on_demand_namespace`), at most `NAMESPACES_MAX`.
    pub databases: usize,
}

impl Config {
    /// One namespace, "default", with the embedded default placement, in `data_dir`.
    pub fn single(data_dir: &Path) -> Config {
        Config {
            data_dir: data_dir.to_path_buf(),
            shmem_dir: default_shmem_dir(data_dir),
            direct_io: true,
            background_maintenance: true,
            namespaces: vec![NamespaceConfig::new("default")],
            databases: DATABASES_DEFAULT,
        }
    }

    pub fn from_file(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| EngineError::Config(format!("cannot read {}: {error}", path.display())))?;
        Config::from_toml(&text)
    }

    pub fn from_toml(text: &str) -> Result<Config> {
        let file: FileConfig = toml::from_str(text).map_err(|error| EngineError::Config(error.to_string()))?;
        let data_dir = file.data_dir.unwrap_or_else(|| PathBuf::from("./hybridkv-data"));
        let shmem_dir = file.shmem_dir.unwrap_or_else(|| default_shmem_dir(&data_dir));
        let mut namespaces = Vec::new();
        for (position, table) in file.namespace.into_iter().enumerate() {
            namespaces.push(table.resolve(position)?);
        }
        if namespaces.is_empty() {
            namespaces.push(NamespaceConfig::new("default"));
        }
        let config = Config {
            data_dir,
            shmem_dir,
            direct_io: file.direct_io.unwrap_or(true),
            background_maintenance: true,
            databases: file.databases.unwrap_or(DATABASES_DEFAULT.max(namespaces.len())),
            namespaces,
        };
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<()> {
        if self.namespaces.is_empty() || self.namespaces.len() > NAMESPACES_MAX {
            return Err(EngineError::Config(format!("between 1 and {NAMESPACES_MAX} namespaces are needed")));
        }
        for (position, namespace) in self.namespaces.iter().enumerate() {
            namespace.validate()?;
            if self.namespaces[..position].iter().any(|other| other.name == namespace.name) {
                return Err(EngineError::Config(format!("namespace name '{}' appears twice", namespace.name)));
            }
        }
        if self.databases < self.namespaces.len() || self.databases > NAMESPACES_MAX {
            return Err(EngineError::Config(format!(
                "databases = {}: expected between the number of namespaces ({}) and {NAMESPACES_MAX}",
                self.databases,
                self.namespaces.len()
            )));
        }
        let on_demand_names: Vec<String> = (self.namespaces.len()..self.databases).map(on_demand_name).collect();
        if let Some(clash) = self.namespaces.iter().find(|namespace| on_demand_names.contains(&namespace.name)) {
            return Err(EngineError::Config(format!(
                "namespace name '{}' is the name of an on-demand database (databases = {}): choose another",
                clash.name, self.databases
            )));
        }
        Ok(())
    }

    /// The namespace created for database `home` past the configured ones: the first
    /// namespace's placement, sizes and durability under the name `db<home>`. `home` may be
    /// past `databases` when SWAPDB gave a lower number that namespace before the count fell;
    /// then its name is checked against the configured ones here.
    pub fn on_demand_namespace(&self, home: usize) -> Result<NamespaceConfig> {
        assert!(home >= self.namespaces.len() && home < NAMESPACES_MAX, "database {home} is not on demand");
        let name = on_demand_name(home);
        if self.namespaces.iter().any(|namespace| namespace.name == name) {
            return Err(EngineError::Config(format!("namespace name '{name}' is the name of the on-demand namespace serving a database: choose another")));
        }
        Ok(NamespaceConfig { name, ..self.namespaces[0].clone() })
    }
}

fn on_demand_name(number: usize) -> String {
    format!("db{number}")
}

/// The database number of a medium named `db<number>.<suffix>`, as on-demand databases name theirs.
pub(crate) fn on_demand_number_of(medium_name: &str) -> Option<usize> {
    let (namespace, _) = medium_name.split_once('.')?;
    let number = namespace.strip_prefix("db")?.parse().ok()?;
    (on_demand_name(number) == namespace).then_some(number)
}

/// Shared-memory files live under /dev/shm, in a folder named after the data directory so that two
/// databases on one machine never share an index.
pub fn default_shmem_dir(data_dir: &Path) -> PathBuf {
    let absolute = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let digest = xxhash_rust::xxh3::xxh3_64(absolute.to_string_lossy().as_bytes());
    PathBuf::from(format!("/dev/shm/hybridkv-{digest:016x}"))
}

/// Parses "4096", "64KiB", "8MiB", "1GiB", "2TiB" (also KB/MB/GB as powers of 1024).
pub fn parse_size_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let number: u64 = digits.parse().ok()?;
    let multiplier = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => KIB,
        "m" | "mb" | "mib" => MIB,
        "g" | "gb" | "gib" => GIB,
        "t" | "tb" | "tib" => 1024 * GIB,
        _ => return None,
    };
    number.checked_mul(multiplier)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    data_dir: Option<PathBuf>,
    shmem_dir: Option<PathBuf>,
    direct_io: Option<bool>,
    databases: Option<usize>,
    #[serde(default)]
    namespace: Vec<FileNamespace>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Size {
    Bytes(u64),
    Text(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileNamespace {
    name: Option<String>,
    index: Option<String>,
    data: Option<String>,
    journal: Option<String>,
    durability: Option<String>,
    periodic_ms: Option<u64>,
    index_bytes: Option<Size>,
    data_bytes: Option<Size>,
    write_block_bytes: Option<Size>,
    journal_segment_bytes: Option<Size>,
    checkpoint_interval_bytes: Option<Size>,
    checkpoint_interval_records: Option<u64>,
    defrag_low_water_percent: Option<u8>,
    value_bytes_max: Option<Size>,
    cache_bytes: Option<Size>,
}

impl FileNamespace {
    fn resolve(self, position: usize) -> Result<NamespaceConfig> {
        let name = self.name.unwrap_or_else(|| if position == 0 { "default".into() } else { format!("ns{position}") });
        let mut config = NamespaceConfig::new(&name);
        let fail = |field: &str, value: &str, expected: &str| {
            EngineError::Config(format!("namespace '{name}': {field} = {value:?}: expected {expected}"))
        };
        let tier = |field: &str, value: Option<String>, default: Tier| -> Result<Tier> {
            match value {
                None => Ok(default),
                Some(text) => Tier::parse(&text).ok_or_else(|| fail(field, &text, "dram, shmem, pmem or ssd")),
            }
        };
        config.index = tier("index", self.index, config.index)?;
        config.data = tier("data", self.data, config.data)?;
        config.journal = tier("journal", self.journal, config.journal)?;
        if let Some(text) = self.durability {
            config.durability =
                Durability::parse(&text).ok_or_else(|| fail("durability", &text, "always, periodic or none"))?;
        }
        let size = |field: &str, value: Option<Size>, default: u64| -> Result<u64> {
            match value {
                None => Ok(default),
                Some(Size::Bytes(bytes)) => Ok(bytes),
                Some(Size::Text(text)) => {
                    parse_size_bytes(&text).ok_or_else(|| fail(field, &text, "a size such as 4096, 64KiB, 8MiB or 1GiB"))
                }
            }
        };
        config.index_bytes = size("index_bytes", self.index_bytes, config.index_bytes)?;
        config.data_bytes = size("data_bytes", self.data_bytes, config.data_bytes)?;
        config.write_block_bytes = size("write_block_bytes", self.write_block_bytes, config.write_block_bytes)?;
        config.journal_segment_bytes =
            size("journal_segment_bytes", self.journal_segment_bytes, config.journal_segment_bytes)?;
        config.checkpoint_interval_bytes =
            size("checkpoint_interval_bytes", self.checkpoint_interval_bytes, config.checkpoint_interval_bytes)?;
        let value_default = config.value_bytes_max.min(config.write_block_bytes / 2);
        config.value_bytes_max = size("value_bytes_max", self.value_bytes_max, value_default)?;
        config.cache_bytes = size("cache_bytes", self.cache_bytes, config.cache_bytes)?;
        config.periodic_ms = self.periodic_ms.unwrap_or(config.periodic_ms);
        config.checkpoint_interval_records = self.checkpoint_interval_records.unwrap_or(config.checkpoint_interval_records);
        config.defrag_low_water_percent = self.defrag_low_water_percent.unwrap_or(config.defrag_low_water_percent);
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size_bytes("4096"), Some(4096));
        assert_eq!(parse_size_bytes("64KiB"), Some(64 * KIB));
        assert_eq!(parse_size_bytes("8MiB"), Some(8 * MIB));
        assert_eq!(parse_size_bytes("1 GiB"), Some(GIB));
        assert_eq!(parse_size_bytes("1XB"), None);
        assert_eq!(parse_size_bytes("99999999999999GiB"), None);
    }

    #[test]
    fn a_full_file_parses_and_validates() {
        let config = Config::from_toml(
            r#"
            data_dir = "/tmp/x"
            [[namespace]]
            name = "hot"
            index = "shmem"
            data = "dram"
            journal = "pmem"
            durability = "periodic"
            periodic_ms = 50
            data_bytes = "64MiB"
            write_block_bytes = "1MiB"
            checkpoint_interval_records = 50000
            [[namespace]]
            data = "pmem"
            "#,
        )
        .unwrap();
        assert_eq!(config.namespaces.len(), 2);
        assert_eq!(config.namespaces[0].index, Tier::Shmem);
        assert_eq!(config.namespaces[0].durability, Durability::Periodic);
        assert_eq!(config.namespaces[0].checkpoint_interval_records, 50_000);
        assert_eq!(config.namespaces[1].name, "ns1");
    }

    #[test]
    fn bad_values_name_the_namespace_and_field() {
        let error = Config::from_toml("[[namespace]]\nname = \"a\"\nindex = \"ssd\"").unwrap_err().to_string();
        assert!(error.contains("namespace 'a'") && error.contains("index"), "{error}");
        let error = Config::from_toml("[[namespace]]\ndata = \"tape\"").unwrap_err().to_string();
        assert!(error.contains("data = \"tape\""), "{error}");
        let error = Config::from_toml("[[namespace]]\nwrite_block_bytes = 1000").unwrap_err().to_string();
        assert!(error.contains("power of two"), "{error}");
        let error = Config::from_toml("[[namespace]]\ncheckpoint_interval_records = 0").unwrap_err().to_string();
        assert!(error.contains("checkpoint_interval_records"), "{error}");
        let error = Config::from_toml("bogus = 1").unwrap_err().to_string();
        assert!(error.contains("unknown field"), "{error}");
        let error = Config::from_toml("[[namespace]]\nname=\"a\"\n[[namespace]]\nname=\"a\"").unwrap_err().to_string();
        assert!(error.contains("twice"), "{error}");
    }

    #[test]
    fn databases_past_the_configured_namespaces_are_on_demand_copies_of_the_first() {
        let config = Config::from_toml("[[namespace]]\nname = \"a\"\ndurability = \"none\"\n[[namespace]]\n").unwrap();
        assert_eq!(config.databases, DATABASES_DEFAULT);
        let third = config.on_demand_namespace(2).unwrap();
        assert_eq!(third.name, "db2");
        assert_eq!(third.durability, Durability::None);
        assert_eq!(Config::from_toml("databases = 2\n[[namespace]]\n[[namespace]]\n").unwrap().databases, 2);
        assert_eq!(Config::single(Path::new("/tmp/x")).databases, DATABASES_DEFAULT);
    }

    #[test]
    fn databases_cover_the_namespaces_and_keep_their_names_free() {
        let error = Config::from_toml("databases = 1\n[[namespace]]\n[[namespace]]\n").unwrap_err().to_string();
        assert!(error.contains("databases = 1"), "{error}");
        let error = Config::from_toml(&format!("databases = {}", NAMESPACES_MAX + 1)).unwrap_err().to_string();
        assert!(error.contains("databases"), "{error}");
        let error = Config::from_toml("[[namespace]]\n[[namespace]]\nname = \"db5\"").unwrap_err().to_string();
        assert!(error.contains("'db5'") && error.contains("on-demand"), "{error}");
        assert!(Config::from_toml("databases = 2\n[[namespace]]\n[[namespace]]\nname = \"db5\"").is_ok());
    }

    #[test]
    fn media_names_give_back_the_number_of_their_on_demand_database() {
        assert_eq!(on_demand_number_of("db5.index"), Some(5));
        assert_eq!(on_demand_number_of("db12.journal.0000000000000001"), Some(12));
        for other in ["db05.index", "db+5.index", "dbx.data", "db5", "default.data", "ns5.data"] {
            assert_eq!(on_demand_number_of(other), None, "{other}");
        }
    }
}
